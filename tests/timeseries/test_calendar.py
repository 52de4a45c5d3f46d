import datetime as dt

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.timeseries import EventBatch, TimelineEncoder, batch_timelines, periodic_encoding, to_offsets


def test_same_moment_in_every_unit_and_type():
    start = np.datetime64("2021-03-04T05:06:07")
    offsets_h = np.array([0.0, 0.25, 26.5, 170.0, 1000.125])
    as_dt64 = start + (offsets_h * 3600e9).astype("timedelta64[ns]")
    reference = torch.tensor(offsets_h, dtype=torch.float64)
    candidates = {
        "hours": batch_timelines([offsets_h])[0],
        "minutes": batch_timelines([offsets_h * 60], unit="min")[0] / 60,
        "seconds": batch_timelines([offsets_h * 3600], unit="s")[0] / 3600,
        "days": batch_timelines([offsets_h / 24], unit="d")[0] * 24,
        "datetime64": batch_timelines([as_dt64])[0],
        "python datetime": batch_timelines([as_dt64.astype("datetime64[us]").tolist()])[0],
        "pandas": batch_timelines([pd.Series(as_dt64)])[0],
        "pandas tz": batch_timelines([pd.Series(as_dt64).dt.tz_localize("UTC").dt.tz_convert("Asia/Tokyo")])[0],
        "timedelta64": batch_timelines([as_dt64 - start])[0],
    }
    for name, value in candidates.items():
        assert value.dtype == torch.float64, name
        torch.testing.assert_close(value[0], reference, rtol=0, atol=1e-9, msg=name)


def test_origins():
    times = np.array(["2020-01-01T12:00", "2020-01-02T00:00"], dtype="datetime64[ns]")
    first = batch_timelines([times], origin="first")[0][0]
    assert first.tolist() == [0.0, 12.0]
    epoch = batch_timelines([times], origin="epoch")[0][0]
    expected = (times - np.datetime64("1970-01-01")).astype("timedelta64[s]").astype(np.float64) / 3600
    assert epoch.tolist() == expected.tolist()
    for ref in ("2020-01-02", np.datetime64("2020-01-02"), dt.datetime(2020, 1, 2), pd.Timestamp("2020-01-02")):
        # times before the origin are negative offsets, allowed
        assert batch_timelines([times], origin=ref)[0][0].tolist() == [-12.0, 0.0]
    assert batch_timelines([[5.0, 7.0]], origin=4.0)[0][0].tolist() == [1.0, 3.0]
    assert batch_timelines([[5.0, 7.0]], origin="epoch")[0][0].tolist() == [5.0, 7.0]
    with pytest.raises(ValueError, match="origin must be one of 'first', 'epoch'"):
        batch_timelines([times], origin="yesterday")
    with pytest.raises(TypeError, match="origin"):
        batch_timelines([[1.0]], origin=dt.datetime(2020, 1, 1))


def test_first_origin_is_per_timeline_and_padding():
    times, mask = batch_timelines([[3.0, 4.0, 10.0], [], [-2.0]])
    assert times.shape == (3, 3) and mask.tolist() == [[True] * 3, [False] * 3, [True, False, False]]
    assert times.tolist() == [[0.0, 1.0, 7.0], [0.0] * 3, [0.0] * 3]


def test_unsorted_raises_or_sorts_stably():
    with pytest.raises(ValueError, match=r"timelines\[1\] is not sorted: position 2"):
        batch_timelines([[1.0, 2.0], [0.0, 5.0, 4.0]])
    times, _mask = batch_timelines([[1.0, 2.0], [0.0, 5.0, 4.0]], sort=True, origin="epoch")
    assert times[1].tolist() == [0.0, 4.0, 5.0]
    dates = np.array(["2020-01-03", "2020-01-01"], dtype="datetime64[ns]")
    assert batch_timelines([dates], sort=True)[0][0].tolist() == [0.0, 48.0]


