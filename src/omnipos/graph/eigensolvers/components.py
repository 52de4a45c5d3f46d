"""A whole (possibly disconnected) graph, :func:`graph_eigenpairs`: its connected components, the known null vectors
(nothing solved where they are enough), the small components by batched dense ``eigh``, each large one by
:func:`~omnipos.graph.eigensolvers.sparse_eigenpairs`, then the lowest ``count`` eigenpairs merged in the
canonical basis of :func:`omnipos.graph.canonical_basis` (computed per component, merged in pivot order: equal
to the whole graph's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...core import ProgressReporter
from ..canonical_spec import CANONICAL_TOL, ties_largest
from ..sign import canonical_basis
from ..small_eigh import one_thread
from .choice import sparse_eigenpairs
from .dense import CHUNK_ELEMENTS, batched_eigh
from .kernels import EXTRA, count_step, inner, reporting, value_clusters


@dataclass
class _Piece:
    """Eigenpairs of some components: ``vectors [G, s, M]`` over the ``nodes [G, s]`` of ``G`` components."""

    nodes: np.ndarray  # [G, s] global node ids
    values: np.ndarray  # [G, M]
    vectors: np.ndarray  # [G, s, M]
    available: np.ndarray  # [G] columns each component really has (<= M)


def graph_eigenpairs(lap: Any, count: int, *, null_weight: np.ndarray | None, bound: float, dense_max_nodes: int,
                     solver: str = "auto", workers: int = 1,
                     progress: ProgressReporter | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The ``count`` lowest eigenpairs of a graph's Hermitian positive semi-definite sparse ``lap [n, n]``, in
    the canonical basis, without densifying it (see the docstring of :mod:`omnipos.graph.eigensolvers`).

    Args:
        lap: SciPy sparse ``[n, n]``; its off-diagonal pattern defines the connected components.
        count: eigenpairs wanted (``<= n``).
        null_weight: ``[n]`` vector whose restriction to a component (normalised) spans that component's null
            space when it is non-zero there (``sqrt(degree)`` or ones); ``None``: no known null space.
        bound: upper bound of the spectrum (eigenspace clusters use ``EIGENVALUE_TOL * bound``).
        dense_max_nodes: components up to this size are solved densely.
        progress: advanced by one per solver step (an operator product or solve, a LOBPCG iteration, a probe, a
            factorisation, a chunk of dense components); the total is not known in advance (None). A 1e6-node
            graph takes a few hundred to a few thousand steps.

    Returns:
        ``(values [count], vectors [n, count], solvers used)`` float64 / complex128.

    Runs inside :func:`omnipos.graph.small_eigh.one_thread`: besides SciPy's sparse kernels the solve is many
    small torch and LAPACK ops (Rayleigh-Ritz, eigenvalue clusters, the canonical basis), which torch's OpenMP
    team made 2-4x slower in CPU time with 2 threads on a 2-core machine (2-D grid of 1,024 nodes: 47 ms of CPU
    vs 14 ms with 1).
    """
    with one_thread(), reporting(progress):
        return _graph_eigenpairs(lap, count, null_weight=null_weight, bound=bound, dense_max_nodes=dense_max_nodes,
                                 solver=solver, workers=workers)


def _graph_eigenpairs(lap: Any, count: int, *, null_weight: np.ndarray | None, bound: float, dense_max_nodes: int,
                      solver: str, workers: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    n = lap.shape[0]
    lap = sp.csr_matrix(lap)
    lap.eliminate_zeros()
    # connectivity from the pattern alone (a complex entry may have a zero real part): diagonal entries are
    # self-loops, which do not connect anything
    pattern = sp.csr_matrix((np.ones(lap.nnz, dtype=np.int8), lap.indices, lap.indptr), shape=(n, n))
    _, labels = connected_components(pattern, directed=False)
    sizes = np.bincount(labels)
    order = np.argsort(labels, kind="stable")
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n) - first[labels[order]]
    keep = min(count, n) + EXTRA
    pieces: list[_Piece] = []
    used: list[str] = []
    if null_weight is not None:
        # as many known null vectors (one per component that has one) as eigenpairs wanted: the answer is the
        # null space, nothing to solve
        norms = np.sqrt(np.bincount(labels, weights=np.abs(null_weight) ** 2, minlength=sizes.size))
        with_null = np.flatnonzero(norms > 0)
        if with_null.size >= min(count, n):
            pieces = _null_pieces(null_weight, norms, order, first, sizes, with_null, lap.dtype)
            return (*_merge(pieces, n, count, bound, lap.dtype), ["null space"])
    dense_limit = max(dense_max_nodes, keep + 2)  # (ARPACK needs fewer eigenpairs than nodes)
    small = np.flatnonzero(sizes <= dense_limit)
    pieces += _dense_components(lap, labels, position, sizes, order, first, small, keep, workers)
    for comp in np.flatnonzero(sizes > dense_limit):
        nodes = order[first[comp]:first[comp] + sizes[comp]]
        sub = lap if sizes.size == 1 else lap[nodes][:, nodes].tocsr()  # (one component: nodes are 0..n-1)
        null = None
        if null_weight is not None and np.any(null_weight[nodes] != 0):
            null = null_weight[nodes].astype(lap.dtype)
            null = null / np.sqrt(inner(null, null).real)
        values, vectors, name = sparse_eigenpairs(sub, min(count, sizes[comp] - 1), null=null, bound=bound,
                                                  solver=solver)
        used.append(name)
        pieces.append(_Piece(nodes[None], values[None], vectors[None], np.array([values.size])))
    return (*_merge(pieces, n, count, bound, lap.dtype), used)


