"""Validation of graph inputs shared by the graph encodings: edge lists, weights and PyG batch vectors.

A batch of graphs is PyG's layout: node ``i`` belongs to graph ``batch[i]``, ``batch`` is non-decreasing, so the
nodes of graph ``g`` are ``ptr[g] .. ptr[g + 1] - 1``; every edge joins two nodes of one graph.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..core import check_finite, check_integer_tensor, check_positive_int

#: Threads torch may use for the graph encodings' CPU work (``None``: leave torch's setting alone). The work is
#: many small LAPACK calls and batched ops on ``[G, n, n]`` blocks; with 2 threads on a 2-core machine shared
#: with other processes, OpenMP's synchronisation made a 10k-graph batch 6-9x slower than with 1 thread
#: (eigh 5.1 s vs 0.8 s, random walk 12.6 s vs 1.4 s), so the default is 1.
CPU_THREADS: int | None = 1


@contextmanager
def cpu_threads(like: Any) -> Iterator[int]:
    """Run the block with ``CPU_THREADS`` torch threads when ``like`` (a tensor or device; anything else counts
    as CPU) is on the CPU; torch's setting is restored afterwards. Yields the thread count torch had, i.e. the
    parallelism the caller allows (used for independent LAPACK calls on Python threads)."""
    device = like.device if isinstance(like, torch.Tensor) else torch.device(
        like if isinstance(like, (str, torch.device)) else "cpu")
    threads = torch.get_num_threads()
    if device.type != "cpu" or CPU_THREADS is None or threads == CPU_THREADS:
        yield threads
        return
    torch.set_num_threads(CPU_THREADS)
    try:
        yield threads
    finally:
        torch.set_num_threads(threads)


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
            raise ValueError(f"edge_index must hold node indices >= 0, found {low}")
        if high >= num_nodes:
            raise ValueError(f"edge_index refers to node {high}, but num_nodes={num_nodes} (valid: 0..{num_nodes - 1})")
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
        raise ValueError(f"edge_weight must be >= 0, found {float(edge_weight.min())}")
    return edge_weight.to(torch.float64)


def check_graph(edge_index: Any, num_nodes: Any, batch: Any = None, edge_weight: Any = None) -> GraphBatch:
    """Validate a (batch of) graph(s) and precompute the per-graph node ranges."""
    num_nodes = check_positive_int(num_nodes, "num_nodes", minimum=0)
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
                raise ValueError("batch must be non-decreasing (PyG's layout: the nodes of each graph contiguous)")
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
