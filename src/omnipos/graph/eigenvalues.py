"""Eigenvalue features: the Laplacian spectrum as sinusoids, so a model can tell which frequency each eigenvector
column carries (SAN, Kreuzer et al. 2021, feeds the eigenvalue with each column; Specformer, Bo et al. 2023,
encodes ``rho(eps * lambda)`` with the Transformer sinusoid, ``eps = 100``). Built on :func:`omnipos.core.sinusoidal`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch

from ..core import as_position_tensor, sinusoidal

__all__ = ["eigenvalue_encoding"]


def eigenvalue_encoding(eigenvalues: Any, dim: int, *, scale: float = 100.0, base: float = 10000.0,
                        layout: str = "interleaved", mask: Any = None) -> torch.Tensor:
    """Sinusoidal features of eigenvalues: ``sinusoidal(scale * eigenvalues, dim)``.

    Args:
        eigenvalues: ``[B, k]`` (as returned by ``laplacian_pe(..., return_eigenvalues=True)``), any shape works
            (a tensor, array or list of real numbers; finite where ``mask`` is True).
        dim: channels per eigenvalue (even).
        scale: multiplier before the sinusoid (normalised Laplacian eigenvalues lie in ``[0, 2]``; Specformer's
            100 spreads them over the sinusoid's fast channels).
        base, layout: as in :func:`omnipos.core.sinusoidal`.
        mask: ``[B, k]`` boolean validity mask (tensor, array or list); features of missing eigenvalues are 0,
            whatever those entries hold (GraphGPS pads with NaN).

    Returns:
        ``[*eigenvalues.shape, dim]`` float32 on the eigenvalues' device.
    """
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number, got {type(scale).__name__}")
    if not math.isfinite(float(scale)):
        raise ValueError(f"scale must be finite, got {scale}")
    eigenvalues = as_position_tensor(eigenvalues, "eigenvalues")
    if eigenvalues.device.type == "meta":
        raise ValueError("eigenvalues is a meta tensor (a shape without values); give real values")
    if mask is not None:
        if not isinstance(mask, torch.Tensor):
            try:
                mask = torch.as_tensor(np.asarray(mask), device=eigenvalues.device)
            except (TypeError, ValueError, RuntimeError) as exc:
                raise TypeError(f"mask must be a bool tensor or array, got {type(mask).__name__} ({exc})") from None
        if mask.device.type == "meta":
            raise ValueError("mask is a meta tensor (a shape without values); give real values")
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must hold booleans (True = a real eigenvalue), got dtype {mask.dtype}")
        if mask.shape != eigenvalues.shape:
            raise ValueError(f"mask {tuple(mask.shape)} must match eigenvalues {tuple(eigenvalues.shape)}")
        mask = mask.to(eigenvalues.device)
        # masked-out entries are padding (0, or NaN in GraphGPS's layout): their features are 0 whatever they hold
        eigenvalues = torch.where(mask, eigenvalues, torch.zeros((), dtype=eigenvalues.dtype,
                                                                 device=eigenvalues.device))
    scaled = eigenvalues.to(torch.float64) * float(scale)
    if scaled.numel() and not bool(torch.isfinite(scaled).all()):
        bad = tuple((~torch.isfinite(scaled)).nonzero()[0].tolist())
        raise ValueError(f"eigenvalues * scale must be finite (where mask is True); eigenvalues{list(bad)} = "
                         f"{eigenvalues[bad].item()}, scale = {scale}")
    features = sinusoidal(scaled, dim, base=base, layout=layout)
    if mask is not None:
        features = features * mask.unsqueeze(-1).to(features.dtype)
    return features
