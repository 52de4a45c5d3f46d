"""What the lazy datasets over a job's shards share: the shard cache, the item index, and cutting rows to a
``max_len`` (:class:`ShardedDataset`, :func:`row_windows`).

A dataset reads the manifest when it is built and a shard when an item of it is first asked for; the most
recently used shards stay in memory while their parsed size fits ``cache_bytes`` (default
:data:`DEFAULT_CACHE_BYTES`, 256 MiB; or the ``cache_shards`` most recent, the older count-only setting), so
iterating a job costs a few shards and one batch of memory, whatever the job's longest item. Pickling drops the
cache: each ``DataLoader`` worker opens the shards it needs itself, and holds a cache of its own (a forked worker
starts with a copy of the main process's cache as it stood when the loader started).

Shuffling: ``DataLoader(dataset, shuffle=True)`` draws items from the whole job at random, so once the job's
parsed shards outgrow the cache nearly every item reads, checks and parses a whole shard again. Pass
``sampler=dataset.sampler(shuffle=True, seed=...)`` instead (:class:`omnipos.scale.sampler.ShardSampler`): shards in
a random order, items shuffled within a window of shards that fits the cache, each shard read once per epoch.
"""

from __future__ import annotations

import operator
import os
import sys
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from omnipos.core import check_choice, check_positive_int

from .manifest import Manifest, MetaSchema, read_verified
from .sampler import ShardSampler

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "TRUNCATIONS",
    "ShardCache",
    "ShardedDataset",
    "check_index",
    "check_truncation",
    "cut",
    "gather_windows",
    "nbytes_of",
    "row_windows",
]

TRUNCATIONS = ("error", "head", "tail", "split")
DEFAULT_CACHE_BYTES = 256 * 2**20
"""The parsed shards a lazy dataset keeps by default, per process (each ``DataLoader`` worker has its own)."""


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


def nbytes_of(obj: Any, _seen: set | None = None) -> int:
    """Estimated memory held by a parsed shard: NumPy arrays and tensors by their buffers (a tensor's storage
    once), Python strings, bytes and numbers by ``sys.getsizeof``, containers and plain objects (``__dict__``, or
    PyG's ``to_dict()``) by their contents; classes count nothing."""
    seen = set() if _seen is None else _seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, torch.Tensor):
        try:
            storage = obj.untyped_storage()
            key = ("storage", storage.data_ptr())
            if key in seen:
                return 0
            seen.add(key)
            return int(storage.nbytes())
        except (RuntimeError, NotImplementedError):  # sparse and other layouts without one storage
            return obj.numel() * obj.element_size()
    if isinstance(obj, (str, bytes, int, float, complex, bool, type(None), type)):
        return 0 if isinstance(obj, type) else sys.getsizeof(obj)
    if isinstance(obj, (list, tuple, set, frozenset)):
        if set(map(type, obj)) <= {str, bytes, int, float, bool, type(None)}:  # columns of names: no recursion
            return sys.getsizeof(obj) + sum(map(sys.getsizeof, obj))
        return sys.getsizeof(obj) + sum(nbytes_of(value, seen) for value in obj)
    if isinstance(obj, dict):
        return sys.getsizeof(obj) + sum(nbytes_of(value, seen) for value in obj.values())
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return nbytes_of(to_dict(), seen)
    if hasattr(obj, "__dict__"):
        return nbytes_of(vars(obj), seen)
    return sys.getsizeof(obj)


