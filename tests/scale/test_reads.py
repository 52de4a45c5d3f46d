"""precompute_reads / load_reads on the local engine (the Ray engine: test_ray.py)."""

import gzip

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from omnipos.app.featurize import featurize_file
from omnipos.dna import PAD, decode, rc_symmetric_encoding, read_fastx
from omnipos.scale import PrecomputeError, load_reads, precompute_reads


@pytest.fixture
def fastq_files(tmp_path, fastx):
    return [fastx(tmp_path / "a.fq", 130, 1), fastx(tmp_path / "b.fq.gz", 57, 2), fastx(tmp_path / "c.fq", 0, 3),
            fastx(tmp_path / "d.fastq.gz", 211, 4)]


def concatenated(files, target):
    """All the files' records in one plain file: what a single featurize call reads."""
    target.write_bytes(b"".join(gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()
                                for f in files))
    return target


def assert_same_features(got, expected):
    assert got["names"] == expected["names"]
    for key in ("tokens", "mask", "lengths", "qualities", "positional"):
        if expected.get(key) is None:
            assert got.get(key) is None, key
        else:
            assert got[key].dtype == expected[key].dtype and torch.equal(got[key], expected[key]), key


@pytest.mark.parametrize("shard_size, batch_size", [(50, 16), (1, 1000), (10_000, 7)])
def test_output_equals_featurize_of_all_reads(tmp_path, fastq_files, shard_size, batch_size):
    out = tmp_path / "out"
    result = precompute_reads(fastq_files, out, dim=6, strand_aware=True, shard_size=shard_size,
                              batch_size=batch_size, progress=False)
    assert result.items == 398 and result.units == 4
    expected = featurize_file(concatenated(fastq_files, tmp_path / "all.fq"), tmp_path / "all.pt", dim=6,
                              strand_aware=True, progress=False)
    got = load_reads(out)
    assert_same_features(got, expected)
    assert got["config"]["dim"] == 6 and got["config"]["strand_aware"] is True
    assert result.shards == sum(-(-n // shard_size) for n in (130, 57, 0, 211))


def test_columns_are_one_byte_per_base(tmp_path, fastq_files):
    precompute_reads(fastq_files[:1], tmp_path, shard_size=1000, progress=False)
    table = pq.read_table(tmp_path / "reads-00000-00000.parquet")
    assert table.column_names == ["name", "length", "record", "offset", "tokens", "qualities"]
    batch = next(read_fastx(fastq_files[0], batch_size=1000))
    assert table.column("name").to_pylist() == batch.names
    for i in (0, 7, 129):
        n = int(batch.lengths[i])
        assert table.column("tokens")[i].as_py() == bytes(batch.tokens[i, :n].tolist())
        assert table.column("qualities")[i].as_py() == bytes(batch.qualities[i, :n].tolist())


def test_fasta_and_options_pass_through(tmp_path, fastx):
    files = [fastx(tmp_path / "x.fa", 40, 5, fasta=True), fastx(tmp_path / "y.fa.gz", 9, 6, fasta=True)]
    precompute_reads(files, tmp_path / "out", dim=0, shard_size=16, ambiguity="to_n", lowercase="fold",
                     parser="python", progress=False)
    got = load_reads(tmp_path / "out")
    expected = featurize_file(concatenated(files, tmp_path / "all.fa"), tmp_path / "all.pt", dim=0,
                              ambiguity="to_n", lowercase="fold", parser="python", progress=False)
    assert_same_features(got, expected)
    assert got["qualities"] is None and "positional" not in got
    assert got["config"]["read_options"] == {"ambiguity": "to_n", "lowercase": "fold", "parser": "python"}
    assert all(set(s) <= set("ACGTN") for s in decode(got["tokens"], got["mask"]))


def test_positional_is_the_rc_symmetric_encoding_of_the_lengths(tmp_path, fastq_files):
    precompute_reads(fastq_files, tmp_path, dim=8, progress=False)
    got = load_reads(tmp_path)
    assert torch.equal(got["positional"], rc_symmetric_encoding(got["lengths"], 8))
    assert "positional" not in load_reads(tmp_path, positional=False)
    assert (got["tokens"][~got["mask"]] == PAD).all() and (got["qualities"][~got["mask"]] == 0).all()


def test_resume_and_progress(tmp_path, fastq_files):
    calls = []
    precompute_reads(fastq_files, tmp_path, shard_size=100, num_cpus=1,  # one worker: units finish in order
                     progress=lambda d, t: calls.append((d, t)))
    assert calls == [(130, None), (187, None), (187, None), (398, None)]
    again = precompute_reads(fastq_files, tmp_path, shard_size=100, progress=False)
    assert again.units_resumed == 4 and again.items_computed == 0 and again.items == 398


def test_malformed_and_truncated_files_fail_alone(tmp_path, fastq_files):
    bad = tmp_path / "bad.fq"
    bad.write_bytes(b"@r1\nACGT\n+\nIIII\n@r2\nACGT\n+\nIII\n")
    truncated = tmp_path / "truncated.fq.gz"
    whole = gzip.compress(b"".join(b"@t%d\nACGT\n+\nIIII\n" % i for i in range(3000)))
    truncated.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(PrecomputeError) as info:
        precompute_reads(fastq_files + [bad, truncated], tmp_path / "out", batch_size=100, progress=False)
    message = str(info.value)
    assert f"{bad}: record 2 ('r2'): the sequence has 4 letters but the quality has 3" in message
    assert f"{truncated}: record " in message and "damaged or truncated" in message
    result = info.value.result
    assert result.items == 398 and [s for s, _ in result.failures] == [str(bad), str(truncated)]
    assert not list((tmp_path / "out").glob("reads-0000[45]-*"))
    with pytest.raises(ValueError, match="unfinished"):
        load_reads(tmp_path / "out")


def test_bad_arguments(tmp_path, fastq_files):
    with pytest.raises(ValueError, match="shard_size must be >= 1"):
        precompute_reads(fastq_files, tmp_path, shard_size=0)
    with pytest.raises(FileNotFoundError, match="no such file"):
        precompute_reads([tmp_path / "missing.fq"], tmp_path)
    with pytest.raises(ValueError, match="no input files"):
        precompute_reads([], tmp_path)
    with pytest.raises(TypeError, match="unknown read option 'colour'"):
        precompute_reads(fastq_files, tmp_path, colour="red")
    with pytest.raises(ValueError, match="ambiguity must be one of"):
        precompute_reads(fastq_files, tmp_path, ambiguity="guess")
    with pytest.raises(ValueError, match="even"):
        precompute_reads(fastq_files, tmp_path, dim=5, strand_aware=True)
    with pytest.raises(ValueError, match="num_cpus must be >= 1, got 0"):
        precompute_reads(fastq_files, tmp_path, num_cpus=0)
    assert not (tmp_path / "manifest.jsonl").exists()  # refused before any work


def test_fasta_and_fastq_mixed_refused_before_any_work(tmp_path, fastx, fastq_files):
    fasta = fastx(tmp_path / "z.fa", 5, 9, fasta=True)  # they used to precompute, then fail to load
    with pytest.raises(ValueError, match="mix FASTA .* and FASTQ"):
        precompute_reads([fastq_files[0], fasta], tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_empty_input(tmp_path, fastx):
    empty = fastx(tmp_path / "e.fq", 0, 0)
    result = precompute_reads([empty], tmp_path / "out", progress=False)
    assert result.items == 0 and result.shards == 0
    got = load_reads(tmp_path / "out")
    assert got["names"] == [] and got["tokens"].shape == (0, 0) and got["positional"].shape == (0, 0, 16)
    assert np.asarray(got["lengths"]).shape == (0,)


@pytest.mark.parametrize("options", [
    {"rna": "keep", "max_len": 5, "truncation": "split", "quality_offset": "auto"},
    {"rna": "to_t", "max_len": 4, "truncation": "tail", "token_dtype": torch.int64},
])
def test_read_options_of_long_reads_and_rna_carry_through(tmp_path, options):
    """Rows split from long reads keep their record and offset, RNA flags and the quality offset used survive the
    shards: load_reads gives what featurize gives."""
    reads = tmp_path / "rna.fq"
    reads.write_text("@a\nACGUACGU\n+\nIIIIIIII\n@b\nACG\n+\n!!!\n@c\nAAAAAAAAAAAAA\n+\n" + "J" * 13 + "\n")
    precompute_reads(reads, tmp_path / "out", dim=4, shard_size=2, progress=False, **options)
    got = load_reads(tmp_path / "out")
    expected = featurize_file(reads, tmp_path / "all.pt", dim=4, progress=False, **options)
    assert_same_features(got, expected)
    for key in ("records", "offsets", "rna"):
        if expected.get(key) is None:
            assert got.get(key) is None, key
        else:
            assert torch.equal(got[key], expected[key]), key
    assert got["config"]["quality_offset"] == expected["config"]["quality_offset"] == 33
    assert got["config"]["read_options"].get("token_dtype", "uint8") in ("uint8", "int64")
