"""dnaio integration (extra ``[dna]``): the fast FASTA/FASTQ parser under :func:`omnipos.dna.read_fastx`.

dnaio is imported here only, when first needed. It is a fast path, not a second definition of the format: the
pure-Python parser (:mod:`omnipos.dna.fastx`) is the reference, and :func:`omnipos.dna.read_fastx` re-reads with
it whatever dnaio refuses (a wrapped FASTQ, blank lines, a byte-order mark, a damaged gzip stream, a malformed
record), from the record where dnaio stopped. So both parsers give the same batches, and the same error in the
same words, on every file. Blank lines at the end of a plain FASTQ file, which the reference skips, are cut off
before dnaio reads it, so such a file needs no hand-over.

What dnaio reads directly it must read exactly like the reference; two differences are removed here: FASTQ names
lose their trailing whitespace (dnaio keeps it), and FASTA is handed to dnaio through a stream that refuses any
non-ASCII byte (dnaio's FASTA reader decodes UTF-8 and strips Unicode whitespace such as a no-break space, which
the reference refuses).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from itertools import islice
from operator import attrgetter
from pathlib import Path
from typing import IO

import numpy as np

from ..core import require
from .fastx import WHITESPACE, RawRecords, has_bom, open_binary

__all__ = ["require_dnaio", "dnaio_records", "DnaioStopped"]

# ASCII whitespace that str.rstrip() removes from a name (dnaio's FASTQ names are ASCII)
_SPACE_TABLE = np.zeros(256, dtype=bool)
_SPACE_TABLE[np.frombuffer(WHITESPACE, dtype=np.uint8)] = True
_SLICE = 512  # dnaio records alive at a time
_NAME, _SEQUENCE, _QUALITIES = attrgetter("name"), attrgetter("sequence"), attrgetter("qualities")

class DnaioStopped(Exception):
    """dnaio could not go on; ``done`` records were handed over before it stopped (the reference re-reads)."""

    def __init__(self, done: int, cause: BaseException) -> None:
        super().__init__(f"dnaio stopped after {done} records: {type(cause).__name__}: {cause}")
        self.done, self.cause = done, cause


def require_dnaio():
    """Return the ``dnaio`` module, or raise ImportError naming the extra to install."""
    return require("dnaio", "dna", "the dnaio parser", hint=" (or use parser='python')")


class _AsciiOnly(io.RawIOBase):
    """A binary stream that raises ValueError at the first non-ASCII byte."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self._raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._raw.read(len(buffer))
        if not data.isascii():
            raise ValueError("non-ASCII byte")
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _Prefix(io.RawIOBase):
    """The first ``size`` bytes of a binary stream."""

    def __init__(self, raw: IO[bytes], size: int) -> None:
        super().__init__()
        self._raw, self._left = raw, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._raw.read(min(len(buffer), self._left))
        self._left -= len(data)
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


def _end_before_blank_lines(handle: IO[bytes], size: int) -> int:
    """Where a plain FASTQ file's trailing blank lines begin: just after the line end of its last line with
    content; ``size`` when it has none. Those lines are whitespace only, which the reference skips (module
    docstring of :mod:`omnipos.dna.fastx`) and dnaio refuses; handing dnaio the bytes before them saves the
    reference re-reading the file to skip what dnaio read."""
    window = 1 << 16
    start = max(size - window, 0)
    handle.seek(start)
    tail = handle.read(size - start)
    handle.seek(0)
    kept = tail.rstrip(WHITESPACE)
    if not kept or len(kept) == len(tail):  # no trailing whitespace, or more than the window holds
        return size
    eol = tail.find(b"\n", len(kept))
    # the line with content must end at LF or CRLF right after it (anything else: dnaio and the reference decide)
    if eol < 0 or tail[len(kept):eol] not in (b"", b"\r"):
        return size
    if kept[kept.rfind(b"\n") + 1:].startswith(b"+"):  # a '+' line: the empty quality line of an empty read may
        following = tail.find(b"\n", eol + 1)         # follow, so it is kept (if it is not one, dnaio refuses)
        if following < 0 or tail[eol + 1:following] not in (b"", b"\r"):
            return size
        eol = following
    return start + eol + 1


def _source(path: Path, fmt: str) -> IO[bytes] | str:
    """What to hand dnaio: for FASTA, an ASCII-only stream opened by us; for gzip FASTQ, the path (dnaio's opener,
    xopen, gunzips in a thread, and sniffs the content when the name does not say gzip); for plain FASTQ, a
    stream opened by us (xopen would try to gunzip a plain file named ``.gz``), without trailing blank lines."""
    handle = open_binary(path)
    if fmt == "fasta":
        return io.BufferedReader(_AsciiOnly(handle))
    if isinstance(handle, io.BufferedReader):
        size = os.fstat(handle.fileno()).st_size
        end = _end_before_blank_lines(handle, size)
        return handle if end == size else io.BufferedReader(_Prefix(handle, end), buffer_size=1 << 17)
    handle.close()
    return str(path)


def _clean_names(names: list[str]) -> list[str]:
    """dnaio's names as the reference reads them: trailing whitespace stripped (dnaio keeps it; one vectorised look
    at each name's last character, a list pass only when some has it). A CR in a name is a line end to the
    reference (a lone CR, old Mac style), so dnaio's reading of the record is not the reference's: refused, for the
    reference to take over from this batch."""
    joined = "\n".join(names) + "\n"
    if "\r" in joined:
        raise ValueError("a CR in a FASTQ name: a line end to the reference parser")
    try:
        data = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
    except UnicodeEncodeError:
        return [n.rstrip() for n in names]
    # the character before each name's end (an empty name's is the previous LF, whitespace: a harmless strip)
    if _SPACE_TABLE[data[np.flatnonzero(data == 10) - 1]].any():
        return [n.rstrip() for n in names]
    return names


def dnaio_records(path: Path, fmt: str, batch_size: int) -> Iterator[RawRecords]:
    """Batches of raw records parsed by dnaio. Raises :class:`DnaioStopped` (with the number of records handed
    over) when dnaio refuses the rest of the file, for the reference parser to take over."""
    dnaio = require_dnaio()
    done = 0
    if has_bom(path):
        raise DnaioStopped(0, ValueError("a byte-order mark"))
    source = _source(path, fmt)
    try:
        with dnaio.open(source, fileformat=fmt, mode="r") as reader:
            iterator = iter(reader)  # once: dnaio's FASTA reader hands out a fresh generator per iter()
            while True:
                names: list[str] = []
                sequences: list[str] = []
                qualities: list[str] | None = [] if fmt == "fastq" else None
                # dnaio's records are tracked by Python's garbage collector and its strings are not: holding a
                # whole bucket of records (8,192, say) makes every older-generation collection walk them (4x the
                # parse time), so they are read a slice at a time and only their strings kept
                while len(names) < batch_size:
                    records = list(islice(iterator, min(_SLICE, batch_size - len(names))))
                    if not records:
                        break
                    names += map(_NAME, records)  # C-level attribute reads: ~20% under list comprehensions
                    sequences += map(_SEQUENCE, records)
                    if qualities is not None:
                        qualities += map(_QUALITIES, records)
                if not names:
                    break
                names = _clean_names(names)
                yield RawRecords(done, names, sequences, qualities)
                done += len(names)
    except Exception as exc:  # noqa: BLE001 - any refusal or failure of the fast path goes to the reference parser
        raise DnaioStopped(done, exc) from exc
    finally:
        if not isinstance(source, str):
            source.close()
