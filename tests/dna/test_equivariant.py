"""RCEquivariant: exact invariance / equivariance on random modules, batches and their reverse complements."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from omnipos.dna import (
    RCEquivariant,
    encode,
    flip_within_lengths,
    one_hot,
    reverse_complement,
)

seqs_st = st.lists(st.text(st.sampled_from("ACGTN"), min_size=1, max_size=20), min_size=1, max_size=5)


class Conv(nn.Module):
    """A strand-unaware per-position model on one-hot input: [B, L, 4] -> [B, L, C]."""

    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv1d(4, channels, 3, padding=1)

    def forward(self, x):
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


class Pooled(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = Conv(channels)

    def forward(self, x, mask):
        h = torch.tanh(self.conv(x)) * mask.unsqueeze(-1)
        return h.sum(1) / mask.sum(1, keepdim=True).clamp(min=1)  # [B, C]


class TokenModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(32, 6)

    def forward(self, tokens):
        return self.emb(tokens).cumsum(1)  # order-dependent, strand-unaware, [B, L, 6]


@settings(max_examples=12)  # a model per example: keep it cheap
@given(seqs=seqs_st, seed=st.integers(0, 2**16))
def test_invariant_per_sequence(seqs, seed):
    torch.manual_seed(seed)
    tokens, mask = encode(seqs)
    x = one_hot(tokens)
    model = RCEquivariant(Pooled(3), mode="invariant", pass_mask=True)
    out, out_rc = model(x, mask), model(reverse_complement(x, mask), mask)
    assert torch.equal(out, out_rc)
    assert not torch.equal(model.module(x, mask), model.module(reverse_complement(x, mask), mask)) or \
        all(s == reverse_complement(s) for s in seqs)  # the wrapped model alone is not invariant


@settings(max_examples=12)  # a model per example: keep it cheap
@given(seqs=seqs_st, seed=st.integers(0, 2**16))
def test_equivariant_per_sequence_swaps_paired_channels(seqs, seed):
    torch.manual_seed(seed)
    tokens, mask = encode(seqs)
    x = one_hot(tokens)
    model = RCEquivariant(Pooled(2), mode="equivariant", pass_mask=True)
    assert torch.equal(model(reverse_complement(x, mask), mask), model(x, mask).flip(-1))


@settings(max_examples=12)  # a model per example: keep it cheap
@given(seqs=seqs_st, seed=st.integers(0, 2**16), mode=st.sampled_from(["invariant", "equivariant"]))
def test_per_position_outputs(seqs, seed, mode):
    torch.manual_seed(seed)
    tokens, mask = encode(seqs)
    x = one_hot(tokens)
    model = RCEquivariant(Conv(4), mode=mode, per_position=True)
    out, out_rc = model(x, mask), model(reverse_complement(x, mask), mask)
    expected = flip_within_lengths(out, mask)
    if mode == "equivariant":
        expected = expected.flip(-1)
    assert torch.equal(out_rc, expected)


@pytest.mark.parametrize("token_dtype", [torch.int64, torch.int32])
def test_token_input_default_mask(token_dtype):
    torch.manual_seed(0)
    tokens, mask = encode(["ACGTTGA", "ACG"], token_dtype=token_dtype)  # nn.Embedding takes int32/int64
    model = RCEquivariant(TokenModel(), per_position=True)
    rc = reverse_complement(tokens)
    assert rc.dtype == token_dtype
    assert torch.equal(model(rc), flip_within_lengths(model(tokens), mask))
    assert "mode='invariant'" in repr(model)


def test_errors():
    with pytest.raises(ValueError, match="mode"):
        RCEquivariant(Conv(2), mode="symmetric")
    with pytest.raises(TypeError, match="module"):
        RCEquivariant(3)
    x = one_hot(encode(["ACGT"])[0])
    with pytest.raises(ValueError, match="per_position"):
        RCEquivariant(Pooled(2), per_position=True, pass_mask=True)(x, torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="channel axis"):
        RCEquivariant(lambda t: t.sum((1, 2)), mode="equivariant")(x)


def test_uint8_tokens_pass_through_and_reset_parameters_reseeds_the_wrapped_module():
    tokens, mask = encode(["ACGTTGA", "ACG"])
    assert tokens.dtype == torch.uint8
    seen = []

    def model(t):
        seen.append(t.dtype)
        return one_hot(t).sum(1)

    out = RCEquivariant(model)(tokens)
    assert seen == [torch.uint8, torch.uint8] and out.shape == (2, 4)
    torch.manual_seed(3)
    wrapped = RCEquivariant(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)))
    first = [p.detach().clone() for p in wrapped.parameters()]
    torch.manual_seed(3)
    wrapped.reset_parameters()
    assert all(torch.equal(a, b) for a, b in zip(first, wrapped.parameters()))
