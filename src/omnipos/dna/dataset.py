"""A torch ``IterableDataset`` of reads from a FASTA/FASTQ file, and the collate that batches them again.

Files are parsed in chunks by :func:`read_fastx` (fast) and handed out one read at a time, so a ``DataLoader``
with ``collate_fn=collate_reads`` can shuffle-buffer, batch and pad them. With several workers each worker takes
every ``num_workers``-th chunk of each file, so every read is seen once per epoch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from ..core import check_positive_int, pad_ragged
from .alphabet import PAD
from .reads import ReadBatch, read_fastx

__all__ = ["FastxDataset", "collate_reads"]


class FastxDataset(IterableDataset):
    """Reads of one or more FASTA/FASTQ files (plain or gzip), one item per read.

    Args:
        paths: a file or a list of files, read in order.
        chunk_size: reads parsed and encoded at a time.
        ambiguity, lowercase, parser, quality_offset: as in :func:`omnipos.dna.read_fastx`.

    Items are dicts ``{"name": str, "tokens": [L] int64, "quality": [L] uint8 or None}``.
    """

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike], *, chunk_size: int = 4096,
                 ambiguity: str = "keep", lowercase: str = "soft_mask", parser: str = "auto",
                 quality_offset: int = 33) -> None:
        super().__init__()
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self.paths = [os.fspath(p) for p in paths]
        if not self.paths:
            raise ValueError("paths is empty: give at least one FASTA/FASTQ file")
        self.chunk_size = check_positive_int(chunk_size, "chunk_size")
        self.options = dict(ambiguity=ambiguity, lowercase=lowercase, parser=parser, quality_offset=quality_offset)
        for path in self.paths:  # validate options and paths now, not in a worker
            read_fastx(path, batch_size=self.chunk_size, **self.options)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for path in self.paths:
            for index, batch in enumerate(read_fastx(path, batch_size=self.chunk_size, **self.options)):
                if index % workers != worker:
                    continue
                lengths = batch.lengths.tolist()
                tokens = batch.tokens[batch.mask].split(lengths)
                qualities = (batch.qualities[batch.mask].split(lengths) if batch.qualities is not None
                             else [None] * len(lengths))
                for name, t, q in zip(batch.names, tokens, qualities):
                    yield {"name": name, "tokens": t, "quality": q}

    def __repr__(self) -> str:
        return f"FastxDataset({self.paths}, chunk_size={self.chunk_size}, " + \
            ", ".join(f"{k}={v!r}" for k, v in self.options.items()) + ")"


def collate_reads(items: Sequence[dict[str, Any]]) -> ReadBatch:
    """Items of :class:`FastxDataset` -> one padded :class:`ReadBatch` (padding through ``core.batching``)."""
    if not items:
        raise ValueError("items is empty: nothing to collate")
    tokens, mask = pad_ragged([item["tokens"] for item in items], PAD)
    has_quality = [item["quality"] is not None for item in items]
    if any(has_quality) and not all(has_quality):
        raise ValueError("items mix FASTQ reads (with quality) and FASTA reads (without)")
    qualities = pad_ragged([item["quality"] for item in items], 0)[0] if all(has_quality) else None
    lengths = mask.sum(1)
    return ReadBatch([item["name"] for item in items], tokens, mask, lengths, qualities)
