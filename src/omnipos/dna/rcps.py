"""Reverse-complement parameter sharing (RCPS): layers whose channel axis carries both strands, so that every
layer is exactly RC-equivariant by construction with one set of shared weights.

Caduceus (Schiff et al., 2024, "Caduceus: Bi-directional equivariant long-range DNA sequence modeling";
kuleshov-group/caduceus ``caduceus/modeling_rcps.py``), after Zhou et al. (2022), "Towards a better understanding
of reverse-complement equivariance for deep learning models in regulatory genomics".

The reverse complement of a hidden state ``h [B, L, C]`` is ``h`` reversed along length and channels
(:func:`reverse_complement_hidden`); of token ids, their complements reversed along length. Every module here
satisfies ``f(rc(x)) == rc(f(x))``, bit for bit: the RC input makes the same calls on the same values as the
forward input, with their roles swapped (floating-point addition is commutative, flips and gathers are exact).

Two variants of Caduceus's file exist, and both are here by name (``variant=``):

- ``"split"`` (the paper's, and the default): the channel halves are the two strands. The wrapped module sees
  ``C / 2`` channels: the first half as it is, the second half reverse-complemented; the outputs are
  concatenated. :class:`RCPSEmbedding` learns a ``[vocab_size, dim / 2]`` table; :class:`RCPSLMHead` sums the
  logits of the two halves.
- ``"average"`` (a later revision of that file): the wrapped module sees all ``C`` channels, once forward and once
  reverse-complemented, and the two outputs are averaged; the embedding table is ``[vocab_size, dim]`` and the LM
  head averages the two logits.

Differences from Caduceus, named:

- Padding: Caduceus reverses whole rows, pads included, so a short read's RC starts with padding. Given
  ``mask=`` (``[B, L]``, True = real, padding at the end) the reversals here are within each row's length and
  pads stay at the end, as :func:`omnipos.dna.reverse_complement` does; without a mask the whole row is reversed,
  as in Caduceus. Caduceus's embedding and LM head are per position, so their values are the same either way.
- The LM head computes Caduceus's ``linear(flip(h, -1), W[complement])`` as the reverse complement of the logits of
  the reverse-complemented half. The same sum, formed so that equivariance holds bit for bit (the matrix products
  of ``h`` and ``rc(h)`` are the same calls); it equals Caduceus's within rounding.
- ``RCPSAddNorm`` returns ``residual = x + residual``: what Caduceus's wrapper computes, whose reverse-complemented
  half goes through ``rc(rc(x) + rc(residual))``, the same numbers.
- Token ids may be of any integer dtype (uint8 from :func:`omnipos.dna.encode` included).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..core import ConstantBuffers, can_inspect_values, check_choice, check_integer_tensor, check_positive_int
from .alphabet import SOFT_MASK, complement_tokens
from .reverse_complement import check_mask, flip_within_lengths

__all__ = [
    "VARIANTS",
    "complement_map",
    "reverse_complement_hidden",
    "reverse_complement_logits",
    "RCPSEmbedding",
    "RCPS",
    "RCPSAddNorm",
    "RCPSLMHead",
]

VARIANTS = ("split", "average")


def complement_map(complement: Any, vocab_size: int) -> torch.Tensor:
    """The complement of every token id as an int64 tensor ``[vocab_size]``, validated.

    Args:
        complement: ``"iupac"`` (omnipos' alphabet: IUPAC complements, soft-mask bit and pad kept; ``vocab_size``
            16 or 32), a mapping ``{id: complement id}`` with keys exactly ``0 .. vocab_size - 1`` (Caduceus's
            ``complement_map``), or a sequence / 1-D integer tensor whose entry ``i`` is the complement of ``i``.
        vocab_size: the number of token ids.

    Raises:
        ValueError: a map of another size, ids outside ``0 .. vocab_size - 1``, or a map that is not an involution
            (the complement of a complement must be the id itself: reverse-complementing twice is the identity).
        TypeError: anything else.
    """
    vocab_size = check_positive_int(vocab_size, "vocab_size")
    if isinstance(complement, str):
        if complement != "iupac":
            raise ValueError(f"complement must be 'iupac', a mapping or a sequence of ids; got {complement!r}")
        if vocab_size not in (SOFT_MASK, 2 * SOFT_MASK):
            raise ValueError(f"complement='iupac' covers omnipos' alphabet of {SOFT_MASK} ids ({2 * SOFT_MASK} with "
                             f"the soft-mask channel); vocab_size is {vocab_size}")
        values = complement_tokens(torch.arange(vocab_size, dtype=torch.uint8, device="cpu")).tolist()
        # id 31 (pad + soft-mask bit) is never emitted; omnipos' complement table sends it to the pad, 15, which
        # is no involution: here it is its own complement, as the pad is
        values[vocab_size - 1] = vocab_size - 1
    elif isinstance(complement, Mapping):
        if not all(isinstance(k, int) and not isinstance(k, bool) for k in complement):
            raise TypeError("complement's keys must be int token ids")
        keys = sorted(complement)
        if keys != list(range(vocab_size)):
            raise ValueError(f"complement's keys must be exactly the token ids 0..{vocab_size - 1} (vocab_size), got "
                             f"{len(keys)} keys from {keys[0] if keys else None} to {keys[-1] if keys else None}")
        values = [complement[k] for k in keys]
    elif isinstance(complement, torch.Tensor):
        if complement.ndim != 1:
            raise ValueError(f"complement must be a 1-D tensor of ids, got shape {tuple(complement.shape)}")
        check_integer_tensor(complement, "complement", "an integer tensor of token ids")
        values = complement.tolist()
    elif isinstance(complement, Sequence):
        values = list(complement)
    else:
        raise TypeError(f"complement must be 'iupac', a mapping or a sequence of ids, got {type(complement).__name__}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise TypeError("complement must map token ids to int token ids")
    if len(values) != vocab_size:
        raise ValueError(f"complement has {len(values)} entries but vocab_size is {vocab_size}")
    table = torch.tensor(values, dtype=torch.long, device="cpu")  # on the CPU, even under a meta device context
    if vocab_size and (int(table.min()) < 0 or int(table.max()) >= vocab_size):
        raise ValueError(f"complement maps to ids outside 0..{vocab_size - 1} (vocab_size): "
                         f"{int(table.min())}..{int(table.max())}")
    broken = (table[table] != torch.arange(vocab_size, device="cpu")).nonzero()
    if broken.numel():
        i = int(broken[0])
        raise ValueError(f"complement must be an involution (the complement of a complement is the id itself); "
                         f"id {i} -> {int(table[i])} -> {int(table[table[i]])}")
    return table


def _check_hidden(x: Any, name: str = "x") -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        got = f"a tensor of dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{name} must be a floating tensor [B, L, C], got {got}")
    if x.ndim != 3:
        raise ValueError(f"{name} must be [B, L, C], got shape {tuple(x.shape)}")
    return x


def _flip_length(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return x.flip(1) if mask is None else flip_within_lengths(x, mask)


def _rc_hidden(h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return h.flip((1, -1)) if mask is None else flip_within_lengths(h, mask).flip(-1)  # one copy without a mask


def reverse_complement_hidden(h: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The reverse complement of an RCPS hidden state ``h [B, L, C]``: reversed along channels and along length
    (within each row's length when ``mask [B, L]`` is given; pads stay at the end). Involutive."""
    _check_hidden(h, "h")
    return _rc_hidden(h, mask)


