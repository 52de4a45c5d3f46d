"""FASTA/FASTQ reads, plain or gzip, as batches of tokens: ``read_fastx`` and ``ReadBatch``.

Two parsers give identical batches and identical errors: dnaio (extra ``[dna]``, C speed; ``omnipos.dna.dnaio``)
and a pure-Python one (this module). The format is told by the first character ('@' FASTQ, '>' FASTA), gzip by its
magic bytes, never by the file name. Windows line endings are read like Unix ones; empty reads are reads of length
0. A malformed record (quality and sequence lengths differ, a truncated record, a missing '@' or '+' line, a
character outside the IUPAC alphabet, a non-ASCII byte, a quality below '!') is a ``ValueError`` naming the file
and the record (its number, 1-based, and its name when the header was read). When dnaio rejects a file, the
pure-Python parser re-reads it to name the record the same way.

FASTQ records are the standard four lines (sequence and quality on one line each, as dnaio requires); FASTA
sequences may span lines, blank lines are skipped.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import torch

from ..core import check_choice, check_positive_int, pad_packed
from .alphabet import AMBIGUITY_POLICIES, LOWERCASE_POLICIES, InvalidLetterError, encode_joined

__all__ = ["ReadBatch", "read_fastx", "PARSERS", "detect_format", "RawRecords"]

PARSERS = ("auto", "dnaio", "python")
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class ReadBatch:
    """A batch of reads.

    Attributes:
        names: B header lines (without '@' / '>').
        tokens: ``[B, L]`` int64 token ids (``omnipos.dna.encode``), ``PAD`` past each read.
        mask: ``[B, L]`` bool, True at real bases.
        lengths: ``[B]`` int64 read lengths.
        qualities: FASTQ only: ``[B, L]`` uint8 Phred scores (ASCII - offset), 0 at pads; None for FASTA.
    """

    names: list[str]
    tokens: torch.Tensor
    mask: torch.Tensor
    lengths: torch.Tensor
    qualities: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.names)

    def to(self, device: torch.device | str) -> ReadBatch:
        """The same batch with its tensors on ``device``."""
        return ReadBatch(self.names, self.tokens.to(device), self.mask.to(device), self.lengths.to(device),
                         None if self.qualities is None else self.qualities.to(device))

    def __repr__(self) -> str:
        kind = "FASTQ" if self.qualities is not None else "FASTA"
        return f"ReadBatch({len(self)} {kind} reads, tokens {tuple(self.tokens.shape)})"


@dataclass
class RawRecords:
    """What a parser hands over for one batch: parallel lists, and the 0-based number of the first record."""

    first: int
    names: list[str]
    sequences: list[str] | list[bytes]
    qualities: list[str] | list[bytes] | None


def _open_binary(path: Path) -> IO[bytes]:
    handle = open(path, "rb")
    if handle.read(2) == _GZIP_MAGIC:
        handle.close()
        return gzip.open(path, "rb")
    handle.seek(0)
    return handle


def detect_format(path: str | os.PathLike) -> str | None:
    """``"fastq"`` or ``"fasta"`` from the first non-blank character of the (possibly gzipped) file; None if
    the file is empty or blank. Raises ValueError for anything else."""
    with _open_binary(Path(path)) as handle:
        while chunk := handle.read(1 << 16):
            stripped = chunk.lstrip()
            if stripped:
                first = stripped[:1]
                if first == b"@":
                    return "fastq"
                if first == b">":
                    return "fasta"
                raise ValueError(f"{path}: not FASTA or FASTQ: the first character is {first.decode('latin-1')!r}"
                                 " (expected '>' or '@')")
    return None


def _record(path: Path, number: int, name: str | None) -> str:
    label = f"{path}: record {number + 1}"
    return f"{label} ({name!r})" if name is not None else label


def _strip_eol(line: bytes) -> bytes:
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    return line


def _check_ascii(path: Path, number: int, name: str | None, line: bytes, what: str) -> None:
    # dnaio refuses non-ASCII records; so does this parser, with the same words whichever parser ran
    if not line.isascii():
        bad = next(b for b in line if b > 127)
        raise ValueError(f"{_record(path, number, name)}: non-ASCII byte 0x{bad:02x} in its {what} line")


def _python_fastq(path: Path, handle: IO[bytes]) -> Iterator[tuple[str, bytes, bytes]]:
    lines = iter(handle)
    number = 0
    line_no = 0
    for header in lines:
        line_no += 1
        header = _strip_eol(header)
        if not header.startswith(b"@"):
            raise ValueError(f"{_record(path, number, None)}, line {line_no}: expected a header starting with "
                             f"'@', found {header[:30].decode('latin-1')!r}")
        _check_ascii(path, number, None, header, "header")
        name = header[1:].decode("ascii")
        body = []
        for what in ("sequence", "'+' separator", "quality"):
            line = next(lines, None)
            if line is None:
                raise ValueError(f"{_record(path, number, name)}: truncated record: the file ends before its "
                                 f"{what} line")
            line_no += 1
            body.append(_strip_eol(line))
        sequence, plus, quality = body
        for line, what in ((sequence, "sequence"), (plus, "'+'"), (quality, "quality")):
            _check_ascii(path, number, name, line, what)
        if not plus.startswith(b"+"):
            raise ValueError(f"{_record(path, number, name)}, line {line_no - 1}: expected the '+' separator, "
                             f"found {plus[:30].decode('latin-1')!r}")
        if len(plus) > 1 and plus[1:] != header[1:]:
            raise ValueError(f"{_record(path, number, name)}, line {line_no - 1}: the '+' line names "
                             f"{plus[1:].decode('latin-1')!r}; it must be empty or repeat the header")
        if len(sequence) != len(quality):
            raise ValueError(f"{_record(path, number, name)}: the sequence has {len(sequence)} letters but the "
                             f"quality has {len(quality)}")
        yield name, sequence, quality
        number += 1


def _python_fasta(path: Path, handle: IO[bytes]) -> Iterator[tuple[str, bytes, None]]:
    name: str | None = None
    number = -1
    parts: list[bytes] = []
    for line_no, line in enumerate(handle, 1):
        line = _strip_eol(line)
        if line.startswith(b">"):
            if name is not None:
                yield name, b"".join(parts), None
            number += 1
            _check_ascii(path, number, None, line, "header")
            name, parts = line[1:].decode("ascii"), []
        elif not line.strip():
            continue
        elif name is None:
            raise ValueError(f"{path}: line {line_no}: expected a '>' header before the first sequence, found "
                             f"{line[:30].decode('latin-1')!r}")
        else:
            _check_ascii(path, number, name, line, "sequence")
            parts.append(line)
    if name is not None:
        yield name, b"".join(parts), None


def python_records(path: Path, fmt: str, batch_size: int) -> Iterator[RawRecords]:
    """The pure-Python parser: batches of raw records of a FASTA/FASTQ file (plain or gzip)."""
    with _open_binary(path) as handle:
        parse = _python_fastq if fmt == "fastq" else _python_fasta
        batch: list[tuple[str, bytes, bytes | None]] = []
        first = 0
        for item in parse(path, handle):
            batch.append(item)
            if len(batch) == batch_size:
                yield _to_raw(first, batch, fmt)
                first += len(batch)
                batch = []
        if batch:
            yield _to_raw(first, batch, fmt)


def _to_raw(first: int, batch: list, fmt: str) -> RawRecords:
    names, sequences, qualities = (list(column) for column in zip(*batch))
    return RawRecords(first, names, sequences, qualities if fmt == "fastq" else None)


def _join(parts: Sequence[str] | Sequence[bytes]) -> bytes:
    if parts and isinstance(parts[0], str):
        return "".join(parts).encode("ascii", errors="replace")  # a non-ASCII letter becomes '?', refused below
    return b"".join(parts)


def assemble(path: Path, raw: RawRecords, *, ambiguity: str, lowercase: str, quality_offset: int) -> ReadBatch:
    """Raw records -> ReadBatch (shared by both parsers, so both validate and encode alike)."""
    lengths = np.fromiter(map(len, raw.sequences), dtype=np.int64, count=len(raw.sequences))
    try:
        tokens, mask = encode_joined(_join(raw.sequences), lengths, ambiguity=ambiguity, lowercase=lowercase)
    except InvalidLetterError as exc:
        raise ValueError(f"{_record(path, raw.first + exc.index, raw.names[exc.index])}: {exc.detail}") from None
    qualities = None
    if raw.qualities is not None:
        scores = np.frombuffer(_join(raw.qualities), dtype=np.uint8)
        if scores.size and (scores.min() < quality_offset or scores.max() > 126):
            flat = int(np.flatnonzero((scores < quality_offset) | (scores > 126))[0])
            index = int(np.searchsorted(np.cumsum(lengths), flat, side="right"))
            position = flat - int(lengths[:index].sum())
            raise ValueError(f"{_record(path, raw.first + index, raw.names[index])}: quality character "
                             f"{chr(scores[flat])!r} at position {position} is outside "
                             f"{chr(quality_offset)!r}..'~' (Phred offset {quality_offset})")
        qualities = pad_packed(torch.from_numpy(scores - np.uint8(quality_offset)), mask, 0)
    return ReadBatch(raw.names, tokens, mask, torch.from_numpy(lengths), qualities)


def _resolve_parser(parser: str) -> str:
    check_choice(parser, "parser", PARSERS)
    if parser == "python":
        return parser
    try:
        from . import dnaio as _dnaio_integration

        _dnaio_integration.require_dnaio()
    except ImportError:
        if parser == "dnaio":
            raise
        return "python"
    return "dnaio"


def read_fastx(
    path: str | os.PathLike,
    *,
    batch_size: int = 1024,
    ambiguity: str = "keep",
    lowercase: str = "soft_mask",
    parser: str = "auto",
    quality_offset: int = 33,
) -> Iterator[ReadBatch]:
    """Read a FASTA or FASTQ file (plain or gzip) in batches of encoded reads.

    Args:
        path: the file; format from its first character, compression from its magic bytes.
        batch_size: reads per batch (the last one may be smaller).
        ambiguity, lowercase: the alphabet policies of :func:`omnipos.dna.encode`.
        parser: ``"auto"`` (dnaio when installed, else pure Python), ``"dnaio"`` (ImportError naming the
            ``[dna]`` extra when missing) or ``"python"``. Both give identical batches and errors.
        quality_offset: Phred ASCII offset of FASTQ qualities (33, Sanger / Illumina 1.8+).

    Yields:
        :class:`ReadBatch` objects; ``qualities`` is None for FASTA.

    Raises:
        ValueError: a malformed record (named by file, number and name), a file that is neither FASTA nor FASTQ.
        FileNotFoundError: no such file.
    """
    path = Path(path)
    batch_size = check_positive_int(batch_size, "batch_size")
    check_choice(ambiguity, "ambiguity", AMBIGUITY_POLICIES)
    check_choice(lowercase, "lowercase", LOWERCASE_POLICIES)
    quality_offset = check_positive_int(quality_offset, "quality_offset")
    engine = _resolve_parser(parser)
    if not path.is_file():
        raise FileNotFoundError(f"path: no such file {str(path)!r}")
    return _read(path, batch_size, ambiguity, lowercase, engine, quality_offset)


def _read(path: Path, batch_size: int, ambiguity: str, lowercase: str, engine: str,
          quality_offset: int) -> Iterator[ReadBatch]:
    fmt = detect_format(path)
    if fmt is None:
        return
    if engine == "dnaio":
        from .dnaio import dnaio_records

        source = dnaio_records(path, fmt, batch_size)
    else:
        source = python_records(path, fmt, batch_size)
    for raw in source:
        yield assemble(path, raw, ambiguity=ambiguity, lowercase=lowercase, quality_offset=quality_offset)
