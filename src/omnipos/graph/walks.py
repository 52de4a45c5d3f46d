"""The random-walk machinery shared by :func:`omnipos.graph.random_walk_pe` and :func:`omnipos.graph.rrwp`:
transition matrices ``P_ij = w_ij / sum_j w_ij`` from a checked :class:`~omnipos.graph._input.GraphBatch` (dense
per size group, or SciPy CSR for big graphs) and the return probabilities ``(P^s)_ii`` on both paths. See
:mod:`omnipos.graph.random_walk` for the conventions and the accuracy."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ._input import GraphBatch, SizeGroup

__all__ = [
    "transition_weights",
    "chunk_size",
    "numpy_path",
    "dense_transitions",
    "return_probabilities",
    "SparseTransitions",
    "sparse_transitions",
    "sparse_return_probabilities",
    "estimated_return_probabilities",
]

# Steps up to this are computed by baby-step giant-step, longer ones by repeated squaring.
_SQUARING_ABOVE = 4096
_TORCH_ON_CPU = False
# Entries (sparse non-zeros or dense numbers) per propagated block of rows on the sparse path.
_BLOCK_ENTRIES = 1 << 22
# A block of sparse rows is continued densely once this share of its graphs' columns is filled.
_DENSE_FILL = 0.05


def transition_weights(g: GraphBatch, weighted: bool = True) -> GraphBatch:
    """``g`` with its zero-weight edges dropped and each weight divided by the largest out-weight of its source
    node (values in ``(0, 1]``, so sums of them neither overflow nor underflow; ``P`` is unchanged). A ratio
    below float64's smallest number (2**-1074) is a transition probability of 0 and drops out too.
    ``weighted=False`` (all weights 1, where the division is exact): ``g`` itself."""
    if not weighted:
        return g
    keep = g.edge_weight > 0
    row, col, weight = g.edge_index[0][keep], g.edge_index[1][keep], g.edge_weight[keep]
    peak = torch.zeros(g.num_nodes, dtype=torch.float64, device=g.device)
    peak.scatter_reduce_(0, row, weight, "amax", include_self=False)
    weight = weight / peak[row]
    keep = weight > 0
    return dataclasses.replace(g, edge_index=torch.stack([row[keep], col[keep]]), edge_weight=weight[keep])


# ---------------------------------------------------------------------------------------------------- dense


def chunk_size(n: int, device: torch.device) -> int:
    """Graphs per dense chunk of ``n``-node graphs. On the CPU the chunk only bounds memory (~8 MB a matrix): the
    products run in NumPy, one BLAS call per matrix, so a matrix's result does not depend on its neighbours. On
    other devices a batched product might pick its kernel by batch size, so the chunk size is a function of
    ``n`` alone and the last chunk is padded with empty graphs: every product has the same shape in any batch."""
    return max(1, min(1 << 16 if numpy_path(device) else 256, (1 << 20) // (n * n)))


def numpy_path(device: torch.device) -> bool:
    """Whether dense work on ``device`` runs in NumPy (the CPU) or in torch (``_TORCH_ON_CPU`` lets the tests run
    the padded torch path on a CPU)."""
    return device.type == "cpu" and not _TORCH_ON_CPU


def dense_transitions(group: SizeGroup) -> Iterator[tuple[torch.Tensor, Any]]:
    """``(graphs [c], P)`` for successive chunks of a size group built from :func:`transition_weights`: ``P`` is
    the float64 ``[c, n, n]`` NumPy array on the CPU, else a ``[C, n, n]`` tensor padded with empty graphs."""
    n, count, device = group.n, group.graphs.numel(), group.graphs.device
    size = chunk_size(n, device)
    if count == 1:  # one graph (a transform called graph by graph): nothing to sort
        slot, row, col, weight = group.slot, group.row, group.col, group.weight
        bounds = [0, int(slot.numel())]
    else:
        order = torch.argsort(group.slot, stable=True)  # stable: duplicate edges add up in the given order
        slot, row, col, weight = group.slot[order], group.row[order], group.col[order], group.weight[order]
        bounds = torch.searchsorted(slot, torch.arange(0, count + size, size, device=device)).tolist()
    for i, start in enumerate(range(0, count, size)):
        lo, hi = bounds[i], bounds[i + 1]
        graphs = group.graphs[start:start + size]
        numpy = numpy_path(device)
        rows = graphs.numel() if numpy else size
        adjacency = torch.zeros(rows, n, n, dtype=torch.float64, device=device)
        adjacency.index_put_((slot[lo:hi] - start, row[lo:hi], col[lo:hi]), weight[lo:hi], accumulate=True)
        if numpy:
            adjacency = adjacency.numpy()
        degree = adjacency.sum(-1, keepdims=True) if numpy else adjacency.sum(-1, keepdim=True)
        degree[degree == 0] = 1.0
        yield graphs, adjacency / degree


def _stochastic(matrix: Any) -> Any:
    """Each row divided by its sum (all rows sum to 1 in exact arithmetic, see :func:`_power`)."""
    sums = matrix.sum(-1, keepdims=True) if isinstance(matrix, np.ndarray) else matrix.sum(-1, keepdim=True)
    return matrix / sums


def _power(transition: Any, s: int) -> Any:
    """``P^s`` by repeated squaring (``~2 log2(s)`` products). Rounding would make a row sum ``1 +- 1e-16``, and
    sixty squarings raise that to the power 2**60 (inf or 0 at ``steps=[2**62]``); so ``P`` is first made exactly
    stochastic by an absorbing extra node that takes the mass of nodes without out-edges (a walk that enters it
    never returns, so no return probability changes), and every product's rows are scaled back to sum 1."""
    n = transition.shape[-1]
    if isinstance(transition, np.ndarray):
        padded = np.zeros((*transition.shape[:-2], n + 1, n + 1), dtype=transition.dtype)
        deficit = np.clip(1 - transition.sum(-1), 0, 1)
    else:
        padded = transition.new_zeros((*transition.shape[:-2], n + 1, n + 1))
        deficit = (1 - transition.sum(-1)).clamp(0, 1)
    padded[..., :n, :n] = transition
    padded[..., :n, n] = deficit
    padded[..., n, n] = 1
    result, base = None, _stochastic(padded)
    while True:
        if s & 1:
            result = base if result is None else _stochastic(result @ base)
        s >>= 1
        if not s:
            return result[..., :n, :n]
        base = _stochastic(base @ base)


