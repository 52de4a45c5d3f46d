"""EventBatch.from_frame / from_parquet against a per-subject pandas reference."""

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.timeseries import EventBatch


def random_frame(seed=0, subjects=12, events=200):
    rng = np.random.default_rng(seed)
    start = np.datetime64("2021-01-01", "ns")
    df = pd.DataFrame({
        "subject_id": rng.choice(np.arange(100, 100 + subjects), events),
        "time": start + rng.integers(0, 90 * 24 * 4, events).astype("timedelta64[m]") * 15,  # ties on purpose
        "code": rng.choice(["LAB//A", "LAB//B", "RX//C", "DX//D"], events),
        "numeric_value": np.where(rng.random(events) < 0.5, rng.normal(size=events), np.nan),
    })
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)  # any row order


def reference(df, unit_seconds=3600.0):
    """The straightforward per-subject loop: stable sort, subtract the first time."""
    out = {}
    for sid, g in df.groupby("subject_id", sort=True):
        g = g.sort_values("time", kind="stable")
        hours = (g["time"] - g["time"].iloc[0]).dt.total_seconds().to_numpy() / unit_seconds
        out[sid] = (hours, g["code"].tolist(), g["numeric_value"].to_numpy())
    return out


def test_from_frame_matches_per_subject_reference():
    df = random_frame()
    batch = EventBatch.from_frame(df)
    ref = reference(df)
    assert batch.subjects == sorted(ref)
    assert batch.vocab == ["<pad>", "DX//D", "LAB//A", "LAB//B", "RX//C"]
    assert batch.times.dtype == torch.float64 and batch.codes.dtype == torch.long
    assert batch.mask.dtype == torch.bool and batch.values.shape == batch.times.shape
    for row, sid in enumerate(batch.subjects):
        hours, codes, values = ref[sid]
        n = len(hours)
        assert batch.lengths[row] == n and batch.mask[row, :n].all() and not batch.mask[row, n:].any()
        np.testing.assert_array_equal(batch.times[row, :n].numpy(), hours)
        assert [batch.vocab[i] for i in batch.codes[row, :n]] == codes       # stable order for ties too
        np.testing.assert_array_equal(batch.values[row, :n].numpy(), values.astype(np.float32))
        assert (batch.times[row, n:] == 0).all() and (batch.codes[row, n:] == 0).all()
        assert batch.values[row, n:].isnan().all()


def test_ties_keep_table_order():
    df = pd.DataFrame({"subject_id": [1, 1, 1, 1], "time": [5.0, 2.0, 5.0, 5.0],
                       "code": ["c", "a", "b", "a"], "numeric_value": [1.0, 2.0, 3.0, 4.0]})
    batch = EventBatch.from_frame(df)
    assert batch.times.tolist() == [[0.0, 3.0, 3.0, 3.0]]                  # plain numbers are in hours
    assert batch.values.tolist() == [[2.0, 1.0, 3.0, 4.0]]


def test_units_and_origins():
    df = random_frame(1)
    hours = EventBatch.from_frame(df)
    minutes = EventBatch.from_frame(df, unit="min")
    torch.testing.assert_close(minutes.times / 60, hours.times, rtol=0, atol=1e-9)
    epoch = EventBatch.from_frame(df, origin="epoch")
    first_hours = (df.groupby("subject_id")["time"].min() - pd.Timestamp(0)).dt.total_seconds() / 3600
    np.testing.assert_allclose(epoch.times[:, 0].numpy(), first_hours.to_numpy())
    ref = EventBatch.from_frame(df, origin=pd.Timestamp("2021-02-01"))
    assert (ref.times[ref.mask] < 0).any()                                 # before the origin: negative, allowed
    tz = df.assign(time=df["time"].dt.tz_localize("UTC").dt.tz_convert("America/New_York"))
    torch.testing.assert_close(EventBatch.from_frame(tz, origin="epoch").times, epoch.times)


def test_missing_times_name_subject_and_row():
    df = random_frame(2)
    df.loc[7, "time"] = pd.NaT
    sid = df.loc[7, "subject_id"]
    with pytest.raises(ValueError, match=rf"column 'time' for subject {sid} at row 7"):
        EventBatch.from_frame(df)
    kept = EventBatch.from_frame(df, drop_missing=True)
    assert int(kept.mask.sum()) == len(df) - 1
    df.loc[3, "code"] = None
    with pytest.raises(ValueError, match=r"column 'code' .* at row 3"):
        EventBatch.from_frame(df)


def test_subject_with_no_kept_events_is_an_all_masked_row():
    df = pd.DataFrame({"subject_id": ["a", "b", "b"], "time": [1.0, np.nan, np.nan],
                       "code": ["x", "y", "y"], "numeric_value": [np.nan] * 3})
    batch = EventBatch.from_frame(df, drop_missing=True)
    assert batch.subjects == ["a", "b"] and batch.mask.tolist() == [[True], [False]]


