"""The command line's paths (issue 23): one -o/--output flag in every command, output paths checked before any
work, non-regular inputs refused saying what they are, and precompute meds' full option set."""

import os

import numpy as np
import pandas as pd
import pytest
import torch

import omnipos.app.featurize as featurize_module
from omnipos.app.cli import build_parser, main
from omnipos.dna import read_fastx
from omnipos.scale import load_meds, precompute_reads
from omnipos.timeseries import EventBatch


@pytest.fixture
def reads(tmp_path):
    path = tmp_path / "a.fq"
    path.write_bytes(b"@r1\nACGT\n+\nIIII\n@r2\nGA\n+\nII\n")
    return path


@pytest.mark.parametrize("argv", [["demo"], ["dna", "featurize", "a.fq"], ["precompute", "reads", "a.fq"],
                                  ["precompute", "meds", "root"], ["precompute", "graphs", "g.pt"]])
@pytest.mark.parametrize("flag", ["-o", "--output", "--out"])
def test_every_command_takes_the_same_output_flag(argv, flag):
    assert build_parser().parse_args([*argv, flag, "somewhere"]).output == "somewhere"


@pytest.mark.parametrize("target, words", [("missing/y.pt", "the folder .* does not exist"),
                                           (".", "is a folder; give a file name in it")])
def test_featurize_output_checked_before_parsing(tmp_path, reads, monkeypatch, capsys, target, words):
    monkeypatch.setattr(featurize_module, "read_fastx", lambda *a, **k: pytest.fail("parsed before the check"))
    out = tmp_path / target
    assert main(["dna", "featurize", str(reads), "-o", str(out), "--no-progress"]) == 2
    assert pytest.importorskip("re").search(words, capsys.readouterr().err)


def test_featurize_to_proc_refused(reads, capsys):
    assert main(["dna", "featurize", str(reads), "-o", "/proc/x/y.pt", "--no-progress"]) == 2
    assert "'/proc/x' does not exist" in capsys.readouterr().err


def test_precompute_output_that_is_a_file_refused(tmp_path, reads, capsys):
    target = tmp_path / "file"
    target.write_text("mine")
    assert main(["precompute", "reads", str(reads), "-o", str(target), "--no-progress"]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err and target.read_text() == "mine"


def test_non_regular_inputs_refused_saying_what_they_are(tmp_path, capsys):
    fifo = tmp_path / "pipe.fq"
    os.mkfifo(fifo)
    for path, words in ((fifo, "is a named pipe (FIFO), not a regular file"),
                        ("/dev/null", "is a character device, not a regular file"),
                        (tmp_path, "is a folder, not a FASTA/FASTQ file")):
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
            read_fastx(path)
        with pytest.raises(ValueError, match=r"paths: .*" + words.split(",")[0].replace("(", r"\(")
                           .replace(")", r"\)")):
            precompute_reads([path], tmp_path / "out", progress=False)
        assert main(["dna", "featurize", str(path), "-o", str(tmp_path / "x.pt"), "--no-progress"]) == 2
        assert words.split(",")[0] in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_fastx(tmp_path / "absent.fq")


def test_precompute_meds_full_option_set(tmp_path):
    root = tmp_path / "meds"
    (root / "data" / "a").mkdir(parents=True)
    (root / "metadata").mkdir()
    rng = np.random.default_rng(7)
    subjects = np.repeat(np.arange(10, 16), [5, 1, 4, 2, 6, 3])
    frame = pd.DataFrame({"subject_id": subjects, "code": rng.choice(["LAB//A", "LAB//B", "DX//C"], subjects.size),
                          "time": pd.Timestamp("2021-05-01") + pd.to_timedelta(rng.integers(0, 10**6, subjects.size),
                                                                               unit="s"),
                          "numeric_value": rng.normal(size=subjects.size).astype(np.float32)})
    frame.to_parquet(root / "data" / "a" / "0.parquet")
    pd.DataFrame({"subject_id": np.arange(10, 16), "split": ["train", "held_out"] * 3}).to_parquet(
        root / "metadata" / "subject_splits.parquet")
    codes = root / "metadata" / "codes.parquet"
    pd.DataFrame({"code": ["LAB//B", "LAB//A", "DX//C", "LAB//Z"], "description": None}).to_parquet(codes)
    assert main(["precompute", "meds", str(root), "-o", str(tmp_path / "cli"), "--split", "train", "--vocab",
                 str(codes), "--unknown-code", "unk", "--max-len", "3", "--truncation", "tail", "--no-progress"]) == 0
    got = load_meds(tmp_path / "cli")
    train = frame[frame["subject_id"].isin([10, 12, 14])]
    expected = EventBatch.from_frame(train, vocab=["<pad>", "<unk>", "DX//C", "LAB//A", "LAB//B", "LAB//Z"],
                                     unknown_code="unk", max_len=3, truncation="tail")
    assert got.subjects == expected.subjects == [10, 12, 14] and got.vocab == expected.vocab
    assert torch.equal(got.codes, expected.codes) and torch.equal(got.times, expected.times)
    assert got.times.shape[1] == 3
