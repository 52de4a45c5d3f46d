"""What the lazy datasets over a job's shards share: the shard cache, the item index, and cutting rows to a
``max_len`` (:class:`ShardedDataset`, :func:`row_windows`).

A dataset reads the manifest when it is built and a shard when an item of it is first asked for; the
``cache_shards`` most recently used shards stay in memory, so iterating a job costs one shard and one batch of
memory, whatever the job's longest item. Pickling drops the cache: each ``DataLoader`` worker opens the shards it
needs itself.
"""

from __future__ import annotations

import operator
import os
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from omnipos.core import check_choice, check_positive_int

from .manifest import Manifest, MetaSchema, read_verified

__all__ = ["ShardedDataset", "TRUNCATIONS", "row_windows", "gather_windows", "check_index", "check_truncation",
           "cut"]

TRUNCATIONS = ("error", "head", "tail", "split")


def check_index(index: Any, count: int, what: str) -> int:
    """An item index as ``dataset[index]`` takes it: an int in ``[-count, count)``, made non-negative."""
    try:
        if isinstance(index, bool):
            raise TypeError
        index = operator.index(index)
    except TypeError:
        raise TypeError(f"index must be an int, got {type(index).__name__}") from None
    if not -count <= index < count:
        raise IndexError(f"index {index} is out of range for {count} {what}")
    return index % count


def check_truncation(max_len: Any, truncation: Any) -> int | None:
    """Validate ``max_len`` / ``truncation`` as the loaders take them (``truncation`` other than "error" needs a
    ``max_len``); returns ``max_len`` as an int or None."""
    check_choice(truncation, "truncation", TRUNCATIONS)
    if max_len is None:
        if truncation != "error":
            raise ValueError(f"truncation={truncation!r} needs max_len= (the length to cut items to)")
        return None
    return check_positive_int(max_len, "max_len")


