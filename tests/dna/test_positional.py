"""Centered RC-symmetric encodings against the float64 formula and the seeds' symmetry claim."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.core import sinusoidal
from omnipos.dna import (
    RCSymmetricEncoding,
    centered_positions,
    flip_within_lengths,
    rc_symmetric_encoding,
)

lengths_st = st.lists(st.integers(0, 40), min_size=1, max_size=6)


def formula(c, dim, base, strand_aware):
    """float64 NumPy formula from the docstring, independent of omnipos.core."""
    c = np.asarray(c, dtype=np.float64)[..., None]
    if strand_aware:
        w = base ** (-2.0 * np.arange(dim // 2) / dim)
        return np.concatenate([np.sin(c * w), np.cos(c * w)], axis=-1)
    w = base ** (-np.arange(dim) / dim)
    return np.cos(c * w)


@given(lengths=lengths_st)
def test_centered_positions(lengths):
    c = centered_positions(torch.tensor(lengths))
    assert c.dtype == torch.float64 and c.shape == (len(lengths), max(lengths))
    for b, n in enumerate(lengths):
        assert c[b, :n].tolist() == [p - (n - 1) / 2 for p in range(n)]
        assert (c[b, n:] == 0).all()


@given(lengths=lengths_st, dim=st.sampled_from([2, 4, 6, 16, 64]), strand_aware=st.booleans(),
       base=st.sampled_from([100.0, 10000.0]))
def test_matches_float64_formula_and_pads_are_zero(lengths, dim, strand_aware, base):
    pe = rc_symmetric_encoding(torch.tensor(lengths), dim, base=base, strand_aware=strand_aware)
    assert pe.shape == (len(lengths), max(lengths), dim) and pe.dtype == torch.float32
    for b, n in enumerate(lengths):
        expected = formula([p - (n - 1) / 2 for p in range(n)], dim, base, strand_aware)
        np.testing.assert_allclose(pe[b, :n].double().numpy(), expected.reshape(n, dim), atol=1e-6, rtol=0)
        assert (pe[b, n:] == 0).all()


@given(lengths=lengths_st, dim=st.sampled_from([2, 8, 32]))
def test_rc_of_a_read_gets_the_same_encoding_flipped_within_its_length(lengths, dim):
    lengths_t = torch.tensor(lengths)
    mask = torch.arange(max(lengths)) < lengths_t.unsqueeze(1)
    invariant = rc_symmetric_encoding(lengths_t, dim)
    assert torch.equal(flip_within_lengths(invariant, mask), invariant)  # even and odd lengths, exactly
    aware = rc_symmetric_encoding(lengths_t, dim, strand_aware=True)
    flipped = flip_within_lengths(aware, mask)
    half = dim // 2
    assert torch.equal(flipped[..., :half], -aware[..., :half])  # sines flip sign
    assert torch.equal(flipped[..., half:], aware[..., half:])  # cosines do not


def test_strand_aware_is_core_split_sinusoid_and_invariant_is_its_cosine_half():
    lengths = torch.tensor([7, 4])
    c = centered_positions(lengths)
    mask = torch.arange(7) < lengths.unsqueeze(1)
    aware = rc_symmetric_encoding(lengths, 8, strand_aware=True)
    assert torch.equal(aware[mask], sinusoidal(c, 8, layout="split")[mask])
    inv = rc_symmetric_encoding(lengths, 8)
    assert torch.equal(inv[mask], sinusoidal(c, 16, layout="split")[..., 8:][mask])


@settings(max_examples=20)
@given(length=st.integers(1, 60), motif=st.integers(1, 12), data=st.data(),
       dim=st.sampled_from([4, 16]))
def test_seeds_property_motif_and_its_rc_get_the_same_vector(length, motif, data, dim):
    """A motif of length m at p and its RC at L - m - p: their centres are mirror images, so the cosine vector of
    the centre, and the mean of the per-position vectors over the motif, are equal."""
    if motif > length:
        motif = length
    p = data.draw(st.integers(0, length - motif))
    q = length - motif - p  # where the RC read has the motif's reverse complement
    centre = torch.tensor([p + (motif - 1) / 2 - (length - 1) / 2, q + (motif - 1) / 2 - (length - 1) / 2],
                          dtype=torch.float64)
    assert centre[0].item() == -centre[1].item()
    vec = rc_symmetric_encoding(centre, dim)
    assert torch.equal(vec[0], vec[1])
    np.testing.assert_allclose(vec.double().numpy(), formula(centre.numpy(), dim, 10000.0, False), atol=1e-6)
    aware = rc_symmetric_encoding(centre, dim, strand_aware=True)
    assert torch.equal(aware[0, : dim // 2], -aware[1, : dim // 2])
    per_position = rc_symmetric_encoding(torch.tensor([length]), dim, dtype=torch.float64)[0]
    torch.testing.assert_close(per_position[p:p + motif].mean(0), per_position[q:q + motif].mean(0),
                               atol=1e-12, rtol=0)


def test_motif_start_positions_are_not_what_the_claim_is_about():
    """With m > 1 the vectors at the two *start* positions differ: the claim holds for motif centres."""
    length, motif, p = 20, 4, 3
    pe = rc_symmetric_encoding(torch.tensor([length]), 8)[0]
    assert not torch.allclose(pe[p], pe[length - motif - p])
    assert torch.equal(pe[p], pe[length - 1 - p])  # single positions mirror exactly


def test_positions_with_mask_and_module():
    c = torch.tensor([[-1.5, -0.5, 0.5, 1.5], [-0.5, 0.5, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    pe = rc_symmetric_encoding(c, 4, mask=mask)
    assert (pe[1, 2:] == 0).all()
    assert torch.equal(pe[mask], rc_symmetric_encoding(torch.tensor([4, 2]), 4)[mask])
    module = RCSymmetricEncoding(6, strand_aware=True, base=100.0)
    assert "dim=6" in repr(module) and "strand_aware=True" in repr(module)
    assert torch.equal(module(torch.tensor([5])), rc_symmetric_encoding(torch.tensor([5]), 6, base=100.0,
                                                                         strand_aware=True))


def test_odd_dim_allowed_for_cosines_only_and_other_errors():
    assert rc_symmetric_encoding(torch.tensor([3]), 5).shape == (1, 3, 5)
    with pytest.raises(ValueError, match="even"):
        rc_symmetric_encoding(torch.tensor([3]), 5, strand_aware=True)
    with pytest.raises(ValueError, match="lengths_or_positions must be >= 0"):
        rc_symmetric_encoding(torch.tensor([3, -1]), 4)
    with pytest.raises(ValueError, match="1-D"):
        rc_symmetric_encoding(torch.tensor([[3]]), 4)
    with pytest.raises(ValueError, match="finite"):
        rc_symmetric_encoding(torch.tensor([math.nan]), 4)
    with pytest.raises(ValueError, match="max_len"):
        rc_symmetric_encoding(torch.tensor([5]), 4, max_len=3)
    with pytest.raises(ValueError, match="mask"):
        rc_symmetric_encoding(torch.tensor([5]), 4, mask=torch.ones(1, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="lengths_or_positions"):
        rc_symmetric_encoding(torch.tensor([True]), 4)
    with pytest.raises(ValueError, match="base"):
        rc_symmetric_encoding(torch.tensor([5]), 4, base=0.5)
    with pytest.raises(TypeError, match="lengths must be integer lengths"):
        centered_positions(torch.tensor([2.0]))
    assert rc_symmetric_encoding(torch.tensor([3]), 4, max_len=6)[0, 3:].eq(0).all()


@pytest.mark.gpu
def test_cuda_matches_cpu():
    lengths = torch.tensor([150, 149, 3])
    torch.testing.assert_close(rc_symmetric_encoding(lengths.cuda(), 32, strand_aware=True).cpu(),
                               rc_symmetric_encoding(lengths, 32, strand_aware=True), atol=1e-6, rtol=0)


def test_huge_max_len_refused_before_the_allocator():
    with pytest.raises(ValueError, match=r"max_len=1099511627776: a padded batch"):
        rc_symmetric_encoding(torch.tensor([3]), 8, max_len=2**40)
    with pytest.raises(ValueError, match=r"max_len=1099511627776: a padded batch"):
        centered_positions(torch.tensor([3]), max_len=2**40)


def test_meta_lengths_need_max_len():
    out = rc_symmetric_encoding(torch.tensor([3, 4], device="meta"), 8, max_len=6)
    assert out.is_meta and out.shape == (2, 6, 8)
    with pytest.raises(ValueError, match="meta device have no values; pass max_len"):
        rc_symmetric_encoding(torch.tensor([3, 4], device="meta"), 8)


def test_module_output_dtype_follows_conversions():
    module = RCSymmetricEncoding(6)
    lengths = torch.tensor([5, 2])
    reference = module(lengths)
    assert module.double()(lengths).dtype == torch.float64
    assert torch.allclose(module(lengths).float(), reference, atol=1e-7)
    assert module.half()(lengths).dtype == torch.float16
    assert module.to(torch.bfloat16)(lengths).dtype == torch.bfloat16


@pytest.mark.parametrize("base", [float("inf"), float("nan"), 1.0, -2.0, "10000", True])
def test_bad_base_refused(base):
    with pytest.raises(ValueError, match="base"):
        rc_symmetric_encoding(torch.tensor([3]), 4, base=base)
    with pytest.raises(ValueError, match="base"):
        RCSymmetricEncoding(4, base=base)
