"""Fused QK-norm + RoPE in Triton: per-head RMSNorm of q and k, then the rotation, one launch each way.

Forward, per (token, head) of q and of k: ``n = x * rsqrt(mean(x^2) + eps)`` over the whole head dim in float32,
``y = n * (weight + offset)`` (offset 0: Qwen3; 1: Gemma 3), ``out = R(position) y`` on the first ``rotary_dim``
channels (the others pass through normalised), rounded once to the input dtype. The phases are those of
:mod:`omnipos.core.rope_triton` (float64 turns, whole turns removed, ``sin``/``cos`` in float32).

OLMo 2 / OLMo 3 (``WHOLE``): the norm runs over all heads of a token (their q_norm over ``num_heads * head_dim``,
before the split into heads). A program already holds every head of its tokens (heads before the sequence are
viewed as ``[rows, S, H, D]`` by strides), so it first sums ``x^2`` over all heads, then normalises and rotates
each head with its ``[D]`` slice of the ``[H * D]`` weight; the backward likewise first sums ``x^2`` and
``(R^T g) w x`` over the heads, and writes each head's weight partial sums to its own slice.

Backward, the same tiling: ``gy = R^T g`` (the kernel turning the other way), then the RMSNorm backward
``gx = rstd * (gy w' - n mean(gy w' n))`` (rstd recomputed, nothing saved but the inputs) and per-program partial
sums of ``gy * n`` for the weights, summed by one reduction. Twice differentiable: the backward's own backward
runs autograd through the eager form of the op (:func:`_eager_forward`, the same phases).

Both are ``torch.library`` ops (``triton_op`` + ``wrap_triton``): ``torch.compile`` traces through them
(``fullgraph=True``, dynamic shapes: no size is a ``tl.constexpr`` but the head dim), CUDA graphs capture them, and
``opcheck`` runs on them. On the CPU they run only under Triton's interpreter (``TRITON_INTERPRET=1``), which the
tests use; :func:`omnipos.core.qk_norm_rope` takes them for CUDA tensors by itself.
"""

from __future__ import annotations

import math
import os

import torch
from torch import Tensor

try:  # pragma: no cover - depends on the installation
    import triton
    import triton.language as tl
    from torch.library import triton_op, wrap_triton

    HAS_TRITON = True
except Exception:  # ImportError, or a broken / driverless triton
    HAS_TRITON = False

__all__ = ["HAS_TRITON", "SUPPORTED_DTYPES", "fused_qk_norm_rope"]

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_POSITION_DTYPES = (torch.int32, torch.int64, torch.float32, torch.float64)
BLOCK_S = 16


