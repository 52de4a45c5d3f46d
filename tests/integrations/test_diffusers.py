"""``omnipos.integrations.diffusers.patch_rotary`` on tiny random diffusers transformers built from config (no
downloads): the patched model's output equals the stock model's, ``unpatch_rotary`` puts the very same objects back,
``scaling=`` does what its formula says, and what cannot be patched is refused by name.

Verified with diffusers 0.42.1. Measured (float32, CPU): largest |patched - stock| / max|stock| of the model output
1.1e-7 - 1.9e-7 for Flux, HunyuanVideo, Wan, CogVideoX 1.0 / 1.5 and LTX-Video at theta 3; 1.3e-5 for LTX-Video at
its theta 10000, where diffusers' float32 angles (up to theta * pi / 2) are off by ~1e-3 rad and omnipos' are not.
"""

from __future__ import annotations

import copy
import importlib
import math
import sys

import pytest
import torch

pytest.importorskip("diffusers")
from diffusers.models.transformers.cogvideox_transformer_3d import CogVideoXTransformer3DModel
from diffusers.models.transformers.transformer_flux import FluxTransformer2DModel
from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoTransformer3DModel
from diffusers.models.transformers.transformer_ltx import LTXVideoTransformer3DModel
from diffusers.models.transformers.transformer_wan import WanTransformer3DModel

from omnipos.integrations.diffusers import (
    CogVideoXRotaryEmbeddings,
    FluxRotaryEmbedding,
    patch_rotary,
    unpatch_rotary,
)

EXACT = 1e-6  # relative to max|stock output|: what float32 rounding of the same angles leaves


def _flux():
    model = FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                                   attention_head_dim=16, num_attention_heads=2, joint_attention_dim=8,
                                   pooled_projection_dim=8, axes_dims_rope=(4, 6, 6))
    img_ids = torch.zeros(12, 3)
    img_ids[:, 1:] = torch.stack(torch.meshgrid(torch.arange(3.0), torch.arange(4.0), indexing="ij"), -1).flatten(0, 1)
    img_ids[:, 0] = torch.rand(12) * 3  # a real-valued first axis too
    inputs = {"hidden_states": torch.randn(2, 12, 4), "encoder_hidden_states": torch.randn(2, 5, 8),
              "pooled_projections": torch.randn(2, 8), "timestep": torch.tensor([0.5, 0.2]), "img_ids": img_ids,
              "txt_ids": torch.zeros(5, 3)}
    return model, inputs, ("pos_embed", (torch.cat([inputs["txt_ids"], img_ids]),))


def _hunyuan_video():
    model = HunyuanVideoTransformer3DModel(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=16,
                                           num_layers=1, num_single_layers=1, num_refiner_layers=1, patch_size=2,
                                           patch_size_t=1, guidance_embeds=False, text_embed_dim=8,
                                           pooled_projection_dim=8, rope_axes_dim=(4, 6, 6))
    inputs = {"hidden_states": torch.randn(1, 4, 3, 4, 6), "timestep": torch.tensor([500]),
              "encoder_hidden_states": torch.randn(1, 5, 8), "encoder_attention_mask": torch.ones(1, 5),
              "pooled_projections": torch.randn(1, 8)}
    return model, inputs, ("rope", (inputs["hidden_states"],))


def _wan():
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=4,
                                  out_channels=4, text_dim=8, freq_dim=16, ffn_dim=32, num_layers=1,
                                  rope_max_seq_len=32)
    inputs = {"hidden_states": torch.randn(1, 4, 3, 4, 6), "timestep": torch.tensor([500]),
              "encoder_hidden_states": torch.randn(1, 5, 8)}
    return model, inputs, ("rope", (inputs["hidden_states"],))


def _ltx(theta=None, **rope_inputs):
    # inner_dim 32: 32 % 6 = 2 pass-through channels at the front
    model = LTXVideoTransformer3DModel(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=16,
                                       cross_attention_dim=32, num_layers=1, caption_channels=8, patch_size=2)
    if theta is not None:
        model.rope.theta = theta  # the swap reads theta from the module, as from_diffusers does
    rope_inputs = rope_inputs or {"num_frames": 2, "height": 3, "width": 4,
                                  "rope_interpolation_scale": (torch.tensor(0.32), 16.0, 16.0)}
    inputs = {"hidden_states": torch.randn(2, 24, 4), "encoder_hidden_states": torch.randn(2, 5, 8),
              "timestep": torch.tensor([500, 20]), "encoder_attention_mask": torch.ones(2, 5), **rope_inputs}
    return model, inputs, ("rope", (inputs["hidden_states"], *[rope_inputs.get(k) for k in (
        "num_frames", "height", "width", "rope_interpolation_scale", "video_coords")]))


