"""Shard-aware sampling for the lazy datasets: a shuffled epoch that reads each shard once.

A lazy dataset (:class:`omnipos.scale.ShardedReadsDataset`, ...) keeps a few parsed shards in memory. A fully
random order (``DataLoader(dataset, shuffle=True)``) touches a different shard at almost every item, so once the
job is larger than the cache every item costs a whole shard read, checksum and parse. :class:`ShardSampler`
shuffles at two levels instead: the shards in a random order, then the items within a *window* of a few
consecutive shards (of that order), so that a cache holding ``window`` shards reads each shard once per epoch.
The window bounds how far an item can move: items of one window are mixed uniformly; items of two windows never.

``DataLoader`` workers: the sampler runs in the main process and hands out indices; the ``DataLoader`` cuts them
into batches and gives batch ``j`` to worker ``j % num_workers``. With the plain order, consecutive batches of a
window go to different workers, and every worker reads every shard of the window (as in a sequential epoch with
workers: each shard is read once per worker). Give the sampler the loader's ``batch_size`` and ``num_workers`` and
it orders the batches so that each worker gets its own contiguous part of the epoch: each shard is read about once
in all (a shard cut between two workers' parts is read by both). This relies on the ``DataLoader`` handing out
batches round-robin, which it does (``torch.utils.data``'s multi-process iterator); were it not so, only the
number of shard reads would change, never which items an epoch holds.

Distributed training: ``num_replicas`` / ``rank`` give each rank a contiguous part of the epoch's shard order
(then shuffled within windows), so that each shard is read by about one rank. By default each item is in exactly
one rank's part, and the parts differ in length by at most one item. DDP needs the same number of batches on every
rank: ``even="pad"`` repeats items from the start of the epoch's order to make every part ``ceil(n / ranks)`` long
(``DistributedSampler(drop_last=False)``), ``even="drop"`` leaves the last ``n % ranks`` items of the epoch's order
out (``DistributedSampler(drop_last=True)``; which items differs each epoch).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from omnipos.core import check_choice, check_positive_int

__all__ = ["EVEN", "ShardSampler", "check_bounds", "epoch_order"]

EVEN = ("pad", "drop")


def check_bounds(bounds: Any) -> np.ndarray:
    """Item boundaries of the shards, as a sampler takes them: ``bounds[s]`` is the first item of shard ``s``
    and ``bounds[-1]`` the item count (a 1-D integer sequence starting at 0, never decreasing)."""
    array = np.asarray(bounds)
    if array.ndim != 1 or array.size < 1 or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"bounds must be a 1-D sequence of ints (first item of each shard, then the item count), "
                        f"got {array.dtype} of shape {array.shape}")
    array = array.astype(np.int64)
    if array[0] != 0 or (array.size > 1 and bool((np.diff(array) < 0).any())):
        raise ValueError(f"bounds must start at 0 and never decrease, got {array[:8].tolist()}"
                         f"{' ...' if array.size > 8 else ''}")
    return array


def _nonnegative_int(value: Any, name: str) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})") from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def _cut(run_starts: np.ndarray, run_sizes: np.ndarray, lo: int, hi: int) -> list[tuple[int, int]]:
    """The item ranges ``(start, stop)`` at positions ``[lo, hi)`` of the sequence made of the runs
    (``run_starts[r] ..run_starts[r] + run_sizes[r]``, each > 0), repeated as often as ``hi`` needs."""
    total = int(run_sizes.sum())
    if total == 0 or lo >= hi:
        return []
    ends = np.cumsum(run_sizes)
    begins = ends - run_sizes
    out: list[tuple[int, int]] = []
    while lo < hi:
        p = lo % total
        q = min(p + hi - lo, total)
        first = int(np.searchsorted(ends, p, side="right"))
        last = int(np.searchsorted(begins, q, side="left"))
        for r in range(first, last):
            a, b = max(p, int(begins[r])), min(q, int(ends[r]))
            out.append((int(run_starts[r]) + a - int(begins[r]), int(run_starts[r]) + b - int(begins[r])))
        lo += q - p
    return out


def _window_shuffle(runs: list[tuple[int, int]], window: int, rng: np.random.Generator | None) -> np.ndarray:
    """The items of ``runs`` in order, or (``rng``) shuffled within each block of ``window`` consecutive runs."""
    pieces = []
    for b in range(0, len(runs), window):
        items = np.concatenate([np.arange(a, z, dtype=np.int64) for a, z in runs[b:b + window]])
        pieces.append(items if rng is None else rng.permutation(items))
    return np.concatenate(pieces) if pieces else np.zeros(0, np.int64)


def _rank_span(count: int, num_replicas: int, rank: int, even: str | None) -> tuple[int, int]:
    """Positions ``[lo, hi)`` of the epoch's order that rank ``rank`` takes (``hi`` past ``count``: repeated)."""
    if even == "pad":
        per = -(-count // num_replicas)
        return rank * per, (rank + 1) * per
    if even == "drop":
        per = count // num_replicas
        return rank * per, (rank + 1) * per
    base, extra = divmod(count, num_replicas)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (rank < extra)


def epoch_order(bounds: Any, *, shuffle: bool = True, seed: int = 0, epoch: int = 0, window: int = 1,
                num_replicas: int = 1, rank: int = 0, even: str | None = None, batch_size: int | None = None,
                num_workers: int = 0) -> np.ndarray:
    """The item indices one rank visits in one epoch (int64), as :class:`ShardSampler` yields them.

    Shards (``bounds``: :func:`check_bounds`) in a random order drawn from ``(seed, epoch)`` (``shuffle=False``:
    in order); rank ``rank`` of ``num_replicas`` takes its contiguous part of that order (``even``: see the
    module); the part is cut into runs of one shard each, and the items of each block of ``window`` consecutive
    runs are shuffled (a generator drawn from ``(seed, epoch, rank)``). With ``batch_size`` and ``num_workers``
    > 1 the part is first divided among the workers, batch by batch, so that batch ``j`` of the result holds
    items of worker ``j % num_workers``'s own contiguous part (the last, shorter batch included)."""
    bounds = check_bounds(bounds)
    sizes = np.diff(bounds)
    count = int(bounds[-1])
    order = np.random.default_rng([seed, epoch]).permutation(sizes.size) if shuffle else np.arange(sizes.size)
    order = order[sizes[order] > 0]
    run_starts, run_sizes = bounds[order], sizes[order]
    lo, hi = _rank_span(count, num_replicas, rank, even)
    runs = _cut(run_starts, run_sizes, lo, hi)
    rng = np.random.default_rng([seed, epoch, rank]) if shuffle else None
    if batch_size is None or num_workers <= 1:
        return _window_shuffle(runs, window, rng)
    total = hi - lo
    full, rest = divmod(total, batch_size)
    counts = [full // num_workers + (w < full % num_workers) for w in range(num_workers)]
    lengths = [c * batch_size for c in counts]
    lengths[full % num_workers] += rest  # the short last batch goes to the worker whose turn it is
    starts = np.array([a for a, _ in runs], np.int64)
    spans = np.array([b - a for a, b in runs], np.int64)
    streams, position = [], 0
    for length in lengths:
        streams.append(_window_shuffle(_cut(starts, spans, position, position + length), window, rng))
        position += length
    batches = [streams[w][t * batch_size:(t + 1) * batch_size]
               for t in range(max(counts, default=0)) for w in range(num_workers) if t < counts[w]]
    if rest:
        w = full % num_workers
        batches.append(streams[w][counts[w] * batch_size:])
    return np.concatenate(batches) if batches else np.zeros(0, np.int64)


class ShardSampler(torch.utils.data.Sampler):
    """A ``torch.utils.data.Sampler`` over items stored in shards: a shuffled epoch reads each shard once.

    Shards come in a random order and items are shuffled within a window of ``window`` consecutive shards of that
    order (see the module), so a cache of ``window`` shards reads each shard once per epoch. Every item is visited
    exactly once per epoch (``even="pad"`` / ``"drop"`` aside, with ``num_replicas > 1``). Build it with
    ``dataset.sampler(...)`` (which sizes the window from the dataset's cache) and pass it as
    ``DataLoader(dataset, batch_size=..., sampler=...)``.

    Epochs: :meth:`set_epoch` fixes the epoch, as ``DistributedSampler``'s does (call it at the start of each
    epoch); until it is called, each pass over the sampler draws the next epoch (0, 1, 2, ...). Epoch ``e`` of
    seed ``s`` is the same order on every machine, in every run.

    Args:
        bounds: ``bounds[s]`` the first item of shard ``s``, ``bounds[-1]`` the item count (:func:`check_bounds`).
        shuffle: False: items in order (shard by shard), the window and seed unused.
        seed: the seed of every epoch's order (an int >= 0); None draws one from torch's global generator when
            the sampler is built (so ``torch.manual_seed`` fixes it); ``num_replicas > 1`` needs a seed given,
            the same on every rank.
        window: shards whose items are mixed together (>= 1).
        num_replicas, rank: distributed training: this rank's part of each epoch (see the module).
        even: None (each item exactly once across ranks; parts differ by at most one item), ``"pad"`` or
            ``"drop"`` (parts of equal length, by repeating or leaving out up to ``num_replicas - 1`` items).
        batch_size, num_workers: the ``DataLoader``'s, given together: order the batches so that each worker
            reads its own shards (see the module). ``shuffle=False`` then yields each worker's part in order, its
            batches interleaved.
    """

    def __init__(self, bounds: Any, *, shuffle: bool = True, seed: int | None = None, window: int = 1,
                 num_replicas: int = 1, rank: int = 0, even: str | None = None, batch_size: int | None = None,
                 num_workers: int = 0) -> None:
        self.bounds = check_bounds(bounds)
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be a bool, got {type(shuffle).__name__} ({shuffle!r})")
        self.shuffle = shuffle
        self.window = check_positive_int(window, "window")
        self.num_replicas = check_positive_int(num_replicas, "num_replicas")
        self.rank = _nonnegative_int(rank, "rank")
        if self.rank >= self.num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas={self.num_replicas}), got {self.rank}")
        if even is not None:
            check_choice(even, "even", EVEN)
        self.even = even
        if seed is None:
            if self.num_replicas > 1 and shuffle:
                raise ValueError("num_replicas > 1 needs seed= (an int, the same on every rank: each rank draws "
                                 "the same shard order and takes its part of it)")
            seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
        self.seed = _nonnegative_int(seed, "seed")
        self.num_workers = _nonnegative_int(num_workers, "num_workers")
        if batch_size is not None:
            batch_size = check_positive_int(batch_size, "batch_size")
        if (batch_size is None) != (self.num_workers == 0):
            raise ValueError("batch_size= and num_workers= go together (the DataLoader's two values, so that each "
                             f"worker reads its own shards); got batch_size={batch_size}, "
                             f"num_workers={self.num_workers}")
        self.batch_size = batch_size
        self.epoch = 0
        self._advance = True  # each pass draws the next epoch until set_epoch is called

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s order for the following passes (as ``DistributedSampler.set_epoch``)."""
        self.epoch = _nonnegative_int(epoch, "epoch")
        self._advance = False

    def order(self, epoch: int | None = None) -> np.ndarray:
        """The items of epoch ``epoch`` (default: the next pass's) for this rank, without advancing."""
        epoch = self.epoch if epoch is None else _nonnegative_int(epoch, "epoch")
        return epoch_order(self.bounds, shuffle=self.shuffle, seed=self.seed, epoch=epoch, window=self.window,
                           num_replicas=self.num_replicas, rank=self.rank, even=self.even,
                           batch_size=self.batch_size, num_workers=self.num_workers)

    def __iter__(self) -> Iterator[int]:
        order = self.order()
        if self._advance:
            self.epoch += 1
        return iter(order.tolist())

    def __len__(self) -> int:
        lo, hi = _rank_span(int(self.bounds[-1]), self.num_replicas, self.rank, self.even)
        return hi - lo

    def __repr__(self) -> str:
        parts = [f"{len(self)} items in {self.bounds.size - 1} shards", f"shuffle={self.shuffle}"]
        if self.shuffle:
            parts += [f"seed={self.seed}", f"window={self.window}"]
        if self.num_replicas > 1:
            parts += [f"rank={self.rank}/{self.num_replicas}", f"even={self.even!r}"]
        if self.num_workers:
            parts += [f"batch_size={self.batch_size}", f"num_workers={self.num_workers}"]
        return f"ShardSampler({', '.join(parts)})"
