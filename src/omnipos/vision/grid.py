"""Patch grids: ``(H, W)`` = patches down, patches across; tokens are flattened row-major (H outer, W inner).

One validator for every grid argument in omnipos.vision, so a zero side, a negative side, a float or a
3-tuple get the same wording wherever they are passed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..core import check_positive_int

__all__ = ["check_grid", "check_size_pair", "patch_grid"]


def check_size_pair(value: Any, name: str) -> tuple[int, int]:
    """An int ``s`` (meaning ``(s, s)``) or a pair of positive ints ``(height, width)`` -> ``(int, int)``."""
    if isinstance(value, torch.Tensor):
        if value.numel() not in (1, 2) or value.is_floating_point() or value.dtype == torch.bool:
            raise TypeError(f"{name} must be an int or a pair of ints (height, width), got tensor {value!r}")
        value = value.tolist()
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
            (:func:`omnipos.vision.patch_padding_mask` marks them as real). False: the image must already be a
            multiple of the patch; a remainder raises instead of being cropped away silently.

    Returns:
        ``(H, W)`` as Python ints.

    Raises:
        ValueError: a side <= 0, a patch larger than the image, or ``pad=False`` with a remainder.
        TypeError: non-integer sizes.
    """
    height, width = check_size_pair(image_size, "image_size")
    patch_h, patch_w = check_size_pair(patch_size, "patch_size")
    if patch_h > height or patch_w > width:
        raise ValueError(
            f"patch_size ({patch_h}, {patch_w}) is larger than the image ({height}, {width}); "
            "an image needs at least one whole patch per side"
        )
    if not pad and (height % patch_h or width % patch_w):
        raise ValueError(
            f"image_size ({height}, {width}) is not a multiple of patch_size ({patch_h}, {patch_w}); "
            "pass pad=True to pad it (and mask the padding with patch_padding_mask)"
        )
    return -(-height // patch_h), -(-width // patch_w)
