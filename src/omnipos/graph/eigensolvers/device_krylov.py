"""The lowest eigenpairs of one large connected graph on the graph's own device (CUDA; any torch device works, and
the tests run it on the CPU): :func:`device_eigenpairs`, what :func:`omnipos.graph.laplacian_pe` uses for a graph
above ``dense_max_nodes`` whose tensors are on CUDA (issue 35: a 1e6-node graph in seconds, where the CPU path's
single-precision ARPACK takes about a minute).

1. The Laplacian as a torch sparse CSR tensor on the input's device (:func:`device_laplacian`): the same matrix
   as :func:`omnipos.graph.laplacian.sparse_laplacian` builds in SciPy (self-loops dropped, duplicate edges
   summed, ``A <- max(A, A^T)``, zero weights dropped; ``"sym"`` / ``"rw"``: ``I - D^-1/2 A D^-1/2``, ``None``:
   ``D - A``), built as ``bound * I - L`` directly (the spectral transform below), float64.
2. Connected components are counted (SciPy, on a host copy of the edge pattern). A graph of more than one
   component returns ``None`` and the caller takes the CPU path (:func:`graph_eigenpairs`, which solves the
   components apart and merges their canonical bases): the device solver handles one connected graph only.
3. Thick-restart block Lanczos (Krylov-Schur form, full re-orthogonalisation: classical Gram-Schmidt twice
   against the whole basis, four thin matrix products a step, with a QR between the passes so that a Krylov
   space that breaks down - an invariant subspace, on graphs with an eigenvalue of many copies - continues in
   fresh directions) on ``M = bound * I - L`` restricted to the complement of
   the known null vector (``sqrt(degree)`` or ones, deflated from every product, never computed): the lowest
   eigenvalues of ``L`` are the largest of ``M``, at its top end, where Lanczos converges first (the same
   transform as the CPU ``"lanczos"`` solver, :mod:`.lanczos`, here in float64). Each step is one sparse
   matrix-matrix product ``M @ X`` of a block of :data:`BLOCK` vectors; the projected matrix ``H = Q^T M Q`` is
   assembled from the Gram-Schmidt coefficients (as :mod:`.block_krylov` does). When the basis is full
   (:data:`BASIS_ELEMENTS`) it restarts from the best half of its Ritz vectors (``H`` becomes their Ritz values
   on the diagonal; the next block, orthogonal to the old basis, continues the Krylov-Schur relation
   ``M Q = Q H + F E^T``), and the progress reporter ticks. Convergence is read off that relation without a
   product (a Ritz pair's residual is ``||R y_last||``) every :data:`CHECK_EVERY` steps: the only host
   synchronisation of the loop. Every Ritz pair wanted plus :data:`EXTRA` must reach ``||L v - lambda v|| <=``
   :data:`TOL` ``* bound``.
4. Repeated eigenvalues: a block Krylov space holds ``min(block, multiplicity)`` copies of each eigenvalue, so
   where a cluster (:func:`omnipos.graph.eigenvalue_clusters`' rule, ``EIGENVALUE_TOL * bound``) up to the cut
   has as many copies as the block, or the cut's cluster may continue past the pairs found, the solve runs again
   from the vectors found with a wider block / more pairs (as :func:`.block_krylov.block_shift_invert` does).
   Where that would take a basis of a fifth of the graph (a star's or a complete bipartite graph's eigenvalue of
   hundreds of copies), or Lanczos does not converge within :data:`MAX_RESTARTS` restarts (lowest eigenvalues
   crowded very close: long paths, large grids), :func:`device_eigenpairs` returns ``None`` and the caller takes
   the CPU path.
5. A float64 Rayleigh-Ritz step on ``L`` (eigenvalues as Rayleigh quotients, residuals measured on ``L``: a
   RuntimeWarning above ``1e-4 * bound``, as the CPU solvers), the null vector prepended with eigenvalue 0, and
   the canonical basis of :func:`omnipos.graph.canonical_basis` (the tensor program: it runs on any device) with
   the CPU path's eigenvalue clusters (scale ``bound``).

Accuracy (tests/graph/test_device_krylov.py, on the CPU against SciPy's ``eigsh`` and the CPU path): residuals
``<= 1e-10 * bound``, so eigenvalues to ~1e-12 and canonical vectors to ~residual / gap.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ...core import ProgressReporter
from ..canonical_spec import EIGENVALUE_TOL, starts_cluster
from ..sign import canonical_basis

__all__ = ["BASIS_ELEMENTS", "BLOCK", "CHECK_EVERY", "MAX_RESTARTS", "TOL", "device_eigenpairs", "device_laplacian"]

#: Extra eigenpairs beyond those asked for (the CPU solvers' EXTRA: complete eigenspaces at the cut).
EXTRA = 2
#: Float64 elements of the Krylov basis (2 GB: 256 columns at 1e6 nodes); the basis is also capped at
#: ``2 * width + BASIS_BLOCKS * block`` columns.
BASIS_ELEMENTS = 256_000_000
#: Blocks of the basis beyond twice the pairs wanted (before a restart).
BASIS_BLOCKS = 16
#: Starting block size (vectors per sparse product); grows past the largest multiplicity found.
BLOCK = 4
#: Steps (block products) between convergence checks (each check is one small eigh and one host sync).
CHECK_EVERY = 4
#: Residual ``||L v - lambda v||`` every pair must reach, relative to the spectrum bound.
TOL = 1e-10
#: Residual the :data:`EXTRA` pairs beyond those wanted must reach (relative to the bound): they only show
#: where the eigenspace at the cut ends.
EXTRA_TOL = 1e-6
#: Restarts before the device solver gives up and the caller takes the CPU path (graphs whose lowest eigenvalues
#: crowd so close that plain Lanczos barely moves: long paths, large grids; the CPU path factorises there).
MAX_RESTARTS = 500


def device_laplacian(row: torch.Tensor, col: torch.Tensor, weight: torch.Tensor, n: int,
                     normalization: str | None, shifted: bool = False
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """One graph's Laplacian on the edges' device: ``(matrix, degree [n], null_weight [n], bound)``.

    ``matrix`` is the sparse CSR float64 ``L``, or with ``shifted=True`` ``bound * I - L``; ``bound`` the
    spectrum's upper bound (2, or ``2 max(degree)`` (>= 1) for ``D - A``, as the CPU path's). Same matrix as
    :func:`omnipos.graph.laplacian.sparse_laplacian` (``"rw"`` gives the symmetric one)."""
    device = row.device
    keep = row != col
    row, col, weight = row[keep].long(), col[keep].long(), weight[keep].to(torch.float64)
    key, inverse = torch.unique(row * n + col, return_inverse=True)  # duplicates summed
    summed = torch.zeros(key.numel(), dtype=torch.float64, device=device).index_add_(0, inverse, weight)
    r, c = key // n, key % n
    # A <- max(A, A^T): every entry in both directions, the larger kept (weights are >= 0)
    key, inverse = torch.unique(torch.cat([key, c * n + r]), return_inverse=True)  # sorted: row-major order
    value = torch.zeros(key.numel(), dtype=torch.float64, device=device).scatter_reduce_(
        0, inverse, torch.cat([summed, summed]), "amax", include_self=False)
    nonzero = value != 0
    key, value = key[nonzero], value[nonzero]
    r, c = key // n, key % n
    degree = torch.zeros(n, dtype=torch.float64, device=device).index_add_(0, r, value)
    if normalization is None:
        entries, diagonal, null_weight = -value, degree, torch.ones(n, dtype=torch.float64, device=device)
        bound = 2.0 * max(float(degree.max()) if n else 0.0, 0.5)
    else:
        inv_sqrt = torch.where(degree > 0, degree.clamp_min(torch.finfo(torch.float64).tiny).rsqrt(), 0.0)
        entries, null_weight = -value * inv_sqrt[r] * inv_sqrt[c], degree.sqrt()
        diagonal = torch.ones(n, dtype=torch.float64, device=device)
        bound = 2.0
    if shifted:
        entries, diagonal = -entries, bound - diagonal
    nodes = torch.arange(n, device=device)
    rows, cols = torch.cat([r, nodes]), torch.cat([c, nodes])
    order = torch.argsort(rows * n + cols)
    crow = torch.zeros(n + 1, dtype=torch.long, device=device)
    crow[1:] = torch.bincount(rows, minlength=n).cumsum(0)
    with warnings.catch_warnings():  # (torch's notice that sparse CSR is in beta)
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        matrix = torch.sparse_csr_tensor(crow, cols[order], torch.cat([entries, diagonal])[order], (n, n),
                                         check_invariants=False)  # (built sorted, in range: nothing to check)
    return matrix, degree, null_weight, bound


def _components(matrix: torch.Tensor, n: int) -> int:
    """Connected components of the CSR pattern (SciPy, on a host copy of the pattern)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    crow, cols = matrix.crow_indices().cpu().numpy(), matrix.col_indices().cpu().numpy()
    pattern = sp.csr_matrix((np.ones(cols.size, dtype=np.int8), cols, crow), shape=(n, n))
    return int(connected_components(pattern, directed=False)[0])


