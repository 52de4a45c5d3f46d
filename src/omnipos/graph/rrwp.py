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

from ..core import check_positive_int, progress_reporter
from ._input import size_groups
from .random_walk import (
    SparseTransitions,
    check_walk_graph,
    dense_transitions,
    sparse_transitions,
    transition_weights,
)

__all__ = ["rrwp", "RRWP_DENSE_MAX_NODES"]

#: Graphs with more nodes than this take the sparse path.
RRWP_DENSE_MAX_NODES = 256
# Entries (over the K powers) per block of rows on the sparse path.
_BLOCK_ENTRIES = 1 << 22


def _dense_pairs(transition: Any, k: int) -> tuple[Any, Any, Any, Any]:
    """``(slot, i, j, values [P, k])`` of the non-zero pairs of ``[I, P, ..., P^(k-1)]``, sorted by (slot, i, j)."""
    numpy = isinstance(transition, np.ndarray)
    eye = np.eye(transition.shape[-1]) if numpy else torch.eye(transition.shape[-1], dtype=transition.dtype,
                                                                 device=transition.device)
    powers = [np.broadcast_to(eye, transition.shape) if numpy else eye.expand_as(transition)]
    for _ in range(1, k):
        powers.append(transition if len(powers) == 1 else powers[-1] @ transition)
    reached = powers[0] != 0
    for power in powers[1:]:
        reached = reached | (power != 0)
    if numpy:
        slot, i, j = np.nonzero(reached)
        values = np.stack([power[slot, i, j] for power in powers], axis=-1).astype(np.float32)
        return torch.from_numpy(slot), torch.from_numpy(i), torch.from_numpy(j), torch.from_numpy(values)
    slot, i, j = reached.nonzero(as_tuple=True)
    return slot, i, j, torch.stack([power[slot, i, j] for power in powers], dim=-1).to(torch.float32)


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
    g = check_walk_graph(edge_index, num_nodes, batch, edge_weight)
    device = g.device
    parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    big = g.counts > dense_max_nodes
    with progress_reporter(progress, total=g.num_nodes, desc="rrwp", name="progress") as report:
        if bool(big.any()):
            walks = sparse_transitions(g, big, symmetric_form=False)
            i, j, values = _sparse_pairs(walks, k, report)
            nodes = walks.nodes.cpu()
            parts.append((nodes[torch.from_numpy(i)], nodes[torch.from_numpy(j)], torch.from_numpy(values)))
        for group in size_groups(transition_weights(g)):
            if group.n == 0 or group.n > dense_max_nodes:
                continue
            for graphs, transition in dense_transitions(group):
                slot, i, j, values = _dense_pairs(transition, k)
                keep = slot < graphs.numel()  # (padding graphs of a device chunk)
                first = g.ptr[graphs].to(slot.device)[slot[keep]]
                parts.append((first + i[keep], first + j[keep], values[keep]))
                report.update(graphs.numel() * group.n)
    rows = torch.cat([p[0].to(device) for p in parts]) if parts else torch.zeros(0, dtype=torch.long, device=device)
    cols = torch.cat([p[1].to(device) for p in parts]) if parts else torch.zeros_like(rows)
    values = (torch.cat([p[2].to(device) for p in parts]) if parts
              else torch.zeros(0, k, dtype=torch.float32, device=device))
    # each part is sorted by (row, col) and owns whole rows: place every pair at its row's offset + its rank
    counts = torch.zeros(g.num_nodes, dtype=torch.long, device=device).index_add_(
        0, rows, torch.ones_like(rows))
    offsets = torch.cumsum(counts, 0) - counts
    position = torch.empty_like(rows)
    start = 0
    for part in parts:
        stop = start + part[0].numel()
        part_rows = rows[start:stop]
        rank = torch.arange(stop - start, device=device) - torch.searchsorted(part_rows, part_rows)
        position[start:stop] = offsets[part_rows] + rank
        start = stop
    pair_index = torch.empty(2, rows.numel(), dtype=torch.long, device=device)
    pair_index[0, position], pair_index[1, position] = rows, cols
    pair_pe = torch.empty_like(values)
    pair_pe[position] = values
    diagonal = pair_index[0] == pair_index[1]
    node_pe = torch.zeros(g.num_nodes, k, dtype=torch.float32, device=device)
    node_pe[pair_index[0, diagonal]] = pair_pe[diagonal]
    return pair_index, pair_pe, node_pe
