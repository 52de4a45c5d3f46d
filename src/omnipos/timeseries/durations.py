"""Time units and durations: the one rule every time-series function shares.

Plain float times are read in hours unless the function's ``unit=`` argument names another unit, and periods or
boundaries given as plain floats are in that same unit. Durations may also be strings with a unit (``"24h"``,
``"7d"``, ``"30min"``, ``"1.5w"``), ``datetime.timedelta``, ``numpy.timedelta64`` or ``pandas.Timedelta``.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "UNITS",
    "NS_PER_S",
    "check_unit",
    "parse_duration",
    "parse_durations",
    "positive_duration",
    "nanoseconds_to_unit",
]

#: Seconds per unit. Integers, so unit-to-unit factors are exact ("1d" is exactly 1440 min).
UNITS: dict[str, int] = {"s": 1, "min": 60, "h": 3600, "d": 86400, "w": 604800}
NS_PER_S = 1_000_000_000
_DURATION = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([a-zA-Z]+)\s*$")


def check_unit(unit: Any, name: str = "unit") -> str:
    """Return ``unit`` when it is a known time unit, else raise a ValueError listing the known ones."""
    if not isinstance(unit, str) or unit not in UNITS:
        raise ValueError(f"{name}: unknown time unit {unit!r}; known units: {', '.join(UNITS)}")
    return unit


def parse_duration(value: Any, unit: str = "h", *, name: str = "duration") -> float:
    """A duration -> float in ``unit``.

    ``value`` is a string with a unit (``"24h"``, ``"7d"``, ``"30min"``, ``"1w"``, ``"90s"``), a plain number
    (already in ``unit``), a ``datetime.timedelta`` or a ``numpy.timedelta64``.

    >>> parse_duration("7d"), parse_duration("30min"), parse_duration("1d", "min")
    (168.0, 0.5, 1440.0)
    """
    unit = check_unit(unit)
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(
                f"{name}: cannot read {value!r} as a duration; expected a number and a unit such as '24h', '7d', "
                f"'30min' (known units: {', '.join(UNITS)})"
            )
        number, given = match.groups()
        check_unit(given, name)
        return float(number) * UNITS[given] / UNITS[unit]
    if isinstance(value, _dt.timedelta):
        return nanoseconds_to_unit(np.timedelta64(value, "ns").astype(np.int64), unit)
    if isinstance(value, np.timedelta64):
        return nanoseconds_to_unit(value.astype("timedelta64[ns]").astype(np.int64), unit)
    if hasattr(value, "to_timedelta64"):  # pandas.Timedelta
        return nanoseconds_to_unit(value.to_timedelta64().astype("timedelta64[ns]").astype(np.int64), unit)
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"{name} must be finite, got {value!r}")
        return number
    raise TypeError(f"{name} must be a string like '24h', a number in {unit!r} or a timedelta, got {value!r}")


def parse_durations(values: Any, unit: str, name: str) -> tuple[float, ...]:
    """A sequence of positive durations (see :func:`parse_duration`) -> floats in ``unit``."""
    if isinstance(values, (str, int, float)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a sequence of durations such as ('24h', '7d'), got {values!r}")
    out = tuple(parse_duration(v, unit, name=f"{name}[{i}]") for i, v in enumerate(values))
    if not out:
        raise ValueError(f"{name} must not be empty")
    for i, v in enumerate(out):
        if not v > 0:
            raise ValueError(f"{name}[{i}] must be a positive duration, got {values[i]!r}")
    return out


def nanoseconds_to_unit(ns: Any, unit: str) -> Any:
    """Integer nanoseconds (scalar or array) -> float64 in ``unit`` (one correctly rounded division)."""
    out = np.asarray(ns, dtype=np.float64) / float(UNITS[unit] * NS_PER_S)
    return float(out) if out.ndim == 0 else out


def positive_duration(value: Any, unit: str, name: str) -> float:
    """A duration (see :func:`parse_duration`) that must be > 0, as a float in ``unit``."""
    number = parse_duration(value, unit, name=name)
    if not number > 0:
        raise ValueError(f"{name} must be a positive duration, got {value!r}")
    return number
