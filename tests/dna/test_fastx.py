"""The parsers on the peers' own files (/work/shared/peer-data, read in place): dnaio and the pure-Python reference
give identical batches and identical errors on every file, read what Biopython and dnaio read (checked against
their own parse), and refuse Biopython's error files with a message that points at the problem."""

import gzip
import random
import re
import zlib
from pathlib import Path

import dnaio
import pytest
import torch
from Bio import SeqIO
from Bio.SeqIO.QualityIO import phred_quality_from_solexa

from omnipos.dna import FastxDataset, decode, read_fastx
from omnipos.dna.fastx import python_records

PEER = Path("/work/shared/peer-data")
PEER_FILES = sorted(p for p in PEER.glob("*/*") if p.suffix != ".pt")
BIO = PEER / "biopython"


def peer_id(path):
    return f"{path.parent.name}/{path.name}"


def outcome(path, parser, **options):
    """Everything read_fastx gives (batches as plain data), or the error it raises."""
    try:
        batches = []
        for b in read_fastx(path, parser=parser, **options):
            batches.append((b.names, b.tokens.tolist(), b.tokens.dtype, b.mask.tolist(), b.lengths.tolist(),
                            None if b.qualities is None else b.qualities.tolist(), b.records.tolist(),
                            b.offsets.tolist(), None if b.rna is None else b.rna.tolist(), b.quality_offset,
                            b.quality_encoding))
        return "read", batches
    except ValueError as exc:
        return "refused", str(exc)


def biopython_format(path):
    """Biopython's format for a peer FASTQ (from its name) and our options reading it the same way."""
    name = path.name
    if name.startswith("solexa_") and "as_" not in name or "as_solexa" in name or "original_solexa" in name:
        return "fastq-solexa", {"quality_encoding": "solexa"}
    if "as_illumina" in name or "original_illumina" in name or name.startswith("illumina_faked"):
        return "fastq-illumina", {"quality_offset": 64}
    return "fastq", {}


# -- both parsers, every peer file --------------------------------------------------------------------------------

@pytest.mark.parametrize("path", PEER_FILES, ids=peer_id)
def test_both_parsers_agree_on_every_peer_file(path):
    """Every file both parsers accept gives identical batches; every file one refuses, the other refuses with the
    same message (the default options, and the lenient ones that read RNA and detect the quality offset)."""
    for options in ({}, {"rna": "keep", "quality_offset": "auto", "max_len": 30, "truncation": "split"}):
        fast, reference = outcome(path, "dnaio", batch_size=2, **options), outcome(path, "python", batch_size=2,
                                                                                   **options)
        assert fast == reference
        if fast[0] == "refused":
            assert str(path) in fast[1]


def _dnaio_reads(path):
    try:
        with dnaio.open(path) as reader:
            return [(r.name, r.sequence, r.qualities) for r in reader]
    except Exception:  # noqa: BLE001 - dnaio refuses the file: nothing to compare
        return None


DNAIO_READABLE = [p for p in PEER_FILES if _dnaio_reads(p) is not None]


def test_dnaio_itself_reads_most_peer_files():
    assert len(DNAIO_READABLE) >= 40  # the comparison below is not vacuous


@pytest.mark.parametrize("path", DNAIO_READABLE, ids=peer_id)
def test_reference_parser_reads_what_dnaio_reads_exactly_as_dnaio(path):
    """On every peer file dnaio itself reads, the pure-Python parser hands over the same records (dnaio's names
    without trailing whitespace): the fast path and the reference cannot disagree where both read. (The files
    dnaio refuses are compared with Biopython below.)"""
    theirs = _dnaio_reads(path)
    fmt = "fastq" if theirs and theirs[0][2] is not None else "fasta"
    ours = []
    for raw in python_records(path, fmt, 1000):
        qualities = raw.qualities or [None] * len(raw.names)
        ours += [(n, s.decode(), None if q is None else q.decode()) for n, s, q in zip(raw.names, raw.sequences,
                                                                                       qualities)]
    assert ours == [(n.rstrip(), s, q) for n, s, q in theirs]


# -- against Biopython's own parse ----------------------------------------------------------------------------------

