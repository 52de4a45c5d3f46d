"""A torch ``IterableDataset`` of reads from FASTA/FASTQ files, and the collate that batches them again.

Files are parsed in chunks by :func:`read_fastx` (fast) and handed out one read at a time, so a ``DataLoader``
with ``collate_fn=collate_reads`` can batch and pad them; or, with ``batch_size=`` and/or ``max_tokens=``, as ready
batches of reads of similar length (length-bucketed: each bucket of ``bucket_size`` reads is sorted by length and
cut into batches of at most ``batch_size`` reads and ``max_tokens`` padded positions), so short reads are padded
only to their neighbours' length and one long read pads a batch of its own size, not a whole batch. With
several workers each worker takes every ``num_workers``-th chunk of each file, so every read is seen once per
epoch. A damaged gzip stream or malformed record stops the epoch with the ValueError of :func:`read_fastx`,
naming the file and the record.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from ..core import check_positive_int, pad_ragged
from .alphabet import PAD
from .reads import ReadBatch, ReadOptions, read_fastx

__all__ = ["FastxDataset", "collate_reads"]



class FastxDataset(IterableDataset):
    """Reads of one or more FASTA/FASTQ files (plain or gzip), one item per read, or length-bucketed batches.

    Args:
        paths: a file or a list of files, read in order.
        chunk_size: records parsed and encoded at a time.
        batch_size: None (default, and no ``max_tokens``): items are single reads, for a
            ``DataLoader(..., collate_fn=collate_reads)``. An int: items are :class:`ReadBatch` es of up to
            ``batch_size`` reads of similar length (use ``DataLoader(dataset, batch_size=None)``).
        max_tokens: cap on a batch's padded size, reads x longest read (fairseq's ``max_tokens``): a batch of
            long reads holds fewer of them; a read longer than ``max_tokens`` is a batch of its own.
        bucket_size: with batches, how many reads are sorted by length at a time (default ``64 * batch_size``,
            or 4096 with ``max_tokens`` alone); larger buckets pad less, and hold more reads in memory.
        options, **read_keywords: how reads are read, a :class:`omnipos.dna.ReadOptions` and/or its fields as
            keywords, as in :func:`omnipos.dna.read_fastx`.

    Single-read items are dicts ``{"name": str, "tokens": [L] token_dtype, "quality": [L] uint8 or None,
    "record": int, "offset": int, "rna": bool or None, "quality_offset": int or None, "quality_encoding": str or
    None}`` (``record``/``offset``: where the read sits in its file; the quality keys: as in ``ReadBatch``).
    """

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike], options: ReadOptions | None = None,
                 *, chunk_size: int = 4096, batch_size: int | None = None, max_tokens: int | None = None,
                 bucket_size: int | None = None, **read_keywords: Any) -> None:
        super().__init__()
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        if not isinstance(paths, Sequence) or not all(isinstance(p, (str, os.PathLike)) for p in paths):
            raise TypeError("paths must be a path or a list of paths")
        self.paths = [os.fspath(p) for p in paths]
        if not self.paths:
            raise ValueError("paths is empty: give at least one FASTA/FASTQ file")
        self.chunk_size = check_positive_int(chunk_size, "chunk_size")
        self.batch_size = None if batch_size is None else check_positive_int(batch_size, "batch_size")
        self.max_tokens = None if max_tokens is None else check_positive_int(max_tokens, "max_tokens")
        self.batched = self.batch_size is not None or self.max_tokens is not None
        if bucket_size is not None and not self.batched:
            raise ValueError("bucket_size applies to batches: pass batch_size= or max_tokens= too")
        self.bucket_size = (check_positive_int(bucket_size, "bucket_size") if bucket_size is not None
                            else None if not self.batched else 64 * self.batch_size if self.batch_size else 4096)
        self.options = ReadOptions.of(options, "FastxDataset", **read_keywords)  # bad options refused now
        for path in self.paths:  # and missing files and parsers, not in a worker
            read_fastx(path, self.options, batch_size=self.chunk_size)

    def _reads(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for path in self.paths:
            for index, batch in enumerate(read_fastx(path, self.options, batch_size=self.chunk_size)):
                if index % workers != worker:
                    continue
                lengths = batch.lengths.tolist()
                tokens = batch.tokens[batch.mask].split(lengths)
                qualities = (batch.qualities[batch.mask].split(lengths) if batch.qualities is not None
                             else [None] * len(lengths))
                rna = batch.rna.tolist() if batch.rna is not None else [None] * len(lengths)
                for name, t, q, record, offset, flag in zip(batch.names, tokens, qualities, batch.records.tolist(),
                                                            batch.offsets.tolist(), rna):
                    yield {"name": name, "tokens": t, "quality": q, "record": record, "offset": offset,
                           "rna": flag, "quality_offset": batch.quality_offset,
                           "quality_encoding": batch.quality_encoding}

    def __iter__(self) -> Iterator[dict[str, Any]] | Iterator[ReadBatch]:
        if not self.batched:
            yield from self._reads()
            return
        bucket: list[dict[str, Any]] = []
        for item in self._reads():
            bucket.append(item)
            if len(bucket) == self.bucket_size:
                yield from self._batches(bucket)
                bucket = []
        if bucket:
            yield from self._batches(bucket)

    def _batches(self, bucket: list[dict[str, Any]]) -> Iterator[ReadBatch]:
        lengths = np.fromiter((len(item["tokens"]) for item in bucket), dtype=np.int64, count=len(bucket))
        rows = self.batch_size or len(bucket)
        tokens = self.max_tokens
        group: list[int] = []
        for i in np.argsort(lengths, kind="stable").tolist():  # ascending: the newest read is the longest
            if group and (len(group) == rows or (tokens is not None and (len(group) + 1) * lengths[i] > tokens)):
                yield collate_reads([bucket[j] for j in group])
                group = []
            group.append(i)
        if group:
            yield collate_reads([bucket[j] for j in group])

    def __repr__(self) -> str:
        batching = (f", batch_size={self.batch_size}, max_tokens={self.max_tokens}, bucket_size={self.bucket_size}"
                    if self.batched else "")
        return f"FastxDataset({self.paths}, chunk_size={self.chunk_size}{batching}, " + \
            ", ".join(f"{k}={v!r}" for k, v in self.options.keywords().items()) + ")"


def collate_reads(items: Sequence[dict[str, Any]]) -> ReadBatch:
    """Items of :class:`FastxDataset` -> one padded :class:`ReadBatch` (padding through ``core.batching``).

    Tokens keep their dtype (uint8 by default); ``records``/``offsets``/``rna`` are filled when the items carry
    them."""
    if not isinstance(items, Sequence) or isinstance(items, (str, bytes)):
        raise TypeError(f"items must be a list of FastxDataset items, got {type(items).__name__}")
    if not items:
        raise ValueError("items is empty: nothing to collate")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not {"name", "tokens", "quality"} <= set(item):
            raise TypeError(f"items[{i}] must be a dict with 'name', 'tokens' and 'quality' (a FastxDataset item)")
    tokens, mask = pad_ragged([item["tokens"] for item in items], PAD)
    has_quality = [item["quality"] is not None for item in items]
    if any(has_quality) and not all(has_quality):
        raise ValueError("items mix FASTQ reads (with quality) and FASTA reads (without)")
    qualities = pad_ragged([item["quality"] for item in items], 0)[0] if all(has_quality) else None
    lengths = mask.sum(1)

    def column(key: str, dtype: torch.dtype) -> torch.Tensor | None:
        values = [item.get(key) for item in items]
        return None if any(v is None for v in values) else torch.tensor(values, dtype=dtype)

    def shared(key: str) -> Any:  # None when the items came from files read differently (qualities are Phred)
        values = {item.get(key) for item in items}
        return values.pop() if len(values) == 1 else None

    return ReadBatch([item["name"] for item in items], tokens, mask, lengths, qualities,
                     column("record", torch.int64), column("offset", torch.int64), column("rna", torch.bool),
                     shared("quality_offset"), shared("quality_encoding"))
