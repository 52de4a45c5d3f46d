"""The timm adapter against timm's own dynamic_img_size=True models with identical weights, for every ViT family
built on timm's VisionTransformer (and its DeiT-distilled subclass), Eva (EVA02, vit_*_rope, RoPE-Mixed, DINOv3,
PE-core) and NaFlexVit; caching, copies, checkpoints, refusals. Peer versions verified: timm 1.0.31,
transformers 5.24.0 (HF ViT / DINOv2 checkpoints)."""

import copy
import io
import pickle
import threading

import pytest
import timm
import torch
from timm.layers import resample_abs_pos_embed

from omnipos.vision import patch_padding_mask, pixel_padding_mask, sincos_2d
from omnipos.vision.timm import SUPPORTED_MODELS, adapt_vit, resize_state_dict

SMALL = dict(depth=2)  # keeps the suite fast; the full-depth model is checked once
TINY = dict(embed_dim=64, num_heads=2, depth=1)


def _pair(name, **kwargs):
    """(model to adapt, timm's dynamic_img_size twin with the same weights), both in eval mode."""
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, **kwargs).eval()
    twin = timm.create_model(name, pretrained=False, dynamic_img_size=True, dynamic_img_pad=True, **kwargs).eval()
    with torch.no_grad():  # random tables, not timm's (near-zero) init, so a wrong resample shows
        if getattr(model, "pos_embed", None) is not None:
            model.pos_embed.normal_()
    twin.load_state_dict(model.state_dict())
    return model, twin


def _padded(images, noise=50.0):
    height = max(im.shape[-2] for im in images)
    width = max(im.shape[-1] for im in images)
    batch = torch.randn(len(images), 3, height, width) * noise  # loud padding content
    for i, im in enumerate(images):
        batch[i, :, : im.shape[-2], : im.shape[-1]] = im
    return batch, torch.tensor([im.shape[-2:] for im in images])


def _padding_noise(batch, sizes):
    """Fresh noise only where there is padding."""
    real = pixel_padding_mask(sizes, batch.shape[-2:])
    return torch.where(real, torch.zeros_like(batch), torch.randn_like(batch) * 100)


def test_vit_tiny_at_272x192_equals_timm_dynamic():
    model, twin = _pair("vit_tiny_patch16_224")
    assert adapt_vit(model) is model
    x = torch.randn(2, 3, 272, 192)
    with torch.no_grad():
        torch.testing.assert_close(model(x), twin(x), rtol=0, atol=1e-5)
        native = torch.randn(1, 3, 224, 224)
        torch.testing.assert_close(model(native), twin(native), rtol=0, atol=1e-5)


# one model per family (a distinct combination of prefix tokens, table layout, block, attention, MLP and pooling);
# (name, kwargs): TINY shrinks each, keeping its structure
FAMILIES = [
    ("vit_tiny_patch16_224", {}),  # class token, table includes it
    ("deit_tiny_distilled_patch16_224", {}),  # class + distillation token (VisionTransformerDistilled)
    ("deit3_small_patch16_224", {}),  # no_embed_class
    ("vit_small_patch14_reg4_dinov2", dict(img_size=126)),  # 4 registers, no_embed_class
    ("vit_base_patch16_clip_224", {}),  # pre-norm (CLIP)
    ("vit_base_patch16_siglip_224", {}),  # no class token, 'map' attention pooling
    ("vit_base_patch16_gap_224", {}),  # no class token, 'avg' pooling
    ("vit_betwixt_patch16_reg4_gap_256", {}),  # registers + avg
    ("vit_so150m_patch16_reg4_map_256", {}),  # registers + map
    ("aimv2_large_patch14_224", {}),  # SwiGLU MLP, RMSNorm
    ("beit3_base_patch16_224", {}),  # class token + avg
    ("vit_small_patch16_18x2_224", dict(depth=2)),  # ParallelThingsBlock
    ("vit_base_patch16_xp_224", {}),  # ParallelScalingBlock
    ("vit_base_patch16_rpn_224", {}),  # ResPostBlock
    ("vit_dwee_patch16_reg1_gap_256", {}),  # DiffAttention
    ("vit_giant_patch14_dinov2", dict(embed_dim=96)),  # GluMlp (its hidden width must be even)
    ("eva02_tiny_patch14_224", {}),  # Eva: table + RoPE on a reference grid
    ("vit_small_patch16_rope_224", {}),  # Eva: RoPE, no table
    ("vit_small_patch16_rope_mixed_ape_224", {}),  # Eva: RoPE-Mixed (learned per-layer frequencies) + table
    ("vit_small_patch16_dinov3", {}),  # Eva: DINOv3 RoPE, registers
    ("vit_pe_core_small_patch16_384", {}),  # Eva: map pooling over every token
]


