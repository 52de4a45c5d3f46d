"""Lanczos without re-orthogonalisation, kept for ``probe_lanczos_1e6.py --plain``: a measured alternative to
ARPACK for the 1e6-node Barabasi-Albert LapPE, not used by omnipos (it lost: see benchmarks/RESULTS.md, issue 25,
fifth session). After Cullum and Willoughby, *Lanczos Algorithms for Large Symmetric Eigenvalue Computations*
(1985), and Paige's analysis of the recurrence in finite precision.

The three-term recurrence keeps three vectors, however many steps it takes. Without re-orthogonalisation, its
tridiagonal ``T`` gains extra copies ("ghosts") of eigenvalues that have already converged, and nothing else goes
wrong: a Ritz value whose estimate ``beta_m |y_m|`` is small is an eigenvalue of the operator, and ``V y`` is its
vector, whatever became of the basis' orthogonality. So:

1. **First pass.** Run the recurrence, keeping only ``alpha`` and ``beta``. Every :data:`CHECK_EVERY` steps, take
   the largest Ritz values of ``T``, fold each run of copies into one (the copy with the smallest estimate), and
   stop once the ``width`` largest distinct values have all converged.
2. **Second pass.** Run the same recurrence again. It is the same arithmetic on the same inputs, so it gives the
   same vectors, bit for bit (checked). Accumulate the Ritz vectors ``V y``, a block of basis vectors at a time,
   in one matrix product each.

In single precision the copies drift apart by ~1e-7 and are not recognised as copies: 2.5x the steps at 100k
nodes. So the products run in double precision, at twice the cost of ARPACK's single-precision ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

__all__ = ["CHECK_EVERY", "plain_lanczos"]

#: Steps between two convergence checks of the first pass (a check costs a few eigenpairs of ``T``, about one
#: product at 1e6 nodes).
CHECK_EVERY = 50
# Basis vectors gathered before they are added into the Ritz vectors by one matrix product (second pass).
_GATHER = 16
# Ritz values of T within this much (relative to the largest) are copies of one eigenvalue. Single-vector Lanczos
# cannot tell two eigenvalues this close apart, and ARPACK cannot either.
_COPY_TOL = 1e-8


def _recurrence(matvec: Callable[[np.ndarray], np.ndarray], start: np.ndarray, operator_dtype: np.dtype,
                steps: int, on_step: Callable[[], None]) -> Iterator[tuple[np.ndarray, float, float]]:
    """Yield ``(q_j, alpha_j, beta_j)`` for ``j = 0 .. steps - 1``, stopping early where ``beta`` vanishes (the
    Krylov space is invariant). ``matvec`` takes and returns vectors of ``operator_dtype``; it may return the
    same buffer each call. The recurrence itself runs in ``start``'s dtype."""
    q = start / np.linalg.norm(start)
    previous, beta, largest = None, 0.0, 0.0
    for _ in range(steps):
        w = matvec(q.astype(operator_dtype, copy=False)).astype(q.dtype, copy=True)  # (matvec reuses its buffer)
        on_step()
        if previous is not None:
            w -= beta * previous
        alpha = float(np.vdot(q, w).real)
        w -= alpha * q
        beta = float(np.linalg.norm(w))
        largest = max(largest, abs(alpha), beta)
        yield q, alpha, beta
        if beta <= 1e-12 * largest:
            return
        previous, q = q, w / beta


def _converged_ritz(alphas: list[float], betas: list[float], width: int, tol: float) -> np.ndarray | None:
    """The ``[m, width]`` eigenvectors of ``T_m`` of the ``width`` largest distinct Ritz values, or None while
    one of them has not converged (estimate ``beta_m |y_m| > tol * max |theta|``)."""
    from scipy.linalg import eigh_tridiagonal

    m = len(alphas)
    top = min(m, 4 * width + 8)  # room for the copies of the converged ones
    values, vectors = eigh_tridiagonal(np.asarray(alphas), np.asarray(betas[:m - 1]), select="i",
                                       select_range=(m - top, m - 1))
    estimates = abs(betas[m - 1]) * np.abs(vectors[-1])
    scale = max(float(np.abs(values).max()), np.finfo(np.float64).tiny)
    chosen: list[int] = []
    i = values.size - 1
    while i >= 0 and len(chosen) < width:
        run = i  # the copies of values[i]: a run of Ritz values within _COPY_TOL of each other
        while run > 0 and values[run] - values[run - 1] <= _COPY_TOL * scale:
            run -= 1
        best = run + int(np.argmin(estimates[run:i + 1]))
        if estimates[best] > tol * scale:
            return None
        chosen.append(best)
        i = run - 1
    if len(chosen) < width:  # (an invariant space with fewer distinct eigenvalues)
        return None
    return vectors[:, chosen]


def plain_lanczos(matvec: Callable[[np.ndarray], np.ndarray], start: np.ndarray, width: int, *, tol: float,
                  operator_dtype: np.dtype, max_steps: int,
                  on_step: Callable[[], None] = lambda: None) -> np.ndarray | None:
    """Approximate eigenvectors of the ``width`` largest distinct eigenvalues of a Hermitian operator (module
    docstring), or None where they did not converge within ``max_steps`` steps or the recurrence stopped on an
    invariant space holding fewer than ``width`` distinct eigenvalues (the caller then uses another solver).

    Args:
        matvec: ``x -> A x`` on vectors of ``operator_dtype`` (float32 / complex64: the products in single
            precision, as the ARPACK path runs them); may return the same buffer each call.
        start: ``[n]`` the start vector, in the recurrence's dtype (float64 / complex128).
        width: eigenpairs wanted.
        tol: convergence of the estimates ``beta_m |y_m|``, relative to the largest Ritz value.
        max_steps: steps of the first pass before giving up.
        on_step: called after each product (both passes: progress).

    Returns:
        ``[n, width]`` in ``start``'s dtype, unit columns in descending eigenvalue order (not orthogonalised: the
        caller's Rayleigh-Ritz step does that), or None.
    """
    alphas: list[float] = []
    betas: list[float] = []
    weights = None
    for _, alpha, beta in _recurrence(matvec, start, operator_dtype, max_steps, on_step):
        alphas.append(alpha)
        betas.append(beta)
        if len(alphas) >= width and len(alphas) % CHECK_EVERY == 0:
            weights = _converged_ritz(alphas, betas, width, tol)
            if weights is not None:
                break
    else:  # the recurrence ended on an invariant space, or at max_steps: a last look
        if len(alphas) >= width:
            weights = _converged_ritz(alphas, betas, width, tol)
    if weights is None:
        return None
    steps = weights.shape[0]
    n = start.shape[0]
    out = np.zeros((n, width), dtype=start.dtype)
    gathered = np.empty((n, min(_GATHER, steps)), dtype=start.dtype)
    filled, first = 0, 0
    for j, (q, alpha, _) in enumerate(_recurrence(matvec, start, operator_dtype, steps, on_step)):
        if alpha != alphas[j]:  # the same arithmetic must give the same vectors; else not this solver's answer
            return None
        gathered[:, filled] = q
        filled += 1
        if filled == gathered.shape[1] or j == steps - 1:
            out += gathered[:, :filled] @ weights[first:first + filled].astype(start.dtype)
            first += filled
            filled = 0
    if first != steps:
        return None
    norms = np.linalg.norm(out, axis=0)
    if not np.all(norms > 0):
        return None
    return out / norms