def reverse_complement_logits(logits: torch.Tensor, complement: torch.Tensor,
                              mask: torch.Tensor | None = None) -> torch.Tensor:
    """The reverse complement of per-position token scores ``logits [B, L, V]``: positions reversed (within each
    row's length given ``mask``), token ``v``'s score moved to its complement ``complement[v]`` (an involution
    ``[V]``, e.g. from :func:`complement_map`)."""
    _check_hidden(logits, "logits")
    if not isinstance(complement, torch.Tensor) or complement.shape != (logits.shape[-1],):
        raise ValueError(f"complement must be a tensor [{logits.shape[-1]}] (one id per logit), got "
                         f"{getattr(complement, 'shape', type(complement).__name__)}")
    return _flip_length(logits, mask).index_select(-1, complement.to(logits.device))


def _check_tokens(tokens: Any, vocab_size: int) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"tokens must be an integer tensor [B, L] of token ids, got {type(tokens).__name__}")
    check_integer_tensor(tokens, "tokens", "an integer tensor of token ids")
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [B, L], got shape {tuple(tokens.shape)}")
    if tokens.numel() and can_inspect_values(tokens):
        low, high = (int(v) for v in torch.aminmax(tokens))
        if low < 0 or high >= vocab_size:
            raise ValueError(f"tokens must be ids in 0..{vocab_size - 1} (vocab_size={vocab_size}), got values in "
                             f"{low}..{high}")
    return tokens


