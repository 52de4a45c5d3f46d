"""Masks for padded image batches: which patches hold real pixels, and the attention mask that follows.

Images of different sizes share a batch by padding (bottom / right) to a common size; padding them without a
mask (timm ``dynamic_img_pad``) lets the padding take part in attention. Here ``True`` always means real.
"""

from __future__ import annotations

from typing import Any

import torch

from ..core import check_integer_tensor, check_positive_int
from .grid import check_grid, check_size_pair, values_known

__all__ = ["check_image_sizes", "patch_padding_mask", "pixel_padding_mask", "prefix_attention_mask"]


def check_image_sizes(image_sizes: Any, patch_size: Any = None) -> torch.Tensor:
    """``[B, 2]`` integer (height, width) sizes -> int64 tensor (device kept); sides >= 1 and, when
    ``patch_size`` is given, at least one whole patch (callers that pad an image up to one patch do not pass it)."""
    if not isinstance(image_sizes, torch.Tensor):
        image_sizes = torch.as_tensor(image_sizes)
    check_integer_tensor(image_sizes, "image_sizes", "integers (height, width)")
    if image_sizes.ndim != 2 or image_sizes.shape[1] != 2:
        raise ValueError(f"image_sizes must be [B, 2] (height, width), got shape {tuple(image_sizes.shape)}")
    image_sizes = image_sizes.long()
    if not values_known(image_sizes):  # meta: shapes only (the masks follow), no values to check
        return image_sizes
    if image_sizes.numel() and int(image_sizes.min()) < 1:
        raise ValueError(f"image_sizes must be >= 1, got a side of {int(image_sizes.min())}")
    if patch_size is not None and image_sizes.numel():
        patch = torch.tensor(check_size_pair(patch_size, "patch_size"), device=image_sizes.device)
        small = (image_sizes < patch).any(dim=1)
        if bool(small.any()):
            row = int(small.nonzero()[0, 0])
            raise ValueError(
                f"patch_size {tuple(patch.tolist())} is larger than image {row} of size "
                f"{tuple(image_sizes[row].tolist())}; an image needs at least one whole patch per side"
            )
    return image_sizes


def patch_padding_mask(image_sizes: Any, patch_size: Any, grid: Any) -> torch.Tensor:
    """Which patches of a padded batch hold real pixels.

    Args:
        image_sizes: ``[B, 2]`` integer (height, width) of each image before padding (tensor, array or list).
        patch_size: int or ``(height, width)``.
        grid: ``(H, W)`` patch grid of the padded batch; must cover every image.

    Returns:
        ``[B, H * W]`` bool, row-major, True where the patch holds at least one real pixel (a patch cut by the
        image's edge is real, also when the image is smaller than one patch; its padded pixels should be zero, see
        :func:`pixel_padding_mask`).
    """
    sizes = check_image_sizes(image_sizes)
    patch = torch.tensor(check_size_pair(patch_size, "patch_size"), device=sizes.device)
    height, width = check_grid(grid)
    needed = -(-sizes // patch)  # ceil: patches per side that touch the image
    if sizes.numel() and values_known(sizes) and (int(needed[:, 0].max()) > height or int(needed[:, 1].max()) > width):
        raise ValueError(
            f"grid ({height}, {width}) is smaller than the largest image needs "
            f"({int(needed[:, 0].max())}, {int(needed[:, 1].max())}) with patch_size {tuple(patch.tolist())}"
        )
    rows = torch.arange(height, device=sizes.device) < needed[:, :1]  # [B, H]
    cols = torch.arange(width, device=sizes.device) < needed[:, 1:]  # [B, W]
    return (rows.unsqueeze(2) & cols.unsqueeze(1)).reshape(sizes.shape[0], height * width)


def pixel_padding_mask(image_sizes: Any, padded_size: Any) -> torch.Tensor:
    """``[B, 2]`` sizes and the batch's ``(height, width)`` -> ``[B, 1, height, width]`` bool, True at real pixels
    (multiply a padded ``[B, C, height, width]`` batch by it to zero the padding)."""
    sizes = check_image_sizes(image_sizes)
    height, width = check_size_pair(padded_size, "padded_size")
    if sizes.numel() and values_known(sizes) and (int(sizes[:, 0].max()) > height or int(sizes[:, 1].max()) > width):
        raise ValueError(f"padded_size ({height}, {width}) is smaller than the largest image in image_sizes")
    rows = torch.arange(height, device=sizes.device) < sizes[:, :1]
    cols = torch.arange(width, device=sizes.device) < sizes[:, 1:]
    return (rows.unsqueeze(2) & cols.unsqueeze(1)).unsqueeze(1)


def prefix_attention_mask(patch_mask: torch.Tensor, num_prefix_tokens: int = 1) -> torch.Tensor:
    """``[B, N]`` patch mask -> ``[B, 1, 1, prefix + N]`` bool key mask for ``scaled_dot_product_attention`` /
    timm blocks (True = may be attended). Prefix tokens (class, registers) are always real; every query still
    sees them, so no row of the attention is empty."""
    if not isinstance(patch_mask, torch.Tensor) or patch_mask.dtype != torch.bool:
        raise TypeError(f"patch_mask must be a boolean tensor, got {getattr(patch_mask, 'dtype', type(patch_mask))}")
    if patch_mask.ndim != 2:
        raise ValueError(f"patch_mask must be [B, N], got shape {tuple(patch_mask.shape)}")
    num_prefix_tokens = check_positive_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
    prefix = patch_mask.new_ones(patch_mask.shape[0], num_prefix_tokens)
    keys = torch.cat([prefix, patch_mask], dim=1)
    if num_prefix_tokens == 0 and patch_mask.numel() and values_known(keys) and not bool(keys.any(dim=1).all()):
        raise ValueError("a row of patch_mask has no real patch and there are no prefix tokens: nothing to attend")
    return keys[:, None, None, :]
