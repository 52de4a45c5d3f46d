"""Fused Triton RoPE for CUDA: q and k rotated in one launch, cos/sin computed in-kernel from positions.

Every element of q and k is read once and written once (the pass-through channels past ``rotary_dim`` included);
nothing of q's size is materialised besides the outputs. Per (token, frequency slot) the phase is formed in
float64 as ``position * inv_freq / 2 pi``, its whole turns removed, and ``sin``/``cos`` taken in float32, the
same numbers as the eager path; products run in float32 and are rounded once to the input dtype.

``RotaryEmbedding`` picks this kernel by itself for CUDA tensors of float32 / float16 / bfloat16 when Triton
imports, without xPos and outside ``torch.compile`` (the compiler fuses the eager form itself). Autograd is
supported: the backward is the same kernel turning the other way. Set ``OMNIPOS_DISABLE_TRITON=1`` to force the
eager path. On CPU the kernel runs only under Triton's interpreter (``TRITON_INTERPRET=1``), which the tests use.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

try:  # pragma: no cover - depends on the installation
    import triton
    import triton.language as tl

    HAS_TRITON = True
except Exception:  # ImportError, or a broken / driverless triton
    HAS_TRITON = False

__all__ = ["HAS_TRITON", "LaunchPlan", "device_tables", "make_plan", "maybe_rotate", "rotate_qk", "run_plan"]

_SUPPORTED = (torch.float32, torch.float16, torch.bfloat16)
_POSITION_DTYPES = (torch.int32, torch.int64, torch.float32, torch.float64)
#: Positions per program, and heads per program (None: all of a row's heads, cos/sin computed once for them).
BLOCK_S = 16
HEADS_PER_PROGRAM: int | None = None


if HAS_TRITON:

    @triton.jit
    def _rotate_tile(x_ptr, o_ptr, pos_ptr, row, s0, h0, h1,
                     S, x_sb, x_ss, x_sh, o_sb, o_ss, o_sh, p_sb, p_ss, p_sa, p_div,
                     inv_ptr, axis_ptr, attention_factor, sign,
                     HALF: tl.constexpr, REST: tl.constexpr, ROT: tl.constexpr,
                     BLOCK_S: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_REST: tl.constexpr,
                     INTERLEAVED: tl.constexpr):
        """Positions s0 .. s0 + BLOCK_S of heads h0 .. h1 of one row: cos/sin once, then each head."""
        row = row.to(tl.int64)  # offsets of tensors past 2^31 elements
        s = s0 + tl.arange(0, BLOCK_S)
        j = tl.arange(0, BLOCK_HALF)
        s_ok = s < S
        j_ok = j < HALF
        ok = s_ok[:, None] & j_ok[None, :]
        axis = tl.load(axis_ptr + j, mask=j_ok, other=0)
        pos = tl.load(pos_ptr + (row // p_div) * p_sb + s[:, None] * p_ss + axis[None, :] * p_sa, mask=ok, other=0)
        turns = pos.to(tl.float64) * tl.load(inv_ptr + j, mask=j_ok, other=0.0)[None, :]  # float64: cycles
        turns = turns - tl.floor(turns)
        phase = (turns * 6.283185307179586).to(tl.float32)
        c = tl.cos(phase) * attention_factor
        sn = tl.sin(phase) * (attention_factor * sign)
        # interleaved pairs (2j, 2j + 1): one contiguous [BLOCK_S, 2 * BLOCK_HALF] tile, split in registers
        # (two stride-2 loads cannot be vectorised: measured 4.7x slower than the half layout on an H200)
        d = tl.arange(0, 2 * BLOCK_HALF)
        d_ok = s_ok[:, None] & (d < ROT)[None, :]
        r = tl.arange(0, BLOCK_REST)
        r_ok = s_ok[:, None] & (r < REST)[None, :]
        for h in range(h0, h1):
            x_row = x_ptr + row * x_sb + h * x_sh + s[:, None] * x_ss
            o_row = o_ptr + row * o_sb + h * o_sh + s[:, None] * o_ss
            if INTERLEAVED:
                x = tl.load(x_row + d[None, :], mask=d_ok, other=0.0).to(tl.float32)
                x1, x2 = tl.split(tl.reshape(x, [BLOCK_S, BLOCK_HALF, 2]))
                out = tl.reshape(tl.join(x1 * c - x2 * sn, x2 * c + x1 * sn), [BLOCK_S, 2 * BLOCK_HALF])
                tl.store(o_row + d[None, :], out.to(o_ptr.dtype.element_ty), mask=d_ok)
            else:
                x1 = tl.load(x_row + j[None, :], mask=ok, other=0.0).to(tl.float32)
                x2 = tl.load(x_row + HALF + j[None, :], mask=ok, other=0.0).to(tl.float32)
                tl.store(o_row + j[None, :], (x1 * c - x2 * sn).to(o_ptr.dtype.element_ty), mask=ok)
                tl.store(o_row + HALF + j[None, :], (x2 * c + x1 * sn).to(o_ptr.dtype.element_ty), mask=ok)
            if REST > 0:
                rest = tl.load(x_row + ROT + r[None, :], mask=r_ok, other=0.0)
                tl.store(o_row + ROT + r[None, :], rest, mask=r_ok)

    @triton.jit
    def _tile_of(pid, S_BLOCKS, GROUPS, BLOCK_S: tl.constexpr, HEADS):
        """Program ``pid`` of one tensor -> (row, first position, first head) of its tile."""
        per_row = S_BLOCKS * GROUPS
        rem = pid % per_row
        return pid // per_row, (rem // GROUPS) * BLOCK_S, (rem % GROUPS) * HEADS

    @triton.jit
    def _rope_qk_kernel(q_ptr, qo_ptr, qpos_ptr, k_ptr, ko_ptr, kpos_ptr, inv_ptr, axis_ptr,
                        S, HQ, HK, N_Q_PROGRAMS, S_BLOCKS, HEADS, GROUPS_Q, GROUPS_K,
                        q_sb, q_ss, q_sh, qo_sb, qo_ss, qo_sh, qp_sb, qp_ss, qp_sa, qp_div,
                        k_sb, k_ss, k_sh, ko_sb, ko_ss, ko_sh, kp_sb, kp_ss, kp_sa, kp_div,
                        attention_factor, sign,
                        HALF: tl.constexpr, REST: tl.constexpr, ROT: tl.constexpr,
                        BLOCK_S: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_REST: tl.constexpr,
                        INTERLEAVED: tl.constexpr):
        """One program: BLOCK_S positions of one row of q (the first N_Q_PROGRAMS programs) or k, for a group
        of HEADS heads (GROUPS_Q / GROUPS_K groups per position block)."""
        pid = tl.program_id(0)
        if pid < N_Q_PROGRAMS:
            row, s0, h0 = _tile_of(pid, S_BLOCKS, GROUPS_Q, BLOCK_S, HEADS)
            _rotate_tile(q_ptr, qo_ptr, qpos_ptr, row, s0, h0, tl.minimum(h0 + HEADS, HQ),
                         S, q_sb, q_ss, q_sh, qo_sb, qo_ss, qo_sh,
                         qp_sb, qp_ss, qp_sa, qp_div, inv_ptr, axis_ptr, attention_factor, sign,
                         HALF, REST, ROT, BLOCK_S, BLOCK_HALF, BLOCK_REST, INTERLEAVED)
        else:
            row, s0, h0 = _tile_of(pid - N_Q_PROGRAMS, S_BLOCKS, GROUPS_K, BLOCK_S, HEADS)
            _rotate_tile(k_ptr, ko_ptr, kpos_ptr, row, s0, h0, tl.minimum(h0 + HEADS, HK),
                         S, k_sb, k_ss, k_sh, ko_sb, ko_ss, ko_sh,
                         kp_sb, kp_ss, kp_sa, kp_div, inv_ptr, axis_ptr, attention_factor, sign,
                         HALF, REST, ROT, BLOCK_S, BLOCK_HALF, BLOCK_REST, INTERLEAVED)

# (triton.cdiv and triton.next_power_of_2 are jit functions: ~4.5 us a call from the host, 23 us of every launch)
def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _as_rows(x: torch.Tensor, seq_axis: int) -> tuple[torch.Tensor, int, int]:
    """View x as ``[rows, S, H2, D]``: rows = axes before the sequence, H2 = axes between it and the channels."""
    rows = math.prod(x.shape[:seq_axis])
    h2 = math.prod(x.shape[seq_axis + 1:-1])
    view = x.reshape(rows, x.shape[seq_axis], h2, x.shape[-1])
    if view.stride(-1) != 1:
        view = view.contiguous()
    return view, rows, h2


def _row_positions(positions: torch.Tensor, x: torch.Tensor, seq_axis: int, multi_axis: bool) -> torch.Tensor:
    """Positions broadcast against x's leading axes -> ``[rows, S, n]`` (stride 0 where broadcast; any stride on
    the coordinate axis, e.g. HF's ``[3, batch, seq]`` ids permuted to ``[batch, seq, 3]``). Integer and float32 /
    float64 positions go to the kernel as they are (it widens them to float64 exactly): no conversion pass."""
    pos = positions if positions.dtype in _POSITION_DTYPES else positions.to(torch.float64)
    if not multi_axis:
        pos = pos.unsqueeze(-1)
    lead = pos.shape[:-2]
    pos = pos.reshape(*lead, *([1] * (seq_axis - len(lead))), *pos.shape[-2:])
    pos = pos.expand(*x.shape[:seq_axis], *pos.shape[-2:])
    return pos.reshape(-1, *pos.shape[-2:])


def device_tables(inv_freq: torch.Tensor, slot_axis: torch.Tensor | None,
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's two small tables on ``device``: float64 turns per unit position of each slot
    (``inv_freq / 2 pi``) and the int32 coordinate that turns each slot (zeros for 1-D positions).
    :class:`~omnipos.core.RotaryEmbedding` builds them once per device and keeps them (no copy per call)."""
    turns = (inv_freq.to(device=device, dtype=torch.float64) / (2 * math.pi)).contiguous()
    if slot_axis is None:
        axis = torch.zeros(inv_freq.shape[-1], device=device, dtype=torch.int32)
    else:
        axis = slot_axis.to(device=device, dtype=torch.int32).contiguous()
    return turns, axis