def _video_coords():
    grid = torch.stack(torch.meshgrid(torch.arange(2.0), torch.arange(3.0), torch.arange(4.0), indexing="ij"), 0)
    coords = grid.flatten(1)[None].repeat(2, 1, 1) * torch.tensor([0.3, 64.0, 64.0])[None, :, None]
    return {"video_coords": coords + torch.rand(2, 3, 24)}


def _relative_error(out, ref):
    return ((out - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize(("build", "tolerance"), [
    (_flux, EXACT), (_hunyuan_video, EXACT), (_wan, EXACT), (lambda: _ltx(theta=3.0), EXACT),
    (lambda: _ltx(theta=3.0, **_video_coords()), EXACT),
    (_ltx, 1e-4),  # theta 10000: diffusers' own float32 angles are off by ~1e-3 rad (measured 1.3e-5 here)
], ids=["flux", "hunyuan_video", "wan", "ltx_video", "ltx_video_coords", "ltx_video_theta_1e4"])
def test_patched_model_equals_the_stock_model(build, tolerance):
    torch.manual_seed(0)
    model, inputs, (attribute, rope_args) = build()
    model.eval()
    original, keys = getattr(model, attribute), list(model.state_dict())
    with torch.no_grad():
        stock = model(**inputs, return_dict=False)[0]
        stock_rope = original(*rope_args)
        assert patch_rotary(model) is model
        swap = getattr(model, attribute)
        assert swap is not original and swap.original is original
        patched = model(**inputs, return_dict=False)[0]
        swapped_rope = swap(*rope_args)
        assert list(model.state_dict()) == keys  # nothing persistent added
        assert unpatch_rotary(model) is model
        assert getattr(model, attribute) is original
        again = model(**inputs, return_dict=False)[0]
    for mine, theirs in zip(swapped_rope, stock_rope):  # same shape, dtype, device; the cos/sin values
        assert (mine.shape, mine.dtype, mine.device) == (theirs.shape, theirs.dtype, theirs.device)
        torch.testing.assert_close(mine, theirs, atol=2e-3 if tolerance > EXACT else 2e-6, rtol=0)
    assert _relative_error(patched, stock) < tolerance
    assert torch.equal(again, stock)


def test_ltx_video_angles_are_the_float64_formula():
    """At LTX-Video's theta 10000 the swap equals the float64 formula of diffusers' LTXVideoRotaryPosEmbed (written
    out here), where the stock module is off by ~1e-3."""
    model, _, (_, rope_args) = _ltx()
    stock = model.rope(*rope_args)
    patch_rotary(model)
    cos, sin = model.rope(*rope_args)
    dim, theta = model.rope.original.dim, 10000.0
    grid = torch.stack(torch.meshgrid(*(torch.arange(n, dtype=torch.float64) for n in (2, 3, 4)), indexing="ij"), -1)
    s_t = float(torch.tensor(0.32))  # the scale was given as a float32 tensor: its value is 0.31999999...
    coords = grid.reshape(-1, 3) * torch.tensor([s_t * 1 / 20, 16.0 * 2 / 2048, 16.0 * 2 / 2048],
                                                 dtype=torch.float64) * 2 - 1
    freqs = theta ** torch.linspace(0, 1, dim // 6, dtype=torch.float64) * math.pi / 2
    angles = (freqs[None, :, None] * coords[:, None, :]).flatten(1)  # frequency-major: f0 (t, h, w), f1 ...
    expected_cos = torch.cat([torch.ones(24, dim % 6, dtype=torch.float64), angles.cos().repeat_interleave(2, -1)], -1)
    expected_sin = torch.cat([torch.zeros(24, dim % 6, dtype=torch.float64), angles.sin().repeat_interleave(2, -1)],
                             -1)
    for batch in range(2):
        torch.testing.assert_close(cos[batch].double(), expected_cos, atol=1e-6, rtol=0)
        torch.testing.assert_close(sin[batch].double(), expected_sin, atol=1e-6, rtol=0)
    assert (stock[0][0].double() - expected_cos).abs().max() > 1e-4  # diffusers' float32 angles


def test_wan_follows_the_model_dtype_and_has_no_length_limit():
    torch.manual_seed(0)
    model, inputs, _ = _wan()
    model = model.to(torch.bfloat16).eval()
    hidden = inputs["hidden_states"].bfloat16()
    stock = model.rope(hidden)
    patch_rotary(model)
    mine = model.rope(hidden)
    for a, b in zip(mine, stock):
        assert (a.dtype, a.shape) == (torch.bfloat16, b.shape)
        torch.testing.assert_close(a.float(), b.float(), atol=4e-3, rtol=0)  # bfloat16 rounding of both
    long_video = torch.randn(1, 4, 40, 2, 2, dtype=torch.bfloat16)  # 40 frames > rope_max_seq_len = 32
    with pytest.raises(RuntimeError):
        model.rope.original(long_video)
    assert model.rope(long_video)[0].shape == (1, 40, 1, 16)


def test_flux_reads_half_precision_ids_as_float32():
    model, _, (_, (ids,)) = _flux()
    stock = model.pos_embed(ids.bfloat16())
    patch_rotary(model)
    mine = model.pos_embed(ids.bfloat16())
    torch.testing.assert_close(mine, stock, atol=2e-6, rtol=0)


def test_the_swaps_compile_without_graph_breaks_or_recompiles(monkeypatch):
    """fullgraph=True, dynamic=True: one graph for every video size (backend "eager": dynamo's tracing only)."""
    import torch._dynamo

    torch._dynamo.reset()
    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)
    model, _, _ = _hunyuan_video()
    patch_rotary(model)
    compiled = torch.compile(model.rope, backend="eager", fullgraph=True, dynamic=True)
    for shape in ((2, 4, 3, 6, 10), (3, 4, 5, 8, 12)):  # all sizes distinct and > 1 (dynamo specialises others)
        hidden = torch.randn(shape)
        for mine, eager in zip(compiled(hidden), model.rope(hidden)):
            torch.testing.assert_close(mine, eager, atol=0, rtol=0)
            assert mine.shape == model.rope.original(hidden)[0].shape


# -- CogVideoX: the pipeline computes the RoPE ------------------------------------------------------------------


def _cogvideox_pipeline(patch_size_t):
    from diffusers import CogVideoXDDIMScheduler
    from diffusers.pipelines.cogvideo.pipeline_cogvideox import CogVideoXPipeline

    transformer = CogVideoXTransformer3DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4, time_embed_dim=8,
        text_embed_dim=8, num_layers=1, sample_width=10, sample_height=6, sample_frames=5, patch_size=2,
        patch_size_t=patch_size_t, max_text_seq_length=5, use_rotary_positional_embeddings=True).eval()
    return CogVideoXPipeline(tokenizer=None, text_encoder=None, vae=None, transformer=transformer,
                             scheduler=CogVideoXDDIMScheduler())


@pytest.mark.parametrize("patch_size_t", [None, 2], ids=["cogvideox_1.0", "cogvideox_1.5"])
def test_cogvideox_pipeline(patch_size_t):
    torch.manual_seed(0)
    pipe = _cogvideox_pipeline(patch_size_t)
    frames = 4  # latent frames
    size = (2 * 8 * 3, 2 * 8 * 4)  # pixels: a 3 x 4 patch grid (vae_scale_factor_spatial 8, patch 2): cropped
    stock_rope = pipe._prepare_rotary_positional_embeddings(*size, frames, torch.device("cpu"))
    assert patch_rotary(pipe) is pipe
    assert isinstance(pipe._prepare_rotary_positional_embeddings, CogVideoXRotaryEmbeddings)
    rope = pipe._prepare_rotary_positional_embeddings(*size, frames, torch.device("cpu"))
    for mine, theirs in zip(rope, stock_rope):
        assert (mine.shape, mine.dtype) == (theirs.shape, theirs.dtype)
        torch.testing.assert_close(mine, theirs, atol=2e-6, rtol=0)
    inputs = {"hidden_states": torch.randn(1, frames, 4, 6, 8), "encoder_hidden_states": torch.randn(1, 5, 8),
              "timestep": torch.tensor([500])}
    with torch.no_grad():
        stock = pipe.transformer(**inputs, image_rotary_emb=stock_rope, return_dict=False)[0]
        patched = pipe.transformer(**inputs, image_rotary_emb=rope, return_dict=False)[0]
    assert _relative_error(patched, stock) < EXACT
    unpatch_rotary(pipe)
    assert "_prepare_rotary_positional_embeddings" not in vars(pipe)
    assert pipe._prepare_rotary_positional_embeddings.__func__ is type(pipe)._prepare_rotary_positional_embeddings


def test_cogvideox_transformer_alone_and_without_rope_are_refused():
    pipe = _cogvideox_pipeline(None)
    with pytest.raises(TypeError, match=r"takes its rotary embedding as an input.*patch_rotary\(pipe\)"):
        patch_rotary(pipe.transformer)
    pipe.transformer.register_to_config(use_rotary_positional_embeddings=False)
    with pytest.raises(ValueError, match="use_rotary_positional_embeddings=False"):
        patch_rotary(pipe)


# -- scaling, re-patching, pipelines ----------------------------------------------------------------------------


def test_linear_scaling_divides_every_coordinate():
    torch.manual_seed(0)
    model, inputs, _ = _flux()
    model.eval()
    halved = dict(inputs, img_ids=inputs["img_ids"] / 2, txt_ids=inputs["txt_ids"] / 2)
    with torch.no_grad():
        stock_at_half = model(**halved, return_dict=False)[0]
        patch_rotary(model, scaling={"rope_type": "linear", "factor": 2.0})
        scaled = model(**inputs, return_dict=False)[0]
        original = model.pos_embed.original
        patch_rotary(model)  # patching again rebuilds from the original (here: unscaled)
        assert model.pos_embed.original is original
        unscaled = model(**inputs, return_dict=False)[0]
        stock = unpatch_rotary(model)(**inputs, return_dict=False)[0]
    assert _relative_error(scaled, stock_at_half) < EXACT
    assert _relative_error(unscaled, stock) < EXACT and _relative_error(scaled, stock) > 1e-3
    assert model.pos_embed is original


def test_ntk_scaling_raises_each_axis_base():
    model, _, (_, (ids,)) = _flux()
    patch_rotary(model, scaling={"rope_type": "ntk_alpha", "alpha": 4.0})
    cos, _ = model.pos_embed(ids)
    for axis, (start, d) in enumerate(zip((0, 4, 10), (4, 6, 6))):  # axes_dims_rope: blocks of d channels
        base = 10000.0 * 4.0 ** (d / (d - 2))
        inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        expected = (ids[:, axis, None].double() * inv_freq).cos()
        torch.testing.assert_close(cos[:, start:start + d:2].double(), expected, atol=2e-6, rtol=0)


def test_a_pipeline_patches_its_transformer():
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.flux.pipeline_flux import FluxPipeline

    model, _, _ = _flux()
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=None, text_encoder=None, tokenizer=None,
                        text_encoder_2=None, tokenizer_2=None, transformer=model)
    original = model.pos_embed
    assert patch_rotary(pipe) is pipe and isinstance(model.pos_embed, FluxRotaryEmbedding)
    assert unpatch_rotary(pipe) is pipe and model.pos_embed is original
    pipe.transformer = None  # a pipeline without a transformer (a UNet pipeline) is refused naming the pipeline
    with pytest.raises(TypeError, match="cannot patch FluxPipeline: it has no transformer"):
        patch_rotary(pipe)


