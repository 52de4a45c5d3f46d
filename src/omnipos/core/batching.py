"""Ragged <-> padded + mask, lengths, packing: the one place in omnipos that pads anything.

Conventions: ``mask`` is boolean ``[B, L]`` with True at real entries; padding sits at the end of each row.
``cu_seqlens`` is flash-attn's int32 ``[B + 1]`` vector of cumulative lengths starting at 0.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .buffers import new_buffer
from .checks import (
    allocation_guard,
    as_position_tensor,
    can_inspect_values,
    check_integer_tensor,
    check_positive_int,
)
from .rows import put_rows

__all__ = [
    "check_lengths",
    "check_pad_value",
    "lengths_to_mask",
    "pad_packed",
    "mask_to_lengths",
    "true_positions",
    "pad_ragged",
    "unpad",
    "pack",
    "packed_positions",
]


def check_lengths(lengths: Any, name: str = "lengths") -> torch.Tensor:
    """Validate a ``[B]`` vector of non-negative integer lengths and return it as int64.

    The sign check reads values: skipped while compiling and for meta tensors (:func:`can_inspect_values`)."""
    lengths = as_position_tensor(lengths, name)
    check_integer_tensor(lengths, name)
    if lengths.ndim != 1:
        raise ValueError(f"{name} must be 1-D [B], got shape {tuple(lengths.shape)}")
    if lengths.numel() and can_inspect_values(lengths) and int(lengths.min()) < 0:
        raise ValueError(f"{name} must be >= 0, got {int(lengths.min())}")
    return lengths.long()


def lengths_to_mask(lengths: Any, max_len: int | None = None) -> torch.Tensor:
    """``lengths [B]`` -> mask ``[B, max_len]`` (True where ``position < length``), on the lengths' device.

    ``max_len`` defaults to ``max(lengths)`` and must not be shorter than it. For meta lengths (shapes without
    values) pass ``max_len``; the check against the longest length then cannot run.
    """
    lengths = check_lengths(lengths)
    if max_len is not None:
        max_len = check_positive_int(max_len, "max_len", minimum=0)
    if can_inspect_values(lengths):
        longest = int(lengths.max()) if lengths.numel() else 0
        if max_len is None:
            max_len = longest
        elif max_len < longest:
            raise ValueError(f"max_len={max_len} is shorter than the longest length {longest}")
    elif max_len is None:
        raise ValueError("lengths has no values to read (meta tensor, or traced by torch.compile): pass max_len=")
    with allocation_guard(f"max_len={max_len} (a mask [{lengths.shape[0]}, {max_len}])"):
        return torch.arange(max_len, device=lengths.device) < lengths.unsqueeze(-1)


def check_pad_value(pad_value: Any, dtype: torch.dtype, name: str = "pad_value") -> None:
    """Refuse a pad value that ``dtype`` cannot hold as given (``-1`` in uint8 would become 255, ``0.5`` in int64
    0, ``1e39`` in float32 inf): a pad must be the value asked for."""
    if isinstance(pad_value, torch.Tensor) and pad_value.numel() == 1 and not pad_value.is_meta:
        pad_value = pad_value.item()
    if not isinstance(pad_value, numbers.Number):
        raise TypeError(f"{name} must be a number, got {type(pad_value).__name__} ({pad_value!r})")
    if dtype.is_complex:
        return
    if isinstance(pad_value, numbers.Complex) and not isinstance(pad_value, numbers.Real):
        raise TypeError(f"{name}={pad_value!r} is complex but the data is {dtype}")
    value = float(pad_value) if not isinstance(pad_value, numbers.Integral) else int(pad_value)
    if dtype == torch.bool:
        if value not in (0, 1):
            raise ValueError(f"{name}={pad_value!r} is not a boolean (0/1/False/True) for bool data")
    elif not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            raise ValueError(f"{name}={pad_value!r} is not an integer, but the data is {dtype} (it would become "
                             f"{int(value) if math.isfinite(value) else 'garbage'}); pad with an integer")
        if not info.min <= value <= info.max:
            raise ValueError(f"{name}={pad_value!r} is outside {dtype}'s range [{info.min}, {info.max}] (it would "
                             "wrap around); pad with a value the dtype holds")
    elif math.isfinite(value) and abs(value) > torch.finfo(dtype).max:
        raise ValueError(f"{name}={pad_value!r} is beyond {dtype}'s largest value {torch.finfo(dtype).max} (it would "
                         "become inf)")


def mask_to_lengths(mask: torch.Tensor) -> torch.Tensor:
    """Number of True entries per row of a ``[B, L]`` boolean mask -> ``[B]`` int64."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor, got {getattr(mask, 'dtype', type(mask).__name__)}")
    if mask.ndim != 2:
        raise ValueError(f"mask must be [B, L], got shape {tuple(mask.shape)}")
    if _numpy_ok(mask):  # torch's bool reductions widen to int64 first: ~12x slower on CPU (5M entries: 21 ms)
        return torch.from_numpy(np.count_nonzero(mask.numpy(), axis=1).astype(np.int64, copy=False))
    return mask.sum(dim=1)


