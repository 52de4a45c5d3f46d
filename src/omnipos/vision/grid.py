"""Patch grids: ``(H, W)`` = patches down, patches across; tokens are flattened row-major (H outer, W inner).

One validator for every grid argument in omnipos.vision, so a zero side, a negative side, a float or a
3-tuple get the same wording wherever they are passed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..core import check_positive_int

__all__ = ["check_cu_seqlens", "check_grid", "check_size_pair", "packed_patch_coords", "patch_grid", "require_values",
           "values_known"]


def values_known(*tensors: Any) -> bool:
    """Whether value checks (NaN, ranges, counts: a host sync) can run on ``tensors``: not while ``torch.compile``
    traces (a compiled call trusts its inputs) and not for meta tensors (shapes without values)."""
    return not torch.compiler.is_compiling() and not any(isinstance(t, torch.Tensor) and t.is_meta for t in tensors)


def require_values(tensor: torch.Tensor, name: str, why: str) -> torch.Tensor:
    """``tensor``, or a ValueError naming it when it is a meta tensor but its values decide the result's shape."""
    if tensor.is_meta:
        raise ValueError(f"{name} is a meta tensor (shapes without values), but {why}")
    return tensor


def check_size_pair(value: Any, name: str) -> tuple[int, int]:
    """An int ``s`` (meaning ``(s, s)``) or a pair of positive ints ``(height, width)`` -> ``(int, int)``."""
    if isinstance(value, torch.Tensor):
        if value.numel() not in (1, 2) or value.is_floating_point() or value.dtype == torch.bool:
            raise TypeError(f"{name} must be an int or a pair of ints (height, width), got tensor {value!r}")
        value = require_values(value, name, "a size needs its values").tolist()
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        side = check_positive_int(value, name)
        return side, side
    if isinstance(value, (tuple, list, torch.Size)) and len(value) == 2:
        return check_positive_int(value[0], f"{name}[0] (height)"), check_positive_int(value[1], f"{name}[1] (width)")
    raise TypeError(f"{name} must be an int or a pair of ints (height, width), got {value!r}")


def check_grid(grid: Any, name: str = "grid") -> tuple[int, int]:
    """A patch grid ``(H, W)`` of positive ints (an int ``s`` means ``(s, s)``)."""
    return check_size_pair(grid, name)


