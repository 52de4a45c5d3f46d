"""TimelineEncoder: absolute, periodic and gap encodings of a padded batch of timelines, summed or concatenated."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..core import (
    ConstantBuffers,
    can_inspect_values,
    check_choice,
    check_float_dtype,
    check_positive_int,
    narrow_to,
    new_buffer,
    put_rows,
    take_rows,
)
from . import timeline_triton
from .absolute import absolute_cycles, absolute_features
from .clock import clock_tensor, phase_shift, timezone_name, timezone_tensors
from .durations import UNITS, check_unit, positive_duration
from .events import EventBatch
from .gaps import (
    DEFAULT_GAP_BOUNDARIES,
    GapBucketEmbedding,
    log_gap_cycles,
    log_gap_features,
)
from .packed import PackedEvents, check_cu_seqlens
from .periodic import (
    DEFAULT_PERIODS,
    clock_required,
    clock_shift,
    periodic_columns,
    periodic_dim,
    periods_tensor,
    phase_remainders,
)
from .summed import SUMMED_COMPONENTS, encode_summed_blocks
from .time2vec import Time2Vec
from .timelines import check_module_device, check_times, checked_gaps, checked_real_events

__all__ = ["TimelineEncoder", "COMPONENTS", "COMBINES"]

COMPONENTS = ("absolute", "periodic", "gap", "gap_bucket", "time2vec")
COMBINES = ("sum", "concat")
_EVEN = ("absolute", "gap")  # sin/cos pairs
_LOW = (torch.float16, torch.bfloat16)
# what makes a float16 encoder's output overflow: Time2Vec's linear term (and a lift's sums) grow with time
OVERFLOW_HINT = ("Time2Vec's linear term grows with time: give times relative to a nearby origin or in a larger "
                 "unit, or use bfloat16 / float32")


class TimelineEncoder(ConstantBuffers):
    """Encode padded timelines ``times [B, L]`` (+ ``mask``, + ``clock``) or an :class:`EventBatch` into
    ``[B, L, dim]``.

    Components (any subset, in the order given):

    - ``"absolute"``: :func:`absolute_time_encoding` of the (relative) times, ``min_period`` .. ``max_period``;
    - ``"periodic"``: :func:`periodic_encoding` of *clock* time, with ``periods``, ``harmonics``, ``timezone``
      and ``phase_origin``: time of day and day of week on the clock, whatever origin the times are relative to;
    - ``"gap"``: :func:`log_gap_encoding` of the gap to the previous event (continuous);
    - ``"gap_bucket"``: :class:`GapBucketEmbedding` with ``gap_boundaries`` (learned);
    - ``"time2vec"``: :class:`Time2Vec` (learned) of the time in hours.

    ``combine="sum"``: every component gives ``dim`` channels and they are added; the periodic features
    (``2 * len(periods) * harmonics`` of them) are lifted to ``dim`` by a learned bias-free linear map.
    ``combine="concat"``: the periodic component keeps its own channels and the others share the rest of
    ``dim`` (in even chunks, earlier components first); the output is their concatenation in ``components`` order.
    Only ``gap_bucket``, ``time2vec`` and the ``sum`` lift carry parameters.

    Args:
        dim: output channels.
        components: which encodings, from :data:`COMPONENTS`.
        combine: ``"sum"`` or ``"concat"``.
        unit: unit of the plain times (and clocks) given to ``forward`` and of plain-float durations below. An
            :class:`EventBatch` carries its own unit: its times are converted.
        min_period, max_period: the absolute encoding's period range (default 1 hour to 10 years).
        periods, harmonics: the periodic encoding's periods and harmonics (default a day and a week).
        timezone: where "time of day" is read: ``None``/``"UTC"``, an IANA zone (``"America/New_York"``, daylight
            saving time included) or a fixed offset (``"+05:30"``).
        phase_origin: the local wall-clock time where every period's phase is 0: ``"epoch"`` (1970-01-01, a
            Thursday) or a naive datetime / ISO string (``"2024-01-01"``, a Monday).
        gap_scale, gap_base: the log-gap encoding's scale and base (see :func:`log_gap_encoding`).
        gap_boundaries: the gap buckets' boundaries.
        dtype: the initial dtype of the output and of the learned parts (``.half()``, ``.double()``, ``.to()``
            change it later; periods, frequencies and time-zone tables stay float64 constants).

    Shape:
        ``forward(batch)`` with an :class:`EventBatch` (its mask, clock and unit are used), or
        ``forward(times, mask=None, clock=None)``: ``[B, L]`` (any ``[..., L]``) sorted real times in
        ``unit`` -> ``[..., L, dim]``, padded slots exactly 0. ``clock`` (``[B]`` float64, or a number) is the
        clock time of each row's origin in ``unit`` since 1970-01-01 UTC (``batch_timelines(...,
        return_clock=True)`` gives it; ``0`` when the times are clock times already); the ``"periodic"``
        component refuses to run without it. ``forward(packed)`` with a :class:`PackedEvents` (or
        :meth:`encode_packed` with ``times [N]`` and ``cu_seqlens [B + 1]``) -> ``[N, dim]``: no padding made,
        each event's numbers exactly as in the padded layout.

    On CUDA, a summed encoder of ``absolute`` / ``periodic`` / ``gap`` with no gradient wanted (``torch.no_grad()``,
    or ``requires_grad_(False)``) runs as one fused Triton launch (:mod:`omnipos.timeseries.timeline_triton`: the
    same arithmetic, values checked in-kernel with one host sync, none inside a CUDA graph capture); every other
    configuration takes the component-by-component path.

    Precision: sinusoids are formed in float64 and evaluated in float32 (float64 for a float64 module); a
    float16 / bfloat16 module computes in float32 and rounds once at the end. Every output value is computed
    element by element (the periodic lift too), so a timeline's encoding is the same, to the bit, alone or in
    any batch, at any padding.
    """

    periods: torch.Tensor
    tz_transitions: torch.Tensor
    tz_offsets: torch.Tensor

    def __init__(
        self,
        dim: int,
        components: Sequence[str] = ("absolute", "periodic", "gap"),
        combine: str = "sum",
        *,
        unit: str = "h",
        min_period: Any = "1h",
        max_period: Any = "3650d",
        periods: Sequence[Any] = DEFAULT_PERIODS,
        harmonics: int = 1,
        timezone: Any = None,
        phase_origin: Any = "epoch",
        gap_scale: Any = "1h",
        gap_base: float = 1000.0,
        gap_boundaries: Sequence[Any] = DEFAULT_GAP_BOUNDARIES,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.combine = check_choice(combine, "combine", COMBINES)
        self.unit = check_unit(unit)
        if isinstance(components, str) or not components:
            raise ValueError(f"components must be a non-empty sequence drawn from {COMPONENTS}, got {components!r}")
        for c in components:
            check_choice(c, "components", COMPONENTS)
        if len(set(components)) != len(components):
            raise ValueError(f"components must not repeat, got {components!r}")
        self.components = tuple(components)
        check_float_dtype(dtype)
        self.harmonics = check_positive_int(harmonics, "harmonics")
        self.sizes = self._sizes(periodic_dim(periods, harmonics))
        self.period_labels = tuple(periods)
        periods_tensor(periods, unit)  # checks them now
        self.timezone = timezone_name(timezone)
        self.phase_origin = phase_origin
        self.phase = phase_shift(phase_origin, self.unit)
        self.min_period, self.max_period = min_period, max_period
        self.gap_scale = positive_duration(gap_scale, unit, "gap_scale")
        if isinstance(gap_base, bool) or not isinstance(gap_base, (int, float)) or not 0 < gap_base < float("inf"):
            raise ValueError(f"gap_base must be a finite number > 0, got {gap_base!r}")
        self.gap_base = float(gap_base)
        self.register_constants()
        # the output dtype: follows .half() / .double() / .to(dtype) like any floating buffer (empty: no memory)
        self.register_buffer("dtype_tracker", torch.empty(0, dtype=dtype), persistent=False)
        lifted = periodic_dim(periods, harmonics)
        self.lift = (_uninitialised(lambda: nn.Linear(lifted, dim, bias=False, dtype=dtype))
                     if "periodic" in self.sizes and combine == "sum" else None)
        self.gap_bucket = (_uninitialised(lambda: GapBucketEmbedding(gap_boundaries, self.sizes["gap_bucket"],
                                                                     unit=unit).to(dtype))
                           if "gap_bucket" in self.sizes else None)
        self.time2vec = (_uninitialised(lambda: Time2Vec(self.sizes["time2vec"]).to(dtype))
                         if "time2vec" in self.sizes else None)
        self._hours_per_unit = UNITS[self.unit] / UNITS["h"]
        # events per block on the CPU (summed: per sub-block of channel work; blocks of per-event work are 16x)
        self.chunk = 1 << 13
        self.reset_parameters()

    def compute_constants(self, device: torch.device | None) -> dict[str, torch.Tensor]:
        transitions, offsets = timezone_tensors(self.timezone, self.unit, device)
        periods = periods_tensor(self.period_labels, self.unit, device)
        constants = {"periods": periods, "phase_mod": phase_remainders(self.phase, periods),
                     "tz_transitions": transitions, "tz_offsets": offsets}
        if "absolute" in self.sizes:
            constants["cycles"] = absolute_cycles(self.sizes["absolute"], self.min_period, self.max_period,
                                                  self.unit, device=device)
        if "gap" in self.sizes:
            constants["gap_cycles"] = log_gap_cycles(self.sizes["gap"], self.gap_base, "interleaved", device)
        return constants

    def reset_parameters(self) -> None:
        """Re-initialise the learned parts (lift, gap buckets, Time2Vec, in that order) as their ``__init__``
        does; the only use of the RNG in building this module."""
        if self.lift is not None:
            self.lift.reset_parameters()
        if self.gap_bucket is not None:
            self.gap_bucket.reset_parameters()
        if self.time2vec is not None:
            self.time2vec.reset_parameters()

    @property
    def dtype(self) -> torch.dtype:
        """The output dtype (set by ``dtype=``, then by ``.half()`` / ``.double()`` / ``.to(dtype)``)."""
        return self.dtype_tracker.dtype

    def _sizes(self, periodic_channels: int) -> dict[str, int]:
        if self.combine == "sum":
            for c in self.components:
                if c in _EVEN and self.dim % 2:
                    raise ValueError(f"dim must be even for component {c!r} (sin/cos pairs), got {self.dim}")
            return {c: self.dim for c in self.components}
        sizes = {c: 0 for c in self.components}
        rest = self.dim
        if "periodic" in sizes:
            sizes["periodic"] = periodic_channels
            rest -= periodic_channels
        others = [c for c in self.components if c != "periodic"]
        if others:
            if rest < 2 * len(others) or (any(c in _EVEN for c in others) and rest % 2):
                raise ValueError(
                    f"dim={self.dim} cannot be shared by {self.components} with combine='concat': the periodic "
                    f"part takes {sizes.get('periodic', 0)} channels, the rest must be even and give each of "
                    f"{others} at least 2")
            chunks = rest // 2
            for i, c in enumerate(others):
                sizes[c] = 2 * (chunks // len(others) + (1 if i < chunks % len(others) else 0))
        elif rest:
            raise ValueError(f"with components=('periodic',) and combine='concat', dim must be "
                             f"{periodic_channels} (2 x periods x harmonics), got {self.dim}")
        return sizes

    def forward(self, times: torch.Tensor | EventBatch | PackedEvents, mask: torch.Tensor | None = None,
                clock: Any = None) -> torch.Tensor:
        if isinstance(times, PackedEvents):
            if mask is not None:
                raise TypeError("pass PackedEvents alone (its cu_seqlens say where each row is)")
            flat, clock = self._batch_units(times.times, times.clock if clock is None else clock, times.unit)
            return self.encode_packed(flat, times.cu_seqlens, clock)
        if isinstance(times, EventBatch):
            times, mask, clock = self._from_batch(times, mask, clock)
        eager = can_inspect_values(times, mask)
        # eager: the values are checked below on the real events only (the same errors)
        times, mask = check_times(times, mask, check_sorted=False, check_values=not eager)
        check_module_device(self.dtype_tracker.device, times)
        if times.device.type in timeline_triton.KERNEL_DEVICE_TYPES:
            # one fused launch on CUDA where it covers the call (timeline_triton's docstring says which)
            fused = timeline_triton.maybe_encode(self, times, mask, clock)
            if fused is not None:
                return fused
        uses_gaps = bool({"gap", "gap_bucket"} & set(self.components))
        clocks = None
        if "periodic" in self.sizes:
            if clock is None:
                raise clock_required("TimelineEncoder's 'periodic' component")
            clocks = clock_tensor(clock, times, mask=mask).expand(*times.shape[:-1], 1)
        if mask is None:
            mask = torch.ones_like(times, dtype=torch.bool)
        out_dtype = self.dtype
        if not eager:
            gaps = checked_gaps(times, mask) if uses_gaps else None
            return self._dense(times, mask, gaps, clocks)
        # the real events gathered once, row after row (the packed layout), checked, then encoded in blocks of
        # events and copied into their slots: a block holds `chunk` events whatever the padding
        if times.numel() == 0:
            return torch.zeros(*times.shape, self.dim, dtype=out_dtype, device=times.device)
        slots, flat_t, flat_g, row = checked_real_events(times, mask)
        length = times.shape[-1]
        flat_g = flat_g if uses_gaps else None
        rows_c = None if clocks is None else clocks.reshape(-1)
        # each row's clock modulo each period, once per row: [rows, P]
        rows_cm = None if clocks is None else torch.remainder(rows_c.unsqueeze(-1), self.periods)
        # zeroed only where there is padding (on the CPU through calloc: pages holding only padding stay untouched)
        out = new_buffer((mask.numel() // length, length, self.dim), out_dtype, times.device,
                         fill=0 if slots.numel() < mask.numel() else None)
        target = out.view(-1, self.dim)
        if self._sums_in_blocks(out_dtype, times):
            return self._summed_blocks(target, flat_t, flat_g, rows_c, rows_cm, row, slots).view(*mask.shape, self.dim)
        # On CPU, blocks small enough to stay in cache while they are encoded and filled in: the work is
        # memory-bound (float64 phase buffers). Elsewhere one block (no syncs).
        step = self.chunk if times.device.type == "cpu" else max(1, slots.numel())
        # real events are encoded into one reused buffer (written in place) and copied into their slots
        scratch = (torch.empty(min(step, slots.numel()), self.dim, dtype=out_dtype, device=times.device)
                   if self._writes_in_place(out_dtype, times) else None)
        for start in range(0, slots.numel(), step):
            block = slice(start, start + step)
            c = None if rows_c is None else (take_rows(rows_c, row[block]), take_rows(rows_cm, row[block]))
            g = None if flat_g is None else flat_g[block]
            if scratch is None:
                encoded = narrow_to(self._combined(flat_t[block], g, c), out_dtype, "the encoding", OVERFLOW_HINT)
            else:
                encoded = self._combined(flat_t[block], g, c, into=scratch[: flat_t[block].shape[0]])
            put_rows(target, slots[block], encoded)
        return out.reshape(*mask.shape, self.dim)

    def encode_packed(self, times: torch.Tensor, cu_seqlens: torch.Tensor, clock: Any = None) -> torch.Tensor:
        """Packed timelines -> ``[N, dim]``: no padding is made, read or written.

        Args:
            times: ``[N]`` real times in ``unit``, the rows back to back, each sorted.
            cu_seqlens: ``[B + 1]`` integer offsets of the rows (0 first, ``N`` last; flash-attn's layout).
            clock: ``[B]`` (one per row; NaN allowed for an empty row) or a number, as in ``forward``.

        Each event gets exactly the numbers it gets in the padded layout (``forward(padded)[mask]``).
        """
        times, _ = check_times(times, None, check_sorted=False)
        if times.ndim != 1:
            raise ValueError(f"packed times must be 1-D [N], got shape {tuple(times.shape)}")
        check_module_device(self.dtype_tracker.device, times)
        lengths = check_cu_seqlens(cu_seqlens, times.shape[0]).to(times.device)
        rows = lengths.shape[0]
        starts = (cu_seqlens[:-1].to(times.device).long())[lengths > 0]
        if times.device.type == "cpu" and can_inspect_values(times) and not (torch.is_grad_enabled()
                                                                             and times.requires_grad):
            # the same values without torch's small-op overheads (~3x less time on millions of events)
            row = torch.from_numpy(np.repeat(np.arange(rows, dtype=np.int64), lengths.numpy()))
            gaps = torch.empty_like(times)
            torch.sub(times[1:], times[:-1], out=gaps[1:])
            gaps[:1] = 0
            gaps[starts] = 0  # each row starts at 0
        else:
            row = torch.repeat_interleave(torch.arange(rows, device=times.device), lengths,
                                          output_size=times.shape[0])
            gaps = torch.diff(times, prepend=times[:1]).index_fill(0, starts, 0.0)  # each row starts at 0
        if can_inspect_values(times) and gaps.numel() and bool(gaps.min() < 0):
            i = int((gaps < 0).nonzero()[0])
            b = int(row[i])
            raise ValueError(f"times must be sorted (non-decreasing) within each row; row {b} at position "
                             f"{i - int(cu_seqlens[b])} has {times[i].item()} after {times[i - 1].item()}")
        if not {"gap", "gap_bucket"} & set(self.components):
            gaps = None
        row_clock = row_clock_mod = None
        if "periodic" in self.sizes:
            if clock is None:
                raise clock_required("TimelineEncoder's 'periodic' component")
            # one clock per row, checked as a [B, 1] batch (an empty row may have none: NaN)
            row_clock = clock_tensor(clock, times.new_zeros(rows, 1), mask=(lengths > 0).unsqueeze(1))
            row_clock = row_clock.expand(rows, 1).reshape(rows)
            row_clock_mod = torch.remainder(row_clock.unsqueeze(-1), self.periods)
        out = new_buffer((times.shape[0], self.dim), self.dtype, times.device)
        if can_inspect_values(times) and self._sums_in_blocks(self.dtype, times):
            return self._summed_blocks(out, times, gaps, row_clock, row_clock_mod, row)
        step = self.chunk if times.device.type == "cpu" and can_inspect_values(times) else max(1, times.shape[0])
        in_place = self._writes_in_place(self.dtype, times)
        for start in range(0, times.shape[0], step):
            block = slice(start, start + step)
            g = None if gaps is None else gaps[block]
            c = None if row_clock is None else (take_rows(row_clock, row[block]), take_rows(row_clock_mod, row[block]))
            if in_place:
                self._combined(times[block], g, c, into=out[block])
            else:
                out[block] = narrow_to(self._combined(times[block], g, c), self.dtype, "the encoding", OVERFLOW_HINT)
        return out

    def _batch_units(self, times: torch.Tensor, clock: Any, unit: str) -> tuple[torch.Tensor, Any]:
        """A batch's times and clock in this encoder's unit (the batch says what its numbers mean: convert,
        never assume)."""
        if unit != self.unit:
            factor = UNITS[check_unit(unit, "the batch's unit")] / UNITS[self.unit]
            times = times * factor
            clock = None if clock is None else clock * factor
        if clock is None and "periodic" in self.sizes:
            raise clock_required("TimelineEncoder's 'periodic' component (this batch carries no clock: "
                                 "build it with EventBatch.from_frame / from_parquet / PackedEvents.from_frame)")
        return times, clock

    def _from_batch(self, batch: EventBatch, mask: Any, clock: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
        if mask is not None:
            raise TypeError("pass an EventBatch alone (its mask is used), or times and mask")
        times, clock = self._batch_units(batch.times, batch.clock if clock is None else clock, batch.unit)
        return times, batch.mask, clock

    def _dense(self, times: torch.Tensor, mask: torch.Tensor, gaps: torch.Tensor | None,
               clocks: torch.Tensor | None) -> torch.Tensor:
        """Every slot encoded, padded ones from time 0 and zeroed after: no data-dependent shapes (compile, meta).
        Elementwise, so the real events get exactly the values of the blockwise eager path."""
        zero = torch.zeros((), dtype=times.dtype, device=times.device)
        t = torch.where(mask, times, zero).reshape(-1)
        g = None if gaps is None else torch.where(mask, gaps, zero).reshape(-1)
        c = None
        if clocks is not None:
            c = clocks.expand(times.shape).reshape(-1)
            c = (c, torch.remainder(c.unsqueeze(-1), self.periods))
        out = narrow_to(self._combined(t, g, c), self.dtype, "the encoding", OVERFLOW_HINT)
        out = out.reshape(*times.shape, self.dim)
        return torch.where(mask.unsqueeze(-1), out, torch.zeros((), dtype=out.dtype, device=out.device))

    def _sums_in_blocks(self, out_dtype: torch.dtype, times: torch.Tensor) -> bool:
        """Whether :func:`encode_summed_blocks` (the CPU kernel: float32, an even ``dim``) encodes this call."""
        return (times.device.type == "cpu" and out_dtype == torch.float32 and self.dim % 2 == 0
                and set(self.components) <= SUMMED_COMPONENTS and self._writes_in_place(out_dtype, times))

    def _summed_blocks(self, out: torch.Tensor, times: torch.Tensor, gaps: torch.Tensor | None,
                       row_clock: torch.Tensor | None, row_clock_mod: torch.Tensor | None, row: torch.Tensor,
                       slots: torch.Tensor | None = None) -> torch.Tensor:
        """Real events ``times [N]`` (gaps, row of each event, clocks per row) encoded into ``out`` (``[N, dim]``,
        or rows ``slots``) by :func:`encode_summed_blocks`."""
        def columns(start: int, stop: int) -> list[torch.Tensor]:
            events = row[start:stop]
            clocks = (take_rows(row_clock, events), take_rows(row_clock_mod, events))
            return self._periodic_columns(times[start:stop], clocks, torch.float32)

        periodic = "periodic" in self.components
        return encode_summed_blocks(
            out, times, gaps, self.components, cycles=getattr(self, "cycles", None),
            gap_cycles=getattr(self, "gap_cycles", None), gap_scale=self.gap_scale,
            lift_rows=self.lift.weight.detach().t().contiguous() if periodic else None,
            periodic_columns=columns if periodic else None, chunk=self.chunk, slots=slots)

    def _writes_in_place(self, out_dtype: torch.dtype, times: torch.Tensor) -> bool:
        """Whether the summed components can be written straight into the output (``_combined(into=)``): no
        gradient to keep, no compiler tracing, and an output in the work dtype (float32 / float64)."""
        if self.combine != "sum" or out_dtype in _LOW or torch.compiler.is_compiling():
            return False
        return not (torch.is_grad_enabled() and (times.requires_grad or any(p.requires_grad
                                                                            for p in self.parameters())))

    def _combined(self, t: torch.Tensor, g: torch.Tensor | None,
                  c: tuple[torch.Tensor, torch.Tensor] | None, into: torch.Tensor | None = None) -> torch.Tensor:
        """``[n]`` times (gaps; clocks ``[n]`` and clocks modulo each period ``[n, P]``) of real events ->
        ``[n, dim]`` in the work dtype; with ``into`` (``[n, dim]``, see :meth:`_writes_in_place`) the sum is
        built there, each component written or added in place (the same numbers, no intermediate buffers)."""
        work = torch.float32 if self.dtype in _LOW else self.dtype
        if into is not None:
            return self._sum_into(into, t, g, c, work)
        if self.combine == "concat":
            return torch.cat([self._component(name, t, g, c, work) for name in self.components], dim=-1)
        out = None
        for name in self.components:
            piece = self._component(name, t, g, c, work)
            if name == "periodic":
                out = self._lift(piece, out, work)
            else:
                out = _accumulate(out, piece)
        return out

    def _sum_into(self, into: torch.Tensor, t: torch.Tensor, g: torch.Tensor | None,
                  c: tuple[torch.Tensor, torch.Tensor] | None, work: torch.dtype) -> torch.Tensor:
        """``_combined``'s sum written into ``into``, in the same order and so with the same roundings."""
        started = False
        for name in self.components:
            if name == "absolute":
                absolute_features(t, self.cycles, "interleaved", work, out=into, accumulate=started)
            elif name == "gap":
                log_gap_features(g, self.gap_cycles, self.gap_scale, "interleaved", work, out=into,
                                 accumulate=started)
            elif name == "periodic":
                # the channels as [n] columns, lifted one by one: no [n, channels] stack to transpose back
                self._add_lifted(self._periodic_columns(t, c, work), into, work, started)
            else:
                piece = self._component(name, t, g, c, work)
                into.add_(piece) if started else into.copy_(piece)
            started = True
        return into

    def _lift(self, features: torch.Tensor, out: torch.Tensor | None, work: torch.dtype) -> torch.Tensor:
        """``out + features @ lift.weight.T``, one product and one sum per feature in a fixed order: a matrix
        product's rounding depends on how many rows it is given (its blocking), this does not (each product and
        each sum is one correctly rounded operation, whichever kernel path an element takes)."""
        weight = self.lift.weight.to(work)
        if out is not None and not (torch.is_grad_enabled() and (out.requires_grad or weight.requires_grad
                                                                   or features.requires_grad)):
            return self._add_lifted(features.t().contiguous(), out, work, True)
        for k in range(features.shape[-1]):
            out = _accumulate(out, features[:, k : k + 1] * weight[:, k])
        return out

    def _add_lifted(self, columns: Any, out: torch.Tensor, work: torch.dtype, add: bool) -> torch.Tensor:
        """``_lift`` in place: feature ``k`` (``columns[k]``, a contiguous ``[n]`` column) times its weights (a
        contiguous ``[dim]`` row) added to ``out`` (written, for the first feature, when not ``add``): the same
        products and sums as ``features[:, k:k+1] * weight[:, k]``, 6x faster on CPU than broadcasting a strided
        column."""
        rows = self.lift.weight.to(work).t().contiguous()
        term = torch.empty_like(out)  # one scratch buffer for every product, written in place
        for k, column in enumerate(columns):
            product = torch.mul(column.unsqueeze(1), rows[k], out=term)
            out.add_(product) if add or k else out.copy_(product)
        return out

    def _periodic_columns(self, t: torch.Tensor, c: tuple[torch.Tensor, torch.Tensor],
                          work: torch.dtype) -> list[torch.Tensor]:
        shift = clock_shift(t.to(torch.float64), c[0], c[1], self.tz_transitions, self.tz_offsets, self.phase_mod)
        return periodic_columns(t, self.periods, self.harmonics, work, shift)

    def _component(self, name: str, t: torch.Tensor, g: torch.Tensor | None,
                   c: tuple[torch.Tensor, torch.Tensor] | None, work: torch.dtype) -> torch.Tensor:
        if name == "absolute":
            return absolute_features(t, self.cycles, "interleaved", work)
        if name == "periodic":
            return torch.stack(self._periodic_columns(t, c, work), -1)
        if name == "gap":
            return log_gap_features(g, self.gap_cycles, self.gap_scale, "interleaved", work)
        if name == "gap_bucket":
            return self.gap_bucket.encode_events(g).to(work)
        # in hours whatever the unit, so the learned frequencies mean the same thing for every unit
        hours = t.to(torch.float64) * self._hours_per_unit if self._hours_per_unit != 1 else t
        return self.time2vec.encode_events(hours.unsqueeze(-1), dtype=work)

    def extra_repr(self) -> str:
        parts = [f"dim={self.dim}", f"components={self.components}", f"combine={self.combine!r}",
                 f"unit={self.unit!r}", f"sizes={self.sizes}"]
        if "periodic" in self.sizes:
            parts += [f"periods={self.period_labels}", f"harmonics={self.harmonics}",
                      f"timezone={self.timezone!r}", f"phase_origin={self.phase_origin!r}"]
        if "absolute" in self.sizes:
            parts += [f"min_period={self.min_period!r}", f"max_period={self.max_period!r}"]
        return ", ".join(parts)


def _accumulate(out: torch.Tensor | None, piece: torch.Tensor) -> torch.Tensor:
    """``out + piece``, in place when autograd does not need ``out`` (one buffer for the whole sum)."""
    if out is None:
        return piece
    if torch.is_grad_enabled() and (out.requires_grad or piece.requires_grad):
        return out + piece
    return out.add_(piece)


def _uninitialised(build: Any) -> nn.Module:
    """A submodule built without drawing from the RNG (on the meta device, then given storage on the current
    default device): the owner's ``reset_parameters()`` initialises it, once, so that a seeded meta-device
    construction reproduces ``__init__``."""
    device = torch.get_default_device()
    with torch.device("meta"):
        module = build()
    return module.to_empty(device=device)
