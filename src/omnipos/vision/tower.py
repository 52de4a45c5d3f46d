"""The vision tower's positions (Qwen2.5-VL, Qwen3-VL, GLM-4V, ...): what the ViT inside a vision-language model needs
for a packed batch of images and videos given only their patch grids ``grid_thw [N, 3]`` = (T, H, W).

- :func:`vision_position_ids`: the (h, w) (or (t, h, w)) of every patch for 2-D RoPE, in the tower's token order:
  frame by frame, and within a frame block-major over the ``m x m`` merge blocks (``m = spatial_merge_size``: the
  ``m**2`` patches that the merger later fuses into one token are neighbours), i.e. patch order
  ``(t, H/m, W/m, m, m)``.
- :func:`vision_window_index`: Qwen2.5-VL's window attention: the merged tokens reordered window by window
  (windows of ``window_size // m // patch_size`` merged tokens per side, row-major within a window, cut at the grid's
  edge) and the cumulative window lengths in patches.
- :func:`vision_interpolation_indices_and_weights`: Qwen3-VL's learned ``side x side`` position table resampled to
  each grid as ``F.interpolate`` would (bilinear 2 x 2 taps, bicubic 4 x 4 with a = -0.75), as gather indices and
  weights per patch, in merge-block order when ``m > 1``.

Each equals the function of the same purpose in transformers 5.2x ``vision_utils`` (``get_vision_position_ids``,
``get_vision_window_index``, ``get_vision_interpolation_indices_and_weights``), which loop over images in Python (the
first two) or compute every per-axis quantity once per patch (the third). Here the work is done once per row of
blocks, per row of windows or per row / column of a grid, and the tokens get their values by one broadcast add or
gather: no Python loop over images.
"""

from __future__ import annotations

from typing import Any

import torch

from ..core import allocation_guard, check_integer_tensor, check_positive_int
from .grid import require_values

__all__ = ["vision_interpolation_indices_and_weights", "vision_position_ids", "vision_window_index"]

_MODES = {"bilinear": 2, "bicubic": 4}  # taps per axis


def _check_grid_thw(grid_thw: Any, merge: int) -> torch.Tensor:
    """``[N, 3]`` integer (T, H, W) -> int64; every side >= 1, H and W multiples of ``merge``, the total addressable."""
    grids = grid_thw if isinstance(grid_thw, torch.Tensor) else torch.as_tensor(grid_thw)
    check_integer_tensor(grids, "grid_thw", "an integer tensor [N, 3] of (T, H, W)")
    require_values(grids, "grid_thw", "the number of patches depends on its values")
    if grids.ndim != 2 or grids.shape[1] != 3:
        raise ValueError(f"grid_thw must be [N, 3] (T, H, W), got shape {tuple(grids.shape)}")
    grids = grids.to(torch.int64)
    small = (grids < 1).any(dim=1)
    if bool(small.any()):
        i = int(small.nonzero()[0, 0])
        raise ValueError(f"grid_thw[{i}] = {tuple(grids[i].tolist())}: T, H and W must be >= 1")
    uneven = (grids[:, 1:] % merge != 0).any(dim=1)
    if bool(uneven.any()):
        i = int(uneven.nonzero()[0, 0])
        raise ValueError(f"grid_thw[{i}] = {tuple(grids[i].tolist())}: H and W must be multiples of "
                         f"spatial_merge_size={merge}")
    patches = grids.to(torch.float64).prod(dim=1)
    if grids.shape[0] and float(patches.sum()) >= 2.0**62:
        raise ValueError(f"grid_thw asks for {float(patches.sum()):.3g} patches in all: more than int64 can count")
    return grids


