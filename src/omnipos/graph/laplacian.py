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
eigenspace is as correct as any other. With ``sign="canonical"`` (the default) omnipos returns the *canonical
basis* of :func:`omnipos.graph.canonical_basis`: a basis fixed by the eigenspace itself (pivoted Cholesky of its
projector; for a simple eigenvalue, the sign that makes the largest-magnitude entry positive). So the same graph
gives the same numbers alone, in any batch, run to run and on the dense or sparse path (up to the solvers'
accuracy, ~1e-8, where they differ). ``sign="random"`` flips the canonical columns' signs at random;
``sign="none"`` returns the solver's basis as it comes.
A disconnected graph has one zero eigenvalue per component; ``drop_trivial`` drops one of them only (as PyG): the
first canonical vector of the zero eigenspace, i.e. the component whose ``sqrt(d_i / vol)`` is largest.
``per_component=True`` instead encodes each connected component as a graph of its own.

Solvers (``solver=``, ``dense_max_nodes=``): graphs of at most ``dense_max_nodes`` nodes are grouped by node count
and each group is solved with batched ``torch.linalg.eigh`` in float64 on the input's device (the dense
``[G, n, n]`` Laplacians are scattered from the edge list with tensor ops, in chunks of bounded memory); accurate
to float64 rounding. On the CPU the LAPACK calls run on omnipos's worker threads, and a batch of graphs of at
most ``SMALL_MAX_NODES`` (128) nodes on one thread per piece (MKL and torch's OpenMP limited in those threads
only: see ``omnipos.graph.small_eigh`` and ``omnipos.graph._workers`` for why), never changing torch's thread
count; where numba is installed (``omnipos[fast]``) graphs of at most 64 nodes are solved by the compiled lane
kernel of ``omnipos.graph.lane_eigh`` instead (about twice as fast, as accurate) and their canonical basis by
``omnipos.graph.canonical_kernel``. On CUDA, groups of at most 64 nodes are solved by one launch of the batched
Jacobi kernel of ``omnipos.graph.jacobi_triton`` (float64, as accurate as LAPACK) where Triton is installed, and
their canonical basis by the same tensor program as everywhere. Larger graphs go to
:func:`omnipos.graph.eigensolvers.graph_eigenpairs` (never a dense ``n x n``, never an LU beyond
:data:`~omnipos.graph.eigensolvers.FILL_BUDGET` entries): connected components, each small one dense, each large
one by shift-invert Lanczos (meshes, geometric graphs), LOBPCG with an AMG preconditioner (large meshes, rings with
chords) or Lanczos on ``2I - L`` (hubs, expanders), chosen by measurement of the graph (``solver="auto"``: its
spectral gap, its factor's size and whether it has a symmetry that can repeat an eigenvalue, in which case a block
solver keeps every copy) or by name. See that module for the rules and their accuracy. A large graph whose tensors
are on CUDA is solved on the device instead (``solver="auto"`` or ``"lanczos"``; a connected graph:
:mod:`omnipos.graph.eigensolvers.device_krylov`, thick-restart block Lanczos on ``bound * I - L`` in float64 with
sparse products on the device, residuals ``<= 1e-10 * bound``, the same canonical basis); a graph of several
components, one too small for a Krylov basis, one whose eigenspace at the cut has hundreds of copies (a star) or
one on which Lanczos does not converge within its restart budget takes the CPU path, and its result is copied back.

Bad input is refused with a ValueError / TypeError naming the argument (and the edge or node): node ids outside
``0..num_nodes-1``, NaN / infinite / negative weights, ``k < 1``, an unsorted or mis-sized ``batch``, edges
across graphs, meta tensors, outputs above ``MAX_ELEMENTS`` elements. Weights of any finite magnitude work: the
normalised Laplacians do not change when all weights are scaled, so they are divided by the largest weight first
(``normalization=None`` scales its eigenvalues back, and refuses if they overflow float32).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import numpy as np
import torch

from ..core import ProgressReporter, check_choice, check_positive_int, progress_reporter
from ._input import (
    DENSE_MAX_ELEMENTS,
    GraphBatch,
    SizeGroup,
    check_dense_size,
    check_graph,
    check_output_size,
    size_groups,
)
from ._workers import cpu_parallelism, run_cpu_work
from .eigensolvers import (
    check_solver,
    device_eigenpairs,
    graph_eigenpairs,
    solve_dense_groups,
)
from .sign import SIGNS, random_sign, round_noise
from .small_eigh import SMALL_MAX_NODES, one_thread