def test_duplicates_are_legal():
    times, _ = batch_timelines([[1.0, 1.0, 1.0]], origin="epoch")
    assert times.tolist() == [[1.0, 1.0, 1.0]]


def test_missing_times():
    expected = r"timelines\[1\] has a missing or infinite time \(NaN/NaT/inf\) at position 1"
    with pytest.raises(ValueError, match=expected):
        batch_timelines([[0.0], [1.0, float("nan"), 3.0]])
    times, mask = batch_timelines([[0.0], [1.0, float("nan"), 3.0]], drop_missing=True)
    assert times[1].tolist() == [0.0, 2.0] and mask.sum().item() == 3
    dates = np.array(["2020-01-01", "NaT"], dtype="datetime64[ns]")
    with pytest.raises(ValueError, match="NaN/NaT"):
        batch_timelines([dates])
    assert batch_timelines([[None, dt.datetime(2020, 1, 1)]], drop_missing=True)[1].sum() == 1


def test_bad_inputs():
    with pytest.raises(TypeError, match="list of timelines"):
        batch_timelines(torch.zeros(3))
    with pytest.raises(TypeError, match="mix"):
        batch_timelines([[1.0], np.array(["2020-01-01"], dtype="datetime64[ns]")])
    with pytest.raises(TypeError, match="numbers or times"):
        batch_timelines([["a", "b"]])
    with pytest.raises(ValueError, match="empty"):
        batch_timelines([])
    with pytest.raises(ValueError, match=r"timelines\[0\] must be one timeline \(1-D\)"):
        batch_timelines([np.zeros((2, 3))])


def test_to_offsets_single_timeline():
    assert to_offsets([60.0, 120.0], unit="min", origin="first").tolist() == [0.0, 60.0]


@given(st.lists(st.lists(st.floats(-1e6, 1e6), max_size=6), min_size=1, max_size=5))
def test_sort_true_matches_numpy_sort(timelines):
    times, mask = batch_timelines(timelines, sort=True, origin="epoch")
    for row, timeline in enumerate(timelines):
        assert times[row][mask[row]].tolist() == sorted(timeline)
        assert not times[row][~mask[row]].any()


# --- issue 14: calendar range, time zones, odd arguments -------------------------------------------------------


def test_dates_beyond_2262_do_not_wrap_around():
    times, _mask = batch_timelines([[dt.datetime(2024, 1, 1), dt.datetime(2300, 1, 1)]])
    hours = (np.datetime64("2300-01-01", "s") - np.datetime64("2024-01-01", "s")).astype(np.int64) / 3600
    assert times.tolist() == [[0.0, hours]] and hours > 0
    placeholder = np.array(["2024-03-01", "9999-12-31"], dtype="datetime64[D]")
    epoch = batch_timelines([placeholder], origin="epoch")[0][0]
    assert epoch.tolist() == [(d.astype("datetime64[s]").astype(np.int64)) / 3600 for d in placeholder]
    # before 1677 too, and a far origin
    old = np.array(["1500-01-01", "1600-01-01"], dtype="datetime64[us]")
    assert batch_timelines([old], origin="9999-12-31")[0][0].tolist() == [
        (d - np.datetime64("9999-12-31", "us")).astype(np.int64) / 3.6e9 for d in old]


def test_nanosecond_detail_and_far_dates_together_are_refused_by_name():
    fine = np.array(["2024-01-01T00:00:00.000000001"], dtype="datetime64[ns]")
    far = np.array(["9999-12-31"], dtype="datetime64[us]")
    with pytest.raises(ValueError, match="nanoseconds reach only 1677-2262"):
        batch_timelines([fine, far])
    whole = np.array(["2024-01-01T00:00:01"], dtype="datetime64[ns]")        # no sub-us detail: counted in us
    assert batch_timelines([whole, far], origin="epoch")[0][:, 0].tolist() == [
        1704067201 / 3600, far[0].astype("datetime64[s]").astype(np.int64) / 3600]


