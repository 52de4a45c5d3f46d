"""``solver="lobpcg"``: block LOBPCG (SciPy) preconditioned by the LU factor or AMG (:mod:`.multigrid`), with a block
that doubles until the eigenvalue at the cut ends inside it, so every copy of a repeated eigenvalue is found; also
the block solver ``"auto"`` falls back to where a single-vector solver may have missed copies."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .dense import dense_lowest
from .kernels import EXTRA, count_step, rayleigh_ritz, start_block, value_clusters
from .multigrid import preconditioner_operator


def _lobpcg(lap: Any, width: int, null: np.ndarray | None, preconditioner: Callable[[np.ndarray], np.ndarray] | None,
            start: np.ndarray | None = None) -> np.ndarray:
    """``width`` lowest eigenvectors of ``lap`` orthogonal to ``null`` by block LOBPCG (SciPy), from ``start``'s
    columns and fixed random ones."""
    from scipy.sparse.linalg import LinearOperator, lobpcg

    n = lap.shape[0]
    block = start_block(n, width, lap.dtype)
    if start is not None:
        block[:, :min(width, start.shape[1])] = start[:, :width]
    operator = None
    if preconditioner is not None:
        def counted(x: np.ndarray) -> np.ndarray:  # applied once an iteration: count the iterations
            count_step()
            return preconditioner(x)

        operator = LinearOperator((n, n), matvec=counted, matmat=counted, dtype=lap.dtype)
    constraint = null[:, None] if null is not None else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "not reaching the requested tolerance": checked after
        _, vectors = lobpcg(lap, block, M=operator, Y=constraint, tol=1e-8, maxiter=500, largest=False)
    return vectors


def block_lobpcg(lap: Any, wanted: int, null: np.ndarray | None, bound: float, preconditioner: str | None,
           start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Block LOBPCG with a block that grows (doubling) until the eigenvalue at the cut (the ``wanted``-th) ends
    before the block does: a block method finds every copy of a repeated eigenvalue that fits in its block, so
    the returned eigenspaces are complete. ``start``: vectors to start from (a previous solver's). Dense ``eigh``
    once the block would be a fifth of the graph."""
    n = lap.shape[0]
    limit = n - (null is not None)
    width = min(wanted + EXTRA, limit)
    apply = preconditioner_operator(lap, null, bound, preconditioner) if 5 * width < n else None
    while True:
        if 5 * width >= n:
            return dense_lowest(lap, null)
        vectors = _lobpcg(lap, width, null, apply, start)
        values, vectors = rayleigh_ritz(lap, vectors, null)
        clusters = value_clusters(values, bound)
        if clusters[-1] > clusters[wanted - 1]:
            return values, vectors
        start, width = vectors, min(2 * width, limit)
        if apply is None and 5 * width < n:
            apply = preconditioner_operator(lap, null, bound, preconditioner)