def _launch(grid: tuple[Any, ...], *args: Any, **constexprs: Any) -> None:
    """The one place the kernel runs (eager). The host-time benchmark replaces it with a no-op."""
    _rope_qk_kernel[grid](*args, **constexprs)


def _rotate(q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor, turns: torch.Tensor,
            axis: torch.Tensor, *, seq_axis: int, rotary_dim: int, interleaved: bool, multi_axis: bool,
            attention_factor: float, sign: float, block_s: int | None, heads_per_program: int | None,
            launch: Any) -> list[torch.Tensor]:
    """Allocate the outputs and launch on the prepared tables. Shapes and strides only: no value is read, no
    tensor is created on the host. Meta tensors (no data) get their outputs and no launch."""
    half = rotary_dim // 2
    tensors = [q] if k is None else [q, k]
    views, outs, pos = [], [], []
    for t in tensors:
        view, rows, h2 = _as_rows(t, seq_axis)
        out = torch.empty(t.shape, dtype=t.dtype, device=t.device)
        views.append((view, rows, h2))
        outs.append(out.view(rows, t.shape[seq_axis], h2, t.shape[-1]))
        if pos and t.shape[:seq_axis] == q.shape[:seq_axis]:  # k's rows are q's: the same positions view
            pos.append(pos[0])
        else:
            pos.append(_row_positions(positions, t, seq_axis, multi_axis))
    if k is None:
        views.append(views[0])
        outs.append(outs[0])
        pos.append(pos[0])
    seq = q.shape[seq_axis]
    block_s = BLOCK_S if block_s is None else block_s
    s_blocks = _cdiv(seq, block_s)
    (qv, _, hq), (kv, _, hk) = views
    heads = heads_per_program or HEADS_PER_PROGRAM or max(hq, hk)
    groups_q, groups_k = _cdiv(hq, heads), _cdiv(hk, heads)
    n_q = views[0][1] * s_blocks * groups_q
    n_k = views[1][1] * s_blocks * groups_k if k is not None else 0
    qo, ko = outs
    qp, kp = pos
    rest = q.shape[-1] - rotary_dim
    if q.device.type != "meta":
        launch(
            (n_q + n_k,),
            qv, qo, qp, kv, ko, kp, turns, axis,
            seq, hq, hk, n_q, s_blocks, heads, groups_q, groups_k,
            qv.stride(0), qv.stride(1), qv.stride(2), qo.stride(0), qo.stride(1), qo.stride(2),
            qp.stride(0), qp.stride(1), qp.stride(2), 1,
            kv.stride(0), kv.stride(1), kv.stride(2), ko.stride(0), ko.stride(1), ko.stride(2),
            kp.stride(0), kp.stride(1), kp.stride(2), 1,
            float(attention_factor), float(sign),
            HALF=half, REST=rest, ROT=rotary_dim, BLOCK_S=block_s,
            BLOCK_HALF=_next_power_of_2(half), BLOCK_REST=_next_power_of_2(max(rest, 1)),
            INTERLEAVED=interleaved,
        )
    return [o.view(t.shape) for o, t in zip(outs, tensors)]


