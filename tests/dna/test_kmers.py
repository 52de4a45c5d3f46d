"""kmer_tokens against a string reference; canonical k-mers are strand-independent."""

from collections import Counter

import pytest
import torch
from Bio.Seq import reverse_complement as bio_rc
from hypothesis import given
from hypothesis import strategies as st

from omnipos.dna import encode, kmer_tokens, reverse_complement

letters = st.sampled_from("ACGTACGTACGTNRacgt")
sequences = st.lists(st.text(letters, max_size=25), min_size=1, max_size=5)


def reference(seq, k, stride, canonical):
    """k-mer ids of a string, from int(..., base 4): None for windows with anything but A/C/G/T."""
    out = []
    for start in range(0, len(seq) - k + 1, stride):
        word = seq[start:start + k].upper()
        if set(word) <= set("ACGT"):
            value = int(word.translate(str.maketrans("ACGT", "0123")), 4)
            if canonical:
                value = min(value, int(bio_rc(word).translate(str.maketrans("ACGT", "0123")), 4))
            out.append(value)
        else:
            out.append(None)
    return out


@given(seqs=sequences, k=st.integers(1, 6), stride=st.integers(1, 3), canonical=st.booleans())
def test_matches_string_reference(seqs, k, stride, canonical):
    tokens, mask = encode(seqs)
    kmers, kmask = kmer_tokens(tokens, k, mask=mask, stride=stride, canonical=canonical)
    width = max(0, (tokens.shape[1] - k) // stride + 1)
    assert kmers.shape == kmask.shape == (len(seqs), width)
    for row, seq in enumerate(seqs):
        expected = reference(seq, k, stride, canonical)
        got = [v if ok else None for v, ok in zip(kmers[row].tolist(), kmask[row].tolist())]
        assert got[: len(expected)] == expected
        assert all(v is None for v in got[len(expected):])  # windows reaching into the padding
    assert (kmers[~kmask] == 4**k).all()


@given(seqs=sequences, k=st.integers(1, 7))
def test_canonical_kmers_of_read_and_rc_are_equal_multisets(seqs, k):
    tokens, mask = encode(seqs)
    rc = reverse_complement(tokens, mask)
    a, am = kmer_tokens(tokens, k, mask=mask, canonical=True)
    b, bm = kmer_tokens(rc, k, mask=mask, canonical=True)
    for row in range(len(seqs)):
        assert Counter(a[row][am[row]].tolist()) == Counter(b[row][bm[row]].tolist())


def test_non_canonical_differs_on_a_known_read():
    tokens, _ = encode("AAC")
    assert kmer_tokens(tokens, 2)[0].tolist() == [[0, 1]]  # AA, AC
    assert kmer_tokens(reverse_complement(tokens), 2)[0].tolist() == [[11, 15]]  # GT, TT
    assert kmer_tokens(tokens, 2, canonical=True)[0].tolist() == [[0, 1]]


def test_short_reads_and_errors():
    tokens, _ = encode(["AC"])
    kmers, kmask = kmer_tokens(tokens, 3)
    assert kmers.shape == (1, 0) and kmask.dtype == torch.bool
    with pytest.raises(ValueError, match="k must be <= 31"):
        kmer_tokens(tokens, 32)
    with pytest.raises(ValueError, match="k must be >= 1"):
        kmer_tokens(tokens, 0)
    with pytest.raises(ValueError, match="stride"):
        kmer_tokens(tokens, 1, stride=0)
    with pytest.raises(ValueError, match=r"\[B, L\]"):
        kmer_tokens(tokens[0], 1)
    big, _ = kmer_tokens(encode("T" * 31)[0], 31)
    assert big.item() == 4**31 - 1


def test_odd_arguments_refused_by_name():
    tokens, mask = encode(["ACGTAC", "AC"])
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        kmer_tokens(tokens, 2, mask=mask.tolist())
    with pytest.raises(ValueError, match="k must be <= 31"):
        kmer_tokens(tokens, 2**62)
    with pytest.raises(TypeError, match="k"):
        kmer_tokens(tokens, 2.0)
    with pytest.raises(TypeError, match="canonical"):
        kmer_tokens(tokens, 2, canonical="yes")
    with pytest.raises(TypeError, match="tokens"):
        kmer_tokens(tokens.tolist(), 2)


def test_huge_stride_takes_the_first_window():
    tokens, mask = encode(["ACGTAC", "AC"])
    for stride in (6, 2**62, 2**70):
        kmers, kmask = kmer_tokens(tokens, 3, mask=mask, stride=stride)
        assert kmers.tolist() == [[6], [64]] and kmask.tolist() == [[True], [False]]


def test_uint8_tokens_and_no_k_wide_temporary():
    tokens, mask = encode(["ACGT" * 1000])
    assert tokens.dtype == torch.uint8
    kmers, kmask = kmer_tokens(tokens, 31, mask=mask, canonical=True)
    wide, _ = kmer_tokens(tokens.long(), 31, mask=mask, canonical=True)
    assert torch.equal(kmers, wide) and kmers.shape == (1, 4000 - 30) and kmask.all()
