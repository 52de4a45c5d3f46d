"""absolute_time_encoding and periodic_encoding against the formulas in float64 NumPy."""


import numpy as np
import pytest
import torch

from omnipos.timeseries import absolute_time_encoding, batch_timelines


def absolute_reference(t, dim, lo, hi):
    half = dim // 2
    periods = lo * (hi / lo) ** (np.arange(half) / max(half - 1, 1))
    phase = 2 * np.pi * np.asarray(t, dtype=np.float64)[..., None] / periods
    out = np.empty(phase.shape[:-1] + (dim,))
    out[..., 0::2], out[..., 1::2] = np.sin(phase), np.cos(phase)
    return out


def random_timelines(seed, batch=3, length=9, scale=5000.0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, length + 1, size=batch)
    lengths[0] = length
    return batch_timelines([np.sort(rng.uniform(-scale, scale, n)) for n in lengths], origin="epoch")


@pytest.mark.parametrize("dim", [2, 8, 64])
def test_absolute_matches_formula(dim):
    times, mask = random_timelines(dim)
    out = absolute_time_encoding(times, dim, min_period="1h", max_period="365d", mask=mask)
    assert out.shape == (*times.shape, dim) and out.dtype == torch.float32
    ref = absolute_reference(times.numpy(), dim, 1.0, 365 * 24.0)
    np.testing.assert_allclose(out[mask].numpy(), ref[mask.numpy()], atol=1e-6)
    assert (out[~mask] == 0).all()


def test_absolute_periods_in_unit_and_layout():
    times = torch.tensor([[0.0, 30.0, 90.0]], dtype=torch.float64)  # minutes
    out = absolute_time_encoding(times, 4, min_period=60.0, max_period="2h", unit="min", dtype=torch.float64)
    np.testing.assert_allclose(out[0].numpy(), absolute_reference(times[0].numpy() / 60, 4, 1.0, 2.0), atol=1e-12)
    split = absolute_time_encoding(times, 4, min_period=60.0, max_period="2h", unit="min", layout="split",
                                   dtype=torch.float64)
    assert torch.equal(split[..., :2], out[..., 0::2]) and torch.equal(split[..., 2:], out[..., 1::2])


def test_absolute_independent_of_batch():
    rng = np.random.default_rng(0)
    timeline = np.sort(rng.uniform(0, 1e5, 7))
    alone = absolute_time_encoding(*batch_timelines([timeline], origin="epoch")[:1], 32, min_period="1h",
                                   max_period="3650d")
    others = [np.sort(rng.uniform(0, 1e6, n)) for n in (20, 3)]
    times, mask = batch_timelines([others[0], timeline, others[1]], origin="epoch")
    together = absolute_time_encoding(times, 32, min_period="1h", max_period="3650d", mask=mask)
    torch.testing.assert_close(together[1, :7], alone[0], rtol=0, atol=0)


def test_absolute_large_times_stay_accurate():
    times = torch.tensor([[4.5e5, 4.5e5 + 0.25]], dtype=torch.float64)  # hours since 1970
    out = absolute_time_encoding(times, 16, min_period="1h", max_period="3650d")
    np.testing.assert_allclose(out[0].numpy(), absolute_reference(times[0].numpy(), 16, 1.0, 87600.0), atol=1e-6)


def test_absolute_bad_arguments():
    times = torch.tensor([[0.0, 1.0]])
    with pytest.raises(ValueError, match="longer than min_period"):
        absolute_time_encoding(times, 8, min_period="7d", max_period="1d")
    with pytest.raises(ValueError, match="even"):
        absolute_time_encoding(times, 7, min_period="1h", max_period="1d")
    with pytest.raises(ValueError, match="positive"):
        absolute_time_encoding(times, 8, min_period=0.0, max_period="1d")
    with pytest.raises(TypeError):
        absolute_time_encoding(times, 8, min_period=None, max_period="1d")


