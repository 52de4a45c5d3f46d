"""Periodic encoding with exact, known periods (a day, a week) of clock time: ``sin / cos(2 pi h t / P)``.

With one period and one harmonic, the dot product of two encodings is ``cos(2 pi (t1 - t2) / P)``: attention
between events can compare them by the time of day (or day of week) alone, as the seeds describe.

The phase is taken on the clock, never on a timeline's own zero: ``t`` is ``times + clock`` (the clock of each
row's origin; see :mod:`omnipos.timeseries.clock`), turned into local wall-clock time by ``timezone``, counted
from ``phase_origin``. A patient whose first event was at 14:00 has the phase of 14:00 there, whatever origin
the relative times use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core import check_float_dtype, check_positive_int, cos_sin_of_turns
from .clock import (
    clock_tensor,
    local_offset,
    phase_shift,
    timezone_name,
    timezone_tensors,
)
from .durations import check_unit, parse_durations
from .timelines import check_times, encode_valid

__all__ = ["periodic_encoding", "periodic_dim", "periodic_features", "periodic_columns", "periods_tensor",
           "DEFAULT_PERIODS", "clock_required", "clock_shift", "phase_remainders"]

DEFAULT_PERIODS = ("24h", "7d")


def periodic_dim(periods: Sequence[Any] = DEFAULT_PERIODS, harmonics: int = 1) -> int:
    """Channels of :func:`periodic_encoding`: ``2 * len(periods) * harmonics``."""
    return 2 * len(periods) * check_positive_int(harmonics, "harmonics")


def clock_required(what: str) -> ValueError:
    """The error for periodic features asked of times without a clock."""
    return ValueError(
        f"{what} needs clock times: a time of day or day of week measured from each timeline's own origin "
        f"(e.g. its first event) means nothing. Pass clock=, the clock time of each row's origin in the times' "
        f"unit since 1970-01-01 UTC (batch_timelines(..., return_clock=True) returns it, EventBatch.clock holds "
        f"it), or clock=0 when the times are already clock times (origin='epoch')")


def periodic_encoding(
    times: torch.Tensor,
    periods: Sequence[Any] = DEFAULT_PERIODS,
    harmonics: int = 1,
    *,
    clock: Any = None,
    mask: torch.Tensor | None = None,
    unit: str = "h",
    timezone: Any = None,
    phase_origin: Any = "epoch",
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``[..., L]`` times -> ``[..., L, 2 * len(periods) * harmonics]`` exact-period sinusoids of clock time.

    Channels, for each period ``P`` in order, for each harmonic ``h = 1 .. harmonics``:
    ``sin(2 pi h c / P), cos(2 pi h c / P)`` with ``c`` the local wall-clock time of the event since
    ``phase_origin``. The phase is ``h * (c mod P) / P`` turns in float64 (``times mod P`` and ``clock mod P``
    are reduced apart, so nothing overflows and large clocks lose nothing), so ``c`` and ``c + P`` give the
    same vector.

    Args:
        times: ``[..., L]`` real tensor in ``unit`` (hours by default), sorted along the last axis.
        periods: durations: ``"24h"``, ``"7d"``, or floats in ``unit``.
        harmonics: number of harmonics per period (>= 1).
        clock: required: the clock time of each row's origin in ``unit`` since 1970-01-01 UTC, a tensor of
            ``times.shape[:-1]`` (or broadcastable; float64) or a number; ``0`` when ``times`` are already
            clock times. :func:`~omnipos.timeseries.batch_timelines` (``return_clock=True``) and
            :class:`~omnipos.timeseries.EventBatch` (``.clock``) give it.
        mask: ``[..., L]`` bool, True at real events; padded slots of the output are exactly 0.
        unit: unit of ``times``, ``clock`` and of plain-float periods.
        timezone: ``None``/``"UTC"``, an IANA zone (``"Europe/Paris"``: local time of day, daylight saving time
            included) or a fixed offset (``"+05:30"``).
        phase_origin: the local wall-clock time where every phase is 0: ``"epoch"`` (1970-01-01T00:00, a
            Thursday) or a naive datetime / ISO string (``"2024-01-01"``, a Monday, starts weeks on Mondays).
        dtype: result dtype.
    """
    check_float_dtype(dtype)
    unit = check_unit(unit)
    times, mask = check_times(times, mask)
    if clock is None:
        raise clock_required("periodic_encoding")
    period_values = periods_tensor(periods, unit, times.device)
    harmonics = check_positive_int(harmonics, "harmonics")
    transitions, offsets = timezone_tensors(timezone_name(timezone), unit, times.device)
    phase_mod = phase_remainders(phase_shift(phase_origin, unit), period_values)
    times = times.to(torch.float64)
    pair = torch.stack([times, clock_tensor(clock, times, mask=mask).expand(times.shape)], dim=-1)

    def encode(tc: torch.Tensor) -> torch.Tensor:
        t, c = tc[..., 0], tc[..., 1]
        clock_mod = torch.remainder(c.unsqueeze(-1), period_values)
        shift = clock_shift(t, c, clock_mod, transitions, offsets, phase_mod)
        return periodic_features(t, period_values, harmonics, dtype, shift)

    return encode_valid(pair, mask, encode)


