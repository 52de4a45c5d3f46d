"""The pieces every sparse solver of :mod:`omnipos.graph.eigensolvers` shares: progress counting (``count_step``, on the
reporter of the running :func:`~omnipos.graph.eigensolvers.graph_eigenpairs` call), fixed start vectors (a seeded
generator: the same results run to run), vector and thin-matrix products that avoid NumPy's BLAS (OpenBLAS threads
spin after each threaded call and cannot be limited per calling thread; see :func:`inner`), the CSR product
without SciPy's dispatch (:func:`fast_matvec`), deflation of a known null vector, the float64 Rayleigh-Ritz step every
solver ends with, and eigenvalue clusters in NumPy."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from ...core import ProgressReporter
from ..canonical_spec import EIGENVALUE_TOL, starts_cluster

#: Extra eigenpairs the iterative solvers compute beyond those asked for (complete eigenspaces at the cut).
EXTRA = 2
# The progress reporter of the graph_eigenpairs call running in this context (None: silent); the solvers count
# their steps on it through count_step() rather than through every signature.
_PROGRESS: contextvars.ContextVar[ProgressReporter | None] = contextvars.ContextVar("omnipos_graph_progress",
                                                                                    default=None)


def count_step(n: int = 1) -> None:
    """One more solver step done (an operator product or solve, a LOBPCG iteration, a probe, a factorisation)."""
    report = _PROGRESS.get()
    if report is not None:
        report.update(n)


@contextlib.contextmanager
def reporting(progress: ProgressReporter | None) -> Iterator[None]:
    token = _PROGRESS.set(progress)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def start_block(n: int, width: int, dtype: np.dtype) -> np.ndarray:
    rng = np.random.default_rng(0)
    block = rng.standard_normal((n, width))
    if np.issubdtype(dtype, np.complexfloating):
        block = block + 1j * rng.standard_normal((n, width))
    return block.astype(dtype)


def inner(a: np.ndarray, b: np.ndarray) -> Any:
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


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` without NumPy's BLAS (see :func:`inner`): NumPy's einsum loops (no ``optimize``, which would
    call BLAS), for the solver's thin ``[n, m]`` blocks and ``[m, m]`` matrices (m ~ 10)."""
    return np.einsum("ij,jk->ik", a, b) if b.ndim == 2 else np.einsum("ij,j->i", a, b)


def gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for larger blocks (block Lanczos' Gram-Schmidt against its whole basis) through torch's BLAS (MKL),
    whose thread count :func:`omnipos.graph.small_eigh.one_thread` limits for the calling thread only (NumPy's
    OpenBLAS threads cannot be: see :func:`inner`); zero-copy views of the NumPy arrays."""
    def view(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(x if all(step >= 0 for step in x.strides) else np.ascontiguousarray(x))

    return (view(a) @ view(b)).numpy()


def qr_q(a: np.ndarray) -> np.ndarray:
    """The Q of ``a``'s thin QR through torch's LAPACK (MKL, one thread inside ``one_thread``; see :func:`gemm`)."""
    return torch.linalg.qr(torch.from_numpy(np.ascontiguousarray(a)))[0].numpy()


def dense_eigh(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``eigh`` of a small dense Hermitian matrix through torch's LAPACK (see :func:`qr_q`): NumPy's would call
    OpenBLAS's threaded BLAS from ~64 rows on."""
    values, vectors = torch.linalg.eigh(torch.from_numpy(np.ascontiguousarray(a)))
    return values.numpy(), vectors.numpy()


def _orthonormal(vectors: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the span of the ``[n, m]`` columns ``vectors`` (m small, full rank): Cholesky QR
    twice (twice makes it orthonormal to working precision when the columns are not far from it, as the solvers'
    are), without BLAS (:func:`matmul`); Householder QR (LAPACK) where the Gram matrix is not positive definite
    (nearly dependent columns)."""
    basis = vectors
    for _ in range(2):
        gram = matmul(basis.conj().T, basis)
        try:
            factor = np.linalg.cholesky((gram + gram.conj().T) / 2)
        except np.linalg.LinAlgError:
            return np.linalg.qr(vectors)[0]
        basis = matmul(basis, np.linalg.inv(factor.conj().T))
    return basis


def rayleigh_ritz(lap: Any, vectors: np.ndarray, null: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormalise ``vectors`` (against ``null`` too) and return the Ritz pairs of ``lap`` on their span."""
    if null is not None:
        vectors = vectors - null[:, None] * inner(null, vectors)[None, :]
    basis = _orthonormal(vectors)
    projected = matmul(basis.conj().T, lap @ basis)
    values, small = np.linalg.eigh((projected + projected.conj().T) / 2)
    return values, matmul(basis, small)


def value_clusters(values: np.ndarray, scale: float) -> np.ndarray:
    """:func:`omnipos.graph.eigenvalue_clusters` of ascending float64 ``values [M]`` with a float ``scale``, in
    NumPy (the same comparisons, so the same ids; without a torch round trip, ~0.1 ms on the solver's few
    values)."""
    starts = np.ones(values.size, dtype=np.int64)
    starts[1:] = starts_cluster(np.diff(values), EIGENVALUE_TOL, scale)  # canonical_spec R1
    return np.cumsum(starts) - 1


def deflate(null: np.ndarray | None, x: np.ndarray) -> np.ndarray:
    if null is None:
        return x
    if x.ndim == 1:
        return x - null * inner(null, x)
    return x - null[:, None] * inner(null, x)[None, :]


def fast_matvec(matrix: Any, reuse: bool = False) -> Callable[[np.ndarray], np.ndarray]:
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
