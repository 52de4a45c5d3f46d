"""Reverse complement of strings, token batches and one-hot batches, padding-aware.

A padded batch is reversed within each row's length: pads stay at the end (Caduceus flips them along with the
bases, so a short read's RC starts with padding). The reversal is one gather with an index built from the
lengths, no loop over rows, and applying it twice is the identity. Tokens keep their integer dtype (uint8 by
default) and one-hot tensors their floating dtype. Under ``torch.compile`` it traces without graph breaks: the check
that a mask's padding sits at the end of each row (a host sync) runs in eager mode only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, overload

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from ..core import can_inspect_values, mask_to_lengths, take_rows
from . import dna_triton
from .alphabet import (
    IUPAC_COMPLEMENT,
    PAD,
    check_bool_mask,
    check_tokens,
    complement_tokens,
)

__all__ = ["reverse_complement", "flip_within_lengths", "check_mask"]

_STR_TABLE = str.maketrans(
    "".join(IUPAC_COMPLEMENT) + "".join(IUPAC_COMPLEMENT).lower(),
    "".join(IUPAC_COMPLEMENT.values()) + "".join(IUPAC_COMPLEMENT.values()).lower(),
)
_BYTES_TABLE = bytes.maketrans(
    ("".join(IUPAC_COMPLEMENT) + "".join(IUPAC_COMPLEMENT).lower()).encode(),
    ("".join(IUPAC_COMPLEMENT.values()) + "".join(IUPAC_COMPLEMENT.values()).lower()).encode(),
)
_INVALID_TEXT = re.compile("[^" + "".join(IUPAC_COMPLEMENT) + "".join(IUPAC_COMPLEMENT).lower() + "]")
_INVALID_BYTES = re.compile(_INVALID_TEXT.pattern.encode())


def check_mask(mask: Any, shape: torch.Size, name: str = "mask") -> torch.Tensor:
    """A boolean ``[B, L]`` mask of the given leading shape whose True entries come first in every row.

    The order check is a host sync: it runs in eager mode on real devices, not under ``torch.compile`` nor on
    the meta device.
    """
    mask = check_bool_mask(mask, shape, name)
    if (mask.ndim == 2 and mask.shape[1] > 1 and can_inspect_values(mask)
            and bool((mask[:, 1:] & ~mask[:, :-1]).any())):
        raise ValueError(f"{name} must have its padding at the end of each row (True entries first)")
    return mask


def _mask_lengths_numpy(mask: np.ndarray, name: str = "mask") -> np.ndarray:
    """Row lengths ``[B]`` (intp) of a NumPy bool mask ``[B, W]`` whose True entries come first in every row, else
    :func:`check_mask`'s ValueError. Two cheap passes instead of three torch passes and a sum: the first False of
    each row (``argmin``) and the count of Trues, which equals the sum of those prefixes exactly when no True
    follows a False."""
    batch, width = mask.shape
    if width == 0:
        return np.zeros(batch, dtype=np.intp)
    first_false = np.argmin(mask, axis=1)  # 0 for a row without False (all True) and for an empty row
    lengths = np.where((first_false == 0) & mask[:, 0], width, first_false)
    if np.count_nonzero(mask) != int(lengths.sum()):
        raise ValueError(f"{name} must have its padding at the end of each row (True entries first)")
    return lengths


def _reverse_complement_padded_numpy(batch: torch.Tensor, mask: np.ndarray) -> torch.Tensor:
    """RC of a contiguous padded one-hot batch ``[B, L, 4]`` (CPU, no autograd) with NumPy; checks the mask.

    Reversing the whole batch element by element reverses every row, complements it (A, C, G, T -> T, G, C, A is
    the channel order reversed) and puts the rows in reverse order; in that reversed copy, row ``b``'s reverse
    complement is the ``L``-position window that starts ``B*L - b*L - len_b`` positions in, so the output is one
    gather of whole windows (memcpy-sized rows, no per-position index). What the windows carry past each read (the
    previous row's tail) is then overwritten with the batch's own pad values through the padding mask, so pads
    keep their values. One reversed copy (torch's flip), one row gather and one pass over the padding: ~25% less
    time in the read pipeline than packing the real positions through the mask and writing them back through it."""
    lengths = _mask_lengths_numpy(mask)
    rows, width, channels = batch.shape
    if int(lengths.sum()) == rows * width:  # no padding: one flip
        return batch.reshape(rows, -1).flip(1).reshape(batch.shape)
    values = batch.numpy()
    backwards = batch.reshape(-1).flip(0).numpy()  # torch's flip: ~2x NumPy's reversed copy
    size, row = values.size, width * channels
    starts = channels * (rows * width - width * np.arange(rows) - lengths)
    # only row 0's window can start past the last whole window (when it is padded): clipped, then its bases copied
    out = sliding_window_view(backwards, row)[np.minimum(starts, size - row)]
    out[0, :channels * int(lengths[0])] = backwards[int(starts[0]):]
    item = np.dtype((np.void, channels * values.itemsize))  # a position's channels as one item
    # a masked copy in one pass: ~2x the boolean gather + scatter of the pads
    np.copyto(out.view(item).reshape(rows, width), values.view(item)[..., 0], where=~mask)
    return torch.from_numpy(out.reshape(batch.shape))


def _all_real(mask: torch.Tensor) -> bool:
    """True when no row is padded (eager only: under compile or on meta the general path runs)."""
    return can_inspect_values(mask) and bool(mask.all())


def flip_within_lengths(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Reverse ``x [B, L, ...]`` along axis 1 inside each row's real length; padded slots stay where they are.

    ``mask [B, L]`` is the padding mask (True = real; padding at the end). Involutive: applying it twice gives x.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor [B, L, ...], got {type(x).__name__}")
    if x.ndim < 2:
        raise ValueError(f"x must be [B, L, ...], got shape {tuple(x.shape)}")
    mask = check_mask(mask, x.shape[:2]).to(x.device)
    if x.shape[1] == 0 or _all_real(mask):
        return x.flip(1)  # no padding: a plain flip (the common case of equal-length reads)
    lengths = mask_to_lengths(mask).unsqueeze(1)
    position = torch.arange(x.shape[1], device=x.device)
    index = torch.where(mask, lengths - 1 - position, position)
    rows = index + torch.arange(0, x.shape[0] * x.shape[1], x.shape[1], device=x.device).unsqueeze(1)
    return take_rows(x.reshape(x.shape[0] * x.shape[1], *x.shape[2:]), rows.reshape(-1)).reshape(x.shape)


def _reverse_complement_text(seq: str | bytes, index: int | None = None) -> str | bytes:
    text = isinstance(seq, str)
    if not text:
        seq = bytes(seq)
    bad = (_INVALID_TEXT if text else _INVALID_BYTES).search(seq)
    if bad is not None:
        where = "x" if index is None else f"x[{index}]"
        raise ValueError(f"{where} has {bad.group()!r} at position {bad.start()}; expected IUPAC nucleotide "
                         "letters (either case)")
    return seq.translate(_STR_TABLE if text else _BYTES_TABLE)[::-1]


@overload
def reverse_complement(x: str, mask: None = None) -> str: ...
@overload
def reverse_complement(x: bytes, mask: None = None) -> bytes: ...
@overload
def reverse_complement(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor: ...
def _numpy_ok(x: torch.Tensor, mask: torch.Tensor) -> bool:
    """Eager CPU tensors outside autograd: NumPy may do the work."""
    return (not torch.compiler.is_compiling() and x.device.type == "cpu" and mask.device.type == "cpu"
            and not x.is_meta and not (torch.is_grad_enabled() and x.requires_grad) and x.dtype != torch.bfloat16)


def _kernel_applies(batch: torch.Tensor) -> bool:
    """Whether the Triton kernel reverses this batch (a CUDA tensor, Triton importable, no gradient wanted)."""
    return batch.device.type in dna_triton.KERNEL_DEVICE_TYPES and dna_triton.enabled(batch)


def reverse_complement(x: Any, mask: torch.Tensor | None = None) -> Any:
    """Reverse complement of DNA in any of omnipos' forms.

    Args:
        x: a ``str`` / ``bytes`` (IUPAC letters, case kept, as pyfaidx does), a list of them, a token tensor
            ``[B, L]`` or ``[L]`` from :func:`encode`, or a one-hot tensor ``[B, L, 4]`` (``[B, L, 5]`` with the
            soft-mask channel, which is reversed but not complemented) or ``[L, 4]``.
        mask: ``[B, L]`` bool padding mask (True = real; padding at the end). For tokens it defaults to
            ``tokens != PAD``; a one-hot tensor cannot tell pads from N rows, so without a mask every position
            of it counts as real (pass the mask of a padded one-hot batch).

    Returns:
        The same kind and shape as ``x``: each row reversed within its length and complemented; pads stay at
        the end of each row. Applying it twice is the identity.
    """
    if isinstance(x, (str, bytes, bytearray)):
        if mask is not None:
            raise ValueError("mask applies to tensors only; a string carries its own length")
        return _reverse_complement_text(x)
    if isinstance(x, Sequence) and not isinstance(x, torch.Tensor):
        if mask is not None:
            raise ValueError("mask applies to tensors only; strings carry their own lengths")
        if not all(isinstance(s, (str, bytes, bytearray)) for s in x):
            raise TypeError("x must be a str, bytes, a list of them or a tensor")
        return [_reverse_complement_text(s, i) for i, s in enumerate(x)]
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a str, bytes, a list of them or a tensor, got {type(x).__name__}")
    if x.is_floating_point():
        if x.ndim not in (2, 3) or x.shape[-1] not in (4, 5):
            raise ValueError(f"a one-hot x must be [B, L, 4|5] or [L, 4|5], got shape {tuple(x.shape)}")
        single = x.ndim == 2
        batch = x.unsqueeze(0) if single else x
        if mask is not None and single:
            mask = check_bool_mask(mask, x.shape[:1]).reshape(1, -1)
        if _kernel_applies(batch):  # one launch on CUDA; a one-hot batch without a mask has no padding
            mask = None if mask is None else check_mask(mask, batch.shape[:2]).to(x.device)
            out = dna_triton.reverse_complement_rows(batch, mask, tokens=False)
            return out[0] if single else out
        if mask is None:
            mask = torch.ones(batch.shape[:2], dtype=torch.bool, device=x.device)
        mask = check_bool_mask(mask, batch.shape[:2])
        # A, C, G, T -> T, G, C, A is the channel order reversed; a soft-mask channel stays put.
        if batch.shape[-1] == 4 and _numpy_ok(batch, mask):  # checks the mask's order itself, in NumPy
            out = _reverse_complement_padded_numpy(batch.contiguous(), mask.numpy())
        elif batch.shape[-1] == 4:
            mask = check_mask(mask, batch.shape[:2]).to(x.device)
            # Reversing a row's (position, channel) elements reverses positions and complements in one fast
            # flip; padded rows then shift left by their padding, and pad slots keep their own values.
            if _all_real(mask):
                out = batch.reshape(batch.shape[0], -1).flip(1).reshape(batch.shape)
            else:
                flipped = batch.reshape(batch.shape[0], -1).flip(1).reshape(batch.shape)
                size, width = batch.shape[0] * batch.shape[1], batch.shape[1]
                shift = width - mask_to_lengths(mask).unsqueeze(1)
                rows = torch.arange(size, device=x.device).reshape(mask.shape)
                # real slots read the flipped copy `shift` rows on; pad slots read their own value (2nd half)
                rows = torch.where(mask, rows + shift, rows + size)
                source = torch.cat([flipped.reshape(size, 4), batch.reshape(size, 4)])
                out = take_rows(source, rows.reshape(-1)).reshape(batch.shape)
        else:
            mask = check_mask(mask, batch.shape[:2]).to(x.device)
            order = torch.tensor([3, 2, 1, 0, 4], device=x.device)
            out = flip_within_lengths(batch.index_select(-1, order), mask)
        return out[0] if single else out
    tokens = check_tokens(x, "x")
    if tokens.ndim not in (1, 2):
        raise ValueError(f"token x must be [B, L] or [L], got shape {tuple(tokens.shape)}")
    single = tokens.ndim == 1
    batch = tokens.unsqueeze(0) if single else tokens
    if mask is not None and single:
        mask = check_bool_mask(mask, tokens.shape).reshape(1, -1)
    if _kernel_applies(batch):  # one launch on CUDA; without a mask the kernel finds each row's pads itself
        if mask is None:
            if can_inspect_values(batch):  # the eager path's check of where the pads are (skipped when capturing)
                check_mask(batch != PAD, batch.shape[:2])
        else:
            mask = check_mask(mask, batch.shape[:2]).to(x.device)
        out = dna_triton.reverse_complement_rows(batch, mask, tokens=True)
        return out[0] if single else out
    if mask is None:
        mask = batch != PAD
    out = flip_within_lengths(complement_tokens(batch), mask)
    return out[0] if single else out

