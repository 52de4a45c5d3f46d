import datetime as dt

import numpy as np
import pandas as pd
import pytest

from omnipos.timeseries import UNITS, batch_timelines, parse_duration


@pytest.mark.parametrize("text, unit, expected", [
    ("24h", "h", 24.0), ("7d", "h", 168.0), ("30min", "h", 0.5), ("1w", "d", 7.0), ("90s", "min", 1.5),
    ("1d", "min", 1440.0), ("1.5h", "min", 90.0), (" 2 d ", "h", 48.0), ("1e2s", "s", 100.0),
])
def test_parse_duration_strings(text, unit, expected):
    assert parse_duration(text, unit) == expected


def test_parse_duration_other_types():
    assert parse_duration(3.5) == 3.5                             # plain floats are already in the unit
    assert parse_duration(3.5, "d") == 3.5
    assert parse_duration(dt.timedelta(minutes=90)) == 1.5
    assert parse_duration(np.timedelta64(2, "D"), "h") == 48.0
    assert parse_duration(pd.Timedelta("36h"), "d") == 1.5


@pytest.mark.parametrize("bad", ["24 hours", "7days", "1y", "h", "", "1.2.3h"])
def test_unknown_units_list_known_ones(bad):
    with pytest.raises(ValueError) as err:
        parse_duration(bad)
    for unit in UNITS:
        assert unit in str(err.value)


def test_unknown_unit_argument():
    with pytest.raises(ValueError, match="known units: s, min, h, d, w"):
        batch_timelines([[0.0, 1.0]], unit="hours")


def test_parse_duration_type_errors():
    with pytest.raises(TypeError):
        parse_duration([1, 2])
    with pytest.raises(ValueError, match="finite"):
        parse_duration(float("nan"))