def return_probabilities(transition: Any, steps: list[int]) -> Any:
    """``diag(P^s)`` for each ``s`` in ``steps`` of batched dense ``transition [G, n, n]`` (a tensor or a NumPy
    array) -> ``[G, n, len(steps)]`` of the same kind.

    Baby-step giant-step: with ``m = ceil(sqrt(max(steps)))``, only ``P^1..P^m`` and ``P^m, P^2m, ...`` are
    formed (about ``2 sqrt(S)`` matrix products instead of ``S - 1``); ``diag(P^(qm + r))_i`` is then the
    elementwise ``sum_l (P^qm)_il (P^r)_li``, ``O(n^2)`` per step. Steps above 4096 are computed on their own by
    repeated squaring (``~2 log2(s)`` products each).
    """
    numpy = isinstance(transition, np.ndarray)
    diagonals: dict[int, Any] = {}
    for s in {s for s in steps if s > _SQUARING_ABOVE}:
        diagonals[s] = _power(transition, s).diagonal(0, -2, -1)
    short = [s for s in steps if s <= _SQUARING_ABOVE]
    if short:
        longest = max(short)
        m = math.isqrt(longest - 1) + 1  # ceil(sqrt(longest))
        small = [transition]  # small[r - 1] = P^r
        for _ in range(1, m):
            small.append(small[-1] @ transition)
        giants = {1: small[-1]}  # giants[q] = P^(q m)
        for q in range(2, (longest - 1) // m + 1):
            giants[q] = giants[q - 1] @ small[-1]
        transposed: dict[int, Any] = {}
        for s in short:
            if s in diagonals:
                continue
            q, r = (s - 1) // m, (s - 1) % m + 1
            if q == 0:
                diagonals[s] = small[r - 1].diagonal(0, -2, -1)
            elif numpy:  # row i of P^qm times column i of P^r; einsum's loop is 2.5x (P * P^T).sum(-1)'s speed
                diagonals[s] = np.einsum("...ij,...ji->...i", giants[q], small[r - 1])
            else:
                if r not in transposed:  # contiguous, so the product below streams both operands
                    transposed[r] = small[r - 1].transpose(-1, -2).contiguous()
                diagonals[s] = (giants[q] * transposed[r]).sum(-1)
    stacked = [diagonals[s] for s in steps]
    return np.stack(stacked, axis=-1) if numpy else torch.stack(stacked, dim=-1)


# ---------------------------------------------------------------------------------------------------- sparse


@dataclasses.dataclass(frozen=True)
class SparseTransitions:
    """The transition matrix of the graphs on the sparse path as SciPy CSR (sorted indices, duplicates summed),
    nodes renumbered ``0..n-1`` in order. ``nodes``: their ids in the batch. ``start`` / ``stop``: first and
    one-past-last (renumbered) node of each node's graph. ``symmetric``: the summed weights are symmetric, and
    ``matrix`` then holds ``S = D^-1/2 A D^-1/2`` instead of ``P``; ``transpose`` is ``P^T`` otherwise."""

    nodes: torch.Tensor
    matrix: Any
    transpose: Any
    diagonal: np.ndarray  # P_ii
    start: np.ndarray
    stop: np.ndarray
    symmetric: bool

    @property
    def n(self) -> int:
        return self.matrix.shape[0]


def _csr(row: np.ndarray, col: np.ndarray, value: np.ndarray, n: int) -> Any:
    """CSR of entries already sorted by (row, col) without duplicates."""
    import scipy.sparse as sp

    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=n), out=indptr[1:])
    matrix = sp.csr_matrix((value, col, indptr), shape=(n, n))
    matrix.has_sorted_indices = True
    return matrix


