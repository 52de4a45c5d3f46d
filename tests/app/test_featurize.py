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


PEER = __import__("pathlib").Path("/work/shared/peer-data/biopython")


def test_featurize_quality_offset_64_and_auto_on_an_illumina_file(tmp_path, capsys):
    """Illumina 1.3-1.7 qualities (offset 64) came out 31 too high; --quality-offset 64 / auto read them as
    Biopython's fastq-illumina and the output says which offset was used."""
    from Bio import SeqIO

    source = PEER / "illumina_full_range_original_illumina.fastq"
    expected = [r.letter_annotations["phred_quality"] for r in SeqIO.parse(source, "fastq-illumina")]
    for flag, detected in (("64", False), ("auto", True)):
        out = tmp_path / f"{flag}.pt"
        assert main(["dna", "featurize", str(source), "-o", str(out), "--quality-offset", flag, "--dim", "0",
                     "--no-progress"]) == 0
        printed = capsys.readouterr().out
        assert "qualities: Phred+64 (fastq-illumina, " + ("detected by --quality-offset auto" if detected
                                                          else "as given") in printed
        data = torch.load(out)
        assert [row[m].tolist() for row, m in zip(data["qualities"], data["mask"])] == expected
        assert data["config"]["quality_offset"] == 64 and data["config"]["quality_format"] == "fastq-illumina"
        assert data["config"]["quality_offset_detected"] is detected
    out = tmp_path / "default.pt"
    assert main(["dna", "featurize", str(source), "-o", str(out), "--dim", "0", "--no-progress"]) == 0
    assert "Phred+33 (fastq-sanger, as given)" in capsys.readouterr().out
    assert torch.load(out)["config"]["quality_offset"] == 33


def test_featurize_solexa_and_rna(tmp_path):
    out = tmp_path / "s.pt"
    assert main(["dna", "featurize", str(PEER / "solexa_full_range_original_solexa.fastq"), "-o", str(out),
                 "--quality-encoding", "solexa", "--dim", "0", "--no-progress"]) == 0
    sanger = tmp_path / "sanger.pt"
    assert main(["dna", "featurize", str(PEER / "solexa_full_range_as_sanger.fastq"), "-o", str(sanger), "--dim",
                 "0", "--no-progress"]) == 0
    assert torch.equal(torch.load(out)["qualities"], torch.load(sanger)["qualities"])
    assert torch.load(out)["config"]["quality_format"] == "fastq-solexa"
    rna = tmp_path / "rna.pt"
    assert main(["dna", "featurize", str(PEER / "misc_rna_original_sanger.fastq"), "-o", str(rna), "--rna", "keep",
                 "--no-progress"]) == 0
    data = torch.load(rna)
    from Bio import SeqIO

    assert decode(data["tokens"], data["mask"], rna=data["rna"]) == \
        [str(r.seq) for r in SeqIO.parse(PEER / "misc_rna_original_sanger.fastq", "fastq")]


def test_one_long_read_no_longer_makes_a_huge_file(tmp_path, capsys):
    """Reads of 150 bp and one of 20 kb (the issue: 1000 reads and one of 100 kb): padding every row to the
    longest read with int64 tokens made a .pt of ~2,000x the FASTQ. Tokens are uint8 now, and --max-len with
    --truncation split bounds the width."""
    import numpy as np

    rng = np.random.default_rng(0)
    lengths = [150] * 300
    lengths[100] = 20_000
    lines = []
    for i, n in enumerate(lengths):
        seq = np.frombuffer(b"ACGT", np.uint8)[rng.integers(0, 4, n)].tobytes()
        lines.append(b"@r%d\n%s\n+\n%s\n" % (i, seq, b"I" * n))
    reads = tmp_path / "reads.fastq"
    reads.write_bytes(b"".join(lines))
    out = tmp_path / "out.pt"
    assert main(["dna", "featurize", str(reads), "-o", str(out), "--dim", "0", "--no-progress"]) == 0
    plain = torch.load(out)
    assert plain["tokens"].dtype == torch.uint8 and plain["tokens"].shape == (300, 20_000)
    assert out.stat().st_size > 100 * reads.stat().st_size  # every row padded to 20 kb
    assert main(["dna", "featurize", str(reads), "-o", str(out), "--max-len", "150", "--no-progress"]) == 2
    assert "record 101 ('r100'): 20,000 letters, more than max_len=150" in capsys.readouterr().err
    assert main(["dna", "featurize", str(reads), "-o", str(out), "--max-len", "150", "--truncation", "split",
                 "--dim", "0", "--no-progress"]) == 0
    data = torch.load(out)
    windows = -(-20_000 // 150)
    assert data["tokens"].shape == (299 + windows, 150)
    assert out.stat().st_size < 2 * reads.stat().st_size  # tokens, mask and qualities: 3 bytes a position
    assert data["records"][100:100 + windows].tolist() == [100] * windows
    assert data["offsets"][100:103].tolist() == [0, 150, 300]
    assert data["config"]["max_len"] == 150 and data["config"]["truncation"] == "split"
    assert "".join(decode(data["tokens"][100:100 + windows], data["mask"][100:100 + windows])) == \
        lines[100].split(b"\n")[1].decode()


def test_featurize_token_dtype_and_bad_options(tmp_path, capsys):
    reads = tmp_path / "r.fq"
    reads.write_bytes(b"@a\nACGT\n+\nIIII\n")
    out = tmp_path / "o.pt"
    assert main(["dna", "featurize", str(reads), "-o", str(out), "--token-dtype", "int64", "--no-progress"]) == 0
    assert torch.load(out)["tokens"].dtype == torch.int64 and torch.load(out)["config"]["token_dtype"] == "int64"
    assert main(["dna", "featurize", str(reads), "-o", str(out), "--truncation", "head", "--no-progress"]) == 2
    assert "needs max_len" in capsys.readouterr().err
    with __import__("pytest").raises(SystemExit):
        main(["dna", "featurize", str(reads), "-o", str(out), "--quality-offset", "300"])
