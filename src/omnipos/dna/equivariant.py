"""Exact reverse-complement invariance or equivariance for any module, by running it on both strands.

For a module ``f``, a batch ``x`` and its reverse complement ``rc(x)``:

- ``mode="invariant"``: ``g(x) = (f(x) + A f(rc x)) / 2``, so ``g(rc x) = A g(x)``;
- ``mode="equivariant"``: ``g(x) = (f(x) + S A f(rc x)) / 2``, so ``g(rc x) = S A g(x)``.

``A`` aligns the strands' outputs: the identity for per-sequence outputs ``[B, ...]`` (then the invariant output
is the same for a read and its RC), a flip within each read's length for per-position outputs ``[B, L, ...]``
(``per_position=True``; pads stay at the end). ``S`` reverses the output's last axis, the channel pairing of
RC parameter sharing (Shrikumar et al., 2017): channel ``j`` on one strand is channel ``C - 1 - j`` on the other,
as A, C, G, T map to T, G, C, A. The identities hold bit for bit: both strands are computed as separate calls
and float addition is commutative.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core import check_choice
from .alphabet import PAD
from .reverse_complement import flip_within_lengths, reverse_complement

__all__ = ["RCEquivariant", "MODES"]

MODES = ("invariant", "equivariant")


class RCEquivariant(nn.Module):
    """Wrap ``module`` so that its output is exactly RC-invariant or RC-equivariant.

    Args:
        module: takes a batch of tokens ``[B, L]`` or one-hot ``[B, L, 4|5]`` (and ``mask=`` when
            ``pass_mask``) and returns ``[B, ...]`` (per sequence) or ``[B, L, ...]`` (per position).
        mode: ``"invariant"`` or ``"equivariant"`` (see the module docstring).
        per_position: the output's axis 1 is the input's position axis (flipped within each length).
        pass_mask: call ``module(x, mask=mask)`` instead of ``module(x)``.

    Shape:
        ``forward(x, mask=None)``: ``mask [B, L]`` is the padding mask (tokens default to ``x != PAD``; a
        one-hot batch without a mask is taken as unpadded). Tokens of any integer dtype pass through as they are
        (uint8 by default: convert them inside ``module`` if it embeds them, ``nn.Embedding`` takes int32/int64).

    The output dtype is the wrapped module's (``.half()`` / ``.double()`` convert it); ``reset_parameters()``
    re-initialises it after meta-device construction; under ``torch.compile`` the wrapper adds no graph break.
    """

    def __init__(self, module: nn.Module, *, mode: str = "invariant", per_position: bool = False,
                 pass_mask: bool = False) -> None:
        super().__init__()
        if not callable(module):
            raise TypeError(f"module must be callable (an nn.Module), got {type(module).__name__}")
        self.module = module
        self.mode = check_choice(mode, "mode", MODES)
        self.per_position = bool(per_position)
        self.pass_mask = bool(pass_mask)

    def reset_parameters(self) -> None:
        """Re-initialise the wrapped module: ``reset_parameters()`` of each of its submodules that has one, in
        registration order (PyTorch's convention: each resets its own parameters), so that a seeded meta-device
        init reproduces ``__init__``."""
        if isinstance(self.module, nn.Module):
            for sub in self.module.modules():
                reset = getattr(sub, "reset_parameters", None)
                if callable(reset):
                    reset()

    def _call(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.module(x, mask=mask) if self.pass_mask else self.module(x)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.ndim not in (2, 3):
            raise ValueError(f"x must be tokens [B, L] or one-hot [B, L, C], got {getattr(x, 'shape', type(x))}")
        if mask is None:
            mask = x != PAD if not x.is_floating_point() else torch.ones(x.shape[:2], dtype=torch.bool,
                                                                          device=x.device)
        forward_out = self._call(x, mask)
        reverse_out = self._call(reverse_complement(x, mask), mask)
        if not isinstance(forward_out, torch.Tensor):
            raise TypeError(f"module must return a tensor, got {type(forward_out).__name__}")
        if self.per_position:
            if forward_out.ndim < 2 or forward_out.shape[:2] != x.shape[:2]:
                raise ValueError(f"per_position=True needs module outputs [B, L, ...] matching x's "
                                 f"{tuple(x.shape[:2])}, got {tuple(forward_out.shape)}")
            reverse_out = flip_within_lengths(reverse_out, mask)
        if self.mode == "equivariant":
            if forward_out.ndim < (3 if self.per_position else 2):
                raise ValueError(f"mode='equivariant' pairs output channels on the last axis; the module returned "
                                 f"{tuple(forward_out.shape)}, which has no channel axis")
            reverse_out = reverse_out.flip(-1)
        return (forward_out + reverse_out) / 2

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}, per_position={self.per_position}, pass_mask={self.pass_mask}"
