"""Enformer's relative positional basis (Avsec et al., 2021), with the TF reference normalisation.

deepmind-research ``enformer/attention_module.py``, ``positional_features_all``: distances
``r = -(T-1) .. (T-1)``; the features are split evenly over the basis functions (halved again when not
symmetric), ``F`` per function, concatenated in the order of ``kinds``:

- ``"exponential"``: ``exp(-ln 2 * |r| / h_k)``, half-lives ``h_k = 2^linspace(3, log2 T, F)``;
- ``"central_mask"``: ``1[2^k - 1 > |r|]``, k = 1..F;
- ``"gamma"``: the gamma pdf at ``|r|`` with ``mean_k = linspace(T/F, T, F)``, ``stddev = T / (2F)``
  (concentration ``(mean/stddev)^2``, rate ``mean/stddev^2``), plus 1e-8, divided by ONE global maximum over
  all distances and features (``tf.reduce_max`` without an axis; enformer-pytorch divides per feature instead).

``symmetric=False`` appends ``sign(r) * e`` to the features ``e`` (Enformer's attention uses this form).
Computed in float64 and cast at the end.
"""

from __future__ import annotations

import math

import torch

from ..core import check_float_dtype, check_positive_int, renamed_argument

__all__ = ["relative_basis", "BASIS_KINDS"]

BASIS_KINDS = ("exponential", "central_mask", "gamma")


def _exponential(r: torch.Tensor, count: int, seq_len: int, min_half_life: float = 3.0) -> torch.Tensor:
    half_life = torch.pow(2.0, torch.linspace(min_half_life, math.log2(seq_len), count, dtype=torch.float64,
                                              device=r.device))
    return torch.exp(-math.log(2.0) / half_life * r.unsqueeze(-1))


def _central_mask(r: torch.Tensor, count: int, seq_len: int) -> torch.Tensor:
    widths = torch.pow(2.0, torch.arange(1, count + 1, dtype=torch.float64, device=r.device)) - 1.0
    return (widths > r.unsqueeze(-1)).to(torch.float64)


def _gamma(r: torch.Tensor, count: int, seq_len: int) -> torch.Tensor:
    stddev = seq_len / (2 * count)
    mean = torch.linspace(seq_len / count, seq_len, count, dtype=torch.float64, device=r.device)
    concentration = (mean / stddev) ** 2
    rate = mean / stddev**2
    x = r.unsqueeze(-1)
    log_pdf = torch.xlogy(concentration - 1.0, x) - rate * x - (torch.lgamma(concentration)
                                                                 - concentration * torch.log(rate))
    probabilities = torch.exp(log_pdf) + 1e-8
    return probabilities / probabilities.max()


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
) -> torch.Tensor:
    """Enformer's relative positional features for every distance between two positions of a length-T window.

    Args:
        seq_len: T, the number of positions (distances run from ``-(T-1)`` to ``T-1``).
        dim: total features (Enformer's ``feature_size``; ``num_features`` is accepted too); divisible by ``len(kinds)`` (by ``2 * len(kinds)`` when not symmetric).
        kinds: basis functions, a non-empty selection of ``"exponential"``, ``"central_mask"``, ``"gamma"``
            without repeats, in the order wanted.
        symmetric: True: features of ``|r|`` only. False: ``concat([e, sign(r) * e])`` as in Enformer.
        device, dtype: of the result.

    Returns:
        ``[2 * seq_len - 1, dim]``; row ``i`` is distance ``r = i - (seq_len - 1)``.
    """
    seq_len = check_positive_int(seq_len, "seq_len")
    dim = check_positive_int(renamed_argument(dim, num_features, "dim", "num_features"), "dim (num_features)")
    if isinstance(kinds, str) or not isinstance(kinds, (tuple, list)) or not kinds:
        raise ValueError(f"kinds must be a non-empty tuple of {BASIS_KINDS}, got {kinds!r}")
    for kind in kinds:
        if kind not in _FUNCTIONS:
            raise ValueError(f"kinds has unknown basis {kind!r}; expected some of {BASIS_KINDS}")
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"kinds repeats a basis: {tuple(kinds)}")
    components = len(kinds) * (1 if symmetric else 2)
    if dim % components:
        raise ValueError(f"dim (num_features) must be divisible by {components} ({len(kinds)} kinds"
                         f"{'' if symmetric else ' x 2 for the signed copy'}), got {dim}")
    check_float_dtype(dtype)
    per_kind = dim // components
    r = torch.arange(-(seq_len - 1), seq_len, dtype=torch.float64, device=device)
    distance = r.abs()
    features = torch.cat([_FUNCTIONS[kind](distance, per_kind, seq_len) for kind in kinds], dim=-1)
    if not symmetric:
        features = torch.cat([features, torch.sign(r).unsqueeze(-1) * features], dim=-1)
    return features.to(dtype)
