"""RotaryEmbedding2D against timm's RotaryEmbeddingCat (ij / xy, EVA02 reference grid, half layout) and
RotaryEmbeddingMixed (RoPE-Mixed). Peer version verified: timm 1.0.31."""

import pytest
import torch
from timm.layers.pos_embed_sincos import (
    RotaryEmbeddingCat,
    RotaryEmbeddingMixed,
    apply_rot_embed_cat,
)

from omnipos.vision import RotaryEmbedding2D


def _timm_rotate(x, emb, half=False):
    return apply_rot_embed_cat(x.double(), emb.double(), half=half).to(x.dtype)


@pytest.mark.parametrize(
    "kwargs, timm_kwargs, grid",
    [
        (dict(indexing="ij"), dict(grid_indexing="ij"), (5, 7)),  # timm default / rotary-embedding-torch axial
        (dict(indexing="xy", base=100.0), dict(grid_indexing="xy", temperature=100), (6, 4)),  # rope-vit axial
        (dict(indexing="ij", ref_grid=(16, 16)), dict(grid_indexing="ij", ref_feat_shape=[16, 16]), (24, 20)),  # EVA02
        (dict(indexing="ij", layout="half"), dict(grid_indexing="ij", rotate_half=True), (3, 9)),
    ],
)
def test_axial_matches_timm_rotary_embedding_cat(kwargs, timm_kwargs, grid):
    head_dim = 32
    ours = RotaryEmbedding2D(head_dim, **kwargs)
    ref = RotaryEmbeddingCat(head_dim, in_pixels=False, **timm_kwargs)
    emb = ref.get_embed(list(grid))  # [N, 2 * head_dim] = [sin | cos]
    sin_ref, cos_ref = emb.chunk(2, dim=-1)
    cos, sin = ours.cos_sin(grid)
    torch.testing.assert_close(cos, cos_ref, rtol=0, atol=2e-5)  # timm forms angles in float32
    torch.testing.assert_close(sin, sin_ref, rtol=0, atol=2e-5)
    q, k = torch.randn(2, 3, 1 + grid[0] * grid[1], head_dim), torch.randn(2, 3, 1 + grid[0] * grid[1], head_dim)
    q_rot, k_rot = ours(q, k, grid, num_prefix_tokens=1)
    half = kwargs.get("layout") == "half"
    torch.testing.assert_close(q_rot[:, :, 1:], _timm_rotate(q[:, :, 1:], emb, half), rtol=0, atol=1e-4)
    torch.testing.assert_close(k_rot[:, :, 1:], _timm_rotate(k[:, :, 1:], emb, half), rtol=0, atol=1e-4)
    assert torch.equal(q_rot[:, :, :1], q[:, :, :1])  # the class token is not rotated
    torch.testing.assert_close(ours.rotate(q, grid, num_prefix_tokens=1), q_rot)


def test_mixed_matches_timm_rotary_embedding_mixed():
    heads, head_dim, grid = 3, 16, (4, 6)
    ref = RotaryEmbeddingMixed(heads * head_dim, depth=1, num_heads=heads, grid_indexing="xy")
    ours = RotaryEmbedding2D(head_dim, indexing="xy", mixed=True, num_heads=heads)
    with torch.no_grad():
        ours.freqs.copy_(ref.freqs[:, 0])
    emb = ref.get_embed(list(grid))[0]  # [heads, N, 2 * head_dim]
    sin_ref, cos_ref = emb.chunk(2, dim=-1)
    cos, sin = ours.cos_sin(grid)
    torch.testing.assert_close(cos, cos_ref, rtol=0, atol=2e-5)
    torch.testing.assert_close(sin, sin_ref, rtol=0, atol=2e-5)
    q = torch.randn(2, heads, grid[0] * grid[1], head_dim)
    q_rot, _ = ours(q, q, grid)
    torch.testing.assert_close(q_rot, apply_rot_embed_cat(q, emb), rtol=0, atol=1e-5)
    q_rot.square().sum().backward()
    assert ours.freqs.grad is not None and ours.freqs.grad.abs().sum() > 0


