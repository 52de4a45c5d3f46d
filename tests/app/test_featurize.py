"""`omnipos dna featurize` end to end."""

import gzip

import torch

from omnipos.app.cli import main
from omnipos.dna import PAD, decode, rc_symmetric_encoding


def test_featurize_fastq(tmp_path, capsys):
    reads = tmp_path / "reads.fastq.gz"
    reads.write_bytes(gzip.compress(b"@a\nACGTa\n+\nIIII#\n@b\n\n+\n\n@c\nNN\n+\n!!\n"))
    out = tmp_path / "out.pt"
    assert main(["dna", "featurize", str(reads), "-o", str(out), "--dim", "6", "--strand-aware",
                 "--batch-size", "2", "--no-progress"]) == 0
    assert "3 reads" in capsys.readouterr().out
    data = torch.load(out)
    assert data["names"] == ["a", "b", "c"]
    assert decode(data["tokens"], data["mask"]) == ["ACGTa", "", "NN"]
    assert data["lengths"].tolist() == [5, 0, 2] and (data["tokens"][~data["mask"]] == PAD).all()
    assert data["qualities"].tolist() == [[40, 40, 40, 40, 2], [0] * 5, [0, 0, 0, 0, 0]]
    assert torch.equal(data["positional"], rc_symmetric_encoding(torch.tensor([5, 0, 2]), 6, strand_aware=True))


def test_featurize_fasta_without_positional_and_errors(tmp_path, capsys):
    reads = tmp_path / "reads.fa"
    reads.write_bytes(b">x\nAC\nGT\n")
    out = tmp_path / "out.pt"
    assert main(["dna", "featurize", str(reads), "-o", str(out), "--dim", "0", "--no-progress"]) == 0
    data = torch.load(out)
    assert data["qualities"] is None and "positional" not in data
    bad = tmp_path / "bad.fq"
    bad.write_bytes(b"@r1\nACGT\n+\nIII\n")
    assert main(["dna", "featurize", str(bad), "-o", str(out), "--no-progress"]) == 2
    assert "record 1 ('r1')" in capsys.readouterr().err
    assert main(["dna", "featurize", str(reads), "-o", str(out), "--dim", "5", "--strand-aware"]) == 2
    assert "even" in capsys.readouterr().err


def test_featurize_progress_bar(tmp_path, capsys):
    reads = tmp_path / "r.fq"
    reads.write_bytes(b"@a\nAC\n+\nII\n" * 3)
    assert main(["dna", "featurize", str(reads), "-o", str(tmp_path / "o.pt")]) == 0
    assert "3 reads" in capsys.readouterr().err  # tqdm's bar, on stderr


def test_featurize_refuses_a_huge_positional_tensor(tmp_path, capsys, monkeypatch):
    import omnipos.app.featurize as featurize

    monkeypatch.setattr(featurize, "MAX_POSITIONAL_BYTES", 100)
    reads = tmp_path / "r.fa"
    reads.write_bytes(b">a\nACGT\n>b\nAC\n")
    assert main(["dna", "featurize", str(reads), "-o", str(tmp_path / "o.pt"), "--no-progress"]) == 2
    assert "--dim 0" in capsys.readouterr().err
    assert not (tmp_path / "o.pt").exists()
