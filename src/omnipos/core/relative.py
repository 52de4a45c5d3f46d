"""Relative position biases added to attention scores: ALiBi, T5 buckets, a learned T5-style bias module, and
FlexAttention ``score_mod`` builders for both.

Convention for ``[H, q_len, k_len]`` biases: key ``j`` sits at position ``j`` and query ``i`` at
``q_offset + i``, with ``q_offset = k_len - q_len`` unless given: the queries are the last ``q_len`` positions,
as when decoding with a KV cache (and ``q_offset = 0`` when ``q_len == k_len``). T5's relative position is
``key - query`` (HF ``T5Attention.compute_bias``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from .checks import (
    allocation_guard,
    as_position_tensor,
    check_float_dtype,
    check_integer_tensor,
    check_positive_int,
)

__all__ = [
    "alibi_slopes",
    "alibi_bias",
    "t5_relative_bucket",
    "RelativePositionBias",
    "alibi_score_mod",
    "relative_bias_score_mod",
]


# Positions and their differences stay below 2**53: exact in float64 (ALiBi's distances), far from int64 overflow.
MAX_POSITION = 2**53


def _offset(q_len: int, k_len: int, q_offset: int | None) -> int:
    if q_offset is None:
        return k_len - q_len
    if isinstance(q_offset, bool) or not isinstance(q_offset, (int, np.integer)):
        raise TypeError(f"q_offset must be an int or None, got {type(q_offset).__name__}")
    q_offset = int(q_offset)
    if abs(q_offset) + max(q_len, k_len, 1) > MAX_POSITION:
        raise ValueError(
            f"q_offset={q_offset} puts positions beyond +-2**53 (= {MAX_POSITION}), where key - query distances are "
            "no longer exact in float64 (and overflow int64 near 2**63); expected |q_offset| + max(q_len, k_len) "
            "<= 2**53"
        )
    return q_offset


def _query_key_offsets(q_len: int, k_len: int, q_offset: int | None, device: Any) -> torch.Tensor:
    """``key - query`` positions ``[q_len, k_len]`` (int64)."""
    q_len = check_positive_int(q_len, "q_len", minimum=0)
    k_len = check_positive_int(k_len, "k_len", minimum=0)
    for name, n in (("q_len", q_len), ("k_len", k_len)):
        if n > MAX_POSITION:
            raise ValueError(f"{name}={n} is beyond 2**53 positions")
    offset = _offset(q_len, k_len, q_offset)
    with allocation_guard(f"q_len={q_len}, k_len={k_len} (a [q_len, k_len] table)"):
        query = torch.arange(q_len, device=device) + offset
        return torch.arange(k_len, device=device)[None, :] - query[:, None]


def alibi_slopes(num_heads: int, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None) -> torch.Tensor:
    """ALiBi head slopes (Press et al. 2022), BLOOM / MPT / x-transformers convention, ``[num_heads]``.

    With ``c`` the largest power of two ``<= H``: ``2^(-8/c), 2^(-16/c), ..., 2^(-8)`` for the first ``c`` heads,
    then the odd powers ``2^(-8/(2c)), 2^(-3*8/(2c)), ...`` of the ``2c`` ladder for the remaining ``H - c``.
    H = 8 gives 1/2 ... 1/256; H = 12 starts at 0.5 (the closed form ``2^(-8(h+1)/H)`` gives 0.630 there: wrong
    for head counts that are not powers of two).
    """
    num_heads = check_positive_int(num_heads, "num_heads")
    check_float_dtype(dtype)
    closest = 2 ** (num_heads.bit_length() - 1)  # the largest power of two <= num_heads
    with allocation_guard(f"num_heads={num_heads}"):
        ladder = torch.arange(1, closest + 1, dtype=torch.float64, device=device)
        slopes = torch.pow(torch.tensor(2.0 ** (-8.0 / closest), dtype=torch.float64, device=device), ladder)
        if closest < num_heads:
            odd = torch.arange(1, 2 * (num_heads - closest), 2, dtype=torch.float64, device=device)
            extra = torch.tensor(2.0 ** (-8.0 / (2 * closest)), dtype=torch.float64, device=device)
            slopes = torch.cat((slopes, torch.pow(extra, odd)))
        return slopes.to(dtype)


def alibi_bias(num_heads: int, q_len: int, k_len: int, *, q_offset: int | None = None,
               dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> torch.Tensor:
    """ALiBi bias ``-m_h * |i - j|``, ``[num_heads, q_len, k_len]`` (queries at ``q_offset + i``; see module doc).

    For causal attention this equals BLOOM's ``build_alibi_tensor`` (``m_h * j``) up to a constant per query row,
    which the softmax ignores; the symmetric ``|i - j|`` form also serves bidirectional attention.

    A bias beyond ``dtype``'s range (float16 reaches -inf past ``|i - j| * m = 65504``) is a ValueError: ask for
    a wider dtype, or a smaller ``q_offset``.
    """
    num_heads = check_positive_int(num_heads, "num_heads")
    check_float_dtype(dtype)
    distance = _query_key_offsets(q_len, k_len, q_offset, device).abs().to(torch.float64)
    if q_len and k_len:  # the largest |bias| is the steepest slope at the farthest corner, known without the table
        offset = _offset(q_len, k_len, q_offset)
        farthest = max(abs(offset + i - j) for i in (0, q_len - 1) for j in (0, k_len - 1))
        closest = 2 ** (num_heads.bit_length() - 1)
        steepest = 2.0 ** (-4.0 / closest if closest < num_heads else -8.0 / closest)
        if steepest * farthest > torch.finfo(dtype).max:
            raise ValueError(
                f"the ALiBi bias reaches -{steepest * farthest:.4g} (slope {steepest:.4g} x distance {farthest}), "
                f"beyond {dtype}'s range (largest {torch.finfo(dtype).max:.4g}); use a wider dtype"
            )
    slopes = alibi_slopes(num_heads, dtype=torch.float64, device=distance.device)
    with allocation_guard(f"num_heads={num_heads}, q_len={q_len}, k_len={k_len} (the bias [H, q_len, k_len])"):
        return (0.0 - slopes[:, None, None] * distance).to(dtype)  # 0 - x: no -0.0 on the diagonal


def t5_relative_bucket(relative_position: torch.Tensor, *, bidirectional: bool = True, num_buckets: int = 32,
                       max_distance: int = 128) -> torch.Tensor:
    """T5's bucket of each relative position ``key - query`` (HF ``T5Attention._relative_position_bucket``).

    Bidirectional: half the buckets per direction, ``+ num_buckets // 2`` for keys after the query. Within a
    direction, ``|rel| < max_exact = nb // 2`` gets its own bucket, larger distances log-spaced buckets up to
    ``max_distance``, everything beyond shares the last one. Unidirectional: keys after the query (rel > 0) fall
    into bucket 0 with rel = 0. Reference (nb=32, max_distance=128): rel -128, -9, -8, -1, 0, 1, 8, 16, 127 ->
    15, 8, 8, 1, 0, 17, 24, 26, 31.

    The logarithm is taken in float32 exactly as T5 (Mesh TensorFlow, HF) does, so trained checkpoints get the
    buckets they were trained with.

    Args:
        relative_position: integer tensor of any shape.

    Returns:
        int64 tensor of the same shape, values in ``[0, num_buckets)``.
    """
    relative_position = as_position_tensor(relative_position, "relative_position")
    check_integer_tensor(relative_position, "relative_position")
    num_buckets = check_positive_int(num_buckets, "num_buckets", minimum=2 if not bidirectional else 4)
    max_distance = check_positive_int(max_distance, "max_distance")
    # every |rel| >= max_distance shares the last bucket: clamping (far beyond it) keeps abs() and the float32 log
    # away from int64's edge, where -(-2**63) overflows to -2**63
    rel = relative_position.long().clamp(-(2**62), 2**62)
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).long() * num_buckets
        rel = rel.abs()
    else:
        rel = (-rel).clamp(min=0)
    max_exact = num_buckets // 2
    if max_distance <= max_exact:
        raise ValueError(f"max_distance must be > {max_exact} (half the buckets of a direction), got {max_distance}")
    # float32 on purpose: the arithmetic T5 checkpoints were trained with (see docstring)
    large = max_exact + (
        torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(rel < max_exact, rel, large)


class RelativePositionBias(nn.Module):
    """Learned T5-style relative position bias: one scalar per (bucket, head), looked up by T5 bucket.

    Args:
        num_heads: heads of the attention it biases.
        num_buckets, max_distance, bidirectional: as in :func:`t5_relative_bucket` (T5: 32, 128; encoder True,
            decoder False).

    Shape:
        ``forward(q_len, k_len, *, q_offset=None)`` -> ``[num_heads, q_len, k_len]``, to add to the scores
        (queries at ``q_offset + i``, by default the last ``q_len`` key positions).
    """

    def __init__(self, num_heads: int, *, num_buckets: int = 32, max_distance: int = 128,
                 bidirectional: bool = True) -> None:
        super().__init__()
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.num_buckets = check_positive_int(num_buckets, "num_buckets", minimum=4 if bidirectional else 2)
        self.max_distance = check_positive_int(max_distance, "max_distance")
        self.bidirectional = bool(bidirectional)
        t5_relative_bucket(torch.zeros(1, dtype=torch.long), bidirectional=self.bidirectional,
                           num_buckets=self.num_buckets, max_distance=self.max_distance)  # validates early
        # built empty and filled by reset_parameters (the only use of the RNG, as for every omnipos module)
        with allocation_guard(f"num_buckets={self.num_buckets}, num_heads={self.num_heads} (the bias table)"):
            table = torch.empty(self.num_buckets, self.num_heads)
        self.relative_attention_bias = nn.Embedding(self.num_buckets, self.num_heads, _weight=table)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``N(0, 1)`` per (bucket, head), ``nn.Embedding``'s initialisation."""
        nn.init.normal_(self.relative_attention_bias.weight)

    def buckets(self, q_len: int, k_len: int, *, q_offset: int | None = None) -> torch.Tensor:
        """int64 buckets ``[q_len, k_len]``."""
        rel = _query_key_offsets(q_len, k_len, q_offset, self.relative_attention_bias.weight.device)
        return t5_relative_bucket(rel, bidirectional=self.bidirectional, num_buckets=self.num_buckets,
                                  max_distance=self.max_distance)

    def forward(self, q_len: int, k_len: int, *, q_offset: int | None = None) -> torch.Tensor:
        return self.relative_attention_bias(self.buckets(q_len, k_len, q_offset=q_offset)).permute(2, 0, 1)

    def extra_repr(self) -> str:
        return (f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, max_distance={self.max_distance}, "
                f"bidirectional={self.bidirectional}")


ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def alibi_score_mod(num_heads: int, *, q_offset: int = 0, device: torch.device | str | None = None) -> ScoreMod:
    """FlexAttention ``score_mod`` adding ALiBi: ``score - m_h * |q_offset + q_idx - kv_idx|``.

    ``torch.nn.attention.flex_attention.flex_attention(q, k, v, score_mod=alibi_score_mod(H))`` equals dense
    attention with :func:`alibi_bias` ``(q_offset=q_offset)`` added to the scores. Pass ``q_offset=k_len - q_len``
    when decoding with a cache (FlexAttention hands out ``q_idx`` from 0).
    """
    slopes = alibi_slopes(num_heads, device=device)
    offset = _offset(0, 0, q_offset)

    def score_mod(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                  kv_idx: torch.Tensor) -> torch.Tensor:
        return score - slopes[h] * (q_idx + offset - kv_idx).abs()

    return score_mod


