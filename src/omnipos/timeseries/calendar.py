"""Calendar and raw times -> float64 offsets from a named origin, and padded batches of timelines.

Calendar times (``numpy.datetime64``, ``datetime.datetime``, pandas timestamps) are converted once, in integer
ticks, to float64 offsets in ``unit`` from an ``origin`` chosen by name:

- ``"first"``: each timeline's first event (so every timeline starts at 0);
- ``"epoch"``: 1970-01-01T00:00 UTC (for durations and plain floats: their own zero);
- a reference time (a datetime-like, or an ISO string such as ``"2020-01-01"``; a float in ``unit`` for floats).

Times before the origin become negative offsets; that is allowed. Whatever the origin, the *clock* of each
timeline is kept too: the time of its origin in ``unit`` since the epoch, so ``times + clock`` is clock time
(what time-of-day and day-of-week features need; see :func:`batch_timelines` ``return_clock``).

Range and resolution: times are counted in the finest of nanoseconds, microseconds, milliseconds or seconds that
holds every value exactly in 64 bits. Nanoseconds only reach 1677-2262; a "9999-12-31" end-date placeholder is
counted in microseconds (Python datetimes, pandas >= 2 and MEDS Parquet use microseconds anyway). Times that need
both (sub-microsecond detail and dates outside 1677-2262) are refused by name, never wrapped around.

Time zones: timezone-aware times are read in UTC. Naive times (no zone: numpy datetime64, naive datetimes, ISO
strings without an offset) mixed with aware ones are refused unless ``naive_as="UTC"`` says what the naive ones
mean. An ISO string that ends in a UTC offset (``"2024-03-31T00:00+01:00"``) or ``"Z"`` is aware, exactly as a
``pandas.Timestamp`` with that offset (:func:`parse_time_string` reads every time string of this package).
"""

from __future__ import annotations

import datetime as _dt
import re
import warnings
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import torch

from ..core import pad_ragged
from .durations import UNITS, check_unit, parse_duration

__all__ = [
    "ORIGINS",
    "NAIVE_AS",
    "TICK_UNITS",
    "as_time_array",
    "read_times",
    "check_awareness",
    "check_naive_as",
    "parse_origin",
    "parse_time_string",
    "common_ticks",
    "align_origin",
    "is_missing",
    "offsets_from_origin",
    "to_offsets",
    "batch_timelines",
]

ORIGINS = ("first", "epoch")
NAIVE_AS = ("UTC",)
#: integer tick units of calendar times, finest first, with ticks per second
TICK_UNITS = {"ns": 10**9, "us": 10**6, "ms": 10**3, "s": 1}
_INT64_MAX = 2**63 - 1
_FINER = {"ps": 10**3, "fs": 10**6, "as": 10**9}  # numpy units finer than ns: ticks per ns


#: an ISO date-time ending in a UTC offset ("+01:00", "-0530", "+05") or "Z": the local part and the offset
_ISO_WITH_OFFSET = re.compile(
    r"^\s*(?P<local>[+-]?\d{4,}-\d{2}-\d{2}[T ]\d{2}(?::\d{2}(?::\d{2}(?:[.,]\d+)?)?)?)\s*"
    r"(?:(?P<z>[Zz])|(?P<sign>[+-])(?P<hours>\d{2})(?::?(?P<minutes>\d{2}))?)\s*$")


def parse_time_string(text: str, name: str, expected: str = "an ISO date / time") -> tuple[np.datetime64, str]:
    """An ISO date / date-time string -> ``(datetime64, awareness)``: the one reader of time strings.

    A string ending in a UTC offset (``"2024-03-31T00:00+01:00"``, ``"...-0530"``) or ``"Z"`` names an instant:
    it comes back in UTC at the string's own resolution, ``"aware"``, exactly as a ``pandas.Timestamp`` or an
    aware ``datetime`` with that offset. Without one it is a naive wall-clock time (``"naive"``). Anything else
    numpy cannot read without guessing a zone is refused by ``name`` (numpy would only warn and shift it);
    text that is no time at all is refused as not ``expected``.
    """
    match = _ISO_WITH_OFFSET.match(text)
    if match:
        local = _naive_datetime64(match["local"].replace(",", ".").replace(" ", "T"), text, name, expected)
        if match["z"]:
            return local, "aware"
        hours, minutes = int(match["hours"]), int(match["minutes"] or 0)
        if hours >= 24 or minutes >= 60:
            raise ValueError(f"{name} {text!r} has a UTC offset out of range (hours < 24, minutes < 60)")
        offset = (hours * 60 + minutes) * (1 if match["sign"] == "+" else -1)
        return local - np.timedelta64(offset, "m"), "aware"  # local time = UTC + offset
    return _naive_datetime64(text, text, name, expected), "naive"


