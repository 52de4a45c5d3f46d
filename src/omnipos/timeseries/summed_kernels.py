"""Compiled pieces of the summed encoder's CPU kernel (:mod:`omnipos.timeseries.summed`), with numba (the optional
extra ``omnipos[fast]``; this module does not import without it, and the kernel then runs its torch ops).

Each is the same float32 operations in the same order as the torch ops it replaces, one rounding per product and
per sum (numba without ``fastmath`` neither reassociates nor fuses a multiply and an add), so the output is the
same bits; what changes is one pass over a block instead of one torch call per feature and half.
"""

from __future__ import annotations

import numba  # noqa: F401 - the kernels need it: without numba this module does not import (callers catch it)

from ..core import compiled

__all__ = ["add_lift", "interleave_into_rows"]


@compiled
def add_lift(even, odd, columns, offset, rows_even, rows_odd, written):
    """The periodic lift into the de-interleaved sums ``even``/``odd`` ``[n, half]`` float32, feature by feature:
    ``sum += columns[f, offset + r] * rows[f, d]`` (product rounded, then the sum), or for the first feature
    ``sum = product`` when nothing is ``written`` yet. ``columns [F, >= offset + n]``, ``rows_* [F, half]``."""
    n, half = even.shape
    features = columns.shape[0]
    for r in range(n):
        first = 0
        if not written:
            c = columns[0, offset + r]
            for d in range(half):
                even[r, d] = c * rows_even[0, d]
                odd[r, d] = c * rows_odd[0, d]
            first = 1
        for f in range(first, features):
            c = columns[f, offset + r]
            for d in range(half):
                even[r, d] = even[r, d] + c * rows_even[f, d]
                odd[r, d] = odd[r, d] + c * rows_odd[f, d]


@compiled
def interleave_into_rows(out, slots, offset, even, odd):
    """``out[slots[offset + r], 2d] = even[r, d]`` and ``out[..., 2d + 1] = odd[r, d]``: the sums interleaved
    straight into their rows of the padded output (``out [R, 2 half]``), with no staging block."""
    n, half = even.shape
    for r in range(n):
        row = slots[offset + r]
        for d in range(half):
            out[row, 2 * d] = even[r, d]
            out[row, 2 * d + 1] = odd[r, d]
