"""Range-reduced phases: the one routine behind every ``sin``/``cos`` of a position in omnipos.

Every sinusoid here is ``sin(p * w)`` / ``cos(p * w)``. The phase is formed in float64 as *turns*
(``p * w / 2 pi``, one turn = one period), its whole turns are removed in float64, and only the remainder, an
angle under one turn, meets ``sin``/``cos`` in float32. So a float32 result is within 5e-7 of the float64 formula
for any position (a float32 angle alone is off by ~2e-4 at p = 1e4 and ~5e-2 at p = 1e6). In float64 the turns are
used whole: the float64 ``sin``/``cos`` are accurate on their own.

Sinusoidal encodings (:mod:`omnipos.core.sinusoid`), RoPE's cos/sin (:mod:`omnipos.core.rope_functional`) and the
domains' encodings all go through :func:`reduced_phase`.
"""

from __future__ import annotations

import math

import torch

__all__ = ["TWO_PI", "reduced_phase", "cos_sin_of_turns", "cos_sin_of_angles"]

TWO_PI = 2.0 * math.pi


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def reduced_phase(turns: torch.Tensor, dtype: torch.dtype = torch.float32, *, out: torch.Tensor | None = None,
                  consume: bool = False) -> torch.Tensor:
    """Phase in radians of float64 ``turns`` (any shape), whole turns removed unless ``dtype`` is float64.

    Args:
        turns: float64 phases in turns (``position * frequency / 2 pi``).
        dtype: float32 (the default; anything below float64 computes in float32) or float64.
        out: write the phase there (its dtype decides the work dtype) instead of a new tensor.
        consume: ``turns`` is scratch space the caller no longer needs: it is reduced in place, which saves a
            float64 buffer of its size. Ignored when anything requires grad (autograd needs the original).

    Returns:
        The phase, ``Tensor`` of ``turns``' shape (``out`` when given). Differentiable in ``turns``: removing
        whole turns has derivative 1.
    """
    work = out.dtype if out is not None else _work_dtype(dtype)
    in_place = consume and not (turns.requires_grad and torch.is_grad_enabled())
    if in_place:
        if work != torch.float64:
            turns.frac_()  # |phase| < 1 turn, so float32 sin/cos see a small angle whatever the position
        phase = turns.mul_(TWO_PI)
    else:
        phase = (torch.frac(turns) if work != torch.float64 else turns) * TWO_PI
    if out is None:
        return phase.to(work)
    return out.copy_(phase)


def cos_sin_of_turns(turns: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)`` of float64 ``turns`` (any shape), evaluated in float32 (or float64 for ``dtype=float64``)."""
    phase = reduced_phase(turns, dtype)
    return torch.cos(phase), torch.sin(phase)


def cos_sin_of_angles(angles: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)`` of ``angles`` in radians (float64 for precision), range-reduced as :func:`reduced_phase`."""
    if dtype == torch.float64:  # float64 sin/cos need no reduction; keep the angles exactly as given
        angles = angles.to(torch.float64)
        return torch.cos(angles), torch.sin(angles)
    return cos_sin_of_turns(angles.to(torch.float64) * (1.0 / TWO_PI), dtype)