def _check_variant_dim(dim: int, variant: str) -> int:
    dim = check_positive_int(dim, "dim")
    if variant == "split" and dim % 2:
        raise ValueError(f"dim must be even for variant='split' (its halves are the two strands), got {dim}")
    return dim


def _check_mask(mask: Any, x: torch.Tensor) -> torch.Tensor | None:
    return None if mask is None else check_mask(mask, x.shape[:2]).to(x.device)


class _Complemented(ConstantBuffers):
    """Shared configuration of the modules that know the token alphabet: the vocabulary and the complement map,
    a constant int64 buffer ``complement [vocab_size]`` (derived from the configuration: rebuilt after meta-device
    construction, not saved in ``state_dict``)."""

    def _set_alphabet(self, vocab_size: int, complement: Any) -> None:
        self.vocab_size = check_positive_int(vocab_size, "vocab_size")
        self.complement_ids = tuple(complement_map(complement, self.vocab_size).tolist())
        self.register_constants()

    def _set_table(self, vocab_size: int, dim: int, complement: Any, variant: str) -> None:
        """The variant, dim, alphabet and the ``[vocab_size, dim / 2]`` (split) or ``[vocab_size, dim]`` table
        that the embedding and the head share in shape (and, tied, in storage)."""
        self.variant = check_choice(variant, "variant", VARIANTS)
        self.dim = _check_variant_dim(dim, self.variant)
        self._set_alphabet(vocab_size, complement)
        width = self.dim // 2 if self.variant == "split" else self.dim
        self.weight = nn.Parameter(torch.empty(self.vocab_size, width))

    def compute_constants(self, device: torch.device | None) -> dict[str, torch.Tensor]:
        return {"complement": torch.tensor(self.complement_ids, dtype=torch.long, device=device)}


