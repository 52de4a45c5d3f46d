"""Time units, durations, origins, and the checks every time-series function shares.

One rule everywhere in :mod:`omnipos.timeseries`: plain float times are read in hours unless the function's
``unit=`` argument names another unit, and periods or boundaries given as plain floats are in that same unit.
Durations may also be strings with a unit (``"24h"``, ``"7d"``, ``"30min"``, ``"1.5w"``), ``datetime.timedelta``
or ``numpy.timedelta64``.

Calendar times (``numpy.datetime64``, ``datetime.datetime``, pandas timestamps) are converted once, in integer
nanoseconds, to float64 offsets in ``unit`` from an ``origin`` chosen by name:

- ``"first"``: each timeline's first event (so every timeline starts at 0);
- ``"epoch"``: 1970-01-01T00:00 (for durations and plain floats: their own zero);
- a reference time (a datetime-like, or an ISO string such as ``"2020-01-01"``; a float in ``unit`` for floats).

Times before the origin become negative offsets; that is allowed.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..core import pad_ragged

__all__ = [
    "UNITS",
    "ORIGINS",
    "check_unit",
    "parse_duration",
    "to_offsets",
    "batch_timelines",
    "check_times",
    "encode_valid",
    "scatter_valid",
]

#: Seconds per unit. Integers, so unit-to-unit factors are exact ("1d" is exactly 1440 min).
UNITS: dict[str, int] = {"s": 1, "min": 60, "h": 3600, "d": 86400, "w": 604800}
ORIGINS = ("first", "epoch")
_NS_PER_S = 1_000_000_000
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
        return _ns_to_unit(np.timedelta64(value, "ns").astype(np.int64), unit)
    if isinstance(value, np.timedelta64):
        return _ns_to_unit(value.astype("timedelta64[ns]").astype(np.int64), unit)
    if hasattr(value, "to_timedelta64"):  # pandas.Timedelta
        return _ns_to_unit(value.to_timedelta64().astype("timedelta64[ns]").astype(np.int64), unit)
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


def _ns_to_unit(ns: Any, unit: str) -> Any:
    """Integer nanoseconds (scalar or array) -> float64 in ``unit`` (one correctly rounded division)."""
    out = np.asarray(ns, dtype=np.float64) / float(UNITS[unit] * _NS_PER_S)
    return float(out) if out.ndim == 0 else out


# --------------------------------------------------------------------------------------------------------------
# Converting raw times to float64 offsets


def _naive_utc(value: _dt.datetime) -> _dt.datetime:
    return value.astimezone(_dt.timezone.utc).replace(tzinfo=None) if value.tzinfo is not None else value


def _as_time_array(times: Any, name: str) -> np.ndarray:
    """Any supported time input -> a 1-D NumPy array: float64, datetime64[ns] or timedelta64[ns]."""
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
            return np.timedelta64(int(round(parse_duration(origin, "s") * _NS_PER_S)), "ns")
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


def _missing(array: np.ndarray) -> np.ndarray:
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
    arrays = [_as_time_array(t, f"{name}[{i}]") for i, t in enumerate(timelines)]
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
    missing = _missing(flat)
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
    return _ns_to_unit(ns, unit)


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


# --------------------------------------------------------------------------------------------------------------
# Checks for ready-made time tensors


def check_times(
    times: Any, mask: Any = None, *, name: str = "times", check_sorted: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Validate ready-made times ``[..., L]`` (real tensor) and an optional boolean ``mask`` of the same shape.

    Real (masked-in) times must be finite and, with ``check_sorted``, non-decreasing along the last axis
    (masked-out slots are ignored, wherever they are). Returns ``(times, mask)`` with mask on times' device.
    """
    if not isinstance(times, torch.Tensor):
        raise TypeError(f"{name} must be a tensor [..., L] of times (build one with batch_timelines or "
                        f"EventBatch), got {type(times).__name__}")
    if times.dtype == torch.bool or times.is_complex():
        raise TypeError(f"{name} must be a real tensor, got {times.dtype}")
    if times.ndim < 1:
        raise ValueError(f"{name} must have a time axis [..., L], got a scalar")
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError(f"mask must be a boolean tensor, got {getattr(mask, 'dtype', type(mask).__name__)}")
        if mask.shape != times.shape:
            raise ValueError(f"mask {tuple(mask.shape)} must have the shape of {name} {tuple(times.shape)}")
        mask = mask.to(times.device)
    if times.is_floating_point() and times.numel():
        finite = torch.isfinite(times)
        bad = ~finite if mask is None else mask & ~finite
        if bool(bad.any()):
            index = tuple(bad.nonzero()[0].tolist())
            raise ValueError(f"{name} must be finite at real events; found {times[index].item()} at {index}")
    if check_sorted:
        checked_gaps(times, mask, name=name)
    return times, mask


def checked_gaps(times: torch.Tensor, mask: torch.Tensor | None, *, name: str = "times") -> torch.Tensor:
    """Gap to the previous real event (0 for the first, for duplicates and at padded slots), raising a
    ValueError when a real time is earlier than the one before it. ``times``/``mask`` already validated."""
    prev = previous_event_times(times, mask)
    gaps = times - prev
    if mask is not None:
        gaps = gaps.masked_fill(~mask, 0)
    bad = gaps < 0
    if bool(bad.any()):
        index = tuple(bad.nonzero()[0].tolist())
        raise ValueError(
            f"{name} must be sorted (non-decreasing) along each timeline; at index {index} the time "
            f"{times[index].item()} is earlier than the previous event's {prev[index].item()}; sort them "
            f"first (batch_timelines(..., sort=True) and EventBatch.from_frame do)"
        )
    return gaps


def previous_event_times(times: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """For each slot, the time of the previous real event in its row (itself where there is none).

    Masked-out slots may sit anywhere: the index of the last real event so far is a running maximum. When the
    padding is all at the end (what :func:`omnipos.core.pad_ragged` makes), that is simply the slot before.
    """
    shifted = torch.cat([times[..., :1], times[..., :-1]], dim=-1)
    if mask is None or not bool((mask[..., 1:] & ~mask[..., :-1]).any()):
        return shifted
    idx = torch.arange(times.shape[-1], device=times.device).expand(times.shape)
    last_real = torch.where(mask, idx, torch.full_like(idx, -1)).cummax(-1).values
    prev_idx = torch.cat([last_real.new_full((*times.shape[:-1], 1), -1), last_real[..., :-1]], dim=-1)
    return times.gather(-1, torch.where(prev_idx < 0, idx, prev_idx))


def encode_valid(values: torch.Tensor, mask: torch.Tensor | None, encode: Any) -> torch.Tensor:
    """Apply ``encode`` (``[N, ...] -> [N, D]``, any leading shape) to the real events only.

    ``mask`` is ``[..., L]`` over the leading axes of ``values``; padded slots of the result are exactly 0.
    Encoding just the real events spends nothing on padding and cannot leak a padded slot's (arbitrary) time
    into the output; one scatter puts the rows back where the mask says.
    """
    return encode(values) if mask is None else scatter_valid(encode(values[mask]), mask)


def scatter_valid(flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Rows ``[N, D]`` of the real events -> ``[*mask.shape, D]`` with zeros at padded slots."""
    out = flat.new_zeros(*mask.shape, flat.shape[-1])
    # index_copy_ on flat row numbers: markedly faster on CPU than boolean-mask assignment
    out.view(-1, flat.shape[-1]).index_copy_(0, mask.reshape(-1).nonzero().squeeze(1), flat)
    return out
