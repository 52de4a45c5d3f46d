"""Relative random-walk probabilities (RRWP) of GRIT (Ma et al., "Graph Inductive Biases in Transformers without
Message Passing", ICML 2023; ``grit/transform/rrwp.py``): for every pair of nodes ``(i, j)`` of a graph, the
probabilities of walking from ``i`` to ``j`` in ``0, 1, ..., K - 1`` steps,

    ``[I, M, M^2, ..., M^(K-1)]_ij``,  ``M = D^-1 A``  (row ``i``: the steps out of ``i``; isolated rows 0),

stored sparsely over the pairs where one of the ``K`` values is non-zero (``j`` reachable from ``i`` in fewer than
``K`` steps, including ``j = i``); pairs never cross graphs of a batch. The node feature is the diagonal,
``[1, M_ii, (M^2)_ii, ...]``. ``M`` follows the same conventions as :func:`omnipos.graph.random_walk_pe`: edges as
given (directed lists give directed walks), weighted (``M_ij = w_ij / sum_j w_ij``; GRIT's code reads
``edge_weight`` the same way), self-loops are steps, duplicate edges add up, zero-weight edges drop out. A pair is
kept when its float64 value is non-zero (GRIT: ``SparseTensor.from_dense`` of the float32 values), so a walk
probability below 1e-308 counts as unreachable.

Solvers, per graph by node count (a graph gets the same bits alone and in any batch): up to
``dense_max_nodes`` nodes, ``[c, n, n]`` float64 matrix powers of a size group (NumPy on the CPU); bigger graphs,
sparse products of blocks of rows of ``M`` (SciPy; memory proportional to the output). Output order is GRIT's:
pairs sorted by ``(i, j)``, i.e. graph by graph, row by row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..core import allocation_guard, check_positive_int, progress_reporter
from ._input import MAX_ELEMENTS, check_dense_size, check_graph, check_output_size, size_groups
from .walks import (
    SparseTransitions,
    chunk_size,
    dense_transitions,
    numpy_path,
    sparse_transitions,
    transition_weights,
)

__all__ = ["rrwp", "RRWP_DENSE_MAX_NODES"]

#: Graphs with more nodes than this take the sparse path.
RRWP_DENSE_MAX_NODES = 256
# Entries (over the K powers) per block of rows on the sparse path.
_BLOCK_ENTRIES = 1 << 22


def _dense_pairs(transition: Any, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(slot, i, j, values [P, k])`` of the non-zero pairs of ``[I, P, ..., P^(k-1)]`` of ``transition
    [c, n, n]`` (a float64 NumPy array or tensor), sorted by (slot, i, j); values float32."""
    n = transition.shape[-1]
    if isinstance(transition, np.ndarray):
        stacked = np.empty((*transition.shape, k), dtype=np.float32)
        reached = np.broadcast_to(np.eye(n, dtype=bool), transition.shape).copy()
    else:
        stacked = transition.new_empty((*transition.shape, k), dtype=torch.float32)
        reached = torch.eye(n, dtype=torch.bool, device=transition.device).expand_as(transition).clone()
    stacked[..., 0] = 0.0
    stacked[..., 0][reached] = 1.0
    power = transition
    for a in range(1, k):
        if a > 1:
            power = power @ transition
        stacked[..., a] = power
        reached |= power != 0  # (in float64: a pair whose probability rounds to 0 in float32 is still kept)
    if isinstance(transition, np.ndarray):
        slot, i, j = (torch.from_numpy(index) for index in np.nonzero(reached))
        return slot, i, j, torch.from_numpy(stacked[reached])
    slot, i, j = reached.nonzero(as_tuple=True)
    return slot, i, j, stacked[reached]


