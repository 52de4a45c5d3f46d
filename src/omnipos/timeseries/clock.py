"""Clock time for periodic features: the epoch, a time zone for local time of day, and a phase origin.

Periodic features (time of day, day of week) only mean something on the clock, never on a timeline's own zero
(a patient's first event is at a random hour). Every batch therefore carries, next to its relative ``times``, the
*clock* of each row: the time of the row's origin in ``unit`` since the epoch 1970-01-01T00:00 UTC, so that
``times + clock[..., None]`` is UTC clock time (:func:`~omnipos.timeseries.batch_timelines` with
``return_clock=True``, :attr:`EventBatch.clock <omnipos.timeseries.EventBatch>`).

Local time of day needs the zone's UTC offset at each instant, daylight saving time included: a zone is turned
once into a table of transition instants and offsets (Python's :mod:`zoneinfo`, the IANA database), and each
event looks up its offset with ``torch.bucketize``: vectorised, on any device, traceable by ``torch.compile``.
The table covers 1900-2100 (sampled daily, each change located to the second); outside it the offset in force
at the nearest edge applies.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

import numpy as np
import torch

from ..core import can_inspect_values
from .calendar import parse_time_string
from .durations import UNITS

__all__ = ["timezone_name", "timezone_table", "timezone_tensors", "local_offset", "clock_tensor", "clock_number",
           "phase_shift"]

_OFFSET = re.compile(r"^(?:UTC)?([+-])(\d{1,2})(?::?(\d{2}))?$")
_TABLE_YEARS = (1900, 2100)
# caches of canonical zone names and of their tables (configuration, small: one entry per zone used)
_NAMES: dict[str, str] = {}
_TABLES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
#: bound on clock values: beyond it ``clock + offset - phase origin`` could overflow float64 (no real clock is near)
MAX_CLOCK = 1e300


def timezone_name(timezone: Any) -> str:
    """A time zone (None or ``"UTC"``, an IANA name such as ``"Europe/Paris"``, a fixed offset ``"+05:30"``,
    a ``zoneinfo.ZoneInfo`` or ``datetime.timezone``) -> its canonical name (checked to exist)."""
    if timezone is None:
        return "UTC"
    if isinstance(timezone, _dt.timezone):
        offset = timezone.utcoffset(None)
        return "UTC" if not offset else _format_offset(offset.total_seconds())
    key = getattr(timezone, "key", None)  # zoneinfo.ZoneInfo
    if isinstance(key, str):
        timezone = key
    if not isinstance(timezone, str):
        raise TypeError(f"timezone must be None, a name such as 'UTC', 'Europe/Paris' or '+05:30', or a "
                        f"zoneinfo.ZoneInfo / datetime.timezone, got {type(timezone).__name__}")
    name = _NAMES.get(timezone)  # a plain dict: torch.compile traces the lookup of a known zone, no zoneinfo
    if name is None:
        name = _NAMES[timezone] = _checked_name(timezone)
    return name


def _checked_name(timezone: str) -> str:
    if timezone in ("UTC", "Z"):
        return "UTC"
    match = _OFFSET.match(timezone)
    if match:
        sign, hours, minutes = match.groups()
        seconds = int(hours) * 3600 + int(minutes or 0) * 60
        if seconds >= 24 * 3600 or int(minutes or 0) >= 60:
            raise ValueError(f"timezone offset {timezone!r} must be under 24 hours")
        return _format_offset(seconds if sign == "+" else -seconds)
    _zone(timezone)  # raises for unknown names
    return timezone


def _format_offset(seconds: float) -> str:
    sign = "-" if seconds < 0 else "+"
    minutes = int(round(abs(seconds))) // 60
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def _zone(name: str) -> Any:
    import zoneinfo

    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"timezone {name!r} is not a known IANA time zone (such as 'Europe/Paris') nor a fixed "
                         f"offset such as '+05:30' (where the system has no time-zone database, "
                         f"pip install tzdata provides one)") from None


def timezone_table(name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(transitions, offsets)`` of a canonical zone name, in seconds: ``offsets[i]`` (UTC offset) holds from
    ``transitions[i - 1]`` (seconds since the epoch, UTC) until ``transitions[i]``; ``len(offsets) ==
    len(transitions) + 1``.

    Built once per zone and process (a few tenths of a second for a zone with daylight saving time) and kept in
    a plain dict, whose lookup ``torch.compile`` traces; a zone first met while compiling is built there (one
    graph break). :class:`~omnipos.timeseries.TimelineEncoder` builds its table when constructed.
    """
    table = _TABLES.get(name)
    if table is None:
        table = _TABLES[name] = _build_table(name)
    return table


