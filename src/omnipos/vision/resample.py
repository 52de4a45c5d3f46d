"""Resampling a learned ``[prefix + H*W, D]`` position table to another patch grid (timm, HF ViT, DINOv2).

Same numbers as timm ``resample_abs_pos_embed`` given the same grids (prefix rows split off and put back,
row-major grid reshaped to ``(D, H, W)``, ``F.interpolate`` in float32, cast back), without its traps:
a non-square source is never guessed from ``sqrt(N)``, a token count that fits no grid is an error, and a
transposed grid with the same token count (``(2, 8) -> (4, 4)``) is resampled rather than returned unchanged.
HF ViT's ``interpolate_pos_encoding`` is ``antialias=False``; timm (and DINOv2 ``_reg`` hub models) use
``antialias=True``, which changes bicubic even when upsampling.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from ..core import check_choice, check_positive_int
from .grid import check_grid

__all__ = ["MODES", "resample_pos_embed", "source_grid"]

MODES = ("bicubic", "bilinear", "nearest", "nearest-exact", "area")
_ANTIALIAS_MODES = ("bicubic", "bilinear")


def source_grid(num_patch_tokens: int, old_grid: Any = None, *, name: str = "pos_embed") -> tuple[int, int]:
    """The grid a table of ``num_patch_tokens`` patch rows was trained on: ``old_grid`` checked against the
    count, or the square root when the count is a perfect square; anything else raises."""
    if old_grid is not None:
        old_h, old_w = check_grid(old_grid, "old_grid")
        if old_h * old_w != num_patch_tokens:
            raise ValueError(
                f"{name} has {num_patch_tokens} patch tokens but old_grid ({old_h}, {old_w}) has "
                f"{old_h * old_w}; check old_grid and num_prefix_tokens"
            )
        return old_h, old_w
    side = math.isqrt(num_patch_tokens)
    if side * side != num_patch_tokens or side == 0:
        raise ValueError(
            f"{name} has {num_patch_tokens} patch tokens, which is not a square grid; pass old_grid=(H, W) "
            "(omnipos does not guess a non-square source)"
        )
    return side, side


def resample_pos_embed(
    pos_embed: torch.Tensor,
    new_grid: Any,
    *,
    old_grid: Any = None,
    num_prefix_tokens: int = 1,
    mode: str = "bicubic",
    antialias: bool = True,
) -> torch.Tensor:
    """Resample a position table to ``new_grid``.

    Args:
        pos_embed: ``[N, D]`` or ``[B, N, D]`` (timm's ``[1, N, D]``), ``N = num_prefix_tokens + H_old * W_old``,
            patch rows row-major. Any floating dtype, any device.
        new_grid: ``(H, W)`` target grid (an int for square).
        old_grid: ``(H_old, W_old)``; required unless ``N - num_prefix_tokens`` is a perfect square.
        num_prefix_tokens: leading rows (class / register tokens) copied through unchanged; 0 for
            ``no_embed_class`` models.
        mode: ``F.interpolate`` mode (``"bicubic"`` as timm and HF).
        antialias: timm's default True; False reproduces HF ViT (only for bicubic / bilinear).

    Returns:
        ``[num_prefix_tokens + H * W, D]`` (or with the batch axis), the input's dtype and device. When the
        grids are equal the input itself is returned.

    Raises:
        ValueError: bad grid, a token count that fits neither grid, prefix >= N, unknown mode, antialias with a
            mode that has none. TypeError: a non-tensor or non-floating table.
    """
    if not isinstance(pos_embed, torch.Tensor):
        raise TypeError(f"pos_embed must be a tensor, got {type(pos_embed).__name__}")
    if not pos_embed.is_floating_point():
        raise TypeError(f"pos_embed must be floating point, got {pos_embed.dtype}")
    if pos_embed.ndim not in (2, 3):
        raise ValueError(f"pos_embed must be [N, D] or [B, N, D], got shape {tuple(pos_embed.shape)}")
    new_h, new_w = check_grid(new_grid, "new_grid")
    num_prefix_tokens = check_positive_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
    check_choice(mode, "mode", MODES)
    if antialias and mode not in _ANTIALIAS_MODES:
        raise ValueError(f"antialias=True applies to modes {_ANTIALIAS_MODES} only; pass antialias=False for {mode!r}")
    num_tokens = pos_embed.shape[-2]
    if num_prefix_tokens >= num_tokens:
        raise ValueError(f"num_prefix_tokens={num_prefix_tokens} leaves no patch rows in pos_embed of {num_tokens}")
    num_patches = num_tokens - num_prefix_tokens
    if old_grid is not None:
        old_h, old_w = check_grid(old_grid, "old_grid")
        if old_h * old_w != num_patches:
            fits_new = " (it fits new_grid: is old_grid wrong?)" if new_h * new_w == num_patches else ""
            raise ValueError(
                f"pos_embed has {num_patches} patch tokens ({num_tokens} - {num_prefix_tokens} prefix), which "
                f"matches neither old_grid ({old_h}, {old_w}) = {old_h * old_w}{fits_new} nor a resample from it"
            )
    old_h, old_w = source_grid(num_patches, old_grid)
    if (old_h, old_w) == (new_h, new_w):
        return pos_embed

    batched = pos_embed if pos_embed.ndim == 3 else pos_embed.unsqueeze(0)
    prefix, patches = batched[:, :num_prefix_tokens], batched[:, num_prefix_tokens:]
    work = torch.float64 if pos_embed.dtype == torch.float64 else torch.float32
    dim = patches.shape[-1]
    image = patches.to(work).reshape(-1, old_h, old_w, dim).permute(0, 3, 1, 2)
    kwargs = {"antialias": antialias} if mode in _ANTIALIAS_MODES else {}
    image = F.interpolate(image, size=(new_h, new_w), mode=mode, **kwargs)
    patches = image.permute(0, 2, 3, 1).reshape(-1, new_h * new_w, dim).to(pos_embed.dtype)
    out = torch.cat([prefix, patches], dim=1) if num_prefix_tokens else patches
    return out if pos_embed.ndim == 3 else out.squeeze(0)