BIOPYTHON_READABLE = [p for p in sorted(BIO.glob("*.fastq")) if not p.name.startswith("error_")]


@pytest.mark.parametrize("parser", ["dnaio", "python"])
@pytest.mark.parametrize("path", BIOPYTHON_READABLE, ids=peer_id)
def test_matches_biopython_on_every_file_it_reads(path, parser):
    """Names, sequences (case kept; RNA given back with rna="keep"), Phred scores (Illumina 1.3+ at offset 64,
    Solexa converted as Biopython converts it): wrapped FASTQ (wrapping_*, tricky, longreads_original_sanger),
    zero-length reads, DOS line ends and gzip/bgzip included."""
    fmt, options = biopython_format(path)
    records = list(SeqIO.parse(path, fmt))
    names, seqs, quals = [], [], []
    for batch in read_fastx(path, parser=parser, rna="keep", batch_size=3, **options):
        assert batch.quality_format == ("fastq-sanger" if fmt == "fastq" else fmt)
        names += batch.names
        seqs += decode(batch.tokens, batch.mask, rna=batch.rna)
        quals += [row[m].tolist() for row, m in zip(batch.qualities, batch.mask)]
    assert names == [r.description for r in records]
    assert seqs == [str(r.seq) for r in records]
    if fmt == "fastq-solexa":
        expected = [[round(phred_quality_from_solexa(q)) for q in r.letter_annotations["solexa_quality"]]
                    for r in records]
    else:
        expected = [r.letter_annotations["phred_quality"] for r in records]
    assert quals == expected


@pytest.mark.parametrize("path", [BIO / "example.fasta", PEER / "dnaio" / "simple.fasta"], ids=peer_id)
def test_fasta_peer_files_match_biopython_parse(path):
    records = list(SeqIO.parse(path, "fasta"))
    raw = [r for batch in python_records(path, "fasta", 10) for r in zip(batch.names, batch.sequences)]
    assert [(n, s.decode()) for n, s in raw] == [(r.description, str(r.seq)) for r in records]


def test_the_peers_own_test_sequences_are_not_dna_and_are_refused_at_the_letter():
    """dnaio's simple.fasta/.fastq hold 'SEQUENCE1': dnaio reads any letters; omnipos encodes DNA, so it names
    the first letter outside the alphabet (after skipping with_comment.fasta's comment lines)."""
    for name in ("simple.fasta", "simple.fasta.gz", "simple.fastq", "simple.fastq.gz", "with_comment.fasta"):
        path = PEER / "dnaio" / name
        kind, message = outcome(path, "python")
        assert kind == "refused"
        assert message == f"{path}: record 1 ('first_sequence'): 'E' at position 1; expected IUPAC nucleotide " \
                          "letters ACGTNRYSWKMBDHV (either case)"


# -- refused where the peer reads it (issue 17), now read -----------------------------------------------------------

def _names_and_seqs(path, **options):
    out = []
    for batch in read_fastx(path, **options):
        out += list(zip(batch.names, decode(batch.tokens, batch.mask, rna=batch.rna),
                        [None] * len(batch) if batch.qualities is None else batch.qualities.tolist()))
    return out


@pytest.mark.parametrize("parser", ["dnaio", "python"])
def test_comment_lines_before_a_fasta_record_are_skipped_as_dnaio_does(tmp_path, parser):
    theirs = _dnaio_reads(PEER / "dnaio" / "with_comment.fasta")
    assert [(n, s) for n, s, _ in theirs] == [("first_sequence", "SEQUENCE1"), ("second_sequence", "SEQUENCE2")]
    raw = [(n, s.decode()) for b in python_records(PEER / "dnaio" / "with_comment.fasta", "fasta", 10)
           for n, s in zip(b.names, b.sequences)]
    assert raw == [(n, s) for n, s, _ in theirs]
    # and a DNA file with the same comment lines in front reads like the file without them
    path = tmp_path / "commented.fasta"
    path.write_bytes(b"# a comment\n# another one\n" + (BIO / "example.fasta").read_bytes())
    assert _names_and_seqs(path, parser=parser) == _names_and_seqs(BIO / "example.fasta", parser=parser)
    assert [s for _, s, _ in _names_and_seqs(path, parser=parser)] == \
        [str(r.seq) for r in SeqIO.parse(BIO / "example.fasta", "fasta")]


