"""encode / decode / one_hot against per-character references and Biopython's IUPAC tables."""

import numpy as np
import pytest
import torch
from Bio.Data import IUPACData
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.dna import (
    IUPAC_COMPLEMENT,
    PAD,
    SOFT_MASK,
    TOKENS,
    complement_tokens,
    decode,
    encode,
    one_hot,
    soft_mask,
    vocab_size,
)

IUPAC = "ACGTNRYSWKMBDHV"
letters = st.sampled_from(IUPAC + IUPAC.lower())
sequences = st.lists(st.text(letters, max_size=40), min_size=1, max_size=6)


def reference_tokens(seq, ambiguity, lowercase):
    """Per-character reference, written from the documented table (not from the implementation's LUT)."""
    table = {c: i for i, c in enumerate("ACGTNRYSWKMBDHV")}
    out = []
    for ch in seq:
        up = ch.upper()
        token = table[up]
        if ambiguity == "to_n" and up not in "ACGTN":
            token = table["N"]
        if ch.islower() and lowercase == "soft_mask":
            token += 16
        out.append(token)
    return out


@pytest.mark.parametrize("ambiguity", ["keep", "to_n"])
@pytest.mark.parametrize("lowercase", ["soft_mask", "fold"])
@settings(max_examples=25)  # x 4 policy combinations
@given(seqs=sequences)
def test_encode_matches_per_character_reference(seqs, ambiguity, lowercase):
    tokens, mask = encode(seqs, ambiguity=ambiguity, lowercase=lowercase)
    assert tokens.shape == (len(seqs), max(map(len, seqs)))
    assert tokens.dtype == torch.uint8 and mask.dtype == torch.bool  # one byte per base unless asked
    for row, seq in enumerate(seqs):
        assert tokens[row, : len(seq)].tolist() == reference_tokens(seq, ambiguity, lowercase)
        assert (tokens[row, len(seq):] == PAD).all()
        assert mask[row].tolist() == [True] * len(seq) + [False] * (tokens.shape[1] - len(seq))
    assert tokens.numel() == 0 or int(tokens.max()) < vocab_size(lowercase)


@given(seqs=sequences)
def test_decode_round_trips_lossless_defaults(seqs):
    assert decode(*encode(seqs)) == seqs
    assert decode(encode(seqs)[0]) == seqs


def test_lowercase_policies():
    tokens, _ = encode("acGT", lowercase="soft_mask")
    assert tokens.tolist() == [[0 + SOFT_MASK, 1 + SOFT_MASK, 2, 3]]
    assert soft_mask(tokens).tolist() == [[True, True, False, False]]
    folded, _ = encode("acGT", lowercase="fold")
    assert folded.tolist() == [[0, 1, 2, 3]] and not soft_mask(folded).any()
    assert decode(folded) == ["ACGT"]
    # the soft-mask channel of one_hot
    oh = one_hot(tokens, soft_mask_channel=True)
    assert oh.shape == (1, 4, 5)
    assert oh[0, :, 4].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert torch.equal(oh[..., :4], one_hot(folded))


def test_ambiguity_policies():
    keep, _ = encode("ARYN", ambiguity="keep")
    to_n, _ = encode("ARYN", ambiguity="to_n")
    assert keep.tolist() == [[0, 5, 6, 4]]
    assert to_n.tolist() == [[0, 4, 4, 4]]


def test_bytes_and_single_string_inputs():
    a, ma = encode("ACGT")
    b, mb = encode(b"ACGT")
    c, mc = encode([b"ACGT", "AC"])
    assert a.shape == (1, 4) and torch.equal(a, b) and torch.equal(c[0], a[0])
    assert c[1].tolist() == [0, 1, PAD, PAD]


def test_max_len_and_empty_reads():
    tokens, mask = encode(["", "AC"], max_len=5)
    assert tokens.shape == (2, 5) and mask.sum(1).tolist() == [0, 2]
    with pytest.raises(ValueError, match="max_len"):
        encode(["ACGT"], max_len=2)
    tokens, mask = encode(["", ""])
    assert tokens.shape == (2, 0)


