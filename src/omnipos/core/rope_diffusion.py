"""N-D RoPE as diffusion transformers write it: the rotary embedding of a diffusers position module, per-model
presets and the token coordinates each model feeds it.

All five models rotate interleaved pairs ``(2i, 2i + 1)`` (diffusers' ``repeat_interleave_real=True``) and give each
axis of a video/image grid its own block of channels:

- **Flux** (``FluxPosEmbed(theta, axes_dim)``): axial, ``axes_dims = axes_dim`` (e.g. (16, 56, 56)) over ids
  ``[seq, 3]`` given by the pipeline (text ids zeros, image ids ``(0, row, col)``).
- **HunyuanVideo** (``HunyuanVideoRotaryPosEmbed(patch_size, patch_size_t, rope_dim, theta=256)``): axial with
  ``axes_dims = rope_dim`` over the patch grid ``(t, h, w)``.
- **Wan 2.1** (``WanRotaryPosEmbed(attention_head_dim, patch_size, max_seq_len, theta=10000)``): axial with
  ``h = w = 2 * (head_dim // 6)`` channels and ``t`` the rest, over the patch grid ``(t, h, w)``.
- **CogVideoX** (``get_3d_rotary_pos_embed``, a function): axial with ``t = head_dim / 4``, ``h = w = 3 head_dim / 8``
  over ``(t, h, w)``; 1.0 maps the latent grid onto the crop of a base grid (:func:`cogvideox_positions`).
- **LTX-Video** (``LTXVideoRotaryPosEmbed(dim, base_num_frames, base_height, base_width, patch_size, patch_size_t,
  theta)``): one ladder ``theta ** linspace(0, 1, dim // 6) * pi / 2`` shared by the three axes, slot ``j`` turned by
  axis ``j % 3`` (``axes_order="interleaved"``), coordinates mapped to ``2 * c / base - 1``
  (:func:`ltx_video_positions`), ``dim % 6`` pass-through channels at the front; its ``dim`` is the attention's
  inner dim (all heads: diffusers rotates q before splitting heads).

Coordinates are built in float64 here; diffusers builds them (and the angles) in float32, so at large angles
(LTX-Video: up to ``theta * pi / 2``) diffusers' own cos/sin carry float32 rounding of the angle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from .checks import check_positive_int

__all__ = [
    "DIFFUSERS_ROPE_CLASSES",
    "cogvideox_positions",
    "cogvideox_rope_arguments",
    "grid_positions",
    "ltx_video_positions",
    "rope_arguments_from_diffusers",
]

DIFFUSERS_ROPE_CLASSES = ("FluxPosEmbed", "HunyuanVideoRotaryPosEmbed", "WanRotaryPosEmbed",
                          "LTXVideoRotaryPosEmbed")


def _flux(module: Any) -> dict[str, Any]:
    axes_dims = tuple(int(d) for d in module.axes_dim)
    return {"dim": sum(axes_dims), "base": float(module.theta), "axes_dims": axes_dims, "layout": "interleaved"}


def _hunyuan_video(module: Any) -> dict[str, Any]:
    axes_dims = tuple(int(d) for d in module.rope_dim)
    return {"dim": sum(axes_dims), "base": float(module.theta), "axes_dims": axes_dims, "layout": "interleaved"}


def _wan(module: Any, theta: float | None) -> dict[str, Any]:
    axes_dims = (int(module.t_dim), int(module.h_dim), int(module.w_dim))
    if theta is None:
        theta = getattr(module, "theta", 10000.0)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 0:
        raise ValueError(f"theta must be a finite number > 0, got {theta!r}")
    theta = float(theta)
    # WanRotaryPosEmbed keeps only its cos/sin tables, not theta: check that theta reproduces them (position 1)
    slots = sum(axes_dims) // 2
    rows = min(2, module.freqs_cos.shape[0])
    angle = torch.arange(rows, dtype=torch.float64)[:, None] * torch.cat(
        [theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d) for d in axes_dims])
    table = torch.complex(module.freqs_cos[:rows, ::2].double().cpu(), module.freqs_sin[:rows, ::2].double().cpu())
    # the tables follow model.to(dtype): after .to(torch.bfloat16) they carry bfloat16 rounding (eps 7.8e-3)
    atol = max(1e-5, float(torch.finfo(module.freqs_cos.dtype).eps))
    if table.shape[-1] != slots or not torch.allclose(table, torch.polar(torch.ones_like(angle), angle), atol=atol):
        raise ValueError(f"theta={theta:g} does not reproduce this WanRotaryPosEmbed's cos/sin tables (diffusers does "
                         "not keep theta on the module); pass the model's theta=")
    return {"dim": sum(axes_dims), "base": theta, "axes_dims": axes_dims, "layout": "interleaved"}


def _ltx_video(module: Any) -> dict[str, Any]:
    dim = int(module.dim)
    if dim < 6:
        raise ValueError(f"LTXVideoRotaryPosEmbed.dim={dim} has no rotated channels (dim // 6 = 0 frequencies)")
    per_axis = 2 * (dim // 6)
    return {"dim": dim, "base": float(module.theta), "axes_dims": (per_axis,) * 3, "layout": "interleaved",
            "frequency_rule": "linspace", "axes_order": "interleaved", "passthrough": "front"}


def rope_arguments_from_diffusers(module: Any, *, theta: float | None = None) -> dict[str, Any]:
    """``RotaryEmbedding`` keyword arguments reproducing a diffusers position module (see the module docstring).

    Args:
        module: an instance of one of :data:`DIFFUSERS_ROPE_CLASSES` (diffusers 0.42): ``FluxPosEmbed``,
            ``HunyuanVideoRotaryPosEmbed``, ``WanRotaryPosEmbed``, ``LTXVideoRotaryPosEmbed``. CogVideoX has no
            module (a function): :func:`cogvideox_rope_arguments`.
        theta: only for ``WanRotaryPosEmbed``, which keeps its cos/sin tables but not theta (default 10000, checked
            against the tables).

    Positions to pass: Flux its ``ids [seq, 3]``; HunyuanVideo / Wan the patch grid ``grid_positions(t, h, w)``;
    LTX-Video :func:`ltx_video_positions`.
    """
    name = type(module).__name__
    if name not in DIFFUSERS_ROPE_CLASSES or not type(module).__module__.startswith("diffusers."):
        raise TypeError(f"module must be a diffusers {' / '.join(DIFFUSERS_ROPE_CLASSES)} instance, got "
                        f"{type(module).__module__}.{name} (CogVideoX: cogvideox_rope_arguments(head_dim))")
    if theta is not None and name != "WanRotaryPosEmbed":
        raise ValueError(f"theta= is only for WanRotaryPosEmbed (it does not keep theta); {name} has "
                         f"theta={module.theta}")
    if name == "FluxPosEmbed":
        return _flux(module)
    if name == "HunyuanVideoRotaryPosEmbed":
        return _hunyuan_video(module)
    if name == "WanRotaryPosEmbed":
        return _wan(module, theta)
    return _ltx_video(module)


def cogvideox_rope_arguments(head_dim: int, *, theta: float = 10000.0) -> dict[str, Any]:
    """``RotaryEmbedding`` keyword arguments of CogVideoX's 3-D RoPE (diffusers ``get_3d_rotary_pos_embed``):
    ``axes_dims = (head_dim // 4, head_dim // 8 * 3, head_dim // 8 * 3)`` for ``(t, h, w)``, interleaved pairs.
    ``head_dim`` a multiple of 16 (every axis even)."""
    head_dim = check_positive_int(head_dim, "head_dim")
    if head_dim % 16:
        raise ValueError(f"head_dim must be a multiple of 16 for CogVideoX's (1/4, 3/8, 3/8) split into even axis "
                         f"dims, got {head_dim}")
    axes_dims = (head_dim // 4, head_dim // 8 * 3, head_dim // 8 * 3)
    return {"dim": head_dim, "base": float(theta), "axes_dims": axes_dims, "layout": "interleaved"}


def _sizes(sizes: Sequence[Any], name: str) -> tuple[int, ...]:
    return tuple(check_positive_int(s, f"{name}[{i}]") for i, s in enumerate(sizes))


def grid_positions(*sizes: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Integer coordinates ``[prod(sizes), len(sizes)]`` (int64) of a row-major grid, e.g. the ``(t, h, w)`` of a
    video's patch tokens in the order diffusers flattens them (``meshgrid(..., indexing="ij")``)."""
    sizes = _sizes(sizes, "sizes")
    axes = [torch.arange(n, device=device) for n in sizes]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(sizes))