def test_a_patched_model_copies():
    model, _, (_, (ids,)) = _flux()
    patch_rotary(model)
    twin = copy.deepcopy(model)
    assert twin.pos_embed is not model.pos_embed
    torch.testing.assert_close(twin.pos_embed(ids), model.pos_embed(ids), atol=0, rtol=0)
    twin_original = twin.pos_embed.original
    assert twin_original is not model.pos_embed.original
    assert unpatch_rotary(twin).pos_embed is twin_original


# -- refusals ---------------------------------------------------------------------------------------------------


def test_models_it_cannot_patch_are_refused_by_name():
    with pytest.raises(TypeError, match=r"cannot patch torch\.nn\.modules\.linear\.Linear.*FluxTransformer2DModel"):
        patch_rotary(torch.nn.Linear(2, 2))
    model, _, _ = _flux()
    with pytest.raises(ValueError, match="is not patched"):
        unpatch_rotary(model)
    with pytest.raises(ValueError, match="kernel must be one of 'auto', 'eager'"):
        patch_rotary(model, kernel="triton")
    with pytest.raises(TypeError, match="scaling must be None"):
        patch_rotary(model, scaling="linear")
    with pytest.raises(ValueError, match="length-dependent"):
        patch_rotary(model, scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 64})
    ltx, _, _ = _ltx()
    with pytest.raises(ValueError, match="rope_interpolation_scale"):
        patch_rotary(ltx, scaling={"rope_type": "linear", "factor": 2.0})
    assert type(model.pos_embed).__name__ == "FluxPosEmbed" and type(ltx.rope).__name__ == "LTXVideoRotaryPosEmbed"


def test_without_diffusers_the_import_error_names_the_extra(monkeypatch):
    monkeypatch.delitem(sys.modules, "omnipos.integrations.diffusers")
    monkeypatch.setitem(sys.modules, "diffusers", None)  # import diffusers -> ImportError
    with pytest.raises(ImportError, match=r'pip install "omnipos\[diffusers\]"'):
        importlib.import_module("omnipos.integrations.diffusers")
