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


# -- options of issue 17: quality offset, token dtype, max_len with a named truncation policy ----------------------

@pytest.mark.parametrize("bad, error", [
    (300, ValueError), (0, ValueError), (-33, ValueError), ("64", ValueError), ("sanger", ValueError),
    (33.0, TypeError), (True, TypeError), ([33], TypeError),
])
def test_quality_offset_refused_by_name(tmp_path, bad, error):
    path = tmp_path / "r.fq"
    path.write_bytes(b"@a\nAC\n+\nII\n")
    with pytest.raises(error, match="quality_offset"):
        read_fastx(path, quality_offset=bad)
    with pytest.raises(error, match="quality_offset"):
        FastxDataset(path, quality_offset=bad)


def test_other_read_options_refused_by_name(tmp_path):
    path = tmp_path / "r.fq"
    path.write_bytes(b"@a\nAC\n+\nII\n")
    for kwargs, error, name in [
        ({"quality_encoding": "illumina"}, ValueError, "quality_encoding"),
        ({"quality_encoding": "solexa", "quality_offset": 33}, ValueError, "quality_encoding='solexa' uses offset 64"),
        ({"rna": "drop"}, ValueError, "rna"),
        ({"max_len": 0}, ValueError, "max_len"),
        ({"max_len": 2.5}, TypeError, "max_len"),
        ({"truncation": "middle", "max_len": 3}, ValueError, "truncation"),
        ({"truncation": "head"}, ValueError, "truncation='head' needs max_len"),
        ({"token_dtype": torch.float32}, TypeError, "token_dtype"),
        ({"token_dtype": "uint8"}, TypeError, "token_dtype"),
    ]:
        with pytest.raises(error, match=name):
            read_fastx(path, **kwargs)


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("token_dtype", [torch.uint8, torch.int16, torch.int32, torch.int64])
def test_tokens_are_uint8_unless_asked(tmp_path, parser, token_dtype):
    path = tmp_path / "r.fq"
    path.write_bytes(fastq_bytes(random_reads(12, seed=6)))
    default = next(read_fastx(path, parser=parser))
    assert default.tokens.dtype == torch.uint8  # one byte per base: a 1 GiB read costs 1 GiB of tokens, not 8
    asked = next(read_fastx(path, parser=parser, token_dtype=token_dtype))
    assert asked.tokens.dtype == token_dtype and torch.equal(asked.tokens.long(), default.tokens.long())
    assert default.qualities.dtype == torch.uint8 and default.records.dtype == torch.int64


def test_a_long_fasta_line_is_one_byte_per_base(tmp_path):
    """One long FASTA line (10 MB here; 1 GiB in the issue) encodes as uint8: the tokens take its length in
    bytes, where int64 took eight times that."""
    n = 10_000_000
    path = tmp_path / "chr.fa"
    path.write_bytes(b">chr\n" + b"ACGT" * (n // 4) + b"\n")
    for parser in PARSERS:
        batch = next(read_fastx(path, parser=parser))
        assert batch.tokens.shape == (1, n) and batch.tokens.dtype == torch.uint8
        assert batch.tokens.element_size() * batch.tokens.numel() == n


READS_WITH_A_LONG_ONE = [("short1", "ACGTACGT", "I" * 8), ("long", "ACGTTGCAAGGCTTAGCAT", "ABCDEFGHIJKLMNOPQRS"),
                         ("empty", "", ""), ("short2", "GGGCC", "!!!!!")]


@pytest.mark.parametrize("parser", PARSERS)
def test_max_len_error_policy_names_the_record(tmp_path, parser):
    path = tmp_path / "r.fq"
    path.write_bytes(fastq_bytes(READS_WITH_A_LONG_ONE))
    with pytest.raises(ValueError, match=r"record 2 \('long'\): 19 letters, more than max_len=8; pass "
                                         r"truncation='head', 'tail' or 'split'"):
        list(read_fastx(path, parser=parser, max_len=8))
    assert len(list(read_fastx(path, parser=parser, max_len=19))) == 1  # long enough: nothing to cut


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("truncation", ["head", "tail", "split"])
def test_max_len_truncation_policies(tmp_path, parser, truncation):
    path = tmp_path / "r.fq"
    path.write_bytes(fastq_bytes(READS_WITH_A_LONG_ONE))
    batches = list(read_fastx(path, parser=parser, max_len=8, truncation=truncation, batch_size=3))
    rows = [(n, s, q, r, o) for b in batches
            for n, s, q, r, o in zip(b.names, decode(b.tokens, b.mask),
                                     ["".join(chr(33 + v) for v in row[m].tolist())
                                      for row, m in zip(b.qualities, b.mask)],
                                     b.records.tolist(), b.offsets.tolist())]
    assert all(b.tokens.shape[1] <= 8 for b in batches)
    seq, qual = READS_WITH_A_LONG_ONE[1][1], READS_WITH_A_LONG_ONE[1][2]
    if truncation == "head":
        long_rows = [("long", seq[:8], qual[:8], 1, 0)]
    elif truncation == "tail":
        long_rows = [("long", seq[-8:], qual[-8:], 1, 11)]
    else:
        long_rows = [("long", seq[0:8], qual[0:8], 1, 0), ("long", seq[8:16], qual[8:16], 1, 8),
                     ("long", seq[16:], qual[16:], 1, 16)]
    expected = [("short1", "ACGTACGT", "I" * 8, 0, 0)]  # exactly max_len: kept whole
    expected += long_rows + [("empty", "", "", 2, 0), ("short2", "GGGCC", "!!!!!", 3, 0)]
    assert rows == expected
    if truncation == "split":  # the windows put back together are the reads
        joined = {}
        for n, s, _, r, o in rows:
            joined.setdefault(r, "")
            assert o == len(joined[r])
            joined[r] += s
        assert [joined[i] for i in range(4)] == [s for _, s, _ in READS_WITH_A_LONG_ONE]


def test_read_batch_repr_and_to(tmp_path):
    path = tmp_path / "r.fq"
    path.write_bytes(b"@a\nAC\n+\nhh\n")
    batch = next(read_fastx(path, quality_offset=64))
    assert "fastq-illumina" in repr(batch) and "torch.uint8" in repr(batch)
    moved = batch.to("cpu")
    assert moved.quality_offset == 64 and torch.equal(moved.records, batch.records)
    assert moved.qualities.tolist() == [[40, 40]]


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("truncation", ["head", "tail", "split"])
def test_truncation_still_validates_the_whole_read(tmp_path, parser, truncation):
    """A bad letter or quality in the part a policy drops is still an error, named by record and by its position
    in the read (not in the window)."""
    path = tmp_path / "r.fq"
    path.write_bytes(b"@ok\nACGTACGTACGT\n+\nIIIIIIIIIIII\n@bad\nACGTACGTACXT\n+\nIIIIIIIIIIII\n")
    with pytest.raises(ValueError, match=r"record 2 \('bad'\): 'X' at position 10"):
        list(read_fastx(path, parser=parser, max_len=4, truncation=truncation))
    path.write_bytes(b"@ok\nACGTACGTACGT\n+\nIIIIIIIIIIII\n@bad\nACGTACGTACGT\n+\nIIIIIIIIII I\n")
    with pytest.raises(ValueError, match=r"record 2 \('bad'\): quality character ' ' at position 10"):
        list(read_fastx(path, parser=parser, max_len=4, truncation=truncation))
