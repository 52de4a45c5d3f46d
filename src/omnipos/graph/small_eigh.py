"""Batched symmetric ``eigh`` of many small matrices (molecule-sized graphs, a few dozen nodes each) on the CPU.

A batch of 10,000 molecules is 10,000 LAPACK calls of ~10-40 nodes. What they cost is set by how many threads
each call opens, not by arithmetic: torch's MKL threads a ``syevd`` of 28 nodes and more over every core,
even when called from a thread other than the one torch configured (measured on 2 cores: 2,000 40-node
matrices 0.38 s of CPU with two threads vs 0.22 s with one, and no faster in wall time; at 28 nodes 0.27 s vs
0.11 s). So :func:`small_eigh` runs each batch with MKL limited to one thread *for the calling thread only*
(MKL's thread-local setting, restored afterwards; nothing process-global changes), and callers split big
batches over worker threads themselves. On builds without MKL (other BLAS, or a torch without the symbol) it
is a plain ``torch.linalg.eigh``.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["SMALL_MAX_NODES", "small_eigh", "one_mkl_thread"]

#: Matrices of at most this many rows are "small": :func:`small_eigh` solves them with one MKL thread per call.
#: (Above it a single matrix has enough work for MKL's threads to pay off in wall time.)
SMALL_MAX_NODES = 128

_MKL_LOCAL: list = []
_MKL_LOCK = threading.Lock()


def _mkl_set_local() -> ctypes._CFuncPtr | None:
    """MKL's ``MKL_Set_Num_Threads_Local(int) -> int`` (the calling thread's limit; 0 = follow the global one)
    from torch's own library, or None where torch has no MKL."""
    with _MKL_LOCK:
        if not _MKL_LOCAL:
            function = None
            if torch.backends.mkl.is_available():
                try:
                    library = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
                    function = library.MKL_Set_Num_Threads_Local  # (by value; lowercase is the Fortran form)
                    function.restype, function.argtypes = ctypes.c_int, [ctypes.c_int]
                except (OSError, AttributeError):
                    function = None
            _MKL_LOCAL.append(function)
        return _MKL_LOCAL[0]


@contextmanager
def one_mkl_thread() -> Iterator[None]:
    """Run the block with MKL (torch's LAPACK/BLAS) on one thread in the calling thread only; the thread's
    previous setting is restored on exit. A no-op without MKL."""
    set_local = _mkl_set_local()
    if set_local is None:
        yield
        return
    previous = set_local(1)
    try:
        yield
    finally:
        set_local(previous)


def small_eigh(matrices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.eigh`` of symmetric ``matrices [G, n, n]``: ``(values [G, n] ascending, vectors [G, n, n])``,
    the same numbers bit for bit; on the CPU with ``n <= SMALL_MAX_NODES``, with one MKL thread per call."""
    if matrices.device.type != "cpu" or matrices.shape[-1] > SMALL_MAX_NODES:
        return torch.linalg.eigh(matrices)
    with one_mkl_thread():
        return torch.linalg.eigh(matrices)
