"""Multimodal RoPE position ids (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): three ids (t, h, w) per token of a vision-text row.

The rule of the released models (the Qwen2.5-VL paper and PR, transformers 4.x ``get_rope_index``):

- text tokens count up by one and carry the same id on all three axes;
- an image or video of grid ``(T, H, W)`` (patches, before merging) takes ``T * H * W / m**2`` tokens
  (``m = spatial_merge_size``), in row-major order over the merged grid ``(T, H/m, W/m)``; token ``(t, h, w)`` gets
  ``(start + floor(t * interval), start + h, start + w)``, ``start`` being the id the next text token would get;
- the run after a vision block starts at the block's largest id + 1;
- ``interval`` is 1 (Qwen2-VL, and images) or, for Qwen2.5-VL videos, the real-time
  ``tokens_per_second * second_per_grid_ts[v]``, multiplied by ``t`` before it is floored (float64 here);
- ``deltas = max(id) + 1 - (number of real tokens)`` per row: during decoding the next token of a row whose cache
  holds ``n`` real tokens gets id ``n + delta`` on all three axes (:func:`mrope_decode_position_ids`).

A model decodes with the ids it was trained with, so the variants in the wild are named (``convention=``):

- ``"qwen"`` (default): the rule above.
- ``"transformers-4"``: transformers 4.5x (exact to 4.57): the released rule, except that Qwen2.5-VL's
  ``second_per_grid_ts`` is first cast to an integer (``torch.as_tensor(s, dtype=int64)``: 0.5 -> 0, 1.5 -> 1) and
  images get interval 0 when ``tokens_per_second`` is given; padded slots hold 1; ``deltas = max(id) + 1 - L`` (the
  padded row length), so decoding adds them to transformers' ``cache_position`` (padded slots counted).
- ``"transformers-5"``: transformers 5.x: the run after a vision block starts at ``start + max(H, W) / m`` (a video
  whose temporal ids run further overlaps the text after it); padded slots hold 0; deltas as in ``"qwen"``.

Qwen3-VL lays a video out frame by frame (each frame its own block, timestamp text between frames) while
``video_grid_thw`` keeps ``[T, H, W]``: ``video_layout="frames"`` reads it that way (every frame a ``T = 1`` block).

Everything is vectorised over rows and vision blocks (no Python loop over either; transformers loops over both).
Images and videos are matched to the rows in order (all of row 0's images, then row 1's, ...), as transformers
does; consecutive images with no text between them are split by their token counts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..core import can_inspect_values, check_integer_tensor, check_positive_int, new_buffer, true_positions
from .grid import check_cu_seqlens, require_values

__all__ = ["MROPE_CONVENTIONS", "TOKEN_TYPES", "mrope_decode_position_ids", "mrope_position_ids"]

#: the values of ``mm_token_type_ids`` (transformers' convention)
TOKEN_TYPES = {0: "text", 1: "image", 2: "video"}

#: ``convention=`` of :func:`mrope_position_ids` -> the id padded slots hold by default
MROPE_CONVENTIONS = {"qwen": 1, "transformers-4": 1, "transformers-5": 0}

#: ``video_layout=``: a video is one block of ``T * H * W / m**2`` tokens, or (Qwen3-VL) one block per frame
VIDEO_LAYOUTS = ("grid", "frames")


def _check_choice(value: Any, name: str, choices: Any) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}; got {value!r}")
    return value


def _integer_tensor(value: Any, name: str, device: torch.device) -> torch.Tensor:
    tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    check_integer_tensor(tensor, name, "an integer tensor")
    require_values(tensor, name, "M-RoPE position ids depend on its values")
    return tensor.to(device=device, dtype=torch.int64)


def _check_grids(grid_thw: Any, name: str, merge: int, device: torch.device) -> torch.Tensor:
    """``[N, 3]`` (T, H, W) patch grids -> int64 on ``device``; every side >= 1, H and W multiples of ``merge``."""
    if grid_thw is None:
        return torch.zeros(0, 3, dtype=torch.int64, device=device)
    grids = _integer_tensor(grid_thw, name, device)
    if grids.ndim != 2 or grids.shape[1] != 3:
        raise ValueError(f"{name} must be [num_inputs, 3] (T, H, W), got shape {tuple(grids.shape)}")
    small = (grids < 1).any(dim=1)
    if bool(small.any()):
        i = int(small.nonzero()[0, 0])
        raise ValueError(f"{name}[{i}] = {tuple(grids[i].tolist())}: T, H and W must be >= 1")
    uneven = (grids[:, 1:] % merge != 0).any(dim=1)
    if bool(uneven.any()):
        i = int(uneven.nonzero()[0, 0])
        raise ValueError(f"{name}[{i}] = {tuple(grids[i].tolist())}: H and W must be multiples of "
                         f"spatial_merge_size={merge} (the merged grid is (T, H/{merge}, W/{merge}))")
    if grids.shape[0] and float(grids.to(torch.float64).prod(dim=1).sum()) >= 2.0**62:
        raise ValueError(f"{name} asks for {float(grids.to(torch.float64).prod(dim=1).sum()):.3g} patches in all: "
                         "more than int64 can count (and more tokens than any mm_token_type_ids holds)")
    return grids


def _check_mask(attention_mask: Any, shape: torch.Size, device: torch.device) -> torch.Tensor:
    mask = attention_mask if isinstance(attention_mask, torch.Tensor) else torch.as_tensor(attention_mask)
    if mask.is_floating_point() or mask.is_complex():
        raise TypeError(f"attention_mask must be bool or integer 0/1, got dtype {mask.dtype}")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"attention_mask must have the shape of mm_token_type_ids {tuple(shape)}, got "
                         f"{tuple(mask.shape)}")
    mask = require_values(mask, "attention_mask", "M-RoPE position ids depend on its values").to(device)
    if mask.dtype != torch.bool:
        low, high = torch.aminmax(mask) if mask.numel() else (0, 0)
        if int(low) < 0 or int(high) > 1:
            row, col = ((mask != 0) & (mask != 1)).nonzero()[0].tolist()
            raise ValueError(f"attention_mask must hold 0 (padding) or 1 (token); row {row}, position {col} holds "
                             f"{int(mask[row, col])}")
        mask = mask == 1
    return mask


def _check_intervals(second_per_grid_ts: Any, tokens_per_second: Any, num_videos: int,
                     device: torch.device, truncate_seconds: bool = False) -> torch.Tensor | None:
    """float64 ``[num_videos]`` temporal intervals (Qwen2.5-VL), or None for an interval of 1 (Qwen2-VL).

    ``truncate_seconds``: transformers 4.5x casts each ``second_per_grid_ts`` to int64 before multiplying."""
    if tokens_per_second is None:
        if second_per_grid_ts is not None:
            raise ValueError("second_per_grid_ts needs tokens_per_second (the vision config's tokens_per_second, "
                             "e.g. 2 for Qwen2.5-VL): the interval is tokens_per_second * second_per_grid_ts")
        return None
    if isinstance(tokens_per_second, bool) or not isinstance(tokens_per_second, (int, float)):
        raise TypeError(f"tokens_per_second must be a number, got {type(tokens_per_second).__name__}")
    if not (math.isfinite(tokens_per_second) and tokens_per_second > 0):
        raise ValueError(f"tokens_per_second must be finite and > 0, got {tokens_per_second}")
    if second_per_grid_ts is None:  # transformers' default: one second per temporal grid step
        return torch.full((num_videos,), float(tokens_per_second), dtype=torch.float64, device=device)
    seconds = second_per_grid_ts if isinstance(second_per_grid_ts, torch.Tensor) else torch.as_tensor(
        second_per_grid_ts, dtype=torch.float64)
    if seconds.dtype == torch.bool or seconds.is_complex():
        raise TypeError(f"second_per_grid_ts must be real numbers, got dtype {seconds.dtype}")
    seconds = require_values(seconds, "second_per_grid_ts", "M-RoPE position ids depend on its values")
    seconds = seconds.to(device=device, dtype=torch.float64)
    if seconds.ndim != 1 or seconds.shape[0] != num_videos:
        raise ValueError(f"second_per_grid_ts must have one entry per video: video_grid_thw has {num_videos} "
                         f"videos, second_per_grid_ts has shape {tuple(seconds.shape)}")
    bad = ~torch.isfinite(seconds) | (seconds < 0)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(f"second_per_grid_ts[{i}] = {float(seconds[i])}: seconds must be finite and >= 0")
    if truncate_seconds:
        seconds = torch.trunc(seconds)
    return float(tokens_per_second) * seconds


def _check_packed_rows(cu_seqlens: Any, batch: int, length: int, device: torch.device) -> torch.Tensor:
    """Document boundaries over the flattened ``batch * length`` tokens; every row end must be one."""
    cu = check_cu_seqlens(cu_seqlens, batch * length).to(device)
    if batch > 1:  # a document may not run from one row into the next
        row_ends = torch.arange(1, batch, device=device) * length
        missing = ~torch.isin(row_ends, cu)
        if bool(missing.any()):
            row = int(missing.nonzero()[0, 0])
            raise ValueError(f"cu_seqlens: a document runs from row {row} into row {row + 1}; with several rows "
                             f"every row end (a multiple of {length}) must be a document boundary")
    return cu


def _find_blocks(run_first: torch.Tensor, run_length: torch.Tensor, grids: torch.Tensor, kind: int, name: str,
                 merge: int, where: Any) -> torch.Tensor:
    """The flat position of the first token of each block of ``grids [N, 3]``, given the runs of this modality's
    tokens (``run_first``, ``run_length``, in order); checks that the runs hold exactly the blocks' tokens and that
    every run begins a block (else the run before it was cut short)."""
    what = TOKEN_TYPES[kind]
    device = run_first.device
    counts = grids[:, 0] * (grids[:, 1] // merge) * (grids[:, 2] // merge)
    ends = counts.cumsum(0)
    starts = ends - counts
    expected = int(ends[-1]) if ends.numel() else 0
    run_start = run_length.cumsum(0) - run_length  # k of the k-th token of this kind, where each run begins
    total = int(run_length.sum()) if run_length.numel() else 0

    def block_text(i: int) -> str:
        return (f"{name}[{i}] = {tuple(grids[i].tolist())} needs {int(counts[i])} tokens with "
                f"spatial_merge_size={merge}")

    def last_before(j: int) -> int:  # the flat position of the last token of run j
        return int(run_first[j] + run_length[j] - 1)

    if ends.numel() and run_start.numel():
        block = torch.searchsorted(ends, run_start, right=True)
        inside = (block < ends.numel()) & (starts[block.clamp(max=ends.numel() - 1)] != run_start)
        if bool(inside.any()):
            j = int(inside.nonzero()[0, 0])
            i = int(block[j])
            raise ValueError(f"{where(last_before(j - 1))}: its {what} tokens end inside {what} {i} "
                             f"({block_text(i)}): fewer {what} tokens than {name} accounts for, or a {what} "
                             "split by other tokens")
    if total > expected:
        j = int(torch.searchsorted(run_start, torch.tensor(expected, device=device), right=True)) - 1
        raise ValueError(f"{where(int(run_first[j]) + expected - int(run_start[j]))} has more {what} tokens than "
                         f"{name} accounts for ({grids.shape[0]} {what}s, {expected} tokens in all)")
    if total < expected:
        i = int(torch.searchsorted(ends, torch.tensor(total, device=device), right=True))
        if total and int(starts[i]) != total:
            raise ValueError(f"{where(last_before(run_first.numel() - 1))}: its {what} tokens end inside {what} {i} "
                             f"({block_text(i)}): fewer {what} tokens than {name} accounts for")
        last = "" if not total else "; the last ones are in " + where(last_before(run_first.numel() - 1))
        raise ValueError(f"{name} has {grids.shape[0]} {what}s ({expected} tokens) but mm_token_type_ids holds "
                         f"{total} {what} tokens: {what}s {i}.. have none (fewer {what} tokens than {name} accounts "
                         f"for{last})")
    if not expected:
        return torch.zeros(0, dtype=torch.int64, device=device)
    block_run = torch.searchsorted(run_start, starts, right=True) - 1
    return run_first[block_run] + starts - run_start[block_run]


_PACKED_BITS = 21
#: ids below this (on every axis, padding's included) are summed packed, three to an int64 (:func:`_packed_cumsum`)
_PACKED_LIMIT = 1 << _PACKED_BITS


def _packed_cumsum(text_token: torch.Tensor, real: torch.Tensor | None, segment_first: torch.Tensor,
                   jumps: torch.Tensor) -> torch.Tensor:
    """The three axes' cumulative sums of :func:`mrope_position_ids` (steps: 1 at text tokens on t and h, 1 at real
    tokens on w; ``jumps [S, 3]`` at ``segment_first``) as one 1-D cumsum of ``t + h * 2**21 + w * 2**42``, then
    unpacked into ``[B * L, 3]``: a cumsum down the columns of ``[B * L, 3]`` runs ~10x slower than along one
    contiguous axis. Exact when every id (every prefix sum) lies in ``[0, 2**21)`` on every axis, which the caller
    checks: the sums are linear, so each prefix sum is the packed triple of the three axes' ids there."""
    if text_token.device.type == "cpu" and not torch.compiler.is_compiling():
        return _packed_cumsum_numpy(text_token, real, segment_first, jumps)
    return _packed_cumsum_torch(text_token, real, segment_first, jumps)


