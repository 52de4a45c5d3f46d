"""Laplacian eigenvector positional encodings (Dwivedi et al., "Benchmarking Graph Neural Networks", 2020),
for a whole PyG batch at once.

The Laplacian (``normalization=``), from the weighted adjacency ``A`` and degrees ``d_i = sum_j A_ij``:

- ``"sym"``: ``L = I - D^-1/2 A D^-1/2`` (PyG's ``AddLaplacianEigenvectorPE``; an isolated node has
  ``L_ii = 1``, as in PyG's ``get_laplacian``). Eigenvalues in ``[0, 2]``, orthonormal eigenvectors.
- ``"rw"``: ``L = I - D^-1 A``, the random-walk Laplacian. It is not symmetric, but it is similar to the
  symmetric one: ``L_rw = D^-1/2 L_sym D^1/2``. So it has the same eigenvalues, and its (right) eigenvectors are
  ``u = D^-1/2 v`` for the eigenvectors ``v`` of ``L_sym``; these solve the generalised problem
  ``(D - A) u = lambda D u`` (Belkin & Niyogi's Laplacian eigenmaps). They are orthogonal in the degree-weighted
  inner product ``u^T D u``, not in the plain one; omnipos scales each to unit Euclidean norm. The trivial one is
  constant on a connected graph (``1/sqrt(n)``), where ``"sym"``'s is ``sqrt(d_i)``-shaped. Isolated nodes count
  as degree 1 here (their row of ``L_rw`` is the identity's).
- ``None``: the combinatorial ``L = D - A`` (isolated node: ``L_ii = 0``).

Input conventions: self-loops are dropped (PyG does the same; for ``D - A`` they cancel anyway); duplicate edges
add their weights; the edge list is symmetrised with ``A <- max(A, A^T)``, so a directed list that names each edge
once, an undirected list that names both directions, and a mix give the same graph (where both directions are
given with different weights, the larger counts).

Eigenvectors come in ascending eigenvalue order; ``drop_trivial`` drops the first one (PyG's columns 1..k).
Columns a graph does not have (``k`` >= its number of nodes) are zeros and flagged in the mask.

Repeated eigenvalues (cycles, grids, symmetric molecules, several components): any orthonormal basis of the
eigenspace is as correct as any other, so those columns are not unique; omnipos returns LAPACK's (deterministic
for the same input on the same device) and the tests compare eigenspaces (projectors) there, not vectors.
A disconnected graph has one zero eigenvalue per component; ``drop_trivial`` drops one of them only (as PyG).
``per_component=True`` instead encodes each connected component as a graph of its own.

Solvers: graphs are grouped by node count and each group is solved with ONE batched ``torch.linalg.eigh`` in
float64 on the input's device (the dense ``[G, n, n]`` Laplacians are scattered from the edge list with tensor
ops). On the CPU, LAPACK runs single-threaded per matrix and the stacks are split over ``torch.get_num_threads()``
Python threads instead (see ``omnipos.graph._input.CPU_THREADS`` for why). Graphs above ``dense_max_nodes`` go to
a sparse solver instead (never a dense ``n x n``): SciPy's ``eigsh`` in shift-invert mode around a small negative
shift, with a fixed start vector (deterministic).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from ..core import check_choice, check_positive_int
from ._input import GraphBatch, SizeGroup, check_graph, cpu_threads, size_groups
from .sign import SIGNS, canonical_sign, random_sign

__all__ = ["NORMALIZATIONS", "DENSE_MAX_NODES", "laplacian_pe", "dense_laplacian", "connected_components"]

NORMALIZATIONS = ("sym", "rw", None)
#: Graphs with more nodes than this take the sparse (shift-invert eigsh) path by default.
DENSE_MAX_NODES = 512
# Below this much eigh work (sum of G * n^3; 2e6 is ~130 graphs of 25 nodes, ~8 ms of LAPACK), starting
# threads costs more than it saves (a thread pool per call made one-graph-at-a-time transforms 3x slower).
_PARALLEL_MIN_WORK = 2_000_000


def check_normalization(normalization: Any) -> str | None:
    if normalization is not None and (not isinstance(normalization, str) or normalization not in ("sym", "rw")):
        raise ValueError(f"normalization must be one of 'sym', 'rw', None; got {normalization!r}")
    return normalization


def dense_laplacian(adjacency: torch.Tensor, normalization: str | None = "sym") -> tuple[torch.Tensor, torch.Tensor]:
    """Batched dense Laplacians of symmetric adjacencies ``[G, n, n]`` (no self-loops).

    Returns ``(L [G, n, n], d_scale [G, n])`` where ``d_scale`` is what turns an eigenvector of ``L`` into the
    one the normalization asks for: ``D^-1/2`` for ``"rw"`` (degree 0 counted as 1), ones otherwise.
    """
    degree = adjacency.sum(dim=-1)
    eye = torch.eye(adjacency.shape[-1], dtype=adjacency.dtype, device=adjacency.device)
    if normalization is None:
        return torch.diag_embed(degree) - adjacency, torch.ones_like(degree)
    inv_sqrt = torch.where(degree > 0, degree.clamp_min(torch.finfo(degree.dtype).tiny).rsqrt(), 0.0)
    laplacian = eye - inv_sqrt.unsqueeze(-1) * adjacency * inv_sqrt.unsqueeze(-2)
    if normalization == "rw":
        return laplacian, torch.where(degree > 0, inv_sqrt, 1.0)
    return laplacian, torch.ones_like(degree)


def _pick_signs(vectors: torch.Tensor, sign: str, generator: torch.Generator | None) -> torch.Tensor:
    if sign == "canonical":
        return vectors * canonical_sign(vectors).unsqueeze(-2)
    if sign == "random":
        shape = (vectors.shape[0], vectors.shape[-1])
        return vectors * random_sign(shape, device=vectors.device, generator=generator).unsqueeze(-2)
    return vectors


def _rw_vectors(vectors: torch.Tensor, d_scale: torch.Tensor) -> torch.Tensor:
    vectors = vectors * d_scale.unsqueeze(-1)
    return vectors / vectors.norm(dim=-2, keepdim=True)


def _eigh_all(laplacians: list[torch.Tensor], workers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``torch.linalg.eigh`` of each ``[G, n, n]`` stack. On the CPU each stack is cut into ``workers`` slices
    solved on Python threads: a batched eigh is one single-threaded LAPACK call per matrix (see ``CPU_THREADS``),
    and torch releases the GIL while it runs, so the slices run in parallel."""
    work = sum(lap.shape[0] * lap.shape[-1] ** 3 for lap in laplacians)
    if workers <= 1 or work < _PARALLEL_MIN_WORK or laplacians[0].device.type != "cpu":
        return [torch.linalg.eigh(lap) for lap in laplacians]
    pieces = [lap.tensor_split(workers) for lap in laplacians]
    with ThreadPoolExecutor(workers) as pool:
        solved = iter(list(pool.map(torch.linalg.eigh, [p for parts in pieces for p in parts])))
    out = []
    for parts in pieces:
        chunk = [next(solved) for _ in parts]
        out.append((torch.cat([c[0] for c in chunk]), torch.cat([c[1] for c in chunk])))
    return out