__all__ = ["NORMALIZATIONS", "DENSE_MAX_NODES", "DENSE_MAX_ELEMENTS", "laplacian_pe", "dense_laplacian",
           "sparse_laplacian", "connected_components", "check_normalization"]

NORMALIZATIONS = ("sym", "rw", None)
#: Graphs with more nodes than this take the sparse path by default.
DENSE_MAX_NODES = 512
# Device types whose large graphs are solved where they are (eigensolvers.device_krylov) instead of on the CPU;
# the tests add "cpu" to run that solver here.
_DEVICE_SOLVER_TYPES: tuple[str, ...] = ("cuda",)
# Elements of the dense [G, n, n] Laplacians solved at once (float64 Laplacians + eigenvectors: ~0.5 GB).
_CHUNK_ELEMENTS = 32_000_000


def check_normalization(normalization: Any) -> str | None:
    if normalization is not None and (not isinstance(normalization, str) or normalization not in ("sym", "rw")):
        raise ValueError(f"normalization must be one of 'sym', 'rw', None; got {normalization!r}")
    return normalization



def dense_laplacian(adjacency: torch.Tensor, normalization: str | None = "sym", *,
                    overwrite: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched dense Laplacians of symmetric adjacencies ``[G, n, n]`` (no self-loops).

    Returns ``(L [G, n, n], d_scale [G, n])`` where ``d_scale`` is what turns an eigenvector of ``L`` into the
    one the normalization asks for: ``D^-1/2`` for ``"rw"`` (degree 0 counted as 1), ones otherwise.
    ``overwrite=True`` builds ``L`` in the adjacency's memory (same numbers, no second ``[G, n, n]``).
    """
    degree = adjacency.sum(dim=-1)
    laplacian = adjacency if overwrite else adjacency.clone()
    if normalization is None:
        laplacian.neg_()
        laplacian.diagonal(dim1=-2, dim2=-1).add_(degree)
        return laplacian, torch.ones_like(degree)
    inv_sqrt = torch.where(degree > 0, degree.clamp_min(torch.finfo(degree.dtype).tiny).rsqrt(), 0.0)
    laplacian.mul_(inv_sqrt.unsqueeze(-1)).mul_(inv_sqrt.neg().unsqueeze(-2))
    laplacian.diagonal(dim1=-2, dim2=-1).add_(1.0)
    if normalization == "rw":
        return laplacian, torch.where(degree > 0, inv_sqrt, 1.0)
    return laplacian, torch.ones_like(degree)


def _symmetric_adjacency(group: SizeGroup) -> torch.Tensor:
    """``max(A, A^T)`` of the group's ``[G, n, n]`` adjacency (duplicate edges summed first), computed at the
    edge positions only: the positions no edge names in either direction are 0 in both."""
    n = group.n
    adjacency = torch.zeros(group.graphs.numel(), n, n, dtype=torch.float64, device=group.graphs.device)
    flat = adjacency.view(-1)
    base = group.slot * n
    forward = (base + group.row) * n + group.col
    backward = (base + group.col) * n + group.row
    flat.index_put_((forward,), group.weight, accumulate=True)
    larger = torch.maximum(flat[forward], flat[backward])
    flat[forward] = larger
    flat[backward] = larger
    return adjacency


def sparse_laplacian(row: np.ndarray, col: np.ndarray, weight: np.ndarray, n: int,
                     normalization: str | None = "sym") -> tuple[Any, np.ndarray, np.ndarray]:
    """One graph's Laplacian as a SciPy CSR matrix, from an edge list (self-loops dropped, duplicates summed,
    ``A <- max(A, A^T)``): ``(L, degree [n], null_weight [n])``; ``"rw"`` gives the symmetric one (its
    eigenvectors are mapped afterwards). ``null_weight`` restricted to a component spans its null space."""
    import scipy.sparse as sp

    loops = row == col
    adjacency = sp.coo_matrix((weight[~loops], (row[~loops], col[~loops])), shape=(n, n)).tocsr()
    adjacency = adjacency.maximum(adjacency.T).tocsr()
    adjacency.eliminate_zeros()
    adjacency.sort_indices()
    indptr, cols, values = adjacency.indptr, adjacency.indices, adjacency.data
    rows = np.repeat(np.arange(n, dtype=cols.dtype), np.diff(indptr))
    degree = np.bincount(rows, weights=values, minlength=n)
    if normalization is None:
        entries, null_weight = -values, np.ones(n)
        diagonal_values = degree
    else:
        inv_sqrt = np.where(degree > 0, 1.0 / np.sqrt(np.where(degree > 0, degree, 1.0)), 0.0)
        entries, null_weight = -values * inv_sqrt[rows] * inv_sqrt[cols], np.sqrt(degree)
        diagonal_values = np.ones(n)
    # the diagonal put into each (sorted, loop-free) row after its entries left of it: canonical CSR directly,
    # without a second COO -> CSR sort (a third of this function's time on a 1,000-node graph)
    at = indptr[:-1] + np.bincount(rows[cols < rows], minlength=n)
    laplacian = sp.csr_matrix((np.insert(entries, at, diagonal_values),
                               np.insert(cols, at, np.arange(n, dtype=cols.dtype)),
                               indptr + np.arange(n + 1, dtype=indptr.dtype)), shape=(n, n))
    laplacian.has_sorted_indices = True
    return laplacian, degree, null_weight


def _spectrum_bound(normalization: str | None, degree_max: torch.Tensor | float) -> torch.Tensor | float:
    """An upper bound of the Laplacian's eigenvalues: 2, or ``2 max(degree)`` (>= 1) for ``D - A``."""
    if normalization is not None:
        return 2.0
    if isinstance(degree_max, torch.Tensor):
        return 2.0 * degree_max.clamp_min(0.5)
    return 2.0 * max(float(degree_max), 0.5)