def relative_bias_score_mod(bias: RelativePositionBias | torch.Tensor, *, q_offset: int = 0) -> ScoreMod:
    """FlexAttention ``score_mod`` adding a relative position bias.

    Args:
        bias: a :class:`RelativePositionBias` (buckets computed per score from ``kv_idx - q_idx - q_offset``, its
            ``[num_buckets, H]`` table indexed directly: no ``[H, q, k]`` tensor is built), or a dense
            ``[H, q_len, k_len]`` tensor (``score + bias[h, q_idx, kv_idx]``; ``q_offset`` must then be 0).
        q_offset: position of query 0 relative to key 0 (module form only).
    """
    if isinstance(bias, RelativePositionBias):
        table = bias.relative_attention_bias.weight
        offset = _offset(0, 0, q_offset)

        def bucketed(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                     kv_idx: torch.Tensor) -> torch.Tensor:
            bucket = t5_relative_bucket(kv_idx - q_idx - offset, bidirectional=bias.bidirectional,
                                        num_buckets=bias.num_buckets, max_distance=bias.max_distance)
            return score + table[bucket, h]

        return bucketed
    if not isinstance(bias, torch.Tensor) or bias.ndim != 3 or not bias.is_floating_point():
        raise TypeError("bias must be a RelativePositionBias or a floating [H, q_len, k_len] tensor, got "
                        f"{getattr(bias, 'shape', type(bias).__name__)}")
    if q_offset:
        raise ValueError("q_offset applies to a RelativePositionBias module; slice a dense bias yourself")

    def dense(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
              kv_idx: torch.Tensor) -> torch.Tensor:
        return score + bias[h, q_idx, kv_idx]

    return dense
