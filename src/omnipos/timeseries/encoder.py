"""TimelineEncoder: absolute, periodic and gap encodings of a padded batch of timelines, summed or concatenated."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..core import check_choice, check_float_dtype, check_positive_int
from .absolute import absolute_cycles, absolute_features
from .durations import UNITS, check_unit, positive_duration
from .gaps import DEFAULT_GAP_BOUNDARIES, GapBucketEmbedding, log_gap_cycles, log_gap_features
from .periodic import DEFAULT_PERIODS, periodic_dim, periodic_features, periods_tensor
from .time2vec import Time2Vec
from .timelines import check_times, checked_gaps

__all__ = ["TimelineEncoder", "COMPONENTS", "COMBINES"]

COMPONENTS = ("absolute", "periodic", "gap", "gap_bucket", "time2vec")
COMBINES = ("sum", "concat")
_EVEN = ("absolute", "gap")  # sin/cos pairs


class TimelineEncoder(nn.Module):
    """Encode padded timelines ``times [B, L]`` (+ ``mask``) into ``[B, L, dim]``.

    Components (any subset, in the order given):

    - ``"absolute"``: :func:`absolute_time_encoding` with ``min_period`` .. ``max_period``;
    - ``"periodic"``: :func:`periodic_encoding` with ``periods`` and ``harmonics``;
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
        unit: unit of the times given to ``forward`` and of plain-float durations below.
        min_period, max_period: the absolute encoding's period range (default 1 hour to 10 years).
        periods, harmonics: the periodic encoding's periods and harmonics (default a day and a week).
        gap_scale, gap_base: the log-gap encoding's scale and base (see :func:`log_gap_encoding`).
        gap_boundaries: the gap buckets' boundaries.
        dtype: dtype of the sinusoids.

    Shape:
        ``forward(times, mask=None)``: ``[B, L]`` (any ``[..., L]``) sorted real times -> ``[..., L, dim]``,
        padded slots exactly 0.
    """

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
        self.dtype = check_float_dtype(dtype)
        self.sizes = self._sizes(periodic_dim(periods, harmonics))
        self.harmonics = harmonics
        self.period_labels = tuple(periods)
        self.register_buffer("periods", periods_tensor(periods, unit), persistent=False)
        self.min_period, self.max_period = min_period, max_period
        self.gap_scale = positive_duration(gap_scale, unit, "gap_scale")
        self.gap_base = float(gap_base)
        if "absolute" in self.sizes:
            self.register_buffer("cycles", absolute_cycles(self.sizes["absolute"], min_period, max_period, unit),
                                 persistent=False)
        if "gap" in self.sizes:
            self.register_buffer("gap_cycles", log_gap_cycles(self.sizes["gap"], self.gap_base, "interleaved"),
                                 persistent=False)
        self.lift = (nn.Linear(periodic_dim(periods, harmonics), dim, bias=False)
                     if "periodic" in self.sizes and combine == "sum" else None)
        self.gap_bucket = (GapBucketEmbedding(gap_boundaries, self.sizes["gap_bucket"], unit=unit)
                           if "gap_bucket" in self.sizes else None)
        self.time2vec = Time2Vec(self.sizes["time2vec"]) if "time2vec" in self.sizes else None
        self._hours_per_unit = UNITS[self.unit] / UNITS["h"]
        self.chunk = 1 << 14  # time slots per block (measured: 2^12..2^16 within noise, 2^14 best)

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

    def forward(self, times: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        times, mask = check_times(times, mask, check_sorted=False)
        gaps = checked_gaps(times, mask)  # checks the order too
        if not {"gap", "gap_bucket"} & set(self.components):
            gaps = None
        if mask is None:
            mask = torch.ones_like(times, dtype=torch.bool)
        if times.numel() == 0:
            return torch.zeros(*times.shape, self.dim, dtype=self.dtype, device=times.device)
        length = times.shape[-1]
        rows_t, rows_m = times.reshape(-1, length), mask.reshape(-1, length)
        rows_g = None if gaps is None else gaps.reshape(-1, length)
        out = torch.empty(*rows_t.shape, self.dim, dtype=self.dtype, device=times.device)
        # On CPU, blocks of rows small enough to stay in cache while they are zeroed, encoded and filled in: the
        # work is memory-bound (float64 phase buffers, the padded output). Elsewhere one block (no syncs).
        step = max(1, self.chunk // length) if times.device.type == "cpu" else rows_t.shape[0]
        for start in range(0, rows_t.shape[0], step):
            block = slice(start, start + step)
            slots = rows_m[block].reshape(-1).nonzero().squeeze(1)
            target = out[block].view(-1, self.dim)
            if slots.numel() < target.shape[0]:
                target.zero_()
            if slots.numel():
                t = rows_t[block].reshape(-1)[slots]
                g = None if rows_g is None else rows_g[block].reshape(-1)[slots]
                target.index_copy_(0, slots, self._combined(t, g).to(out.dtype))
        return out.reshape(*mask.shape, self.dim)

    def _combined(self, t: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
        """``[n]`` times (and gaps) of real events -> ``[n, dim]``."""
        if self.combine == "concat":
            return torch.cat([self._component(c, t, g) for c in self.components], dim=-1)
        out = None
        for c in self.components:  # accumulate in place: one [n, dim] buffer, not one per component
            if c == "periodic" and out is not None:
                out = out.addmm_(self._component(c, t, g, lift=False), self.lift.weight.T.to(out.dtype))
            else:
                piece = self._component(c, t, g)
                out = piece if out is None else out.add_(piece)
        return out

    def _component(self, name: str, t: torch.Tensor, g: torch.Tensor | None, lift: bool = True) -> torch.Tensor:
        if name == "absolute":
            return absolute_features(t, self.cycles.to(t.device), "interleaved", self.dtype)
        if name == "periodic":
            out = periodic_features(t, self.periods.to(t.device), self.harmonics, self.dtype)
            return self.lift(out.to(self.lift.weight.dtype)) if self.lift is not None and lift else out
        if name == "gap":
            return log_gap_features(g, self.gap_cycles.to(g.device), self.gap_scale, "interleaved", self.dtype)
        if name == "gap_bucket":
            return self.gap_bucket.encode_events(g)
        # in hours whatever the unit, so the learned frequencies mean the same thing for every unit
        return self.time2vec.encode_events((t.to(torch.float64) * self._hours_per_unit).unsqueeze(-1))

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, components={self.components}, combine={self.combine!r}, unit={self.unit!r}, "
                f"sizes={self.sizes}, periods={self.period_labels}, harmonics={self.harmonics}, "
                f"min_period={self.min_period!r}, max_period={self.max_period!r}")
