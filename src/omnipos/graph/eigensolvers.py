"""Eigensolvers behind the spectral encodings (:func:`omnipos.graph.laplacian_pe`,
:func:`omnipos.graph.magnetic_laplacian_pe`): batched dense ``eigh`` for many small graphs, and the lowest
eigenpairs of one large sparse graph in bounded memory.

Large graphs (more nodes than ``dense_max_nodes``), :func:`graph_eigenpairs`:

1. The graph is split into connected components (its Laplacian is block diagonal over them, so its spectrum is
   the union of theirs). A component's null space is known exactly where there is one (``sqrt(degree)`` for the
   normalised Laplacian, ones for ``D - A``) and is deflated, never computed; when there are at least as many
   such components as eigenpairs wanted (a graph of many pieces), the answer is the null space and nothing is
   solved at all.
2. Components of at most ``dense_max_nodes`` nodes are solved together by batched dense ``eigh`` (chunks of
   bounded memory); larger ones by one sparse solver each (``solver=``):

   - ``"shift-invert"``: Lanczos (ARPACK) on ``(L + sigma I)^-1`` with a sparse LU of ``L + sigma I``
     (``sigma = 1e-6 * bound``; SuperLU with the minimum-degree ordering of ``A + A^T``, no pivoting: the matrix
     is Hermitian positive definite). Converges in a few dozen solves whatever the spectral gap.
   - ``"lobpcg"``: block LOBPCG (SciPy) with a smoothed-aggregation AMG preconditioner (pyamg, the ``[graph]``
     extra; without it ``"lobpcg"`` raises ImportError) of ``L + 1e-5 I`` whose near-null space is the known
     null vector. The block starts ``count + 2`` wide and doubles until the eigenvalue at the cut ends inside it,
     so every copy of a repeated eigenvalue is found.
   - ``"lanczos"``: implicitly restarted Lanczos (ARPACK, single precision) on ``bound * I - L`` restricted to
     the complement of the null vector, largest algebraic: a few hundred matrix-vector products on graphs with a
     large spectral gap (hubs, expanders: Barabasi-Albert), where the factor fills in and AMG coarsens badly; a
     few thousand at 1e6 nodes, where the lowest eigenvalues crowd against the bulk (Barabasi-Albert, 100k
     nodes: the 9 lowest within 0.0016 of each other).

   Single-vector Krylov solvers (Lanczos, shift-invert) find one vector per distinct eigenvalue: in exact
   arithmetic they never see a second copy of a repeated one. Repeated eigenvalues come from symmetry, so
   ``"auto"`` looks for it first (:func:`symmetry_probe`: colour refinement, about one sort of the nodes a
   round) and picks per component:

   - a large spectral gap (the second Ritz value of a 30-step Lanczos probe at least :data:`GAP_PROBE` times
     ``bound``; the probe stops at the 10th step where the value is already below): Lanczos where the graph has
     no symmetry beyond twins, at any size; then, if the eigenvalues found show a repeated one or reach an
     eigenvalue of twin nodes, the block solver from its vectors. A
     symmetric graph (a hypercube) goes to the block solver, preconditioned by the LU where its reverse
     Cuthill-McKee envelope is at most :data:`FILL_BUDGET` entries, else AMG.
   - a small gap and an envelope of at most :data:`FILL_BUDGET` (meshes, geometric graphs, rings with chords):
     shift-invert; on a symmetric graph (a grid) block shift-invert, block Lanczos on the same inverse whose
     block grows past the largest multiplicity found (measured on 2-D grids of 1k nodes: ~1.3x single-vector
     shift-invert). (The envelope is computed only where a full triangle, ``n (n + 1) / 2``, exceeds the budget.)
   - a small gap and a larger envelope: LOBPCG + AMG (Lanczos without pyamg).

   Every solver starts from fixed vectors (a seeded generator), so results are the same run to run (pyamg's own
   random draws, for its spectral-radius estimates, come from a fixed seed: ``_pyamg_random_state``), and ends
   with a float64 Rayleigh-Ritz step on ``L`` (orthonormal vectors, eigenvalues as Rayleigh quotients).
   Accuracy reached (residual ``||L v - lambda v||``; eigenvalues are good to about its square, vectors to about
   residual / gap): shift-invert ~1e-12 (ARPACK at tolerance 1e-12), LOBPCG ~1e-8, Lanczos ~1e-5 (it runs in
   single precision, as PyG's LapPE does: twice as fast, and float32 is the output's precision); measured
   against dense float64 ``eigh`` in the tests. A residual above ``1e-4 * bound`` warns (RuntimeWarning).
   The whole solve runs inside :func:`omnipos.graph.small_eigh.one_thread` (most of it is small NumPy, SciPy and
   torch ops between the sparse products, which torch's OpenMP team only slowed down; the Lanczos, shift-invert
   and block shift-invert solvers' own dense products go through torch's MKL, which that limits, or NumPy without
   BLAS, not through NumPy's OpenBLAS, whose threads cannot be limited per calling thread and spin after each
   threaded call; LOBPCG, SciPy's, still uses NumPy's), and counts its steps on
   ``progress=`` (probes, factorisations, operator products and solves, LOBPCG iterations).
3. The components' eigenpairs are merged (the lowest ``count`` overall; the eigenspace at the cut is completed
   where the solvers found all of it) and given the canonical basis of :func:`omnipos.graph.canonical_basis`,
   computed per component and merged in pivot order, which equals the canonical basis of the whole graph.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..core import ProgressReporter
from ._input import SizeGroup
from ._workers import parallel_map
from .sign import CANONICAL_TOL, EIGENVALUE_TOL, canonical_basis
from .small_eigh import one_thread, small_eigh

__all__ = ["SOLVERS", "FILL_BUDGET", "GAP_PROBE", "SYMMETRY_ROUNDS", "Symmetry", "batched_eigh", "solve_dense_groups",
           "graph_eigenpairs", "sparse_eigenpairs", "symmetry_probe", "check_solver"]

SOLVERS = ("auto", "shift-invert", "lobpcg", "lanczos")
#: Largest reverse Cuthill-McKee envelope (entries of the factor under a profile ordering) for which ``"auto"``
#: factorises ``L + sigma I`` (3e7 float64 entries: 240 MB).
FILL_BUDGET = 30_000_000
#: ``"auto"`` considers Lanczos when the second Ritz value of a 30-step Lanczos probe is at least this (times the
#: spectrum bound). Measured (normalised and magnetic Laplacians): Barabasi-Albert ~0.4, grids, geometric graphs
#: and rings with chords 0.013-0.06 (absolute, bound 2).
GAP_PROBE = 0.05
#: Rounds of colour refinement :func:`symmetry_probe` runs before it calls a graph whose colouring has not settled
#: symmetric (a round costs about one sort of the nodes; Barabasi-Albert graphs and rings with chords settle in
#: 1-28 rounds up to 200,000 nodes, grids need half their diameter).
SYMMETRY_ROUNDS = 32
# Elements of the block shift-invert solver's Krylov basis (float64: 256 MB, twice: the basis and its image).
_KRYLOV_ELEMENTS = 32_000_000
#: Extra eigenpairs the iterative solvers compute beyond those asked for (complete eigenspaces at the cut).
EXTRA = 2
# Below this much eigh work (sum of G * n^3; 2e6 is ~130 graphs of 25 nodes, ~8 ms of LAPACK), splitting it
# over threads costs more than it saves.
_PARALLEL_MIN_WORK = 2_000_000
# Elements of dense [G, n, n] blocks solved at once on the large-graph path (float64: 256 MB).
_CHUNK_ELEMENTS = 32_000_000
# The progress reporter of the graph_eigenpairs call running in this context (None: silent); the solvers count
# their steps on it through _step() rather than through every signature.
_PROGRESS: contextvars.ContextVar[ProgressReporter | None] = contextvars.ContextVar("omnipos_graph_progress",
                                                                                    default=None)


def _step(n: int = 1) -> None:
    """One more solver step done (an operator product or solve, a LOBPCG iteration, a probe, a factorisation)."""
    report = _PROGRESS.get()
    if report is not None:
        report.update(n)


@contextlib.contextmanager
def _reporting(progress: ProgressReporter | None) -> Iterator[None]:
    token = _PROGRESS.set(progress)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def check_solver(solver: Any) -> str:
    if not isinstance(solver, str) or solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(map(repr, SOLVERS))}; got {solver!r}")
    return solver


def batched_eigh(stacks: list[torch.Tensor], workers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``torch.linalg.eigh`` of each ``[G, n, n]`` stack. On the CPU the stacks are cut into ``workers`` slices
    solved on worker threads (torch releases the GIL inside LAPACK, so the slices run in parallel), each small
    matrix on one thread (:func:`omnipos.graph.small_eigh.small_eigh`)."""
    work = sum(s.shape[0] * s.shape[-1] ** 3 for s in stacks)
    if not stacks or workers <= 1 or work < _PARALLEL_MIN_WORK or stacks[0].device.type != "cpu":
        return [small_eigh(s) for s in stacks]
    pieces = [s.tensor_split(min(workers, s.shape[0])) for s in stacks]
    solved = iter(parallel_map(small_eigh, [p for parts in pieces for p in parts], workers))
    out = []
    for parts in pieces:
        chunk = [next(solved) for _ in parts]
        out.append((torch.cat([c[0] for c in chunk]), torch.cat([c[1] for c in chunk])))
    return out