def test_mixed_initialisation_follows_rope_vit():
    ours = RotaryEmbedding2D(16, mixed=True, num_heads=4, mixed_temperature=10.0)
    magnitude = torch.linalg.vector_norm(ours.freqs, dim=0)  # |(f0, f1)| per head and slot
    expected = 10.0 ** (-torch.arange(0, 16, 4) / 16)
    torch.testing.assert_close(magnitude, expected.repeat(2).expand(4, -1), rtol=1e-6, atol=1e-6)


def test_scores_depend_only_on_the_offset_between_patches():
    rope = RotaryEmbedding2D(16, indexing="ij")
    q, k = torch.randn(16), torch.randn(16)
    grid = (6, 6)
    qs = rope.rotate(q.expand(1, 36, 16), grid)[0].reshape(6, 6, 16)
    ks = rope.rotate(k.expand(1, 36, 16), grid)[0].reshape(6, 6, 16)
    a = qs[1, 2] @ ks[3, 1]  # offset (2, -1)
    b = qs[3, 4] @ ks[5, 3]
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_bfloat16_in_bfloat16_out():
    rope = RotaryEmbedding2D(32)
    q = torch.randn(1, 2, 1 + 20, 32)
    out = rope.rotate(q.bfloat16(), (4, 5), num_prefix_tokens=1)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), rope.rotate(q, (4, 5), num_prefix_tokens=1), rtol=1e-2, atol=2e-2)


def test_bad_inputs():
    with pytest.raises(ValueError, match="divisible by 4"):
        RotaryEmbedding2D(30)
    with pytest.raises(ValueError, match="num_heads"):
        RotaryEmbedding2D(32, mixed=True)
    with pytest.raises(ValueError, match="indexing"):
        RotaryEmbedding2D(32, indexing="yx")
    rope = RotaryEmbedding2D(32)
    with pytest.raises(ValueError, match="tokens"):
        rope.rotate(torch.randn(1, 2, 21, 32), (4, 5))
    with pytest.raises(ValueError, match="grid"):
        rope.rotate(torch.randn(1, 2, 20, 32), (0, 5))
    with pytest.raises(ValueError, match="head_dim"):
        rope.rotate(torch.randn(1, 2, 20, 16), (4, 5))


def _reference_block_attention(attn, x, rope_embed, prefix):
    """timm Attention with EVA's RoPE applied by hand: timm's apply_rot_embed_cat on the patch tokens."""
    B, N, C = x.shape
    qkv = attn.qkv(x).reshape(B, N, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    q = torch.cat([q[:, :, :prefix], apply_rot_embed_cat(q[:, :, prefix:], rope_embed)], dim=2)
    k = torch.cat([k[:, :, :prefix], apply_rot_embed_cat(k[:, :, prefix:], rope_embed)], dim=2)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    return attn.proj(out.transpose(1, 2).reshape(B, N, C))


@pytest.mark.parametrize("indexing, ref_grid", [("ij", None), ("xy", (8, 8))])
def test_adapt_vit_with_rope_equals_hand_built_eva_attention(indexing, ref_grid):
    import timm

    from omnipos.vision.timm import adapt_vit

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=1, reg_tokens=2).eval()
    rope = RotaryEmbedding2D(64, indexing=indexing, ref_grid=ref_grid)
    adapt_vit(model, encoding="rope", rope=rope)
    assert model.pos_embed is None
    x = torch.randn(2, 3, 112, 80)
    grid = (7, 5)
    timm_rope = RotaryEmbeddingCat(64, in_pixels=False, grid_indexing=indexing,
                                   ref_feat_shape=None if ref_grid is None else list(ref_grid))
    with torch.no_grad():
        tokens = model._pos_embed(model.patch_embed(x))  # [B, 3 + 35, C], no additive positions
        block = model.blocks[0]
        expected = tokens + block.ls1(_reference_block_attention(block.attn, block.norm1(tokens),
                                                                 timm_rope.get_embed(list(grid)), 3))
        expected = expected + block.ls2(block.mlp(block.norm2(expected)))
        torch.testing.assert_close(model.forward_features(x), model.norm(expected), rtol=0, atol=1e-4)
        # the state dict keeps timm's keys, and a mixed batch gives each image what it gets alone
        assert set(model.state_dict()) == set(timm.create_model(
            "vit_tiny_patch16_224", pretrained=False, depth=1, reg_tokens=2, pos_embed="none").state_dict())
        small = torch.randn(1, 3, 64, 48)
        batch = torch.zeros(2, 3, 112, 80)
        batch[0], batch[1, :, :64, :48] = x[0], small[0]
        mixed = model(batch, image_sizes=[[112, 80], [64, 48]])
        torch.testing.assert_close(mixed[1], model(small)[0], rtol=0, atol=1e-4)
        torch.testing.assert_close(mixed[0], model(x[:1])[0], rtol=0, atol=1e-4)


