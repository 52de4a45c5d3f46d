"""QK-norm + RoPE: per-head RMSNorm of q and k with their own weights, then the rotary embedding.

Qwen3 (``Qwen3RMSNorm`` on ``head_dim``), Gemma 3 (``Gemma3RMSNorm``: ``1 + weight``) and their relatives normalise
each head of q and k before the rotation; OLMo 2 and OLMo 3 normalise all heads of a token together (their q_norm
over ``num_heads * head_dim``, before the split into heads), then rotate each head. :func:`qk_norm_rope` does both: on CUDA in one fused Triton kernel each
way (:mod:`omnipos.core.qk_norm_triton`), elsewhere (and for the RoPE variants the kernel does not cover: xPos,
front pass-through) as the eager composition with the same numbers: the norm in float32 (float64 for float64
inputs), the rotation of the float32 result, one rounding to the input dtype at the end.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch
from torch import Tensor, nn

from .checks import check_choice
from .rotary import RotaryEmbedding

__all__ = ["QK_NORM_VARIANTS", "QKNormRope", "qk_norm_rope"]

#: Supported QK-norm variants and the constant added to the weight: ``"qwen3"`` (Qwen3, Qwen3-MoE, and every
#: per-head ``x * rsqrt(mean(x^2) + eps) * weight``), ``"gemma3"`` (Gemma 3: ``... * (1 + weight)``, weights
#: initialised to zero), ``"olmo2"`` (OLMo 2 / OLMo 3: ``x * rsqrt(mean(x^2) + eps) * weight`` over all heads of a
#: token, ``num_heads * head_dim`` channels, weights ``[num_heads * head_dim]``).
QK_NORM_VARIANTS = {"qwen3": 0.0, "gemma3": 1.0, "olmo2": 0.0}
#: The variants whose norm runs over all heads of a token (the projection before its split into heads).
WHOLE_PROJECTION_VARIANTS = frozenset({"olmo2"})


def _check_variant(variant: Any) -> float:
    check_choice(variant, "variant", QK_NORM_VARIANTS)
    return QK_NORM_VARIANTS[variant]


def _heads_before(x: Tensor, seq_axis: int) -> bool:
    """Whether x's heads sit before the sequence (``[..., heads, seq, head_dim]``: nothing between the sequence and
    the channels), rather than between them (``[..., seq, heads..., head_dim]``)."""
    return seq_axis == x.ndim - 2 and seq_axis >= 1


def _num_heads(x: Tensor, seq_axis: int) -> int:
    """The heads that share one token's whole-projection norm (see :func:`qk_norm_rope`)."""
    return x.shape[seq_axis - 1] if _heads_before(x, seq_axis) else math.prod(x.shape[seq_axis + 1:-1])


def _whole_rms_norm(x: Tensor, weight: Tensor, eps: float, offset: float, work: torch.dtype,
                    seq_axis: int, move_back: bool = True) -> Tensor:
    """RMSNorm over all heads of each token (OLMo 2): the heads moved next to the channels, flattened with them,
    normalised against the ``[heads * head_dim]`` weight, and put back (unless ``move_back`` is False: then the
    result is ``[..., seq, heads, head_dim]``)."""
    before = _heads_before(x, seq_axis)
    y = x.movedim(seq_axis - 1, -2) if before else x
    s = seq_axis - 1 if before else seq_axis
    shape = y.shape
    flat = y.reshape(*shape[:s + 1], -1)
    out = _rms_norm(flat, weight, eps, offset, work).reshape(shape)
    return out.movedim(-2, seq_axis - 1) if before and move_back else out


def _check_eps(eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__}")
    if not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be finite and > 0, got {eps!r}")
    return float(eps)


