"""Validation of graph inputs shared by the graph encodings: edge lists, weights and PyG batch vectors.

A batch of graphs is PyG's layout: node ``i`` belongs to graph ``batch[i]``, ``batch`` is non-decreasing, so the
nodes of graph ``g`` are ``ptr[g] .. ptr[g + 1] - 1``; every edge joins two nodes of one graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..core import check_integer_tensor, check_positive_int

__all__ = ["MAX_ELEMENTS", "DENSE_MAX_ELEMENTS", "GraphBatch", "SizeGroup", "check_graph", "check_walk_length",
           "check_output_size", "check_dense_size", "size_groups"]

#: Largest number of nodes, of graph ids (``max(batch) + 1``, for outputs with a row per graph) and of output
#: elements a graph encoding allocates; above this the call is refused with a ValueError naming the argument
#: instead of reaching the allocator (issue 28: ``num_nodes=2**40`` on a 2-edge graph was a RuntimeError).
MAX_ELEMENTS = 2 ** 30
#: Largest dense ``[n, n]`` matrix of one graph (n = 11,585; 1 GiB in float64); beyond it, a graph within
#: ``dense_max_nodes`` is refused with a ValueError rather than sent to the allocator.
DENSE_MAX_ELEMENTS = 2 ** 27


@dataclass(frozen=True)
class GraphBatch:
    """Checked graph input, its graphs numbered ``0..B-1`` in order of the caller's graph ids (ids may skip
    numbers: graphs without nodes have no rows here and cost nothing). ``edge_weight`` is float64 (ones when none
    was given). ``graph_ids [B]``: the caller's id of each graph; ``num_graph_ids``: ``max(batch) + 1`` (1 without
    a batch), the rows of an output with one row per graph id (:meth:`rows_per_id`)."""

    edge_index: torch.Tensor  # [2, E] int64
    edge_weight: torch.Tensor  # [E] float64
    num_nodes: int
    batch: torch.Tensor  # [N] int64, non-decreasing, 0..B-1
    counts: torch.Tensor  # [B] nodes per graph
    ptr: torch.Tensor  # [B + 1] first node of each graph
    graph_ids: torch.Tensor  # [B] the caller's graph id of each graph
    num_graph_ids: int

    @property
    def num_graphs(self) -> int:
        return int(self.counts.numel())

    @property
    def device(self) -> torch.device:
        return self.edge_index.device

    def rows_per_id(self, values: torch.Tensor, fill: float | bool = 0) -> torch.Tensor:
        """Per-graph ``values [B, ...]`` -> ``[num_graph_ids, ...]`` (row ``graph_ids[b]`` is ``values[b]``;
        the ids no node has get ``fill``)."""
        if self.num_graph_ids == values.shape[0]:  # (ids 0..B-1, none skipped)
            return values
        out = values.new_full((self.num_graph_ids, *values.shape[1:]), fill)
        out[self.graph_ids] = values
        return out


def _as_tensor(value: Any, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    try:
        array = np.asarray(value)
        if array.dtype == object or array.dtype.kind in "USV":
            raise TypeError(f"dtype {array.dtype}")
        return torch.as_tensor(array)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"{name} must be a tensor or array of numbers ({exc})") from None


def _in_graph(batch: torch.Tensor | None, node: int) -> str:
    return "" if batch is None else f" of graph {int(batch[node])}"


def check_graph(edge_index: Any, num_nodes: Any, batch: Any = None, edge_weight: Any = None) -> GraphBatch:
    """The one door of every graph encoding: validate a (batch of) graph(s) and precompute the per-graph node
    ranges. Every error names the argument and, where there is one, the edge, node and graph (by the caller's
    id) at fault. Refused: meta tensors (the encodings read values), non-integer ids, ids outside
    ``0..num_nodes-1``, a mis-sized, unsorted or negative ``batch``, edges across graphs, NaN / infinite /
    negative weights, and ``num_nodes`` above ``MAX_ELEMENTS`` (before anything of that size is allocated)."""
    num_nodes = check_positive_int(num_nodes, "num_nodes", minimum=0)
    if num_nodes > MAX_ELEMENTS:
        raise ValueError(f"num_nodes={num_nodes} (values per node, a [num_nodes] batch vector) does not fit in "
                         f"memory: at most {MAX_ELEMENTS:,} nodes per call")
    for value, name in ((edge_index, "edge_index"), (batch, "batch"), (edge_weight, "edge_weight")):
        if isinstance(value, torch.Tensor) and value.device.type == "meta":
            raise ValueError(f"{name} is on the meta device (a meta tensor: a shape without values); the graph "
                             "encodings compute from the values: pass a CPU or CUDA tensor")
    edge_index = _as_tensor(edge_index, "edge_index")
    check_integer_tensor(edge_index, "edge_index", "integer node ids")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
    edge_index = edge_index.long()
    device = edge_index.device
    if batch is not None:
        batch = _as_tensor(batch, "batch")
        check_integer_tensor(batch, "batch", "integer graph ids")
        if batch.shape != (num_nodes,):
            raise ValueError(f"batch must hold one graph id per node, shape [num_nodes] = [{num_nodes}], got "
                             f"{tuple(batch.shape)}")
        if batch.device != device:
            raise ValueError(f"batch is on {batch.device} but edge_index is on {device}")
        batch = batch.long()
        if num_nodes and bool((batch[0] < 0) | (batch[1:] < batch[:-1]).any()):
            negative = (batch < 0).nonzero()
            if negative.numel():
                i = int(negative[0])
                raise ValueError(f"batch[{i}] = {int(batch[i])}: graph ids must be >= 0")
            i = int((batch[1:] < batch[:-1]).nonzero()[0]) + 1
            raise ValueError(f"batch must be non-decreasing (PyG's layout: the nodes of each graph together): node "
                             f"{i} has graph id {int(batch[i])} after graph id {int(batch[i - 1])}")
    if edge_index.shape[1]:
        low, high = torch.aminmax(edge_index)
        if int(low) < 0 or int(high) >= num_nodes:
            e = int(((edge_index < 0) | (edge_index >= num_nodes)).any(0).nonzero()[0])
            u, v = edge_index[:, e].tolist()
            wrong, other = (u, v) if not 0 <= u < num_nodes else (v, u)
            graph = _in_graph(batch, other) if 0 <= other < num_nodes else ""
            raise ValueError(f"edge_index[:, {e}] = ({u}, {v}){graph} names node {wrong}; node ids must be in "
                             f"0..{num_nodes - 1} (num_nodes={num_nodes})")
        if batch is not None:
            source, target = batch[edge_index[0]], batch[edge_index[1]]
            if not torch.equal(source, target):
                e = int((source != target).nonzero()[0])
                raise ValueError(f"edge_index[:, {e}] = ({int(edge_index[0, e])}, {int(edge_index[1, e])}) joins "
                                 f"graph {int(source[e])} to graph {int(target[e])}: batch is inconsistent with "
                                 "edge_index (every edge must stay inside one graph)")
    edge_weight = _check_edge_weight(edge_weight, edge_index, batch)
    if batch is None or not num_nodes:
        graph_ids = torch.zeros(1, dtype=torch.long, device=device)
        batch = graph_ids.expand(num_nodes)  # (a view: one graph costs no [num_nodes] vector)
        counts = torch.tensor([num_nodes], device=device)
    else:
        graph_ids, batch, counts = torch.unique_consecutive(batch, return_inverse=True, return_counts=True)
    ptr = torch.zeros(counts.numel() + 1, dtype=torch.long, device=device)
    torch.cumsum(counts, 0, out=ptr[1:])
    return GraphBatch(edge_index, edge_weight, num_nodes, batch, counts, ptr, graph_ids, int(graph_ids[-1]) + 1)


def _check_edge_weight(edge_weight: Any, edge_index: torch.Tensor, batch: torch.Tensor | None) -> torch.Tensor:
    """``[E]`` (or ``[E, 1]``) finite, non-negative real weights -> float64 ``[E]`` (ones when ``None``)."""
    num_edges, device = edge_index.shape[1], edge_index.device
    if edge_weight is None:
        return torch.ones(num_edges, dtype=torch.float64, device=device)
    edge_weight = _as_tensor(edge_weight, "edge_weight")
    if edge_weight.dtype == torch.bool or edge_weight.is_complex():
        raise TypeError(f"edge_weight must be real numbers, got dtype {edge_weight.dtype}")
    if edge_weight.ndim == 2 and edge_weight.shape[1] == 1:
        edge_weight = edge_weight[:, 0]
    if edge_weight.shape != (num_edges,):
        raise ValueError(f"edge_weight must have shape [E] = [{num_edges}], got {tuple(edge_weight.shape)}")
    if edge_weight.device != device:
        raise ValueError(f"edge_weight is on {edge_weight.device} but edge_index is on {device}")
    edge_weight = edge_weight.to(torch.float64)
    if edge_weight.numel() and not bool((torch.isfinite(edge_weight) & (edge_weight >= 0)).all()):
        e = int((~torch.isfinite(edge_weight) | (edge_weight < 0)).nonzero()[0])
        value = float(edge_weight[e])
        u, v = edge_index[:, e].tolist()
        must = "finite" if not np.isfinite(value) else ">= 0"
        raise ValueError(f"edge_weight[{e}] = {value} (edge {u} -> {v}{_in_graph(batch, u)}) must be {must}")
    return edge_weight


def check_walk_length(walk_length: Any, name: str = "walk_length") -> list[int]:
    """``walk_length``: an int S (steps 1..S) or a non-empty sequence of positive ints (kept in the given order).
    An int above ``MAX_ELEMENTS`` (that many output columns) is refused before its list is built."""
    if isinstance(walk_length, (int, np.integer)) and not isinstance(walk_length, bool):
        longest = check_positive_int(walk_length, name)
        if longest > MAX_ELEMENTS:
            raise ValueError(f"{name}={longest} ({longest} output columns per node) does not fit in memory: at "
                             f"most {MAX_ELEMENTS:,}; give a list of the step counts to keep")
        return list(range(1, longest + 1))
    if isinstance(walk_length, torch.Tensor):
        walk_length = walk_length.tolist()
    try:
        values = list(walk_length)
    except TypeError:
        raise TypeError(f"{name} must be an int or a sequence of ints, got {type(walk_length).__name__}") from None
    if not values:
        raise ValueError(f"{name} must not be empty")
    return [check_positive_int(s, f"{name}[]") for s in values]


def check_output_size(g: GraphBatch, name: str, value: Any, per_node: int, per_graph: int = 0) -> None:
    """Refuse (naming ``name=value``) outputs ``[N, per_node]`` and ``[num_graph_ids, per_graph]`` of more than
    ``MAX_ELEMENTS`` elements before allocating them."""
    if per_graph and g.num_graph_ids > MAX_ELEMENTS:
        raise ValueError(f"batch holds graph id {g.num_graph_ids - 1}: the per-graph outputs would have a row per "
                         f"id (empty graphs included); at most {MAX_ELEMENTS} graphs per call")
    elements = g.num_nodes * per_node + g.num_graph_ids * per_graph
    if elements > MAX_ELEMENTS:
        raise ValueError(f"{name}={value} asks for {elements:,} output elements for {g.num_nodes:,} nodes in "
                         f"{g.num_graph_ids:,} graphs; at most {MAX_ELEMENTS:,} per call (columns beyond a graph's "
                         "node count are zero padding)")


def check_dense_size(group: SizeGroup, g: GraphBatch, dense_max_nodes: int, what: str = "solve") -> None:
    """Refuse (naming ``dense_max_nodes`` and the graph) a dense ``[n, n]`` ``what`` beyond
    ``DENSE_MAX_ELEMENTS`` elements, before allocating it."""
    n = group.n
    if n * n > DENSE_MAX_ELEMENTS:
        raise ValueError(f"graph {int(g.graph_ids[group.graphs[0]])} has {n:,} nodes: its dense [n, n] {what} "
                         f"would need {n * n * 16 / 2 ** 30:.1f} GiB (at most {DENSE_MAX_ELEMENTS:,} elements); "
                         f"lower dense_max_nodes={dense_max_nodes} so that it takes the sparse path")


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
    if keep is not None and not bool(keep.all()):  # (all kept, the common case: no copies)
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
    edge_order = _edges_by_graph_size(edge_graph, graph_order, g.counts)
    sorted_size = g.counts[edge_graph[edge_order]]
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


def _edges_by_graph_size(edge_graph: torch.Tensor, graph_order: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """The stable order of the edges by their graph's node count, ``argsort(counts[edge_graph], stable=True)``.
    Where the edges come graph by graph (``edge_graph`` non-decreasing: PyG's collation) the same permutation
    is built from the graphs' edge ranges taken in ``graph_order`` (the stable order of the graphs by node
    count), without sorting the edges."""
    if edge_graph.numel() and bool((edge_graph[1:] >= edge_graph[:-1]).all()):
        edges_of = torch.zeros_like(counts).index_add_(0, edge_graph, torch.ones_like(edge_graph))
        lengths, starts = edges_of[graph_order], (edges_of.cumsum(0) - edges_of)[graph_order]
        shift = (lengths.cumsum(0) - lengths - starts).repeat_interleave(lengths, output_size=edge_graph.numel())
        return torch.arange(edge_graph.numel(), device=edge_graph.device) - shift
    return torch.argsort(counts[edge_graph], stable=True)
