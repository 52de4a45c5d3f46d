"""Size limits and token dtypes shared by the DNA functions: refuse a runaway allocation by name, up front.

A padded batch costs ``rows * width`` positions, and a huge ``max_len`` (or one enormous read) would otherwise
reach the allocator and fail there with a bare RuntimeError, or swap the machine to a halt.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["MAX_BATCH_BYTES", "TOKEN_DTYPES", "check_batch_bytes", "check_token_dtype"]

MAX_BATCH_BYTES = 8 << 30  # 8 GiB: a larger padded batch is refused with a ValueError naming its cause
TOKEN_DTYPES = (torch.uint8, torch.int16, torch.int32, torch.int64)


def check_batch_bytes(rows: int, width: int, bytes_per_position: int, what: str) -> None:
    """Refuse a padded ``[rows, width, ...]`` result of more than :data:`MAX_BATCH_BYTES`; ``what`` names the cause
    (``"max_len=..."``, ``"the longest read (...)"``) in the message."""
    size = int(rows) * int(width) * int(bytes_per_position)
    if size > MAX_BATCH_BYTES:
        raise ValueError(f"{what}: a padded batch of {rows:,} rows x {width:,} positions would take "
                         f"{size / 2**30:,.1f} GiB (more than omnipos.dna.limits.MAX_BATCH_BYTES = "
                         f"{MAX_BATCH_BYTES / 2**30:g} GiB); use smaller batches, a smaller max_len, or "
                         "truncation='split' when reading files")


def check_token_dtype(dtype: Any, name: str = "token_dtype") -> torch.dtype:
    """An integer dtype that holds every token id (0..31): uint8 (the default), int16, int32 or int64."""
    if not isinstance(dtype, torch.dtype) or dtype not in TOKEN_DTYPES:
        raise TypeError(f"{name} must be one of torch.uint8, torch.int16, torch.int32, torch.int64 (nn.Embedding "
                        f"takes int32/int64), got {dtype!r}")
    return dtype
