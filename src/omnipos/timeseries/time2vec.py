"""Time2Vec (Kazemi et al., 2019, arXiv 1907.05321): a linear term and learned-frequency sines.

``t2v(t)[0] = w_0 . t + b_0`` and ``t2v(t)[i] = sin(w_i . t + b_i)`` for ``i >= 1``: the linear term first, as in
the paper and mTAN. The frequencies are parameters, so this is the one place in omnipos that calls ``torch.sin``
itself: the core's sinusoids are fixed-frequency, sin/cos-paired and not differentiable in the frequency.
Feed times relative to a nearby origin (``origin="first"``): a learned frequency times a time since 1970 loses
float32 precision before the sine sees it.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core import check_positive_int, renamed_argument
from .timelines import check_times, encode_valid

__all__ = ["Time2Vec"]


class Time2Vec(nn.Module):
    """Time2Vec with ``dim`` channels: ``[linear | sin ... sin]``.

    Args:
        dim: output channels (>= 1; channel 0 is the linear term, the rest are sines). ``out_features`` (its
            former name) is accepted too.
        in_features: time features per event. With 1 (the default) ``forward`` takes times ``[..., L]`` with no
            feature axis; with more it takes ``[..., L, in_features]``.

    Shape:
        ``forward(times, mask=None)``: ``[..., L]`` (or ``[..., L, in_features]``) -> ``[..., L, dim]``;
        padded slots (mask False) exactly 0. Times must be sorted only when ``in_features == 1``.
    """

    def __init__(self, dim: int | None = None, in_features: int = 1, *, out_features: int | None = None) -> None:
        super().__init__()
        self.dim = check_positive_int(renamed_argument(dim, out_features, "dim", "out_features"), "dim (out_features)")
        self.in_features = check_positive_int(in_features, "in_features")
        self.linear = nn.Linear(self.in_features, 1)
        self.periodic = nn.Linear(self.in_features, self.dim - 1) if self.dim > 1 else None

    @property
    def out_features(self) -> int:
        """Alias of :attr:`dim`."""
        return self.dim

    def forward(self, times: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.in_features == 1:
            times, mask = check_times(times, mask)
            return encode_valid(times, mask, lambda t: self.encode_events(t.unsqueeze(-1)))
        if not isinstance(times, torch.Tensor) or times.ndim < 2 or times.shape[-1] != self.in_features:
            raise ValueError(f"times must be [..., L, in_features={self.in_features}], got "
                             f"{tuple(getattr(times, 'shape', ()))}")
        features, mask = check_times(times, None if mask is None else mask.unsqueeze(-1).expand_as(times),
                                     check_sorted=False)
        return encode_valid(features, None if mask is None else mask[..., 0], self.encode_events)

    def encode_events(self, t: torch.Tensor) -> torch.Tensor:
        """Real events only, no mask or checks: ``[N, in_features]`` -> ``[N, dim]``."""
        t = t.to(self.linear.weight.dtype)
        linear = self.linear(t)
        if self.periodic is None:
            return linear
        return torch.cat([linear, torch.sin(self.periodic(t))], dim=-1)

    def extra_repr(self) -> str:
        return f"dim=out_features={self.dim}, in_features={self.in_features}"
