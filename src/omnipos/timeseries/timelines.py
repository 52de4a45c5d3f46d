"""Checks and helpers for ready-made padded timelines ``times [..., L]`` (+ ``mask``): validation, gaps to the
previous real event, and encoding only the real events.

Checks that read values (finite, sorted, non-negative gaps) need the values on the host: they run in eager mode
and are skipped while ``torch.compile`` traces (``torch.compiler.is_compiling()``) and for meta tensors (which
have no values); shape, dtype and type checks run everywhere. Validate a batch once in eager (or build it with
:func:`~omnipos.timeseries.batch_timelines` / :class:`~omnipos.timeseries.EventBatch`) before a compiled model
sees it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..core import can_inspect_values, mask_to_lengths, pad_packed, true_positions

__all__ = ["can_inspect_values", "check_times", "check_mask", "check_module_device", "checked_gaps",
           "checked_real_events", "previous_event_times", "encode_valid"]


def check_mask(mask: Any, shape: torch.Size, device: torch.device, name: str = "times") -> torch.Tensor | None:
    """``mask``: None or a boolean tensor of ``shape`` (the shape of ``name``); returned on ``device``."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor (True at real events), got "
                        f"{getattr(mask, 'dtype', type(mask).__name__)}")
    if mask.shape != shape:
        raise ValueError(f"mask {tuple(mask.shape)} must have the shape of {name} {tuple(shape)}")
    if mask.is_meta != (device.type == "meta"):
        raise ValueError(f"mask is on {mask.device} and {name} on {device}: a meta tensor has no values to "
                         f"combine with real ones; put both on the meta device or neither")
    return mask.to(device)


def check_module_device(module_device: torch.device, times: torch.Tensor, name: str = "times") -> None:
    """Refuse ``times`` on another device than the module's (a clear ValueError instead of a RuntimeError from
    deep inside a kernel; meta included: build the module under ``torch.device("meta")`` for meta inputs)."""
    if times.device != module_device:
        raise ValueError(f"{name} is on {times.device} but the module is on {module_device}: move one of them "
                         f"(module.to(device) / times.to(device))")


