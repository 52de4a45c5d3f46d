"""A MEDS cohort with a subject that has static codes only: precompute_meds and its loaders keep the other rows'
clocks (the static-only row's clock is missing, NaN, not 1970), and static_only="drop" counts only what it wrote."""

import pandas as pd
import torch

from omnipos.scale import ShardedMedsDataset, load_meds, precompute_meds
from omnipos.timeseries import EventBatch


def _cohort(root):
    (root / "data").mkdir(parents=True)
    pd.DataFrame({"subject_id": [1, 1, 2, 3], "code": ["A", "B", "S", "A"], "numeric_value": [1.0, None, None, 2.0],
                  "time": pd.to_datetime(["2024-01-01 08:00", "2024-01-01 20:00", None, "2024-02-01 00:00"])}
                 ).to_parquet(root / "data" / "0.parquet")
    return root


def test_a_static_only_subject_keeps_the_other_clocks(tmp_path):
    root = _cohort(tmp_path / "meds")
    result = precompute_meds(root, tmp_path / "out", progress=False, num_cpus=1)
    reference = EventBatch.from_parquet(root)  # the single-process reader of the same root
    assert result.items == 3
    loaded = load_meds(tmp_path / "out")
    assert loaded.subjects == reference.subjects == [1, 2, 3]
    torch.testing.assert_close(loaded.clock, reference.clock, equal_nan=True)
    assert loaded.clock[1].isnan() and not loaded.clock[[0, 2]].isnan().any()
    dataset = ShardedMedsDataset(tmp_path / "out")
    torch.testing.assert_close(dataset.collate([dataset[i] for i in range(len(dataset))]).clock, reference.clock,
                               equal_nan=True)


def test_dropped_static_only_subjects_are_not_counted(tmp_path):
    root = _cohort(tmp_path / "meds")
    result = precompute_meds(root, tmp_path / "out", progress=False, num_cpus=1, static_only="drop")
    assert result.items == 2
    assert load_meds(tmp_path / "out").subjects == [1, 3]
