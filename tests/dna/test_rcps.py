"""RCPS (Caduceus's reverse-complement parameter sharing): exact equivariance of every layer and of a whole model on
random vocabularies, padded batches and IUPAC reads; equality with Caduceus's formulas; weight tying; bad inputs."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import caduceus_rcps as caduceus
from torch import nn

from omnipos.dna import (
    RCPS,
    RCPSAddNorm,
    RCPSEmbedding,
    RCPSLMHead,
    complement_map,
    encode,
    flip_within_lengths,
    reverse_complement,
    reverse_complement_hidden,
    reverse_complement_logits,
)

VARIANTS = ("split", "average")


class Conv(nn.Module):
    """A strand-unaware conv along the sequence: [B, L, C] -> [B, L, C_out]."""

    def __init__(self, channels, out_channels, kernel=3):
        super().__init__()
        self.conv = nn.Conv1d(channels, out_channels, kernel, padding=kernel // 2)

    def forward(self, h):
        return self.conv(h.transpose(1, 2)).transpose(1, 2)


class MaskedAttention(nn.Module):
    """One head of self-attention over the real positions (keys at pads masked out): [B, L, C] -> [B, L, C]."""

    def __init__(self, channels):
        super().__init__()
        self.qkv = nn.Linear(channels, 3 * channels)

    def forward(self, h, mask):
        q, k, v = self.qkv(h).chunk(3, -1)
        scores = (q @ k.transpose(1, 2)) * q.shape[-1] ** -0.5
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
        return torch.nan_to_num(scores.softmax(-1)) @ v


class Model(nn.Module):
    """Embedding -> conv block -> add+norm -> attention block -> add+norm -> tied LM head, all RCPS."""

    def __init__(self, vocab_size, complement, dim, variant):
        super().__init__()
        inner = dim // 2 if variant == "split" else dim
        self.embed = RCPSEmbedding(vocab_size, dim, complement, variant=variant)
        self.conv = RCPS(Conv(inner, inner), variant=variant)
        self.norm1 = RCPSAddNorm(nn.LayerNorm(inner), variant=variant)
        self.attend = RCPS(MaskedAttention(inner), variant=variant, pass_mask=True)
        self.norm2 = RCPSAddNorm(nn.LayerNorm(inner), variant=variant)
        self.head = RCPSLMHead(dim, vocab_size, complement, variant=variant, tied_to=self.embed)

    def forward(self, tokens, mask):
        h = self.embed(tokens)
        h, residual = self.norm1(self.conv(h, mask), h, prenorm=True, mask=mask)
        h = self.norm2(self.attend(h, mask), residual, mask=mask)
        return self.head(h, mask)


@st.composite
def involutions(draw):
    """A random vocabulary size and a random complement map on it (pairs swapped, some ids their own)."""
    size = draw(st.integers(1, 12))
    ids = draw(st.permutations(range(size)))
    pairs = draw(st.integers(0, size // 2))
    table = list(range(size))
    for a, b in zip(ids[:pairs], ids[pairs:2 * pairs]):
        table[a], table[b] = b, a
    return size, table


def rc_tokens(tokens, table, mask):
    return flip_within_lengths(torch.tensor(table)[tokens], mask)


def padded_batch(g, vocab_size, lengths):
    lengths = torch.tensor(lengths)
    width = int(lengths.max())
    tokens = torch.randint(0, vocab_size, (len(lengths), width), generator=g)
    mask = torch.arange(width) < lengths[:, None]
    return tokens, mask


@settings(max_examples=12, deadline=None)
@given(involutions(), st.lists(st.integers(1, 11), min_size=1, max_size=4), st.sampled_from(VARIANTS),
       st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_model_is_exactly_equivariant_on_random_vocabularies_and_padded_batches(vocab, lengths, variant, half, seed):
    vocab_size, table = vocab
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = Model(vocab_size, table, 2 * half + (variant == "average"), variant).double()  # "average": any dim
    tokens, mask = padded_batch(g, vocab_size, lengths)
    logits = model(tokens, mask)
    expected = reverse_complement_logits(logits, model.head.complement, mask)
    assert torch.equal(model(rc_tokens(tokens, table, mask), mask), expected)  # bit for bit in float64
    model32 = model.float()
    logits32 = reverse_complement_logits(model32(tokens, mask), model.head.complement, mask)
    torch.testing.assert_close(model32(rc_tokens(tokens, table, mask), mask), logits32, rtol=1e-6, atol=1e-6)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.text(st.sampled_from("ACGTNRYSWKMBDHVacgtnrryswkmbdhv"), min_size=0, max_size=13),
                min_size=1, max_size=4), st.sampled_from(VARIANTS), st.integers(0, 2**31 - 1))
def test_iupac_reads_with_omnipos_reverse_complement(seqs, variant, seed):
    if not any(seqs):
        seqs = seqs + ["A"]
    torch.manual_seed(seed)
    tokens, mask = encode(seqs)
    model = Model(32, "iupac", 6, variant).double()
    logits = model(tokens, mask)
    rc_logits = model(reverse_complement(tokens, mask), mask)
    assert torch.equal(rc_logits, reverse_complement_logits(logits, model.head.complement, mask))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("length", [7, 8])
def test_each_layer_is_equivariant_with_and_without_padding(variant, length):
    torch.manual_seed(length)
    g = torch.Generator().manual_seed(length)
    tokens, mask = padded_batch(g, 32, [length, length - 3, 1])
    tokens = torch.where(mask, tokens % 15, 15)  # real bases and IUPAC codes, pads where the mask says
    embed = RCPSEmbedding(32, 8, "iupac", variant=variant).double()
    h = embed(tokens)
    for m in (mask, None):
        # with the mask, pads stay at the end; without, whole rows are reversed (Caduceus)
        rc = reverse_complement(tokens, m) if m is not None else complement_map("iupac", 32)[tokens].flip(-1)
        assert torch.equal(embed(rc), reverse_complement_hidden(h, m))
        inner = 4 if variant == "split" else 8
        block = RCPS(Conv(inner, 3), variant=variant).double()
        out = block(h, m)
        assert out.shape == (3, length, 6 if variant == "split" else 3)
        assert torch.equal(block(reverse_complement_hidden(h, m), m), reverse_complement_hidden(out, m))
        norm = RCPSAddNorm(nn.LayerNorm(inner), variant=variant).double()
        residual = torch.randn_like(h)
        out, res = norm(h, residual, prenorm=True, mask=m)
        rc_out, rc_res = norm(reverse_complement_hidden(h, m), reverse_complement_hidden(residual, m), prenorm=True,
                              mask=m)
        assert torch.equal(rc_out, reverse_complement_hidden(out, m))
        assert torch.equal(rc_res, reverse_complement_hidden(res, m))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("residual", [False, True])
def test_matches_caduceus_formulas_on_unpadded_batches(variant, residual):
    """Reference: tests/support/caduceus_rcps.py, Caduceus's modeling_rcps.py restated (both revisions)."""
    torch.manual_seed(1)
    tokens = torch.randint(0, 32, (3, 9))
    complement = complement_map("iupac", 32)
    embed = RCPSEmbedding(32, 8, "iupac", variant=variant).double()
    assert torch.equal(embed(tokens), caduceus.embedding(tokens, embed.weight, complement, variant))
    h = torch.randn(3, 9, 8, dtype=torch.float64)
    inner = 4 if variant == "split" else 8
    conv = Conv(inner, inner).double()
    assert torch.equal(RCPS(conv, variant=variant)(h), caduceus.wrapper(conv, h, variant))
    layer_norm = nn.LayerNorm(inner).double()
    nn.init.normal_(layer_norm.weight)
    nn.init.normal_(layer_norm.bias)
    r = torch.randn_like(h) if residual else None
    out, res = RCPSAddNorm(layer_norm, variant=variant)(h, r, prenorm=True)
    ref_out, ref_res = caduceus.add_norm(layer_norm, h, r, variant)
    assert torch.equal(out, ref_out)
    assert torch.equal(res, ref_res)
    head = RCPSLMHead(8, 32, "iupac", variant=variant).double()
    torch.testing.assert_close(head(h), caduceus.lm_head(h, head.weight, complement, variant), rtol=1e-12,
                               atol=1e-12)


