"""The pure-Python FASTA/FASTQ parser: records of a plain or gzip file, in batches of raw strings.

It hands :class:`RawRecords` to :func:`omnipos.dna.read_fastx`, which validates and encodes them; the dnaio
integration (:mod:`omnipos.dna.dnaio`) hands over the same, and re-reads a file it rejects with this parser so that
both name a malformed record in the same words. The format is told by the first character ('@' FASTQ, '>' FASTA),
gzip by its magic bytes, never by the file name.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

__all__ = ["RawRecords", "detect_format", "open_binary", "python_records", "record_label"]

_GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class RawRecords:
    """What a parser hands over for one batch: parallel lists, and the 0-based number of the first record."""

    first: int
    names: list[str]
    sequences: list[str] | list[bytes]
    qualities: list[str] | list[bytes] | None


def open_binary(path: Path) -> IO[bytes]:
    """The file opened for binary reading, gunzipped when it starts with gzip's magic bytes."""
    handle = open(path, "rb")
    if handle.read(2) == _GZIP_MAGIC:
        handle.close()
        return gzip.open(path, "rb")
    handle.seek(0)
    return handle


def detect_format(path: str | os.PathLike) -> str | None:
    """``"fastq"`` or ``"fasta"`` from the first non-blank character of the (possibly gzipped) file; None if
    the file is empty or blank. Raises ValueError for anything else."""
    with open_binary(Path(path)) as handle:
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


def record_label(path: Path, number: int, name: str | None) -> str:
    """``"<path>: record <number + 1> ('<name>')"``: how every error names a record (number is 0-based)."""
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
        raise ValueError(f"{record_label(path, number, name)}: non-ASCII byte 0x{bad:02x} in its {what} line")


def _python_fastq(path: Path, handle: IO[bytes]) -> Iterator[tuple[str, bytes, bytes]]:
    lines = iter(handle)
    number = 0
    line_no = 0
    for header in lines:
        line_no += 1
        header = _strip_eol(header)
        if not header.startswith(b"@"):
            raise ValueError(f"{record_label(path, number, None)}, line {line_no}: expected a header starting with "
                             f"'@', found {header[:30].decode('latin-1')!r}")
        _check_ascii(path, number, None, header, "header")
        name = header[1:].decode("ascii")
        body = []
        for what in ("sequence", "'+' separator", "quality"):
            line = next(lines, None)
            if line is None:
                raise ValueError(f"{record_label(path, number, name)}: truncated record: the file ends before its "
                                 f"{what} line")
            line_no += 1
            body.append(_strip_eol(line))
        sequence, plus, quality = body
        for line, what in ((sequence, "sequence"), (plus, "'+'"), (quality, "quality")):
            _check_ascii(path, number, name, line, what)
        if not plus.startswith(b"+"):
            raise ValueError(f"{record_label(path, number, name)}, line {line_no - 1}: expected the '+' separator, "
                             f"found {plus[:30].decode('latin-1')!r}")
        if len(plus) > 1 and plus[1:] != header[1:]:
            raise ValueError(f"{record_label(path, number, name)}, line {line_no - 1}: the '+' line names "
                             f"{plus[1:].decode('latin-1')!r}; it must be empty or repeat the header")
        if len(sequence) != len(quality):
            raise ValueError(f"{record_label(path, number, name)}: the sequence has {len(sequence)} letters but the "
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
    with open_binary(path) as handle:
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
