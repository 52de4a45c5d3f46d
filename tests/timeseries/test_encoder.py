import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.timeseries import (
    GapBucketEmbedding,
    TimelineEncoder,
    absolute_time_encoding,
    batch_timelines,
    log_gap_encoding,
    periodic_encoding,
    time_gaps,
)

ALL = ("absolute", "periodic", "gap", "gap_bucket", "time2vec")


def sample(seed=0):
    rng = np.random.default_rng(seed)
    timelines = [np.sort(rng.exponential(50.0, n).cumsum()) for n in (6, 0, 3, 1)]
    timelines[0][2] = timelines[0][1]  # a duplicate time
    return batch_timelines(timelines, return_clock=True)


def test_concat_is_the_functional_parts_in_order():
    times, mask, clock = sample()
    enc = TimelineEncoder(24, components=("absolute", "periodic", "gap"), combine="concat",
                          min_period="2h", max_period="100d", periods=("24h", "7d"), harmonics=2)
    assert enc.sizes == {"absolute": 8, "periodic": 8, "gap": 8}
    out = enc(times, mask, clock=clock)
    gaps = time_gaps(times, mask)
    expected = torch.cat([
        absolute_time_encoding(times, 8, min_period="2h", max_period="100d", mask=mask),
        periodic_encoding(times, ("24h", "7d"), 2, mask=mask, clock=clock),
        log_gap_encoding(gaps, 8, mask=mask),
    ], dim=-1)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_sum_adds_parts_and_lifts_periodic():
    times, mask, clock = sample(1)
    enc = TimelineEncoder(16, components=("absolute", "periodic", "gap_bucket"), combine="sum")
    out = enc(times, mask, clock=clock)
    periodic = periodic_encoding(times, mask=mask, clock=clock) @ enc.lift.weight.T
    buckets = GapBucketEmbedding(dim=16)
    buckets.load_state_dict(enc.gap_bucket.state_dict())
    expected = (absolute_time_encoding(times, 16, min_period="1h", max_period="3650d", mask=mask) + periodic
                + buckets(time_gaps(times, mask), mask))
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("combine", ["sum", "concat"])
def test_all_components_shapes_padding_and_gradients(combine):
    times, mask, clock = sample(2)
    enc = TimelineEncoder(32, components=ALL, combine=combine)
    out = enc(times, mask, clock=clock)
    assert out.shape == (*times.shape, 32) and out.dtype == torch.float32
    assert (out[~mask] == 0).all()
    out.square().sum().backward()
    assert all(p.grad is not None for p in enc.parameters())
    assert "components=('absolute', 'periodic', 'gap', 'gap_bucket', 'time2vec')" in repr(enc)


def test_same_moment_in_minutes_hours_datetime64_encodes_identically():
    start = np.datetime64("2024-02-28T22:15", "ns")
    hours = [np.array([0.0, 0.5, 0.5, 25.0, 200.75]), np.array([0.0, 3.0])]
    stamps = [start + (h * 3600e9).astype("timedelta64[ns]") for h in hours]
    enc_h = TimelineEncoder(32, components=ALL, combine="concat")
    enc_min = TimelineEncoder(32, components=ALL, combine="concat", unit="min")
    enc_min.load_state_dict(enc_h.state_dict())
    clock_h = float((start - np.datetime64(0, "ns")) / np.timedelta64(1, "h"))
    times, mask = batch_timelines(hours)
    a = enc_h(times, mask, clock=clock_h)
    times, mask = batch_timelines([h * 60 for h in hours], unit="min")
    b = enc_min(times, mask, clock=clock_h * 60)
    times, mask, clock = batch_timelines(stamps, return_clock=True)
    c = enc_h(times, mask, clock=clock)
    times, mask, clock = batch_timelines([list(s.astype("datetime64[us]").tolist()) for s in stamps],
                                         return_clock=True)
    d = enc_h(times, mask, clock=clock)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    torch.testing.assert_close(a, c, rtol=0, atol=1e-6)
    torch.testing.assert_close(a, d, rtol=0, atol=1e-6)


@settings(max_examples=25)
@given(st.integers(1, 4), st.integers(1, 6), st.integers(0, 10_000))
def test_encoding_of_a_timeline_does_not_depend_on_its_batch(batch, extra, seed):
    rng = np.random.default_rng(seed)
    enc = TimelineEncoder(16, components=("absolute", "periodic", "gap"))
    torch.manual_seed(0)
    timeline = np.sort(rng.uniform(0, 1e4, 5))
    times, mask, clock = batch_timelines([timeline], return_clock=True)
    alone = enc(times, mask, clock=clock)[0]
    others = [np.sort(rng.uniform(-1e5, 1e5, rng.integers(0, 5 + extra))) for _ in range(batch)]
    times, mask, clock = batch_timelines(others + [timeline], return_clock=True)
    torch.testing.assert_close(enc(times, mask, clock=clock)[-1, :5], alone, rtol=0, atol=0)


