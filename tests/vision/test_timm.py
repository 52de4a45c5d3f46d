"""The timm adapter against timm's own dynamic_img_size=True model with identical weights."""

import pytest
import timm
import torch
from timm.layers import resample_abs_pos_embed

from omnipos.vision import sincos_2d
from omnipos.vision.timm import adapt_vit, resize_state_dict

SMALL = dict(depth=2)  # keeps the suite fast; the full-depth model is checked once


def _pair(name, **kwargs):
    """(model to adapt, timm's dynamic_img_size twin with the same weights), both in eval mode."""
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, **kwargs).eval()
    twin = timm.create_model(name, pretrained=False, dynamic_img_size=True, dynamic_img_pad=True, **kwargs).eval()
    with torch.no_grad():  # random tables, not timm's (near-zero) init, so a wrong resample shows
        model.pos_embed.normal_()
    twin.load_state_dict(model.state_dict())
    return model, twin


def test_vit_tiny_at_272x192_equals_timm_dynamic():
    model, twin = _pair("vit_tiny_patch16_224")
    assert adapt_vit(model) is model
    x = torch.randn(2, 3, 272, 192)
    with torch.no_grad():
        torch.testing.assert_close(model(x), twin(x), rtol=0, atol=1e-5)
        native = torch.randn(1, 3, 224, 224)
        torch.testing.assert_close(model(native), twin(native), rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "name, kwargs, size",
    [
        ("vit_small_patch14_reg4_dinov2", dict(img_size=126, **SMALL), (182, 98)),  # 4 registers, no_embed_class
        ("vit_tiny_patch16_224", dict(reg_tokens=4, **SMALL), (272, 192)),  # cls + 4 registers in the table
        ("deit3_small_patch16_224", dict(**SMALL), (160, 288)),  # no_embed_class
        ("vit_tiny_patch16_224", dict(**SMALL), (250, 190)),  # not a multiple of the patch: padded
        ("vit_tiny_patch16_224", dict(class_token=False, global_pool="avg", **SMALL), (96, 320)),
    ],
)
def test_models_equal_timm_dynamic(name, kwargs, size):
    model, twin = _pair(name, **kwargs)
    adapt_vit(model)
    x = torch.randn(2, 3, *size)
    with torch.no_grad():
        torch.testing.assert_close(model(x), twin(x), rtol=0, atol=1e-5)
        torch.testing.assert_close(model.forward_features(x), twin.forward_features(x), rtol=0, atol=1e-5)


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


def _padded(images):
    height = max(im.shape[-2] for im in images)
    width = max(im.shape[-1] for im in images)
    batch = torch.randn(len(images), 3, height, width) * 50  # loud padding content
    for i, im in enumerate(images):
        batch[i, :, : im.shape[-2], : im.shape[-1]] = im
    return batch, torch.tensor([im.shape[-2:] for im in images])


@pytest.mark.parametrize("kwargs", [dict(**SMALL), dict(class_token=False, global_pool="avg", reg_tokens=2, **SMALL),
                                    dict(global_pool="", **SMALL)])
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


def _padding_noise(batch, sizes):
    """Fresh noise only where there is padding."""
    from omnipos.vision import pixel_padding_mask

    real = pixel_padding_mask(sizes, batch.shape[-2:])
    return torch.where(real, torch.zeros_like(batch), torch.randn_like(batch) * 100)


def test_bfloat16_model():
    model, twin = _pair("vit_tiny_patch16_224", **SMALL)
    adapt_vit(model.bfloat16())
    twin.bfloat16()
    x = torch.randn(2, 3, 272, 192, dtype=torch.bfloat16)
    with torch.no_grad():
        out = model(x)
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out, twin(x), rtol=0, atol=0)
    key = next(iter(model.omnipos_positions._cache))
    assert key[:3] == ((17, 12), torch.bfloat16, torch.device("cpu"))


def test_static_img_size_equals_timm_set_input_size():
    model, twin = _pair("vit_tiny_patch16_224", **SMALL)
    static = timm.create_model("vit_tiny_patch16_224", pretrained=False, **SMALL).eval()
    static.load_state_dict(model.state_dict())
    adapt_vit(model, img_size=(272, 192), dynamic=False)
    static.set_input_size(img_size=(272, 192))
    assert model.pos_embed.shape == (1, 1 + 17 * 12, 192)
    x = torch.randn(1, 3, 272, 192)
    with torch.no_grad():
        torch.testing.assert_close(model.pos_embed, static.pos_embed, rtol=0, atol=0)
        torch.testing.assert_close(model(x), static(x), rtol=0, atol=1e-5)


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


