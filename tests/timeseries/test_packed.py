"""PackedEvents (events back to back + cu_seqlens) against the padded EventBatch and float64 formulas."""

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.timeseries import EventBatch, PackedEvents, TimelineEncoder


def frame(seed=0, subjects=6, events=60, static_only=False):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "subject_id": rng.choice(np.arange(10, 10 + subjects), events),
        "time": np.datetime64("2022-05-01", "ns") + rng.integers(0, 60 * 24 * 30, events).astype("timedelta64[m]"),
        "code": rng.choice(["A", "B", "C", "D"], events),
        "numeric_value": np.where(rng.random(events) < 0.5, rng.normal(size=events), np.nan),
    })
    if static_only:   # subject 99: static codes only (an empty row, clock NaN); subject 10 gets one static code
        df = pd.concat([df, pd.DataFrame({"subject_id": [99, 10], "time": pd.to_datetime([None, None]),
                                          "code": ["S", "S"], "numeric_value": [np.nan, 3.0]})], ignore_index=True)
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)


@pytest.mark.parametrize("static_only", [False, True])
def test_packed_holds_exactly_the_real_events_of_the_padded_batch(static_only):
    df = frame(static_only=static_only)
    batch = EventBatch.from_frame(df, static="keep")
    packed = PackedEvents.from_frame(df, static="keep")
    mask = batch.mask
    assert torch.equal(packed.times, batch.times[mask]) and torch.equal(packed.codes, batch.codes[mask])
    assert torch.equal(packed.values.isnan(), batch.values[mask].isnan())
    assert torch.equal(packed.values.nan_to_num(), batch.values[mask].nan_to_num())
    assert packed.cu_seqlens.dtype == torch.int32                        # flash-attn's cu_seqlens dtype
    assert packed.cu_seqlens.tolist() == [0] + np.cumsum(batch.lengths.numpy()).tolist()
    assert packed.max_seqlen == int(batch.lengths.max()) and len(packed) == len(batch)
    assert packed.row.tolist() == np.repeat(np.arange(len(batch)), batch.lengths.numpy()).tolist()
    assert packed.subjects == batch.subjects and packed.vocab == batch.vocab
    assert torch.equal(packed.clock.isnan(), batch.clock.isnan())
    assert torch.equal(packed.clock.nan_to_num(), batch.clock.nan_to_num())
    assert torch.equal(packed.static_codes, batch.static_codes[batch.static_mask])
    back = packed.padded()                                               # and back, bit for bit
    for name in ("times", "codes", "mask", "static_codes", "static_mask", "window"):
        assert torch.equal(getattr(back, name), getattr(batch, name)), name
    again = PackedEvents.from_batch(batch)
    assert torch.equal(again.times, packed.times) and torch.equal(again.cu_seqlens, packed.cu_seqlens)
    if static_only:
        row = packed.subjects.index(99)
        assert packed.lengths[row] == 0 and bool(packed.clock[row].isnan())


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([("absolute", "periodic", "gap"), ("gap_bucket", "time2vec"),
                                               ("absolute", "gap")]),
       st.sampled_from(["sum", "concat"]), st.sampled_from(["h", "min"]))
def test_the_encoder_gives_each_packed_event_its_padded_numbers(seed, components, combine, unit):
    df = frame(seed, static_only=seed % 2 == 0)
    batch = EventBatch.from_frame(df, static="keep", unit=unit)
    packed = PackedEvents.from_frame(df, static="keep", unit=unit)
    dim = 24 if combine == "sum" or components != ("absolute", "periodic", "gap") else 28
    torch.manual_seed(seed)
    encoder = TimelineEncoder(dim, components=components, combine=combine)
    with torch.no_grad():
        padded = encoder(batch)
        ours = encoder(packed)
    assert ours.shape == (int(batch.mask.sum()), dim)
    torch.testing.assert_close(ours, padded[batch.mask], rtol=0, atol=0)
    encoder.chunk = 7                                                    # blocks cut inside rows: same numbers
    with torch.no_grad():
        torch.testing.assert_close(encoder(packed), ours, rtol=0, atol=0)


