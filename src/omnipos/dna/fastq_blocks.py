"""The block FASTQ parser: ``read_fastx``'s fast path for plain 4-line FASTQ, with numba (extra ``[fast]``).

The file is read a block (4 MiB) at a time and one compiled pass (:mod:`omnipos.dna.fastq_kernels`) copies each
record's sequence and quality out back to back, looking the token ids up on the way, so a batch reaches
:func:`omnipos.dna.reads.assemble` as joined arrays: no Python object per sequence or quality, one per name. It is
a fast path, not a third definition of the format: it takes only plain 4-line records (``@name`` / sequence /
``+`` / quality, LF line ends, ASCII, quality as long as the sequence) and stops at the first record that is
anything else (a wrapped record, a ``+`` line repeating the name, CR line ends, blank lines, a byte-order mark,
a damaged gzip stream; a byte-order mark is no '@'), handing over to the parsers behind it from the first record of the batch not yet handed
out, exactly as the dnaio path does (:class:`BlockStopped`). Without numba (or with ``OMNIPOS_DISABLE_NUMBA=1``)
``read_fastx`` uses dnaio or the reference parser, which give the same batches.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from ..core import compiled_kernels_enabled
from .fastx import WHITESPACE, RawRecords, is_gzip

__all__ = ["BLOCK", "LAYOUT_ROWS", "BlockStopped", "Packed", "block_kernels", "block_records"]

BLOCK = 1 << 22  # bytes read at a time (a record longer than a block grows the buffer to hold it)
LAYOUT_ROWS = 1 << 15  # records located per kernel call
_SPACE = np.zeros(256, dtype=np.bool_)  # what str.rstrip() removes from an ASCII name
_SPACE[np.frombuffer(WHITESPACE, dtype=np.uint8)] = True


class BlockStopped(Exception):
    """The block parser could not go on; ``done`` records were handed over before it stopped."""

    def __init__(self, done: int, cause: BaseException | str) -> None:
        super().__init__(f"the block parser stopped after {done} records: {cause}")
        self.done, self.cause = done, cause


@dataclass
class Packed:
    """One batch's records as joined arrays: ``data`` (the sequences' letters back to back, or empty when not
    asked for), ``codes`` (their token ids under ``table``, every letter valid: a batch with an invalid one is
    read by the reference), ``scores`` (the quality characters; ``assemble`` turns them into
    Phred scores in place), ``lengths [B]`` int64."""

    data: np.ndarray
    codes: np.ndarray
    scores: np.ndarray
    lengths: np.ndarray
    table: np.ndarray


def block_kernels() -> ModuleType | None:
    """:mod:`omnipos.dna.fastq_kernels`, or None where numba is missing or switched off."""
    if not compiled_kernels_enabled():
        return None
    try:
        from . import fastq_kernels
    except ImportError:
        return None
    return fastq_kernels


@dataclass
class _Segment:
    """Consecutive parsed records (views into one block's outputs)."""

    names: list[str]
    data: np.ndarray
    codes: np.ndarray
    scores: np.ndarray
    lengths: np.ndarray

    def split(self, count: int) -> tuple[_Segment, _Segment]:
        cut = int(self.lengths[:count].sum())
        letters = self.data.size > 0
        return (_Segment(self.names[:count], self.data[:cut] if letters else self.data, self.codes[:cut],
                         self.scores[:cut], self.lengths[:count]),
                _Segment(self.names[count:], self.data[cut:] if letters else self.data, self.codes[cut:],
                         self.scores[cut:], self.lengths[count:]))


def _join(segments: list[_Segment]) -> _Segment:
    if len(segments) == 1:
        return segments[0]
    return _Segment([n for s in segments for n in s.names],
                    *(np.concatenate([getattr(s, f) for s in segments]) for f in ("data", "codes", "scores",
                                                                                  "lengths")))


def block_records(path: Path, batch_size: int, table: np.ndarray, letters: bool = False) -> Iterator[RawRecords]:
    """Batches of ``batch_size`` records (the last one shorter) of a FASTQ file, as :class:`RawRecords` whose
    ``packed`` holds the joined arrays (token ids looked up in ``table``; the letters themselves with ``letters``,
    or where some letter is invalid, else an empty ``data``). Raises :class:`BlockStopped` (with the number of
    records handed out, always a whole number of batches) at the first record it does not read."""
    kernels = block_kernels()
    if kernels is None:
        raise BlockStopped(0, "numba is not available")
    done = 0
    with (gzip.open(path, "rb") if is_gzip(path) else open(path, "rb", buffering=0)) as handle:
        buffer = bytearray(BLOCK)
        layout = np.empty((LAYOUT_ROWS, 5), dtype=np.int64)
        have = 0  # bytes of buffer holding data (the start of a record not yet parsed, then the new block)
        pending: list[_Segment] = []
        waiting = 0  # records in pending
        try:
            while True:
                if len(buffer) - have < BLOCK // 2:  # a record longer than the room left: grow
                    buffer.extend(bytes(max(len(buffer), BLOCK)))
                view = memoryview(buffer)
                got = handle.readinto(view[have:len(buffer) - 1])  # room for the sentinel
                view.release()
                final = not got
                have += got or 0
                buffer[have] = 10  # a LF after the data: the kernel's line scans need no bounds check
                arr = np.frombuffer(buffer, dtype=np.uint8, count=have + 1)
                start, status = 0, 0
                while True:  # a layout's worth of records at a time
                    count, pos, status = kernels.scan_records(arr, start, have, final, layout)
                    first = 0
                    while first < count:  # gathered a batch at a time: its arrays are still in cache for assemble
                        last = min(count, first + batch_size - waiting)
                        waiting += _gather(kernels, arr, layout[first:last], table, letters, pending, done)
                        first = last
                        if waiting == batch_size:
                            batch, done, waiting = _take(pending, batch_size), done + batch_size, 0
                            yield _raw(done - batch_size, batch, table)
                    if status or pos >= have or count < len(layout):
                        break
                    start = pos
                del arr
                if status == kernels.IRREGULAR:
                    rest = bytes(buffer[pos:have])
                    if final and not rest.strip(WHITESPACE):
                        break  # blank lines at the end of the file: the reference skips them too
                    raise BlockStopped(done, f"record {done + waiting + 1} is not a plain 4-line record")
                if final:
                    break
                buffer[:have - pos] = buffer[pos:have]  # the unfinished record moves to the front
                have -= pos
            if waiting:
                yield _raw(done, _take(pending, waiting), table)
        except BlockStopped:
            raise
        except Exception as exc:  # any failure of the fast path goes to the parsers behind it
            raise BlockStopped(done, exc) from exc


def _gather(kernels: ModuleType, arr: np.ndarray, layout: np.ndarray, table: np.ndarray, letters: bool,
            pending: list[_Segment], done: int) -> int:
    """Copy the records of ``layout`` (rows of :func:`~omnipos.dna.fastq_kernels.scan_records`) out of ``arr``
    into a new segment of ``pending``; returns how many."""
    count = len(layout)
    used = int(layout[:, 3].sum())
    data = np.empty(used if letters else 0, dtype=np.uint8)
    codes = np.empty(used, dtype=np.uint8)
    scores = np.empty(used, dtype=np.uint8)
    names = np.empty(int(layout[-1, 1] - layout[0, 0]) + 2, dtype=np.uint8)  # the names and a LF each
    flags, used, named = kernels.gather_records(arr, layout, count, table, _SPACE, data, codes, scores, names)
    if flags & 1:  # an invalid letter: the reference reads the batch, and names it
        raise BlockStopped(done, "an invalid letter")
    text = names[:named].tobytes().decode("ascii").split("\n")
    text.pop()  # after the last LF
    if flags & 2:
        text = [n.rstrip() for n in text]
    pending.append(_Segment(text, data, codes, scores, layout[:count, 3].copy()))
    return count


def _take(pending: list[_Segment], count: int) -> _Segment:
    """The first ``count`` records of ``pending`` (removed from it)."""
    parts, left = [], count
    while left:
        segment = pending[0]
        if len(segment.names) <= left:
            parts.append(pending.pop(0))
            left -= len(segment.names)
        else:
            head, pending[0] = segment.split(left)
            parts.append(head)
            left = 0
    return _join(parts)


def _raw(first: int, segment: _Segment, table: np.ndarray) -> RawRecords:
    return RawRecords(first, segment.names, None, None,  # type: ignore[arg-type]
                      packed=Packed(segment.data, segment.codes, segment.scores, segment.lengths, table))