def sparse_transitions(g: GraphBatch, big: torch.Tensor, *, symmetric_form: bool = True,
                       relabel: bool = False) -> SparseTransitions:
    """The graphs ``big`` (``[B]`` bool) of the checked ``g`` as :class:`SparseTransitions`, computed on the CPU.
    ``symmetric_form=False`` always keeps ``P`` (RRWP needs ``P`` itself). ``relabel`` (one graph): number the
    nodes in reverse Cuthill-McKee order, so that a node's neighbourhood lies in nearby rows (the sparse products
    then stay in cache: 2.5x faster on a million-node random geometric graph); ``nodes`` says where each row
    came from."""
    node_mask = big[g.batch]
    nodes = node_mask.nonzero().squeeze(1)
    n = int(nodes.numel())
    width = max(n, 1)
    renumber = torch.cumsum(node_mask.long(), 0) - 1
    keep = node_mask[g.edge_index[0]] & (g.edge_weight > 0)
    row = renumber[g.edge_index[0][keep]].cpu().numpy()
    col = renumber[g.edge_index[1][keep]].cpu().numpy()
    weight = g.edge_weight[keep].cpu().numpy()
    if relabel and n:
        import scipy.sparse as sp
        from scipy.sparse.csgraph import reverse_cuthill_mckee

        pattern = sp.csr_matrix((np.ones(row.size, dtype=np.int8), (row, col)), shape=(n, n))
        order = reverse_cuthill_mckee(pattern, symmetric_mode=False)  # a function of this graph alone
        position = np.empty(n, dtype=np.int64)
        position[order] = np.arange(n)
        row, col = position[row], position[col]
        nodes = nodes[torch.from_numpy(order.astype(np.int64)).to(nodes.device)]
    keys, inverse = np.unique(row * width + col, return_inverse=True)
    row, col = keys // width, keys % width
    # P from weights divided by their node's largest out-weight (see transition_weights); sums in edge order
    peak = np.zeros(n)
    np.maximum.at(peak, row[inverse], weight)
    value = np.bincount(inverse, weights=weight / peak[row[inverse]], minlength=keys.size)
    value = value / np.bincount(row, weights=value, minlength=n)[row]
    positive = value > 0
    if not positive.all():  # ratios below 2**-1074: probability 0
        keys, row, col, value = keys[positive], row[positive], col[positive], value[positive]
    matrix = _csr(row, col, value, n)
    diagonal = matrix.diagonal()
    flipped = np.lexsort((row, col))  # the entries of P^T, sorted by (col, row)
    symmetric = False
    if symmetric_form and np.array_equal(keys, (col * width + row)[flipped]):
        with np.errstate(over="ignore"):
            summed = np.bincount(inverse, weights=weight, minlength=positive.size)[positive]
        # the original weights, summed, are symmetric (an overflowing sum counts as not: the general
        # computation is right for any graph)
        symmetric = bool(np.isfinite(summed).all() and np.array_equal(summed, summed[flipped]))
    if symmetric:
        matrix = _csr(row, col, np.sqrt(value) * np.sqrt(value[flipped]), n)
        transpose = matrix
    else:
        transpose = _csr(col[flipped], row[flipped], value[flipped], n)
    counts = g.counts[big].cpu().numpy()
    stop = np.repeat(np.cumsum(counts), counts)
    return SparseTransitions(nodes, matrix, transpose, diagonal, stop - np.repeat(counts, counts), stop, symmetric)