class LaunchPlan:
    """Everything of a launch that depends only on the tensors' shapes, strides and dtypes and the options (sizes,
    strides, grid, compile-time constants): built once per signature, so a call only allocates the outputs and
    launches (:func:`run_plan`)."""

    __slots__ = ("constexprs", "grid", "ints", "launch")

    def __init__(self, grid: tuple[int], ints: tuple[int, ...], constexprs: dict[str, Any], launch: bool) -> None:
        self.grid, self.ints, self.constexprs, self.launch = grid, ints, constexprs, launch


def _alias(view: torch.Tensor, base: torch.Tensor) -> bool:
    """Whether ``view`` reads ``base``'s memory starting at its first element (reshape did not copy)."""
    return torch._C._is_alias_of(view, base) and view.data_ptr() == base.data_ptr()


def _position_strides(positions: torch.Tensor, t: torch.Tensor, seq_axis: int,
                      multi_axis: bool) -> tuple[int, int, int, int] | None:
    """(row, position, coordinate) strides of positions against t's rows and the rows per position row, read
    straight from the positions tensor (no view that would copy); None when that is not possible."""
    view = _row_positions(positions, t, seq_axis, multi_axis)
    if _alias(view, positions):
        return view.stride(0), view.stride(1), view.stride(2), 1
    full = positions if multi_axis else positions.unsqueeze(-1)  # [*lead, S, n]
    lead = full.shape[:-2]
    if tuple(lead) != tuple(t.shape[:len(lead)]) or len(lead) > seq_axis:
        return None
    rows = full.reshape(-1, *full.shape[-2:])
    if not _alias(rows, positions) or rows.shape[0] == 0:
        return None
    return rows.stride(0), rows.stride(1), rows.stride(2), math.prod(t.shape[:seq_axis]) // rows.shape[0]


