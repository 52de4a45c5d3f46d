"""References shared by the RoPE tests."""

import numpy as np
import torch


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


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
