"""The RoPE rotation kernels on CPU and in eager mode: how a tensor is turned, whatever produced the angles.

Each frequency slot ``i`` rotates one pair of channels ``(x1, x2)``; :func:`channel_pairs` names the pair for a layout
(``"half"``: ``(i, i + R/2)``; ``"interleaved"``: ``(2i, 2i + 1)``). :func:`rotate_pairs` applies
``o1 = x1 a1 + x2 b1``, ``o2 = x2 a2 + x1 b2`` with the fewest passes over memory (eager), out of plain ops (what a
compiler fuses, differentiable in everything), or with its exact backward (autograd on x only).
The CUDA kernel is :mod:`omnipos.core.rope_triton`.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

__all__ = ["KERNEL_DEVICE_TYPES", "ROPE_LAYOUTS", "channel_pairs", "rotate_pairs", "rotate_swapped", "small_rotation_applies", "work_dtype"]

ROPE_LAYOUTS = ("half", "interleaved")

#: Device types whose tensors :class:`~omnipos.core.RotaryEmbedding` sends to the fused kernel
#: (:mod:`~omnipos.core.rope_triton`). An internal switch for tests and the host-time benchmark: with ``"meta"``
#: added, the CUDA path's Python runs on meta tensors (outputs allocated, no launch: meta tensors hold no data).
KERNEL_DEVICE_TYPES: tuple[str, ...] = ("cuda",)


def work_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """float32, or float64 when any input is float64: rotations never run below float32."""
    return torch.float64 if torch.float64 in dtypes else torch.float32


# ----------------------------------------------------------------------------------------------------------------
# The rotation itself: o1 = x1 a1 + x2 b1, o2 = x2 a2 + x1 b2 over the channel pairs (x1, x2) of the layout
# ----------------------------------------------------------------------------------------------------------------


def channel_pairs(t: torch.Tensor, layout: str, rotary_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    if layout == "half":
        half = rotary_dim // 2
        return t[..., :half], t[..., half:rotary_dim]
    return t[..., 0:rotary_dim:2], t[..., 1:rotary_dim:2]


def _complex_viewable(x: torch.Tensor) -> bool:
    return x.stride(-1) == 1 and x.storage_offset() % 2 == 0 and all(st % 2 == 0 for st in x.stride()[:-1])


# Slabs of 2 MiB of float32 (x and out fit in L3): the four passes of the general rotation hit cache, not memory.
# Only single-threaded: with intra-op threads every op ends in a barrier, and on a busy machine (a descheduled
# worker) hundreds of small ops cost more than the memory passes they save (measured: bench_rope.py).
_SLAB = 1 << 19
_WIDENED = (torch.bfloat16, torch.float16)  # rotated in float32: slab by slab from a quarter of the size


def _slabs(x: torch.Tensor) -> list[tuple[slice, ...]]:
    """Index tuples (slices only, so no axis is dropped) cutting x into slabs of at most ``_SLAB`` elements."""
    if x.device.type != "cpu" or x.numel() < (_SLAB if x.dtype in _WIDENED else 4 * _SLAB) or \
            torch.get_num_threads() > 1:
        return [(slice(None),) * x.ndim]
    inner, axis = x.shape[-1], x.ndim - 2  # the channel axis always stays whole
    while axis > 0 and inner * x.shape[axis] <= _SLAB:
        inner *= x.shape[axis]
        axis -= 1
    step = max(1, _SLAB // inner)
    chunks = [slice(i, i + step) for i in range(0, x.shape[axis], step)]
    return [(*(slice(i, i + 1) for i in lead), chunk, *([slice(None)] * (x.ndim - axis - 1)))
            for lead in itertools.product(*(range(n) for n in x.shape[:axis])) for chunk in chunks]


def _cut(t: torch.Tensor, index: tuple[slice, ...]) -> torch.Tensor:
    """``t[index]`` for a tensor broadcastable to the sliced one (aligned right; size-1 axes kept whole)."""
    skip = len(index) - t.ndim
    return t[tuple(slice(None) if n == 1 else sl for sl, n in zip(index[skip:], t.shape))]


def _rotate_block(x: torch.Tensor, out: torch.Tensor, a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor,
                  b2: torch.Tensor, layout: str, rotary_dim: int) -> None:
    work = a1.dtype
    source = x
    if x.dtype == work:
        target = out
    else:  # bf16 / fp16: rotate in float32, round once
        # widened once, in one vectorised pass (exact): products of a bf16 slice with float32 coefficients would
        # each widen their strided operand again, element by element (3x the whole call at 1x32x256x128)
        x = x[..., :rotary_dim].to(work)
        target = torch.empty((*x.shape[:-1], rotary_dim), dtype=work, device=x.device)
    x1, x2 = channel_pairs(x, layout, rotary_dim)
    o1, o2 = channel_pairs(target, layout, rotary_dim)
    if a1 is a2 and layout == "half":  # a pure rotation: one full-width product, then the two cross terms
        torch.mul(x[..., :rotary_dim], torch.cat((a1, a1), -1), out=target[..., :rotary_dim])
    else:
        torch.mul(x1, a1, out=o1)
        torch.mul(x2, a2, out=o2)
    o1.addcmul_(x2, b1)
    o2.addcmul_(x1, b2)
    if target is not out:
        out[..., :rotary_dim].copy_(target)
    if rotary_dim < source.shape[-1]:
        out[..., rotary_dim:].copy_(source[..., rotary_dim:])


def _rotate_eager(x: torch.Tensor, a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor,
                  layout: str, rotary_dim: int) -> torch.Tensor:
    """Write ``x`` rotated into one fresh tensor, with no temporaries of x's size.

    Each fresh buffer the size of q costs a round of page faults plus a pass over memory, which is most of HF's
    eager cost (``rotate_half`` + ``cat`` + three products). A pure rotation of adjacent pairs is one complex
    product (one read of x, one write). Otherwise every product is written straight into its slice of the output
    (``mul(out=)`` then ``addcmul_``), slab by cache-sized slab so the four passes read cache, not memory.
    """
    work = a1.dtype
    out = torch.empty_like(x)
    if a1 is a2 and layout == "interleaved" and x.dtype == work and _complex_viewable(x):
        # internal callers of a pure rotation pass a2 = a1 and b2 = -b1
        half = rotary_dim // 2
        torch.mul(torch.view_as_complex(x[..., :rotary_dim].unflatten(-1, (half, 2))), torch.complex(a1, b2),
                  out=torch.view_as_complex(out[..., :rotary_dim].unflatten(-1, (half, 2))))
        if rotary_dim < x.shape[-1]:
            out[..., rotary_dim:].copy_(x[..., rotary_dim:])
        return out
    slabs = _slabs(x)
    if len(slabs) == 1:  # one slab (small inputs, threads): no slicing (~15 us a call of Python, a decode step's)
        _rotate_block(x, out, a1, b1, a2, b2, layout, rotary_dim)
        return out
    for index in slabs:
        _rotate_block(x[index], out[index], _cut(a1, index), _cut(b1, index), _cut(a2, index), _cut(b2, index),
                      layout, rotary_dim)
    return out


def _rotate_functional(x: torch.Tensor, a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor,
                       layout: str, rotary_dim: int) -> torch.Tensor:
    """The same rotation out of plain ops: differentiable in every input and what a compiler fuses best."""
    x1, x2 = channel_pairs(x, layout, rotary_dim)
    y1 = x1 * a1 + x2 * b1
    y2 = x2 * a2 + x1 * b2
    rotated = torch.cat((y1, y2), -1) if layout == "half" else torch.stack((y1, y2), -1).flatten(-2)
    if rotary_dim < x.shape[-1]:
        rotated = torch.cat((rotated.to(x.dtype), x[..., rotary_dim:]), -1)
    return rotated.to(x.dtype)


class _Rotate(torch.autograd.Function):
    """The eager rotation with its exact backward: the transpose, i.e. (a1, b2, a2, b1) -> (a1, b2 <-> b1)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor,
                layout: str, rotary_dim: int) -> torch.Tensor:
        ctx.save_for_backward(a1, b1, a2, b2)
        ctx.layout, ctx.rotary_dim = layout, rotary_dim
        return _rotate_eager(x, a1, b1, a2, b2, layout, rotary_dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        a1, b1, a2, b2 = ctx.saved_tensors
        # y1 = x1 a1 + x2 b1, y2 = x2 a2 + x1 b2  =>  dx1 = g1 a1 + g2 b2, dx2 = g2 a2 + g1 b1: the same rotation
        # with b1 and b2 swapped. Through rotate_pairs, so under create_graph=True the backward is itself a
        # _Rotate node (twice differentiable), and otherwise the eager kernel.
        grad_x = rotate_pairs(grad.contiguous(), a1, b2, a2, b1, ctx.layout, ctx.rotary_dim)
        return grad_x, None, None, None, None, None, None


def small_rotation_applies(x: torch.Tensor, layout: str, rotary_dim: int) -> bool:
    """Whether :func:`rotate_swapped` serves x (a decode step's q and k): a small tensor of the half layout with
    every channel rotated, no autograd on it, not compiling. Half-widths that are a multiple of 32 keep every
    product in the vectorised loops of the general kernel, so both give the same bits."""
    return (layout == "half" and rotary_dim == x.shape[-1] and rotary_dim % 64 == 0 and x.numel() <= 1 << 16
            and not (x.requires_grad and torch.is_grad_enabled()) and not torch.compiler.is_compiling())


def rotate_swapped(x: torch.Tensor, cos2: torch.Tensor, sin2: torch.Tensor) -> torch.Tensor:
    """A pure rotation of the half layout as three ops (a decode step is per-op overhead, not memory):
    ``x * cat(cos, cos) + swap_halves(x) * cat(-sin, sin)``, in the work dtype of ``cos2`` / ``sin2`` (float32 for
    bf16 / fp16 inputs, rounded once), the same products and sums as :func:`rotate_pairs`."""
    half, dtype = x.shape[-1] // 2, x.dtype
    x = x.to(cos2.dtype)  # widened once (exact)
    out = torch.mul(x, cos2)
    out.addcmul_(x.unflatten(-1, (2, half)).flip(-2).flatten(-2), sin2)
    return out if out.dtype == dtype else out.to(dtype)


def rotate_pairs(x: torch.Tensor, a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor,
                 layout: str, rotary_dim: int) -> torch.Tensor:
    """``o1 = x1 a1 + x2 b1``, ``o2 = x2 a2 + x1 b2`` over the channel pairs ``(x1, x2)`` of ``layout``.

    A rotation by ``theta`` is ``a1 = a2 = cos``, ``b1 = -sin``, ``b2 = sin`` (pass the same tensor as a1 and a2:
    the kernels recognise a pure rotation by identity). ``a*``/``b*`` are ``[..., rotary_dim // 2]``, broadcastable
    against x's pairs, in the work dtype (float32, or float64). Picks the eager kernel (no temporaries of x's
    size, exact backward) or, under ``torch.compile`` or when the coefficients need gradients, plain ops.
    """
    if torch.compiler.is_compiling() or any(t.requires_grad for t in (a1, b1, a2, b2)):
        return _rotate_functional(x, a1, b1, a2, b2, layout, rotary_dim)
    if torch.is_grad_enabled() and x.requires_grad:
        return _Rotate.apply(x, a1, b1, a2, b2, layout, rotary_dim)
    return _rotate_eager(x, a1, b1, a2, b2, layout, rotary_dim)
