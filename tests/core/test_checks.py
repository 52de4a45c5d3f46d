import pytest
import torch

from omnipos.core.checks import check_float_dtype, check_integer_tensor


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
