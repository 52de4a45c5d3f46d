"""EventBatch.from_frame / from_parquet against a per-subject pandas reference."""

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.timeseries import meds_frame, reference

from omnipos.timeseries import EventBatch, TimelineEncoder


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


# --- issue 14: calendar range, float32 range ------------------------------------------------------------------


def test_end_date_placeholder_9999_sorts_after_2024_and_keeps_its_offset():
    """A "9999-12-31" placeholder (datetime64[us], as MEDS Parquet and pandas >= 2 give it) wrapped around in
    int64 nanoseconds and sorted before 2024."""
    times = np.array(["9999-12-31", "2024-01-01", "2024-01-02T06:00"], dtype="datetime64[us]")
    df = pd.DataFrame({"subject_id": [1, 1, 1], "time": times, "code": ["END", "A", "B"],
                       "numeric_value": [np.nan, 1.0, 2.0]})
    batch = EventBatch.from_frame(df)
    assert [batch.vocab[i] for i in batch.codes[0]] == ["A", "B", "END"]
    hours_to_9999 = (np.datetime64("9999-12-31", "s") - np.datetime64("2024-01-01", "s")).astype(np.int64) / 3600
    assert batch.times[0].tolist() == [0.0, 30.0, hours_to_9999]
    epoch = EventBatch.from_frame(df, origin="epoch")
    assert epoch.times[0, 2].item() == (np.datetime64("9999-12-31", "s").astype(np.int64)) / 3600


def test_values_beyond_float32_are_refused_by_name():
    df = pd.DataFrame({"subject_id": [4, 4], "time": [0.0, 1.0], "code": ["A", "B"], "numeric_value": [1.0, 1e39]})
    with pytest.raises(ValueError, match=r"column 'numeric_value' holds 1e\+39 for subject 4 at row 1.*float32"):
        EventBatch.from_frame(df)
    with pytest.raises(ValueError, match=r"holds -inf for subject 4"):
        EventBatch.from_frame(df.assign(numeric_value=[1.0, -np.inf]))
    ok = EventBatch.from_frame(df.assign(numeric_value=[np.nan, 3e38]))  # NaN: no value; 3e38 fits
    assert ok.values[0, 1].item() == np.float32(3e38) and ok.values[0, 0].isnan()


def test_mixed_naive_and_aware_times_are_refused_unless_naive_as():
    import datetime as dt

    aware = dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    df = pd.DataFrame({"subject_id": [1, 1], "time": pd.Series([dt.datetime(2024, 1, 1, 11), aware], dtype=object),
                       "code": ["A", "B"], "numeric_value": [1.0, 2.0]})
    with pytest.raises(ValueError, match="naive_as='UTC'"):
        EventBatch.from_frame(df)
    batch = EventBatch.from_frame(df, naive_as="UTC")
    assert batch.times[0].tolist() == [0.0, 1.0]                         # 12:00+02:00 is 10:00 UTC, before 11:00
    assert [batch.vocab[i] for i in batch.codes[0]] == ["B", "A"]
    tz = random_frame(7).assign(time=lambda d: d["time"].dt.tz_localize("Europe/Paris"))
    with pytest.raises(ValueError, match="naive_as"):
        EventBatch.from_frame(tz, origin="2021-01-01")                  # naive reference time, aware column
    EventBatch.from_frame(tz, origin=pd.Timestamp("2021-01-01", tz="UTC"))
    with pytest.raises(ValueError, match="naive_as must be"):
        EventBatch.from_frame(tz, naive_as="local")


# --- issue 17: clock time, units ------------------------------------------------------------------------------


