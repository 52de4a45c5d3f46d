"""absolute_time_encoding and periodic_encoding against the formulas in float64 NumPy."""


import pytest
import torch

from omnipos.timeseries import absolute_time_encoding, periodic_encoding


@pytest.mark.parametrize("encode", [
    lambda t, m: absolute_time_encoding(t, 8, min_period="1h", max_period="1d", mask=m),
    lambda t, m: periodic_encoding(t, mask=m, clock=0),
])
def test_unsorted_and_non_finite_times_raise(encode):
    with pytest.raises(ValueError, match="sorted"):
        encode(torch.tensor([[0.0, 2.0, 1.0]]), None)
    # padded slots may hold anything, even NaN, and may sit anywhere
    times = torch.tensor([[0.0, float("nan"), 1.0, -5.0]])
    mask = torch.tensor([[True, False, True, False]])
    out = encode(times, mask)
    assert (out[~mask] == 0).all() and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="finite"):
        encode(times, None)
    with pytest.raises(TypeError, match="tensor"):
        encode([[0.0, 1.0]], None)
    with pytest.raises(ValueError, match="shape"):
        encode(torch.zeros(2, 3), torch.ones(2, 2, dtype=torch.bool))