def _packed_cumsum_torch(text_token: torch.Tensor, real: torch.Tensor | None, segment_first: torch.Tensor,
                         jumps: torch.Tensor) -> torch.Tensor:
    """:func:`_packed_cumsum` by torch ops (any device, traceable)."""
    bits, count = _PACKED_BITS, text_token.numel()
    steps = new_buffer((count,), torch.int64, text_token.device).copy_(text_token).mul_(1 + (1 << bits))
    if real is None:
        steps += 1 << (2 * bits)
    else:
        steps.add_(real, alpha=1 << (2 * bits))
    steps[segment_first] = jumps[:, 0] + jumps[:, 1] * (1 << bits) + jumps[:, 2] * (1 << (2 * bits))
    torch.cumsum(steps, 0, out=steps)
    ids = new_buffer((count, 3), torch.int64, steps.device)
    torch.bitwise_and(steps, _PACKED_LIMIT - 1, out=ids[:, 0])
    torch.bitwise_right_shift(steps, 2 * bits, out=ids[:, 2])
    steps.bitwise_right_shift_(bits).bitwise_and_(_PACKED_LIMIT - 1)
    ids[:, 1] = steps
    return ids


def _packed_cumsum_numpy(text_token: torch.Tensor, real: torch.Tensor | None, segment_first: torch.Tensor,
                         jumps: torch.Tensor) -> torch.Tensor:
    """:func:`_packed_cumsum` on the CPU by NumPy: the same integer arithmetic (so the same ids), ~2x faster on
    ~1M tokens (torch's mixed bool / int64 element-wise ops and bit shifts are several times NumPy's here)."""
    bits, limit = _PACKED_BITS, _PACKED_LIMIT - 1
    # (bools widened through uint8: NumPy's bool -> int64 casting loops are ~4x slower than uint8 -> int64)
    steps = text_token.numpy().view(np.uint8).astype(np.int64)
    steps *= 1 + (1 << bits)
    if real is None:
        steps += 1 << (2 * bits)
    else:
        counted = real.numpy().view(np.uint8).astype(np.int64)
        counted *= 1 << (2 * bits)
        steps += counted
    j = jumps.numpy()
    steps[segment_first.numpy()] = j[:, 0] + j[:, 1] * (1 << bits) + j[:, 2] * (1 << (2 * bits))
    np.cumsum(steps, out=steps)
    ids = np.empty((steps.shape[0], 3), dtype=np.int64)
    np.bitwise_and(steps, limit, out=ids[:, 0])
    np.right_shift(steps, 2 * bits, out=ids[:, 2])
    np.right_shift(steps, bits, out=steps)
    np.bitwise_and(steps, limit, out=ids[:, 1])
    return torch.from_numpy(ids)