def _naive_datetime64(local: str, text: str, name: str, expected: str) -> np.datetime64:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "no explicit representation of timezones": a zone it shifted
        try:
            value = np.datetime64(local)
        except (UserWarning, DeprecationWarning):
            raise ValueError(f"{name} {text!r}: its time zone could not be read; end it with a UTC offset such "
                             f"as '+01:00' or 'Z', or give a timezone-aware datetime / pandas.Timestamp") from None
        except (TypeError, ValueError, OverflowError):
            value = None
    if value is None or np.isnat(value):
        raise ValueError(f"{name} must be {expected} such as '2024-03-31T00:00' or '2024-03-31T00:00+01:00', "
                         f"got {text!r}")
    return value


def _naive_utc(value: _dt.datetime) -> _dt.datetime:
    return value.astimezone(_dt.timezone.utc).replace(tzinfo=None) if value.tzinfo is not None else value


def _is_aware(value: Any) -> bool:
    return isinstance(value, _dt.datetime) and value.tzinfo is not None and value.utcoffset() is not None


def check_naive_as(naive_as: Any) -> str | None:
    if naive_as is not None and (not isinstance(naive_as, str) or naive_as not in NAIVE_AS):
        raise ValueError(f"naive_as must be None (refuse naive times mixed with timezone-aware ones) or "
                         f"{', '.join(map(repr, NAIVE_AS))}, got {naive_as!r}")
    return naive_as


def check_awareness(found: set[str], naive_as: Any, name: str) -> None:
    """Refuse naive and timezone-aware times together (``found`` holds ``"naive"`` / ``"aware"``) unless
    ``naive_as`` names the zone of the naive ones."""
    if {"naive", "aware"} <= found and check_naive_as(naive_as) is None:
        raise ValueError(
            f"{name} mix naive datetimes (no time zone) and timezone-aware ones: the naive ones could be in any "
            f"zone. Pass naive_as='UTC' to read naive times as UTC, or make them all aware or all naive")


def _datetime64(value: Any) -> np.datetime64:
    """One datetime-like (aware ones converted to UTC) -> numpy datetime64 at its own resolution."""
    if hasattr(value, "to_datetime64"):  # pandas.Timestamp: its own unit (ns, us, ...)
        if getattr(value, "tz", None) is not None:
            value = value.tz_convert(None)
        return value.to_datetime64()
    if isinstance(value, _dt.datetime):
        return np.datetime64(_naive_utc(value), "us")
    return np.datetime64(value)


