"""The RoPE rotation kernels: autograd is the transpose (twice differentiable), cache-sized slabs change nothing."""


import pytest
import torch

from omnipos.core import RotaryEmbedding, apply_rotary

transformers = pytest.importorskip("transformers")


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


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
