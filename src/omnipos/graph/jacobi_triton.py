"""``eigh`` of many small real symmetric matrices on the GPU in one Triton kernel: one program per matrix, cyclic
Jacobi in float64, the result sorted on the device (the CUDA path of :func:`omnipos.graph.laplacian_pe` for graphs
of at most :data:`JACOBI_MAX_NODES` nodes, through :func:`omnipos.graph.small_eigh.small_eigh`).

Why Jacobi, and why float64. cuSOLVER's batched ``syevd`` runs matrix by matrix (sytrd / ormtr / stedc, ~27 launches
each: 270,000 for 10,000 molecules); Jacobi is rotations only, so a whole matrix fits one program and the batch one
launch. Every step is float64 whatever the input's dtype: the encodings cluster eigenvalues at ``1e-8`` and pick
canonical pivots at ``1e-8`` (:mod:`omnipos.graph.sign`), so the eigenspaces must be as accurate as the CPU's
(~1e-14) for the two to give the same canonical basis; float32 (~1e-7) would split or merge eigenspaces of
symmetric molecules differently from the CPU. (Graph Laplacians have no need of float32's speed here: a matrix is a
few dozen rows, and the H100/H200 run float64 at half float32's rate.)

The algorithm (one program, the matrix and its accumulated rotations in registers, ``[B, B]`` with ``B`` the size
bucket, the next power of two >= the padded size ``N``):

- The lower triangle is read (as ``torch.linalg.eigh``) and mirrored; the matrix is scaled by a power of two
  (exact) so that its largest entry is in ``[1, 2)`` (as :mod:`omnipos.graph.lane_eigh` does), eigenvalues scaled
  back at the end.
- A sweep is ``m - 1`` rounds of the round-robin (chess tournament) ordering of ``m = n`` rounded up to even
  indices: each round pairs every index with another, the ``m / 2`` pairs are disjoint, and over a sweep every pair
  ``(p, q)`` meets once: the parallel ordering of Brent and Luk (1985), whose sweeps converge as the cyclic
  row ordering's do (ultimately quadratically, repeated eigenvalues included). The pairs' rotations are applied at
  once, ``A <- J^T (A J)``, ``V <- V J``: entry by entry, with the partner's column, then row, gathered in
  registers (``tl.gather``).
- Each rotation is Rutishauser's: ``theta = (a_qq - a_pp) / (2 a_pq)``, ``t = sign(theta) / (|theta| +
  sqrt(theta^2 + 1))``, ``c = 1 / sqrt(t^2 + 1)``, ``s = t c``; ``a_pp -= t a_pq``, ``a_qq += t a_pq``,
  ``a_pq = 0`` exactly. A pair with ``a_pq == 0`` is not rotated, so an index beyond a matrix's size (padding,
  all zeros off the diagonal) never rotates and never mixes into the real eigenpairs. After each round the upper
  triangle is mirrored onto the lower, so the matrix stays exactly symmetric and both members of a pair compute
  the same rotation from the same three numbers.
- Sweeps stop when the off-diagonal Frobenius norm is at most ``TOLERANCE`` (1e-15) times the matrix's (eigenvalues
  then off by at most that much of ``||A||_F``; it falls quadratically, each sweep squaring it, with no rounding
  floor: an annihilated entry is set to 0 and the others mix only off-diagonal entries), or after ``MAX_SWEEPS``.
- Eigenvalues are sorted ascending on the device by rank (stable: equal ones keep the algorithm's order, as in
  the lane kernel), eigenvectors written as the columns of their rank.

Outputs are ``torch.linalg.eigh``'s: eigenvalues ascending, orthonormal eigenvectors as columns; within the
eigenspace of a repeated eigenvalue the basis is whatever the rotations produced (the encodings then take the
canonical basis of :func:`omnipos.graph.canonical_basis`, the same on every device).
Measured under Triton's interpreter against ``numpy.linalg.eigh`` on the normalised and combinatorial Laplacians of
20 drug molecules (10-41 atoms, ``tests/graph/test_jacobi_triton.py``): eigenvalues within 1.4e-15 (relative to
``max(1, |lambda|)``), eigenspace projectors within 4.1e-14, canonical bases within 1.1e-13, eigenvectors orthonormal
to 1.0e-14; 5-9 sweeps. (Not yet run on a GPU: the same arithmetic compiled, fused multiply-adds aside.)

A launch creates no host tensor and reads nothing back (CUDA-graph capturable, ``torch.compile``-visible: the
kernel is the ``torch.library`` op ``omnipos::jacobi_eigh``). So on CUDA the values are not checked on the host: a
matrix with a non-finite entry, or a size outside ``0..N``, comes back as NaN eigenpairs with ``info`` -2, one
not converged in ``MAX_SWEEPS`` sweeps (never seen) with ``info`` -1; :func:`omnipos.graph.small_eigh.small_eigh`
solves those again with ``torch.linalg.eigh``. On the CPU :func:`batched_jacobi_eigh` checks the values and
solves with ``torch.linalg.eigh``; under Triton's interpreter (``TRITON_INTERPRET=1``) it runs the kernel on CPU
tensors instead (what the tests do).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor

#: The largest matrix the kernel takes (64: a program's registers hold two [64, 64] float64 matrices).
JACOBI_MAX_NODES = 64

try:  # pragma: no cover - depends on the installation
    import triton
    import triton.language as tl
    from torch.library import triton_op, wrap_triton

    HAS_TRITON = True
except Exception:  # noqa: BLE001 - ImportError, or a broken / driverless triton
    HAS_TRITON = False

__all__ = ["HAS_TRITON", "INTERPRETED", "JACOBI_MAX_NODES", "KERNEL_DEVICE_TYPES", "MAX_SWEEPS", "TOLERANCE",
           "batched_jacobi_eigh", "jacobi_eigh", "kernel_runs_on"]

#: Sweeps allowed before a matrix is flagged as not converged (``info`` -1); 5-10 are typical at 10-64 rows.
MAX_SWEEPS = 40
#: Stop when the off-diagonal Frobenius norm is at most this fraction of the matrix's.
TOLERANCE = 1e-15
#: Device types whose tensors :func:`batched_jacobi_eigh` sends to the kernel (an internal switch for tests).
KERNEL_DEVICE_TYPES: tuple[str, ...] = ("cuda",)
#: Under Triton's interpreter the kernel runs on CPU tensors, and ``wrap_triton`` hands back the kernel itself,
#: which a trace cannot see: the op is then an opaque custom op with a fake kernel (as in the core's Triton ops).
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

_FLOAT_DTYPES = (torch.float32, torch.float64)


def _bucket(n: int) -> int:
    """The kernel's block: the next power of two >= ``n`` (at least 4)."""
    return max(4, 1 << (int(n) - 1).bit_length())