def read_times(times: Any, name: str, *, naive_as: Any = None) -> tuple[np.ndarray, str | None]:
    """One timeline (any supported time input) -> ``(array, awareness)``.

    ``array`` is 1-D: float64, or datetime64 / timedelta64 counted in one of :data:`TICK_UNITS`; ``awareness`` is
    ``"naive"`` or ``"aware"`` for calendar times (``None`` otherwise). ``name`` is used in error messages.
    """
    aware_series = False
    if isinstance(times, torch.Tensor):
        if times.is_meta:
            raise ValueError(f"{name} is a meta tensor: it holds no times to read")
        if times.dtype == torch.bool or times.is_complex():
            raise TypeError(f"{name} must hold real numbers or times, got a {times.dtype} tensor")
        times = times.detach().cpu().to(torch.float64).numpy()
    dtype = getattr(times, "dtype", None)
    if getattr(dtype, "tz", None) is not None:  # tz-aware pandas Series / DatetimeIndex: to naive UTC
        times = times.dt.tz_convert(None) if hasattr(times, "dt") else times.tz_convert(None)
        aware_series = True
    if hasattr(times, "to_numpy"):
        times = times.to_numpy()
    try:
        array = np.asarray(times)
    except (TypeError, ValueError) as exc:  # ragged nested lists and the like
        raise ValueError(f"{name} must be one timeline (1-D): {exc}") from None
    if array.ndim != 1:
        shape = "a scalar" if array.ndim == 0 else f"shape {array.shape}"
        raise ValueError(f"{name} must be one timeline (1-D), got {shape}; pass a list of timelines, one per row")
    awareness = None
    if array.dtype == object:
        array, awareness = _read_objects(array, name, naive_as)
    kind = array.dtype.kind
    if kind == "M":
        return _to_tick_unit(array, name), awareness or ("aware" if aware_series else "naive")
    if kind == "m":
        return _to_tick_unit(array, name), None
    if kind in "iuf":
        return array.astype(np.float64), None
    if kind == "b":
        raise TypeError(f"{name} must hold numbers or times, got booleans")
    raise TypeError(f"{name} must hold numbers or times, got an array of dtype {array.dtype}")


def as_time_array(times: Any, name: str, *, naive_as: Any = None) -> np.ndarray:
    """One timeline -> a 1-D array (see :func:`read_times`) without the awareness."""
    return read_times(times, name, naive_as=naive_as)[0]


def _read_objects(array: np.ndarray, name: str, naive_as: Any) -> tuple[np.ndarray, str | None]:
    values = array.tolist()
    first = next((v for v in values if not _null(v)), None)
    if isinstance(first, (_dt.timedelta, np.timedelta64)) or hasattr(first, "to_timedelta64"):
        try:
            parts = [np.timedelta64("NaT") if _null(v) else
                     v.to_timedelta64() if hasattr(v, "to_timedelta64") else np.timedelta64(v) for v in values]
        except (TypeError, ValueError, OverflowError):
            kinds = sorted({type(v).__name__ for v in values if not _null(v)})
            raise TypeError(f"{name} must hold one kind of time, got a mix of {', '.join(kinds)}") from None
        return _unify_scalars(parts, "m", name), None
    if isinstance(first, (_dt.datetime, _dt.date, np.datetime64)) or hasattr(first, "to_datetime64"):
        found = {"aware" if _is_aware(v) else "naive" for v in values if not _null(v)}
        check_awareness(found, naive_as, name)
        try:
            parts = [np.datetime64("NaT") if _null(v) else _datetime64(v) for v in values]
        except (TypeError, ValueError, OverflowError):
            kinds = sorted({type(v).__name__ for v in values if not _null(v)})
            raise TypeError(f"{name} must hold one kind of time, got a mix of {', '.join(kinds)}") from None
        return _unify_scalars(parts, "M", name), ("aware" if found == {"aware"} else "naive")
    try:
        return array.astype(np.float64), None
    except (TypeError, ValueError):
        raise TypeError(f"{name} must hold numbers or times (datetime64, timedelta64, datetime, pandas "
                        f"timestamps), got {type(first).__name__}") from None


def _null(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value) or (isinstance(value, (np.datetime64, np.timedelta64)) and np.isnat(value))
    except (TypeError, ValueError):
        return False


def _unify_scalars(parts: list[Any], kind: str, name: str) -> np.ndarray:
    """numpy datetime64 / timedelta64 scalars of any units -> one array at a common tick unit (no wrap)."""
    nat = "NaT"
    by_unit: dict[str, list[int]] = {}
    for i, v in enumerate(parts):
        if isinstance(v, (np.datetime64, np.timedelta64)) and not np.isnat(v):
            by_unit.setdefault(np.datetime_data(v.dtype)[0], []).append(i)
        elif not (isinstance(v, (np.datetime64, np.timedelta64)) and np.isnat(v)):
            raise TypeError(f"{name} mixes times with {type(v).__name__}; give one kind of time per timeline")
    letter = "datetime64" if kind == "M" else "timedelta64"
    groups = {u: np.array([parts[i] for i in idx], dtype=f"{letter}[{u}]") for u, idx in by_unit.items()}
    groups = dict(zip(groups, common_ticks([_to_tick_unit(g, name) for g in groups.values()], name)))
    unit = np.datetime_data(next(iter(groups.values())).dtype)[0] if groups else "s"
    out = np.full(len(parts), np.datetime64(nat) if kind == "M" else np.timedelta64(nat), dtype=f"{letter}[{unit}]")
    for u, idx in by_unit.items():
        out[idx] = groups[u]
    return out


