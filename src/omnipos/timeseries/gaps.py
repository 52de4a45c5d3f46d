"""Gaps between events: the raw gap, a continuous log-gap sinusoid, and learned gap buckets.

Gaps span minutes to years; fed raw they train badly (EasyTPP #55), so the continuous encoding takes
``log1p(gap / scale)`` and the bucketed one maps ranges such as "less than a week" or "one to three months" (the
seeds' examples; CEHR-BERT's and ETHOS's interval tokens) to learned vectors. Duplicate times are legal: their gap
is 0, nothing divides by it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..core import (
    SINUSOID_LAYOUTS,
    ConstantBuffers,
    can_inspect_values,
    check_choice,
    check_float_dtype,
    check_positive_int,
    layout_frequencies,
    sinusoid_of_turns,
)
from .durations import check_unit, parse_durations, positive_duration
from .timelines import check_module_device, check_times, checked_gaps, encode_valid

__all__ = ["time_gaps", "log_gap_encoding", "log_gap_cycles", "log_gap", "log_gap_features", "GapBucketEmbedding",
           "DEFAULT_GAP_BOUNDARIES"]

DEFAULT_GAP_BOUNDARIES = ("1h", "1d", "7d", "30d", "90d", "180d", "365d")


def time_gaps(times: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Gap from each event to the previous real event of its timeline: ``[..., L]`` -> ``[..., L]``.

    The first real event of each timeline has gap 0, as do duplicates; padded slots are 0. Masked-out slots may
    sit anywhere in a row (they are skipped). Raises ValueError when the real times are not sorted.
    """
    times, mask = check_times(times, mask, check_sorted=False)
    return checked_gaps(times, mask)