def _cdiv(a, b):
    return -(-a // b)


def _next_power_of_2(n: int) -> int:
    return 1 << (int(n) - 1).bit_length()


if HAS_TRITON:

    @triton.jit
    def _cos_sin(pos_ptr, row, s, s_ok, p_sb, p_ss, p_sa, inv_ptr, axis_ptr, attention_factor, sign,
                 HALF: tl.constexpr, BLOCK_HALF: tl.constexpr):
        j = tl.arange(0, BLOCK_HALF)
        j_ok = j < HALF
        ok = s_ok[:, None] & j_ok[None, :]
        axis = tl.load(axis_ptr + j, mask=j_ok, other=0)
        pos = tl.load(pos_ptr + row * p_sb + s[:, None] * p_ss + axis[None, :] * p_sa, mask=ok, other=0)
        turns = pos.to(tl.float64) * tl.load(inv_ptr + j, mask=j_ok, other=0.0)[None, :]
        turns = turns - tl.floor(turns)
        phase = (turns * 6.283185307179586).to(tl.float32)
        return tl.cos(phase) * attention_factor, tl.sin(phase) * (attention_factor * sign)

    @triton.jit
    def _weight(ptr, index, size, offset):
        """Norm weights ``ptr[index] + offset`` in float32, 0 where ``index >= size`` (Gemma 3's offset is 1)."""
        return tl.load(ptr + index, mask=index < size, other=0.0).to(tl.float32) + offset

    @triton.jit
    def _tile_masks(s_ok, HALF: tl.constexpr, ROT: tl.constexpr, REST: tl.constexpr, BLOCK_HALF: tl.constexpr,
                    BLOCK_REST: tl.constexpr):
        """A tile's channel indices and masks (``s_ok``: its rows in range): ``j`` / ``ok`` for either half of the
        rotated part, ``d`` / ``d_ok`` for its interleaved pairs, ``r`` / ``r_ok`` for the unrotated rest."""
        j = tl.arange(0, BLOCK_HALF)
        d = tl.arange(0, 2 * BLOCK_HALF)
        r = tl.arange(0, BLOCK_REST)
        return (j, s_ok[:, None] & (j < HALF)[None, :], d, s_ok[:, None] & (d < ROT)[None, :], r,
                s_ok[:, None] & (r < REST)[None, :])

    @triton.jit
    def _head_weights(w_ptr, h, d, j, r, offset, D: tl.constexpr, HALF: tl.constexpr, ROT: tl.constexpr,
                      REST: tl.constexpr, BLOCK_HALF: tl.constexpr, INTERLEAVED: tl.constexpr, WHOLE: tl.constexpr):
        """Head ``h``'s norm weights (+ offset) as its rotated part is laid out, ``(wd, w1, w2, wr)``: ``wd`` the
        interleaved pairs, ``w1`` / ``w2`` the two halves (the layout not in use gets zeros), ``wr`` the unrotated
        rest. OLMo 2's weight (``WHOLE``) is ``[heads * D]``, head-major; the others are one head's ``[D]``."""
        wh = w_ptr + h * D if WHOLE else w_ptr
        if INTERLEAVED:
            wd = _weight(wh, d, ROT, offset)
            w1 = tl.zeros([BLOCK_HALF], dtype=tl.float32)
            w2 = tl.zeros([BLOCK_HALF], dtype=tl.float32)
        else:
            wd = tl.zeros([2 * BLOCK_HALF], dtype=tl.float32)
            w1 = _weight(wh, j, HALF, offset)
            w2 = _weight(wh + HALF, j, HALF, offset)
        return wd, w1, w2, _weight(wh + ROT, r, REST, offset)

    @triton.jit
    def _rstd(squares, eps, D, BLOCK_S: tl.constexpr):
        """``1 / sqrt(sum / D + eps)`` per row, ``[BLOCK_S, 1]``: IEEE-rounded square root and division (as torch's
        CPU ``rsqrt``; the approximate ``rsqrt`` instruction is off by up to 2 ulp)."""
        ones = tl.full([BLOCK_S], 1.0, tl.float32)
        return tl.div_rn(ones, tl.sqrt_rn(squares / D + eps))[:, None]

    @triton.jit
    def _squares(x_row, s_ok, HALF: tl.constexpr, REST: tl.constexpr, ROT: tl.constexpr,
                 BLOCK_HALF: tl.constexpr, BLOCK_REST: tl.constexpr):
        """``sum(x^2)`` over one head's channels, per token of the tile (x_row: the head's row pointers)."""
        _, _, d, d_ok, r, r_ok = _tile_masks(s_ok, HALF, ROT, REST, BLOCK_HALF, BLOCK_REST)
        x = tl.load(x_row + d[None, :], mask=d_ok, other=0.0).to(tl.float32)
        xr = tl.load(x_row + ROT + r[None, :], mask=r_ok, other=0.0).to(tl.float32)
        return tl.sum(x * x, 1) + tl.sum(xr * xr, 1)

    @triton.jit
    def _forward_tile(x_ptr, o_ptr, w_ptr, pos_ptr, row, s0, h0, h1,
                      S, x_sb, x_ss, x_sh, o_sb, o_ss, o_sh, p_sb, p_ss, p_sa,
                      inv_ptr, axis_ptr, attention_factor, eps, offset,
                      D: tl.constexpr, HALF: tl.constexpr, REST: tl.constexpr, ROT: tl.constexpr,
                      BLOCK_S: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_REST: tl.constexpr,
                      INTERLEAVED: tl.constexpr, WHOLE: tl.constexpr):
        row = row.to(tl.int64)
        s = s0 + tl.arange(0, BLOCK_S)
        s_ok = s < S
        c, sn = _cos_sin(pos_ptr, row, s, s_ok, p_sb, p_ss, p_sa, inv_ptr, axis_ptr, attention_factor, 1.0,
                         HALF, BLOCK_HALF)
        if WHOLE:  # OLMo 2: one rstd per token over all its heads, then each head as below with its weight slice
            squares_all = tl.zeros([BLOCK_S], dtype=tl.float32)
            for h in range(h0, h1):
                squares_all += _squares(x_ptr + row * x_sb + h * x_sh + s[:, None] * x_ss, s_ok,
                                        HALF, REST, ROT, BLOCK_HALF, BLOCK_REST)
            rstd_all = _rstd(squares_all, eps, (h1 - h0) * D, BLOCK_S)
        j, ok, d, d_ok, r, r_ok = _tile_masks(s_ok, HALF, ROT, REST, BLOCK_HALF, BLOCK_REST)
        for h in range(h0, h1):
            wd, w1, w2, wr = _head_weights(w_ptr, h, d, j, r, offset, D, HALF, ROT, REST, BLOCK_HALF, INTERLEAVED,
                                           WHOLE)
            x_row = x_ptr + row * x_sb + h * x_sh + s[:, None] * x_ss
            o_row = o_ptr + row * o_sb + h * o_sh + s[:, None] * o_ss
            xr = tl.load(x_row + ROT + r[None, :], mask=r_ok, other=0.0).to(tl.float32)
            if INTERLEAVED:
                x = tl.load(x_row + d[None, :], mask=d_ok, other=0.0).to(tl.float32)
                squares = tl.sum(x * x, 1) + tl.sum(xr * xr, 1)
            else:
                x1 = tl.load(x_row + j[None, :], mask=ok, other=0.0).to(tl.float32)
                x2 = tl.load(x_row + HALF + j[None, :], mask=ok, other=0.0).to(tl.float32)
                squares = tl.sum(x1 * x1, 1) + tl.sum(x2 * x2, 1) + tl.sum(xr * xr, 1)
            if WHOLE:
                rstd = rstd_all
            else:
                rstd = _rstd(squares, eps, D, BLOCK_S)
            if INTERLEAVED:
                y = x * rstd * wd[None, :]
                y1, y2 = tl.split(tl.reshape(y, [BLOCK_S, BLOCK_HALF, 2]))
                out = tl.reshape(tl.join(y1 * c - y2 * sn, y2 * c + y1 * sn), [BLOCK_S, 2 * BLOCK_HALF])
                tl.store(o_row + d[None, :], out.to(o_ptr.dtype.element_ty), mask=d_ok)
            else:
                y1 = x1 * rstd * w1[None, :]
                y2 = x2 * rstd * w2[None, :]
                tl.store(o_row + j[None, :], (y1 * c - y2 * sn).to(o_ptr.dtype.element_ty), mask=ok)
                tl.store(o_row + HALF + j[None, :], (y2 * c + y1 * sn).to(o_ptr.dtype.element_ty), mask=ok)
            if REST > 0:
                tl.store(o_row + ROT + r[None, :], (xr * rstd * wr[None, :]).to(o_ptr.dtype.element_ty),
                         mask=r_ok)

    @triton.jit
    def _squares_and_dot(g_row, x_row, wh, s_ok, c, sn, offset, HALF: tl.constexpr, REST: tl.constexpr,
                         ROT: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_HALF: tl.constexpr,
                         BLOCK_REST: tl.constexpr, INTERLEAVED: tl.constexpr):
        """One head's ``sum(x^2)`` and ``sum((R^T g) (w + offset) x)`` per token of the tile (c, sn: R^T)."""
        j, ok, d, d_ok, r, r_ok = _tile_masks(s_ok, HALF, ROT, REST, BLOCK_HALF, BLOCK_REST)
        xr = tl.load(x_row + ROT + r[None, :], mask=r_ok, other=0.0).to(tl.float32)
        gr = tl.load(g_row + ROT + r[None, :], mask=r_ok, other=0.0).to(tl.float32)
        wr = _weight(wh + ROT, r, REST, offset)
        if INTERLEAVED:
            x = tl.load(x_row + d[None, :], mask=d_ok, other=0.0).to(tl.float32)
            g = tl.load(g_row + d[None, :], mask=d_ok, other=0.0).to(tl.float32)
            g1, g2 = tl.split(tl.reshape(g, [BLOCK_S, BLOCK_HALF, 2]))
            gy = tl.reshape(tl.join(g1 * c - g2 * sn, g2 * c + g1 * sn), [BLOCK_S, 2 * BLOCK_HALF])
            wd = _weight(wh, d, ROT, offset)
            squares = tl.sum(x * x, 1)
            dot = tl.sum(gy * wd[None, :] * x, 1)
        else:
            x1 = tl.load(x_row + j[None, :], mask=ok, other=0.0).to(tl.float32)
            x2 = tl.load(x_row + HALF + j[None, :], mask=ok, other=0.0).to(tl.float32)
            g1 = tl.load(g_row + j[None, :], mask=ok, other=0.0).to(tl.float32)
            g2 = tl.load(g_row + HALF + j[None, :], mask=ok, other=0.0).to(tl.float32)
            w1 = _weight(wh, j, HALF, offset)
            w2 = _weight(wh + HALF, j, HALF, offset)
            squares = tl.sum(x1 * x1, 1) + tl.sum(x2 * x2, 1)
            dot = tl.sum((g1 * c - g2 * sn) * w1[None, :] * x1, 1) + tl.sum((g2 * c + g1 * sn) * w2[None, :] * x2, 1)
        return squares + tl.sum(xr * xr, 1), dot + tl.sum(gr * wr[None, :] * xr, 1)

    @triton.jit
    def _backward_tile(g_ptr, x_ptr, gx_ptr, w_ptr, part_ptr, pid, pos_ptr, row, s0, h0, h1,
                       S, g_sb, g_ss, g_sh, x_sb, x_ss, x_sh, o_sb, o_ss, o_sh, p_sb, p_ss, p_sa,
                       inv_ptr, axis_ptr, attention_factor, eps, offset,
                       D: tl.constexpr, HALF: tl.constexpr, REST: tl.constexpr, ROT: tl.constexpr,
                       BLOCK_S: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_REST: tl.constexpr,
                       INTERLEAVED: tl.constexpr, WHOLE: tl.constexpr, PART_W):
        row = row.to(tl.int64)
        s = s0 + tl.arange(0, BLOCK_S)
        s_ok = s < S
        # R^T: the rotation the other way (sign -1)
        c, sn = _cos_sin(pos_ptr, row, s, s_ok, p_sb, p_ss, p_sa, inv_ptr, axis_ptr, attention_factor, -1.0,
                         HALF, BLOCK_HALF)
        j, ok, d, d_ok, r, r_ok = _tile_masks(s_ok, HALF, ROT, REST, BLOCK_HALF, BLOCK_REST)
        part = part_ptr + pid.to(tl.int64) * PART_W
        if WHOLE:  # OLMo 2: rstd and mean(g' w n) per token over all its heads first
            squares_all = tl.zeros([BLOCK_S], dtype=tl.float32)
            dot_all = tl.zeros([BLOCK_S], dtype=tl.float32)
            for h in range(h0, h1):
                sq, dot = _squares_and_dot(g_ptr + row * g_sb + h * g_sh + s[:, None] * g_ss,
                                           x_ptr + row * x_sb + h * x_sh + s[:, None] * x_ss, w_ptr + h * D,
                                           s_ok, c, sn, offset, HALF, REST, ROT, BLOCK_S, BLOCK_HALF, BLOCK_REST,
                                           INTERLEAVED)
                squares_all += sq
                dot_all += dot
            rstd_all = _rstd(squares_all, eps, (h1 - h0) * D, BLOCK_S)
            mean_all = rstd_all * (dot_all / ((h1 - h0) * D))[:, None]
        acc_d = tl.zeros([2 * BLOCK_HALF], dtype=tl.float32)
        acc_1 = tl.zeros([BLOCK_HALF], dtype=tl.float32)
        acc_2 = tl.zeros([BLOCK_HALF], dtype=tl.float32)
        acc_r = tl.zeros([BLOCK_REST], dtype=tl.float32)
        for h in range(h0, h1):
            wd, w1, w2, wr = _head_weights(w_ptr, h, d, j, r, offset, D, HALF, ROT, REST, BLOCK_HALF, INTERLEAVED,
                                           WHOLE)
            g_row = g_ptr + row * g_sb + h * g_sh + s[:, None] * g_ss
            x_row = x_ptr + row * x_sb + h * x_sh + s[:, None] * x_ss
            o_row = gx_ptr + row * o_sb + h * o_sh + s[:, None] * o_ss
            xr = tl.load(x_row + ROT + r[None, :], mask=r_ok, other=0.0).to(tl.float32)
            gr = tl.load(g_row + ROT + r[None, :], mask=r_ok, other=0.0).to(tl.float32)
            if INTERLEAVED:
                x = tl.load(x_row + d[None, :], mask=d_ok, other=0.0).to(tl.float32)
                g = tl.load(g_row + d[None, :], mask=d_ok, other=0.0).to(tl.float32)
                g1, g2 = tl.split(tl.reshape(g, [BLOCK_S, BLOCK_HALF, 2]))
                gy = tl.reshape(tl.join(g1 * c - g2 * sn, g2 * c + g1 * sn), [BLOCK_S, 2 * BLOCK_HALF])
                if WHOLE:
                    rstd = rstd_all
                else:
                    rstd = _rstd(tl.sum(x * x, 1) + tl.sum(xr * xr, 1), eps, D, BLOCK_S)
                n = x * rstd
                nr = xr * rstd
                if WHOLE:
                    tl.store(part + h * D + d, tl.sum(gy * n, 0), mask=d < ROT)
                    tl.store(part + h * D + ROT + r, tl.sum(gr * nr, 0), mask=r < REST)
                else:
                    acc_d += tl.sum(gy * n, 0)
                    acc_r += tl.sum(gr * nr, 0)
                gw = gy * wd[None, :]
                gwr = gr * wr[None, :]
                if WHOLE:
                    mean = mean_all
                else:
                    mean = ((tl.sum(gw * n, 1) + tl.sum(gwr * nr, 1)) / D)[:, None]
                tl.store(o_row + d[None, :], (rstd * (gw - n * mean)).to(gx_ptr.dtype.element_ty), mask=d_ok)
            else:
                x1 = tl.load(x_row + j[None, :], mask=ok, other=0.0).to(tl.float32)
                x2 = tl.load(x_row + HALF + j[None, :], mask=ok, other=0.0).to(tl.float32)
                g1 = tl.load(g_row + j[None, :], mask=ok, other=0.0).to(tl.float32)
                g2 = tl.load(g_row + HALF + j[None, :], mask=ok, other=0.0).to(tl.float32)
                gy1 = g1 * c - g2 * sn
                gy2 = g2 * c + g1 * sn
                if WHOLE:
                    rstd = rstd_all
                else:
                    rstd = _rstd(tl.sum(x1 * x1, 1) + tl.sum(x2 * x2, 1) + tl.sum(xr * xr, 1), eps, D, BLOCK_S)
                n1 = x1 * rstd
                n2 = x2 * rstd
                nr = xr * rstd
                if WHOLE:
                    tl.store(part + h * D + j, tl.sum(gy1 * n1, 0), mask=j < HALF)
                    tl.store(part + h * D + HALF + j, tl.sum(gy2 * n2, 0), mask=j < HALF)
                    tl.store(part + h * D + ROT + r, tl.sum(gr * nr, 0), mask=r < REST)
                else:
                    acc_1 += tl.sum(gy1 * n1, 0)
                    acc_2 += tl.sum(gy2 * n2, 0)
                    acc_r += tl.sum(gr * nr, 0)
                gw1 = gy1 * w1[None, :]
                gw2 = gy2 * w2[None, :]
                gwr = gr * wr[None, :]
                if WHOLE:
                    mean = mean_all
                else:
                    mean = ((tl.sum(gw1 * n1, 1) + tl.sum(gw2 * n2, 1) + tl.sum(gwr * nr, 1)) / D)[:, None]
                tl.store(o_row + j[None, :], (rstd * (gw1 - n1 * mean)).to(gx_ptr.dtype.element_ty), mask=ok)
                tl.store(o_row + HALF + j[None, :], (rstd * (gw2 - n2 * mean)).to(gx_ptr.dtype.element_ty),
                         mask=ok)
            if REST > 0:
                tl.store(o_row + ROT + r[None, :], (rstd * (gwr - nr * mean)).to(gx_ptr.dtype.element_ty),
                         mask=r_ok)
        if not WHOLE:
            if INTERLEAVED:
                tl.store(part + d, acc_d, mask=d < ROT)
            else:
                tl.store(part + j, acc_1, mask=j < HALF)
                tl.store(part + HALF + j, acc_2, mask=j < HALF)
            tl.store(part + ROT + r, acc_r, mask=r < REST)

    @triton.jit
    def _tile_of(pid, S_BLOCKS, GROUPS, BLOCK_S: tl.constexpr, HEADS):
        per_row = S_BLOCKS * GROUPS
        rem = pid % per_row
        return pid // per_row, (rem // GROUPS) * BLOCK_S, (rem % GROUPS) * HEADS

    @triton.jit
    def _qk_norm_rope_fwd_kernel(q_ptr, qo_ptr, qw_ptr, qpos_ptr, k_ptr, ko_ptr, kw_ptr, kpos_ptr, inv_ptr, axis_ptr,
                                 S, HQ, HK, N_Q_PROGRAMS, S_BLOCKS, HEADS, GROUPS_Q, GROUPS_K,
                                 q_sb, q_ss, q_sh, qo_sb, qo_ss, qo_sh, qp_sb, qp_ss, qp_sa,
                                 k_sb, k_ss, k_sh, ko_sb, ko_ss, ko_sh, kp_sb, kp_ss, kp_sa,
                                 attention_factor, eps, offset,
                                 D: tl.constexpr, HALF: tl.constexpr, REST: tl.constexpr, ROT: tl.constexpr,
                                 BLOCK_S: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_REST: tl.constexpr,
                                 INTERLEAVED: tl.constexpr, WHOLE: tl.constexpr):
        pid = tl.program_id(0)
        if pid < N_Q_PROGRAMS:
            row, s0, h0 = _tile_of(pid, S_BLOCKS, GROUPS_Q, BLOCK_S, HEADS)
            _forward_tile(q_ptr, qo_ptr, qw_ptr, qpos_ptr, row, s0, h0, tl.minimum(h0 + HEADS, HQ),
                          S, q_sb, q_ss, q_sh, qo_sb, qo_ss, qo_sh, qp_sb, qp_ss, qp_sa,
                          inv_ptr, axis_ptr, attention_factor, eps, offset,
                          D, HALF, REST, ROT, BLOCK_S, BLOCK_HALF, BLOCK_REST, INTERLEAVED, WHOLE)
        else:
            row, s0, h0 = _tile_of(pid - N_Q_PROGRAMS, S_BLOCKS, GROUPS_K, BLOCK_S, HEADS)
            _forward_tile(k_ptr, ko_ptr, kw_ptr, kpos_ptr, row, s0, h0, tl.minimum(h0 + HEADS, HK),
                          S, k_sb, k_ss, k_sh, ko_sb, ko_ss, ko_sh, kp_sb, kp_ss, kp_sa,
                          inv_ptr, axis_ptr, attention_factor, eps, offset,
                          D, HALF, REST, ROT, BLOCK_S, BLOCK_HALF, BLOCK_REST, INTERLEAVED, WHOLE)

    @triton.jit
    def _qk_norm_rope_bwd_kernel(gq_ptr, q_ptr, gqx_ptr, qw_ptr, qpos_ptr, gk_ptr, k_ptr, gkx_ptr, kw_ptr, kpos_ptr,
                                 part_ptr, inv_ptr, axis_ptr,
                                 S, HQ, HK, N_Q_PROGRAMS, S_BLOCKS, HEADS, GROUPS_Q, GROUPS_K,
                                 gq_sb, gq_ss, gq_sh, q_sb, q_ss, q_sh, qo_sb, qo_ss, qo_sh, qp_sb, qp_ss, qp_sa,
                                 gk_sb, gk_ss, gk_sh, k_sb, k_ss, k_sh, ko_sb, ko_ss, ko_sh, kp_sb, kp_ss, kp_sa,
                                 attention_factor, eps, offset, PART_W,
                                 D: tl.constexpr, HALF: tl.constexpr, REST: tl.constexpr, ROT: tl.constexpr,
                                 BLOCK_S: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_REST: tl.constexpr,
                                 INTERLEAVED: tl.constexpr, WHOLE: tl.constexpr):
        pid = tl.program_id(0)
        if pid < N_Q_PROGRAMS:
            row, s0, h0 = _tile_of(pid, S_BLOCKS, GROUPS_Q, BLOCK_S, HEADS)
            _backward_tile(gq_ptr, q_ptr, gqx_ptr, qw_ptr, part_ptr, pid, qpos_ptr, row, s0, h0,
                           tl.minimum(h0 + HEADS, HQ), S, gq_sb, gq_ss, gq_sh, q_sb, q_ss, q_sh, qo_sb, qo_ss, qo_sh,
                           qp_sb, qp_ss, qp_sa, inv_ptr, axis_ptr, attention_factor, eps, offset,
                           D, HALF, REST, ROT, BLOCK_S, BLOCK_HALF, BLOCK_REST, INTERLEAVED, WHOLE, PART_W)
        else:
            row, s0, h0 = _tile_of(pid - N_Q_PROGRAMS, S_BLOCKS, GROUPS_K, BLOCK_S, HEADS)
            _backward_tile(gk_ptr, k_ptr, gkx_ptr, kw_ptr, part_ptr, pid, kpos_ptr, row, s0, h0,
                           tl.minimum(h0 + HEADS, HK), S, gk_sb, gk_ss, gk_sh, k_sb, k_ss, k_sh, ko_sb, ko_ss, ko_sh,
                           kp_sb, kp_ss, kp_sa, inv_ptr, axis_ptr, attention_factor, eps, offset,
                           D, HALF, REST, ROT, BLOCK_S, BLOCK_HALF, BLOCK_REST, INTERLEAVED, WHOLE, PART_W)


def _as_rows(x: Tensor, seq_axis: int, whole: bool = False) -> Tensor:
    """x as ``[rows, S, H2, D]`` (rows: axes before the sequence; H2: axes between it and the channels). With
    ``whole`` (the norm over all heads of a token) and the heads before the sequence (``[..., H, S, D]``), the heads
    become H2 (a strided view ``[rows, S, H, D]``), so that one program sees every head of its tokens."""
    if whole and _heads_before(x, seq_axis):
        view = x.reshape(math.prod(x.shape[:seq_axis - 1]), x.shape[seq_axis - 1], x.shape[seq_axis], x.shape[-1])
        if view.stride(-1) != 1:
            view = view.contiguous()
        return view.transpose(1, 2)
    rows = math.prod(x.shape[:seq_axis])
    h2 = math.prod(x.shape[seq_axis + 1:-1])
    view = x.reshape(rows, x.shape[seq_axis], h2, x.shape[-1])
    return view if view.stride(-1) == 1 else view.contiguous()


def _heads_before(x: Tensor, seq_axis: int) -> bool:
    """``[..., heads, seq, head_dim]``: nothing between the sequence and the channels (as omnipos.core.qk_norm)."""
    return seq_axis == x.ndim - 2 and seq_axis >= 1


def _lead_shape(x: Tensor, seq_axis: int, whole: bool) -> tuple[int, ...]:
    """The axes the rows of :func:`_as_rows` stand for."""
    return tuple(x.shape[:seq_axis - 1] if whole and _heads_before(x, seq_axis) else x.shape[:seq_axis])


def _row_positions(positions: Tensor, x: Tensor, seq_axis: int, multi_axis: bool, whole: bool = False) -> Tensor:
    """Positions broadcast against x's leading axes -> ``[rows, S, n]`` (stride 0 where broadcast). With ``whole``
    and the heads before the sequence, the positions' heads axis (if they have one) has size 1 (the caller's
    check): it is dropped."""
    pos = positions if multi_axis else positions.unsqueeze(-1)
    lead = pos.shape[:-2]
    if whole and _heads_before(x, seq_axis):
        if len(lead) >= seq_axis:
            pos = pos.squeeze(seq_axis - 1)
            lead = pos.shape[:-2]
        seq_axis -= 1
    pos = pos.reshape(*lead, *([1] * (seq_axis - len(lead))), *pos.shape[-2:])
    pos = pos.expand(*x.shape[:seq_axis], *pos.shape[-2:])
    return pos.reshape(-1, *pos.shape[-2:])


def _launch(forward: bool, tensors: list[Tensor], weights: tuple[Tensor, Tensor], positions: Tensor,
            turns: Tensor, slot_axis: Tensor, seq_axis: int, rotary_dim: int, interleaved: bool,
            attention_factor: float, eps: float, offset: float, multi_axis: bool, whole: bool) -> list[Tensor]:
    """tensors: forward [q, k]; backward [gq, q, gk, k]. Returns the outputs (and the weight partial sums).
    ``whole``: the norm over all heads of a token (OLMo 2; weights ``[H * D]``)."""
    per = 1 if forward else 2
    q, k = tensors[per - 1], tensors[2 * per - 1]
    views = [_as_rows(t, seq_axis, whole) for t in tensors]
    outs = [torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k)]
    out_views = [_as_rows(o, seq_axis, whole) for o in outs]
    pos = [_row_positions(positions, t, seq_axis, multi_axis, whole) for t in (q, k)]
    seq = q.shape[seq_axis]
    hq, hk = views[per - 1].shape[2], views[2 * per - 1].shape[2]
    s_blocks = _cdiv(seq, BLOCK_S)
    heads = max(hq, hk)
    n_q = views[0].shape[0] * s_blocks
    n_k = views[-1].shape[0] * s_blocks
    dim = int(q.shape[-1])  # a constexpr: the head dim is fixed per model (a guard, never a recompile per length)
    half = rotary_dim // 2
    rest = dim - rotary_dim
    strides = []
    for v in views[:per]:
        strides += [v.stride(0), v.stride(1), v.stride(2)]
    strides += [out_views[0].stride(0), out_views[0].stride(1), out_views[0].stride(2)]
    strides += [pos[0].stride(0), pos[0].stride(1), pos[0].stride(2)]
    for v in views[per:]:
        strides += [v.stride(0), v.stride(1), v.stride(2)]
    strides += [out_views[1].stride(0), out_views[1].stride(1), out_views[1].stride(2)]
    strides += [pos[1].stride(0), pos[1].stride(1), pos[1].stride(2)]
    meta = {"D": dim, "HALF": half, "REST": rest, "ROT": rotary_dim, "BLOCK_S": BLOCK_S,
            "BLOCK_HALF": _next_power_of_2(half), "BLOCK_REST": _next_power_of_2(max(rest, 1)),
            "INTERLEAVED": interleaved, "WHOLE": whole}
    grid = (n_q + n_k,)
    # Triton's interpreter (TRITON_INTERPRET=1) makes wrap_triton return the kernel itself, which would run on the
    # fake tensors of a trace: there only the output shapes count. (Compiled, wrap_triton's wrapper traces it.)
    skip = os.environ.get("TRITON_INTERPRET") == "1" and (q.is_meta or torch._guards.detect_fake_mode((q,)) is not None)
    sizes = (seq, hq, hk, n_q, s_blocks, heads, 1, 1)
    scalars = (float(attention_factor), float(eps), float(offset))
    if forward:
        if skip:
            return outs
        wrap_triton(_qk_norm_rope_fwd_kernel)[grid](
            views[0], out_views[0], weights[0], pos[0], views[1], out_views[1], weights[1], pos[1], turns, slot_axis,
            *sizes, *strides, *scalars, **meta)
        return outs
    # one row of weight partial sums per program: [D] per head (summed over the heads), or [H * D] with whole
    part_w = heads * dim if whole else dim
    partial = torch.empty(n_q + n_k, part_w, dtype=torch.float32, device=q.device)
    if skip:
        partial = partial.zero_()
    else:
        wrap_triton(_qk_norm_rope_bwd_kernel)[grid](
            views[0], views[1], out_views[0], weights[0], pos[0], views[2], views[3], out_views[1], weights[1],
            pos[1], partial, turns, slot_axis, *sizes, *strides, *scalars, part_w, **meta)
    q_w, k_w = (hq * dim, hk * dim) if whole else (dim, dim)
    return [*outs, partial[:n_q, :q_w].sum(0).to(weights[0].dtype), partial[n_q:, :k_w].sum(0).to(weights[1].dtype)]