@pytest.mark.parametrize("parser", ["dnaio", "python"])
@pytest.mark.parametrize("source", ["example.fastq", "example.fasta"])
def test_utf8_byte_order_mark_is_skipped(tmp_path, parser, source):
    path = tmp_path / source
    path.write_bytes(b"\xef\xbb\xbf" + (BIO / source).read_bytes())
    assert _names_and_seqs(path, parser=parser) == _names_and_seqs(BIO / source, parser="python")


@pytest.mark.parametrize("parser", ["dnaio", "python"])
def test_trailing_blank_lines_are_read_as_biopython_reads_them(tmp_path, parser):
    path = tmp_path / "trailing.fastq"
    path.write_bytes((BIO / "example.fastq").read_bytes() + b"\n\n")
    assert len(list(SeqIO.parse(path, "fastq"))) == 3
    assert _names_and_seqs(path, parser=parser) == _names_and_seqs(BIO / "example.fastq", parser="python")


@pytest.mark.parametrize("parser", ["dnaio", "python"])
def test_plus_line_repeating_the_header_with_trailing_space(tmp_path, parser):
    text = (BIO / "example.fastq").read_text()
    lines = text.splitlines()
    lines[2] = "+" + lines[0][1:] + " "  # the first record's '+' line repeats its header, plus a space
    path = tmp_path / "plus.fastq"
    path.write_text("\n".join(lines) + "\n")
    assert [r.description for r in SeqIO.parse(path, "fastq")] == [r.description for r in
                                                                   SeqIO.parse(BIO / "example.fastq", "fastq")]
    assert _names_and_seqs(path, parser=parser) == _names_and_seqs(BIO / "example.fastq", parser="python")


@pytest.mark.parametrize("parser", ["dnaio", "python"])
def test_wrapped_fastq_reads_like_its_unwrapped_conversion(parser):
    """Biopython's wrapping_original_sanger.fastq, and the same reads unwrapped by Biopython (wrapping_as_sanger)."""
    assert _names_and_seqs(BIO / "wrapping_original_sanger.fastq", parser=parser) == \
        _names_and_seqs(BIO / "wrapping_as_sanger.fastq", parser=parser)


@pytest.mark.parametrize("parser", ["dnaio", "python"])
def test_rna_files_refused_by_default_read_by_policy(parser):
    path = BIO / "misc_rna_original_sanger.fastq"
    kind, message = outcome(path, parser)
    assert kind == "refused" and "U is RNA: pass rna='to_t'" in message and "record 1" in message
    records = list(SeqIO.parse(path, "fastq"))
    kept = _names_and_seqs(path, parser=parser, rna="keep")
    assert [s for _, s, _ in kept] == [str(r.seq) for r in records]
    as_t = _names_and_seqs(path, parser=parser, rna="to_t")
    assert [s for _, s, _ in as_t] == [str(r.seq).replace("U", "T").replace("u", "t") for r in records]
    batch = next(read_fastx(path, parser=parser, rna="keep"))
    assert batch.rna.dtype == torch.bool and batch.rna.any()
    assert torch.equal(batch.tokens, next(read_fastx(path, parser=parser, rna="to_t")).tokens)


def test_rna_keep_refuses_a_read_with_both_t_and_u(tmp_path):
    path = tmp_path / "mixed.fa"
    path.write_bytes(b">ok\nACGU\n>mixed\nACTGU\n")
    for parser in ("dnaio", "python"):
        with pytest.raises(ValueError, match=r"record 2 \('mixed'\): has both T \(position 2\) and U \(position 4\)"):
            list(read_fastx(path, parser=parser, rna="keep"))


@pytest.mark.parametrize("parser", ["dnaio", "python"])
def test_solexa_qualities_converted_to_phred_as_biopython_converts_them(parser):
    """solexa_full_range_original_solexa (Solexa -5..62 at offset 64) read with quality_encoding="solexa" equals
    Biopython's own conversion of that file to Sanger (solexa_full_range_as_sanger.fastq)."""
    solexa = next(read_fastx(BIO / "solexa_full_range_original_solexa.fastq", parser=parser,
                             quality_encoding="solexa"))
    sanger = next(read_fastx(BIO / "solexa_full_range_as_sanger.fastq", parser=parser))
    assert solexa.quality_format == "fastq-solexa" and solexa.quality_offset == 64
    assert torch.equal(solexa.qualities, sanger.qualities) and torch.equal(solexa.tokens, sanger.tokens)
    # never Solexa numbers labelled Phred: score -5 (';') becomes Phred 1
    assert solexa.qualities[0, 0].item() == 1