class _Rows:
    """Rows of a power of a sparse matrix, in the local column numbering of their graphs (columns ``c0..c1-1``
    of the batch are ``0..m-1``): CSR ``[b, m]`` with sorted indices or, once they have spread, dense columns
    ``[m, b]`` (transposed, so that the next product is SciPy's CSR-times-dense kernel). Both forms add the same
    products in the same (ascending column) order."""

    __slots__ = ("sparse", "dense")

    def __init__(self, sparse: Any = None, dense: np.ndarray | None = None) -> None:
        self.sparse, self.dense = sparse, dense

    @property
    def entries(self) -> int:
        return self.sparse.nnz if self.dense is None else self.dense.size

    def columns(self) -> np.ndarray:
        return self.dense if self.dense is not None else np.ascontiguousarray(self.sparse.toarray().T)

    def times(self, matrix: Any, transpose: Any) -> _Rows:
        """``self @ matrix`` (``transpose`` is ``matrix^T``; both ``[m, m]`` CSR)."""
        if self.dense is not None:
            return _Rows(dense=transpose @ self.dense)
        product = self.sparse @ matrix
        product.sort_indices()
        size = product.shape[0] * product.shape[1]
        if _DENSE_FILL * size < product.nnz and size <= 4 * _BLOCK_ENTRIES:
            return _Rows(dense=np.ascontiguousarray(product.toarray().T))
        return _Rows(sparse=product)

    def dot(self, other: _Rows) -> np.ndarray:
        """Row-wise dot products ``[b]``, summed left to right in ascending column order in both forms."""
        if self.dense is None and other.dense is None:
            return self.sparse.multiply(other.sparse) @ np.ones(self.sparse.shape[1])
        products = self.columns() * other.columns()
        width = products.shape[1]
        if width == 1:  # (a single column would be summed pairwise, as a contiguous vector)
            products = np.concatenate([products, np.zeros_like(products)], axis=1)
        # NumPy reduces axis 0 of a C-contiguous [m, >= 2] array row after row: sequential, as csr_matvec
        return np.add.reduce(products, axis=0)[:width] if products.shape[0] else np.zeros(width)


def _block_of(matrix: Any, r0: int, r1: int, c0: int, c1: int) -> Any:
    """Rows ``r0..r1-1`` of a block-diagonal CSR matrix whose entries lie in columns ``c0..c1-1``, with those
    columns renumbered ``0..c1-c0-1``."""
    import scipy.sparse as sp

    lo, hi = matrix.indptr[r0], matrix.indptr[r1]
    block = sp.csr_matrix((matrix.data[lo:hi], matrix.indices[lo:hi] - c0, matrix.indptr[r0:r1 + 1] - lo),
                          shape=(r1 - r0, c1 - c0))
    block.has_sorted_indices = True
    return block


class _TooWide(Exception):
    """A block of rows would outgrow the memory bound at its next product: retry it in smaller blocks."""