@pytest.mark.parametrize("name, kwargs", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_every_family_equals_timm_dynamic_and_masks_mixed_sizes(name, kwargs):
    model, twin = _pair(name, **{**TINY, **kwargs})
    adapt_vit(model)
    patch = model.patch_embed.patch_size[0]
    x = torch.randn(2, 3, 10 * patch + 3, 6 * patch)  # not a multiple of the patch: padded
    with torch.no_grad():
        torch.testing.assert_close(model(x), twin(x), rtol=0, atol=1e-5)
        torch.testing.assert_close(model.forward_features(x), twin.forward_features(x), rtol=0, atol=1e-5)
        images = [x[0], torch.randn(3, 4 * patch, 3 * patch + 5)]
        batch, sizes = _padded(images)
        mixed = model(batch, image_sizes=sizes)
        for i, im in enumerate(images):  # each image's logits are those it gets alone
            torch.testing.assert_close(mixed[i], model(im.unsqueeze(0))[0], rtol=0, atol=1e-4)


CACHE_CASES = [(name, kwargs, {}) for name, kwargs in FAMILIES] + [
    ("vit_tiny_patch16_224", {}, dict(encoding="sincos")),
    ("vit_tiny_patch16_224", {}, dict(encoding="rope")),
    ("naflexvit_base_patch16_gap", {}, {}),
]


@pytest.mark.parametrize("name, kwargs, options", CACHE_CASES,
                         ids=[f"{c[0]}-{c[2].get('encoding', 'learned')}" for c in CACHE_CASES])
def test_position_cache_hits_on_repeated_sizes_in_every_family(name, kwargs, options):
    # issue 24: an eva02's table and RoPE entries evicted each other (0 hits, 84 builds after 42 forwards)
    torch.manual_seed(0)
    model = adapt_vit(timm.create_model(name, pretrained=False, **{**TINY, **kwargs}).eval(), **options)
    patch = model.patch_embed.patch_size[0] if hasattr(model, "patch_embed") else 16
    sizes = [(10 * patch, 6 * patch), (4 * patch, 7 * patch)]
    positions = model.omnipos_positions
    with torch.no_grad():
        for size in sizes:
            model(torch.randn(1, 3, *size))
        first = positions.cache_info()
        assert first["builds"] >= 2 and first["size"] == first["builds"], first  # every build kept
        for _ in range(3):
            for size in sizes:
                model(torch.randn(1, 3, *size))
    info = positions.cache_info()
    assert info["builds"] == first["builds"] and info["size"] == first["size"], (first, info)
    assert info["hits"] - first["hits"] == 3 * first["builds"], (first, info)  # every entry hit on every repeat


def test_distilled_deit_keeps_its_distillation_token():
    # the first adapter built the prefix without dist_token: logits off by up to 0.47 at the model's own size
    torch.manual_seed(0)
    model = timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False, **SMALL).eval()
    untouched = copy.deepcopy(model)
    adapt_vit(model)
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(x), untouched(x), rtol=0, atol=1e-5)
    assert type(model).__name__ == "AdaptedVisionTransformerDistilled" and model.num_prefix_tokens == 2


@pytest.mark.parametrize("name", ["vit_base_r50_s16_224", "vitamin_small_224"])
def test_cnn_stem_is_refused_by_class_name(name):
    model = timm.create_model(name, pretrained=False, depth=1)
    with pytest.raises(ValueError, match="HybridEmbed"):
        adapt_vit(model)