@pytest.mark.parametrize("parser", ["dnaio", "python"])
def test_illumina_offset_64_and_auto_detection(parser):
    """Illumina 1.3-1.7 (offset 64) read at the default offset 33 comes out 31 too high; quality_offset=64 and
    "auto" read it as Biopython's fastq-illumina, and say so."""
    path = BIO / "illumina_full_range_original_illumina.fastq"
    expected = [r.letter_annotations["phred_quality"] for r in SeqIO.parse(path, "fastq-illumina")]
    for offset in (64, "auto"):
        batch = next(read_fastx(path, parser=parser, quality_offset=offset))
        assert [row[m].tolist() for row, m in zip(batch.qualities, batch.mask)] == expected
        assert batch.quality_offset == 64 and batch.quality_format == "fastq-illumina"
    wrong = next(read_fastx(path, parser=parser))
    assert (wrong.qualities[wrong.mask] - batch.qualities[batch.mask]).unique().tolist() == [31]
    sanger = next(read_fastx(BIO / "sanger_full_range_original_sanger.fastq", parser=parser, quality_offset="auto"))
    assert sanger.quality_offset == 33 and sanger.quality_format == "fastq-sanger"


def test_auto_offset_refuses_a_range_that_fits_both_readings():
    """Solexa-scaled files span ';'..'~': Phred+33 26..93 or Solexa -5..62 at 64; auto refuses to guess."""
    with pytest.raises(ValueError, match=r"quality_offset='auto' cannot tell.*';'\.\.'~'.*quality_encoding='solexa'"):
        list(read_fastx(BIO / "solexa_full_range_original_solexa.fastq", quality_offset="auto"))


# -- Biopython's error files: still refused, pointing at the problem ------------------------------------------------

ERROR_FILES = sorted(BIO.glob("error_*.fastq"))
POINTED = {  # file -> what the message must point at
    "error_qual_del.fastq": r"record 4 .*quality character '\\x7f' \(0x7f\) at position 12",
    "error_qual_escape.fastq": r"record 5 .*quality character '\\x1b' \(0x1b\) at position 7",
    "error_qual_null.fastq": r"record 1 .*quality character '\\x00' \(0x00\) at position 3",
    "error_qual_space.fastq": r"record 4 .*quality character ' ' at position 18",
    "error_qual_tab.fastq": r"record 5 .*quality character '\\t' \(0x09\) at position 10",
    "error_qual_unit_sep.fastq": r"record 3 .*quality character '\\x1f' \(0x1f\) at position 5",
    "error_qual_vtab.fastq": r"record 1 .*quality character '\\x0b' \(0x0b\) at position 10",
    "error_spaces.fastq": r"record 1 .*: ' ' at position 9",
    "error_tabs.fastq": r"record 1 .*: '\\t' \(U\+0009\) at position 9",
    "error_diff_ids.fastq": r"record 3 .*line 11: the '\+' line names 'SLXA-B3_649_FC8437_R1_1_1_850_124'",
    "error_trunc_in_plus.fastq": r"record 5 .*line 19: the '\+' line names",
    "error_double_seq.fastq": r"record 4 .*line 15: expected the '\+' separator",
    "error_double_qual.fastq": r"record 4, line 13: expected a header starting with '@'",
    "error_long_qual.fastq": r"record 4 .*the sequence has 25 letters but the quality has 26",
    "error_short_qual.fastq": r"record 3 .*the sequence has 25 letters but the quality has 24",
    "error_trunc_in_qual.fastq": r"record 5 .*the sequence has 25 letters but the quality has 24",
    "error_no_qual.fastq": r"record 1 .*the sequence has 25 letters but the quality has 0",
}


