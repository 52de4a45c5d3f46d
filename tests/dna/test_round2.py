"""Issue 36 (datasets, round 2), the DNA items: lone-CR line ends read as Biopython reads them, bounded error
messages, compressed inputs named, the block FASTQ parser identical to the reference, one long read in memory
proportional to itself."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from Bio import SeqIO
from Bio.SeqIO.QualityIO import FastqGeneralIterator

from omnipos.dna import decode, read_fastx

PEER = Path("/work/shared/peer-data")
BIO = PEER / "biopython"
PARSERS = ["python", "dnaio", "auto"]


def _ours(path, parser, **options):
    names, seqs, quals = [], [], []
    for batch in read_fastx(path, parser=parser, batch_size=3, **options):
        names += batch.names
        seqs += decode(batch.tokens, batch.mask)
        quals += [row[m].tolist() for row, m in zip(batch.qualities, batch.mask)]
    return names, seqs, quals


def _biopython(data: bytes):
    """Biopython's FastqGeneralIterator over the text as SeqIO opens a file (universal newlines)."""
    records = list(FastqGeneralIterator(io.StringIO(data.decode("ascii"), newline=None)))
    return ([n for n, _, _ in records], [s for _, s, _ in records],
            [[ord(c) - 33 for c in q] for _, _, q in records])


# -- 1. lone-CR line ends -------------------------------------------------------------------------------------------

CR_FILES = ["example.fastq", "wrapping_original_sanger.fastq", "tricky.fastq", "sanger_full_range_original_sanger.fastq",
            "zero_length.fastq", "longreads_original_sanger.fastq"]


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("name", CR_FILES)
def test_lone_cr_line_ends_read_as_biopython_reads_them(tmp_path, name, parser):
    """Old Mac line ends (a lone CR), which the README promises and Biopython reads: before the fix the whole file
    was one header line, refused with all of it as the record name."""
    data = (BIO / name).read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r")
    assert b"\n" not in data
    path = tmp_path / "mac.fastq"
    path.write_bytes(data)
    expected = _biopython(data)
    assert len(expected[0]) >= 1
    assert expected == _biopython((BIO / name).read_bytes())  # the same records as the LF file
    assert _ours(path, parser) == expected
    with open(path) as handle:  # SeqIO itself
        assert [r.description for r in SeqIO.parse(handle, "fastq")] == expected[0]


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("data", [
    b"@a\nAC\rGT\n+\nII\rII\n",  # a lone CR inside a sequence and a quality line: wrapped lines
    b"@a\r\nACGT\r+\nIIII\r\n@b\rA\r\n+\rI",  # the three line ends mixed, no end at the end
    b"@a\nACGT\n+\nIIII\r\r\n\n",  # a lone CR then CRLF: blank lines after the record
    b"@a\r\rAC\r+\rII\r",  # an empty line inside the record (Biopython skips it)
])
def test_mixed_line_ends_read_as_biopython_reads_them(tmp_path, data, parser):
    path = tmp_path / "r.fastq"
    path.write_bytes(data)
    assert _ours(path, parser) == _biopython(data)


@pytest.mark.parametrize("parser", PARSERS)
def test_a_cr_in_a_name_ends_the_header_line_for_every_parser(tmp_path, parser):
    """dnaio keeps a lone CR inside its name; the reference (and Biopython) end the line there, so the record is
    malformed: every parser refuses it with the reference's message."""
    data = b"@a x\ry\nACGT\n+\nIIII\n"
    path = tmp_path / "r.fastq"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=r"Lengths of sequence and quality"):
        _biopython(data)
    with pytest.raises(ValueError, match=r"record 1 \('a x'\): the sequence has 5 letters but the quality has 4"):
        list(read_fastx(path, parser=parser))


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("data", [
    b"@" + b"x" * 3_000_000 + b"\n",  # one 3 MB header line, nothing else
    b"@" + b"n" * 500 + b"\nACGT\n+\nIII\n",  # a long name and a short quality
    b"@r\nACGT\n+" + b"t" * 5000 + b"\nIIII\n",  # a '+' line naming something else at length
    b"@r\nACGT\n+\nIIII\n" + b"x" * 100_000 + b"\n",  # a long line where a header belongs
    b"@r\n" + b"Z" * 100_000 + b"\n+\n" + b"I" * 100_000 + b"\n",  # a long bad sequence
])
def test_error_messages_show_at_most_about_100_characters_of_a_name_or_line(tmp_path, data, parser):
    path = tmp_path / "r.fastq"
    path.write_bytes(data)
    with pytest.raises(ValueError) as info:
        list(read_fastx(path, parser=parser))
    message = str(info.value)
    assert len(message) < len(str(path)) + 400, message


# -- 4. bz2 / xz / zstd named -------------------------------------------------------------------------------------

def _compress(kind: str, data: bytes) -> bytes:
    import bz2
    import lzma

    if kind == "bz2":
        return bz2.compress(data)
    if kind == "xz":
        return lzma.compress(data)
    # a zstd frame: its magic bytes, then a frame header and a raw block holding the data (RFC 8878)
    assert len(data) < 256
    block = (len(data) << 3 | 1).to_bytes(3, "little")  # last block, raw
    return b"\x28\xb5\x2f\xfd" + bytes([0x20, len(data)]) + block + data


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("kind", ["bz2", "xz", "zstd"])
def test_bz2_xz_zstd_inputs_are_refused_saying_compressed(tmp_path, kind, parser):
    """Before: "not FASTA or FASTQ: the first character is 'B'" (or an unprintable one), not saying compressed."""
    path = tmp_path / "reads.fq"  # the name says nothing: the magic bytes tell
    path.write_bytes(_compress(kind, b"@r1\nACGT\n+\nIIII\n"))
    with pytest.raises(ValueError, match=rf"reads\.fq: compressed with {kind}, which omnipos does not read; "
                                         "decompress it .* or use gzip"):
        list(read_fastx(path, parser=parser))
