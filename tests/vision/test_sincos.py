"""sincos_2d against MAE's numpy reference and timm's build_sincos2d_pos_embed, per convention.
Peer versions verified: timm 1.0.31 (MAE's reference is the numpy code copied into this file)."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from timm.layers.pos_embed_sincos import (
    build_fourier_pos_embed,
    build_sincos2d_pos_embed,
)

from omnipos.vision import grid_coords, sincos_2d, sincos_2d_from_coords


# --- MAE util/pos_embed.py (facebookresearch/mae), generalised from grid_size to (h, w) as its forks do ---
def mae_get_1d_sincos_pos_embed_from_grid(embed_dim, pos):
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=np.float64)
    omega /= embed_dim / 2.0
    omega = 1.0 / 10000**omega
    pos = pos.reshape(-1)
    out = np.einsum("m,d->md", pos, omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def mae_get_2d_sincos_pos_embed_from_grid(embed_dim, grid):
    assert embed_dim % 2 == 0
    emb_h = mae_get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0])
    emb_w = mae_get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1])
    return np.concatenate([emb_h, emb_w], axis=1)


def mae_get_2d_sincos_pos_embed(embed_dim, grid_size, cls_token=False):
    h, w = grid_size
    grid_h = np.arange(h, dtype=np.float32)
    grid_w = np.arange(w, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)  # here w goes first
    grid = np.stack(grid, axis=0).reshape([2, 1, h, w])
    pos_embed = mae_get_2d_sincos_pos_embed_from_grid(embed_dim, grid)
    if cls_token:
        pos_embed = np.concatenate([np.zeros([1, embed_dim]), pos_embed], axis=0)
    return pos_embed


@pytest.mark.parametrize("grid", [(14, 14), (17, 12), (3, 9), (1, 5)])
@pytest.mark.parametrize("dim", [8, 192])
def test_mae_convention_matches_mae(grid, dim):
    ours = sincos_2d(grid, dim, convention="mae", num_prefix_tokens=1, dtype=torch.float64)
    ref = torch.from_numpy(mae_get_2d_sincos_pos_embed(dim, grid, cls_token=True))
    assert ours.shape == (1 + grid[0] * grid[1], dim)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(sincos_2d(grid, dim, convention="mae"), ref[1:].float(), rtol=0, atol=5e-7)


@pytest.mark.parametrize("grid", [(14, 14), (17, 12), (2, 8)])
@pytest.mark.parametrize("dim", [4, 64, 384])
def test_timm_convention_matches_timm(grid, dim):
    ref = build_sincos2d_pos_embed(list(grid), dim=dim)
    ours = sincos_2d(grid, dim, convention="timm")
    torch.testing.assert_close(ours, ref, rtol=0, atol=2e-6)  # timm forms its angles in float32


def test_conventions_are_permutations_of_each_other():
    mae, timm_ = sincos_2d((5, 7), 32, convention="mae"), sincos_2d((5, 7), 32, convention="timm")
    q = 8
    sin_x, cos_x, sin_y, cos_y = mae.split(q, dim=-1)
    torch.testing.assert_close(timm_, torch.cat([sin_y, sin_x, cos_y, cos_x], dim=-1))


def test_reference_grid_scaling_matches_timm_eva_grid():
    # timm's _build_grid(ref_feat_shape=...) (EVA) positions, fed to the same frequencies, give our table.
    grid, ref = (24, 18), (16, 16)
    sin, cos = build_fourier_pos_embed(list(grid), num_bands=16, in_pixels=False, ref_feat_shape=list(ref))
    # build_fourier_pos_embed -> [H, W, 2 (y, x), bands]; timm convention = [sin y, sin x, cos y, cos x]
    ref_table = torch.cat([sin.flatten(-2), cos.flatten(-2)], dim=-1).reshape(grid[0] * grid[1], 64)
    torch.testing.assert_close(sincos_2d(grid, 64, convention="timm", ref_grid=ref), ref_table, rtol=0, atol=2e-6)
    coords = grid_coords(grid, ref_grid=ref)
    assert coords[-1].tolist() == pytest.approx([23 / 24 * 16, 17 / 18 * 16])


@given(y=st.floats(-1e4, 1e4), x=st.floats(-1e4, 1e4), quarter=st.integers(1, 16))
def test_real_valued_coords_match_float64_formula(y, x, quarter):
    dim = 4 * quarter
    w = 10000.0 ** (-np.arange(quarter) / quarter)
    expected = np.concatenate([np.sin(x * w), np.cos(x * w), np.sin(y * w), np.cos(y * w)])
    ours = sincos_2d_from_coords(torch.tensor([y, x], dtype=torch.float64), dim)
    np.testing.assert_allclose(ours.numpy(), expected, rtol=0, atol=1e-6)


def test_batched_coords_any_leading_shape_and_device_dtype():
    coords = torch.rand(3, 5, 2, dtype=torch.float64) * 40
    out = sincos_2d_from_coords(coords, 16, dtype=torch.bfloat16)
    assert out.shape == (3, 5, 16) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out[1, 2], sincos_2d_from_coords(coords[1, 2], 16).bfloat16())


@pytest.mark.parametrize("grid", [(0, 4), (4, -1), (3, 0)])
def test_grid_with_zero_or_negative_side(grid):
    with pytest.raises(ValueError, match="grid"):
        sincos_2d(grid, 16)


@pytest.mark.parametrize("dim", [6, 10, 2, 0])
def test_dim_not_divisible_by_4(dim):
    with pytest.raises(ValueError, match="dim"):
        sincos_2d((4, 4), dim)


def test_other_bad_inputs():
    with pytest.raises(ValueError, match="convention"):
        sincos_2d((4, 4), 16, convention="jax")
    with pytest.raises(TypeError, match="grid"):
        sincos_2d((4.0, 4), 16)
    with pytest.raises(TypeError, match="grid"):
        sincos_2d((4, 4, 4), 16)
    with pytest.raises(ValueError, match="coords"):
        sincos_2d_from_coords(torch.zeros(3, 3), 16)
    with pytest.raises(ValueError, match="finite"):
        sincos_2d_from_coords(torch.tensor([0.0, float("nan")]), 16)
    with pytest.raises(ValueError, match="num_prefix_tokens"):
        sincos_2d((4, 4), 16, num_prefix_tokens=-1)