@pytest.mark.parametrize("path", ERROR_FILES, ids=peer_id)
def test_biopythons_error_files_are_refused_by_both_parsers(path):
    with pytest.raises(ValueError):
        list(SeqIO.parse(path, "fastq"))  # the peer refuses each too
    messages = set()
    for parser in ("dnaio", "python"):
        kind, message = outcome(path, parser)
        assert kind == "refused"
        messages.add(message)
    assert len(messages) == 1
    message = messages.pop()
    assert message.startswith(f"{path}: record ")
    if path.name in POINTED:
        assert re.search(POINTED[path.name], message), message
    elif path.name.startswith("error_trunc"):
        assert "truncated record: the file ends before its" in message


# -- the three FASTA disagreements of issue 14 -----------------------------------------------------------------------

@pytest.mark.parametrize("data, expected", [
    (b">r1 desc \t \nACGT\n", [("r1 desc", "ACGT")]),  # header with trailing whitespace
    (b">r1\nACGT \nAC\t\nGG\n", [("r1", "ACGTACGG")]),  # trailing space/tab in sequence lines
    (b">r1\nAC\rGT\r>r2\rTT\n", [("r1", "ACGT"), ("r2", "TT")]),  # lone CR ends a line
    (b">r1\r\nAC\r\nGT\r\n", [("r1", "ACGT")]),
])
def test_fasta_whitespace_and_line_ends_read_alike_by_both_parsers_and_biopython(tmp_path, data, expected):
    path = tmp_path / "x.fa"
    path.write_bytes(data)
    for parser in ("dnaio", "python"):
        assert [(n, s) for n, s, _ in _names_and_seqs(path, parser=parser)] == expected
    text_mode = list(SeqIO.parse(path, "fasta"))  # Biopython reads the same (it strips line ends the same way)
    assert [(r.description, str(r.seq)) for r in text_mode] == expected


def test_inner_space_in_a_fasta_sequence_is_refused_alike(tmp_path):
    path = tmp_path / "x.fa"
    path.write_bytes(b">r1\nAC GT\n")
    messages = {outcome(path, parser)[1] for parser in ("dnaio", "python")}
    assert messages == {f"{path}: record 1 ('r1'): ' ' at position 2; expected IUPAC nucleotide letters "
                        "ACGTNRYSWKMBDHV (either case)"}


def test_non_ascii_whitespace_is_refused_by_both_parsers(tmp_path):
    """dnaio's FASTA reader would strip a trailing no-break space (Unicode whitespace); the reference refuses any
    non-ASCII byte, and so does the dnaio path."""
    path = tmp_path / "x.fa"
    path.write_bytes(b">r1\nACGT\xc2\xa0\n")
    kinds = {outcome(path, parser) for parser in ("dnaio", "python")}
    assert kinds == {("refused", f"{path}: record 1 ('r1'): non-ASCII byte 0xc2 in its sequence line")}


# -- damaged gzip streams: a ValueError naming the file and the last good record ------------------------------------

