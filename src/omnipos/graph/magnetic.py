"""Magnetic Laplacian eigenvector encoding for directed graphs (Furutani et al., "Graph Signal Processing for
Directed Graphs based on the Hermitian Laplacian", 2020; Geisler et al., "Transformers Meet Directed Graphs",
2023, ``digraph_transformer``): the ordinary Laplacian cannot see edge direction; the magnetic one puts it in the
phase of a Hermitian matrix.

From the weighted directed adjacency ``A`` (``A_ij``: total weight of the edges ``i -> j``):

- ``A_s = (A + A^T) / 2``, ``d_i = sum_j (A_s)_ij``;
- ``Theta = 2 pi q (A - A^T)`` (antisymmetric), ``H = A_s * exp(i Theta)`` (Hermitian);
- ``L_q = I - D^-1/2 H D^-1/2``: Hermitian, eigenvalues real in ``[0, 2]``; an isolated node has ``L_ii = 1``.

An edge given in one direction only, unweighted, has phase ``2 pi q`` (``pi / 2`` at ``q = 0.25``); a pair given in
both directions with equal weights has phase 0. ``q = 0`` gives the normalised Laplacian of ``A_s``: the same as
:func:`omnipos.graph.laplacian_pe` (``drop_trivial=False``) when the edge list names both directions (or only
one direction) of every edge; where some edges are given both ways and others one way, ``A_s`` halves the
one-way ones (``laplacian_pe`` takes ``max(A, A^T)``; Geisler et al.'s code takes the unweighted union).
Self-loops are dropped (no phase, and ``laplacian_pe`` / PyG drop them too); duplicate edges add their weights.

The encoding is ``[Re(v_1..v_k) | Im(v_1..v_k)]`` of the ``k`` eigenvectors of the lowest eigenvalues (the lowest
is not dropped: for ``q > 0`` it is not trivial in general). An eigenvector is unique only up to a unit complex
factor (and a repeated eigenvalue's eigenspace up to a unitary basis change): omnipos returns the canonical basis
of :func:`omnipos.graph.canonical_basis`, which for a simple eigenvalue multiplies ``v`` by
``conj(v_i) / |v_i|`` where ``i`` is the entry of largest magnitude (ties within 1e-8: the lowest node index) -
that entry becomes real and positive. Deterministic run to run, batched or alone, dense or sparse path.

Solvers as :func:`omnipos.graph.laplacian_pe`: batched complex ``eigh`` for graphs up to ``dense_max_nodes``,
:func:`omnipos.graph.eigensolvers.graph_eigenpairs` (complex shift-invert, LOBPCG or Arnoldi) above.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..core import ProgressReporter, check_positive_int, progress_reporter
from ._input import (
    GraphBatch,
    SizeGroup,
    check_dense_size,
    check_graph,
    check_output_size,
    size_groups,
)
from ._workers import cpu_parallelism, run_cpu_work
from .eigensolvers import check_solver, graph_eigenpairs, solve_dense_groups
from .laplacian import DENSE_MAX_NODES, scaled_weights
from .sign import round_noise

__all__ = ["magnetic_laplacian", "sparse_magnetic_laplacian", "magnetic_laplacian_pe", "check_q"]

# Elements of the dense [G, n, n] complex Laplacians solved at once.
_CHUNK_ELEMENTS = 32_000_000


def check_q(q: Any) -> float:
    """The potential ``q``: a real number in ``[0, 0.5]`` (phases beyond ``pi`` repeat mirrored ones)."""
    if isinstance(q, bool) or not isinstance(q, (int, float, np.integer, np.floating)):
        raise TypeError(f"q must be a real number in [0, 0.5], got {type(q).__name__} ({q!r})")
    q = float(q)
    if not 0.0 <= q <= 0.5:  # (NaN fails this too)
        raise ValueError(f"q must be in [0, 0.5], got {q}")
    return q


def magnetic_laplacian(adjacency: torch.Tensor, q: float = 0.25) -> torch.Tensor:
    """Batched dense magnetic Laplacians ``L_q [G, n, n]`` of directed weighted adjacencies ``[G, n, n]`` (no
    self-loops; module docstring): complex128 for ``q > 0``, float64 (the ordinary normalised Laplacian of
    ``(A + A^T) / 2``) for ``q = 0``."""
    q = check_q(q)
    adjacency = adjacency.to(torch.float64)
    transposed = adjacency.transpose(-1, -2)
    symmetric = (adjacency + transposed) / 2
    degree = symmetric.sum(-1)
    inv_sqrt = torch.where(degree > 0, degree.clamp_min(torch.finfo(degree.dtype).tiny).rsqrt(), 0.0)
    scaled = symmetric * inv_sqrt.unsqueeze(-1) * inv_sqrt.unsqueeze(-2)
    if q:
        scaled = torch.polar(scaled, (2 * math.pi * q) * (adjacency - transposed))
    laplacian = -scaled
    laplacian.diagonal(dim1=-2, dim2=-1).add_(1.0)
    return laplacian


def sparse_magnetic_laplacian(row: np.ndarray, col: np.ndarray, weight: np.ndarray, n: int,
                              q: float = 0.25) -> tuple[Any, np.ndarray]:
    """One graph's magnetic Laplacian as a SciPy CSR matrix from a directed edge list (self-loops dropped,
    duplicates summed): ``(L_q, degree [n])`` (degree of ``(A + A^T) / 2``)."""
    import scipy.sparse as sp

    loops = row == col
    row, col, weight = row[~loops], col[~loops], weight[~loops]
    both_rows, both_cols = np.concatenate([row, col]), np.concatenate([col, row])
    # A_s and A - A^T on one pattern: the same coordinates, summed the same way
    symmetric = sp.coo_matrix((np.concatenate([weight, weight]) / 2, (both_rows, both_cols)), shape=(n, n)).tocsr()
    skew = sp.coo_matrix((np.concatenate([weight, -weight]), (both_rows, both_cols)), shape=(n, n)).tocsr()
    degree = np.asarray(symmetric.sum(axis=1)).ravel()
    inv_sqrt = np.where(degree > 0, 1.0 / np.sqrt(np.where(degree > 0, degree, 1.0)), 0.0)
    coo = symmetric.tocoo()
    data = coo.data * inv_sqrt[coo.row] * inv_sqrt[coo.col]
    if q:
        data = data * np.exp(1j * (2 * np.pi * q) * skew.tocoo().data)
    normalised = sp.csr_matrix((data, (coo.row, coo.col)), shape=(n, n))
    laplacian = sp.identity(n, dtype=data.dtype, format="csr") - normalised
    return laplacian.tocsr(), degree


def magnetic_laplacian_pe(
    edge_index: Any,
    num_nodes: int,
    k: int,
    *,
    q: float = 0.25,
    batch: Any = None,
    edge_weight: Any = None,
    return_eigenvalues: bool = False,
    dense_max_nodes: int = DENSE_MAX_NODES,
    solver: str = "auto",
    progress: Any = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Magnetic Laplacian eigenvector encoding of every node of a directed graph or of a PyG batch of graphs.

    Args:
        edge_index: ``[2, E]`` directed edges ``source -> target`` (PyG's ``edge_index``).
        num_nodes: ``N``, total number of nodes (of all graphs of the batch).
        k: eigenvectors per node.
        q: the potential in ``[0, 0.5]`` (Geisler et al. use 0.25 for DAGs; ``q = 0`` ignores direction).
        batch: ``[N]`` non-decreasing graph id per node (PyG's ``batch``); ``None`` = one graph.
        edge_weight: ``[E]`` finite, non-negative weights (default 1). The phase of an edge is
            ``2 pi q (w_ij - w_ji)`` (Furutani et al.), so weights far from 1 wrap it around.
        return_eigenvalues: also return the eigenvalues and the validity mask.
        dense_max_nodes: graphs with more nodes use the sparse path.
        solver: the sparse path's solver (see :mod:`omnipos.graph.eigensolvers`).
        progress: ``True``, a callable ``(done, total)`` or ``None`` (see :mod:`omnipos.core.progress`): the sparse
            path's solver steps, ``total`` None (unknown in advance).

    Returns:
        ``pe [N, 2k]`` float32 on the input's device: ``[Re | Im]`` of the ``k`` lowest eigenvectors (canonical
        phase, module docstring); with ``return_eigenvalues`` also ``eigenvalues [B, k]`` float32 (0 where
        missing) and ``mask [B, k]`` bool (True where the graph has that eigenvector: a graph of ``n`` nodes has
        ``n``; missing columns of ``pe`` are 0).
    """
    k = check_positive_int(k, "k")
    q = check_q(q)
    dense_max_nodes = check_positive_int(dense_max_nodes, "dense_max_nodes")
    solver = check_solver(solver)
    with progress_reporter(progress, desc="magnetic_laplacian_pe", name="progress") as report:
        pe, values, mask = run_cpu_work(edge_index, _magnetic_pe, edge_index, num_nodes, k, q, batch, edge_weight,
                                        dense_max_nodes, solver, report)
    if return_eigenvalues:
        return pe, values, mask
    return pe