def test_other_classes_are_refused_by_name():
    from timm.models.vision_transformer import VisionTransformer

    class Mine(VisionTransformer):
        pass

    for model, name in [(torch.nn.Linear(3, 3), "Linear"), (Mine(img_size=32, patch_size=16, depth=1), "Mine"),
                        (timm.create_model("beit_base_patch16_224", pretrained=False, depth=1), "Beit")]:
        with pytest.raises(TypeError, match=f"{name}") as err:
            adapt_vit(model)
        assert all(supported in str(err.value) for supported in SUPPORTED_MODELS)
    distilled_regs = timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False, depth=1, reg_tokens=2)
    with pytest.raises(ValueError, match="reg_tokens"):
        adapt_vit(distilled_regs)
    eva = timm.create_model("eva02_tiny_patch14_224", pretrained=False, depth=1)
    with pytest.raises(ValueError, match="Eva.*encoding='learned'"):
        adapt_vit(eva, encoding="sincos")


def test_image_smaller_than_one_patch_is_padded_like_timm():
    model, twin = _pair("vit_tiny_patch16_224", **SMALL)
    adapt_vit(model)
    with torch.no_grad():
        for size in [(10, 7), (16, 5), (3, 40)]:
            x = torch.randn(1, 3, *size)
            torch.testing.assert_close(model(x), twin(x), rtol=0, atol=1e-5)
        small = torch.randn(3, 9, 12)
        batch, sizes = _padded([torch.randn(3, 40, 30), small])
        torch.testing.assert_close(model(batch, image_sizes=sizes)[1], model(small.unsqueeze(0))[0], rtol=0, atol=1e-4)


def test_forward_features_with_image_sizes():
    model, _ = _pair("vit_tiny_patch16_224", reg_tokens=2, **SMALL)
    adapt_vit(model)
    images = [torch.randn(3, 64, 48), torch.randn(3, 30, 70)]
    batch, sizes = _padded(images)
    with torch.no_grad():
        feats = model.forward_features(batch, image_sizes=sizes)  # [B, 3 + H*W, C] on the padded canvas
        assert feats.shape == (2, 3 + 4 * 5, 192)
        mask = patch_padding_mask(sizes, 16, (4, 5))
        for i, im in enumerate(images):
            alone = model.forward_features(im.unsqueeze(0))[0]
            torch.testing.assert_close(feats[i, :3], alone[:3], rtol=0, atol=1e-4)
            torch.testing.assert_close(feats[i, 3:][mask[i]], alone[3:], rtol=0, atol=1e-4)


@pytest.mark.parametrize("kwargs", [dict(**SMALL), dict(class_token=False, global_pool="avg", reg_tokens=2, **SMALL),
                                    dict(global_pool="", **SMALL), dict(global_pool="max", class_token=False, **SMALL),
                                    dict(global_pool="avgmax", class_token=False, **SMALL)])