def ltx_video_positions(num_frames: int, height: int, width: int, *,
                        interpolation_scale: Sequence[float] | None = None,
                        base_sizes: Sequence[float] = (20, 2048, 2048), patch_size: int = 1, patch_size_t: int = 1,
                        device: torch.device | str | None = None) -> torch.Tensor:
    """LTX-Video's coordinates ``[num_frames * height * width, 3]`` (float64) of a latent patch grid, mapped to
    ``2 * c - 1`` (``LTXVideoRotaryPosEmbed._prepare_video_coords``): with ``interpolation_scale = (s_t, s_h, s_w)``
    (the pipeline's ``rope_interpolation_scale``) ``c = grid * s * patch / base`` per axis, ``base_sizes`` the
    module's ``(base_num_frames, base_height, base_width)``; without it (as diffusers) ``c`` is the raw grid."""
    grid = grid_positions(num_frames, height, width, device=device).to(torch.float64)
    if interpolation_scale is not None:
        scale = [float(s) for s in interpolation_scale]
        base = [float(b) for b in base_sizes]
        if len(scale) != 3 or len(base) != 3 or min(base) <= 0:
            raise ValueError(f"interpolation_scale and base_sizes must be 3 numbers each (t, h, w; bases > 0), got "
                             f"{interpolation_scale!r} and {base_sizes!r}")
        patches = (check_positive_int(patch_size_t, "patch_size_t"), check_positive_int(patch_size, "patch_size"),
                   patch_size)
        grid = grid * torch.tensor([s * p / b for s, p, b in zip(scale, patches, base)], dtype=torch.float64,
                                   device=grid.device)
    return grid * 2 - 1


