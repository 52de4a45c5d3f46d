"""The range-reduced phase: float32 sin/cos of huge phases match the float64 formula; gradients; scratch use."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.core.phase import (
    TWO_PI,
    cos_sin_of_angles,
    cos_sin_of_turns,
    reduced_phase,
)


@given(st.floats(-1e7, 1e7), st.floats(1e-4, 1.0))
def test_float32_cos_sin_match_float64_formula(position, frequency):
    turns = torch.tensor([position * frequency / TWO_PI], dtype=torch.float64)
    cos, sin = cos_sin_of_turns(turns)
    assert cos.dtype == sin.dtype == torch.float32
    # float64 reference of the same turns (exact enough: float64 keeps ~1e-9 at 1e7 rad)
    phase = np.float64(turns.item()) * 2 * np.pi
    assert abs(cos.item() - np.cos(phase)) < 5e-7 and abs(sin.item() - np.sin(phase)) < 5e-7


def test_naive_float32_is_worse_at_large_positions():
    """The reason for the routine: a float32 angle near 1e6 is off by ~1e-2; the reduced one by < 5e-7.
    (Real-valued positions: integers below 2^24 are exact in float32.)"""
    p = torch.rand(100, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 1e6 + 1e6
    exact = torch.cos(p)
    naive = torch.cos(p.float()).double()
    ours = cos_sin_of_angles(p)[0].double()
    assert (naive - exact).abs().max() > 1e-3
    assert (ours - exact).abs().max() < 5e-7


def test_float64_is_not_reduced_and_angles_pass_unchanged():
    angles = torch.randn(50, dtype=torch.float64) * 1e5
    cos, sin = cos_sin_of_angles(angles, torch.float64)
    torch.testing.assert_close(cos, torch.cos(angles), rtol=0, atol=0)
    torch.testing.assert_close(sin, torch.sin(angles), rtol=0, atol=0)


def test_consume_reduces_the_scratch_buffer_in_place_and_out_receives_the_phase():
    turns = torch.tensor([2.25, -0.75, 10.5], dtype=torch.float64)
    kept = turns.clone()
    phase = reduced_phase(turns)  # not consumed
    torch.testing.assert_close(turns, kept, rtol=0, atol=0)
    torch.testing.assert_close(phase.double(), torch.frac(kept) * TWO_PI)
    out = torch.empty(3)
    reduced_phase(turns, out=out, consume=True)
    torch.testing.assert_close(out.double(), torch.frac(kept) * TWO_PI)
    assert not torch.equal(turns, kept)  # the buffer was used as scratch


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradient_with_respect_to_turns(dtype):
    turns = (torch.rand(6, dtype=torch.float64) * 40 - 20).requires_grad_()
    torch.autograd.gradcheck(lambda t: torch.stack(cos_sin_of_turns(t, torch.float64)), (turns,))
    cos, sin = cos_sin_of_turns(turns, dtype)
    (g,) = torch.autograd.grad(sin.sum(), turns)
    torch.testing.assert_close(g, TWO_PI * torch.cos(turns.detach() * TWO_PI), rtol=1e-5, atol=1e-5)
    # consume is ignored when the turns require grad: autograd needs the original
    before = turns.detach().clone()
    reduced_phase(turns, consume=True)
    torch.testing.assert_close(turns.detach(), before, rtol=0, atol=0)