def _build_table(name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if name == "UTC":
        return (), (0,)
    if name[0] in "+-":
        hours, minutes = name[1:].split(":")
        seconds = int(hours) * 3600 + int(minutes) * 60
        return (), (seconds if name[0] == "+" else -seconds,)
    zone = _zone(name)
    epoch = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)

    def offset(second: int) -> int:
        return int((epoch + _dt.timedelta(seconds=second)).astimezone(zone).utcoffset().total_seconds())

    start = int((_dt.datetime(_TABLE_YEARS[0], 1, 1, tzinfo=_dt.timezone.utc) - epoch).total_seconds())
    end = int((_dt.datetime(_TABLE_YEARS[1], 1, 1, tzinfo=_dt.timezone.utc) - epoch).total_seconds())
    days = range(start, end + 1, 86400)
    samples = [offset(s) for s in days]
    transitions, offsets = [], [samples[0]]
    for i in np.flatnonzero(np.diff(samples)).tolist():
        lo, hi = days[i], days[i + 1]  # offset(lo) != offset(hi): find the first second with the new offset
        before = offset(lo)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if offset(mid) == before else (lo, mid)
        transitions.append(hi)
        offsets.append(samples[i + 1])
    return tuple(transitions), tuple(offsets)


def timezone_tensors(name: str, unit: str, device: torch.device | str | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`timezone_table` as float64 tensors in ``unit``: ``(transitions [T], offsets [T + 1])``."""
    transitions, offsets = timezone_table(name)
    scale = float(UNITS[unit])
    return (torch.tensor(transitions, dtype=torch.float64, device=device) / scale,
            torch.tensor(offsets, dtype=torch.float64, device=device) / scale)


def local_offset(utc: torch.Tensor, transitions: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The zone's UTC offset (float64, the tables' unit) at UTC clock times ``utc`` (any shape, since the
    epoch); a 0-d tensor for a fixed offset."""
    if transitions.numel() == 0:
        return offsets[0]
    return offsets[torch.bucketize(utc, transitions, right=True)]


def clock_tensor(clock: Any, times: torch.Tensor, name: str = "clock",
                 mask: torch.Tensor | None = None, *, check_values: bool = True) -> torch.Tensor:
    """``clock`` (a number, or a tensor of ``times.shape[:-1]`` or broadcastable to it) -> float64 ``[..., 1]``
    on times' device, ready to add to ``times [..., L]``.

    A row with no real event in ``mask`` may have a NaN clock (missing: :class:`EventBatch` gives it to a subject
    without a timed event); every other clock must be finite. ``check_values=False``: a tensor's values are not
    read (the caller checks them, as the CUDA timeline kernel does in-kernel); types and shapes still are."""
    if isinstance(clock, torch.Tensor):
        if clock.dtype == torch.bool or clock.is_complex():
            raise TypeError(f"{name} must be real-valued, got {clock.dtype}")
        if clock.dtype in (torch.float16, torch.bfloat16):
            raise TypeError(f"{name} must be float64 (or float32 / integer): {clock.dtype} cannot hold clock "
                            f"times (hours since 1970 need 19 bits before the point)")
        if clock.is_meta != times.is_meta:
            raise ValueError(f"{name} is on {clock.device} and times on {times.device}: put both on the meta "
                             f"device or neither")
        value = clock.to(device=times.device, dtype=torch.float64)
        try:
            torch.broadcast_shapes(value.shape, times.shape[:-1])
        except RuntimeError:
            raise ValueError(f"{name} {tuple(value.shape)} must have the shape of times without its last axis, "
                             f"{tuple(times.shape[:-1])} (one clock per timeline), or be a number") from None
        if value.ndim > times.ndim - 1:
            raise ValueError(f"{name} {tuple(value.shape)} has more axes than times without its last axis "
                             f"{tuple(times.shape[:-1])}")
        if check_values and can_inspect_values(value) and value.numel() and \
                not bool((value.abs() <= MAX_CLOCK).all()):
            invalid = ~(value.abs() <= MAX_CLOCK)
            if mask is not None:  # NaN is allowed where the row holds no event
                row_empty = ~mask.any(-1)
                invalid = invalid.expand(row_empty.shape) & ~(value.isnan().expand(row_empty.shape) & row_empty)
                value_all = value.expand(row_empty.shape)
            else:
                value_all = value
            bad = value_all[invalid][0].item() if bool(invalid.any()) else None
        else:
            bad = None
        if bad is not None:
            raise ValueError(f"{name} must be a finite time since the epoch (|clock| <= {MAX_CLOCK:g}), got {bad}")
        return value.unsqueeze(-1)
    return torch.full((1,), clock_number(clock, name), dtype=torch.float64, device=times.device)


def clock_number(clock: Any, name: str = "clock") -> float:
    """A clock given as a number (one for every timeline), checked as :func:`clock_tensor` checks it: a finite
    time since the epoch (TypeError for anything but a real number)."""
    if isinstance(clock, (int, float, np.integer, np.floating)) and not isinstance(clock, bool):
        if not abs(_as_float(clock)) <= MAX_CLOCK:
            raise ValueError(f"{name} must be a finite time since the epoch (|clock| <= {MAX_CLOCK:g}), got "
                             f"{clock!r}")
        return float(clock)
    raise TypeError(f"{name} must be a number or a tensor of one clock time per timeline, got "
                    f"{type(clock).__name__}")


def _as_float(number: Any) -> float:
    try:
        return float(number)
    except OverflowError:  # a Python int beyond float64
        return float("inf")


def phase_shift(phase_origin: Any, unit: str) -> float:
    """The local wall-clock time where every period's phase is 0, in ``unit`` since the epoch's wall clock:
    ``"epoch"`` (1970-01-01T00:00, a Thursday) or a naive datetime-like such as ``"2024-01-01"`` (a Monday)."""
    if isinstance(phase_origin, str) and phase_origin == "epoch":
        return 0.0
    value = None
    aware_text = False
    if isinstance(phase_origin, str):  # the one reader of time strings: it reads an offset / "Z" at the end
        value, awareness = parse_time_string(phase_origin, "phase_origin", "'epoch' or a naive ISO time")
        aware_text = awareness == "aware"
    if isinstance(phase_origin, (_dt.datetime, _dt.date, np.datetime64)) or hasattr(phase_origin,
                                                                                     "to_datetime64"):
        try:
            value = (np.datetime64(phase_origin.to_datetime64() if hasattr(phase_origin, "to_datetime64")
                                   else phase_origin, "s"))
        except (TypeError, ValueError, OverflowError):
            value = None
    if aware_text or getattr(phase_origin, "tzinfo", None) is not None or \
            getattr(phase_origin, "tz", None) is not None:
        raise ValueError(f"phase_origin is a local wall-clock time: give it without a time zone (UTC offset), "
                         f"got {phase_origin!r}")
    if value is None or np.isnat(value):
        raise ValueError(f"phase_origin must be 'epoch' or a naive datetime / ISO string such as '2024-01-01', "
                         f"got {phase_origin!r}")
    return int(value.astype("datetime64[s]").astype(np.int64)) / UNITS[unit]
