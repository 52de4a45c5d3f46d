"""ReadOptions: the nine read options defined once (issue 23), taken by read_fastx, FastxDataset, featurize_file,
precompute_reads and the CLI; the keywords keep working and mean the same."""

import dataclasses
import inspect

import pytest
import torch

from omnipos.app.cli import build_parser
from omnipos.app.featurize import featurize_file
from omnipos.app.read_arguments import read_options
from omnipos.dna import FastxDataset, ReadOptions, read_fastx
from omnipos.scale import load_reads, precompute_reads

NINE = ["ambiguity", "lowercase", "parser", "quality_offset", "quality_encoding", "rna", "max_len", "truncation",
        "token_dtype"]


@pytest.fixture
def reads(tmp_path):
    path = tmp_path / "r.fq"
    path.write_bytes(b"@a\nACGTRYacgt\n+\nIIIIIIIIII\n@b\nGATTACAnnU\n+\n##########\n@c\n\n+\n\n")
    return path


def test_the_nine_options_are_written_out_once():
    assert [f.name for f in dataclasses.fields(ReadOptions)] == NINE
    for function in (read_fastx, FastxDataset.__init__, featurize_file, precompute_reads):
        names = set(inspect.signature(function).parameters)
        assert not names & set(NINE), function.__qualname__
        assert "options" in names


def test_options_object_and_keywords_read_alike(reads, tmp_path):
    keywords = {"ambiguity": "to_n", "lowercase": "fold", "rna": "to_t", "max_len": 4, "truncation": "split",
                "token_dtype": torch.int64, "parser": "python"}
    options = ReadOptions(**keywords)
    a, b = next(read_fastx(reads, options)), next(read_fastx(reads, **keywords))
    assert a.names == b.names and torch.equal(a.tokens, b.tokens) and a.tokens.dtype == torch.int64
    assert torch.equal(a.offsets, b.offsets) and torch.equal(a.qualities, b.qualities)
    # a keyword replaces the field of the object it comes with
    c = next(read_fastx(reads, options, max_len=20))
    assert len(c) == 3 and c.tokens.shape[1] == 10
    assert [i["name"] for i in FastxDataset(reads, options)] == [i["name"] for i in FastxDataset(reads, **keywords)]
    f1 = featurize_file(reads, tmp_path / "a.pt", options, dim=4, progress=False)
    f2 = featurize_file(reads, tmp_path / "b.pt", dim=4, progress=False, **keywords)
    assert torch.equal(f1["tokens"], f2["tokens"]) and f1["config"] == {**f2["config"], "source": str(reads)}
    precompute_reads(reads, tmp_path / "job", options, dim=4, progress=False)
    job = load_reads(tmp_path / "job")
    assert torch.equal(job["tokens"], f1["tokens"]) and job["config"]["read_options"] == {
        "ambiguity": "to_n", "lowercase": "fold", "rna": "to_t", "max_len": 4, "truncation": "split",
        "token_dtype": "int64", "parser": "python"}


@pytest.mark.parametrize("kwargs, error, words", [
    ({"ambiguity": "guess"}, ValueError, "ambiguity"), ({"lowercase": "upper"}, ValueError, "lowercase"),
    ({"parser": "fast"}, ValueError, "parser"), ({"quality_offset": 40}, ValueError, "quality_offset"),
    ({"quality_offset": True}, TypeError, "quality_offset"), ({"quality_encoding": "illumina"}, ValueError,
                                                              "quality_encoding"),
    ({"quality_encoding": "solexa", "quality_offset": 33}, ValueError, "solexa' uses offset 64"),
    ({"rna": "drop"}, ValueError, "rna"), ({"max_len": 0}, ValueError, "max_len"),
    ({"max_len": 2.5}, TypeError, "max_len"), ({"truncation": "head"}, ValueError, "needs max_len"),
    ({"token_dtype": torch.float32}, TypeError, "token_dtype")])
def test_each_bad_option_refused_when_made(kwargs, error, words):
    with pytest.raises(error, match=words):
        ReadOptions(**kwargs)


def test_of_merges_and_refuses_unknown_names():
    base = ReadOptions(max_len=8, truncation="head")
    assert ReadOptions.of(base, max_len=3) == ReadOptions(max_len=3, truncation="head")
    assert ReadOptions.of(quality_encoding="solexa").offset == 64 and ReadOptions().offset == 33
    assert ReadOptions(quality_offset="auto").offset == "auto"
    with pytest.raises(TypeError, match="FastxDataset got an unknown read option 'colour'"):
        ReadOptions.of(None, "FastxDataset", colour="red")
    with pytest.raises(TypeError, match="options must be an omnipos.dna.ReadOptions, got dict"):
        ReadOptions.of({"max_len": 3})
    assert ReadOptions(rna="keep").changed() == {"rna": "keep"}


def test_cli_flags_make_one_read_options():
    args = build_parser().parse_args(["dna", "featurize", "a.fq", "-o", "x.pt", "--ambiguity", "to_n",
                                      "--quality-offset", "64", "--max-len", "5", "--truncation", "tail",
                                      "--token-dtype", "int32"])
    assert read_options(args) == ReadOptions(ambiguity="to_n", quality_offset=64, max_len=5, truncation="tail",
                                             token_dtype=torch.int32)
