import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.core import put_rows, take_rows

DTYPES = [torch.bool, torch.uint8, torch.int16, torch.int64, torch.float16, torch.float32, torch.float64,
          torch.bfloat16, torch.complex64]


def random_tensor(shape, dtype, rng):
    raw = torch.from_numpy(rng.standard_normal(shape) * 100)
    if dtype == torch.bool:
        return raw > 0
    if dtype.is_complex:
        return torch.complex(raw, raw.flip(-1) if raw.ndim else raw).to(dtype)
    return raw.to(dtype)


@given(st.sampled_from(DTYPES), st.integers(1, 40), st.lists(st.integers(1, 4), max_size=2), st.data())
def test_put_rows_writes_what_index_copy_writes(dtype, total, trailing, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    count = data.draw(st.integers(0, total))
    rows = torch.from_numpy(rng.permutation(total)[:count].astype(np.int64))
    target, source = random_tensor((total, *trailing), dtype, rng), random_tensor((count, *trailing), dtype, rng)
    expected = target.clone().index_copy_(0, rows, source)
    out = put_rows(target, rows, source)
    assert out is target and torch.equal(out, expected)


def test_put_rows_moves_bits_minus_zero_and_nan_payloads_included():
    source = torch.tensor([[-0.0, float("nan")], [1.0, -float("inf")]])
    source.view(torch.int32)[0, 1] = 0x7FC00123  # a NaN with a payload
    target = torch.zeros(4, 2)
    put_rows(target, torch.tensor([3, 0]), source)
    assert target.view(torch.int32)[3].tolist() == source.view(torch.int32)[0].tolist()
    assert target.view(torch.int32)[0].tolist() == source.view(torch.int32)[1].tolist()
    assert target[1:3].eq(0).all()


def test_put_rows_keeps_autograd_and_strided_inputs_on_index_copy():
    weights = torch.randn(2, 3, requires_grad=True)
    target = torch.zeros(5, 3)
    out = put_rows(target, torch.tensor([4, 1]), weights * 2)
    out.sum().backward()
    assert torch.equal(weights.grad, torch.full((2, 3), 2.0))
    strided_source = torch.randn(3, 2).t()  # [2, 3], not contiguous
    target = torch.zeros(4, 3)
    put_rows(target, torch.tensor([0, 2]), strided_source)
    assert torch.equal(target[[0, 2]], strided_source) and target[[1, 3]].eq(0).all()


@given(st.sampled_from(DTYPES), st.integers(1, 30), st.lists(st.integers(1, 4), max_size=2),
       st.sampled_from([torch.int64, torch.int32, torch.uint8]), st.data())
def test_take_rows_reads_what_index_select_reads(dtype, total, trailing, index_dtype, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    table = random_tensor((total, *trailing), dtype, rng)
    index = torch.from_numpy(rng.integers(0, min(total, 256), data.draw(st.integers(0, 50)))).to(index_dtype)
    assert torch.equal(take_rows(table, index), table.index_select(0, index.long()))


def test_take_rows_keeps_autograd():
    table = torch.randn(5, 3, requires_grad=True)
    take_rows(table, torch.tensor([4, 4, 0])).sum().backward()
    assert table.grad[:, 0].tolist() == [1.0, 0.0, 0.0, 0.0, 2.0]
