"""Block shift-invert: block Lanczos on ``(L + sigma I)^-1`` (the shift-invert factor; full reorthogonalisation, no
restart), ``"auto"``'s solver for symmetric graphs with a small spectral gap (grids), whose block grows past the
largest multiplicity found; LOBPCG (:mod:`.lobpcg`) where its basis would exceed :data:`KRYLOV_ELEMENTS`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .dense import dense_lowest
from .kernels import (
    EXTRA,
    count_step,
    deflate,
    dense_eigh,
    gemm,
    qr_q,
    rayleigh_ritz,
    start_block,
    value_clusters,
)
from .lobpcg import block_lobpcg
from .multigrid import preconditioner_operator

# Elements of the block shift-invert solver's Krylov basis (float64: 256 MB, twice: the basis and its image).
KRYLOV_ELEMENTS = 32_000_000


def block_shift_invert(lap: Any, wanted: int, null: np.ndarray | None, bound: float) -> tuple[np.ndarray, np.ndarray]:
    """Block Lanczos on ``(L + sigma I)^-1`` (the factor of shift-invert; full reorthogonalisation, no restart)
    from ``block`` random vectors: a block Krylov space holds ``min(block, multiplicity)`` copies of every
    eigenvalue, so when every eigenvalue found (up to the cut) has fewer copies than the block, none is missing;
    otherwise the block grows and the solve runs again. Measured on 2-D grids (eigenvalue pairs, 2k-10k nodes):
    ~1.4x the CPU time of single-vector shift-invert (block 4: ~60 solves where ARPACK needs ~35). Falls back
    to :func:`block_lobpcg` (LOBPCG) where the basis would exceed its memory budget before converging."""
    n = lap.shape[0]
    solve = preconditioner_operator(lap, null, bound, "lu")
    width = min(wanted + EXTRA, n - 2 - (null is not None))
    block = 4
    while True:
        found = block_krylov_pairs(lap, solve, width, null, bound, block)
        if found is None:
            return block_lobpcg(lap, wanted, null, bound, "lu")
        values, vectors = found
        clusters = value_clusters(values, bound)
        copies = np.bincount(clusters)
        cut = clusters[wanted - 1]
        if copies[:cut + 1].max() < block and clusters[-1] > cut:
            return values, vectors
        block = int(copies[:cut + 1].max()) + 2
        width = min(max(width, int(np.searchsorted(clusters, cut, side="right")) + block), n - 2 - (null is not None))
        if 5 * (width + block) >= n:
            return dense_lowest(lap, null)


def block_krylov_pairs(lap: Any, solve: Callable[[np.ndarray], np.ndarray], width: int, null: np.ndarray | None,
                  bound: float, block: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``width`` eigenpairs of ``lap`` from the block Krylov space of ``solve`` (the inverse ``S`` of
    ``L + sigma I``), grown until their residuals on ``L`` are below ``1e-9 * bound``; ``None`` past
    :data:`KRYLOV_ELEMENTS`. Convergence is read off the block recurrence ``S B = B H + Q R E^T`` at no extra
    cost (the residual of a Ritz pair ``(mu, B y)`` of ``S`` is ``||R y_last||``, and ``L``'s residual is at most
    ``bound / mu`` times it); the ``L`` residual is checked once at the end."""
    n = lap.shape[0]
    most = max(2 * width + 2 * block, min(KRYLOV_ELEMENTS // n, 30 * block + width))
    # the basis in one array (untouched columns cost no memory): Gram-Schmidt against all of it is two matrix
    # products a step, not two per earlier block
    basis = np.empty((n, most), dtype=lap.dtype, order="F")  # (column blocks contiguous for the solve)
    basis[:, :block] = qr_q(deflate(null, start_block(n, block, lap.dtype)))
    projected = np.zeros((most, most), dtype=lap.dtype)
    size, check_at = 0, 2 * width
    while True:
        image = deflate(null, solve(basis[:, size:size + block]))
        count_step()
        size += block
        done = basis[:, :size]
        done_h = done.conj().T
        column = gemm(done_h, image)  # classical Gram-Schmidt twice (Kahan: twice is enough)
        image = image - gemm(done, column)
        again = gemm(done_h, image)
        image = image - gemm(done, again)
        column += again  # [size, block]: H's new columns
        projected[:size, size - block:size] = column
        projected[size - block:size, :size - block] = column[:size - block].conj().T
        q, r = torch.linalg.qr(torch.from_numpy(np.ascontiguousarray(image)))
        following, tail = q.numpy(), r.numpy()
        if size >= check_at or size + block > most:
            h = projected[:size, :size]
            mu, small = dense_eigh((h + h.conj().T) / 2)
            mu, small = mu[::-1][:width], small[:, ::-1][:, :width]
            residual = np.linalg.norm(tail @ small[size - block:], axis=0)
            distance = float(np.max(residual / np.maximum(1e-9 * np.abs(mu), np.finfo(float).tiny)))
            if distance <= 1.0:
                vectors = gemm(done, small)
                values, vectors = rayleigh_ritz(lap, vectors, null)
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