def row_windows(lengths: np.ndarray, max_len: int | None, truncation: str,
                describe: Callable[[int], str]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The rows ``max_len`` / ``truncation`` make of items of ``lengths``: (item index, start, length) per row, or
    None when every item fits (or there is no ``max_len``). ``truncation="error"`` raises a ValueError naming the
    first item too long (``describe(i)``); ``"head"`` / ``"tail"`` keep its first / last ``max_len``; ``"split"``
    cuts it into windows of ``max_len`` (the last one shorter; an empty item stays one empty row)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if max_len is None or not lengths.size or int(lengths.max()) <= max_len:
        return None
    if truncation == "error":
        i = int(np.flatnonzero(lengths > max_len)[0])
        raise ValueError(f"{describe(i)} has {int(lengths[i]):,} entries, more than max_len={max_len:,}; pass "
                         "truncation='head', 'tail' or 'split' to cut it by name")
    if truncation in ("head", "tail"):
        index = np.arange(lengths.size)
        starts = np.maximum(lengths - max_len, 0) if truncation == "tail" else np.zeros_like(lengths)
        return index, starts, np.minimum(lengths, max_len)
    pieces = np.maximum(-(-lengths // max_len), 1)
    index = np.repeat(np.arange(lengths.size), pieces)
    first_row = np.cumsum(pieces) - pieces
    starts = (np.arange(index.size) - first_row[index]) * max_len
    return index, starts, np.minimum(lengths[index] - starts, max_len)


def cut(length: int, max_len: int | None, truncation: str, describe: Callable[[], str]) -> tuple[int, int]:
    """(start, length) of what ``max_len`` / ``truncation`` keep of one item of ``length`` (not "split", whose
    windows are items of their own: :func:`row_windows`)."""
    if max_len is None or length <= max_len:
        return 0, length
    if truncation == "error":
        raise ValueError(f"{describe()} has {length:,} entries, more than max_len={max_len:,}; pass "
                         "truncation='head', 'tail' or 'split' to cut it by name")
    return (length - max_len if truncation == "tail" else 0), max_len


def gather_windows(flat: np.ndarray, lengths: np.ndarray,
                   windows: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """The values of each window, joined: ``flat [sum lengths]`` -> ``[sum window lengths]``."""
    index, starts, sizes = windows
    read_starts = np.cumsum(lengths) - lengths
    shift = np.repeat(read_starts[index] + starts - (np.cumsum(sizes) - sizes), sizes)
    return flat[np.arange(int(sizes.sum()), dtype=np.int64) + shift]


class ShardedDataset(torch.utils.data.Dataset):
    """A map-style dataset over the shards of a finished job of ``kind``: the manifest, the LRU shard cache and
    the item index. ``_parse(payload, shard)`` (a subclass's) turns a shard's bytes into what ``_item`` reads;
    the bytes reach it checked by :func:`omnipos.scale.manifest.read_verified` (a regular file, its size by
    ``fstat`` before any read, then its checksum), and ``_parse`` checks their structure (item count, lengths).

    Items are rows of the shards in shard order; ``rows`` (optional: an array of global row numbers) keeps a
    subset of them, and ``windows`` (from :func:`row_windows` over the kept rows) cuts them."""

    kind = ""
    what = "items"
    meta_schema: MetaSchema | None = None  # what the subclass uses of the manifest's meta, checked on reading it

    def __init__(self, out_dir: str | os.PathLike, *, verify: bool = True, cache_shards: int = 2) -> None:
        self.out_dir = Path(out_dir)
        self.manifest = Manifest.read(self.out_dir, self.kind, self.meta_schema)
        self.shards = self.manifest.shards()
        self.offsets = np.cumsum([0] + [int(shard["items"]) for shard in self.shards]).astype(np.int64)
        self.verify = bool(verify)
        self.cache_shards = check_positive_int(cache_shards, "cache_shards")
        self._rows: np.ndarray | None = None  # kept global rows (None: all)
        self._windows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._cache: OrderedDict[int, Any] = OrderedDict()

    # -- the index
    def _select(self, rows: np.ndarray | None, windows: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> None:
        self._rows, self._windows = rows, windows

    @property
    def rows(self) -> int:
        """Rows kept (before windows)."""
        return int(self.offsets[-1]) if self._rows is None else int(self._rows.size)

    def __len__(self) -> int:
        return self.rows if self._windows is None else int(self._windows[0].size)

    def locate(self, index: Any) -> tuple[int, int, int | None, int | None]:
        """Item ``index`` -> (shard, row in the shard, start, length) (start/length None: the whole row)."""
        index = check_index(index, len(self), self.what)
        start = size = None
        if self._windows is not None:
            kept, starts, sizes = self._windows
            start, size = int(starts[index]), int(sizes[index])
            index = int(kept[index])
        row = index if self._rows is None else int(self._rows[index])
        shard = int(np.searchsorted(self.offsets, row, side="right")) - 1
        return shard, row - int(self.offsets[shard]), start, size

    def shard_paths(self) -> list[str]:
        return [str(self.manifest.out_dir / shard["name"]) for shard in self.shards]

    # -- the cache
    def shard(self, index: int) -> Any:
        """Shard ``index`` parsed, from the cache or the file."""
        if index in self._cache:
            self._cache.move_to_end(index)
            return self._cache[index]
        entry = self._parse(read_verified(self.manifest.out_dir, self.shards[index], self.verify), index)
        self._cache[index] = entry
        while len(self._cache) > self.cache_shards:
            self._cache.popitem(last=False)
        return entry

    def _parse(self, payload: bytes, index: int) -> Any:  # pragma: no cover - every subclass has its own
        raise NotImplementedError

    def __getitem__(self, index: Any) -> Any:
        shard, row, start, size = self.locate(index)
        return self._item(self.shard(shard), row, start, size)

    def _item(self, parsed: Any, row: int, start: int | None, size: int | None) -> Any:  # pragma: no cover
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = OrderedDict()  # DataLoader workers start with an empty cache and open files themselves
        return state

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({len(self)} {self.what} in {len(self.shards)} shards, "
                f"out_dir={str(self.out_dir)!r})")
