"""apply_rotary (functional RoPE) vs the float64 definition, on strided inputs; its bad inputs."""


import pytest
import torch
from support.rope import randn, reference_rotate

from omnipos.core import RotaryEmbedding, apply_rotary, rope_frequencies

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_apply_rotary_interleaved_and_odd_offsets_agree_with_module(dtype):
    rope = RotaryEmbedding(20, layout="interleaved", rotary_dim=12)
    base = randn(3, 2, 9, 21, seed=23).to(dtype)
    x = base[..., 1:]  # odd storage offset and odd strides: no complex view possible
    positions = torch.arange(9) + 11
    cos, sin = rope.cos_sin(positions)
    expected = torch.from_numpy(reference_rotate(x.double().numpy(), positions.numpy(),
                                                 rope_frequencies(12)[0].numpy(), "interleaved", 12))
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for out in (apply_rotary(x, cos, sin, layout="interleaved"), rope.rotate(x, positions),
                rope.rotate(x.contiguous(), positions)):
        assert out.dtype == dtype
        torch.testing.assert_close(out.double(), expected, rtol=tol, atol=tol)


def test_zero_dim_x_is_a_value_error():
    """apply_rotary on a 0-d x raised IndexError."""
    with pytest.raises(ValueError, match="0-d"):
        apply_rotary(torch.tensor(1.0), torch.ones(2), torch.ones(2))