def _check_gaps(gaps: Any, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    gaps, mask = check_times(gaps, mask, name="gaps", check_sorted=False)
    if not can_inspect_values(gaps, mask):
        return gaps, mask
    negative = gaps < 0 if mask is None else mask & (gaps < 0)
    if bool(negative.any()):
        index = tuple(negative.nonzero()[0].tolist())
        raise ValueError(f"gaps must be >= 0 (got {gaps[index].item()} at {index}); were the times unsorted? "
                         f"time_gaps(times, mask) computes them")
    return gaps, mask


def log_gap_encoding(
    gaps: torch.Tensor,
    dim: int,
    *,
    mask: torch.Tensor | None = None,
    unit: str = "h",
    scale: Any = "1h",
    base: float = 1000.0,
    layout: str = "interleaved",
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Continuous gap encoding: the core sinusoid of ``x = log1p(gap / scale)``, ``[..., L] -> [..., L, dim]``.

    ``x`` is about 0 for a gap of a few minutes, 3.2 for a day, 6.7 for a month, 9.1 for a year (scale 1 h);
    its frequencies are :func:`omnipos.core.sinusoidal`'s, ``w_i = base^(-2i/dim)`` radians per unit of ``x``.

    Args:
        gaps: ``[..., L]`` non-negative gaps in ``unit`` (see :func:`time_gaps`).
        dim: output channels (even).
        mask: ``[..., L]`` bool, True at real events; padded slots of the output are exactly 0.
        unit: unit of ``gaps`` and of a plain-float ``scale``.
        scale: the gap that maps to ``log 2``; fixes the encoding's meaning whatever ``unit`` is.
        base, layout: as in :func:`omnipos.core.sinusoidal`.
    """
    check_choice(layout, "layout", SINUSOID_LAYOUTS)
    check_float_dtype(dtype)
    gaps, mask = _check_gaps(gaps, mask)
    scale_value = positive_duration(scale, check_unit(unit), "scale")
    cycles = log_gap_cycles(dim, base, layout, gaps.device)
    return encode_valid(gaps, mask, lambda g: log_gap_features(g, cycles, scale_value, layout, dtype))


def log_gap_cycles(dim: int, base: float, layout: str, device: torch.device | str | None = None) -> torch.Tensor:
    """The core sinusoid's frequencies for ``layout``, in cycles per unit of ``log1p(gap / scale)``."""
    return layout_frequencies(dim, base=base, layout=layout, device=device) / (2 * math.pi)


def log_gap(g: torch.Tensor, scale: float) -> torch.Tensor:
    """``x = log1p(g / scale)`` of real events' gaps ``g [N]`` in float64 (no checks): what the log-gap
    sinusoid encodes."""
    g = g.to(torch.float64)
    ratio = g / scale
    x = torch.log1p(ratio)
    # a gap / scale beyond float64 (1e300 h / "1e-10h") is still a finite log: log(g) - log(scale)
    if not can_inspect_values(g) or bool(torch.isinf(ratio).any()):
        big = torch.isinf(ratio)
        safe = torch.where(big, g, torch.ones((), dtype=g.dtype, device=g.device))  # no inf/NaN gradient
        x = torch.where(big, torch.log(safe) - math.log(scale), x)
    return x


def log_gap_features(g: torch.Tensor, cycles: torch.Tensor, scale: float, layout: str,
                     dtype: torch.dtype, out: torch.Tensor | None = None, accumulate: bool = False) -> torch.Tensor:
    """The encoding of real events' gaps ``g [N]`` (no mask, no checks) -> ``[N, 2 * len(cycles)]``: the core's
    sinusoid of ``x = log1p(g / scale)``, with the frequencies computed once by the caller; written into (or
    with ``accumulate``, added to) ``out`` when given."""
    turns = log_gap(g, scale).unsqueeze(-1) * cycles
    return sinusoid_of_turns(turns, layout=layout, dtype=dtype, inplace=True, out=out, accumulate=accumulate,
                             centered=True)


class GapBucketEmbedding(ConstantBuffers):
    """A learned vector per gap bucket (CEHR-BERT / ETHOS interval tokens, as a continuous-input module).

    Buckets are left-closed: with boundaries ``b_1 < ... < b_K``, bucket 0 is ``[0, b_1)``, bucket ``k`` is
    ``[b_k, b_{k+1})`` and bucket ``K`` is ``[b_K, inf)``. A gap exactly at a boundary belongs to the bucket that
    boundary opens: with the defaults, exactly 1 day is in "1d-7d", just under 1 day in "1h-1d". Gaps and
    boundaries are compared in float64 in ``unit``; a gap of 0 (first event, duplicate times) is in bucket 0.

    Args:
        boundaries: increasing positive durations (``"1h"``, ``"7d"``, or floats in ``unit``).
        dim: embedding size.
        unit: unit of the gaps given to ``forward`` and of plain-float boundaries.

    Shape:
        ``forward(gaps, mask=None)``: ``[..., L]`` -> ``[..., L, dim]``; padded slots exactly 0.
        ``bucketize(gaps)``: ``[..., L]`` -> ``[..., L]`` long, in ``0 .. len(boundaries)``.

    The boundaries are a float64 constant buffer: ``.half()`` changes the vectors' dtype, never a bucket.
    """

    boundaries: torch.Tensor

    def __init__(self, boundaries: Sequence[Any] = DEFAULT_GAP_BOUNDARIES, dim: int | None = None, *,
                 unit: str = "h") -> None:
        super().__init__()
        if dim is None:
            raise TypeError("GapBucketEmbedding needs dim=, the embedding size (boundaries come first: "
                            "GapBucketEmbedding(boundaries, dim) or GapBucketEmbedding(dim=16))")
        self.dim = check_positive_int(dim, "dim")
        self.unit = check_unit(unit)
        values = parse_durations(boundaries, self.unit, "boundaries")
        for i in range(1, len(values)):
            if not values[i] > values[i - 1]:
                raise ValueError(f"boundaries must be strictly increasing; boundaries[{i}]={boundaries[i]!r} "
                                 f"is not after boundaries[{i - 1}]={boundaries[i - 1]!r}")
        self.boundary_labels = tuple(str(b) for b in boundaries)
        self.boundary_values = values
        self.register_constants()
        # built without touching the RNG: reset_parameters() is the one initialisation (meta-device friendly)
        self.embedding = nn.utils.skip_init(nn.Embedding, len(values) + 1, self.dim,
                                            device=torch.get_default_device())
        self.reset_parameters()

    def compute_constants(self, device: torch.device | None) -> dict[str, torch.Tensor]:
        return {"boundaries": torch.tensor(self.boundary_values, dtype=torch.float64, device=device)}

    def reset_parameters(self) -> None:
        """Re-draw the bucket vectors (``nn.Embedding``'s N(0, 1) initialisation)."""
        self.embedding.reset_parameters()

    @property
    def num_buckets(self) -> int:
        return len(self.boundary_labels) + 1

    def bucket_names(self) -> list[str]:
        """Readable bucket names: ``['<1h', '1h-1d', ..., '>=365d']``."""
        b = self.boundary_labels
        return [f"<{b[0]}"] + [f"{lo}-{hi}" for lo, hi in zip(b, b[1:])] + [f">={b[-1]}"]

    def bucketize(self, gaps: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Bucket index of each gap (left-closed buckets; see the class docstring); padded slots get 0."""
        gaps, mask = _check_gaps(gaps, mask)
        check_module_device(self.boundaries.device, gaps, "gaps")
        return self._bucketize(gaps, mask)

    def _bucketize(self, gaps: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        index = torch.bucketize(gaps.to(torch.float64), self.boundaries, right=True)
        return index if mask is None else index.masked_fill(~mask, 0)

    def forward(self, gaps: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        gaps, mask = _check_gaps(gaps, mask)
        check_module_device(self.boundaries.device, gaps, "gaps")
        return encode_valid(gaps, mask, self.encode_events)

    def encode_events(self, flat_gaps: torch.Tensor) -> torch.Tensor:
        """Real events' gaps only, no mask or checks: ``[N]`` -> ``[N, dim]``."""
        return self.embedding(self._bucketize(flat_gaps, None))

    def extra_repr(self) -> str:
        return f"boundaries={self.boundary_labels}, dim={self.dim}, unit={self.unit!r}"
