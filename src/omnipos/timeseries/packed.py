"""Packed event timelines: every row's events back to back with no padding, and ``cu_seqlens``.

The layout varlen attention consumes (flash-attn's ``flash_attn_varlen_func``, PyTorch nested / jagged tensors):
``[total_events, ...]`` tensors and ``cu_seqlens [B + 1]`` int32, row ``b`` being
``cu_seqlens[b]:cu_seqlens[b + 1]``. Nothing is spent on padding, so memory and time follow the number of events,
not ``B x`` the longest row. :meth:`PackedEvents.from_frame` builds it from an event table as
:meth:`EventBatch.from_frame <omnipos.timeseries.EventBatch.from_frame>` does (same sort, same codes, same
clock), :meth:`PackedEvents.from_batch` / :meth:`PackedEvents.padded` convert between the two layouts, and
:class:`~omnipos.timeseries.TimelineEncoder` encodes a :class:`PackedEvents` into ``[total_events, dim]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..core import can_inspect_values, check_lengths, lengths_to_mask, pad_packed
from .events import EventBatch, EventTable

__all__ = ["PackedEvents", "check_cu_seqlens", "cu_seqlens_of"]


def cu_seqlens_of(lengths: Any) -> torch.Tensor:
    """Row lengths ``[B]`` -> ``cu_seqlens [B + 1]`` int32 (0, then the running total)."""
    lengths = torch.as_tensor(lengths)
    cu = torch.zeros(lengths.numel() + 1, dtype=torch.int32, device=lengths.device)
    cu[1:] = lengths.cumsum(0)
    return cu


def check_cu_seqlens(cu_seqlens: Any, total: int, name: str = "cu_seqlens") -> torch.Tensor:
    """Validate ``cu_seqlens [B + 1]`` (integers from 0, non-decreasing, ending at ``total``): row lengths
    ``[B]`` int64. Value checks are skipped while compiling and for meta tensors."""
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"{name} must be a 1-D integer tensor [B + 1], got {type(cu_seqlens).__name__}")
    cu = check_lengths(cu_seqlens, name)
    if cu.numel() == 0:
        raise ValueError(f"{name} must hold B + 1 >= 1 offsets (0 first), got an empty tensor")
    lengths = cu[1:] - cu[:-1]
    if can_inspect_values(cu):
        if int(cu[0]) != 0 or bool((lengths < 0).any()):
            raise ValueError(f"{name} must start at 0 and be non-decreasing (row b's events are "
                             f"{name}[b]:{name}[b + 1]), got {cu[:8].tolist()}{'...' if cu.numel() > 8 else ''}")
        if int(cu[-1]) != total:
            raise ValueError(f"{name} ends at {int(cu[-1])} but there are {total} events (its last entry is the "
                             f"total)")
    return lengths


class PackedEvents:
    """Event timelines packed back to back: ``[N]`` tensors (N = total events) and ``cu_seqlens [B + 1]``.

    Attributes:
        times: ``[N]`` float64 offsets in ``unit`` from ``origin`` (sorted within each row).
        codes: ``[N]`` long indices into ``vocab`` (never 0, the padding code: there is no padding).
        values: ``[N]`` float32 numeric values, NaN where an event has none.
        cu_seqlens: ``[B + 1]`` int32, row ``b``'s events are ``cu_seqlens[b]:cu_seqlens[b + 1]``.
        vocab, subjects, unit, origin, window: as in :class:`~omnipos.timeseries.EventBatch`.
        clock: ``[B]`` float64, as :attr:`EventBatch.clock <omnipos.timeseries.EventBatch>` (NaN for a row
            without timed events with ``origin="first"``), or None (unknown).
        static_codes, static_values: ``[M]`` the rows' static events back to back, ``static_cu_seqlens [B + 1]``.
    """

    def __init__(self, times: torch.Tensor, codes: torch.Tensor, values: torch.Tensor, cu_seqlens: torch.Tensor,
                 vocab: Sequence[str], subjects: Sequence[Any], *, unit: str = "h", origin: Any = "first",
                 clock: torch.Tensor | None = None, static_codes: torch.Tensor | None = None,
                 static_values: torch.Tensor | None = None, static_cu_seqlens: torch.Tensor | None = None,
                 window: torch.Tensor | None = None) -> None:
        for tensor, what in ((times, "times"), (codes, "codes"), (values, "values")):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"PackedEvents: {what} must be a 1-D tensor [N] (N = total events), got "
                                f"{type(tensor).__name__}")
            if tensor.ndim != 1:
                raise ValueError(f"PackedEvents: {what} must be a 1-D tensor [N] (N = total events), got shape "
                                 f"{tuple(tensor.shape)}")
        if not times.numel() == codes.numel() == values.numel():
            raise ValueError(f"PackedEvents: times, codes and values must hold the same N events, got "
                             f"{times.numel()}, {codes.numel()} and {values.numel()}")
        check_cu_seqlens(cu_seqlens, times.numel(), "cu_seqlens")
        self.times, self.codes, self.values, self.cu_seqlens = times, codes, values, cu_seqlens
        self.vocab, self.subjects = list(vocab), list(subjects)
        self.unit, self.origin, self.clock = unit, origin, clock
        rows, device = cu_seqlens.numel() - 1, times.device
        self.static_codes = torch.zeros(0, dtype=torch.long, device=device) if static_codes is None else static_codes
        self.static_values = (torch.zeros(0, dtype=torch.float32, device=device) if static_values is None
                              else static_values)
        self.static_cu_seqlens = (torch.zeros(rows + 1, dtype=torch.int32, device=device)
                                  if static_cu_seqlens is None else static_cu_seqlens)
        if static_cu_seqlens is not None:
            check_cu_seqlens(static_cu_seqlens, self.static_codes.numel(), "static_cu_seqlens")
            if static_cu_seqlens.numel() != rows + 1:
                raise ValueError(f"static_cu_seqlens must have B + 1 = {rows + 1} entries (one row per row of "
                                 f"cu_seqlens), got {static_cu_seqlens.numel()}")
        self.window = torch.zeros(rows, dtype=torch.long, device=device) if window is None else window

    @classmethod
    def from_frame(cls, df: Any, subject: str = "subject_id", time: str = "time", code: str = "code",
                   value: str | None = "numeric_value", **kwargs: Any) -> PackedEvents:
        """Build from a pandas DataFrame with one row per event: the arguments and rules of
        :meth:`EventBatch.from_frame <omnipos.timeseries.EventBatch.from_frame>` (same rows, order, codes, clock),
        without padding."""
        table = EventTable.build(df, subject, time, code, value, **kwargs)
        return cls._of_table(table)

    @classmethod
    def _of_table(cls, table: EventTable) -> PackedEvents:
        return cls(torch.from_numpy(np.ascontiguousarray(table.times)), torch.from_numpy(table.codes),
                   torch.from_numpy(np.ascontiguousarray(table.values)), cu_seqlens_of(torch.from_numpy(table.lengths)),
                   table.vocab, table.subjects, unit=table.unit, origin=table.origin,
                   clock=torch.from_numpy(table.clock), static_codes=torch.from_numpy(table.static_codes),
                   static_values=torch.from_numpy(np.ascontiguousarray(table.static_values)),
                   static_cu_seqlens=cu_seqlens_of(torch.from_numpy(table.static_lengths)),
                   window=torch.from_numpy(table.window))

    @classmethod
    def from_batch(cls, batch: EventBatch) -> PackedEvents:
        """The events of a padded :class:`~omnipos.timeseries.EventBatch`, packed (its mask says which)."""
        mask, s_mask = batch.mask, batch.static_mask
        return cls(batch.times[mask], batch.codes[mask], batch.values[mask], cu_seqlens_of(mask.sum(1)),
                   batch.vocab, batch.subjects, unit=batch.unit, origin=batch.origin, clock=batch.clock,
                   static_codes=batch.static_codes[s_mask], static_values=batch.static_values[s_mask],
                   static_cu_seqlens=cu_seqlens_of(s_mask.sum(1)), window=batch.window)

    @property
    def lengths(self) -> torch.Tensor:
        """Events per row ``[B]`` (int64)."""
        return (self.cu_seqlens[1:] - self.cu_seqlens[:-1]).long()

    @property
    def max_seqlen(self) -> int:
        """The longest row (flash-attn's ``max_seqlen``)."""
        return int(self.lengths.max()) if len(self) else 0

    @property
    def row(self) -> torch.Tensor:
        """The row of each event ``[N]`` (int64)."""
        return torch.repeat_interleave(torch.arange(len(self), device=self.times.device), self.lengths,
                                       output_size=self.times.numel())

    def __len__(self) -> int:
        return self.cu_seqlens.numel() - 1

    def padded(self) -> EventBatch:
        """The same events as a padded :class:`~omnipos.timeseries.EventBatch` (``[B, L]``, L the longest row)."""
        mask = lengths_to_mask(self.lengths, self.max_seqlen)
        s_lengths = (self.static_cu_seqlens[1:] - self.static_cu_seqlens[:-1]).long()
        s_mask = lengths_to_mask(s_lengths, int(s_lengths.max()) if s_lengths.numel() else 0)
        return EventBatch(pad_packed(self.times, mask, 0.0), pad_packed(self.codes, mask, 0),
                          pad_packed(self.values, mask, float("nan")), mask, self.vocab, self.subjects,
                          unit=self.unit, origin=self.origin, clock=self.clock,
                          static_codes=pad_packed(self.static_codes, s_mask, 0),
                          static_values=pad_packed(self.static_values, s_mask, float("nan")), static_mask=s_mask,
                          window=self.window)

    def to(self, device: torch.device | str) -> PackedEvents:
        """A copy with every tensor on ``device``."""
        return PackedEvents(self.times.to(device), self.codes.to(device), self.values.to(device),
                            self.cu_seqlens.to(device), self.vocab, self.subjects, unit=self.unit,
                            origin=self.origin, clock=None if self.clock is None else self.clock.to(device),
                            static_codes=self.static_codes.to(device), static_values=self.static_values.to(device),
                            static_cu_seqlens=self.static_cu_seqlens.to(device), window=self.window.to(device))

    def __repr__(self) -> str:
        return (f"PackedEvents(subjects={len(self)}, events={self.times.numel()}, max_seqlen={self.max_seqlen}, "
                f"vocab={len(self.vocab)}, unit={self.unit!r}, origin={self.origin!r})")