def mrope_position_ids(
    mm_token_type_ids: torch.Tensor,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    *,
    spatial_merge_size: int = 2,
    attention_mask: Any = None,
    second_per_grid_ts: Any = None,
    tokens_per_second: float | None = None,
    cu_seqlens: Any = None,
    pad_position: int | None = None,
    convention: str = "qwen",
    video_layout: str = "grid",
) -> tuple[torch.Tensor, torch.Tensor]:
    """M-RoPE position ids of a batch of image/video/text rows (Qwen2-VL, Qwen2.5-VL, Qwen3-VL; rules in the module
    docstring).

    Args:
        mm_token_type_ids: ``[B, L]`` integer, 0 text, 1 image, 2 video (the processor's ``mm_token_type_ids``).
        image_grid_thw: ``[num_images, 3]`` integer (T, H, W) patch grids, in the order the images appear (row 0
            first); ``None`` for none.
        video_grid_thw: ``[num_videos, 3]``, likewise.
        spatial_merge_size: the vision tower's ``spatial_merge_size`` ``m`` (2 in Qwen2/2.5/3-VL); H and W must be
            multiples of it.
        attention_mask: ``[B, L]`` bool or 0/1: padding (0) gets no id and is skipped, left, right or between
            text tokens; padding inside an image's or video's tokens splits it and is refused.
        second_per_grid_ts: ``[num_videos]`` seconds per temporal grid step (Qwen2.5-VL's processor output);
            needs ``tokens_per_second``. Default 1 second when ``tokens_per_second`` is given.
        tokens_per_second: Qwen2.5-VL's ``vision_config.tokens_per_second``; None (Qwen2-VL): temporal ids step by
            1 per grid step.
        cu_seqlens: ``[D + 1]`` integer boundaries of packed documents in the flattened ``B * L`` tokens (flash-attn
            varlen convention): positions restart at 0 in each document. Every row end must be a boundary.
        pad_position: the id padded slots hold on all three axes; default: the convention's (1 for ``"qwen"`` and
            ``"transformers-4"``, 0 for ``"transformers-5"``). They are never read by attention.
        convention: ``"qwen"`` (the released models' rule), ``"transformers-4"`` (transformers 4.5x, exact to 4.57
            including its integer ``second_per_grid_ts`` and padded-length deltas) or ``"transformers-5"``
            (transformers 5.x: the run after a vision block starts at ``start + max(H, W) / m``). Use the one the
            model was trained with, and the same one in :func:`mrope_decode_position_ids`.
        video_layout: ``"grid"`` (a video is one block of ``T * H * W / m**2`` tokens: Qwen2-VL, Qwen2.5-VL) or
            ``"frames"`` (Qwen3-VL's processor: each frame is its own block of ``H * W / m**2`` tokens, with
            timestamp text between frames allowed; ``video_grid_thw`` stays ``[T, H, W]``). ``"frames"`` takes no
            ``second_per_grid_ts`` / ``tokens_per_second`` (every block has T = 1; time is in the timestamp text).

    Returns:
        ``(position_ids [B, L, 3] int64, deltas [B, 1] int64)`` (omnipos' axes-last layout: transformers'
        ``[3, B, L]`` is ``position_ids.permute(2, 0, 1)``). With ``cu_seqlens``, ``deltas`` is ``[D, 1]``, one per
        document. ``deltas = max(id) + 1 - real tokens`` (``"transformers-4"``: ``- L``, the padded row length, or
        the document length); a row with no real token has ``max(id) + 1 = 0``.

    Raises:
        ValueError: ``mm_token_type_ids`` not ``[B, L]`` or holding values other than 0/1/2 (row and position
        named); a grid side < 1 or H/W not a multiple of ``spatial_merge_size`` (grid index named); more or fewer
        image/video tokens than the grids account for, or a block split by other tokens (row named);
        ``second_per_grid_ts`` of the wrong length or not finite; bad ``attention_mask`` / ``cu_seqlens``.
        TypeError: non-integer ids or grids.
    """
    types = mm_token_type_ids if isinstance(mm_token_type_ids, torch.Tensor) else torch.as_tensor(mm_token_type_ids)
    check_integer_tensor(types, "mm_token_type_ids", "an integer tensor of 0 (text), 1 (image), 2 (video)")
    require_values(types, "mm_token_type_ids", "the position ids depend on its values")
    if types.ndim != 2:
        raise ValueError(f"mm_token_type_ids must be [B, L], got shape {tuple(types.shape)}")
    device = types.device
    low, high = torch.aminmax(types) if types.numel() else (0, 0)
    if int(low) < 0 or int(high) > 2:
        row, col = ((types < 0) | (types > 2)).nonzero()[0].tolist()
        raise ValueError(f"mm_token_type_ids must hold 0 (text), 1 (image) or 2 (video); row {row}, position {col} "
                         f"holds {int(types[row, col])}")
    merge = check_positive_int(spatial_merge_size, "spatial_merge_size")
    _check_choice(convention, "convention", MROPE_CONVENTIONS)
    _check_choice(video_layout, "video_layout", VIDEO_LAYOUTS)
    if pad_position is None:
        pad_position = MROPE_CONVENTIONS[convention]
    if isinstance(pad_position, bool) or not isinstance(pad_position, int):
        raise TypeError(f"pad_position must be an int, got {type(pad_position).__name__}")
    images = _check_grids(image_grid_thw, "image_grid_thw", merge, device)
    videos = _check_grids(video_grid_thw, "video_grid_thw", merge, device)
    if video_layout == "frames":
        if second_per_grid_ts is not None or tokens_per_second is not None:
            raise ValueError("video_layout='frames' makes every frame its own block (T = 1), so second_per_grid_ts "
                             "and tokens_per_second would have no effect: leave them out (Qwen3-VL carries time in "
                             "the timestamp text between frames)")
        videos = torch.repeat_interleave(videos, videos[:, 0], dim=0)
        videos[:, 0] = 1
    old_rule = convention == "transformers-4"
    intervals = _check_intervals(second_per_grid_ts, tokens_per_second, videos.shape[0], device,
                                 truncate_seconds=old_rule)
    # transformers 4.5x's Qwen2.5-VL gives images second_per_grid_t = 0: their temporal ids stay at the start
    image_intervals = (torch.zeros(images.shape[0], dtype=torch.float64, device=device)
                       if old_rule and tokens_per_second is not None else None)
    batch, length = types.shape
    valid = None if attention_mask is None else _check_mask(attention_mask, types.shape, device)

    # everything runs over the flat [B * L] positions, in three levels so that each token costs a few passes:
    # runs of one kind (text, image, video, padding), "items" (a text run, a padding run, one image / video block)
    # and segments (a text run, or one row of a block's merged grid: W/m tokens whose t and h ids are constant and
    # whose w id counts up). Each token's id on an axis is its segment's value plus (where it counts up) its index
    count = batch * length
    flat = types.reshape(-1).to(torch.int64)
    real = None if valid is None else valid.reshape(-1)
    boundary = torch.ones(count, dtype=torch.bool, device=device)  # where a run begins
    if count:
        torch.ne(flat[1:], flat[:-1], out=boundary[1:])
        if real is not None:
            boundary[1:] |= real[1:] != real[:-1]
        boundary[::length] = True
    cu = None
    if cu_seqlens is not None:
        cu = _check_packed_rows(cu_seqlens, batch, length, device)
        boundary[cu[:-1][cu[:-1] < count]] = True
        documents = cu.numel() - 1
    else:
        documents = batch

    def where(pos: int) -> str:
        text = f"row {pos // length}"
        return text if cu is None else text + f" (document {int(torch.searchsorted(cu[1:], pos, right=True))})"

    run_first = true_positions(boundary)
    run_length = torch.diff(run_first, append=run_first.new_full((1,), count))
    run_kind = flat[run_first]
    if real is not None:
        run_kind = torch.where(real[run_first], run_kind, 3)  # 3: padding

    # items in flat order: text and padding runs, and the image / video blocks (a run may hold several blocks)
    other = (run_kind == 0) | (run_kind == 3)
    item_first, item_kind = [run_first[other]], [run_kind[other]]
    rows_per_t, row_width, steps = [torch.ones_like(item_first[0])], [run_length[other]], [item_first[0].new_ones(
        item_first[0].shape)]
    t_step = [torch.zeros(item_first[0].shape, dtype=torch.float64, device=device)]
    for k, grids, name, interval in ((1, images, "image_grid_thw", image_intervals),
                                     (2, videos, "video_grid_thw", intervals)):
        mine = run_kind == k
        item_first.append(_find_blocks(run_first[mine], run_length[mine], grids, k, name, merge, where))
        item_kind.append(torch.full_like(item_first[-1], k))
        rows_per_t.append(grids[:, 1] // merge)
        row_width.append(grids[:, 2] // merge)
        steps.append(grids[:, 0])
        t_step.append(torch.ones(grids.shape[0], dtype=torch.float64, device=device) if interval is None
                      else interval)
    item_first, order = torch.sort(torch.cat(item_first))
    item_kind, merged_h, merged_w, frames, t_step = (torch.cat(v)[order] for v in (item_kind, rows_per_t, row_width,
                                                                                   steps, t_step))
    is_text, is_pad, is_vision = item_kind == 0, item_kind == 3, (item_kind == 1) | (item_kind == 2)
    exact_t = intervals is None and image_intervals is None  # temporal ids without a float interval: t itself

    # each item's advance and largest offset, then its start: an exclusive cumsum within its row (document)
    t_last = frames - 1 if exact_t else torch.floor((frames - 1) * t_step).to(torch.int64)
    spatial = torch.maximum(merged_h, merged_w)
    if convention == "transformers-5":
        block_advance = spatial
    else:
        block_advance = torch.maximum(t_last, spatial - 1) + 1
    advance = torch.where(is_vision, block_advance, torch.where(is_text, merged_w, 0))
    largest = torch.where(is_vision, torch.maximum(t_last, spatial - 1), merged_w - 1)
    item_doc = item_first // max(length, 1) if cu is None else torch.searchsorted(cu[1:], item_first, right=True)
    before = advance.cumsum(0) - advance
    start = before - before[torch.searchsorted(item_doc, item_doc)]  # minus the cumsum at the document's first item

    # segments: one per text / padding run, one per row of a block's merged grid
    segments_per_item = frames * merged_h
    segment_count = int(segments_per_item.sum()) if segments_per_item.numel() else 0
    segment_item = torch.repeat_interleave(torch.arange(item_first.numel(), device=device), segments_per_item,
                                           output_size=segment_count)
    row = torch.arange(segment_count, device=device) - (segments_per_item.cumsum(0) - segments_per_item)[segment_item]
    rows = merged_h[segment_item]
    t, h = row // rows, row % rows
    width = merged_w[segment_item]
    segment_start = start[segment_item]
    segment_first = item_first[segment_item] + row * width
    text, pad = is_text[segment_item], is_pad[segment_item]
    t_ids = t if exact_t else torch.floor(t * t_step[segment_item]).to(torch.int64)
    pad_value = torch.full((), pad_position, dtype=torch.int64, device=device)
    first_values = [torch.where(text, segment_start, segment_start + t_ids),
                    torch.where(text, segment_start, segment_start + h), segment_start]
    counts_up = [text, text, ~pad]  # t and h count up along text runs only; w along text and the rows of a block
    if real is not None:
        first_values = [torch.where(pad, pad_value, v) for v in first_values]

    # per token: a cumulative sum of steps (1 where the id counts up, else 0) with each segment's jump from the
    # previous segment's last id at its first token: two passes per axis, no per-token gather
    text_token = flat == 0
    if real is not None:
        text_token &= real
    jumps = torch.stack(first_values, dim=-1)
    jumps[1:] -= jumps[:-1] + torch.stack(counts_up, dim=-1)[:-1] * (width[:-1, None] - 1)
    top_id = int(torch.where(is_pad, 0, start + largest).max()) if item_first.numel() else 0
    if count and 0 <= pad_position < _PACKED_LIMIT and top_id < _PACKED_LIMIT:
        ids = _packed_cumsum(text_token, real, segment_first, jumps)
    else:
        counted = torch.ones(count, dtype=torch.bool, device=device) if real is None else real
        steps = torch.stack([text_token, text_token, counted], dim=-1).to(torch.int64)
        steps[segment_first] = jumps
        ids = torch.cumsum(steps, 0, out=steps)

    # deltas per row (document): the largest id + 1 (or the advance, the same under the released rule) - its tokens
    tokens = torch.zeros(documents, dtype=torch.int64, device=device).index_add_(
        0, item_doc, torch.where(is_pad, 0, torch.where(is_text, merged_w, frames * merged_h * merged_w)))
    if convention == "transformers-5":
        top = torch.full((documents,), -1, dtype=torch.int64, device=device).scatter_reduce_(
            0, item_doc, torch.where(is_pad, -1, start + largest), "amax")
        advanced = top + 1
    else:
        advanced = torch.zeros(documents, dtype=torch.int64, device=device).index_add_(0, item_doc, advance)
    if convention == "transformers-4":  # transformers 4.5x subtracts the padded row length (its cache_position
        tokens = cu.diff() if cu is not None else torch.full_like(tokens, length)  # counts padding)
    return ids.view(batch, length, 3), (advanced - tokens).unsqueeze(-1)


def mrope_decode_position_ids(deltas: torch.Tensor, cache_position: Any, *, convention: str = "qwen") -> torch.Tensor:
    """M-RoPE ids of tokens generated after the prompt: text ids ``cache_position + delta`` on all three axes.

    Args:
        deltas: ``[B, 1]`` int64 from :func:`mrope_position_ids` with the same ``convention``.
        cache_position: where the new tokens sit: an int (the same for every row), ``[n]`` (shared, transformers'
            ``cache_position``) or ``[B, n]`` (per row). For ``"qwen"`` and ``"transformers-5"`` it counts only real
            tokens (e.g. ``attention_mask.sum(-1, keepdim=True)`` for the first step after a padded prompt, as 5.x
            does); for ``"transformers-4"`` it counts padded slots too (the slot index, as 4.5x's ``cache_position``),
            matching that convention's deltas.
        convention: the ``convention`` the deltas were made with (``"qwen"``, ``"transformers-4"``,
            ``"transformers-5"``).

    Returns:
        ``[B, n, 3]`` int64 (``n = 1`` for an int).
    """
    if not isinstance(deltas, torch.Tensor):
        raise TypeError(f"deltas must be the [B, 1] tensor from mrope_position_ids, got {type(deltas).__name__}")
    check_integer_tensor(deltas, "deltas")
    _check_choice(convention, "convention", MROPE_CONVENTIONS)
    if deltas.ndim != 2 or deltas.shape[1] != 1:
        raise ValueError(f"deltas must be [B, 1], got shape {tuple(deltas.shape)}")
    if isinstance(cache_position, bool):
        raise TypeError("cache_position must be an int or an integer tensor, got a bool")
    position = _integer_tensor(cache_position, "cache_position", deltas.device)
    if position.ndim == 0:
        position = position.reshape(1, 1)
    elif position.ndim == 1:
        position = position.unsqueeze(0)
    elif position.ndim != 2 or position.shape[0] not in (1, deltas.shape[0]):
        raise ValueError(f"cache_position must be an int, [n] or [B={deltas.shape[0]}, n], got shape "
                         f"{tuple(position.shape)}")
    if can_inspect_values(position) and bool((position < 0).any()):
        raise ValueError("cache_position must be >= 0")
    ids = position + deltas.to(torch.int64)
    return ids.unsqueeze(-1).expand(*ids.shape, 3).contiguous()
