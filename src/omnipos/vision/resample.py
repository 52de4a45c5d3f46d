"""Resampling a learned ``[prefix + H*W, D]`` position table to another patch grid (timm, HF ViT, DINOv2).

Same numbers as timm ``resample_abs_pos_embed`` given the same grids (prefix rows split off and put back,
row-major grid reshaped to ``(D, H, W)``, ``F.interpolate`` in float32, cast back), without its traps:
a non-square source is never guessed from ``sqrt(N)``, a token count that fits no grid is an error, and a
transposed grid with the same token count (``(2, 8) -> (4, 4)``) is resampled rather than returned unchanged.
HF ViT's ``interpolate_pos_encoding`` is ``antialias=False``; timm (and DINOv2 ``_reg`` hub models) use
``antialias=True``, which changes bicubic even when upsampling.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..core import check_choice, check_positive_int, new_buffer, take_rows
from .grid import check_grid, require_values

__all__ = ["MODES", "PADDINGS", "resample_pos_embed", "resample_pos_embed_per_image", "source_grid"]

MODES = ("bicubic", "bilinear", "nearest", "nearest-exact", "area")
_ANTIALIAS_MODES = ("bicubic", "bilinear")
#: what the padded rows of :func:`resample_pos_embed_per_image` hold
PADDINGS = ("zeros", "first")


def _check_mode(mode: str, antialias: bool) -> None:
    check_choice(mode, "mode", MODES)
    if not isinstance(antialias, bool):
        raise TypeError(f"antialias must be a bool, got {antialias!r}")
    if antialias and mode not in _ANTIALIAS_MODES:
        raise ValueError(f"antialias=True applies to modes {_ANTIALIAS_MODES} only; pass antialias=False for {mode!r}")


def _check_table(table: Any, name: str) -> torch.Tensor:
    if not isinstance(table, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(table).__name__}")
    if not table.is_floating_point():
        raise TypeError(f"{name} must be floating point, got {table.dtype}")
    if table.ndim and table.shape[-1] == 0:
        raise ValueError(f"{name} has 0 channels (shape {tuple(table.shape)}): nothing to resample")
    return table


def _resize(image: torch.Tensor, grid: tuple[int, int], mode: str, antialias: bool) -> torch.Tensor:
    """``[B, D, h, w]`` (float32 / float64) -> ``[B, D, H, W]``; the input itself when the size is unchanged."""
    if tuple(image.shape[-2:]) == grid:
        return image  # F.interpolate at the same size is the identity (checked in the tests), so skip it
    kwargs = {"antialias": antialias} if mode in _ANTIALIAS_MODES else {}
    if mode in ("bilinear", "bicubic"):
        kwargs["align_corners"] = False
    return F.interpolate(image, size=grid, mode=mode, **kwargs)


def _axis_weights(n_in: int, n_out: int, mode: str, antialias: bool, dtype: torch.dtype,
                  device: torch.device) -> torch.Tensor:
    """``[n_out, n_in]`` 1-D resampling matrix of ``F.interpolate`` along one axis (every mode it has is separable:
    a 2-D resize is ``W_h @ table @ W_w^T``), read off by resizing an identity in float64."""
    eye = torch.eye(n_in, dtype=torch.float64, device=device)
    return _resize(eye[None, None], (n_out, n_in), mode, antialias)[0, 0].to(dtype)


@functools.lru_cache(maxsize=512)
def _cached_axis_weights(n_in: int, n_out: int, mode: str, antialias: bool, dtype: torch.dtype) -> torch.Tensor:
    """:func:`_axis_weights` on the CPU, computed once per size (the same bits: the same float64 computation),
    for the eager CPU path of :func:`resample_pos_embed_per_image`. Built outside inference mode, so that a first
    call under ``torch.inference_mode()`` does not leave inference tensors for later calls; never written to."""
    with torch.inference_mode(False), torch.no_grad():
        return _axis_weights(n_in, n_out, mode, antialias, dtype, torch.device("cpu"))


def _interpolate_operator(source: tuple[int, int], grid: tuple[int, int], mode: str, antialias: bool,
                          layout: str, device: torch.device) -> torch.Tensor:
    """float64 ``[H * W, h * w]`` matrix of ``F.interpolate`` from ``source`` to ``grid``, read off by resizing one
    basis image per source pixel (as channels) laid out as the real input was: PyTorch's antialiased kernels pick
    their path from the memory layout, and for width-1 targets the paths give different numbers."""
    (h, w), (height, width) = source, grid
    eye = torch.eye(h * w, dtype=torch.float64, device=device).reshape(h, w, h * w)
    basis = {"contiguous": lambda: eye.permute(2, 0, 1).contiguous()[None],
             "channels_last": lambda: eye[None].permute(0, 3, 1, 2),  # batch stride h * w * C
             "unsqueezed": lambda: eye.permute(2, 0, 1)[None]}[layout]()  # (h, w, C) permuted, then [None]
    return _resize(basis, grid, mode, antialias).reshape(h * w, height * width).transpose(0, 1)


def _layout(image: torch.Tensor) -> str:
    """Which of the layouts :func:`_interpolate_operator` knows ``image [B, C, h, w]`` has."""
    if image.shape[1] > 1 and image.stride(1) == 1:
        return "unsqueezed" if image.shape[0] == 1 and image.stride(0) == image.shape[1] else "channels_last"
    return "contiguous"


class _Interpolate(torch.autograd.Function):
    """``F.interpolate`` forward (the peers' bits) whose backward is matrix products with its own resampling
    operator: inductor lowers those at any size, where ``F.interpolate``'s antialiased backward
    (``aten._upsample_bicubic2d_aa_backward``) fails to compile once sizes are dynamic (issue 24).

    The operator is separable (``rows @ image @ cols^T``, the 1-D matrices read off ``F.interpolate`` in float64)
    except for antialiased width-1 targets of an NCHW-contiguous image, where PyTorch's kernel is not (see
    :func:`resample_pos_embed_per_image`); there the dense ``[H, h * w]`` operator is read off instead, in the
    image's layout (channels-last images, as :func:`resample_pos_embed` makes, stay separable)."""

    @staticmethod
    def forward(image: torch.Tensor, grid: tuple[int, int], mode: str, antialias: bool) -> torch.Tensor:
        return _resize(image, grid, mode, antialias)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        image, grid, mode, antialias = inputs
        ctx.source, ctx.grid, ctx.mode, ctx.antialias = tuple(image.shape[-2:]), grid, mode, antialias
        ctx.layout = _layout(image)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None]:
        (h, w), (height, width) = ctx.source, ctx.grid
        if ctx.antialias and width == 1 and ctx.layout != "channels_last":
            operator = _interpolate_operator(ctx.source, ctx.grid, ctx.mode, ctx.antialias, ctx.layout,
                                             grad.device).to(grad.dtype)
            return torch.matmul(grad.flatten(-2), operator).unflatten(-1, (h, w)), None, None, None
        rows = _axis_weights(h, height, ctx.mode, ctx.antialias, grad.dtype, grad.device)
        cols = _axis_weights(w, width, ctx.mode, ctx.antialias, grad.dtype, grad.device)
        return torch.matmul(torch.matmul(rows.transpose(0, 1), grad), cols), None, None, None