def test_naive_and_aware_datetimes_together_need_naive_as():
    naive, aware = dt.datetime(2024, 1, 1, 12), dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc)
    with pytest.raises(ValueError, match=r"timelines\[0\] mix naive .* naive_as='UTC'"):
        batch_timelines([[naive, aware]])
    with pytest.raises(ValueError, match="timelines mix naive"):               # across timelines
        batch_timelines([[naive], pd.Series([aware])])
    with pytest.raises(ValueError, match="mix naive"):                         # a naive origin, aware times
        batch_timelines([pd.Series([aware])], origin="2024-01-01")
    assert batch_timelines([[naive, aware]], naive_as="UTC")[0].tolist() == [[0.0, 0.0]]
    assert batch_timelines([pd.Series([aware])], origin="2024-01-01", naive_as="UTC")[0].tolist() == [[12.0]]
    with pytest.raises(ValueError, match="naive_as must be"):
        batch_timelines([[naive]], naive_as="Europe/Paris")


@pytest.mark.parametrize("origin", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_origin_is_refused(origin):
    with pytest.raises(ValueError, match="origin must be finite"):
        batch_timelines([[1.0, 2.0]], origin=origin)


@pytest.mark.parametrize("timeline", [[[1.0, 2.0], [3.0, 4.0]], np.zeros((2, 2)), torch.zeros(2, 2), 5.0,
                                      torch.tensor(3.0)])
def test_a_timeline_that_is_not_1d_is_refused(timeline):
    with pytest.raises(ValueError, match=r"timelines\[0\] must be one timeline \(1-D\)"):
        batch_timelines([timeline])


def test_meta_tensor_timelines_are_refused():
    with pytest.raises(ValueError, match="meta tensor"):
        batch_timelines([torch.zeros(3, device="meta")])


@pytest.mark.parametrize("origin", ["first", "epoch", "2020-06-01", pd.Timestamp("2019-01-01", tz="UTC")])
def test_clock_plus_times_is_clock_time(origin):
    stamps = [np.array(["2020-01-01T12:00", "2020-01-02T00:30"], dtype="datetime64[m]"),
              np.array([], dtype="datetime64[m]"), np.array(["2021-07-01T06:00"], dtype="datetime64[s]")]
    times, mask, clock = batch_timelines(stamps, origin=origin, return_clock=True, naive_as="UTC")
    assert clock.dtype == torch.float64 and clock.shape == (3,)
    for row, s in enumerate(stamps):
        expected = s.astype("datetime64[s]").astype(np.int64) / 3600
        assert (times[row][mask[row]] + clock[row]).tolist() == pytest.approx(expected.tolist(), abs=1e-9)
    if origin == "first":
        assert clock[1].item() == 0.0                                        # a row without events
    floats = batch_timelines([[5.0, 7.0], [1.0]], return_clock=True)
    assert floats[2].tolist() == [5.0, 1.0]
    assert batch_timelines([[5.0]], origin=2.0, return_clock=True)[2].tolist() == [2.0]


# --- ISO origins that name their UTC offset (issue 28) ---------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(st.integers(-14 * 60, 14 * 60), st.lists(st.integers(0, 10**7), min_size=1, max_size=5),
       st.sampled_from(["+HH:MM", "+HHMM", "Z"]))