def _magnetic_pe(edge_index: Any, num_nodes: Any, k: int, q: float, batch: Any, edge_weight: Any,
                 dense_max_nodes: int, solver: str,
                 report: ProgressReporter | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = check_graph(edge_index, num_nodes, batch, edge_weight)
    check_output_size(g, "k", k, 2 * k, k)
    if q:  # the phase reads the weights themselves: no rescaling (it would change the phases)
        largest = float(g.edge_weight.max()) if g.edge_weight.numel() else 0.0
        if largest > 1e150:
            raise ValueError(f"edge_weight holds {largest:.3g}: the magnetic Laplacian's degrees would overflow; "
                             "weights up to 1e150 are supported")
    else:
        g, _ = scaled_weights(g)
    pe, values, mask = _encode(g, k, q, dense_max_nodes, solver, report)
    return pe, g.rows_per_id(values), g.rows_per_id(mask, False)


def _encode(g: GraphBatch, k: int, q: float, dense_max_nodes: int, solver: str,
            report: ProgressReporter | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    device = g.device
    pe = torch.zeros(g.num_nodes, 2 * k, dtype=torch.float32, device=device)
    eigenvalues = torch.zeros(g.num_graphs, k, dtype=torch.float32, device=device)
    mask = torch.arange(k, device=device) < g.counts.unsqueeze(-1)
    workers = cpu_parallelism()
    dense: list[SizeGroup] = []
    for group in size_groups(g, keep=g.edge_index[0] != g.edge_index[1]):  # self-loops dropped
        if group.n == 0:
            continue
        if group.n <= dense_max_nodes:
            check_dense_size(group, g, dense_max_nodes)
            dense.append(group)
            continue
        for slot in range(group.graphs.numel()):
            one = group if group.graphs.numel() == 1 else group.graph(slot)  # (one graph: no masking pass)
            laplacian, degree = sparse_magnetic_laplacian(one.row.cpu().numpy(), one.col.cpu().numpy(),
                                                          one.weight.cpu().numpy(), one.n, q)
            null_weight = np.sqrt(degree) if not q else None
            values, vectors, _ = graph_eigenpairs(laplacian, min(k, one.n), null_weight=null_weight, bound=2.0,
                                                  dense_max_nodes=dense_max_nodes, solver=solver, workers=workers,
                                                  progress=report)
            _store(pe, eigenvalues, g, one, torch.from_numpy(values)[None].to(device),
                   torch.from_numpy(np.ascontiguousarray(vectors))[None].to(device), k)
    build = lambda group: (magnetic_laplacian(group.dense(), q), None)  # noqa: E731
    canonical = lambda group, _: (min(k, group.n), 2.0)  # noqa: E731
    for group, _, values, vectors in solve_dense_groups(dense, build, workers, _CHUNK_ELEMENTS, canonical):
        _store(pe, eigenvalues, g, group, values[:, :vectors.shape[-1]], vectors, k)
    return pe, eigenvalues, mask


def _store(pe: torch.Tensor, eigenvalues: torch.Tensor, g: GraphBatch, group: SizeGroup, values: torch.Tensor,
           vectors: torch.Tensor, k: int) -> None:
    m = values.shape[1]
    nodes = group.nodes(g.ptr).reshape(-1)
    flat = round_noise(vectors.reshape(-1, m))
    pe[nodes, :m] = flat.real.to(torch.float32)
    if flat.is_complex():
        pe[nodes, k:k + m] = flat.imag.to(torch.float32)
    eigenvalues[group.graphs, :m] = round_noise(values).to(torch.float32)
