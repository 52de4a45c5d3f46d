import re

from omnipos.app.cli import main


def test_timeseries_demo_section(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--section", "timeseries"]) == 0
    text = capsys.readouterr().out
    assert "100 patients" in text
    error = float(re.search(r"cos\(2 pi \(a - b\) / 24\)\| over 200 x 200 events = (\S+)", text).group(1))
    assert error < 1e-9
    difference = float(re.search(r"as minutes since each first event .*: max difference (\S+)", text).group(1))
    assert difference < 1e-6
    for name in ("timeline_encoding.png", "timeline_daily_circle.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert str(tmp_path / name) in text


def test_synthetic_cohort_is_fixed_by_its_seed():
    from omnipos.app.synthetic import synthetic_cohort

    a, labels_a = synthetic_cohort(20, seed=3)
    b, labels_b = synthetic_cohort(20, seed=3)
    c, _ = synthetic_cohort(20, seed=4)
    assert a.equals(b) and labels_a.equals(labels_b) and not a.equals(c)
    assert set(a.columns) == {"subject_id", "time", "code", "numeric_value"}
    # day workers are seen on weekdays only; duplicate times exist on purpose
    day_workers = labels_a.index[~labels_a.to_numpy()]
    weekdays = a[a["subject_id"].isin(day_workers)]["time"].dt.day_of_week
    assert weekdays.max() <= 4
    assert a.duplicated(["subject_id", "time"]).any()