def _check_weight(weight: Any, name: str, x: Tensor, x_name: str, seq_axis: int, variant: str) -> None:
    if not isinstance(weight, Tensor) or not weight.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got {getattr(weight, 'dtype', type(weight).__name__)}")
    if variant in WHOLE_PROJECTION_VARIANTS:
        heads = _num_heads(x, seq_axis)
        if weight.shape != (heads * x.shape[-1],):
            raise ValueError(f"{name} has shape {tuple(weight.shape)}; expected ({heads * x.shape[-1]},) = "
                             f"({heads} heads * {x.shape[-1]} head dim): variant={variant!r} normalises all heads of "
                             f"a token ({x_name} {tuple(x.shape)}, heads on axis "
                             f"{seq_axis - 1 if _heads_before(x, seq_axis) else 'between the sequence and the channels'})")
    elif weight.shape != (x.shape[-1],):
        raise ValueError(f"{name} has shape {tuple(weight.shape)}; expected ({x.shape[-1]},): one weight per channel "
                         f"of {x_name}'s head dim (per-head QK-norm)")
    if weight.device != x.device:
        raise ValueError(f"{name} is on {weight.device}, {x_name} on {x.device}")


def _rms_norm(x: Tensor, weight: Tensor, eps: float, offset: float, work: torch.dtype) -> Tensor:
    """``x * rsqrt(mean(x^2) + eps) * (weight + offset)`` over the last axis, in ``work``.

    Without autograd the product is written in place: one fresh tensor of x's size instead of three (each costs a
    round of page faults and a pass over memory, most of the eager composition's time on the CPU)."""
    x = x.to(work)
    w = weight.to(work)
    if offset:
        w = w + offset
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) if _tracked(x, w) else \
        torch.rsqrt(torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(x.shape[-1]).add_(eps))
    if _tracked(x, w):
        return x * rstd * w
    return torch.mul(x, rstd).mul_(w)


def _tracked(*tensors: Tensor) -> bool:
    """Whether autograd or a compiler watches: then only out-of-place ops (what both differentiate and fuse)."""
    return torch.compiler.is_compiling() or (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def _kernel_applies(q: Tensor, k: Tensor, rope: RotaryEmbedding) -> bool:
    if not q.is_cuda or rope.xpos or (rope.passthrough == "front" and rope.rotary_dim != rope.dim):
        return False
    if os.environ.get("OMNIPOS_DISABLE_TRITON") == "1" or q.numel() == 0 or k.numel() == 0:
        return False
    from . import qk_norm_triton

    return qk_norm_triton.HAS_TRITON and q.dtype in qk_norm_triton.SUPPORTED_DTYPES


def _fused(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, rope: RotaryEmbedding, positions: Tensor,
           seq_axis: int, eps: float, offset: float, whole: bool = False) -> tuple[Tensor, Tensor]:
    """The Triton op on checked inputs (CUDA; on the CPU under ``TRITON_INTERPRET=1``); ``whole``: the norm over
    all heads of a token (OLMo 2)."""
    from . import qk_norm_triton

    inv_freq = rope.frequencies(positions).to(q.device)
    slot_axis = getattr(rope, "slot_axis", None)
    return qk_norm_triton.fused_qk_norm_rope(
        q, k, q_weight, k_weight, positions, inv_freq.to(torch.float64) / (2 * math.pi),
        None if slot_axis is None else slot_axis.to(device=q.device, dtype=torch.int32),
        seq_axis=seq_axis, rotary_dim=rope.rotary_dim, interleaved=rope.layout == "interleaved",
        attention_factor=float(rope.attention_factor_at(positions)), eps=eps, offset=offset, whole=whole)


def _positions_per_head(positions: Tensor, q: Tensor, seq_axis: int, rope: RotaryEmbedding) -> bool:
    """Whether positions differ between the heads of one token (heads before the sequence, positions with a
    non-1 size on that axis): the whole-projection kernel reads one position per token, so those run eager."""
    if not _heads_before(q, seq_axis):
        return False
    lead = _positions_lead(positions, rope)
    return len(lead) >= seq_axis and lead[seq_axis - 1] != 1


def _positions_lead(positions: Tensor, rope: RotaryEmbedding) -> torch.Size:
    """The positions' axes before the sequence (they broadcast against q's, left-aligned)."""
    return positions.shape[:positions.ndim - (2 if getattr(rope, "slot_axis", None) is not None else 1)]


def _prepare(q: Any, k: Any, q_weight: Any, k_weight: Any, rope: Any, positions: Any, seq_dim: int, eps: Any,
             variant: Any) -> tuple[Tensor, int, float, float]:
    if not isinstance(rope, RotaryEmbedding):
        raise TypeError(f"rope must be an omnipos.core.RotaryEmbedding, got {type(rope).__name__}")
    offset = _check_variant(variant)
    eps = _check_eps(eps)
    seq_axis = rope._check_x(q, "q", seq_dim)
    rope._check_x(k, "k", seq_dim)
    if k.dtype != q.dtype:
        raise TypeError(f"q and k must have the same dtype, got q {q.dtype} and k {k.dtype}")
    if k.device != q.device:
        raise ValueError(f"q and k must be on the same device, got q on {q.device} and k on {k.device}")
    if q.ndim != k.ndim or q.shape[seq_axis] != k.shape[seq_axis]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must have the same number of axes and "
                         f"sequence length (axis {seq_axis}); only the heads may differ")
    _check_weight(q_weight, "q_weight", q, "q", seq_axis, variant)
    _check_weight(k_weight, "k_weight", k, "k", seq_axis, variant)
    if positions is None:
        positions = rope._default_positions(q, seq_axis)
    elif q.is_cuda and torch.cuda.is_current_stream_capturing() and isinstance(positions, Tensor) \
            and positions.device == q.device and positions.dtype not in (torch.float16, torch.bfloat16):
        # while a CUDA graph is captured nothing may read the device: the value check (finite) ran on the eager
        # call that preceded the capture (a graph replays on new values unchecked, as every captured op does)
        rope._broadcast_shape(positions, q, seq_axis)
        rope._broadcast_shape(positions, k, seq_axis)
        return positions, seq_axis, eps, offset
    positions = rope._positions(positions, q.device)  # checks the values are finite
    rope._broadcast_shape(positions, q, seq_axis)
    rope._broadcast_shape(positions, k, seq_axis)
    return positions, seq_axis, eps, offset


