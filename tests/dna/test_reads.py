"""read_fastx: both parsers against Biopython on valid files, and the same ValueError on malformed ones."""

import gzip
import random
import sys

import pytest
import torch
from Bio import SeqIO

from omnipos.dna import PAD, FastxDataset, collate_reads, decode, read_fastx

PARSERS = ["dnaio", "python"]


def random_reads(n, seed=0, max_len=40):
    rng = random.Random(seed)
    reads = []
    for i in range(n):
        length = rng.choice([0, 1, rng.randint(2, max_len)])
        seq = "".join(rng.choice("ACGTACGTNacgtRY") for _ in range(length))
        qual = "".join(chr(33 + rng.randint(0, 41)) for _ in range(length))
        reads.append((f"read{i} desc {rng.randint(0, 99)}", seq, qual))
    return reads


def fastq_bytes(reads, eol="\n"):
    return "".join(f"@{n}{eol}{s}{eol}+{eol}{q}{eol}" for n, s, q in reads).encode()


def fasta_bytes(reads, width=7, eol="\n"):
    out = []
    for n, s, _ in reads:
        out.append(f">{n}{eol}")
        out.extend(f"{s[i:i + width]}{eol}" for i in range(0, len(s), width))
    return "".join(out).encode()


def collect(path, parser, batch_size=7, **kwargs):
    names, seqs, quals = [], [], []
    for batch in read_fastx(path, batch_size=batch_size, parser=parser, **kwargs):
        assert len(batch) <= batch_size
        assert torch.equal(batch.mask, batch.tokens != PAD)
        assert batch.lengths.tolist() == batch.mask.sum(1).tolist()
        names += batch.names
        seqs += decode(batch.tokens, batch.mask)
        if batch.qualities is not None:
            assert batch.qualities.dtype == torch.uint8 and (batch.qualities[~batch.mask] == 0).all()
            quals += ["".join(chr(33 + v) for v in row[m].tolist()) for row, m in zip(batch.qualities, batch.mask)]
    return names, seqs, quals


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_fastq_matches_biopython(tmp_path, parser, compress, eol):
    reads = random_reads(40, seed=1)
    reference = tmp_path / "ref.fastq"
    reference.write_bytes(fastq_bytes(reads))
    bio = list(SeqIO.parse(reference, "fastq"))
    data = fastq_bytes(reads, eol)
    path = tmp_path / "reads.dat"  # no telling extension: format and compression are sniffed
    path.write_bytes(gzip.compress(data) if compress else data)
    names, seqs, quals = collect(path, parser)
    assert names == [r.description for r in bio]
    assert seqs == [str(r.seq) for r in bio]
    assert quals == ["".join(chr(33 + q) for q in r.letter_annotations["phred_quality"]) for r in bio]
    assert "" in seqs  # empty reads are reads of length 0


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_fasta_multiline_matches_biopython(tmp_path, parser, eol):
    reads = random_reads(25, seed=2)
    (tmp_path / "ref.fa").write_bytes(fasta_bytes(reads))
    bio = list(SeqIO.parse(tmp_path / "ref.fa", "fasta"))
    path = tmp_path / "reads.fa.gz"
    path.write_bytes(gzip.compress(fasta_bytes(reads, eol=eol) + eol.encode()))  # a trailing blank line
    names, seqs, quals = collect(path, parser, batch_size=4)
    assert names == [r.description for r in bio] and seqs == [str(r.seq) for r in bio] and quals == []
    batch = next(read_fastx(path, parser=parser))
    assert batch.qualities is None


def test_parsers_give_identical_batches(tmp_path):
    path = tmp_path / "r.fq"
    path.write_bytes(fastq_bytes(random_reads(30, seed=3)))
    for a, b in zip(read_fastx(path, batch_size=8, parser="dnaio"), read_fastx(path, batch_size=8, parser="python")):
        assert a.names == b.names
        for field in ("tokens", "mask", "lengths", "qualities"):
            assert torch.equal(getattr(a, field), getattr(b, field))


def test_policies_pass_through(tmp_path):
    path = tmp_path / "r.fq"
    path.write_bytes(b"@a\nacgR\n+\nIIII\n")
    batch = next(read_fastx(path, lowercase="fold", ambiguity="to_n"))
    assert batch.tokens.tolist() == [[0, 1, 2, 4]]


