"""The canonical basis of :func:`omnipos.graph.canonical_basis` for float64 and complex128 eigenvectors on the CPU,
compiled (numba; the optional extra ``omnipos[fast]``): graph by graph and eigenspace by eigenspace, instead of the
tensor program's rounds over padded ``[G, n, clusters]`` stacks, which cost more than the eigensolver on a batch of
molecules (and on one 1,024-node graph ~1 ms, against ~0.2 ms here).

The rules are those of :mod:`omnipos.graph.canonical_spec` (each step below names its rule, R1-R6), step for step as
the tensor program of :mod:`omnipos.graph.sign` runs them; only the order of the floating-point sums of R2 and R5
differs (results agree to ~1e-15; real columns of simple eigenvalues bit for bit; the pivots are the same away from
ties at exactly ``tol``). The spec's two comparisons (``ties_largest``, and R1's ``starts_cluster``, which the caller
applies) are written out here rather than called: numba's disk cache keys a kernel on its own source file only, so a
kernel calling another module's compiled function would keep stale machine code when only that module changed.
"""

from __future__ import annotations

import math

import numpy as np
from numba import types
from numba.extending import overload

from .lane_eigh import compiled

__all__ = ["canonical_columns"]


def _magnitude(x):
    """R2's ``|v_i|`` of one entry: ``abs`` for a real one; for a complex one ``sqrt(re^2 + im^2)``, within an ulp
    of ``abs`` (hypot, which costs ~15x more per entry here and would make the kernel slower than the tensor
    program on simple eigenvalues). The tie rule makes an ulp matter only at ties at exactly ``tol``."""
    return abs(x)


@overload(_magnitude, jit_options={"nogil": True, "error_model": "numpy"})
def _magnitude_of(x):
    if isinstance(x, types.Complex):
        return lambda x: math.sqrt(x.real * x.real + x.imag * x.imag)
    return lambda x: abs(x)


@compiled
def _canonical_columns(w, cluster, count, tol, out, pivot_node, pivot_size):
    graphs, n, width = w.shape
    work = np.empty((n, width), dtype=w.dtype)
    norms = np.empty(n)
    unit = np.empty(width, dtype=w.dtype)
    for g in range(graphs):
        s = 0
        while s < count:
            e = s + 1
            while e < width and cluster[g, e] == cluster[g, s]:
                e += 1
            if e - s == 1:  # R4: a simple eigenvalue, v * conj(v_i) / |v_i|
                largest = 0.0
                for i in range(n):
                    norms[i] = _magnitude(w[g, i, s])  # R2: |v_i|
                    largest = max(largest, norms[i])
                pivot = 0
                for i in range(n):
                    if norms[i] >= largest - tol:  # R3: ties_largest, the lowest node
                        pivot = i
                        break
                entry = w[g, pivot, s]
                size = abs(entry)
                phase = entry.conjugate() / size if size > 0 else 1.0  # (a zero column: phase 1)
                for i in range(n):
                    out[g, i, s] = w[g, i, s] * phase
                pivot_node[g, s] = pivot
                pivot_size[g, s] = size
                s = e
                continue
            size = e - s  # R5: pivoted Cholesky of the cluster's projector
            for i in range(n):
                for m in range(size):
                    work[i, m] = w[g, i, s + m]
            owed = min(size, count - s)
            for t in range(owed):
                largest = 0.0
                for i in range(n):
                    total = 0.0
                    for m in range(size):
                        x = work[i, m]
                        total += x.real * x.real + x.imag * x.imag  # R2: sqrt(P_ii)
                    norms[i] = math.sqrt(max(total, 0.0))
                    largest = max(largest, norms[i])
                pivot = 0
                for i in range(n):
                    if norms[i] >= largest - tol:  # R3: ties_largest, the lowest node
                        pivot = i
                        break
                chosen = norms[pivot]
                scale = 1.0 / chosen if chosen > 0 else 0.0
                for m in range(size):
                    unit[m] = work[pivot, m] * scale  # a = W[i, :] / s (0 where s = 0)
                for i in range(n):
                    total_u = 0.0  # (complex128 for complex w: numba unifies the two)
                    for m in range(size):
                        total_u += work[i, m] * unit[m].conjugate()
                    out[g, i, s + t] = total_u  # u = W conj(a) = P e_i / s
                if t + 1 < owed:
                    for i in range(n):
                        u = out[g, i, s + t]
                        for m in range(size):
                            work[i, m] -= u * unit[m]  # W <- W - u a
                pivot_node[g, s + t] = pivot  # R6
                pivot_size[g, s + t] = chosen
            s = e


def canonical_columns(w: np.ndarray, cluster: np.ndarray, count: int, tol: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first ``count`` canonical columns of orthonormal ``w [G, n, M]`` (float64 or complex128; other dtypes are
    converted to float64, or complex128 where complex) whose columns belong to the eigenspaces ``cluster [G, M]``
    (non-decreasing ids, R1; the eigenspace of column ``count - 1`` complete within the ``M`` columns): ``(columns
    [G, n, count] of w's dtype, pivot node [G, count] int64, pivot magnitude [G, count] float64)``."""
    w = np.ascontiguousarray(w, dtype=np.complex128 if np.iscomplexobj(w) else np.float64)
    cluster = np.ascontiguousarray(cluster, dtype=np.int64)
    # (the compiled loop does not check its indices: a wrong shape or count would read past the arrays)
    if w.ndim != 3:
        raise ValueError(f"w must have shape [G, n, M], got {w.shape}")
    graphs, n, width = w.shape
    if cluster.shape != (graphs, width):
        raise ValueError(f"cluster must have shape {(graphs, width)} (one eigenspace id per column of w), "
                         f"got {cluster.shape}")
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or not 0 <= count <= width:
        raise ValueError(f"count must be an integer in 0..{width}, got {count!r}")
    if not (isinstance(tol, (int, float, np.floating)) and math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    if not (graphs and n and count):
        return np.zeros((graphs, n, count), dtype=w.dtype), np.zeros((graphs, count), dtype=np.int64), \
            np.zeros((graphs, count))
    # (empty, not zeros: the loop writes every entry - each column below count, R4 or R5, with its pivot - and
    # zeroed fresh pages cost more than the loop itself on a batch: 2,000 complex 25-node graphs, 8 columns,
    # ~3 ms instead of ~8 ms)
    out = np.empty((graphs, n, count), dtype=w.dtype)
    pivot_node = np.empty((graphs, count), dtype=np.int64)
    pivot_size = np.empty((graphs, count))
    _canonical_columns(w, cluster, count, float(tol), out, pivot_node, pivot_size)
    return out, pivot_node, pivot_size
