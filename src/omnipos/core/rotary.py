"""Rotary position embeddings (RoPE, Su et al. 2021) in both layouts in use, every HF scaling, xPos and N-D axial.

Each frequency slot ``i`` (``rotary_dim // 2`` of them) rotates one pair of channels by the angle
``theta_i = p * inv_freq_i``; the layout names which two channels form the pair:

- ``"half"`` (GPT-NeoX, HF transformers, flash-attn ``interleaved=False``): channels ``(i, i + rotary_dim/2)``;
  ``cos = cat(cos(theta), cos(theta))``; ``y[:h] = x[:h] cos - x[h:] sin``, ``y[h:] = x[h:] cos + x[:h] sin``.
- ``"interleaved"`` (GPT-J, Meta LLaMA, torchtune, rotary-embedding-torch, timm): channels ``(2i, 2i + 1)``,
  rotated as the complex number ``x[2i] + j x[2i+1]``; ``cos = repeat_interleave(cos(theta), 2)``.

Channels past ``rotary_dim`` pass through unchanged (partial rotary, GPT-NeoX / Phi).

Precision: the phase ``p * inv_freq / 2 pi`` is formed in float64 and reduced to under one turn before ``sin`` and
``cos``, which run in float32 (float64 for float64 inputs), whatever the dtype of the rotated tensors or positions;
low-precision inputs are rotated in float32 and rounded once at the end. No cos/sin cache is kept, so nothing can go
stale (offsets, lengths, devices, dtypes): cos/sin are ``[positions, rotary_dim / 2]``, small next to q and k.

The pieces: frequencies and scalings in :mod:`~omnipos.core.rope_scaling`, the rotation kernels in
:mod:`~omnipos.core.rope_kernels` (CPU/eager) and :mod:`~omnipos.core.rope_triton` (CUDA), the functional form in
:mod:`~omnipos.core.rope_functional`, checkpoint layout conversion in :mod:`~omnipos.core.rope_layout`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from .checks import as_position_tensor, check_choice, check_even_dim, check_finite, check_positive_int
from .constants import ConstantBuffers
from .phase import cos_sin_of_angles
from .rope_kernels import ROPE_LAYOUTS, rotate_pairs, work_dtype
from .rope_scaling import RopeScaling, as_rope_scaling, rope_frequencies

__all__ = ["RotaryEmbedding"]

# rope types whose frequencies depend on the length being encoded (max(position) + 1)
_LENGTH_DEPENDENT = ("dynamic", "longrope")


class RotaryEmbedding(ConstantBuffers):
    """Rotary position embedding for q and k, any layout, HF scaling, partial rotary, xPos and N-D axial.

    Args:
        dim: head dimension of the tensors to rotate (even).
        base: ``rope_theta``; frequencies ``base ** (-2i / rotary_dim)`` before scaling.
        layout: ``"half"`` (HF, GPT-NeoX) or ``"interleaved"`` (GPT-J, Meta, rotary-embedding-torch, timm).
        rotary_dim: rotated channels (default ``dim``; ``dim * partial_rotary_factor`` in HF terms); even.
        scaling: ``None``, an HF ``rope_scaling`` dict or :class:`~omnipos.core.RopeScaling` (see
            :func:`~omnipos.core.rope_frequencies`). ``"dynamic"`` and ``"longrope"`` read the length
            ``max(positions) + 1`` of each call and keep nothing between calls. yarn / longrope multiply cos and
            sin by their attention factor, as HF does.
        xpos: xPos (Sun et al. 2022): slot ``i`` of q is multiplied and of k divided by
            ``zeta_i ** ((n - N // 2) / xpos_scale_base)``, ``zeta_i = (2i + 0.4 R) / (1.4 R)``, N the sequence
            length (rotary-embedding-torch's convention; the centre cancels in q.k). Needs :meth:`forward` with q and
            k together.
        xpos_scale_base: 512 as in the paper.
        n_axes: ``None`` for 1-D positions ``[..., seq]``. An int for N-D axial RoPE with positions
            ``[..., seq, n_axes]``: the frequency slots are split into ``n_axes`` equal groups, group ``a`` a full
            RoPE ladder of its own (``base ** (-2i / (rotary_dim / n_axes))``) turned by coordinate ``a``; with
            ``layout="interleaved"`` the channels are ``[axis 0 block | axis 1 block | ...]`` of ``rotary_dim /
            n_axes`` channels each. That is rotary-embedding-torch's ``get_axial_freqs(H, W)`` (with
            ``RotaryEmbedding(dim=rotary_dim / n_axes, freqs_for='lang')``) and timm's ``RotaryEmbeddingCat(
            in_pixels=False, grid_indexing='ij')`` for 2-D positions ``(row, col)`` of a row-major patch grid
            (``grid_indexing='xy'`` is ``(col, row)``); timm's ``temperature`` is ``base``, EVA02's real-valued
            ``t = arange(n) / n * 16`` are just positions. With ``"half"`` slot ``j`` pairs channels ``(j, j + R/2)``
            as always, which is the same model after :func:`convert_rope_layout`. ``rotary_dim`` must be a
            multiple of ``2 * n_axes``; scaling ``"dynamic"``/``"longrope"`` and xPos are 1-D only.

    Positions: integer or real-valued, any batch shape: ``[seq]``, ``[batch, seq]`` (left-aligned with x's leading
    axes, e.g. HF ``position_ids`` for x ``[batch, heads, seq, dim]``), per-document positions of a packed batch
    (:func:`~omnipos.core.packed_positions` with x ``[total, heads, dim]`` and ``seq_dim=0``), offsets for a KV cache
    (``arange(past, past + seq)``). Finite, any device (moved to x's).

    Shape:
        - ``cos_sin(positions)`` -> (cos, sin), each ``[*positions.shape, rotary_dim]`` (axial:
          ``[*positions.shape[:-1], rotary_dim]``), float32 by default.
        - ``rotate(x, positions, *, seq_dim=-2)``: x ``[..., seq, ..., dim]`` -> same shape and dtype.
        - ``forward(q, k, positions, *, seq_dim=-2)`` -> (q, k) rotated; q and k may differ in the head axis (GQA).
    """

    inv_freq: torch.Tensor

    def __init__(
        self,
        dim: int,
        *,
        base: float = 10000.0,
        layout: str = "half",
        rotary_dim: int | None = None,
        scaling: RopeScaling | Mapping[str, Any] | None = None,
        xpos: bool = False,
        xpos_scale_base: float = 512.0,
        n_axes: int | None = None,
    ) -> None:
        super().__init__()
        self.dim = check_even_dim(dim, "dim")
        self.layout = check_choice(layout, "layout", ROPE_LAYOUTS)
        self.rotary_dim = self.dim if rotary_dim is None else check_even_dim(rotary_dim, "rotary_dim")
        if self.rotary_dim > self.dim:
            raise ValueError(f"rotary_dim={self.rotary_dim} is larger than the head dim dim={self.dim}")
        self.n_axes = None if n_axes is None else check_positive_int(n_axes, "n_axes")
        axes = self.n_axes or 1
        if self.rotary_dim % (2 * axes):
            raise ValueError(f"rotary_dim={self.rotary_dim} must be a multiple of 2 * n_axes = {2 * axes}")
        if isinstance(base, bool) or not isinstance(base, (int, float)):
            raise TypeError(f"base must be a number, got {type(base).__name__} ({base!r})")
        self.base = float(base)
        self.scaling = as_rope_scaling(scaling, base=self.base)
        self.xpos = bool(xpos)
        self.xpos_scale_base = float(xpos_scale_base)
        if not self.xpos_scale_base > 0:
            raise ValueError(f"xpos_scale_base must be > 0, got {xpos_scale_base}")
        if self.n_axes is not None and (self.xpos or self.scaling.rope_type in _LENGTH_DEPENDENT):
            raise ValueError(
                "n_axes (axial RoPE) does not combine with xpos or with length-dependent scaling "
                f"({self.scaling.rope_type!r}): whose length would it be?"
            )
        self.axis_dim = self.rotary_dim // axes
        self.attention_factor = float(rope_frequencies(self.axis_dim, base=self.base, scaling=self.scaling)[1])
        # float64, kept float64 by module.half() and rebuilt after meta-device init (ConstantBuffers)
        self.register_constants()

    def compute_constants(self, device: torch.device | None) -> dict[str, torch.Tensor]:
        return {"inv_freq": rope_frequencies(self.axis_dim, base=self.base, scaling=self.scaling, device=device)[0]}

    def extra_repr(self) -> str:
        parts = [f"dim={self.dim}", f"base={self.base:g}", f"layout={self.layout!r}"]
        if self.rotary_dim != self.dim:
            parts.append(f"rotary_dim={self.rotary_dim}")
        if self.scaling.rope_type != "default":
            parts.append(f"scaling={self.scaling.rope_type!r}")
        if self.xpos:
            parts.append(f"xpos=True, xpos_scale_base={self.xpos_scale_base:g}")
        if self.n_axes is not None:
            parts.append(f"n_axes={self.n_axes}")
        return ", ".join(parts)

    # -- positions -> angles ------------------------------------------------------------------------------------

    def _positions(self, positions: Any, device: torch.device) -> torch.Tensor:
        positions = as_position_tensor(positions, device=device)
        if positions.dtype in (torch.float16, torch.bfloat16):
            raise TypeError(
                f"positions must be integers or float32/float64, got {positions.dtype}: it cannot hold positions "
                "exactly (bfloat16 has 8 bits of mantissa: 1030 positions collapse to 514 values)"
            )
        if positions.device != device:
            positions = positions.to(device)
        if not torch.compiler.is_compiling():
            check_finite(positions, "positions")
        if self.n_axes is not None and (positions.ndim < 1 or positions.shape[-1] != self.n_axes):
            raise ValueError(
                f"positions must be [..., seq, n_axes={self.n_axes}] for axial RoPE, got {tuple(positions.shape)}"
            )
        return positions

    def frequencies(self, positions: torch.Tensor) -> torch.Tensor:
        """float64 inverse frequencies ``[rotary_dim // (2 * axes)]`` for these (validated) positions: the fixed
        ``inv_freq``, or for ``"dynamic"``/``"longrope"`` those of the length ``max(positions) + 1``."""
        if self.scaling.rope_type not in _LENGTH_DEPENDENT:
            return self.inv_freq
        seq_len = positions.max().to(torch.float64) + 1 if positions.numel() else None
        return rope_frequencies(self.axis_dim, base=self.base, scaling=self.scaling, seq_len=seq_len,
                                device=self.inv_freq.device)[0]

    def angles(self, positions: Any) -> torch.Tensor:
        """float64 angles ``[*batch, rotary_dim // 2]`` of validated positions (axial: coordinate a turns group a)."""
        positions = self._positions(positions, self.inv_freq.device)
        inv_freq = self.frequencies(positions).to(positions.device)
        if self.n_axes is None:
            return positions.to(torch.float64).unsqueeze(-1) * inv_freq
        return (positions.to(torch.float64).unsqueeze(-1) * inv_freq).flatten(-2)

    def _half_cos_sin(self, positions: torch.Tensor, work: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = cos_sin_of_angles(self.angles(positions), work)
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        return cos, sin

    def cos_sin(self, positions: Any, *, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """Full-width ``(cos, sin)`` ``[*batch, rotary_dim]`` of ``dtype`` (float32 or float64), for
        :func:`apply_rotary`; for ``layout="half"`` equal to HF's ``LlamaRotaryEmbedding`` output (attention
        factor included), computed more precisely."""
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(
                f"dtype must be torch.float32 or torch.float64 (cos/sin are never built lower), got {dtype}"
            )
        cos, sin = self._half_cos_sin(positions, dtype)
        if self.layout == "half":
            return torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        return cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)

    # -- rotation ----------------------------------------------------------------------------------------------

    def _check_x(self, x: Any, name: str, seq_dim: int) -> int:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got {getattr(x, 'dtype', type(x).__name__)}")
        if x.ndim < 2:
            raise ValueError(f"{name} must be [..., seq, ..., dim], got shape {tuple(x.shape)}")
        if x.shape[-1] != self.dim:
            raise ValueError(f"{name} has head dim {x.shape[-1]} (last axis), this RotaryEmbedding has dim={self.dim}")
        if isinstance(seq_dim, bool) or not isinstance(seq_dim, int) or not -x.ndim <= seq_dim < x.ndim \
                or seq_dim % x.ndim == x.ndim - 1:
            raise ValueError(f"seq_dim must index an axis of {name} other than the last (channel) axis, got "
                             f"{seq_dim!r} for shape {tuple(x.shape)}")
        return seq_dim % x.ndim

    def _broadcast_shape(self, positions: torch.Tensor, x: torch.Tensor, seq_axis: int) -> tuple[int, ...]:
        """Shape that puts cos/sin ``[*P, seq, h]`` against x: P left-aligned with x's leading axes."""
        pos_shape = positions.shape if self.n_axes is None else positions.shape[:-1]
        seq = x.shape[seq_axis]
        if len(pos_shape) == 0 or pos_shape[-1] != seq or len(pos_shape) - 1 > seq_axis:
            want = "[..., seq, n_axes]" if self.n_axes is not None else "[seq] or [batch..., seq]"
            if self.n_axes is None and positions.ndim >= 2 and positions.shape[-2] == seq:
                want += f" (axial positions [..., seq, {positions.shape[-1]}] need RotaryEmbedding(..., n_axes=...))"
            raise ValueError(
                f"positions {tuple(positions.shape)} do not fit x {tuple(x.shape)} with seq_dim -> axis {seq_axis} "
                f"(seq = {seq}); expected {want} with leading axes matching x's first axes"
            )
        lead = pos_shape[:-1]
        for i, n in enumerate(lead):
            if n not in (1, x.shape[i]):
                raise ValueError(f"positions {tuple(positions.shape)}: axis {i} has {n}, x has {x.shape[i]} there")
        return (*lead, *([1] * (seq_axis - len(lead))), seq, *([1] * (x.ndim - 2 - seq_axis)), self.rotary_dim // 2)

    def _default_positions(self, x: torch.Tensor, seq_axis: int) -> torch.Tensor:
        if self.n_axes is not None:
            raise ValueError("positions are required for axial RoPE ([..., seq, n_axes])")
        return torch.arange(x.shape[seq_axis], device=x.device)

    def _xpos_scale(self, positions: torch.Tensor, seq: int) -> torch.Tensor:
        r = self.rotary_dim
        zeta = (torch.arange(0, r, 2, dtype=torch.float64, device=positions.device) + 0.4 * r) / (1.4 * r)
        power = (positions.to(torch.float64) - seq // 2).unsqueeze(-1) / self.xpos_scale_base
        return zeta**power

    def rotate(self, x: torch.Tensor, positions: Any = None, *, seq_dim: int = -2) -> torch.Tensor:
        """Rotate ``x [..., seq, ..., dim]`` (axis ``seq_dim`` is the sequence) at ``positions`` (default
        ``arange(seq)``); see the class docstring for the shapes of positions. Same shape and dtype as x."""
        if self.xpos:
            raise ValueError("xpos scales q up and k down: rotate them together with forward(q, k, positions)")
        seq_axis = self._check_x(x, "x", seq_dim)
        positions = self._default_positions(x, seq_axis) if positions is None else positions
        positions = self._positions(positions, x.device)
        shape = self._broadcast_shape(positions, x, seq_axis)
        triton = self._triton_rotate(x, None, positions, seq_axis)
        if triton is not None:
            return triton[0]
        cos, sin = self._half_cos_sin(positions, work_dtype(x.dtype))
        cos, sin = cos.reshape(shape), sin.reshape(shape)
        return rotate_pairs(x, cos, -sin, cos, sin, self.layout, self.rotary_dim)

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: Any = None, *,
                seq_dim: int = -2) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q and k at the same positions (and apply xPos when enabled). q and k must agree in ndim, head
        dim and sequence length; other axes (heads: GQA/MQA) may differ. Returns ``(q_rotated, k_rotated)``."""
        seq_axis = self._check_x(q, "q", seq_dim)
        self._check_x(k, "k", seq_dim)
        if q.ndim != k.ndim or q.shape[seq_axis] != k.shape[seq_axis]:
            raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must have the same number of axes and "
                             f"sequence length (axis {seq_axis}); only the heads may differ")
        positions = self._default_positions(q, seq_axis) if positions is None else positions
        positions = self._positions(positions, q.device)
        shape = self._broadcast_shape(positions, q, seq_axis)
        self._broadcast_shape(positions, k, seq_axis)
        if not self.xpos:
            triton = self._triton_rotate(q, k, positions, seq_axis)
            if triton is not None:
                return triton
        cos, sin = self._half_cos_sin(positions, work_dtype(q.dtype, k.dtype))
        cos, sin = cos.reshape(shape), sin.reshape(shape)
        if not self.xpos:
            return (rotate_pairs(q, cos, -sin, cos, sin, self.layout, self.rotary_dim),
                    rotate_pairs(k, cos, -sin, cos, sin, self.layout, self.rotary_dim))
        scale = self._xpos_scale(positions, q.shape[seq_axis]).to(cos.dtype).reshape(shape)
        qc, qs, kc, ks = cos * scale, sin * scale, cos / scale, sin / scale
        return (rotate_pairs(q, qc, -qs, qc, qs, self.layout, self.rotary_dim),
                rotate_pairs(k, kc, -ks, kc, ks, self.layout, self.rotary_dim))

    def _triton_rotate(self, q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor,
                       seq_axis: int) -> tuple[torch.Tensor, ...] | None:
        """The fused CUDA kernel when it applies (CUDA tensors, Triton importable, no xPos, not compiling)."""
        if not q.is_cuda or self.xpos or torch.compiler.is_compiling():
            return None
        from . import rope_triton  # imports Triton: only when a CUDA tensor arrives

        return rope_triton.maybe_rotate(q, k, positions, self.frequencies(positions).to(q.device),
                                        seq_axis=seq_axis, rotary_dim=self.rotary_dim,
                                        interleaved=self.layout == "interleaved",
                                        attention_factor=self.attention_factor, n_axes=self.n_axes)