#: seconds per tick of every numpy unit with a fixed length
_SECONDS = {"W": Fraction(604800), "D": Fraction(86400), "h": Fraction(3600), "m": Fraction(60), "s": Fraction(1),
            "ms": Fraction(1, 10**3), "us": Fraction(1, 10**6), "ns": Fraction(1, 10**9),
            "ps": Fraction(1, 10**12), "fs": Fraction(1, 10**15), "as": Fraction(1, 10**18)}
_NAT = np.iinfo(np.int64).min


def _to_tick_unit(array: np.ndarray, name: str) -> np.ndarray:
    """datetime64 / timedelta64 at any numpy unit -> the same values counted in one of :data:`TICK_UNITS`:
    the coarsest one that holds them exactly (minutes .. weeks become seconds; finer than ns must be whole ns)."""
    unit, count = np.datetime_data(array.dtype)
    if unit in TICK_UNITS and count == 1:
        return array
    letter = "datetime64" if array.dtype.kind == "M" else "timedelta64"
    if unit == "generic":  # only NaT has no unit
        return array.astype(f"{letter}[s]")
    if unit in ("Y", "M"):
        if array.dtype.kind == "m":
            raise ValueError(f"{name}: durations in {unit!r} (months / years) have no fixed length; give them "
                             f"in days or finer")
        array, unit, count = array.astype("datetime64[D]"), "D", 1  # calendar months and years, exact in days
    seconds = _SECONDS[unit] * count
    target = next((t for t in reversed(TICK_UNITS) if (seconds * TICK_UNITS[t]).denominator == 1), "ns")
    return _convert_ticks(array, target, name)


def _convert_ticks(array: np.ndarray, target: str, name: str) -> np.ndarray:
    """The same times counted in ``target`` (one of :data:`TICK_UNITS`); ValueError (never numpy's silent
    wrap-around) when a value is not a whole number of ``target`` ticks or does not fit in int64."""
    unit, count = np.datetime_data(array.dtype)
    letter = "datetime64" if array.dtype.kind == "M" else "timedelta64"
    if unit == target and count == 1:
        return array
    factor = _SECONDS[unit] * count * TICK_UNITS[target]
    ticks = array.view(np.int64)
    real = ticks != _NAT
    values = ticks[real]
    if factor.denominator != 1 and (values % factor.denominator).any():
        raise ValueError(f"{name}: times in {count}{unit} are finer than {target}; round them first")
    if values.size and max(abs(int(values.min())), abs(int(values.max()))) * factor > _INT64_MAX:
        raise ValueError(
            f"{name}: times out of range: {array[real].min()} .. {array[real].max()} cannot be counted in "
            f"{target} in 64 bits (nanoseconds reach only the years 1677-2262)")
    out = np.full(ticks.shape, _NAT, dtype=np.int64)
    out[real] = values // factor.denominator * factor.numerator if factor.denominator != 1 else \
        values * factor.numerator
    return out.view(f"{letter}[{target}]")


def _resolution(ticks: np.ndarray, unit: str) -> str:
    """The coarsest tick unit in which every (non-NaT) value of ``ticks`` (counted in ``unit``) is whole."""
    real = ticks[ticks != _NAT]
    names = list(TICK_UNITS)
    for coarser in reversed(names[names.index(unit):]):
        step = TICK_UNITS[unit] // TICK_UNITS[coarser]
        if step == 1 or not (real % step).any():
            return coarser
    return unit


