"""``solver="auto"``'s choice by spectrum and the one-component entry point, :func:`sparse_eigenpairs`: a short
Lanczos probe of the spectral gap (:data:`GAP_PROBE`), the symmetry probe, and whether the shift-invert factor
fits (:data:`FILL_BUDGET`) decide among Lanczos, (block) shift-invert and block LOBPCG; a single-vector solver's
answer goes on to the block solver where it may have missed copies of a repeated eigenvalue."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..sign import EIGENVALUE_TOL
from .block_krylov import block_shift_invert
from .kernels import EXTRA, count_step, rayleigh_ritz, value_clusters
from .lanczos import lanczos_vectors, probe_gap
from .lobpcg import block_lobpcg
from .multigrid import have_pyamg
from .probe import Symmetry, symmetry_probe
from .shift_invert import rcm_envelope, shift_invert_vectors

SOLVERS = ("auto", "shift-invert", "lobpcg", "lanczos")
#: Largest reverse Cuthill-McKee envelope (entries of the factor under a profile ordering) for which ``"auto"``
#: factorises ``L + sigma I`` (3e7 float64 entries: 240 MB).
FILL_BUDGET = 30_000_000
#: ``"auto"`` considers Lanczos when the second Ritz value of a 30-step Lanczos probe is at least this (times the
#: spectrum bound). Measured (normalised and magnetic Laplacians): Barabasi-Albert ~0.4, grids, geometric graphs
#: and rings with chords 0.013-0.06 (absolute, bound 2).
GAP_PROBE = 0.05


def check_solver(solver: Any) -> str:
    if not isinstance(solver, str) or solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(map(repr, SOLVERS))}; got {solver!r}")
    return solver


def sparse_eigenpairs(lap: Any, count: int, *, null: np.ndarray | None = None, bound: float = 2.0,
                      solver: str = "auto") -> tuple[np.ndarray, np.ndarray, str]:
    """The ``count`` lowest eigenpairs of the Hermitian positive semi-definite sparse ``lap`` of one connected
    graph (SciPy CSR, real or complex), never densified.

    Args:
        lap: ``[n, n]`` SciPy sparse matrix.
        count: eigenpairs wanted (``< n``).
        null: unit vector spanning the null space, when it is known (it is returned first, not computed).
        bound: an upper bound of the spectrum (2 for normalised Laplacians).
        solver: see the docstring of :mod:`omnipos.graph.eigensolvers`.

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
            if not have_pyamg():  # named by the caller ("auto" never asks for AMG without pyamg)
                raise ImportError('solver="lobpcg" needs pyamg for its preconditioner: pip install "omnipos[graph]" '
                                  '(or pyamg), or use solver="auto"')
            preconditioner = "amg"
        if chosen == "lobpcg":
            values, vectors = block_lobpcg(lap, wanted, null, bound, preconditioner)
        elif chosen == "block shift-invert":
            values, vectors = block_shift_invert(lap, wanted, null, bound)
            chosen = "shift-invert"
        else:
            # one extra pair for single-vector Lanczos (measured: each extra costs it ~5%), two for shift-invert
            width = min(wanted + (1 if chosen == "lanczos" else EXTRA), n - 2 - (null is not None))
            if chosen == "shift-invert":
                vectors = shift_invert_vectors(lap, width, null, bound)
            else:
                vectors = lanczos_vectors(lap, width, null, bound)
            values, vectors = rayleigh_ritz(lap, vectors, null)
            if symmetry is not None and _may_miss_copies(values, wanted, bound, symmetry):
                chosen = "lobpcg"
                values, vectors = block_lobpcg(lap, wanted, null, bound, _preconditioner(lap), start=vectors)
        solver = chosen
        residual = np.linalg.norm(lap @ vectors[:, :wanted] - vectors[:, :wanted] * values[:wanted], axis=0)
        if residual.size and residual.max() > 1e-4 * bound:
            warnings.warn(f"{solver} eigensolver reached residual {residual.max():.2e} only (of ||L v - lambda v||); "
                          "the encoding is inaccurate there", RuntimeWarning, stacklevel=3)
    if null is not None:
        values = np.concatenate([[0.0], values])
        vectors = np.concatenate([null[:, None].astype(vectors.dtype), vectors], axis=1)
    return values, vectors, solver


def _choose(lap: Any, null: np.ndarray | None, bound: float) -> tuple[str, str | None, Symmetry | None]:
    """``"auto"``'s solver (with the block solver's preconditioner, and the symmetry probe's answer where it ran).
    A short Lanczos probe shows a large spectral gap (hubs, expanders): single-vector Lanczos (a few hundred
    products, no factorisation) unless :func:`symmetry_probe` finds a symmetry that can repeat an eigenvalue, then
    block LOBPCG. A small gap: block shift-invert where the factor stays small (meshes, geometric graphs, rings
    with chords), LOBPCG + AMG where it would not."""
    gap = probe_gap(lap, null, bound, below=GAP_PROBE * bound)
    count_step()
    if gap >= GAP_PROBE * bound:
        symmetry = symmetry_probe(lap)
        count_step()
        if symmetry.symmetric:
            return "lobpcg", _preconditioner(lap), symmetry
        return "lanczos", None, symmetry
    if _factor_fits(lap):
        symmetry = symmetry_probe(lap)
        count_step()
        return ("block shift-invert" if symmetry.symmetric else "shift-invert"), None, symmetry
    return ("lobpcg", "amg", None) if have_pyamg() else ("lanczos", None, None)


def _factor_fits(lap: Any) -> bool:
    """Whether the reverse Cuthill-McKee envelope of ``lap`` is at most :data:`FILL_BUDGET` entries; without
    computing it where even a full triangle, ``n (n + 1) / 2``, is (graphs up to ~7,700 nodes)."""
    n = lap.shape[0]
    if n * (n + 1) // 2 <= FILL_BUDGET:
        return True
    fits = rcm_envelope(lap) <= FILL_BUDGET
    count_step()
    return fits


def _preconditioner(lap: Any) -> str | None:
    """The block solver's preconditioner: the factor of ``L + sigma I`` where it stays small (then LOBPCG converges
    in a few iterations, as shift-invert does), else AMG (pyamg), else none."""
    if _factor_fits(lap):
        return "lu"
    return "amg" if have_pyamg() else None


def _may_miss_copies(values: np.ndarray, wanted: int, bound: float, symmetry: Symmetry) -> bool:
    """Whether a single-vector solver's eigenvalues (without the null one) need the block solver after all: a
    repeated one among those wanted (the rounding errors of the run surfaced a second copy: others may be
    missing), or an eigenvalue of twin nodes (:func:`symmetry_probe`) at or below the largest one found."""
    clusters = value_clusters(values, bound)
    if np.any(np.bincount(clusters[:min(wanted + 1, values.size)]) > 1):
        return True
    twins = symmetry.twin_values
    return bool(twins.size) and bool(twins.min() <= values[-1] + EIGENVALUE_TOL * bound)
