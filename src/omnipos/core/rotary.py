"""Rotary position embeddings (RoPE, Su et al. 2021) in both layouts in use, every HF scaling, xPos, N-D axial and
multimodal (M-RoPE) positions.

Each frequency slot ``i`` (``rotary_dim // 2`` of them) rotates one pair of channels by the angle
``theta_i = p * inv_freq_i``; the layout names which two channels form the pair:

- ``"half"`` (GPT-NeoX, HF transformers, flash-attn ``interleaved=False``): channels ``(i, i + rotary_dim/2)``;
  ``cos = cat(cos(theta), cos(theta))``; ``y[:h] = x[:h] cos - x[h:] sin``, ``y[h:] = x[h:] cos + x[:h] sin``.
- ``"interleaved"`` (GPT-J, Meta LLaMA, torchtune, rotary-embedding-torch, timm): channels ``(2i, 2i + 1)``,
  rotated as the complex number ``x[2i] + j x[2i+1]``; ``cos = repeat_interleave(cos(theta), 2)``.

Channels past ``rotary_dim`` pass through unchanged (partial rotary, GPT-NeoX / Phi). With positions of several
coordinates (axial RoPE, M-RoPE) slot ``i`` is turned by coordinate ``slot_axis[i]``: see
:mod:`~omnipos.core.rope_axes`.

Precision: the phase ``p * inv_freq / 2 pi`` is formed in float64 and reduced to under one turn before ``sin`` and
``cos``, which run in float32 (float64 for float64 inputs), whatever the dtype of the rotated tensors or positions;
low-precision inputs are rotated in float32 and rounded once at the end. No cos/sin cache is kept, so nothing can go
stale (offsets, lengths, devices, dtypes): cos/sin are ``[positions, rotary_dim / 2]``, small next to q and k.

On CUDA (the fused kernel of :mod:`~omnipos.core.rope_triton`) a call is capture-safe: no host tensor is made or
copied and no value is read on the host (integer positions; float positions are checked for NaN in eager mode, not
while a CUDA graph is captured). xPos runs the eager rotation on the device, also capture-safe: its zeta table is
kept per device and its range check (one value read) runs in eager mode, not while a graph is captured. What a
module keeps is derived from shapes and constants only: the kernel's frequency and slot tables (and xPos' zeta) per
device, an ``arange`` per device for default positions, and per signature (shapes, strides, dtypes, devices of q, k
and positions; q alone for :meth:`RotaryEmbedding.rotate`) the fact that its checks passed and, on CUDA, the launch
plan; all dropped by ``.to()`` and left out of pickles and copies. Warm up once before capturing a module whose
constants sit on another device (the first call copies them). While ``torch.compile`` traces a CUDA model, the
kernel is the registered op ``torch.ops.omnipos.rope_qk`` (no graph break, symbolic lengths).

The pieces: frequencies and scalings in :mod:`~omnipos.core.rope_scaling`, slot -> coordinate maps in
:mod:`~omnipos.core.rope_axes`, the rotation kernels in
:mod:`~omnipos.core.rope_kernels` (CPU/eager) and :mod:`~omnipos.core.rope_triton` (CUDA), the functional form in
:mod:`~omnipos.core.rope_functional`, checkpoint layout conversion in :mod:`~omnipos.core.rope_layout`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from . import rope_kernels
from .checks import (
    as_position_tensor,
    can_inspect_values,
    check_choice,
    check_even_dim,
    check_finite,
    check_integer_tensor,
    check_positive_int,
    to_device,
)
from .constants import ConstantBuffers
from .phase import cos_sin_of_angles
from .rope_axes import (
    AXES_ORDERS,
    FREQUENCY_RULES,
    PASSTHROUGH_SIDES,
    axial_slot_axes,
    check_axes_dims,
    check_mrope_section,
    linspace_frequencies,
    mrope_slot_axes,
)
from .rope_config import rope_arguments_from_config
from .rope_diffusion import rope_arguments_from_diffusers
from .rope_kernels import ROPE_LAYOUTS, rotate_pairs, work_dtype
from .rope_scaling import RopeScaling, as_rope_scaling, resolve_base, rope_frequencies

__all__ = ["RotaryEmbedding"]

# rope types whose frequencies depend on the length being encoded (max(position) + 1)
_LENGTH_DEPENDENT = ("dynamic", "longrope")


# what a module keeps per device and per signature (dropped by .to() / _apply, pickling and deepcopy)
_CACHES = ("_tables", "_aranges", "_plans", "_checked", "_xpos_tables")

# launch plans kept per module (one per signature of q, k and positions); a model has a handful
_MAX_PLANS = 256


def _signature(q: torch.Tensor, k: torch.Tensor | None, positions: Any, seq_dim: int) -> tuple[Any, ...] | None:
    """What the checks and the launch of a q+k (or q-only, ``k=None``) call depend on besides values: shapes,
    strides, dtypes, devices; None for arguments that are not plain tensors (lists, tensor subclasses: always the
    checked path). A q-only key is shorter than a q+k key: the two never collide in one cache."""
    if type(q) is not torch.Tensor or type(seq_dim) is not int:
        return None
    if positions is None:
        where = None
    elif type(positions) is torch.Tensor:
        where = (positions.shape, positions.stride(), positions.dtype, positions.device)
    else:
        return None
    if k is None:
        return (q.shape, q.stride(), q.dtype, q.device, seq_dim, where)
    if type(k) is not torch.Tensor:
        return None
    return (q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device, seq_dim, where)


def _capturing(t: torch.Tensor) -> bool:
    """Whether a value check of ``t`` must be skipped because a CUDA graph is being captured: a CUDA tensor while
    the current stream captures (reading it would be a sync, an error there). The one place that decides it (the
    meta dispatch-mode test replaces it to run the capture branch on meta tensors)."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def _from_dict_or_argument(argument: Any, from_dict: Any, name: str) -> Any:
    """An M-RoPE setting given as an argument or in the scaling dict; both is fine when they agree."""
    if argument is None:
        return from_dict
    if from_dict is not None:
        same = tuple(argument) == tuple(from_dict) if name == "mrope_section" else bool(argument) == bool(from_dict)
        if not same:
            raise ValueError(f"{name}={argument!r} disagrees with scaling['{name}']={from_dict!r}; give one")
    return argument