def true_positions(mask: torch.Tensor) -> torch.Tensor:
    """Flat positions of the True entries of a boolean ``mask`` of any shape (row-major): ``[n]`` int64, on the
    mask's device; ``mask.reshape(-1).nonzero().squeeze(1)``, ~6x faster on the CPU (NumPy's ``flatnonzero``)."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor, got {getattr(mask, 'dtype', type(mask).__name__)}")
    if _numpy_ok(mask):
        return torch.from_numpy(np.flatnonzero(mask.numpy()).astype(np.int64, copy=False))
    return mask.reshape(-1).nonzero().squeeze(1)


def _numpy_ok(mask: torch.Tensor) -> bool:
    """An eager CPU mask NumPy may read (its values exist, no tracing)."""
    return mask.device.type == "cpu" and not torch.compiler.is_compiling() and can_inspect_values(mask)


def _as_sequences(seqs: Any) -> list[torch.Tensor]:
    if isinstance(seqs, torch.Tensor) or not isinstance(seqs, Sequence) and not hasattr(seqs, "__iter__"):
        raise TypeError("seqs must be a list (or other sequence) of tensors / arrays, one per row")
    tensors = [s if isinstance(s, torch.Tensor) else torch.as_tensor(s) for s in seqs]
    if not tensors:
        raise ValueError("seqs is empty: the trailing shape and dtype of a batch cannot be inferred from nothing")
    first = tensors[0]
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise ValueError(f"seqs[{i}] is a scalar; each sequence needs a leading length axis")
        if t.shape[1:] != first.shape[1:]:
            raise ValueError(
                f"seqs[{i}] has trailing shape {tuple(t.shape[1:])}, seqs[0] has {tuple(first.shape[1:])}"
            )
        if t.dtype != first.dtype:
            raise TypeError(f"seqs[{i}] has dtype {t.dtype}, seqs[0] has {first.dtype}; cast them to one dtype")
        if t.device != first.device:
            raise ValueError(f"seqs[{i}] is on {t.device}, seqs[0] is on {first.device}")
    return tensors


def pad_ragged(
    seqs: Sequence[Any], pad_value: float | int | bool = 0, *, max_len: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack sequences of different lengths into a padded batch.

    Args:
        seqs: B tensors (or arrays) ``[L_b, *trailing]`` with one trailing shape, dtype and device.
        pad_value: value written into padded slots.
        max_len: pad to this length instead of the longest (must not be shorter than any sequence).

    Returns:
        ``(padded [B, max_len, *trailing], mask [B, max_len] bool)`` on the sequences' device.
    """
    tensors = _as_sequences(seqs)
    check_pad_value(pad_value, tensors[0].dtype)
    sizes = [t.shape[0] for t in tensors]
    if max_len is None:
        max_len = max(sizes)
    else:
        max_len = check_positive_int(max_len, "max_len", minimum=0)
        if max_len < max(sizes):
            raise ValueError(f"max_len={max_len} is shorter than the longest sequence ({max(sizes)}, "
                             f"seqs[{sizes.index(max(sizes))}])")
    device = tensors[0].device
    mask = lengths_to_mask(torch.tensor(sizes, device=device), max_len)
    if device.type == "meta":  # shapes only: nothing to copy
        return torch.empty((len(sizes), max_len, *tensors[0].shape[1:]), dtype=tensors[0].dtype, device=device), mask
    return pad_packed(torch.cat(tensors), mask, pad_value), mask


