"""The summed TimelineEncoder's CPU block kernel (timeseries/summed.py) against the component-by-component path
(bit for bit) and against the float64 formula."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.timeseries import TimelineEncoder, batch_timelines

SUMMED = [c for r in (1, 2, 3) for p in itertools.combinations(("absolute", "periodic", "gap"), r)
          for c in itertools.permutations(p)]


def timelines(seed, rows=5, longest=40, spread=1e4):
    rng = np.random.default_rng(seed)
    lines = [np.sort(rng.exponential(spread / 50, rng.integers(0, longest)).cumsum()) for _ in range(rows)]
    if lines[0].size > 3:
        lines[0][2] = lines[0][1]  # a duplicate time: gap 0
    times, mask, clock = batch_timelines(lines, return_clock=True)
    return times, mask, clock + torch.from_numpy(rng.uniform(0, 4e5, tuple(clock.shape)))  # hours: 1970-2015


def encode_both_ways(encoder, times, mask, clock, monkeypatch):
    """(kernel, component path) for the padded and the packed layout, under no_grad."""
    flat = times[mask]
    cu_seqlens = torch.cat([torch.zeros(1, dtype=torch.int64), mask.sum(1).cumsum(0)])
    with torch.no_grad():
        assert encoder._sums_in_blocks(torch.float32, times)
        kernel = encoder(times, mask, clock=clock), encoder.encode_packed(flat, cu_seqlens, clock=clock)
        with monkeypatch.context() as patch:
            patch.setattr(TimelineEncoder, "_sums_in_blocks", lambda self, dtype, t: False)
            components = encoder(times, mask, clock=clock), encoder.encode_packed(flat, cu_seqlens, clock=clock)
    return kernel, components


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(SUMMED), st.sampled_from([2, 8, 16]), st.sampled_from([1, 3, 8, 8192]),
       st.sampled_from([None, "America/New_York", "+05:30"]), st.integers(1, 2), st.integers(0, 2**32 - 1))
def test_the_block_kernel_is_the_component_path_to_the_bit(components, dim, chunk, timezone, harmonics, seed):
    """Any order and subset of the summed components, blocks cut inside rows (chunk 1 and 3: sub-blocks and blocks
    of per-event work both cut), time zones with daylight saving: the same bits in both layouts."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        torch.manual_seed(seed % 1000)
        encoder = TimelineEncoder(dim, components=components, timezone=timezone, harmonics=harmonics)
        encoder.chunk = chunk
        times, mask, clock = timelines(seed)
        (padded, packed), (padded_ref, packed_ref) = encode_both_ways(encoder, times, mask, clock, monkeypatch)
        assert torch.equal(padded, padded_ref) and torch.equal(packed, packed_ref)
        assert torch.equal(packed, padded[mask]) and (padded[~mask] == 0).all()


@pytest.mark.parametrize("components", [("absolute", "periodic", "gap"), ("periodic", "gap"), ("gap", "periodic"),
                                        ("periodic",)])
@pytest.mark.parametrize("chunk", [3, 8192])
def test_the_compiled_pieces_give_the_torch_ops_bits(components, chunk, monkeypatch):
    """With numba the periodic lift and the padded layout's row writes are compiled (summed_kernels.py); with
    OMNIPOS_DISABLE_NUMBA=1 they are torch ops: the same bits, padded and packed."""
    pytest.importorskip("numba")
    from omnipos.timeseries.summed import compiled_pieces

    assert compiled_pieces() is not None  # (the property test above then runs the compiled pieces)
    torch.manual_seed(chunk)
    encoder = TimelineEncoder(16, components=components, timezone="Europe/Paris", harmonics=2)
    encoder.chunk = chunk
    times, mask, clock = timelines(7, rows=9, longest=300)
    flat = times[mask]
    cu_seqlens = torch.cat([torch.zeros(1, dtype=torch.int64), mask.sum(1).cumsum(0)])
    with torch.no_grad():
        compiled = encoder(times, mask, clock=clock), encoder.encode_packed(flat, cu_seqlens, clock=clock)
        monkeypatch.setenv("OMNIPOS_DISABLE_NUMBA", "1")
        assert compiled_pieces() is None
        plain = encoder(times, mask, clock=clock), encoder.encode_packed(flat, cu_seqlens, clock=clock)
    assert all(torch.equal(a, b) for a, b in zip(compiled, plain))
    assert (compiled[0][~mask] == 0).all()