def test_clock_is_each_rows_origin_on_the_clock():
    df = random_frame(8)
    batch = EventBatch.from_frame(df)                                    # origin="first"
    epoch = EventBatch.from_frame(df, origin="epoch")
    first = (df.groupby("subject_id")["time"].min() - pd.Timestamp(0)).dt.total_seconds() / 3600
    np.testing.assert_array_equal(batch.clock.numpy(), first.to_numpy())
    assert epoch.clock.tolist() == [0.0] * len(epoch)
    torch.testing.assert_close((batch.times + batch.clock[:, None])[batch.mask], epoch.times[epoch.mask],
                               rtol=1e-15, atol=0)
    ref = EventBatch.from_frame(df, origin="2021-02-01", unit="min")
    assert ref.clock.unique().tolist() == [(pd.Timestamp("2021-02-01") - pd.Timestamp(0)).total_seconds() / 60]
    numbers = EventBatch.from_frame(pd.DataFrame({"subject_id": [1, 1, 2], "time": [5.0, 7.0, 2.0],
                                                  "code": ["a", "b", "c"], "numeric_value": [1.0] * 3}))
    assert numbers.clock.tolist() == [5.0, 2.0] and numbers.times.tolist() == [[0.0, 2.0], [0.0, 0.0]]


def test_time_of_day_is_read_on_the_clock_with_the_default_origin():
    """Issue 17: with origin='first' (the default) a model needing the hour of day saw the time since each
    patient's first event. Label: the event is before noon (UTC). With clock time the 24 h sine separates the two
    classes exactly (sin > 0 on (0 h, 12 h)); on times from the first event it is a coin toss."""
    rng = np.random.default_rng(0)
    subjects = np.repeat(np.arange(300), 4)
    minutes = rng.integers(0, 60 * 24 * 365, subjects.size) // 5 * 5 + 1  # never exactly 0:00 or 12:00
    df = pd.DataFrame({"subject_id": subjects, "code": "X", "numeric_value": np.nan,
                       "time": np.datetime64("2023-01-01", "m") + minutes.astype("timedelta64[m]")})
    batch = EventBatch.from_frame(df)
    before_noon = torch.from_numpy(((minutes % 1440) < 720)[np.lexsort((minutes, subjects))])
    encoder = TimelineEncoder(2, components=("periodic",), combine="concat", periods=("24h",), harmonics=1)
    sine = encoder(batch)[..., 0][batch.mask]
    assert ((sine > 0) == before_noon).float().mean().item() == 1.0
    blind = encoder(batch.times, batch.mask, torch.zeros(len(batch)))[..., 0][batch.mask]  # times as if clock
    assert ((blind > 0) == before_noon).float().mean().item() < 0.75


def test_encoder_reads_the_batch_unit_instead_of_assuming_hours():
    df = random_frame(9)
    hours, minutes = EventBatch.from_frame(df), EventBatch.from_frame(df, unit="min")
    torch.manual_seed(0)
    encoder = TimelineEncoder(16, components=("absolute", "periodic", "gap", "gap_bucket", "time2vec"))
    torch.testing.assert_close(encoder(minutes), encoder(hours), rtol=0, atol=1e-5)
    in_minutes = TimelineEncoder(16, components=("absolute", "periodic", "gap", "gap_bucket", "time2vec"),
                                 unit="min")
    in_minutes.load_state_dict(encoder.state_dict())
    torch.testing.assert_close(in_minutes(hours), encoder(hours), rtol=0, atol=1e-5)
    with pytest.raises(TypeError, match="EventBatch alone"):
        encoder(hours, hours.mask)


def test_a_batch_without_clock_is_refused_by_periodic_features():
    batch = EventBatch.from_frame(random_frame(10))
    bare = EventBatch(batch.times, batch.codes, batch.values, batch.mask, batch.vocab, batch.subjects)
    assert bare.clock is None                                            # origin="first": unknown
    for origin, clock in (("epoch", 0.0), (5.0, 5.0), ("1970-01-02", 24.0), (pd.Timestamp("1970-01-01 01:00"), 1.0)):
        built = EventBatch(batch.times, batch.codes, batch.values, batch.mask, batch.vocab, batch.subjects,
                           origin=origin)
        assert built.clock.tolist() == [clock] * len(batch)              # a fixed origin is its own clock
    with pytest.raises(ValueError, match="carries no clock"):
        TimelineEncoder(8)(bare)
    assert TimelineEncoder(8, components=("absolute", "gap"))(bare).shape == (*batch.times.shape, 8)
    encoder = TimelineEncoder(8)
    torch.testing.assert_close(encoder(bare, clock=batch.clock), encoder(batch), rtol=0, atol=0)


