"""Frequency bands shared by the sinusoidal encodings and rotary embeddings.

Every sinusoid in omnipos is ``sin(p * w_i)`` / ``cos(p * w_i)`` with a geometric ladder of angular frequencies
``w_i``. This module owns that ladder, in float64, so the additive encodings and RoPE (and its scalings, in
:mod:`omnipos.core.rope_scaling`) agree.
"""

from __future__ import annotations

import math
import numbers

import torch

from .checks import allocation_guard, check_even_dim

__all__ = ["frequency_bands", "geometric_frequencies"]


def geometric_frequencies(
    count: int,
    *,
    base: float,
    denominator: float,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """``w_i = base ** (-i / denominator)`` for ``i = 0 .. count - 1``, computed in float64.

    The building block of every convention: Vaswani uses ``w_i = base ** (-2i / d)`` (``denominator = d / 2``),
    fairseq ``base ** (-i / (d/2 - 1))``.
    """
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise TypeError(f"base must be a number, got {type(base).__name__} ({base!r})")
    base = float(base)
    if not (math.isfinite(base) and base > 1.0):
        raise ValueError(f"base must be a finite number > 1, got {base!r}")
    with allocation_guard(f"dim={2 * count} ({count} frequencies)"):
        exponents = torch.arange(count, dtype=torch.float64, device=device) / float(denominator)
        return torch.pow(torch.tensor(base, dtype=torch.float64, device=device), -exponents).to(dtype)


def frequency_bands(
    dim: int,
    *,
    base: float = 10000.0,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """The ``dim // 2`` angular frequencies ``w_i = base ** (-2i / dim)`` of a ``dim``-channel sinusoid.

    These are the frequencies of Vaswani et al. (and of HF's RoPE ``inv_freq``): ``w_0 = 1`` down to
    ``base ** (-(dim - 2) / dim)``.

    Args:
        dim: number of channels (even, > 0).
        base: the wavelength scale (``10000`` in the Transformer paper).
        device: where to build the tensor.
        dtype: float64 by default; positions times these frequencies should stay in float64.

    Returns:
        ``Tensor[dim // 2]``.
    """
    dim = check_even_dim(dim)
    return geometric_frequencies(dim // 2, base=base, denominator=dim / 2, device=device, dtype=dtype)
