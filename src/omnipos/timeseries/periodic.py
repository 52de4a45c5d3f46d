"""Periodic encoding with exact, known periods (a day, a week): ``sin / cos(2 pi h t / P)``.

With one period and one harmonic, the dot product of two encodings is ``cos(2 pi (t1 - t2) / P)``: attention
between events can compare them by the time of day (or day of week) alone, as the seeds describe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core import check_float_dtype, check_positive_int, sinusoid_of_turns
from .durations import check_unit, parse_durations
from .timelines import check_times, encode_valid

__all__ = ["periodic_encoding", "periodic_dim", "periodic_features", "periods_tensor", "DEFAULT_PERIODS"]

DEFAULT_PERIODS = ("24h", "7d")


def periodic_dim(periods: Sequence[Any] = DEFAULT_PERIODS, harmonics: int = 1) -> int:
    """Channels of :func:`periodic_encoding`: ``2 * len(periods) * harmonics``."""
    return 2 * len(periods) * check_positive_int(harmonics, "harmonics")


def periodic_encoding(
    times: torch.Tensor,
    periods: Sequence[Any] = DEFAULT_PERIODS,
    harmonics: int = 1,
    *,
    mask: torch.Tensor | None = None,
    unit: str = "h",
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``[..., L]`` times -> ``[..., L, 2 * len(periods) * harmonics]`` exact-period sinusoids.

    Channels, for each period ``P`` in order, for each harmonic ``h = 1 .. harmonics``:
    ``sin(2 pi h t / P), cos(2 pi h t / P)``. The phase is ``h * (t mod P) / P`` turns in float64, so
    ``t`` and ``t + P`` give the same vector (up to the rounding of ``t + P`` itself).

    Args:
        times: ``[..., L]`` real tensor in ``unit`` (hours by default), sorted along the last axis.
        periods: durations: ``"24h"``, ``"7d"``, or floats in ``unit``.
        harmonics: number of harmonics per period (>= 1).
        mask: ``[..., L]`` bool, True at real events; padded slots of the output are exactly 0.
        unit: unit of ``times`` and of plain-float periods.
        dtype: result dtype.
    """
    check_float_dtype(dtype)
    times, mask = check_times(times, mask)
    period_values = periods_tensor(periods, unit, times.device)
    harmonics = check_positive_int(harmonics, "harmonics")
    return encode_valid(times, mask, lambda t: periodic_features(t, period_values, harmonics, dtype))


def periods_tensor(periods: Sequence[Any], unit: str, device: torch.device | str | None = None) -> torch.Tensor:
    """Durations -> a float64 ``[P]`` tensor in ``unit`` (each > 0)."""
    return torch.tensor(parse_durations(periods, check_unit(unit), "periods"), dtype=torch.float64, device=device)


def periodic_features(t: torch.Tensor, periods: torch.Tensor, harmonics: int, dtype: torch.dtype) -> torch.Tensor:
    """The encoding of real events' times ``t [N]`` (no mask, no checks) -> ``[N, 2 * P * harmonics]``."""
    fraction = torch.remainder(t.to(torch.float64).unsqueeze(-1), periods) / periods  # [N, P] in [0, 1)
    steps = torch.arange(1, harmonics + 1, dtype=torch.float64, device=t.device)
    turns = (fraction.unsqueeze(-1) * steps).flatten(-2)
    return sinusoid_of_turns(turns, layout="interleaved", dtype=dtype, inplace=True)  # our buffer: no copy