def make_plan(q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor, *, seq_axis: int,
              rotary_dim: int, interleaved: bool, multi_axis: bool) -> LaunchPlan | None:
    """The :class:`LaunchPlan` of these tensors, or None where a call needs per-call work (q or k not viewable
    as rows without a copy, positions of a dtype the kernel does not read)."""
    if positions.dtype not in _POSITION_DTYPES or q.numel() == 0:
        return None
    tensors = [q] if k is None else [q, k]
    strides = []
    for t in tensors:
        view, rows, h2 = _as_rows(t, seq_axis)
        if t.stride(-1) != 1 or not _alias(view, t):
            return None
        p = _position_strides(positions, t, seq_axis, multi_axis)
        if p is None:
            return None
        seq, dim = t.shape[seq_axis], t.shape[-1]
        strides.append((rows, h2, (view.stride(0), view.stride(1), view.stride(2)),
                        (seq * h2 * dim, h2 * dim, dim), p))
    if k is None:
        strides.append(strides[0])
    (rows_q, hq, qs, qos, qps), (rows_k, hk, ks, kos, kps) = strides
    seq = q.shape[seq_axis]
    s_blocks = _cdiv(seq, BLOCK_S)
    heads = HEADS_PER_PROGRAM or max(hq, hk)
    groups_q, groups_k = _cdiv(hq, heads), _cdiv(hk, heads)
    n_q = rows_q * s_blocks * groups_q
    n_k = rows_k * s_blocks * groups_k if k is not None else 0
    half, rest = rotary_dim // 2, q.shape[-1] - rotary_dim
    ints = (seq, hq, hk, n_q, s_blocks, heads, groups_q, groups_k, *qs, *qos, *qps, *ks, *kos, *kps)
    constexprs = {"HALF": half, "REST": rest, "ROT": rotary_dim, "BLOCK_S": BLOCK_S,
                  "BLOCK_HALF": _next_power_of_2(half), "BLOCK_REST": _next_power_of_2(max(rest, 1)),
                  "INTERLEAVED": interleaved}
    return LaunchPlan((n_q + n_k,), ints, constexprs, q.device.type != "meta")  # meta tensors: no data, no launch