def test_bad_configuration_and_input():
    with pytest.raises(ValueError, match="components must be one of"):
        TimelineEncoder(16, components=("absolute", "fourier"))
    with pytest.raises(ValueError, match="repeat"):
        TimelineEncoder(16, components=("gap", "gap"))
    with pytest.raises(ValueError, match="combine must be one of"):
        TimelineEncoder(16, combine="mean")
    with pytest.raises(ValueError, match="even"):
        TimelineEncoder(15)
    with pytest.raises(ValueError, match="cannot be shared"):
        TimelineEncoder(9, combine="concat")
    with pytest.raises(ValueError, match="known units"):
        TimelineEncoder(16, unit="hours")
    with pytest.raises(ValueError, match="sorted"):
        TimelineEncoder(16)(torch.tensor([[3.0, 1.0]]), clock=0)
    with pytest.raises(ValueError, match="finite"):
        TimelineEncoder(16)(torch.tensor([[0.0, float("inf")]]), clock=0)
    assert TimelineEncoder(4, components=("periodic",), combine="concat")(torch.zeros(1, 2), clock=0).shape == \
        (1, 2, 4)


def test_empty_batches_and_float64_with_learned_parts():
    times, mask, clock = batch_timelines([[], []], return_clock=True)
    assert clock.tolist() == [0.0, 0.0]
    assert TimelineEncoder(8)(times, mask, clock=clock).shape == (2, 0, 8)
    assert time_gaps(times, mask).shape == (2, 0)
    assert absolute_time_encoding(times, 4, min_period=1.0, max_period=2.0, mask=mask).shape == (2, 0, 4)
    assert periodic_encoding(times, mask=mask, clock=clock).shape == (2, 0, 4)
    assert log_gap_encoding(times, 4, mask=mask).shape == (2, 0, 4)
    assert GapBucketEmbedding(dim=3)(times, mask).shape == (2, 0, 3)
    times, mask, _ = sample(3)
    enc = TimelineEncoder(8, components=("gap_bucket", "absolute"), dtype=torch.float64)
    out = enc(times, mask)
    assert out.dtype == torch.float64 and (out[~mask] == 0).all()
    enc.chunk = 1  # one row per block gives the same result as one block
    torch.testing.assert_close(enc(times, mask), out, rtol=0, atol=0)


# --- issues 13 and 14: dtypes, meta, batch invariance ------------------------------------------------------------


def test_half_keeps_float64_periods_and_rounds_the_float32_output():
    """TimelineEncoder(8, unit='s').half().periods was inf (604800 s does not fit float16)."""
    torch.manual_seed(0)
    encoder = TimelineEncoder(8, unit="s", components=("absolute", "periodic", "gap", "gap_bucket"))
    times, mask, clock = sample(4)
    times, clock = times * 3600, clock * 3600
    reference = encoder(times, mask, clock)
    for low in (torch.float16, torch.bfloat16):
        module = copy.deepcopy(encoder).to(low)
        for name in ("periods", "cycles", "gap_cycles", "tz_offsets"):
            buffer = getattr(module, name)
            assert buffer.dtype == torch.float64 and torch.isfinite(buffer).all(), name
        out = module(times, mask, clock)
        assert out.dtype == low and module.dtype == low
        tolerance = 5e-3 if low == torch.float16 else 2e-2
        assert (out.double() - reference.double()).abs().max() <= tolerance


@pytest.mark.parametrize("combine", ["sum", "concat"])
def test_half_encoder_refuses_an_output_beyond_float16(combine):
    """A float16 TimelineEncoder with Time2Vec on times of 1e5 hours gave inf (the linear term w t + b passed
    65504) with no error; the padded and the packed paths now raise naming the cause."""
    torch.manual_seed(0)
    encoder = TimelineEncoder(16, components=("absolute", "time2vec"), combine=combine).requires_grad_(False)
    times, mask, clock = sample(3)
    far = times * 1e4 / times.max()  # hours up to 1e4: in range for float16
    assert torch.isfinite(copy.deepcopy(encoder).half()(far, mask, clock)).all()
    half = encoder.half()
    with pytest.raises(ValueError, match="the encoding reaches .*float16.*Time2Vec's linear term grows with time"):
        half(far * 1e3, mask, clock)
    packed_times = (far * 1e3)[mask]
    cu = torch.cat([torch.zeros(1, dtype=torch.int32), mask.sum(1).cumsum(0).int()])
    with pytest.raises(ValueError, match="the encoding reaches"):
        half.encode_packed(packed_times, cu, clock)
    assert torch.isfinite(encoder.bfloat16()(far * 1e3, mask, clock)).all()
    assert copy.deepcopy(encoder).double()(times, mask, clock).dtype == torch.float64


