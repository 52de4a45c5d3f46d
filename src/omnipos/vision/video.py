"""Positions ``(t, h, w)`` of a video's patch grid for 3-D axial RoPE (CogVideoX, HunyuanVideo, Wan).

Video diffusion transformers rotate each latent patch by three coordinates, each axis with its own RoPE ladder over
its own channels (``omnipos.core.RotaryEmbedding(..., n_axes=3)``). The coordinates are the grid indices,
optionally stretched:

- HunyuanVideo ``get_nd_rotary_pos_embed(..., interpolation_factor=s)`` multiplies every index by ``s``
  (``get_meshgrid_nd`` positions ``start + i * (stop - start) / num``);
- CogVideoX ``get_3d_rotary_pos_embed`` (``grid_type="linspace"``) spreads the ``H x W`` grid over a crop region
  ``(top, left) -> (bottom, right)`` of the base grid: ``h_i = top + i * (bottom - top) / H`` (``np.linspace`` with
  ``endpoint=False``), ``t = arange(T)``: ``offset=(0, top, left)``,
  ``interpolation=(1, (bottom - top) / H, (right - left) / W)``.

Tokens are row-major with time outermost: token ``(t * H + h) * W + w``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..core import allocation_guard, check_float_dtype, check_positive_int
from .grid import require_values

__all__ = ["video_position_ids"]


def _triple(value: Any, name: str) -> tuple[float, float, float]:
    """A number (all three axes), a pair (temporal, spatial) or a triple (t, h, w) of finite floats."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        values = (value,) * 3
    elif isinstance(value, (tuple, list)) and len(value) in (2, 3):
        values = (value[0], value[1], value[1]) if len(value) == 2 else tuple(value)
    else:
        raise TypeError(f"{name} must be a number, a pair (temporal, spatial) or a triple (t, h, w), got {value!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{name} must hold numbers, got {value!r}")
        if not math.isfinite(v):
            raise ValueError(f"{name} must be finite, got {value!r}")
    return tuple(float(v) for v in values)


def video_position_ids(
    grid_thw: Any,
    *,
    interpolation: Any = 1.0,
    offset: Any = 0.0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Coordinates ``[T * H * W, 3]`` = ``(t, h, w)`` of a video's latent patch grid, time outermost.

    Args:
        grid_thw: ``(T, H, W)`` patches (ints >= 1).
        interpolation: factor(s) each index is multiplied by: a number for all axes, ``(temporal, spatial)`` or
            ``(t, h, w)`` (HunyuanVideo's ``interpolation_factor``; ``< 1`` squeezes a longer / larger video into the
            trained range). Must be > 0.
        offset: added after scaling (same forms; CogVideoX's crop ``(0, top, left)``).
        dtype: a floating dtype (float64 default: exact for any realistic grid), for
            :meth:`omnipos.core.RotaryEmbedding.cos_sin` / ``rotate`` with ``n_axes=3``.
        device: of the result.

    Returns:
        ``Tensor[T * H * W, 3]`` with ``row (t * H + h) * W + w = offset + (t, h, w) * interpolation``.

    Raises:
        ValueError: a grid whose positions do not fit in memory (the allocation guard's message, before anything
            is allocated), a factor <= 0 or not finite.
    """
    if isinstance(grid_thw, torch.Tensor):
        if grid_thw.is_floating_point() or grid_thw.dtype == torch.bool or grid_thw.numel() != 3:
            raise TypeError(f"grid_thw must be three ints (T, H, W), got tensor {grid_thw!r}")
        grid_thw = require_values(grid_thw, "grid_thw", "the number of positions depends on it").tolist()
    if not isinstance(grid_thw, (tuple, list)) or len(grid_thw) != 3:
        raise TypeError(f"grid_thw must be three ints (T, H, W), got {grid_thw!r}")
    sizes = [check_positive_int(n, f"grid_thw[{i}] ({axis})") for i, (n, axis) in enumerate(zip(grid_thw, "THW"))]
    scale = _triple(interpolation, "interpolation")
    if min(scale) <= 0:
        raise ValueError(f"interpolation must be > 0 on every axis, got {interpolation!r}")
    shift = _triple(offset, "offset")
    check_float_dtype(dtype)
    count = sizes[0] * sizes[1] * sizes[2]
    with allocation_guard(f"grid_thw={tuple(sizes)} ({count} positions x 3 of {dtype})"):
        out = torch.empty(sizes[0], sizes[1], sizes[2], 3, dtype=dtype, device=device)  # the result first
        for axis, (n, s, o) in enumerate(zip(sizes, scale, shift)):  # float64 coordinates, cast as written
            shape = [1, 1, 1]
            shape[axis] = n
            out[..., axis] = (torch.arange(n, dtype=torch.float64, device=device) * s + o).view(shape)
        return out.view(count, 3)
