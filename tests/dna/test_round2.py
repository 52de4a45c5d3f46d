"""Issue 36 (datasets, round 2), the DNA items: lone-CR line ends read as Biopython reads them, bounded error
messages, compressed inputs named, the block FASTQ parser identical to the reference, one long read in memory
proportional to itself."""

from __future__ import annotations

import gzip
import io
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from Bio import SeqIO
from Bio.SeqIO.QualityIO import FastqGeneralIterator
from hypothesis import given, settings
from hypothesis import strategies as st

import omnipos.dna.fastq_blocks as blocks
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


# -- 2. the block parser: the same batches and errors as the reference -------------------------------------------

needs_blocks = pytest.mark.skipif(blocks.block_kernels() is None, reason="the block parser needs numba")
PEER_FASTQ = sorted(p for p in PEER.glob("*/*") if p.suffix != ".pt")


def _outcome(path, parser, **options):
    try:
        return "read", [(b.names, b.tokens.tolist(), b.tokens.dtype, b.mask.tolist(), b.lengths.tolist(),
                         None if b.qualities is None else b.qualities.tolist(), b.records.tolist(),
                         b.offsets.tolist(), None if b.rna is None else b.rna.tolist(), b.quality_offset,
                         b.quality_encoding) for b in read_fastx(path, parser=parser, **options)]
    except ValueError as exc:
        return "refused", str(exc)


def _blocks_used(monkeypatch):
    """Count the records the block parser hands out (so a test knows it ran)."""
    seen = []
    original = blocks.block_records

    def counting(*args, **kwargs):
        for raw in original(*args, **kwargs):
            seen.append(len(raw.names))
            yield raw

    monkeypatch.setattr(blocks, "block_records", counting)
    return seen


OPTION_SETS = [{}, {"rna": "keep", "quality_offset": "auto", "max_len": 30, "truncation": "split"},
               {"bucket_size": 5, "ambiguity": "to_n", "lowercase": "fold", "token_dtype": torch.int64}]


@needs_blocks
@pytest.mark.parametrize("path", PEER_FASTQ, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_block_parser_equals_the_reference_on_every_peer_file(path):
    for options in OPTION_SETS:
        assert _outcome(path, "auto", batch_size=2, **options) == _outcome(path, "python", batch_size=2, **options)


def _random_fastq(rng, count, *, long_every=0):
    out = []
    for i in range(count):
        n = int(rng.integers(0, 40)) if not long_every or i % long_every else 5000
        seq = rng.choice(np.frombuffer(b"ACGTNacgtRY", dtype=np.uint8), n).tobytes()
        qual = rng.integers(33, 75, n).astype(np.uint8).tobytes()
        name = b"r%d%s" % (i, b" desc" if i % 3 == 0 else b"")
        out.append(b"@%s\n%s\n+\n%s\n" % (name, seq, qual))
    return b"".join(out)


@needs_blocks
@pytest.mark.parametrize("rows", [3, blocks.LAYOUT_ROWS])
@pytest.mark.parametrize("block", [64, 1000, 1 << 22])
@pytest.mark.parametrize("tail", [b"", b"\n\n \n", b"@bad\nAC\n+\nI\n@r\nA\n+\nI\n", b"@w\nAC\nGT\n+\nIIII\n",
                                  b"@x\nACZ\n+\nIII\n", b"@q\nAC\n+\nI\x01\n", b"@c\nAC\r\n+\r\nII\r\n",
                                  b"@n\nAC\n+n\nII\n", b"@s\nACGT\n+\nII\nII\n", b"@e\nAC\n+\nII"])
def test_block_parser_across_blocks_batches_and_hand_overs(tmp_path, monkeypatch, block, tail, rows):
    """Records spanning block boundaries (tiny blocks, and a 5,000 bp read growing the buffer), batches spanning
    blocks and kernel calls, and a tail the block parser does not read (handed over mid-file: malformed, wrapped, CRLF, a '+name'
    line, a short quality line, no LF at the end): the same batches, or the same error, as the reference."""
    monkeypatch.setattr(blocks, "BLOCK", block)
    monkeypatch.setattr(blocks, "LAYOUT_ROWS", rows)  # records located per kernel call
    seen = _blocks_used(monkeypatch)
    path = tmp_path / "r.fq"
    path.write_bytes(_random_fastq(np.random.default_rng(block), 300, long_every=97) + tail)
    for options in OPTION_SETS:
        seen.clear()
        assert _outcome(path, "auto", batch_size=7, **options) == _outcome(path, "python", batch_size=7, **options)
        if block < 1 << 22:  # (one block holding the whole file: an invalid letter in it hands over from 0)
            assert sum(seen) >= 7 * 40  # the block parser read most of the file itself


@needs_blocks
def test_block_parser_reads_gzip_without_dnaio_and_gives_the_same_batches(tmp_path, monkeypatch):
    from omnipos.dna import reads

    monkeypatch.setattr(reads, "_resolve_parser", lambda parser: "python")  # as if dnaio were not installed
    seen = _blocks_used(monkeypatch)
    path = tmp_path / "r.fq.gz"
    path.write_bytes(gzip.compress(_random_fastq(np.random.default_rng(1), 200)))
    assert _outcome(path, "auto", batch_size=16) == _outcome(path, "python", batch_size=16)
    assert sum(seen) == 200


def test_without_numba_auto_still_reads_every_file_like_the_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIPOS_DISABLE_NUMBA", "1")
    assert blocks.block_kernels() is None
    path = tmp_path / "r.fq"
    path.write_bytes(_random_fastq(np.random.default_rng(2), 100) + b"@x\nAC\nGT\n+\nIIII\n")
    assert _outcome(path, "auto", batch_size=9) == _outcome(path, "python", batch_size=9)


PIECES = [b"@", b"+", b">", b"#", b"\n", b"\r", b"\r\n", b"\n\n", b" ", b"\t", b"ACGT", b"acgtn", b"U", b"IIII",
          b"!~", b"r1 x", b"\xef\xbb\xbf", b"\xc2\xa0", b"\x00", b"\x1c", b"\xff", b"@r\nACGT\n+\nIIII\n",
          b"@r\nACGT\n+\nIIII\n", b"@s x \nAC\n+\nII\n", b"@e\n\n+\n\n", b"+r\n"]


@needs_blocks
@settings(max_examples=150, deadline=None)
@given(data=st.lists(st.sampled_from(PIECES), max_size=16), gz=st.booleans(),
       options=st.sampled_from(OPTION_SETS[:2]))
def test_block_parser_agrees_with_the_reference_on_random_files(data, gz, options):
    raw = b"".join(data)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.fq"
        path.write_bytes(gzip.compress(raw, mtime=0) if gz else raw)
        assert _outcome(path, "auto", batch_size=2, **options) == _outcome(path, "python", batch_size=2, **options)
