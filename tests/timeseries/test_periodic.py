"""absolute_time_encoding and periodic_encoding against the formulas in float64 NumPy."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.timeseries import batch_timelines, periodic_encoding


def periodic_reference(t, periods, harmonics):
    chans = []
    for p in periods:
        for h in range(1, harmonics + 1):
            phase = 2 * np.pi * h * np.asarray(t, dtype=np.float64) / p
            chans += [np.sin(phase), np.cos(phase)]
    return np.stack(chans, axis=-1)


def random_timelines(seed, batch=3, length=9, scale=5000.0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, length + 1, size=batch)
    lengths[0] = length
    return batch_timelines([np.sort(rng.uniform(-scale, scale, n)) for n in lengths], origin="epoch")


@pytest.mark.parametrize("harmonics", [1, 3])
def test_periodic_matches_formula(harmonics):
    times, mask = random_timelines(harmonics, scale=1e4)
    out = periodic_encoding(times, ("24h", "7d", 5.5), harmonics, mask=mask, clock=0)
    assert out.shape == (*times.shape, 2 * 3 * harmonics)
    ref = periodic_reference(times.numpy(), (24.0, 168.0, 5.5), harmonics)
    np.testing.assert_allclose(out[mask].numpy(), ref[mask.numpy()], atol=1e-6)
    assert (out[~mask] == 0).all()


@given(st.floats(-1e5, 1e5), st.sampled_from([("24h", 24.0), ("7d", 168.0), ("30min", 0.5), (13.0, 13.0)]),
       st.integers(1, 4))
def test_periodic_equal_at_t_and_t_plus_period(t, period, harmonics):
    text, hours = period
    times = torch.tensor([[t, t + hours]], dtype=torch.float64)
    out = periodic_encoding(times, (text,), harmonics, dtype=torch.float64, clock=0)
    torch.testing.assert_close(out[0, 0], out[0, 1], rtol=0, atol=1e-9)


@given(st.floats(-1e4, 1e4), st.floats(0, 500), st.floats(-1e4, 1e4))
def test_seeds_claim_dot_product_is_cosine_of_difference(t, horizon, u):
    """The seeds: the 24 h encodings of t + H and u have dot product cos(2 pi (t + H - u) / 24)."""
    times = torch.tensor([[min(t + horizon, u), max(t + horizon, u)]], dtype=torch.float64)
    pe = periodic_encoding(times, ("24h",), dtype=torch.float64, clock=0)[0]
    expected = math.cos(2 * math.pi * (t + horizon - u) / 24)
    assert abs(float(pe[0] @ pe[1]) - expected) < 1e-9


def test_periodic_same_moment_in_minutes_hours_datetime64():
    """One moment, given as hours or minutes since the epoch or as datetime64 relative to any origin (with the
    clock of that origin), has one time of day."""
    start = np.datetime64("2023-05-06T07:08:09", "ns")
    hours = np.array([0.0, 3.75, 49.5, 400.25])
    stamps = start + (hours * 3600e9).astype("timedelta64[ns]")
    since_epoch = (stamps - np.datetime64(0, "ns")) / np.timedelta64(1, "h")
    in_hours = batch_timelines([since_epoch], origin="epoch")[0]
    in_minutes = batch_timelines([since_epoch * 60], unit="min", origin="epoch")[0]
    a = periodic_encoding(in_hours, ("24h", "7d"), 2, clock=0)
    b = periodic_encoding(in_minutes, ("24h", "7d"), 2, unit="min", clock=0)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    for origin in ("first", "epoch", start - np.timedelta64(7, "h"), "2000-01-01"):
        times, _, clock = batch_timelines([stamps], origin=origin, return_clock=True)
        c = periodic_encoding(times, ("24h", "7d"), 2, clock=clock)
        torch.testing.assert_close(a, c, rtol=0, atol=1e-6, msg=str(origin))


def test_periodic_bad_arguments():
    times = torch.tensor([[0.0, 1.0]])
    with pytest.raises(ValueError, match="positive"):
        periodic_encoding(times, ("0h",), clock=0)
    with pytest.raises(ValueError, match="known units"):
        periodic_encoding(times, ("24 hours",), clock=0)
    with pytest.raises(TypeError, match="sequence"):
        periodic_encoding(times, "24h", clock=0)
    with pytest.raises(ValueError, match=">= 1"):
        periodic_encoding(times, harmonics=0, clock=0)
