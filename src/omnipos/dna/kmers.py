"""k-mer tokens of encoded reads, optionally canonical (strand-independent).

A k-mer over A, C, G, T is the base-4 number of its letters, first letter most significant (so ids sort like the
strings): ``AAA = 0``, ``AAC = 1``, ..., ``TTT = 4^k - 1``. A window holding N, another ambiguity code or a pad is
invalid: its id is ``4^k`` (one past the last k-mer, so ``nn.Embedding(4**k + 1, ...)`` takes it) and its mask
False. Soft-masked (lowercase) bases count as bases.

Canonical k-mers take the smaller of a k-mer and its reverse complement, so a read and its RC give the same
multiset of canonical k-mers.

Tokens of any integer dtype are accepted (uint8 by default); k-mer ids are int64 (``4^31`` needs 62 bits). Under
``torch.compile`` it traces without graph breaks (the value checks of tokens and mask run in eager mode only).
"""

from __future__ import annotations

import torch

from ..core import check_positive_int
from .alphabet import PAD, SOFT_MASK, check_tokens
from .limits import check_batch_bytes
from .reverse_complement import check_mask

__all__ = ["kmer_tokens", "MAX_K"]

MAX_K = 31  # 4^31 < 2^63: ids fit int64 with room for the invalid id


def kmer_tokens(
    tokens: torch.Tensor,
    k: int,
    *,
    mask: torch.Tensor | None = None,
    stride: int = 1,
    canonical: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """k-mer ids of every window of ``k`` tokens, every ``stride`` positions.

    Args:
        tokens: ``[B, L]`` ids from :func:`omnipos.dna.encode` (any integer dtype).
        k: k-mer length, 1..31.
        mask: ``[B, L]`` bool padding mask (default ``tokens != PAD``).
        stride: step between window starts.
        canonical: use ``min(kmer, reverse_complement(kmer))``.

    Returns:
        ``(kmers [B, W] int64, kmer_mask [B, W] bool)`` with ``W = (L - k) // stride + 1`` (0 when ``L < k``);
        windows containing N, an ambiguity code or a pad have mask False and id ``4**k``.
    """
    tokens = check_tokens(tokens)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [B, L], got shape {tuple(tokens.shape)}")
    k = check_positive_int(k, "k")
    if k > MAX_K:
        raise ValueError(f"k must be <= {MAX_K} (k-mer ids are int64), got {k}")
    stride = check_positive_int(stride, "stride")
    if not isinstance(canonical, bool):
        raise TypeError(f"canonical must be a bool, got {type(canonical).__name__}")
    if mask is None:
        mask = tokens != PAD
    else:
        mask = check_mask(mask, tokens.shape).to(tokens.device)
    batch, length = tokens.shape
    windows = max(0, (length - k) // stride + 1)
    invalid_id = 4**k
    if windows == 0:
        empty = torch.empty(batch, 0, dtype=torch.long, device=tokens.device)
        return empty, empty.bool()
    check_batch_bytes(batch, windows, 8 * (3 if canonical else 2), f"tokens {tuple(tokens.shape)} with k={k}")
    base = tokens.long() % SOFT_MASK  # fold the soft-mask bit: a lowercase base is still a base
    valid = mask & (base < 4)
    base = torch.where(valid, base, 0)
    # Horner's rule over k strided views, [B, W] each: no [B, W, k] temporary (k times the output's memory)
    step = min(stride, length)  # any stride >= L takes the first window only (and stays a machine integer)
    span = (windows - 1) * step + 1

    def digit(j: int, x: torch.Tensor) -> torch.Tensor:
        return x[:, j:j + span:step]

    ids = digit(0, base)
    kmer_mask = digit(0, valid)
    for j in range(1, k):
        ids = ids * 4 + digit(j, base)
        kmer_mask = kmer_mask & digit(j, valid)
    if canonical:
        # complement of base b is 3 - b; reversing the window reverses the digit order
        rc_ids = 3 - digit(k - 1, base)
        for j in range(k - 2, -1, -1):
            rc_ids = rc_ids * 4 + (3 - digit(j, base))
        ids = torch.minimum(ids, rc_ids)
    ids = torch.where(kmer_mask, ids, invalid_id)
    return ids, kmer_mask