def cogvideox_positions(num_frames: int, grid_height: int, grid_width: int, *,
                        base_size: tuple[int, int] | None = None,
                        device: torch.device | str | None = None) -> torch.Tensor:
    """CogVideoX's ``(t, h, w)`` coordinates ``[num_frames * grid_height * grid_width, 3]`` (float64).

    ``base_size=None`` (CogVideoX 1.5, ``grid_type="slice"``): the integer grid. ``base_size = (base_height,
    base_width)`` in patches (CogVideoX 1.0, ``sample_height // patch_size``, ...): the grid is spread over the
    centred crop ``(top, left) .. (bottom, right)`` of the base grid that keeps its aspect
    (``get_resize_crop_region_for_grid``) as diffusers' ``grid_type="linspace"`` does it, ``h = linspace(top,
    bottom * (grid_height - 1) / grid_height, grid_height)`` (likewise w); ``t`` runs ``0 .. num_frames - 1``.
    """
    sizes = _sizes((num_frames, grid_height, grid_width), "num_frames, grid_height, grid_width")
    if base_size is None:
        return grid_positions(*sizes, device=device).to(torch.float64)
    base_h, base_w = _sizes(base_size, "base_size")
    h, w = sizes[1], sizes[2]
    if h / w > base_h / base_w:
        crop_h, crop_w = base_h, int(round(base_h / h * w))
    else:
        crop_h, crop_w = int(round(base_w / w * h)), base_w
    top, left = int(round((base_h - crop_h) / 2.0)), int(round((base_w - crop_w) / 2.0))
    # diffusers: linspace(start, stop * (n - 1) / n, n) with stop = start + crop
    axes = [torch.arange(sizes[0], dtype=torch.float64, device=device),
            torch.linspace(top, (top + crop_h) * (h - 1) / h, h, dtype=torch.float64, device=device),
            torch.linspace(left, (left + crop_w) * (w - 1) / w, w, dtype=torch.float64, device=device)]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
