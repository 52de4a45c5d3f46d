"""N-D RoPE of diffusion transformers: ``RotaryEmbedding.from_diffusers`` / presets against diffusers' own position
modules (Flux, HunyuanVideo, Wan 2.1, LTX-Video, CogVideoX), and the pieces they need (front pass-through, axes
interleaved per frequency, the linspace rule, axes_dims plus a remainder) against the float64 formula.

Verified with diffusers 0.42.1 (its cos/sin are float32: compared with a tolerance).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.core import (
    RotaryEmbedding,
    cogvideox_positions,
    cogvideox_rope_arguments,
    grid_positions,
    ltx_video_positions,
    rope_arguments_from_diffusers,
)

diffusers = pytest.importorskip("diffusers")
from diffusers.models.embeddings import apply_rotary_emb, get_3d_rotary_pos_embed  # noqa: E402
from diffusers.models.transformers import transformer_ltx  # noqa: E402
from diffusers.models.transformers.transformer_flux import FluxPosEmbed  # noqa: E402
from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoRotaryPosEmbed  # noqa: E402
from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed  # noqa: E402

TOL = {"atol": 2e-6, "rtol": 0}


def _check_against(rope: RotaryEmbedding, positions: torch.Tensor, cos_ref: torch.Tensor, sin_ref: torch.Tensor,
                   rotate_ref, tol=TOL) -> None:
    """cos/sin [seq, dim] and q rotated by diffusers' own apply function, against omnipos."""
    cos, sin = rope.cos_sin(positions)
    kept = rope.dim - rope.rotary_dim
    if rope.passthrough == "front":
        torch.testing.assert_close(cos_ref[..., :kept], torch.ones_like(cos_ref[..., :kept]), atol=0, rtol=0)
        torch.testing.assert_close(sin_ref[..., :kept], torch.zeros_like(sin_ref[..., :kept]), atol=0, rtol=0)
        cos_ref, sin_ref = cos_ref[..., kept:], sin_ref[..., kept:]
    torch.testing.assert_close(cos, cos_ref.float(), **tol)
    torch.testing.assert_close(sin, sin_ref.float(), **tol)
    q = torch.randn(2, 3, positions.shape[0], rope.dim)  # [batch, heads, seq, dim]
    torch.testing.assert_close(rope.rotate(q, positions), rotate_ref(q), atol=tol["atol"] * 10, rtol=1e-5)


def test_flux_pos_embed():
    module = FluxPosEmbed(theta=10000, axes_dim=[4, 6, 6])
    rope = RotaryEmbedding.from_diffusers(module)
    assert (rope.dim, rope.axes_dims, rope.layout) == (16, (4, 6, 6), "interleaved")
    ids = torch.cat([torch.zeros(3, 3), grid_positions(1, 3, 4).float()])  # text ids, then image ids (0, row, col)
    ids[3:, 0] = torch.rand(12) * 5  # any real-valued first coordinate
    cos_ref, sin_ref = module(ids)
    _check_against(rope, ids, cos_ref, sin_ref, lambda q: apply_rotary_emb(q, (cos_ref, sin_ref)))


def test_hunyuan_video_rotary_pos_embed():
    module = HunyuanVideoRotaryPosEmbed(patch_size=2, patch_size_t=1, rope_dim=[4, 6, 6], theta=256.0)
    rope = RotaryEmbedding.from_diffusers(module)
    assert rope.base == 256.0 and rope.axes_dims == (4, 6, 6)
    cos_ref, sin_ref = module(torch.randn(1, 2, 3, 4, 6))  # [B, C, T, H, W] -> patch grid (3, 2, 3)
    positions = grid_positions(3, 2, 3)
    _check_against(rope, positions, cos_ref, sin_ref, lambda q: apply_rotary_emb(q, (cos_ref, sin_ref)))