def solve_dense_groups(groups: Iterable[SizeGroup], build: Callable[[SizeGroup], tuple[torch.Tensor, Any]],
                       workers: int, max_elements: int,
                       canonical: Callable[[SizeGroup, Any], tuple[int, Any]] | None = None,
                       ) -> Iterator[tuple[SizeGroup, Any, torch.Tensor, torch.Tensor]]:
    """Batched ``eigh`` of the matrices ``build(chunk) -> ([G, n, n], extra)`` of the groups, cut into chunks and
    solved a few at a time so that at most about ``max_elements`` matrix elements are alive at once. Yields
    ``(chunk, extra, values [G, n], vectors [G, n, n])``; with ``canonical(chunk, extra) -> (count, scale)`` the
    vectors are instead the first ``count`` columns of the canonical basis (:func:`canonical_basis`, clusters
    scaled by ``scale``)."""
    pending: list[SizeGroup] = []
    elements = 0

    def flush() -> Iterator[tuple[SizeGroup, Any, torch.Tensor, torch.Tensor]]:
        built = [build(chunk) for chunk in pending]
        solved = batched_eigh([matrix for matrix, _ in built], workers)
        if canonical is None:
            for chunk, (_, extra), (values, vectors) in zip(pending, built, solved):
                yield chunk, extra, values, vectors
            return
        wanted = [canonical(chunk, extra) for chunk, (_, extra) in zip(pending, built)]
        bases = [canonical_basis(vectors, values, count, scale=scale, check=False)
                 for (values, vectors), (count, scale) in zip(solved, wanted)]
        for chunk, (_, extra), (values, _), basis in zip(pending, built, solved, bases):
            yield chunk, extra, values, basis

    for group in groups:
        for chunk in group.chunks(max_elements):
            pending.append(chunk)
            elements += chunk.graphs.numel() * chunk.n * chunk.n
            if elements >= max_elements:
                yield from flush()
                pending, elements = [], 0
    if pending:
        yield from flush()


# ---------------------------------------------------------------------------------------------------------------
# one connected component, sparse