def _row_runs(lengths: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For runs of ``lengths [R]`` laid end to end (``total`` = their sum): each element's run and its index in it."""
    device = lengths.device
    run = torch.repeat_interleave(torch.arange(lengths.numel(), device=device), lengths, output_size=total)
    first = lengths.cumsum(0) - lengths
    return run, torch.arange(total, device=device) - first[run]


def _frame_rows(grids: torch.Tensor, rows_per_frame: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every row (of blocks, windows, ...) of every frame of every grid: ``(grid, t, row)`` of each, ``[R]`` each."""
    per_grid = grids[:, 0] * rows_per_frame
    grid, k = _row_runs(per_grid, int(per_grid.sum()))
    per = rows_per_frame[grid]
    return grid, k // per, k % per


def vision_position_ids(grid_thw: Any, spatial_merge_size: int, *, include_temporal: bool = False) -> torch.Tensor:
    """The (h, w) of every patch of a packed batch of images / videos, in the vision tower's block-major order.

    Args:
        grid_thw: ``[N, 3]`` integer (T, H, W) patch grids (images T = 1); H and W multiples of
            ``spatial_merge_size``.
        spatial_merge_size: ``m``: patches come in ``m x m`` merge blocks, block-major (2 in Qwen2.5-VL / Qwen3-VL).
        include_temporal: prepend each patch's frame index t (for towers that rotate by (t, h, w)).

    Returns:
        ``[sum(T * H * W), 2]`` int64 (h, w), or ``[..., 3]`` (t, h, w) with ``include_temporal``, on the device of
        ``grid_thw``: grid by grid, frame by frame, patch ``(bh, bw, ih, iw)`` (block row, block column, row and
        column in the block) at ``h = bh * m + ih``, ``w = bw * m + iw``. Equal to transformers'
        ``vision_utils.get_vision_position_ids``.
    """
    merge = check_positive_int(spatial_merge_size, "spatial_merge_size")
    if not isinstance(include_temporal, bool):
        raise TypeError(f"include_temporal must be a bool, got {type(include_temporal).__name__}")
    grids = _check_grid_thw(grid_thw, merge)
    total = int(grids.prod(dim=1).sum())
    with allocation_guard(f"grid_thw ({total} patches, position ids [{total}, {3 if include_temporal else 2}])"):
        return _patch_positions(grids, merge, total, include_temporal)


def _merge_blocks(grids: torch.Tensor, merge: int, total: int, *, row_offset: torch.Tensor | None = None,
                  col_offset: torch.Tensor | None = None,
                  with_frame: bool = False) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Every ``m x m`` merge block of every frame, in the tower's order: ``(frame, top row, left column)`` ``[K]``
    (``frame`` None unless ``with_frame``); ``row_offset`` / ``col_offset`` ``[N]`` are added per grid."""
    blocks_w = grids[:, 2] // merge
    grid, t, block_row = _frame_rows(grids, grids[:, 1] // merge)  # one entry per row of blocks
    lengths = blocks_w[grid]
    count = total // merge**2
    top = block_row * merge if row_offset is None else block_row * merge + row_offset[grid]
    shift = (lengths.cumsum(0) - lengths) * merge  # a row's first block's number, times m
    if col_offset is not None:
        shift -= col_offset[grid]
    # per block: its row's values by repeat_interleave; the left column from the block's number
    top = torch.repeat_interleave(top, lengths, output_size=count)
    left = torch.arange(0, count * merge, merge, device=grids.device)
    left -= torch.repeat_interleave(shift, lengths, output_size=count)
    frame = torch.repeat_interleave(t, lengths, output_size=count) if with_frame else None
    return frame, top, left


def _patch_positions(grids: torch.Tensor, merge: int, total: int, include_temporal: bool) -> torch.Tensor:
    """:func:`vision_position_ids` of validated grids holding ``total`` patches."""
    columns = 3 if include_temporal else 2
    out = torch.empty(total // merge**2, merge * merge, columns, dtype=torch.int64, device=grids.device)  # first
    t, top, left = _merge_blocks(grids, merge, total, with_frame=include_temporal)
    # the m * m patches of a block: one strided write per patch slot (not a broadcast over a 2-wide inner axis,
    # which costs several times more)
    for slot in range(merge * merge):
        if include_temporal:
            out[:, slot, 0] = t
        torch.add(top, slot // merge, out=out[:, slot, columns - 2])
        torch.add(left, slot % merge, out=out[:, slot, columns - 1])
    return out.view(total, columns)


def vision_window_index(grid_thw: Any, spatial_merge_size: int, window_size: int,
                        patch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen2.5-VL's window attention order over the merged tokens of a packed batch of images / videos.

    Each frame's merged grid ``(H/m, W/m)`` is cut into windows of ``v = window_size // m // patch_size`` merged
    tokens per side from the top-left corner (windows at the right and bottom edges are smaller); windows are
    listed frame by frame, row-major, and the tokens inside a window row-major.

    Args:
        grid_thw: ``[N, 3]`` integer (T, H, W) patch grids; H and W multiples of ``spatial_merge_size``.
        spatial_merge_size: ``m`` (2 in Qwen2.5-VL).
        window_size: the window's side in pixels (112 in Qwen2.5-VL).
        patch_size: a patch's side in pixels (14 in Qwen2.5-VL); ``window_size // m // patch_size`` must be >= 1.

    Returns:
        ``(window_index [sum(T * H * W) / m**2] int64, cu_window_seqlens [num_windows + 1] int32)``: the merged
        tokens (numbered as the merger emits them, grid after grid) in window order, and the cumulative window
        lengths in patches (``m**2`` per merged token), starting at 0. Equal to transformers'
        ``vision_utils.get_vision_window_index`` (whose empty padding windows ``unique_consecutive`` removes).
    """
    merge = check_positive_int(spatial_merge_size, "spatial_merge_size")
    window_size = check_positive_int(window_size, "window_size")
    patch_size = check_positive_int(patch_size, "patch_size")
    side = window_size // merge // patch_size
    if side < 1:
        raise ValueError(f"window_size={window_size} // spatial_merge_size={merge} // patch_size={patch_size} is 0: "
                         "a window must hold at least one merged token")
    grids = _check_grid_thw(grid_thw, merge)
    device = grids.device
    tokens = int(grids.prod(dim=1).sum()) // merge**2
    with allocation_guard(f"grid_thw ({tokens} merged tokens, the window index)"):
        window_index = torch.arange(tokens, device=device)  # the result's memory first, before any intermediate
        height, width = grids[:, 1] // merge, grids[:, 2] // merge
        windows_h, windows_w = (height + side - 1) // side, (width + side - 1) // side
        # every window (frame by frame, row-major), then every row segment of a window: a segment is consecutive
        # merged tokens in the merger's numbering, so the output is each segment's first token + an arange
        grid, t, window_row = _frame_rows(grids, windows_h)
        window_of_row, window_col = _row_runs(windows_w[grid], int((grids[:, 0] * windows_h * windows_w).sum()))
        window_grid, window_top = grid[window_of_row], window_row[window_of_row] * side
        grid_width = width[window_grid]
        rows_in = torch.clamp(height[window_grid] - window_top, max=side)
        cols_in = torch.clamp(grid_width - window_col * side, max=side)
        tokens_per_grid = grids[:, 0] * height * width
        first_token = (tokens_per_grid.cumsum(0) - tokens_per_grid)[window_grid] + (
            t[window_of_row] * height[window_grid] + window_top) * grid_width + window_col * side
        segment_window, segment_row = _row_runs(rows_in, int(rows_in.sum()))
        segment_first = first_token[segment_window] + segment_row * grid_width[segment_window]
        segment_length = cols_in[segment_window]
        segment_start = segment_length.cumsum(0) - segment_length
        window_index += torch.repeat_interleave(segment_first - segment_start, segment_length, output_size=tokens)
        cu = torch.cat([cols_in.new_zeros(1), (rows_in * cols_in).cumsum(0) * merge**2]).to(torch.int32)
    return window_index, cu


def _axis_taps(index: torch.Tensor, size: torch.Tensor, side: int, taps: int,
               align_corners: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Source taps ``[n, taps]`` into a ``side``-long axis and their weights for target ``index [n]`` on axes of
    length ``size [n]``: ``F.interpolate``'s source coordinate and kernel, in float32 as it (and transformers)
    computes them, so the taps are the same ones."""
    index = index.to(torch.float32)
    if align_corners:
        source = index * (side - 1) / torch.clamp(size - 1, min=1)
    else:
        source = (index + 0.5) * side / size - 0.5
    floor = torch.floor(source)
    offsets = torch.arange(0, 2, device=index.device) if taps == 2 else torch.arange(-1, 3, device=index.device)
    where = (floor.long()[:, None] + offsets).clamp(0, side - 1)
    distance = (source[:, None] - floor[:, None] - offsets).abs()
    if taps == 2:
        weights = (1 - distance).clamp(min=0)
    else:  # Keys' cubic convolution, a = -0.75 (PyTorch's bicubic)
        a = -0.75
        near = ((a + 2) * distance - (a + 3)) * distance * distance + 1
        far = ((a * distance - 5 * a) * distance + 8 * a) * distance - 4 * a
        weights = torch.where(distance <= 1, near, far)
    return where, weights


def vision_interpolation_indices_and_weights(
    grid_thw: Any,
    num_grid_per_side: int,
    *,
    mode: str = "bilinear",
    align_corners: bool = False,
    spatial_merge_size: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather indices and weights that resample a learned ``side x side`` position table to every patch of a packed
    batch of images / videos, as ``F.interpolate`` would (Qwen3-VL's ``fast_pos_embed_interpolate``).

    ``(table.flatten(0, 1)[indices] * weights[..., None]).sum(1)`` is each patch's embedding, equal (within float32
    rounding) to ``F.interpolate(table, size=(H, W), mode=mode, align_corners=align_corners)`` at its (h, w).

    Args:
        grid_thw: ``[N, 3]`` integer (T, H, W) patch grids; H and W multiples of ``spatial_merge_size``.
        num_grid_per_side: the table's side (``int(num_position_embeddings ** 0.5)``, 48 in Qwen3-VL).
        mode: ``"bilinear"`` (2 x 2 = 4 taps) or ``"bicubic"`` (4 x 4 = 16 taps, Keys' kernel with a = -0.75;
            taps beyond the edge clamp to it, as ``F.interpolate`` does).
        align_corners: as in ``F.interpolate``.
        spatial_merge_size: ``m``: patches in block-major order over ``m x m`` merge blocks (as
            :func:`vision_position_ids`); 1 keeps row-major order.

    Returns:
        ``(indices [sum(T * H * W), taps] int64, weights [sum(T * H * W), taps] float32)`` into the flattened table,
        frames repeating their grid's values. Equal to transformers'
        ``vision_utils.get_vision_interpolation_indices_and_weights`` (same float32 arithmetic, so the same taps).
    """
    side = check_positive_int(num_grid_per_side, "num_grid_per_side")
    if not isinstance(mode, str) or mode not in _MODES:
        raise ValueError(f"mode must be 'bilinear' or 'bicubic', got {mode!r}")
    if not isinstance(align_corners, bool):
        raise TypeError(f"align_corners must be a bool, got {type(align_corners).__name__}")
    merge = check_positive_int(spatial_merge_size, "spatial_merge_size")
    grids = _check_grid_thw(grid_thw, merge)
    taps = _MODES[mode]
    total = int(grids.prod(dim=1).sum())
    with allocation_guard(f"grid_thw ({total} patches, {taps * taps} taps each)"):
        # the taps of each row and each column of every grid, once, laid out as the patch's [taps * taps] row of the
        # result (a row's taps repeated per column tap, a column's tiled per row tap); each patch then gathers its
        # row's and its column's and adds (indices) or multiplies (weights) them: two row gathers and one
        # contiguous op per output, no per-patch arithmetic on coordinates
        indices = torch.empty(total, taps * taps, dtype=torch.int64, device=grids.device)  # the results first
        weights = torch.empty(total, taps * taps, dtype=torch.float32, device=grids.device)
        heights, widths = grids[:, 1], grids[:, 2]
        row_grid, row = _row_runs(heights, int(heights.sum()))
        col_grid, col = _row_runs(widths, int(widths.sum()))
        row_taps, row_weights = _axis_taps(row, heights[row_grid], side, taps, align_corners)
        col_taps, col_weights = _axis_taps(col, widths[col_grid], side, taps, align_corners)

        def as_rows(values: torch.Tensor) -> torch.Tensor:  # [n, taps] -> [n, taps * taps], value a at (a, b)
            return values[:, :, None].expand(-1, taps, taps).reshape(-1, taps * taps)

        def as_columns(values: torch.Tensor) -> torch.Tensor:  # [n, taps] -> [n, taps * taps], value b at (a, b)
            return values[:, None, :].expand(-1, taps, taps).reshape(-1, taps * taps)

        # each block's first row / column among all grids' rows / columns
        _, top, left = _merge_blocks(grids, merge, total, row_offset=heights.cumsum(0) - heights,
                                     col_offset=widths.cumsum(0) - widths)
        patch_row = torch.empty(top.numel(), merge * merge, dtype=torch.int64, device=grids.device)
        patch_col = torch.empty_like(patch_row)
        for slot in range(merge * merge):  # the patches of a merge block, one strided write each
            torch.add(top, slot // merge, out=patch_row[:, slot])
            torch.add(left, slot % merge, out=patch_col[:, slot])
        patch_row, patch_col = patch_row.view(total), patch_col.view(total)
        if taps == 2:
            torch.index_select(as_rows(row_taps * side), 0, patch_row, out=indices)
            indices += as_columns(col_taps).index_select(0, patch_col)
            torch.index_select(as_rows(row_weights), 0, patch_row, out=weights)
            weights *= as_columns(col_weights).index_select(0, patch_col)
        else:
            shape = (total, taps, taps)
            torch.add((row_taps * side).index_select(0, patch_row).unsqueeze(2),
                      col_taps.index_select(0, patch_col).unsqueeze(1), out=indices.view(shape))
            torch.mul(row_weights.index_select(0, patch_row).unsqueeze(2),
                      col_weights.index_select(0, patch_col).unsqueeze(1), out=weights.view(shape))
    return indices, weights
