"""eRPE, ConvTran's efficient Relative Position Encoding (Foumani et al., 2023, "Improving position encoding of
transformers for multivariate time series classification"; Navidfoumani/ConvTran ``Models/Attention.py``, class
``Attention_Rel_Scl``).

One learnable scalar per relative offset and head: a table ``[2 * max_len - 1, H]`` and, for a series of
``L <= max_len`` steps, the bias ``bias[h, i, j] = table[i - j + max_len - 1, h]`` (query ``i``, key ``j``; row
``max_len - 1`` is offset 0). ConvTran adds it to the attention *weights*, after the softmax::

    attn = softmax(q k^T * scale) + bias;  out = attn v

(``placement="after_softmax"``, the paper's). ``placement="before_softmax"`` adds it to the scores instead,
``softmax(q k^T * scale + bias)``, as T5-style biases are; only that placement has a FlexAttention ``score_mod``
(:func:`erpe_score_mod`), since a ``score_mod`` acts before the softmax. ConvTran builds the table for its
series length only (``max_len = L``); here shorter series index its centre rows. ConvTran's ``scale`` is
``emb_size ** -0.5`` (the model width, not the head width): :func:`erpe_attention` takes ``scale=``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..core import allocation_guard, check_choice, check_positive_int

__all__ = ["PLACEMENTS", "ERPE", "erpe_bias", "erpe_score_mod", "erpe_attention"]

PLACEMENTS = ("after_softmax", "before_softmax")

ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _check_table(table: Any) -> int:
    """``max_len`` of a ``[2 * max_len - 1, H]`` table."""
    if not isinstance(table, torch.Tensor) or not table.is_floating_point():
        raise TypeError(f"table must be a floating tensor [2 * max_len - 1, num_heads], got "
                        f"{getattr(table, 'dtype', type(table).__name__)}")
    if table.ndim != 2 or table.shape[0] % 2 == 0 or table.shape[1] == 0:
        raise ValueError(f"table must be [2 * max_len - 1, num_heads] (an odd number of rows), got shape "
                         f"{tuple(table.shape)}")
    return (table.shape[0] + 1) // 2


def _relative_rows(length: int, max_len: int, device: torch.device) -> torch.Tensor:
    """``i - j + max_len - 1`` for ``i, j < length``: ``[length, length]`` int64."""
    steps = torch.arange(length, device=device)
    return steps[:, None] - steps[None, :] + (max_len - 1)


def erpe_bias(table: torch.Tensor, length: int) -> torch.Tensor:
    """The eRPE bias ``[H, length, length]`` of a table ``[2 * max_len - 1, H]``:
    ``bias[h, i, j] = table[i - j + max_len - 1, h]`` (``length <= max_len``)."""
    max_len = _check_table(table)
    length = check_positive_int(length, "length")
    if length > max_len:
        raise ValueError(f"length={length} is beyond max_len={max_len}: the table has offsets up to "
                         f"+-{max_len - 1} only")
    with allocation_guard(f"erpe_bias: length={length:,} (a bias [{table.shape[1]}, {length:,}, {length:,}])"):
        rows = _relative_rows(length, max_len, table.device).reshape(-1)
        return table.index_select(0, rows).reshape(length, length, -1).permute(2, 0, 1)


def erpe_score_mod(erpe: ERPE | torch.Tensor) -> ScoreMod:
    """FlexAttention ``score_mod`` adding eRPE to the scores: ``score + table[q_idx - kv_idx + max_len - 1, h]``.

    ``flex_attention(q, k, v, score_mod=erpe_score_mod(module))`` equals ``softmax(q k^T * scale + bias) v`` with
    ``bias = module.bias(L)``. Takes an :class:`ERPE` built with ``placement="before_softmax"`` (a score_mod
    acts before the softmax; the paper's after-softmax bias has no score_mod form) or a raw table
    ``[2 * max_len - 1, H]``. Queries and keys must lie within ``max_len`` of each other (not checked per score).
    """
    if isinstance(erpe, ERPE):
        if erpe.placement != "before_softmax":
            raise ValueError("erpe has placement='after_softmax' (the paper's: the bias is added to the attention "
                             "weights), which a score_mod cannot express; build ERPE(..., placement='before_softmax')")
        table = erpe.table
    else:
        table = erpe
    max_len = _check_table(table)

    def score_mod(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                  kv_idx: torch.Tensor) -> torch.Tensor:
        return score + table[q_idx - kv_idx + (max_len - 1), h]

    return score_mod


class ERPE(nn.Module):
    """ConvTran's eRPE: a learnable scalar per relative offset and head, added to attention weights.

    Args:
        max_len: the longest series (relative offsets ``-(max_len - 1) .. max_len - 1``).
        num_heads: attention heads ``H``.
        placement: ``"after_softmax"`` (default, the paper's: ``forward`` takes the attention weights) or
            ``"before_softmax"`` (``forward`` takes the scores; :func:`erpe_score_mod` accepts the module).

    Attributes:
        table: ``[2 * max_len - 1, H]``, initialised to zeros as in ConvTran (``reset_parameters``).

    Shape:
        ``forward(attn)``: ``[B, H, L, L]`` (``L <= max_len``) -> the same, the bias added.
        ``bias(L)``: ``[H, L, L]``.
    """

    def __init__(self, max_len: int, num_heads: int, *, placement: str = "after_softmax") -> None:
        super().__init__()
        self.max_len = check_positive_int(max_len, "max_len")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.placement = check_choice(placement, "placement", PLACEMENTS)
        with allocation_guard(f"ERPE: max_len={self.max_len:,} with num_heads={self.num_heads:,} (a table "
                              f"[2 * max_len - 1, num_heads] = [{2 * self.max_len - 1:,}, {self.num_heads:,}])"):
            self.table = nn.Parameter(torch.empty(2 * self.max_len - 1, self.num_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Zeros, as ConvTran initialises ``relative_bias_table``."""
        nn.init.zeros_(self.table)

    def bias(self, length: int) -> torch.Tensor:
        """``[H, length, length]``: ``bias[h, i, j] = table[i - j + max_len - 1, h]``."""
        return erpe_bias(self.table, length)

    def forward(self, attn: torch.Tensor) -> torch.Tensor:
        if not isinstance(attn, torch.Tensor) or not attn.is_floating_point():
            got = f"a tensor of dtype {attn.dtype}" if isinstance(attn, torch.Tensor) else type(attn).__name__
            raise TypeError(f"attn must be a floating tensor [B, H, L, L], got {got}")
        if attn.ndim != 4 or attn.shape[1] != self.num_heads or attn.shape[-1] != attn.shape[-2]:
            raise ValueError(f"attn must be [B, H={self.num_heads}, L, L] (self-attention weights), got shape "
                             f"{tuple(attn.shape)}")
        return attn + self.bias(attn.shape[-1]).to(device=attn.device, dtype=attn.dtype)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, num_heads={self.num_heads}, placement={self.placement!r}"


def erpe_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, erpe: ERPE, *,
                   scale: float | None = None) -> torch.Tensor:
    """Self-attention with eRPE at ``erpe.placement``: ``(softmax(q k^T * scale) + bias) v`` (after the
    softmax, ConvTran's ``Attention_Rel_Scl``) or ``softmax(q k^T * scale + bias) v`` (before).

    Args:
        q, k, v: ``[B, H, L, D]``. erpe: an :class:`ERPE` with ``H`` heads and ``max_len >= L``.
        scale: score scale; default ``D ** -0.5`` (ConvTran uses ``emb_size ** -0.5``: pass it).

    Returns:
        ``[B, H, L, D]``.
    """
    if not isinstance(erpe, ERPE):
        raise TypeError(f"erpe must be an ERPE module, got {type(erpe).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.ndim != 4:
            raise ValueError(f"{name} must be a tensor [B, H, L, D], got {getattr(t, 'shape', type(t).__name__)}")
    if k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"q, k, v must share [B, H, L] (and q, k their D); got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    scores = (q @ k.transpose(-2, -1)) * scale
    if erpe.placement == "before_softmax":
        return erpe(scores).softmax(-1) @ v
    return erpe(scores.softmax(-1)) @ v