def patch_grid(image_size: Any, patch_size: Any, *, pad: bool = True) -> tuple[int, int]:
    """The ``(H, W)`` patch grid of an image.

    Args:
        image_size: ``(height, width)`` in pixels, or an int for a square image.
        patch_size: ``(height, width)`` of a patch, or an int.
        pad: True: the image is padded (bottom / right) up to a multiple of the patch, so
            ``H = ceil(height / patch_h)``; its last row / column of patches is partly padding
            (:func:`omnipos.vision.patch_padding_mask` marks them as real); an image smaller than one patch is
            one partly-padded patch (timm's ``dynamic_img_pad`` does the same). False: the image must already be a
            multiple of the patch; a remainder raises instead of being cropped away silently.

    Returns:
        ``(H, W)`` as Python ints.

    Raises:
        ValueError: a side <= 0, or ``pad=False`` with a remainder or a patch larger than the image.
        TypeError: non-integer sizes.
    """
    height, width = check_size_pair(image_size, "image_size")
    patch_h, patch_w = check_size_pair(patch_size, "patch_size")
    if not pad and (patch_h > height or patch_w > width):
        raise ValueError(
            f"patch_size ({patch_h}, {patch_w}) is larger than the image ({height}, {width}); without padding "
            "an image needs at least one whole patch per side (pad=True pads it up to one patch)"
        )
    if not pad and (height % patch_h or width % patch_w):
        raise ValueError(
            f"image_size ({height}, {width}) is not a multiple of patch_size ({patch_h}, {patch_w}); "
            "pass pad=True to pad it (and mask the padding with patch_padding_mask)"
        )
    return -(-height // patch_h), -(-width // patch_w)


def check_cu_seqlens(cu_seqlens: Any, total: int, name: str = "cu_seqlens") -> torch.Tensor:
    """``[n + 1]`` integer boundaries ``0 = c_0 <= c_1 <= ... <= c_n = total`` of packed sequences -> int64 tensor
    (the values are checked in eager mode; while ``torch.compile`` traces only the shape and dtype)."""
    cu = cu_seqlens if isinstance(cu_seqlens, torch.Tensor) else torch.as_tensor(cu_seqlens)
    if cu.dtype == torch.bool or cu.is_floating_point() or cu.is_complex():
        raise TypeError(f"{name} must be integers, got dtype {cu.dtype}")
    if cu.ndim != 1 or cu.numel() < 2:
        raise ValueError(f"{name} must be [n + 1] boundaries (0, end of sequence 0, ...), got shape {tuple(cu.shape)}")
    cu = cu.to(torch.int64)
    if not values_known(cu):  # the value checks need a host sync: eager only, and not on meta
        return cu
    if int(cu[0]) != 0 or int(cu[-1]) != total:
        raise ValueError(f"{name} must start at 0 and end at the number of tokens {total}, got {int(cu[0])} ... "
                         f"{int(cu[-1])}")
    if bool((cu.diff() < 0).any()):
        i = int((cu.diff() < 0).nonzero()[0, 0])
        raise ValueError(f"{name} must be non-decreasing; {name}[{i + 1}] = {int(cu[i + 1])} < {name}[{i}] = "
                         f"{int(cu[i])}")
    return cu


def packed_patch_coords(
    grids: Any, *, num_prefix_tokens: int = 0, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Patch coordinates of several images packed into one sequence (NaFlex / flash-attn varlen layout).

    Args:
        grids: ``[n, 2]`` integer ``(h_i, w_i)`` per image (tensor or list of pairs).
        num_prefix_tokens: class / register tokens at the start of each image's tokens (coordinates 0).
        device: of the result (default: the grids' device, or CPU).

    Returns:
        ``(coords [N_total, 2] int64 (row, col), cu_seqlens [n + 1] int64)`` with image ``i``'s tokens at
        ``cu_seqlens[i]:cu_seqlens[i + 1]``: its prefix tokens, then its patches row-major. Built without a Python
        loop over the images.
    """
    num_prefix_tokens = check_positive_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
    sizes = grids if isinstance(grids, torch.Tensor) else torch.as_tensor(grids, dtype=torch.int64)
    if sizes.dtype == torch.bool or sizes.is_floating_point() or sizes.is_complex():
        raise TypeError(f"grids must be integer (h, w) pairs, got dtype {sizes.dtype}")
    if sizes.numel() == 0:
        sizes = sizes.reshape(0, 2)
    if sizes.ndim != 2 or sizes.shape[1] != 2:
        raise ValueError(f"grids must be [n, 2] (h, w) per image, got shape {tuple(sizes.shape)}")
    sizes = sizes.to(device=device if device is not None else sizes.device, dtype=torch.int64)
    require_values(sizes, "grids", "the number of tokens depends on them")
    if sizes.numel() and bool((sizes < 1).any()):
        i = int((sizes < 1).any(dim=1).nonzero()[0, 0])
        raise ValueError(f"grids[{i}] = {tuple(sizes[i].tolist())}: each side must be >= 1")
    counts = num_prefix_tokens + sizes[:, 0] * sizes[:, 1]
    cu = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    token = torch.arange(int(cu[-1]), device=sizes.device)
    image = torch.searchsorted(cu[1:], token, right=True)
    local = token - cu[image] - num_prefix_tokens
    width = sizes[image, 1]
    patch = local >= 0
    coords = torch.stack([torch.where(patch, local // width, 0), torch.where(patch, local % width, 0)], dim=-1)
    return coords, cu
