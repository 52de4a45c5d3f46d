"""2-D patch grids: sincos tables, resampling learned tables (per image too), padding masks, 2-D RoPE (packed
images too); multimodal M-RoPE position ids, the vision tower's positions and 3-D video positions; the timm adapter.

``omnipos.vision.timm`` (``adapt_vit``, ``resize_state_dict``) is imported on first use.
"""

from .grid import check_grid, packed_patch_coords, patch_grid
from .masks import patch_padding_mask, pixel_padding_mask, prefix_attention_mask
from .mrope import mrope_decode_position_ids, mrope_position_ids
from .resample import resample_pos_embed, resample_pos_embed_per_image
from .rope2d import RotaryEmbedding2D, rope_2d_positions
from .sincos import grid_coords, sincos_2d, sincos_2d_from_coords
from .tower import vision_interpolation_indices_and_weights, vision_position_ids, vision_window_index
from .video import video_position_ids

__all__ = [
    "patch_grid",
    "check_grid",
    "packed_patch_coords",
    "sincos_2d",
    "sincos_2d_from_coords",
    "grid_coords",
    "resample_pos_embed",
    "resample_pos_embed_per_image",
    "patch_padding_mask",
    "pixel_padding_mask",
    "prefix_attention_mask",
    "RotaryEmbedding2D",
    "rope_2d_positions",
    "mrope_position_ids",
    "mrope_decode_position_ids",
    "vision_position_ids",
    "vision_window_index",
    "vision_interpolation_indices_and_weights",
    "video_position_ids",
    "adapt_vit",
    "resize_state_dict",
]


def __getattr__(name):
    if name in ("adapt_vit", "resize_state_dict"):
        from . import timm as _timm

        return getattr(_timm, name)
    raise AttributeError(f"module 'omnipos.vision' has no attribute {name!r}")