def _warps(block: int) -> int:
    """Warps per program: 4 float64 entries of each ``[B, B]`` matrix per thread up to ``B = 32``, 8 at 64.
    (ptxas for sm_90, per thread: 88 registers at B = 8, 128 + 20 bytes spilled at 16, 128 at 32, 128 + 116 bytes
    spilled at 64; not yet tuned on a GPU: ``benchmarks/bench_lappe_gpu.py`` times the alternatives.)"""
    return max(1, min(16, block * block // 128))


if HAS_TRITON:

    @triton.jit(do_not_specialize=["N"])
    def _jacobi_kernel(a_ptr, sizes_ptr, values_ptr, vectors_ptr, info_ptr, N, a_sg, a_sr, a_sc, tolerance,
                       HAS_SIZES: tl.constexpr, BLOCK: tl.constexpr, MAX_SWEEPS: tl.constexpr):
        g = tl.program_id(0).to(tl.int64)
        n = N
        if HAS_SIZES:
            n = tl.load(sizes_ptr + g).to(tl.int32)
        size_ok = (n >= 0) & (n <= N)
        n = tl.where(size_ok, n, N)
        i = tl.arange(0, BLOCK)
        rows = i[:, None]
        cols = i[None, :]
        real = (rows < n) & (cols < n)
        diagonal = rows == cols
        # the lower triangle, mirrored (as torch.linalg.eigh reads it)
        a = tl.load(a_ptr + g * a_sg + tl.maximum(rows, cols) * a_sr + tl.minimum(rows, cols) * a_sc,
                    mask=real, other=0.0).to(tl.float64)
        finite = tl.abs(a) <= 1.7976931348623157e308  # (False for NaN and +-inf)
        bad = (tl.sum(tl.sum(tl.where(real & ~finite, 1, 0), 1), 0) > 0) | ~size_ok
        a = tl.where(finite, a, 0.0)
        # scale by 2^-e (exact), e the exponent of the largest entry (kept within the normal range)
        big = tl.max(tl.max(tl.abs(a), 1), 0)
        e = ((big.to(tl.int64, bitcast=True) >> 52) & 2047) - 1023
        e = tl.minimum(tl.maximum(e, -1022), 1022)
        a = a * ((1023 - e) << 52).to(tl.float64, bitcast=True)
        up = ((1023 + e) << 52).to(tl.float64, bitcast=True)
        v = tl.where(diagonal, 1.0, 0.0).to(tl.float64)
        limit = tl.sum(tl.sum(a * a, 1), 0) * (tolerance * tolerance)
        off = tl.sum(tl.sum(tl.where(diagonal, 0.0, a * a), 1), 0)
        # round-robin pairing of m indices (n rounded up to even): index m - 1 fixed, the others on a ring
        m = tl.maximum(n + n % 2, 2)
        ring = m - 1
        sweeps = 0
        while (off > limit) & (sweeps < MAX_SWEEPS) & ~bad:
            for r in range(ring):
                partner = (2 * r + ring - i) % ring
                partner = tl.where(partner == i, ring, partner)
                partner = tl.where(i == ring, r, partner)
                partner = tl.where(i > ring, i, partner)  # beyond m: no partner
                by_col = tl.broadcast_to(partner[None, :], [BLOCK, BLOCK])
                # per index i (gathers, not reductions: exact, and cheap under the interpreter)
                d = tl.reshape(tl.gather(a, i[:, None], 1), [BLOCK])  # a_ii
                pair = tl.reshape(tl.gather(a, partner[:, None], 1), [BLOCK])  # a_ij, j the partner of i
                d_partner = tl.gather(d, partner, 0)  # a_jj
                first = i < partner  # i is p of the pair (p, q), p < q
                rotate = (pair != 0.0) & (partner != i)
                a_pp = tl.where(first, d, d_partner)
                a_qq = tl.where(first, d_partner, d)
                theta = (a_qq - a_pp) / tl.where(rotate, 2.0 * pair, 1.0)
                t = 1.0 / (tl.abs(theta) + tl.sqrt(theta * theta + 1.0))  # (|theta| > 1e154: t = 0)
                t = tl.where(rotate, tl.where(theta < 0.0, -t, t), 0.0)
                c = 1.0 / tl.sqrt(t * t + 1.0)
                s = t * c
                sigma = tl.where(first, -s, s)  # column p of A J: c a_p - s a_q; column q: c a_q + s a_p
                d_new = tl.where(first, d - t * pair, d + t * pair)
                c_r = c[:, None]
                c_c = c[None, :]
                s_r = sigma[:, None]
                s_c = sigma[None, :]
                # A J (columns), then J^T (A J) (rows); V J
                a = a * c_c + tl.gather(a, by_col, 1) * s_c
                a_new = a * c_r + tl.gather(a, tl.broadcast_to(partner[:, None], [BLOCK, BLOCK]), 0) * s_r
                a_new = tl.where(diagonal, d_new[:, None], a_new)
                a_new = tl.where((cols == partner[:, None]) & rotate[:, None], 0.0, a_new)
                a = tl.where(rows <= cols, a_new, tl.trans(a_new))  # exactly symmetric
                v = v * c_c + tl.gather(v, by_col, 1) * s_c
            off = tl.sum(tl.sum(tl.where(diagonal, 0.0, a * a), 1), 0)
            sweeps += 1
        info = tl.where(bad, -2, tl.where(off <= limit, sweeps, -1))
        # ascending order, stable: rank of each eigenvalue (indices beyond n last)
        d = tl.sum(tl.where(diagonal, a, 0.0), 1) * up
        key = tl.where(i < n, d, float("inf"))
        before = (key[None, :] < key[:, None]) | ((key[None, :] == key[:, None]) & (cols < rows))
        rank = tl.where(bad, i, tl.sum(before.to(tl.int32), 1))
        d = tl.where(bad, float("nan"), d)
        v = tl.where(bad, float("nan"), v)
        tl.store(values_ptr + g * N + rank, d.to(values_ptr.dtype.element_ty), mask=i < n)
        tl.store(vectors_ptr + g * N * N + rows * N + rank[None, :], v.to(vectors_ptr.dtype.element_ty),
                 mask=real)
        tl.store(info_ptr + g, info.to(tl.int32))


def _outputs(matrices: Tensor, padded: bool) -> tuple[Tensor, Tensor, Tensor]:
    count, n = matrices.shape[0], matrices.shape[-1]
    make = torch.zeros if padded else torch.empty
    values = make(count, n, dtype=matrices.dtype, device=matrices.device)
    vectors = make(count, n, n, dtype=matrices.dtype, device=matrices.device)
    info = torch.empty(count, dtype=torch.int32, device=matrices.device)
    return values, vectors, info


def _jacobi_body(matrices: Tensor, sizes: Tensor | None, max_sweeps: int, tolerance: float,
                 ) -> tuple[Tensor, Tensor, Tensor]:
    values, vectors, info = _outputs(matrices, sizes is not None)
    count, n = matrices.shape[0], matrices.shape[-1]
    # under the interpreter wrap_triton is the kernel itself, which would run on the fake tensors of a trace:
    # there only the output shapes count
    fake = INTERPRETED and (matrices.is_meta or torch._guards.detect_fake_mode((matrices,)) is not None)
    if count and n and not fake:
        block = _bucket(n)
        wrap_triton(_jacobi_kernel)[(count,)](
            matrices, sizes if sizes is not None else info, values, vectors, info, n,
            matrices.stride(0), matrices.stride(1), matrices.stride(2), float(tolerance),
            HAS_SIZES=sizes is not None, BLOCK=block, MAX_SWEEPS=int(max_sweeps), num_warps=_warps(block))
    elif not count or not n:
        info.zero_()
    return values, vectors, info


if HAS_TRITON:
    if INTERPRETED:
        _jacobi_op = torch.library.custom_op("omnipos::jacobi_eigh", mutates_args=())(_jacobi_body)
        _jacobi_op.register_fake(_jacobi_body)
    else:
        _jacobi_op = triton_op("omnipos::jacobi_eigh", mutates_args=())(_jacobi_body)


def kernel_runs_on(device: torch.device) -> bool:
    """Whether :func:`batched_jacobi_eigh` runs the kernel for tensors on ``device`` (CUDA with Triton; the CPU
    under Triton's interpreter)."""
    return HAS_TRITON and (device.type in KERNEL_DEVICE_TYPES or (INTERPRETED and device.type == "cpu"))


def jacobi_eigh(matrices: Tensor, sizes: Tensor | None = None, *, max_sweeps: int = MAX_SWEEPS,
                tolerance: float = TOLERANCE) -> tuple[Tensor, Tensor, Tensor]:
    """The kernel on validated input (:func:`batched_jacobi_eigh` without its checks and its CPU fallback):
    ``(values [G, N], vectors [G, N, N], info [G] int32)``; needs :func:`kernel_runs_on` the matrices' device."""
    return _jacobi_op(matrices, sizes, int(max_sweeps), float(tolerance))


def _check(matrices: Any, sizes: Any) -> None:
    """The door: shapes and dtypes always, values (finite entries, sizes in range) where they are on the CPU."""
    if not isinstance(matrices, torch.Tensor):
        raise TypeError(f"matrices must be a [G, n, n] tensor, got {type(matrices).__name__}")
    if matrices.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"matrices must be float32 or float64 (real symmetric), got dtype {matrices.dtype}")
    if matrices.ndim != 3 or matrices.shape[1] != matrices.shape[2]:
        raise ValueError(f"matrices must have shape [G, n, n] (square), got {tuple(matrices.shape)}")
    n = matrices.shape[-1]
    if n > JACOBI_MAX_NODES:
        raise ValueError(f"matrices must have at most {JACOBI_MAX_NODES} rows for the Jacobi kernel, got n = {n} "
                         "(use torch.linalg.eigh)")
    if matrices.requires_grad:
        raise ValueError("matrices requires grad, but batched_jacobi_eigh has no backward; use torch.linalg.eigh")
    if sizes is not None:
        if not isinstance(sizes, torch.Tensor):
            raise TypeError(f"sizes must be a [G] integer tensor or None, got {type(sizes).__name__}")
        if sizes.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"sizes must be an int32 or int64 tensor, got dtype {sizes.dtype}")
        if sizes.shape != matrices.shape[:1]:
            raise ValueError(f"sizes must have shape [G] = [{matrices.shape[0]}], got {tuple(sizes.shape)}")
        if sizes.device != matrices.device:
            raise ValueError(f"sizes must be on the matrices' device ({matrices.device}), got {sizes.device}")
    if matrices.device.type != "cpu":
        return
    if sizes is not None and sizes.numel() and (int(sizes.min()) < 0 or int(sizes.max()) > n):
        bad = int(((sizes < 0) | (sizes > n)).nonzero()[0, 0])
        raise ValueError(f"sizes must be in 0..{n} (the matrices' size), got {int(sizes[bad])} at index {bad}")
    index = torch.arange(n)
    read = index[:, None] >= index[None, :]  # the lower triangle
    if sizes is not None:
        inside = index < sizes[:, None]
        read = read & inside[:, :, None] & inside[:, None, :]
    broken = ~torch.isfinite(matrices) & read
    if broken.any():
        where = tuple(int(x) for x in broken.nonzero()[0])
        raise ValueError(f"matrices must be finite; found {float(matrices[where])} at index {where}")


