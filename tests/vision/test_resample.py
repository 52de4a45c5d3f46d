"""resample_pos_embed against timm's resample_abs_pos_embed and HF ViT's interpolate_pos_encoding;
resample_pos_embed_per_image against SigLIP2's resize_positional_embeddings and timm NaFlexViT.

Peer versions verified: timm 1.0.31, transformers 5.24.0 and 4.57.1 (SigLIP2 changed between them: see
SIGLIP2_INTERPOLATES), torch 2.14.1."""

import pytest
import torch
import transformers
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version
from timm.layers import resample_abs_pos_embed
from transformers import ViTConfig
from transformers.models.vit.modeling_vit import ViTEmbeddings

from omnipos.vision import resample_pos_embed, resample_pos_embed_per_image


@pytest.mark.parametrize(
    "old, new, prefix",
    [((14, 14), (17, 12), 1), ((14, 14), (7, 7), 1), ((16, 16), (24, 30), 0), ((14, 14), (10, 20), 5),
     ((12, 20), (17, 12), 1), ((37, 37), (14, 14), 5)],
)
@pytest.mark.parametrize("antialias", [True, False])
def test_equals_timm(old, new, prefix, antialias):
    table = torch.randn(1, prefix + old[0] * old[1], 32)
    ours = resample_pos_embed(table, new, old_grid=old, num_prefix_tokens=prefix, antialias=antialias)
    ref = resample_abs_pos_embed(table, list(new), old_size=list(old), num_prefix_tokens=prefix, antialias=antialias)
    assert ours.shape == (1, prefix + new[0] * new[1], 32)
    torch.testing.assert_close(ours, ref, rtol=0, atol=0)
    if old[0] == old[1]:  # a square source may be left for omnipos to infer
        torch.testing.assert_close(resample_pos_embed(table, new, num_prefix_tokens=prefix, antialias=antialias), ref)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_other_modes_equal_timm(mode):
    table = torch.randn(1, 1 + 64, 16)
    ref = resample_abs_pos_embed(table, [5, 11], num_prefix_tokens=1, interpolation=mode, antialias=False)
    torch.testing.assert_close(resample_pos_embed(table, (5, 11), mode=mode, antialias=False), ref, rtol=0, atol=0)