# --- issue 17: MEDS folders in the real layout ----------------------------------------------------------------


def test_unknown_codes_map_to_unk_or_raise(meds_root):
    train = EventBatch.from_parquet(meds_root, split="train", unknown_code="unk")
    assert train.vocab[:2] == ["<pad>", "<unk>"] and "<unk>" not in train.vocab[2:]
    frame = meds_frame(meds_root, "data/held_out/*.parquet")
    frame.loc[frame["code"] == "HR", "code"] = "HR//NEW"
    with pytest.raises(ValueError, match=r"\['HR//NEW'\] are not in vocab .*unknown_code='unk'"):
        EventBatch.from_frame(frame, vocab=train.vocab, static="keep")
    held = EventBatch.from_frame(frame, vocab=train.vocab, unknown_code="unk", static="keep")
    names = [held.vocab[i] for i in held.codes[held.mask].tolist()]
    assert names.count("<unk>") == (frame["code"] == "HR//NEW").sum() and held.vocab == train.vocab
    plain = EventBatch.from_parquet(meds_root, split="train")
    with pytest.raises(ValueError, match="needs '<unk>' in vocab"):
        EventBatch.from_frame(frame, vocab=plain.vocab, unknown_code="unk", static="keep")
    with pytest.raises(ValueError, match="unknown_code must be one of"):
        EventBatch.from_frame(frame, unknown_code="skip", static="keep")


# --- issue 17: max_len and length-bucketed batches -----------------------------------------------------------


def long_and_short(seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.r_[rng.integers(1, 6, 9), 23]
    subjects = np.repeat(np.arange(10) + 50, lengths)
    df = pd.DataFrame({"subject_id": subjects, "time": rng.uniform(0, 1000, subjects.size).round(1),
                       "code": rng.choice(["a", "b", "c"], subjects.size),
                       "numeric_value": rng.normal(size=subjects.size)})
    df.loc[len(df)] = [50, np.nan, "static", 7.0]                           # a static event of subject 50
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)


