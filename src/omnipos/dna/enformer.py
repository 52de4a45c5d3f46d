"""Enformer's relative positional basis (Avsec et al., 2021), normalised as in the trained model.

deepmind-research ``enformer/attention_module.py``, ``positional_features_all``: distances
``r = -(T-1) .. (T-1)``; the features are split evenly over the basis functions (halved again when not
symmetric), ``F`` per function, concatenated in the order of ``kinds``:

- ``"exponential"``: ``exp(-ln 2 * |r| / h_k)``, half-lives ``h_k = 2^linspace(3, log2 T, F)``;
- ``"central_mask"``: ``1[2^k - 1 > |r|]``, k = 1..F;
- ``"gamma"``: the gamma pdf at ``|r|`` with ``mean_k = linspace(T/F, T, F)``, ``stddev = T / (2F)``
  (concentration ``(mean/stddev)^2``, rate ``mean/stddev^2``), plus 1e-8, then normalised
  (``gamma_normalization``):

  - ``"per_feature"`` (default): each feature divided by its own maximum over the distances, so every gamma column
    peaks at 1.0. This is the trained Enformer's basis (``tf.reduce_max(p, axis=1, keepdims=True)``, DeepMind's
    2022 commit "Minor changes to match trained SOTA model"), the one its released weights were trained with.
  - ``"global"``: the first release (2021), ONE maximum over all distances and features (``tf.reduce_max``
    without an axis): the columns of distant means peak well below 1. Kept for models trained with it.

  (enformer-pytorch divides by the maximum over features at each distance, a third variant offered by neither.)

``symmetric=False`` appends ``sign(r) * e`` to the features ``e`` (Enformer's attention uses this form).
Computed in float64 and cast at the end.
"""

from __future__ import annotations

import math

import torch

from ..core import check_choice, check_float_dtype, check_positive_int, renamed_argument
from .limits import check_batch_bytes

__all__ = ["relative_basis", "BASIS_KINDS", "GAMMA_NORMALIZATIONS"]

BASIS_KINDS = ("exponential", "central_mask", "gamma")
GAMMA_NORMALIZATIONS = ("per_feature", "global")


def _exponential(r: torch.Tensor, count: int, seq_len: int, gamma_normalization: str,
                 min_half_life: float = 3.0) -> torch.Tensor:
    half_life = torch.pow(2.0, torch.linspace(min_half_life, math.log2(seq_len), count, dtype=torch.float64,
                                              device=r.device))
    return torch.exp(-math.log(2.0) / half_life * r.unsqueeze(-1))


def _central_mask(r: torch.Tensor, count: int, seq_len: int, gamma_normalization: str) -> torch.Tensor:
    widths = torch.pow(2.0, torch.arange(1, count + 1, dtype=torch.float64, device=r.device)) - 1.0
    return (widths > r.unsqueeze(-1)).to(torch.float64)


def _gamma(r: torch.Tensor, count: int, seq_len: int, gamma_normalization: str) -> torch.Tensor:
    stddev = seq_len / (2 * count)
    mean = torch.linspace(seq_len / count, seq_len, count, dtype=torch.float64, device=r.device)
    concentration = (mean / stddev) ** 2
    rate = mean / stddev**2
    x = r.unsqueeze(-1)
    log_pdf = torch.xlogy(concentration - 1.0, x) - rate * x - (torch.lgamma(concentration)
                                                                 - concentration * torch.log(rate))
    probabilities = torch.exp(log_pdf) + 1e-8
    if gamma_normalization == "global":
        return probabilities / probabilities.max()
    return probabilities / probabilities.amax(dim=0, keepdim=True)


_FUNCTIONS = {"exponential": _exponential, "central_mask": _central_mask, "gamma": _gamma}


def relative_basis(
    seq_len: int,
    dim: int | None = None,
    *,
    kinds: tuple[str, ...] | list[str] = BASIS_KINDS,
    symmetric: bool = True,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    num_features: int | None = None,
    gamma_normalization: str = "per_feature",
) -> torch.Tensor:
    """Enformer's relative positional features for every distance between two positions of a length-T window.

    Args:
        seq_len: T, the number of positions (distances run from ``-(T-1)`` to ``T-1``).
        dim: total features (Enformer's ``feature_size``; ``num_features`` is accepted too); divisible by
            ``len(kinds)`` (by ``2 * len(kinds)`` when not symmetric).
        kinds: basis functions, a non-empty selection of ``"exponential"``, ``"central_mask"``, ``"gamma"``
            without repeats, in the order wanted.
        symmetric: True: features of ``|r|`` only. False: ``concat([e, sign(r) * e])`` as in Enformer.
        device, dtype: of the result.
        gamma_normalization: ``"per_feature"`` (default: the trained Enformer, every gamma column peaks at 1) or
            ``"global"`` (the first release's single maximum over all distances and features).

    Returns:
        ``[2 * seq_len - 1, dim]``; row ``i`` is distance ``r = i - (seq_len - 1)``.
    """
    seq_len = check_positive_int(seq_len, "seq_len")
    dim = check_positive_int(renamed_argument(dim, num_features, "dim", "num_features"), "dim (num_features)")
    if isinstance(kinds, str) or not isinstance(kinds, (tuple, list)) or not kinds:
        raise ValueError(f"kinds must be a non-empty tuple of {BASIS_KINDS}, got {kinds!r}")
    for kind in kinds:
        if not isinstance(kind, str) or kind not in _FUNCTIONS:
            raise ValueError(f"kinds has unknown basis {kind!r}; expected some of {BASIS_KINDS}")
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"kinds repeats a basis: {tuple(kinds)}")
    components = len(kinds) * (1 if symmetric else 2)
    if dim % components:
        raise ValueError(f"dim (num_features) must be divisible by {components} ({len(kinds)} kinds"
                         f"{'' if symmetric else ' x 2 for the signed copy'}), got {dim}")
    check_float_dtype(dtype)
    check_choice(gamma_normalization, "gamma_normalization", GAMMA_NORMALIZATIONS)
    if not isinstance(symmetric, bool):
        raise TypeError(f"symmetric must be a bool, got {type(symmetric).__name__}")
    check_batch_bytes(2 * seq_len - 1, dim, 8, f"seq_len={seq_len}, dim={dim}")
    per_kind = dim // components
    r = torch.arange(-(seq_len - 1), seq_len, dtype=torch.float64, device=device)
    distance = r.abs()
    features = torch.cat([_FUNCTIONS[kind](distance, per_kind, seq_len, gamma_normalization) for kind in kinds],
                         dim=-1)
    if not symmetric:
        features = torch.cat([features, torch.sign(r).unsqueeze(-1) * features], dim=-1)
    return features.to(dtype)