def test_vocab_reuse_and_unknown_codes():
    df = random_frame(3)
    first = EventBatch.from_frame(df)
    part = df[df["code"] != "DX//D"]
    again = EventBatch.from_frame(part, vocab=first.vocab)
    assert again.vocab == first.vocab and not (again.codes[again.mask] == first.vocab.index("DX//D")).any()
    with pytest.raises(ValueError, match="not in vocab"):
        EventBatch.from_frame(df.assign(code="NEW"), vocab=first.vocab)


def test_bad_frames():
    df = random_frame(4)
    with pytest.raises(ValueError, match=r"column\(s\) time='when' not in the frame"):
        EventBatch.from_frame(df, time="when")
    with pytest.raises(TypeError, match="DataFrame"):
        EventBatch.from_frame(df.to_dict())
    batch = EventBatch.from_frame(df, value=None)
    assert batch.values.isnan().all()


def test_from_parquet_file_and_folder(tmp_path):
    df = random_frame(5)
    df.to_parquet(tmp_path / "one.parquet")
    folder = tmp_path / "shards"
    folder.mkdir()
    df.iloc[:80].to_parquet(folder / "0.parquet")
    df.iloc[80:].to_parquet(folder / "1.parquet")
    expected = EventBatch.from_frame(df)
    for source in (tmp_path / "one.parquet", folder):
        batch = EventBatch.from_parquet(source)
        assert torch.equal(batch.times, expected.times) and torch.equal(batch.codes, expected.codes)
        assert batch.subjects == expected.subjects
    with pytest.raises(FileNotFoundError):
        EventBatch.from_parquet(tmp_path / "missing.parquet")


def test_batch_feeds_the_encoder_and_moves():
    from omnipos.timeseries import TimelineEncoder

    batch = EventBatch.from_frame(random_frame(6))
    out = TimelineEncoder(16)(batch)
    assert out.shape == (*batch.times.shape, 16) and (out[~batch.mask] == 0).all()
    assert batch.to("cpu").times is not None and "EventBatch(subjects=" in repr(batch)


@settings(max_examples=25)
@given(st.integers(0, 10_000), st.integers(1, 6), st.integers(1, 60))
def test_from_frame_property_any_row_order(seed, subjects, events):
    df = random_frame(seed, subjects=subjects, events=events)
    batch = EventBatch.from_frame(df)
    shuffled = EventBatch.from_frame(df.sample(frac=1.0, random_state=seed + 1))
    ref = reference(df)
    assert batch.subjects == sorted(ref) and int(batch.mask.sum()) == events
    for row, sid in enumerate(batch.subjects):
        hours = ref[sid][0]
        np.testing.assert_array_equal(batch.times[row, : len(hours)].numpy(), hours)
    # times are a function of the set of events, whatever the row order (ties may reorder codes only)
    assert torch.equal(shuffled.times, batch.times) and torch.equal(shuffled.mask, batch.mask)


def test_plain_float_times_sort_with_negatives_and_signed_zero():
    times = [3.5, -2.0, 0.0, -0.0, -1e9, 1e-300, -1e-300, 3.5]
    df = pd.DataFrame({"subject_id": [1] * 8, "time": times, "code": list("abcdefgh"),
                       "numeric_value": np.arange(8.0)})
    batch = EventBatch.from_frame(df, origin="epoch")
    assert batch.times[0].tolist() == sorted(times)
    # ties (0.0 / -0.0, and the two 3.5) keep table order
    assert batch.values[0].tolist() == [4.0, 1.0, 6.0, 2.0, 3.0, 5.0, 0.0, 7.0]


@pytest.mark.parametrize("resolution", ["ns", "ms", "s", "m"])
def test_order_at_every_timestamp_resolution_and_huge_spans(resolution):
    rng = np.random.default_rng(1)
    base = np.datetime64("2000-01-01", "ns")
    steps = rng.integers(0, 10**6, 300).astype(f"timedelta64[{resolution}]").astype("timedelta64[ns]")
    times = base + steps
    if resolution == "ns":  # a span that does not fit subject * span in int64: the two-pass path
        times[0] = np.datetime64("1760-01-01", "ns")
    df = pd.DataFrame({"subject_id": rng.integers(0, 7, 300), "time": times,
                       "code": rng.choice(list("abc"), 300), "numeric_value": np.arange(300.0)})
    batch = EventBatch.from_frame(df)
    ref = reference(df)
    for row, sid in enumerate(batch.subjects):
        hours, _, values = ref[sid]
        np.testing.assert_allclose(batch.times[row, : len(hours)].numpy(), hours, rtol=1e-15, atol=0)
        np.testing.assert_array_equal(batch.values[row, : len(hours)].numpy(), values.astype(np.float32))
