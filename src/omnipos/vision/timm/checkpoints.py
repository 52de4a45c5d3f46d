"""Checkpoints: a ViT state dict with its position table resampled to a new grid (timm's ``checkpoint_filter_fn``
without the square assumption; timm and HF key names, DDP ``module.`` prefixes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ...core import renamed_argument
from ..grid import check_size_pair, patch_grid
from ..resample import resample_pos_embed, source_grid

__all__ = ["resize_state_dict"]

#: names of the learned table, per convention: timm, HF ViT / DeiT / DINOv2 (``*.embeddings.position_embeddings``)
_TABLE_KEYS = ("pos_embed", "position_embeddings")
#: prefix-token parameters (timm, HF) in the order their rows sit at the start of the table
_PREFIX_KEYS = (("cls_token",), ("dist_token", "distillation_token"), ("reg_token", "register_tokens"))
_PATCH_WEIGHT_KEYS = ("patch_embed.proj.weight", "patch_embeddings.projection.weight")


def _table_key(state_dict: Mapping[str, Any], key: str | None) -> str:
    if key is not None:
        if key not in state_dict:
            raise ValueError(f"state_dict has no {key!r} entry (keys start {list(state_dict)[:5]})")
        return key
    found = [k for k in state_dict if k.rsplit(".", 1)[-1] in _TABLE_KEYS]
    if not found:
        raise ValueError(f"state_dict has no position table (a key ending in 'pos_embed' or 'position_embeddings'; "
                         f"keys start {list(state_dict)[:5]}); pass key=")
    top = min(k.count(".") for k in found)
    found = [k for k in found if k.count(".") == top]  # timm's attn_pool / rope tables sit deeper than the model's
    if len(found) > 1:
        raise ValueError(f"state_dict has several position tables {found}; pass key= to choose one")
    return found[0]


def _prefix_candidates(state_dict: Mapping[str, Any], stem: str) -> list[int]:
    """Row counts the table's prefix could have: 0, then class, + distillation, + registers (those present)."""
    counts, total = [0], 0
    for names in _PREFIX_KEYS:
        for name in names:
            token = state_dict.get(stem + name)
            if isinstance(token, torch.Tensor) and token.ndim >= 2:
                total += int(token.shape[-2])
                counts.append(total)
                break
    return list(dict.fromkeys(counts))


def _infer_prefix(state_dict: Mapping[str, Any], stem: str, num_tokens: int, old_grid: Any) -> int:
    """Prefix rows of a checkpoint's table: whichever (exactly one) of the prefix-token counts leaves a grid."""
    tried = _prefix_candidates(state_dict, stem)
    fits = []
    for count in tried:
        try:
            source_grid(num_tokens - count, old_grid)
        except ValueError:
            continue
        fits.append(count)
    if not fits and old_grid is None:
        raise ValueError(
            f"the position table has {num_tokens} rows: none of {[num_tokens - c for c in tried]} patch tokens (after "
            f"{tried} prefix rows) form a square grid; pass old_grid=(H, W) (and num_prefix_tokens)")
    if len(fits) != 1:
        raise ValueError(
            f"cannot tell how many of the position table's {num_tokens} rows are prefix tokens (tried {tried}"
            f"{'' if old_grid is None else f' with old_grid {tuple(old_grid)}'}); pass num_prefix_tokens")
    return fits[0]


def _checkpoint_patch(state_dict: Mapping[str, Any], stem: str, patch_size: Any) -> tuple[int, int]:
    if patch_size is not None:
        return check_size_pair(patch_size, "patch_size")
    for name in _PATCH_WEIGHT_KEYS:
        weight = state_dict.get(stem + name)
        if isinstance(weight, torch.Tensor) and weight.ndim == 4:
            return int(weight.shape[-2]), int(weight.shape[-1])
    raise ValueError("img_size= needs the patch size: the state_dict has no patch projection weight "
                     f"({', '.join(stem + n for n in _PATCH_WEIGHT_KEYS)}); pass patch_size= or grid=")


def resize_state_dict(
    state_dict: Mapping[str, Any],
    *args: Any,
    grid: Any = None,
    img_size: Any = None,
    patch_size: Any = None,
    old_grid: Any = None,
    num_prefix_tokens: int | None = None,
    mode: str = "bicubic",
    antialias: bool = True,
    key: str | None = None,
    new_grid: Any = None,
) -> dict[str, Any]:
    """A ViT checkpoint with its position table resampled to a new grid (a new dict; the input is untouched).

    Args:
        state_dict: a timm checkpoint (``{"pos_embed": [1, N, D], "cls_token": ..., ...}``), the same under DDP's
            ``module.`` prefix, or an HF ViT / DeiT / DINOv2 one (``...embeddings.position_embeddings``,
            ``...embeddings.cls_token``, ``distillation_token``, ``register_tokens``).
        grid: ``(H, W)`` patch grid of the model it will be loaded into (``new_grid=`` is accepted too).
        img_size: ``(height, width)`` in pixels instead of ``grid``: the grid is ``ceil(img_size / patch)``, the
            patch read from the checkpoint's patch projection weight (or ``patch_size=``). Exactly one of ``grid``
            and ``img_size``, by name: ``resize_state_dict(sd, 320)`` is refused (image size or grid?).
        old_grid: the checkpoint's grid; required when its patch-token count is not a perfect square.
        num_prefix_tokens: rows of the table that belong to class / distillation / register tokens. None infers it
            from the prefix-token entries present (or 0 for ``no_embed_class`` checkpoints), refusing when several
            readings fit.
        mode, antialias: as in :func:`omnipos.vision.resample_pos_embed` (timm's defaults; HF ViT resizes with
            ``antialias=False``).
        key: the table's key (default: the one key ending in ``pos_embed`` / ``position_embeddings`` nearest the top).
    """
    if args:
        raise TypeError(f"resize_state_dict(state_dict, {args[0]!r}) is ambiguous (image size or grid?): pass "
                        "grid=(H, W) in patches or img_size=(height, width) in pixels, by name")
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}")
    grid = renamed_argument(grid, new_grid, "grid", "new_grid", default=None) if new_grid is not None else grid
    if (grid is None) == (img_size is None):
        raise TypeError("pass exactly one of grid=(H, W) (patches) and img_size=(height, width) (pixels)")
    key = _table_key(state_dict, key)
    stem = key[: len(key) - len(key.rsplit(".", 1)[-1])]
    table = state_dict[key]
    if not isinstance(table, torch.Tensor) or table.ndim != 3:
        raise ValueError(f"state_dict[{key!r}] must be a [1, N, D] tensor, got {getattr(table, 'shape', table)}")
    if img_size is not None:
        grid = patch_grid(check_size_pair(img_size, "img_size"), _checkpoint_patch(state_dict, stem, patch_size))
    if num_prefix_tokens is None:
        num_prefix_tokens = _infer_prefix(state_dict, stem, table.shape[1], old_grid)
    out = dict(state_dict)
    out[key] = resample_pos_embed(table, grid, old_grid=old_grid, num_prefix_tokens=num_prefix_tokens, mode=mode,
                                  antialias=antialias)
    return out
