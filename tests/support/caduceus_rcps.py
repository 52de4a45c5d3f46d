"""Caduceus's RCPS forward passes, restated as plain functions (the reference the RCPS tests compare with).

Source: kuleshov-group/caduceus, ``caduceus/modeling_rcps.py`` (``RCPSEmbedding``, ``RCPSWrapper``,
``RCPSAddNormWrapper``, ``RCPSLMHead``), in its two revisions:

- "split" (the paper's): the module sees the channel halves, outputs concatenated; the embedding doubles its table
  width; the LM head sums the halves' logits, the second half's through the complement-indexed weights.
- "average" (the revision at commit 1bfd49b83fd4bb9e26faa056ab1d22dacec06b2f): the module sees all channels
  forward and reverse-complemented, the two outputs averaged; the LM head averages the two logits.

Caduceus needs mamba-ssm only for its fused add-norm path, which these formulas do not use. Caduceus reverses
whole rows (pads included): compare on unpadded batches, or on batches whose rows are all full length.
"""

import torch
from torch.nn import functional as F


def rc_hidden(x):
    """Caduceus's ``RCPSWrapper.rc``: flip length and channels."""
    return torch.flip(x, dims=[-2, -1])


def rc_ids(ids, complement):
    """Caduceus's ``RCPSEmbedding.rc``: complement the ids gathered along the length-flipped row."""
    return torch.gather(complement.unsqueeze(0).expand(ids.shape[0], -1), 1, torch.flip(ids, dims=[-1]))


def embedding(ids, weight, complement, variant):
    fwd = F.embedding(ids, weight)
    rc = torch.flip(F.embedding(rc_ids(ids, complement), weight), dims=[-2, -1])
    return torch.cat([fwd, rc], dim=-1) if variant == "split" else (fwd + rc) / 2


def wrapper(module, x, variant):
    if variant == "split":
        n = x.shape[-1]
        return torch.cat([module(x[..., : n // 2]), rc_hidden(module(rc_hidden(x[..., n // 2:])))], dim=-1)
    return (module(x) + rc_hidden(module(rc_hidden(x)))) / 2


def add_norm(norm, x, residual, variant):
    """``(hidden, residual)`` of ``RCPSAddNormWrapper(norm)(x, residual, prenorm=True)``."""
    dtype = norm.weight.dtype
    if variant == "split":
        n = x.shape[-1]
        if residual is None:
            residual = x
            out = torch.cat([norm(x[..., : n // 2].to(dtype)), rc_hidden(norm(rc_hidden(x[..., n // 2:]).to(dtype)))],
                            dim=-1)
            return out, residual
        residual_fwd = x[..., : n // 2] + residual[..., : n // 2]
        residual_rc = rc_hidden(x[..., n // 2:]) + rc_hidden(residual[..., n // 2:])
        out = torch.cat([norm(residual_fwd.to(dtype)), rc_hidden(norm(residual_rc.to(dtype)))], dim=-1)
        return out, torch.cat([residual_fwd, rc_hidden(residual_rc)], dim=-1)
    if residual is None:
        return (norm(x.to(dtype)) + rc_hidden(norm(rc_hidden(x).to(dtype)))) / 2, x
    residual_fwd = x + residual
    residual_rc = rc_hidden(x) + rc_hidden(residual)
    out = (norm(residual_fwd.to(dtype)) + rc_hidden(norm(residual_rc.to(dtype)))) / 2
    return out, (residual_fwd + rc_hidden(residual_rc)) / 2


def lm_head(x, weight, complement, variant):
    if variant == "split":
        n = x.shape[-1]
        return F.linear(x[..., : n // 2], weight) + F.linear(torch.flip(x[..., n // 2:], dims=[-1]), weight[complement])
    return (F.linear(x, weight) + F.linear(torch.flip(x, dims=[-1]), weight[complement])) / 2