def _resize_differentiable(image: torch.Tensor, grid: tuple[int, int], mode: str, antialias: bool) -> torch.Tensor:
    """:func:`_resize`, with :class:`_Interpolate`'s compilable backward when autograd records it."""
    if tuple(image.shape[-2:]) == grid or not (torch.is_grad_enabled() and image.requires_grad):
        return _resize(image, grid, mode, antialias)
    return _Interpolate.apply(image, grid, mode, antialias)


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """Interpolation runs in float32 (float64 for float64 tables), as timm and SigLIP2 on CPU."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def source_grid(num_patch_tokens: int, old_grid: Any = None, *, name: str = "pos_embed") -> tuple[int, int]:
    """The grid a table of ``num_patch_tokens`` patch rows was trained on: ``old_grid`` checked against the
    count, or the square root when the count is a perfect square; anything else raises."""
    if old_grid is not None:
        old_h, old_w = check_grid(old_grid, "old_grid")
        if old_h * old_w != num_patch_tokens:
            raise ValueError(
                f"{name} has {num_patch_tokens} patch tokens but old_grid ({old_h}, {old_w}) has "
                f"{old_h * old_w}; check old_grid and num_prefix_tokens"
            )
        return old_h, old_w
    side = math.isqrt(num_patch_tokens)
    if side * side != num_patch_tokens or side == 0:
        raise ValueError(
            f"{name} has {num_patch_tokens} patch tokens, which is not a square grid; pass old_grid=(H, W) "
            "(omnipos does not guess a non-square source)"
        )
    return side, side


def resample_pos_embed(
    pos_embed: torch.Tensor,
    new_grid: Any,
    *,
    old_grid: Any = None,
    num_prefix_tokens: int = 1,
    mode: str = "bicubic",
    antialias: bool = True,
) -> torch.Tensor:
    """Resample a position table to ``new_grid``.

    Args:
        pos_embed: ``[N, D]`` or ``[B, N, D]`` (timm's ``[1, N, D]``), ``N = num_prefix_tokens + H_old * W_old``,
            patch rows row-major. Any floating dtype, any device.
        new_grid: ``(H, W)`` target grid (an int for square).
        old_grid: ``(H_old, W_old)``; required unless ``N - num_prefix_tokens`` is a perfect square.
        num_prefix_tokens: leading rows (class / register tokens) copied through unchanged; 0 for
            ``no_embed_class`` models.
        mode: ``F.interpolate`` mode (``"bicubic"`` as timm and HF).
        antialias: timm's default True; False reproduces HF ViT (only for bicubic / bilinear).

    Returns:
        ``[num_prefix_tokens + H * W, D]`` (or with the batch axis), the input's dtype and device. When the
        grids are equal the input itself is returned.

    Raises:
        ValueError: bad grid, a token count that fits neither grid, prefix >= N, unknown mode, antialias with a
            mode that has none. TypeError: a non-tensor or non-floating table.
    """
    _check_table(pos_embed, "pos_embed")
    if pos_embed.ndim not in (2, 3):
        raise ValueError(f"pos_embed must be [N, D] or [B, N, D], got shape {tuple(pos_embed.shape)}")
    new_h, new_w = check_grid(new_grid, "new_grid")
    num_prefix_tokens = check_positive_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
    _check_mode(mode, antialias)
    num_tokens = pos_embed.shape[-2]
    if num_prefix_tokens >= num_tokens:
        raise ValueError(f"num_prefix_tokens={num_prefix_tokens} leaves no patch rows in pos_embed of {num_tokens}")
    num_patches = num_tokens - num_prefix_tokens
    if old_grid is not None:
        old_h, old_w = check_grid(old_grid, "old_grid")
        if old_h * old_w != num_patches:
            fits_new = " (it fits new_grid: is old_grid wrong?)" if new_h * new_w == num_patches else ""
            raise ValueError(
                f"pos_embed has {num_patches} patch tokens ({num_tokens} - {num_prefix_tokens} prefix), which "
                f"matches neither old_grid ({old_h}, {old_w}) = {old_h * old_w}{fits_new} nor a resample from it"
            )
    old_h, old_w = source_grid(num_patches, old_grid)
    if (old_h, old_w) == (new_h, new_w):
        return pos_embed

    batched = pos_embed if pos_embed.ndim == 3 else pos_embed.unsqueeze(0)
    prefix, patches = batched[:, :num_prefix_tokens], batched[:, num_prefix_tokens:]
    dim = patches.shape[-1]
    image = patches.to(_work_dtype(pos_embed.dtype)).reshape(-1, old_h, old_w, dim).permute(0, 3, 1, 2)
    image = _resize_differentiable(image, (new_h, new_w), mode, antialias)
    patches = image.permute(0, 2, 3, 1).reshape(-1, new_h * new_w, dim).to(pos_embed.dtype)
    out = torch.cat([prefix, patches], dim=1) if num_prefix_tokens else patches
    return out if pos_embed.ndim == 3 else out.squeeze(0)


def _check_grids(grids: Any) -> tuple[list[tuple[int, int]], torch.Tensor | list[int], int]:
    """Per-image grids -> (distinct grids in first-seen order, index of each image's grid, number of images).

    A ``[B, 2]`` tensor is grouped with ``torch.unique`` (one host sync); a sequence of pairs is grouped in Python,
    which keeps the whole function traceable by ``torch.compile`` (the sizes are then constants)."""
    if isinstance(grids, torch.Tensor):
        if grids.dtype == torch.bool or grids.is_floating_point() or grids.is_complex():
            raise TypeError(f"grids must be integer (h, w) pairs, got dtype {grids.dtype}")
        if grids.ndim != 2 or grids.shape[1] != 2:
            raise ValueError(f"grids must be [B, 2] (h, w) per image, got shape {tuple(grids.shape)}")
        require_values(grids, "grids", "each image's table size depends on them")
        if grids.numel() and bool((grids < 1).any()):
            i = int((grids < 1).any(dim=1).nonzero()[0, 0])
            raise ValueError(f"grids[{i}] = {tuple(grids[i].tolist())}: each side must be >= 1")
        distinct, inverse = torch.unique(grids.to(torch.int64), dim=0, return_inverse=True)
        return [tuple(g) for g in distinct.tolist()], inverse, grids.shape[0]
    if not isinstance(grids, (list, tuple)):
        raise TypeError(f"grids must be a [B, 2] integer tensor or a sequence of (h, w) pairs, got "
                        f"{type(grids).__name__}")
    seen: dict[tuple[int, int], int] = {}
    inverse_list = [seen.setdefault(check_grid(g, f"grids[{i}]"), len(seen)) for i, g in enumerate(grids)]
    return list(seen), inverse_list, len(inverse_list)


def _is_timm_stored(num_rows: int, old_grid: Any, num_prefix_tokens: int) -> bool:
    """Whether a ``[1, N, D]`` table is timm's flat ``pos_embed`` (``[1, P + h0 * w0, D]``) rather than a grid table
    of height 1: ``old_grid`` says so (unless it is ``(1, N)``), or prefix rows are asked for, or ``N`` (after the
    prefix) is a square above 1; a ``(1, N)`` grid of square ``N`` needs ``old_grid=(1, N)``."""
    if old_grid is not None:
        return check_grid(old_grid, "old_grid") != (1, num_rows)
    if num_prefix_tokens:
        return True
    side = math.isqrt(num_rows)
    return num_rows > 1 and side * side == num_rows


def resample_pos_embed_per_image(
    table: torch.Tensor,
    grids: Any,
    *,
    max_length: int,
    old_grid: Any = None,
    num_prefix_tokens: int = 0,
    mode: str = "bilinear",
    antialias: bool = True,
    padding: str = "zeros",
    exact: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each image's position table at its own grid, row-major, padded to ``max_length`` (native-resolution ViTs).

    The numbers of SigLIP2's ``Siglip2VisionEmbeddings.resize_positional_embeddings`` (bilinear,
    ``align_corners=False``, antialias, float32 on CPU; ``padding="first"`` fills the padded rows with the image's
    first row as it does) and of timm NaFlexViT's per-sample learned path (padding rows get nothing: ``"zeros"``).
    Images sharing a grid are resampled once (the only Python loop is over the distinct grids). On the CPU outside
    autograd each grid's rows are copied into its first image's slice of the output and from there to that grid's
    other images; elsewhere every image's rows are gathered from the resampled grids in one indexing
    operation.

    How a grid is resampled: every ``F.interpolate`` mode is separable, so by default the table is multiplied by the
    two 1-D resampling matrices (``W_h @ table @ W_w^T``, each matrix read off ``F.interpolate`` along one axis in
    float64): the separable operator up to float32 summation order (about 1e-6 of the table's scale; nearest modes
    exactly), several times faster than one ``F.interpolate`` per grid. On the CPU each 1-D product reads only the
    rows its weights are non-zero on (one ``embedding_bag`` per pass), elsewhere it is a dense matrix product. A
    grid's first pass is the one that leaves less work (usually along its shorter side) and is shared by the grids
    of that height (or width).
    ``exact=True`` calls ``F.interpolate`` per distinct grid, as timm NaFlexViT and SigLIP2 of transformers 4.x do,
    bit for bit.

    Which one equals SigLIP2 depends on the transformers release (both verified, 4.57.1 and 5.24.0):

    - transformers 4.x resizes with one ``F.interpolate`` per image: ``exact=True`` is bit for bit.
    - transformers 5.24 rewrote ``resize_positional_embeddings`` as dense float32 separable weights: the default
      path equals it within float32 summation order (about 5e-7 of the table's scale in float32; at most one
      rounding step, 2**-7 relative, in bfloat16), ``exact=True`` too except for width-1 grids (below).

    Target grids of width 1 (``(h, 1)`` with ``h`` different from the table's height, up or down): there
    ``F.interpolate``'s antialiased kernels (PyTorch 2.14 on CPU, bilinear and bicubic; the other modes agree) do
    not apply the separable operator when the image is laid out NCHW-contiguous, which is what SigLIP2's
    ``table.permute(2, 0, 1).unsqueeze(0)`` gives (channels-last images, as timm's ``resample_abs_pos_embed`` and
    :func:`resample_pos_embed` make, are resampled right). They then differ from the float64 formula by as much as
    the table's own scale (1.2 to 2.6 on a standard-normal table). The default path gives the formula's numbers
    (as SigLIP2 of transformers 5.24 and timm do); ``exact=True`` reproduces SigLIP2 4.x's ``F.interpolate`` call,
    quirk and all: its contract is that peer's bits.

    Args:
        table: the learned table: ``[h0, w0, D]`` (SigLIP2's ``position_embedding.weight.reshape(h0, w0, D)``),
            ``[1, h0, w0, D]`` (timm NaFlexViT's ``pos_embed``), or flat ``[P + h0 * w0, D]`` / ``[1, P + h0 * w0,
            D]`` (a timm ViT's ``pos_embed`` as stored) with ``P = num_prefix_tokens`` rows first and ``old_grid``
            unless square. A ``[1, N, D]`` table is read as timm's flat form when ``old_grid`` (other than
            ``(1, N)``), ``num_prefix_tokens`` or a square ``N`` says so, else as a ``1 x N`` grid.
        grids: ``[B, 2]`` integer ``(h_i, w_i)`` per image (SigLIP2's ``spatial_shapes``), or a list of pairs
            (then ``torch.compile`` traces the function without graph breaks).
        max_length: rows per image in the output (SigLIP2's ``max_num_patches``), >= ``P + h_i * w_i``.
        old_grid: ``(h0, w0)`` of a flat table (checked against a 3-D / 4-D table's shape when given).
        num_prefix_tokens: leading class / register rows of a flat table, put first in every image's rows
            unchanged.
        mode, antialias: ``F.interpolate`` settings (SigLIP2 / NaFlexViT: bilinear with antialias).
        padding: ``"zeros"`` (timm) or ``"first"`` (SigLIP2: the image's first patch row repeated).
        exact: resample with ``F.interpolate`` (bit-identical to timm and to SigLIP2 of transformers 4.x) instead of
            the separable matrices (SigLIP2 of transformers 5.24 within float32 summation order).

    Returns:
        ``(out [B, max_length, D], mask [B, max_length] bool)``: image ``b``'s rows are
        ``[prefix, h_b * w_b patches row-major, padding]``; ``mask`` is True on the prefix and patch rows. ``out``
        has the table's dtype and device (interpolation in float32, float64 for float64 tables) and is
        differentiable with respect to ``table``.

    Raises:
        ValueError: ``max_length`` smaller than an image's ``P + h * w`` (image index named), a grid side < 1
        (index named), a table that fits no grid, an unknown mode or padding. TypeError: non-floating table,
        non-integer grids.
    """
    _check_table(table, "table")
    _check_mode(mode, antialias)
    check_choice(padding, "padding", PADDINGS)
    max_length = check_positive_int(max_length, "max_length")
    num_prefix_tokens = check_positive_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
    if table.ndim == 4 and table.shape[0] == 1:
        table = table[0]
    if table.ndim == 3 and table.shape[0] == 1 and _is_timm_stored(table.shape[1], old_grid, num_prefix_tokens):
        table = table[0]  # timm's pos_embed as stored, [1, P + h0 * w0, D]
    if table.ndim == 3:
        if num_prefix_tokens:
            raise ValueError("num_prefix_tokens is for a flat [P + h0 * w0, D] table; a [h0, w0, D] table has none")
        if old_grid is not None and check_grid(old_grid, "old_grid") != tuple(table.shape[:2]):
            raise ValueError(f"old_grid {tuple(old_grid)} does not match the table's grid {tuple(table.shape[:2])}")
        source = (table.shape[0], table.shape[1])
        prefix, patches = table.new_zeros(0, table.shape[-1]), table.reshape(-1, table.shape[-1])
    elif table.ndim == 2:
        if num_prefix_tokens >= table.shape[0]:
            raise ValueError(f"num_prefix_tokens={num_prefix_tokens} leaves no patch rows in a table of "
                             f"{table.shape[0]}")
        source = source_grid(table.shape[0] - num_prefix_tokens, old_grid, name="table")
        prefix, patches = table[:num_prefix_tokens], table[num_prefix_tokens:]
    else:
        raise ValueError(f"table must be [h0, w0, D], [1, h0, w0, D] or [P + h0 * w0, D], got shape "
                         f"{tuple(table.shape)}")
    distinct, inverse, batch = _check_grids(grids)
    dim, device = table.shape[-1], table.device
    sizes = [h * w for h, w in distinct]
    too_long = [i for i, g in enumerate(inverse if isinstance(inverse, list) else inverse.tolist())
                if num_prefix_tokens + sizes[g] > max_length]
    if too_long:
        i = too_long[0]
        h, w = distinct[inverse[i]]
        raise ValueError(f"max_length={max_length} is smaller than image {i}'s {num_prefix_tokens} prefix + "
                         f"{h} x {w} patches = {num_prefix_tokens + h * w} rows")

    if not isinstance(exact, bool):
        raise TypeError(f"exact must be a bool, got {exact!r}")
    work = _work_dtype(table.dtype)
    grid_table = patches.to(work).reshape(*source, dim)
    # eager CPU outside autograd: each grid's rows are copied into the output once (below)
    direct = not exact and work == table.dtype and _numpy_ok(grid_table)
    if exact:
        image = grid_table.permute(2, 0, 1).unsqueeze(0)
        resized = [_resize_differentiable(image, grid, mode, antialias).flatten(2)[0].transpose(0, 1)
                   for grid in distinct]
    else:
        separable = _Separable(grid_table, distinct, functools.partial(_axis_weights, device=device), mode,
                               antialias)
    sizes_of = torch.tensor(sizes, dtype=torch.int64, device=device)
    inverse = torch.as_tensor(inverse, dtype=torch.int64, device=device)
    slot = torch.arange(max_length, device=device).unsqueeze(0)
    size = sizes_of[inverse].unsqueeze(1)
    real = slot < num_prefix_tokens + size
    if direct:
        out = _write_per_image(separable, prefix, distinct, inverse.tolist(), max_length, num_prefix_tokens, padding)
        return out, real.expand(batch, max_length)
    # one bank of rows: [prefix | grid 0 | grid 1 | ... | a zero row]; every output row is an index into it
    if not exact:
        resized = [separable(grid).reshape(-1, dim) for grid in distinct]
    bank = torch.cat([prefix.to(work), *resized, grid_table.new_zeros(1, dim)]).to(table.dtype)
    starts = torch.cat([sizes_of.new_zeros(1), sizes_of]).cumsum(0)[:-1] + num_prefix_tokens
    start = starts[inverse].unsqueeze(1)
    patch_row = slot - num_prefix_tokens
    pad_row = start if padding == "first" else torch.full_like(start, bank.shape[0] - 1)
    index = torch.where(slot < num_prefix_tokens, slot, torch.where(real, start + patch_row, pad_row))
    return take_rows(bank, index.reshape(-1)).reshape(batch, max_length, dim), real.expand(batch, max_length)


class _Separable:
    """``W_h @ table @ W_w^T`` of one ``[h0, w0, D]`` table at each of ``grids``, one 1-D pass per axis.

    On the CPU outside ``torch.compile`` a pass is one ``torch.embedding_bag`` (:class:`_BaggedPass`): each output
    row sums only the input rows its 1-D weights are non-zero on (2 of 16 upsampling bilinearly, 3-6 downsampling
    with antialias), each scaled by its weight, in one loop over the channels; a skipped weight is an exact zero.
    A dense product there multiplies all 16 weights of a row, at about the same speed per multiply-add. Elsewhere
    (CUDA, meta, ``torch.compile``) a pass is a dense matrix product.

    Each grid's first pass is the one that leaves the cheaper pair of passes (counted in non-zero weights on the
    CPU, in multiply-adds of the dense products elsewhere). An intermediate is shared by the grids of one height
    (or width) and dropped after its last grid; a pass to the table's own size is the identity and is skipped
    (``F.interpolate`` returns its input there). Which passes a grid gets depends on that grid alone: an image's
    rows do not depend on the rest of the batch. The eager CPU path and the autograd path both resample through
    this, so they agree bit for bit."""

    def __init__(self, table: torch.Tensor, grids: list[tuple[int, int]], weights: Any, mode: str,
                 antialias: bool) -> None:
        self.table, self.weights, self.mode, self.antialias = table, weights, mode, antialias
        self.bagged = table.device.type == "cpu" and not torch.compiler.is_compiling()
        h0, w0, _ = table.shape
        self.first_side: dict[tuple[int, int], str] = {}
        self.uses: dict[tuple[str, int], int] = {}
        for h, w in grids:
            if self.bagged:  # input rows read per channel
                taps_h, taps_w = self._taps(h0, h), self._taps(w0, w)
                rows_first = w0 * taps_h + h * taps_w <= h0 * taps_w + w * taps_h
            else:  # multiply-adds per channel
                rows_first = ((h != h0) * h * h0 * w0 + (w != w0) * h * w * w0
                              <= (w != w0) * h0 * w * w0 + (h != h0) * h * w * h0)
            key = ("h", h) if rows_first else ("w", w)
            self.first_side[(h, w)] = key[0]
            self.uses[key] = self.uses.get(key, 0) + 1
        self.firsts: dict[tuple[str, int], torch.Tensor] = {}

    def _taps(self, n_in: int, n_out: int) -> int:
        """Non-zero weights of the ``n_in -> n_out`` matrix (0 for the identity)."""
        if n_in == n_out:
            return 0
        return _cached_pass_bags(n_in, n_out, 1, 1, self.mode, self.antialias, self.table.dtype)[0].numel()

    def _pass(self, x: torch.Tensor, n_in: int, n_out: int, outer: int, inner: int) -> torch.Tensor:
        """The rows of ``x`` read as ``[outer, n_in, inner, D]``, resampled along ``n_in``: ``[outer * n_out *
        inner, D]`` (``x``'s rows themselves for the identity)."""
        dim = self.table.shape[-1]
        if n_in == n_out:
            return x.reshape(-1, dim)
        if self.bagged:  # contiguous rows: embedding_bag's fast path, whatever the table's strides
            return _bagged_pass(x.reshape(-1, dim).contiguous(), n_in, n_out, outer, inner, self.mode,
                                self.antialias)
        weights = self.weights(n_in, n_out, self.mode, self.antialias, self.table.dtype)
        if inner == 1:  # along the last spatial axis: one [n_out, n_in] @ [n_in, D] product per outer row
            return torch.bmm(weights.expand(outer, n_out, n_in), x.reshape(outer, n_in, dim)).reshape(-1, dim)
        return torch.matmul(weights, x.reshape(n_in, inner * dim)).reshape(-1, dim)  # outer == 1

    def _first(self, key: tuple[str, int]) -> torch.Tensor:
        """``[n, w0, D]`` (side "h") or ``[h0, n, D]`` (side "w"); forgotten after the last grid that uses it."""
        side, n = key
        inner = self.firsts.get(key)
        if inner is None:
            table, (h0, w0, dim) = self.table, self.table.shape
            if side == "h":
                inner = self._pass(table, h0, n, 1, w0).view(n, w0, dim)
            else:
                inner = self._pass(table, w0, n, h0, 1).view(h0, n, dim)
            self.firsts[key] = inner
        self.uses[key] -= 1
        if not self.uses[key]:
            del self.firsts[key]
        return inner

    def __call__(self, grid: tuple[int, int], out: torch.Tensor | None = None) -> torch.Tensor:
        """``[h, w, D]``, copied into ``out`` (a ``[h * w, D]`` tensor) when given. Each grid of ``grids`` once."""
        (h, w), (h0, w0, dim) = grid, self.table.shape
        side = self.first_side[grid]
        inner = self._first((side, h if side == "h" else w))
        if side == "h":  # then along the columns of each of the h rows
            result = self._pass(inner, w0, w, h, 1)
        else:  # then along the rows, for all w columns at once
            result = self._pass(inner, h0, h, 1, w)
        if out is not None:
            result = out.copy_(result)
        return result.view(h, w, dim)


def _bagged_pass(rows: torch.Tensor, n_in: int, n_out: int, outer: int, inner: int, mode: str,
                 antialias: bool) -> torch.Tensor:
    """One pass of :class:`_Separable` on the CPU: ``rows [outer * n_in * inner, D]`` -> ``[outer * n_out * inner,
    D]``, through :class:`_BaggedPass` when autograd records it."""
    if torch.is_grad_enabled() and rows.requires_grad:
        return _BaggedPass.apply(rows, n_in, n_out, outer, inner, mode, antialias, False)
    return _embedding_bag_pass(rows, n_in, n_out, outer, inner, mode, antialias, False)


def _embedding_bag_pass(rows: torch.Tensor, n_in: int, n_out: int, outer: int, inner: int, mode: str,
                        antialias: bool, transposed: bool) -> torch.Tensor:
    indices, offsets, weights = _cached_pass_bags(n_in, n_out, outer, inner, mode, antialias, rows.dtype, transposed)
    return torch.embedding_bag(rows, indices, offsets, False, 0, False, weights)[0]


class _BaggedPass(torch.autograd.Function):
    """A pass of :class:`_Separable` on the CPU under autograd. Its backward is the same kind of pass with the
    transposed matrix (a pass is linear in its rows), so it is differentiable any number of times, where
    ``embedding_bag``'s own backward is not differentiable."""

    @staticmethod
    def forward(rows: torch.Tensor, n_in: int, n_out: int, outer: int, inner: int, mode: str, antialias: bool,
                transposed: bool) -> torch.Tensor:
        return _embedding_bag_pass(rows, n_in, n_out, outer, inner, mode, antialias, transposed)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        ctx.arguments = inputs[1:]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        n_in, n_out, outer, inner, mode, antialias, transposed = ctx.arguments
        grad_rows = _BaggedPass.apply(grad.contiguous(), n_out, n_in, outer, inner, mode, antialias, not transposed)
        return grad_rows, None, None, None, None, None, None, None


@functools.lru_cache(maxsize=256)
def _cached_pass_bags(n_in: int, n_out: int, outer: int, inner: int, mode: str, antialias: bool,
                      dtype: torch.dtype, transposed: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``torch.embedding_bag``'s ``(indices, offsets, per_sample_weights)`` for one 1-D pass of ``M [n_out, n_in]``
    over rows read as ``[outer, n_in, inner]``: output row ``(o, i, m)`` is the sum over the non-zero ``M[i, a]``
    (increasing ``a``) of ``M[i, a]`` times input row ``(o, a, m)``. ``M`` is :func:`_cached_axis_weights`' matrix
    from ``n_in`` to ``n_out`` or, ``transposed``, the transpose of the one from ``n_out`` to ``n_in`` (the
    backward). Computed once per shape and kept (the last 256 shapes: 8 bytes per non-zero weight and 4 per output
    row, ~0.1 MB for a 64 x 64 grid); built outside inference mode (autograd keeps the indices)."""
    if transposed:
        matrix = _cached_axis_weights(n_out, n_in, mode, antialias, dtype).T
    else:
        matrix = _cached_axis_weights(n_in, n_out, mode, antialias, dtype)
    matrix = matrix.numpy()
    rows, cols = np.nonzero(matrix)  # by output row, then input
    counts = np.bincount(rows, minlength=n_out)
    ends = np.cumsum(counts)
    span = np.arange(inner)[:, None]
    # one outer row: bags (i, m) in that order, each listing its taps (input rows a * inner + m)
    indices = np.concatenate([(cols[e - c:e] * inner + span).ravel() for c, e in zip(counts, ends)])
    values = np.concatenate([np.tile(matrix[i, cols[e - c:e]], inner) for i, (c, e) in enumerate(zip(counts, ends))])
    indices = (np.arange(outer)[:, None] * (n_in * inner) + indices).ravel()
    sizes = np.tile(np.repeat(counts, inner), outer)
    with torch.inference_mode(False):
        offsets = np.cumsum(sizes) - sizes
        return (torch.from_numpy(indices.astype(np.int32)), torch.from_numpy(offsets.astype(np.int32)),
                torch.from_numpy(np.tile(values, outer)).to(dtype))


def _write_per_image(separable: _Separable, prefix: torch.Tensor, distinct: list[tuple[int, int]],
                     inverse: list[int], max_length: int, num_prefix_tokens: int, padding: str) -> torch.Tensor:
    """The eager CPU path of :func:`resample_pos_embed_per_image`: ``[B, max_length, D]`` in one fresh buffer.

    Each distinct grid's last pass (the same passes as the autograd path, so the same bits) is copied from the
    cache into the rows of its first image (``embedding_bag`` has no output argument of its own); each later image
    of that grid copies those rows. No bank of grids, no gather: each output row is written once."""
    table, p = separable.table, num_prefix_tokens
    dim = table.shape[-1]
    members: list[list[int]] = [[] for _ in distinct]
    for image, g in enumerate(inverse):
        members[g].append(image)
    # zeros: calloc'd memory, so padding rows that are never written cost nothing
    out = new_buffer((len(inverse), max_length, dim), table.dtype, fill=0 if padding == "zeros" else None)
    rows, flat = out.numpy(), out.view(-1, dim)
    head = prefix.detach().numpy() if p else None
    for (h, w), images in zip(distinct, members):
        first, end = images[0], p + h * w
        separable((h, w), out=flat[first * max_length + p:first * max_length + end])
        if p:
            rows[first, :p] = head
        if padding == "first":
            rows[first, end:] = rows[first, p]
        span = max_length if padding == "first" else end
        for image in images[1:]:
            rows[image, :span] = rows[first, :span]
    return out


_NUMPY = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}


def _numpy_ok(tensor: torch.Tensor) -> bool:
    """An eager CPU tensor outside autograd, of a dtype NumPy has: NumPy may hold and move its rows."""
    return (not torch.compiler.is_compiling() and tensor.device.type == "cpu" and tensor.dtype in _NUMPY
            and not (torch.is_grad_enabled() and tensor.requires_grad))


