"""Calendar and raw times -> float64 offsets from a named origin, and padded batches of timelines.

Calendar times (``numpy.datetime64``, ``datetime.datetime``, pandas timestamps) are converted once, in integer
nanoseconds, to float64 offsets in ``unit`` from an ``origin`` chosen by name:

- ``"first"``: each timeline's first event (so every timeline starts at 0);
- ``"epoch"``: 1970-01-01T00:00 (for durations and plain floats: their own zero);
- a reference time (a datetime-like, or an ISO string such as ``"2020-01-01"``; a float in ``unit`` for floats).

Times before the origin become negative offsets; that is allowed.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..core import pad_ragged
from .durations import NS_PER_S, check_unit, nanoseconds_to_unit, parse_duration

__all__ = ["ORIGINS", "as_time_array", "is_missing", "offsets_from_origin", "to_offsets", "batch_timelines"]

ORIGINS = ("first", "epoch")


def _naive_utc(value: _dt.datetime) -> _dt.datetime:
    return value.astimezone(_dt.timezone.utc).replace(tzinfo=None) if value.tzinfo is not None else value


def as_time_array(times: Any, name: str) -> np.ndarray:
    """Any supported time input (one timeline) -> a 1-D NumPy array: float64, datetime64[ns] or timedelta64[ns];
    ``name`` is used in error messages."""
    if getattr(times, "ndim", 1) > 1:
        raise ValueError(f"{name} must be one timeline (1-D), got shape {tuple(times.shape)}")
    if isinstance(times, torch.Tensor):
        if times.dtype == torch.bool or times.is_complex():
            raise TypeError(f"{name} must hold real numbers or times, got a {times.dtype} tensor")
        return times.detach().cpu().to(torch.float64).reshape(-1).numpy()
    dtype = getattr(times, "dtype", None)
    if getattr(dtype, "tz", None) is not None:  # tz-aware pandas Series / DatetimeIndex: to naive UTC
        times = times.dt.tz_convert(None) if hasattr(times, "dt") else times.tz_convert(None)
    if hasattr(times, "to_numpy"):
        times = times.to_numpy()
    array = np.asarray(times)
    if array.dtype == object:
        flat = array.reshape(-1).tolist()
        first = next((v for v in flat if v is not None and v == v), None)
        if isinstance(first, (_dt.timedelta, np.timedelta64)) or hasattr(first, "to_timedelta64"):
            array = np.array([np.timedelta64("NaT") if v is None else v for v in flat], dtype="timedelta64[ns]")
        elif isinstance(first, (_dt.datetime, _dt.date, np.datetime64)):
            array = np.array([np.datetime64("NaT") if v is None else
                              _naive_utc(v) if isinstance(v, _dt.datetime) else v for v in flat],
                             dtype="datetime64[ns]")
        else:
            try:
                array = array.astype(np.float64)
            except (TypeError, ValueError):
                raise TypeError(f"{name} must hold numbers or times (datetime64, timedelta64, datetime, "
                                f"pandas timestamps), got {type(first).__name__}") from None
    kind = array.dtype.kind
    if kind == "M":
        return array.astype("datetime64[ns]").reshape(-1)
    if kind == "m":
        return array.astype("timedelta64[ns]").reshape(-1)
    if kind in "iuf":
        return array.astype(np.float64).reshape(-1)
    if kind == "b":
        raise TypeError(f"{name} must hold numbers or times, got booleans")
    raise TypeError(f"{name} must hold numbers or times, got an array of dtype {array.dtype}")


def _origin_value(origin: Any, kind: str, unit: str) -> Any:
    """A fixed origin for times of ``kind`` ('M' datetime, 'm' timedelta, 'f' float), or None for 'first'."""
    if isinstance(origin, str) and origin == "first":
        return None
    if isinstance(origin, str) and origin == "epoch":
        return {"M": np.datetime64(0, "ns"), "m": np.timedelta64(0, "ns"), "f": 0.0}[kind]
    if kind == "f":
        if isinstance(origin, (int, float, np.integer, np.floating)) and not isinstance(origin, bool):
            return float(origin)
        raise TypeError(f"origin for plain float times must be 'first', 'epoch' or a number in {unit!r}, "
                        f"got {origin!r}")
    if kind == "m":
        try:
            return np.timedelta64(int(round(parse_duration(origin, "s") * NS_PER_S)), "ns")
        except (TypeError, ValueError):
            raise TypeError(f"origin for timedelta times must be 'first', 'epoch' or a duration, got {origin!r}"
                            ) from None
    if isinstance(origin, _dt.datetime):
        origin = _naive_utc(origin)
    elif hasattr(origin, "to_datetime64"):  # pandas.Timestamp (tz-aware ones to UTC first)
        origin = origin.tz_convert(None) if getattr(origin, "tz", None) is not None else origin
        origin = origin.to_datetime64()
    try:
        value = np.datetime64(origin, "ns")
    except (TypeError, ValueError):
        value = None
    if value is None or np.isnat(value) or isinstance(origin, (int, float)):
        raise ValueError(f"origin must be one of {', '.join(map(repr, ORIGINS))} or a reference time "
                         f"(datetime, numpy.datetime64, pandas.Timestamp, ISO string), got {origin!r}")
    return value


def is_missing(array: np.ndarray) -> np.ndarray:
    return np.isnat(array) if array.dtype.kind in "Mm" else ~np.isfinite(array)


def to_offsets(times: Any, *, unit: str = "h", origin: Any = "epoch", name: str = "times") -> torch.Tensor:
    """One timeline (any 1-D time input) -> float64 offsets in ``unit`` from ``origin``, as a ``[L]`` tensor.

    Plain numbers are already in ``unit``; datetimes are subtracted from the origin in integer nanoseconds,
    then divided once. NaN/NaT raise; use :func:`batch_timelines` with ``drop_missing=True`` to drop them.
    """
    return batch_timelines([times], unit=unit, origin=origin, sort=False, name=name)[0][0]


def batch_timelines(
    timelines: Sequence[Any],
    *,
    unit: str = "h",
    origin: Any = "first",
    sort: bool = False,
    drop_missing: bool = False,
    name: str = "timelines",
) -> tuple[torch.Tensor, torch.Tensor]:
    """A list of B timelines -> ``(times [B, L] float64 in unit from origin, mask [B, L] bool)``.

    Each timeline is a list / array / tensor / pandas Series of plain numbers (read in ``unit``),
    ``datetime64``, ``timedelta64``, ``datetime`` or pandas timestamps; all timelines must be of one kind.
    Padding goes through :func:`omnipos.core.pad_ragged` (padded slots hold 0 and are False in the mask).

    Args:
        unit: unit of plain numbers, and of the returned offsets.
        origin: ``"first"`` (each timeline's first event; the default), ``"epoch"`` or a reference time.
        sort: sort each timeline (a stable sort). Without it an unsorted timeline raises ValueError.
        drop_missing: drop NaN / NaT times instead of raising.

    Empty timelines give all-masked rows; duplicate times are kept (their gap is 0).
    """
    unit = check_unit(unit)
    if isinstance(timelines, (str, torch.Tensor, np.ndarray)) or not isinstance(timelines, Sequence):
        raise TypeError(f"{name} must be a list of timelines (one array / list / Series per row), "
                        f"got {type(timelines).__name__}")
    arrays = [as_time_array(t, f"{name}[{i}]") for i, t in enumerate(timelines)]
    if not arrays:
        raise ValueError(f"{name} is empty; pass at least one (possibly empty) timeline")
    kinds = {a.dtype.kind for a in arrays if a.size}
    if len(kinds) > 1:
        raise TypeError(f"{name} mix plain numbers, datetimes and durations; give every timeline in one kind")
    kind = kinds.pop() if kinds else "f"
    dtype = {"M": "datetime64[ns]", "m": "timedelta64[ns]"}.get(kind, np.float64)
    lengths = np.array([a.size for a in arrays], dtype=np.int64)
    flat = np.concatenate([a.astype(dtype, copy=False) for a in arrays])
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
    values = offsets_from_origin(flat, lengths, origin=origin, unit=unit)
    flat_t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64))
    return pad_ragged(list(flat_t.split(lengths.tolist())), 0.0)


def offsets_from_origin(flat: np.ndarray, lengths: np.ndarray, *, origin: Any, unit: str) -> np.ndarray:
    """Sorted flat times of consecutive timelines (``lengths`` each) -> float64 offsets in ``unit``.

    ``flat`` is float64 (already in ``unit``), datetime64[ns] or timedelta64[ns]; calendar times are subtracted
    from the origin in integer nanoseconds before the one division to float.
    """
    kind = flat.dtype.kind
    fixed = _origin_value(origin, kind, unit)
    nonempty = lengths > 0
    starts = (np.cumsum(lengths) - lengths)[nonempty]
    if kind == "f":
        if fixed is not None:
            return flat - fixed
        first = np.zeros(len(lengths))
        first[nonempty] = flat[starts]
        return flat - np.repeat(first, lengths)
    ns = flat.view(np.int64)
    if fixed is None:
        first = np.zeros(len(lengths), dtype=np.int64)
        first[nonempty] = ns[starts]
        ns = ns - np.repeat(first, lengths)
    else:
        ns = ns - np.asarray(fixed).astype(np.int64)
    return nanoseconds_to_unit(ns, unit)


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
