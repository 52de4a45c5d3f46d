"""Event tables (MEDS: ``subject_id, time, code, numeric_value``) -> padded tensors. Extra ``[clinical]``.

The only module of :mod:`omnipos.timeseries` that imports pandas, and only when called (Parquet files are read by
:mod:`omnipos.timeseries.meds`, the pyarrow side). The whole table is handled at once: one stable sort by
(subject, time), one factorisation of subjects and of codes, one pad
through :func:`omnipos.core.pad_packed`; no per-subject Python loop.

MEDS (the Medical Event Data Standard) stores a cohort as a folder: ``data/**/*.parquet`` shards of events
(``subject_id`` int64, ``time`` timestamp[us], ``code`` string, ``numeric_value`` float32), ``metadata/
dataset.json``, ``metadata/codes.parquet`` and ``metadata/subject_splits.parquet`` (``subject_id, split``).
Events with a null time are *static* (eye colour, sex): they belong to the subject, not to a moment.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from ..core import check_choice, check_positive_int, lengths_to_mask, mask_to_lengths, pad_packed, require
from .calendar import (
    align_origin,
    check_awareness,
    check_naive_as,
    is_missing,
    offsets_from_origin,
    parse_origin,
    read_times,
)
from .durations import check_unit
from .meds import read_meds_table

__all__ = ["EventBatch", "EventTable", "require_pandas", "PAD_CODE", "UNK_CODE", "TRUNCATIONS", "STATIC_POLICIES",
           "STATIC_ONLY_POLICIES", "UNKNOWN_CODE_POLICIES"]

PAD_CODE = "<pad>"
UNK_CODE = "<unk>"
TRUNCATIONS = ("error", "head", "tail", "split")
STATIC_POLICIES = ("error", "keep", "drop")
STATIC_ONLY_POLICIES = ("keep", "drop", "error")
UNKNOWN_CODE_POLICIES = ("error", "unk")
_MEDS_COLUMNS = ("subject_id", "time", "code", "numeric_value")
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: bytes per padded slot of a batch: times float64 + codes int64 + values float32 + mask bool
_SLOT_BYTES = 8 + 8 + 4 + 1


def require_pandas():
    """Return the pandas module, or raise an ImportError naming the extra."""
    return require("pandas", "clinical", "event tables")


class EventBatch:
    """A padded batch of event timelines, one row per subject (or per window of a subject, see ``max_len``).

    Attributes:
        times: ``[B, L]`` float64, offsets in ``unit`` (hours by default) from ``origin``; 0 at padded slots.
        codes: ``[B, L]`` long, indices into ``vocab``; 0 (``"<pad>"``) at padded slots.
        values: ``[B, L]`` float32 numeric values; NaN where an event has none and at padded slots.
        mask: ``[B, L]`` bool, True at real events (padding at the end of each row).
        vocab: code strings by index; ``vocab[0] == "<pad>"``, then ``"<unk>"`` when built with
            ``unknown_code="unk"``, then the real codes, sorted.
        subjects: subject id of each row, sorted (a subject whose events were all dropped keeps an all-masked
            row; with ``truncation="split"`` a subject's windows are consecutive rows).
        unit, origin: how ``times`` were made.
        clock: ``[B]`` float64, the clock time of each row's origin in ``unit`` since 1970-01-01 UTC (plain-number
            and duration times: since their own zero), so ``times + clock[:, None]`` is clock time. A row
            without timed events has no first event: with ``origin="first"`` its clock is NaN (missing, never
            1970-01-01), and encoders leave such all-padding rows at exactly 0. A batch built by hand without
            ``clock=`` gets it from a fixed ``origin`` (``"epoch"``, a number, a reference time); with
            ``origin="first"`` it is None (unknown).
            :class:`~omnipos.timeseries.TimelineEncoder` reads it for time-of-day features.
        static_codes, static_values, static_mask: ``[B, S]`` the subject's static events (MEDS rows with a null
            time, kept with ``static="keep"``) in table order, padded like the timelines (``S`` may be 0).
        window: ``[B]`` long, the window index of each row within its subject (0 unless ``truncation="split"``).

    Rows are sorted by time; events at the same time keep their order in the table (a stable sort).
    """

    def __init__(self, times: torch.Tensor, codes: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                 vocab: Sequence[str], subjects: Sequence[Any], *, unit: str = "h", origin: Any = "first",
                 clock: torch.Tensor | None = None, static_codes: torch.Tensor | None = None,
                 static_values: torch.Tensor | None = None, static_mask: torch.Tensor | None = None,
                 window: torch.Tensor | None = None) -> None:
        self.times, self.codes, self.values, self.mask = times, codes, values, mask
        self.vocab = list(vocab)
        self.subjects = list(subjects)
        self.unit, self.origin = unit, origin
        rows, device = times.shape[0], times.device
        self.clock = _clock_of_fixed_origin(origin, unit, rows, device) if clock is None else clock
        self.static_codes = (torch.zeros(rows, 0, dtype=torch.long, device=device) if static_codes is None
                             else static_codes)
        self.static_values = (torch.zeros(rows, 0, dtype=torch.float32, device=device) if static_values is None
                              else static_values)
        self.static_mask = (torch.zeros(rows, 0, dtype=torch.bool, device=device) if static_mask is None
                            else static_mask)
        self.window = torch.zeros(rows, dtype=torch.long, device=device) if window is None else window

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
        unknown_code: str = "error",
        static: str = "error",
        static_only: str = "keep",
        max_len: int | None = None,
        truncation: str = "error",
        naive_as: str | None = None,
    ) -> EventBatch:
        """Build a batch from a pandas DataFrame with one row per event.

        Args:
            df: the event table, in any row order.
            subject, time, code, value: column names (``value=None``: no numeric values, all NaN). ``time``
                holds datetimes (tz-aware ones are read in UTC), timedeltas, or plain numbers in ``unit``.
            unit: unit of the resulting ``times`` (and of plain-number times in the table).
            origin: ``"first"`` (each subject's first event), ``"epoch"`` or a reference time. Whatever it is,
                :attr:`clock` keeps each row's origin on the clock.
            drop_missing: drop events with a missing subject or code (and, with ``static="error"``, a missing
                time) instead of raising ValueError.
            vocab: a previous batch's ``vocab``, to encode codes with the same indices.
            unknown_code: codes outside ``vocab``: ``"error"`` (ValueError listing them) or ``"unk"`` (the
                ``"<unk>"`` index; the vocab must hold ``"<unk>"``: build the first batch with
                ``unknown_code="unk"`` too, which reserves index 1 for it).
            static: events with a null time (MEDS static events): ``"error"`` (ValueError naming the row, unless
                ``drop_missing``), ``"keep"`` (into :attr:`static_codes` / :attr:`static_values`) or ``"drop"``.
            static_only: a subject whose events all have a null time (static codes only, no timeline):
                ``"keep"`` (an all-padding row; its :attr:`clock` is NaN with ``origin="first"``, so it is never
                mistaken for a timeline at 1970-01-01), ``"drop"`` (no row for it) or ``"error"`` (ValueError
                naming it).
            max_len: the longest timeline a row may hold (None: no limit). Padding is to the longest row, so
                one very long subject sets the size of the whole batch.
            truncation: what happens to a subject with more than ``max_len`` events: ``"error"`` (ValueError
                naming it), ``"head"`` (keep its first ``max_len`` events), ``"tail"`` (its last ``max_len``),
                ``"split"`` (consecutive windows of ``max_len`` events, one row each; see :attr:`window`).
                Times stay relative to the subject's origin in every case. Other than ``"error"``, it needs
                ``max_len`` (never accepted and ignored).
            naive_as: ``"UTC"``: read naive datetimes as UTC where they meet timezone-aware ones (the column
                and ``origin``); refused otherwise.

        Raises:
            ValueError: a missing column, value or code; a numeric value beyond float32 (it would become inf);
                an unknown code; a code column mixing types (``1`` and ``"1"``: a code is named by its string,
                so convert the column to one type); a subject longer than ``max_len`` with
                ``truncation="error"``; ``truncation`` other than ``"error"`` without ``max_len``; a batch whose
                padding would not fit in memory (use ``max_len`` or :meth:`batches`).
        """
        table = EventTable.build(df, subject, time, code, value, unit=unit, origin=origin,
                                 drop_missing=drop_missing, vocab=vocab, unknown_code=unknown_code, static=static,
                                 static_only=static_only, max_len=max_len, truncation=truncation, naive_as=naive_as)
        return table.pad(np.arange(table.rows))

    @classmethod
    def from_parquet(cls, path: Any, subject: str = "subject_id", time: str = "time", code: str = "code",
                     value: str | None = "numeric_value", *, split: str | Sequence[str] | None = None,
                     static: str = "keep", **kwargs: Any) -> EventBatch:
        """Read MEDS Parquet data and call :meth:`from_frame`.

        Args:
            path: a MEDS root (a folder holding ``data/``, as MEDS writes it beside ``metadata/``: every
                ``data/**/*.parquet`` shard is read), a folder of Parquet shards (read recursively), one file, a
                glob (``"cohort/data/train/*.parquet"``), or a list of files.
            split: with a MEDS root, only the subjects of this split (or splits) in
                ``metadata/subject_splits.parquet`` (``"train"``, ``"tuning"``, ``"held_out"``, ...).
            static: as in :meth:`from_frame`, but MEDS rows with a null time are static events by the standard,
                so they are kept (``"keep"``) unless asked otherwise.
            **kwargs: the other keyword arguments of :meth:`from_frame`.

        Only the four columns are read. Error messages name the shard file and the row within it.
        """
        df = _read_parquet_events(path, [subject, time, code] + ([value] if value is not None else []),
                                  subject, split)
        return cls.from_frame(df, subject, time, code, value, static=static, **kwargs)

    @classmethod
    def batches(cls, source: Any, batch_size: int, *, by_length: bool = True, shuffle: bool = False, seed: int = 0,
                subject: str = "subject_id", time: str = "time", code: str = "code",
                value: str | None = "numeric_value", split: str | Sequence[str] | None = None,
                **kwargs: Any) -> Iterator[EventBatch]:
        """Length-bucketed batches of a table: each padded only to its own longest row.

        The table (a DataFrame, or anything :meth:`from_parquet` reads) is sorted and encoded once, with one
        vocabulary; then rows (subjects, or windows with ``truncation="split"``) are grouped ``batch_size`` at a
        time and each group is padded on its own. With ``by_length`` rows are grouped by length (shortest first,
        ties in subject order), so a long subject shares its batch with other long ones instead of padding
        thousands of short ones to its length.

        Args:
            source: a pandas DataFrame, or a MEDS root / folder / file / glob / list of files.
            batch_size: rows per batch (>= 1); the last batch may be smaller.
            by_length: group rows of similar length (False: consecutive rows in subject order).
            shuffle: yield the batches in an order drawn from ``seed`` (a local generator: no global RNG is used).
            split: a MEDS split, as in :meth:`from_parquet` (only for a MEDS root).
            **kwargs: keyword arguments of :meth:`from_frame` (``max_len``, ``truncation``, ``unit``, ...).
        """
        batch_size = check_positive_int(batch_size, "batch_size")
        pd = require_pandas()
        if isinstance(source, pd.DataFrame):
            if split is not None:
                raise ValueError("split= needs a MEDS root (a folder with data/ and metadata/), not a DataFrame")
            df = source
        else:
            kwargs.setdefault("static", "keep")
            df = _read_parquet_events(source, [subject, time, code] + ([value] if value is not None else []),
                                      subject, split)
        table = EventTable.build(df, subject, time, code, value, **kwargs)
        order = (np.argsort(table.lengths, kind="stable") if by_length else np.arange(table.rows))
        groups = [order[i : i + batch_size] for i in range(0, table.rows, batch_size)]
        if shuffle:
            groups = [groups[i] for i in np.random.default_rng(seed).permutation(len(groups))]
        for rows in groups:
            yield table.pad(np.sort(rows))

    @property
    def lengths(self) -> torch.Tensor:
        """Events per row ``[B]``."""
        return mask_to_lengths(self.mask)

    def __len__(self) -> int:
        return self.times.shape[0]

    def to(self, device: torch.device | str) -> EventBatch:
        """A copy with every tensor on ``device``."""
        move = (lambda t: None if t is None else t.to(device))
        return EventBatch(self.times.to(device), self.codes.to(device), self.values.to(device),
                          self.mask.to(device), self.vocab, self.subjects, unit=self.unit, origin=self.origin,
                          clock=move(self.clock), static_codes=move(self.static_codes),
                          static_values=move(self.static_values), static_mask=move(self.static_mask),
                          window=move(self.window))

    def __repr__(self) -> str:
        static = f", static={int(self.static_mask.sum())}" if self.static_mask.numel() else ""
        return (f"EventBatch(subjects={len(self)}, max_len={self.times.shape[1]}, events={int(self.mask.sum())}"
                f"{static}, vocab={len(self.vocab)}, unit={self.unit!r}, origin={self.origin!r})")


# --- building: one sorted, encoded flat table; padding any subset of its rows ----------------------------------


@dataclass
class EventTable:
    """The sorted, encoded events of a table, not yet padded: rows are subjects (or windows of subjects)."""

    times: np.ndarray  # [N] float64 offsets, rows consecutive
    codes: np.ndarray  # [N] int64
    values: np.ndarray  # [N] float32
    lengths: np.ndarray  # [B] int64
    clock: np.ndarray  # [B] float64
    subjects: list[Any]
    window: np.ndarray  # [B] int64
    static_codes: np.ndarray  # [M] int64, rows consecutive
    static_values: np.ndarray  # [M] float32
    static_lengths: np.ndarray  # [B] int64
    vocab: list[str]
    unit: str
    origin: Any

    @property
    def rows(self) -> int:
        return int(self.lengths.size)

    @classmethod
    def build(cls, df: Any, subject: str = "subject_id", time: str = "time", code: str = "code",
              value: str | None = "numeric_value", *, unit: str = "h", origin: Any = "first",
              drop_missing: bool = False, vocab: Sequence[str] | None = None, unknown_code: str = "error",
              static: str = "error", static_only: str = "keep", max_len: int | None = None,
              truncation: str = "error", naive_as: str | None = None) -> EventTable:
        pd = require_pandas()
        unit = check_unit(unit)
        check_choice(unknown_code, "unknown_code", UNKNOWN_CODE_POLICIES)
        check_choice(static, "static", STATIC_POLICIES)
        check_choice(static_only, "static_only", STATIC_ONLY_POLICIES)
        check_choice(truncation, "truncation", TRUNCATIONS)
        check_naive_as(naive_as)
        if max_len is not None:
            max_len = check_positive_int(max_len, "max_len")
        elif truncation != "error":  # never accepted and ignored: the caller meant to cut something
            raise ValueError(f"truncation={truncation!r} needs max_len= (the most events per row)")
        if not isinstance(df, pd.DataFrame):
            raise TypeError(f"df must be a pandas DataFrame, got {type(df).__name__}")
        wanted = {"subject": subject, "time": time, "code": code} | ({"value": value} if value is not None else {})
        absent = [f"{arg}={col!r}" for arg, col in wanted.items() if col not in df.columns]
        if absent:
            raise ValueError(f"column(s) {', '.join(absent)} not in the frame; its columns: {list(df.columns)}")

        subject_ix, subjects = _factorize_subjects(pd, df[subject], subject)
        subjects = subjects.tolist()
        times, awareness = read_times(df[time], f"column {time!r}", naive_as=naive_as)
        code_ix, code_names = _encode_codes(pd, df[code], vocab, unknown_code)
        values = _read_values(pd, df, value, subject_ix, subjects)

        null_time = np.isnat(times) if times.dtype.kind in "Mm" else np.isnan(times)  # MEDS: a static event
        infinite = is_missing(times) & ~null_time  # +-inf: not a time at all, never a static event
        bad = (subject_ix < 0) | (code_ix < 0) | infinite | (null_time & (static == "error"))
        if bad.any() and not drop_missing:
            column = np.where(subject_ix < 0, subject, np.where(code_ix < 0, code, time))
            _refuse_missing(df, bad, column, subjects, subject_ix, null_time & (static == "error"), ~infinite)
        keep = ~bad & ~(null_time & (static == "drop"))
        static_rows = keep & null_time
        timed = keep & ~null_time

        # the timelines: sorted by (subject, time), offsets from the origin, clock of each subject's origin
        kind = times.dtype.kind if times.dtype.kind in "Mm" else "f"
        fixed, origin_awareness = parse_origin(origin, kind, unit)
        check_awareness({awareness, origin_awareness} - {None}, naive_as, f"column {time!r} and origin")
        every_row_timed = bool(timed.all())  # the usual table: no copies of every column to drop nothing
        t_subject, t_times = (subject_ix, times) if every_row_timed else (subject_ix[timed], times[timed])
        if kind in "Mm":
            (t_times,), fixed = align_origin([t_times], fixed, f"column {time!r}")
        lengths = np.bincount(t_subject, minlength=len(subjects)).astype(np.int64)
        order, sorted_times = _subject_time_order(t_subject, t_times, lengths)
        t_times = np.take(t_times, order) if sorted_times is None else sorted_times
        offsets, clock = offsets_from_origin(t_times, lengths, fixed=fixed, unit=unit, name=f"column {time!r}")
        if fixed is None:
            clock[lengths == 0] = np.nan  # no first event, no clock: missing, never 1970-01-01
        codes_sorted = np.take(code_ix if every_row_timed else code_ix[timed], order).astype(np.int64, copy=False)
        values_sorted = np.take(values if every_row_timed else values[timed], order)

        # static events: per subject, table order
        s_subject = subject_ix[static_rows]
        s_order = np.argsort(s_subject, kind="stable")
        static_codes = code_ix[static_rows][s_order].astype(np.int64)
        static_values = values[static_rows][s_order]
        static_lengths = np.bincount(s_subject, minlength=len(subjects)).astype(np.int64)

        table = cls(offsets, codes_sorted, values_sorted, lengths, clock, subjects,
                    np.zeros(len(subjects), dtype=np.int64), static_codes, static_values, static_lengths,
                    code_names, unit, origin)
        # subjects with static events (kept or dropped by static=) but not one timed event
        static_only_rows = (lengths == 0) & (np.bincount(subject_ix[~bad & null_time], minlength=len(subjects)) > 0)
        if static_only_rows.any() and static_only != "keep":
            table = table.without_static_only(static_only_rows, static_only)
        if max_len is not None and lengths.size and int(lengths.max()) > max_len:
            table = table.truncated(max_len, truncation)
        return table

    def without_static_only(self, rows: np.ndarray, static_only: str) -> EventTable:
        """The table without the subjects of ``rows`` (a bool mask; they have no timed events), or the error
        naming them with ``static_only="error"``."""
        if static_only == "error":
            first = int(np.flatnonzero(rows)[0])
            raise ValueError(
                f"subject {self.subjects[first]!r} has only static events (a null time: no timeline) "
                f"({int(rows.sum()):,} subject(s) do); pass static_only='keep' for an all-padding row (clock NaN "
                f"with origin='first') or static_only='drop' to leave such subjects out")
        keep = ~rows
        static_keep = np.repeat(keep, self.static_lengths)
        return replace(self, lengths=self.lengths[keep], clock=self.clock[keep],
                       subjects=[s for s, k in zip(self.subjects, keep.tolist()) if k], window=self.window[keep],
                       static_codes=self.static_codes[static_keep], static_values=self.static_values[static_keep],
                       static_lengths=self.static_lengths[keep])

    def truncated(self, max_len: int, truncation: str) -> EventTable:
        """Rows longer than ``max_len`` cut by the named policy (see :meth:`EventBatch.from_frame`)."""
        lengths = self.lengths
        if truncation == "error":
            row = int(np.flatnonzero(lengths > max_len)[0])
            raise ValueError(
                f"subject {self.subjects[row]!r} has {int(lengths[row]):,} events, more than max_len={max_len:,} "
                f"({int((lengths > max_len).sum()):,} subject(s) do); pass truncation='head' (first events), "
                f"'tail' (last events) or 'split' (windows of max_len events)")
        starts = np.cumsum(lengths) - lengths
        position = np.arange(self.times.size) - np.repeat(starts, lengths)
        if truncation in ("head", "tail"):
            keep = position < max_len if truncation == "head" else position >= np.repeat(lengths - max_len, lengths)
            return replace(self, times=self.times[keep], codes=self.codes[keep], values=self.values[keep],
                           lengths=np.minimum(lengths, max_len))
        windows = np.maximum(1, -(-lengths // max_len))  # an empty subject keeps one (empty) row
        first_window = np.cumsum(windows) - windows
        row_of_event = np.repeat(first_window, lengths) + position // max_len
        source = np.repeat(np.arange(lengths.size), windows)
        static_take = _gather_index(self.static_lengths, source)  # each window keeps its subject's static events
        return replace(
            self, lengths=np.bincount(row_of_event, minlength=int(windows.sum())).astype(np.int64),
            clock=self.clock[source], subjects=[self.subjects[r] for r in source.tolist()],
            window=np.arange(source.size) - first_window[source],
            static_codes=self.static_codes[static_take], static_values=self.static_values[static_take],
            static_lengths=self.static_lengths[source])

    def pad(self, rows: np.ndarray) -> EventBatch:
        """The padded :class:`EventBatch` of ``rows`` (indices, in the order given)."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.lengths[rows]
        longest = int(lengths.max()) if lengths.size else 0
        _check_padded_size(rows.size, longest, int(self.static_lengths[rows].max()) if rows.size else 0)
        mask = lengths_to_mask(torch.from_numpy(lengths), longest)
        if rows.size == self.rows and bool((rows == np.arange(self.rows)).all()):
            # every row in table order (from_frame): the events are already in place, no gather to make (a
            # batch without padding then shares the table's arrays: the table is not used after this batch)
            flat_times, flat_codes, flat_values = self.times, self.codes, self.values
        else:
            take = _gather_index(self.lengths, rows)
            flat_times, flat_codes, flat_values = self.times[take], self.codes[take], self.values[take]
        times = pad_packed(torch.from_numpy(np.ascontiguousarray(flat_times)), mask, 0.0)
        codes = pad_packed(torch.from_numpy(np.ascontiguousarray(flat_codes)), mask, 0)
        values = pad_packed(torch.from_numpy(np.ascontiguousarray(flat_values)), mask, float("nan"))
        s_lengths = self.static_lengths[rows]
        s_take = _gather_index(self.static_lengths, rows)
        s_mask = lengths_to_mask(torch.from_numpy(s_lengths), int(s_lengths.max()) if s_lengths.size else 0)
        return EventBatch(times, codes, values, mask, self.vocab, [self.subjects[r] for r in rows.tolist()],
                          unit=self.unit, origin=self.origin, clock=torch.from_numpy(self.clock[rows].copy()),
                          static_codes=pad_packed(torch.from_numpy(self.static_codes[s_take]), s_mask, 0),
                          static_values=pad_packed(torch.from_numpy(np.ascontiguousarray(
                              self.static_values[s_take])), s_mask, float("nan")),
                          static_mask=s_mask, window=torch.from_numpy(self.window[rows].copy()))


def _clock_of_fixed_origin(origin: Any, unit: str, rows: int, device: torch.device) -> torch.Tensor | None:
    """The clock of every row of a batch whose times are offsets from one fixed ``origin`` (None for "first")."""
    if isinstance(origin, str) and origin == "first":
        return None
    if isinstance(origin, (int, float, np.integer, np.floating)) and not isinstance(origin, bool):
        value = float(origin)  # plain-number times: their own zero
    elif isinstance(origin, str) and origin == "epoch":
        value = 0.0
    else:
        fixed, _ = parse_origin(origin, "M", check_unit(unit))
        _, fixed = align_origin([], fixed, "origin")
        value = float(offsets_from_origin(np.array([fixed]), np.array([1]), fixed=np.datetime64(0, "s"),
                                          unit=unit, name="origin")[0][0])
    return torch.full((rows,), value, dtype=torch.float64, device=device)


def _gather_index(lengths: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Flat positions of the entries of ``rows`` (in that order) in a flat array of rows of ``lengths``."""
    starts = np.cumsum(lengths) - lengths
    take = lengths[rows]
    within = np.arange(int(take.sum())) - np.repeat(np.cumsum(take) - take, take)
    return np.repeat(starts[rows], take) + within


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - platforms without sysconf
        return None


def _check_padded_size(rows: int, longest: int, static_longest: int) -> None:
    """Refuse, before allocating, a padded batch larger than half of this machine's memory."""
    need = rows * (longest * _SLOT_BYTES + static_longest * 13)
    total = _physical_memory()
    if total is not None and need > total // 2:
        raise ValueError(
            f"padding {rows:,} rows to the longest timeline ({longest:,} events) needs {need / 2**30:.1f} GiB "
            f"(this machine has {total / 2**30:.0f} GiB): pass max_len= with truncation='head', 'tail' or "
            f"'split', or iterate EventBatch.batches(..., batch_size=...) (each batch padded to its own longest "
            f"row, rows grouped by length)")


def _read_values(pd: Any, df: Any, value: str | None, subject_ix: np.ndarray, subjects: list[Any]) -> np.ndarray:
    if value is None:
        return np.full(len(df), np.nan, dtype=np.float32)
    try:
        wide = pd.to_numeric(df[value], errors="raise").to_numpy(dtype=np.float64, na_value=np.nan)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"column {value!r} must hold numbers (or nulls): {exc}") from None
    too_big = np.abs(wide) > _FLOAT32_MAX  # NaN compares False: a missing value stays NaN
    if too_big.any():
        i = int(np.flatnonzero(too_big)[0])
        who = f"subject {subjects[subject_ix[i]]!r}" if subject_ix[i] >= 0 else "a row with no subject"
        raise ValueError(f"column {value!r} holds {float(wide[i])!r} for {who} {_at_row(df, i)}: "
                         f"values are float32, whose largest finite value is {_FLOAT32_MAX:.4g}; rescale the "
                         f"column (or mark the value missing) first")
    return wide.astype(np.float32)


def _subject_time_order(subject_ix: np.ndarray, times: np.ndarray,
                        lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Stable order by (subject, time): same-time events keep their table order; with the times in that order
    when the sort gives them for free (else None: ``times[order]``).

    Integer keys sorted by torch's stable (radix) sort, several times faster than ``np.lexsort`` on millions of
    rows. When ``subject * span + time`` fits in int64 (always for second- or minute-resolution timestamps, the
    usual MEDS case) that is one pass, and the sorted keys give back the sorted timestamps exactly (subject ids
    in order are ``lengths`` repeated: no random gather); otherwise two (time, then subject). Float times become
    order-preserving int64 first (IEEE bits, negatives flipped). ``lengths``: events per subject id.
    """
    step = 1
    if times.dtype.kind in "Mm":
        key = times.view(np.int64)
        for resolution in (60 * 10**9, 10**9, 10**6, 10**3, 60):  # drop resolution the timestamps do not use
            # (the first rows reject most steps without a pass over millions of keys)
            if key.size and not (key[:256] % resolution).any() and not (key % resolution).any():
                key, step = key // resolution, resolution
                break
    else:
        bits = (times + 0.0).view(np.int64)  # + 0.0 turns -0.0 into 0.0: equal times must tie
        key = np.where(bits < 0, bits ^ np.int64(0x7FFFFFFFFFFFFFFF), bits)
    if key.size == 0:
        return np.zeros(0, dtype=np.int64), None
    low, span, count = int(key.min()), int(key.max()) - int(key.min()) + 1, int(subject_ix.max()) + 1
    subjects = torch.from_numpy(subject_ix.astype(np.int64, copy=False))
    if span * count < 2**62:
        combined = subjects * span + torch.from_numpy(key - low)
        ordered = torch.sort(combined, stable=True)
        if times.dtype.kind not in "Mm":
            return ordered.indices.numpy(), None
        # the timestamps back from the sorted keys: key = combined - subject * span + low, times = key * step
        sorted_key = ordered.values.numpy()
        sorted_key -= np.repeat(np.arange(lengths.size, dtype=np.int64) * span, lengths)
        sorted_key += low
        if step != 1:
            sorted_key *= step
        return ordered.indices.numpy(), sorted_key.view(times.dtype)
    order = torch.sort(torch.from_numpy(key), stable=True).indices
    return order[torch.sort(subjects[order], stable=True).indices].numpy(), None


def _factorize_subjects(pd: Any, column: Any, name: str) -> tuple[np.ndarray, Any]:
    """:func:`_factorize` of the subject column; integer ids spanning a range not much larger than the table (the
    usual MEDS ``subject_id``) are numbered through a table of that range instead of a hash table (2x faster on
    millions of rows, the same codes and uniques)."""
    dtype = column.dtype
    if isinstance(dtype, np.dtype) and dtype.kind == "i" and len(column):
        ids = column.to_numpy().astype(np.int64, copy=False)
        low, high = int(ids.min()), int(ids.max())
        if high - low <= 4 * ids.size + 65536:
            shifted = ids - np.int64(low)  # in [0, high - low]: no overflow
            present = np.zeros(high - low + 1, dtype=bool)
            present[shifted] = True
            number = np.cumsum(present, dtype=np.int64) - 1
            return number[shifted], np.flatnonzero(present) + np.int64(low)
    return _factorize(pd, column, name)


def _factorize(pd: Any, column: Any, name: str) -> tuple[np.ndarray, Any]:
    """``pd.factorize(column, sort=True)``, refusing by name a column whose values cannot be sorted together."""
    try:
        return pd.factorize(column, sort=True)
    except TypeError as exc:
        raise TypeError(f"column {name!r} mixes values that cannot be ordered (e.g. numbers and strings): {exc}"
                        ) from None


def _encode_codes(pd: Any, column: Any, vocab: Sequence[str] | None,
                  unknown_code: str) -> tuple[np.ndarray, list[str]]:
    """Codes -> indices from 1 (0 is padding; -1 marks a missing code) and the vocabulary. A code is named by
    ``str(code)``; a column mixing types (``1`` and ``"1"``, ``1`` and ``1.0``, ``True`` and ``1``) is refused, so
    that no two codes share a name and none is merged with another by Python's equality."""
    reserved = [PAD_CODE] + ([UNK_CODE] if unknown_code == "unk" else [])
    _check_code_types(pd, column)
    if vocab is None:
        ix, uniques = _factorize(pd, column, column.name)
        codes = [str(u) for u in uniques]
        if len(set(codes)) != len(codes):  # one type, yet two codes print alike (objects with the same str)
            twice = next(c for c in codes if codes.count(c) > 1)
            same = [u for u, c in zip(uniques, codes) if c == twice][:2]
            raise ValueError(f"column {column.name!r} holds two different codes named {twice!r} ({same[0]!r} and "
                             f"{same[1]!r}); give each code a distinct string")
        if PAD_CODE in codes:
            raise ValueError(f"the code {PAD_CODE!r} is reserved for padding; rename it in the table")
        if unknown_code == "unk" and UNK_CODE in codes:  # the table's own "<unk>" rows take the reserved index
            at = codes.index(UNK_CODE)
            codes.pop(at)
            remap = np.arange(len(uniques)) + len(reserved) - (np.arange(len(uniques)) > at)
            remap[at] = 1
            return np.where(ix >= 0, remap[np.maximum(ix, 0)], -1), reserved + codes
        return np.where(ix >= 0, ix + len(reserved), -1), reserved + codes
    if isinstance(vocab, str) or not isinstance(vocab, Sequence):
        raise TypeError(f"vocab must be a list of code strings (a previous EventBatch's vocab), got "
                        f"{type(vocab).__name__}")
    names = [str(v) for v in vocab]
    if not names or names[0] != PAD_CODE:
        raise ValueError(f"vocab must be a previous EventBatch's vocab (starting with {PAD_CODE!r})")
    if len(set(names)) != len(names):
        raise ValueError("vocab must not repeat a code")
    if unknown_code == "unk" and UNK_CODE not in names:
        raise ValueError(f"unknown_code='unk' needs {UNK_CODE!r} in vocab: build the batch that made the vocab "
                         f"with unknown_code='unk' (it reserves index 1 for {UNK_CODE!r})")
    present = column.notna().to_numpy()
    ix = np.full(len(column), -1, dtype=np.int64)
    ix[present] = pd.Index(names).get_indexer(column[present].astype(str))
    unknown = (ix < 0) & present
    if unknown.any():
        if unknown_code == "unk":
            ix[unknown] = names.index(UNK_CODE)
        else:
            found = pd.unique(column[unknown])[:5]
            raise ValueError(f"code(s) {list(found)} are not in vocab (of {len(names) - 1} codes); pass "
                             f"unknown_code='unk' to map them to {UNK_CODE!r}")
    if present.any() and (ix[present] == 0).any():
        raise ValueError(f"the code {PAD_CODE!r} is reserved for padding; rename it in the table")
    return ix, names


def _check_code_types(pd: Any, column: Any) -> None:
    """Refuse a code column whose codes are not all of one kind (strings, integers, floats, booleans, ...):
    ``str`` would name ``1`` and ``"1"`` alike, and pandas' hashing merges ``1``, ``1.0`` and ``True``."""
    dtype = column.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        values = pd.Series(dtype.categories)
    elif dtype == object:
        values = column
    else:
        return  # a typed column (int64, float64, string, ...) holds one kind
    if not pd.api.types.infer_dtype(values, skipna=True).startswith("mixed"):
        return
    def kind(v: Any) -> str:  # NumPy scalars by the Python type they stand for
        return type(v.item() if isinstance(v, np.generic) else v).__name__

    present = values[values.notna()].tolist()
    first = present[0]
    other = next((v for v in present if kind(v) != kind(first)), None)
    if other is None:  # "mixed" for objects pandas does not classify (tuples, Decimals, ...): all of one type
        return
    raise ValueError(f"column {column.name!r} mixes code types ({kind(first)} {first!r} and {kind(other)} "
                     f"{other!r}); codes are named by their string (MEDS codes are strings), so convert the column "
                     f"to one type first, e.g. df[{column.name!r}].astype(str) if 1 and '1' are the same code")


def _refuse_missing(df: Any, missing: np.ndarray, column: np.ndarray, subjects: Any, subject_ix: np.ndarray,
                    null_time: np.ndarray, missing_value: np.ndarray) -> None:
    i = int(np.flatnonzero(missing)[0])
    who = f"subject {subjects[subject_ix[i]]!r}" if subject_ix[i] >= 0 else "a row with no subject"
    hint = "pass drop_missing=True to drop such events"
    if null_time[i] and column[i] != "code" and subject_ix[i] >= 0:
        hint = ("a null time marks a static event in MEDS: pass static='keep' to keep such events as static codes, "
                "static='drop' (or drop_missing=True) to drop them")
    what = "missing value (NaN/NaT/None)" if missing_value[i] else "infinite value (not a time)"
    raise ValueError(f"{what} in column {str(column[i])!r} for {who} {_at_row(df, i)}; {hint}")


def _at_row(df: Any, i: int) -> str:
    """Where row ``i`` (position) of the table is: its index label, or its shard file and row there."""
    label = df.index[i]
    if isinstance(label, tuple) and len(label) == 2:  # from_parquet: (file, row in file)
        return f"in {label[0]} at row {int(label[1])}"
    return f"at row {label!r} (position {i})"


def _read_parquet_events(source: Any, columns: list[str], subject: str,
                         split: str | Sequence[str] | None) -> Any:
    """The events of Parquet shards as one DataFrame whose index is (shard file, row in it), so that error
    messages name both."""
    pd = require_pandas()
    table, files, rows = read_meds_table(source, columns, subject, split)
    df = table.to_pandas()
    df.index = pd.MultiIndex.from_arrays([pd.Categorical(np.repeat(files, rows)),
                                          np.concatenate([np.arange(n) for n in rows])], names=["file", "row"])
    return df