def test_mixed_sizes_mask_the_padding(kwargs):
    model, _ = _pair("vit_tiny_patch16_224", **kwargs)
    adapt_vit(model)
    images = [torch.randn(3, 272, 192), torch.randn(3, 200, 150), torch.randn(3, 96, 250)]
    batch, sizes = _padded(images)
    with torch.no_grad():
        out = model(batch, image_sizes=sizes)
        other = model(batch + _padding_noise(batch, sizes), image_sizes=sizes)
        torch.testing.assert_close(other, out, rtol=0, atol=1e-5)
        for i, im in enumerate(images):  # each image's result is what it gets alone at its own size
            alone = model(im.unsqueeze(0))
            if kwargs.get("global_pool") == "":
                grid = (-(-im.shape[-2] // 16), -(-im.shape[-1] // 16))
                rows = model.num_prefix_tokens + torch.arange(grid[0])[:, None] * 16 + torch.arange(grid[1])
                picked = torch.cat([out[i, : model.num_prefix_tokens], out[i, rows.flatten()]])
                torch.testing.assert_close(picked, alone[0], rtol=0, atol=1e-4)
            else:
                torch.testing.assert_close(out[i], alone[0], rtol=0, atol=1e-4)
    assert model.omnipos_positions.cache_info()["size"] == 3  # one table per distinct image grid


# -- the cache ------------------------------------------------------------------------------------------------------


def test_resampled_once_per_distinct_grid_and_invalidated_on_weight_change():
    model, twin = _pair("vit_tiny_patch16_224", **SMALL)
    adapt_vit(model)
    positions = model.omnipos_positions
    sizes = [(272, 192), (160, 160), (272, 192), (160, 160), (272, 192)]
    with torch.no_grad():
        for size in sizes:
            model(torch.randn(1, 3, *size))
    assert positions.cache_info() == {"hits": 3, "builds": 2, "size": 2}
    x = torch.randn(1, 3, 272, 192)
    with torch.no_grad():
        model.pos_embed.mul_(2.0)  # in place: same tensor, new _version
        twin.pos_embed.mul_(2.0)
        torch.testing.assert_close(model(x), twin(x), rtol=0, atol=1e-5)
    assert positions.cache_info()["builds"] == 3
    state = {k: v.clone() for k, v in twin.state_dict().items()}
    state["pos_embed"].normal_()
    model.load_state_dict(state)
    twin.load_state_dict(state)
    with torch.no_grad():
        torch.testing.assert_close(model(x), twin(x), rtol=0, atol=1e-5)
    model.pos_embed = torch.nn.Parameter(model.pos_embed.detach() + 1)  # replaced parameter
    twin.pos_embed = torch.nn.Parameter(twin.pos_embed.detach() + 1)
    with torch.inference_mode():
        torch.testing.assert_close(model(x), twin(x), rtol=0, atol=1e-5)
    assert positions.cache_info()["builds"] == 5


def test_edit_through_data_is_never_served_stale():
    # .data edits bypass the version counter; the cached table is checked against a snapshot of the weights
    model, twin = _pair("vit_tiny_patch16_224", **SMALL)
    adapt_vit(model)
    x = torch.randn(1, 3, 272, 192)
    with torch.no_grad():
        model(x)
        version = model.pos_embed._version
        model.pos_embed.data.mul_(-1.5)
        twin.pos_embed.data.mul_(-1.5)
        assert model.pos_embed._version == version
        torch.testing.assert_close(model(x), twin(x), rtol=0, atol=1e-5)
        model.pos_embed.data.copy_(twin.pos_embed.data + 0.25)
        twin.pos_embed.data.add_(0.25)
        torch.testing.assert_close(model(x), twin(x), rtol=0, atol=1e-5)


def test_verify_false_trusts_version_counters_only():
    model, twin = _pair("vit_tiny_patch16_224", **SMALL)
    adapt_vit(model)
    model.omnipos_positions.verify = False
    x = torch.randn(1, 3, 272, 192)
    with torch.no_grad():
        stale = model(x)
        model.pos_embed.data.mul_(-1.5)  # invisible to the version counter: served from the cache, as documented
        torch.testing.assert_close(model(x), stale, rtol=0, atol=0)
        model.pos_embed.mul_(1.0)  # an in-place op the version counter sees
        twin.pos_embed.mul_(-1.5)
        torch.testing.assert_close(model(x), twin(x), rtol=0, atol=1e-5)
    with pytest.raises(TypeError, match="verify"):
        from omnipos.vision.timm import PositionAdapter

        PositionAdapter(dim=8, source_grid=(2, 2), table_prefix=0, verify="yes")


def test_eva_rope_cache_follows_its_learned_frequencies():
    model, twin = _pair("vit_small_patch16_rope_mixed_224", **TINY)
    adapt_vit(model)
    x = torch.randn(1, 3, 96, 80)
    with torch.no_grad():
        model(x)
        model.rope.freqs.mul_(1.5)
        twin.rope.freqs.mul_(1.5)
        torch.testing.assert_close(model(x), twin(x), rtol=0, atol=1e-5)


def test_training_gradients_reach_pos_embed_every_step():
    model, twin = _pair("vit_tiny_patch16_224", **SMALL)
    adapt_vit(model).train()
    twin.train()
    x = torch.randn(2, 3, 208, 144)
    for _ in range(2):  # a cached graph would fail on the second backward
        model.zero_grad()
        twin.zero_grad()
        model(x).square().sum().backward()
        twin(x).square().sum().backward()
        torch.testing.assert_close(model.pos_embed.grad, twin.pos_embed.grad, rtol=1e-4, atol=1e-6)


def test_bfloat16_model():
    model, twin = _pair("vit_tiny_patch16_224", **SMALL)
    adapt_vit(model.bfloat16())
    twin.bfloat16()
    x = torch.randn(2, 3, 272, 192, dtype=torch.bfloat16)
    with torch.no_grad():
        out = model(x)
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out, twin(x), rtol=0, atol=0)
    (kind, key, inference, _), = model.omnipos_positions._cache
    assert (kind, key, inference) == ("table", ((17, 12), torch.bfloat16, torch.device("cpu")), False)


# -- copies, checkpoints, EMA, threads ------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["learned", "sincos", "rope"])
def test_whole_model_saves_loads_pickles_and_deep_copies(encoding):
    torch.manual_seed(0)
    model = adapt_vit(timm.create_model("vit_tiny_patch16_224", pretrained=False, **SMALL).eval(), encoding=encoding)
    x, other = torch.randn(1, 3, 96, 64), torch.randn(1, 3, 48, 112)
    with torch.no_grad():
        expected, expected_other = model(x), model(other)
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        copies = [torch.load(buffer, weights_only=False), pickle.loads(pickle.dumps(model)), copy.deepcopy(model)]
        for clone in copies:
            assert type(clone) is type(model) and clone.omnipos_positions is not model.omnipos_positions
            torch.testing.assert_close(clone(other), expected_other, rtol=0, atol=0)
            torch.testing.assert_close(clone(x), expected, rtol=0, atol=0)
        for p in model.parameters():
            p.mul_(-2.0)
        for clone in copies:  # independent of the original
            torch.testing.assert_close(clone(x), expected, rtol=0, atol=0)


def test_model_ema_v3_deep_copies_an_adapted_model():
    from timm.utils import ModelEmaV3

    model, twin = _pair("vit_tiny_patch16_224", **SMALL)
    adapt_vit(model)
    ema = ModelEmaV3(model, decay=0.5)
    x = torch.randn(1, 3, 96, 160)
    with torch.no_grad():
        torch.testing.assert_close(ema.module(x), twin(x), rtol=0, atol=1e-5)
        model.pos_embed.add_(1.0)
        twin.pos_embed.add_(0.5)  # the EMA of (w, w + 1) at decay 0.5
        ema.update(model)
        torch.testing.assert_close(ema.module(x), twin(x), rtol=0, atol=1e-5)
    assert ema.module.omnipos_positions is not model.omnipos_positions


@pytest.mark.parametrize("encoding", ["learned", "rope"])
def test_two_threads_at_different_sizes(encoding):
    torch.manual_seed(0)
    model = adapt_vit(timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=1).eval(), encoding=encoding)
    inputs = {1: torch.randn(1, 3, 96, 64), 2: torch.randn(1, 3, 48, 160)}
    with torch.no_grad():
        expected = {k: model(v) for k, v in inputs.items()}
    errors, barrier = [], threading.Barrier(2)

    def work(size):
        try:
            barrier.wait()
            for _ in range(10):
                with torch.no_grad():
                    torch.testing.assert_close(model(inputs[size]), expected[size], rtol=0, atol=0)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_meta_device_model_adapts_and_initialises():
    torch.manual_seed(0)
    with torch.device("meta"):
        model = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=1)
        adapt_vit(model, encoding="rope")
    model.to_empty(device="cpu")
    model.init_weights()  # timm's initialisation; the adapter's RoPE frequencies are rebuilt by to_empty
    assert torch.isfinite(model.omnipos_positions.rope.rope.inv_freq).all()
    with torch.no_grad():
        assert torch.isfinite(model.eval()(torch.randn(1, 3, 64, 48))).all()


