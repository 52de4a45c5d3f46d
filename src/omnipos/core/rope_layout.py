"""Converting checkpoints between the two RoPE layouts: a permutation of the q/k projection rows."""

from __future__ import annotations

import torch

from .checks import check_choice, check_even_dim, check_positive_int
from .rope_kernels import ROPE_LAYOUTS

__all__ = ["convert_rope_layout"]


def convert_rope_layout(weight: torch.Tensor, n_heads: int, *, to: str, rotary_dim: int | None = None) -> torch.Tensor:
    """Permute the rows of a q or k projection so a checkpoint trained with one RoPE layout runs with the other.

    ``to="half"`` takes interleaved rows (Meta LLaMA, GPT-J) to half-split order (HF), the permutation HF's
    ``convert_llama_weights_to_hf.py`` applies: ``w.view(n_heads, hd // 2, 2, in).transpose(1, 2)``;
    ``to="interleaved"`` is its inverse. Attention scores of the converted model are identical.

    Args:
        weight: ``[n_heads * head_dim, in_features]`` (``nn.Linear.weight``) or a bias ``[n_heads * head_dim]``.
        n_heads: number of heads in this projection (KV heads for k).
        to: the layout the result is for: ``"half"`` or ``"interleaved"``.
        rotary_dim: rotated channels per head (default: all); the rest of each head keeps its order.

    Returns:
        A new tensor of ``weight``'s shape and dtype.
    """
    check_choice(to, "to", ROPE_LAYOUTS)
    n_heads = check_positive_int(n_heads, "n_heads")
    if not isinstance(weight, torch.Tensor) or weight.ndim not in (1, 2):
        raise ValueError(f"weight must be a [n_heads * head_dim, in] or [n_heads * head_dim] tensor, got "
                         f"{getattr(weight, 'shape', type(weight).__name__)}")
    if weight.shape[0] % n_heads:
        raise ValueError(f"weight has {weight.shape[0]} rows, not a multiple of n_heads={n_heads}")
    head_dim = weight.shape[0] // n_heads
    if rotary_dim is None:
        rotary_dim = check_even_dim(head_dim, "head_dim (weight rows / n_heads)")
    rotary_dim = check_even_dim(rotary_dim, "rotary_dim")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim={rotary_dim} is larger than head_dim={head_dim}")
    w = weight.reshape(n_heads, head_dim, -1)
    rot = w[:, :rotary_dim]
    if to == "half":
        rot = rot.reshape(n_heads, rotary_dim // 2, 2, -1).transpose(1, 2)
    else:
        rot = rot.reshape(n_heads, 2, rotary_dim // 2, -1).transpose(1, 2)
    out = torch.cat((rot.reshape(n_heads, rotary_dim, -1), w[:, rotary_dim:]), 1)
    return out.reshape(weight.shape).clone()