def device_eigenpairs(row: torch.Tensor, col: torch.Tensor, weight: torch.Tensor, n: int, count: int,
                      normalization: str | None, report: ProgressReporter | None = None,
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The ``count`` lowest eigenpairs of one connected graph's Laplacian in the canonical basis, on the edges'
    device (module docstring): ``(values [count], vectors [n, count], degree [n])`` float64, the vectors those
    of the symmetric Laplacian for ``"rw"`` (the caller maps them). ``None`` where the device solver does not
    apply: more than one connected component, a graph too small for a Krylov basis (``5 * (count + EXTRA +
    BLOCK) >= n``), an eigenspace at the cut of too many copies, no convergence within :data:`MAX_RESTARTS`
    (module docstring, step 4); the caller then takes the CPU path."""
    if n < 2 or 5 * (count + EXTRA + BLOCK) >= n:
        return None
    shifted, degree, null_weight, bound = device_laplacian(row, col, weight, n, normalization, shifted=True)
    if _components(shifted, n) != 1:
        return None
    null = null_weight / null_weight.norm()
    wanted = count - 1
    if wanted <= 0:
        return torch.zeros(1, dtype=torch.float64, device=null.device), null[:, None].clone(), degree
    found = _lowest(shifted, null, wanted, bound, report)
    if found is None:
        return None
    values, vectors = found
    values = torch.cat([values.new_zeros(1), values])
    vectors = torch.cat([null[:, None], vectors], dim=1)
    basis = canonical_basis(vectors[None], values[None], count, scale=bound, check=False)[0]
    return values[:count], basis, degree


def _clusters(values: np.ndarray, bound: float) -> np.ndarray:
    """Eigenspace ids of ascending ``values`` (canonical_spec R1, scale ``bound``)."""
    starts = np.ones(values.size, dtype=np.int64)
    starts[1:] = starts_cluster(np.diff(values), EIGENVALUE_TOL, bound)
    return np.cumsum(starts) - 1


def _lowest(shifted: torch.Tensor, null: torch.Tensor, wanted: int, bound: float,
            report: ProgressReporter | None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``wanted`` (or more: every copy of the eigenvalue at the cut) lowest eigenpairs of ``L`` on the complement
    of ``null``, from ``shifted = bound * I - L``; the block grows until no cluster up to the cut has as many
    copies as the block, and the pairs until the cut's cluster ends among them. ``None`` where that needs a
    basis of a fifth of the graph or more (an eigenvalue of huge multiplicity: a star's), or where Lanczos does
    not converge within :data:`MAX_RESTARTS`: the CPU path's turn."""
    n = shifted.shape[0]
    width = wanted + EXTRA
    block = BLOCK
    start = None
    while True:
        if 5 * (width + block) >= n:
            return None
        vectors = _block_lanczos(shifted, null, wanted, width, block, bound, start, report)
        if vectors is None:
            return None
        values, vectors, residual = _rayleigh_ritz(shifted, vectors, bound)
        clusters = _clusters(values.cpu().numpy(), bound)
        cut = clusters[wanted - 1]
        copies = np.bincount(clusters)[:cut + 1].max()
        if copies < block and clusters[-1] > cut:
            break
        block = max(block, int(copies) + 2)
        width = max(width, int(np.searchsorted(clusters, cut, side="right")) + EXTRA)
        start = vectors
    worst = float(residual.max())
    if worst > 1e-4 * bound:
        warnings.warn(f"device block Lanczos reached residual {worst:.2e} only (of ||L v - lambda v||); the "
                      "encoding is inaccurate there", RuntimeWarning, stacklevel=3)
    return values, vectors


def _deflate(null: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return x - null[:, None] * (null @ x)[None, :]


def _block_lanczos(shifted: torch.Tensor, null: torch.Tensor, wanted: int, width: int, block: int, bound: float,
                   start: torch.Tensor | None, report: ProgressReporter | None) -> torch.Tensor | None:
    """``width`` Ritz vectors ``[n, width]`` of the largest eigenvalues of ``shifted`` on the complement of
    ``null``, by thick-restart block Lanczos (module docstring, step 3); ``None`` after :data:`MAX_RESTARTS`."""
    n, device, dtype = shifted.shape[0], null.device, torch.float64
    most = min(BASIS_ELEMENTS // n, 2 * width + BASIS_BLOCKS * block)
    most = max(most, width + 3 * block)
    # column-major [n, most]: a block of columns is one contiguous [block, n] piece, the Gram-Schmidt products read
    # rows of its transpose
    basis = torch.empty(most, n, dtype=dtype, device=device).T
    generator = torch.Generator().manual_seed(0)
    first = torch.randn(n, block, generator=generator, dtype=dtype).to(device)
    if start is not None:
        first[:, :min(block, start.shape[1])] = start[:, :block]  # (the previous solve's lowest vectors)
    basis[:, :block] = torch.linalg.qr(_deflate(null, first))[0]
    projected = torch.zeros(most, most, dtype=dtype, device=device)
    size, steps, restarts = 0, 0, 0
    while True:
        image = _deflate(null, shifted @ basis[:, size:size + block].contiguous())
        size += block
        steps += 1
        done = basis[:, :size]
        # classical Gram-Schmidt twice (twice is enough), normalised between the passes: where the image has
        # (almost) nothing outside the basis (an invariant subspace: stars, complete bipartite graphs, symmetric
        # ones), the first pass leaves rounding noise, which the second makes fresh directions orthogonal to the
        # basis, with a coupling R ~ 0; image = Q (column + again R1) + following (R2 R1)
        column = done.T @ image
        first_q, first_r = torch.linalg.qr(_deflate(null, image - done @ column))
        again = done.T @ first_q
        following, second_r = torch.linalg.qr(_deflate(null, first_q - done @ again))
        column += again @ first_r
        tail = second_r @ first_r
        projected[:size, size - block:size] = column
        projected[size - block:size, :size - block] = column[:size - block].T
        full = size + block > most
        if full or steps % CHECK_EVERY == 0:
            # the loop's host sync: H ([size, size], size <= most) and the last block's R go to the host, where
            # a small eigh is faster than a device launch
            h, r = projected[:size, :size].cpu(), tail.cpu()
            theta, small = torch.linalg.eigh((h + h.T) / 2)
            theta, small = theta.flip(0), small.flip(1)  # largest of M first: lowest of L
            residual = (r @ small[size - block:, :width]).norm(dim=0)
            # the pairs past the cut's eigenspace (as the current Ritz values cluster) only show where it ends:
            # their own tolerance
            clusters = _clusters(bound - theta[:width].numpy(), bound)
            need = int(np.searchsorted(clusters, clusters[wanted - 1], side="right"))
            residual[need:] *= TOL / EXTRA_TOL
            if restarts >= MAX_RESTARTS:
                return None
            if float(residual.max()) <= TOL * bound:
                if report is not None:
                    report.update(1)
                return done @ small[:, :width].to(device)
            if full:
                keep = min(size - block, max(width + block, size // 2))
                basis[:, :keep] = done @ small[:, :keep].to(device)
                projected.zero_()
                projected[:keep, :keep] = torch.diag(theta[:keep]).to(device)
                size = keep
                restarts += 1
                if report is not None:
                    report.update(1)
        basis[:, size:size + block] = following


def _rayleigh_ritz(shifted: torch.Tensor, vectors: torch.Tensor, bound: float
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ritz pairs of ``L = bound * I - shifted`` on the span of orthonormal ``vectors``, ascending, with their
    residuals ``||L v - lambda v||``."""
    image = bound * vectors - shifted @ vectors  # L V
    projected = vectors.T @ image
    values, small = torch.linalg.eigh((projected + projected.T) / 2)
    vectors, image = vectors @ small, image @ small
    residual = (image - vectors * values).norm(dim=0)
    return values, vectors, residual