@pytest.mark.parametrize("head_dim", [16, 22])  # 22: t gets 22 - 2 * 6 = 10 channels, h and w 6 each
def test_wan_rotary_pos_embed(head_dim):
    module = WanRotaryPosEmbed(attention_head_dim=head_dim, patch_size=(1, 2, 2), max_seq_len=32, theta=10000.0)
    rope = RotaryEmbedding.from_diffusers(module)
    assert rope.axes_dims == (head_dim - 4 * (head_dim // 6), 2 * (head_dim // 6), 2 * (head_dim // 6))
    cos_ref, sin_ref = module(torch.randn(1, 2, 3, 4, 6))  # patch grid (3, 2, 3)
    cos_ref, sin_ref = cos_ref[0, :, 0], sin_ref[0, :, 0]  # [1, seq, 1, dim] -> [seq, dim]
    _check_against(rope, grid_positions(3, 2, 3), cos_ref, sin_ref,
                   lambda q: apply_rotary_emb(q, (cos_ref, sin_ref)))


def test_wan_theta_is_checked_against_the_tables():
    module = WanRotaryPosEmbed(attention_head_dim=16, patch_size=(1, 2, 2), max_seq_len=8, theta=500.0)
    with pytest.raises(ValueError, match="theta=10000 does not reproduce"):
        RotaryEmbedding.from_diffusers(module)
    for bad in (-1.0, float("nan"), "500"):
        with pytest.raises(ValueError, match="theta must be a finite number"):
            RotaryEmbedding.from_diffusers(module, theta=bad)
    assert RotaryEmbedding.from_diffusers(module, theta=500.0).base == 500.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_wan_tables_in_half_precision(dtype):
    """model.to(bfloat16) rounds WanRotaryPosEmbed's tables: theta is still recognised (and a wrong one refused)."""
    module = WanRotaryPosEmbed(attention_head_dim=16, patch_size=(1, 2, 2), max_seq_len=8).to(dtype)
    assert RotaryEmbedding.from_diffusers(module).base == 10000.0
    with pytest.raises(ValueError, match="theta=500 does not reproduce"):
        RotaryEmbedding.from_diffusers(module, theta=500.0)


def _ltx_reference(module, positions_grid_args, interpolation_scale):
    frames, height, width = positions_grid_args
    hidden = torch.randn(1, frames * height * width, module.dim)
    return module(hidden, frames, height, width, rope_interpolation_scale=interpolation_scale)


@pytest.mark.parametrize("dim", [24, 28, 32])  # dim % 6 = 0, 4, 2 pass-through channels at the front
@pytest.mark.parametrize("interpolation_scale", [None, (0.5, 8.0, 8.0)])
def test_ltx_video_rotary_pos_embed(dim, interpolation_scale):
    # theta small enough that diffusers' float32 angles (theta * pi / 2 * coordinate) stay exact to ~1e-7
    module = transformer_ltx.LTXVideoRotaryPosEmbed(dim, base_num_frames=20, base_height=64, base_width=64,
                                                    patch_size=2, patch_size_t=1, theta=3.0)
    rope = RotaryEmbedding.from_diffusers(module)
    assert (rope.rotary_dim, rope.passthrough, rope.frequency_rule) == (6 * (dim // 6), "front", "linspace")
    cos_ref, sin_ref = _ltx_reference(module, (2, 3, 2), interpolation_scale)
    positions = ltx_video_positions(2, 3, 2, interpolation_scale=interpolation_scale, base_sizes=(20, 64, 64),
                                    patch_size=2, patch_size_t=1)
    cos_ref, sin_ref = cos_ref[0], sin_ref[0]
    # LTX rotates x [batch, seq, inner_dim] before splitting heads: seq_dim=-2 of a [batch, seq, dim] tensor
    _check_against(rope, positions, cos_ref, sin_ref,
                   lambda q: transformer_ltx.apply_rotary_emb(q.flatten(0, 1), (cos_ref, sin_ref)).view_as(q))


def test_ltx_video_default_theta_matches_the_float64_formula():
    """At theta=10000 diffusers' float32 angles are off by ~1e-3; omnipos is checked against float64 instead."""
    dim, theta = 26, 10000.0
    module = transformer_ltx.LTXVideoRotaryPosEmbed(dim, base_height=64, base_width=64, theta=theta)
    rope = RotaryEmbedding.from_diffusers(module)
    scale = (0.25, 4.0, 4.0)
    positions = ltx_video_positions(2, 2, 3, interpolation_scale=scale, base_sizes=(20, 64, 64))
    frames, rows, cols = torch.meshgrid(*(torch.arange(n, dtype=torch.float64) for n in (2, 2, 3)), indexing="ij")
    coords = torch.stack([frames * 0.25 / 20, rows * 4 / 64, cols * 4 / 64], -1).reshape(-1, 3) * 2 - 1
    freqs = theta ** torch.linspace(0, 1, dim // 6, dtype=torch.float64) * math.pi / 2
    angles = (freqs[None, :, None] * coords[:, None, :]).flatten(1)  # frequency-major: (f0 t, f0 h, f0 w, f1 t...)
    cos, sin = rope.cos_sin(positions, dtype=torch.float64)
    torch.testing.assert_close(cos, angles.cos().repeat_interleave(2, -1), atol=1e-12, rtol=0)
    torch.testing.assert_close(sin, angles.sin().repeat_interleave(2, -1), atol=1e-12, rtol=0)
    cos_ref, sin_ref = _ltx_reference(module, (2, 2, 3), scale)
    torch.testing.assert_close(cos, cos_ref[0, :, 2:].double(), atol=5e-3, rtol=0)  # diffusers' float32 angles


@pytest.mark.parametrize("base_size", [None, (6, 10), (10, 6)])
def test_cogvideox_3d_rope(base_size):
    head_dim, frames, h, w = 32, 2, 3, 4
    rope = RotaryEmbedding(**cogvideox_rope_arguments(head_dim))
    assert rope.axes_dims == (8, 12, 12)
    if base_size is None:  # CogVideoX 1.5
        cos_ref, sin_ref = get_3d_rotary_pos_embed(head_dim, None, (h, w), frames, grid_type="slice",
                                                   max_size=(6, 10))
    else:  # CogVideoX 1.0: the pipeline's crop of the base grid
        from diffusers.pipelines.cogvideo.pipeline_cogvideox import get_resize_crop_region_for_grid

        crop = get_resize_crop_region_for_grid((h, w), base_size[1], base_size[0])
        cos_ref, sin_ref = get_3d_rotary_pos_embed(head_dim, crop, (h, w), frames)
    positions = cogvideox_positions(frames, h, w, base_size=base_size)
    _check_against(rope, positions, cos_ref, sin_ref, lambda q: apply_rotary_emb(q, (cos_ref, sin_ref)))


# -- the building blocks against the formula -------------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(kept=st.sampled_from([2, 4]), per_axis=st.sampled_from([2, 4]), n_axes=st.integers(1, 3),
       order=st.sampled_from(["blocks", "interleaved"]), rule=st.sampled_from(["geometric", "linspace"]),
       layout=st.sampled_from(["half", "interleaved"]), seed=st.integers(0, 2**16))
def test_front_passthrough_and_axes_order_match_the_formula(kept, per_axis, n_axes, order, rule, layout, seed):
    torch.manual_seed(seed)
    rotary = per_axis * n_axes
    rope = RotaryEmbedding(kept + rotary, base=7.0, axes_dims=(per_axis,) * n_axes, frequency_rule=rule,
                           axes_order=order, passthrough="front", layout=layout)
    positions = torch.randn(5, n_axes, dtype=torch.float64)
    x = torch.randn(2, 5, kept + rotary, dtype=torch.float64)
    half = per_axis // 2
    if rule == "geometric":
        ladder = 7.0 ** (-torch.arange(0, per_axis, 2, dtype=torch.float64) / per_axis)
    else:
        ladder = 7.0 ** torch.linspace(0, 1, half, dtype=torch.float64) * math.pi / 2
    if order == "blocks":
        angles = torch.cat([positions[:, a:a + 1] * ladder for a in range(n_axes)], -1)
    else:
        angles = (ladder[:, None] * positions[:, None, :]).flatten(1)
    pairs = x[..., kept:]
    if layout == "interleaved":
        a, b = pairs[..., 0::2], pairs[..., 1::2]
        ra, rb = a * angles.cos() - b * angles.sin(), b * angles.cos() + a * angles.sin()
        expected = torch.stack([ra, rb], -1).flatten(-2)
    else:
        a, b = pairs[..., :rotary // 2], pairs[..., rotary // 2:]
        expected = torch.cat([a * angles.cos() - b * angles.sin(), b * angles.cos() + a * angles.sin()], -1)
    out = rope.rotate(x, positions)
    torch.testing.assert_close(out[..., :kept], x[..., :kept], atol=0, rtol=0)
    torch.testing.assert_close(out[..., kept:], expected, atol=1e-12, rtol=0)


def test_axes_dims_plus_a_remainder_pass_through_at_the_back():
    rope = RotaryEmbedding(20, axes_dims=(4, 6, 6))
    assert rope.rotary_dim == 16
    x, positions = torch.randn(4, 20), torch.randn(4, 3)
    out = rope.rotate(x, positions)
    assert torch.equal(out[..., 16:], x[..., 16:])
    torch.testing.assert_close(out[..., :16], RotaryEmbedding(16, axes_dims=(4, 6, 6)).rotate(x[..., :16], positions))


# -- bad input -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"frequency_rule": "log"}, ValueError, "frequency_rule"),
    ({"axes_order": "random"}, ValueError, "axes_order"),
    ({"passthrough": "middle"}, ValueError, "passthrough"),
    ({"axes_order": "interleaved"}, ValueError, "axes_order='interleaved'"),
    ({"axes_order": "interleaved", "axes_dims": (4, 2, 2)}, ValueError, "equal axes_dims"),
    ({"axes_dims": (8, 8, 8)}, ValueError, "more than the head dim"),
    ({"axes_dims": (8, 4, 3)}, ValueError, "axes_dims must be even"),
    ({"frequency_rule": "linspace", "inv_freq": [1.0] * 8, "base": None}, ValueError, "frequency_rule"),
    ({"frequency_rule": "linspace", "scaling": {"rope_type": "linear", "factor": 2.0}}, ValueError, "frequency_rule"),
    ({"passthrough": "front", "xpos": True}, ValueError, "passthrough='front'"),
])
def test_bad_configuration(kwargs, error, match):
    kwargs = {"base": 100.0, **kwargs}
    if kwargs["base"] is None:
        del kwargs["base"]
    with pytest.raises(error, match=match):
        RotaryEmbedding(16, **kwargs)


def test_from_diffusers_refuses_other_modules():
    with pytest.raises(TypeError, match="module must be a diffusers"):
        RotaryEmbedding.from_diffusers(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no rotated channels"):
        RotaryEmbedding.from_diffusers(transformer_ltx.LTXVideoRotaryPosEmbed(4))
    with pytest.raises(ValueError, match="theta= is only for WanRotaryPosEmbed"):
        rope_arguments_from_diffusers(FluxPosEmbed(theta=10000, axes_dim=[4, 4]), theta=10.0)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: cogvideox_rope_arguments(24), "multiple of 16"),
    (lambda: cogvideox_positions(2, 0, 3), "grid_height"),
    (lambda: grid_positions(2, -1), r"sizes\[1\]"),
    (lambda: ltx_video_positions(2, 2, 2, interpolation_scale=(1.0, 1.0)), "interpolation_scale"),
    (lambda: ltx_video_positions(2, 2, 2, interpolation_scale=(1.0, 1.0, 1.0), patch_size=0), "patch_size"),
])
def test_bad_preset_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
