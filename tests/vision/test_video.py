"""video_position_ids against the position grids of CogVideoX (diffusers get_3d_rotary_pos_embed, linspace over a
crop region) and HunyuanVideo (get_meshgrid_nd + interpolation_factor), and 3-D axial RoPE of them against the
per-axis formula in float64."""

import math

import numpy as np
import pytest
import torch

from omnipos.core import RotaryEmbedding
from omnipos.vision import video_position_ids


def test_plain_grid_is_time_outermost_row_major():
    ids = video_position_ids((2, 3, 4))
    assert ids.shape == (24, 3) and ids.dtype == torch.float64
    t, h, w = 1, 2, 3
    assert ids[(t * 3 + h) * 4 + w].tolist() == [1.0, 2.0, 3.0]


def test_cogvideox_crop_region_linspace():
    # diffusers: grid_h = np.linspace(top, bottom, H, endpoint=False), likewise w; grid_t = arange(T);
    # crop from get_resize_crop_region_for_grid((H, W), base_w, base_h)
    T, H, W = 3, 30, 45
    top, left, bottom, right = 2, 0, 28, 45  # a crop that stretches the grid
    grid_t = np.arange(T, dtype=np.float64)
    grid_h = np.linspace(top, bottom, H, endpoint=False)
    grid_w = np.linspace(left, right, W, endpoint=False)
    expected = np.stack(np.meshgrid(grid_t, grid_h, grid_w, indexing="ij"), axis=-1).reshape(-1, 3)
    ids = video_position_ids((T, H, W), offset=(0, top, left),
                             interpolation=(1, (bottom - top) / H, (right - left) / W))
    np.testing.assert_allclose(ids.numpy(), expected, rtol=0, atol=1e-12)


def test_hunyuan_interpolation_factor():
    # HunyuanVideo get_nd_rotary_pos_embed: positions get_meshgrid_nd(sizes) (= arange per axis), times the factor
    T, H, W, factor = 4, 5, 6, 0.5
    axes = [np.arange(n, dtype=np.float64) * factor for n in (T, H, W)]
    expected = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
    np.testing.assert_allclose(video_position_ids((T, H, W), interpolation=factor).numpy(), expected, rtol=0, atol=0)
    pair = video_position_ids((T, H, W), interpolation=(2.0, 0.5))  # (temporal, spatial)
    assert pair[:, 0].max() == 2.0 * (T - 1) and pair[:, 1].max() == 0.5 * (H - 1) and pair[:, 2].max() == 0.5 * (W - 1)


def test_3d_axial_rope_per_axis_formula_in_float64():
    dim, base, grid = 24, 10000.0, (3, 4, 5)
    rope = RotaryEmbedding(dim, base=base, n_axes=3, layout="interleaved")
    ids = video_position_ids(grid, interpolation=(1.0, 0.75, 0.75))
    cos, sin = rope.cos_sin(ids, dtype=torch.float64)
    axis_dim = dim // 3
    inv_freq = 1.0 / base ** (np.arange(0, axis_dim, 2) / axis_dim)  # each axis its own ladder over its channels
    angles = np.concatenate([np.outer(ids[:, a].numpy(), inv_freq) for a in range(3)], axis=-1)
    np.testing.assert_allclose(cos.numpy(), np.repeat(np.cos(angles), 2, axis=-1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(sin.numpy(), np.repeat(np.sin(angles), 2, axis=-1), rtol=0, atol=1e-12)


def test_dtype_and_device():
    ids = video_position_ids(torch.tensor([2, 2, 2]), dtype=torch.float32, device="cpu")
    assert ids.dtype == torch.float32 and ids.device.type == "cpu"


@pytest.mark.parametrize("grid, error", [((0, 2, 2), ValueError), ((2, -1, 2), ValueError), ((2, 2.5, 2), TypeError),
                                         ((2, 2), TypeError), (torch.tensor([2.0, 2.0, 2.0]), TypeError)])
def test_bad_grids(grid, error):
    with pytest.raises(error, match="grid_thw"):
        video_position_ids(grid)


def test_bad_factors():
    with pytest.raises(ValueError, match="interpolation must be > 0"):
        video_position_ids((2, 2, 2), interpolation=0.0)
    with pytest.raises(ValueError, match="interpolation must be finite"):
        video_position_ids((2, 2, 2), interpolation=(1.0, math.inf))
    with pytest.raises(ValueError, match="offset must be finite"):
        video_position_ids((2, 2, 2), offset=math.nan)
    with pytest.raises(TypeError, match="offset"):
        video_position_ids((2, 2, 2), offset="0")
    with pytest.raises(TypeError, match="dtype"):
        video_position_ids((2, 2, 2), dtype=torch.int64)


def test_sizes_beyond_memory_are_refused_with_the_allocation_guard_error():
    # issue 28: 10**14 positions would ask the allocator for 2.4e15 bytes
    with pytest.raises(ValueError, match=r"grid_thw=\(1000000, 10000, 10000\).*does not fit in memory"):
        video_position_ids((10**6, 10**4, 10**4))
    with pytest.raises(ValueError, match="does not fit in memory"):
        video_position_ids((2**40, 2**40, 2**40), dtype=torch.float32)