def test_an_iso_origin_with_an_offset_matches_a_pandas_timestamp_with_that_offset(minutes, seconds, style):
    """Verified with pandas 3.1.1: its Timestamp reads '...+01:00' as the instant 23:00 UTC of the day before."""
    minutes = 0 if style == "Z" else minutes
    sign, hh, mm = "+" if minutes >= 0 else "-", abs(minutes) // 60, abs(minutes) % 60
    zone = "Z" if style == "Z" else f"{sign}{hh:02d}:{mm:02d}" if style == "+HH:MM" else f"{sign}{hh:02d}{mm:02d}"
    text = f"2024-03-31T00:00{zone}"
    stamps = pd.Series(pd.Timestamp("2024-03-30T12:00", tz="UTC") + pd.to_timedelta(sorted(seconds), unit="s"))
    ours = batch_timelines([stamps], origin=text)[0]
    peer = batch_timelines([stamps], origin=pd.Timestamp(text))[0]
    expected = [(t - pd.Timestamp(text)).total_seconds() / 3600 for t in stamps]   # float64 from the peer
    assert ours.tolist() == peer.tolist()
    np.testing.assert_allclose(ours[0].numpy(), expected, rtol=0, atol=1e-9)
    naive = stamps.dt.tz_convert(None).to_numpy()
    with pytest.raises(ValueError, match="mix naive .* naive_as='UTC'"):   # naive times, an aware origin
        batch_timelines([naive], origin=text)
    assert batch_timelines([naive], origin=text, naive_as="UTC")[0].tolist() == ours.tolist()


def test_offset_origins_everywhere_an_origin_is_a_string():
    df = pd.DataFrame({"subject_id": [1, 1, 2], "code": ["A", "B", "A"],
                       "time": pd.to_datetime(["2024-03-31T01:00", "2024-03-31T05:00", "2024-04-01T00:00"]
                                              ).tz_localize("UTC")})
    text = "2024-03-31T00:00+01:00"
    ours = EventBatch.from_frame(df, value=None, origin=text)
    peer = EventBatch.from_frame(df, value=None, origin=pd.Timestamp(text))
    assert ours.times.tolist() == peer.times.tolist() and ours.times[0, :2].tolist() == [2.0, 6.0]
    assert ours.clock.tolist() == peer.clock.tolist() == [pd.Timestamp(text).timestamp() / 3600] * 2
    naive = df.assign(time=df["time"].dt.tz_convert(None))
    with pytest.raises(ValueError, match="mix naive"):
        EventBatch.from_frame(naive, value=None, origin=text)
    assert EventBatch.from_frame(naive, value=None, origin=text, naive_as="UTC").times.tolist() == ours.times.tolist()
    assert to_offsets(np.array(["2024-03-31T00:00"], dtype="datetime64[s]"), origin="2024-03-31T00:00Z",
                      naive_as="UTC").tolist() == [0.0]
    # a batch built by hand gets its clock from the same reader
    hand = EventBatch(ours.times, ours.codes, ours.values, ours.mask, ours.vocab, ours.subjects, origin=text)
    assert hand.clock.tolist() == ours.clock.tolist()


@pytest.mark.parametrize("phase_origin", ["2024-01-01T00:00+01:00", "2024-01-01T00:00Z", "2024-01-01 00:00-0530"])
def test_a_phase_origin_naming_an_offset_is_refused_like_an_aware_datetime(phase_origin):
    with pytest.raises(ValueError, match="phase_origin is a local wall-clock time"):
        TimelineEncoder(8, phase_origin=phase_origin)
    with pytest.raises(ValueError, match="phase_origin is a local wall-clock time"):
        periodic_encoding(torch.zeros(1, 2), ("24h",), clock=0, phase_origin=phase_origin)


@pytest.mark.parametrize("origin, match", [("2024-03-31T00:00+25:00", "offset out of range"),
                                           ("2024-03-31T00:00+01:75", "offset out of range"),
                                           ("2024-13-31T00:00+01:00", "origin must be one of"),
                                           ("2024-03-31T00:00 CET", "time zone could not be read")])
def test_bad_offset_origins_are_refused_by_name(origin, match):
    aware = pd.Series(pd.to_datetime(["2024-03-31T01:00"]).tz_localize("UTC"))
    with pytest.raises(ValueError, match=match):
        batch_timelines([aware], origin=origin)
