"""Rotary position embeddings (RoPE, Su et al. 2021) in both layouts in use, every HF scaling, xPos and N-D axial.

Each frequency slot ``i`` (``rotary_dim // 2`` of them) rotates one pair of channels by the angle
``theta_i = p * inv_freq_i``; the layout names which two channels form the pair:

- ``"half"`` (GPT-NeoX, HF transformers, flash-attn ``interleaved=False``): channels ``(i, i + rotary_dim/2)``;
  ``cos = cat(cos(theta), cos(theta))``; ``y[:h] = x[:h] cos - x[h:] sin``, ``y[h:] = x[h:] cos + x[:h] sin``.
- ``"interleaved"`` (GPT-J, Meta LLaMA, torchtune, rotary-embedding-torch, timm): channels ``(2i, 2i + 1)``,
  rotated as the complex number ``x[2i] + j x[2i+1]``; ``cos = repeat_interleave(cos(theta), 2)``.

Channels past ``rotary_dim`` pass through unchanged (partial rotary, GPT-NeoX / Phi).

Precision: the phase ``p * inv_freq / 2 pi`` is formed in float64 and reduced to under one turn before ``sin`` and
``cos``, which run in float32 (float64 for float64 inputs), whatever the dtype of the rotated tensors or positions;
low-precision inputs are rotated in float32 and rounded once at the end. No cos/sin cache is kept, so nothing can go
stale (offsets, lengths, devices, dtypes): cos/sin are ``[positions, rotary_dim / 2]``, small next to q and k.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .checks import as_position_tensor, check_choice, check_even_dim, check_finite, check_positive_int
from .frequencies import RopeScaling, as_rope_scaling, rope_frequencies

__all__ = ["ROPE_LAYOUTS", "RotaryEmbedding", "apply_rotary", "convert_rope_layout", "rope_cos_sin"]

ROPE_LAYOUTS = ("half", "interleaved")
_TWO_PI = 2.0 * math.pi
# rope types whose frequencies depend on the length being encoded (max(position) + 1)
_LENGTH_DEPENDENT = ("dynamic", "longrope")


def _is_compiling() -> bool:
    return torch.compiler.is_compiling()


def _work_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """float32, or float64 when any input is float64: rotations never run below float32."""
    return torch.float64 if torch.float64 in dtypes else torch.float32


# ----------------------------------------------------------------------------------------------------------------
# The rotation itself: o1 = x1 a1 + x2 b1, o2 = x2 a2 + x1 b2 over the channel pairs (x1, x2) of the layout
# ----------------------------------------------------------------------------------------------------------------


def _pairs(t: torch.Tensor, layout: str, rotary_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
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


def _slabs(x: torch.Tensor) -> list[tuple[slice, ...]]:
    """Index tuples (slices only, so no axis is dropped) cutting x into slabs of at most ``_SLAB`` elements."""
    if x.device.type != "cpu" or x.numel() < 4 * _SLAB or torch.get_num_threads() > 1:
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
    if x.dtype == work:
        target = out
    else:  # bf16 / fp16: rotate in float32, round once
        target = torch.empty((*x.shape[:-1], rotary_dim), dtype=work, device=x.device)
    x1, x2 = _pairs(x, layout, rotary_dim)
    o1, o2 = _pairs(target, layout, rotary_dim)
    if a1 is a2 and layout == "half":  # a pure rotation: one full-width product, then the two cross terms
        torch.mul(x[..., :rotary_dim], torch.cat((a1, a1), -1), out=target[..., :rotary_dim])
    else:
        torch.mul(x1, a1, out=o1)
        torch.mul(x2, a2, out=o2)
    o1.addcmul_(x2, b1)
    o2.addcmul_(x1, b2)
    if target is not out:
        out[..., :rotary_dim].copy_(target)
    if rotary_dim < x.shape[-1]:
        out[..., rotary_dim:].copy_(x[..., rotary_dim:])


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
    for index in _slabs(x):
        _rotate_block(x[index], out[index], _cut(a1, index), _cut(b1, index), _cut(a2, index), _cut(b2, index),
                      layout, rotary_dim)
    return out


def _rotate_functional(x: torch.Tensor, a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor,
                       layout: str, rotary_dim: int) -> torch.Tensor:
    """The same rotation out of plain ops: differentiable in every input and what a compiler fuses best."""
    x1, x2 = _pairs(x, layout, rotary_dim)
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
        # y1 = x1 a1 + x2 b1, y2 = x2 a2 + x1 b2  =>  dx1 = g1 a1 + g2 b2, dx2 = g2 a2 + g1 b1
        grad_x = _rotate_eager(grad.contiguous(), a1, b2, a2, b1, ctx.layout, ctx.rotary_dim)
        return grad_x, None, None, None, None, None, None


def _rotate(x: torch.Tensor, a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor,
            layout: str, rotary_dim: int) -> torch.Tensor:
    if _is_compiling() or any(t.requires_grad for t in (a1, b1, a2, b2)):
        return _rotate_functional(x, a1, b1, a2, b2, layout, rotary_dim)
    if torch.is_grad_enabled() and x.requires_grad:
        return _Rotate.apply(x, a1, b1, a2, b2, layout, rotary_dim)
    return _rotate_eager(x, a1, b1, a2, b2, layout, rotary_dim)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, layout: str = "half") -> torch.Tensor:
    """Rotate ``x`` by full-width ``cos``/``sin`` (the functional form of :class:`RotaryEmbedding`).

    ``y = x * cos + rotate(x) * sin`` on the first ``R = cos.shape[-1]`` channels, where ``rotate`` is
    ``cat(-x[h:], x[:h])`` for ``layout="half"`` (HF's ``apply_rotary_pos_emb`` per tensor) and
    ``(-x[2i+1], x[2i])`` pairs for ``"interleaved"`` (rotary-embedding-torch's ``apply_rotary_emb``).
    Channels past ``R`` pass through.

    Args:
        x: ``[..., D]``, any floating dtype.
        cos, sin: ``[..., R]`` with ``R <= D`` even, broadcastable to ``x[..., :R]`` (e.g. ``[seq, R]`` for x
            ``[batch, heads, seq, D]``; unsqueeze the heads axis of ``[batch, seq, R]`` yourself, as HF does).
        layout: ``"half"`` or ``"interleaved"``, as in the module docstring.

    Returns:
        ``Tensor`` like ``x`` (same shape and dtype), computed in float32 or better.
    """
    check_choice(layout, "layout", ROPE_LAYOUTS)
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got {getattr(t, 'dtype', type(t).__name__)}")
    if cos.shape != sin.shape:
        raise ValueError(f"cos {tuple(cos.shape)} and sin {tuple(sin.shape)} must have one shape")
    rotary_dim = cos.shape[-1] if cos.ndim else 0
    if rotary_dim == 0 or rotary_dim % 2 or rotary_dim > x.shape[-1]:
        raise ValueError(
            f"cos/sin last axis (the rotary dim) must be even, > 0 and <= x's last axis {x.shape[-1]}, got {rotary_dim}"
        )
    try:
        ok = torch.broadcast_shapes(cos.shape, (*x.shape[:-1], rotary_dim)) == (*x.shape[:-1], rotary_dim)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"cos/sin {tuple(cos.shape)} do not broadcast to x[..., :{rotary_dim}] of x {tuple(x.shape)}")
    work = _work_dtype(x.dtype, cos.dtype, sin.dtype)
    cos, sin = cos.to(device=x.device, dtype=work), sin.to(device=x.device, dtype=work)
    c1, c2 = _pairs(cos, layout, rotary_dim)
    s1, s2 = _pairs(sin, layout, rotary_dim)
    return _rotate(x, c1, -s1, c2, s2, layout, rotary_dim)


def rope_cos_sin(angles: torch.Tensor, *, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of float64 ``angles`` (any shape), range-reduced in float64, evaluated in ``dtype``."""
    if dtype == torch.float64:
        phase = angles.to(torch.float64)
    else:  # whole turns removed in float64, so float32 sin/cos see |phase| < 2 pi whatever the position
        phase = (torch.frac(angles.to(torch.float64) * (1.0 / _TWO_PI)) * _TWO_PI).to(dtype)
    return torch.cos(phase), torch.sin(phase)


# ----------------------------------------------------------------------------------------------------------------
# Layout conversion of checkpoints
# ----------------------------------------------------------------------------------------------------------------


def convert_rope_layout(weight: torch.Tensor, n_heads: int, *, to: str, rotary_dim: int | None = None) -> torch.Tensor:
    """Permute the rows of a q or k projection so a checkpoint trained with one RoPE layout runs with the other.

    ``to="half"`` takes interleaved rows (Meta LLaMA, GPT-J) to half-split order (HF), the permutation HF's
    ``convert_llama_weights_to_hf.py`` applies: ``w.view(n_heads, hd // 2, 2, in).transpose(1, 2)``;
    ``to="interleaved"`` is its inverse. Attention scores of the converted model are identical.

    Args:
        weight: ``[n_heads * head_dim, in_features]`` (``nn.Linear.weight``) or a bias ``[n_heads * head_dim]``.
        n_heads: number of heads in this projection (KV heads for k).
        to: the layout the result is for: ``"half"`` or ``"interleaved"``.
        rotary_dim: rotated channels per head (default: all); the rest of each head keeps its order.

    Returns:
        A new tensor of ``weight``'s shape and dtype.
    """
    check_choice(to, "to", ROPE_LAYOUTS)
    n_heads = check_positive_int(n_heads, "n_heads")
    if not isinstance(weight, torch.Tensor) or weight.ndim not in (1, 2):
        raise ValueError(f"weight must be a [n_heads * head_dim, in] or [n_heads * head_dim] tensor, got "
                         f"{getattr(weight, 'shape', type(weight).__name__)}")
    if weight.shape[0] % n_heads:
        raise ValueError(f"weight has {weight.shape[0]} rows, not a multiple of n_heads={n_heads}")
    head_dim = weight.shape[0] // n_heads
    if rotary_dim is None:
        rotary_dim = check_even_dim(head_dim, "head_dim (weight rows / n_heads)")
    rotary_dim = check_even_dim(rotary_dim, "rotary_dim")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim={rotary_dim} is larger than head_dim={head_dim}")
    w = weight.reshape(n_heads, head_dim, -1)
    rot = w[:, :rotary_dim]
    if to == "half":
        rot = rot.reshape(n_heads, rotary_dim // 2, 2, -1).transpose(1, 2)
    else:
        rot = rot.reshape(n_heads, 2, rotary_dim // 2, -1).transpose(1, 2)
    out = torch.cat((rot.reshape(n_heads, rotary_dim, -1), w[:, rotary_dim:]), 1)
    return out.reshape(weight.shape).clone()


# ----------------------------------------------------------------------------------------------------------------
# The module
# ----------------------------------------------------------------------------------------------------------------


class RotaryEmbedding(nn.Module):
    """Rotary position embedding for q and k, any layout, HF scaling, partial rotary, xPos and N-D axial.

    Args:
        dim: head dimension of the tensors to rotate (even).
        base: ``rope_theta``; frequencies ``base ** (-2i / rotary_dim)`` before scaling.
        layout: ``"half"`` (HF, GPT-NeoX) or ``"interleaved"`` (GPT-J, Meta, rotary-embedding-torch, timm).
        rotary_dim: rotated channels (default ``dim``; ``dim * partial_rotary_factor`` in HF terms); even.
        scaling: ``None``, an HF ``rope_scaling`` dict or :class:`~omnipos.core.RopeScaling` (see
            :func:`~omnipos.core.rope_frequencies`). ``"dynamic"`` and ``"longrope"`` read the length
            ``max(positions) + 1`` of each call and keep nothing between calls. yarn / longrope multiply cos and
            sin by their attention factor, as HF does.
        xpos: xPos (Sun et al. 2022): slot ``i`` of q is multiplied and of k divided by
            ``zeta_i ** ((n - N // 2) / xpos_scale_base)``, ``zeta_i = (2i + 0.4 R) / (1.4 R)``, N the sequence
            length (rotary-embedding-torch's convention; the centre cancels in q.k). Needs :meth:`forward` with q and
            k together.
        xpos_scale_base: 512 as in the paper.
        n_axes: ``None`` for 1-D positions ``[..., seq]``. An int for N-D axial RoPE with positions
            ``[..., seq, n_axes]``: the frequency slots are split into ``n_axes`` equal groups, group ``a`` a full
            RoPE ladder of its own (``base ** (-2i / (rotary_dim / n_axes))``) turned by coordinate ``a``; with
            ``layout="interleaved"`` the channels are ``[axis 0 block | axis 1 block | ...]`` of ``rotary_dim /
            n_axes`` channels each. That is rotary-embedding-torch's ``get_axial_freqs(H, W)`` (with
            ``RotaryEmbedding(dim=rotary_dim / n_axes, freqs_for='lang')``) and timm's ``RotaryEmbeddingCat(
            in_pixels=False, grid_indexing='ij')`` for 2-D positions ``(row, col)`` of a row-major patch grid
            (``grid_indexing='xy'`` is ``(col, row)``); timm's ``temperature`` is ``base``, EVA02's real-valued
            ``t = arange(n) / n * 16`` are just positions. With ``"half"`` slot ``j`` pairs channels ``(j, j + R/2)``
            as always, which is the same model after :func:`convert_rope_layout`. ``rotary_dim`` must be a
            multiple of ``2 * n_axes``; scaling ``"dynamic"``/``"longrope"`` and xPos are 1-D only.

    Positions: integer or real-valued, any batch shape: ``[seq]``, ``[batch, seq]`` (left-aligned with x's leading
    axes, e.g. HF ``position_ids`` for x ``[batch, heads, seq, dim]``), per-document positions of a packed batch
    (:func:`~omnipos.core.packed_positions` with x ``[total, heads, dim]`` and ``seq_dim=0``), offsets for a KV cache
    (``arange(past, past + seq)``). Finite, any device (moved to x's).

    Shape:
        - ``cos_sin(positions)`` -> (cos, sin), each ``[*positions.shape, rotary_dim]`` (axial:
          ``[*positions.shape[:-1], rotary_dim]``), float32 by default.
        - ``rotate(x, positions, *, seq_dim=-2)``: x ``[..., seq, ..., dim]`` -> same shape and dtype.
        - ``forward(q, k, positions, *, seq_dim=-2)`` -> (q, k) rotated; q and k may differ in the head axis (GQA).
    """

    inv_freq: torch.Tensor

    def __init__(
        self,
        dim: int,
        *,
        base: float = 10000.0,
        layout: str = "half",
        rotary_dim: int | None = None,
        scaling: RopeScaling | Mapping[str, Any] | None = None,
        xpos: bool = False,
        xpos_scale_base: float = 512.0,
        n_axes: int | None = None,
    ) -> None:
        super().__init__()
        self.dim = check_even_dim(dim, "dim")
        self.layout = check_choice(layout, "layout", ROPE_LAYOUTS)
        self.rotary_dim = self.dim if rotary_dim is None else check_even_dim(rotary_dim, "rotary_dim")
        if self.rotary_dim > self.dim:
            raise ValueError(f"rotary_dim={self.rotary_dim} is larger than the head dim dim={self.dim}")
        self.n_axes = None if n_axes is None else check_positive_int(n_axes, "n_axes")
        axes = self.n_axes or 1
        if self.rotary_dim % (2 * axes):
            raise ValueError(f"rotary_dim={self.rotary_dim} must be a multiple of 2 * n_axes = {2 * axes}")
        if isinstance(base, bool) or not isinstance(base, (int, float)):
            raise TypeError(f"base must be a number, got {type(base).__name__} ({base!r})")
        self.base = float(base)
        self.scaling = as_rope_scaling(scaling, base=self.base)
        self.xpos = bool(xpos)
        self.xpos_scale_base = float(xpos_scale_base)
        if not self.xpos_scale_base > 0:
            raise ValueError(f"xpos_scale_base must be > 0, got {xpos_scale_base}")
        if self.n_axes is not None and (self.xpos or self.scaling.rope_type in _LENGTH_DEPENDENT):
            raise ValueError(
                "n_axes (axial RoPE) does not combine with xpos or with length-dependent scaling "
                f"({self.scaling.rope_type!r}): whose length would it be?"
            )
        self.axis_dim = self.rotary_dim // axes
        inv_freq, attention_factor = rope_frequencies(self.axis_dim, base=self.base, scaling=self.scaling)
        self.attention_factor = float(attention_factor)
        # float64, and kept float64 by _apply: module.half() must not round the frequencies
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def _apply(self, fn: Any, recurse: bool = True) -> RotaryEmbedding:
        exact = self.inv_freq
        super()._apply(fn, recurse)
        self.inv_freq = exact.to(self.inv_freq.device)
        return self

    def extra_repr(self) -> str:
        parts = [f"dim={self.dim}", f"base={self.base:g}", f"layout={self.layout!r}"]
        if self.rotary_dim != self.dim:
            parts.append(f"rotary_dim={self.rotary_dim}")
        if self.scaling.rope_type != "default":
            parts.append(f"scaling={self.scaling.rope_type!r}")
        if self.xpos:
            parts.append(f"xpos=True, xpos_scale_base={self.xpos_scale_base:g}")
        if self.n_axes is not None:
            parts.append(f"n_axes={self.n_axes}")
        return ", ".join(parts)

    # -- positions -> angles ------------------------------------------------------------------------------------

    def _positions(self, positions: Any, device: torch.device) -> torch.Tensor:
        positions = as_position_tensor(positions, device=device)
        if positions.dtype in (torch.float16, torch.bfloat16):
            raise TypeError(
                f"positions must be integers or float32/float64, got {positions.dtype}: it cannot hold positions "
                "exactly (bfloat16 has 8 bits of mantissa: 1030 positions collapse to 514 values)"
            )
        if positions.device != device:
            positions = positions.to(device)
        if not _is_compiling():
            check_finite(positions, "positions")
        if self.n_axes is not None and (positions.ndim < 1 or positions.shape[-1] != self.n_axes):
            raise ValueError(
                f"positions must be [..., seq, n_axes={self.n_axes}] for axial RoPE, got {tuple(positions.shape)}"
            )
        return positions

    def _frequencies(self, positions: torch.Tensor) -> torch.Tensor:
        if self.scaling.rope_type not in _LENGTH_DEPENDENT:
            return self.inv_freq
        seq_len = positions.max().to(torch.float64) + 1 if positions.numel() else None
        return rope_frequencies(self.axis_dim, base=self.base, scaling=self.scaling, seq_len=seq_len,
                                device=self.inv_freq.device)[0]

    def angles(self, positions: Any) -> torch.Tensor:
        """float64 angles ``[*batch, rotary_dim // 2]`` of validated positions (axial: coordinate a turns group a)."""
        positions = self._positions(positions, self.inv_freq.device)
        inv_freq = self._frequencies(positions).to(positions.device)
        if self.n_axes is None:
            return positions.to(torch.float64).unsqueeze(-1) * inv_freq
        return (positions.to(torch.float64).unsqueeze(-1) * inv_freq).flatten(-2)

    def _half_cos_sin(self, positions: torch.Tensor, work: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = rope_cos_sin(self.angles(positions), dtype=work)
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        return cos, sin

    def cos_sin(self, positions: Any, *, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """Full-width ``(cos, sin)`` ``[*batch, rotary_dim]`` of ``dtype`` (float32 or float64), for
        :func:`apply_rotary`; for ``layout="half"`` equal to HF's ``LlamaRotaryEmbedding`` output (attention
        factor included), computed more precisely."""
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(
                f"dtype must be torch.float32 or torch.float64 (cos/sin are never built lower), got {dtype}"
            )
        cos, sin = self._half_cos_sin(positions, dtype)
        if self.layout == "half":
            return torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        return cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)

    # -- rotation ----------------------------------------------------------------------------------------------

    def _check_x(self, x: Any, name: str, seq_dim: int) -> int:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got {getattr(x, 'dtype', type(x).__name__)}")
        if x.ndim < 2:
            raise ValueError(f"{name} must be [..., seq, ..., dim], got shape {tuple(x.shape)}")
        if x.shape[-1] != self.dim:
            raise ValueError(f"{name} has head dim {x.shape[-1]} (last axis), this RotaryEmbedding has dim={self.dim}")
        if isinstance(seq_dim, bool) or not isinstance(seq_dim, int) or not -x.ndim <= seq_dim < x.ndim \
                or seq_dim % x.ndim == x.ndim - 1:
            raise ValueError(f"seq_dim must index an axis of {name} other than the last (channel) axis, got "
                             f"{seq_dim!r} for shape {tuple(x.shape)}")
        return seq_dim % x.ndim

    def _broadcast_shape(self, positions: torch.Tensor, x: torch.Tensor, seq_axis: int) -> tuple[int, ...]:
        """Shape that puts cos/sin ``[*P, seq, h]`` against x: P left-aligned with x's leading axes."""
        pos_shape = positions.shape if self.n_axes is None else positions.shape[:-1]
        seq = x.shape[seq_axis]
        if len(pos_shape) == 0 or pos_shape[-1] != seq or len(pos_shape) - 1 > seq_axis:
            want = "[..., seq, n_axes]" if self.n_axes is not None else "[seq] or [batch..., seq]"
            if self.n_axes is None and positions.ndim >= 2 and positions.shape[-2] == seq:
                want += f" (axial positions [..., seq, {positions.shape[-1]}] need RotaryEmbedding(..., n_axes=...))"
            raise ValueError(
                f"positions {tuple(positions.shape)} do not fit x {tuple(x.shape)} with seq_dim -> axis {seq_axis} "
                f"(seq = {seq}); expected {want} with leading axes matching x's first axes"
            )
        lead = pos_shape[:-1]
        for i, n in enumerate(lead):
            if n not in (1, x.shape[i]):
                raise ValueError(f"positions {tuple(positions.shape)}: axis {i} has {n}, x has {x.shape[i]} there")
        return (*lead, *([1] * (seq_axis - len(lead))), seq, *([1] * (x.ndim - 2 - seq_axis)), self.rotary_dim // 2)

    def _default_positions(self, x: torch.Tensor, seq_axis: int) -> torch.Tensor:
        if self.n_axes is not None:
            raise ValueError("positions are required for axial RoPE ([..., seq, n_axes])")
        return torch.arange(x.shape[seq_axis], device=x.device)

    def _xpos_scale(self, positions: torch.Tensor, seq: int) -> torch.Tensor:
        r = self.rotary_dim
        zeta = (torch.arange(0, r, 2, dtype=torch.float64, device=positions.device) + 0.4 * r) / (1.4 * r)
        power = (positions.to(torch.float64) - seq // 2).unsqueeze(-1) / self.xpos_scale_base
        return zeta**power

    def rotate(self, x: torch.Tensor, positions: Any = None, *, seq_dim: int = -2) -> torch.Tensor:
        """Rotate ``x [..., seq, ..., dim]`` (axis ``seq_dim`` is the sequence) at ``positions`` (default
        ``arange(seq)``); see the class docstring for the shapes of positions. Same shape and dtype as x."""
        if self.xpos:
            raise ValueError("xpos scales q up and k down: rotate them together with forward(q, k, positions)")
        seq_axis = self._check_x(x, "x", seq_dim)
        positions = self._default_positions(x, seq_axis) if positions is None else positions
        positions = self._positions(positions, x.device)
        shape = self._broadcast_shape(positions, x, seq_axis)
        triton = _triton_rotate(self, x, None, positions, seq_axis)
        if triton is not None:
            return triton[0]
        cos, sin = self._half_cos_sin(positions, _work_dtype(x.dtype))
        cos, sin = cos.reshape(shape), sin.reshape(shape)
        return _rotate(x, cos, -sin, cos, sin, self.layout, self.rotary_dim)

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: Any = None, *,
                seq_dim: int = -2) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q and k at the same positions (and apply xPos when enabled). q and k must agree in ndim, head
        dim and sequence length; other axes (heads: GQA/MQA) may differ. Returns ``(q_rotated, k_rotated)``."""
        seq_axis = self._check_x(q, "q", seq_dim)
        self._check_x(k, "k", seq_dim)
        if q.ndim != k.ndim or q.shape[seq_axis] != k.shape[seq_axis]:
            raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must have the same number of axes and "
                             f"sequence length (axis {seq_axis}); only the heads may differ")
        positions = self._default_positions(q, seq_axis) if positions is None else positions
        positions = self._positions(positions, q.device)
        shape = self._broadcast_shape(positions, q, seq_axis)
        self._broadcast_shape(positions, k, seq_axis)
        if not self.xpos:
            triton = _triton_rotate(self, q, k, positions, seq_axis)
            if triton is not None:
                return triton
        cos, sin = self._half_cos_sin(positions, _work_dtype(q.dtype, k.dtype))
        cos, sin = cos.reshape(shape), sin.reshape(shape)
        if not self.xpos:
            return (_rotate(q, cos, -sin, cos, sin, self.layout, self.rotary_dim),
                    _rotate(k, cos, -sin, cos, sin, self.layout, self.rotary_dim))
        scale = self._xpos_scale(positions, q.shape[seq_axis]).to(cos.dtype).reshape(shape)
        qc, qs, kc, ks = cos * scale, sin * scale, cos / scale, sin / scale
        return (_rotate(q, qc, -qs, qc, qs, self.layout, self.rotary_dim),
                _rotate(k, kc, -ks, kc, ks, self.layout, self.rotary_dim))


def _triton_rotate(rope: RotaryEmbedding, q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor,
                   seq_axis: int) -> tuple[torch.Tensor, ...] | None:
    """The fused CUDA kernel when it applies (CUDA tensors, Triton importable, no autograd, not compiling)."""
    if not q.is_cuda or _is_compiling():
        return None
    from . import _rope_triton

    return _rope_triton.maybe_rotate(rope, q, k, positions, seq_axis)
