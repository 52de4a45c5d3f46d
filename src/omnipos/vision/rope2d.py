"""2-D rotary position embedding for patch tokens, on :class:`omnipos.core.RotaryEmbedding`'s axial mode.

Axial 2-D RoPE splits a head's rotary channels between the two grid axes: half the frequency slots turn with
the first coordinate, half with the second, each a RoPE ladder ``base ** (-2i / (head_dim / 2))``. Which
coordinate comes first is the ``indexing``:

- ``"ij"``: ``(row, col)``, timm ``RotaryEmbeddingCat(in_pixels=False, grid_indexing='ij')`` (its default, used by
  EVA02 with ``base=1e4`` and reference-grid positions ``t = arange(n) / n * ref``: pass ``ref_grid``), equal to
  rotary-embedding-torch's ``get_axial_freqs(H, W)``;
- ``"xy"``: ``(col, row)``, timm ``RotaryEmbeddingCat(..., grid_indexing='xy')``; with ``base=100`` it is rope-vit's
  axial RoPE (Heo et al., 2024).

``mixed=True`` is RoPE-Mixed (Heo et al., 2024, timm ``RotaryEmbeddingMixed``): every head learns its own 2-D
frequency vectors, the angle of slot ``i`` being ``t_0 * f0[h, i] + t_1 * f1[h, i]`` (initialised as rope-vit does:
magnitudes ``mixed_base ** (-4i / dim)`` in two perpendicular directions, rotated by a random angle per head).

Tokens are row-major patches, optionally after ``num_prefix_tokens`` class / register tokens that are not rotated
(as EVA does). Angles are formed in float64 and range-reduced before ``sin``/``cos`` (core), the rotation runs in
float32 or better and returns the input dtype.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ..core import (
    ROPE_LAYOUTS,
    RotaryEmbedding,
    apply_rotary,
    check_choice,
    check_finite,
    check_float_dtype,
    check_positive_int,
    renamed_argument,
    rope_cos_sin,
)
from .grid import check_cu_seqlens, check_grid, values_known
from .sincos import grid_coords

__all__ = ["INDEXINGS", "RotaryEmbedding2D", "rope_2d_positions"]

INDEXINGS = ("ij", "xy")


def rope_2d_positions(
    grid: Any, *, indexing: str = "ij", ref_grid: Any = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """float64 ``[H * W, 2]`` coordinates of a row-major patch grid: ``(row, col)`` for ``"ij"``, ``(col, row)``
    for ``"xy"``; ``ref_grid`` rescales them EVA-style (``row * ref_h / H``, ``col * ref_w / W``)."""
    check_choice(indexing, "indexing", INDEXINGS)
    coords = grid_coords(grid, ref_grid=ref_grid, device=device)
    return coords if indexing == "ij" else coords.flip(-1)


def _check_cos_sin_dtype(dtype: Any) -> torch.dtype:
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64 (cos/sin are never built lower), got {dtype!r}")
    return dtype


def _mixed_init(head_dim: int, num_heads: int, base: float, rotate: bool) -> torch.Tensor:
    """rope-vit / timm ``init_random_2d_freqs`` for one block: float64 ``[2, num_heads, head_dim // 2]`` on the CPU
    (the same draws whatever device the module lives on)."""
    cpu = torch.device("cpu")
    magnitude = 1.0 / base ** (torch.arange(0, head_dim, 4, dtype=torch.float64, device=cpu) / head_dim)
    angles = torch.rand(num_heads, 1, dtype=torch.float64, device=cpu) * 2 * math.pi if rotate \
        else torch.zeros(num_heads, 1, dtype=torch.float64, device=cpu)
    f0 = torch.cat([magnitude * torch.cos(angles), magnitude * torch.cos(angles + math.pi / 2)], dim=-1)
    f1 = torch.cat([magnitude * torch.sin(angles), magnitude * torch.sin(angles + math.pi / 2)], dim=-1)
    return torch.stack([f0, f1])


class RotaryEmbedding2D(nn.Module):
    """2-D RoPE of a patch grid for q and k ``[..., heads, prefix + H*W, dim]``.

    Args:
        dim: channels per head (``head_dim`` is accepted too); divisible by 4 (two axes, pairs of channels).
        base: RoPE base (timm's ``temperature``): 1e4 for EVA02 / timm's default, 100 for rope-vit.
        indexing: ``"ij"`` (first half of the slots follow the row) or ``"xy"`` (the column).
        layout: how channel pairs are formed: ``"interleaved"`` (timm ``rotate_half=False``, EVA, rope-vit) or
            ``"half"`` (timm ``rotate_half=True``).
        ref_grid: EVA-style reference grid: positions are stretched onto it whatever the grid.
        mixed: learnable per-head frequencies (RoPE-Mixed); needs ``num_heads``; interleaved only.
        num_heads: heads, for ``mixed``.
        mixed_base: RoPE-Mixed's initial magnitude base (10 in rope-vit / timm, where it is ``temperature``;
            ``mixed_temperature`` is accepted too). Finite and > 0.
        dtype: initial dtype of the RoPE-Mixed frequencies (float32; ``.double()`` etc. change it as usual).

    Precision: axial angles are formed in float64 from float64 constants; RoPE-Mixed angles in float64 from the
    learned frequencies (whatever the module's dtype), and ``cos``/``sin`` are evaluated in float32, or in float64
    when the module or the rotated tensor is float64 (so ``.double()`` gives float64 throughout, gradgradcheck
    included).

    Shape:
        - ``positions(grid)`` -> ``[H*W, 2]`` float64.
        - ``cos_sin(grid)`` -> ``(cos, sin)``: ``[H*W, head_dim]`` (axial) or ``[heads, H*W, head_dim]`` (mixed).
        - ``rotate(x, grid, *, num_prefix_tokens=0)``: ``x [..., heads, prefix + H*W, head_dim]`` -> same.
        - ``forward(q, k, grid, *, num_prefix_tokens=0)`` -> ``(q, k)`` rotated.
        - Packed images (NaFlex, flash-attn varlen): ``rotate_packed(x, coords, cu_seqlens)`` /
          ``forward_packed(q, k, coords, cu_seqlens)`` with ``x [N_total, ..., head_dim]`` (mixed:
          ``[N_total, heads, head_dim]``), ``coords [N_total, 2]`` = (row, col) of each token in its own image
          (:func:`~omnipos.vision.packed_patch_coords` builds them) and ``cu_seqlens [n + 1]`` the image
          boundaries; each image's first ``num_prefix_tokens`` tokens are not rotated, ``ref_grid`` stretches each
          image by its own grid (``grids=``, or one more than its largest coordinate).
    """

    def __init__(
        self,
        dim: int | None = None,
        *,
        base: float = 10000.0,
        indexing: str = "ij",
        layout: str = "interleaved",
        ref_grid: Any = None,
        mixed: bool = False,
        num_heads: int | None = None,
        mixed_base: float = 10.0,
        head_dim: int | None = None,
        mixed_temperature: float | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.dim = check_positive_int(renamed_argument(dim, head_dim, "dim", "head_dim"), "dim (head_dim)")
        if self.dim % 4:
            raise ValueError(f"dim (head_dim) must be divisible by 4 for 2-D RoPE (2 axes x channel pairs), got {self.dim}")
        mixed_base = renamed_argument(mixed_base, mixed_temperature, "mixed_base", "mixed_temperature", default=10.0)
        if isinstance(mixed_base, bool) or not isinstance(mixed_base, (int, float)):
            raise TypeError(f"mixed_base must be a number, got {type(mixed_base).__name__}")
        if not (math.isfinite(mixed_base) and mixed_base > 0):
            raise ValueError(f"mixed_base must be finite and > 0, got {mixed_base}")
        self.mixed_base = float(mixed_base)
        check_float_dtype(dtype)
        self.indexing = check_choice(indexing, "indexing", INDEXINGS)
        self.layout = check_choice(layout, "layout", ROPE_LAYOUTS)
        self.ref_grid = None if ref_grid is None else check_grid(ref_grid, "ref_grid")
        self.mixed = bool(mixed)
        self.base = float(base)
        if self.mixed:
            if num_heads is None:
                raise ValueError("mixed=True (learnable per-head frequencies) needs num_heads")
            if layout != "interleaved":
                raise ValueError("mixed=True uses the interleaved layout (as rope-vit and timm); got layout='half'")
            self.num_heads = check_positive_int(num_heads, "num_heads")
            self.freqs = nn.Parameter(torch.empty(2, self.num_heads, self.dim // 2, dtype=dtype))
            self.rope = None
            self.reset_parameters()
        else:
            self.num_heads = num_heads
            self.rope = RotaryEmbedding(self.dim, base=base, layout=layout, n_axes=2)

    def reset_parameters(self) -> None:
        """RoPE-Mixed: fresh rope-vit initial frequencies (a random angle per head); axial RoPE has no parameters."""
        if self.mixed:
            with torch.no_grad():
                self.freqs.copy_(_mixed_init(self.dim, self.num_heads, self.mixed_base, rotate=True))

    @property
    def head_dim(self) -> int:
        """Alias of :attr:`dim` (the channels per head)."""
        return self.dim

    def positions(self, grid: Any, *, device: torch.device | str | None = None) -> torch.Tensor:
        return rope_2d_positions(grid, indexing=self.indexing, ref_grid=self.ref_grid, device=device)

    def _device(self) -> torch.device:
        return self.freqs.device if self.mixed else self.rope.inv_freq.device

    def mixed_angles(self, positions: torch.Tensor) -> torch.Tensor:
        """RoPE-Mixed angles ``[heads, N, head_dim // 2]`` (float64; differentiable in the frequencies)."""
        freqs = self.freqs.to(torch.float64)
        positions = positions.to(torch.float64)
        return positions[:, 0, None] * freqs[0, :, None, :] + positions[:, 1, None] * freqs[1, :, None, :]

    def _work_dtype(self, *dtypes: torch.dtype) -> torch.dtype:
        """float64 when the module (RoPE-Mixed frequencies) or a rotated tensor is float64, else float32."""
        own = (self.freqs.dtype,) if self.mixed else ()
        return torch.float64 if torch.float64 in (*own, *dtypes) else torch.float32

    def _cos_sin_of(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Full-width (cos, sin) of float64 positions ``[N, 2]`` (already in this module's indexing)."""
        if not self.mixed:
            return self.rope.cos_sin(positions, dtype=dtype)
        cos, sin = rope_cos_sin(self.mixed_angles(positions), dtype=dtype)
        return cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)

    def cos_sin(self, grid: Any, *, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Full-width ``(cos, sin)`` of the grid's tokens, in this module's layout; ``dtype`` float32 or float64
        (default: float64 for a float64 module, else float32)."""
        dtype = self._work_dtype() if dtype is None else _check_cos_sin_dtype(dtype)
        return self._cos_sin_of(self.positions(grid, device=self._device()), dtype)

    def _check(self, x: Any, grid: tuple[int, int], num_prefix_tokens: int, name: str) -> None:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got {getattr(x, 'dtype', type(x).__name__)}")
        if x.ndim < 2 or x.shape[-1] != self.dim:
            raise ValueError(f"{name} must be [..., tokens, dim (head_dim)={self.dim}], got {tuple(x.shape)}")
        tokens = num_prefix_tokens + grid[0] * grid[1]
        if x.shape[-2] != tokens:
            raise ValueError(f"{name} has {x.shape[-2]} tokens; grid {grid} with {num_prefix_tokens} prefix tokens "
                             f"has {tokens}")
        if self.mixed and (x.ndim < 3 or x.shape[-3] != self.num_heads):
            raise ValueError(f"{name} must be [..., heads={self.num_heads}, tokens, head_dim] for mixed RoPE, "
                             f"got {tuple(x.shape)}")

    def _rotate_patches(self, x: torch.Tensor, grid: tuple[int, int], num_prefix_tokens: int,
                        cos_sin: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        patches = x[..., num_prefix_tokens:, :]
        if cos_sin is None and not self.mixed:
            rotated = self.rope.rotate(patches, self.positions(grid, device=x.device), seq_dim=-2)
        else:
            cos, sin = cos_sin if cos_sin is not None else self.cos_sin(grid, dtype=self._work_dtype(x.dtype))
            rotated = apply_rotary(patches, cos, sin, layout=self.layout)
        if not num_prefix_tokens:
            return rotated
        return torch.cat([x[..., :num_prefix_tokens, :], rotated], dim=-2)

    def rotate(self, x: torch.Tensor, grid: Any, *, num_prefix_tokens: int = 0) -> torch.Tensor:
        """Rotate the patch tokens of ``x [..., (heads,) prefix + H*W, head_dim]``; prefix tokens pass through."""
        grid = check_grid(grid)
        num_prefix_tokens = check_positive_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
        self._check(x, grid, num_prefix_tokens, "x")
        return self._rotate_patches(x, grid, num_prefix_tokens, None)

    def forward(self, q: torch.Tensor, k: torch.Tensor, grid: Any, *,
                num_prefix_tokens: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        grid = check_grid(grid)
        num_prefix_tokens = check_positive_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
        self._check(q, grid, num_prefix_tokens, "q")
        self._check(k, grid, num_prefix_tokens, "k")
        if self.mixed:
            cos_sin = self.cos_sin(grid, dtype=self._work_dtype(q.dtype, k.dtype))
            return (self._rotate_patches(q, grid, num_prefix_tokens, cos_sin),
                    self._rotate_patches(k, grid, num_prefix_tokens, cos_sin))
        p = num_prefix_tokens
        q_rot, k_rot = self.rope(q[..., p:, :], k[..., p:, :], self.positions(grid, device=q.device), seq_dim=-2)
        if not p:
            return q_rot, k_rot
        return torch.cat([q[..., :p, :], q_rot], dim=-2), torch.cat([k[..., :p, :], k_rot], dim=-2)

    # -- packed images ------------------------------------------------------------------------------------------

    def packed_positions(self, coords: Any, cu_seqlens: Any = None, *, num_prefix_tokens: int = 0,
                         grids: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 positions ``[N_total, 2]`` (this module's indexing, ``ref_grid`` applied per image) and the
        ``[N_total]`` bool mask of patch tokens (False for each image's prefix tokens) of packed images.

        Args:
            coords: ``[N_total, 2]`` (row, col) of each token in its own image, integer or real (prefix tokens'
                values are ignored).
            cu_seqlens: ``[n + 1]`` image boundaries; None: one image.
            num_prefix_tokens: leading tokens of every image that are not rotated.
            grids: ``[n, 2]`` each image's grid, for ``ref_grid`` (default: one more than its largest coordinate).
        """
        coords = coords if isinstance(coords, torch.Tensor) else torch.as_tensor(coords)
        if coords.dtype == torch.bool or coords.is_complex():
            raise TypeError(f"coords must be real or integer (row, col), got dtype {coords.dtype}")
        if coords.ndim != 2 or coords.shape[1] != 2:
            raise ValueError(f"coords must be [N_total, 2] (row, col), got shape {tuple(coords.shape)}")
        num_prefix_tokens = check_positive_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
        device = self._device()
        coords = coords.to(device=device, dtype=torch.float64)
        if values_known(coords):
            check_finite(coords, "coords")
        total = coords.shape[0]
        if cu_seqlens is None:
            cu = torch.tensor([0, total], device=device)
        else:
            cu = check_cu_seqlens(cu_seqlens, total).to(device)
        image = torch.searchsorted(cu[1:], torch.arange(total, device=device), right=True)
        lengths = cu.diff()
        if num_prefix_tokens and values_known(lengths) and bool((lengths < num_prefix_tokens).any()):
            i = int((lengths < num_prefix_tokens).nonzero()[0, 0])
            raise ValueError(f"image {i} has {int(lengths[i])} tokens, fewer than num_prefix_tokens={num_prefix_tokens}")
        is_patch = torch.arange(total, device=device) - cu[image] >= num_prefix_tokens
        if self.ref_grid is not None:
            if grids is None:
                extent = torch.zeros(cu.numel() - 1, 2, dtype=torch.float64, device=device)
                masked = torch.where(is_patch.unsqueeze(-1), coords, torch.zeros((), dtype=torch.float64, device=device))
                extent = extent.scatter_reduce_(0, image.unsqueeze(-1).expand(-1, 2), masked, "amax") + 1
            else:
                extent = torch.as_tensor(grids, device=device)
                if extent.dtype == torch.bool or extent.is_floating_point():
                    raise TypeError(f"grids must be integer (h, w) pairs, got dtype {extent.dtype}")
                if extent.shape != (cu.numel() - 1, 2):
                    raise ValueError(f"grids must be [n={cu.numel() - 1}, 2] (one grid per image), got shape "
                                     f"{tuple(extent.shape)}")
                if values_known(extent) and bool((extent < 1).any()):
                    raise ValueError("grids: each side must be >= 1")
                extent = extent.to(torch.float64)
            coords = coords * (torch.tensor(self.ref_grid, dtype=torch.float64, device=device) / extent)[image]
        return (coords if self.indexing == "ij" else coords.flip(-1)), is_patch

    def cos_sin_packed(self, coords: Any, cu_seqlens: Any = None, *, num_prefix_tokens: int = 0, grids: Any = None,
                       dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` of packed tokens: ``[N_total, head_dim]`` (axial) or ``[N_total, heads, head_dim]``
        (mixed); prefix tokens get ``cos = 1, sin = 0`` (no rotation)."""
        dtype = self._work_dtype() if dtype is None else _check_cos_sin_dtype(dtype)
        positions, is_patch = self.packed_positions(coords, cu_seqlens, num_prefix_tokens=num_prefix_tokens,
                                                    grids=grids)
        cos, sin = self._cos_sin_of(positions, dtype)
        if self.mixed:
            cos, sin = cos.transpose(0, 1), sin.transpose(0, 1)  # [N, heads, head_dim]
        keep = is_patch.reshape(-1, *([1] * (cos.ndim - 1)))
        return torch.where(keep, cos, torch.ones((), dtype=cos.dtype, device=cos.device)), \
            torch.where(keep, sin, torch.zeros((), dtype=sin.dtype, device=sin.device))

    def _check_packed(self, x: Any, total: int, name: str) -> None:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got {getattr(x, 'dtype', type(x).__name__)}")
        if x.ndim < 2 or x.shape[-1] != self.dim or x.shape[0] != total:
            raise ValueError(f"{name} must be [N_total={total}, ..., dim (head_dim)={self.dim}] (packed tokens "
                             f"first), got {tuple(x.shape)}")
        if self.mixed and (x.ndim != 3 or x.shape[1] != self.num_heads):
            raise ValueError(f"{name} must be [N_total, heads={self.num_heads}, head_dim] for mixed RoPE, got "
                             f"{tuple(x.shape)}")

    def _packed_cos_sin(self, coords: Any, cu_seqlens: Any, num_prefix_tokens: int, grids: Any, x_ndim: int,
                        *dtypes: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.cos_sin_packed(coords, cu_seqlens, num_prefix_tokens=num_prefix_tokens, grids=grids,
                                       dtype=self._work_dtype(*dtypes))
        shape = (cos.shape[0], *([1] * (x_ndim - cos.ndim)), *cos.shape[1:])
        return cos.reshape(shape), sin.reshape(shape)

    def rotate_packed(self, x: torch.Tensor, coords: Any, cu_seqlens: Any = None, *, num_prefix_tokens: int = 0,
                      grids: Any = None) -> torch.Tensor:
        """Rotate packed tokens ``x [N_total, ..., head_dim]`` at their patch coordinates (class docstring)."""
        self._check_packed(x, len(coords), "x")
        cos, sin = self._packed_cos_sin(coords, cu_seqlens, num_prefix_tokens, grids, x.ndim, x.dtype)
        return apply_rotary(x, cos.to(x.device), sin.to(x.device), layout=self.layout)

    def forward_packed(self, q: torch.Tensor, k: torch.Tensor, coords: Any, cu_seqlens: Any = None, *,
                       num_prefix_tokens: int = 0, grids: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`rotate_packed` for q and k at once (one cos/sin for both)."""
        self._check_packed(q, len(coords), "q")
        self._check_packed(k, len(coords), "k")
        if q.ndim != k.ndim:
            raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must have the same number of axes")
        cos, sin = self._packed_cos_sin(coords, cu_seqlens, num_prefix_tokens, grids, q.ndim, q.dtype, k.dtype)
        cos, sin = cos.to(q.device), sin.to(q.device)
        return apply_rotary(q, cos, sin, layout=self.layout), apply_rotary(k, cos, sin, layout=self.layout)

    def extra_repr(self) -> str:
        text = f"dim={self.dim}, indexing={self.indexing!r}, layout={self.layout!r}"
        if self.mixed:
            return text + f", mixed=True, num_heads={self.num_heads}"
        text += f", base={self.base:g}"
        return text + (f", ref_grid={self.ref_grid}" if self.ref_grid is not None else "")
