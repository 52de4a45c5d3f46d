"""Fused Triton RoPE kernel for CUDA (placeholder: the eager path is used until the kernel lands)."""

from __future__ import annotations

from typing import Any


def maybe_rotate(rope: Any, q: Any, k: Any, positions: Any, seq_axis: int) -> None:
    return None
