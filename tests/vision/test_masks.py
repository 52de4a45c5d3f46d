"""patch_grid, patch_padding_mask, pixel_padding_mask, prefix_attention_mask."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from omnipos.vision import (
    patch_grid,
    patch_padding_mask,
    pixel_padding_mask,
    prefix_attention_mask,
)


def test_patch_grid():
    assert patch_grid(224, 16) == (14, 14)
    assert patch_grid((272, 192), 16) == (17, 12)
    assert patch_grid((250, 190), 16) == (16, 12)  # padded up: ceil
    assert patch_grid((250, 190), (10, 19)) == (25, 10)
    assert patch_grid((16, 16), 16, pad=False) == (1, 1)
    with pytest.raises(ValueError, match="pad=True"):
        patch_grid((250, 190), 16, pad=False)


def test_patch_larger_than_image():
    # padded (timm's dynamic_img_pad): an image smaller than a patch is one partly-padded patch
    assert patch_grid((8, 200), 16) == (1, 13)
    mask = patch_padding_mask([[32, 32], [32, 8]], 16, (2, 2))
    assert mask.tolist() == [[True, True, True, True], [True, False, True, False]]
    with pytest.raises(ValueError, match="larger than the image"):  # without padding it cannot be cut into patches
        patch_grid((8, 200), 16, pad=False)


@pytest.mark.parametrize("bad", [(0, 16), (-16, 16), (16, 0)])
def test_zero_or_negative_sizes(bad):
    with pytest.raises(ValueError, match="image_size"):
        patch_grid(bad, 4)
    with pytest.raises(ValueError, match="patch_size"):
        patch_grid(32, bad)
    with pytest.raises(ValueError, match="grid"):
        patch_padding_mask([[8, 8]], 4, bad)


def _reference_mask(sizes, patch, grid):
    """Per image, per patch: does the patch's pixel box intersect the image? (loops on purpose)"""
    rows = []
    for h, w in sizes:
        rows.append([i * patch[0] < h and j * patch[1] < w for i in range(grid[0]) for j in range(grid[1])])
    return torch.tensor(rows, dtype=torch.bool)


@given(sizes=st.lists(st.tuples(st.integers(4, 60), st.integers(4, 60)), min_size=1, max_size=5),
       ph=st.integers(1, 4), pw=st.integers(1, 4), extra=st.integers(0, 2))
def test_mask_marks_exactly_the_patches_with_real_pixels(sizes, ph, pw, extra):
    height = max(h for h, _ in sizes)
    width = max(w for _, w in sizes)
    grid = (math.ceil(height / ph) + extra, math.ceil(width / pw) + extra)
    mask = patch_padding_mask(torch.tensor(sizes), (ph, pw), grid)
    assert mask.shape == (len(sizes), grid[0] * grid[1]) and mask.dtype == torch.bool
    assert torch.equal(mask, _reference_mask(sizes, (ph, pw), grid))
    # and it agrees with the pixels: a patch is real iff the max-pool of the pixel mask over it is 1
    pixels = pixel_padding_mask(torch.tensor(sizes), (grid[0] * ph, grid[1] * pw)).float()
    pooled = F.max_pool2d(pixels, (ph, pw)).flatten(1).bool()
    assert torch.equal(mask, pooled)


def test_grid_too_small_for_an_image():
    with pytest.raises(ValueError, match="smaller than the largest image"):
        patch_padding_mask([[64, 64]], 16, (3, 4))


def test_image_sizes_validation():
    with pytest.raises(TypeError, match="integers"):
        patch_padding_mask(torch.tensor([[32.0, 32.0]]), 16, (2, 2))
    with pytest.raises(ValueError, match=r"\[B, 2\]"):
        patch_padding_mask(torch.tensor([32, 32]), 16, (2, 2))
    with pytest.raises(ValueError, match=">= 1"):
        pixel_padding_mask([[0, 3]], (4, 4))


def test_prefix_attention_mask():
    patch_mask = torch.tensor([[True, True, False], [True, False, False]])
    mask = prefix_attention_mask(patch_mask, 2)
    assert mask.shape == (2, 1, 1, 5)
    assert mask[:, 0, 0].tolist() == [[True, True, True, True, False], [True, True, True, False, False]]
    # SDPA with it: padded keys get exactly zero weight
    q = k = v = torch.randn(2, 1, 5, 4)
    out = F.scaled_dot_product_attention(q, k, v.masked_fill(~mask[:, :, 0, :, None], 1e6), attn_mask=mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    with pytest.raises(ValueError, match="nothing to attend"):
        prefix_attention_mask(torch.tensor([[False, False]]), 0)
    with pytest.raises(TypeError, match="boolean"):
        prefix_attention_mask(torch.ones(1, 3), 1)