def test_max_len_policies():
    df = long_and_short()
    full = EventBatch.from_frame(df, static="keep")
    longest = int(full.lengths.max())
    with pytest.raises(ValueError, match=rf"subject 59 has {longest} events, more than max_len=8 .*"
                                         r"truncation='head'"):
        EventBatch.from_frame(df, static="keep", max_len=8)
    head = EventBatch.from_frame(df, static="keep", max_len=8, truncation="head")
    tail = EventBatch.from_frame(df, static="keep", max_len=8, truncation="tail")
    split = EventBatch.from_frame(df, static="keep", max_len=8, truncation="split")
    assert head.times.shape[1] == tail.times.shape[1] == split.times.shape[1] == 8
    for row, n in enumerate(full.lengths.tolist()):
        events = full.times[row, :n]
        torch.testing.assert_close(head.times[row, : min(n, 8)], events[:8], rtol=0, atol=0)
        torch.testing.assert_close(tail.times[row, : min(n, 8)], events[-8:] if n else events, rtol=0, atol=0)
        windows = [r for r, s in enumerate(split.subjects) if s == full.subjects[row]]
        assert split.window[windows].tolist() == list(range(max(1, -(-n // 8))))
        torch.testing.assert_close(split.times[windows][split.mask[windows]], events, rtol=0, atol=0)
        assert (split.clock[windows] == full.clock[row]).all()
        assert (split.static_codes[windows] == full.static_codes[row]).all()   # every window keeps them
    assert tail.times[-1, 0] > 0                                         # still from the subject's first event
    with pytest.raises(ValueError, match="truncation must be one of"):
        EventBatch.from_frame(df, static="keep", max_len=8, truncation="middle")
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        EventBatch.from_frame(df, static="keep", max_len=0)


def test_one_huge_subject_is_refused_before_allocating_and_max_len_fixes_it():
    """Issue 17: one 20k-event patient among 200k padded everything to 20k slots (a 32 GB allocation)."""
    subjects = np.r_[np.arange(200_000), np.full(20_000, 7)]
    df = pd.DataFrame({"subject_id": subjects, "time": np.arange(subjects.size, dtype=np.float64), "code": "A",
                       "numeric_value": 1.0})
    with pytest.raises(ValueError, match=r"padding 200,000 rows .* \(20,001 events\) needs .* GiB.*max_len="):
        EventBatch.from_frame(df)
    batch = EventBatch.from_frame(df, max_len=16, truncation="tail")
    assert batch.times.shape == (200_000, 16) and int(batch.lengths[7]) == 16


def test_length_bucketed_batches(meds_root):
    df = long_and_short(1)
    full = EventBatch.from_frame(df, static="keep")
    batches = list(EventBatch.batches(df, 3, static="keep"))
    assert [len(b) for b in batches] == [3, 3, 3, 1]
    assert sorted(s for b in batches for s in b.subjects) == full.subjects
    for b in batches:
        assert b.vocab == full.vocab and b.times.shape[1] == int(b.lengths.max())   # padded to its own longest
        for row, sid in enumerate(b.subjects):
            i = full.subjects.index(sid)
            n = int(full.lengths[i])
            assert torch.equal(b.times[row, :n], full.times[i, :n]) and b.clock[row] == full.clock[i]
    longest_per_batch = [int(b.lengths.max()) for b in batches]
    assert longest_per_batch == sorted(longest_per_batch)                # shortest rows first
    assert sum(b.times.numel() for b in batches) < full.times.numel()
    again = [b.subjects for b in EventBatch.batches(df, 3, static="keep", shuffle=True, seed=5)]
    assert again == [b.subjects for b in EventBatch.batches(df, 3, static="keep", shuffle=True, seed=5)]
    assert sorted(again) == sorted(b.subjects for b in batches)
    in_order = [b.subjects for b in EventBatch.batches(df, 4, by_length=False, static="keep")]
    assert in_order == [full.subjects[i : i + 4] for i in range(0, 10, 4)]
    windows = list(EventBatch.batches(df, 4, static="keep", max_len=5, truncation="split"))
    assert all(b.times.shape[1] <= 5 for b in windows)
    meds = list(EventBatch.batches(meds_root, 4, split="train"))
    assert sorted(s for b in meds for s in b.subjects) == EventBatch.from_parquet(meds_root, split="train").subjects
    with pytest.raises(ValueError, match="split= needs a MEDS root"):
        next(EventBatch.batches(df, 2, split="train"))


def test_infinite_times_are_refused_never_static_and_unorderable_columns_are_named():
    df = pd.DataFrame({"subject_id": [1, 1, 1], "time": [0.0, np.inf, np.nan], "code": ["a", "b", "c"],
                       "numeric_value": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match=r"infinite value \(not a time\) in column 'time' for subject 1 at row 1"):
        EventBatch.from_frame(df, static="keep")
    batch = EventBatch.from_frame(df, static="keep", drop_missing=True)       # inf dropped, NaN kept as static
    assert batch.times.tolist() == [[0.0]] and [batch.vocab[c] for c in batch.static_codes[0]] == ["c"]
    import datetime as dt

    mixed = df.assign(subject_id=pd.Series([1, dt.datetime(2020, 1, 1), 2], dtype=object), time=[0.0, 1.0, 2.0])
    with pytest.raises(TypeError, match="column 'subject_id' mixes values that cannot be ordered"):
        EventBatch.from_frame(mixed)


# --- subjects with only static codes (issue 28) ----------------------------------------------------------------


def static_only_frame(seed=0):
    """random_frame plus subject 7 (static codes only) and a static code for one subject with a timeline."""
    df = random_frame(seed, subjects=5, events=40)
    static = pd.DataFrame({"subject_id": [7, 7, 100], "time": pd.to_datetime([None, None, None]),
                           "code": ["SEX//F", "EYE//BLUE", "SEX//M"], "numeric_value": [np.nan, 1.5, np.nan]})
    return pd.concat([static, df], ignore_index=True).sample(frac=1.0, random_state=seed).reset_index(drop=True)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_static_only_subject_keeps_a_row_whose_clock_is_missing(seed):
    df = static_only_frame(seed)
    batch = EventBatch.from_frame(df, static="keep")                  # static_only="keep" by default
    row = batch.subjects.index(7)
    assert not batch.mask[row].any() and bool(batch.clock[row].isnan())   # recognisable: no clock, not 1970
    vocab = batch.vocab
    assert sorted(vocab[c] for c in batch.static_codes[row][batch.static_mask[row]].tolist()) == ["EYE//BLUE",
                                                                                                  "SEX//F"]
    timed = df[df["time"].notna()]
    for i, subject in enumerate(batch.subjects):                      # the others: their first event, from pandas
        if subject != 7:
            first = timed.loc[timed["subject_id"] == subject, "time"].min()
            assert batch.clock[i].item() == (first - pd.Timestamp(0)).total_seconds() / 3600
    encoded = TimelineEncoder(16)(batch)                             # periodic features read the clock
    assert (encoded[row] == 0).all() and torch.isfinite(encoded).all()
    others = [i for i in range(len(batch)) if i != row]
    alone = EventBatch.from_frame(df[df["subject_id"] != 7], static="keep")
    torch.manual_seed(0)
    enc = TimelineEncoder(16)
    torch.testing.assert_close(enc(batch)[others], enc(alone), rtol=0, atol=0)
    windows = EventBatch.from_frame(df, static="keep", max_len=3, truncation="split")
    assert bool(windows.clock[windows.subjects.index(7)].isnan())


def test_static_only_drop_and_error():
    df = static_only_frame()
    kept = EventBatch.from_frame(df, static="keep")
    dropped = EventBatch.from_frame(df, static="keep", static_only="drop")
    assert 7 not in dropped.subjects and dropped.subjects == [s for s in kept.subjects if s != 7]
    keep_rows = [i for i, s in enumerate(kept.subjects) if s != 7]
    for name in ("times", "codes", "mask", "clock", "static_codes", "static_mask"):
        ours, theirs = getattr(dropped, name), getattr(kept, name)[keep_rows]
        assert torch.equal(ours, theirs[..., : ours.shape[-1]] if ours.ndim > 1 else theirs), name
    # with static="drop" the subject still had only static events: the same policy applies
    assert 7 not in EventBatch.from_frame(df, static="drop", static_only="drop").subjects
    assert bool(EventBatch.from_frame(df, static="drop").clock[kept.subjects.index(7)].isnan())
    with pytest.raises(ValueError, match=r"subject 7 has only static events .* static_only='keep'"):
        EventBatch.from_frame(df, static="keep", static_only="error")
    with pytest.raises(ValueError, match="static_only"):
        EventBatch.from_frame(df, static="keep", static_only="skip")
    # a fixed origin gives every row its clock: a static-only row then has one (the origin's)
    epoch = EventBatch.from_frame(df, static="keep", origin="epoch")
    assert epoch.clock.tolist() == [0.0] * len(epoch)


def test_a_missing_clock_is_refused_where_the_row_has_events():
    from omnipos.timeseries import periodic_encoding

    times, mask = torch.tensor([[0.0, 1.0], [0.0, 0.0]]), torch.tensor([[True, True], [False, False]])
    assert (periodic_encoding(times, mask=mask, clock=torch.tensor([5.0, float("nan")]))[1] == 0).all()
    with pytest.raises(ValueError, match="clock must be a finite time"):
        periodic_encoding(times, mask=mask, clock=torch.tensor([float("nan"), 5.0]))
    with pytest.raises(ValueError, match="clock must be a finite time"):
        TimelineEncoder(8)(times, mask, torch.tensor([float("nan"), 5.0]))
    with pytest.raises(ValueError, match="clock must be a finite time"):
        periodic_encoding(times, mask=mask, clock=torch.tensor([5.0, float("inf")]))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([np.int8, np.int16, np.int32, np.int64]), st.integers(1, 300), st.integers(0, 2**32 - 1),
       st.sampled_from([0, 1, 10**6, 10**12]))
def test_integer_subject_ids_are_numbered_as_pandas_factorize_numbers_them(dtype, rows, seed, spread):
    """Integer subject ids (dense through a range table, or sparse through pandas' hash table): the same codes
    and the same sorted uniques as ``pd.factorize(sort=True)``, at the type's extremes too."""
    from omnipos.timeseries.events import _factorize_subjects

    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, min(spread, int(info.max) - int(info.min)) + 1, rows)
    ids = (ids + (int(info.min) if seed % 3 == 0 else -(spread // 2) if seed % 3 == 1 else 0))
    column = pd.Series(np.clip(ids, info.min, info.max).astype(dtype), name="subject_id")
    codes, uniques = _factorize_subjects(pd, column, "subject_id")
    expected_codes, expected_uniques = pd.factorize(column, sort=True)
    assert np.array_equal(codes, expected_codes) and uniques.tolist() == expected_uniques.tolist()


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["ns", "us", "ms", "s", "m"]), st.sampled_from(["M", "m", "f"]), st.integers(0, 300),
       st.integers(0, 2**32 - 1))
def test_subject_time_order_is_a_stable_lexsort_and_gives_the_sorted_times(resolution, kind, rows, seed):
    """The (subject, time) order equals NumPy's stable lexsort, ties (duplicate times) in table order, and the
    sorted times it hands back (rebuilt from the sorted keys) equal ``times[order]`` to the bit, at every
    timestamp resolution, before 1970 too, with subjects that have no event."""
    from omnipos.timeseries.events import _subject_time_order

    rng = np.random.default_rng(seed)
    subjects = rng.integers(0, 12, rows) * 2  # odd ids: no events
    ticks = rng.integers(-10**6, 10**6, rows)
    ticks[rng.random(rows) < 0.3] = 7  # duplicates
    if kind == "f":
        times = ticks * 0.25
    else:
        times = ticks.astype(f"{'datetime64' if kind == 'M' else 'timedelta64'}[{resolution}]").astype(
            f"{'datetime64' if kind == 'M' else 'timedelta64'}[ns]")
    lengths = np.bincount(subjects, minlength=24).astype(np.int64)
    order, sorted_times = _subject_time_order(subjects, times, lengths)
    assert np.array_equal(order, np.lexsort((times, subjects)))
    if sorted_times is not None:
        assert sorted_times.dtype == times.dtype
        assert np.array_equal(sorted_times.view(np.int64), times[order].view(np.int64))
    assert (sorted_times is None) == (kind == "f" or rows == 0)


def test_padding_every_row_in_order_equals_padding_them_through_a_gather():
    """EventTable.pad of every row in table order (from_frame: no gather) holds what the gather path gives for
    the same rows in another order, row for row."""
    from omnipos.timeseries.events import EventTable

    rng = np.random.default_rng(4)
    df = pd.DataFrame({"subject_id": rng.integers(0, 7, 80),
                       "time": np.datetime64("2023-01-01", "ns") + rng.integers(0, 10**6, 80).astype("timedelta64[s]"),
                       "code": rng.choice(["A", "B", "C"], 80), "numeric_value": rng.normal(size=80)})
    table = EventTable.build(df)
    rows = np.arange(table.rows)
    direct, gathered = table.pad(rows), table.pad(rows[::-1].copy())
    for name in ("times", "codes", "mask", "clock"):
        assert torch.equal(getattr(direct, name), getattr(gathered, name).flip(0)), name
    assert torch.equal(direct.values.isnan(), gathered.values.flip(0).isnan())
    assert torch.equal(direct.values.nan_to_num(), gathered.values.flip(0).nan_to_num())
