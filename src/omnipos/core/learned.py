"""Learned absolute position embeddings (BERT, GPT-2) with an explicit policy past the trained length."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from .checks import (
    allocation_guard,
    as_position_tensor,
    can_inspect_values,
    check_choice,
    check_finite,
    check_positive_int,
    to_device,
)

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
        if isinstance(init_std, bool) or not isinstance(init_std, (int, float)) or not (
                math.isfinite(init_std) and init_std >= 0):
            raise ValueError(f"init_std must be a finite number >= 0, got {init_std!r}")
        self.init_std = float(init_std)
        with allocation_guard(f"max_len={self.max_len}, dim={self.dim} (the table)"):
            self.weight = nn.Parameter(torch.empty(self.max_len, self.dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal initialisation with ``init_std`` (the only use of the RNG, so a seeded meta-device build followed
        by ``to_empty`` and this gives the weights of ``__init__``)."""
        nn.init.normal_(self.weight, std=self.init_std)

    def forward(self, positions: Any, *, max_position: float | None = None) -> torch.Tensor:
        """Rows for ``positions``. Range checks (negative, past ``max_len`` with ``beyond="error"``, below
        ``max_position``) read values: they run in eager mode and are skipped while ``torch.compile`` traces."""
        device = self.weight.device
        if isinstance(positions, int) and not isinstance(positions, bool):
            positions = torch.arange(check_positive_int(positions, "positions", minimum=0), device=device)
        positions = to_device(as_position_tensor(positions), device, "positions")
        if positions.is_floating_point() and self.beyond != "interpolate":
            raise TypeError(
                f"positions must be integers for beyond={self.beyond!r}, got {positions.dtype}; "
                "real-valued positions need beyond='interpolate'"
            )
        if max_position is not None:
            if isinstance(max_position, bool) or not isinstance(max_position, (int, float)) or not (
                    math.isfinite(max_position) and max_position >= 0):
                raise ValueError(f"max_position must be a finite number >= 0, got {max_position!r}")
            if self.beyond != "interpolate":
                raise ValueError(f"max_position applies to beyond='interpolate' only, got beyond={self.beyond!r}")
        if positions.numel() == 0:
            return self.weight.new_empty(*positions.shape, self.dim)
        inspect = can_inspect_values(positions)
        if inspect:
            check_finite(positions, "positions")
            lowest = positions.min()
            if lowest < 0:
                raise ValueError(f"positions must be >= 0, got {lowest.item()}")
        if self.beyond == "interpolate":
            return self._interpolate(positions, max_position, inspect)
        if self.beyond == "error":
            if inspect and positions.max() >= self.max_len:
                raise ValueError(
                    f"position {positions.max().item()} is past max_len={self.max_len} (valid: "
                    f"0..{self.max_len - 1}); use beyond='clamp' or beyond='interpolate' to allow it"
                )
        else:
            positions = positions.clamp(max=self.max_len - 1)
        return self.weight[positions.long()]

    def _interpolate(self, positions: torch.Tensor, max_position: float | None, inspect: bool) -> torch.Tensor:
        """Scale positions by ``last / max(P, last)`` and read between neighbouring rows (differentiable in the
        positions, the largest one included when it sets the scale)."""
        last = self.max_len - 1
        x = positions.to(torch.float64)
        if max_position is None:
            top = x.amax()
        else:
            if inspect and max_position < x.max():
                raise ValueError(f"max_position={max_position} is below the largest position {x.max().item()}")
            top = x.new_tensor(float(max_position))
        x = x * (last / top.clamp(min=max(last, 1)))  # 1 exactly while the positions fit the table
        lo = x.floor().long().clamp(min=0, max=last)
        hi = (lo + 1).clamp(max=last)
        frac = (x - lo).to(self.weight.dtype).unsqueeze(-1)
        return self.weight[lo] * (1 - frac) + self.weight[hi] * frac

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, dim={self.dim}, beyond={self.beyond!r}"