def qk_norm_rope(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, rope: RotaryEmbedding,
                 positions: Any = None, *, eps: float = 1e-6, variant: str = "qwen3",
                 seq_dim: int = -2) -> tuple[Tensor, Tensor]:
    """RMSNorm of q and k (per head, or over all heads of a token: OLMo 2), then RoPE:
    ``rope(rms(q) * w_q, rms(k) * w_k, positions)`` in one pass.

    Args:
        q, k: ``[..., seq, ..., head_dim]`` (axis ``seq_dim`` the sequence; the heads may differ: GQA), the same
            floating dtype and device.
        q_weight, k_weight: ``[head_dim]`` norm weights (any floating dtype; used in float32); for ``"olmo2"``
            ``[num_heads * head_dim]`` and ``[num_kv_heads * head_dim]`` (transformers' ``q_norm.weight`` /
            ``k_norm.weight``, head-major).
        rope: the :class:`RotaryEmbedding` (``dim == head_dim``); every RoPE it supports works (the fused CUDA
            kernel covers all but xPos and front pass-through, which run the eager composition).
        positions: as for ``rope(q, k, positions)`` (default ``arange(seq)``).
        eps: added to ``mean(x^2)`` (finite, > 0): the model's ``rms_norm_eps``.
        variant: ``"qwen3"`` (``x * rsqrt(mean(x^2) + eps) * weight``: Qwen3 / Qwen3-MoE's ``q_norm``/``k_norm``)
            or ``"gemma3"`` (``... * (1 + weight)``), or ``"olmo2"`` (OLMo 2 / OLMo 3: ``x * rsqrt(mean(x^2) +
            eps) * weight`` over all ``num_heads * head_dim`` channels of one token, as their ``q_norm``/``k_norm``
            normalise the projection before its split into heads). For ``"olmo2"`` the heads of a token are the
            axes between the sequence and the channels (``[..., seq, heads, head_dim]``, ``seq_dim=-3``), or, when
            there are none, the axis just before the sequence (``[..., heads, seq, head_dim]``, the default).

    The norm runs in float32 (float64 for float64 inputs), the rotation on its float32 result, and the output is
    rounded once to q's dtype. transformers rounds after the norm, after the weight (Qwen3) and after the
    rotation: in bfloat16 the two differ by a few units of the last place, and omnipos is the closer to a float64
    evaluation. Returns ``(q_out, k_out)`` of q's and k's shapes and dtype.
    """
    positions, seq_axis, eps, offset = _prepare(q, k, q_weight, k_weight, rope, positions, seq_dim, eps, variant)
    whole = variant in WHOLE_PROJECTION_VARIANTS
    if _kernel_applies(q, k, rope) and not isinstance(rope.attention_factor_at(positions), Tensor) \
            and not (whole and _positions_per_head(positions, q, seq_axis, rope)):
        # (a factor that depends on the positions' values, longrope with two mscales, stays eager: reading it
        # on the host would synchronise)
        return _fused(q, k, q_weight, k_weight, rope, positions, seq_axis, eps, offset, whole)
    return _eager(q, k, q_weight, k_weight, rope, positions, seq_dim, eps, offset, whole)