def _rw_vectors(vectors: torch.Tensor, d_scale: torch.Tensor) -> torch.Tensor:
    vectors = vectors * d_scale.unsqueeze(-1)
    return vectors / vectors.norm(dim=-2, keepdim=True).clamp_min(torch.finfo(vectors.dtype).tiny)


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
    solver: str = "auto",
    generator: torch.Generator | None = None,
    progress: Any = None,
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
        sign: ``"canonical"`` (the canonical basis: deterministic, batch-invariant, see the module docstring),
            ``"random"`` (the canonical basis with a random sign per graph and column, as PyG's random sign) or
            ``"none"`` (whatever the solver returns).
        return_eigenvalues: also return the eigenvalues and the validity mask.
        per_component: encode each connected component as a graph of its own (its own trivial eigenvector
            dropped); eigenvalue rows are then components, in order of their lowest node.
        dense_max_nodes: graphs with more nodes use the sparse path.
        solver: the sparse path's solver for large components: ``"auto"`` (chosen per component, see
            :mod:`omnipos.graph.eigensolvers`), ``"shift-invert"``, ``"lobpcg"`` or ``"lanczos"``.
        generator: random source for ``sign="random"``.
        progress: ``True``, a callable ``(done, total)`` or ``None`` (see :mod:`omnipos.core.progress`): the sparse
            path's solver steps, ``total`` None (unknown in advance); a 1e6-node graph takes minutes.

    Returns:
        ``pe [N, k]`` float32 on the input's device; with ``return_eigenvalues`` also ``eigenvalues [B, k]``
        float32 (0 where missing) and ``mask [B, k]`` bool (True where the graph has that eigenvector; a graph
        of ``n`` nodes has ``n - drop_trivial`` of them; missing columns of ``pe`` are 0).
    """
    k = check_positive_int(k, "k")
    normalization = check_normalization(normalization)
    check_choice(sign, "sign", SIGNS)
    dense_max_nodes = check_positive_int(dense_max_nodes, "dense_max_nodes")
    solver = check_solver(solver)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    with progress_reporter(progress, desc="laplacian_pe", name="progress") as report:
        pe, values, mask = run_cpu_work(edge_index, _laplacian_pe, edge_index, num_nodes, k, batch, edge_weight,
                                        normalization, bool(drop_trivial), sign, per_component, dense_max_nodes,
                                        solver, generator, report)
    if return_eigenvalues:
        return pe, values, mask
    return pe


def scaled_weights(g: GraphBatch) -> tuple[GraphBatch, float]:
    """``g`` with its weights divided by the largest one (so degrees cannot overflow), and that divisor."""
    if not g.edge_weight.numel():
        return g, 1.0
    largest = float(g.edge_weight.max())
    if largest <= 0 or largest == 1.0:
        return g, 1.0
    return dataclasses.replace(g, edge_weight=g.edge_weight / largest), largest


def _laplacian_pe(edge_index: Any, num_nodes: Any, k: int, batch: Any, edge_weight: Any,
                  normalization: str | None, drop_trivial: bool, sign: str, per_component: bool,
                  dense_max_nodes: int, solver: str, generator: torch.Generator | None,
                  report: ProgressReporter | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # (the checks are a few element-wise passes: on the CPU one thread each, in this thread only, as the grouping
    # in _encode; with torch's threads they took 5x the CPU time on 4,000 molecules, the team spinning between ops)
    with one_thread() if _on_cpu(edge_index) else contextlib.nullcontext():
        g = check_graph(edge_index, num_nodes, batch, edge_weight)
        order = position = None
        if per_component:
            _, labels = connected_components(g.edge_index, g.num_nodes, g.edge_weight)
            order = torch.argsort(labels, stable=True)
            position = torch.empty_like(order)
            position[order] = torch.arange(order.numel(), device=order.device)
            g = check_graph(position[g.edge_index], g.num_nodes, labels[order], g.edge_weight)
        check_output_size(g, "k", k, k, k)
        g, weight_scale = scaled_weights(g)
    pe, values, mask = _encode(g, k, normalization, drop_trivial, sign, dense_max_nodes, solver, generator, report)
    if normalization is None and weight_scale != 1.0:
        values = values.double() * weight_scale
        if not bool(torch.isfinite(values.float()).all()):
            raise ValueError("edge_weight is so large that the eigenvalues of D - A overflow float32; scale the "
                             "weights down or use normalization='sym'")
        values = values.float()
    if position is not None:
        return pe[position], values, mask
    return pe, g.rows_per_id(values), g.rows_per_id(mask, False)


def _on_cpu(like: Any) -> bool:
    """Whether the input ``like`` (a tensor, or anything else: an array or a list, read on the CPU) is on the CPU."""
    return not isinstance(like, torch.Tensor) or like.device.type == "cpu"


def _encode(g: GraphBatch, k: int, normalization: str | None, drop_trivial: bool, sign: str,
            dense_max_nodes: int, solver: str, generator: torch.Generator | None,
            report: ProgressReporter | None = None) -> tuple[torch.Tensor, ...]:
    start = int(drop_trivial)
    device = g.device
    workers = cpu_parallelism()  # (read before one_thread(), inside which it reads 1)
    # a batch of small graphs is many small ops: one thread each, in this thread only (omnipos.graph.small_eigh);
    # a large matrix keeps torch's threads
    # (the grouping and a large graph's sparse solve and scatter are small ops too, whatever the graph's size:
    # with torch's 2 threads they cost a 1,000-node graph ~1.5x the CPU time)
    cpu = one_thread if device.type == "cpu" else contextlib.nullcontext
    small = device.type == "cpu" and g.num_nodes and int(g.counts.max()) <= SMALL_MAX_NODES
    small_work = one_thread if small else contextlib.nullcontext
    with cpu():
        pe = torch.zeros(g.num_nodes, k, dtype=torch.float32, device=device)
        eigenvalues = torch.zeros(g.num_graphs, k, dtype=torch.float32, device=device)
        available = (g.counts - start).clamp_min(0)
        mask = torch.arange(k, device=device) < available.unsqueeze(-1)
        groups = size_groups(g, keep=g.edge_index[0] != g.edge_index[1])  # self-loops dropped
    dense: list[SizeGroup] = []
    for group in groups:
        n = group.n
        if n <= start:
            continue
        if n <= dense_max_nodes:
            check_dense_size(group, g, dense_max_nodes)
            dense.append(group)
            continue
        for slot in range(group.graphs.numel()):
            one = group if group.graphs.numel() == 1 else group.graph(slot)  # (one graph: no masking pass)
            with cpu():
                values, vectors = _large_graph(one, start + min(k, n - start), normalization, dense_max_nodes,
                                               solver, workers, report)
                _store(pe, eigenvalues, g, one, values[None, start:], vectors[None, :, start:], sign, generator)

    def build(group: SizeGroup) -> tuple[torch.Tensor, tuple[torch.Tensor, Any]]:
        laplacian, d_scale = dense_laplacian(_symmetric_adjacency(group), normalization, overwrite=True)
        # (the bound needs the largest degree only for D - A, whose diagonal is the degree)
        degree_max = laplacian.diagonal(dim1=-2, dim2=-1).amax(-1) if normalization is None else 0.0
        return laplacian, (d_scale, _spectrum_bound(normalization, degree_max))

    def canonical(group: SizeGroup, extra: tuple[torch.Tensor, Any]) -> tuple[int, Any]:
        return start + min(k, group.n - start), extra[1]

    with small_work():
        for group, (d_scale, _), values, vectors in solve_dense_groups(dense, build, workers, _CHUNK_ELEMENTS,
                                                                       canonical if sign != "none" else None):
            m = min(k, group.n - start)
            values, vectors = values[:, start:start + m], vectors[:, :, start:start + m]
            if normalization == "rw":
                vectors = _rw_vectors(vectors, d_scale)
            _store(pe, eigenvalues, g, group, values, vectors, sign, generator)
    return pe, eigenvalues, mask


def _large_graph(group: SizeGroup, wanted: int, normalization: str | None, dense_max_nodes: int, solver: str,
                 workers: int, report: ProgressReporter | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``wanted`` lowest eigenpairs of one big graph in the canonical basis: ``([wanted], [n, wanted])``.

    On CUDA (:data:`_DEVICE_SOLVER_TYPES`), with ``solver`` ``"auto"`` or ``"lanczos"``, a connected graph is
    solved on the device (:func:`~omnipos.graph.eigensolvers.device_eigenpairs`: block Lanczos in float64, sparse
    products on the device); a graph it declines (several components, too small, see that function) takes the
    CPU path (:func:`~omnipos.graph.eigensolvers.graph_eigenpairs`) as every graph on the CPU does."""
    if group.graphs.device.type in _DEVICE_SOLVER_TYPES and solver in ("auto", "lanczos"):
        found = device_eigenpairs(group.row, group.col, group.weight, group.n, wanted, normalization, report)
        if found is not None:
            values, vectors, degree = found
            if normalization == "rw":
                vectors = _rw_vectors(vectors, torch.where(degree > 0, degree.clamp_min(
                    torch.finfo(degree.dtype).tiny).rsqrt(), 1.0))
            return values, vectors
    laplacian, degree, null_weight = sparse_laplacian(group.row.cpu().numpy(), group.col.cpu().numpy(),
                                                      group.weight.cpu().numpy(), group.n, normalization)
    bound = _spectrum_bound(normalization, float(degree.max()) if degree.size else 0.0)
    values, vectors, _ = graph_eigenpairs(laplacian, wanted, null_weight=null_weight, bound=bound,
                                          dense_max_nodes=dense_max_nodes, solver=solver, workers=workers,
                                          progress=report)
    vectors = torch.from_numpy(np.ascontiguousarray(vectors))
    if normalization == "rw":
        d_scale = np.where(degree > 0, 1.0 / np.sqrt(np.where(degree > 0, degree, 1.0)), 1.0)
        vectors = _rw_vectors(vectors, torch.from_numpy(d_scale))
    device = group.graphs.device
    return torch.from_numpy(values).to(device), vectors.to(device)


def _store(pe: torch.Tensor, eigenvalues: torch.Tensor, g: GraphBatch, group: SizeGroup, values: torch.Tensor,
           vectors: torch.Tensor, sign: str, generator: torch.Generator | None) -> None:
    m = values.shape[1]
    if sign == "random":
        flips = random_sign((vectors.shape[0], m), device=vectors.device, dtype=vectors.dtype, generator=generator)
        vectors = vectors * flips.unsqueeze(-2)
    pe[group.nodes(g.ptr).reshape(-1), :m] = round_noise(vectors.reshape(-1, m)).to(torch.float32)
    eigenvalues[group.graphs, :m] = round_noise(values).to(torch.float32)
