"""Functional RoPE: rotate a tensor by given cos/sin (:func:`apply_rotary`), and cos/sin of angles.

The functional forms of :class:`omnipos.core.RotaryEmbedding` for code that builds its own cos/sin (HF's
``apply_rotary_pos_emb``, rotary-embedding-torch's ``apply_rotary_emb``).
"""

from __future__ import annotations

import torch

from .checks import check_choice, to_device
from .phase import cos_sin_of_angles
from .rope_kernels import ROPE_LAYOUTS, channel_pairs, rotate_pairs, work_dtype

__all__ = ["apply_rotary", "rope_cos_sin"]


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
    if x.ndim == 0:
        raise ValueError("x must be [..., D] (a channel axis at least), got a 0-d tensor")
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
    work = work_dtype(x.dtype, cos.dtype, sin.dtype)
    cos, sin = to_device(cos, x.device, "cos").to(work), to_device(sin, x.device, "sin").to(work)
    c1, c2 = channel_pairs(cos, layout, rotary_dim)
    s1, s2 = channel_pairs(sin, layout, rotary_dim)
    return rotate_pairs(x, c1, -s1, c2, s2, layout, rotary_dim)


def rope_cos_sin(angles: torch.Tensor, *, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of float64 ``angles`` (any shape), range-reduced in float64, evaluated in ``dtype``
    (float32, or float64); see :mod:`omnipos.core.phase`."""
    return cos_sin_of_angles(angles, dtype)