def _forward_body(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, positions: Tensor, turns: Tensor,
                  slot_axis: Tensor, seq_axis: int, rotary_dim: int, interleaved: bool, attention_factor: float,
                  eps: float, offset: float, multi_axis: bool, whole: bool) -> tuple[Tensor, Tensor]:
    q_out, k_out = _launch(True, [q, k], (q_weight, k_weight), positions, turns, slot_axis, seq_axis, rotary_dim,
                           interleaved, attention_factor, eps, offset, multi_axis, whole)
    return q_out, k_out


def _backward_body(grad_q: Tensor, grad_k: Tensor, q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor,
                   positions: Tensor, turns: Tensor, slot_axis: Tensor, seq_axis: int, rotary_dim: int,
                   interleaved: bool, attention_factor: float, eps: float, offset: float,
                   multi_axis: bool, whole: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    gq, gk, gqw, gkw = _launch(False, [grad_q, q, grad_k, k], (q_weight, k_weight), positions, turns, slot_axis,
                               seq_axis, rotary_dim, interleaved, attention_factor, eps, offset, multi_axis, whole)
    return gq, gk, gqw, gkw


def _eager_forward(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, positions: Tensor, turns: Tensor,
                   slot_axis: Tensor, seq_axis: int, rotary_dim: int, interleaved: bool, attention_factor: float,
                   eps: float, offset: float, multi_axis: bool, whole: bool) -> tuple[Tensor, Tensor]:
    """The op's forward out of torch ops, on the op's own arguments (the same phases as the kernel): what the
    backward's backward differentiates (double backward)."""
    outs = []
    for x, w in ((q, q_weight), (k, k_weight)):
        view = _as_rows(x, seq_axis, whole).float()  # [rows, S, H2, D]
        pos = _row_positions(positions, x, seq_axis, multi_axis, whole).to(torch.float64)
        cycles = pos.index_select(-1, slot_axis.long()) if multi_axis else pos
        cycles = cycles * turns
        phase = ((cycles - torch.floor(cycles)) * (2 * math.pi)).float().unsqueeze(2)  # [rows, S, 1, half]
        c, s = torch.cos(phase) * attention_factor, torch.sin(phase) * attention_factor
        if whole:  # over all heads of a token; the weight [H2 * D] head-major
            rstd = torch.rsqrt(view.pow(2).mean((-2, -1), keepdim=True) + eps)
            n = view * rstd * (w.float().reshape(view.shape[-2:]) + offset)
        else:
            n = view * torch.rsqrt(view.pow(2).mean(-1, keepdim=True) + eps) * (w.float() + offset)
        if interleaved:
            x1, x2 = n[..., 0:rotary_dim:2], n[..., 1:rotary_dim:2]
            rotated = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), -1).flatten(-2)
        else:
            half = rotary_dim // 2
            x1, x2 = n[..., :half], n[..., half:rotary_dim]
            rotated = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)
        out = torch.cat((rotated, n[..., rotary_dim:]), -1)
        if whole and _heads_before(x, seq_axis):
            out = out.transpose(1, 2)
        outs.append(out.reshape(x.shape).to(x.dtype))
    return outs[0], outs[1]


