"""The pure-Python FASTA/FASTQ parser: records of a plain or gzip file, in batches of raw strings.

It hands :class:`RawRecords` to :func:`omnipos.dna.read_fastx`, which validates and encodes them. This parser is
the reference: the dnaio integration (:mod:`omnipos.dna.dnaio`) is a fast path for the files dnaio reads, and
whatever dnaio refuses is re-read here, so both parsers give the same batches and the same errors. The format is
told by the first significant character ('@' FASTQ, '>' FASTA), gzip by its magic bytes, never by the file name.

The rules, written down once (the README promises them for both parsers):

- Either format: a UTF-8 byte-order mark at the start of the file is skipped; Windows line endings (CRLF) read
  like Unix ones; record names lose trailing whitespace (as Biopython's and dnaio's FASTA names do); any byte
  outside ASCII is refused (dnaio refuses it; a name or sequence never needs one).
- FASTA (dnaio's reader): each line is stripped of surrounding whitespace; blank
  lines are skipped; lines starting with ``#`` are comments, before the first record or anywhere (dnaio's rule,
  Biopython's "fasta-blast"); a sequence may span lines; inner spaces are kept (and refused by the alphabet).
- FASTQ (Biopython's reader, which reads everything dnaio reads): a record is a ``@`` header, one or more sequence
  lines (wrapped FASTQ), a ``+`` line (empty or repeating the header, trailing whitespace ignored), then quality
  lines until the quality is as long as the sequence (a quality line may start with ``@`` or ``+``). Blank lines
  between records, and at the end of the file, are skipped.
- Either format: lines end at LF, CRLF or a lone CR (old Mac files), as Biopython reads a file (Python's universal
  newlines); a lone CR is never part of a name, sequence or quality.
- A gzip stream that is truncated, fails its CRC, or has trailing garbage is a ValueError naming the file and the
  last record read in full.
"""

from __future__ import annotations

import gzip
import os
import stat
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import IO, Any

__all__ = [
    "RawRecords",
    "check_input_file",
    "DECOMPRESSION_ERRORS",
    "WHITESPACE",
    "detect_format",
    "open_binary",
    "python_records",
    "record_label",
    "damaged_stream_error",
    "has_bom",
    "is_gzip",
]

_GZIP_MAGIC = b"\x1f\x8b"
BOM = b"\xef\xbb\xbf"
WHITESPACE = b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # what str.strip() removes from ASCII text (dnaio's FASTA strip)
DECOMPRESSION_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


@dataclass
class RawRecords:
    """What a parser hands over for one batch: parallel lists, and the 0-based number of the first record. The
    block parser (:mod:`omnipos.dna.fastq_blocks`) hands over joined arrays instead: ``packed`` (a
    :class:`~omnipos.dna.fastq_blocks.Packed`), with ``sequences`` and ``qualities`` None."""

    first: int
    names: list[str]
    sequences: list[str] | list[bytes] | None
    qualities: list[str] | list[bytes] | None
    packed: Any = None


_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_input_file(path: str | os.PathLike, name: str = "path") -> Path:
    """A FASTA/FASTQ input that is a regular file. Anything else is refused saying what it is: no such path
    (FileNotFoundError), a folder, or a pipe, device or socket (ValueError: a file is opened twice, once to tell
    its format, so a stream such as ``/dev/stdin`` or a FIFO must be saved to a file first; ``/dev/null`` is a
    device, not an empty file)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{name}: no such file {str(path)!r}") from None
    if stat.S_ISREG(mode):
        return path
    if stat.S_ISDIR(mode):
        raise ValueError(f"{name}: {str(path)!r} is a folder, not a FASTA/FASTQ file")
    kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
    raise ValueError(f"{name}: {str(path)!r} is {kind}, not a regular file: FASTA/FASTQ input is read from a file "
                     "(it is opened twice: once to tell its format); save the stream to a file first")


# Compressions omnipos does not read, by their magic bytes: (magic, name, the command that decompresses it)
_OTHER_COMPRESSIONS = ((b"BZh", "bz2", "bunzip2"), (b"\xfd7zXZ\x00", "xz", "unxz"),
                       (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"))


def is_gzip(path: Path) -> bool:
    """True when the file starts with gzip's magic bytes."""
    with open(path, "rb") as handle:
        return handle.read(2) == _GZIP_MAGIC


