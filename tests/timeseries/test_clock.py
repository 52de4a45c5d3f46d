"""Clock time for periodic features: zone tables against Python's zoneinfo, local time of day, phase origins."""

import datetime as dt
import math
import zoneinfo

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.timeseries import TimelineEncoder, batch_timelines, periodic_encoding
from omnipos.timeseries.clock import (
    local_offset,
    timezone_name,
    timezone_table,
    timezone_tensors,
)

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@settings(max_examples=40)
@given(st.sampled_from(["America/New_York", "Europe/Paris", "Australia/Lord_Howe", "Asia/Kolkata",
                        "America/Sao_Paulo"]),
       st.integers(int((dt.datetime(1901, 1, 1, tzinfo=dt.timezone.utc) - EPOCH).total_seconds()),
                   int((dt.datetime(2099, 12, 1, tzinfo=dt.timezone.utc) - EPOCH).total_seconds())))
def test_zone_table_gives_zoneinfos_offset(zone, second):
    transitions, offsets = timezone_tensors(zone, "s")
    got = local_offset(torch.tensor([float(second)], dtype=torch.float64), transitions, offsets).item()
    expected = (EPOCH + dt.timedelta(seconds=second)).astimezone(zoneinfo.ZoneInfo(zone)).utcoffset()
    assert got == expected.total_seconds()


def test_zone_table_transitions_are_exact_to_the_second():
    transitions, offsets = timezone_table("Europe/Paris")
    change = int((dt.datetime(2024, 3, 31, 1, tzinfo=dt.timezone.utc) - EPOCH).total_seconds())  # 02:00 CET
    i = transitions.index(change)
    assert (offsets[i], offsets[i + 1]) == (3600, 7200)


def test_local_time_of_day_follows_daylight_saving_time():
    """08:00 in New York is 13:00 UTC in winter and 12:00 UTC in summer: one local time, one encoding."""
    stamps = np.array(["2024-01-15T13:00", "2024-07-15T12:00"], dtype="datetime64[s]")
    times, _mask, clock = batch_timelines([stamps], return_clock=True)
    local = periodic_encoding(times, ("24h",), clock=clock, timezone="America/New_York", dtype=torch.float64)
    utc = periodic_encoding(times, ("24h",), clock=clock, dtype=torch.float64)
    torch.testing.assert_close(local[0, 0], local[0, 1], rtol=0, atol=1e-12)
    eight = torch.tensor([math.sin(2 * math.pi * 8 / 24), math.cos(2 * math.pi * 8 / 24)], dtype=torch.float64)
    torch.testing.assert_close(local[0, 0], eight, rtol=0, atol=1e-12)
    assert not torch.allclose(utc[0, 0], utc[0, 1])
    shifted = periodic_encoding(times, ("24h",), clock=clock, timezone="+05:30", dtype=torch.float64)
    half_past_six = 2 * math.pi * 18.5 / 24
    assert shifted[0, 0].tolist() == pytest.approx([math.sin(half_past_six), math.cos(half_past_six)], abs=1e-12)
    assert timezone_name(dt.timezone(dt.timedelta(hours=5, minutes=30))) == "+05:30"
    assert timezone_name(zoneinfo.ZoneInfo("Europe/Paris")) == "Europe/Paris" and timezone_name(None) == "UTC"


def test_phase_origin_starts_the_week_on_monday():
    monday = np.array(["2024-01-01T00:00", "2024-01-03T12:00"], dtype="datetime64[m]")   # a Monday, a Wednesday
    times, _mask, clock = batch_timelines([monday], return_clock=True)
    week = periodic_encoding(times, ("7d",), clock=clock, phase_origin="2024-01-01", dtype=torch.float64)
    assert week[0, 0].tolist() == pytest.approx([0.0, 1.0], abs=1e-12)
    assert week[0, 1].tolist() == pytest.approx([math.sin(math.pi * 5 / 7), math.cos(math.pi * 5 / 7)], abs=1e-12)
    thursday = periodic_encoding(times, ("7d",), clock=clock, dtype=torch.float64)    # the epoch was a Thursday
    assert thursday[0, 0].tolist() == pytest.approx([math.sin(2 * math.pi * 4 / 7), math.cos(2 * math.pi * 4 / 7)],
                                                    abs=1e-12)


def test_encoder_time_of_day_with_a_zone_matches_the_functional_form():
    stamps = [np.array(["2023-03-25T23:30", "2023-03-26T03:30", "2023-10-29T01:30"], dtype="datetime64[m]"),
              np.array(["2023-06-01T10:00"], dtype="datetime64[m]")]
    times, mask, clock = batch_timelines(stamps, return_clock=True)
    encoder = TimelineEncoder(4, components=("periodic",), combine="concat", timezone="Europe/Paris",
                              phase_origin="2023-01-02")
    expected = periodic_encoding(times, mask=mask, clock=clock, timezone="Europe/Paris", phase_origin="2023-01-02")
    torch.testing.assert_close(encoder(times, mask, clock), expected, rtol=0, atol=0)
    assert "timezone='Europe/Paris'" in repr(encoder)


@pytest.mark.parametrize("bad, error", [("Mars/Olympus", ValueError), ("+25:00", ValueError), (3, TypeError)])
def test_bad_time_zones(bad, error):
    with pytest.raises(error, match="timezone"):
        TimelineEncoder(8, timezone=bad)


@pytest.mark.parametrize("clock, error", [(float("nan"), ValueError), (torch.tensor([1e301]), ValueError),
                                          (torch.ones(3), ValueError), (torch.ones(1, dtype=torch.float16), TypeError),
                                          ("2024-01-01", TypeError), (torch.tensor([True]), TypeError)])
def test_bad_clocks(clock, error):
    with pytest.raises(error, match="clock"):
        periodic_encoding(torch.zeros(2, 3), clock=clock)


def test_plain_times_without_clock_are_refused():
    with pytest.raises(ValueError, match="needs clock times"):
        periodic_encoding(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="needs clock times"):
        TimelineEncoder(8)(torch.zeros(1, 3))
    assert TimelineEncoder(8, components=("absolute", "gap"))(torch.zeros(1, 3)).shape == (1, 3, 8)


def test_phase_origin_must_be_naive():
    with pytest.raises(ValueError, match="phase_origin"):
        TimelineEncoder(8, phase_origin="monday")
    with pytest.raises(ValueError, match="without a time zone"):
        TimelineEncoder(8, phase_origin=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
