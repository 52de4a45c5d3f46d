"""The RoPE rotation kernels: autograd is the transpose (twice differentiable), cache-sized slabs change nothing."""


import pytest
import torch
from support.rope import randn

from omnipos.core import RotaryEmbedding, apply_rotary

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_autograd_is_the_transpose(layout):
    rope = RotaryEmbedding(12, layout=layout, rotary_dim=8)
    x = randn(2, 5, 12, seed=20, dtype=torch.float64).requires_grad_()
    positions = torch.arange(5) * 3
    assert torch.autograd.gradcheck(lambda t: rope.rotate(t, positions), (x,))
    grad = torch.autograd.grad(rope.rotate(x, positions).square().sum(), x)[0]
    torch.testing.assert_close(grad, 2 * x.detach(), rtol=1e-12, atol=1e-12)  # |R x|^2 = |x|^2


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_cache_sized_slabs_give_the_same_numbers(monkeypatch, dtype, layout):
    """Large tensors are rotated slab by slab; force tiny slabs and compare with the unsliced result."""
    from omnipos.core import rope_kernels

    rope = RotaryEmbedding(24, layout=layout, rotary_dim=16)
    q = randn(3, 4, 33, 24, seed=24, dtype=torch.float64).to(dtype)
    positions = torch.stack([torch.arange(33), torch.arange(33) + 500, torch.arange(33) * 2])
    whole = rope.rotate(q, positions)
    flash = rope.rotate(q.transpose(1, 2), positions, seq_dim=1)
    monkeypatch.setattr(rope_kernels, "_SLAB", 16)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    torch.testing.assert_close(rope.rotate(q, positions), whole, rtol=0, atol=0)
    torch.testing.assert_close(rope.rotate(q.transpose(1, 2), positions, seq_dim=1), flash, rtol=0, atol=0)
    torch.testing.assert_close(flash.transpose(1, 2), whole, rtol=0, atol=0)
    cos, sin = rope.cos_sin(positions, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    # (interleaved float64 goes through the complex product in the module: rounding differs in the last bit)
    torch.testing.assert_close(apply_rotary(q, cos[:, None], sin[:, None], layout=layout), whole, rtol=0, atol=1e-12)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_eager_rotation_is_twice_differentiable(layout):
    """Double backward through the eager _Rotate path (x requires grad, integer positions): its backward used
    mul(out=...) and raised "functions with out=... arguments don't support automatic differentiation"."""
    rope = RotaryEmbedding(12, rotary_dim=8, layout=layout)
    x = torch.randn(2, 5, 12, dtype=torch.float64, requires_grad=True)
    positions = torch.arange(5) * 3
    assert torch.autograd.gradgradcheck(lambda x: rope.rotate(x, positions), (x,))
    q, k = torch.randn(2, 5, 12, dtype=torch.float64, requires_grad=True), torch.randn(2, 5, 12, dtype=torch.float64)
    assert torch.autograd.gradgradcheck(lambda q: rope(q, k, positions)[0], (q,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("shape", [(1, 32, 1, 128), (4, 8, 1, 128), (1, 8, 16, 64), (2, 3, 5, 256)])
def test_decode_rotation_is_bitwise_the_general_one(dtype, shape):
    """The three-op rotation of small half-layout inputs (a decode step) gives rotate_pairs' bits, contiguous or
    not; the module uses it for q and k alike and returns the same tensors as before."""
    from omnipos.core import rope_kernels

    work = torch.float64 if dtype == torch.float64 else torch.float32
    half = shape[-1] // 2
    for seed in range(3):
        x = (randn(*shape, seed=seed, dtype=torch.float64) * 10).to(dtype)
        xt = (randn(shape[0], shape[2], shape[1], shape[3], seed=seed + 9, dtype=torch.float64)).to(dtype)
        c, s = randn(1, 1, shape[2], half, seed=seed + 1, dtype=work), randn(1, 1, shape[2], half, seed=seed + 2,
                                                                               dtype=work)
        for t in (x, xt.transpose(1, 2)):
            assert rope_kernels.small_rotation_applies(t, "half", shape[-1])
            want = rope_kernels.rotate_pairs(t, c, -s, c, s, "half", shape[-1])
            got = rope_kernels.rotate_swapped(t, torch.cat((c, c), -1), torch.cat((-s, s), -1))
            assert torch.equal(got, want)
    rope = RotaryEmbedding(shape[-1], base=5e5)
    q, k = x, (randn(*shape, seed=7, dtype=torch.float64)).to(dtype)
    pos = torch.arange(4096, 4096 + shape[2])
    cos, sin = rope._half_cos_sin(pos, work)
    cos, sin = cos.view(1, 1, shape[2], half), sin.view(1, 1, shape[2], half)
    got = rope(q, k, pos)
    for a, t in zip(got, (q, k)):
        assert torch.equal(a, rope_kernels.rotate_pairs(t, cos, -sin, cos, sin, "half", shape[-1]))


def test_decode_rotation_leaves_what_it_cannot_serve():
    from omnipos.core import rope_kernels

    x = torch.randn(1, 4, 1, 128)
    assert not rope_kernels.small_rotation_applies(x, "interleaved", 128)
    assert not rope_kernels.small_rotation_applies(x, "half", 64)  # partial rotary
    assert not rope_kernels.small_rotation_applies(torch.randn(1, 4, 1, 24), "half", 24)  # tails of the loops
    assert not rope_kernels.small_rotation_applies(torch.randn(8, 32, 512, 128), "half", 128)  # not small
    assert not rope_kernels.small_rotation_applies(x.requires_grad_(), "half", 128)