@pytest.mark.parametrize("size", [(224, 224), (272, 192), (160, 320)])
def test_hf_vit_is_antialias_false(size):
    config = ViTConfig(hidden_size=32, image_size=224, patch_size=16, num_channels=3)
    embeddings = ViTEmbeddings(config)
    with torch.no_grad():
        embeddings.position_embeddings.normal_()
    grid = (size[0] // 16, size[1] // 16)
    tokens = torch.zeros(1, 1 + grid[0] * grid[1], 32)
    ref = embeddings.interpolate_pos_encoding(tokens, *size)
    ours = resample_pos_embed(embeddings.position_embeddings.detach(), grid, antialias=False)
    torch.testing.assert_close(ours, ref.detach(), rtol=0, atol=0)
    if grid != (14, 14):
        assert not torch.allclose(resample_pos_embed(embeddings.position_embeddings.detach(), grid), ref, atol=1e-4)


def test_transposed_grid_with_same_token_count_is_resampled():
    # (2, 8) -> (4, 4): 16 tokens either way; the old timm early return handed the table back unchanged.
    table = torch.randn(1, 1 + 16, 8)
    out = resample_pos_embed(table, (4, 4), old_grid=(2, 8))
    expected = torch.nn.functional.interpolate(
        table[:, 1:].reshape(1, 2, 8, 8).permute(0, 3, 1, 2), size=(4, 4), mode="bicubic", antialias=True
    ).permute(0, 2, 3, 1).reshape(1, 16, 8)
    torch.testing.assert_close(out[:, 1:], expected, rtol=0, atol=0)
    torch.testing.assert_close(out[:, :1], table[:, :1])
    assert not torch.allclose(out, table)
    # and back the other way, (4, 4) -> (2, 8) and (8, 2)
    assert not torch.allclose(resample_pos_embed(table, (2, 8)), table)
    torch.testing.assert_close(resample_pos_embed(table, (8, 2), old_grid=(4, 4)),
                               resample_abs_pos_embed(table, [8, 2], old_size=[4, 4]))


def test_non_square_source_is_not_guessed():
    table = torch.randn(1, 1 + 12 * 20, 8)
    with pytest.raises(ValueError, match="old_grid"):
        resample_pos_embed(table, (14, 14))
    # a square token count from a non-square grid: only old_grid tells them apart, and it is honoured
    table = torch.randn(1, 1 + 64, 8)
    a = resample_pos_embed(table, (6, 6), old_grid=(4, 16))
    b = resample_pos_embed(table, (6, 6), old_grid=(8, 8))
    assert not torch.allclose(a, b)


def test_token_count_matching_neither_grid():
    table = torch.randn(1, 1 + 196, 8)
    with pytest.raises(ValueError, match="neither"):
        resample_pos_embed(table, (10, 10), old_grid=(12, 12))
    with pytest.raises(ValueError, match="neither"):
        resample_pos_embed(table, (14, 14), old_grid=(12, 16))
    with pytest.raises(ValueError, match="num_prefix_tokens"):
        resample_pos_embed(table[:, :1], (4, 4))


def test_equal_grids_return_the_input():
    table = torch.randn(1, 1 + 6 * 8, 8)
    assert resample_pos_embed(table, (6, 8), old_grid=(6, 8)) is table


def test_bfloat16_in_bfloat16_out():
    table = torch.randn(1, 1 + 196, 16)
    out = resample_pos_embed(table.bfloat16(), (17, 12))
    assert out.dtype == torch.bfloat16
    ref = resample_abs_pos_embed(table.bfloat16(), [17, 12])
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(out.float(), resample_pos_embed(table, (17, 12)), rtol=1e-2, atol=2e-2)


def test_unbatched_and_batched_tables():
    table = torch.randn(3, 1 + 25, 8)
    out = resample_pos_embed(table, (3, 7))
    assert out.shape == (3, 22, 8)
    torch.testing.assert_close(resample_pos_embed(table[1], (3, 7)), out[1])


@given(old_h=st.integers(1, 9), old_w=st.integers(1, 9), new_h=st.integers(1, 9), new_w=st.integers(1, 9),
       prefix=st.integers(0, 3))
def test_property_matches_timm_on_random_grids(old_h, old_w, new_h, new_w, prefix):
    table = torch.randn(1, prefix + old_h * old_w, 4)
    ours = resample_pos_embed(table, (new_h, new_w), old_grid=(old_h, old_w), num_prefix_tokens=prefix)
    ref = resample_abs_pos_embed(table, [new_h, new_w], old_size=[old_h, old_w], num_prefix_tokens=prefix)
    torch.testing.assert_close(ours, ref, rtol=0, atol=0)
    torch.testing.assert_close(ours[:, :prefix], table[:, :prefix])


def test_bad_inputs():
    table = torch.randn(1, 17, 8)
    with pytest.raises(ValueError, match="new_grid"):
        resample_pos_embed(table, (0, 4))
    with pytest.raises(ValueError, match="new_grid"):
        resample_pos_embed(table, (4, -2))
    with pytest.raises(ValueError, match="old_grid"):
        resample_pos_embed(table, (4, 4), old_grid=(0, 16))
    with pytest.raises(ValueError, match="mode"):
        resample_pos_embed(table, (4, 4), mode="lanczos")
    with pytest.raises(ValueError, match="antialias"):
        resample_pos_embed(table, (3, 3), mode="nearest")
    with pytest.raises(TypeError, match="floating"):
        resample_pos_embed(torch.zeros(1, 17, 8, dtype=torch.long), (3, 3))
    with pytest.raises(ValueError, match=r"\[N, D\]"):
        resample_pos_embed(torch.zeros(17), (3, 3))


def test_zero_channels_is_refused_by_name():  # issue 14: D=0 leaked a RuntimeError from F.interpolate
    with pytest.raises(ValueError, match="pos_embed has 0 channels"):
        resample_pos_embed(torch.zeros(1, 17, 0), (3, 3))
    with pytest.raises(ValueError, match="table has 0 channels"):
        resample_pos_embed_per_image(torch.zeros(4, 4, 0), [(2, 2)], max_length=4)


# -- one table per image (SigLIP2 / NaFlexViT) -----------------------------------------------------------------------

GRIDS = [(8, 20), (16, 16), (8, 20), (3, 5), (24, 24), (1, 1), (3, 5), (20, 8)]


#: SigLIP2's resize_positional_embeddings: one F.interpolate per image up to transformers 4.x (verified 4.57.1: our
#: exact=True is bit for bit), dense float32 separable weights from 5.24 (verified 5.24.0: our default path within
#: float32 summation order). Intermediate 5.x releases are not verified.
SIGLIP2_INTERPOLATES = Version(transformers.__version__) < Version("5.24")
#: width-1 target grids, where F.interpolate's antialias kernels on NCHW-contiguous images (SigLIP2's layout) are
#: not the separable operator (see
#: test_width_one_grids_follow_the_formula_by_default)
WIDTH_ONE = [(32, 1), (5, 1)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_per_image_equals_siglip2_resize_positional_embeddings(dtype):
    from transformers.models.siglip2.modeling_siglip2 import Siglip2VisionEmbeddings

    table = torch.randn(16, 16, 32).to(dtype)  # SigLIP2: position_embedding.weight.reshape(16, 16, D)
    grids = torch.tensor(GRIDS + WIDTH_ONE)
    ref = Siglip2VisionEmbeddings.resize_positional_embeddings(table, grids, max_length=600)
    out, mask = resample_pos_embed_per_image(table, grids, max_length=600, padding="first", exact=True)
    fast, _ = resample_pos_embed_per_image(table, grids, max_length=600, padding="first")  # separable matrices
    assert out.dtype == fast.dtype == dtype and mask.dtype == torch.bool
    assert mask.sum(1).tolist() == [h * w for h, w in GRIDS + WIDTH_ONE]
    # float32 summation order, then at most one bfloat16 rounding step
    rtol, atol = (0, 1e-5) if dtype == torch.float32 else (2**-7, 1e-5)
    n = len(GRIDS)
    if SIGLIP2_INTERPOLATES:  # transformers 4.x: F.interpolate per image, width-1 grids included
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
        torch.testing.assert_close(fast[:n].float(), ref[:n].float(), rtol=rtol, atol=atol)
        assert not torch.allclose(fast[n:].float(), ref[n:].float(), atol=0.1)
    else:  # transformers 5.24: the separable operator in float32, width-1 grids included
        torch.testing.assert_close(fast.float(), ref.float(), rtol=rtol, atol=atol)
        torch.testing.assert_close(out[:n].float(), ref[:n].float(), rtol=rtol, atol=atol)
        assert not torch.allclose(out[n:].float(), ref[n:].float(), atol=0.1)
    zeros, mask_zeros = resample_pos_embed_per_image(table, grids, max_length=600, exact=True)  # timm's padding
    torch.testing.assert_close(zeros[mask], out[mask], rtol=0, atol=0)
    assert bool((zeros[~mask] == 0).all()) and torch.equal(mask, mask_zeros)


def _aa_weights(n_in, n_out, mode):
    """``[n_out, n_in]`` float64 antialiased 1-D resampling weights from the formula (PIL / PyTorch's AA kernels:
    the filter stretched by the downscale factor, taps normalised to sum 1), independent of F.interpolate."""
    scale = n_in / n_out
    support = max(scale, 1.0)
    centre = (torch.arange(n_out, dtype=torch.float64) + 0.5) * scale
    x = ((torch.arange(n_in, dtype=torch.float64) + 0.5)[None, :] - centre[:, None]).abs() / support
    if mode == "bilinear":
        w = (1 - x).clamp(min=0)
    else:  # Keys cubic, a = -0.5 (PyTorch's antialiased bicubic)
        a = -0.5
        w = torch.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                        torch.where(x < 2, ((a * x - 5 * a) * x + 8 * a) * x - 4 * a, torch.zeros_like(x)))
    return w / w.sum(1, keepdim=True)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_width_one_grids_follow_the_formula_by_default(mode):
    # issue 24: for (h, 1) targets F.interpolate's antialias kernel on an NCHW-contiguous image (SigLIP2 4.x's
    # layout) is not the separable operator; the default path is (checked against the formula in float64), as are
    # resample_pos_embed and timm (channels-last images); exact=True keeps SigLIP2 4.x's F.interpolate numbers
    table = torch.randn(16, 12, 8, dtype=torch.float64)
    grids = [*WIDTH_ONE, (8, 1), (1, 7), (16, 1), (7, 5)]
    out, _ = resample_pos_embed_per_image(table, grids, max_length=40, mode=mode)
    exact, _ = resample_pos_embed_per_image(table, grids, max_length=40, mode=mode, exact=True)
    for i, (h, w) in enumerate(grids):
        expected = torch.einsum("ha,abd,wb->hwd", _aa_weights(16, h, mode), table, _aa_weights(12, w, mode))
        torch.testing.assert_close(out[i, : h * w], expected.reshape(h * w, 8), rtol=0, atol=1e-12)
        interpolated = torch.nn.functional.interpolate(table.permute(2, 0, 1)[None], size=(h, w), mode=mode,
                                                       antialias=True, align_corners=False)
        torch.testing.assert_close(exact[i, : h * w], interpolated[0].flatten(1).T, rtol=0, atol=0)
        quirk = w == 1 and h != 16
        assert torch.allclose(exact[i, : h * w], out[i, : h * w], atol=1e-12) != quirk, (h, w)
        flat = table.reshape(1, 16 * 12, 8)
        torch.testing.assert_close(resample_pos_embed(flat, (h, w), old_grid=(16, 12), num_prefix_tokens=0, mode=mode),
                                   expected.reshape(1, h * w, 8), rtol=0, atol=1e-12)
        timm_out = resample_abs_pos_embed(flat.float(), [h, w], old_size=[16, 12], num_prefix_tokens=0,
                                          interpolation=mode)  # timm 1.0.31, float32
        torch.testing.assert_close(timm_out.double(), expected.reshape(1, h * w, 8), rtol=0, atol=1e-5)


@pytest.mark.parametrize("mode, antialias", [("bilinear", True), ("bilinear", False), ("bicubic", True),
                                             ("bicubic", False), ("nearest", False), ("nearest-exact", False),
                                             ("area", False)])
def test_per_image_separable_resampling_equals_interpolate_in_every_mode(mode, antialias):
    table = torch.randn(16, 12, 24, dtype=torch.float64)
    out, _ = resample_pos_embed_per_image(table, GRIDS, max_length=600, mode=mode, antialias=antialias)
    ref, _ = resample_pos_embed_per_image(table, GRIDS, max_length=600, mode=mode, antialias=antialias, exact=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)  # float64: the separable form is the same operator
    out32, _ = resample_pos_embed_per_image(table.float(), GRIDS, max_length=600, mode=mode, antialias=antialias)
    torch.testing.assert_close(out32.double(), ref, rtol=0, atol=1e-5)


def test_per_image_equals_timm_naflexvit_learned_path():
    import timm

    from omnipos.vision import packed_patch_coords

    torch.manual_seed(0)
    model = timm.create_model("naflexvit_base_patch16_gap", pretrained=False, depth=1, embed_dim=32, num_heads=2)
    embeds = model.embeds
    with torch.no_grad():
        embeds.pos_embed.normal_()
    max_length = 600
    coords, cu = packed_patch_coords(GRIDS)
    patch_coord = torch.zeros(len(GRIDS), max_length, 2, dtype=torch.long)
    for i in range(len(GRIDS)):  # NaFlex's padded [B, N, 2] layout: each image's own row-major coordinates first
        patch_coord[i, : cu[i + 1] - cu[i]] = coords[cu[i]: cu[i + 1]]
    x = torch.zeros(len(GRIDS), max_length, 32)
    with torch.no_grad():
        embeds._apply_learned_naflex_pos_embed(x, patch_coord)
        out, _ = resample_pos_embed_per_image(embeds.pos_embed, GRIDS, max_length=max_length,
                                                 mode=embeds.pos_embed_interp_mode, exact=True)  # bicubic, AA
        fast, _ = resample_pos_embed_per_image(embeds.pos_embed, GRIDS, max_length=max_length,
                                               mode=embeds.pos_embed_interp_mode)
    torch.testing.assert_close(out, x, rtol=0, atol=0)
    torch.testing.assert_close(fast, x, rtol=0, atol=1e-5)


def test_per_image_flat_table_with_prefix_rows_equals_resample_pos_embed():
    table = torch.randn(1 + 12 * 20, 16)  # a timm ViT table (cls row first) trained on a 12 x 20 grid
    out, mask = resample_pos_embed_per_image(table, GRIDS, max_length=1 + 576, old_grid=(12, 20), num_prefix_tokens=1,
                                             mode="bicubic", exact=True)
    for i, grid in enumerate(GRIDS):
        ref = resample_pos_embed(table, grid, old_grid=(12, 20), num_prefix_tokens=1)
        torch.testing.assert_close(out[i, : 1 + grid[0] * grid[1]], ref, rtol=0, atol=0)
        assert mask[i].sum() == 1 + grid[0] * grid[1]


@pytest.mark.parametrize("grad", [False, True])
def test_per_image_table_at_its_own_grid_is_the_table_and_wide_and_tall_grids_follow_the_formula(grad):
    """A grid equal to the table's is the table's rows bit for bit, as F.interpolate returns its input (the
    separable path multiplied by identity matrices, so a non-finite entry made NaN of every row: 0 * inf; failed
    before); a grid of the table's height resamples each row alone. Wide and tall grids (each resampled along its
    shorter side first) are the float64 formula's, on the eager CPU path and under autograd alike."""
    table = torch.randn(6, 10, 8, dtype=torch.float64)
    table[2, 3, 5] = float("inf")
    source = table.clone().requires_grad_() if grad else table
    out, _ = resample_pos_embed_per_image(source, [(6, 10), (6, 4)], max_length=60)
    assert torch.equal(out[0].detach(), table.reshape(60, 8))
    finite = torch.isfinite(out[1, :24].detach().reshape(6, 4, 8))
    assert bool(finite[torch.arange(6) != 2].all())  # rows other than the inf's row are untouched by it
    smooth = torch.randn(6, 10, 8, dtype=torch.float64)
    source = smooth.clone().requires_grad_() if grad else smooth
    grids = [(3, 17), (17, 3), (6, 25), (25, 10), (1, 9), (9, 1)]
    out, _ = resample_pos_embed_per_image(source, grids, max_length=250)
    for i, (h, w) in enumerate(grids):  # the formula in float64, independent of F.interpolate
        expected = torch.einsum("ia,jb,abd->ijd", _aa_weights(6, h, "bilinear"), _aa_weights(10, w, "bilinear"),
                                smooth)
        torch.testing.assert_close(out[i, : h * w].detach(), expected.reshape(h * w, 8), rtol=0, atol=1e-12)


def test_per_image_list_and_tensor_grids_agree_and_images_are_batch_invariant():
    table = torch.randn(7, 9, 8, dtype=torch.float64)
    out, mask = resample_pos_embed_per_image(table, torch.tensor(GRIDS), max_length=576)
    out_list, mask_list = resample_pos_embed_per_image(table, GRIDS, max_length=576)
    assert torch.equal(mask, mask_list)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, out_list, rtol=0, atol=0)
    for i, grid in enumerate(GRIDS):  # an image's rows do not depend on the other images in the batch
        alone, _ = resample_pos_embed_per_image(table, [grid], max_length=576)
        torch.testing.assert_close(out[i], alone[0], rtol=0, atol=0)
    empty, empty_mask = resample_pos_embed_per_image(table, [], max_length=4)
    assert empty.shape == (0, 4, 8) and empty_mask.shape == (0, 4)


