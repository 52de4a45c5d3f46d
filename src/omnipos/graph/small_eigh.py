"""Batched symmetric ``eigh`` of many small matrices (molecule-sized graphs, a few dozen nodes each) on the CPU,
and the one-thread scope that small-matrix work runs in.

A batch of 10,000 molecules is 10,000 LAPACK calls of ~10-40 nodes and a few dozen tensor ops on ``[G, n, n]``
stacks. What they cost is set by how many threads each call opens, not by arithmetic: torch's MKL threads a
``syevd`` of 28 nodes and more over every core, even when called from a thread other than the one torch
configured (measured on 2 cores: 2,000 40-node matrices 0.38 s of CPU with two threads vs 0.22 s with one, and
no faster in wall time; at 28 nodes 0.27 s vs 0.11 s), and torch's element-wise ops open an OpenMP team whose
threads spin between ops (LapPE of 10,000 molecules: 0.84 s of CPU vs 0.75 s). So the dense path runs inside
:func:`one_thread`: MKL and OpenMP limited to one thread *for the calling thread only* (MKL's thread-local
setting and the thread's own OpenMP ``nthreads`` value, both restored afterwards; nothing process-global
changes), and callers split big batches over worker threads themselves. Where torch has no MKL (other BLAS)
or no OpenMP, that part is skipped.

On CUDA, real matrices of at most 64 rows go to the batched Jacobi kernel of
:mod:`omnipos.graph.jacobi_triton` (one Triton launch for the whole stack, float64 inside) where Triton is installed,
instead of cuSOLVER's ``syevd`` matrix by matrix (~27 launches a matrix).

Where numba is installed (``omnipos[fast]``), float64 matrices of at most ``LANE_MAX_NODES`` rows go instead to the
lane kernel of :mod:`omnipos.graph.lane_eigh`: 32 matrices of one size side by side in AVX-512 lanes, EISPACK's
``tred2`` + ``tql2`` with lane-uniform control flow. Measured on the 10,000 bench molecules (10-40 nodes, one
thread, loaded 2-core machine): 0.20-0.27 s of CPU against MKL's one-thread ``syevd`` 0.53-0.56 s (2.1-2.4x; per
size: 3-4x at 2-8 rows, 2.3x at 24-32, 1.5x at 64, 1.1x at 96, 0.8x at 128, hence the limit of 64); eigenvalues
within 5e-15 of LAPACK's, eigenspace projectors within 4.3e-12 (largest where two eigenvalues are 6e-6 apart: the
difference times the gap <= 7e-16; MKL and OpenBLAS differ from each other by up to 3.1e-12 on the same set), no
matrix flagged. Where the time goes (per block of 32): ``tred2`` ~25%, the QL sweeps ~65% (the rotations of the
eigenvectors about a quarter of that; the sweeps run 76% of their lane-steps on lanes that still need them), loading
and sorting the rest. The kernel is used whatever the batch size, so that a graph gets the same bits alone or in any
batch (a LAPACK path chosen for small batches or for a process's first call would change a few float32 bits of
the encodings: so there is none); its cost is compiling it once per installation (10-11 s, then cached in the
kernel cache folder of :mod:`omnipos.core.compiled_kernels`) and, on a process's first call, loading numba: ~0.2 s
of CPU on the shared 2-core machine, of which ``import numba`` ~0.12 s, numba's CPU target context ~0.02 s (made
with the first dispatcher), its runtime ~0.02 s (compiled from LLVM IR in each process), the cached machine code of
both graph kernels ~0.045 s, and the module of numba's array constructors, whose environments the cached kernels
refer to (their work arrays are allocated inside: passed in as arguments, they cost the lane kernel ~20% per call,
LLVM no longer knowing they do not alias), ~0.025 s. Both run with Python's cyclic collector paused
(:func:`omnipos.core.compiled_kernels.collector_paused`: otherwise each of the ~100 collections they trigger walks
the caller's objects). :func:`load_kernels` does all this ahead, e.g. in the fork server.
An earlier compiled solver that took one matrix at a time (Householder, root-free QL for the eigenvalues,
inverse iteration for the lowest ``k + 1`` vectors) was exact too but only ~1.4x faster than MKL: its QL sweeps
were bound by the latency of their divisions, which the lanes now overlap.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from ..core import collector_paused, compiled_kernels_enabled

__all__ = [
    "JACOBI_DEVICE_TYPES",
    "LANE_BLOCK",
    "LANE_MAX_NODES",
    "SMALL_MAX_NODES",
    "compiled_kernels_enabled",
    "jacobi_kernel",
    "lane_kernel",
    "load_kernels",
    "one_thread",
    "small_eigh",
    "uses_lane_kernel",
]

#: Matrices of at most this many rows are "small": :func:`small_eigh` solves them inside :func:`one_thread`.
#: (Above it a single matrix has enough work for MKL's threads to pay off in wall time.)
SMALL_MAX_NODES = 128

#: Device types whose real matrices of at most 64 rows go to the batched Jacobi kernel
#: (:mod:`omnipos.graph.jacobi_triton`; an internal switch: the tests add ``"cpu"`` under Triton's interpreter).
JACOBI_DEVICE_TYPES: tuple[str, ...] = ("cuda",)

#: Matrices of at most this many rows go to the lane kernel (:mod:`omnipos.graph.lane_eigh`) where numba is
#: installed. (Measured against MKL's one-thread ``syevd``, CPU time per matrix: 3-4x at 2-8 rows, 2.3x at 24-32,
#: 1.5x at 64, 1.1x at 96, 0.8x at 128.)
LANE_MAX_NODES = 64

#: Matrices the lane kernel solves side by side (:data:`omnipos.graph.lane_eigh.LANES`, without importing numba
#: here): callers that cut a batch into pieces cut it at multiples of this.
LANE_BLOCK = 32

_SETTERS: list = []
_SETTERS_LOCK = threading.Lock()


def _thread_setters() -> tuple[Any, Any, Any]:
    """``(MKL_Set_Num_Threads_Local, omp_get_max_threads, omp_set_num_threads)`` from torch's own library (each
    None where torch lacks it). MKL's setter sets the calling thread's limit (0 = follow the global one) and
    returns the previous one; libgomp keeps ``nthreads`` per thread, and torch sizes its parallel regions from
    the calling thread's ``omp_get_max_threads()``."""
    with _SETTERS_LOCK:
        if not _SETTERS:
            mkl_local = omp_get = omp_set = None
            try:
                library = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
            except OSError:
                library = None
            if library is not None and torch.backends.mkl.is_available():
                mkl_local = getattr(library, "MKL_Set_Num_Threads_Local", None)  # by value (lowercase: Fortran)
                if mkl_local is not None:
                    mkl_local.restype, mkl_local.argtypes = ctypes.c_int, [ctypes.c_int]
            if library is not None and torch.backends.openmp.is_available():
                omp_get = getattr(library, "omp_get_max_threads", None)
                omp_set = getattr(library, "omp_set_num_threads", None)
                if omp_get is None or omp_set is None:
                    omp_get = omp_set = None
                else:
                    omp_get.restype, omp_get.argtypes = ctypes.c_int, []
                    omp_set.restype, omp_set.argtypes = None, [ctypes.c_int]
            _SETTERS.extend([mkl_local, omp_get, omp_set])
        return _SETTERS[0], _SETTERS[1], _SETTERS[2]


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the block with MKL (torch's LAPACK/BLAS) and torch's OpenMP ops on one thread, in the calling thread
    only; the thread's previous settings are restored on exit. (Inside, ``torch.get_num_threads()`` reads 1 in
    this thread: read it before entering if it sizes a pool.)"""
    mkl_local, omp_get, omp_set = _thread_setters()
    # torch sets both values in a thread the first time it runs a parallel op there (to its global count):
    # let that happen now, not inside the block, where it would undo the limit
    torch.get_num_threads()
    previous_mkl = mkl_local(1) if mkl_local is not None else None
    previous_omp = omp_get() if omp_get is not None else None
    if omp_set is not None:
        omp_set(1)
    try:
        yield
    finally:
        if omp_set is not None:
            omp_set(previous_omp)
        if mkl_local is not None:
            mkl_local(previous_mkl)


def lane_kernel() -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
    """:func:`omnipos.graph.lane_eigh.lane_eigh`, or None where numba is not installed or is switched off
    (:func:`compiled_kernels_enabled`)."""
    if not compiled_kernels_enabled():
        return None
    try:
        if __package__ + ".lane_eigh" in sys.modules:
            from .lane_eigh import lane_eigh
        else:
            with collector_paused():  # (importing numba: see collector_paused)
                from .lane_eigh import lane_eigh
    except ImportError:
        return None
    return lane_eigh


def jacobi_kernel(matrices: torch.Tensor) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]] | None:
    """:func:`omnipos.graph.jacobi_triton.jacobi_eigh` where it takes ``matrices`` (real ``[G, n, n]`` on a device
    of ``JACOBI_DEVICE_TYPES``, ``n <= jacobi_triton.JACOBI_MAX_NODES``, no gradient; Triton installed), else
    None."""
    if (matrices.device.type not in JACOBI_DEVICE_TYPES or matrices.ndim != 3
            or matrices.dtype not in (torch.float32, torch.float64) or matrices.requires_grad
            or not matrices.shape[0]):
        return None
    from . import jacobi_triton  # (here: Triton is imported only for a device stack)

    if not (jacobi_triton.HAS_TRITON and 0 < matrices.shape[-1] <= jacobi_triton.JACOBI_MAX_NODES):
        return None
    return jacobi_triton.jacobi_eigh


def load_kernels() -> bool:
    """Load the graph encodings' numba kernels (the lane eigensolver and the canonical basis kernel) into this
    process now, from numba's disk cache (compiled where they are not cached), instead of at their first call;
    False where numba is missing or switched off. For a process that forks workers (the local engine's fork
    server): each worker then starts with them loaded (~0.1 s of its first call otherwise: numba's runtime,
    target context and the kernels' machine code). The same machine code either way."""
    kernel = lane_kernel()
    if kernel is None:
        return False
    from .canonical_kernel import canonical_columns

    _, vectors, _ = kernel(np.eye(2)[None])  # (a call of each: numba loads a kernel for the types it is called with)
    canonical_columns(vectors, np.zeros((1, 2), dtype=np.int64), 1, 0.0)
    return True


def uses_lane_kernel(matrices: torch.Tensor) -> bool:
    """Whether :func:`small_eigh` hands ``matrices`` to the lane kernel (CPU, float64 ``[G, n, n]`` with
    ``0 < n <= LANE_MAX_NODES``, no gradient, numba installed and not switched off)."""
    n = matrices.shape[-1]
    return (matrices.device.type == "cpu" and matrices.dtype == torch.float64 and matrices.ndim == 3
            and 0 < n <= LANE_MAX_NODES and not matrices.requires_grad and bool(matrices.shape[0])
            and lane_kernel() is not None)


def small_eigh(matrices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenpairs of symmetric ``matrices [G, n, n]``: ``(values [G, n] ascending, vectors [G, n, n])``, as
    ``torch.linalg.eigh``. On CUDA, real matrices of at most 64 rows go to the batched Jacobi
    kernel of :mod:`omnipos.graph.jacobi_triton` where Triton is installed (one launch; the matrices it flags,
    none in practice, to ``torch.linalg.eigh``: one host sync to find them). On the CPU, float64 matrices of at
    most ``LANE_MAX_NODES`` rows go to the lane kernel where numba is installed (matrices it flags, and every
    other case, to LAPACK); other small matrices to LAPACK inside :func:`one_thread`."""
    n = matrices.shape[-1]
    jacobi = jacobi_kernel(matrices)
    if jacobi is not None:
        values, vectors, info = jacobi(matrices)
        failed = info < 0
        if bool(failed.any()):
            redo = failed.nonzero().squeeze(1)
            values[redo], vectors[redo] = torch.linalg.eigh(matrices[redo])
        return values, vectors
    if matrices.device.type != "cpu" or n > SMALL_MAX_NODES:
        return torch.linalg.eigh(matrices)
    if uses_lane_kernel(matrices):
        kernel = lane_kernel()
        if kernel is not None:
            values, vectors, failed = kernel(matrices.resolve_neg().numpy())
            values, vectors = torch.from_numpy(values), torch.from_numpy(vectors)
            if failed.any():
                redo = torch.from_numpy(np.flatnonzero(failed))
                with one_thread():
                    values[redo], vectors[redo] = torch.linalg.eigh(matrices[redo])
            return values, vectors
    with one_thread():
        return torch.linalg.eigh(matrices)
