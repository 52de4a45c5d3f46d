"""absolute_time_encoding and periodic_encoding against the formulas in float64 NumPy."""


import numpy as np
import pytest
import torch

from omnipos.timeseries import absolute_time_encoding, batch_timelines, periodic_encoding


def absolute_reference(t, dim, lo, hi):
    half = dim // 2
    periods = lo * (hi / lo) ** (np.arange(half) / max(half - 1, 1))
    phase = 2 * np.pi * np.asarray(t, dtype=np.float64)[..., None] / periods
    out = np.empty(phase.shape[:-1] + (dim,))
    out[..., 0::2], out[..., 1::2] = np.sin(phase), np.cos(phase)
    return out


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