def test_per_image_max_length_too_small_names_the_image():
    with pytest.raises(ValueError, match="max_length=300 is smaller than image 4's"):
        resample_pos_embed_per_image(torch.randn(4, 4, 8), torch.tensor(GRIDS[:5]), max_length=300)
    with pytest.raises(ValueError, match="max_length=15 is smaller than image 1's 1 prefix"):
        resample_pos_embed_per_image(torch.randn(17, 8), [(2, 2), (3, 5)], max_length=15, num_prefix_tokens=1)


def test_per_image_bad_inputs():
    table = torch.randn(4, 4, 8)
    with pytest.raises(ValueError, match=r"grids\[1\]"):
        resample_pos_embed_per_image(table, torch.tensor([[2, 2], [0, 3]]), max_length=16)
    with pytest.raises(ValueError, match=r"grids\[0\]"):
        resample_pos_embed_per_image(table, [(2, -1)], max_length=16)
    with pytest.raises(TypeError, match="grids"):
        resample_pos_embed_per_image(table, torch.tensor([[2.0, 2.0]]), max_length=16)
    with pytest.raises(ValueError, match=r"grids must be \[B, 2\]"):
        resample_pos_embed_per_image(table, torch.tensor([2, 2]), max_length=16)
    with pytest.raises(ValueError, match="padding"):
        resample_pos_embed_per_image(table, [(2, 2)], max_length=16, padding="last")
    with pytest.raises(ValueError, match="max_length"):
        resample_pos_embed_per_image(table, [(2, 2)], max_length=0)
    with pytest.raises(ValueError, match="old_grid"):
        resample_pos_embed_per_image(table, [(2, 2)], max_length=16, old_grid=(2, 8))
    with pytest.raises(ValueError, match="not a square grid"):
        resample_pos_embed_per_image(torch.randn(12, 8), [(2, 2)], max_length=16)
    with pytest.raises(ValueError, match="num_prefix_tokens"):
        resample_pos_embed_per_image(table, [(2, 2)], max_length=16, num_prefix_tokens=1)
    with pytest.raises(TypeError, match="floating"):
        resample_pos_embed_per_image(table.long(), [(2, 2)], max_length=16)


