"""tAPE, ConvTran's time Absolute Position Encoding (Foumani et al., 2023, "Improving position encoding of
transformers for multivariate time series classification"; Navidfoumani/ConvTran
``Models/AbsolutePositionalEncoding.py``, class ``tAPE``).

For a series of ``L`` steps and ``d`` channels, with ``w_k = 10000^(-2k/d)``::

    PE[pos, 2k]     = sin(pos * w_k * d / L)
    PE[pos, 2k + 1] = cos(pos * w_k * d / L)

Vaswani's interleaved sinusoid with every frequency scaled by ``d / L``: a short series embedded in many channels
(``d > L``) keeps distinct, well-spread positions, where the plain sinusoid's high channels are nearly constant
over ``L`` steps and its dot products ``PE[p] . PE[q]`` lose their decay with ``|p - q|``.

The phases are formed in float64 and reduced before a float32 ``sin``/``cos`` (the core's sinusoid), so the
result is the formula evaluated in float64 and rounded once; ConvTran builds it in float32.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..core import ConstantBuffers, allocation_guard, check_even_dim, check_float_dtype, check_positive_int, sinusoidal

__all__ = ["tape", "TAPE"]


def _check_base(base: Any) -> float:
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not math.isfinite(base) or base <= 1:
        raise ValueError(f"base must be a finite number > 1, got {base!r}")
    return float(base)


def tape(length: int, dim: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32,
         device: torch.device | str | None = None) -> torch.Tensor:
    """ConvTran's tAPE for a series of ``length`` steps: ``[length, dim]`` (see the module docstring).

    Args:
        length: the series length ``L`` (positions ``0 .. L - 1``; the frequencies are scaled by ``dim / L``).
        dim: channels, even (sin/cos pairs; ConvTran's ``d_model``).
        base: the wavelength base of ``w_k = base^(-2k/dim)`` (10000 in ConvTran).
        dtype: floating dtype of the result; device: where to build it.

    Raises:
        ValueError: ``length < 1``, odd or non-positive ``dim``, ``base <= 1``, a table the allocator refuses
            (naming ``length``). TypeError: non-int sizes, a
            non-floating ``dtype``.
    """
    length = check_positive_int(length, "length")
    dim = check_even_dim(dim)
    base = _check_base(base)
    check_float_dtype(dtype)
    with allocation_guard(f"tape: length={length:,} with dim={dim} (a [{length:,}, {dim}] table, built in float64)"):
        positions = torch.arange(length, dtype=torch.float64, device=device) * (dim / length)
        return sinusoidal(positions, dim, base=base, layout="interleaved", dtype=dtype)


class TAPE(ConstantBuffers):
    """Adds ConvTran's tAPE to a series of embeddings: ``x + scale * tape(length, dim)``.

    Args:
        dim: channels of ``x`` (even). length: the series length the encoding is scaled for (ConvTran's
            ``max_len``, which it sets to the series length).
        base: as :func:`tape`. scale: ConvTran's ``scale_factor`` (1.0). ConvTran's dropout after the sum is left
            to the model.

    Shape:
        ``forward(x)``: ``[..., L, dim]`` with ``L <= length`` -> the same shape and dtype. A series shorter than
        ``length`` gets the first ``L`` rows of the length-``length`` encoding (ConvTran pads its series to one
        length); for an encoding scaled to ``L`` itself build ``TAPE(dim, L)``.

    The table is a float64 constant (not saved in ``state_dict``, rebuilt after meta-device construction); the sum
    is taken in the input's dtype.
    """

    def __init__(self, dim: int, length: int, *, base: float = 10000.0, scale: float = 1.0) -> None:
        super().__init__()
        self.dim = check_even_dim(dim)
        self.length = check_positive_int(length, "length")
        self.base = _check_base(base)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
            raise ValueError(f"scale must be a finite number, got {scale!r}")
        self.scale = float(scale)
        self.register_constants()

    def compute_constants(self, device: torch.device | None) -> dict[str, torch.Tensor]:
        return {"pe": tape(self.length, self.dim, base=self.base, dtype=torch.float64, device=device) * self.scale}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            got = f"a tensor of dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(f"x must be a floating tensor [..., L, dim], got {got}")
        if x.ndim < 2 or x.shape[-1] != self.dim:
            raise ValueError(f"x must be [..., L, dim={self.dim}], got shape {tuple(x.shape)}")
        if x.shape[-2] > self.length:
            raise ValueError(f"x has {x.shape[-2]} steps, more than length={self.length} the encoding was built for")
        return x + self.pe[: x.shape[-2]].to(device=x.device, dtype=x.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, length={self.length}, base={self.base:g}, scale={self.scale:g}"
