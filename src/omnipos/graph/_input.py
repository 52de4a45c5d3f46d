"""Validation of graph inputs shared by the graph encodings: edge lists, weights and PyG batch vectors.

A batch of graphs is PyG's layout: node ``i`` belongs to graph ``batch[i]``, ``batch`` is non-decreasing, so the
nodes of graph ``g`` are ``ptr[g] .. ptr[g + 1] - 1``; every edge joins two nodes of one graph.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from ..core import check_finite, check_integer_tensor, check_positive_int

T = TypeVar("T")

#: Largest number of graphs (``max(batch) + 1``) and of output elements an encoding allocates; above this the
#: call is refused with a ValueError naming the argument instead of reaching the allocator.
MAX_ELEMENTS = 2 ** 30

# Why CPU work runs on worker threads. torch pins MKL to torch.get_num_threads() threads *in the thread that set
# it* (the main thread, at import) with MKL's dynamic adjustment off, so every LAPACK/BLAS call there, however
# tiny, opens an OpenMP team. The graph encodings are many tiny calls (one eigh per 20-node graph): on a 2-core
# machine shared with other processes that made a 10k-graph batch 8-20x slower than single-threaded (eigh
# 8.7 s vs 0.39 s of CPU, random walk 3.5 s vs 0.41 s). Run from any other thread, the same calls use one
# thread each and cost what they cost single-threaded. So the encodings run their CPU work on a private worker
# thread (and split batches of independent LAPACK calls over several), instead of changing torch's thread
# count, which is process-global and visible to every other thread.
_POOLS: dict[str, ThreadPoolExecutor] = {}
_POOL_PID = [0]
_POOL_LOCK = threading.Lock()
_WORKER = threading.local()


def _pool(kind: str) -> ThreadPoolExecutor:
    """The private pool ``"call"`` (bodies of encoding calls) or ``"leaf"`` (independent pieces that never wait
    on other tasks, so a call waiting on leaves cannot deadlock); recreated after a fork (its threads are gone)."""
    with _POOL_LOCK:
        if _POOL_PID[0] != os.getpid():
            _POOLS.clear()
            _POOL_PID[0] = os.getpid()
        pool = _POOLS.get(kind)
        if pool is None:
            workers = 32 if kind == "call" else max(1, os.cpu_count() or 1)
            pool = ThreadPoolExecutor(workers, thread_name_prefix=f"omnipos-graph-{kind}",
                                      initializer=_mark_worker)
            _POOLS[kind] = pool
        return pool


def _mark_worker() -> None:
    _WORKER.active = True


def _device_of(like: Any) -> torch.device:
    if isinstance(like, torch.Tensor):
        return like.device
    return torch.device(like if isinstance(like, (str, torch.device)) else "cpu")


def run_cpu_work(like: Any, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, on an omnipos worker thread when ``like`` (a tensor or device; anything else counts
    as CPU) is on the CPU and the caller is not one already (see the comment above ``_POOLS``). Exceptions
    propagate unchanged; nothing process-global is changed."""
    if _device_of(like).type != "cpu" or getattr(_WORKER, "active", False):
        return fn(*args, **kwargs)
    return _pool("call").submit(fn, *args, **kwargs).result()


def parallel_map(fn: Callable[[Any], T], items: Sequence[Any], workers: int) -> list[T]:
    """``[fn(x) for x in items]`` with up to ``workers`` of them at once on leaf worker threads (for calls that
    release the GIL, e.g. LAPACK); ``fn`` must not itself wait on other pool tasks."""
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    return list(_pool("leaf").map(fn, items))


def cpu_parallelism() -> int:
    """How many independent CPU pieces a call may run at once: torch's intra-op thread count (read, never set)."""
    return max(1, torch.get_num_threads())


def check_not_meta(tensor: Any, name: str) -> None:
    """The encodings need the values of their inputs (eigen-decompositions, sorting checks): refuse meta tensors
    with a ValueError naming the argument (they carry only shapes)."""
    if isinstance(tensor, torch.Tensor) and tensor.device.type == "meta":
        raise ValueError(f"{name} is on the meta device (shape only, no values); graph encodings compute from the "
                         "values: pass a CPU or CUDA tensor")


@dataclass(frozen=True)
class GraphBatch:
    """Checked graph input. ``edge_weight`` is float64 (ones when none was given)."""

    edge_index: torch.Tensor  # [2, E] int64
    edge_weight: torch.Tensor  # [E] float64
    num_nodes: int
    batch: torch.Tensor  # [N] int64, non-decreasing
    counts: torch.Tensor  # [B] nodes per graph
    ptr: torch.Tensor  # [B + 1] first node of each graph

    @property
    def num_graphs(self) -> int:
        return int(self.counts.numel())

    @property
    def device(self) -> torch.device:
        return self.edge_index.device


def _as_tensor(value: Any, name: str, device: torch.device | None = None) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(np.asarray(value), device=device)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"{name} must be a tensor or array of numbers: {exc}") from None


