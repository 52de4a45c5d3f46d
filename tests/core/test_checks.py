import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.core.checks import check_float_dtype, check_integer_tensor, narrow_to


def test_check_float_dtype():
    assert check_float_dtype(torch.bfloat16) is torch.bfloat16
    for bad in (torch.int64, torch.bool, "float32", None):
        with pytest.raises(TypeError, match="out_dtype must be a floating torch.dtype"):
            check_float_dtype(bad, "out_dtype")


def test_check_integer_tensor():
    t = torch.tensor([1, 2])
    assert check_integer_tensor(t, "ids") is t
    for bad in (torch.tensor([1.0]), torch.tensor([True]), torch.tensor([1j])):
        with pytest.raises(TypeError, match="ids must be node ids, got dtype"):
            check_integer_tensor(bad, "ids", "node ids")



@given(peak=st.floats(1.0, 1e30), narrow=st.sampled_from([torch.float16, torch.bfloat16]))
def test_narrow_to_refuses_what_the_cast_would_make_inf(peak, narrow):
    values = torch.tensor([[0.5, -peak, 3.0]])
    if bool(torch.isinf(values.to(narrow)).any()):  # the plain cast: what narrow_to must refuse
        with pytest.raises(ValueError, match=rf"the encoding reaches .*beyond what {narrow} holds.*; use float32"):
            narrow_to(values, narrow, "the encoding", "use float32")
    else:
        assert torch.equal(narrow_to(values, narrow, "the encoding"), values.to(narrow))


def test_narrow_to_keeps_inf_and_nan_that_were_there_and_skips_meta():
    with pytest.raises(ValueError, match=r"x reaches 7e\+04"):  # the finite value that overflows, not the inf
        narrow_to(torch.tensor([float("inf"), float("nan"), 70000.0]), torch.float16, "x")
    kept = narrow_to(torch.tensor([float("inf"), float("nan"), 2.0]), torch.float16, "x")
    assert torch.isinf(kept[0]) and torch.isnan(kept[1]) and kept[2] == 2
    assert narrow_to(torch.empty(3, device="meta"), torch.float16, "x").dtype == torch.float16
    with pytest.raises(ValueError, match="beyond what torch.float32 holds"):
        narrow_to(torch.full((2,), 1e300, dtype=torch.float64), torch.float32, "x")