def test_packed_absolute_encoding_against_the_float64_formula():
    df = frame(3)
    packed = PackedEvents.from_frame(df, value=None)
    encoder = TimelineEncoder(16, components=("absolute",), combine="concat", min_period="1h", max_period="365d")
    cycles = encoder.cycles.numpy()                                      # turns per hour, float64
    turns = packed.times.numpy()[:, None] * cycles
    expected = np.empty((turns.shape[0], 16))
    expected[:, 0::2], expected[:, 1::2] = np.sin(2 * np.pi * turns), np.cos(2 * np.pi * turns)
    expected_cycles = 1 / np.geomspace(1.0, 365 * 24.0, 8)               # periods 1 h .. 365 d, geometric
    np.testing.assert_allclose(cycles, expected_cycles, rtol=1e-12)
    np.testing.assert_allclose(encoder(packed).detach().numpy(), expected, rtol=0, atol=2e-6)


def test_bad_packed_input_is_refused_by_name():
    encoder = TimelineEncoder(8)
    times = torch.tensor([0.0, 1.0, 5.0, 0.0, 2.0], dtype=torch.float64)
    clock = torch.tensor([100.0, 200.0], dtype=torch.float64)
    good = torch.tensor([0, 3, 5], dtype=torch.int32)
    assert encoder.encode_packed(times, good, clock).shape == (5, 8)
    with pytest.raises(ValueError, match="cu_seqlens must start at 0"):
        encoder.encode_packed(times, torch.tensor([1, 3, 5]), clock)
    with pytest.raises(ValueError, match=r"cu_seqlens must be >= 0|non-decreasing"):
        encoder.encode_packed(times, torch.tensor([0, 4, 3, 5]), torch.zeros(3))
    with pytest.raises(ValueError, match="cu_seqlens ends at 4 but there are 5 events"):
        encoder.encode_packed(times, torch.tensor([0, 3, 4]), clock)
    with pytest.raises(TypeError, match="cu_seqlens"):
        encoder.encode_packed(times, torch.tensor([0.0, 3.0, 5.0]), clock)
    with pytest.raises(TypeError, match="cu_seqlens must be a 1-D integer tensor"):
        encoder.encode_packed(times, [0, 3, 5], clock)
    with pytest.raises(ValueError, match="packed times must be 1-D"):
        encoder.encode_packed(times.reshape(1, 5), good, clock)
    with pytest.raises(ValueError, match="sorted .* row 0 at position 2"):
        encoder.encode_packed(torch.tensor([0.0, 5.0, 1.0, 0.0, 2.0]), good, clock)
    with pytest.raises(ValueError, match="times must be finite"):
        encoder.encode_packed(torch.tensor([0.0, 1.0, float("nan"), 0.0, 2.0]), good, clock)
    with pytest.raises(ValueError, match="needs clock times"):
        encoder.encode_packed(times, good)
    with pytest.raises(ValueError, match="clock must be a finite time"):             # NaN only for an empty row
        encoder.encode_packed(times, good, torch.tensor([float("nan"), 1.0]))
    empty_row = torch.tensor([0, 0, 5], dtype=torch.int32)
    out = encoder.encode_packed(times[[0, 1, 2, 2, 2]], empty_row, torch.tensor([float("nan"), 1.0]))
    assert torch.isfinite(out).all()
    with pytest.raises(ValueError, match="clock .* must have the shape"):
        encoder.encode_packed(times, good, torch.zeros(3))
    packed = PackedEvents.from_frame(frame(), value=None)
    with pytest.raises(TypeError, match="pass PackedEvents alone"):
        encoder(packed, torch.ones(3, dtype=torch.bool))
