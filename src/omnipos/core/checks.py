"""Argument checks shared by every omnipos module: one wording for one kind of mistake.

Public: the domains import these from :mod:`omnipos.core`, so a given mistake reads the same everywhere."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

__all__ = [
    "allocation_guard",
    "check_positive_int",
    "check_even_dim",
    "check_choice",
    "as_position_tensor",
    "can_inspect_values",
    "check_finite",
    "check_float_dtype",
    "check_integer_tensor",
    "narrow_to",
    "renamed_argument",
    "to_device",
]


def check_positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as an int, or raise naming ``name`` when it is not an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_even_dim(dim: Any, name: str = "dim") -> int:
    """A positive, even channel count: sin/cos come in pairs, so odd sizes have no standard meaning."""
    dim = check_positive_int(dim, name)
    if dim % 2:
        raise ValueError(f"{name} must be even (sin/cos come in pairs), got {dim}")
    return dim


def check_choice(value: Any, name: str, choices: Iterable[str]) -> str:
    """Raise naming ``name`` and listing the valid ``choices`` when ``value`` is not one of them."""
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def as_position_tensor(positions: Any, name: str = "positions", *, device: torch.device | None = None) -> torch.Tensor:
    """Turn a tensor / array / list / scalar of positions into a real-valued or integer tensor.

    Tensors keep their device and dtype (no copy). Everything else is read without loss: Python and NumPy
    floats become float64 (``torch.tensor([0.1])`` would silently round them to float32), integers int64.
    Boolean, complex and non-numeric inputs raise ``TypeError``.
    """
    if isinstance(positions, torch.Tensor):
        tensor = positions
    else:
        try:
            array = np.asarray(positions)
        except (ValueError, TypeError) as exc:  # ragged nested lists and the like
            raise TypeError(f"{name} must be a tensor, array or (nested) list of numbers: {exc}") from None
        if array.dtype.kind in "iu":
            tensor = torch.as_tensor(array.astype(np.int64, copy=False), device=device)
        elif array.dtype.kind == "f":
            tensor = torch.as_tensor(array.astype(np.float64, copy=False), device=device)
        elif array.dtype.kind == "b":
            raise TypeError(f"{name} must hold numbers, got booleans")
        elif array.dtype.kind == "c":
            raise TypeError(f"{name} must be real-valued, got complex numbers")
        else:
            raise TypeError(f"{name} must hold numbers, got an array of dtype {array.dtype}")
    if tensor.dtype == torch.bool:
        raise TypeError(f"{name} must hold numbers, got a boolean tensor")
    if tensor.is_complex():
        raise TypeError(f"{name} must be real-valued, got a complex tensor ({tensor.dtype})")
    return tensor


def can_inspect_values(*tensors: Any) -> bool:
    """Whether checks that read values on the host (NaN, ranges, sortedness, ``.item()``) can run now.

    False while ``torch.compile`` traces (a host sync would break the graph: such checks stay in eager mode, and
    a compiled call trusts its inputs), while a CUDA tensor among ``tensors`` is in a CUDA graph capture (a sync
    there is an error; a captured call trusts its inputs likewise) and when any of ``tensors`` is a meta tensor
    (shapes without values);
    arguments that are not tensors (None, lists) are ignored. Shape and dtype checks never need this: they run
    everywhere. The one test every domain uses for "may I look at the values?".
    """
    if torch.compiler.is_compiling():
        return False
    for t in tensors:
        if isinstance(t, torch.Tensor) and (t.is_meta or (t.is_cuda and torch.cuda.is_current_stream_capturing())):
            return False
    return True


def check_finite(tensor: torch.Tensor, name: str) -> None:
    """Raise naming ``name`` when a floating tensor holds NaN or +-inf (integers are always finite).

    A value check: skipped while compiling and for meta tensors (see :func:`can_inspect_values`)."""
    if not can_inspect_values(tensor):
        return
    if tensor.is_floating_point() and tensor.numel() and not bool(torch.isfinite(tensor).all()):
        bad = (~torch.isfinite(tensor)).nonzero()[0].tolist()
        raise ValueError(f"{name} must be finite; found {tensor[tuple(bad)].item()} at index {tuple(bad)}")


def to_device(tensor: torch.Tensor, device: torch.device | str, name: str) -> torch.Tensor:
    """``tensor`` on ``device`` (no copy when it is there already). A meta tensor has no values to move: asked to
    go to a real device it raises a ValueError naming ``name`` (torch's own error is a RuntimeError)."""
    device = torch.device(device)
    if tensor.device == device:
        return tensor
    if tensor.is_meta:
        raise ValueError(f"{name} is a meta tensor (shapes without values) but the computation runs on {device}; "
                         "give real values, or put everything on the meta device")
    return tensor.to(device)


def check_float_dtype(dtype: Any, name: str = "dtype") -> torch.dtype:
    """Raise ``TypeError`` naming ``name`` unless ``dtype`` is a floating ``torch.dtype``."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.dtype, got {dtype!r}")
    return dtype


def narrow_to(values: torch.Tensor, dtype: torch.dtype, name: str, hint: str = "") -> torch.Tensor:
    """``values.to(dtype)``, raising a ValueError naming ``name`` where a finite value lies beyond the range of a
    narrower floating ``dtype`` (float32 -> float16: 65504), which the cast would silently turn into inf.

    The check reads one maximum, and only when ``dtype``'s range is the smaller one (bfloat16 has float32's range:
    no check); skipped while compiling and for meta tensors (see :func:`can_inspect_values`)."""
    if (values.dtype != dtype and values.is_floating_point() and dtype.is_floating_point
            and torch.finfo(dtype).max < torch.finfo(values.dtype).max and values.numel()
            and can_inspect_values(values)):
        limit = torch.finfo(dtype).max
        peak = float(values.detach().abs().max())
        if not math.isfinite(peak):  # inf or NaN was there before the cast (it stays): look at the finite values
            zero = torch.zeros((), dtype=values.dtype, device=values.device)
            peak = float(torch.where(torch.isfinite(values), values.detach(), zero).abs().max())
        if peak > limit:
            raise ValueError(f"{name} reaches {peak:.4g}, beyond what {dtype} holds ({limit:.4g}): the cast would "
                             f"make it inf{'; ' + hint if hint else ''}")
    return values.to(dtype)


def check_integer_tensor(tensor: torch.Tensor, name: str, what: str = "an integer tensor") -> torch.Tensor:
    """Raise ``TypeError`` naming ``name`` unless ``tensor`` has an integer dtype (bool, float, complex refused)."""
    if tensor.dtype == torch.bool or tensor.is_floating_point() or tensor.is_complex():
        raise TypeError(f"{name} must be {what}, got dtype {tensor.dtype}")
    return tensor


def renamed_argument(value: Any, old_value: Any, name: str, old_name: str, *, default: Any = None) -> Any:
    """The value of argument ``name``, which was once called ``old_name`` (still accepted, so no call breaks).

    ``old_value`` is None when the old name was not used. Passing both names raises ``TypeError``, unless
    ``value`` is still its ``default``. A required argument (``default=None``) given under neither name raises.
    """
    if old_value is None:
        if value is None and default is None:
            raise TypeError(f"missing the argument {name!r}")
        return value
    if value is not None and value != default:
        raise TypeError(f"got {name}={value!r} and its old name {old_name}={old_value!r}; pass {name} only")
    return old_value


@contextmanager
def allocation_guard(what: str) -> Iterator[None]:
    """Turn the allocator's refusal into a ``ValueError`` that says which argument asked for the memory.

    ``with allocation_guard(f"max_len={max_len} (a mask [{b}, {max_len}])"): torch.zeros(...)``: a size beyond
    what the machine (or int64) can hold then reads as bad input, not as a RuntimeError from deep inside torch.
    """
    try:
        yield
    except torch.OutOfMemoryError as exc:
        raise ValueError(f"{what} does not fit in memory: {str(exc).splitlines()[0]}") from None
    except MemoryError as exc:  # NumPy's allocator (omnipos.core.new_buffer)
        raise ValueError(f"{what} does not fit in memory: {str(exc).splitlines()[0][:200]}") from None
    except ValueError as exc:
        if "array is too big" in str(exc):  # NumPy: the byte count overflows its size type
            raise ValueError(f"{what} does not fit in memory: {str(exc).splitlines()[0][:200]}") from None
        raise
    except RuntimeError as exc:
        message = str(exc)
        if "allocate" in message or "overflow" in message or "out of memory" in message:
            raise ValueError(f"{what} does not fit in memory: {message.splitlines()[0][:200]}") from None
        raise