# -- gradients (issue 24: the backward must compile at any size) -----------------------------------------------------

@pytest.mark.parametrize("mode, antialias", [("bicubic", True), ("bilinear", True), ("bicubic", False),
                                             ("nearest", False), ("area", False)])
@pytest.mark.parametrize("old, new", [((4, 6), (7, 5)), ((5, 5), (3, 2)), ((4, 6), (9, 1)), ((6, 1), (3, 1)),
                                      ((1, 4), (1, 7))])
def test_backward_equals_interpolate_autograd(mode, antialias, old, new):
    # the backward is matrix products with F.interpolate's own operator (separable factors; for width-1 targets the
    # dense operator read off in the input's layout); compared with F.interpolate's own backward in float64
    table = torch.randn(1, 1 + old[0] * old[1], 6, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(1, 1 + new[0] * new[1], 6, dtype=torch.float64)
    out = resample_pos_embed(table, new, old_grid=old, mode=mode, antialias=antialias)
    (grad,) = torch.autograd.grad((out * weight).sum(), table)
    image = table[:, 1:].reshape(1, *old, 6).permute(0, 3, 1, 2)
    kwargs = {"antialias": antialias, "align_corners": False} if mode in ("bicubic", "bilinear") else {}
    ref_out = torch.nn.functional.interpolate(image, size=new, mode=mode, **kwargs).permute(0, 2, 3, 1)
    (ref,) = torch.autograd.grad((ref_out.reshape(1, -1, 6) * weight[:, 1:]).sum(), table)
    ref[:, 0] += weight[0, 0]
    torch.testing.assert_close(out[:, 1:], ref_out.reshape(1, -1, 6).detach(), rtol=0, atol=0)  # forward: timm's bits
    torch.testing.assert_close(grad, ref, rtol=0, atol=1e-12)
    if antialias and new[1] == 1:  # width-1 targets: a dense operator, read off in the input's memory layout
        assert torch.autograd.gradcheck(
            lambda t: resample_pos_embed(t, new, old_grid=old, mode=mode, antialias=antialias), (table,))


def test_backward_is_twice_differentiable_and_per_image_exact_path_too():
    table = torch.randn(1, 1 + 12, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: resample_pos_embed(t, (5, 2), old_grid=(3, 4)), (table,))
    assert torch.autograd.gradgradcheck(lambda t: resample_pos_embed(t, (5, 1), old_grid=(3, 4)), (table,))
    flat = torch.randn(12, 4, dtype=torch.float64, requires_grad=True)
    for mode in ("bilinear", "bicubic"):  # the exact path's layout differs from resample_pos_embed's
        assert torch.autograd.gradcheck(
            lambda t: resample_pos_embed_per_image(t, [(5, 2), (2, 1), (7, 1)], max_length=14, old_grid=(3, 4),
                                                   mode=mode, exact=True)[0], (flat,))


def test_per_image_accepts_timm_pos_embed_as_stored():
    # issue 28: a timm ViT's pos_embed [1, P + h0 * w0, D] was refused even with old_grid=
    stored = torch.randn(1, 1 + 12 * 20, 16)  # class row + a 12 x 20 grid
    grids = [(8, 20), (3, 5)]
    ref, ref_mask = resample_pos_embed_per_image(stored[0], grids, max_length=200, old_grid=(12, 20),
                                                 num_prefix_tokens=1, mode="bicubic", exact=True)
    out, mask = resample_pos_embed_per_image(stored, grids, max_length=200, old_grid=(12, 20), num_prefix_tokens=1,
                                             mode="bicubic", exact=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    assert torch.equal(mask, ref_mask)
    for i, grid in enumerate(grids):  # and each image's rows are resample_pos_embed's (timm's numbers)
        alone = resample_pos_embed(stored, grid, old_grid=(12, 20), num_prefix_tokens=1)[0]
        torch.testing.assert_close(out[i, : alone.shape[0]], alone, rtol=0, atol=0)
    square = torch.randn(1, 16, 8)  # no prefix, square N: a 4 x 4 grid (no_embed_class models)
    out, _ = resample_pos_embed_per_image(square, [(2, 3)], max_length=6, exact=True)
    torch.testing.assert_close(out[0], resample_pos_embed(square[0], (2, 3), num_prefix_tokens=0, mode="bilinear"),
                               rtol=0, atol=0)
    with_prefix = torch.randn(1, 1 + 16, 8)  # square after the prefix
    out, _ = resample_pos_embed_per_image(with_prefix, [(2, 3)], max_length=7, num_prefix_tokens=1, exact=True)
    torch.testing.assert_close(out[0], resample_pos_embed(with_prefix[0], (2, 3), mode="bilinear"), rtol=0, atol=0)
    # a genuine 1 x N grid table: old_grid=(1, N) (or a non-square N) keeps that reading
    strip = torch.randn(1, 16, 8)
    out, _ = resample_pos_embed_per_image(strip, [(1, 5)], max_length=5, old_grid=(1, 16), exact=True)
    expected = torch.nn.functional.interpolate(strip.permute(2, 0, 1)[None], size=(1, 5), mode="bilinear",
                                               antialias=True, align_corners=False)[0].flatten(1).T
    torch.testing.assert_close(out[0], expected, rtol=0, atol=0)
    out, _ = resample_pos_embed_per_image(torch.randn(1, 6, 8), [(1, 3)], max_length=3)
    assert out.shape == (1, 3, 8)
    with pytest.raises(ValueError, match="old_grid"):  # fits neither reading
        resample_pos_embed_per_image(stored, grids, max_length=300, old_grid=(12, 12), num_prefix_tokens=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("exact", [False, True])
def test_per_image_numpy_path_equals_the_autograd_path_bit_for_bit(dtype, exact):
    """Outside autograd on CPU the bank of resampled grids is written in place and the rows gathered by NumPy;
    under autograd the torch operations run. Same numbers, bit for bit, on random tables (prefix rows, both
    paddings, repeated and width-1 grids)."""
    torch.manual_seed(3)
    table = torch.randn(2 + 7 * 9, 24, dtype=torch.float64).to(dtype)  # flat: 2 prefix rows, then a 7 x 9 grid
    grids = torch.tensor([(5, 6), (7, 9), (5, 6), (3, 1), (12, 4), (7, 9)])
    for padding in ("zeros", "first"):
        kwargs = dict(max_length=70, old_grid=(7, 9), num_prefix_tokens=2, padding=padding, exact=exact)
        with torch.no_grad():
            fast, mask = resample_pos_embed_per_image(table, grids, **kwargs)
        slow, slow_mask = resample_pos_embed_per_image(table.clone().requires_grad_(), grids, **kwargs)
        assert slow.requires_grad and not fast.requires_grad
        assert fast.dtype == dtype and fast.is_contiguous() and torch.equal(mask, slow_mask)
        assert torch.equal(fast, slow.detach())
        fast += 1  # an ordinary tensor the caller may write to


def test_per_image_bagged_passes_follow_the_formula_and_the_autograd_path_bit_for_bit():
    """On the CPU each 1-D pass sums only the input rows with non-zero weights (one embedding_bag, issue 38). Read
    off as a matrix (the pass applied to an identity), a pass is exactly ``I_outer (x) W (x) I_inner`` with ``W``
    read off ``F.interpolate``, and its backward pass exactly the transpose; it reads fewer rows than the dense
    product; the float64 result is the formula's, float32 eager equals autograd and a table of other strides, and
    the path is differentiable twice."""
    from omnipos.vision.resample import (
        _axis_weights,
        _cached_pass_bags,
        _embedding_bag_pass,
    )

    cpu = torch.device("cpu")
    for n_in, n_out, outer, inner, mode, antialias in ((16, 40, 3, 1, "bilinear", True),
                                                       (16, 6, 1, 5, "bilinear", True),
                                                       (7, 30, 2, 3, "bicubic", True), (30, 7, 1, 1, "bicubic", False),
                                                       (9, 4, 2, 2, "nearest", False), (5, 11, 1, 2, "area", False)):
        weights = _axis_weights(n_in, n_out, mode, antialias, torch.float64, cpu)
        expected = torch.kron(torch.kron(torch.eye(outer, dtype=torch.float64), weights),
                              torch.eye(inner, dtype=torch.float64))
        rows = outer * n_in * inner
        operator = _embedding_bag_pass(torch.eye(rows, dtype=torch.float64), n_in, n_out, outer, inner, mode,
                                       antialias, False)  # column r: what input row r contributes to each output
        torch.testing.assert_close(operator, expected, rtol=0, atol=0)
        backward = _embedding_bag_pass(torch.eye(outer * n_out * inner, dtype=torch.float64), n_out, n_in, outer,
                                       inner, mode, antialias, True)
        torch.testing.assert_close(backward, expected.T, rtol=0, atol=0)
        taps = _cached_pass_bags(n_in, n_out, 1, 1, mode, antialias, torch.float64)[0].numel()
        assert taps == int((weights != 0).sum()) and (taps < n_in * n_out or n_out <= 7)
    torch.manual_seed(5)
    table = torch.randn(16, 16, 768, dtype=torch.float64)
    grids = [(40, 6), (6, 40), (21, 12), (12, 21), (16, 9)]
    out, _ = resample_pos_embed_per_image(table, grids, max_length=256)
    for i, (h, w) in enumerate(grids):
        expected = torch.einsum("ia,jb,abd->ijd", _aa_weights(16, h, "bilinear"), _aa_weights(16, w, "bilinear"),
                                table)
        torch.testing.assert_close(out[i, : h * w], expected.reshape(h * w, 768), rtol=0, atol=1e-12)
    table32 = table.float()
    with torch.no_grad():
        fast, _ = resample_pos_embed_per_image(table32, grids, max_length=256, padding="first")
    slow, _ = resample_pos_embed_per_image(table32.clone().requires_grad_(), grids, max_length=256, padding="first")
    assert torch.equal(fast, slow.detach())
    slow.sum().backward()
    strided = table32.permute(2, 0, 1).contiguous().permute(1, 2, 0)  # channels outermost in memory
    with torch.no_grad():
        assert torch.equal(resample_pos_embed_per_image(strided, grids, max_length=256, padding="first")[0], fast)
    small = torch.randn(5, 7, 3, dtype=torch.float64, requires_grad=True)
    grids = [(9, 4), (2, 11), (5, 3)]
    assert torch.autograd.gradcheck(lambda t: resample_pos_embed_per_image(t, grids, max_length=36)[0], (small,))
    assert torch.autograd.gradgradcheck(lambda t: resample_pos_embed_per_image(t, grids, max_length=36)[0], (small,))