# -- static size, other encodings, intermediates --------------------------------------------------------------------


def test_static_img_size_equals_timm_set_input_size():
    model, _ = _pair("vit_tiny_patch16_224", **SMALL)
    static = timm.create_model("vit_tiny_patch16_224", pretrained=False, **SMALL).eval()
    static.load_state_dict(model.state_dict())
    adapt_vit(model, img_size=(272, 192), dynamic=False)
    static.set_input_size(img_size=(272, 192))
    assert model.pos_embed.shape == (1, 1 + 17 * 12, 192)
    x = torch.randn(1, 3, 272, 192)
    with torch.no_grad():
        torch.testing.assert_close(model.pos_embed, static.pos_embed, rtol=0, atol=0)
        torch.testing.assert_close(model(x), static(x), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="fixed size"):
        model(torch.randn(1, 3, 224, 224))
    with pytest.raises(ValueError, match="dynamic=True"):
        model(x, image_sizes=[[272, 192]])


def test_sincos_encoding():
    model, _ = _pair("vit_tiny_patch16_224", reg_tokens=2, **SMALL)
    adapt_vit(model, encoding="sincos", convention="timm")
    assert model.pos_embed is None
    tokens = torch.randn(2, 17, 12, 192)
    with torch.no_grad():
        out = model._pos_embed(tokens)
    expected = tokens.reshape(2, -1, 192) + sincos_2d((17, 12), 192, convention="timm")
    torch.testing.assert_close(out[:, 3:], expected)
    torch.testing.assert_close(out[:, 0], model.cls_token[0, 0].expand(2, -1))
    assert model(torch.randn(1, 3, 100, 60)).shape == (1, 1000)
    assert "sincos" in repr(model.omnipos_positions)