def _null_pieces(null_weight: np.ndarray, norms: np.ndarray, order: np.ndarray, first: np.ndarray,
                 sizes: np.ndarray, comps: np.ndarray, dtype: np.dtype) -> list[_Piece]:
    """Each component's normalised null vector as its only eigenpair (eigenvalue 0), grouped by size."""
    pieces = []
    for s in np.unique(sizes[comps]):
        group = comps[sizes[comps] == s]
        nodes = order[first[group][:, None] + np.arange(s)]
        vectors = (null_weight[nodes] / norms[group][:, None]).astype(dtype)[:, :, None]
        pieces.append(_Piece(nodes, np.zeros((group.size, 1)), vectors, np.ones(group.size, dtype=np.int64)))
    return pieces


def _dense_components(lap: Any, labels: np.ndarray, position: np.ndarray, sizes: np.ndarray, order: np.ndarray,
                      first: np.ndarray, comps: np.ndarray, keep: int, workers: int) -> list[_Piece]:
    """Batched dense eigh of the components ``comps``, grouped by size, in chunks of bounded memory (one sort of
    the components and one of the matrix entries, then contiguous ranges)."""
    if comps.size == 0:
        return []
    comps = comps[np.argsort(sizes[comps], kind="stable")]
    rank = np.full(sizes.size, -1, dtype=np.int64)
    rank[comps] = np.arange(comps.size)
    coo = lap.tocoo()
    entry_rank = rank[labels[coo.row]]
    mine = entry_rank >= 0
    entry_rank, rows, cols, data = entry_rank[mine], coo.row[mine], coo.col[mine], coo.data[mine]
    by_rank = np.argsort(entry_rank, kind="stable")
    entry_rank, rows, cols, data = entry_rank[by_rank], rows[by_rank], cols[by_rank], data[by_rank]
    dtype = torch.complex128 if np.iscomplexobj(data) else torch.float64
    comp_sizes = sizes[comps]
    pieces = []
    for s in np.unique(comp_sizes):
        lo_rank, hi_rank = np.searchsorted(comp_sizes, [s, s + 1])
        per_chunk = max(1, CHUNK_ELEMENTS // int(s * s))
        for lo in range(lo_rank, hi_rank, per_chunk):
            hi = min(lo + per_chunk, hi_rank)
            e_lo, e_hi = np.searchsorted(entry_rank, [lo, hi])
            dense = torch.zeros(hi - lo, s, s, dtype=dtype)
            index = (torch.from_numpy(entry_rank[e_lo:e_hi] - lo), torch.from_numpy(position[rows[e_lo:e_hi]]),
                     torch.from_numpy(position[cols[e_lo:e_hi]]))
            dense.index_put_(index, torch.from_numpy(data[e_lo:e_hi]).to(dtype), accumulate=True)
            values, vectors = batched_eigh([dense], workers)[0]
            count_step()
            m = min(keep, int(s))
            chunk = comps[lo:hi]
            nodes = order[first[chunk][:, None] + np.arange(s)]
            pieces.append(_Piece(nodes, values[:, :m].numpy(), vectors[:, :, :m].numpy(), np.full(chunk.size, m)))
    return pieces


def _merge(pieces: list[_Piece], n: int, count: int, bound: float,
           dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Lowest ``count`` eigenpairs over all components, canonical basis per eigenspace (the package docstring)."""
    count = min(count, n)
    out = np.zeros((n, count), dtype=np.complex128 if np.issubdtype(dtype, np.complexfloating) else np.float64)
    if count == 0:
        return np.zeros(0), out
    if len(pieces) == 1 and pieces[0].values.shape[0] == 1:  # one component: its canonical basis, no merging
        piece = pieces[0]
        available = int(piece.available[0])
        vectors = torch.from_numpy(np.ascontiguousarray(piece.vectors[:, :, :available]))
        values = torch.from_numpy(np.ascontiguousarray(piece.values[:, :available]))
        # (the tensor program: a large graph's one basis does not repay loading numba in a fresh process)
        out[piece.nodes[0]] = canonical_basis(vectors, values, count, scale=bound, check=False,
                                              compiled=False)[0].numpy()
        return piece.values[0, :count].copy(), out
    # every candidate eigenpair: (value, piece, component within piece, column)
    cand_value, cand_piece, cand_comp, cand_col = [], [], [], []
    for p, piece in enumerate(pieces):
        g, m = piece.values.shape
        valid = np.arange(m)[None, :] < piece.available[:, None]
        comp, col = np.nonzero(valid)
        cand_value.append(piece.values[comp, col])
        cand_piece.append(np.full(comp.size, p))
        cand_comp.append(comp)
        cand_col.append(col)
    value, piece_of, comp_of, col_of = (np.concatenate(x) for x in (cand_value, cand_piece, cand_comp, cand_col))
    sort = np.lexsort((col_of, comp_of, piece_of, value))
    value, piece_of, comp_of, col_of = value[sort], piece_of[sort], comp_of[sort], col_of[sort]
    cluster = value_clusters(value, bound)
    last = cluster[count - 1]
    members = cluster <= last
    value, piece_of, comp_of, col_of, cluster = (x[members] for x in (value, piece_of, comp_of, col_of, cluster))
    # canonical basis inside each component, with the global clusters, then merged in pivot order
    local_vectors: dict[tuple[int, int, int], np.ndarray] = {}
    local_size: dict[tuple[int, int, int], float] = {}
    local_node: dict[tuple[int, int, int], int] = {}
    for p in np.unique(piece_of):
        piece = pieces[p]
        mine = piece_of == p
        width = int(col_of[mine].max()) + 1
        g = piece.vectors.shape[0]
        clusters = np.full((g, width), -1, dtype=np.int64)
        clusters[comp_of[mine], col_of[mine]] = cluster[mine]
        # columns not among the members get clusters of their own after every member's (never selected)
        spare = clusters < 0
        clusters[spare] = last + 1 + np.arange(width)[None, :].repeat(g, 0)[spare]
        clusters = np.maximum.accumulate(clusters, axis=1)
        basis, pivot, size = canonical_basis(torch.from_numpy(np.ascontiguousarray(piece.vectors[:, :, :width])),
                                             torch.from_numpy(np.ascontiguousarray(piece.values[:, :width])),
                                             clusters=torch.from_numpy(clusters), return_pivots=True,
                                             check=False)
        basis, pivot, size = basis.numpy(), pivot.numpy(), size.numpy()
        for c, j in zip(comp_of[mine], col_of[mine]):
            key = (int(p), int(c), int(j))
            local_vectors[key] = basis[c, :, j]
            local_size[key] = float(size[c, j])
            local_node[key] = int(piece.nodes[c, pivot[c, j]])
    values_out = np.zeros(count)
    column = 0
    for cid in np.unique(cluster):
        mine = np.flatnonzero(cluster == cid)
        keys = [(int(piece_of[i]), int(comp_of[i]), int(col_of[i])) for i in mine]
        queues: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
        for key in sorted(keys):  # within a component: columns in canonical order
            queues.setdefault(key[:2], []).append(key)
        while queues and column < count:
            heads = [(q[0], local_size[q[0]], local_node[q[0]]) for q in queues.values()]
            top = max(h[1] for h in heads)
            # canonical_spec R3 over the pieces' pivots (R6): the largest magnitude, ties to the lowest node
            key = min((h for h in heads if ties_largest(h[1], top, CANONICAL_TOL)), key=lambda h: h[2])[0]
            queues[key[:2]].pop(0)
            if not queues[key[:2]]:
                del queues[key[:2]]
            out[pieces[key[0]].nodes[key[1]], column] = local_vectors[key]
            values_out[column] = float(value[mine][keys.index(key)])
            column += 1
    return values_out, out
