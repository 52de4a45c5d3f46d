"""Triton kernels for DNA tensors on CUDA: ``one_hot`` and ``reverse_complement``, one launch each.

Both only move and look up values, so their outputs equal the eager path's bit for bit:

- ``one_hot``: each token's row of the cached ``[32, 4|5]`` table (:func:`omnipos.dna.alphabet.one_hot`'s, in the
  output dtype, on the device) gathered straight into the output; no index conversion, no transposed copies.
- ``reverse_complement`` of tokens ``[B, L]`` or one-hot ``[B, L, 4|5]``: each row reversed within its length and
  complemented (tokens: the IUPAC complement of the id, computed from a 64-bit constant, no table; one-hot: the
  channel order A, C, G, T reversed, the soft-mask channel kept), pads where they were (tokens: complemented, as
  the eager path does; one-hot ``[.., 4]``: their own values; ``[.., 5]``: channel-permuted, as eager). A row's
  length is found in-kernel by a 128-way search of its padding mask (``True`` first, checked eagerly; under CUDA
  graph capture it is trusted), or of ``tokens != PAD`` when no mask is given.

The eager value checks (token ids in 0..31, padding at the end) stay where they are, before the launch; under CUDA
graph capture they are skipped (:func:`omnipos.core.can_inspect_values`), and the kernels read nothing outside
their tensors whatever the values (an id outside 0..31 gives a zero one-hot row, is left as it is by the
complement). Set ``OMNIPOS_DISABLE_TRITON=1`` for the eager path.
"""

from __future__ import annotations

import os

import torch

try:  # pragma: no cover - depends on the installation
    import triton
    import triton.language as tl

    HAS_TRITON = True
except Exception:  # ImportError, or a broken / driverless triton
    HAS_TRITON = False

__all__ = ["COMPLEMENT_NIBBLES", "HAS_TRITON", "KERNEL_DEVICE_TYPES", "enabled", "one_hot_rows",
           "reverse_complement_rows"]

#: device types whose tensors take the kernels (the tests add "cpu" under Triton's interpreter, "meta" for the
#: dispatch-mode test)
KERNEL_DEVICE_TYPES: tuple[str, ...] = ("cuda",)
_PAD = 15
_PROBES = 128
_TOKENS = "ACGTNRYSWKMBDHV"
_COMPLEMENT = {"A": "T", "C": "G", "G": "C", "T": "A", "N": "N", "R": "Y", "Y": "R", "S": "S", "W": "W",
               "K": "M", "M": "K", "B": "V", "D": "H", "H": "D", "V": "B"}
#: the complement of token ids 0..14, four bits each: id ``t``'s complement is ``(COMPLEMENT_NIBBLES >> 4 * (t & 15))
#: & 15``, the soft-mask bit (16) kept; the pad (15) is its own complement
COMPLEMENT_NIBBLES = sum(_TOKENS.index(_COMPLEMENT[c]) << (4 * i) for i, c in enumerate(_TOKENS))


def enabled(*tensors: torch.Tensor) -> bool:
    """Whether these tensors take the kernels: Triton importable, not switched off, outside ``torch.compile``,
    on a kernel device, no gradient wanted."""
    if not HAS_TRITON or os.environ.get("OMNIPOS_DISABLE_TRITON") == "1" or torch.compiler.is_compiling():
        return False
    return all(t.device.type in KERNEL_DEVICE_TYPES and not (torch.is_grad_enabled() and t.requires_grad)
               for t in tensors)