def pad_packed(packed: torch.Tensor, mask: torch.Tensor, pad_value: float | int | bool = 0) -> torch.Tensor:
    """Concatenated rows ``packed [sum L_b, *trailing]`` -> padded ``[B, L, *trailing]`` laid out by ``mask [B, L]``.

    The inverse of ``padded[mask]``, for data that arrives already concatenated (a parsed chunk of reads, an event
    table): no need to split it into one tensor per row first. Without padding (all rows full) it is a reshape.
    """
    if not isinstance(packed, torch.Tensor):
        raise TypeError(f"packed must be a tensor, got {type(packed).__name__}")
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.ndim != 2:
        raise TypeError("mask must be a [B, L] boolean tensor")
    check_pad_value(pad_value, packed.dtype)
    if not can_inspect_values(packed, mask):
        raise ValueError("pad_packed reads the mask's values (how many entries are real): meta tensors have none")
    mask = mask.to(packed.device)
    rows = true_positions(mask)
    count = rows.numel()
    if packed.ndim == 0 or packed.shape[0] != count:
        raise ValueError(f"packed has {packed.shape[0] if packed.ndim else 0} rows but mask marks {count} entries")
    if mask.numel() == count:
        return packed.reshape(*mask.shape, *packed.shape[1:])
    shape = (*mask.shape, *packed.shape[1:])
    with allocation_guard(f"the padded batch {list(shape)} of {packed.dtype}"):
        out = new_buffer(shape, packed.dtype, packed.device, fill=pad_value)
    # rows copied by flat row number: index_copy_ is ~1.5x faster on CPU than masked_scatter_, several times
    # out[mask] = packed, and put_rows's one memcpy per row ~2x faster again
    if count and out.numel():  # (reshape(-1) cannot infer a size from zero elements)
        put_rows(out.view(mask.numel(), -1), rows, packed.reshape(count, -1))
    return out


def unpad(padded: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """Inverse of :func:`pad_ragged`: the True entries of each row of ``padded [B, L, ...]``, as B tensors.

    (``padded[mask]`` gives them concatenated, if that is what you need.)
    """
    if not isinstance(padded, torch.Tensor):
        raise TypeError(f"padded must be a tensor, got {type(padded).__name__}")
    lengths = mask_to_lengths(mask)
    if padded.shape[:2] != mask.shape:
        raise ValueError(f"mask {tuple(mask.shape)} does not match padded's leading axes {tuple(padded.shape[:2])}")
    if not can_inspect_values(padded, mask):
        raise ValueError("unpad reads the mask's values (each row's length): meta tensors have none")
    return list(padded[mask.to(padded.device)].split(lengths.tolist()))


def pack(seqs: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate sequences for varlen attention: ``(packed [sum L_b, *trailing], cu_seqlens [B + 1] int32)``."""
    tensors = _as_sequences(seqs)
    lengths = torch.tensor([t.shape[0] for t in tensors], device=tensors[0].device)
    cu_seqlens = torch.zeros(len(tensors) + 1, dtype=torch.int32, device=lengths.device)
    cu_seqlens[1:] = lengths.cumsum(0)
    return torch.cat(tensors), cu_seqlens


def packed_positions(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Position of each token inside its own document for a packed batch: ``[sum L_b]`` int64.

    ``cu_seqlens=[0, 3, 5]`` -> ``[0, 1, 2, 0, 1]`` (what RoPE needs for per-document positions).
    """
    cu = check_lengths(cu_seqlens, "cu_seqlens")
    if not can_inspect_values(cu):
        raise ValueError("packed_positions reads cu_seqlens' values (the total length): meta tensors have none")
    if cu.numel() == 0 or int(cu[0]) != 0 or bool((cu[1:] < cu[:-1]).any()):
        raise ValueError("cu_seqlens must start at 0 and be non-decreasing")
    lengths = cu[1:] - cu[:-1]
    with allocation_guard(f"cu_seqlens (a total of {int(cu[-1])} tokens)"):
        starts = torch.repeat_interleave(cu[:-1], lengths)
        return torch.arange(int(cu[-1]), device=cu.device) - starts
