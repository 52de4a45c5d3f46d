"""Fixtures of the time-series tests: a MEDS cohort on disk."""

import pytest


@pytest.fixture(scope="module")
def meds_root(tmp_path_factory):
    """A MEDS cohort written by meds-testing-helpers: data/{train,tuning,held_out}/*.parquet (subject_id int64,
    time timestamp[us], code string, numeric_value float32; static rows with a null time),
    metadata/dataset.json, codes.parquet, subject_splits.parquet."""
    from meds_testing_helpers.dataset import MEDSDataset
    from meds_testing_helpers.static_sample_data import SIMPLE_STATIC_SHARDED_BY_SPLIT

    root = tmp_path_factory.mktemp("meds")
    MEDSDataset.from_yaml(SIMPLE_STATIC_SHARDED_BY_SPLIT).write(root)
    assert (root / "metadata" / "dataset.json").is_file() and (root / "data" / "train" / "0.parquet").is_file()
    return root
