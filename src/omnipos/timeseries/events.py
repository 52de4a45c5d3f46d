"""Event tables (MEDS-style: ``subject_id, time, code, numeric_value``) -> padded tensors. Extra ``[clinical]``.

The only module of :mod:`omnipos.timeseries` that imports pandas / pyarrow, and only when called. The whole table
is handled at once: one stable sort by (subject, time), one factorisation of subjects and of codes, one pad
through :func:`omnipos.core.pad_ragged`; no per-subject Python loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..core import pad_ragged
from .calendar import as_time_array, is_missing, offsets_from_origin
from .durations import check_unit

__all__ = ["EventBatch", "require_pandas", "PAD_CODE"]

PAD_CODE = "<pad>"


def require_pandas():
    """Return the pandas module, or raise an ImportError naming the extra."""
    try:
        import pandas
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError("event tables need pandas and pyarrow: pip install 'omnipos[clinical]'") from exc
    return pandas


class EventBatch:
    """A padded batch of event timelines, one row per subject.

    Attributes:
        times: ``[B, L]`` float64, offsets in ``unit`` (hours by default) from ``origin``; 0 at padded slots.
        codes: ``[B, L]`` long, indices into ``vocab``; 0 (``"<pad>"``) at padded slots.
        values: ``[B, L]`` float32 numeric values; NaN where an event has none and at padded slots.
        mask: ``[B, L]`` bool, True at real events (padding at the end of each row).
        vocab: code strings by index; ``vocab[0] == "<pad>"``, real codes sorted from index 1.
        subjects: subject ids by row, sorted (a subject whose events were all dropped keeps an all-masked row).
        unit, origin: how ``times`` were made.

    Rows are sorted by time; events at the same time keep their order in the table (a stable sort).
    """

    def __init__(self, times: torch.Tensor, codes: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                 vocab: Sequence[str], subjects: Sequence[Any], *, unit: str = "h", origin: Any = "first") -> None:
        self.times, self.codes, self.values, self.mask = times, codes, values, mask
        self.vocab = list(vocab)
        self.subjects = list(subjects)
        self.unit, self.origin = unit, origin

    @classmethod
    def from_frame(
        cls,
        df: Any,
        subject: str = "subject_id",
        time: str = "time",
        code: str = "code",
        value: str | None = "numeric_value",
        *,
        unit: str = "h",
        origin: Any = "first",
        drop_missing: bool = False,
        vocab: Sequence[str] | None = None,
    ) -> EventBatch:
        """Build a batch from a pandas DataFrame with one row per event.

        Args:
            df: the event table, in any row order.
            subject, time, code, value: column names (``value=None``: no numeric values, all NaN). ``time``
                holds datetimes (tz-aware ones are read in UTC), timedeltas, or plain numbers in ``unit``.
            unit: unit of the resulting ``times`` (and of plain-number times in the table).
            origin: ``"first"`` (each subject's first event), ``"epoch"`` or a reference time.
            drop_missing: drop events with a missing time or code instead of raising ValueError.
            vocab: a previous batch's ``vocab``, to encode codes with the same indices (unknown codes raise).
        """
        pd = require_pandas()
        unit = check_unit(unit)
        if not isinstance(df, pd.DataFrame):
            raise TypeError(f"df must be a pandas DataFrame, got {type(df).__name__}")
        wanted = {"subject": subject, "time": time, "code": code} | ({"value": value} if value is not None else {})
        absent = [f"{arg}={col!r}" for arg, col in wanted.items() if col not in df.columns]
        if absent:
            raise ValueError(f"column(s) {', '.join(absent)} not in the frame; its columns: {list(df.columns)}")

        subject_ix, subjects = pd.factorize(df[subject], sort=True)
        subjects = subjects.tolist()
        times = as_time_array(df[time], f"column {time!r}")
        code_ix, code_names = _encode_codes(pd, df[code], vocab)
        values = (np.full(len(df), np.nan, dtype=np.float32) if value is None
                  else pd.to_numeric(df[value], errors="raise").to_numpy(dtype=np.float32, na_value=np.nan))

        missing = (subject_ix < 0) | is_missing(times) | (code_ix < 0)
        if missing.any():
            if not drop_missing:
                column = np.where(subject_ix < 0, subject, np.where(code_ix < 0, code, time))
                _refuse_missing(df, missing, column, subjects, subject_ix)
            keep = ~missing
            subject_ix, times, code_ix, values = subject_ix[keep], times[keep], code_ix[keep], values[keep]

        lengths = np.bincount(subject_ix, minlength=len(subjects)).astype(np.int64)
        order = _subject_time_order(subject_ix, times)
        times, code_ix, values = times[order], code_ix[order], values[order]
        offsets = offsets_from_origin(times, lengths, origin=origin, unit=unit)

        index, mask = pad_ragged(list(torch.arange(len(offsets)).split(lengths.tolist())), 0)
        pad = ~mask
        padded_times = torch.from_numpy(np.ascontiguousarray(offsets))[index].masked_fill_(pad, 0.0)
        padded_codes = torch.from_numpy(code_ix.astype(np.int64))[index].masked_fill_(pad, 0)
        padded_values = torch.from_numpy(values)[index].masked_fill_(pad, float("nan"))
        return cls(padded_times, padded_codes, padded_values, mask, code_names, subjects,
                   unit=unit, origin=origin)

    @classmethod
    def from_parquet(cls, path: str | Path, subject: str = "subject_id", time: str = "time", code: str = "code",
                     value: str | None = "numeric_value", **kwargs: Any) -> EventBatch:
        """Read a Parquet file or a folder of shards (MEDS ``data/*.parquet``) and call :meth:`from_frame`.

        Only the four columns are read. Keyword arguments go to :meth:`from_frame`.
        """
        pd = require_pandas()
        try:
            import pyarrow  # noqa: F401
        except ImportError as exc:  # pragma: no cover - exercised only without the extra
            raise ImportError("reading Parquet needs pyarrow: pip install 'omnipos[clinical]'") from exc
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no Parquet file or folder at {path}")
        columns = [subject, time, code] + ([value] if value is not None else [])
        df = pd.read_parquet(path, columns=columns)
        return cls.from_frame(df, subject, time, code, value, **kwargs)

    @property
    def lengths(self) -> torch.Tensor:
        """Events per subject ``[B]``."""
        return self.mask.sum(dim=1)

    def __len__(self) -> int:
        return self.times.shape[0]

    def to(self, device: torch.device | str) -> EventBatch:
        """A copy with every tensor on ``device``."""
        return EventBatch(self.times.to(device), self.codes.to(device), self.values.to(device),
                          self.mask.to(device), self.vocab, self.subjects, unit=self.unit, origin=self.origin)

    def __repr__(self) -> str:
        return (f"EventBatch(subjects={len(self)}, max_len={self.times.shape[1]}, events={int(self.mask.sum())}, "
                f"vocab={len(self.vocab)}, unit={self.unit!r}, origin={self.origin!r})")


def _subject_time_order(subject_ix: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Stable order by (subject, time): same-time events keep their table order.

    Integer keys sorted by torch's stable (radix) sort, several times faster than ``np.lexsort`` on millions of
    rows. When ``subject * span + time`` fits in int64 (always for second- or minute-resolution timestamps, the
    usual MEDS case) that is one pass; otherwise two (time, then subject). Float times become order-preserving
    int64 first (IEEE bits, negatives flipped).
    """
    if times.dtype.kind in "Mm":
        key = times.view(np.int64)
        for step in (60 * 10**9, 10**9, 10**6, 10**3):  # drop resolution the timestamps do not use
            if key.size and not (key % step).any():
                key = key // step
                break
    else:
        bits = (times + 0.0).view(np.int64)  # + 0.0 turns -0.0 into 0.0: equal times must tie
        key = np.where(bits < 0, bits ^ np.int64(0x7FFFFFFFFFFFFFFF), bits)
    if key.size == 0:
        return np.zeros(0, dtype=np.int64)
    low, span, count = int(key.min()), int(key.max()) - int(key.min()) + 1, int(subject_ix.max()) + 1
    subjects = torch.from_numpy(subject_ix.astype(np.int64, copy=False))
    if span * count < 2**62:
        combined = subjects * span + torch.from_numpy(key - low)
        return torch.sort(combined, stable=True).indices.numpy()
    order = torch.sort(torch.from_numpy(key), stable=True).indices
    return order[torch.sort(subjects[order], stable=True).indices].numpy()


def _encode_codes(pd: Any, column: Any, vocab: Sequence[str] | None) -> tuple[np.ndarray, list[str]]:
    """Codes -> indices from 1 (0 is padding; -1 marks a missing code) and the vocabulary."""
    if vocab is None:
        ix, uniques = pd.factorize(column, sort=True)
        names = [PAD_CODE] + [str(u) for u in uniques]
        return np.where(ix >= 0, ix + 1, -1), names
    names = list(vocab)
    if not names or names[0] != PAD_CODE:
        raise ValueError(f"vocab must be a previous EventBatch's vocab (starting with {PAD_CODE!r})")
    present = column.notna().to_numpy()
    ix = np.full(len(column), -1, dtype=np.int64)
    ix[present] = pd.Index(names[1:]).get_indexer(column[present].astype(str))
    unknown = (ix < 0) & present
    if unknown.any():
        found = pd.unique(column[unknown])[:5]
        raise ValueError(f"code(s) {list(found)} are not in vocab (of {len(names) - 1} codes)")
    return np.where(ix >= 0, ix + 1, -1), names


def _refuse_missing(df: Any, missing: np.ndarray, column: np.ndarray, subjects: Any,
                    subject_ix: np.ndarray) -> None:
    i = int(np.flatnonzero(missing)[0])
    who = f"subject {subjects[subject_ix[i]]!r}" if subject_ix[i] >= 0 else "a row with no subject"
    raise ValueError(f"missing value (NaN/NaT/None) in column {str(column[i])!r} for {who} at row {df.index[i]!r} "
                     f"(position {i}); pass drop_missing=True to drop such events")
