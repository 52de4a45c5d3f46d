"""Fused Triton kernel for a summed :class:`~omnipos.timeseries.TimelineEncoder` on CUDA: one launch per call.

What it covers: ``combine="sum"`` with components drawn from ``absolute``, ``periodic``, ``gap`` (any order, any
subset: the CPU kernel's set), an even ``dim``, a float32 / float16 / bfloat16 module, padded times ``[..., L]``
(float16 / bfloat16 / float32 / float64) with or without a mask (padding anywhere in a row), a clock tensor or a
number, any time zone (fixed offsets, or an IANA zone's transition table searched per event), any ``harmonics``,
and no gradient wanted (no ``times.requires_grad``; with ``periodic``, a lift weight that does not require grad or
``torch.no_grad()``). Everything else (``concat``, ``gap_bucket``, ``time2vec``, float64 modules, autograd,
:class:`PackedEvents`, ``torch.compile`` tracing) keeps the eager path.

Per event, the kernel does the eager path's arithmetic in the same order: float64 times, gaps to the previous real
event in the times' dtype (found in-kernel: a scan of the mask within a block and a search back to the previous
real event before it), ``log1p(gap / scale)`` in float64, float64 turns, the nearest whole turns removed (the
``centered`` reduction of :func:`omnipos.core.sinusoid_of_turns`) or the whole turns truncated (periodic), only
then float32 ``sin``/``cos``; the periodic lift one float32 product and one float32 sum per feature (no FMA: the
launch turns contraction off), the components summed in ``components`` order, one rounding to the output dtype,
padded slots exactly 0. The tolerances against the eager path are those of float32 ``sin``/``cos`` implementations
(a few ulp of each term; the tests allow 1e-5 absolute on outputs of size ~1).

Value checks (finite real times, sorted rows, a valid clock for each non-empty row, float16 overflow) run inside the
kernel into one int32 flag; an eager call reads it (one host sync) and, when it is set, sends the call to the eager
path, which raises the precise error. Where values cannot be read (CUDA graph capture, meta tensors), nothing is
checked or synchronised: a captured call trusts its inputs, as a compiled one does. The tables (frequencies,
periods, time-zone transitions) are the module's constant buffers, already on its device: no host tensor per call.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from ..core import can_inspect_values
from .clock import clock_number, clock_tensor

try:  # pragma: no cover - depends on the installation
    import triton
    import triton.language as tl

    HAS_TRITON = True
except Exception:  # ImportError, or a broken / driverless triton
    HAS_TRITON = False

if HAS_TRITON:
    try:  # pragma: no cover
        from triton.language.extra import libdevice
    except Exception:  # pragma: no cover
        libdevice = None

__all__ = ["FUSED_COMPONENTS", "HAS_TRITON", "KERNEL_DEVICE_TYPES", "applies", "maybe_encode"]

#: device types whose tensors take the kernel (the tests add "cpu" under Triton's interpreter, "meta" for the
#: dispatch-mode test)
KERNEL_DEVICE_TYPES: tuple[str, ...] = ("cuda",)
FUSED_COMPONENTS = frozenset({"absolute", "periodic", "gap"})
_OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_TIME_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# what the in-kernel checks flag (any nonzero value sends the call to the eager path, which names the error)
BAD_TIME, UNSORTED, BAD_CLOCK, OVERFLOW = 1, 2, 4, 8


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


if HAS_TRITON:

    @triton.jit
    def _fmod(x, y, LIBDEVICE: tl.constexpr):
        # C fmod, exact. On the device libdevice's (what torch.remainder's CUDA kernel calls): LLVM's frem is
        # lowered there as x - y * trunc(x / y), which is not exact for large quotients. The interpreter's % is
        # NumPy's fmod.
        if LIBDEVICE:
            r = libdevice.fmod(x, y)
        else:
            r = x % y
        return r

    @triton.jit
    def _remainder(x, y, LIBDEVICE: tl.constexpr):
        """torch.remainder of floats (y > 0): fmod, moved into [0, y)."""
        r = _fmod(x, y, LIBDEVICE)
        return tl.where(r < 0, r + y, r)

    @triton.jit
    def _log1p(x, LIBDEVICE: tl.constexpr):
        if LIBDEVICE:
            r = libdevice.log1p(x)
        else:  # (the interpreter has no libdevice) Goldberg's log1p: a few ulp of float64
            u = 1.0 + x
            r = tl.where(u == 1.0, x, tl.log(u) * (x / (u - 1.0)))
        return r

    @triton.jit
    def _maximum(a, b):
        return tl.maximum(a, b)

    @triton.jit
    def _rint(x):
        """Round half to even (torch.round), exactly, from floor: x - floor(x) is exact for |x| >= 1 and, where it
        rounds (x in (-1, 0)), never crosses 1/2 the wrong way."""
        r = tl.floor(x)
        d = x - r
        odd = (r - 2.0 * tl.floor(r * 0.5)) != 0.0
        up = (d > 0.5) | ((d == 0.5) & odd)
        return tl.where(up, r + 1.0, r)

    @triton.jit
    def _centered_sincos(turns):
        """float64 turns -> float32 (sin, cos) of the phase with the nearest whole turns removed."""
        phase = ((turns - _rint(turns)) * 6.283185307179586).to(tl.float32)
        return tl.sin(phase), tl.cos(phase)

    @triton.jit
    def _interleave(s, c, BLOCK_L: tl.constexpr, BLOCK_HALF: tl.constexpr):
        return tl.reshape(tl.join(s, c), [BLOCK_L, 2 * BLOCK_HALF])

    @triton.jit
    def _sum_into(acc, term, FIRST: tl.constexpr):
        """``acc + term``; the sum's first term is written, not added (as the CPU path writes its first block)."""
        if FIRST:
            total = term
        else:
            total = acc + term
        return total

    @triton.jit
    def _timeline_kernel(
        t_ptr, m_ptr, c_ptr, o_ptr, flag_ptr,
        cyc_ptr, gcyc_ptr, per_ptr, pmod_ptr, tzt_ptr, tzo_ptr, w_ptr, scr_ptr,
        L, L_BLOCKS, t_sr, m_sr, c_sr, o_sr, w_sd, w_sk, T,
        gap_scale, log_gap_scale, clock_scalar,
        DIM: tl.constexpr, HALF: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_HALF: tl.constexpr,
        ABS_AT: tl.constexpr, PER_AT: tl.constexpr, GAP_AT: tl.constexpr,
        HAS_PER: tl.constexpr, HAS_GAP: tl.constexpr,
        P: tl.constexpr, H: tl.constexpr, HAS_MASK: tl.constexpr, CLOCK_MODE: tl.constexpr,
        TZ_STEPS: tl.constexpr, CHECK: tl.constexpr, CHECK_F16: tl.constexpr, LIBDEVICE: tl.constexpr,
        GAP_SLOTS: tl.constexpr, SLOTS: tl.constexpr,
    ):
        pid = tl.program_id(0)
        row = (pid // L_BLOCKS).to(tl.int64)
        s0 = (pid % L_BLOCKS) * BLOCK_L
        s = s0 + tl.arange(0, BLOCK_L)
        in_row = s < L
        t_row = t_ptr + row * t_sr
        lane = tl.arange(0, BLOCK_L)
        scratch = scr_ptr + pid.to(tl.int64) * (SLOTS * BLOCK_L)  # this program's [SLOTS, BLOCK_L] float64
        if HAS_MASK:
            real = (tl.load(m_ptr + row * m_sr + s, mask=in_row, other=0) != 0) & in_row
        else:
            real = in_row
        t_raw = tl.load(t_row + s, mask=real, other=0.0)
        t64 = t_raw.to(tl.float64)
        bad = tl.zeros([BLOCK_L], dtype=tl.int32)
        if CHECK:
            finite = (t64 == t64) & (tl.abs(t64) < float("inf"))  # noqa: PLR0124 (NaN test)
            bad = bad | tl.where(real & ~finite, 1, 0)  # BAD_TIME
        j = tl.arange(0, BLOCK_HALF)
        j_ok = j < HALF
        d = tl.arange(0, 2 * BLOCK_HALF)
        d_ok = d < DIM

        if HAS_GAP:
            # the previous real event of each slot: within the block a running max of real indices (shifted by
            # one), before it a search back block by block (the common case looks one block back)
            if HAS_MASK:
                prev_slot = s - 1
                prev_real = (tl.load(m_ptr + row * m_sr + prev_slot, mask=(prev_slot >= s0) & in_row, other=0)
                             != 0) & (prev_slot >= s0) & in_row
                inside = tl.associative_scan(tl.where(prev_real, prev_slot, -1), 0, _maximum)
                carry = tl.full([], -1, tl.int32)
                start = s0
                while (carry < 0) & (start > 0):
                    lo = start - BLOCK_L
                    idx = lo + tl.arange(0, BLOCK_L)
                    back = tl.load(m_ptr + row * m_sr + idx, mask=idx >= 0, other=0) != 0
                    carry = tl.max(tl.where(back & (idx >= 0), idx, -1), axis=0)
                    start = lo
                prev = tl.where(inside >= 0, inside, carry)
            else:
                prev = s - 1
            has_prev = (prev >= 0) & real
            t_prev = tl.load(t_row + prev, mask=has_prev, other=0.0)
            gap = tl.where(has_prev, t_raw - t_prev, 0.0).to(tl.float64)  # in the times' dtype, as eager
            if CHECK:
                bad = bad | tl.where(real & (gap < 0), 2, 0)  # UNSORTED
            ratio = gap / gap_scale
            x = _log1p(ratio, LIBDEVICE)
            big = ratio == float("inf")
            x = tl.where(big, tl.log(tl.where(big, gap, 1.0)) - log_gap_scale, x)
            tl.store(scratch + lane, x)

        if HAS_PER:
            if CLOCK_MODE == 1:
                clock = tl.load(c_ptr + row * c_sr).to(tl.float64)
            else:
                clock = clock_scalar
            if CHECK:
                # a clock must be finite (|clock| <= 1e300) for a row with events; a NaN one is allowed for a row
                # without: the blocks holding events check the first rule, the row's first block the rest
                not_ok = tl.where(tl.abs(clock) <= 1e300, 0, 1)
                not_nan = tl.where(clock == clock, 1, 0)  # noqa: PLR0124 (NaN test)
                here = tl.max(real.to(tl.int32), axis=0) | tl.where(s0 == 0, not_nan, 0)
                bad = bad | tl.where(s == s0, (not_ok * here) * 4, 0)  # BAD_CLOCK
            if TZ_STEPS == 0:
                offset = tl.load(tzo_ptr)
            else:  # torch.bucketize(t + clock, transitions, right=True): how many transitions are <= it
                v = t64 + clock
                lo = tl.zeros([BLOCK_L], dtype=tl.int32)
                hi = tl.zeros([BLOCK_L], dtype=tl.int32) + T
                for _ in tl.static_range(TZ_STEPS):
                    active = lo < hi
                    mid = (lo + hi) // 2
                    tv = tl.load(tzt_ptr + mid, mask=active, other=0.0)
                    right = active & (tv <= v)
                    lo = tl.where(right, mid + 1, lo)
                    hi = tl.where(active & ~right, mid, hi)
                offset = tl.load(tzo_ptr + lo)
            for p in tl.static_range(P):
                period = tl.load(per_ptr + p)
                shift = _remainder(clock, period, LIBDEVICE) + (offset - tl.load(pmod_ptr + p))
                fraction = _remainder(t64 + shift, period, LIBDEVICE) / period
                for h in tl.static_range(1, H + 1):
                    if h == 1:
                        ht = fraction
                    else:
                        ht = fraction * h
                    ht = ht - tl.where(ht < 0, tl.ceil(ht), tl.floor(ht))  # torch.frac
                    phase = (ht * 6.283185307179586).to(tl.float32)
                    k = GAP_SLOTS + (p * H + h - 1) * 2
                    tl.store(scratch + k * BLOCK_L + lane, tl.sin(phase).to(tl.float64))
                    tl.store(scratch + (k + 1) * BLOCK_L + lane, tl.cos(phase).to(tl.float64))

        # The per-event values (log-gaps, periodic features) were computed one event per lane and staged in this
        # program's scratch: read back for the [events, channels] tiles, they are not recomputed by every thread
        # holding a row of a tile (the compiler would otherwise rematerialise their float64 chains in the tiles'
        # layout: 16x the per-event work, measured in the PTX as 16x the float64 divisions). Read through L2
        # (.cg): written by other threads of the program before the barrier.
        tl.debug_barrier()
        acc = tl.zeros([BLOCK_L, 2 * BLOCK_HALF], dtype=tl.float32)
        for slot in tl.static_range(3):
            if slot == ABS_AT:
                turns = t64[:, None] * tl.load(cyc_ptr + j, mask=j_ok, other=0.0)[None, :]
                turns = tl.where(tl.abs(turns) < 9007199254740992.0, turns, 0.0)  # >= 2**53 turns: whole
                a_s, a_c = _centered_sincos(turns)
                acc = _sum_into(acc, _interleave(a_s, a_c, BLOCK_L, BLOCK_HALF), slot == 0)
            if slot == GAP_AT:
                x = tl.load(scratch + lane, cache_modifier=".cg")
                gturns = x[:, None] * tl.load(gcyc_ptr + j, mask=j_ok, other=0.0)[None, :]
                gs, gc = _centered_sincos(gturns)
                acc = _sum_into(acc, _interleave(gs, gc, BLOCK_L, BLOCK_HALF), slot == 0)
            if slot == PER_AT:
                for k in tl.static_range(0, 2 * P * H, 2):
                    w_s = tl.load(w_ptr + d * w_sd + k * w_sk, mask=d_ok, other=0.0).to(tl.float32)
                    w_c = tl.load(w_ptr + d * w_sd + (k + 1) * w_sk, mask=d_ok, other=0.0).to(tl.float32)
                    sin = tl.load(scratch + (GAP_SLOTS + k) * BLOCK_L + lane, cache_modifier=".cg").to(tl.float32)
                    cos = tl.load(scratch + (GAP_SLOTS + k + 1) * BLOCK_L + lane, cache_modifier=".cg")
                    cos = cos.to(tl.float32)
                    acc = _sum_into(acc, sin[:, None] * w_s[None, :], slot + k == 0)
                    acc = acc + cos[:, None] * w_c[None, :]

        keep = real[:, None] & d_ok[None, :]
        if CHECK_F16:
            bad = bad | tl.where(tl.max(tl.where(keep & (tl.abs(acc) > 65504.0), 1, 0), axis=1) > 0, 8, 0)  # OVERFLOW
        out = tl.where(keep, acc, 0.0).to(o_ptr.dtype.element_ty)
        tl.store(o_ptr + row * o_sr + s[:, None] * DIM + d[None, :], out, mask=in_row[:, None] & d_ok[None, :])
        if CHECK:
            tl.atomic_max(flag_ptr, tl.max(bad, axis=0))


def _steps(count: int) -> int:
    """Binary-search steps to place a value among ``count`` sorted transitions."""
    return max(1, (count + 1 - 1).bit_length()) if count else 0


def applies(encoder: Any, times: torch.Tensor) -> bool:
    """Whether this call can take the kernel (see the module docstring)."""
    if not HAS_TRITON or os.environ.get("OMNIPOS_DISABLE_TRITON") == "1" or torch.compiler.is_compiling():
        return False
    if times.device.type not in KERNEL_DEVICE_TYPES or times.dtype not in _TIME_DTYPES or times.numel() == 0:
        return False
    if encoder.combine != "sum" or not set(encoder.components) <= FUSED_COMPONENTS or encoder.dim % 2:
        return False
    if encoder.dtype not in _OUT_DTYPES:
        return False
    return not (torch.is_grad_enabled() and (times.requires_grad
                                             or any(p.requires_grad for p in encoder.parameters())))


def maybe_encode(encoder: Any, times: torch.Tensor, mask: torch.Tensor | None, clock: Any) -> torch.Tensor | None:
    """``encoder(times, mask, clock)`` by the kernel, or None where the eager path must run (the kernel does not
    cover the call, or its in-kernel checks found bad values: the eager path raises the precise error).

    ``times`` / ``mask`` are checked for type and shape already (``check_times``), on the module's device."""
    if not applies(encoder, times):
        return None
    periodic = "periodic" in encoder.components
    if periodic and clock is None:
        return None  # the eager path raises clock_required
    check = can_inspect_values(times, mask)
    length = times.shape[-1]
    t2 = times.reshape(-1, length)
    if t2.stride(-1) != 1:
        t2 = t2.contiguous()
    rows = t2.shape[0]
    m2 = None
    if mask is not None:
        m2 = mask.reshape(-1, length)
        if m2.stride(-1) != 1:
            m2 = m2.contiguous()
        m2 = m2.view(torch.uint8)
    clock_mode, clock_rows, clock_scalar, c_sr = 0, None, 0.0, 0
    if periodic:
        if isinstance(clock, torch.Tensor):
            value = clock_tensor(clock, times, mask=mask, check_values=False)  # [..., 1], float64, on device
            value = value.expand(*times.shape[:-1], 1).reshape(rows)
            clock_mode, clock_rows, c_sr = 1, value, value.stride(0)
        else:
            clock_mode, clock_scalar = 2, clock_number(clock)  # a kernel argument: no tensor made for it
    dim = encoder.dim
    out = torch.empty(*times.shape, dim, dtype=encoder.dtype, device=times.device)
    if times.device.type == "meta":
        return out
    at = {c: encoder.components.index(c) if c in encoder.components else -1 for c in FUSED_COMPONENTS}
    flag = torch.zeros(1, dtype=torch.int32, device=times.device) if check else out
    cycles = getattr(encoder, "cycles", None)
    gap_cycles = getattr(encoder, "gap_cycles", None)
    transitions, offsets = encoder.tz_transitions, encoder.tz_offsets
    weight = encoder.lift.weight if periodic else None
    half = dim // 2
    block_half = 1 << (half - 1).bit_length()
    block_l = max(1, min(64, 4096 // (2 * block_half)))
    l_blocks = -(-length // block_l)
    any_table = encoder.periods
    gap_slots = 1 if "gap" in encoder.components else 0
    slots = gap_slots + (2 * encoder.periods.shape[0] * encoder.harmonics if periodic else 0)
    # per program, its events' log-gaps and periodic features (float64: the float32 features are exact in it)
    scratch = torch.empty(max(1, rows * l_blocks * slots * block_l), dtype=torch.float64, device=times.device)
    _timeline_kernel[(rows * l_blocks,)](
        t2, m2 if m2 is not None else t2, clock_rows if clock_rows is not None else any_table, out, flag,
        cycles if cycles is not None else any_table, gap_cycles if gap_cycles is not None else any_table,
        encoder.periods, encoder.phase_mod, transitions if transitions.numel() else any_table, offsets,
        weight.detach() if weight is not None else any_table, scratch,
        length, l_blocks, t2.stride(0), m2.stride(0) if m2 is not None else 0, c_sr, length * dim,
        weight.stride(0) if weight is not None else 0, weight.stride(1) if weight is not None else 0,
        transitions.numel(), float(encoder.gap_scale), math.log(encoder.gap_scale), clock_scalar,
        DIM=dim, HALF=half, BLOCK_L=block_l, BLOCK_HALF=block_half,
        ABS_AT=at["absolute"], PER_AT=at["periodic"], GAP_AT=at["gap"],
        HAS_PER=periodic, HAS_GAP="gap" in encoder.components,
        P=encoder.periods.shape[0], H=encoder.harmonics, HAS_MASK=m2 is not None, CLOCK_MODE=clock_mode,
        TZ_STEPS=_steps(transitions.numel()) if periodic else 0, CHECK=check,
        CHECK_F16=check and encoder.dtype == torch.float16, LIBDEVICE=not _interpreting(),
        GAP_SLOTS=gap_slots, SLOTS=max(slots, 1),
        enable_fp_fusion=False,
    )
    if check and bool(flag.item()):  # the one host sync of an eager call
        return None
    return out