def sparse_return_probabilities(t: SparseTransitions, steps: list[int], block: int | None,
                                 report: Any) -> np.ndarray:
    """``(P^s)_ii`` of every node of ``t`` for ``s`` in ``steps`` -> ``[n, len(steps)]`` float64."""
    out = np.zeros((t.n, len(steps)))
    columns: dict[int, list[int]] = {}
    for c, s in enumerate(steps):
        columns.setdefault(s, []).append(c)
    for c in columns.get(1, ()):
        out[:, c] = t.diagonal
    size = block or min(t.n, 256)
    blocks: dict[tuple[int, int], tuple[Any, Any]] = {}  # the last graphs' [m, m] blocks (a big graph: all blocks)
    r0 = 0
    while r0 < t.n:
        r1 = min(t.n, r0 + size)
        try:
            widest = _walk_block(t, r0, r1, max(steps), blocks,
                                 lambda s, values, r0=r0, r1=r1: _record(out, columns, s, r0, r1, values))
        except _TooWide:  # (the rows written so far are written again: the result does not depend on blocks)
            size = max(1, (r1 - r0) // 4)
            continue
        report.update(r1 - r0)
        if block is None:  # the next block holds about _BLOCK_ENTRIES entries if its rows spread like these
            size = max(1, min(4 * size, _BLOCK_ENTRIES * (r1 - r0) // widest))
        r0 = r1
    return out


def _record(out: np.ndarray, columns: dict[int, list[int]], s: int, r0: int, r1: int, values: np.ndarray) -> None:
    for c in columns.get(s, ()):
        out[r0:r1, c] = values


def _walk_block(t: SparseTransitions, r0: int, r1: int, longest: int, blocks: dict, record: Any) -> int:
    """Propagate rows ``r0..r1-1`` and record their return probabilities; returns the most entries held.
    Raises :class:`_TooWide` (for blocks of more than one row) when a product could exceed 4x the bound."""
    c0, c1 = int(t.start[r0]), int(t.stop[r1 - 1])  # the columns of the block's graphs
    if (c0, c1) not in blocks:
        blocks.clear()
        blocks[c0, c1] = _block_of(t.matrix, c0, c1, c0, c1), _block_of(t.transpose, c0, c1, c0, c1)
    matrix, transpose = blocks[c0, c1]
    forward = _Rows(sparse=_block_of(t.matrix, r0, r1, c0, c1))  # rows of P^a (or S^a)
    backward = forward if t.symmetric else _Rows(sparse=_block_of(t.transpose, r0, r1, c0, c1))  # of (P^T)^b
    row_sizes = (np.diff(matrix.indptr), np.diff(transpose.indptr))
    widest = max(1, forward.entries, backward.entries)

    def step(rows: _Rows, by: Any, by_transpose: Any, row_size: np.ndarray) -> _Rows:
        if rows.dense is None:  # an upper bound of the product's entries, before it is formed
            bound = min(int(row_size[rows.sparse.indices].sum()), rows.sparse.shape[0] * (c1 - c0))
            if bound > 4 * _BLOCK_ENTRIES and r1 - r0 > 1:
                raise _TooWide
        return rows.times(by, by_transpose)

    a = 1
    while 2 * a <= longest:
        record(2 * a, forward.dot(backward))  # (P^2a)_ii = rows of P^a . columns of P^a
        if 2 * a + 1 > longest:
            break
        forward = step(forward, matrix, transpose, row_sizes[0])
        record(2 * a + 1, forward.dot(backward))
        if t.symmetric:
            backward = forward
        elif 2 * a + 2 <= longest:
            backward = step(backward, transpose, matrix, row_sizes[1])
        widest = max(widest, forward.entries, backward.entries)
        a += 1
    return widest


def estimated_return_probabilities(matrix: Any, steps: list[int], probes: int, rng: np.random.Generator,
                                   report: Any, chunk: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Hutchinson's estimate of ``(M^s)_ii`` for ``s`` in ``steps`` (``M``: ``[n, n]`` CSR, ``P`` or the
    symmetric ``S`` of the same walk): the mean over ``probes`` Rademacher vectors ``z`` of ``z_i (M^s z)_i``,
    which is unbiased, with variance ``sum_{l != i} (M^s)_il^2`` per probe. Probes are propagated ``chunk`` at a
    time (memory ``O(n * chunk)``; ``max(steps)`` sparse products per chunk). Returns ``(mean [n, S], standard
    error [n, S])``, the standard error being the probes' sample standard deviation over ``sqrt(probes)``."""
    n = matrix.shape[0]
    columns: dict[int, list[int]] = {}
    for c, s in enumerate(steps):
        columns.setdefault(s, []).append(c)
    sums = np.zeros((n, len(steps)))
    squares = np.zeros((n, len(steps)))
    for start in range(0, probes, chunk):
        b = min(chunk, probes - start)
        z = rng.integers(0, 2, size=(n, b)).astype(np.float64) * 2 - 1
        y = z
        for s in range(1, max(steps) + 1):
            y = matrix @ y
            if s in columns:
                terms = z * y
                for c in columns[s]:
                    sums[:, c] += terms.sum(1)
                    squares[:, c] += (terms * terms).sum(1)
        report.update(n * b)
    mean = sums / probes
    variance = np.maximum(squares / probes - mean * mean, 0.0) * (probes / (probes - 1))
    return mean, np.sqrt(variance / probes)