class ShardCache:
    """The parsed shards a dataset keeps, least recently used out first: while they hold more than ``max_bytes``
    (:func:`nbytes_of`) or more than ``max_shards`` shards (None: no such limit), but never fewer than ``keep``
    (at least the shard just read, whatever its size). Counts what it did: :meth:`info`."""

    def __init__(self, max_bytes: int | None, max_shards: int | None, keep: int = 1) -> None:
        self.max_bytes, self.max_shards, self.keep = max_bytes, max_shards, max(int(keep), 1)
        self._entries: OrderedDict[int, tuple[Any, int]] = OrderedDict()
        self.bytes = 0
        self.parses = self.hits = self.evictions = 0
        self.ratio = 0.0  # the largest (parsed bytes / file bytes) seen: how a shard's file predicts its memory

    def __contains__(self, index: int) -> bool:
        return index in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, index: int) -> Any:
        """Shard ``index`` parsed, now the most recently used (it must be in the cache)."""
        self._entries.move_to_end(index)
        self.hits += 1
        return self._entries[index][0]

    def put(self, index: int, entry: Any, file_bytes: int) -> None:
        """Keep ``entry``, the shard ``index`` just parsed from ``file_bytes`` bytes; evict what is over."""
        size = nbytes_of(entry)
        self._entries[index] = (entry, size)
        self.bytes += size
        self.parses += 1
        if file_bytes > 0:
            self.ratio = max(self.ratio, size / file_bytes)
        while len(self._entries) > self.keep and (
                (self.max_shards is not None and len(self._entries) > self.max_shards)
                or (self.max_bytes is not None and self.bytes > self.max_bytes)):
            _, (_, dropped) = self._entries.popitem(last=False)
            self.bytes -= dropped
            self.evictions += 1

    def info(self) -> dict[str, Any]:
        """``{"parses", "hits", "evictions", "shards", "bytes", "max_bytes", "max_shards", "keep"}``: shards
        parsed (read from their file), items served from a cached shard, shards dropped, what is held now and
        the limits. Per process: a ``DataLoader`` worker counts in its own copy."""
        return {"parses": self.parses, "hits": self.hits, "evictions": self.evictions, "shards": len(self),
                "bytes": self.bytes, "max_bytes": self.max_bytes, "max_shards": self.max_shards, "keep": self.keep}


