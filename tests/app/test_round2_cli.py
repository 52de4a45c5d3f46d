"""Issue 36 (datasets, round 2), the command line: ``--naive-as`` (which an error tells the user to pass) and
``omnipos dna featurize`` on one 1 Mb read among short ones."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from omnipos.app.cli import main
from omnipos.scale import load_meds
from omnipos.timeseries import EventBatch


def _meds(root):
    (root / "data" / "train").mkdir(parents=True)
    frame = pd.DataFrame({"subject_id": [3, 3, 1], "code": ["A", "B", "A"],
                          "time": pd.to_datetime(["2020-01-01 10:00", "2020-01-01 08:00", "2020-01-02 00:00"]),
                          "numeric_value": np.array([1.0, np.nan, 2.0], dtype=np.float32)})
    frame.to_parquet(root / "data" / "train" / "0.parquet")
    return frame


def test_precompute_meds_naive_as_reads_naive_times_against_an_aware_origin(tmp_path, capsys):
    """Naive MEDS times and an aware --origin: refused, telling the user to pass naive_as='UTC', which the command
    line had no way to pass before (argparse: unrecognized arguments: --naive-as)."""
    frame = _meds(tmp_path / "meds")
    origin = "2020-01-01T00:00+00:00"
    args = ["precompute", "meds", str(tmp_path / "meds"), "--origin", origin, "--no-progress", "--num-cpus", "1"]
    assert main([*args, "--out", str(tmp_path / "refused")]) == 2
    assert "Pass naive_as='UTC'" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "out"), "--naive-as", "UTC"]) == 0
    got = load_meds(tmp_path / "out")
    expected = EventBatch.from_frame(frame, origin=origin, naive_as="UTC")
    assert got.subjects == expected.subjects == [1, 3]
    assert torch.equal(got.times, expected.times) and got.times[1, :2].tolist() == [8.0, 10.0]
