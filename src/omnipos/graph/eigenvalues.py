"""Eigenvalue features: the Laplacian spectrum as sinusoids, so a model can tell which frequency each eigenvector
column carries (SAN, Kreuzer et al. 2021, feeds the eigenvalue with each column; Specformer, Bo et al. 2023,
encodes ``rho(eps * lambda)`` with the Transformer sinusoid, ``eps = 100``). Built on :func:`omnipos.core.sinusoidal`.
"""

from __future__ import annotations

import math

import torch

from ..core import sinusoidal

__all__ = ["eigenvalue_encoding"]


def eigenvalue_encoding(eigenvalues: torch.Tensor, dim: int, *, scale: float = 100.0, base: float = 10000.0,
                        layout: str = "interleaved", mask: torch.Tensor | None = None) -> torch.Tensor:
    """Sinusoidal features of eigenvalues: ``sinusoidal(scale * eigenvalues, dim)``.

    Args:
        eigenvalues: ``[B, k]`` (as returned by ``laplacian_pe(..., return_eigenvalues=True)``), any shape works.
        dim: channels per eigenvalue (even).
        scale: multiplier before the sinusoid (normalised Laplacian eigenvalues lie in ``[0, 2]``; Specformer's
            100 spreads them over the sinusoid's fast channels).
        base, layout: as in :func:`omnipos.core.sinusoidal`.
        mask: ``[B, k]`` validity mask; features of missing eigenvalues are set to 0.

    Returns:
        ``[*eigenvalues.shape, dim]`` float32 on the eigenvalues' device.
    """
    if not math.isfinite(float(scale)):
        raise ValueError(f"scale must be finite, got {scale}")
    features = sinusoidal(eigenvalues.to(torch.float64) * float(scale), dim, base=base, layout=layout)
    if mask is not None:
        if mask.shape != eigenvalues.shape:
            raise ValueError(f"mask {tuple(mask.shape)} must match eigenvalues {tuple(eigenvalues.shape)}")
        features = features * mask.unsqueeze(-1).to(features.dtype)
    return features