#: Under Triton's interpreter wrap_triton hands back the kernel itself, which a trace cannot see: there the ops are
#: opaque custom ops (a fake kernel gives the shapes), so that opcheck and torch.compile test the same contract on
#: the CPU; on CUDA they are triton_ops, whose kernels inductor sees and schedules.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

if HAS_TRITON:
    if INTERPRETED:
        _qk_norm_rope_op = torch.library.custom_op("omnipos::qk_norm_rope", mutates_args=())(_forward_body)
        _qk_norm_rope_op.register_fake(_forward_body)
        _qk_norm_rope_backward_op = torch.library.custom_op("omnipos::qk_norm_rope_backward",
                                                            mutates_args=())(_backward_body)
        _qk_norm_rope_backward_op.register_fake(_backward_body)
    else:
        _qk_norm_rope_op = triton_op("omnipos::qk_norm_rope", mutates_args=())(_forward_body)
        _qk_norm_rope_backward_op = triton_op("omnipos::qk_norm_rope_backward", mutates_args=())(_backward_body)

    def _setup_context(ctx, inputs, output):
        q, k, q_weight, k_weight, positions, turns, slot_axis, *options = inputs
        ctx.save_for_backward(q, k, q_weight, k_weight, positions, turns, slot_axis)
        ctx.options = options

    def _backward(ctx, grad_q, grad_k):
        q, k, q_weight, k_weight, positions, turns, slot_axis = ctx.saved_tensors
        gq, gk, gqw, gkw = _qk_norm_rope_backward_op(grad_q, grad_k, q, k, q_weight, k_weight, positions, turns,
                                                     slot_axis, *ctx.options)
        return gq, gk, gqw, gkw, None, None, None, None, None, None, None, None, None, None, None

    _qk_norm_rope_op.register_autograd(_backward, setup_context=_setup_context)

    def _setup_backward_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:9])
        ctx.options = inputs[9:]

    def _backward_backward(ctx, *cotangents):
        """Double backward: the vjp of the backward, by autograd through the eager form of the forward."""
        saved = ctx.saved_tensors
        rest = saved[6:9]
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in saved[:6]]
            grad_q, grad_k, q, k, q_weight, k_weight = leaves
            outs = _eager_forward(q, k, q_weight, k_weight, *rest, *ctx.options)
            first = torch.autograd.grad(outs, (q, k, q_weight, k_weight), (grad_q, grad_k), create_graph=True)
            pairs = [(f, c) for f, c in zip(first, cotangents) if c is not None]
            second = torch.autograd.grad([f for f, _ in pairs], leaves, [c for _, c in pairs], allow_unused=True)
        second = [torch.zeros_like(t) if g is None else g for g, t in zip(second, leaves)]
        return (*second, None, None, None, None, None, None, None, None, None, None, None)

    _qk_norm_rope_backward_op.register_autograd(_backward_backward, setup_context=_setup_backward_context)


def fused_qk_norm_rope(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, positions: Tensor,
                       turns: Tensor, slot_axis: Tensor | None, *, seq_axis: int, rotary_dim: int,
                       interleaved: bool, attention_factor: float, eps: float, offset: float,
                       whole: bool = False) -> tuple[Tensor, Tensor]:
    """The op on validated inputs: ``turns`` the float64 turns per position unit of each slot (``inv_freq / 2
    pi``), ``slot_axis`` the coordinate of each slot for multi-axis positions (None: 1-D positions); ``whole``:
    the norm over all heads of a token (OLMo 2), whose positions must not differ between a token's heads."""
    multi_axis = slot_axis is not None
    if slot_axis is None:
        slot_axis = torch.zeros(rotary_dim // 2, dtype=torch.int32, device=q.device)
    if positions.dtype not in _POSITION_DTYPES:
        positions = positions.to(torch.float64)
    return _qk_norm_rope_op(q, k, q_weight, k_weight, positions, turns, slot_axis, seq_axis, rotary_dim,
                            interleaved, float(attention_factor), float(eps), float(offset), multi_axis, bool(whole))