def test_forward_intermediates_equal_timm_dynamic():
    model, twin = _pair("vit_tiny_patch16_224", **SMALL)
    adapt_vit(model)
    x = torch.randn(1, 3, 272, 192)
    with torch.no_grad():
        out, inter = model.forward_intermediates(x)
        ref_out, ref_inter = twin.forward_intermediates(x)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-5)
    assert [t.shape for t in inter] == [(1, 192, 17, 12)] * 2
    for ours, ref in zip(inter, ref_inter):
        torch.testing.assert_close(ours, ref, rtol=0, atol=1e-5)


def test_forward_intermediates_with_rope():
    torch.manual_seed(0)
    model = adapt_vit(timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=3, reg_tokens=1).eval(),
                      encoding="rope")
    x = torch.randn(2, 3, 80, 48)
    with torch.no_grad():
        out, inter = model.forward_intermediates(x, indices=2, return_prefix_tokens=True)
        torch.testing.assert_close(out, model.forward_features(x), rtol=0, atol=0)
        assert [(t.shape, p.shape) for t, p in inter] == [((2, 192, 5, 3), (2, 2, 192))] * 2
        last = model.forward_intermediates(x, indices=[2], output_fmt="NLC", intermediates_only=True, norm=True)
        torch.testing.assert_close(last[0], out[:, 2:], rtol=0, atol=1e-6)


# -- NaFlexVit --------------------------------------------------------------------------------------------------------


def test_naflexvit_image_path_is_cached_and_image_sizes_use_its_naflex_path():
    torch.manual_seed(0)
    model = timm.create_model("naflexvit_base_patch16_gap", pretrained=False, **TINY).eval()
    with torch.no_grad():
        model.embeds.pos_embed.normal_()
    twin = copy.deepcopy(model)
    adapt_vit(model)
    x = torch.randn(2, 3, 160, 96)
    with torch.no_grad():
        torch.testing.assert_close(model(x), twin(x), rtol=0, atol=1e-5)
        model(x)
        assert model.omnipos_positions.cache_info() == {"hits": 1, "builds": 1, "size": 1}
        images = [x[0], torch.randn(3, 64, 48), torch.randn(3, 35, 70)]
        batch, sizes = _padded(images)
        mixed = model(batch, image_sizes=sizes)
        for i, im in enumerate(images):
            torch.testing.assert_close(mixed[i], model(im.unsqueeze(0))[0], rtol=0, atol=1e-4)
        naflex = model.forward_features(batch, image_sizes=sizes)
        assert naflex["patch_valid"].sum(1).tolist() == [60, 12, 15]
        padded = torch.randn(1, 3, 70, 50)  # not a multiple of 16: padded as adapted ViTs are
        assert model(padded).shape == (1, 1000)
        pickle.loads(pickle.dumps(model))(x)


# -- checkpoints ------------------------------------------------------------------------------------------------------


