"""Fixed 2-D sine-cosine patch encodings (MAE, timm), on any grid and at real-valued positions.

For ``D`` channels each axis gets ``D / 4`` frequencies ``w_i = base ** (-i / (D / 4))``; a position
``(y, x)`` = (row, column) of the patch. Two channel orders are in use (``convention=``):

- ``"mae"``: ``[sin x | cos x | sin y | cos y]``, MAE ``util/pos_embed.py`` ``get_2d_sincos_pos_embed``
  (its ``meshgrid(grid_w, grid_h)`` puts the column first), prefix rows = zeros.
- ``"timm"``: ``[sin y | sin x | cos y | cos x]``, timm ``build_sincos2d_pos_embed`` (defaults).

Phases are formed in float64 and reduced by :func:`omnipos.core.sinusoid.sinusoid_of_turns` before the
``sin`` / ``cos``, so the float32 result is within 5e-7 of the exact formula at any grid size.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..core import (
    as_position_tensor,
    check_choice,
    check_finite,
    check_float_dtype,
    check_positive_int,
    geometric_frequencies,
    renamed_argument,
    sinusoid_of_turns,
)
from .grid import check_grid, values_known

__all__ = ["CONVENTIONS", "sincos_2d", "sincos_2d_from_coords", "grid_coords"]

CONVENTIONS = ("mae", "timm")


def _check_dim4(dim: Any) -> int:
    dim = check_positive_int(dim, "dim")
    if dim % 4:
        raise ValueError(f"dim must be divisible by 4 for a 2-D sincos encoding (sin/cos x 2 axes), got {dim}")
    return dim


def grid_coords(
    grid: Any, *, ref_grid: Any = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """Row-major ``(y, x)`` coordinates of an ``(H, W)`` grid -> float64 ``[H * W, 2]``.

    ``ref_grid=(Hr, Wr)`` rescales them EVA-style onto a reference (pre-training) grid: ``y = i / H * Hr``,
    ``x = j / W * Wr`` (timm ``_build_grid(ref_feat_shape=...)``), so a model trained on ``ref_grid`` sees the
    same span of positions at any resolution.
    """
    height, width = check_grid(grid)
    rows = torch.arange(height, dtype=torch.float64, device=device)
    cols = torch.arange(width, dtype=torch.float64, device=device)
    if ref_grid is not None:
        ref_h, ref_w = check_grid(ref_grid, "ref_grid")
        rows, cols = rows * (ref_h / height), cols * (ref_w / width)
    yy, xx = torch.meshgrid(rows, cols, indexing="ij")
    return torch.stack([yy, xx], dim=-1).reshape(height * width, 2)


def sincos_2d_from_coords(
    coords: Any,
    dim: int,
    *,
    base: float = 10000.0,
    convention: str = "mae",
    dtype: torch.dtype = torch.float32,
    temperature: float | None = None,
) -> torch.Tensor:
    """2-D sincos encoding of real-valued patch coordinates.

    Args:
        coords: ``[..., 2]`` as ``(y, x)`` = (row, column); any real dtype, any device.
        dim: output channels, divisible by 4.
        base: wavelength scale of the frequencies (timm and MAE call it ``temperature``; that name is accepted too).
        convention: ``"mae"`` or ``"timm"`` channel order (module docstring).
        dtype: floating dtype of the result.

    Returns:
        ``Tensor[..., dim]`` on the coordinates' device.
    """
    dim = _check_dim4(dim)
    base = renamed_argument(base, temperature, "base", "temperature", default=10000.0)
    check_choice(convention, "convention", CONVENTIONS)
    check_float_dtype(dtype)
    coords = as_position_tensor(coords, "coords")
    if coords.ndim < 1 or coords.shape[-1] != 2:
        raise ValueError(f"coords must have a trailing axis of 2 (y, x), got shape {tuple(coords.shape)}")
    if values_known(coords):  # a host sync: eager only, and not on meta
        check_finite(coords, "coords")
    quarter = dim // 4
    cycles = geometric_frequencies(quarter, base=base, denominator=quarter, device=coords.device)
    turns = coords.to(torch.float64).unsqueeze(-1) * (cycles / (2.0 * math.pi))  # [..., 2 (y, x), D/4]
    if convention == "mae":
        per_axis = sinusoid_of_turns(turns.flip(-2), layout="split", dtype=dtype)  # [..., (x, y), sin|cos]
        return per_axis.flatten(-2)
    return sinusoid_of_turns(turns.flatten(-2), layout="split", dtype=dtype)  # [sin y, sin x | cos y, cos x]


def sincos_2d(
    grid: Any,
    dim: int,
    *,
    base: float = 10000.0,
    convention: str = "mae",
    num_prefix_tokens: int = 0,
    ref_grid: Any = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    temperature: float | None = None,
) -> torch.Tensor:
    """The 2-D sincos table of an ``(H, W)`` patch grid, tokens row-major, prefix rows first.

    Args:
        grid: ``(H, W)`` patches (an int for a square grid); need not be square.
        dim: channels, divisible by 4.
        base: wavelength scale (10000 in MAE and timm, where it is called ``temperature``: accepted too).
        convention: ``"mae"`` (``[sin x, cos x, sin y, cos y]``) or ``"timm"`` (``[sin y, sin x, cos y, cos x]``).
        num_prefix_tokens: zero rows put first for class / register tokens (MAE's ``cls_token=True`` is 1).
        ref_grid: EVA-style rescaling of the positions onto this reference grid (see :func:`grid_coords`).
        dtype, device: of the result.

    Returns:
        ``Tensor[num_prefix_tokens + H * W, dim]``.

    Raises:
        ValueError: a grid side <= 0, ``dim`` not divisible by 4, unknown convention, negative prefix.
    """
    num_prefix_tokens = check_positive_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
    dim = _check_dim4(dim)
    coords = grid_coords(grid, ref_grid=ref_grid, device=device)
    table = sincos_2d_from_coords(coords, dim, base=base, temperature=temperature, convention=convention, dtype=dtype)
    if num_prefix_tokens:
        table = torch.cat([table.new_zeros(num_prefix_tokens, dim), table], dim=0)
    return table