def rcm_envelope(pattern: Any) -> int:
    """Envelope (profile) size of a symmetric sparse pattern under reverse Cuthill-McKee: the number of entries
    of its Cholesky / no-pivoting LU factor under that ordering, at most."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    pattern = sp.csr_matrix((np.ones(pattern.nnz), pattern.indices, pattern.indptr), shape=pattern.shape)
    order = reverse_cuthill_mckee(pattern, symmetric_mode=True)
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    coo = pattern.tocoo()
    rows, cols = position[coo.row], position[coo.col]
    first = np.arange(order.size)
    np.minimum.at(first, rows, cols)
    return int((np.arange(order.size) - first).sum()) + order.size


def _start_block(n: int, width: int, dtype: np.dtype) -> np.ndarray:
    rng = np.random.default_rng(0)
    block = rng.standard_normal((n, width))
    if np.issubdtype(dtype, np.complexfloating):
        block = block + 1j * rng.standard_normal((n, width))
    return block.astype(dtype)


def _inner(a: np.ndarray, b: np.ndarray) -> Any:
    """``a^H b`` of two vectors (or ``a^H B`` of a vector and a matrix) without NumPy's BLAS: a pairwise sum.
    NumPy's BLAS (OpenBLAS) runs products of more than ~10,000 elements on all its threads, whose helpers then
    spin, burning a core, for up to ~0.1 s after each call; a sparse solve making such calls a few hundred times
    took 4-6x the CPU time of PyG's on a 12,000-node Barabasi-Albert graph with NumPy's default threads (and
    its sums' rounding followed the thread count). omnipos cannot limit those threads for its own calls only
    (OpenBLAS's count is process-wide), so the solver's own vector and thin-matrix products avoid BLAS."""
    a = a.conj() if np.iscomplexobj(a) else a
    if b.ndim == 1:
        return np.add.reduce(a * b)
    return np.add.reduce(a[:, None] * b, axis=0)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` without NumPy's BLAS (see :func:`_inner`): NumPy's einsum loops (no ``optimize``, which would
    call BLAS), for the solver's thin ``[n, m]`` blocks and ``[m, m]`` matrices (m ~ 10)."""
    return np.einsum("ij,jk->ik", a, b) if b.ndim == 2 else np.einsum("ij,j->i", a, b)


def _gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for larger blocks (block Lanczos' Gram-Schmidt against its whole basis) through torch's BLAS (MKL),
    whose thread count :func:`omnipos.graph.small_eigh.one_thread` limits for the calling thread only (NumPy's
    OpenBLAS threads cannot be: see :func:`_inner`); zero-copy views of the NumPy arrays."""
    def view(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(x if all(step >= 0 for step in x.strides) else np.ascontiguousarray(x))

    return (view(a) @ view(b)).numpy()


def _qr_q(a: np.ndarray) -> np.ndarray:
    """The Q of ``a``'s thin QR through torch's LAPACK (MKL, one thread inside ``one_thread``; see :func:`_gemm`)."""
    return torch.linalg.qr(torch.from_numpy(np.ascontiguousarray(a)))[0].numpy()


def _eigh(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``eigh`` of a small dense Hermitian matrix through torch's LAPACK (see :func:`_qr_q`): NumPy's would call
    OpenBLAS's threaded BLAS from ~64 rows on."""
    values, vectors = torch.linalg.eigh(torch.from_numpy(np.ascontiguousarray(a)))
    return values.numpy(), vectors.numpy()


def _orthonormal(vectors: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the span of the ``[n, m]`` columns ``vectors`` (m small, full rank): Cholesky QR
    twice (twice makes it orthonormal to working precision when the columns are not far from it, as the solvers'
    are), without BLAS (:func:`_matmul`); Householder QR (LAPACK) where the Gram matrix is not positive definite
    (nearly dependent columns)."""
    basis = vectors
    for _ in range(2):
        gram = _matmul(basis.conj().T, basis)
        try:
            factor = np.linalg.cholesky((gram + gram.conj().T) / 2)
        except np.linalg.LinAlgError:
            return np.linalg.qr(vectors)[0]
        basis = _matmul(basis, np.linalg.inv(factor.conj().T))
    return basis


def _rayleigh_ritz(lap: Any, vectors: np.ndarray, null: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormalise ``vectors`` (against ``null`` too) and return the Ritz pairs of ``lap`` on their span."""
    if null is not None:
        vectors = vectors - null[:, None] * _inner(null, vectors)[None, :]
    basis = _orthonormal(vectors)
    projected = _matmul(basis.conj().T, lap @ basis)
    values, small = np.linalg.eigh((projected + projected.conj().T) / 2)
    return values, _matmul(basis, small)


def sparse_eigenpairs(lap: Any, count: int, *, null: np.ndarray | None = None, bound: float = 2.0,
                      solver: str = "auto") -> tuple[np.ndarray, np.ndarray, str]:
    """The ``count`` lowest eigenpairs of the Hermitian positive semi-definite sparse ``lap`` of one connected
    graph (SciPy CSR, real or complex), never densified.

    Args:
        lap: ``[n, n]`` SciPy sparse matrix.
        count: eigenpairs wanted (``< n``).
        null: unit vector spanning the null space, when it is known (it is returned first, not computed).
        bound: an upper bound of the spectrum (2 for normalised Laplacians).
        solver: see the module docstring.

    Returns:
        ``(values [m], vectors [n, m], solver used)``, ascending, ``m >= count`` (up to :data:`EXTRA` more; the
        block solver returns every copy of the eigenvalue at the cut, which can be more).
    """
    n = lap.shape[0]
    solver = check_solver(solver)
    wanted = count - (null is not None)
    if wanted <= 0:
        values, vectors = np.zeros(0), np.zeros((n, 0), dtype=lap.dtype)
        solver = "none"
    else:
        chosen, symmetry = solver, None
        if solver == "auto":
            chosen, preconditioner, symmetry = _choose(lap, null, bound)
        elif solver == "lobpcg":
            if not _have_pyamg():  # named by the caller ("auto" never asks for AMG without pyamg)
                raise ImportError('solver="lobpcg" needs pyamg for its preconditioner: pip install "omnipos[graph]" '
                                  '(or pyamg), or use solver="auto"')
            preconditioner = "amg"
        if chosen == "lobpcg":
            values, vectors = _block(lap, wanted, null, bound, preconditioner)
        elif chosen == "block shift-invert":
            values, vectors = _block_shift_invert(lap, wanted, null, bound)
            chosen = "shift-invert"
        else:
            # one extra pair for single-vector Lanczos (measured: each extra costs it ~5%), two for shift-invert
            width = min(wanted + (1 if chosen == "lanczos" else EXTRA), n - 2 - (null is not None))
            if chosen == "shift-invert":
                vectors = _shift_invert(lap, width, null, bound)
            else:
                vectors = _lanczos(lap, width, null, bound)
            values, vectors = _rayleigh_ritz(lap, vectors, null)
            if symmetry is not None and _may_miss_copies(values, wanted, bound, symmetry):
                chosen = "lobpcg"
                values, vectors = _block(lap, wanted, null, bound, _preconditioner(lap), start=vectors)
        solver = chosen
        residual = np.linalg.norm(lap @ vectors[:, :wanted] - vectors[:, :wanted] * values[:wanted], axis=0)
        if residual.size and residual.max() > 1e-4 * bound:
            warnings.warn(f"{solver} eigensolver reached residual {residual.max():.2e} only (of ||L v - lambda v||); "
                          "the encoding is inaccurate there", RuntimeWarning, stacklevel=3)
    if null is not None:
        values = np.concatenate([[0.0], values])
        vectors = np.concatenate([null[:, None].astype(vectors.dtype), vectors], axis=1)
    return values, vectors, solver


def _have_pyamg() -> bool:
    try:
        import pyamg  # noqa: F401
    except ImportError:
        return False
    return True


def _choose(lap: Any, null: np.ndarray | None, bound: float) -> tuple[str, str | None, Symmetry | None]:
    """``"auto"``'s solver (with the block solver's preconditioner, and the symmetry probe's answer where it ran).
    A short Lanczos probe shows a large spectral gap (hubs, expanders): single-vector Lanczos (a few hundred
    products, no factorisation) unless :func:`symmetry_probe` finds a symmetry that can repeat an eigenvalue, then
    block LOBPCG. A small gap: block shift-invert where the factor stays small (meshes, geometric graphs, rings
    with chords), LOBPCG + AMG where it would not."""
    gap = _probe_gap(lap, null, bound, below=GAP_PROBE * bound)
    _step()
    if gap >= GAP_PROBE * bound:
        symmetry = symmetry_probe(lap)
        _step()
        if symmetry.symmetric:
            return "lobpcg", _preconditioner(lap), symmetry
        return "lanczos", None, symmetry
    if _factor_fits(lap):
        symmetry = symmetry_probe(lap)
        _step()
        return ("block shift-invert" if symmetry.symmetric else "shift-invert"), None, symmetry
    return ("lobpcg", "amg", None) if _have_pyamg() else ("lanczos", None, None)


def _factor_fits(lap: Any) -> bool:
    """Whether the reverse Cuthill-McKee envelope of ``lap`` is at most :data:`FILL_BUDGET` entries; without
    computing it where even a full triangle, ``n (n + 1) / 2``, is (graphs up to ~7,700 nodes)."""
    n = lap.shape[0]
    if n * (n + 1) // 2 <= FILL_BUDGET:
        return True
    fits = rcm_envelope(lap) <= FILL_BUDGET
    _step()
    return fits


def _preconditioner(lap: Any) -> str | None:
    """The block solver's preconditioner: the factor of ``L + sigma I`` where it stays small (then LOBPCG converges
    in a few iterations, as shift-invert does), else AMG (pyamg), else none."""
    if _factor_fits(lap):
        return "lu"
    return "amg" if _have_pyamg() else None


def _clusters(values: np.ndarray, scale: float) -> np.ndarray:
    """:func:`omnipos.graph.eigenvalue_clusters` of ascending float64 ``values [M]`` with a float ``scale``, in
    NumPy (the same comparisons, so the same ids; without a torch round trip, ~0.1 ms on the solver's few
    values)."""
    starts = np.ones(values.size, dtype=np.int64)
    starts[1:] = np.diff(values) > EIGENVALUE_TOL * scale
    return np.cumsum(starts) - 1


def _may_miss_copies(values: np.ndarray, wanted: int, bound: float, symmetry: Symmetry) -> bool:
    """Whether a single-vector solver's eigenvalues (without the null one) need the block solver after all: a
    repeated one among those wanted (the rounding errors of the run surfaced a second copy: others may be
    missing), or an eigenvalue of twin nodes (:func:`symmetry_probe`) at or below the largest one found."""
    clusters = _clusters(values, bound)
    if np.any(np.bincount(clusters[:min(wanted + 1, values.size)]) > 1):
        return True
    twins = symmetry.twin_values
    return bool(twins.size) and bool(twins.min() <= values[-1] + EIGENVALUE_TOL * bound)


def _probe_gap(lap: Any, null: np.ndarray | None, bound: float, steps: int = 30, below: float | None = None) -> float:
    """Second-lowest Ritz value of a ``steps``-step Lanczos run (plain three-term recurrence, orthogonal to
    ``null``): an upper estimate of the second-lowest eigenvalue there, good to its order of magnitude where that
    is large (the second, so that one isolated small eigenvalue, e.g. a magnetic Laplacian's lowest, does not
    decide). Measured: Barabasi-Albert graphs ~0.3-0.4 (also magnetic), grids, geometric graphs and rings with
    chords < 0.01. With ``below``, the run stops once the estimate is under it (checked at the 10th and 20th
    step): the Ritz values of a Lanczos run only fall as it goes on (Cauchy interlacing), so the answer to
    "is it below?" is already known."""
    n = lap.shape[0]
    steps = min(steps, n - 2)
    v = _deflate(null, _start_block(n, 1, lap.dtype)[:, 0])
    v = v / np.sqrt(_inner(v, v).real)
    previous = np.zeros_like(v)
    alpha, beta = [], [0.0]
    product = _matvec(lap)
    for _ in range(steps):  # (few NumPy calls a step: on a 1,000-node graph their overhead is most of the probe)
        w = product(v)
        if null is not None:
            w -= null * _inner(null, w)
        w -= beta[-1] * previous
        a = _inner(v, w).real
        w -= a * v
        alpha.append(float(a))
        b = float(np.sqrt(_inner(w, w).real))
        if b < 1e-12:
            break
        beta.append(b)
        w /= b
        previous, v = v, w
        # (checked at the 10th and 20th step: an eigvalsh a check was a fifth of the probe on 1,000 nodes; the
        # verdict is the same, a run stops early only where it is already below)
        if below is not None and len(alpha) in (10, 20) and _second_ritz(alpha, beta) < below:
            break
    return _second_ritz(alpha, beta)


def _second_ritz(alpha: list[float], beta: list[float]) -> float:
    """Second-lowest eigenvalue of the Lanczos tridiagonal ``(alpha, beta[1:])`` (the lowest where it has one)."""
    off = np.array(beta[1:len(alpha)])
    ritz = np.linalg.eigvalsh(np.diag(alpha) + np.diag(off, 1) + np.diag(off, -1))  # (NumPy: no scipy.linalg import)
    return float(ritz[min(1, ritz.size - 1)])


def _deflate(null: np.ndarray | None, x: np.ndarray) -> np.ndarray:
    if null is None:
        return x
    if x.ndim == 1:
        return x - null * _inner(null, x)
    return x - null[:, None] * _inner(null, x)[None, :]


def _matvec(matrix: Any, reuse: bool = False) -> Callable[[np.ndarray], np.ndarray]:
    """``x -> matrix @ x`` for a SciPy CSR matrix and one vector, without SciPy's per-call dispatch where its
    kernel is reachable (``scipy.sparse._sparsetools.csr_matvec``; ~9 of ~12 us a product on a 1,000-node graph
    are dispatch, and ARPACK takes a few hundred products). ``reuse=True``: every call returns the same output
    array, overwritten (for a caller that copies it before the next call, as ARPACK does: no allocation a
    product)."""
    try:
        from scipy.sparse._sparsetools import csr_matvec
    except ImportError:  # (a SciPy without it: the public product)
        csr_matvec = None
    if csr_matvec is None or getattr(matrix, "format", None) != "csr" or matrix.data.dtype != matrix.dtype:
        return lambda x: matrix @ x
    rows, cols = matrix.shape
    indptr, indices, data, dtype = matrix.indptr, matrix.indices, matrix.data, matrix.dtype

    buffer = np.empty(rows, dtype=dtype) if reuse else None

    def product(x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=dtype).reshape(-1)
        if buffer is None:
            out = np.zeros(rows, dtype=dtype)
        else:
            out = buffer
            out.fill(0)
        csr_matvec(rows, cols, indptr, indices, data, x, out)
        return out

    # a private kernel may change between SciPy releases: checked once against the public product, else not used
    probe = np.linspace(1.0, 2.0, cols).astype(dtype)
    try:
        agrees = np.array_equal(product(probe), matrix @ probe)
    except (TypeError, ValueError):
        agrees = False
    return product if agrees else (lambda x: matrix @ x)


def _arpack(matvec: Any, n: int, width: int, dtype: np.dtype, tol: float, largest: bool = True) -> np.ndarray:
    """``width`` eigenvectors of the Hermitian operator ``matvec`` at the top (or bottom) of its spectrum."""
    from scipy.sparse.linalg import LinearOperator, eigs, eigsh

    def counted(x: np.ndarray) -> np.ndarray:
        _step()
        return matvec(x)

    op = LinearOperator((n, n), matvec=counted, dtype=dtype)
    # ARPACK calls op.matvec once a step: bound straight to `counted`, without LinearOperator's per-call shape
    # checks and reshapes (~5 us of ~25 us a step on a 1,000-node graph; ARPACK hands over 1-D vectors of length n)
    op.matvec = counted
    start = _start_block(n, 1, dtype)[:, 0]
    ncv = min(n - 1, max(3 * width, 20))  # measured: fewer restarts pay for the larger basis
    if np.issubdtype(dtype, np.complexfloating):  # ARPACK has no complex Hermitian driver
        _, vectors = eigs(op, k=width, which="LR" if largest else "SR", v0=start, tol=tol, ncv=ncv)
    else:
        _, vectors = eigsh(op, k=width, which="LA" if largest else "SA", v0=start, tol=tol, ncv=ncv)
    return vectors


def _shift_invert(lap: Any, width: int, null: np.ndarray | None, bound: float) -> np.ndarray:
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    n = lap.shape[0]
    sigma = 1e-6 * bound
    factor = splu((lap + sigma * sp.identity(n, dtype=lap.dtype, format="csr")).tocsc(),
                  permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
    _step()
    # (L + sigma)^-1 on the complement of the null vector: its largest eigenvalues are L's smallest there
    return _arpack(lambda x: _deflate(null, factor.solve(_deflate(null, x))), n, width, lap.dtype, tol=1e-12)


def _shifted(lap: Any, bound: float) -> Any:
    """``bound * I - lap`` as CSR, in ``lap``'s dtype: its data negated and ``bound`` added on the diagonal where
    every diagonal entry is stored once (a Laplacian's), without SciPy's sparse subtraction (~0.1 ms a call)."""
    import scipy.sparse as sp

    n = lap.shape[0]
    if sp.isspmatrix_csr(lap) and lap.has_canonical_format:
        rows = np.repeat(np.arange(n, dtype=lap.indices.dtype), np.diff(lap.indptr))
        on_diagonal = lap.indices == rows
        if np.count_nonzero(on_diagonal) == n:
            shifted = sp.csr_matrix((-lap.data, lap.indices.copy(), lap.indptr.copy()), shape=lap.shape)
            shifted.data[on_diagonal] += bound
            return shifted
    return (bound * sp.identity(n, dtype=lap.dtype, format="csr") - lap).tocsr()


def _lanczos(lap: Any, width: int, null: np.ndarray | None, bound: float) -> np.ndarray:
    """Lanczos in single precision (PyG's own: its LapPE runs ARPACK on a float32 matrix) on the complement of
    the null vector, largest algebraic of ``bound * I - L`` (formed in float64, then rounded: no cancellation
    between the identity and ``L``'s diagonal), then the float64 Rayleigh-Ritz of :func:`sparse_eigenpairs`.
    Measured on Barabasi-Albert graphs: float64 ARPACK to 1e-10 took 3.1 s at 100k nodes (PyG 2.4 s), this 1.3 s
    with residual ~1e-5 (the smallest-algebraic form of the same operator reached only 3e-4)."""
    n = lap.shape[0]
    single = np.complex64 if np.iscomplexobj(lap.data) else np.float32
    # (ARPACK copies each product into its own work array: one output buffer serves every call)
    product = _matvec(_shifted(lap, bound).astype(single), reuse=True)
    if null is None:
        matvec = product
    else:
        # (bound I - L) - bound u u^H: the null vector u (an eigenvector of bound I - L, of its largest eigenvalue
        # bound) moves to eigenvalue 0, the others stay; one rank-one term a product instead of two projections.
        # (Asking ARPACK for u too on the plain matrix saves this term; at the tolerance that kept its residuals
        # as low, 5e-6, it took 3,737 products instead of 2,328 on a 1e6-node Barabasi-Albert graph: not kept.)
        null32, weight = null.astype(single), single(bound)
        term = np.empty_like(null32)

        def matvec(x: np.ndarray) -> np.ndarray:
            out = product(x)
            np.multiply(null32, weight * _inner(null32, x), out=term)
            out -= term
            return out

    return _arpack(matvec, n, width, np.dtype(single), tol=1e-5).astype(lap.dtype)


_PYAMG_SEED = 0
_PYAMG_LOCK = threading.Lock()


@contextlib.contextmanager
def _pyamg_random_state() -> Iterator[None]:
    """pyamg draws its spectral-radius estimates from NumPy's legacy global random state (``np.random.rand``):
    inside this block that state is seeded with a fixed seed, and the caller's state is put back afterwards, so
    the AMG hierarchy (and the eigenvectors) are the same run to run and the caller's random stream is neither
    consumed nor moved. (A thread drawing from ``np.random`` during the block would see the fixed stream.)"""
    with _PYAMG_LOCK:
        state = np.random.get_state()
        np.random.seed(_PYAMG_SEED)
        try:
            yield
        finally:
            np.random.set_state(state)


class BlockVCycle:
    """One AMG V-cycle applied to a block of vectors at once: pyamg's smoothed-aggregation hierarchy, damped
    Jacobi smoothing (one sweep, ``omega = 4 / (3 rho(D^-1 A))``), a dense solve on the coarsest level. pyamg's
    own preconditioner runs one V-cycle per column with Gauss-Seidel in a loop; on a 100k-node ring with chords
    LOBPCG took 10.2 s with it and 4.1 s with this (grid: 2.8 s vs 2.1 s)."""

    def __init__(self, hierarchy: Any) -> None:
        import scipy.sparse as sp
        from pyamg.util.linalg import approximate_spectral_radius

        self.levels = hierarchy.levels
        self.inverse_diagonal, self.omega = [], []
        for level in self.levels[:-1]:
            inverse = 1.0 / level.A.diagonal()
            self.inverse_diagonal.append(inverse[:, None])
            self.omega.append(4.0 / (3.0 * approximate_spectral_radius(sp.diags(inverse) @ level.A)))
        self.coarse = np.linalg.pinv(self.levels[-1].A.toarray())

    def _cycle(self, depth: int, rhs: np.ndarray) -> np.ndarray:
        if depth == len(self.levels) - 1:
            return self.coarse @ rhs
        level, step = self.levels[depth], self.omega[depth] * self.inverse_diagonal[depth]
        x = step * rhs
        x = x + level.P @ self._cycle(depth + 1, level.R @ (rhs - level.A @ x))
        return x + step * (rhs - level.A @ x)

    def __call__(self, block: np.ndarray) -> np.ndarray:
        return self._cycle(0, block.reshape(block.shape[0], -1)).reshape(block.shape)


def _lobpcg(lap: Any, width: int, null: np.ndarray | None, preconditioner: Callable[[np.ndarray], np.ndarray] | None,
            start: np.ndarray | None = None) -> np.ndarray:
    """``width`` lowest eigenvectors of ``lap`` orthogonal to ``null`` by block LOBPCG (SciPy), from ``start``'s
    columns and fixed random ones."""
    from scipy.sparse.linalg import LinearOperator, lobpcg

    n = lap.shape[0]
    block = _start_block(n, width, lap.dtype)
    if start is not None:
        block[:, :min(width, start.shape[1])] = start[:, :width]
    operator = None
    if preconditioner is not None:
        def counted(x: np.ndarray) -> np.ndarray:  # applied once an iteration: count the iterations
            _step()
            return preconditioner(x)

        operator = LinearOperator((n, n), matvec=counted, matmat=counted, dtype=lap.dtype)
    constraint = null[:, None] if null is not None else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "not reaching the requested tolerance": checked after
        _, vectors = lobpcg(lap, block, M=operator, Y=constraint, tol=1e-8, maxiter=500, largest=False)
    return vectors


@dataclass(frozen=True)
class Symmetry:
    """What :func:`symmetry_probe` found. ``symmetric``: the graph may have a symmetry other than swapping twins
    (so an eigenvalue may repeat anywhere in the spectrum); ``twin_values``: the eigenvalues that twin nodes give
    exactly (each of multiplicity at least the class size - 1)."""

    symmetric: bool
    twin_values: np.ndarray


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijective scrambling of 64-bit integers (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def _row_sums(terms: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Wrapping uint64 sum of ``terms`` over each CSR row (a hash of the row's multiset of terms)."""
    total = np.zeros(terms.size + 1, dtype=np.uint64)
    np.cumsum(terms, out=total[1:])
    return total[indptr[1:]] - total[indptr[:-1]]


def _value_keys(values: np.ndarray) -> np.ndarray:
    """A 64-bit key per entry of ``values`` (float64 or complex128) that is equal exactly where the values are:
    the mixed bit patterns (-0.0 made +0.0 first; complex: both parts, the imaginary one mixed twice). Equal
    values give equal keys, and different ones different keys but for a 64-bit collision on complex entries
    (which can only merge colours: towards "symmetric"). The same partition of the entries as ``np.unique``'s
    ids, without its sort (a third of the probe on a 1,000-node graph)."""
    if np.iscomplexobj(values):
        values = values.astype(np.complex128) + 0.0
        return _mix(np.ascontiguousarray(values.real).view(np.uint64) + _GOLDEN) \
            ^ _mix(_mix(np.ascontiguousarray(values.imag).view(np.uint64)))
    return _mix((np.asarray(values, dtype=np.float64) + 0.0).view(np.uint64) + _GOLDEN)


def symmetry_probe(lap: Any, max_rounds: int = SYMMETRY_ROUNDS) -> Symmetry:
    """Colour refinement (1-dimensional Weisfeiler-Leman) of the weighted graph of ``lap`` (its diagonal the
    starting colours, each off-diagonal entry's exact value a label of its edge), hashed with wrapping 64-bit
    sums so that a round costs one pass over the entries and one sort of the nodes.

    An automorphism of the graph (a permutation ``P`` with ``P L P^T = L``) maps every node to one of its own
    colour, so when the stable colouring gives every node its own colour, or groups only twins (nodes with the
    same off-diagonal row of ``L``: ``e_u - e_v`` is then an eigenvector, of eigenvalue ``L_uu``), the graph has no
    symmetry beyond swapping twins: the eigenvalues repeated by symmetry are exactly the twins'. A graph with an
    eigenvalue repeated without any symmetry exists but is not generic; one whose colouring has not settled
    after ``max_rounds`` rounds (a large diameter) counts as symmetric. A hash collision can only merge colours,
    which errs towards "symmetric".
    """
    import scipy.sparse as sp

    lap = sp.csr_matrix(lap)
    n = lap.shape[0]
    rows = np.repeat(np.arange(n), np.diff(lap.indptr))
    off = lap.indices != rows
    cols = lap.indices[off]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows[off], minlength=n))])
    value_key = _value_keys(lap.data[off])
    diagonal = lap.diagonal()
    _, colour = np.unique(diagonal, return_inverse=True)
    colour = colour.ravel()
    classes = int(colour.max()) + 1 if n else 0
    settled = classes == n
    colour = colour.astype(np.uint64)
    for round_ in range(1, max_rounds + 1):
        if settled:
            break
        signature = _row_sums(_mix(colour[cols] * _GOLDEN ^ value_key), indptr)
        colour = _mix(signature ^ _mix(colour))
        if round_ % 4 and round_ < max_rounds:  # count the colours every 4 rounds: a sort is most of a round's cost
            continue
        _, colour = np.unique(colour, return_inverse=True)
        colour = colour.ravel().astype(np.uint64)
        refined = int(colour.max()) + 1
        settled = refined in (classes, n)  # (refinement only splits: 4 rounds without a split is stable)
        classes = refined
        if not settled and (8 * classes < n if round_ >= 8 else 16 * classes < n):
            # few colours after 4 or 8 rounds: a symmetric or long, thin graph (a 2-D grid: 21 colours after 4
            # rounds at any size; rings with chords and Barabasi-Albert graphs: over n / 3); counting it symmetric
            # early only costs speed (the block solvers are exact on any graph), and saves the remaining rounds
            return Symmetry(True, np.zeros(0))
    if not settled:
        return Symmetry(True, np.zeros(0))
    colour = colour.astype(np.int64)
    size = np.bincount(colour)
    shared = np.flatnonzero(size[colour] > 1)
    if shared.size == 0:
        return Symmetry(False, np.zeros(0))
    row_hash = _row_sums(_mix(cols.astype(np.uint64) * _GOLDEN ^ value_key), indptr)
    pairs = np.unique(np.stack([colour[shared].astype(np.uint64), row_hash[shared]]), axis=1)
    if pairs.shape[1] != np.unique(colour[shared]).size:  # a colour class of nodes that are not all twins
        return Symmetry(True, np.zeros(0))
    return Symmetry(False, np.unique(diagonal[shared].real))


def _block(lap: Any, wanted: int, null: np.ndarray | None, bound: float, preconditioner: str | None,
           start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Block LOBPCG with a block that grows (doubling) until the eigenvalue at the cut (the ``wanted``-th) ends
    before the block does: a block method finds every copy of a repeated eigenvalue that fits in its block, so
    the returned eigenspaces are complete. ``start``: vectors to start from (a previous solver's). Dense ``eigh``
    once the block would be a fifth of the graph."""
    n = lap.shape[0]
    limit = n - (null is not None)
    width = min(wanted + EXTRA, limit)
    apply = _preconditioner_operator(lap, null, bound, preconditioner) if 5 * width < n else None
    while True:
        if 5 * width >= n:
            return _dense_lowest(lap, null)
        vectors = _lobpcg(lap, width, null, apply, start)
        values, vectors = _rayleigh_ritz(lap, vectors, null)
        clusters = _clusters(values, bound)
        if clusters[-1] > clusters[wanted - 1]:
            return values, vectors
        start, width = vectors, min(2 * width, limit)
        if apply is None and 5 * width < n:
            apply = _preconditioner_operator(lap, null, bound, preconditioner)


def _block_shift_invert(lap: Any, wanted: int, null: np.ndarray | None, bound: float) -> tuple[np.ndarray, np.ndarray]:
    """Block Lanczos on ``(L + sigma I)^-1`` (the factor of shift-invert; full reorthogonalisation, no restart)
    from ``block`` random vectors: a block Krylov space holds ``min(block, multiplicity)`` copies of every
    eigenvalue, so when every eigenvalue found (up to the cut) has fewer copies than the block, none is missing;
    otherwise the block grows and the solve runs again. Measured on 2-D grids (eigenvalue pairs, 2k-10k nodes):
    ~1.4x the CPU time of single-vector shift-invert (block 4: ~60 solves where ARPACK needs ~35). Falls back
    to :func:`_block` (LOBPCG) where the basis would exceed its memory budget before converging."""
    n = lap.shape[0]
    solve = _preconditioner_operator(lap, null, bound, "lu")
    width = min(wanted + EXTRA, n - 2 - (null is not None))
    block = 4
    while True:
        found = _block_krylov(lap, solve, width, null, bound, block)
        if found is None:
            return _block(lap, wanted, null, bound, "lu")
        values, vectors = found
        clusters = _clusters(values, bound)
        copies = np.bincount(clusters)
        cut = clusters[wanted - 1]
        if copies[:cut + 1].max() < block and clusters[-1] > cut:
            return values, vectors
        block = int(copies[:cut + 1].max()) + 2
        width = min(max(width, int(np.searchsorted(clusters, cut, side="right")) + block), n - 2 - (null is not None))
        if 5 * (width + block) >= n:
            return _dense_lowest(lap, null)


def _block_krylov(lap: Any, solve: Callable[[np.ndarray], np.ndarray], width: int, null: np.ndarray | None,
                  bound: float, block: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``width`` eigenpairs of ``lap`` from the block Krylov space of ``solve`` (the inverse ``S`` of
    ``L + sigma I``), grown until their residuals on ``L`` are below ``1e-9 * bound``; ``None`` past
    :data:`_KRYLOV_ELEMENTS`. Convergence is read off the block recurrence ``S B = B H + Q R E^T`` at no extra
    cost (the residual of a Ritz pair ``(mu, B y)`` of ``S`` is ``||R y_last||``, and ``L``'s residual is at most
    ``bound / mu`` times it); the ``L`` residual is checked once at the end."""
    n = lap.shape[0]
    most = max(2 * width + 2 * block, min(_KRYLOV_ELEMENTS // n, 30 * block + width))
    # the basis in one array (untouched columns cost no memory): Gram-Schmidt against all of it is two matrix
    # products a step, not two per earlier block
    basis = np.empty((n, most), dtype=lap.dtype, order="F")  # (column blocks contiguous for the solve)
    basis[:, :block] = _qr_q(_deflate(null, _start_block(n, block, lap.dtype)))
    projected = np.zeros((most, most), dtype=lap.dtype)
    size, check_at = 0, 2 * width
    while True:
        image = _deflate(null, solve(basis[:, size:size + block]))
        _step()
        size += block
        done = basis[:, :size]
        done_h = done.conj().T
        column = _gemm(done_h, image)  # classical Gram-Schmidt twice (Kahan: twice is enough)
        image = image - _gemm(done, column)
        again = _gemm(done_h, image)
        image = image - _gemm(done, again)
        column += again  # [size, block]: H's new columns
        projected[:size, size - block:size] = column
        projected[size - block:size, :size - block] = column[:size - block].conj().T
        q, r = torch.linalg.qr(torch.from_numpy(np.ascontiguousarray(image)))
        following, tail = q.numpy(), r.numpy()
        if size >= check_at or size + block > most:
            h = projected[:size, :size]
            mu, small = _eigh((h + h.conj().T) / 2)
            mu, small = mu[::-1][:width], small[:, ::-1][:, :width]
            residual = np.linalg.norm(tail @ small[size - block:], axis=0)
            distance = float(np.max(residual / np.maximum(1e-9 * np.abs(mu), np.finfo(float).tiny)))
            if distance <= 1.0:
                vectors = _gemm(done, small)
                values, vectors = _rayleigh_ritz(lap, vectors, null)
                if np.linalg.norm(lap @ vectors - vectors * values, axis=0).max() <= 1e-9 * bound:
                    return values, vectors
            # the residuals fall at most about a decade a step (2-D grids, 1k-10k nodes: 0.2-1): while far from
            # the tolerance, the next check waits a step per two decades (an eigh of H each; at worst a step or
            # two too many)
            skip = min(4, int(np.log10(distance) // 2)) if distance > 1.0 else 0
            check_at = size + (skip + 1) * block
        if size + block > most:
            return None
        basis[:, size:size + block] = following


def _dense_lowest(lap: Any, null: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Every eigenpair of a (small) component by dense ``eigh``, without the null vector's."""
    values, vectors = np.linalg.eigh(lap.toarray())
    if null is not None:  # a connected component's null space is the one known vector: drop its pair
        values, vectors = values[1:], vectors[:, 1:]
    return values, vectors


def _preconditioner_operator(lap: Any, null: np.ndarray | None, bound: float,
                             kind: str | None) -> Callable[[np.ndarray], np.ndarray] | None:
    import scipy.sparse as sp

    n = lap.shape[0]
    if kind == "lu":
        from scipy.sparse.linalg import splu

        factor = splu((lap + 1e-6 * bound * sp.identity(n, dtype=lap.dtype, format="csr")).tocsc(),
                      permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
        _step()
        return factor.solve
    if kind == "amg":
        import pyamg

        shifted = (lap + 1e-5 * sp.identity(n, dtype=lap.dtype, format="csr")).tocsr()
        near_null = null[:, None] if null is not None else np.ones((n, 1), dtype=lap.dtype)
        with _pyamg_random_state():
            hierarchy = pyamg.smoothed_aggregation_solver(
                shifted, B=near_null, symmetry="hermitian" if np.iscomplexobj(lap.data) else "symmetric")
            cycle = BlockVCycle(hierarchy)
        _step()
        return cycle
    return None


# ---------------------------------------------------------------------------------------------------------------
# a whole (possibly disconnected) graph


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
    the canonical basis, without densifying it (see the module docstring).

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
    with one_thread(), _reporting(progress):
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
            null = null / np.sqrt(_inner(null, null).real)
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
        per_chunk = max(1, _CHUNK_ELEMENTS // int(s * s))
        for lo in range(lo_rank, hi_rank, per_chunk):
            hi = min(lo + per_chunk, hi_rank)
            e_lo, e_hi = np.searchsorted(entry_rank, [lo, hi])
            dense = torch.zeros(hi - lo, s, s, dtype=dtype)
            index = (torch.from_numpy(entry_rank[e_lo:e_hi] - lo), torch.from_numpy(position[rows[e_lo:e_hi]]),
                     torch.from_numpy(position[cols[e_lo:e_hi]]))
            dense.index_put_(index, torch.from_numpy(data[e_lo:e_hi]).to(dtype), accumulate=True)
            values, vectors = batched_eigh([dense], workers)[0]
            _step()
            m = min(keep, int(s))
            chunk = comps[lo:hi]
            nodes = order[first[chunk][:, None] + np.arange(s)]
            pieces.append(_Piece(nodes, values[:, :m].numpy(), vectors[:, :, :m].numpy(), np.full(chunk.size, m)))
    return pieces


def _canonical_one(vectors: np.ndarray, values: np.ndarray, count: int, bound: float) -> np.ndarray:
    """The first ``count`` columns of :func:`omnipos.graph.canonical_basis` of one graph's orthonormal
    ``vectors [n, M]`` (ascending ``values [M]``, clusters at ``EIGENVALUE_TOL * bound``), in NumPy: the same
    pivoted Cholesky of each eigenspace's projector, eigenspace by eigenspace (pivot: the largest
    ``sqrt(P_ii)``, ties within ``CANONICAL_TOL`` to the lowest node; the column ``P e_i / sqrt(P_ii)``, then
    ``P`` deflated by it). Equal to the torch function up to the rounding of its sums (bit for bit on real
    columns of simple eigenvalues: the largest-magnitude entry made positive, a product by +-1), without its
    torch ops on one graph (2-D grid of 1,024 nodes, eigenvalue pairs: ~0.2 ms instead of ~1-2 ms)."""
    n = vectors.shape[0]
    out = np.zeros((n, count), dtype=vectors.dtype)
    cluster = _clusters(values, bound)
    starts = np.flatnonzero(np.r_[True, cluster[1:] != cluster[:-1]])
    ends = np.r_[starts[1:], values.size]
    for start, end in zip(starts, ends):
        if start >= count:
            break
        work = vectors[:, start:end]
        for t in range(min(end - start, count - start)):
            power = work.real ** 2 + work.imag ** 2 if np.iscomplexobj(work) else work ** 2
            norms = np.sqrt(np.maximum(power.sum(axis=1), 0.0))
            pivot = int(np.argmax(norms >= norms.max() - CANONICAL_TOL))  # (the first maximum)
            size = norms[pivot]
            unit = work[pivot] / size if size > 0 else np.zeros_like(work[pivot])  # a_hat^H, as a row
            column = _matmul(work, unit.conj())  # P e_i / sqrt(P_ii)
            out[:, start + t] = column
            work = work - np.outer(column, unit)
    return out


def _merge(pieces: list[_Piece], n: int, count: int, bound: float,
           dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Lowest ``count`` eigenpairs over all components, canonical basis per eigenspace (module docstring)."""
    count = min(count, n)
    out = np.zeros((n, count), dtype=np.complex128 if np.issubdtype(dtype, np.complexfloating) else np.float64)
    if count == 0:
        return np.zeros(0), out
    if len(pieces) == 1 and pieces[0].values.shape[0] == 1:  # one component: its canonical basis, no merging
        piece = pieces[0]
        available = int(piece.available[0])
        out[piece.nodes[0]] = _canonical_one(piece.vectors[0, :, :available], piece.values[0, :available], count,
                                             bound)
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
    cluster = _clusters(value, bound)
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
            key = min((h for h in heads if h[1] >= top - CANONICAL_TOL), key=lambda h: h[2])[0]
            queues[key[:2]].pop(0)
            if not queues[key[:2]]:
                del queues[key[:2]]
            out[pieces[key[0]].nodes[key[1]], column] = local_vectors[key]
            values_out[column] = float(value[mine][keys.index(key)])
            column += 1
    return values_out, out
