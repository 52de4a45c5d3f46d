"""apply_rotary (functional RoPE) vs the float64 definition, on strided inputs; its bad inputs."""


import numpy as np
import pytest
import torch

from omnipos.core import RotaryEmbedding, apply_rotary, rope_frequencies

transformers = pytest.importorskip("transformers")


def reference_rotate(x, positions, inv_freq, layout, rotary_dim, attention_factor=1.0):
    """The definition, in float64 NumPy: pairs (i, i + R/2) or (2i, 2i + 1) turned by p * inv_freq_i."""
    x = np.asarray(x, dtype=np.float64)
    angles = np.asarray(positions, dtype=np.float64)[..., None] * np.asarray(inv_freq, dtype=np.float64)
    c, s = np.cos(angles) * attention_factor, np.sin(angles) * attention_factor
    out = x.copy()
    h = rotary_dim // 2
    idx1, idx2 = (np.arange(h), np.arange(h) + h) if layout == "half" else (np.arange(0, rotary_dim, 2),
                                                                            np.arange(1, rotary_dim, 2))
    x1, x2 = x[..., idx1], x[..., idx2]
    out[..., idx1] = x1 * c - x2 * s
    out[..., idx2] = x2 * c + x1 * s
    return out


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


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