def phase_remainders(phase: float, periods: torch.Tensor) -> torch.Tensor:
    """The phase origin (in the periods' unit since the epoch's wall clock) modulo each period, float64 ``[P]``."""
    return torch.remainder(torch.tensor(phase, dtype=torch.float64, device=periods.device), periods)


def periods_tensor(periods: Sequence[Any], unit: str, device: torch.device | str | None = None) -> torch.Tensor:
    """Durations -> a float64 ``[P]`` tensor in ``unit`` (each > 0)."""
    return torch.tensor(parse_durations(periods, check_unit(unit), "periods"), dtype=torch.float64, device=device)


def clock_shift(t: torch.Tensor, clock: torch.Tensor, clock_mod: torch.Tensor, transitions: torch.Tensor,
                offsets: torch.Tensor, phase_mod: torch.Tensor) -> torch.Tensor:
    """What to add to relative times ``t [N]`` (float64) for local wall-clock time since the phase origin, reduced
    modulo each period: ``[N, P]``, between ``-P - 1 day`` and ``2 P + 1 day``.

    ``clock [N]`` is each event's row clock, ``clock_mod`` (``[N, P]``, or broadcastable) that clock modulo each
    period (a caller with few rows reduces it once per row), ``phase_mod [P]`` the phase origin modulo each
    period. Only the zone's offset at ``t + clock`` (looked up; the sum may overflow harmlessly) is per event.
    """
    # 0-d for a fixed offset (no per-event lookup, so no per-event sum to look up)
    offset = offsets[0] if transitions.numel() == 0 else local_offset(t + clock, transitions, offsets)
    if offset.ndim:
        offset = offset.unsqueeze(-1)
    return clock_mod + (offset - phase_mod)


def periodic_features(t: torch.Tensor, periods: torch.Tensor, harmonics: int, dtype: torch.dtype,
                      shift: torch.Tensor | None = None) -> torch.Tensor:
    """The encoding of real events' times ``t [N]`` (no mask, no checks) -> ``[N, 2 * P * harmonics]``.

    ``shift [N, P]`` (optional, from :func:`clock_shift`: small, already reduced) is added to ``t`` before the one
    modulo per period; ``t mod P`` is exact in float64, so a large ``t`` loses nothing."""
    return torch.stack(periodic_columns(t, periods, harmonics, dtype, shift), -1).to(dtype)


def periodic_columns(t: torch.Tensor, periods: torch.Tensor, harmonics: int, dtype: torch.dtype,
                     shift: torch.Tensor | None = None) -> list[torch.Tensor]:
    """:func:`periodic_features` as its ``2 * P * harmonics`` channels, each an ``[N]`` column of ``dtype`` (or
    float32 below it): what a caller that consumes the channels one at a time takes without stacking them."""
    x = t.to(torch.float64)
    channels = []
    # One [N] column at a time: P * harmonics is tiny and N is not. torch.compile vectorises the innermost
    # dimension, and an [N, P] layout kept 2 of its 16 lanes busy (compiled TimelineEncoder ran 2.5x slower than
    # eager); column by column it vectorises over events. Element for element the same arithmetic as [N, P].
    for p in range(periods.shape[0]):
        shifted = x if shift is None else x + shift[..., p]
        fraction = torch.remainder(shifted, periods[p]) / periods[p]  # [N] in [0, 1)
        for harmonic in range(1, harmonics + 1):
            # (x * 1.0 is x, bit for bit: the first harmonic skips the pass)
            cos, sin = cos_sin_of_turns(fraction * float(harmonic) if harmonic > 1 else fraction, dtype)
            channels += [sin, cos]
    return channels