def test_adapt_vit_rope_bad_inputs():
    import timm

    from omnipos.vision.timm import adapt_vit

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=1)
    with pytest.raises(ValueError, match="head_dim"):
        adapt_vit(model, encoding="rope", rope=RotaryEmbedding2D(32))
    with pytest.raises(TypeError, match="axial"):
        adapt_vit(model, encoding="rope", rope=RotaryEmbedding2D(64, mixed=True, num_heads=3))
    with pytest.raises(ValueError, match="encoding='rope'"):
        adapt_vit(model, rope=RotaryEmbedding2D(64))


# -- packed images (NaFlex / flash-attn varlen): [N_total, heads, head_dim] + coords + cu_seqlens ----------------------

PACKED_GRIDS = [(3, 4), (2, 5), (4, 4), (1, 1)]


@pytest.mark.parametrize("kwargs", [dict(indexing="ij"), dict(indexing="xy", base=100.0),
                                    dict(indexing="ij", ref_grid=(8, 8)), dict(layout="half"),
                                    dict(indexing="xy", mixed=True, num_heads=3)])
@pytest.mark.parametrize("prefix", [0, 2])
def test_packed_equals_each_image_alone(kwargs, prefix):
    from omnipos.vision import packed_patch_coords

    torch.manual_seed(0)
    rope = RotaryEmbedding2D(16, **kwargs)
    coords, cu = packed_patch_coords(PACKED_GRIDS, num_prefix_tokens=prefix)
    q, k = torch.randn(int(cu[-1]), 3, 16), torch.randn(int(cu[-1]), 3, 16)
    q_rot, k_rot = rope.forward_packed(q, k, coords, cu, num_prefix_tokens=prefix)
    torch.testing.assert_close(rope.rotate_packed(q, coords, cu, num_prefix_tokens=prefix), q_rot, rtol=0, atol=0)
    for i, grid in enumerate(PACKED_GRIDS):
        part = slice(int(cu[i]), int(cu[i + 1]))
        alone = rope.rotate(q[part].transpose(0, 1), grid, num_prefix_tokens=prefix).transpose(0, 1)  # [heads, N, d]
        torch.testing.assert_close(q_rot[part], alone, rtol=0, atol=1e-6)
        alone_k = rope.rotate(k[part].transpose(0, 1), grid, num_prefix_tokens=prefix).transpose(0, 1)
        torch.testing.assert_close(k_rot[part], alone_k, rtol=0, atol=1e-6)


def test_packed_ref_grid_reads_each_images_grid_from_its_coordinates_or_grids():
    from omnipos.vision import packed_patch_coords

    rope = RotaryEmbedding2D(16, ref_grid=(16, 16))
    coords, cu = packed_patch_coords(PACKED_GRIDS, num_prefix_tokens=1)
    derived = rope.cos_sin_packed(coords, cu, num_prefix_tokens=1)
    given_grids = rope.cos_sin_packed(coords, cu, num_prefix_tokens=1, grids=PACKED_GRIDS)
    torch.testing.assert_close(derived, given_grids, rtol=0, atol=0)
    cos, sin = derived
    assert torch.equal(cos[cu[:-1]], torch.ones(len(PACKED_GRIDS), 16))  # prefix tokens: no rotation
    assert torch.equal(sin[cu[:-1]], torch.zeros(len(PACKED_GRIDS), 16))