class RCPSEmbedding(_Complemented):
    """Token ids -> RC-equivariant embeddings ``[B, L, dim]`` whose channel axis carries both strands.

    ``variant="split"`` (Caduceus paper): ``[E[x] | reverse(E[complement(x)])]`` from a ``[vocab_size, dim/2]``
    table; ``"average"``: ``(E[x] + reverse(E[complement(x)])) / 2`` from ``[vocab_size, dim]``. Embedding the
    reverse complement of the tokens gives :func:`reverse_complement_hidden` of the embedding, bit for bit (each
    position depends on its own token only, so no mask is needed).

    Args:
        vocab_size: number of token ids (32 for omnipos' alphabet with the soft-mask channel, 16 folded).
        dim: output channels (even for ``"split"``).
        complement: ``"iupac"`` or a complement map (see :func:`complement_map`).
        variant: ``"split"`` (default) or ``"average"``.

    Shape:
        ``forward(tokens)``: ``[B, L]`` ids of any integer dtype -> ``[B, L, dim]`` in the table's dtype.
    """

    def __init__(self, vocab_size: int, dim: int, complement: Any, *, variant: str = "split") -> None:
        super().__init__()
        self._set_table(vocab_size, dim, complement, variant)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Standard normal entries, as ``nn.Embedding`` (and Caduceus, which wraps one)."""
        nn.init.normal_(self.weight)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = _check_tokens(tokens, self.vocab_size).long()
        forward_strand = F.embedding(tokens, self.weight)
        reverse_strand = F.embedding(self.complement[tokens], self.weight).flip(-1)
        if self.variant == "split":
            return torch.cat([forward_strand, reverse_strand], dim=-1)
        return (forward_strand + reverse_strand) / 2

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, dim={self.dim}, variant={self.variant!r}"


class RCPS(nn.Module):
    """Wrap a sequence module ``[B, L, C_in] -> [B, L, C_out]`` so that it is exactly RC-equivariant with shared
    weights (Caduceus's ``RCPSWrapper``).

    ``variant="split"``: ``out = [f(x_1) | rc(f(rc(x_2)))]`` for the channel halves ``x_1, x_2`` of ``x``
    (``f`` sees ``C/2`` channels, the output has twice ``f``'s channels); ``"average"``:
    ``out = (f(x) + rc(f(rc(x)))) / 2``. ``rc`` is :func:`reverse_complement_hidden`. Then
    ``RCPS(f)(rc(x)) == rc(RCPS(f)(x))`` bit for bit for any deterministic ``f`` (a conv, an attention block, an
    SSM), since both sides make the same calls of ``f``.

    Args:
        module: the shared sequence module (called as ``module(h, **kwargs)``, plus ``mask=`` when ``pass_mask``).
        variant: ``"split"`` (default) or ``"average"``.
        pass_mask: also give ``module`` the padding mask (RC keeps it: pads stay at the end of each row).

    Shape:
        ``forward(x, mask=None, **kwargs)``: ``x [B, L, C]``, ``mask [B, L]`` (True = real, padding at the end;
        None: whole rows are reversed, as Caduceus does). Keyword arguments go to ``module`` for both strands.
    """

    def __init__(self, module: nn.Module, *, variant: str = "split", pass_mask: bool = False) -> None:
        super().__init__()
        if not callable(module):
            raise TypeError(f"module must be callable (an nn.Module), got {type(module).__name__}")
        self.module = module
        self.variant = check_choice(variant, "variant", VARIANTS)
        if not isinstance(pass_mask, bool):
            raise TypeError(f"pass_mask must be a bool, got {type(pass_mask).__name__}")
        self.pass_mask = pass_mask

    def reset_parameters(self) -> None:
        """Re-initialise the wrapped module (each submodule's ``reset_parameters()``, in registration order)."""
        if isinstance(self.module, nn.Module):
            for sub in self.module.modules():
                reset = getattr(sub, "reset_parameters", None)
                if callable(reset):
                    reset()

    def _call(self, h: torch.Tensor, mask: torch.Tensor | None, kwargs: dict[str, Any]) -> torch.Tensor:
        out = self.module(h, mask=mask, **kwargs) if self.pass_mask else self.module(h, **kwargs)
        if not isinstance(out, torch.Tensor) or out.ndim != 3 or out.shape[:2] != h.shape[:2]:
            raise ValueError(f"module must return a tensor [B, L, C] with the input's B, L {tuple(h.shape[:2])}, "
                             f"got {getattr(out, 'shape', type(out).__name__)}")
        return out

    def _rc(self, h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return _rc_hidden(h, mask)

    def _both_strands(self, x: torch.Tensor, mask: torch.Tensor | None, kwargs: dict[str, Any]) -> torch.Tensor:
        if self.variant == "split":
            half = x.shape[-1] // 2
            # contiguous: the forward half of rc(x) is then laid out as rc(x_2) is, so f makes the same call
            forward_strand = self._call(x[..., :half].contiguous(), mask, kwargs)
            reverse_strand = self._rc(self._call(self._rc(x[..., half:], mask), mask, kwargs), mask)
            return torch.cat([forward_strand, reverse_strand], dim=-1)
        forward_strand = self._call(x, mask, kwargs)
        reverse_strand = self._rc(self._call(self._rc(x, mask), mask, kwargs), mask)
        return (forward_strand + reverse_strand) / 2

    def _check_input(self, x: Any, name: str = "x") -> torch.Tensor:
        x = _check_hidden(x, name)
        if self.variant == "split" and x.shape[-1] % 2:
            raise ValueError(f"{name} must have an even number of channels for variant='split' (its halves are the "
                             f"two strands), got {x.shape[-1]}")
        return x

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        x = self._check_input(x)
        return self._both_strands(x, _check_mask(mask, x), kwargs)

    def extra_repr(self) -> str:
        return f"variant={self.variant!r}, pass_mask={self.pass_mask}"


class RCPSAddNorm(RCPS):
    """The residual add and norm of a pre-norm block, RC-equivariant (Caduceus's ``RCPSAddNormWrapper``).

    ``residual = x + residual`` (``x`` itself when no residual is given), then ``out = RCPS(norm)(residual)``:
    with ``variant="split"`` ``norm`` acts on ``C/2`` channels (``nn.LayerNorm(C // 2)``), with ``"average"`` on
    all ``C``. The input of ``norm`` is cast to the dtype of its first parameter, as Caduceus does (a float32 norm
    under a bfloat16 residual stream).

    Shape:
        ``forward(x, residual=None, *, prenorm=False, mask=None)``: ``x``, ``residual`` ``[B, L, C]`` ->
        ``out [B, L, C']``, or ``(out, residual)`` with ``prenorm=True``.
    """

    def __init__(self, norm: nn.Module, *, variant: str = "split") -> None:
        super().__init__(norm, variant=variant)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None, *, prenorm: bool = False,
                mask: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        x = self._check_input(x)
        if residual is not None:
            residual = _check_hidden(residual, "residual")
            if residual.shape != x.shape:
                raise ValueError(f"residual has shape {tuple(residual.shape)}, expected x's {tuple(x.shape)}")
            residual = x + residual
        else:
            residual = x
        weight = next(iter(self.module.parameters()), None) if isinstance(self.module, nn.Module) else None
        normed_input = residual if weight is None else residual.to(weight.dtype)
        out = self._both_strands(normed_input, _check_mask(mask, x), {})
        return (out, residual) if prenorm else out


class RCPSLMHead(_Complemented):
    """Per-position token logits from an RCPS hidden state, RC-equivariant (Caduceus's ``RCPSLMHead``).

    With ``phi(u) = u @ W.T``: ``variant="split"`` gives ``phi(h_1) + rc_logits(phi(rc(h_2)))`` for the channel
    halves of ``h`` (``W [vocab_size, dim/2]``, the paper's sum); ``"average"`` gives
    ``(phi(h) + rc_logits(phi(rc(h)))) / 2`` (``W [vocab_size, dim]``). ``rc_logits`` is
    :func:`reverse_complement_logits`, so the logits of the reverse-complemented input are the reverse complement
    of the logits (positions reversed, token ids complemented), bit for bit.

    Args:
        dim: input channels. vocab_size, complement, variant: as :class:`RCPSEmbedding`.
        tied_to: an :class:`RCPSEmbedding` whose table becomes this head's weight (the same Parameter, as
            Caduceus ties them); it must have the same ``vocab_size``, ``dim``, ``complement`` and ``variant``.
            :meth:`tie_weights` does it later. ``to_empty()`` after meta-device construction gives each module
            its own tensor, as for any tied weights in PyTorch: tie them again after it (as HF's
            ``tie_weights()``).

    Shape:
        ``forward(h, mask=None)``: ``h [B, L, dim]`` -> ``[B, L, vocab_size]``; ``mask [B, L]`` as in
        :class:`RCPS`.
    """

    def __init__(self, dim: int, vocab_size: int, complement: Any, *, variant: str = "split",
                 tied_to: RCPSEmbedding | None = None) -> None:
        super().__init__()
        self._set_table(vocab_size, dim, complement, variant)
        self.tied = False
        self.reset_parameters()
        if tied_to is not None:
            self.tie_weights(tied_to)

    def reset_parameters(self) -> None:
        """``nn.Linear``'s initialisation (Caduceus's head is an ``nn.Linear`` without bias); nothing once tied:
        the table is then the embedding's, which initialises it."""
        if not self.tied:
            nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def tie_weights(self, embedding: RCPSEmbedding) -> None:
        """Share ``embedding``'s table as this head's weight (one Parameter: a gradient step moves both)."""
        if not isinstance(embedding, RCPSEmbedding):
            raise TypeError(f"embedding must be an RCPSEmbedding, got {type(embedding).__name__}")
        for name in ("vocab_size", "dim", "variant"):
            if getattr(embedding, name) != getattr(self, name):
                raise ValueError(f"cannot tie weights: the embedding's {name} is {getattr(embedding, name)!r}, the "
                                 f"head's {getattr(self, name)!r}")
        if embedding.complement_ids != self.complement_ids:
            raise ValueError("cannot tie weights: the embedding and the head have different complement maps")
        self.weight = embedding.weight
        self.tied = True

    def forward(self, h: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = _check_hidden(h, "h")
        if h.shape[-1] != self.dim:
            raise ValueError(f"h has {h.shape[-1]} channels, expected dim={self.dim}")
        mask = _check_mask(mask, h)
        complement = self.complement.to(h.device)

        def reverse_strand_logits(u: torch.Tensor) -> torch.Tensor:
            rc_u = _rc_hidden(u, mask)
            return _flip_length(F.linear(rc_u, self.weight), mask).index_select(-1, complement)

        if self.variant == "split":
            half = self.dim // 2
            # contiguous: the same memory layout (so the same matrix-product kernel) as the reverse strand's input
            return F.linear(h[..., :half].contiguous(), self.weight) + reverse_strand_logits(h[..., half:])
        return (F.linear(h, self.weight) + reverse_strand_logits(h)) / 2

    def extra_repr(self) -> str:
        return f"dim={self.dim}, vocab_size={self.vocab_size}, variant={self.variant!r}, tied={self.tied}"