def _eager(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, rope: RotaryEmbedding, positions: Tensor,
           seq_dim: int, eps: float, offset: float, whole: bool = False) -> tuple[Tensor, Tensor]:
    """The composition: RMSNorm in the work dtype (per head, or over all heads of a token: ``whole``), the
    rotation of its result, one rounding."""
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    if whole:
        seq_axis = seq_dim % q.ndim
        if _heads_before(q, seq_axis) and not _positions_per_head(positions, q, seq_axis, rope):
            # [..., heads, seq, D] (usually the projection's transposed view): normalised and rotated in the
            # projection's own order [..., seq, heads, D] (RoPE on the transposed view costs twice as much), the
            # result viewed back (the input's strides)
            qn = _whole_rms_norm(q, q_weight, eps, offset, work, seq_axis, move_back=False)
            kn = _whole_rms_norm(k, k_weight, eps, offset, work, seq_axis, move_back=False)
            if len(_positions_lead(positions, rope)) >= seq_axis:  # a size-1 heads axis
                positions = positions.squeeze(seq_axis - 1)
            q_out, k_out = rope(qn, kn, positions, seq_dim=seq_axis - 1)
            return q_out.movedim(-2, seq_axis - 1).to(q.dtype), k_out.movedim(-2, seq_axis - 1).to(k.dtype)
        qn = _whole_rms_norm(q, q_weight, eps, offset, work, seq_axis)
        kn = _whole_rms_norm(k, k_weight, eps, offset, work, seq_axis)
    else:
        qn = _rms_norm(q, q_weight, eps, offset, work)
        kn = _rms_norm(k, k_weight, eps, offset, work)
    q_out, k_out = rope(qn, kn, positions, seq_dim=seq_dim)
    return q_out.to(q.dtype), k_out.to(k.dtype)


