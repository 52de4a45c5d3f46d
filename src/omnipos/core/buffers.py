"""Fresh output buffers whose first write is cheap.

A fresh tensor's memory costs nothing until it is first written; then the kernel maps it page by page. torch's
CPU allocator gets ordinary 4 KiB pages, so writing a fresh 256 MB output takes ~65,000 page faults, measured as
long as the arithmetic that fills it in several encoders (100-125 ms here). NumPy asks the kernel for transparent
huge pages (``madvise``) on arrays of 4 MiB and more: the same first write takes ~130 faults (~25 ms, most of it
the kernel zeroing the pages). :func:`new_buffer` allocates through NumPy on the CPU and through torch elsewhere;
its tensors are ordinary tensors (they share NumPy's memory, which only ``resize_()`` notices).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

__all__ = ["new_buffer"]

_NUMPY_DTYPES = {
    torch.bool: np.bool_, torch.uint8: np.uint8, torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32,
    torch.int64: np.int64, torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64,
    torch.complex64: np.complex64, torch.complex128: np.complex128,
}


def new_buffer(shape: tuple[int, ...] | list[int] | torch.Size, dtype: torch.dtype,
               device: torch.device | str | None = None, *, fill: bool | int | float | None = None) -> torch.Tensor:
    """A fresh tensor of ``shape`` and ``dtype`` on ``device`` (default: the CPU), uninitialised (``fill=None``)
    or filled with ``fill``.

    On the CPU in eager mode and for the dtypes NumPy has, NumPy allocates it (huge pages, see the module
    docstring); ``fill=0`` then asks for zeroed memory (``calloc``), so pages that are never written are never
    touched (a padded batch is often half padding). Elsewhere (other devices, ``torch.compile``, bfloat16)
    ``torch.empty`` / ``torch.full``. Sizes are the caller's to check (:func:`omnipos.core.allocation_guard`).
    """
    shape = tuple(int(s) for s in shape)
    device = torch.device("cpu" if device is None else device)
    numpy_dtype = _NUMPY_DTYPES.get(dtype)
    if device.type != "cpu" or numpy_dtype is None or torch.compiler.is_compiling():
        if fill is None:
            return torch.empty(shape, dtype=dtype, device=device)
        return torch.full(shape, fill, dtype=dtype, device=device)
    # (-0.0 == 0, but its bits are not calloc's)
    zero = fill is not None and fill == 0 and not (isinstance(fill, float) and math.copysign(1.0, fill) < 0)
    out = torch.from_numpy(_numpy_array(shape, numpy_dtype, zero))
    if fill is not None and not zero:
        out.fill_(fill)  # torch's conversion of the value, as torch.full would make it
    return out


#: NumPy asks for huge pages from this size on; such a buffer starts on a huge-page boundary
_HUGE = 1 << 21
_MADVISED = 1 << 22


def _numpy_array(shape: tuple[int, ...], numpy_dtype: Any, zero: bool) -> np.ndarray:
    """``np.zeros`` / ``np.empty``; from 4 MiB on, carved out of a block at a 2 MiB boundary, the block reaching
    past the buffer's last 2 MiB boundary.

    ``malloc`` maps a large block at an ordinary page boundary, so the first and last 2 MiB of it are not whole
    huge pages: writing a fresh 50 MB buffer took ~536 page faults (25 huge pages, ~511 small ones, ~15% of the
    write's time); starting on a boundary it takes ~25. A buffer whose size is no multiple of 2 MiB ends inside a
    huge page only if the block covers that page whole: issue 38's 34.6 MB output took 16 huge and 256 small
    faults (3.8 ms to write), with the block rounded up 17 huge ones (3.3 ms). The gap before the buffer and the
    rest of its last huge page are never written by the caller (the kernel zeroes that page whole). Sizes beyond
    256 TiB go to NumPy as they are, which refuses them."""
    nbytes = math.prod(shape) * np.dtype(numpy_dtype).itemsize
    if not _MADVISED <= nbytes <= 1 << 48:
        return np.zeros(shape, dtype=numpy_dtype) if zero else np.empty(shape, dtype=numpy_dtype)
    size = -(-nbytes // _HUGE) * _HUGE + _HUGE  # whole huge pages from the boundary, whatever malloc's offset
    block = np.zeros(size, dtype=np.uint8) if zero else np.empty(size, dtype=np.uint8)
    start = -block.ctypes.data % _HUGE
    return block[start:start + nbytes].view(numpy_dtype).reshape(shape)
