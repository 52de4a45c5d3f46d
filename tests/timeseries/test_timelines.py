"""absolute_time_encoding and periodic_encoding against the formulas in float64 NumPy."""


import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

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


def _padded_timelines(seed: int, rows: int, length: int, bad: str):
    """Random sorted timelines with padding anywhere in a row (its slots hold garbage), optionally one bad real
    event: an unsorted time or a non-finite one."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(rows, length, generator=g) < 0.6
    times = torch.rand(rows, length, generator=g, dtype=torch.float64).mul(100).cumsum(-1)
    times = torch.where(mask, times, torch.randn(rows, length, generator=g, dtype=torch.float64) * 1e6)
    real = mask.nonzero()
    if bad != "none" and real.shape[0] > 1:
        r, c = real[int(torch.randint(1, real.shape[0], (1,), generator=g))].tolist()
        times[r, c] = float("nan") if bad == "nan" else times[r, c] - 1e4
    return times, mask


@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 9), st.sampled_from(["none", "nan", "earlier"]))
def test_the_real_events_are_checked_as_the_padded_checks_check_them(seed, rows, length, bad):
    """checked_real_events (the encoder's eager path) against check_times + checked_gaps on the padded batch: the
    same gaps bit for bit at the real events, or the same error text naming the same slot."""
    from omnipos.timeseries.timelines import check_times, checked_gaps, checked_real_events

    times, mask = _padded_timelines(seed, rows, length, bad)
    try:
        check_times(times, mask, check_sorted=False)
        expected = checked_gaps(times, mask)
    except ValueError as exc:
        with pytest.raises(ValueError) as ours:
            checked_real_events(times, mask)
        assert str(ours.value) == str(exc)
        return
    slots, flat, gaps, rows_of = checked_real_events(times, mask)
    assert torch.equal(slots, mask.reshape(-1).nonzero().squeeze(1))
    assert torch.equal(flat, times[mask]) and torch.equal(rows_of, mask.nonzero()[:, 0])
    assert torch.equal(gaps, expected[mask])


@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 9), st.sampled_from([torch.float64, torch.float16]))
def test_the_real_events_through_numpy_equal_those_through_torch(seed, rows, length, dtype):
    """checked_real_events on the CPU (NumPy: a gather, repeated row ids, one subtraction) and on the autograd
    path (torch indexing, integer division, a masked fill): the same slots, times, gaps and rows, bit for bit."""
    from omnipos.timeseries.timelines import checked_real_events

    times, mask = _padded_timelines(seed, rows, length, "none")
    times = times.to(dtype)
    fast = checked_real_events(times, mask)
    with torch.enable_grad():
        slow = checked_real_events(times.clone().requires_grad_(), mask)
    for ours, theirs in zip(fast, slow):
        assert ours.dtype == theirs.dtype and torch.equal(ours, theirs.detach())
