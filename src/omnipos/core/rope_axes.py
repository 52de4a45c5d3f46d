"""Which coordinate of a multi-axis position turns each RoPE frequency slot: axial (N-D) RoPE and M-RoPE.

A rotary embedding has ``R / 2`` frequency slots (``R`` the rotary dim). With 1-D positions every slot turns by
``p * inv_freq_j``. With positions of several coordinates (``[..., seq, n]``) slot ``j`` turns by
``p[slot_axis[j]] * inv_freq_j``; the two families differ in the map and in the frequencies:

- **axial** (vision 2-D RoPE, HunyuanVideo / CogVideoX 3-D RoPE): the slots are cut into consecutive groups,
  ``axes_dims[a] / 2`` slots for axis ``a``, and each group is a full ladder of its own,
  ``base ** (-arange(0, d_a, 2) / d_a)`` over its own ``d_a`` channels (HunyuanVideo's ``rope_dim_list``).
- **M-RoPE** (Qwen2-VL, Qwen2.5-VL, Qwen3-VL; positions ``(t, h, w)``): one ladder over the whole rotary dim;
  ``mrope_section = (s_t, s_h, s_w)`` (summing to ``R / 2``) says how many slots each coordinate turns. Contiguous
  (Qwen2/2.5-VL): the first ``s_t`` slots take t, the next ``s_h`` h, the last ``s_w`` w. Interleaved (Qwen3-VL,
  ``mrope_interleaved=True``): slot ``j`` takes h when ``j % 3 == 1`` and ``j < 3 s_h``, w when ``j % 3 == 2``
  and ``j < 3 s_w``, t otherwise (transformers' ``Qwen3VLTextRotaryEmbedding``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from .checks import check_positive_int

__all__ = ["axial_slot_axes", "check_axes_dims", "check_mrope_section", "linspace_frequencies", "mrope_slot_axes"]

MROPE_AXES = ("t", "h", "w")
# how each axis's ladder of d_a channels is built: "geometric" base ** (-arange(0, d_a, 2) / d_a) (RoFormer, Flux,
# HunyuanVideo, Wan, CogVideoX); "linspace" base ** linspace(0, 1, d_a / 2) * pi / 2 (LTX-Video)
FREQUENCY_RULES = ("geometric", "linspace")
# which axis turns slot j: "blocks" d_a / 2 consecutive slots per axis; "interleaved" axis j % n_axes (LTX-Video)
AXES_ORDERS = ("blocks", "interleaved")
# where channels past rotary_dim sit: "back" (partial rotary, GPT-NeoX) or "front" (LTX-Video's dim % 6)
PASSTHROUGH_SIDES = ("back", "front")


def _int_tuple(values: Any, name: str) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a tuple or list of ints, got {type(values).__name__} ({values!r})")
    return tuple(check_positive_int(v, f"{name}[{i}]") for i, v in enumerate(values))


def check_mrope_section(section: Any, slots: int, *, interleaved: bool = False) -> tuple[int, ...]:
    """Validate ``mrope_section`` for ``slots = rotary_dim // 2`` frequency slots: three positive ints (t, h, w)
    summing to ``slots``; interleaved, each axis must get its count of slots (``3 * s_h - 2 < slots`` etc.)."""
    section = _int_tuple(section, "mrope_section")
    if len(section) != 3:
        raise ValueError(f"mrope_section must have 3 entries (t, h, w slots), got {len(section)}: {section}")
    if sum(section) != slots:
        raise ValueError(
            f"mrope_section={section} sums to {sum(section)}, expected rotary_dim / 2 = {slots} (one entry per "
            "frequency slot: e.g. (16, 24, 24) for a head dim of 128)"
        )
    if interleaved:
        counts = [mrope_slot_axes(section, interleaved=True).count(a) for a in range(3)]
        if tuple(counts) != section:
            raise ValueError(
                f"mrope_section={section} with mrope_interleaved=True gives (t, h, w) {tuple(counts)} slots: axis a "
                f"in (h, w) takes slots j = a, a + 3, ... below 3 * section[a], which must stay below {slots}"
            )
    return section


def mrope_slot_axes(section: Sequence[int], *, interleaved: bool = False) -> list[int]:
    """The coordinate (0 t, 1 h, 2 w) of each of the ``sum(section)`` slots; see the module docstring."""
    slots = sum(section)
    if not interleaved:
        return [axis for axis, count in enumerate(section) for _ in range(count)]
    axes = [0] * slots
    for axis in (1, 2):
        for j in range(axis, min(3 * section[axis], slots), 3):
            axes[j] = axis
    return axes


def check_axes_dims(axes_dims: Any, rotary_dim: int | None, n_axes: int | None,
                    dim: int | None = None) -> tuple[int, ...]:
    """Validate per-axis rotary dims: even, positive, ``len == n_axes`` (when given), summing to ``rotary_dim``
    (``None``: to at most the head dim ``dim``, the rest passing through)."""
    dims = _int_tuple(axes_dims, "axes_dims")
    if not dims:
        raise ValueError("axes_dims must name at least one axis")
    if n_axes is not None and len(dims) != n_axes:
        raise ValueError(f"axes_dims={dims} has {len(dims)} entries but n_axes={n_axes}")
    odd = [i for i, d in enumerate(dims) if d % 2]
    if odd:
        raise ValueError(f"axes_dims must be even (channels rotate in pairs); axes_dims[{odd[0]}]={dims[odd[0]]}")
    if rotary_dim is None:
        if dim is not None and sum(dims) > dim:
            raise ValueError(f"axes_dims={dims} sums to {sum(dims)}, more than the head dim dim={dim}")
        return dims
    if sum(dims) != rotary_dim:
        raise ValueError(f"axes_dims={dims} sums to {sum(dims)}, expected the rotary dim {rotary_dim}")
    return dims


def axial_slot_axes(axes_dims: Sequence[int]) -> list[int]:
    """The axis of each slot of axial RoPE: ``axes_dims[a] // 2`` consecutive slots per axis."""
    return [axis for axis, d in enumerate(axes_dims) for _ in range(d // 2)]


def linspace_frequencies(axis_dim: int, base: float, *, device: Any = None) -> torch.Tensor:
    """LTX-Video's ladder of one axis: ``base ** linspace(0, 1, axis_dim // 2) * pi / 2``, float64
    ``[axis_dim // 2]`` (diffusers ``LTXVideoRotaryPosEmbed``; angles there are this times a coordinate in [-1, 1])."""
    steps = torch.linspace(0.0, 1.0, axis_dim // 2, dtype=torch.float64, device=device)
    return base ** steps * (math.pi / 2)