class ShardedDataset(torch.utils.data.Dataset):
    """A map-style dataset over the shards of a finished job of ``kind``: the manifest, the LRU shard cache and
    the item index. ``_parse(payload, shard)`` (a subclass's) turns a shard's bytes into what ``_item`` reads;
    the bytes reach it checked by :func:`omnipos.scale.manifest.read_verified` (a regular file, its size by
    ``fstat`` before any read, then its checksum), and ``_parse`` checks their structure (item count, lengths).

    Items are rows of the shards in shard order; ``rows`` (optional: an array of global row numbers) keeps a
    subset of them, and ``windows`` (from :func:`row_windows` over the kept rows) cuts them.

    The cache (:class:`ShardCache`): ``cache_bytes`` (default None: :data:`DEFAULT_CACHE_BYTES`, or no byte limit
    when ``cache_shards`` is given) bounds the parsed shards' memory, ``cache_shards`` (default None: no limit)
    their count; a sampler's window (:meth:`sampler`) is kept whatever the limits. Shuffle with :meth:`sampler`,
    not ``DataLoader(shuffle=True)`` (see the module)."""

    kind = ""
    what = "items"
    meta_schema: MetaSchema | None = None  # what the subclass uses of the manifest's meta, checked on reading it
    parsed_per_file_byte = 1.25
    """Memory of a parsed shard per byte of its file, until one is parsed here (then the largest ratio seen): a
    subclass's estimate for its format (1.01 measured for PyG graph shards; this default leaves a margin)."""

    def __init__(self, out_dir: str | os.PathLike, *, verify: bool = True, cache_shards: int | None = None,
                 cache_bytes: int | None = None) -> None:
        self.out_dir = Path(out_dir)
        self.manifest = Manifest.read(self.out_dir, self.kind, self.meta_schema)
        self.shards = self.manifest.shards()
        self.offsets = np.cumsum([0] + [int(shard["items"]) for shard in self.shards]).astype(np.int64)
        self.verify = bool(verify)
        self.cache_shards = None if cache_shards is None else check_positive_int(cache_shards, "cache_shards")
        if cache_bytes is not None:
            self.cache_bytes: int | None = check_positive_int(cache_bytes, "cache_bytes")
        else:
            self.cache_bytes = DEFAULT_CACHE_BYTES if self.cache_shards is None else None
        self.cache_keep = 1  # shards the cache keeps whatever its limits: the largest window of a sampler made here
        self._rows: np.ndarray | None = None  # kept global rows (None: all)
        self._windows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._cache = self._new_cache()

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
            return self._cache.get(index)
        entry = self._parse(read_verified(self.manifest.out_dir, self.shards[index], self.verify), index)
        self._cache.put(index, entry, int(self.shards[index]["bytes"]))
        return entry

    def _new_cache(self) -> ShardCache:
        return ShardCache(self.cache_bytes, self.cache_shards, self.cache_keep)

    def cache_info(self) -> dict[str, Any]:
        """What this process's shard cache did and holds (:meth:`ShardCache.info`): ``parses`` counts shard
        reads. A ``DataLoader`` worker has its own copy of the dataset, and counts its own."""
        return self._cache.info()

    def item_bounds(self) -> np.ndarray:
        """``bounds[s]``: the first item of shard ``s``; ``bounds[-1]``: ``len(self)`` (items follow the shards,
        so the items of shard ``s`` are ``bounds[s]:bounds[s + 1]``)."""
        if self._windows is not None:
            rows = self._windows[0] if self._rows is None else self._rows[self._windows[0]]
        else:
            rows = self._rows
        if rows is None:
            return self.offsets.copy()
        shard_of = np.searchsorted(self.offsets, rows, side="right") - 1
        return np.searchsorted(shard_of, np.arange(len(self.shards) + 1), side="left").astype(np.int64)

    def estimated_shard_bytes(self) -> int:
        """Estimated memory of the largest shard parsed: its file's bytes times the largest parsed/file ratio
        seen in this process (before any, the class's :attr:`parsed_per_file_byte`)."""
        largest = max((int(shard["bytes"]) for shard in self.shards), default=0)
        ratio = self._cache.ratio or self.parsed_per_file_byte
        return int(largest * ratio) + 1

    def default_window(self) -> int:
        """The window :meth:`sampler` uses unless told: the shards the cache holds (``cache_shards``, and as many
        of the largest shard as ``cache_bytes`` holds, :meth:`estimated_shard_bytes`), at least 1 and at most the
        shard count."""
        limits = [max(len(self.shards), 1)]
        if self.cache_shards is not None:
            limits.append(self.cache_shards)
        if self.cache_bytes is not None:
            limits.append(self.cache_bytes // self.estimated_shard_bytes())
        return max(min(limits), 1)

    def sampler(self, shuffle: bool = True, seed: int | None = None, *, window: int | None = None,
                num_replicas: int = 1, rank: int = 0, even: str | None = None, batch_size: int | None = None,
                num_workers: int = 0) -> ShardSampler:
        """A :class:`omnipos.scale.sampler.ShardSampler` over this dataset's items, for
        ``DataLoader(dataset, batch_size=..., sampler=dataset.sampler(shuffle=True, seed=0))``: shards in a random
        order, items shuffled within ``window`` shards (default :meth:`default_window`: as many as the cache
        holds), so a shuffled epoch reads each shard once; every item once per epoch, the same order for the same
        seed and epoch, a new order each epoch (``set_epoch``). ``shuffle=False``: the items in order.

        The cache keeps at least ``window`` shards from now on, whatever ``cache_bytes`` / ``cache_shards`` say
        (a smaller cache would read a shard again for most items of a window); so do the ``DataLoader`` workers'
        copies, made when the loader starts its workers. ``num_replicas`` / ``rank`` / ``even``: distributed
        training; ``batch_size`` / ``num_workers``: the loader's, so that each worker reads its own shards (see
        :mod:`omnipos.scale.sampler`)."""
        window = self.default_window() if window is None else check_positive_int(window, "window")
        sampler = ShardSampler(self.item_bounds(), shuffle=shuffle, seed=seed, window=window,
                               num_replicas=num_replicas, rank=rank, even=even, batch_size=batch_size,
                               num_workers=num_workers)
        if shuffle:
            self.cache_keep = max(self.cache_keep, window)
            self._cache.keep = max(self._cache.keep, window)
        return sampler

    def _parse(self, payload: bytes, index: int) -> Any:  # pragma: no cover - every subclass has its own
        raise NotImplementedError

    def __getitem__(self, index: Any) -> Any:
        shard, row, start, size = self.locate(index)
        return self._item(self.shard(shard), row, start, size)

    def _item(self, parsed: Any, row: int, start: int | None, size: int | None) -> Any:  # pragma: no cover
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = self._new_cache()  # DataLoader workers start with an empty cache and open files themselves
        return state

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({len(self)} {self.what} in {len(self.shards)} shards, "
                f"out_dir={str(self.out_dir)!r})")
