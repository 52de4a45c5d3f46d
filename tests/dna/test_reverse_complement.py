"""reverse_complement on strings (vs Biopython), tokens and one-hot; pads stay at the end; RC twice = identity."""

import pytest
import torch
from Bio.Seq import reverse_complement as bio_reverse_complement
from hypothesis import given
from hypothesis import strategies as st

from omnipos.dna import (
    PAD,
    decode,
    encode,
    flip_within_lengths,
    one_hot,
    reverse_complement,
)

IUPAC = "ACGTNRYSWKMBDHV"
sequences = st.lists(st.text(st.sampled_from(IUPAC + IUPAC.lower()), max_size=30), min_size=1, max_size=6)


@given(seqs=sequences)
def test_strings_match_biopython(seqs):
    for s in seqs:
        assert reverse_complement(s) == bio_reverse_complement(s)
        assert reverse_complement(s.encode()) == bio_reverse_complement(s).encode()
    assert reverse_complement(seqs) == [bio_reverse_complement(s) for s in seqs]


@given(seqs=sequences)
def test_tokens_match_strings_and_keep_pads_at_the_end(seqs):
    tokens, mask = encode(seqs)
    rc = reverse_complement(tokens, mask)
    assert decode(rc) == [bio_reverse_complement(s) for s in seqs]
    assert torch.equal(rc == PAD, ~mask)  # pads exactly where they were
    assert torch.equal(reverse_complement(tokens), rc)  # default mask = tokens != PAD
    assert torch.equal(reverse_complement(rc, mask), tokens)  # involution on a padded batch


@given(seqs=sequences, ambiguity=st.sampled_from(["zeros", "fractional"]))
def test_one_hot_commutes_with_reverse_complement(seqs, ambiguity):
    tokens, mask = encode(seqs)
    oh = one_hot(tokens, ambiguity=ambiguity)
    rc = reverse_complement(oh, mask)
    assert torch.equal(rc, one_hot(reverse_complement(tokens, mask), ambiguity=ambiguity))
    assert torch.equal(reverse_complement(rc, mask), oh)
    with5 = one_hot(tokens, soft_mask_channel=True)
    assert torch.equal(reverse_complement(with5, mask),
                       one_hot(reverse_complement(tokens, mask), soft_mask_channel=True))


def test_flip_within_lengths_against_python_loop():
    x = torch.randn(3, 6, 2)
    lengths = [6, 2, 0]
    mask = torch.arange(6) < torch.tensor(lengths).unsqueeze(1)
    out = flip_within_lengths(x, mask)
    for b, n in enumerate(lengths):
        expected = torch.cat([x[b, :n].flip(0), x[b, n:]])
        assert torch.equal(out[b], expected)


def test_flip_within_lengths_keeps_autograd():
    x = torch.randn(2, 5, 3, requires_grad=True)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    out = flip_within_lengths(x, mask)
    with torch.no_grad():
        assert torch.equal(out, flip_within_lengths(x.detach(), mask))  # autograd path == NumPy fast path
    out.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))


def test_single_rows_and_unpadded_one_hot():
    t, _ = encode("AACG")
    assert decode(reverse_complement(t[0])) == ["CGTT"]
    oh = one_hot(t[0])
    assert torch.equal(reverse_complement(oh), one_hot(encode("CGTT")[0][0]))


def test_errors():
    with pytest.raises(ValueError, match=r"x\[1\] has 'X' at position 1"):
        reverse_complement(["AC", "AXG"])
    with pytest.raises(ValueError, match="position 2"):
        reverse_complement("AC-")
    with pytest.raises(TypeError, match="x must be"):
        reverse_complement(3.5)
    tokens, mask = encode(["ACG", "A"])
    with pytest.raises(ValueError, match="padding at the end"):
        reverse_complement(tokens, torch.tensor([[False, True, True], [True, False, False]]))
    with pytest.raises(ValueError, match="shape"):
        reverse_complement(tokens, mask[:, :2])
    with pytest.raises(TypeError, match="boolean"):
        reverse_complement(tokens, mask.long())
    with pytest.raises(ValueError, match="one-hot"):
        reverse_complement(torch.zeros(2, 3, 7))
    with pytest.raises(ValueError, match="mask applies to tensors"):
        reverse_complement("ACG", mask)


@pytest.mark.gpu
def test_cuda_matches_cpu():
    tokens, mask = encode(["ACGTTN", "AC"])
    assert torch.equal(reverse_complement(tokens.cuda(), mask.cuda()).cpu(), reverse_complement(tokens, mask))


def test_list_masks_and_odd_inputs_are_refused_by_name():
    tokens, mask = encode(["ACGT", "AC"])
    x = one_hot(tokens)
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        flip_within_lengths(x, mask.tolist())
    with pytest.raises(TypeError, match="x must be a tensor"):
        flip_within_lengths(x.tolist(), mask)
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        reverse_complement(tokens, mask.tolist())
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        reverse_complement(tokens[0], mask[0].tolist())
    with pytest.raises(ValueError, match=r"mask has shape \(2, 3\), expected \(2, 4\)"):
        flip_within_lengths(x, mask[:, :3])
    with pytest.raises(ValueError, match="padding at the end"):
        flip_within_lengths(x, mask.flip(1))


def test_meta_tensors_keep_their_shape():
    tokens = torch.empty(3, 6, dtype=torch.uint8, device="meta")
    mask = torch.empty(3, 6, dtype=torch.bool, device="meta")
    assert reverse_complement(tokens, mask).is_meta
    x = torch.empty(3, 6, 4, device="meta")
    assert reverse_complement(x, mask).shape == (3, 6, 4)
    assert flip_within_lengths(x, mask).is_meta