class QKNormRope(nn.Module):
    """QK-norm + RoPE as a module: weights ``q_weight``, ``k_weight`` ``[head_dim]`` (``"olmo2"``:
    ``[num_heads * head_dim]``, ``[num_kv_heads * head_dim]``) and a :class:`RotaryEmbedding`.

    Args:
        rope: the :class:`RotaryEmbedding` to apply after the norm, or an int ``head_dim`` for
            ``RotaryEmbedding(head_dim)``. ``head_dim = rope.dim``.
        eps: the norm's epsilon (finite, > 0; Qwen3's ``rms_norm_eps`` is 1e-6).
        variant: ``"qwen3"`` (weights start at 1), ``"gemma3"`` (``1 + weight``, weights start at 0) or
            ``"olmo2"`` (the norm over all heads of a token, weights start at 1); see :func:`qk_norm_rope`.
        num_heads, num_kv_heads: the query and key heads, required by ``"olmo2"`` (they size its weights) and
            refused by the per-head variants.

    ``forward(q, k, positions=None, *, seq_dim=-2)`` -> ``(q_out, k_out)``. Loading transformers' weights:
    ``q_weight`` is ``self_attn.q_norm.weight``, ``k_weight`` ``self_attn.k_norm.weight``.
    """

    def __init__(self, rope: RotaryEmbedding | int, *, eps: float = 1e-6, variant: str = "qwen3",
                 num_heads: int | None = None, num_kv_heads: int | None = None,
                 device: Any = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if isinstance(rope, int) and not isinstance(rope, bool):
            rope = RotaryEmbedding(rope)
        if not isinstance(rope, RotaryEmbedding):
            raise TypeError(f"rope must be a RotaryEmbedding or an int head_dim, got {type(rope).__name__}")
        self.offset = _check_variant(variant)
        self.variant = variant
        self.eps = _check_eps(eps)
        self.rope = rope
        self.head_dim = rope.dim
        q_size = k_size = self.head_dim
        if variant in WHOLE_PROJECTION_VARIANTS:
            for name, value in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"variant={variant!r} normalises all heads of a token: {name} must be an int "
                                     f">= 1 (it sizes the weight), got {value!r}")
            q_size, k_size = num_heads * self.head_dim, num_kv_heads * self.head_dim
        elif num_heads is not None or num_kv_heads is not None:
            raise ValueError(f"variant={variant!r} normalises each head with one [head_dim] weight: num_heads and "
                             f"num_kv_heads are for 'olmo2' only, got {num_heads!r}, {num_kv_heads!r}")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.q_weight = nn.Parameter(torch.empty(q_size, device=device, dtype=dtype))
        self.k_weight = nn.Parameter(torch.empty(k_size, device=device, dtype=dtype))
        self.reset_parameters()

    #: transformers model types whose attention normalises q and k before RoPE, and the variant they use.
    MODEL_VARIANTS = {"qwen3": "qwen3", "qwen3_moe": "qwen3", "gemma3": "gemma3", "gemma3_text": "gemma3",
                      "olmo2": "olmo2", "olmo3": "olmo2"}

    @classmethod
    def from_config(cls, config: Any, *, layer_type: str | None = None) -> QKNormRope:
        """The QK-norm + RoPE of a transformers config (Qwen3, Qwen3-MoE, Gemma 3, OLMo 2, OLMo 3; a VLM's
        ``text_config``): :meth:`RotaryEmbedding.from_config` (``layer_type`` picks per-layer-type RoPE: Gemma 3's
        and OLMo 3's ``"sliding_attention"`` / ``"full_attention"``, where OLMo 3's rope scaling applies to the full
        layers only), ``eps = config.rms_norm_eps``, the variant from ``model_type``; OLMo's weights sized by
        ``num_attention_heads`` and ``num_key_value_heads``. Other model types are refused by name."""
        text = getattr(config, "text_config", None) or config
        get = text.get if isinstance(text, dict) else lambda name, default=None: getattr(text, name, default)
        model_type = get("model_type")
        if model_type not in cls.MODEL_VARIANTS:
            raise ValueError(f"model_type {model_type!r} has no QK-norm that QKNormRope knows; known: "
                             f"{', '.join(sorted(cls.MODEL_VARIANTS))}")
        eps = get("rms_norm_eps")
        if eps is None:
            raise ValueError("the config has no rms_norm_eps")
        variant = cls.MODEL_VARIANTS[model_type]
        heads = {}
        if variant in WHOLE_PROJECTION_VARIANTS:
            num_heads = get("num_attention_heads")
            num_kv_heads = get("num_key_value_heads")
            heads = {"num_heads": num_heads, "num_kv_heads": num_heads if num_kv_heads is None else num_kv_heads}
        return cls(RotaryEmbedding.from_config(text, layer_type=layer_type), eps=eps, variant=variant, **heads)

    def reset_parameters(self) -> None:
        with torch.no_grad():
            fill = 1.0 - self.offset  # qwen3, olmo2: 1, gemma3: 0 (so that 1 + weight starts at 1)
            self.q_weight.fill_(fill)
            self.k_weight.fill_(fill)

    def extra_repr(self) -> str:
        heads = "" if self.num_heads is None else f", num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}"
        return f"head_dim={self.head_dim}{heads}, eps={self.eps:g}, variant={self.variant!r}"

    def forward(self, q: Tensor, k: Tensor, positions: Any = None, *, seq_dim: int = -2) -> tuple[Tensor, Tensor]:
        q_weight, k_weight = self.q_weight, self.k_weight
        if q_weight.device != q.device:
            raise ValueError(f"q is on {q.device}, this QKNormRope's weights on {q_weight.device}: move one")
        return qk_norm_rope(q, k, q_weight, k_weight, self.rope, positions, eps=self.eps, variant=self.variant,
                            seq_dim=seq_dim)