def test_phases_beyond_whole_turns_and_gaps_beyond_float64_match_the_component_path(monkeypatch):
    """Times whose phase reaches 2**53 turns (read as phase 0) and gaps whose ratio to the scale overflows (read
    as log(gap) - log(scale)) take the same special cases in the kernel."""
    times = torch.tensor([[0.0, 1e3, 1e19, 1.5e19, 3e300], [-2e18, -1.0, 0.0, 4.0, 7.0]], dtype=torch.float64)
    mask = torch.ones_like(times, dtype=torch.bool)
    encoder = TimelineEncoder(8, components=("absolute", "gap", "periodic"), gap_scale=1e-10)
    encoder.chunk = 2
    (padded, packed), (padded_ref, packed_ref) = encode_both_ways(encoder, times, mask, torch.zeros(2), monkeypatch)
    assert torch.isfinite(padded).all()
    assert torch.equal(padded, padded_ref) and torch.equal(packed, packed_ref)


def test_the_block_kernel_against_the_float64_formula():
    """absolute + lifted periodic + log-gap of random timelines, evaluated in float64 with NumPy (the formula,
    UTC, phases from 1970-01-01): within float32 rounding of the sum."""
    times, mask, clock = timelines(11, rows=8, longest=300, spread=5e4)
    torch.manual_seed(0)
    encoder = TimelineEncoder(32, components=("absolute", "periodic", "gap"))
    encoder.chunk = 64
    with torch.no_grad():
        ours = encoder(times, mask, clock=clock).double().numpy()[mask.numpy()]
    t, c = times.numpy(), np.broadcast_to(clock.numpy()[:, None], times.shape)
    m = mask.numpy()
    gaps = np.diff(t, axis=1, prepend=t[:, :1])[m]
    t, c = t[m], c[m]
    expected = np.zeros((t.size, 32))
    absolute = 2 * np.pi * t[:, None] / np.geomspace(1.0, 3650 * 24.0, 16)
    expected[:, 0::2], expected[:, 1::2] = np.sin(absolute), np.cos(absolute)
    periods = np.array([24.0, 7 * 24.0])
    phase = 2 * np.pi * np.mod(t[:, None] + c[:, None], periods) / periods
    features = np.stack([np.sin(phase[:, 0]), np.cos(phase[:, 0]), np.sin(phase[:, 1]), np.cos(phase[:, 1])], 1)
    expected += features @ encoder.lift.weight.detach().double().numpy().T
    x = np.log1p(gaps / 1.0)[:, None] * 1000.0 ** (-np.arange(16) * 2.0 / 32)
    expected[:, 0::2] += np.sin(x)
    expected[:, 1::2] += np.cos(x)
    assert np.abs(ours - expected).max() < 2e-6


def test_which_calls_the_block_kernel_takes():
    """float32 CPU sums of absolute / periodic / gap with an even dim, no gradient: the kernel; anything else (an
    odd periodic-only dim, float64, float16, learned components, gradients, concat) the component path, with the
    same numbers as before."""
    times, mask, clock = timelines(3)
    with torch.no_grad():
        assert TimelineEncoder(8)._sums_in_blocks(torch.float32, times)
        odd = TimelineEncoder(5, components=("periodic",))
        assert not odd._sums_in_blocks(torch.float32, times)
        assert odd(times, mask, clock=clock).shape == (*times.shape, 5)
        assert not TimelineEncoder(8, dtype=torch.float64)._sums_in_blocks(torch.float64, times)
        assert not TimelineEncoder(8).half()._sums_in_blocks(torch.float16, times)
        assert not TimelineEncoder(8, components=("absolute", "time2vec"))._sums_in_blocks(torch.float32, times)
        assert not TimelineEncoder(8, combine="concat", components=("absolute", "gap"))._sums_in_blocks(
            torch.float32, times)
    assert not TimelineEncoder(8)._sums_in_blocks(torch.float32, times)  # the lift wants its gradient