def test_meta_inputs_give_meta_outputs():
    with torch.device("meta"):
        encoder = TimelineEncoder(8, components=ALL)
    times, mask = torch.empty(3, 4, device="meta"), torch.empty(3, 4, dtype=torch.bool, device="meta")
    out = encoder(times, mask, torch.empty(3, device="meta"))
    assert out.is_meta and out.shape == (3, 4, 8)


def test_the_default_encoder_is_batch_invariant_to_the_bit():
    """The periodic lift was one matrix product, whose rounding depends on how many rows it gets: with dim=8 a
    timeline alone and in a batch differed in about 1 case in 6 (by 1-2e-7)."""
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    encoders = [TimelineEncoder(d) for d in (6, 8, 10)]
    for _ in range(30):
        timeline = np.sort(rng.uniform(0, 1e4, rng.integers(1, 30)))
        others = [np.sort(rng.uniform(-1e5, 1e5, rng.integers(0, 60))) for _ in range(rng.integers(1, 8))]
        at = int(rng.integers(0, len(others) + 1))
        alone = batch_timelines([timeline], return_clock=True)
        batch = batch_timelines(others[:at] + [timeline] + others[at:], return_clock=True)
        for encoder in encoders:
            assert torch.equal(encoder(*batch)[at, : len(timeline)], encoder(*alone)[0])


@settings(max_examples=20)
@given(st.sampled_from([2, 4, 6, 8, 12, 16]), st.integers(1, 5), st.integers(0, 10_000),
       st.sampled_from([("absolute", "periodic", "gap"), ALL]), st.sampled_from(["sum", "concat"]))
def test_batch_invariance_property(dim, batch, seed, components, combine):
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    try:
        encoder = TimelineEncoder(dim * (len(components) + 1), components=components, combine=combine)
    except ValueError:
        return  # a dim the concat split cannot share
    timeline = np.sort(rng.uniform(0, 1e4, rng.integers(1, 12)))
    others = [np.sort(rng.uniform(-1e5, 1e5, rng.integers(0, 20))) for _ in range(batch)]
    alone = encoder(*batch_timelines([timeline], return_clock=True))[0]
    out = encoder(*batch_timelines(others + [timeline], return_clock=True))[-1, : len(timeline)]
    assert torch.equal(out, alone)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("components", [("absolute", "periodic", "gap"), ("periodic", "gap", "absolute"), ALL])
def test_sum_written_in_place_equals_the_autograd_path_to_the_bit(components, dtype):
    """Under no_grad the summed components are written straight into the output; with gradients on they are
    built as separate tensors: the same numbers, bit for bit, in both layouts and with blocks cut inside rows."""
    times, mask, clock = sample(5)
    torch.manual_seed(5)
    enc = TimelineEncoder(16, components=components, combine="sum", dtype=dtype)
    enc.chunk = 4
    expected = enc(times, mask, clock=clock)
    assert expected.requires_grad  # the lift / learned parts: the path that keeps every intermediate
    with torch.no_grad():
        padded = enc(times, mask, clock=clock)
        flat = times[mask]
        cu_seqlens = torch.cat([torch.zeros(1, dtype=torch.int64), mask.sum(1).cumsum(0)])
        packed = enc.encode_packed(flat, cu_seqlens, clock=clock)
    assert padded.dtype == dtype and torch.equal(padded, expected.detach())
    assert torch.equal(packed, expected.detach()[mask])


def test_absolute_plus_gap_error_is_no_larger_than_with_truncated_turns():
    """The encoder's sinusoids remove the nearest whole turn (core ``centered=True``): against the float64 formula
    the summed absolute + log-gap encoding is at least as close, max and mean, as the same sum built from the
    core's default (truncated-turn) sinusoids, the numbers the encoder gave before."""
    from omnipos.core import sinusoid_of_turns

    rng = np.random.default_rng(7)
    times = torch.from_numpy(np.sort(rng.exponential(72.0, (64, 200)).cumsum(1), axis=1))  # hours, to ~1.6 years
    enc = TimelineEncoder(32, components=("absolute", "gap"), combine="sum")
    with torch.no_grad():
        ours = enc(times).double().numpy()
    gaps = time_gaps(times).numpy()
    abs_turns = times.numpy()[..., None] * enc.cycles.numpy()
    gap_turns = np.log1p(gaps / enc.gap_scale)[..., None] * enc.gap_cycles.numpy()
    formula = np.zeros(ours.shape)
    for turns in (abs_turns, gap_turns):
        whole = 2 * np.pi * np.fmod(turns, 1.0)
        formula[..., 0::2] += np.sin(whole)
        formula[..., 1::2] += np.cos(whole)
    before = (sinusoid_of_turns(torch.from_numpy(abs_turns)) + sinusoid_of_turns(torch.from_numpy(gap_turns)))
    new_err, old_err = np.abs(ours - formula), np.abs(before.double().numpy() - formula)
    assert new_err.max() <= old_err.max() and new_err.mean() <= old_err.mean()