def test_resize_state_dict_non_square_source():
    # a checkpoint trained at 192 x 320 (grid 12 x 20) loaded into a 224 x 224 model
    torch.manual_seed(0)
    source = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=(192, 320), **SMALL)
    with torch.no_grad():
        source.pos_embed.normal_()
    state = source.state_dict()
    with pytest.raises(ValueError, match="old_grid"):
        resize_state_dict(state, grid=(14, 14))
    resized = resize_state_dict(state, grid=(14, 14), old_grid=(12, 20))
    ref = resample_abs_pos_embed(state["pos_embed"], [14, 14], old_size=[12, 20], num_prefix_tokens=1)
    torch.testing.assert_close(resized["pos_embed"], ref, rtol=0, atol=0)
    assert resized["cls_token"] is state["cls_token"] and state["pos_embed"].shape[1] == 241
    target = timm.create_model("vit_tiny_patch16_224", pretrained=False, **SMALL)
    target.load_state_dict(resized)
    by_size = resize_state_dict(state, img_size=224, old_grid=(12, 20))  # patch read from patch_embed.proj.weight
    torch.testing.assert_close(by_size["pos_embed"], ref, rtol=0, atol=0)
    old_name = resize_state_dict(state, new_grid=(14, 14), old_grid=(12, 20))  # the first release's keyword
    torch.testing.assert_close(old_name["pos_embed"], ref, rtol=0, atol=0)


def test_resize_state_dict_size_or_grid_must_be_named():
    state = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=1).state_dict()
    with pytest.raises(TypeError, match="ambiguous.*grid=.*img_size="):
        resize_state_dict(state, 320)
    with pytest.raises(TypeError, match="exactly one"):
        resize_state_dict(state)
    with pytest.raises(TypeError, match="exactly one"):
        resize_state_dict(state, grid=20, img_size=320)
    assert resize_state_dict(state, img_size=320)["pos_embed"].shape[1] == 1 + 20 * 20
    assert resize_state_dict(state, grid=320)["pos_embed"].shape[1] == 1 + 320 * 320
    with pytest.raises(ValueError, match="patch_size"):
        resize_state_dict({"pos_embed": state["pos_embed"]}, img_size=320)
    assert resize_state_dict({"pos_embed": state["pos_embed"]}, img_size=(320, 160), patch_size=16,
                             num_prefix_tokens=1)["pos_embed"].shape[1] == 1 + 20 * 10


def test_resize_state_dict_under_ddp_module_prefix():
    state = timm.create_model("vit_tiny_patch16_224", pretrained=False, reg_tokens=4, depth=1).state_dict()
    ddp = {f"module.{k}": v for k, v in state.items()}
    resized = resize_state_dict(ddp, grid=(5, 7))
    ref = resample_abs_pos_embed(state["pos_embed"], [5, 7], old_size=[14, 14], num_prefix_tokens=5)
    torch.testing.assert_close(resized["module.pos_embed"], ref, rtol=0, atol=0)
    assert set(resized) == set(ddp)


def test_resize_state_dict_on_hf_vit_keys_equals_hf_interpolation():
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                       image_size=224, patch_size=16)
    hf = ViTModel(config, add_pooling_layer=False).eval()
    with torch.no_grad():
        hf.embeddings.position_embeddings.normal_()
    state = {f"vit.{k}": v for k, v in hf.state_dict().items()}  # as in ViTForImageClassification
    resized = resize_state_dict(state, img_size=(272, 192), antialias=False)  # HF resizes without antialias
    key = "vit.embeddings.position_embeddings"
    assert resized[key].shape == (1, 1 + 17 * 12, 32)
    wide = ViTModel(ViTConfig(**{**config.to_dict(), "image_size": (272, 192)}), add_pooling_layer=False).eval()
    wide.load_state_dict({k[4:]: v for k, v in resized.items()})
    x = torch.randn(1, 3, 272, 192)
    with torch.no_grad():
        torch.testing.assert_close(wide(x).last_hidden_state,
                                   hf(x, interpolate_pos_encoding=True).last_hidden_state, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name, kwargs, prefix", [
    ("deit3_small_patch16_224", SMALL, 0),
    ("vit_tiny_patch16_224", dict(reg_tokens=4, **SMALL), 5),
    ("vit_small_patch14_reg4_dinov2", dict(img_size=126, **SMALL), 0),
    ("deit_tiny_distilled_patch16_224", SMALL, 2),
])
def test_resize_state_dict_infers_prefix(name, kwargs, prefix):
    state = timm.create_model(name, pretrained=False, **kwargs).state_dict()
    grid = (9, 9) if "patch14" in name else (14, 14)
    resized = resize_state_dict(state, grid=(5, 7))
    ref = resample_abs_pos_embed(state["pos_embed"], [5, 7], old_size=list(grid), num_prefix_tokens=prefix)
    torch.testing.assert_close(resized["pos_embed"], ref, rtol=0, atol=0)


