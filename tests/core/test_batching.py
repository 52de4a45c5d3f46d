import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.core import (
    lengths_to_mask,
    mask_to_lengths,
    pack,
    packed_positions,
    pad_packed,
    pad_ragged,
    true_positions,
    unpad,
)

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


# -- issue 14: silent casts, odd arguments, meta tensors, huge sizes -------------------------------------------------


@pytest.mark.parametrize("dtype,pad_value", [(torch.uint8, -1), (torch.int64, 0.5), (torch.int8, 200),
                                             (torch.bool, 2), (torch.float32, 1e39), (torch.float16, 70000.0),
                                             (torch.int32, float("nan"))])
def test_pad_value_the_dtype_cannot_hold_is_refused(dtype, pad_value):
    """pad_ragged silently cast its pad value: -1 in uint8 -> 255, 0.5 -> 0 for ints."""
    seqs = [torch.ones(1, dtype=dtype), torch.ones(2, dtype=dtype)]
    with pytest.raises(ValueError, match="pad_value"):
        pad_ragged(seqs, pad_value)
    mask = torch.tensor([[True, False], [True, True]])
    with pytest.raises(ValueError, match="pad_value"):
        pad_packed(torch.ones(3, dtype=dtype), mask, pad_value)


@pytest.mark.parametrize("dtype,pad_value", [(torch.uint8, 255), (torch.int64, -(2**63)), (torch.int64, 3.0),
                                             (torch.bool, True), (torch.float32, float("nan")),
                                             (torch.float16, float("-inf")), (torch.float64, 0.1)])
def test_pad_values_the_dtype_holds_are_written_as_given(dtype, pad_value):
    padded, mask = pad_ragged([torch.zeros(1, dtype=dtype), torch.zeros(2, dtype=dtype)], pad_value)
    expected = torch.tensor(pad_value, dtype=dtype)
    assert torch.equal(padded[0, 1], expected) or (expected.isnan() and padded[0, 1].isnan())


def test_pad_value_must_be_a_number():
    with pytest.raises(TypeError, match="pad_value"):
        pad_ragged([torch.zeros(1)], "0")


def test_check_lengths_of_none_is_a_type_error():
    """check_lengths(None) raised RuntimeError ("Could not infer dtype of NoneType")."""
    from omnipos.core import check_lengths

    with pytest.raises(TypeError, match="lengths"):
        check_lengths(None)
    with pytest.raises(TypeError, match="cu_seqlens"):
        packed_positions(None)


def test_meta_lengths_need_max_len_and_then_work():
    """lengths_to_mask called .item() on meta tensors."""
    meta = torch.tensor([1, 2], device="meta")
    with pytest.raises(ValueError, match="max_len"):
        lengths_to_mask(meta)
    mask = lengths_to_mask(meta, max_len=5)
    assert mask.is_meta and mask.shape == (2, 5) and mask.dtype == torch.bool
    padded, mask = pad_ragged([torch.empty(3, 4, device="meta"), torch.empty(1, 4, device="meta")])
    assert padded.is_meta and padded.shape == (2, 3, 4) and mask.shape == (2, 3)
    with pytest.raises(ValueError, match="meta"):
        pad_packed(torch.empty(3, device="meta"), torch.ones(1, 3, dtype=torch.bool))


@pytest.mark.parametrize("max_len", [2**62, 2**40])
def test_huge_max_len_is_a_value_error_not_an_allocator_crash(max_len):
    """Huge max_len reached the allocator: "Storage size calculation overflowed" / "can't allocate memory"."""
    with pytest.raises(ValueError, match="max_len"):
        lengths_to_mask(torch.tensor([1, 2]), max_len=max_len)
    with pytest.raises(ValueError, match="max_len"):
        pad_ragged([torch.ones(2)], max_len=max_len)


def test_max_len_shorter_than_a_sequence_names_it():
    with pytest.raises(ValueError, match=r"max_len=2 is shorter than the longest sequence \(3, seqs\[1\]\)"):
        pad_ragged([torch.ones(1), torch.ones(3)], max_len=2)


@given(st.lists(st.integers(0, 7), min_size=0, max_size=3), st.booleans(), st.integers(0, 2**32 - 1))
def test_true_positions_and_row_counts_match_torchs_own_reductions(shape, transpose, seed):
    """The NumPy paths (CPU) against torch's nonzero / sum, on random masks of any shape, strided ones included."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=generator) < torch.rand((), generator=generator)
    if transpose and mask.ndim >= 2:
        mask = mask.transpose(0, 1)  # not contiguous: positions still follow the row-major order of the view
    positions = true_positions(mask)
    assert positions.dtype == torch.int64
    assert torch.equal(positions, mask.reshape(-1).nonzero().squeeze(1))
    if mask.ndim == 2:
        assert torch.equal(mask_to_lengths(mask), mask.sum(dim=1))


def test_true_positions_refuses_a_mask_that_is_not_boolean():
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        true_positions(torch.ones(3, dtype=torch.int64))
