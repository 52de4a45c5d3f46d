"""Relative time in attention through core RotaryEmbedding with real-valued times (the timeseries use of it)."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.core import RotaryEmbedding


@given(st.integers(1, 3), st.integers(2, 7), st.floats(-1e4, 1e4), st.integers(0, 10_000))
def test_rotary_scores_depend_only_on_time_differences(batch, events, shift, seed):
    gen = torch.Generator().manual_seed(seed)
    times = (torch.rand(batch, events, generator=gen, dtype=torch.float64) * 5000).sort(-1).values
    q = torch.randn(batch, 2, events, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(batch, 2, events, 8, generator=gen, dtype=torch.float64)
    rope = RotaryEmbedding(8, base=1e5)

    def scores(positions):
        q_rot, k_rot = rope(q, k, positions)
        return q_rot @ k_rot.transpose(-1, -2)

    torch.testing.assert_close(scores(times), scores(times + shift), rtol=0, atol=1e-8)


def test_rotary_scores_equal_the_relative_rotation_formula():
    """score(i, j) = sum over pairs of Re(q_i conj(k_j) e^{i w (t_i - t_j)}) for the half layout."""
    gen = torch.Generator().manual_seed(0)
    times = torch.tensor([[0.0, 0.25, 30.0, 200.5]], dtype=torch.float64)
    q = torch.randn(1, 1, 4, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 1, 4, 8, generator=gen, dtype=torch.float64)
    q_rot, k_rot = RotaryEmbedding(8, base=100.0)(q, k, times)
    got = (q_rot @ k_rot.transpose(-1, -2))[0, 0]
    w = 100.0 ** (-torch.arange(4, dtype=torch.float64) * 2 / 8)
    qc = torch.complex(q[0, 0, :, :4], q[0, 0, :, 4:])
    kc = torch.complex(k[0, 0, :, :4], k[0, 0, :, 4:])
    diff = times[0, :, None, None] - times[0, None, :, None]
    expected = (qc[:, None, :] * kc[None, :, :].conj() * torch.exp(1j * w * diff)).real.sum(-1)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)
