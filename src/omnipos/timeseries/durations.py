"""Time units and durations: the one rule every time-series function shares.

Plain float times are read in hours unless the function's ``unit=`` argument names another unit, and periods or
boundaries given as plain floats are in that same unit. Durations may also be strings with a unit (``"24h"``,
``"7d"``, ``"30min"``, ``"1.5w"``), ``datetime.timedelta``, ``numpy.timedelta64`` or ``pandas.Timedelta``.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import sys
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
# the number part only (the unit is split off first): no two adjacent sub-patterns match the same characters,
# so a failing match backtracks in linear time ("1" * 8000 + "!" is refused at once, not in seconds)
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
#: seconds per unit of numpy timedelta64 values with a fixed length (months and years have none)
_NUMPY_SECONDS = {"W": 604800, "D": 86400, "h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9,
                  "ps": 1e-12, "fs": 1e-15, "as": 1e-18}


def check_unit(unit: Any, name: str = "unit") -> str:
    """Return ``unit`` when it is a known time unit, else raise a ValueError listing the known ones."""
    if not isinstance(unit, str) or unit not in UNITS:
        raise ValueError(f"{name}: unknown time unit {unit!r}; known units: {', '.join(UNITS)}")
    return unit


def parse_duration(value: Any, unit: str = "h", *, name: str = "duration") -> float:
    """A duration -> float in ``unit``.

    ``value`` is a string with a unit (``"24h"``, ``"7d"``, ``"30min"``, ``"1w"``, ``"90s"``), a plain number
    (already in ``unit``), a ``datetime.timedelta``, a ``numpy.timedelta64`` or a ``pandas.Timedelta``.
    The result is finite: NaN, inf, NaT, a number too large for float64 (``"1e400h"``) and timedelta64 units
    without a fixed length (months, years) raise ValueError naming ``name``.

    >>> parse_duration("7d"), parse_duration("30min"), parse_duration("1d", "min")
    (168.0, 0.5, 1440.0)
    """
    unit = check_unit(unit)
    if isinstance(value, str):
        number, given = _parse_string(value, name)
        return _finite(number * UNITS[given] / UNITS[unit], value, name)
    if isinstance(value, np.timedelta64):
        return _numpy_timedelta(value, unit, name)
    if isinstance(value, _dt.timedelta):
        # days, seconds and microseconds are exact integers: sum them in integer microseconds
        micros = (value.days * 86400 + value.seconds) * 10**6 + value.microseconds
        return micros / (UNITS[unit] * 10**6)
    if hasattr(value, "to_timedelta64"):  # pandas.Timedelta (and pandas.NaT)
        return _numpy_timedelta(value.to_timedelta64(), unit, name)
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # a Python int beyond float64
            number = float("inf")
        return _finite(number, value, name)
    if type(value).__name__ == "NaTType":  # pandas.NaT (pandas >= 3 gives it no to_timedelta64)
        raise ValueError(f"{name} is NaT (a missing duration); expected a duration")
    raise TypeError(f"{name} must be a string like '24h', a number in {unit!r} or a timedelta, got {value!r}")


def _parse_string(value: str, name: str) -> tuple[float, str]:
    """A duration string -> (its number, its unit), the unit (the trailing letters) checked."""
    text = value.strip()
    cut = len(text)
    while cut and text[cut - 1].isascii() and text[cut - 1].isalpha():  # linear scan, no regex backtracking
        cut -= 1
    number, given = text[:cut].strip(), text[cut:]
    if not given or _NUMBER.fullmatch(number) is None:
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise ValueError(
            f"{name}: cannot read {shown!r} as a duration; expected a number and a unit such as '24h', '7d', "
            f"'30min' (known units: {', '.join(UNITS)})"
        )
    check_unit(given, name)
    return float(number), given


def _numpy_timedelta(value: np.timedelta64, unit: str, name: str) -> float:
    if np.isnat(value):
        raise ValueError(f"{name} is NaT (a missing duration); expected a duration")
    code, count = np.datetime_data(value.dtype)
    if code not in _NUMPY_SECONDS:
        raise ValueError(f"{name}: a timedelta64 in {code!r} has no fixed length (months and years vary); "
                         f"give it in days or finer")
    ticks = int(value.astype(np.int64)) * count  # exact Python integer in its own unit: no wrap-around
    seconds = _NUMPY_SECONDS[code]
    if seconds >= 1:
        return _finite(ticks * int(seconds) / UNITS[unit], value, name)
    per_second = round(1 / seconds)
    return _finite(ticks / (per_second * UNITS[unit]), value, name)


def _finite(number: float, value: Any, name: str) -> float:
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite duration, got {value!r}")
    return number


def parse_durations(values: Any, unit: str, name: str) -> tuple[float, ...]:
    """A sequence of positive durations (see :func:`parse_duration`) -> floats in ``unit``."""
    if isinstance(values, (str, int, float)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a sequence of durations such as ('24h', '7d'), got {values!r}")
    out = tuple(parse_duration(v, unit, name=f"{name}[{i}]") for i, v in enumerate(values))
    if not out:
        raise ValueError(f"{name} must not be empty")
    for i, v in enumerate(out):
        _check_positive(v, values[i], f"{name}[{i}]")
    return out


def _check_positive(number: float, value: Any, name: str) -> None:
    # durations divide times: one below the smallest normal float64 (1e-310 h) has an infinite reciprocal
    if not number >= sys.float_info.min:
        what = "a positive duration" if not number > 0 else "a duration of at least 2.2e-308 (its reciprocal " \
                                                              "must be finite)"
        raise ValueError(f"{name} must be {what}, got {value!r}")


def nanoseconds_to_unit(ns: Any, unit: str) -> Any:
    """Integer nanoseconds (scalar or array) -> float64 in ``unit`` (one correctly rounded division)."""
    out = np.asarray(ns, dtype=np.float64) / float(UNITS[unit] * NS_PER_S)
    return float(out) if out.ndim == 0 else out


def positive_duration(value: Any, unit: str, name: str) -> float:
    """A duration (see :func:`parse_duration`) that must be > 0, as a float in ``unit``."""
    number = parse_duration(value, unit, name=name)
    _check_positive(number, value, name)
    return number