def open_binary(path: Path) -> IO[bytes]:
    """The file opened for binary reading, gunzipped when it starts with gzip's magic bytes. A file compressed
    with bz2, xz or zstd (told by its magic bytes) is a ValueError saying so."""
    handle = open(path, "rb")
    start = handle.read(6)
    if start[:2] == _GZIP_MAGIC:
        handle.close()
        return gzip.open(path, "rb")
    for magic, kind, command in _OTHER_COMPRESSIONS:
        if start.startswith(magic):
            handle.close()
            raise ValueError(f"{path}: compressed with {kind}, which omnipos does not read; decompress it "
                             f"({command} {str(path)!r}) or use gzip")
    handle.seek(0)
    return handle


#: The most characters of a record name or line an error message shows (a malformed file can make a "name" of
#: megabytes: the rest is elided, saying how long it was).
SHOWN_CHARS = 100


def shown_text(text: str, limit: int = SHOWN_CHARS) -> str:
    """``repr(text)``, of at most ``limit`` characters of ``text``: a longer one ends in ``...`` and its length."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def record_label(path: Path, number: int, name: str | None) -> str:
    """``"<path>: record <number + 1> ('<name>')"``: how every error names a record (number is 0-based; at most
    :data:`SHOWN_CHARS` characters of the name)."""
    label = f"{path}: record {number + 1}"
    return f"{label} ({shown_text(name)})" if name is not None else label


def damaged_stream_error(path: Path, done: int, last_name: str | None, exc: BaseException) -> ValueError:
    """The ValueError for a damaged compressed stream: the file, the last record read in full, the cause."""
    if done:
        where = f"{record_label(path, done - 1, last_name)} is the last one read in full: the compressed stream is " \
                "damaged or truncated after it"
    else:
        where = f"{record_label(path, 0, None)}: the compressed stream is damaged or truncated before it was read " \
                "in full"
    return ValueError(f"{where} ({type(exc).__name__}: {exc})")


def has_bom(path: Path) -> bool:
    """True when the (decompressed) file starts with a UTF-8 byte-order mark."""
    with open_binary(path) as handle:
        try:
            return handle.read(3) == BOM
        except DECOMPRESSION_ERRORS:
            return False  # the parser that reads the file reports it


def detect_format(path: str | os.PathLike) -> str | None:
    """``"fastq"`` or ``"fasta"`` from the first significant character of the (possibly gzipped) file: a
    byte-order mark, whitespace and ``#`` comment lines are skipped. None if there is nothing else. Raises
    ValueError for anything else, and for a damaged gzip stream."""
    path = Path(path)
    with open_binary(path) as handle:
        first, in_comment = True, False
        try:
            while chunk := handle.readline(1 << 16):
                if first:
                    chunk, first = chunk.removeprefix(BOM), False
                pieces = chunk.replace(b"\r", b"\n").split(b"\n")
                for i, piece in enumerate(pieces):
                    terminated = i < len(pieces) - 1
                    if in_comment:
                        in_comment = not terminated
                        continue
                    stripped = piece.lstrip(WHITESPACE)
                    if not stripped:
                        continue
                    lead = stripped[:1]
                    if lead == b"#":
                        in_comment = not terminated
                    elif lead == b"@":
                        return "fastq"
                    elif lead == b">":
                        return "fasta"
                    else:
                        raise ValueError(f"{path}: not FASTA or FASTQ: the first character is "
                                         f"{lead.decode('latin-1')!r} (expected '>' or '@')")
        except DECOMPRESSION_ERRORS as exc:
            raise damaged_stream_error(path, 0, None, exc) from None
    return None


_BLOCK = 1 << 16  # bytes read at a time by the line splitter


def _lines(handle: IO[bytes]) -> Iterator[bytes]:
    """The lines of a binary stream without their ends, which are LF, CRLF or a lone CR (Python's universal
    newlines, how Biopython reads a file). Read a block at a time, so a file with no LF (old Mac line ends) costs
    one block and one line of memory, not the whole file. Blocks come from ``read1`` (one read of the stream below),
    so the lines read before a damaged part of a compressed stream are handed out before its error is raised."""
    read = getattr(handle, "read1", handle.read)
    carry: list[bytes] = []  # the start of a line not yet ended (or ended by a CR that may be a CRLF's)
    while block := read(_BLOCK):
        if b"\n" not in block and b"\r" not in block:
            carry.append(block)
            continue
        data = b"".join(carry) + block if carry else block
        lines = data.splitlines(keepends=True)  # bytes split at LF, CR and CRLF only
        last = lines[-1]
        if last[-1:] == b"\n":
            carry = []
        else:  # unterminated, or ended by a CR whose LF may come in the next block
            carry = [last]
            lines.pop()
        for line in lines:
            yield line[:-2] if line[-2:] == b"\r\n" else line[:-1]
    if carry:
        last = b"".join(carry)
        yield last[:-1] if last[-1:] == b"\r" else last


def _check_ascii(path: Path, number: int, name: str | None, line: bytes, what: str) -> None:
    # dnaio refuses non-ASCII records; so does this parser, with the same words whichever parser ran
    if not line.isascii():
        bad = next(b for b in line if b > 127)
        raise ValueError(f"{record_label(path, number, name)}: non-ASCII byte 0x{bad:02x} in its {what} line")


def _shown(line: bytes) -> str:
    return shown_text(line.decode("latin-1"), 30)


def _skip_four_line_records(path: Path, lines: Iterator[bytes], count: int) -> str | None:
    """Consume ``count`` records known to be plain 4-line records (dnaio read them) at C speed; return the name
    of the last one (for messages)."""
    deque(islice(lines, 4 * (count - 1)), maxlen=0)
    last = list(islice(lines, 4))
    if len(last) < 4 or last[0][:1] != b"@":
        raise ValueError(f"{path}: the file changed while it was read (record {count} is not where it was)")
    return last[0][1:].decode("ascii", errors="replace").rstrip()


def _python_fastq(path: Path, handle: IO[bytes], skip_four_line: int = 0) -> Iterator[tuple[str, bytes, bytes]]:
    """Records of a FASTQ stream: (name, sequence, quality), Biopython's reading of the format (see the module
    docstring); the common 4-line record takes the shortest path through the loop. The first
    ``skip_four_line`` records, known to be plain 4-line records, are skipped unparsed."""
    lines = _lines(handle)
    number = 0  # records read in full
    last_name: str | None = None
    line_no = 0
    pending: bytes | None = None  # one line of push-back (a header met while reading a short quality)
    try:
        if skip_four_line:
            last_name = _skip_four_line_records(path, lines, skip_four_line)
            number, line_no = skip_four_line, 4 * skip_four_line
        while True:
            # -- the header, after any blank lines
            if pending is not None:
                header, pending = pending, None
            else:
                raw = next(lines, None)
                if raw is None:
                    return
                line_no += 1
                header = raw
                if line_no == 1 and header.startswith(BOM):
                    header = header[len(BOM):]
            if header[:1] != b"@":
                if not header.strip(WHITESPACE):
                    continue
                raise ValueError(f"{record_label(path, number, None)}, line {line_no}: expected a header "
                                 f"starting with '@', found {_shown(header)}")
            _check_ascii(path, number, None, header, "header")
            name = header[1:].decode("ascii").rstrip()
            # -- sequence lines, up to the '+' line
            parts: list[bytes] = []
            while True:
                raw = next(lines, None)
                if raw is None:
                    what = "'+' separator" if parts else "sequence"
                    detail = f" (after {len(parts)} sequence lines)" if len(parts) > 1 else ""
                    raise ValueError(f"{record_label(path, number, name)}: truncated record: the file ends before "
                                     f"its {what} line{detail}")
                line_no += 1
                line = raw
                if line[:1] == b"+":
                    break
                if line[:1] == b"@":  # never a nucleotide: the next header, so this record lacks its '+' line
                    expected = "the '+' separator" if parts else "a sequence line"
                    raise ValueError(f"{record_label(path, number, name)}, line {line_no}: expected {expected}, "
                                     f"found {_shown(line)}")
                _check_ascii(path, number, name, line, "sequence")
                parts.append(line)
            _check_ascii(path, number, name, line, "'+'")
            title = line[1:].rstrip(WHITESPACE)
            if title and title != header[1:].rstrip(WHITESPACE):
                raise ValueError(f"{record_label(path, number, name)}, line {line_no}: the '+' line names "
                                 f"{shown_text(title.decode('latin-1'))}; it must be empty or repeat the header")
            sequence = parts[0] if len(parts) == 1 else b"".join(parts)
            # -- quality lines, until the quality is as long as the sequence
            raw = next(lines, None)
            if raw is None:
                raise ValueError(f"{record_label(path, number, name)}: truncated record: the file ends before its "
                                 "quality line")
            line_no += 1
            quality = raw
            if not sequence and quality[:1] == b"@":  # an empty read whose quality line was left out (Biopython)
                pending, quality = quality, b""
            _check_ascii(path, number, name, quality, "quality")
            if len(quality) < len(sequence):
                more = [quality]
                total = len(quality)
                while total < len(sequence):
                    raw = next(lines, None)
                    if raw is None:
                        break
                    line_no += 1
                    line = raw
                    if line[:1] == b"@" and total + len(line) > len(sequence):
                        pending = line  # the next record's header (line_no already counts it)
                        break
                    _check_ascii(path, number, name, line, "quality")
                    more.append(line)
                    total += len(line)
                quality = b"".join(more)
            if len(sequence) != len(quality):
                raise ValueError(f"{record_label(path, number, name)}: the sequence has {len(sequence)} letters but "
                                 f"the quality has {len(quality)}")
            yield name, sequence, quality
            number += 1
            last_name = name
    except DECOMPRESSION_ERRORS as exc:
        raise damaged_stream_error(path, number, last_name, exc) from None


def _python_fasta(path: Path, handle: IO[bytes]) -> Iterator[tuple[str, bytes, None]]:
    """Records of a FASTA stream: (name, sequence, None), dnaio's reading of the format (module docstring)."""
    name: str | None = None
    number = -1  # the record being read
    parts: list[bytes] = []
    last_name: str | None = None
    try:
        for line_no, raw in enumerate(_lines(handle), 1):
            if line_no == 1:
                raw = raw.removeprefix(BOM)
            line = raw.strip(WHITESPACE)
            if not line:
                continue
            lead = line[0]
            if lead == 62:  # '>'
                if name is not None:
                    yield name, b"".join(parts), None
                    last_name = name
                number += 1
                _check_ascii(path, number, None, line, "header")
                name, parts = line[1:].decode("ascii"), []
            elif lead == 35:  # '#': a comment
                continue
            elif name is None:
                raise ValueError(f"{path}: line {line_no}: expected a '>' header before the first sequence, "
                                 f"found {_shown(line)}")
            else:
                _check_ascii(path, number, name, line, "sequence")
                parts.append(line)
        if name is not None:
            yield name, b"".join(parts), None
    except DECOMPRESSION_ERRORS as exc:
        raise damaged_stream_error(path, number if name is not None else 0, last_name, exc) from None


def python_records(path: Path, fmt: str, batch_size: int, *, skip: int = 0,
                   four_line_prefix: bool = False) -> Iterator[RawRecords]:
    """The pure-Python parser: batches of raw records of a FASTA/FASTQ file (plain or gzip), from record ``skip``
    on. The records before it are parsed and checked, not handed over; with ``four_line_prefix`` (FASTQ whose
    first ``skip`` records dnaio read: plain 4-line records) they are skipped line by line, unparsed."""
    with open_binary(path) as handle:
        if fmt == "fastq" and four_line_prefix and skip:
            records = _python_fastq(path, handle, skip_four_line=skip)
            skip_parsed = 0
        else:
            records = (_python_fastq if fmt == "fastq" else _python_fasta)(path, handle)
            skip_parsed = skip
        batch: list[tuple[str, bytes, bytes | None]] = []
        first = skip
        for index, item in enumerate(records):
            if index < skip_parsed:
                continue
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
