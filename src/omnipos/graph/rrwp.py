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


def _dense_pairs(transition: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(slot, i, j, values [P, k])`` of the non-zero pairs of ``[I, P, ..., P^(k-1)]`` of ``transition
    [c, n, n]`` (a float64 tensor), sorted by (slot, i, j); values float32."""
    n = transition.shape[-1]
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
    slot, i, j = reached.nonzero(as_tuple=True)
    return slot, i, j, stacked[reached]


def _dense_runs(transition: np.ndarray, first: np.ndarray, k: int,
                node_pe: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_dense_pairs` on the CPU, in the form :func:`_merge_numpy` takes: ``(counts [c], rows [P],
    cols [P], values [P, k])`` for graphs whose first nodes are ``first [c]`` (pairs in global node ids, sorted
    by graph, row, column; ``counts``: pairs per graph); writes the graphs' diagonals into ``node_pe``. Whole
    rows are copied with ``np.compress`` (boolean indexing of the ``[c, n, n, k]`` block was 10x slower)."""
    n = transition.shape[-1]
    stacked = np.empty((*transition.shape, k), dtype=np.float32)
    reached = np.broadcast_to(np.eye(n, dtype=bool), transition.shape).copy()
    stacked[..., 0] = reached
    power = transition
    for a in range(1, k):
        if a > 1:
            power = power @ transition
        stacked[..., a] = power
        reached |= power != 0  # (in float64: a pair whose probability rounds to 0 in float32 is still kept)
    flat = reached.reshape(-1)
    nodes = first[:, None] + np.arange(n)
    rows = np.compress(flat, np.broadcast_to(nodes[:, :, None], transition.shape).reshape(-1))
    cols = np.compress(flat, np.broadcast_to(nodes[:, None, :], transition.shape).reshape(-1))
    diagonal = np.arange(n)
    node_pe[nodes.reshape(-1)] = stacked[:, diagonal, diagonal].reshape(-1, k)
    return reached.sum((1, 2)), rows, cols, np.compress(flat, stacked.reshape(-1, k), axis=0)


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
    cpu = numpy_path(device)
    parts: list[tuple[Any, ...]] = []  # (graph, i, j, values); on the CPU (graphs, counts, rows, cols, values)
    node_pe = np.zeros((g.num_nodes, k), dtype=np.float32) if cpu else None
    big = g.counts > dense_max_nodes
    with progress_reporter(progress, total=g.num_nodes, desc="rrwp", name="progress") as report:
        if bool(big.any()):
            walks = sparse_transitions(g, big, symmetric_form=False)
            i, j, values = _sparse_pairs(walks, k, report)
            nodes = walks.nodes.to(device)
            i, j = nodes[torch.from_numpy(i).to(device)], nodes[torch.from_numpy(j).to(device)]
            graph = g.batch[i]
            if cpu:
                graphs, counts = torch.unique_consecutive(graph, return_counts=True)
                rows, cols = i.numpy(), j.numpy()
                diagonal = rows == cols
                node_pe[rows[diagonal]] = values[diagonal]
                parts.append((graphs.numpy(), counts.numpy(), rows, cols, values))
            else:
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
                if cpu:
                    graphs = graphs.numpy()
                    parts.append((graphs, *_dense_runs(transition, g.ptr.numpy()[graphs], k, node_pe)))
                else:
                    slot, i, j, values = _dense_pairs(transition, k)
                    if slot.numel() and int(slot[-1]) >= graphs.numel():  # padding graphs of a device chunk
                        keep = slot < graphs.numel()
                        slot, i, j, values = slot[keep], i[keep], j[keep], values[keep]
                    parts.append((graphs[slot], i, j, values))
                report.update(graphs.shape[0] * group.n)
    if cpu:
        return _merge_numpy(parts, node_pe, k)
    return _merge(parts, g.ptr, g.num_graphs, g.num_nodes, k)


def _merge(parts: list[tuple[torch.Tensor, ...]], ptr: torch.Tensor, num_graphs: int, num_nodes: int,
           k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Put the pairs of all parts in GRIT's order (on a GPU). Each part holds whole graphs, in increasing graph
    order, each graph's pairs sorted by (i, j): a pair's place is its graph's offset plus its rank inside its
    graph."""
    device = ptr.device
    total = sum(part[0].shape[0] for part in parts)
    counts = sum((torch.bincount(part[0], minlength=num_graphs) for part in parts), 0 * ptr[1:])
    offsets = counts.cumsum(0) - counts
    with allocation_guard(f"the {total:,} node pairs of walk_length={k} ([2, P] and [P, {k}])"):
        pair_index = torch.empty((2, total), dtype=torch.long, device=device)
        pair_pe = torch.empty((total, k), dtype=torch.float32, device=device)
    node_pe = torch.zeros((num_nodes, k), dtype=torch.float32, device=device)
    for graph, i, j, values in parts:
        part_counts = torch.bincount(graph, minlength=num_graphs)
        shift = offsets - (part_counts.cumsum(0) - part_counts)  # per graph: its place minus its place here
        position = shift[graph] + torch.arange(graph.shape[0], device=device)
        rows = ptr[graph] + i
        pair_index[0, position] = rows
        pair_index[1, position] = rows - i + j
        pair_pe[position] = values
        diagonal = i == j
        node_pe[rows[diagonal]] = values[diagonal]
    return pair_index, pair_pe, node_pe


def _merge_numpy(parts: list[tuple[np.ndarray, ...]], node_pe: np.ndarray,
                 k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`_merge` on the CPU, from parts ``(graphs [c], counts [c], rows, cols, values)``: every graph's
    pairs are one contiguous run of its part, so the output is those runs concatenated in graph order (block
    copies; scattering every pair to its place took longer than computing the powers on 10,000 molecules)."""
    total = sum(part[2].shape[0] for part in parts)
    runs = []  # (graph, part, start, stop)
    for p, (graphs, counts, *_) in enumerate(parts):
        stops = np.cumsum(counts)
        runs.append(np.stack([graphs, np.full(graphs.shape, p), stops - counts, stops], 1))
    with allocation_guard(f"the {total:,} node pairs of walk_length={k} ([2, P] and [P, {k}])"):
        pair_index = np.empty((2, total), dtype=np.int64)
        pair_pe = np.empty((total, k), dtype=np.float32)
        if runs:
            table = np.concatenate(runs)
            table = table[np.argsort(table[:, 0], kind="stable")].tolist()
            for a, out in ((2, pair_index[0]), (3, pair_index[1]), (4, pair_pe)):
                np.concatenate([parts[p][a][lo:hi] for _, p, lo, hi in table], out=out)
    return torch.from_numpy(pair_index), torch.from_numpy(pair_pe), torch.from_numpy(node_pe)
