"""``take_rows``: gather rows by index, the fastest way per device (the hot loop of one-hot, complement, RC)."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["take_rows"]

_NUMPY_DTYPES = {torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
                 torch.uint8, torch.bool}


def take_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table[index]`` for a 1-D integer ``index``: ``[len(index), *table.shape[1:]]``.

    On CPU in eager mode (no autograd, a NumPy dtype) ``np.take`` does it 5x faster than ``index_select`` and
    ~15x faster than advanced indexing for the small rows used here; elsewhere (other devices, meta tensors,
    autograd, ``torch.compile``) one ``index_select``.
    """
    if (not torch.compiler.is_compiling() and table.device.type == "cpu" and index.device.type == "cpu"
            and table.dtype in _NUMPY_DTYPES and index.dtype in _NUMPY_DTYPES
            and not (torch.is_grad_enabled() and table.requires_grad)):
        return torch.from_numpy(np.take(table.detach().numpy(), index.numpy(), axis=0))
    return table.index_select(0, index.long())
