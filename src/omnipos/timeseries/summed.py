"""The CPU kernel of a summed TimelineEncoder: absolute + periodic + gap encoded block by block into the output.

Each output value is the same sequence of float32 operations as the component-by-component path (the first
component written, each later one added; the periodic lift one product and one sum per feature), so the numbers
are equal bit for bit; what changes is how often memory is touched and how many calls are made. Per-event work
(float64 times, log-gaps, the periodic features' clock phases) runs on blocks of ``16 * chunk`` events, where a
torch call's overhead is small against its work. Per-channel work runs on sub-blocks of ``chunk`` events in
buffers made once and reused: each sinusoid's float64 phases, sines and cosines in contiguous ``[n, dim / 2]``
arrays (NumPy's vectorised float32 kernels), the sum kept de-interleaved (even channels, odd channels: the lift's
rows split the same way), and the two halves interleaved into the output once per sub-block by
``torch.complex`` (real = even channel, imaginary = odd channel is the interleaved layout) instead of two strided
copies and two strided adds per sinusoid. The padded layout stages each sub-block and moves its rows into their
slots (:func:`omnipos.core.put_rows`). With numba (``omnipos[fast]``), the periodic lift is one compiled pass per
sub-block instead of four torch calls per feature, and the padded layout's rows are interleaved straight into
their slots (:mod:`omnipos.timeseries.summed_kernels`: the same operations, the same bits).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..core import centered_sincos_into, compiled_kernels_enabled, put_rows
from .absolute import reaches_whole_turns, whole_turns_as_zero
from .gaps import log_gap

__all__ = ["SUMMED_COMPONENTS", "compiled_pieces", "encode_summed_blocks"]

SUMMED_COMPONENTS = frozenset({"absolute", "periodic", "gap"})
BLOCKS_PER_EVENT_BLOCK = 16


def compiled_pieces():
    """:mod:`omnipos.timeseries.summed_kernels`, or None where numba is missing or switched off
    (``OMNIPOS_DISABLE_NUMBA=1``)."""
    if not compiled_kernels_enabled():
        return None
    try:
        from . import summed_kernels
    except ImportError:
        return None
    return summed_kernels


def encode_summed_blocks(
    out: torch.Tensor,
    times: torch.Tensor,
    gaps: torch.Tensor | None,
    components: Sequence[str],
    *,
    cycles: torch.Tensor | None,
    gap_cycles: torch.Tensor | None,
    gap_scale: float,
    lift_rows: torch.Tensor | None,
    periodic_columns: Callable[[int, int], list[torch.Tensor]] | None,
    chunk: int,
    slots: torch.Tensor | None = None,
) -> torch.Tensor:
    """The sum of ``components`` (from :data:`SUMMED_COMPONENTS`, in that order) of ``N`` real events, written
    into ``out``; returns ``out``.

    Args:
        out: float32 CPU output: ``[N, dim]`` (packed), or ``[R, dim]`` slots with ``slots`` ``[N]`` saying
            which row each event goes to (padded; the other rows are left as they are).
        times: ``[N]`` times; ``gaps``: ``[N]`` gaps to the previous event (with ``"gap"``).
        cycles, gap_cycles: ``[dim // 2]`` float64 frequencies of the absolute / log-gap sinusoids (interleaved).
        gap_scale: the log-gap's scale. lift_rows: ``[features, dim]`` float32, the periodic lift's transposed
            weight. periodic_columns: ``(start, stop) -> features`` float32 ``[stop - start]`` columns.
        chunk: events per sub-block (> 0).
    """
    total, dim = times.shape[0], out.shape[-1]
    half = dim // 2
    sub = max(1, min(chunk, total))
    # per sinusoid, contiguous [n, half] buffers reused block after block (broadcasting into a strided half of a
    # wider buffer measured 3-6x slower per element)
    sinusoids = {c: (cycles if c == "absolute" else gap_cycles, torch.empty(sub, half, dtype=torch.float64),
                     torch.empty(sub, half), torch.empty(sub, half)) for c in components if c != "periodic"}
    scratch = np.empty((sub, half))
    # the sum is built de-interleaved (even channels, odd channels) and interleaved once at the end; when a
    # sinusoid comes first, its sin and cos buffers are the sums
    first = components[0] if components[0] != "periodic" else None
    even_sum, odd_sum = (sinusoids[first][2], sinusoids[first][3]) if first else (torch.empty(sub, half),
                                                                                  torch.empty(sub, half))
    # the lift's rows split into the even and odd channels: [features, half] each
    rows_even, rows_odd = (None, None) if lift_rows is None else (lift_rows[:, 0::2].contiguous(),
                                                                  lift_rows[:, 1::2].contiguous())
    kernels = compiled_pieces()
    if kernels is None:
        term = torch.empty(sub, half)
        lifted = [] if lift_rows is None else list(zip(rows_even, rows_odd))
    else:
        rows_even, rows_odd = (None, None) if lift_rows is None else (rows_even.numpy(), rows_odd.numpy())
        out_rows = out.numpy() if slots is not None else None
        slot_rows = slots.numpy() if slots is not None else None
    staged = torch.empty(sub, dim) if slots is not None and kernels is None else None
    step = sub * BLOCKS_PER_EVENT_BLOCK
    for start in range(0, total, step):
        stop = min(start + step, total)
        t = times[start:stop].to(torch.float64)
        inputs = {"absolute": t.unsqueeze(1) if "absolute" in sinusoids else None,
                  "gap": log_gap(gaps[start:stop], gap_scale).unsqueeze(1) if "gap" in sinusoids else None}
        big = "absolute" in sinusoids and reaches_whole_turns(t, cycles)
        columns = periodic_columns(start, stop) if "periodic" in components else []
        if kernels is not None and columns:
            stacked = torch.stack(columns).numpy()  # [features, block]
        columns = [c.unsqueeze(1) for c in columns]
        for lo in range(start, stop, sub):
            hi = min(lo + sub, stop)
            n, i, j = hi - lo, lo - start, hi - start
            for name, (rates, turns, sin, cos) in sinusoids.items():
                block = torch.mul(inputs[name][i:j], rates, out=turns[:n])  # as the component path forms it
                if big and name == "absolute":
                    block.copy_(whole_turns_as_zero(block))
                centered_sincos_into(block, sin[:n], cos[:n], scratch=scratch[:n])
            even, odd = even_sum[:n], odd_sum[:n]
            written = False
            for name in components:
                if name == "periodic" and kernels is not None:
                    if columns:
                        kernels.add_lift(even.numpy(), odd.numpy(), stacked, i, rows_even, rows_odd, written)
                        written = True
                    continue
                if name == "periodic":
                    for column, (row_even, row_odd) in zip(columns, lifted):
                        if written:
                            even.add_(torch.mul(column[i:j], row_even, out=term[:n]))
                            odd.add_(torch.mul(column[i:j], row_odd, out=term[:n]))
                        else:
                            torch.mul(column[i:j], row_even, out=even)
                            torch.mul(column[i:j], row_odd, out=odd)
                            written = True
                    continue
                if written:
                    _, _, sin, cos = sinusoids[name]
                    even.add_(sin[:n])
                    odd.add_(cos[:n])
                written = True  # (first: even and odd are its sin and cos)
            if slots is not None and kernels is not None:
                kernels.interleave_into_rows(out_rows, slot_rows, lo, even.numpy(), odd.numpy())
                continue
            target = out[lo:hi] if slots is None else staged[:n]
            torch.complex(even, odd, out=target.view(torch.complex64))  # real, imaginary: interleaved
            if slots is not None:
                put_rows(out, slots[lo:hi], target)
    return out