class RotaryEmbedding(ConstantBuffers):
    """Rotary position embedding for q and k: both layouts, HF scalings, partial rotary, xPos, N-D axial and
    multimodal (M-RoPE) positions.

    Args:
        dim: head dimension of the tensors to rotate (even).
        base: ``rope_theta``; frequencies ``base ** (-2i / rotary_dim)`` before scaling. ``None`` (the default):
            ``scaling["rope_theta"]`` when the dict has it (transformers v5 ``rope_parameters``), else 10000.
            An explicit base that disagrees with the dict's ``rope_theta`` is a ValueError.
        layout: ``"half"`` (HF, GPT-NeoX) or ``"interleaved"`` (GPT-J, Meta, rotary-embedding-torch, timm).
        rotary_dim: rotated channels (default ``dim``, or ``int(dim * partial_rotary_factor)`` when the scaling
            dict has that key, as HF computes it); even. Channels past it pass through.
        scaling: ``None``, an HF ``rope_scaling`` / v5 ``rope_parameters`` dict or
            :class:`~omnipos.core.RopeScaling` (see :func:`~omnipos.core.rope_frequencies`), e.g.
            ``scaling=config.rope_parameters``: ``rope_theta``, ``partial_rotary_factor``, ``mrope_section`` and
            ``mrope_interleaved`` are read from it. ``"dynamic"`` and ``"longrope"`` read the length
            ``max(positions) + 1`` of each call and keep nothing between calls. yarn / longrope multiply cos and
            sin by their attention factor, as HF does. ``"proportional"`` (Gemma 4) turns only the first
            ``partial_rotary_factor`` of the slots, over the whole ``dim``.
        layer_type: for a ``rope_parameters`` dict nested by layer type (``{"full_attention": {...},
            "sliding_attention": {...}}``), the entry to use; required for such a dict.
        xpos: xPos (Sun et al. 2022): slot ``i`` of q is multiplied and of k divided by
            ``zeta_i ** ((n - xpos_center) / xpos_scale_base)``, ``zeta_i = (2i + 0.4 R) / (1.4 R)``, ``n`` the
            absolute position. In ``q . k`` only ``n_q - n_k`` remains, so a KV cache (keys rotated at prefill,
            queries one step at a time) gives exactly the scores of one full call. Needs :meth:`forward` with q
            and k together.
            On CUDA xPos takes the eager rotation (not the fused kernel); it is capture-safe (see the module doc).
        xpos_scale_base: 512 as in the paper.
        xpos_center: the position where the xPos scale is 1 (default 0). Scores do not depend on it; it only
            keeps the scales inside the dtype's range: ``zeta_0 ** (d / xpos_scale_base)`` must stay within
            ``2 ** (+-maxexp / 2)`` of the output dtype (``|n - xpos_center|`` up to ~18k positions for
            float32/bfloat16, ~2.2k for float16, ~145k for float64 at the defaults); positions further away are
            a ValueError. Put it in the middle of the positions you use (e.g. half the context length).
            rotary-embedding-torch centres on each call's ``seq_len // 2`` instead, which breaks KV caching
            (its issue #27); ``xpos_center=seq_len // 2`` with positions ``arange(seq_len)`` reproduces it.
        n_axes: ``None`` for 1-D positions ``[..., seq]``. An int for N-D axial RoPE with positions
            ``[..., seq, n_axes]``: the frequency slots are split into ``n_axes`` groups, group ``a`` a full RoPE
            ladder of its own (``base ** (-2i / d_a)``, ``d_a = axes_dims[a]``, equal split by default) turned by
            coordinate ``a``; with ``layout="interleaved"`` the channels are ``[axis 0 block | axis 1 block | ...]``
            of ``d_a`` channels each. That is rotary-embedding-torch's ``get_axial_freqs(H, W)`` (with
            ``RotaryEmbedding(dim=rotary_dim / n_axes, freqs_for='lang')``) and timm's ``RotaryEmbeddingCat(
            in_pixels=False, grid_indexing='ij')`` for 2-D positions ``(row, col)`` of a row-major patch grid
            (``grid_indexing='xy'`` is ``(col, row)``); timm's ``temperature`` is ``base``, EVA02's real-valued
            ``t = arange(n) / n * 16`` are just positions. With ``"half"`` slot ``j`` pairs channels ``(j, j + R/2)``
            as always, which is the same model after :func:`convert_rope_layout`. Scaling ``"dynamic"`` /
            ``"longrope"`` and xPos are 1-D only.
        axes_dims: unequal per-axis rotary dims for axial RoPE (each even, summing to ``rotary_dim``; ``n_axes``
            defaults to its length): HunyuanVideo's ``rope_dim_list``, e.g. ``RotaryEmbedding(128, n_axes=3,
            axes_dims=(16, 56, 56), layout="interleaved")`` for positions ``(t, h, w)``.
        mrope_section: M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): positions ``[..., seq, 3]`` (t, h, w); one ladder
            over the whole rotary dim whose ``rotary_dim / 2`` slots are shared among t, h and w,
            ``mrope_section = (s_t, s_h, s_w)`` slots each (summing to ``rotary_dim / 2``; Qwen2-VL: (16, 24, 24)).
            Default: the scaling dict's ``mrope_section``. A text token (the same id on all three axes) gets
            exactly 1-D RoPE. ``cos_sin(positions)`` equals transformers' ``Qwen2VLRotaryEmbedding`` output for
            ``position_ids = positions.permute(-1, *range(positions.ndim - 1))`` (HF lays ids out ``[3, batch,
            seq]``; omnipos puts the axes last).
        mrope_interleaved: Qwen3-VL's interleaved sections (slot ``j`` takes h for ``j % 3 == 1``, w for
            ``j % 3 == 2``, below ``3 * s_h`` / ``3 * s_w``; t otherwise) instead of contiguous ones (Qwen2/2.5-VL).
            Default: the scaling dict's value, else False.
        inv_freq: the escape hatch for frequencies no formula covers: ``Tensor[rotary_dim // 2]`` (or a list),
            finite and >= 0, one per frequency slot (for axial RoPE the per-axis ladders one after another). It
            replaces the ladder ``base ** (-2i / rotary_dim)``; layouts, partial rotary, positions, M-RoPE / axial
            slots and the kernels are unchanged. Kept in float64. Refused with ``base=`` or a scaling other than
            ``"default"`` (which of the two would set the frequencies?).
        frequency_rule: how each axis's ladder of ``d_a`` channels is built: ``"geometric"`` (default)
            ``base ** (-arange(0, d_a, 2) / d_a)``; ``"linspace"`` (LTX-Video) ``base ** linspace(0, 1, d_a / 2) *
            pi / 2``, meant for coordinates in [-1, 1]. Only with the default scaling and no ``inv_freq``.
        axes_order: which axis turns slot ``j`` in axial RoPE: ``"blocks"`` (default; ``d_a / 2`` consecutive slots
            per axis: Flux, HunyuanVideo, Wan, CogVideoX) or ``"interleaved"`` (axis ``j % n_axes``, frequency
            ``j // n_axes`` of the ladder: LTX-Video); needs equal ``axes_dims``.
        passthrough: where the ``dim - rotary_dim`` channels that are not rotated sit: ``"back"`` (default,
            partial rotary) or ``"front"`` (LTX-Video's ``dim % 6`` channels with cos 1 / sin 0 first). ``cos_sin``
            always covers the ``rotary_dim`` rotated channels only. With ``axes_dims`` and no ``rotary_dim``, the
            rotary dim is ``sum(axes_dims)`` (at most ``dim``): the remainder passes through.

    Build from a model's config with :meth:`from_config` (``RotaryEmbedding.from_config(config)``), from a diffusers
    position module with :meth:`from_diffusers`.

    Positions: integer or real-valued, any batch shape: ``[seq]``, ``[batch, seq]`` (left-aligned with x's leading
    axes, e.g. HF ``position_ids`` for x ``[batch, heads, seq, dim]``), per-document positions of a packed batch
    (:func:`~omnipos.core.packed_positions` with x ``[total, heads, dim]`` and ``seq_dim=0``), offsets for a KV cache
    (``arange(past, past + seq)``); for axial RoPE and M-RoPE a trailing coordinate axis (``[..., seq, n_axes]``,
    ``[..., seq, 3]``). Finite (checked in eager mode; skipped while ``torch.compile`` traces), any device (moved
    to x's).

    Shape:
        - ``cos_sin(positions)`` -> (cos, sin), each ``[*batch, seq, rotary_dim]``, float32 by default.
        - ``rotate(x, positions, *, seq_dim=-2)``: x ``[..., seq, ..., dim]`` -> same shape and dtype.
        - ``forward(q, k, positions, *, seq_dim=-2)`` -> (q, k) rotated; q and k may differ in the head axis (GQA).
    """

    inv_freq: torch.Tensor

    def __init__(
        self,
        dim: int,
        *,
        base: float | None = None,
        layout: str = "half",
        rotary_dim: int | None = None,
        scaling: RopeScaling | Mapping[str, Any] | None = None,
        layer_type: str | None = None,
        xpos: bool = False,
        xpos_scale_base: float = 512.0,
        xpos_center: float = 0.0,
        n_axes: int | None = None,
        axes_dims: Sequence[int] | None = None,
        mrope_section: Sequence[int] | None = None,
        mrope_interleaved: bool | None = None,
        inv_freq: torch.Tensor | Sequence[float] | None = None,
        frequency_rule: str = "geometric",
        axes_order: str = "blocks",
        passthrough: str = "back",
    ) -> None:
        super().__init__()
        self.dim = check_even_dim(dim, "dim")
        self.layout = check_choice(layout, "layout", ROPE_LAYOUTS)
        self.frequency_rule = check_choice(frequency_rule, "frequency_rule", FREQUENCY_RULES)
        self.axes_order = check_choice(axes_order, "axes_order", AXES_ORDERS)
        self.passthrough = check_choice(passthrough, "passthrough", PASSTHROUGH_SIDES)
        self.scaling = as_rope_scaling(scaling, base=base, layer_type=layer_type)
        self.base = resolve_base(base, self.scaling)
        if rotary_dim is None and axes_dims is not None and self.scaling.partial_rotary_factor is None:
            rotary_dim = sum(check_axes_dims(axes_dims, None, n_axes, self.dim))  # the rest of dim passes through
        self.rotary_dim = self._resolve_rotary_dim(rotary_dim)
        self._given_inv_freq = None if inv_freq is None else self._check_inv_freq(inv_freq, base)
        self.xpos = bool(xpos)
        self.xpos_scale_base = float(xpos_scale_base)
        if not (math.isfinite(self.xpos_scale_base) and self.xpos_scale_base > 0):
            raise ValueError(f"xpos_scale_base must be a finite number > 0, got {xpos_scale_base}")
        if isinstance(xpos_center, bool) or not isinstance(xpos_center, (int, float)) or \
                not math.isfinite(xpos_center):
            raise ValueError(f"xpos_center must be a finite number, got {xpos_center!r}")
        self.xpos_center = float(xpos_center)

        section = _from_dict_or_argument(mrope_section, self.scaling.mrope_section, "mrope_section")
        interleaved = _from_dict_or_argument(mrope_interleaved, self.scaling.mrope_interleaved, "mrope_interleaved")
        self.mrope_interleaved = bool(interleaved) if interleaved is not None else False
        if section is None and interleaved:
            raise ValueError("mrope_interleaved=True needs mrope_section (the t, h, w slot counts)")
        self.mrope_section = None
        self.n_axes = None if n_axes is None else check_positive_int(n_axes, "n_axes")
        self.axes_dims = None
        if section is not None:
            if n_axes is not None or axes_dims is not None:
                raise ValueError("mrope_section (M-RoPE: one ladder shared by t, h, w) and n_axes / axes_dims (axial "
                                 "RoPE: one ladder per axis) are two different models; give one of them")
            self.mrope_section = check_mrope_section(section, self.rotary_dim // 2, interleaved=self.mrope_interleaved)
        elif axes_dims is not None:
            self.axes_dims = check_axes_dims(axes_dims, self.rotary_dim, self.n_axes, self.dim)
            self.n_axes = len(self.axes_dims)
        elif self.n_axes is not None:
            if self.rotary_dim % (2 * self.n_axes):
                raise ValueError(f"rotary_dim={self.rotary_dim} must be a multiple of 2 * n_axes = {2 * self.n_axes} "
                                 "(or give unequal per-axis dims with axes_dims=)")
            self.axes_dims = (self.rotary_dim // self.n_axes,) * self.n_axes
        kind = self.scaling.rope_type
        self._check_rules(kind, inv_freq)
        if self.position_axes is not None and self.xpos:
            raise ValueError("xpos is 1-D only: it does not combine with n_axes / axes_dims / mrope_section")
        if self.axes_dims is not None and kind in _LENGTH_DEPENDENT:
            raise ValueError(f"n_axes (axial RoPE) does not combine with length-dependent scaling ({kind!r}): whose "
                             "length would it be?")
        factors = {rope_frequencies(d, base=self.base, scaling=self.scaling)[1] for d in self._ladder_dims()}
        if len(factors) != 1:
            raise ValueError(f"scaling gives different attention factors {sorted(factors)} for axes_dims="
                             f"{self.axes_dims}; one factor must scale cos and sin")
        self.attention_factor = float(factors.pop())
        # float64, kept float64 by module.half() and rebuilt after meta-device init (ConstantBuffers)
        self.register_constants()

    @classmethod
    def from_diffusers(cls, module: Any, *, theta: float | None = None) -> RotaryEmbedding:
        """The rotary embedding of a diffusers position module: ``FluxPosEmbed``, ``HunyuanVideoRotaryPosEmbed``,
        ``WanRotaryPosEmbed`` (``theta=``: the model's, not kept on the module; default 10000, checked) or
        ``LTXVideoRotaryPosEmbed``; see :func:`~omnipos.core.rope_arguments_from_diffusers` for the positions each
        takes. CogVideoX: ``RotaryEmbedding(**cogvideox_rope_arguments(head_dim))``."""
        return cls(**rope_arguments_from_diffusers(module, theta=theta))

    def _check_rules(self, kind: str, inv_freq: Any) -> None:
        if self.frequency_rule != "geometric" and (kind != "default" or inv_freq is not None):
            raise ValueError(f"frequency_rule={self.frequency_rule!r} sets the frequencies itself; it does not combine "
                             f"with scaling rope_type={kind!r} or inv_freq= (leave frequency_rule='geometric')")
        if self.axes_order == "interleaved":
            if self.axes_dims is None or len(set(self.axes_dims)) != 1:
                raise ValueError(f"axes_order='interleaved' (slot j turned by axis j % n_axes) needs axial RoPE with "
                                 f"equal axes_dims, got axes_dims={self.axes_dims}")
        if self.passthrough == "front" and self.xpos:
            raise ValueError("passthrough='front' does not combine with xpos")

    @classmethod
    def from_config(cls, config: Any, *, layer_type: str | None = None,
                    layout: str | None = None) -> RotaryEmbedding:
        """The rotary embedding a model config describes (transformers v4 ``rope_scaling`` or v5
        ``rope_parameters``, a VLM's top-level config or ``text_config``, the ``config.json`` dict, or a model,
        whose ``.config`` is read).

        Head dim, partial rotary factor, theta, scaling, ``max_position_embeddings`` (dynamic, longrope / yarn
        without ``factor``), ``original_max_position_embeddings``, M-RoPE section and interleaving all come from the
        config, as transformers' rope code reads them; see :func:`~omnipos.core.rope_arguments_from_config`.
        ``layer_type`` picks the entry of per-layer-type parameters (``"full_attention"``,
        ``"sliding_attention"``). ``layout`` defaults to the family's (``"interleaved"`` for GLM, Cohere, ERNIE 4.5, Llama 4 and
        DeepSeek-V2 (complex ``freqs_cis``), and DeepSeek-V3 with ``rope_interleave``, whose output transformers
        returns de-interleaved: see :func:`~omnipos.core.deinterleaved_channel_order`); configs as transformers 4
        wrote them give each layer type its own RoPE (Gemma 3's ``rope_local_base_freq``, Olmo 3's flat
        ``rope_scaling``: see :func:`~omnipos.core.rope_arguments_from_config`); whether a layer uses RoPE at all:
        :func:`~omnipos.core.rope_layers`. To put the result into a transformers model:
        ``omnipos.integrations.transformers.patch_rotary(model)``.
        """
        arguments = rope_arguments_from_config(config, layer_type=layer_type)
        if layout is not None:
            arguments["layout"] = layout
        return cls(**arguments)

    def _check_inv_freq(self, inv_freq: Any, base: Any) -> torch.Tensor:
        if base is not None:
            raise ValueError("base and inv_freq both set the frequencies; give one of them")
        if self.scaling.rope_type != "default":
            raise ValueError(f"inv_freq replaces the frequencies that scaling rope_type={self.scaling.rope_type!r} "
                             "would compute; give one of them (apply your scaling to inv_freq)")
        if isinstance(inv_freq, (str, bytes)) or not isinstance(inv_freq, (torch.Tensor, Sequence)) and \
                not hasattr(inv_freq, "__array__"):
            raise TypeError(f"inv_freq must be a 1-D tensor or list of numbers, got {type(inv_freq).__name__}")
        if isinstance(inv_freq, torch.Tensor) and (inv_freq.is_meta or inv_freq.is_complex() or inv_freq.dtype
                                                   == torch.bool):
            raise TypeError(f"inv_freq must be a real tensor with values, got {inv_freq.dtype} on {inv_freq.device}")
        values = torch.as_tensor(inv_freq, dtype=torch.float64, device="cpu").detach().clone()
        if values.ndim != 1 or values.numel() != self.rotary_dim // 2:
            raise ValueError(f"inv_freq must be 1-D with rotary_dim // 2 = {self.rotary_dim // 2} frequencies (one "
                             f"per slot), got shape {tuple(values.shape)}")
        if not bool(torch.isfinite(values).all()) or bool((values < 0).any()):
            raise ValueError(f"inv_freq must be finite and >= 0, got {values.tolist()}")
        return values

    def _resolve_rotary_dim(self, rotary_dim: int | None) -> int:
        factor = self.scaling.partial_rotary_factor
        derived = None
        if factor is not None and self.scaling.rope_type != "proportional":  # proportional turns part of all dims
            derived = int(self.dim * factor)
        if rotary_dim is None:
            rotary_dim = self.dim if derived is None else check_even_dim(
                derived, f"rotary_dim (dim * scaling['partial_rotary_factor'] = {self.dim} * {factor})")
        else:
            rotary_dim = check_even_dim(rotary_dim, "rotary_dim")
            if derived is not None and derived != rotary_dim:
                raise ValueError(f"rotary_dim={rotary_dim} disagrees with dim * scaling['partial_rotary_factor'] = "
                                 f"{self.dim} * {factor} = {derived}; give one of them")
        if rotary_dim > self.dim:
            raise ValueError(f"rotary_dim={rotary_dim} is larger than the head dim dim={self.dim}")
        return rotary_dim

    @property
    def position_axes(self) -> int | None:
        """Coordinates per position: None (1-D), ``n_axes`` (axial) or 3 (M-RoPE: t, h, w)."""
        return 3 if self.mrope_section is not None else self.n_axes

    def _ladder_dims(self) -> tuple[int, ...]:
        return self.axes_dims if self.axes_dims is not None else (self.rotary_dim,)

    def _ladder(self, seq_len: Any = None, device: torch.device | None = None) -> torch.Tensor:
        """float64 frequency of each slot ``[rotary_dim // 2]`` (axial: the per-axis ladders one after another)."""
        if self.frequency_rule == "linspace":
            ladders = [linspace_frequencies(d, self.base, device=device) for d in self._ladder_dims()]
        else:
            ladders = [rope_frequencies(d, base=self.base, scaling=self.scaling, seq_len=seq_len, device=device)[0]
                       for d in self._ladder_dims()]
        if self.axes_order == "interleaved":  # frequency-major: (f0 axis 0, f0 axis 1, ..., f1 axis 0, ...)
            return torch.stack(ladders, -1).flatten()
        return ladders[0] if len(ladders) == 1 else torch.cat(ladders)

    def _slot_axes(self) -> list[int] | None:
        if self.mrope_section is not None:
            return mrope_slot_axes(self.mrope_section, interleaved=self.mrope_interleaved)
        if self.axes_dims is not None:
            if self.axes_order == "interleaved":
                return [j % self.n_axes for j in range(self.rotary_dim // 2)]
            return axial_slot_axes(self.axes_dims)
        return None

    def compute_constants(self, device: torch.device | None) -> dict[str, torch.Tensor]:
        given = self._given_inv_freq
        # the given frequencies are kept on the CPU; built here with the factories' default device (meta included)
        constants = {"inv_freq": self._ladder(device=device) if given is None else
                     torch.tensor(given.tolist(), dtype=torch.float64, device=device)}
        axes = self._slot_axes()
        if axes is not None:  # which coordinate turns each slot
            constants["slot_axis"] = torch.tensor(axes, dtype=torch.long, device=device)
        return constants

    def extra_repr(self) -> str:
        frequencies = f"base={self.base:g}" if self._given_inv_freq is None else "inv_freq=given"
        parts = [f"dim={self.dim}", frequencies, f"layout={self.layout!r}"]
        if self.rotary_dim != self.dim:
            parts.append(f"rotary_dim={self.rotary_dim}")
        if self.scaling.rope_type != "default":
            parts.append(f"scaling={self.scaling.rope_type!r}")
        if self.xpos:
            parts.append(f"xpos=True, xpos_scale_base={self.xpos_scale_base:g}, xpos_center={self.xpos_center:g}")
        if self.axes_dims is not None:
            parts.append(f"n_axes={self.n_axes}")
            if len(set(self.axes_dims)) > 1:
                parts.append(f"axes_dims={self.axes_dims}")
        if self.frequency_rule != "geometric":
            parts.append(f"frequency_rule={self.frequency_rule!r}")
        if self.axes_order != "blocks":
            parts.append(f"axes_order={self.axes_order!r}")
        if self.passthrough != "back":
            parts.append(f"passthrough={self.passthrough!r}")
        if self.mrope_section is not None:
            parts.append(f"mrope_section={self.mrope_section}")
            if self.mrope_interleaved:
                parts.append("mrope_interleaved=True")
        return ", ".join(parts)

    # -- positions -> angles ------------------------------------------------------------------------------------

    def _positions(self, positions: Any, device: torch.device) -> torch.Tensor:
        positions = as_position_tensor(positions, device=device)
        if positions.dtype in (torch.float16, torch.bfloat16):
            raise TypeError(
                f"positions must be integers or float32/float64, got {positions.dtype}: it cannot hold positions "
                "exactly (bfloat16 has 8 bits of mantissa: 1030 positions collapse to 514 values)"
            )
        positions = to_device(positions, device, "positions")
        # skipped while compiling and on meta tensors (no values), and inside a CUDA graph capture (a host sync
        # there is an error); integer positions are finite by type: no check, no sync
        if positions.is_floating_point() and not _capturing(positions):
            check_finite(positions, "positions")
        axes = self.position_axes
        if axes is not None and (positions.ndim < 2 or positions.shape[-1] != axes):
            if self.mrope_section is not None:
                raise ValueError(
                    f"positions must be [..., seq, 3] (t, h, w ids; axes last) for M-RoPE (mrope_section="
                    f"{self.mrope_section}), got shape {tuple(positions.shape)}; for text give the same id on all "
                    "three axes (positions[..., None].expand(*positions.shape, 3)); HF's [3, batch, seq] ids are "
                    "position_ids.permute(1, 2, 0)"
                )
            raise ValueError(
                f"positions must be [..., seq, n_axes={axes}] for axial RoPE, got {tuple(positions.shape)}"
            )
        return positions

    def frequencies(self, positions: torch.Tensor) -> torch.Tensor:
        """float64 frequency of each slot ``[rotary_dim // 2]`` for these (validated) positions: the fixed
        ``inv_freq``, or for ``"dynamic"``/``"longrope"`` those of the length ``max(positions) + 1``."""
        if self.scaling.rope_type not in _LENGTH_DEPENDENT:
            return self.inv_freq
        seq_len = positions.max().to(torch.float64) + 1 if positions.numel() else None
        return self._ladder(seq_len, positions.device)

    def angles(self, positions: Any, *, device: torch.device | None = None) -> torch.Tensor:
        """float64 angles ``[*batch, seq, rotary_dim // 2]`` of validated positions (multi-axis positions: slot j
        turned by coordinate ``slot_axis[j]``), on ``device`` (default: the module's)."""
        positions = self._positions(positions, self.inv_freq.device if device is None else device)
        inv_freq = self.frequencies(positions).to(positions.device)
        positions = positions.to(torch.float64)
        if self.position_axes is None:
            return positions.unsqueeze(-1) * inv_freq
        return positions.index_select(-1, self.slot_axis.to(positions.device)) * inv_freq

    def attention_factor_at(self, positions: torch.Tensor) -> float | torch.Tensor:
        """The factor multiplying cos and sin for these (validated) positions: ``attention_factor``, except for
        longrope with ``short_mscale`` != ``long_mscale`` (Phi-3.5-MoE), where it is ``long_mscale`` once
        ``max(positions) + 1`` passes ``original_max_position_embeddings`` (a 0-d tensor: no host sync)."""
        s = self.scaling
        if s.rope_type != "longrope" or s.short_mscale is None or s.short_mscale == s.long_mscale:
            return self.attention_factor
        positions = torch.as_tensor(positions)
        if not positions.numel():
            return self.attention_factor
        is_long = positions.max().to(torch.float64) + 1 > s.original_max_position_embeddings
        return torch.where(is_long, torch.tensor(float(s.long_mscale), dtype=torch.float64, device=is_long.device),
                           float(s.short_mscale))

    def _half_cos_sin(self, positions: torch.Tensor, work: torch.dtype,
                      device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = cos_sin_of_angles(self.angles(positions, device=device), work)
        factor = self.attention_factor_at(positions)
        if isinstance(factor, torch.Tensor):
            factor = factor.to(device=cos.device, dtype=cos.dtype)
            return cos * factor, sin * factor
        if factor != 1.0:
            cos, sin = cos * factor, sin * factor
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
        axes = self.position_axes
        pos_shape = positions.shape if axes is None else positions.shape[:-1]
        seq = x.shape[seq_axis]
        if len(pos_shape) == 0 or pos_shape[-1] != seq or len(pos_shape) - 1 > seq_axis:
            want = f"[..., seq, {axes}]" if axes is not None else "[seq] or [batch..., seq]"
            if axes is None and positions.ndim >= 2 and positions.shape[-2] == seq:
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
        """``arange(seq)``; for M-RoPE a text sequence (the same id on t, h and w)."""
        if self.n_axes is not None:
            raise ValueError("positions are required for axial RoPE ([..., seq, n_axes])")
        positions = self._arange(x.shape[seq_axis], x.device)
        return positions.unsqueeze(-1).expand(-1, 3) if self.mrope_section is not None else positions

    def _packed_positions(self, cu_seqlens: Any, positions: Any, x: torch.Tensor, seq_axis: int) -> torch.Tensor:
        """Per-document positions ``[total]`` of a packed batch from ``cu_seqlens``, on x's device: the document
        of each token by ``searchsorted`` (no host sync, no value read on an accelerator)."""
        if positions is not None:
            raise ValueError("give positions or cu_seqlens, not both")
        if self.position_axes is not None:
            raise ValueError("cu_seqlens gives 1-D positions; axial RoPE / M-RoPE need positions [..., seq, n]")
        cu = check_integer_tensor(as_position_tensor(cu_seqlens, "cu_seqlens"), "cu_seqlens")
        if cu.ndim != 1 or cu.numel() == 0:
            raise ValueError(f"cu_seqlens must be 1-D [docs + 1] offsets starting at 0, got {tuple(cu.shape)}")
        cu = to_device(cu, x.device, "cu_seqlens").long()
        total = x.shape[seq_axis]
        if cu.device.type == "cpu" and can_inspect_values(cu) and (
                int(cu[0]) != 0 or int(cu[-1]) != total or bool((cu[1:] < cu[:-1]).any())):
            raise ValueError(f"cu_seqlens must start at 0, never decrease and end at the packed length {total} "
                             f"(axis {seq_axis} of {tuple(x.shape)}), got {cu.tolist()}")
        tokens = self._arange(total, x.device)
        return tokens - cu[torch.searchsorted(cu, tokens, right=True) - 1]

    def _xpos_zeta(self, device: torch.device) -> torch.Tensor:
        """float64 ``zeta_i = (2i + 0.4 R) / (1.4 R)`` on ``device``: built there once (never copied from the host)
        and kept until the module moves, like the kernel's tables."""
        if torch.compiler.is_compiling():
            cache = None
        else:
            cache = self.__dict__.setdefault("_xpos_tables", {})
            if device in cache:
                return cache[device]
        r = self.rotary_dim
        zeta = (torch.arange(0, r, 2, dtype=torch.float64, device=device) + 0.4 * r) / (1.4 * r)
        if cache is not None:
            cache[device] = zeta
        return zeta

    def _xpos_scale(self, positions: torch.Tensor, *dtypes: torch.dtype) -> torch.Tensor:
        """float64 xPos scales ``[*positions.shape, rotary_dim // 2]`` for absolute positions around
        ``xpos_center``; a ValueError when one would leave the range of the output dtypes (see the class doc).

        The range check reads one value on the host: it runs in eager mode, not while ``torch.compile`` traces nor
        while a CUDA graph is captured (as the finiteness check of float positions); everything else stays on the
        positions' device (the zeta table is kept there)."""
        r = self.rotary_dim
        zeta = self._xpos_zeta(positions.device)
        power = (positions.to(torch.float64) - self.xpos_center) / self.xpos_scale_base
        if positions.numel() and can_inspect_values(positions) and not _capturing(positions):
            narrowest = min(dtypes, key=lambda d: torch.finfo(d).max)
            zeta_0 = 0.4 * r / (1.4 * r)  # zeta[0], computed on the host (reading the table would be a sync)
            # |power| at which zeta_0 ** power reaches 2 ** (maxexp / 2): half the exponent range left for q and k
            limit = math.log2(torch.finfo(narrowest).max) / 2 * math.log(2) / math.log(1 / zeta_0)
            worst = float(power.abs().max())
            if worst > limit:
                raise ValueError(
                    f"positions reach |position - xpos_center| = {worst * self.xpos_scale_base:g}, where the xPos "
                    f"scale zeta_0 ** (+-{worst:.4g}) leaves the range of {narrowest} "
                    f"(limit {limit * self.xpos_scale_base:.0f} positions from xpos_center={self.xpos_center:g}); set "
                    "xpos_center near the positions you use (e.g. the middle of the context) or raise xpos_scale_base"
                )
        return zeta ** power.unsqueeze(-1)

    def rotate(self, x: torch.Tensor, positions: Any = None, *, seq_dim: int = -2,
               cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
        """Rotate ``x [..., seq, ..., dim]`` (axis ``seq_dim`` is the sequence) at ``positions`` (default
        ``arange(seq)``); see the class docstring for the shapes of positions and :meth:`forward` for
        ``cu_seqlens``. Same shape and dtype as x. The same path as :meth:`forward` with q alone (on CUDA: one
        launch, its launch plan kept per signature)."""
        if self.xpos:
            raise ValueError("xpos scales q up and k down: rotate them together with forward(q, k, positions)")
        return self._rotate_qk(x, None, positions, seq_dim, cu_seqlens)[0]

    def _rotate_pairs(self, x: torch.Tensor, a1: torch.Tensor, b1: torch.Tensor, a2: torch.Tensor,
                      b2: torch.Tensor) -> torch.Tensor:
        """rotate_pairs over the rotated channels: the last ``rotary_dim`` for ``passthrough="front"``."""
        if self.passthrough == "back" or self.rotary_dim == self.dim:
            return rotate_pairs(x, a1, b1, a2, b2, self.layout, self.rotary_dim)
        kept = self.dim - self.rotary_dim
        rotated = rotate_pairs(x[..., kept:], a1, b1, a2, b2, self.layout, self.rotary_dim)
        return torch.cat((x[..., :kept], rotated), -1)

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: Any = None, *, seq_dim: int = -2,
                cu_seqlens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q and k at the same positions (and apply xPos when enabled). q and k must agree in ndim, head
        dim and sequence length; other axes (heads: GQA/MQA) may differ. Returns ``(q_rotated, k_rotated)``.

        ``cu_seqlens`` (instead of positions): a packed batch (flash-attn's varlen layout, x ``[total, heads,
        dim]`` with ``seq_dim=0``): int ``[docs + 1]`` offsets ``0 = c_0 <= c_1 <= ... = total``; each token is
        turned by its position inside its own document, derived on cu_seqlens' device with no host sync (on the
        CPU the offsets are checked; on an accelerator they are trusted, as flash-attn does)."""
        if k is None:  # (rotate() is the q-only call; None here would be a mistake in the caller)
            raise TypeError("k must be a floating tensor, got None; rotate(q, positions) rotates q alone")
        return self._rotate_qk(q, k, positions, seq_dim, cu_seqlens)

    def _rotate_qk(self, q: torch.Tensor, k: torch.Tensor | None, positions: Any, seq_dim: int,
                   cu_seqlens: Any) -> tuple[torch.Tensor, ...]:
        """q and k (or q alone, ``k=None``: :meth:`rotate`) rotated; one path for both, so a q-only call gets the
        same checks-once-per-signature and launch plans as a q+k call (keys of one cache, see ``_signature``)."""
        key = _signature(q, k, positions, seq_dim) if cu_seqlens is None and not torch.compiler.is_compiling() \
            else None
        known = self.__dict__.get("_checked", {}).get(key) if key is not None else None
        if known is not None:  # a signature checked before: shapes, dtypes and devices are fine
            seq_axis, shape = known
            plan = self.__dict__.get("_plans", {}).get(key)
            if plan is not None and not (torch.is_grad_enabled() and (q.requires_grad or k is not None and
                                                                       k.requires_grad)) and \
                    os.environ.get("OMNIPOS_DISABLE_TRITON") != "1":
                plan, tables = plan  # and the kernel ran for it: only the launch is left
                from . import rope_triton  # (imported already: the plan was made there)

                if positions is None:
                    positions = self._default_positions(q, seq_axis)
                elif positions.is_floating_point() and not _capturing(positions):
                    check_finite(positions, "positions")
                return rope_triton.run_plan(plan, q, k, positions, *tables, self.attention_factor)
            given = positions
            if positions is None:
                positions = self._default_positions(q, seq_axis)
            elif positions.is_floating_point() and not _capturing(positions):
                check_finite(positions, "positions")
        else:
            given = positions
            name = "q" if k is not None else "x"
            seq_axis = self._check_x(q, name, seq_dim)
            if k is not None:
                self._check_x(k, "k", seq_dim)
                if q.ndim != k.ndim or q.shape[seq_axis] != k.shape[seq_axis]:
                    raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must have the same number of axes "
                                     f"and sequence length (axis {seq_axis}); only the heads may differ")
            if cu_seqlens is not None:
                positions = self._packed_positions(cu_seqlens, positions, q, seq_axis)
            positions = self._default_positions(q, seq_axis) if positions is None else positions
            positions = self._positions(positions, q.device)
            shape = self._broadcast_shape(positions, q, seq_axis)
            if k is not None:
                self._broadcast_shape(positions, k, seq_axis)
            if key is not None and (given is None or positions is given):  # positions used as given
                checked = self.__dict__.setdefault("_checked", {})
                if len(checked) >= _MAX_PLANS:
                    checked.clear()
                    self.__dict__.pop("_plans", None)
                checked[key] = (seq_axis, shape)
            else:
                key = None
        if not self.xpos:
            triton = self._triton_rotate(q, k, positions, seq_axis, key)
            if triton is not None:
                return triton
        # (no generators over (q, k) here: a decode step on the CPU is per-op and per-line overhead)
        work = work_dtype(q.dtype) if k is None else work_dtype(q.dtype, k.dtype)
        cos, sin = self._half_cos_sin(positions, work, q.device)
        cos, sin = cos.reshape(shape), sin.reshape(shape)
        if not self.xpos:
            if not cos.requires_grad and rope_kernels.small_rotation_applies(q, self.layout, self.rotary_dim) and \
                    (k is None or rope_kernels.small_rotation_applies(k, self.layout, self.rotary_dim)):
                # a decode step: three ops per tensor, the same bits as rotate_pairs
                cos2, sin2 = torch.cat((cos, cos), -1), torch.cat((-sin, sin), -1)
                qo = rope_kernels.rotate_swapped(q, cos2, sin2)
                return (qo,) if k is None else (qo, rope_kernels.rotate_swapped(k, cos2, sin2))
            qo = self._rotate_pairs(q, cos, -sin, cos, sin)
            return (qo,) if k is None else (qo, self._rotate_pairs(k, cos, -sin, cos, sin))
        # xPos (forward only, q and k): scales from the zeta table kept on q's device, no host tensor
        scale = self._xpos_scale(positions, q.dtype, k.dtype).to(cos.dtype).reshape(shape)
        qc, qs, kc, ks = cos * scale, sin * scale, cos / scale, sin / scale
        return (rotate_pairs(q, qc, -qs, qc, qs, self.layout, self.rotary_dim),
                rotate_pairs(k, kc, -ks, kc, ks, self.layout, self.rotary_dim))

    def _triton_rotate(self, q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor,
                       seq_axis: int, plan_key: Any = None) -> tuple[torch.Tensor, ...] | None:
        """The fused kernel when it applies (a device in ``rope_kernels.KERNEL_DEVICE_TYPES``, Triton importable,
        no xPos). Nothing here reads a value or creates a host tensor: the tables come from :meth:`_device_tables`
        (built once per device), the attention factor is a Python float (longrope with two mscales, whose factor
        depends on the positions, takes the eager path instead: a tensor factor, no sync)."""
        if q.device.type not in rope_kernels.KERNEL_DEVICE_TYPES or self.xpos or \
                (self.passthrough == "front" and self.rotary_dim != self.dim):
            return None
        factor = self.attention_factor_at(positions)
        if isinstance(factor, torch.Tensor):
            return None
        from . import rope_triton  # imports Triton: only when a CUDA tensor arrives

        slot_axis = getattr(self, "slot_axis", None)
        if self.scaling.rope_type in _LENGTH_DEPENDENT:  # frequencies of this call's length, on the device
            tables = rope_triton.device_tables(self.frequencies(positions), None, q.device)
        else:
            tables = self._device_tables(q.device, rope_triton)
        out = rope_triton.maybe_rotate(q, k, positions, None, seq_axis=seq_axis, rotary_dim=self.rotary_dim,
                                       interleaved=self.layout == "interleaved", attention_factor=factor,
                                       slot_axis=slot_axis, tables=tables)
        if out is not None and plan_key is not None and self.scaling.rope_type not in _LENGTH_DEPENDENT and \
                not torch.compiler.is_compiling():
            # this signature passed every check: keep its launch plan, later calls skip straight to the launch
            plan = rope_triton.make_plan(q, k, positions, seq_axis=seq_axis, rotary_dim=self.rotary_dim,
                                         interleaved=self.layout == "interleaved", multi_axis=slot_axis is not None)
            if plan is not None:
                self.__dict__.setdefault("_plans", {})[plan_key] = (plan, tables)
        return out

    def _device_tables(self, device: torch.device, rope_triton: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The kernel's (turns per unit, slot -> coordinate) tables on ``device``, built on the first call there
        and kept until the module moves (``.to()`` / ``_apply`` clears them)."""
        if torch.compiler.is_compiling():  # traced into the graph (a few small ops), no state kept
            return rope_triton.device_tables(self.inv_freq, getattr(self, "slot_axis", None), device)
        cache = self.__dict__.setdefault("_tables", {})
        tables = cache.get(device)
        if tables is None:
            tables = cache[device] = rope_triton.device_tables(self.inv_freq, getattr(self, "slot_axis", None),
                                                                device)
        return tables

    def _arange(self, n: int, device: torch.device) -> torch.Tensor:
        """``arange(n)`` on ``device``: a view of one kept per device (grown by doubling; built there, never
        copied from the host), so default positions cost no allocation per call."""
        if torch.compiler.is_compiling():  # a symbolic length: no cache to guard on
            return torch.arange(n, device=device)
        cache = self.__dict__.setdefault("_aranges", {})
        kept = cache.get(device)
        if kept is None or kept.shape[0] < n:
            kept = cache[device] = torch.arange(max(n, 2 * (0 if kept is None else kept.shape[0]), 16),
                                                device=device)
        return kept[:n]

    def __getstate__(self) -> dict[str, Any]:
        """Pickling and deepcopy leave the per-device caches behind (rebuilt on the first call)."""
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__
        return {key: value for key, value in state.items() if key not in _CACHES}

    def _apply(self, fn: Any, recurse: bool = True) -> RotaryEmbedding:
        self.__dict__.pop("_tables", None)  # built from the constants, which may have moved
        self.__dict__.pop("_aranges", None)
        self.__dict__.pop("_plans", None)
        self.__dict__.pop("_checked", None)
        self.__dict__.pop("_xpos_tables", None)
        return super()._apply(fn, recurse)