def _sparse_pairs(t: SparseTransitions, k: int, report: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(i, j, values [P, k])`` (renumbered nodes of ``t``), sorted by (i, j)."""
    import scipy.sparse as sp

    rows_out, cols_out, values_out = [], [], []
    size = min(t.n, 256)
    r0 = 0
    while r0 < t.n:
        r1 = min(t.n, r0 + size)
        b = r1 - r0
        power = sp.csr_matrix((np.ones(b), np.arange(r0, r1), np.arange(b + 1)), shape=(b, t.n))
        powers = [power]
        for _ in range(1, k):
            power = power @ t.matrix
            power.sort_indices()
            powers.append(power)
        keys = [p.indices + t.n * np.repeat(np.arange(b), np.diff(p.indptr)) for p in powers]
        union = np.unique(np.concatenate(keys))
        values = np.zeros((union.size, k), dtype=np.float32)
        for a, (p, key) in enumerate(zip(powers, keys)):
            values[np.searchsorted(union, key), a] = p.data
        rows_out.append(union // t.n + r0)
        cols_out.append(union % t.n)
        values_out.append(values)
        report.update(b)
        entries = sum(p.nnz for p in powers)
        size = max(1, min(4 * size, _BLOCK_ENTRIES * b // max(entries, 1)))
        r0 = r1
    return np.concatenate(rows_out), np.concatenate(cols_out), np.concatenate(values_out)


def rrwp(
    edge_index: Any,
    num_nodes: int,
    walk_length: int = 8,
    *,
    batch: Any = None,
    edge_weight: Any = None,
    dense_max_nodes: int = RRWP_DENSE_MAX_NODES,
    progress: Any = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GRIT's relative random-walk probabilities of a graph or of a PyG batch of graphs.

    Args:
        edge_index: ``[2, E]`` integer node pairs; ``i -> j`` is a possible step.
        num_nodes: ``N``, total number of nodes (of all graphs of the batch).
        walk_length: ``K``, the number of channels: powers ``0..K-1`` of ``M`` (GRIT's ``walk_length``).
        batch: ``[N]`` non-decreasing graph id per node (PyG's ``batch``); ``None`` = one graph.
        edge_weight: ``[E]`` finite, non-negative weights (default 1).
        dense_max_nodes: graphs with more nodes use the sparse path.
        progress: ``True``, a callable ``(done_nodes, total_nodes)`` or ``None``.

    Returns:
        ``pair_index [2, P]`` int64 (global node ids; sorted by source then target), ``pair_pe [P, K]`` float32
        (``(M^a)_ij`` in channel ``a``), ``node_pe [N, K]`` float32 (the diagonal, channel 0 is 1), on the
        input's device.
    """
    k = check_positive_int(walk_length, "walk_length")
    dense_max_nodes = check_positive_int(dense_max_nodes, "dense_max_nodes")
    g = check_graph(edge_index, num_nodes, batch, edge_weight)
    check_output_size(g, "walk_length", k, k)
    device = g.device
    parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (graph, i, j, values)
    big = g.counts > dense_max_nodes
    with progress_reporter(progress, total=g.num_nodes, desc="rrwp", name="progress") as report:
        if bool(big.any()):
            walks = sparse_transitions(g, big, symmetric_form=False)
            i, j, values = _sparse_pairs(walks, k, report)
            nodes = walks.nodes.to(device)
            i, j = nodes[torch.from_numpy(i).to(device)], nodes[torch.from_numpy(j).to(device)]
            graph = g.batch[i]
            parts.append((graph, i - g.ptr[graph], j - g.ptr[graph], torch.from_numpy(values).to(device)))
        for group in size_groups(transition_weights(g, edge_weight is not None)):
            if group.n == 0 or group.n > dense_max_nodes:
                continue
            check_dense_size(group, g, dense_max_nodes, "transition matrix")
            stacked = min(group.graphs.numel(), chunk_size(group.n, device)) * group.n * group.n * k
            if stacked > MAX_ELEMENTS:
                raise ValueError(f"walk_length={k} on graphs of {group.n} nodes (a [graphs, {group.n}, {group.n}, "
                                 f"{k}] block of powers) does not fit in memory: at most {MAX_ELEMENTS:,} elements")
            for graphs, transition in dense_transitions(group):
                slot, i, j, values = (t.to(device) for t in _dense_pairs(transition, k))
                if slot.numel() and int(slot[-1]) >= graphs.numel():  # padding graphs of a device chunk
                    keep = slot < graphs.numel()
                    slot, i, j, values = slot[keep], i[keep], j[keep], values[keep]
                parts.append((graphs[slot], i, j, values))
                report.update(graphs.numel() * group.n)
    return _merge(parts, g.ptr, g.num_graphs, g.num_nodes, k)


def _merge(parts: list[tuple[torch.Tensor, ...]], ptr: torch.Tensor, num_graphs: int, num_nodes: int,
           k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Put the pairs of all parts in GRIT's order. Each part holds whole graphs, in increasing graph order, each
    graph's pairs sorted by (i, j): a pair's place is its graph's offset plus its rank inside its graph. On the
    CPU in NumPy (its scatters into preallocated arrays are ~2x faster than torch's index_copy_ here)."""
    device = ptr.device
    cpu = numpy_path(device)
    if cpu:
        parts = [tuple(t.numpy() for t in part) for part in parts]
        ptr = ptr.numpy()
    total = sum(part[0].shape[0] for part in parts)
    new = (lambda shape, dtype: np.empty(shape, dtype=dtype)) if cpu else \
        (lambda shape, dtype: torch.empty(shape, dtype=dtype, device=device))
    long, single = (np.int64, np.float32) if cpu else (torch.long, torch.float32)
    bincount = np.bincount if cpu else torch.bincount
    counts = sum((bincount(part[0], minlength=num_graphs) for part in parts), 0 * ptr[1:])
    offsets = counts.cumsum(0) - counts
    with allocation_guard(f"the {total:,} node pairs of walk_length={k} ([2, P] and [P, {k}])"):
        pair_index, pair_pe = new((2, total), long), new((total, k), single)
    node_pe = new((num_nodes, k), single)
    node_pe[:] = 0
    for graph, i, j, values in parts:
        part_counts = bincount(graph, minlength=num_graphs)
        shift = offsets - (part_counts.cumsum(0) - part_counts)  # per graph: its place minus its place here
        arange = np.arange(graph.shape[0]) if cpu else torch.arange(graph.shape[0], device=device)
        position = shift[graph] + arange
        rows = ptr[graph] + i
        pair_index[0, position] = rows
        pair_index[1, position] = rows - i + j
        pair_pe[position] = values
        diagonal = i == j
        node_pe[rows[diagonal]] = values[diagonal]
    if cpu:
        return torch.from_numpy(pair_index), torch.from_numpy(pair_pe), torch.from_numpy(node_pe)
    return pair_index, pair_pe, node_pe