def many_reads(n=400, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        seq = "".join(rng.choice("ACGT") for _ in range(60))
        out.append(f"@read{i}\n{seq}\n+\n{'I' * 60}\n")
    return "".join(out).encode()


def damaged(kind, data):
    packed = gzip.compress(data, mtime=0)
    if kind == "truncated":
        return packed[: len(packed) * 3 // 5]
    if kind == "bad crc":
        return packed[:-8] + bytes([packed[-8] ^ 0xFF]) + packed[-7:]
    if kind == "trailing garbage":
        return packed + b"this is not gzip"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["truncated", "bad crc", "trailing garbage"])
@pytest.mark.parametrize("parser", ["dnaio", "python"])
def test_damaged_gzip_is_a_value_error_naming_file_and_last_good_record(tmp_path, kind, parser):
    data = many_reads()
    path = tmp_path / "reads.fastq.gz"
    path.write_bytes(damaged(kind, data))
    with pytest.raises(ValueError, match="the compressed stream is damaged or truncated after it") as info:
        list(read_fastx(path, parser=parser, batch_size=50))
    message = str(info.value)
    assert message.startswith(f"{path}: record ")
    number = int(message.split(": record ")[1].split(" ")[0])
    assert f"{path}: record {number} ('read{number - 1}') is the last one read in full" in message
    readable = zlib.decompressobj(wbits=31).decompress(path.read_bytes()) if kind == "truncated" else data
    assert 0 < number <= readable.count(b"\n+\n")
    if kind != "truncated":
        assert number == 400  # the CRC and the trailing bytes are checked once every record is read


@pytest.mark.parametrize("parser", ["dnaio", "python"])
def test_not_gzip_under_a_gz_name(tmp_path, parser):
    """Compression is told by the magic bytes, never by the name: a plain FASTQ named .gz is read as plain, and
    bytes that are neither gzip nor FASTA/FASTQ are refused by name."""
    plain = tmp_path / "plain.fastq.gz"
    plain.write_bytes((BIO / "example.fastq").read_bytes())
    assert _names_and_seqs(plain, parser=parser) == _names_and_seqs(BIO / "example.fastq", parser="python")
    junk = tmp_path / "junk.fastq.gz"
    junk.write_bytes(bytes(range(256)))
    with pytest.raises(ValueError, match=rf"{junk}: not FASTA or FASTQ"):
        list(read_fastx(junk, parser=parser))
    header_only = tmp_path / "header.fastq.gz"
    header_only.write_bytes(gzip.compress(b"@r1\nACGT\n+\nIIII\n")[:12])  # a gzip header, then nothing
    with pytest.raises(ValueError, match=r"record 1: the compressed stream is damaged or truncated before it"):
        list(read_fastx(header_only, parser=parser))


def test_damaged_gzip_mid_epoch_in_fastx_dataset(tmp_path):
    path = tmp_path / "reads.fastq.gz"
    path.write_bytes(damaged("truncated", many_reads()))
    seen = []
    with pytest.raises(ValueError, match=rf"{path}: record \d+ \('read\d+'\) is the last one read in full"):
        for item in FastxDataset(path, chunk_size=20):
            seen.append(item["name"])
    assert len(seen) > 0  # the epoch had started


def test_example_gzip_and_bgzip_of_biopython_read_like_the_plain_file():
    plain = _names_and_seqs(BIO / "example.fastq")
    for name in ("example.fastq.gz", "example.fastq.bgz"):
        for parser in ("dnaio", "python"):
            assert _names_and_seqs(BIO / name, parser=parser) == plain


def test_fastq_names_lose_trailing_whitespace_like_biopython(tmp_path):
    path = tmp_path / "x.fq"
    path.write_bytes(b"@r1 x \t\nACGT\n+\nIIII\n@r2\x1c\nAC\n+r2\x1c\nII\n")
    expected = [r.description for r in SeqIO.parse(path, "fastq")]
    assert expected == ["r1 x", "r2"]
    for parser in ("dnaio", "python"):
        assert [n for n, _, _ in _names_and_seqs(path, parser=parser)] == expected


@pytest.mark.parametrize("kind", ["truncated", "bad crc", "trailing garbage"])
def test_damaged_gzip_message_is_the_same_from_both_parsers(tmp_path, kind):
    path = tmp_path / "reads.fastq.gz"
    path.write_bytes(damaged(kind, many_reads()))
    assert outcome(path, "dnaio", batch_size=50) == outcome(path, "python", batch_size=50)


@pytest.mark.parametrize("tail", [b"\n\n", b"@late\nAC\nGT\n+\nII\nII\n", b"@bad\nACGT\n+\nII\n"])
def test_dnaio_stopping_late_hands_over_to_the_reference_at_the_same_record(tmp_path, tail):
    """dnaio reads the first 400 records, then meets what it refuses (a trailing blank line, a wrapped record, a
    short quality): the reference takes over at the first record not handed over, skipping the 4-line records
    dnaio read, and the whole result equals the reference's own reading of the file."""
    path = tmp_path / "late.fastq"
    path.write_bytes(many_reads() + tail)
    fast, reference = outcome(path, "dnaio", batch_size=64), outcome(path, "python", batch_size=64)
    assert fast == reference
    if tail.startswith(b"@bad"):
        assert fast[0] == "refused" and "record 401 ('bad')" in fast[1]
    else:
        assert sum(len(b[0]) for b in fast[1]) == 400 + tail.count(b"@late")
