import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.core import allocation_guard, new_buffer

DTYPES = [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.float32, torch.float64,
          torch.bfloat16, torch.complex64]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes, dtypes and bytes (so -0.0 differs from 0.0 and NaN equals itself)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return a.reshape(-1).view(torch.uint8).numpy().tobytes() == b.reshape(-1).view(torch.uint8).numpy().tobytes()


def fill_for(dtype: torch.dtype, draw_float: float) -> bool | int | float:
    if dtype == torch.bool:
        return draw_float > 0
    if not dtype.is_floating_point and not dtype.is_complex:
        return int(abs(draw_float)) % 200 if math.isfinite(draw_float) else 200
    return draw_float


@given(st.sampled_from(DTYPES), st.lists(st.integers(0, 5), min_size=0, max_size=3),
       st.sampled_from([0.0, -0.0, 1.5, -3.0, float("nan"), float("inf"), 0.1]))
def test_a_filled_buffer_holds_what_torch_full_holds_bit_for_bit(dtype, shape, value):
    fill = fill_for(dtype, value)
    ours = new_buffer(shape, dtype, fill=fill)
    assert same_bits(ours, torch.full(shape, fill, dtype=dtype))
    assert ours.device.type == "cpu" and ours.is_contiguous()


def test_zero_fill_comes_from_calloc_and_minus_zero_keeps_its_sign():
    zeros = new_buffer((3, 1 << 20), torch.float32, fill=0)  # 12 MiB: NumPy's zeroed allocation
    assert not zeros.any()
    minus = new_buffer((4,), torch.float64, fill=-0.0)
    assert all(math.copysign(1.0, v) < 0 for v in minus.tolist())


def test_an_uninitialised_buffer_is_writable_and_shares_nothing():
    a, b = new_buffer((1000, 8), torch.float32), new_buffer((1000, 8), torch.float32)
    source = torch.randn(1000, 8)
    a.copy_(source)
    b.fill_(2.0)
    assert torch.equal(a, source) and torch.equal(b, torch.full((1000, 8), 2.0))
    assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
    assert (a * 2).sum().item() == pytest.approx(float(source.sum()) * 2, rel=1e-5)


def test_other_devices_and_compiled_code_get_torch_tensors(monkeypatch):
    meta = new_buffer((2, 3), torch.float32, "meta", fill=0)
    assert meta.is_meta and meta.shape == (2, 3)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    inside = new_buffer((2, 3), torch.int64, fill=7)
    assert torch.equal(inside, torch.full((2, 3), 7))
    # a NumPy-backed tensor refuses resize_; torch's allocator's does not: the compiled path is torch's
    inside.resize_(10)


def test_a_numpy_allocated_buffer_is_an_ordinary_tensor_to_autograd_and_pickling():
    import pickle

    out = new_buffer((5, 4), torch.float32, fill=0)
    weights = torch.randn(4, requires_grad=True)
    out[1:3] = weights
    out.sum().backward()
    assert torch.equal(weights.grad, torch.full((4,), 2.0))
    again = pickle.loads(pickle.dumps(out.detach()))
    assert torch.equal(again, out.detach()) and isinstance(again.numpy(), np.ndarray)


@pytest.mark.parametrize("shape", [(1 << 40, 1 << 10), (1 << 62, 1 << 10)])
def test_a_buffer_beyond_memory_is_a_valueerror_naming_the_request_under_the_allocation_guard(shape):
    """4 PiB (the allocator refuses) and a byte count beyond int64 (NumPy refuses the shape): both read as bad
    input naming what asked for them, as torch's allocator's refusal does."""
    with pytest.raises(ValueError, match=r"max_len=7 \(a test\) does not fit in memory"):
        with allocation_guard("max_len=7 (a test)"):
            new_buffer(shape, torch.float32)


@pytest.mark.parametrize("zero", [False, True])
def test_a_large_buffer_starts_on_a_huge_page_boundary(zero):
    """From 4 MiB on (where NumPy asks for huge pages) the buffer starts at a 2 MiB boundary, so its first write
    maps whole huge pages: malloc's block starts at an ordinary page and left ~511 small page faults at its ends
    (~15% of writing a fresh 50 MB output). Still an ordinary, writable, contiguous tensor of its own memory."""
    shape = (3, 1 << 19, 3)  # 18 MiB of float32, a size that is no multiple of 2 MiB
    out = new_buffer(shape, torch.float32, fill=0 if zero else None)
    assert out.data_ptr() % (1 << 21) == 0 and out.shape == shape and out.is_contiguous()
    assert out.untyped_storage().nbytes() == out.numel() * 4
    if zero:
        assert not out.any()
    out.fill_(3.0)
    assert bool((out == 3.0).all()) and out.numpy().flags.writeable
    small = new_buffer((100, 8), torch.float64, fill=1.5)  # below 4 MiB: NumPy's own allocation, as before
    assert torch.equal(small, torch.full((100, 8), 1.5, dtype=torch.float64))


def test_a_large_buffer_ends_inside_a_huge_page_its_block_covers_whole():
    """A size that is no multiple of 2 MiB: the block reaches the buffer's next 2 MiB boundary, so the kernel can
    map its last huge page whole (issue 38: 256 small page faults at the end of a 34.6 MB output before)."""
    import numpy as np

    from omnipos.core.buffers import _HUGE, _numpy_array

    for nbytes, zero in ((44 * 256 * 768 * 4, False), ((4 << 20) + 4, True), ((6 << 20) - 4, False)):
        out = _numpy_array((nbytes // 4,), np.float32, zero)
        block = out
        while block.base is not None:
            block = block.base
        end = out.ctypes.data + nbytes
        assert block.ctypes.data + block.nbytes >= -(-end // _HUGE) * _HUGE
        assert out.ctypes.data % _HUGE == 0 and out.nbytes == nbytes