MALFORMED = {
    "length mismatch": (b"@r1\nACGT\n+\nIIII\n@r2 x\nACG\n+\nII\n", r"record 2 \('r2 x'\): the sequence has 3 "
                        r"letters but the quality has 2"),
    "truncated after sequence": (b"@r1\nACGT\n+\nIIII\n@r2\nACG\n", r"record 2 \('r2'\): truncated record"),
    "truncated after header": (b"@r1\nACGT\n+\nIIII\n@r2\n", r"record 2 \('r2'\): truncated record"),
    "truncated before quality": (b"@r1\nAC\n+\nII\n@r2\n\n+\n", r"record 2 \('r2'\): truncated record"),
    # without a '+' line, the lines after the header read as a (wrapped) sequence up to the end of the file
    "missing plus": (b"@r1\nACGT\nIIII\nIIII\n", r"record 1 \('r1'\): truncated record: the file ends before its "
                     r"'\+' separator line \(after 3 sequence lines\)"),
    "missing plus, next header": (b"@r1\nACGT\nIIII\n@r2\nA\n+\nI\n", r"record 1 \('r1'\), line 4: expected the "
                                  r"'\+' separator, found '@r2'"),
    "plus names another read": (b"@r1\nACGT\n+r9\nIIII\n", r"record 1 \('r1'\), line 3: the '\+' line names"),
    "missing at": (b"@r1\nA\n+\nI\nr2\nA\n+\nI\n", r"record 2, line 5: expected a header starting with '@'"),
    "crlf mismatch": (b"@r1\r\nACGT\r\n+\r\nIII\r\n", r"record 1 \('r1'\): the sequence has 4 letters but the "
                      r"quality has 3"),
    "invalid letter": (b"@r1\nACGT\n+\nIIII\n@r2\nACXT\n+\nIIII\n", r"record 2 \('r2'\): 'X' at position 2"),
    "non-ASCII sequence": (b"@r1\nAC\xc3\xa9\n+\nIIII\n", r"record 1 \('r1'\): non-ASCII byte 0xc3 in its "
                           r"sequence line"),
    "non-ASCII header": (b"@a\nA\n+\nI\n@r\xe9\nA\n+\nI\n", r"record 2: non-ASCII byte 0xe9 in its header line"),
    "quality below offset": (b"@r1\nACGT\n+\nII I\n", r"record 1 \('r1'\): quality character ' ' at position 2"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
@pytest.mark.parametrize("compress", [False, True])
def test_malformed_fastq_same_error_from_both_parsers(tmp_path, case, compress):
    data, pattern = MALFORMED[case]
    path = tmp_path / "bad.fq"
    path.write_bytes(gzip.compress(data) if compress else data)
    messages = []
    for parser in PARSERS:
        with pytest.raises(ValueError, match=pattern) as info:
            list(read_fastx(path, parser=parser, batch_size=1))
        assert str(path) in str(info.value)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("data, pattern", [
    (b">a\nAC\n>r\xe9\nAC\n", r"record 2: non-ASCII byte 0xe9 in its header line"),
    (b">a\nAC\nG\xe9\n", r"record 1 \('a'\): non-ASCII byte 0xe9 in its sequence line"),
    (b">a\nAC\n>b\nGZ\n", r"record 2 \('b'\): 'Z' at position 1"),
])
def test_malformed_fasta_same_error_from_both_parsers(tmp_path, data, pattern):
    path = tmp_path / "bad.fa"
    path.write_bytes(data)
    messages = []
    for parser in PARSERS:
        with pytest.raises(ValueError, match=pattern) as info:
            list(read_fastx(path, parser=parser))
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_other_bad_input(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes(b"ACGT\n")
    with pytest.raises(ValueError, match="not FASTA or FASTQ"):
        list(read_fastx(path))
    with pytest.raises(FileNotFoundError):
        read_fastx(tmp_path / "missing.fq")
    with pytest.raises(ValueError, match="parser"):
        read_fastx(path, parser="biopython")
    with pytest.raises(ValueError, match="batch_size"):
        read_fastx(path, batch_size=0)
    empty = tmp_path / "empty.fq"
    empty.write_bytes(b"")
    assert list(read_fastx(empty)) == []


def test_dnaio_missing_names_the_extra(tmp_path, monkeypatch):
    path = tmp_path / "r.fq"
    path.write_bytes(b"@a\nAC\n+\nII\n")
    monkeypatch.setitem(sys.modules, "dnaio", None)
    with pytest.raises(ImportError, match=r"omnipos\[dna\]"):
        read_fastx(path, parser="dnaio")
    assert next(read_fastx(path)).names == ["a"]  # "auto" falls back to the pure-Python parser


def test_iterable_dataset_and_collate(tmp_path):
    reads = random_reads(23, seed=4)
    path = tmp_path / "r.fq"
    path.write_bytes(fastq_bytes(reads))
    dataset = FastxDataset(path, chunk_size=5)
    loader = torch.utils.data.DataLoader(dataset, batch_size=6, collate_fn=collate_reads)
    names, seqs = [], []
    for batch in loader:
        assert batch.qualities is not None and batch.tokens.shape == batch.qualities.shape
        names += batch.names
        seqs += decode(batch.tokens, batch.mask)
    assert names == [n for n, _, _ in reads] and seqs == [s for _, s, _ in reads]
    assert "chunk_size=5" in repr(dataset)
    with pytest.raises(ValueError, match="empty"):
        collate_reads([])


def test_dataset_splits_chunks_across_workers(tmp_path, monkeypatch):
    path = tmp_path / "r.fa"
    path.write_bytes(fasta_bytes(random_reads(20, seed=5)))
    seen = []
    import omnipos.dna.dataset as module

    for worker in range(3):
        monkeypatch.setattr(module, "get_worker_info", lambda w=worker: type("I", (), {"id": w, "num_workers": 3}))
        seen += [item["name"] for item in FastxDataset(path, chunk_size=3)]
    assert sorted(seen) == sorted(n for n, _, _ in random_reads(20, seed=5))