def common_ticks(arrays: list[np.ndarray], name: str) -> list[np.ndarray]:
    """datetime64 (or timedelta64) arrays in :data:`TICK_UNITS` -> the same values in one common tick unit.

    The unit is the finest resolution any value needs (so nothing is rounded); every value must fit in it
    (nanoseconds reach only 1677-2262), else ValueError naming ``name``.
    """
    units = {np.datetime_data(a.dtype)[0] for a in arrays}
    if len(units) <= 1:
        return arrays
    order = list(TICK_UNITS)
    needed = min((_resolution(a.view(np.int64), np.datetime_data(a.dtype)[0]) for a in arrays if a.size),
                 key=order.index, default="s")
    out = []
    for a in arrays:
        try:
            out.append(_convert_ticks(a, needed, name))
        except ValueError:
            raise ValueError(
                f"{name}: some times need {needed} resolution and others lie outside what a 64-bit count of "
                f"{needed} holds (nanoseconds reach only 1677-2262): round the fine ones to microseconds or "
                f"coarser") from None
    return out


def align_origin(arrays: list[np.ndarray], fixed: Any, name: str) -> tuple[list[np.ndarray], Any]:
    """Calendar arrays (in :data:`TICK_UNITS`) and a fixed origin (:func:`parse_origin`, or None) -> the same
    in one common tick unit (see :func:`common_ticks`)."""
    extra = [] if fixed is None else [_to_tick_unit(np.array([fixed]), "origin")]
    unified = common_ticks(list(arrays) + extra, name)
    return unified[: len(arrays)], (None if fixed is None else unified[-1][0])


def parse_origin(origin: Any, kind: str, unit: str) -> tuple[Any, str | None]:
    """A fixed origin for times of ``kind`` -> ``(value, awareness)``; value None for ``"first"``.

    ``kind`` is 'M' (datetime: the value is a datetime64 at its own resolution), 'm' (timedelta: a timedelta64)
    or 'f' (plain floats in ``unit``: a finite float).
    """
    if isinstance(origin, str) and origin == "first":
        return None, None
    if isinstance(origin, str) and origin == "epoch":
        return {"M": np.datetime64(0, "s"), "m": np.timedelta64(0, "s"), "f": 0.0}[kind], None
    if kind == "f":
        if isinstance(origin, (int, float, np.integer, np.floating)) and not isinstance(origin, bool):
            try:
                value = float(origin)
            except OverflowError:  # a Python int beyond float64
                value = float("inf")
            if not np.isfinite(value):
                raise ValueError(f"origin must be finite, got {origin!r}")
            return value, None
        raise TypeError(f"origin for plain float times must be 'first', 'epoch' or a number in {unit!r}, "
                        f"got {origin!r}")
    if kind == "m":
        if isinstance(origin, np.timedelta64) and not np.isnat(origin):
            return origin, None
        try:
            micros = parse_duration(origin, "s", name="origin") * 10**6
        except (TypeError, ValueError):
            raise TypeError(f"origin for timedelta times must be 'first', 'epoch' or a duration, got {origin!r}"
                            ) from None
        if abs(micros) > _INT64_MAX:
            raise ValueError(f"origin {origin!r} is out of range")
        return np.timedelta64(int(round(micros)), "us"), None
    if isinstance(origin, str):
        return parse_time_string(origin, "origin", f"one of {', '.join(map(repr, ORIGINS))} or an ISO time")
    awareness = "aware" if _is_aware(origin) or getattr(origin, "tz", None) is not None else "naive"
    value = None
    if not isinstance(origin, (bool, int, float, np.integer, np.floating)):
        try:
            value = _datetime64(origin)
        except (TypeError, ValueError, OverflowError):
            value = None
    if value is None or not isinstance(value, np.datetime64) or np.isnat(value):
        raise ValueError(f"origin must be one of {', '.join(map(repr, ORIGINS))} or a reference time "
                         f"(datetime, numpy.datetime64, pandas.Timestamp, ISO string), got {origin!r}")
    return value, awareness


def is_missing(array: np.ndarray) -> np.ndarray:
    return np.isnat(array) if array.dtype.kind in "Mm" else ~np.isfinite(array)


