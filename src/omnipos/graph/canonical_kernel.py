"""The canonical basis of :func:`omnipos.graph.canonical_basis` for real float64 eigenvectors on the CPU, compiled
(numba; the optional extra ``omnipos[fast]``): graph by graph and eigenspace by eigenspace, instead of the tensor
program's rounds over padded ``[G, n, clusters]`` stacks, which cost more than the eigensolver on a batch of
molecules.

The definition is the one in :mod:`omnipos.graph.sign`, step for step: a simple eigenvalue's column is multiplied
by the sign of its largest-magnitude entry (ties within ``tol``: the lowest node); a repeated one's columns come
from pivoted Cholesky of the eigenspace's projector, ``u = P e_i / sqrt(P_ii)`` with ``i`` the node of largest
``P_ii`` (ties within ``tol`` on ``sqrt(P_ii)``: the lowest node), deflated after each pivot. Only the order of the
floating-point sums differs from the tensor program (results agree to ~1e-16; the pivots are the same away from
ties at exactly ``tol``).
"""

from __future__ import annotations

import math

import numpy as np

from .lane_eigh import compiled

__all__ = ["canonical_columns"]


@compiled
def _canonical_columns(w, cluster, count, tol, out, pivot_node, pivot_size):
    graphs, n, width = w.shape
    work = np.empty((n, width))
    norms = np.empty(n)
    unit = np.empty(width)
    for g in range(graphs):
        s = 0
        while s < count:
            e = s + 1
            while e < width and cluster[g, e] == cluster[g, s]:
                e += 1
            if e - s == 1:  # a simple eigenvalue: the sign of the largest-magnitude entry
                largest = 0.0
                for i in range(n):
                    largest = max(largest, abs(w[g, i, s]))
                pivot = 0
                for i in range(n):
                    if abs(w[g, i, s]) >= largest - tol:
                        pivot = i
                        break
                entry = w[g, pivot, s]
                size = abs(entry)
                phase = entry / size if size > 0 else 1.0
                for i in range(n):
                    out[g, i, s] = w[g, i, s] * phase
                pivot_node[g, s] = pivot
                pivot_size[g, s] = size
                s = e
                continue
            size = e - s
            for i in range(n):
                for m in range(size):
                    work[i, m] = w[g, i, s + m]
            owed = min(size, count - s)
            for t in range(owed):
                largest = 0.0
                for i in range(n):
                    total = 0.0
                    for m in range(size):
                        total += work[i, m] * work[i, m]
                    norms[i] = math.sqrt(max(total, 0.0))
                    largest = max(largest, norms[i])
                pivot = 0
                for i in range(n):
                    if norms[i] >= largest - tol:
                        pivot = i
                        break
                chosen = norms[pivot]
                scale = 1.0 / chosen if chosen > 0 else 0.0
                for m in range(size):
                    unit[m] = work[pivot, m] * scale
                for i in range(n):
                    total = 0.0
                    for m in range(size):
                        total += work[i, m] * unit[m]
                    out[g, i, s + t] = total
                if t + 1 < owed:
                    for i in range(n):
                        u = out[g, i, s + t]
                        for m in range(size):
                            work[i, m] -= u * unit[m]
                pivot_node[g, s + t] = pivot
                pivot_size[g, s + t] = chosen
            s = e


def canonical_columns(w: np.ndarray, cluster: np.ndarray, count: int, tol: float
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first ``count`` canonical columns of orthonormal real ``w [G, n, M]`` (float64) whose columns belong to
    the eigenspaces ``cluster [G, M]`` (non-decreasing ids; the eigenspace of column ``count - 1`` complete within
    the ``M`` columns): ``(columns [G, n, count], pivot node [G, count] int64, pivot magnitude [G, count])``."""
    w = np.ascontiguousarray(w, dtype=np.float64)
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
    out = np.zeros((graphs, n, count))
    pivot_node = np.zeros((graphs, count), dtype=np.int64)
    pivot_size = np.zeros((graphs, count))
    if graphs and n and count:
        _canonical_columns(w, cluster, count, float(tol), out, pivot_node, pivot_size)
    return out, pivot_node, pivot_size
