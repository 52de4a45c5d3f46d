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


def test_complement_tokens_is_an_involution_on_every_token_id():
    every_id = torch.arange(2 * SOFT_MASK, dtype=torch.uint8)
    assert torch.equal(complement_tokens(complement_tokens(every_id)), every_id)
    assert torch.equal(soft_mask(complement_tokens(every_id)), soft_mask(every_id))


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
        for dtype in (torch.float32, torch.float64, torch.bfloat16):  # 16, 32 and 8-byte rows: two CUDA paths
            for soft in (False, True):
                options = dict(ambiguity=ambiguity, dtype=dtype, soft_mask_channel=soft)
                on_gpu = one_hot(gpu, **options)
                assert on_gpu.is_contiguous() and torch.equal(on_gpu.cpu(), one_hot(tokens, **options))
    oh = one_hot(gpu)
    assert torch.equal(reverse_complement(oh, gmask).cpu(), reverse_complement(one_hot(tokens), mask))
    assert torch.equal(kmer_tokens(gpu, 3, canonical=True)[0].cpu(), kmer_tokens(tokens, 3, canonical=True)[0])
    assert decode(gpu, gmask) == seqs


# -- issue 14: refused by name, bounded, uint8 by default, meta-friendly ---------------------------------------------

def test_decode_refuses_a_mask_that_keeps_pad_tokens():
    """Before: decode(tokens, all-True mask) returned 'A???' for the pads of a short read."""
    tokens, mask = encode(["ACGT", "A"])
    with pytest.raises(ValueError, match=r"mask keeps a pad token \(id 15\) at row 1, position 1"):
        decode(tokens, torch.ones_like(mask))
    assert decode(tokens, mask) == ["ACGT", "A"]


@pytest.mark.parametrize("mask, error, pattern", [
    ([[True, True], [True, False]], TypeError, "mask must be a boolean tensor"),
    (torch.ones(2, 2, dtype=torch.uint8), TypeError, "mask must be a boolean tensor"),
    (torch.ones(2, 3, dtype=torch.bool), ValueError, r"mask has shape \(2, 3\), expected \(2, 2\)"),
])
def test_decode_refuses_odd_masks_by_name(mask, error, pattern):
    tokens, _ = encode(["AC", "G"])
    with pytest.raises(error, match=pattern):
        decode(tokens, mask)


def test_decode_refuses_meta_tokens_and_bad_rna_flags():
    with pytest.raises(ValueError, match="meta device"):
        decode(torch.zeros(1, 3, dtype=torch.uint8, device="meta"))
    tokens, mask = encode(["ACGT", "TT"])
    assert decode(tokens, mask, rna=torch.tensor([False, True])) == ["ACGT", "UU"]
    with pytest.raises(TypeError, match="rna"):
        decode(tokens, mask, rna=[False, True])
    with pytest.raises(ValueError, match="rna"):
        decode(tokens, mask, rna=torch.tensor([True]))


def test_encode_rna_policy():
    with pytest.raises(ValueError, match=r"seqs\[0\] has 'U' at position 2; .*U is RNA: pass rna='to_t'"):
        encode("ACUG")
    tokens, _ = encode(["ACUG", "acug"], rna="to_t")
    assert torch.equal(tokens, encode(["ACTG", "actg"])[0])
    with pytest.raises(ValueError, match="rna"):
        encode("ACUG", rna="keep")  # keep needs a per-read flag: read_fastx has it


@pytest.mark.parametrize("token_dtype", [torch.uint8, torch.int16, torch.int32, torch.int64])
def test_token_dtype_and_every_consumer_accepts_it(token_dtype):
    from omnipos.dna import RCEquivariant, kmer_tokens, reverse_complement

    seqs = ["ACGTNacgtRY", "GATTACA", ""]
    tokens, mask = encode(seqs, token_dtype=token_dtype)
    reference, _ = encode(seqs, token_dtype=torch.int64)
    assert tokens.dtype == token_dtype and torch.equal(tokens.long(), reference)
    assert torch.equal(one_hot(tokens), one_hot(reference))
    assert reverse_complement(tokens, mask).dtype == token_dtype
    assert torch.equal(reverse_complement(tokens, mask).long(), reverse_complement(reference, mask))
    assert complement_tokens(tokens).dtype == token_dtype
    assert torch.equal(kmer_tokens(tokens, 3, mask=mask)[0], kmer_tokens(reference, 3, mask=mask)[0])
    assert decode(tokens, mask) == seqs and torch.equal(soft_mask(tokens), soft_mask(reference))
    wrapped = RCEquivariant(lambda t: one_hot(t).sum(1))
    assert torch.equal(wrapped(tokens), wrapped(reference))


def test_encode_default_is_uint8_and_bad_token_dtype_is_refused():
    assert encode("ACGT")[0].dtype == torch.uint8
    for bad in (torch.float32, torch.bool, torch.int8, "int64", None):
        with pytest.raises(TypeError, match="token_dtype"):
            encode("ACGT", token_dtype=bad)


def test_huge_max_len_is_refused_before_the_allocator():
    with pytest.raises(ValueError, match=r"max_len=1099511627776: a padded batch of 1 rows x 1,099,511,627,776 "
                                         r"positions would take"):
        encode(["AC"], max_len=2**40)
    with pytest.raises(TypeError, match="max_len"):
        encode(["AC"], max_len=3.0)


def test_one_hot_on_meta_tokens_gives_a_meta_tensor_without_reading_values():
    """Before: one_hot called .item() (through its range check) and failed on the meta device."""
    tokens = torch.empty(2, 7, dtype=torch.uint8, device="meta")
    out = one_hot(tokens, soft_mask_channel=True, dtype=torch.float16)
    assert out.is_meta and out.shape == (2, 7, 5) and out.dtype == torch.float16
    assert complement_tokens(tokens).is_meta and soft_mask(tokens).is_meta


def test_one_hot_refuses_odd_arguments_by_name():
    tokens, _ = encode("ACGT")
    with pytest.raises(TypeError, match="soft_mask_channel"):
        one_hot(tokens, soft_mask_channel="yes")
    with pytest.raises(TypeError, match="dtype"):
        one_hot(tokens, dtype=torch.int64)
    with pytest.raises(TypeError, match="tokens"):
        one_hot([[0, 1]])
