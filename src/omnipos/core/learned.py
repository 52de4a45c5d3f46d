"""Learned absolute position embeddings (BERT, GPT-2) with an explicit policy past the trained length."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .checks import as_position_tensor, check_choice, check_finite, check_positive_int

__all__ = ["LearnedPositionalEmbedding", "BEYOND_POLICIES"]

BEYOND_POLICIES = ("error", "clamp", "interpolate")


class LearnedPositionalEmbedding(nn.Module):
    """A table of ``max_len`` learned vectors, one per position ``0 .. max_len - 1``.

    What happens to a position ``>= max_len`` is what ``beyond`` names, never anything silent:

    - ``"error"`` (default): ``ValueError`` naming max_len and the offending position.
    - ``"clamp"``: such positions get the last row (the common "reuse position max_len - 1" fix).
    - ``"interpolate"``: position interpolation. When the largest position ``P`` asked for (or ``max_position``
      given to ``forward``) is past the table, every position is scaled by ``(max_len - 1) / P`` and read by
      linear interpolation between neighbouring rows, so ``0 .. P`` spans the trained table. Positions inside the
      table are looked up unchanged when ``P < max_len``. Pass ``max_position`` to make the result independent
      of the batch.

    Negative positions are always an error. Real-valued positions are accepted with ``"interpolate"`` only.

    Args:
        max_len: number of trained positions. dim: embedding size.
        beyond: ``"error" | "clamp" | "interpolate"``. init_std: std of the normal initialisation (BERT: 0.02).

    Shape:
        ``forward(positions)``: integer positions of any shape -> ``[*positions.shape, dim]``;
        ``forward(n)`` with an int is ``forward(arange(n))``.
    """

    def __init__(self, max_len: int, dim: int, *, beyond: str = "error", init_std: float = 0.02) -> None:
        super().__init__()
        self.max_len = check_positive_int(max_len, "max_len")
        self.dim = check_positive_int(dim, "dim")
        self.beyond = check_choice(beyond, "beyond", BEYOND_POLICIES)
        self.weight = nn.Parameter(torch.empty(self.max_len, self.dim))
        nn.init.normal_(self.weight, std=init_std)

    def forward(self, positions: Any, *, max_position: int | None = None) -> torch.Tensor:
        device = self.weight.device
        if isinstance(positions, int) and not isinstance(positions, bool):
            positions = torch.arange(check_positive_int(positions, "positions", minimum=0), device=device)
        positions = as_position_tensor(positions).to(device)
        if positions.is_floating_point() and self.beyond != "interpolate":
            raise TypeError(
                f"positions must be integers for beyond={self.beyond!r}, got {positions.dtype}; "
                "real-valued positions need beyond='interpolate'"
            )
        if positions.numel() == 0:
            return self.weight.new_empty(*positions.shape, self.dim)
        check_finite(positions, "positions")
        lowest = positions.min()
        if lowest < 0:
            raise ValueError(f"positions must be >= 0, got {lowest.item()}")
        highest = positions.max()
        if self.beyond == "interpolate":
            return self._interpolate(positions, highest.item() if max_position is None else max_position)
        if highest >= self.max_len:
            if self.beyond == "error":
                raise ValueError(
                    f"position {highest.item()} is past max_len={self.max_len} (valid: 0..{self.max_len - 1}); "
                    "use beyond='clamp' or beyond='interpolate' to allow it"
                )
            positions = positions.clamp(max=self.max_len - 1)
        return self.weight[positions.long()]

    def _interpolate(self, positions: torch.Tensor, max_position: float) -> torch.Tensor:
        last = self.max_len - 1
        if max_position < positions.max().item():
            raise ValueError(f"max_position={max_position} is below the largest position {positions.max().item()}")
        scale = last / max_position if max_position > last else 1.0
        x = positions.to(torch.float64) * scale
        lo = x.floor().long().clamp(max=last)
        hi = (lo + 1).clamp(max=last)
        frac = (x - lo).to(self.weight.dtype).unsqueeze(-1)
        return self.weight[lo] * (1 - frac) + self.weight[hi] * frac

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, dim={self.dim}, beyond={self.beyond!r}"
