"""dnaio integration (extra ``[dna]``): the fast FASTA/FASTQ parser under :func:`omnipos.dna.read_fastx`.

dnaio is imported here only, when first needed. Its format errors are turned into omnipos' ``ValueError``
naming the record: the pure-Python parser re-reads the file up to the bad record, so both parsers report a
malformed file in the same words (dnaio's own message stays attached as the cause).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from .fastx import RawRecords, python_records

__all__ = ["require_dnaio", "dnaio_records"]


def require_dnaio():
    """Return the ``dnaio`` module, or raise ImportError naming the extra to install."""
    try:
        import dnaio
    except ImportError as exc:
        raise ImportError("the dnaio parser needs dnaio: pip install 'omnipos[dna]' (or use parser='python')") \
            from exc
    return dnaio


def dnaio_records(path: Path, fmt: str, batch_size: int) -> Iterator:
    """Batches of raw records (:class:`omnipos.dna.fastx.RawRecords`) parsed by dnaio."""
    dnaio = require_dnaio()
    first = 0
    try:
        with dnaio.open(path, fileformat=fmt, mode="r") as reader:
            iterator = iter(reader)  # once: dnaio's FASTA reader hands out a fresh generator per iter()
            while records := list(islice(iterator, batch_size)):
                names = [r.name for r in records]
                sequences = [r.sequence for r in records]
                qualities = [r.qualities for r in records] if fmt == "fastq" else None
                yield RawRecords(first, names, sequences, qualities)
                first += len(records)
    except (dnaio.exceptions.FileFormatError, UnicodeDecodeError) as exc:  # FASTA: non-ASCII -> UnicodeDecodeError
        for _ in python_records(path, fmt, batch_size):  # raises the ValueError naming the record
            pass
        raise ValueError(f"{path}: record {first + 1} or later: {exc}") from exc
