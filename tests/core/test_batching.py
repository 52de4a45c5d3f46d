import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.core import lengths_to_mask, mask_to_lengths, pack, packed_positions, pad_packed, pad_ragged, unpad

lengths_st = st.lists(st.integers(0, 12), min_size=1, max_size=8)


@given(lengths=lengths_st, trailing=st.sampled_from([(), (3,), (2, 2)]))
def test_pad_unpad_round_trip(lengths, trailing):
    gen = torch.Generator().manual_seed(sum(lengths))
    seqs = [torch.randn(n, *trailing, generator=gen) for n in lengths]
    padded, mask = pad_ragged(seqs, pad_value=-7.0)
    assert padded.shape == (len(lengths), max(lengths), *trailing)
    assert mask.dtype == torch.bool
    assert mask.sum(1).tolist() == lengths
    assert bool((padded[~mask] == -7.0).all())
    for row, (orig, back) in enumerate(zip(seqs, unpad(padded, mask))):
        assert torch.equal(orig, back)
        assert torch.equal(padded[row, : lengths[row]], orig)


@given(lengths=lengths_st)
def test_pack_and_positions(lengths):
    seqs = [torch.arange(n) * 10 + i for i, n in enumerate(lengths)]
    packed, cu = pack(seqs)
    assert cu.dtype == torch.int32
    assert cu.tolist() == [0] + torch.tensor(lengths).cumsum(0).tolist()
    assert torch.equal(packed, torch.cat(seqs))
    expected = torch.cat([torch.arange(n) for n in lengths]) if sum(lengths) else torch.zeros(0, dtype=torch.long)
    assert torch.equal(packed_positions(cu), expected)


def test_lengths_to_mask():
    mask = lengths_to_mask(torch.tensor([2, 0, 3]), max_len=4)
    assert mask.tolist() == [[True, True, False, False], [False] * 4, [True, True, True, False]]
    assert torch.equal(mask_to_lengths(mask), torch.tensor([2, 0, 3]))
    assert lengths_to_mask([1, 2]).shape == (2, 2)


def test_pad_to_max_len_and_dtype_kept():
    padded, mask = pad_ragged([torch.tensor([1, 2]), torch.tensor([3])], max_len=4)
    assert padded.dtype == torch.int64 and padded.shape == (2, 4)
    assert padded.tolist() == [[1, 2, 0, 0], [3, 0, 0, 0]]


def test_bad_input():
    with pytest.raises(ValueError, match="empty"):
        pad_ragged([])
    with pytest.raises(ValueError, match=r"seqs\[1\] has trailing shape"):
        pad_ragged([torch.zeros(2, 3), torch.zeros(2, 4)])
    with pytest.raises(TypeError, match=r"seqs\[1\] has dtype"):
        pad_ragged([torch.zeros(2), torch.zeros(2, dtype=torch.int64)])
    with pytest.raises(TypeError, match="seqs must be a list"):
        pad_ragged(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="max_len=1 is shorter"):
        pad_ragged([torch.zeros(3)], max_len=1)
    with pytest.raises(ValueError, match="lengths must be >= 0"):
        lengths_to_mask(torch.tensor([2, -1]))
    with pytest.raises(TypeError, match="lengths must be an integer"):
        lengths_to_mask(torch.tensor([2.0]))
    with pytest.raises(ValueError, match="1-D"):
        lengths_to_mask(torch.tensor([[2]]))
    with pytest.raises(TypeError, match="mask must be a boolean"):
        unpad(torch.zeros(2, 3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="does not match"):
        unpad(torch.zeros(2, 3), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="cu_seqlens"):
        packed_positions(torch.tensor([1, 3]))


@pytest.mark.gpu
def test_cuda_device_preserved():
    padded, mask = pad_ragged([torch.ones(3, device="cuda"), torch.ones(1, device="cuda")])
    assert padded.is_cuda and mask.is_cuda
    assert packed_positions(pack([torch.ones(2, device="cuda")])[1]).is_cuda


@given(lengths=lengths_st, trailing=st.sampled_from([(), (2,)]))
def test_pad_packed_is_the_inverse_of_masked_select(lengths, trailing):
    mask = lengths_to_mask(torch.tensor(lengths))
    packed = torch.randn(sum(lengths), *trailing, generator=torch.Generator().manual_seed(len(lengths)))
    padded = pad_packed(packed, mask, pad_value=3.0)
    assert padded.shape == (*mask.shape, *trailing)
    assert torch.equal(padded[mask], packed)
    assert bool((padded[~mask] == 3.0).all())


def test_pad_packed_bad_input():
    mask = lengths_to_mask(torch.tensor([2, 1]))
    with pytest.raises(ValueError, match="packed has 2 rows but mask marks 3"):
        pad_packed(torch.zeros(2), mask)
    with pytest.raises(TypeError, match="mask"):
        pad_packed(torch.zeros(3), mask.long())


def test_check_lengths():
    from omnipos.core import check_lengths

    assert check_lengths([3, 0, 2]).tolist() == [3, 0, 2]
    assert check_lengths(torch.tensor([1, 2], dtype=torch.int32)).dtype == torch.int64
    with pytest.raises(ValueError, match="counts must be >= 0"):
        check_lengths(torch.tensor([1, -2]), "counts")
    with pytest.raises(TypeError, match="counts must be an integer tensor"):
        check_lengths(torch.tensor([1.5]), "counts")
    with pytest.raises(ValueError, match="1-D"):
        check_lengths(torch.zeros(2, 2, dtype=torch.long))