def test_caduceus_dict_complement_map_and_its_character_vocabulary():
    # Caduceus's character tokenizer: specials map to themselves, A<->T, C<->G, N to itself.
    vocab = {"[CLS]": 0, "[SEP]": 1, "[BOS]": 2, "[MASK]": 3, "[PAD]": 4, "[RESERVED]": 5, "[UNK]": 6,
             "A": 7, "C": 8, "G": 9, "T": 10, "N": 11}
    pairs = {"A": "T", "C": "G", "G": "C", "T": "A"}
    as_dict = {i: vocab[pairs.get(t, t)] for t, i in vocab.items()}
    table = complement_map(as_dict, 12)
    assert table.tolist() == [0, 1, 2, 3, 4, 5, 6, 10, 9, 8, 7, 11]
    assert torch.equal(complement_map(table, 12), table)
    assert torch.equal(complement_map(table.tolist(), 12), table)


def test_iupac_complement_map_is_the_alphabet_and_an_involution():
    table = complement_map("iupac", 32)
    assert torch.equal(table[table], torch.arange(32))
    tokens, _ = encode(["ACGTNRYSWKMBDHVacgtnryswkmbdhv"])
    rc, _ = encode(["bdhvkmwsrynacgtBDHVKMWSRYNACGT"])
    assert torch.equal(table[tokens.long()].flip(-1), rc.long())
    assert torch.equal(complement_map("iupac", 16), table[:16])