def check_times(
    times: Any, mask: Any = None, *, name: str = "times", check_sorted: bool = True, check_values: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Validate ready-made times ``[..., L]`` (real tensor) and an optional boolean ``mask`` of the same shape.

    Integer times are read as float64 (differences of unsigned or narrow integers would wrap around). Real
    (masked-in) times must be finite and, with ``check_sorted``, non-decreasing along the last axis (masked-out
    slots are ignored, wherever they are). Returns ``(times, mask)`` with mask on times' device.
    """
    if not isinstance(times, torch.Tensor):
        raise TypeError(f"{name} must be a tensor [..., L] of times (build one with batch_timelines or "
                        f"EventBatch), got {type(times).__name__}")
    if times.dtype == torch.bool or times.is_complex():
        raise TypeError(f"{name} must be a real tensor, got {times.dtype}")
    if times.ndim < 1:
        raise ValueError(f"{name} must have a time axis [..., L], got a scalar")
    if not times.is_floating_point():
        times = times.to(torch.float64)
    mask = check_mask(mask, times.shape, times.device, name)
    if not check_values or not can_inspect_values(times, mask):  # (check_values=False: the caller checks them)
        return times, mask
    if times.numel():
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
    ValueError when a real time is earlier than the one before it (eager only, see the module docstring).
    ``times``/``mask`` already validated."""
    prev = previous_event_times(times, mask)
    gaps = times - prev
    if mask is not None:
        gaps = gaps.masked_fill(~mask, 0)
    # one pass, no [..., L] bool buffer, for the common case; the slots are located only to name one
    if can_inspect_values(times, mask) and gaps.numel() and bool(gaps.min() < 0):
        bad = gaps < 0
        if bool(bad.any()):
            index = tuple(bad.nonzero()[0].tolist())
            raise ValueError(
                f"{name} must be sorted (non-decreasing) along each timeline; at index {index} the time "
                f"{times[index].item()} is earlier than the previous event's {prev[index].item()}; sort them "
                f"first (batch_timelines(..., sort=True) and EventBatch.from_frame do)"
            )
    return gaps


def checked_real_events(times: torch.Tensor, mask: torch.Tensor, *,
                        name: str = "times") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The real events of padded ``times [..., L]`` (``mask`` of its shape, both with values to read), checked
    as :func:`check_times` and :func:`checked_gaps` check them (the same errors, naming the same slot) but on
    the real events only: ``(slots, flat_times, flat_gaps, rows)``, each ``[N]``: the flat slot of each real
    event (row-major), its time, its gap to the previous real event of its row (0 for a row's first) and its
    row (the flat index over the leading axes). The gaps are those of :func:`checked_gaps`, bit for bit; a
    padded batch is often half padding, and nothing here reads it twice."""
    length = times.shape[-1]
    slots = true_positions(mask)
    numpy_path = (times.device.type == "cpu" and not torch.compiler.is_compiling() and times.dtype != torch.bfloat16
                  and times.numel() > 0 and not (torch.is_grad_enabled() and times.requires_grad))
    # (the same numbers through NumPy on the CPU: a gather, a repeat and one subtraction instead of torch's
    # indexing, an integer division and a masked fill of the whole batch)
    flat = (torch.from_numpy(np.take(times.detach().contiguous().numpy().reshape(-1), slots.numpy())) if numpy_path
            else times.reshape(-1)[slots])
    finite = torch.isfinite(flat)
    if not bool(finite.all()):
        at = int((~finite).nonzero()[0])
        raise ValueError(f"{name} must be finite at real events; found {flat[at].item()} at "
                         f"{_slot_index(int(slots[at]), times.shape)}")
    if numpy_path:
        counts = mask_to_lengths(mask.reshape(-1, length)).numpy()  # (torch's bool sum widens to int64 first)
        rows = torch.from_numpy(np.repeat(np.arange(counts.size, dtype=np.int64), counts))  # slots are row-major
        gaps = torch.empty_like(flat)
        torch.sub(flat[1:], flat[:-1], out=gaps[1:])
        firsts = (np.cumsum(counts) - counts)[counts > 0]  # each row's first event (and the first of all) gets 0
        gaps.numpy()[firsts] = 0
    else:
        rows = slots // length
        within_row = (flat[1:] - flat[:-1]).masked_fill(rows[1:] != rows[:-1], 0)
        gaps = torch.cat([flat.new_zeros(min(1, flat.shape[0])), within_row])
    if gaps.numel() and bool(gaps.min() < 0):
        at = int((gaps < 0).nonzero()[0])
        raise ValueError(
            f"{name} must be sorted (non-decreasing) along each timeline; at index "
            f"{_slot_index(int(slots[at]), times.shape)} the time {flat[at].item()} is earlier than the previous "
            f"event's {flat[at - 1].item()}; sort them first (batch_timelines(..., sort=True) and "
            f"EventBatch.from_frame do)"
        )
    return slots, flat, gaps, rows


def _slot_index(slot: int, shape: torch.Size) -> tuple[int, ...]:
    """The index tuple of flat ``slot`` in an array of ``shape`` (row-major)."""
    index = []
    for size in reversed(shape):
        slot, at = divmod(slot, size)
        index.append(at)
    return tuple(reversed(index))


def previous_event_times(times: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """For each slot, the time of the previous real event in its row (itself where there is none).

    Masked-out slots may sit anywhere: the index of the last real event so far is a running maximum. When the
    padding is all at the end (what :func:`omnipos.core.pad_ragged` makes), that is simply the slot before
    (checked in eager; traced code always takes the running maximum, which gives the same values).
    """
    shifted = torch.cat([times[..., :1], times[..., :-1]], dim=-1)
    if mask is None:
        return shifted
    if can_inspect_values(times, mask) and not bool((mask[..., 1:] & ~mask[..., :-1]).any()):
        return shifted
    idx = torch.arange(times.shape[-1], device=times.device).expand(times.shape)
    last_real = torch.where(mask, idx, torch.full_like(idx, -1)).cummax(-1).values
    prev_idx = torch.cat([last_real.new_full((*times.shape[:-1], 1), -1), last_real[..., :-1]], dim=-1)
    return times.gather(-1, torch.where(prev_idx < 0, idx, prev_idx))


def encode_valid(values: torch.Tensor, mask: torch.Tensor | None, encode: Any) -> torch.Tensor:
    """Apply ``encode`` (``[N, ...] -> [N, D]``, any leading shape) to the real events only.

    ``mask`` is ``[..., L]`` over the leading axes of ``values``; padded slots of the result are exactly 0.
    In eager mode only the real events are encoded: nothing is spent on padding and a padded slot's (arbitrary)
    time cannot leak into the output; :func:`omnipos.core.pad_packed` puts the rows back where the mask says.
    While compiling (and on meta tensors) every slot is encoded, padded slots with their value replaced by 0
    and their output by 0: no data-dependent shapes, the same numbers at the real events.
    """
    if mask is None:
        return encode(values)
    if can_inspect_values(values, mask):
        return pad_packed(encode(values[mask]), mask, 0)
    keep = mask.reshape(*mask.shape, *([1] * (values.ndim - mask.ndim)))
    safe = torch.where(keep, values, torch.zeros((), dtype=values.dtype, device=values.device))
    out = encode(safe.reshape(-1, *values.shape[mask.ndim:]))
    out = out.reshape(*mask.shape, *out.shape[1:])
    return torch.where(mask.unsqueeze(-1), out, torch.zeros((), dtype=out.dtype, device=out.device))