if HAS_TRITON:

    @triton.jit
    def _one_hot_kernel(tok_ptr, table_ptr, out_ptr, N, C: tl.constexpr, CP: tl.constexpr, BLOCK: tl.constexpr):
        n = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        ok = n < N
        tok = tl.load(tok_ptr + n, mask=ok, other=0).to(tl.int32)
        valid = ok & (tok >= 0) & (tok < 32)
        c = tl.arange(0, CP)
        c_ok = c < C
        values = tl.load(table_ptr + tok[:, None] * C + c[None, :], mask=valid[:, None] & c_ok[None, :], other=0)
        tl.store(out_ptr + n[:, None] * C + c[None, :], values, mask=ok[:, None] & c_ok[None, :])

    @triton.jit
    def _row_length(ptr, stride, L, PAD_IS_FALSE: tl.constexpr, PROBES: tl.constexpr):
        """The number of leading real slots of a row whose real slots come first: a PROBES-way search (each round
        reads PROBES evenly spaced slots; three rounds for L = 131072). A slot is real where its value is
        nonzero (a mask) or not PAD (tokens, PAD_IS_FALSE)."""
        lo = tl.full([], 0, tl.int64)
        hi = tl.full([], 0, tl.int64) + L
        i = tl.arange(0, PROBES).to(tl.int64)
        while lo < hi:
            step = (hi - lo + PROBES - 1) // PROBES
            q = lo + i * step
            valid = q < hi
            v = tl.load(ptr + q * stride, mask=valid, other=0)
            if PAD_IS_FALSE:
                real = v != 15
            else:
                real = v != 0
            count = tl.sum(tl.where(valid & real, 1, 0), axis=0).to(tl.int64)
            new_lo = tl.where(count > 0, lo + (count - 1) * step + 1, lo)
            hi = tl.minimum(lo + count * step, hi)
            lo = new_lo
        return lo

    @triton.jit
    def _rc_kernel(x_ptr, m_ptr, out_ptr, L, L_BLOCKS, x_sb, x_sl, m_sb, o_sb,
                   C: tl.constexpr, CP: tl.constexpr, BLOCK_L: tl.constexpr, HAS_MASK: tl.constexpr,
                   TOKENS: tl.constexpr, COMPLEMENT_PADS: tl.constexpr, NIBBLES: tl.constexpr,
                   PROBES: tl.constexpr):
        pid = tl.program_id(0)
        row = (pid // L_BLOCKS).to(tl.int64)
        s = (pid % L_BLOCKS).to(tl.int64) * BLOCK_L + tl.arange(0, BLOCK_L)
        ok = s < L
        if HAS_MASK:
            n = _row_length(m_ptr + row * m_sb, 1, L, False, PROBES)
        elif TOKENS:
            n = _row_length(x_ptr + row * x_sb, x_sl, L, True, PROBES)
        else:
            n = tl.full([], 0, tl.int64) + L
        real = s < n
        src = tl.where(real, n - 1 - s, s)
        if TOKENS:
            v = tl.load(x_ptr + row * x_sb + src * x_sl, mask=ok, other=0)
            t = v.to(tl.int64)
            base = t & 15
            nibbles = tl.full([BLOCK_L], NIBBLES, tl.int64)
            comp = tl.where(base == 15, 15, (nibbles >> (4 * base)) & 15) | (t & 16)
            out = tl.where((t >= 0) & (t < 32), comp, t).to(v.dtype)
            tl.store(out_ptr + row * o_sb + s, out, mask=ok)
        else:
            c = tl.arange(0, CP)
            c_ok = c < C
            flipped = tl.where(c < 4, 3 - c, c)  # A, C, G, T reversed; a soft-mask channel stays
            if COMPLEMENT_PADS:
                channel = tl.broadcast_to(flipped[None, :], [BLOCK_L, CP])
            else:
                channel = tl.where(real[:, None], flipped[None, :], c[None, :])
            both = ok[:, None] & c_ok[None, :]
            v = tl.load(x_ptr + row * x_sb + src[:, None] * x_sl + channel, mask=both, other=0)
            tl.store(out_ptr + row * o_sb + s[:, None] * C + c[None, :], v, mask=both)


def one_hot_rows(tokens: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """``table[tokens]`` (``table [32, C]`` on the tokens' device) -> ``[*tokens.shape, C]``, one launch."""
    channels = table.shape[1]
    out = torch.empty(*tokens.shape, channels, dtype=table.dtype, device=tokens.device)
    flat = tokens.reshape(-1)
    if flat.numel() == 0 or tokens.device.type == "meta":
        return out
    block = 1024
    _one_hot_kernel[(-(-flat.numel() // block),)](flat, table, out, flat.numel(), C=channels,
                                                   CP=1 << (channels - 1).bit_length(), BLOCK=block)
    return out


def reverse_complement_rows(x: torch.Tensor, mask: torch.Tensor | None, *, tokens: bool) -> torch.Tensor:
    """Reverse complement of a batch ``x``: tokens ``[B, L]`` or one-hot ``[B, L, 4|5]``; ``mask [B, L]`` bool
    (True first in each row) or None (tokens: ``x != PAD``; one-hot: every slot real). One launch."""
    rows, length = x.shape[0], x.shape[1]
    channels = 1 if tokens else x.shape[2]
    if not tokens and x.stride(2) != 1:
        x = x.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0 or x.device.type == "meta":
        return out
    m = None
    if mask is not None:
        m = mask if mask.stride(1) == 1 else mask.contiguous()
        m = m.view(torch.uint8)
    block_l = 1024 if tokens else 256
    l_blocks = -(-length // block_l)
    _rc_kernel[(rows * l_blocks,)](
        x, m if m is not None else x, out, length, l_blocks, x.stride(0), x.stride(1),
        m.stride(0) if m is not None else 0, length * channels,
        C=channels, CP=1 << (channels - 1).bit_length(), BLOCK_L=block_l, HAS_MASK=m is not None,
        TOKENS=tokens, COMPLEMENT_PADS=channels == 5, NIBBLES=COMPLEMENT_NIBBLES, PROBES=_PROBES)
    return out