def _lapack(matrices: Tensor, sizes: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """The same outputs from ``torch.linalg.eigh`` (each size on its own, the padding zeros)."""
    values, vectors, info = _outputs(matrices, sizes is not None)
    info.zero_()
    if not matrices.shape[0] or not matrices.shape[-1]:
        return values, vectors, info
    if sizes is None:
        values[:], vectors[:] = torch.linalg.eigh(matrices)
        return values, vectors, info
    for size in sizes.unique().tolist():
        if size:
            which = (sizes == size).nonzero().squeeze(1)
            block = matrices[which, :size, :size]
            values[which, :size], vectors[which, :size, :size] = torch.linalg.eigh(block)
    return values, vectors, info


def batched_jacobi_eigh(matrices: Tensor, sizes: Tensor | None = None, *,
                        return_info: bool = False) -> tuple[Tensor, Tensor] | tuple[Tensor, Tensor, Tensor]:
    """Eigenpairs of real symmetric ``matrices [G, N, N]`` (only the lower triangle is read, as
    ``torch.linalg.eigh``), ``N <= JACOBI_MAX_NODES``, by the batched Jacobi kernel (module docstring).

    Args:
        matrices: float32 or float64 ``[G, N, N]``; on CUDA the kernel (float64 inside whatever the dtype), on the
            CPU ``torch.linalg.eigh`` (the kernel under Triton's interpreter).
        sizes: ``[G]`` int32/int64 on the matrices' device, or None: matrix ``g`` is its top-left
            ``sizes[g] x sizes[g]`` block (the rest is padding, never read); None: all are ``N x N``.
        return_info: also return ``info [G]`` int32: the sweeps taken (0 from LAPACK), -1 not converged within
            ``MAX_SWEEPS``, -2 a non-finite entry or a size outside ``0..N`` (on CUDA, where these are not
            checked on the host: that matrix's outputs are NaN).

    Returns:
        ``values [G, N]`` ascending and ``vectors [G, N, N]`` (eigenvectors as columns), the matrices' dtype and
        device; with ``sizes``, ``values[g, sizes[g]:]`` and the rows and columns of ``vectors[g]`` from
        ``sizes[g]`` on are 0.

    Raises ``TypeError`` for a non-tensor, a dtype other than float32/float64 or non-integer ``sizes``;
    ``ValueError`` for a non-square or non-3-D shape, ``N > JACOBI_MAX_NODES``, ``sizes`` of the wrong shape or
    device, input that needs gradients, and (CPU only: on CUDA it would be a host sync) non-finite entries in
    the part read or sizes outside ``0..N``. On CUDA nothing is read back to the host.
    """
    _check(matrices, sizes)
    if kernel_runs_on(matrices.device):
        values, vectors, info = jacobi_eigh(matrices, sizes)
    else:
        values, vectors, info = _lapack(matrices, sizes)
    if return_info:
        return values, vectors, info
    return values, vectors