def _sparse_one(row: np.ndarray, col: np.ndarray, weight: np.ndarray, n: int, wanted: int,
                normalization: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``wanted`` smallest eigenpairs of one big graph's (symmetric) Laplacian, never densified:
    ``([m], [n, m], d_scale [n])``, as :func:`dense_laplacian`."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import LinearOperator, eigsh, splu

    adjacency = sp.coo_matrix((weight, (row, col)), shape=(n, n)).tocsr()  # duplicates add up
    adjacency = adjacency.maximum(adjacency.T).tocsr()
    degree = np.asarray(adjacency.sum(axis=1)).ravel()
    if normalization is None:
        laplacian = sp.diags(degree) - adjacency
        scale = 2.0 * max(float(degree.max()), 1.0)
        d_scale = np.ones(n)
    else:
        inv_sqrt = np.where(degree > 0, 1.0 / np.sqrt(np.where(degree > 0, degree, 1.0)), 0.0)
        laplacian = sp.identity(n, format="csr") - sp.diags(inv_sqrt) @ adjacency @ sp.diags(inv_sqrt)
        scale = 2.0
        d_scale = np.where(degree > 0, inv_sqrt, 1.0)
    # Shift-invert around a point just below the spectrum (L is positive semi-definite): L + s I is positive
    # definite, and the smallest eigenvalues of L become the largest, well separated, of its inverse.
    shift = 1e-4 * scale
    # splu's default COLAMD ordering: MMD_AT_PLUS_A fills in less but took 20x longer to order (20k-node 6-NN graph)
    factor = splu((laplacian + shift * sp.identity(n)).tocsc())
    op_inv = LinearOperator((n, n), matvec=factor.solve, dtype=np.float64)
    start = np.random.default_rng(0).standard_normal(n)  # fixed start vector: ARPACK is deterministic then
    values, vectors = eigsh(laplacian.tocsr(), k=wanted, sigma=-shift, which="LM", OPinv=op_inv, v0=start)
    order = np.argsort(values, kind="stable")
    return values[order], vectors[:, order], d_scale


def connected_components(edge_index: torch.Tensor, num_nodes: int,
                         edge_weight: torch.Tensor | None = None) -> tuple[int, torch.Tensor]:
    """Weakly connected components (edges of weight 0 do not connect): ``(count, labels [N])``, on the input's
    device. Labels are numbered in order of each component's lowest node."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components as scipy_components

    keep = edge_index[0] != edge_index[1]
    if edge_weight is not None:
        keep &= edge_weight > 0
    pairs = edge_index[:, keep].cpu().numpy()
    graph = sp.coo_matrix((np.ones(pairs.shape[1]), (pairs[0], pairs[1])), shape=(num_nodes, num_nodes))
    count, labels = scipy_components(graph, directed=True, connection="weak")
    return int(count), torch.as_tensor(labels, dtype=torch.long).to(edge_index.device)


def laplacian_pe(
    edge_index: Any,
    num_nodes: int,
    k: int,
    *,
    batch: Any = None,
    edge_weight: Any = None,
    normalization: str | None = "sym",
    drop_trivial: bool = True,
    sign: str = "canonical",
    return_eigenvalues: bool = False,
    per_component: bool = False,
    dense_max_nodes: int = DENSE_MAX_NODES,
    generator: torch.Generator | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Laplacian eigenvector encoding of every node of a graph or of a PyG batch of graphs.

    Args:
        edge_index: ``[2, E]`` integer node pairs (PyG's ``edge_index``; directed lists are symmetrised).
        num_nodes: ``N``, total number of nodes (of all graphs of the batch).
        k: eigenvectors per node.
        batch: ``[N]`` non-decreasing graph id per node (PyG's ``batch``); ``None`` = one graph.
        edge_weight: ``[E]`` finite, non-negative weights (default 1).
        normalization: ``"sym"`` (PyG's), ``"rw"`` or ``None`` (combinatorial); see the module docstring.
        drop_trivial: drop the eigenvector of the smallest eigenvalue (PyG: yes).
        sign: ``"canonical"`` (deterministic, see :mod:`omnipos.graph.sign`), ``"random"`` (a random sign per
            graph and column, as PyG) or ``"none"`` (whatever the solver returns).
        return_eigenvalues: also return the eigenvalues and the validity mask.
        per_component: encode each connected component as a graph of its own (its own trivial eigenvector
            dropped); eigenvalue rows are then components, in order of their lowest node.
        dense_max_nodes: graphs with more nodes use the sparse shift-invert solver.
        generator: random source for ``sign="random"``.

    Returns:
        ``pe [N, k]`` float32 on the input's device; with ``return_eigenvalues`` also ``eigenvalues [B, k]``
        float32 (0 where missing) and ``mask [B, k]`` bool (True where the graph has that eigenvector; a graph
        of ``n`` nodes has ``n - drop_trivial`` of them; missing columns of ``pe`` are 0).
    """
    k = check_positive_int(k, "k")
    normalization = check_normalization(normalization)
    check_choice(sign, "sign", SIGNS)
    dense_max_nodes = check_positive_int(dense_max_nodes, "dense_max_nodes")
    with cpu_threads(edge_index) as workers:
        g = check_graph(edge_index, num_nodes, batch, edge_weight)
        order = None
        if per_component:
            _, labels = connected_components(g.edge_index, g.num_nodes, g.edge_weight)
            order = torch.argsort(labels, stable=True)
            position = torch.empty_like(order)
            position[order] = torch.arange(order.numel(), device=order.device)
            g = check_graph(position[g.edge_index], g.num_nodes, labels[order], g.edge_weight)
        pe, values, mask = _encode(g, k, normalization, bool(drop_trivial), sign, dense_max_nodes, generator,
                                   workers)
        if order is not None:
            pe = pe[position]
    if return_eigenvalues:
        return pe, values, mask
    return pe


def _encode(g: GraphBatch, k: int, normalization: str | None, drop_trivial: bool, sign: str,
            dense_max_nodes: int, generator: torch.Generator | None, workers: int = 1) -> tuple[torch.Tensor, ...]:
    start = int(drop_trivial)
    device = g.device
    pe = torch.zeros(g.num_nodes, k, dtype=torch.float32, device=device)
    eigenvalues = torch.zeros(g.num_graphs, k, dtype=torch.float32, device=device)
    available = (g.counts - start).clamp_min(0)
    mask = torch.arange(k, device=device) < available.unsqueeze(-1)
    dense, laplacians, scales = [], [], []
    for group in size_groups(g, keep=g.edge_index[0] != g.edge_index[1]):  # self-loops dropped
        n = group.n
        if n <= start:
            continue
        m = min(k, n - start)
        if n <= dense_max_nodes or start + m >= n - 1:  # (ARPACK needs fewer eigenpairs than n - 1)
            adjacency = group.dense()
            laplacian, d_scale = dense_laplacian(torch.maximum(adjacency, adjacency.transpose(1, 2)),
                                                 normalization)
            dense.append(group)
            laplacians.append(laplacian)
            scales.append(d_scale)
            continue
        values, vectors = _sparse_groups(group, start + m, normalization)
        _store(pe, eigenvalues, g, group, values[:, start:], vectors[:, :, start:], sign, generator)
    for group, d_scale, (values, vectors) in zip(dense, scales, _eigh_all(laplacians, workers)):
        m = min(k, group.n - start)
        values, vectors = values[:, start:start + m], vectors[:, :, start:start + m]
        if normalization == "rw":
            vectors = _rw_vectors(vectors, d_scale)
        _store(pe, eigenvalues, g, group, values, vectors, sign, generator)
    return pe, eigenvalues, mask


def _store(pe: torch.Tensor, eigenvalues: torch.Tensor, g: GraphBatch, group: SizeGroup, values: torch.Tensor,
           vectors: torch.Tensor, sign: str, generator: torch.Generator | None) -> None:
    m = values.shape[1]
    vectors = _pick_signs(vectors, sign, generator)
    pe[group.nodes(g.ptr).reshape(-1), :m] = vectors.reshape(-1, m).to(torch.float32)
    eigenvalues[group.graphs, :m] = values.to(torch.float32)


def _sparse_groups(group: SizeGroup, wanted: int,
                   normalization: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Big graphs one at a time (each is a solve of its own): ``([G, wanted], [G, n, wanted])`` float64."""
    all_values, all_vectors = [], []
    for slot in range(group.graphs.numel()):
        mine = group.slot == slot
        values, vectors, d_scale = _sparse_one(group.row[mine].cpu().numpy(), group.col[mine].cpu().numpy(),
                                               group.weight[mine].cpu().numpy(), group.n, wanted, normalization)
        vectors = torch.from_numpy(np.ascontiguousarray(vectors))
        if normalization == "rw":
            vectors = _rw_vectors(vectors, torch.from_numpy(d_scale))
        all_values.append(torch.from_numpy(values))
        all_vectors.append(vectors)
    device = group.graphs.device
    return torch.stack(all_values).to(device), torch.stack(all_vectors).to(device)