def to_offsets(times: Any, *, unit: str = "h", origin: Any = "epoch", naive_as: Any = None,
               name: str = "times") -> torch.Tensor:
    """One timeline (any 1-D time input) -> float64 offsets in ``unit`` from ``origin``, as a ``[L]`` tensor.

    Plain numbers are already in ``unit``; datetimes are subtracted from the origin in integer ticks,
    then divided once. NaN/NaT raise; use :func:`batch_timelines` with ``drop_missing=True`` to drop them.
    """
    return batch_timelines([times], unit=unit, origin=origin, sort=False, naive_as=naive_as, name=name)[0][0]


def batch_timelines(
    timelines: Sequence[Any],
    *,
    unit: str = "h",
    origin: Any = "first",
    sort: bool = False,
    drop_missing: bool = False,
    naive_as: Any = None,
    return_clock: bool = False,
    name: str = "timelines",
) -> tuple[torch.Tensor, ...]:
    """A list of B timelines -> ``(times [B, L] float64 in unit from origin, mask [B, L] bool)``.

    Each timeline is a list / array / tensor / pandas Series of plain numbers (read in ``unit``),
    ``datetime64``, ``timedelta64``, ``datetime`` or pandas timestamps; all timelines must be of one kind.
    Padding goes through :func:`omnipos.core.pad_ragged` (padded slots hold 0 and are False in the mask).

    Args:
        unit: unit of plain numbers, and of the returned offsets.
        origin: ``"first"`` (each timeline's first event; the default), ``"epoch"`` or a reference time (an
            ISO string that names its offset, ``"2024-03-31T00:00+01:00"`` or ``"...Z"``, is timezone-aware).
        sort: sort each timeline (a stable sort). Without it an unsorted timeline raises ValueError.
        drop_missing: drop NaN / NaT times instead of raising.
        naive_as: ``"UTC"`` to read naive datetimes as UTC when they are mixed with timezone-aware ones
            (refused otherwise).
        return_clock: also return ``clock [B]`` float64: the clock time of each row's origin, in ``unit`` since
            the epoch 1970-01-01 UTC (plain numbers and durations: since their own zero), so that
            ``times + clock[:, None]`` is each event's clock time. Pass it to
            :class:`~omnipos.timeseries.TimelineEncoder` / :func:`~omnipos.timeseries.periodic_encoding` as
            ``clock=``: time-of-day features need clock time, whatever the origin.

    Returns:
        ``(times, mask)``, or ``(times, mask, clock)`` with ``return_clock=True``.

    Empty timelines give all-masked rows (clock 0 with ``origin="first"``); duplicate times are kept (gap 0).
    """
    unit = check_unit(unit)
    check_naive_as(naive_as)
    if isinstance(timelines, (str, torch.Tensor, np.ndarray)) or not isinstance(timelines, Sequence):
        raise TypeError(f"{name} must be a list of timelines (one array / list / Series per row), "
                        f"got {type(timelines).__name__}")
    read = [read_times(t, f"{name}[{i}]", naive_as=naive_as) for i, t in enumerate(timelines)]
    if not read:
        raise ValueError(f"{name} is empty; pass at least one (possibly empty) timeline")
    kinds = {a.dtype.kind for a, _ in read if a.size}
    if len(kinds) > 1:
        raise TypeError(f"{name} mix plain numbers, datetimes and durations; give every timeline in one kind")
    kind = kinds.pop() if kinds else "f"
    fixed, origin_awareness = parse_origin(origin, kind, unit)
    check_awareness({aw for a, aw in read if a.size and aw} | ({origin_awareness} - {None}), naive_as, name)
    arrays = [a for a, _ in read]
    if kind in "Mm":
        letter = "datetime64" if kind == "M" else "timedelta64"
        arrays = [a if a.dtype.kind == kind else a.astype(f"{letter}[s]") for a in arrays]  # empty rows
        arrays, fixed = align_origin(arrays, fixed, name)
    else:
        arrays = [a if a.dtype.kind == "f" else np.zeros(0) for a in arrays]  # (an empty row of another kind)
    lengths = np.array([a.size for a in arrays], dtype=np.int64)
    flat = np.concatenate(arrays)
    row = np.repeat(np.arange(len(arrays)), lengths)
    missing = is_missing(flat)
    if missing.any():
        if not drop_missing:
            i = int(np.flatnonzero(missing)[0])
            start = int(lengths[: row[i]].sum())
            raise ValueError(f"{name}[{row[i]}] has a missing or infinite time (NaN/NaT/inf) at position "
                             f"{i - start}; pass drop_missing=True to drop such events")
        flat, row = flat[~missing], row[~missing]
        lengths = np.bincount(row, minlength=len(arrays)).astype(np.int64)
    if sort:
        key = flat.view(np.int64) if kind in "Mm" else flat
        order = np.lexsort((key, row))  # stable: ties keep their given order
        flat = flat[order]
    else:
        _check_sorted_flat(flat, row, lengths, name)
    values, clock = offsets_from_origin(flat, lengths, fixed=fixed, unit=unit, name=name)
    flat_t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64))
    times, mask = pad_ragged(list(flat_t.split(lengths.tolist())), 0.0)
    return (times, mask, torch.from_numpy(clock)) if return_clock else (times, mask)


