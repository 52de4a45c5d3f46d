"""Sinusoidal encodings of any real-valued positions (Vaswani et al., 2017, and its named variants).

Layouts (``layout=``), for ``d`` channels and ``h = d // 2`` frequencies:

- ``"interleaved"``: ``PE[p, 2i] = sin(p w_i)``, ``PE[p, 2i+1] = cos(p w_i)``, ``w_i = base^(-2i/d)``
  (the Transformer paper, HF DistilBERT ``create_sinusoidal_embeddings``).
- ``"split"``: ``[sin(p w_0) .. sin(p w_{h-1}) | cos(p w_0) .. cos(p w_{h-1})]`` with the same ``w_i``
  (tensor2tensor, x-transformers).
- ``"fairseq"``: split, with ``w_i = base^(-i/(h-1))`` (fairseq / HF M2M100 ``SinusoidalPositionalEmbedding``;
  fairseq's positions start at ``padding_idx + 1``: pass them as such).

Precision: the phase ``p * w / 2 pi`` is formed in float64 and its whole turns removed before the float32
``sin``/``cos``, so a float32 result is within 5e-7 of the float64 formula for ``|p|`` up to 1e7, whatever
dtype the positions come in
(a float32 angle alone is off by ~5e-2 at p = 1e6).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from .checks import (
    as_position_tensor,
    check_choice,
    check_even_dim,
    check_finite,
    check_float_dtype,
)
from .frequencies import frequency_bands, geometric_frequencies
from .phase import TWO_PI, reduced_phase

__all__ = [
    "LAYOUTS",
    "frequency_bands",
    "layout_frequencies",
    "sinusoidal",
    "sinusoid_of_angles",
    "sinusoid_of_turns",
    "centered_sincos_into",
    "SinusoidalEncoding",
    "add_positional",
]

LAYOUTS = ("interleaved", "split", "fairseq")


def layout_frequencies(
    dim: int, *, base: float = 10000.0, layout: str = "interleaved", device: torch.device | str | None = None
) -> torch.Tensor:
    """The float64 frequencies ``[dim // 2]`` that ``layout`` uses (fairseq has its own exponent)."""
    dim = check_even_dim(dim)
    check_choice(layout, "layout", LAYOUTS)
    if layout == "fairseq":
        if dim < 4:
            raise ValueError(f"dim must be >= 4 for layout='fairseq' (its exponent divides by dim/2 - 1), got {dim}")
        return geometric_frequencies(dim // 2, base=base, denominator=dim // 2 - 1, device=device)
    return frequency_bands(dim, base=base, device=device)


def _sincos_from_turns(turns: torch.Tensor, layout: str, dtype: torch.dtype, consume: bool,
                       out: torch.Tensor | None = None, accumulate: bool = False,
                       centered: bool = False) -> torch.Tensor:
    """float64 ``turns [..., h]`` -> ``[..., 2h]`` sin/cos channels in ``layout``; see :func:`sinusoid_of_turns`.

    Large temporaries cost more than the arithmetic here (each fresh buffer is page-faulted in), so when the
    turns are scratch (``consume``) and no gradient is wanted, they are reduced in place and only one contiguous
    buffer of the work dtype is made. ``sin``/``cos`` run on that contiguous phase (CPU kernels vectorise a
    contiguous operand, not a stride-2 slot: measured 1.5-2x faster for a slot output, bit for bit the same
    values) and are written into their slots of ``out`` (a new tensor unless given), or added there.
    ``centered``: see :func:`sinusoid_of_turns`.
    """
    half = turns.shape[-1]
    work = torch.float64 if dtype == torch.float64 else torch.float32
    centered = centered and work == torch.float32  # float64 sin/cos need no reduction at all
    differentiable = turns.requires_grad and torch.is_grad_enabled()
    if differentiable or torch.compiler.is_compiling():
        phase = ((turns - torch.round(turns)) * TWO_PI).to(work) if centered else reduced_phase(turns, work)
        pair = (torch.sin(phase), torch.cos(phase))
        stacked = torch.stack(pair, -1) if layout == "interleaved" else torch.stack(pair, -2)
        result = stacked.reshape(*turns.shape[:-1], 2 * half).to(dtype)
        if out is None:
            return result
        return out.add_(result) if accumulate else out.copy_(result)
    target = out if out is not None else torch.empty(*turns.shape[:-1], 2 * half, dtype=work, device=turns.device)
    if layout == "interleaved":
        pairs = target.unflatten(-1, (half, 2))
        sin_slot, cos_slot = pairs[..., 0], pairs[..., 1]
    else:
        pairs = target.unflatten(-1, (2, half))
        sin_slot, cos_slot = pairs[..., 0, :], pairs[..., 1, :]
    if centered:
        # exact: turns and the nearest whole number of turns share the exponent's grid, so the difference is
        # representable; |phase| <= pi, where a float32 phase carries half the rounding error it has up to 2 pi
        if turns.device.type == "cpu":
            _numpy_sincos_into(_numpy_centered_phase(turns, consume), sin_slot, cos_slot, accumulate)
            return target if out is not None else target.to(dtype)
        if not consume:
            turns = turns.clone()
        phase = turns.sub_(torch.round(turns)).mul_(TWO_PI).to(work)
    else:
        phase = reduced_phase(turns, work, consume=consume)
    if accumulate:
        sin_slot.add_(torch.sin(phase))
        cos_slot.add_(phase.cos_())
    else:
        torch.sin(phase, out=sin_slot)
        cos_slot.copy_(phase.cos_())
    return target if out is not None else target.to(dtype)


def _numpy_centered_phase(turns: torch.Tensor, consume: bool) -> torch.Tensor:
    """float32 ``(turns - round(turns)) * 2 pi`` of float64 CPU ``turns`` by NumPy, in place when ``consume``:
    the same operations as torch's (round half to even, float64 products, one rounding to float32), bit for bit,
    ~3x faster here on blocks of events (torch's fresh float64 temporaries are page-faulted in on each call)."""
    array = turns.detach().numpy()
    whole = np.rint(array)
    if consume:
        fraction = np.subtract(array, whole, out=array)
    else:
        fraction = np.subtract(array, whole, out=whole)
    return torch.from_numpy(np.multiply(fraction, TWO_PI, out=fraction).astype(np.float32))


def _numpy_sincos_into(phase: torch.Tensor, sin_slot: torch.Tensor, cos_slot: torch.Tensor, accumulate: bool) -> None:
    """sin/cos of a contiguous float32 CPU ``phase`` (|phase| <= pi) by NumPy's vectorised float32 kernels, written
    into (or added to) the slots; ``phase`` is overwritten."""
    array = phase.numpy()
    sin = torch.from_numpy(np.sin(array))
    np.cos(array, out=array)
    if accumulate:
        sin_slot.add_(sin)
        cos_slot.add_(phase)
    else:
        sin_slot.copy_(sin)
        cos_slot.copy_(phase)


def centered_sincos_into(turns: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor, *,
                         scratch: np.ndarray | None = None) -> None:
    """float64 CPU ``turns [n, h]`` -> their float32 ``sin`` and ``cos`` (``[n, h]`` each, contiguous), written
    there: the numbers of ``sinusoid_of_turns(turns, centered=True)`` bit for bit, without its interleaving.

    For a caller that encodes many small blocks into buffers it reuses (no fresh temporaries, so nothing is
    page-faulted in per block; a kernel that sums several sinusoids interleaves once, after the sums). ``turns``
    (contiguous, not differentiable) is consumed: it ends holding the float64 phase. ``scratch``, a float64
    ``[n, h]`` contiguous NumPy array, is used as work space when given (the float32 phase is formed in ``cos``).
    """
    _check_sincos_into(turns, sin, cos, scratch)
    array = turns.numpy()
    whole = np.rint(array, out=scratch)
    np.subtract(array, whole, out=array)
    np.multiply(array, TWO_PI, out=array)
    phase = cos.numpy()
    np.copyto(phase, array, casting="same_kind")  # one rounding of the float64 phase, as .astype(float32)
    np.sin(phase, out=sin.numpy())
    np.cos(phase, out=phase)


def _check_sincos_into(turns: Any, sin: Any, cos: Any, scratch: Any) -> None:
    if not (isinstance(turns, torch.Tensor) and isinstance(sin, torch.Tensor) and isinstance(cos, torch.Tensor)):
        raise TypeError("turns, sin and cos must be tensors")
    if turns.dtype != torch.float64 or sin.dtype != torch.float32 or cos.dtype != torch.float32:
        raise TypeError(f"turns must be float64 and sin, cos float32, got {turns.dtype}, {sin.dtype}, {cos.dtype}")
    if turns.ndim != 2 or sin.shape != turns.shape or cos.shape != turns.shape:
        raise ValueError(f"turns, sin and cos must be [n, h] of one shape, got {tuple(turns.shape)}, "
                         f"{tuple(sin.shape)}, {tuple(cos.shape)}")
    if any(x.device.type != "cpu" or not x.is_contiguous() or x.requires_grad for x in (turns, sin, cos)):
        raise ValueError("turns, sin and cos must be contiguous CPU tensors that require no gradient")
    if scratch is not None and not (isinstance(scratch, np.ndarray) and scratch.dtype == np.float64
                                    and scratch.shape == tuple(turns.shape) and scratch.flags.c_contiguous):
        raise ValueError(f"scratch must be a contiguous float64 NumPy array of shape {tuple(turns.shape)}, got "
                         f"{getattr(scratch, 'dtype', type(scratch).__name__)} {getattr(scratch, 'shape', '')}")


def sinusoid_of_turns(
    turns: torch.Tensor,
    *,
    layout: str = "interleaved",
    dtype: torch.dtype = torch.float32,
    inplace: bool = False,
    out: torch.Tensor | None = None,
    accumulate: bool = False,
    centered: bool = False,
) -> torch.Tensor:
    """``[..., h]`` phases in turns (1 turn = 2 pi; float64 for precision) -> ``[..., 2h]`` sin/cos channels.

    Channels follow ``layout`` (see the module docstring). Below float64 the whole turns are removed in float64
    first, so ``sin``/``cos`` in float32 see a phase under one turn and lose nothing to the size of the
    position (error below 5e-7 at any phase).

    The input is not modified unless ``inplace=True``, which lets a caller hand over a float64 buffer it built
    for this call and no longer needs (it is then used as scratch space: one copy of N x h float64 saved).

    ``out`` (``[..., 2h]`` of ``dtype``, float32 or float64, on the turns' device, last axis contiguous; not
    differentiable): the channels are written there (added to what it holds with ``accumulate=True``) and
    ``out`` is returned; no output buffer is made. The values are those of the call without ``out``, bit for bit
    (a sum is then one rounding of the same two numbers).

    ``centered=True`` (float32 work only; float64 is unaffected) removes the *nearest* whole number of turns
    instead of truncating them, so the float32 phase lies in ``[-pi, pi]`` rather than ``(-2 pi, 2 pi)`` and
    carries half the rounding error; on CPU its sin/cos are then taken by NumPy's vectorised float32 kernels,
    measured 2.4x faster than torch's here. Against the float64 formula the result is closer than the default's
    (max 1.6e-7 vs 2.5e-7, mean 2.2e-8 vs 3.4e-8 on random phases; tests/core/test_sinusoid.py), but not bit
    for bit the default's numbers: the default stays what every other encoding in omnipos is built on.
    """
    check_choice(layout, "layout", LAYOUTS)
    check_float_dtype(dtype)
    if inplace and turns.dtype != torch.float64:
        raise TypeError(f"turns must be float64 for inplace=True, got {turns.dtype}")
    if out is not None:
        _check_out(out, turns, dtype)
    elif accumulate:
        raise ValueError("accumulate=True adds to out: pass out")
    return _sincos_from_turns(turns.to(torch.float64), layout, dtype, consume=inplace or turns.dtype != torch.float64,
                              out=out, accumulate=accumulate, centered=centered)


def _check_out(out: Any, turns: torch.Tensor, dtype: torch.dtype) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a tensor, got {type(out).__name__}")
    if out.dtype != dtype or dtype not in (torch.float32, torch.float64):
        raise TypeError(f"out must be float32 or float64 and match dtype={dtype}, got {out.dtype}")
    expected = (*turns.shape[:-1], 2 * turns.shape[-1])
    if tuple(out.shape) != expected:
        raise ValueError(f"out must have shape {expected} (turns' shape with 2h channels), got {tuple(out.shape)}")
    if out.device != turns.device:
        raise ValueError(f"out is on {out.device} but turns are on {turns.device}")
    if out.shape[-1] and out.stride(-1) != 1:
        raise ValueError(f"out's last axis must be contiguous (stride 1), got stride {out.stride(-1)}")
    if torch.is_grad_enabled() and (out.requires_grad or turns.requires_grad):
        raise TypeError("out= is not differentiable: call without out, or under torch.no_grad()")


def sinusoid_of_angles(
    angles: torch.Tensor, *, layout: str = "interleaved", dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``[..., h]`` angles in radians (float64 for precision) -> ``[..., 2h]`` sin/cos channels; see
    :func:`sinusoid_of_turns`."""
    return sinusoid_of_turns(angles.to(torch.float64) * (1.0 / TWO_PI), layout=layout, dtype=dtype, inplace=True)


def sinusoidal(
    positions: Any,
    dim: int,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Sinusoidal encoding of arbitrary (integer or real-valued) positions.

    Args:
        positions: any shape; tensor (any real dtype, any device), NumPy array, list or scalar.
            Non-tensors are read losslessly (floats as float64).
        dim: number of output channels; even and > 0.
        base: wavelength scale; frequencies run from 1 down to ``base^(-(dim-2)/dim)``.
        layout: ``"interleaved"`` (sin at even channels, the paper), ``"split"`` (``[sin | cos]``) or
            ``"fairseq"`` (``[sin | cos]``, exponent ``i / (dim/2 - 1)``). See the module docstring.
        dtype: floating dtype of the result.

    Returns:
        ``Tensor[*positions.shape, dim]`` of ``dtype`` on the positions' device.

    Raises:
        ValueError: odd or non-positive ``dim``, unknown ``layout``, non-finite positions.
        TypeError: boolean, complex or non-numeric positions; non-floating ``dtype``.
    """
    dim = check_even_dim(dim)
    check_choice(layout, "layout", LAYOUTS)
    check_float_dtype(dtype)
    positions = as_position_tensor(positions)
    check_finite(positions, "positions")
    cycles_per_unit = layout_frequencies(dim, base=base, layout=layout, device=positions.device) / TWO_PI
    turns = positions.to(torch.float64).unsqueeze(-1) * cycles_per_unit
    return _sincos_from_turns(turns, layout, dtype, consume=True)


class SinusoidalEncoding(nn.Module):
    """Module form of :func:`sinusoidal`, with an output scale.

    The scale is the knob against a positional signal so large that it saturates the attention softmax (or so
    small that order is lost); ``learnable_scale=True`` makes it a parameter (x-transformers'
    ``ScaledSinusoidalEmbedding`` starts it at ``dim ** -0.5``).

    Args:
        dim: channels (even). base, layout: as in :func:`sinusoidal`.
        scale: multiplier of the encoding (finite). learnable_scale: learn it (initialised at ``scale``).
        dtype: the initial dtype of the scale and so of the output; ``.half()`` / ``.double()`` / ``.to(dtype)``
            change it like any module's. The sinusoid itself is computed in float32 (float64 for a float64 module)
            from float64 phases and rounded once.

    Shape:
        ``forward(positions)``: positions of any shape (differentiable when real-valued) ->
        ``[*positions.shape, dim]`` of the module's dtype.
    """

    def __init__(
        self,
        dim: int,
        *,
        base: float = 10000.0,
        layout: str = "interleaved",
        scale: float = 1.0,
        learnable_scale: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.dim = check_even_dim(dim)
        self.layout = check_choice(layout, "layout", LAYOUTS)
        layout_frequencies(dim, base=base, layout=layout)  # validates base and fairseq's dim early
        self.base = float(base)
        check_float_dtype(dtype)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(float(scale)):
            raise ValueError(f"scale must be a finite number, got {scale!r}")
        if abs(float(scale)) > torch.finfo(dtype).max:
            raise ValueError(f"scale={scale} is beyond the range of dtype={dtype} (largest {torch.finfo(dtype).max})")
        self.initial_scale = float(scale)
        self.learnable_scale = bool(learnable_scale)
        if self.learnable_scale:
            self.scale = nn.Parameter(torch.empty((), dtype=dtype))
        else:  # a buffer, so that it (and the output) follows .half() / .double()
            self.register_buffer("scale", torch.empty((), dtype=dtype), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Set the scale to its initial value (after meta-device construction and ``to_empty``)."""
        with torch.no_grad():
            self.scale.fill_(self.initial_scale)

    @property
    def dtype(self) -> torch.dtype:
        """The output dtype: the scale's, which follows ``.half()`` / ``.double()`` / ``.to(dtype)``."""
        return self.scale.dtype

    def forward(self, positions: Any) -> torch.Tensor:
        if not isinstance(positions, torch.Tensor):
            positions = as_position_tensor(positions, device=self.scale.device)
        out = self.scale.dtype
        work = torch.float64 if out == torch.float64 else torch.float32
        pe = sinusoidal(positions, self.dim, base=self.base, layout=self.layout, dtype=work)
        return (pe * self.scale.to(device=pe.device, dtype=work)).to(out)

    def extra_repr(self) -> str:
        scale = f"{float(self.scale):g}" if not self.scale.is_meta else "meta"
        return (
            f"dim={self.dim}, base={self.base:g}, layout={self.layout!r}, "
            f"scale={scale}, learnable_scale={self.learnable_scale}"
        )


def add_positional(x: torch.Tensor, pe: torch.Tensor, mode: str = "add") -> torch.Tensor:
    """Combine token features ``x [..., L, D]`` with a positional encoding ``pe`` broadcastable to it.

    ``mode="add"``: ``x + pe`` (``pe [..., L, D]``, the standard). ``mode="concat"``: ``[x | pe]`` along the
    last axis (``pe [..., L, P]`` broadcast over x's leading axes) -> ``[..., L, D + P]``.
    ``pe`` is cast to ``x``'s dtype and must be on x's device.
    """
    check_choice(mode, "mode", ("add", "concat"))
    if not isinstance(x, torch.Tensor) or not isinstance(pe, torch.Tensor):
        raise TypeError("x and pe must be tensors")
    if pe.device != x.device:
        raise ValueError(f"pe is on {pe.device} but x is on {x.device}; move one of them")
    if x.ndim < 2 or pe.ndim < 2:
        raise ValueError(f"x and pe need at least [L, D] axes; got x {tuple(x.shape)}, pe {tuple(pe.shape)}")
    pe = pe.to(x.dtype)
    if mode == "add":
        try:
            target = torch.broadcast_shapes(x.shape, pe.shape)
        except RuntimeError:
            target = None
        if target != x.shape:
            raise ValueError(f"pe {tuple(pe.shape)} does not broadcast to x {tuple(x.shape)} for mode='add'")
        return x + pe
    try:
        lead = torch.broadcast_shapes(x.shape[:-1], pe.shape[:-1])
    except RuntimeError:
        lead = None
    if lead != x.shape[:-1]:
        raise ValueError(f"pe {tuple(pe.shape)} does not broadcast over x {tuple(x.shape)}'s leading axes")
    return torch.cat([x, pe.expand(*x.shape[:-1], pe.shape[-1])], dim=-1)