def test_packed_axial_x_may_have_any_middle_axes():
    rope = RotaryEmbedding2D(8)
    coords = torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]])
    x = torch.randn(4, 2, 3, 8)
    out = rope.rotate_packed(x, coords)
    torch.testing.assert_close(out[:, 1, 2], rope.rotate(x[:, 1, 2], (2, 2)), rtol=0, atol=1e-6)


def test_packed_bad_inputs():
    rope = RotaryEmbedding2D(8)
    coords = torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]])
    with pytest.raises(ValueError, match="N_total=4"):
        rope.rotate_packed(torch.randn(5, 2, 8), coords)
    with pytest.raises(ValueError, match=r"coords must be \[N_total, 2\]"):
        rope.rotate_packed(torch.randn(4, 2, 8), coords[:, :1])
    with pytest.raises(ValueError, match="coords"):
        rope.rotate_packed(torch.randn(4, 2, 8), coords.double().fill_(float("nan")))
    with pytest.raises(ValueError, match="cu_seqlens must start at 0 and end at the number of tokens 4"):
        rope.rotate_packed(torch.randn(4, 2, 8), coords, [0, 3])
    with pytest.raises(ValueError, match="non-decreasing"):
        rope.rotate_packed(torch.randn(4, 2, 8), coords, [0, 3, 1, 4])
    with pytest.raises(ValueError, match="image 1 has 1 tokens, fewer than num_prefix_tokens=2"):
        rope.rotate_packed(torch.randn(4, 2, 8), coords, [0, 3, 4], num_prefix_tokens=2)
    mixed = RotaryEmbedding2D(8, mixed=True, num_heads=2)
    with pytest.raises(ValueError, match="heads=2"):
        mixed.rotate_packed(torch.randn(4, 3, 8), coords)
    ref = RotaryEmbedding2D(8, ref_grid=(4, 4))
    with pytest.raises(ValueError, match="grids must be"):
        ref.rotate_packed(torch.randn(4, 2, 8), coords, [0, 2, 4], grids=[(2, 2)])


# -- module contract details (the harness runs the rest) --------------------------------------------------------------


def test_mixed_reset_parameters_redraws_like_init():
    torch.manual_seed(3)
    fresh = RotaryEmbedding2D(16, mixed=True, num_heads=4)
    torch.manual_seed(3)
    with torch.device("meta"):
        meta = RotaryEmbedding2D(16, mixed=True, num_heads=4)
    meta.to_empty(device="cpu")
    torch.manual_seed(3)
    meta.reset_parameters()
    torch.testing.assert_close(meta.freqs, fresh.freqs, rtol=0, atol=0)
    assert fresh.freqs.dtype == torch.float32
    assert RotaryEmbedding2D(16, mixed=True, num_heads=4, dtype=torch.float64).freqs.dtype == torch.float64


def test_mixed_in_float64_computes_in_float64():
    rope = RotaryEmbedding2D(16, mixed=True, num_heads=2).double()
    cos, _ = rope.cos_sin((3, 3))
    assert cos.dtype == torch.float64
    q = torch.randn(1, 2, 9, 16, dtype=torch.float64)
    angles = rope.mixed_angles(rope.positions((3, 3)))  # float64 reference of the rotation
    c, s = torch.cos(angles), torch.sin(angles)
    x0, x1 = q[..., 0::2], q[..., 1::2]
    expected = torch.stack([x0 * c - x1 * s, x1 * c + x0 * s], dim=-1).flatten(-2)
    torch.testing.assert_close(rope.rotate(q, (3, 3)), expected, rtol=0, atol=1e-13)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0, -10.0])
def test_mixed_base_must_be_finite_and_positive(value):  # issue 14: mixed_temperature=nan was accepted
    with pytest.raises(ValueError, match="mixed_base"):
        RotaryEmbedding2D(16, mixed=True, num_heads=2, mixed_base=value)
    with pytest.raises(ValueError, match="mixed_base"):
        RotaryEmbedding2D(16, mixed=True, num_heads=2, mixed_temperature=value)
