"""Centered, reverse-complement-symmetric positional encodings of reads.

Position ``p`` of a read of length ``L`` gets the centered coordinate ``c = p - (L - 1) / 2`` (a half-integer
for even ``L``). The reverse complement maps position ``p`` to ``L - 1 - p``, i.e. ``c`` to ``-c``, so

- ``cos(w c)`` is RC-invariant: the default encoding is ``dim`` cosine channels, frequencies
  ``w_i = base^(-i / dim)``, i = 0..dim-1 (the cosine half of ``core.sinusoidal(c, 2 * dim, layout="split")``);
- ``sin(w c)`` flips sign: ``strand_aware=True`` is ``core.sinusoidal(c, dim, layout="split")``, i.e.
  ``[sin(w_i c) | cos(w_i c)]`` with ``w_i = base^(-2i / dim)``, so a model can tell upstream from downstream.

The seeds' property, made precise: a motif of length ``m`` starting at ``p`` has its centre at
``p + (m - 1) / 2``; its reverse complement starts at ``L - m - p`` and its centre is the mirror image, so the
two centres have centered coordinates ``c`` and ``-c`` and receive the same cosine vector (pass motif centres as
``positions``). Per-position vectors of the two windows match in mirrored order, so any symmetric pooling over
the motif (the mean, say) agrees too. The vectors at the two start positions differ unless ``m = 1``.

Under ``torch.compile`` both forms trace without graph breaks when the output shape is known: positions, or
lengths with ``max_len=`` (without it the width is ``max(lengths)``, a value only the data knows; set
``torch._dynamo.config.capture_scalar_outputs = True`` to trace that too). The value checks (negative lengths,
non-finite positions: host syncs) run in eager mode only.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any

import torch
from torch import nn

from ..core import (
    as_position_tensor,
    can_inspect_values,
    check_even_dim,
    check_finite,
    check_float_dtype,
    check_integer_tensor,
    check_lengths,
    check_positive_int,
    layout_frequencies,
    sinusoid_of_turns,
    take_rows,
)
from .limits import check_batch_bytes

__all__ = ["centered_positions", "rc_symmetric_encoding", "RCSymmetricEncoding"]


def _padding(lengths: Any, max_len: Any, bytes_per_position: int,
             name: str = "lengths") -> tuple[torch.Tensor, torch.Tensor]:
    """Validated int64 ``lengths [B]`` and their padding mask ``[B, width]``. The value checks (negative lengths,
    ``max_len`` shorter than a read, a result over the size limit) run in eager mode on real devices; under
    ``torch.compile`` and on the meta device only shapes and types are checked (and meta needs ``max_len``)."""
    lengths, width = _width(lengths, max_len, bytes_per_position, name)
    return lengths, torch.arange(width, device=lengths.device) < lengths.unsqueeze(1)


def _width(lengths: Any, max_len: Any, bytes_per_position: int, name: str = "lengths") -> tuple[torch.Tensor, int]:
    """Validated int64 ``lengths [B]`` and the output width (``max_len``, else the longest read), with the checks
    of :func:`_padding` but no mask (the gathers from length-indexed tables need none: building one cost as much
    as validating)."""
    if not isinstance(lengths, torch.Tensor):
        lengths = as_position_tensor(lengths, name)
    check_integer_tensor(lengths, name, "integer lengths [B]")
    if lengths.ndim != 1:
        raise ValueError(f"{name}: integer lengths must be 1-D [B], got shape {tuple(lengths.shape)}")
    if max_len is not None:
        max_len = check_positive_int(max_len, "max_len", minimum=0)
    if not can_inspect_values(lengths):
        if max_len is None and lengths.is_meta:
            raise ValueError(f"{name}: lengths on the meta device have no values; pass max_len= to set the "
                             "output width")
        return lengths.long(), int(lengths.max()) if max_len is None else max_len
    lengths = check_lengths(lengths, name)
    longest = int(lengths.max()) if lengths.numel() else 0
    wide = max_len is not None and max_len > longest
    check_batch_bytes(max(lengths.numel(), 1), max(max_len if wide else longest, 1), bytes_per_position,
                      f"max_len={max_len}" if wide else f"the longest read ({longest:,})")
    if max_len is not None and max_len < longest:
        raise ValueError(f"max_len={max_len} is shorter than the longest length {longest}")
    return lengths, longest if max_len is None else max_len


def centered_positions(lengths: Any, max_len: int | None = None) -> torch.Tensor:
    """``lengths [B]`` -> centered coordinates ``[B, max_len]`` float64: ``c = p - (L_b - 1) / 2`` for
    ``p < L_b``, 0.0 at padded positions (use ``lengths_to_mask`` to tell them apart).

    ``max_len`` defaults to the longest length and must not be shorter than it.
    """
    lengths, mask = _padding(lengths, max_len, 8)
    p = torch.arange(mask.shape[1], device=lengths.device, dtype=torch.float64)
    c = p - (lengths.to(torch.float64).unsqueeze(1) - 1.0) / 2.0
    return c.masked_fill(~mask, 0.0)


def _channels(c: torch.Tensor, dim: int, base: float, strand_aware: bool, dtype: torch.dtype) -> torch.Tensor:
    """``core.sinusoidal(c, dim, layout="split")`` (strand-aware) or the cosine half of
    ``core.sinusoidal(c, 2 * dim, layout="split")``, built from the same float64 turns with the core's
    range-reduced ``sinusoid_of_turns`` (the same numbers, bit for bit); ``c`` is float64 and already checked
    finite by the caller (in eager mode), so nothing here syncs with the host under ``torch.compile``."""
    width = dim if strand_aware else 2 * dim
    turns = c.unsqueeze(-1) * (layout_frequencies(width, base=base, layout="split", device=c.device)
                               / (2.0 * math.pi))
    out = sinusoid_of_turns(turns, layout="split", dtype=dtype, inplace=not turns.requires_grad)
    return out if strand_aware else out[..., dim:].contiguous()


@functools.lru_cache(maxsize=32)
def _half_integer_table(width: int, dim: int, base: float, strand_aware: bool, dtype: torch.dtype,
                        device: torch.device) -> torch.Tensor:
    """Encodings of c = -(width-1)/2, -(width-2)/2, ..., (width-1)/2 and a final zero row (for pads):
    ``[2 * width, dim]``. Cached: batches of reads ask for the same table again and again (read-only use)."""
    table = torch.zeros(2 * width, dim, dtype=dtype, device=device)
    if width:
        doubled = torch.arange(-(width - 1), width, device=device, dtype=torch.float64)
        table[:-1] = _channels(doubled / 2.0, dim, base, strand_aware, dtype)
    return table


#: Largest per-length block table (bytes) :func:`_length_blocks` keeps: reads up to ~250 bp at dim 16, float32.
_BLOCKS_BYTES = 1 << 22


@functools.lru_cache(maxsize=8)
def _length_blocks(width: int, dim: int, base: float, strand_aware: bool, dtype: torch.dtype,
                   device: torch.device) -> torch.Tensor:
    """Row ``n`` is the ``[width, dim]`` encoding of a read of length ``n`` (zeros past it), flattened:
    ``[width + 1, width * dim]``, gathered from :func:`_half_integer_table` (the same numbers). Cached: batches of
    short reads of mixed lengths then cost one gather of whole rows (read-only use)."""
    table = _half_integer_table(width, dim, base, strand_aware, dtype, device)
    n = torch.arange(width + 1, device=device).unsqueeze(1)
    p = torch.arange(width, device=device)
    index = torch.where(p < n, 2 * p - n + width, 2 * width - 1)
    return take_rows(table, index.reshape(-1)).reshape(width + 1, width * dim)


def _check_base(base: Any) -> float:
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not math.isfinite(base) or base <= 1:
        raise ValueError(f"base must be a finite number > 1, got {base!r}")
    return float(base)


def _from_lengths(lengths: torch.Tensor, dim: int, base: float, strand_aware: bool, max_len: int | None,
                  dtype: torch.dtype) -> torch.Tensor:
    lengths, width = _width(lengths, max_len, dim * dtype.itemsize, "lengths_or_positions")
    if not can_inspect_values(lengths):
        # The direct formula: traceable (no cache, no data-dependent unique) and meta-friendly.
        p = torch.arange(width, device=lengths.device, dtype=torch.float64)
        real = p < lengths.unsqueeze(1)
        c = p - (lengths.to(torch.float64).unsqueeze(1) - 1.0) / 2.0
        return _channels(c, dim, base, strand_aware, dtype).masked_fill(~real.unsqueeze(-1), 0.0)
    batch = lengths.shape[0]
    # Every centered coordinate of a read no longer than `width` is a multiple of 1/2 in
    # [-(width-1)/2, (width-1)/2]: encode those 2*width-1 values once (plus a zero row for pads) and gather.
    if (width + 1) * width * dim * dtype.itemsize <= _BLOCKS_BYTES:  # short reads: every length's block, cached
        # (one gather also for reads of one length: np.take's output, allocated by NumPy with huge pages, costs
        # fewer page faults than a fresh torch buffer filled from one expanded block)
        return take_rows(_length_blocks(width, dim, base, strand_aware, dtype, lengths.device),
                         lengths).reshape(batch, width, dim)
    table = _half_integer_table(width, dim, base, strand_aware, dtype, lengths.device)
    # Reads of one length share one [width, dim] block: build a block per distinct length, then copy whole
    # blocks (memcpy-sized rows) instead of gathering batch * width small rows.
    distinct, which = torch.unique(lengths, return_inverse=True)
    p = torch.arange(width, device=lengths.device)
    index = torch.where(p < distinct.unsqueeze(1), 2 * p - distinct.unsqueeze(1) + width, 2 * width - 1)
    blocks = take_rows(table, index.reshape(-1)).reshape(distinct.numel(), width * dim)
    if distinct.numel() == 1:  # all reads one length (typical of short reads): one block copied B times
        out = torch.empty(batch, width * dim, dtype=dtype, device=lengths.device)
        return out.copy_(blocks.expand(batch, width * dim)).reshape(batch, width, dim)
    return take_rows(blocks, which).reshape(batch, width, dim)


def rc_symmetric_encoding(
    lengths_or_positions: Any,
    dim: int,
    *,
    base: float = 10000.0,
    strand_aware: bool = False,
    mask: torch.Tensor | None = None,
    max_len: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """RC-symmetric positional encoding of reads (see the module docstring for the formulas).

    Args:
        lengths_or_positions: either integer read lengths ``[B]`` (the encoding of every position of every
            read, ``[B, max_len, dim]``), or floating centered coordinates of any shape ``[...]`` (motif centres,
            say; ``[..., dim]``), used as they are.
        dim: output channels (always ``dim``); even when ``strand_aware``.
        base: wavelength scale, as in ``core.sinusoidal`` (finite, > 1).
        strand_aware: ``False``: ``dim`` cosines (RC-invariant). ``True``: ``[sin | cos]`` halves, the sines
            flip sign under RC.
        mask: with positions only, a boolean tensor of their shape; False entries are encoded as exact zeros.
        max_len: with lengths only, pad to this length instead of the longest read.
        dtype: floating dtype of the result.

    Returns:
        ``[B, max_len, dim]`` (from lengths; padded positions exactly zero) or ``[..., dim]`` (from positions).
    """
    if not isinstance(strand_aware, bool):
        raise TypeError(f"strand_aware must be a bool, got {type(strand_aware).__name__}")
    dim = check_even_dim(dim) if strand_aware else check_positive_int(dim, "dim")
    check_float_dtype(dtype)
    base = _check_base(base)
    values = as_position_tensor(lengths_or_positions, "lengths_or_positions")
    if values.is_floating_point():
        if max_len is not None:
            raise ValueError("max_len applies to lengths; centered positions already have their shape")
        check_batch_bytes(max(values.numel(), 1), dim, 8 + dtype.itemsize,
                          f"dim={dim} for {values.numel():,} positions")
        if can_inspect_values(values):
            check_finite(values, "lengths_or_positions")
        out = _channels(values.to(torch.float64), dim, base, strand_aware, dtype)
        if mask is not None:
            if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != values.shape:
                raise ValueError(f"mask must be a boolean tensor of the positions' shape {tuple(values.shape)}")
            out = out.masked_fill(~mask.to(out.device).unsqueeze(-1), 0.0)
        return out
    if mask is not None:
        raise ValueError("mask applies to positions; with lengths the padding follows from the lengths")
    return _from_lengths(values, dim, base, strand_aware, max_len, dtype)


class RCSymmetricEncoding(nn.Module):
    """Module form of :func:`rc_symmetric_encoding`: ``forward(lengths_or_positions)`` -> ``[..., dim]``.

    Args:
        dim: output channels. base: wavelength scale. strand_aware: add the sign-flipping sine half.
        dtype: initial floating dtype of the result; ``.half()``, ``.double()``, ``.to(dtype)`` change it (the
            angles are always computed in float64 and cast at the end).

    Shape:
        ``forward(lengths [B], max_len=None)`` -> ``[B, max_len, dim]``; ``forward(positions [...], mask=None)``
        -> ``[..., dim]``.
    """

    def __init__(self, dim: int, *, base: float = 10000.0, strand_aware: bool = False,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        if not isinstance(strand_aware, bool):
            raise TypeError(f"strand_aware must be a bool, got {type(strand_aware).__name__}")
        self.dim = check_even_dim(dim) if strand_aware else check_positive_int(dim, "dim")
        self.base = _check_base(base)
        self.strand_aware = strand_aware
        check_float_dtype(dtype)
        # An empty floating buffer: module.half() / .double() / .to(dtype) convert it, and the output follows its
        # dtype. It holds nothing, so meta-device init, copies and state dicts have nothing to restore.
        self.register_buffer("output_dtype_marker", torch.empty(0, dtype=dtype), persistent=False)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the output (follows ``.half()`` / ``.double()`` / ``.to(dtype)``)."""
        return self.output_dtype_marker.dtype

    def forward(self, lengths_or_positions: Any, *, mask: torch.Tensor | None = None,
                max_len: int | None = None) -> torch.Tensor:
        return rc_symmetric_encoding(lengths_or_positions, self.dim, base=self.base,
                                     strand_aware=self.strand_aware, mask=mask, max_len=max_len, dtype=self.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base:g}, strand_aware={self.strand_aware}, dtype={self.dtype}"
