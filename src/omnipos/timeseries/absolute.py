"""Absolute time encoding: a sinusoid of real time with geometric periods, never normalised per batch.

Models of irregular series that rescale time by the batch's range (mTAN) give the same event a different vector
in a different batch; here the periods are fixed numbers of hours (or of ``unit``), so the same time gives the
same vector in any batch, at any padding, on any device.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..core import (
    SINUSOID_LAYOUTS,
    can_inspect_values,
    check_choice,
    check_even_dim,
    check_float_dtype,
    geometric_frequencies,
    sinusoid_of_turns,
)
from .durations import check_unit, positive_duration
from .timelines import check_times, encode_valid

__all__ = ["absolute_time_encoding", "absolute_cycles", "absolute_features", "reaches_whole_turns",
           "whole_turns_as_zero"]

_WHOLE_TURNS = 2.0**53


def absolute_cycles(dim: int, min_period: Any, max_period: Any, unit: str = "h",
                    device: torch.device | str | None = None) -> torch.Tensor:
    """The float64 frequencies (cycles per ``unit``) ``1 / P_i`` of the ``dim // 2`` geometric periods
    ``P_i = min_period * (max_period / min_period) ** (i / (dim/2 - 1))``, shortest first."""
    dim = check_even_dim(dim)
    unit = check_unit(unit)
    low = positive_duration(min_period, unit, "min_period")
    high = positive_duration(max_period, unit, "max_period")
    half = dim // 2
    if half == 1:
        return torch.tensor([1.0 / low], dtype=torch.float64, device=device)
    if not high > low:
        raise ValueError(f"max_period ({max_period!r}) must be longer than min_period ({min_period!r})")
    if not math.isfinite(high / low):
        raise ValueError(f"max_period / min_period ({max_period!r} / {min_period!r}) overflows float64")
    return geometric_frequencies(half, base=high / low, denominator=half - 1, device=device) / low


def absolute_time_encoding(
    times: torch.Tensor,
    dim: int,
    *,
    min_period: Any,
    max_period: Any,
    mask: torch.Tensor | None = None,
    unit: str = "h",
    layout: str = "interleaved",
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Sinusoid of real time: ``sin / cos(2 pi t / P_i)`` for ``dim // 2`` geometric periods.

    Args:
        times: ``[..., L]`` real tensor, in ``unit`` (hours by default), sorted along the last axis.
        dim: output channels (even).
        min_period, max_period: shortest and longest period: ``"1h"``, ``"3650d"``, or floats in ``unit``.
            With ``dim == 2`` only ``min_period`` is used.
        mask: ``[..., L]`` bool, True at real events; padded slots of the output are exactly 0.
        unit: unit of ``times`` and of plain-float periods.
        layout: ``"interleaved"`` (sin, cos per period) or ``"split"`` (all sines, then all cosines).
        dtype: result dtype. The phase ``t / P`` is formed and range-reduced in float64 first.

    Returns:
        ``[..., L, dim]``.
    """
    check_float_dtype(dtype)
    check_choice(layout, "layout", SINUSOID_LAYOUTS[:2])
    times, mask = check_times(times, mask)
    cycles = absolute_cycles(dim, min_period, max_period, unit, device=times.device)
    return encode_valid(times, mask, lambda t: absolute_features(t, cycles, layout, dtype))


def absolute_features(t: torch.Tensor, cycles: torch.Tensor, layout: str, dtype: torch.dtype,
                      out: torch.Tensor | None = None, accumulate: bool = False) -> torch.Tensor:
    """The encoding of real events' times ``t [N]`` (no mask, no checks) -> ``[N, 2 * len(cycles)]``, written
    into (or with ``accumulate``, added to) ``out`` when given (see the core's ``sinusoid_of_turns``)."""
    # the product is a fresh float64 buffer: let the core consume it instead of copying it again
    turns = t.to(torch.float64).unsqueeze(-1) * cycles
    if reaches_whole_turns(t, cycles):
        turns = whole_turns_as_zero(turns)
    return sinusoid_of_turns(turns, layout=layout, dtype=dtype, inplace=True, out=out, accumulate=accumulate,
                             centered=True)


# Beyond 2**53 turns a float64 phase is a whole number of turns (phase 0); a product that overflowed to inf is read
# the same way instead of becoming NaN. Eager code skips the pass when no phase of a block gets that large.


def reaches_whole_turns(t: torch.Tensor, cycles: torch.Tensor) -> bool:
    """Whether some phase ``t * cycles`` may reach 2**53 turns (always True where values cannot be read)."""
    return not can_inspect_values(t) or bool(t.numel() and bool(t.abs().max() * cycles.max() >= _WHOLE_TURNS))


def whole_turns_as_zero(turns: torch.Tensor) -> torch.Tensor:
    """``turns`` with every phase of 2**53 turns or more (or infinite) read as 0."""
    return torch.where(turns.abs() < _WHOLE_TURNS, turns, torch.zeros((), dtype=turns.dtype, device=turns.device))
