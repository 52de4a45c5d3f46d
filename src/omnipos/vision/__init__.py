"""2-D patch grids: sincos tables, resampling learned tables, padding masks, 2-D RoPE; the timm adapter.

``omnipos.vision.timm`` (``adapt_vit``, ``resize_state_dict``) is imported on first use.
"""

from .grid import check_grid, patch_grid
from .masks import patch_padding_mask, pixel_padding_mask, prefix_attention_mask
from .resample import resample_pos_embed
from .rope2d import RotaryEmbedding2D, rope_2d_positions
from .sincos import grid_coords, sincos_2d, sincos_2d_from_coords

__all__ = [
    "patch_grid",
    "check_grid",
    "sincos_2d",
    "sincos_2d_from_coords",
    "grid_coords",
    "resample_pos_embed",
    "patch_padding_mask",
    "pixel_padding_mask",
    "prefix_attention_mask",
    "RotaryEmbedding2D",
    "rope_2d_positions",
    "adapt_vit",
    "resize_state_dict",
]


def __getattr__(name):
    if name in ("adapt_vit", "resize_state_dict"):
        from . import timm as _timm

        return getattr(_timm, name)
    raise AttributeError(f"module 'omnipos.vision' has no attribute {name!r}")