def check_edge_index(edge_index: Any, num_nodes: int) -> torch.Tensor:
    """``[2, E]`` integer node pairs, each in ``0 .. num_nodes - 1`` -> int64 tensor on its device."""
    edge_index = _as_tensor(edge_index, "edge_index")
    check_integer_tensor(edge_index, "edge_index", "integer node indices")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
    edge_index = edge_index.long()
    if edge_index.numel():
        low, high = int(edge_index.min()), int(edge_index.max())
        if low < 0:
            row, e = (edge_index < 0).nonzero()[0].tolist()
            raise ValueError(f"edge_index must hold node indices >= 0, found {low} (edge_index[{row}, {e}])")
        if high >= num_nodes:
            row, e = (edge_index >= num_nodes).nonzero()[0].tolist()
            raise ValueError(f"edge_index refers to node {high} (edge_index[{row}, {e}]), but num_nodes={num_nodes} "
                             f"(valid: 0..{num_nodes - 1})")
    return edge_index


def check_edge_weight(edge_weight: Any, num_edges: int, device: torch.device) -> torch.Tensor:
    """``[E]`` finite, non-negative real weights -> float64 on ``device`` (ones when ``None``)."""
    if edge_weight is None:
        return torch.ones(num_edges, dtype=torch.float64, device=device)
    edge_weight = _as_tensor(edge_weight, "edge_weight", device)
    if edge_weight.dtype == torch.bool or edge_weight.is_complex():
        raise TypeError(f"edge_weight must be real numbers, got dtype {edge_weight.dtype}")
    if edge_weight.ndim == 2 and edge_weight.shape[1] == 1:
        edge_weight = edge_weight[:, 0]
    if edge_weight.shape != (num_edges,):
        raise ValueError(f"edge_weight must have shape [E] = [{num_edges}], got {tuple(edge_weight.shape)}")
    if edge_weight.device != device:
        raise ValueError(f"edge_weight is on {edge_weight.device} but edge_index is on {device}")
    check_finite(edge_weight, "edge_weight")
    if num_edges and float(edge_weight.min()) < 0:
        e = int((edge_weight < 0).nonzero()[0])
        raise ValueError(f"edge_weight must be >= 0, found {float(edge_weight[e])} at edge {e}")
    return edge_weight.to(torch.float64)


def check_graph(edge_index: Any, num_nodes: Any, batch: Any = None, edge_weight: Any = None) -> GraphBatch:
    """Validate a (batch of) graph(s) and precompute the per-graph node ranges."""
    num_nodes = check_positive_int(num_nodes, "num_nodes", minimum=0)
    for value, name in ((edge_index, "edge_index"), (batch, "batch"), (edge_weight, "edge_weight")):
        check_not_meta(value, name)
    edge_index = check_edge_index(edge_index, num_nodes)
    device = edge_index.device
    edge_weight = check_edge_weight(edge_weight, edge_index.shape[1], device)
    if batch is None:
        batch = torch.zeros(num_nodes, dtype=torch.long, device=device)
        counts = torch.tensor([num_nodes], device=device)
    else:
        batch = _as_tensor(batch, "batch", device)
        check_integer_tensor(batch, "batch", "integer graph ids")
        if batch.ndim != 1 or batch.shape[0] != num_nodes:
            raise ValueError(f"batch must have shape [num_nodes] = [{num_nodes}], got {tuple(batch.shape)}")
        if batch.device != device:
            raise ValueError(f"batch is on {batch.device} but edge_index is on {device}")
        batch = batch.long()
        if num_nodes:
            if int(batch.min()) < 0:
                raise ValueError(f"batch must hold graph ids >= 0, found {int(batch.min())}")
            if bool((batch[1:] < batch[:-1]).any()):
                bad = int((batch[1:] < batch[:-1]).nonzero()[0]) + 1
                raise ValueError(f"batch must be non-decreasing (PyG's layout: the nodes of each graph contiguous); "
                                 f"node {bad} has graph id {int(batch[bad])} after {int(batch[bad - 1])}")
            if int(batch[-1]) >= MAX_ELEMENTS:
                raise ValueError(f"batch holds graph id {int(batch[-1])}: at most {MAX_ELEMENTS} graphs per call "
                                 "(ids count graphs, empty ones included)")
            counts = torch.bincount(batch)
        else:
            counts = torch.zeros(1, dtype=torch.long, device=device)
        if edge_index.numel():
            src_graph, dst_graph = batch[edge_index[0]], batch[edge_index[1]]
            crossing = (src_graph != dst_graph).nonzero()
            if crossing.numel():
                e = int(crossing[0])
                raise ValueError(
                    f"edge {e} ({int(edge_index[0, e])} -> {int(edge_index[1, e])}) joins graph "
                    f"{int(src_graph[e])} to graph {int(dst_graph[e])}; batch is inconsistent with edge_index"
                )
    ptr = torch.zeros(counts.numel() + 1, dtype=torch.long, device=device)
    ptr[1:] = counts.cumsum(0)
    return GraphBatch(edge_index, edge_weight, num_nodes, batch, counts, ptr)