def run_plan(plan: LaunchPlan, q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor,
             turns: torch.Tensor, axis: torch.Tensor, attention_factor: float) -> tuple[torch.Tensor, ...]:
    """Rotate q (and k) of the plan's signature: two allocations and the launch (no checks: the caller matched
    the signature). The tensors go to the kernel as they are; the plan holds their row views' strides."""
    qo = torch.empty_like(q, memory_format=torch.contiguous_format)  # (the cheapest allocation call: ~1.4 us)
    if k is None:
        if plan.launch:
            _launch(plan.grid, q, qo, positions, q, qo, positions, turns, axis, *plan.ints, attention_factor, 1.0,
                    **plan.constexprs)
        return (qo,)
    ko = torch.empty_like(k, memory_format=torch.contiguous_format)
    if plan.launch:
        _launch(plan.grid, q, qo, positions, k, ko, positions, turns, axis, *plan.ints, attention_factor, 1.0,
                **plan.constexprs)
    return qo, ko


def rotate_qk(q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor, inv_freq: torch.Tensor | None, *,
              seq_axis: int, rotary_dim: int, interleaved: bool, attention_factor: float = 1.0,
              slot_axis: torch.Tensor | None = None, sign: float = 1.0, block_s: int | None = None,
              heads_per_program: int | None = None,
              tables: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
    """Launch the kernel on q (and k): returns fresh tensors of their shapes and dtypes (contiguous).

    ``inv_freq``: the float64 frequency of each of the ``rotary_dim // 2`` slots; ``slot_axis``: for positions
    ``[..., seq, n]`` (axial RoPE, M-RoPE), the coordinate that turns each slot (None: 1-D positions).
    ``tables``: :func:`device_tables` of them, built beforehand on q's device (then ``inv_freq`` is unused).
    ``block_s`` / ``heads_per_program``: the launch's tiling (default :data:`BLOCK_S`, :data:`HEADS_PER_PROGRAM`);
    any tiling gives the same bits (each element is computed alone)."""
    turns, axis = device_tables(inv_freq, slot_axis, q.device) if tables is None else tables
    return tuple(_rotate(q, k, positions, turns, axis, seq_axis=seq_axis, rotary_dim=rotary_dim,
                         interleaved=interleaved, multi_axis=slot_axis is not None,
                         attention_factor=attention_factor, sign=sign, block_s=block_s,
                         heads_per_program=heads_per_program, launch=_launch))


class _TritonRope(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor,
                inv_freq: torch.Tensor | None, options: dict[str, Any]) -> Any:
        ctx.save_for_backward(positions, inv_freq)
        ctx.options = options
        ctx.has_k = k is not None
        return rotate_qk(q, k, positions, inv_freq, **options)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        positions, inv_freq = ctx.saved_tensors
        options = dict(ctx.options, sign=-ctx.options.get("sign", 1.0))
        gq = grads[0].contiguous()
        gk = grads[1].contiguous() if ctx.has_k else None
        # the transpose of a rotation is the rotation the other way; through apply, so that under
        # create_graph=True the backward is itself differentiable (double backward)
        back = _TritonRope.apply(gq, gk, positions, inv_freq, options)
        return back[0], (back[1] if ctx.has_k else None), None, None, None


def maybe_rotate(q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor, inv_freq: torch.Tensor | None, *,
                 seq_axis: int, rotary_dim: int, interleaved: bool, attention_factor: float = 1.0,
                 slot_axis: torch.Tensor | None = None,
                 tables: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, ...] | None:
    """Rotate q (and k) with the kernel when it applies to these tensors; ``None`` sends the caller to the eager
    path. ``inv_freq`` are the float64 frequencies of the slots (``RotaryEmbedding.frequencies(positions)``),
    ``slot_axis`` the coordinate of each slot for multi-axis positions (``RotaryEmbedding.slot_axis``);
    ``tables``: their :func:`device_tables`, when the caller keeps them (no work on the tables per call).

    While ``torch.compile`` traces, the registered op ``torch.ops.omnipos.rope_qk`` is called instead (the
    compiler sees the Triton kernel, with no graph break and symbolic lengths)."""
    if not HAS_TRITON or os.environ.get("OMNIPOS_DISABLE_TRITON") == "1":
        return None
    dtype, device = q.dtype, q.device
    if dtype not in _SUPPORTED or q.numel() == 0:
        return None
    if k is not None and (k.dtype != dtype or k.device != device):
        return None
    if tables is None:
        tables = device_tables(inv_freq, slot_axis, device)
    if torch.compiler.is_compiling():
        return tuple(torch.ops.omnipos.rope_qk(q, k, positions, *tables, seq_axis, rotary_dim, interleaved,
                                               slot_axis is not None, float(attention_factor), 1.0))
    options = {"seq_axis": seq_axis, "rotary_dim": rotary_dim, "interleaved": interleaved,
               "attention_factor": attention_factor, "slot_axis": slot_axis, "tables": tables}
    if torch.is_grad_enabled() and (q.requires_grad or k is not None and k.requires_grad):
        return _TritonRope.apply(q, k, positions, inv_freq, options)
    return rotate_qk(q, k, positions, inv_freq, **options)


# ----------------------------------------------------------------------------------------------------------------
# The registered op: torch.ops.omnipos.rope_qk
# ----------------------------------------------------------------------------------------------------------------

_SCHEMA = ("(Tensor q, Tensor? k, Tensor positions, Tensor turns, Tensor axis, int seq_axis, int rotary_dim, "
           "bool interleaved, bool multi_axis, float attention_factor, float sign) -> Tensor[]")


def _rope_qk_impl(q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor, turns: torch.Tensor,
                  axis: torch.Tensor, seq_axis: int, rotary_dim: int, interleaved: bool, multi_axis: bool,
                  attention_factor: float, sign: float) -> list[torch.Tensor]:
    """The op's kernel: the Triton launch; CPU tensors take the same arithmetic in torch ops (Triton's
    interpreter under TRITON_INTERPRET=1, how the tests check the kernel)."""
    if q.device.type == "cpu" and (not HAS_TRITON or os.environ.get("TRITON_INTERPRET") != "1"):
        return _rope_qk_torch(q, k, positions, turns, axis, seq_axis, rotary_dim, interleaved, multi_axis,
                              attention_factor, sign)
    return _rotate(q, k, positions, turns, axis, seq_axis=seq_axis, rotary_dim=rotary_dim, interleaved=interleaved,
                   multi_axis=multi_axis, attention_factor=attention_factor, sign=sign, block_s=None,
                   heads_per_program=None, launch=_launch)


def _rope_qk_torch(q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor, turns: torch.Tensor,
                   axis: torch.Tensor, seq_axis: int, rotary_dim: int, interleaved: bool, multi_axis: bool,
                   attention_factor: float, sign: float) -> list[torch.Tensor]:
    """The kernel's arithmetic in torch ops (the op's CPU kernel): per (row, position, slot) the float64 turns
    ``position * turns[slot]``, whole turns removed, sin/cos in float32 times the factor, products in float32,
    one rounding to the input dtype. float64 inputs are rotated in float64 throughout (as the module rotates
    them; the CUDA kernel is not given float64), so ``gradcheck`` can check the op's backward in double."""
    outs = []
    for t in ([q] if k is None else [q, k]):
        work = torch.float64 if t.dtype == torch.float64 else torch.float32
        view = _as_rows(t, seq_axis)[0]
        pos = _row_positions(positions, t, seq_axis, multi_axis)  # [rows, S, n]
        pos = pos.index_select(-1, axis.long()) if multi_axis else pos
        tu = pos.to(torch.float64) * turns
        phase = ((tu - torch.floor(tu)) * 6.283185307179586).to(work).unsqueeze(2)
        c = torch.cos(phase) * attention_factor
        s = torch.sin(phase) * (attention_factor * sign)
        x = view[..., :rotary_dim].to(work)
        if interleaved:
            x1, x2 = x[..., 0::2], x[..., 1::2]
            rotated = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), -1).flatten(-2)
        else:
            x1, x2 = x[..., :rotary_dim // 2], x[..., rotary_dim // 2:]
            rotated = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)
        out = torch.cat((rotated.to(t.dtype), view[..., rotary_dim:]), -1)
        outs.append(out.reshape(t.shape))
    return outs