def test_weight_tying_shares_one_parameter():
    embed = RCPSEmbedding(16, 6, "iupac")
    head = RCPSLMHead(6, 16, "iupac", tied_to=embed)
    assert head.weight is embed.weight
    model = nn.ModuleDict({"embed": embed, "head": head})
    assert len(list(model.parameters())) == 1
    tokens = torch.randint(0, 16, (2, 5))
    head(embed(tokens)).sum().backward()
    assert embed.weight.grad is not None and embed.weight.grad.abs().sum() > 0
    late = RCPSLMHead(6, 16, "iupac")
    late.tie_weights(embed)
    assert late.weight is embed.weight


def test_split_and_average_shapes_and_repr():
    embed = RCPSEmbedding(16, 6, "iupac")
    assert embed.weight.shape == (16, 3) and embed(torch.zeros(2, 4, dtype=torch.uint8)).shape == (2, 4, 6)
    embed = RCPSEmbedding(16, 5, "iupac", variant="average")
    assert embed.weight.shape == (16, 5) and embed(torch.zeros(2, 4, dtype=torch.uint8)).shape == (2, 4, 5)
    assert "variant='average'" in repr(embed)
    assert RCPSLMHead(6, 16, "iupac").weight.shape == (16, 3)


def test_bad_inputs():
    with pytest.raises(ValueError, match="involution"):
        complement_map([1, 2, 0], 3)
    with pytest.raises(ValueError, match="vocab_size is 4"):
        complement_map([1, 0, 2], 4)
    with pytest.raises(ValueError, match="outside 0..2"):
        complement_map([3, 1, 2], 3)
    with pytest.raises(ValueError, match="keys"):
        complement_map({0: 0, 2: 2}, 2)
    with pytest.raises(ValueError, match="iupac"):
        complement_map("iupac", 20)
    with pytest.raises(ValueError, match="'iupac'"):
        complement_map("dna", 4)
    with pytest.raises(TypeError, match="complement"):
        complement_map(3.0, 4)
    with pytest.raises(TypeError, match="int token ids"):
        complement_map([1.0, 0.0], 2)
    with pytest.raises(TypeError, match="keys must be int"):
        complement_map({"A": 1, "T": 0}, 2)
    with pytest.raises(ValueError, match="vocab_size is 16"):
        RCPSEmbedding(16, 4, list(range(32)))
    with pytest.raises(ValueError, match="dim must be even"):
        RCPSEmbedding(16, 5, "iupac")
    with pytest.raises(ValueError, match="variant"):
        RCPS(nn.Identity(), variant="mean")
    embed = RCPSEmbedding(16, 4, "iupac")
    with pytest.raises(TypeError, match="tokens"):
        embed(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"0\.\.15"):
        embed(torch.full((2, 3), 16))
    with pytest.raises(ValueError, match=r"\[B, L\]"):
        embed(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="even number of channels"):
        RCPS(nn.Identity())(torch.randn(2, 3, 5))
    with pytest.raises(TypeError, match="floating tensor"):
        RCPS(nn.Identity())(torch.zeros(2, 3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="module must return"):
        RCPS(lambda h: h[:, :1])(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="padding at the end"):
        RCPS(nn.Identity())(torch.randn(2, 3, 4), torch.tensor([[False, True, True], [True, True, True]]))
    with pytest.raises(TypeError, match="callable"):
        RCPS(3)
    with pytest.raises(ValueError, match="residual has shape"):
        RCPSAddNorm(nn.LayerNorm(2))(torch.randn(2, 3, 4), torch.randn(2, 3, 2))
    head = RCPSLMHead(4, 16, "iupac")
    with pytest.raises(ValueError, match="expected dim=4"):
        head(torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match="vocab_size"):
        head.tie_weights(RCPSEmbedding(32, 4, "iupac"))
    with pytest.raises(ValueError, match="dim"):
        head.tie_weights(RCPSEmbedding(16, 6, "iupac"))
    with pytest.raises(ValueError, match="complement maps"):
        head.tie_weights(RCPSEmbedding(16, 4, list(range(16))))
    with pytest.raises(TypeError, match="RCPSEmbedding"):
        head.tie_weights(nn.Embedding(16, 2))
    with pytest.raises(ValueError, match="one id per logit"):
        reverse_complement_logits(torch.randn(1, 2, 3), torch.arange(4))


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_cuda_equals_cpu_and_stays_equivariant(variant):
    torch.manual_seed(3)
    tokens, mask = encode(["ACGTNRYacgtn", "GATTACA", "kmbdh"])
    model = Model(32, "iupac", 8, variant).double()
    cpu = model(tokens, mask)
    model = model.cuda()
    tokens, mask = tokens.cuda(), mask.cuda()
    gpu = model(tokens, mask)
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-10, atol=1e-10)
    expected = reverse_complement_logits(gpu, model.head.complement, mask)
    assert torch.equal(model(reverse_complement(tokens, mask), mask), expected)