def offsets_from_origin(flat: np.ndarray, lengths: np.ndarray, *, fixed: Any, unit: str,
                        name: str = "times") -> tuple[np.ndarray, np.ndarray]:
    """Sorted flat times of consecutive timelines (``lengths`` each) -> ``(offsets [N], clock [B])`` float64 in
    ``unit``.

    ``flat`` is float64 (already in ``unit``), or datetime64 / timedelta64 in one of :data:`TICK_UNITS`;
    ``fixed`` is the origin (:func:`parse_origin`, in ``flat``'s unit) or None for each timeline's first event.
    Calendar times are subtracted from the origin in integer ticks before the one division to float;
    ``clock`` is each row's origin in ``unit`` since the epoch (0 for an empty row with ``fixed=None``).
    """
    nonempty = lengths > 0
    starts = (np.cumsum(lengths) - lengths)[nonempty]
    if flat.dtype.kind == "f":
        if fixed is not None:
            ref = np.full(len(lengths), float(fixed))
        else:
            ref = np.zeros(len(lengths))
            ref[nonempty] = flat[starts]
        with np.errstate(over="ignore"):
            offsets = flat - np.repeat(ref, lengths)
        if not np.isfinite(offsets).all():
            raise ValueError(f"{name}: times and their origin are too far apart for float64 (their difference "
                             f"overflows); give them in a larger unit")
        return offsets, ref
    ticks = flat.view(np.int64)
    tick_unit = np.datetime_data(flat.dtype)[0]
    if fixed is None:
        ref = np.zeros(len(lengths), dtype=np.int64)
        ref[nonempty] = ticks[starts]
    else:
        ref = np.full(len(lengths), np.asarray(fixed).astype(flat.dtype).view(np.int64), dtype=np.int64)
    if ticks.size:  # the differences must fit in int64 (they do unless times span ~290,000 years in us)
        lo, hi = int(ticks.min()), int(ticks.max())
        rlo, rhi = int(ref.min()), int(ref.max())
        if max(hi - rlo, rhi - lo) > _INT64_MAX:
            raise ValueError(f"{name}: times and their origin are too far apart to count in {tick_unit} "
                             f"(more than 2**63 ticks)")
    per_unit = float(UNITS[unit] * TICK_UNITS[tick_unit])
    offsets = (ticks - np.repeat(ref, lengths)).astype(np.float64) / per_unit
    return offsets, ref.astype(np.float64) / per_unit


def _check_sorted_flat(flat: np.ndarray, row: np.ndarray, lengths: np.ndarray, name: str) -> None:
    if flat.size < 2:
        return
    same_row = row[1:] == row[:-1]
    bad = np.flatnonzero(same_row & (flat[1:] < flat[:-1]))
    if bad.size:
        i = int(bad[0]) + 1
        start = int(lengths[: row[i]].sum())
        raise ValueError(f"{name}[{row[i]}] is not sorted: position {i - start} ({flat[i]}) comes before "
                         f"position {i - start - 1} ({flat[i - 1]}); pass sort=True to sort timelines")