def test_resize_state_dict_non_square_source():
    # a checkpoint trained at 192 x 320 (grid 12 x 20) loaded into a 224 x 224 model
    torch.manual_seed(0)
    source = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=(192, 320), **SMALL)
    with torch.no_grad():
        source.pos_embed.normal_()
    state = source.state_dict()
    with pytest.raises(ValueError, match="old_grid"):
        resize_state_dict(state, (14, 14))
    resized = resize_state_dict(state, (14, 14), old_grid=(12, 20))
    ref = resample_abs_pos_embed(state["pos_embed"], [14, 14], old_size=[12, 20], num_prefix_tokens=1)
    torch.testing.assert_close(resized["pos_embed"], ref, rtol=0, atol=0)
    assert resized["cls_token"] is state["cls_token"] and state["pos_embed"].shape[1] == 241
    target = timm.create_model("vit_tiny_patch16_224", pretrained=False, **SMALL)
    target.load_state_dict(resized)


@pytest.mark.parametrize("name, kwargs, prefix", [
    ("deit3_small_patch16_224", SMALL, 0),
    ("vit_tiny_patch16_224", dict(reg_tokens=4, **SMALL), 5),
    ("vit_small_patch14_reg4_dinov2", dict(img_size=126, **SMALL), 0),
])
def test_resize_state_dict_infers_prefix(name, kwargs, prefix):
    state = timm.create_model(name, pretrained=False, **kwargs).state_dict()
    grid = (9, 9) if "patch14" in name else (14, 14)
    resized = resize_state_dict(state, (5, 7))
    ref = resample_abs_pos_embed(state["pos_embed"], [5, 7], old_size=list(grid), num_prefix_tokens=prefix)
    torch.testing.assert_close(resized["pos_embed"], ref, rtol=0, atol=0)


def test_resize_state_dict_ambiguous_prefix():
    # 9 rows with a class and 4 register tokens: 5 prefix + 2 x 2 patches, or no prefix and 3 x 3 patches
    both = {"pos_embed": torch.randn(1, 9, 4), "cls_token": torch.randn(1, 1, 4), "reg_token": torch.randn(1, 4, 4)}
    with pytest.raises(ValueError, match="num_prefix_tokens"):
        resize_state_dict(both, (4, 4))
    out = resize_state_dict(both, (4, 4), num_prefix_tokens=5)
    assert out["pos_embed"].shape == (1, 21, 4)
    state = {"pos_embed": torch.randn(1, 1 + 8 * 8, 4), "cls_token": torch.randn(1, 1, 4)}
    with pytest.raises(ValueError, match="num_prefix_tokens"):
        resize_state_dict(state, (4, 4), old_grid=(5, 3))  # neither 64 nor 65 rows fit 5 x 3
    with pytest.raises(ValueError, match="no 'pos_embed'"):
        resize_state_dict({}, (4, 4))


def test_bad_inputs():
    with pytest.raises(TypeError, match="VisionTransformer"):
        adapt_vit(torch.nn.Linear(3, 3))
    model, _ = _pair("vit_tiny_patch16_224", **SMALL)
    with pytest.raises(ValueError, match="img_size"):
        adapt_vit(model, dynamic=False)
    with pytest.raises(ValueError, match="encoding"):
        adapt_vit(model, encoding="alibi")
    adapt_vit(model)
    with pytest.raises(ValueError, match="already adapted"):
        adapt_vit(model)
    with pytest.raises(ValueError, match="larger than the image"):
        model(torch.randn(1, 3, 8, 64))
    with pytest.raises(ValueError, match="rows"):
        model(torch.randn(2, 3, 64, 64), image_sizes=[[64, 64]])
    with pytest.raises(ValueError, match="exceed"):
        model(torch.randn(1, 3, 64, 64), image_sizes=[[65, 64]])
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
    assert {key[2].type for key in model.omnipos_positions._cache} == {"cuda"}


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