# define/impl with a fake kernel (an opaque op to the compiler: its fake kernel gives the shapes, no tracing into
# the launch; inductor calls it as it is, a CUDA graph captures it). ``triton_op`` + ``wrap_triton`` would let
# inductor see inside, but its fake propagation ran the launch's host side on fake tensors here: not used until
# that is checked on a device.
rope_qk_op = torch.library.custom_op("omnipos::rope_qk", _rope_qk_impl, mutates_args=(), schema=_SCHEMA)


@rope_qk_op.register_fake
def _rope_qk_fake(q: torch.Tensor, k: torch.Tensor | None, *args: Any) -> list[torch.Tensor]:
    return [torch.empty_like(t, memory_format=torch.contiguous_format) for t in ([q] if k is None else [q, k])]


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    _, k, positions, turns, axis, *rest = inputs
    ctx.save_for_backward(positions, turns, axis)
    ctx.has_k = k is not None
    ctx.rest = rest


def _backward(ctx: Any, grads: list[torch.Tensor]) -> tuple[Any, ...]:
    positions, turns, axis = ctx.saved_tensors
    seq_axis, rotary_dim, interleaved, multi_axis, attention_factor, sign = ctx.rest
    gq = grads[0].contiguous()
    gk = grads[1].contiguous() if ctx.has_k else None
    # the transpose of a rotation is the rotation the other way (the op again: twice differentiable)
    back = torch.ops.omnipos.rope_qk(gq, gk, positions, turns, axis, seq_axis, rotary_dim, interleaved, multi_axis,
                                     attention_factor, -sign)
    return back[0], (back[1] if ctx.has_k else None), None, None, None, None, None, None, None, None, None


rope_qk_op.register_autograd(_backward, setup_context=_setup_context)