def check_steps(steps: Any) -> list[int]:
    """``steps``: an int S (meaning 1..S) or a non-empty sequence of positive ints (kept in the given order)."""
    if isinstance(steps, (int, np.integer)) and not isinstance(steps, bool):
        return list(range(1, check_positive_int(steps, "steps") + 1))
    if isinstance(steps, torch.Tensor):
        steps = steps.tolist()
    try:
        values = list(steps)
    except TypeError:
        raise TypeError(f"steps must be an int or a sequence of ints, got {type(steps).__name__}") from None
    if not values:
        raise ValueError("steps must not be empty")
    return [check_positive_int(s, "steps[]") for s in values]


@dataclass(frozen=True)
class SizeGroup:
    """The ``G`` graphs of one node count ``n`` and their edges, in local node numbering.

    ``slot[e]`` is edge ``e``'s graph's position in ``graphs``: ``(slot, row, col)`` index a ``[G, n, n]`` tensor.
    """

    n: int
    graphs: torch.Tensor  # [G] graph ids
    slot: torch.Tensor  # [E_n]
    row: torch.Tensor  # [E_n] local source node
    col: torch.Tensor  # [E_n] local target node
    weight: torch.Tensor  # [E_n] float64

    def dense(self) -> torch.Tensor:
        """The ``[G, n, n]`` float64 weighted adjacency (duplicate edges add up)."""
        adjacency = torch.zeros(self.graphs.numel(), self.n, self.n, dtype=torch.float64, device=self.graphs.device)
        return adjacency.index_put_((self.slot, self.row, self.col), self.weight, accumulate=True)

    def nodes(self, ptr: torch.Tensor) -> torch.Tensor:
        """Global node ids ``[G, n]`` of the group's graphs."""
        return ptr[self.graphs].unsqueeze(1) + torch.arange(self.n, device=ptr.device)

    def chunks(self, max_elements: int) -> list[SizeGroup]:
        """The group cut into consecutive runs of graphs whose ``[G', n, n]`` blocks hold at most
        ``max_elements`` elements each (at least one graph per chunk)."""
        per_chunk = max(1, max_elements // max(1, self.n * self.n))
        total = self.graphs.numel()
        if total <= per_chunk:
            return [self]
        out = []
        for lo in range(0, total, per_chunk):
            hi = min(lo + per_chunk, total)
            mine = (self.slot >= lo) & (self.slot < hi)
            out.append(SizeGroup(self.n, self.graphs[lo:hi], self.slot[mine] - lo, self.row[mine], self.col[mine],
                                 self.weight[mine]))
        return out

    def graph(self, slot: int) -> SizeGroup:
        """The group's ``slot``-th graph alone."""
        mine = self.slot == slot
        return SizeGroup(self.n, self.graphs[slot:slot + 1], torch.zeros_like(self.slot[mine]), self.row[mine],
                         self.col[mine], self.weight[mine])


def size_groups(g: GraphBatch, keep: torch.Tensor | None = None) -> list[SizeGroup]:
    """Split a batch into groups of equal node count with one sort of the graphs and one of the edges (no pass
    over all edges per group). ``keep``: optional ``[E]`` boolean selection of edges."""
    row, col, weight = g.edge_index[0], g.edge_index[1], g.edge_weight
    if keep is not None:
        row, col, weight = row[keep], col[keep], weight[keep]
    if g.num_graphs == 1:  # one graph (a transform on a single Data): nothing to sort
        graphs = torch.zeros(1, dtype=torch.long, device=g.device)
        return [SizeGroup(g.num_nodes, graphs, torch.zeros_like(row), row, col, weight)]
    edge_graph = g.batch[row]
    first = g.ptr[edge_graph]
    graph_order = torch.argsort(g.counts, stable=True)
    sizes, per_size = torch.unique_consecutive(g.counts[graph_order], return_counts=True)
    group_start = per_size.cumsum(0) - per_size
    rank = torch.empty_like(graph_order)
    rank[graph_order] = torch.arange(graph_order.numel(), device=g.device) - group_start.repeat_interleave(per_size)
    edge_size = g.counts[edge_graph]
    edge_order = torch.argsort(edge_size, stable=True)
    sorted_size = edge_size[edge_order]
    low = torch.searchsorted(sorted_size, sizes)
    high = torch.searchsorted(sorted_size, sizes, right=True)
    slot = rank[edge_graph][edge_order]
    row, col, weight = (row - first)[edge_order], (col - first)[edge_order], weight[edge_order]
    groups = []
    bounds = torch.stack([sizes, per_size, group_start, low, high]).tolist()  # one device sync
    for n, count, start, lo, hi in zip(*bounds):
        groups.append(SizeGroup(n, graph_order[start:start + count], slot[lo:hi], row[lo:hi], col[lo:hi],
                                weight[lo:hi]))
    return groups