def test_resize_state_dict_ambiguous_prefix():
    # 9 rows with a class and 4 register tokens: 5 prefix + 2 x 2 patches, or no prefix and 3 x 3 patches
    both = {"pos_embed": torch.randn(1, 9, 4), "cls_token": torch.randn(1, 1, 4), "reg_token": torch.randn(1, 4, 4)}
    with pytest.raises(ValueError, match="num_prefix_tokens"):
        resize_state_dict(both, grid=(4, 4))
    out = resize_state_dict(both, grid=(4, 4), num_prefix_tokens=5)
    assert out["pos_embed"].shape == (1, 21, 4)
    state = {"pos_embed": torch.randn(1, 1 + 8 * 8, 4), "cls_token": torch.randn(1, 1, 4)}
    with pytest.raises(ValueError, match="num_prefix_tokens"):
        resize_state_dict(state, grid=(4, 4), old_grid=(5, 3))  # neither 64 nor 65 rows fit 5 x 3
    with pytest.raises(ValueError, match="no position table"):
        resize_state_dict({}, grid=(4, 4))
    with pytest.raises(ValueError, match="several position tables"):
        resize_state_dict({"a.pos_embed": torch.randn(1, 5, 4), "b.pos_embed": torch.randn(1, 5, 4)}, grid=2)


# -- bad input --------------------------------------------------------------------------------------------------------


def test_bad_inputs():
    model, _ = _pair("vit_tiny_patch16_224", **SMALL)
    with pytest.raises(ValueError, match="img_size"):
        adapt_vit(model, dynamic=False)
    with pytest.raises(ValueError, match="encoding"):
        adapt_vit(model, encoding="alibi")
    adapt_vit(model)
    with pytest.raises(ValueError, match="already adapted"):
        adapt_vit(model)
    with pytest.raises(ValueError, match=r"x must be an image batch"):
        model(torch.randn(3, 64, 64))
    with pytest.raises(ValueError, match="rows"):
        model(torch.randn(2, 3, 64, 64), image_sizes=[[64, 64]])
    with pytest.raises(ValueError, match=r"image_sizes\[0\].*exceeds"):
        model(torch.randn(1, 3, 64, 64), image_sizes=[[65, 64]])
    with pytest.raises(ValueError, match="image_sizes must be >= 1"):
        model(torch.randn(1, 3, 64, 64), image_sizes=[[0, 64]])
    with pytest.raises(ValueError, match="either"):
        model(torch.randn(1, 3, 64, 64), image_sizes=[[64, 64]], attn_mask=torch.ones(1, 1, 1, 17, dtype=torch.bool))


@pytest.mark.gpu
def test_cuda_matches_cpu_and_caches_per_device():
    model, twin = _pair("vit_tiny_patch16_224", **SMALL)
    adapt_vit(model)
    x = torch.randn(2, 3, 272, 192)
    with torch.no_grad():
        cpu = model(x)
        model.cuda()
        twin.cuda()
        gpu = model(x.cuda())
        torch.testing.assert_close(gpu, twin(x.cuda()), rtol=0, atol=1e-5)
        torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-4, atol=1e-4)
        sizes = torch.tensor([[272, 192], [200, 150]], device="cuda")
        assert model(x.cuda(), image_sizes=sizes).device.type == "cuda"
    assert {key[1][2].type for key in model.omnipos_positions._cache} == {"cuda"}