@pytest.mark.parametrize("bad, index, position", [
    (["ACGT", "ACXT"], 1, 2), (["ACGU"], 0, 3), (["AC-G"], 0, 2), (["ACG", "AA", "A C"], 2, 1),
    (["ACGT", "AC\u00e9"], 1, 2), (["AC1"], 0, 2),
])
def test_invalid_character_names_sequence_and_position(bad, index, position):
    with pytest.raises(ValueError, match=rf"seqs\[{index}\] .* at position {position}"):
        encode(bad)


def test_bad_arguments():
    with pytest.raises(TypeError, match="seqs"):
        encode(123)
    with pytest.raises(TypeError, match=r"seqs\[1\]"):
        encode(["AC", 5])
    with pytest.raises(ValueError, match="empty"):
        encode([])
    with pytest.raises(ValueError, match="ambiguity"):
        encode("AC", ambiguity="drop")
    with pytest.raises(ValueError, match="lowercase"):
        encode("AC", lowercase="upper")
    with pytest.raises(ValueError, match="ambiguity"):
        one_hot(encode("AC")[0], ambiguity="keep")
    with pytest.raises(TypeError, match="tokens"):
        one_hot(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="token ids"):
        one_hot(torch.tensor([[0, 40]]))


def test_iupac_complement_table_matches_biopython():
    for letter in TOKENS:
        assert IUPAC_COMPLEMENT[letter] == IUPACData.ambiguous_dna_complement[letter]
        # the complement of a code stands for the complements of its bases
        bases = IUPACData.ambiguous_dna_values[letter]
        comp = {IUPACData.ambiguous_dna_complement[b] for b in bases}
        assert comp == set(IUPACData.ambiguous_dna_values[IUPAC_COMPLEMENT[letter]])


def test_complement_tokens_keeps_case_and_pads():
    tokens, _ = encode(["ACgtRyN", "A"])
    comp = complement_tokens(tokens)
    assert decode(comp) == ["TGcaYrN", "T"]
    assert comp[1, 1:].eq(PAD).all()


@pytest.mark.parametrize("ambiguity", ["zeros", "fractional"])
def test_one_hot_against_biopython_ambiguity_sets(ambiguity):
    tokens, mask = encode([IUPAC, IUPAC.lower()[:5]])
    oh = one_hot(tokens, ambiguity=ambiguity, dtype=torch.float64)
    assert oh.shape == (2, len(IUPAC), 4)
    for row, seq in enumerate([IUPAC, IUPAC.lower()[:5]]):
        for pos, letter in enumerate(seq):
            bases = IUPACData.ambiguous_dna_values[letter.upper()]
            expected = np.zeros(4)
            if len(bases) == 1 or ambiguity == "fractional":
                for b in bases:
                    expected["ACGT".index(b)] = 1.0 / len(bases)
            np.testing.assert_array_equal(oh[row, pos].numpy(), expected)
    assert (oh[1, 5:] == 0).all()  # pads are zero rows
    assert torch.allclose(oh[mask].sum(-1)[oh[mask].sum(-1) > 0], torch.ones(1, dtype=torch.float64))


@pytest.mark.gpu
def test_cuda_matches_cpu():
    from omnipos.dna import kmer_tokens, reverse_complement

    seqs = ["ACGTNacgtRY", "GATTACA", ""]
    tokens, mask = encode(seqs)
    gpu, gmask = encode(seqs, device="cuda")
    assert gpu.is_cuda and torch.equal(gpu.cpu(), tokens) and torch.equal(gmask.cpu(), mask)
    for ambiguity in ("zeros", "fractional"):
        assert torch.equal(one_hot(gpu, ambiguity=ambiguity).cpu(), one_hot(tokens, ambiguity=ambiguity))
    oh = one_hot(gpu)
    assert torch.equal(reverse_complement(oh, gmask).cpu(), reverse_complement(one_hot(tokens), mask))
    assert torch.equal(kmer_tokens(gpu, 3, canonical=True)[0].cpu(), kmer_tokens(tokens, 3, canonical=True)[0])
    assert decode(gpu, gmask) == seqs
