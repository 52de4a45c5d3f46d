"""EventBatch.from_frame / from_parquet against a per-subject pandas reference."""

import numpy as np
import pytest
import torch
from support.timeseries import meds_frame, reference

from omnipos.timeseries import EventBatch


def test_meds_root_reads_every_shard_with_static_events_kept(meds_root):
    df = meds_frame(meds_root)
    assert df["time"].dtype == "datetime64[us]" and df["time"].isna().any()
    batch = EventBatch.from_parquet(meds_root)
    timed = df[df["time"].notna()]
    expected = EventBatch.from_frame(timed)
    assert batch.subjects == sorted(df["subject_id"].unique()) == expected.subjects
    assert torch.equal(batch.times, expected.times) and torch.equal(batch.mask, expected.mask)
    assert [[batch.vocab[i] for i in row] for row in batch.codes.tolist()] == \
        [[expected.vocab[i] for i in row] for row in expected.codes.tolist()]
    ref = reference(timed)
    for row, sid in enumerate(batch.subjects):
        np.testing.assert_array_equal(batch.times[row, : len(ref[sid][0])].numpy(), ref[sid][0])
        static = df[(df["subject_id"] == sid) & df["time"].isna()]
        n = int(batch.static_mask[row].sum())
        assert [batch.vocab[c] for c in batch.static_codes[row, :n]] == static["code"].tolist()
        np.testing.assert_array_equal(batch.static_values[row, :n].numpy(), static["numeric_value"].to_numpy())
    assert "static=" in repr(batch)


def test_meds_split_glob_and_list_of_shards(meds_root):
    import pyarrow.parquet as pq

    splits = pq.read_table(meds_root / "metadata" / "subject_splits.parquet").to_pandas()
    train = EventBatch.from_parquet(meds_root, split="train")
    assert train.subjects == sorted(splits.loc[splits["split"] == "train", "subject_id"])
    both = EventBatch.from_parquet(meds_root, split=["tuning", "held_out"])
    assert both.subjects == sorted(splits.loc[splits["split"] != "train", "subject_id"])
    glob = EventBatch.from_parquet(str(meds_root / "data" / "train" / "*.parquet"))
    listed = EventBatch.from_parquet(sorted((meds_root / "data" / "train").glob("*.parquet")))
    for other in (glob, listed):
        assert other.subjects == train.subjects and torch.equal(other.times, train.times)
    with pytest.raises(ValueError, match=r"split 'test' is not in .*'held_out', 'train', 'tuning'"):
        EventBatch.from_parquet(meds_root, split="test")
    with pytest.raises(ValueError, match="split= needs a MEDS root"):
        EventBatch.from_parquet(meds_root / "data", split="train")
    with pytest.raises(FileNotFoundError, match="no Parquet file matches"):
        EventBatch.from_parquet(str(meds_root / "data" / "nowhere" / "*.parquet"))


def test_meds_static_policies_and_errors_name_the_shard(meds_root):
    with pytest.raises(ValueError, match=r"column 'time' for subject \d+ in data/\S+\.parquet at row 0.*"
                                         r"static='keep'"):
        EventBatch.from_parquet(meds_root, static="error")
    dropped = EventBatch.from_parquet(meds_root, static="drop")
    kept = EventBatch.from_parquet(meds_root)
    assert dropped.static_codes.shape == (len(kept), 0) and torch.equal(dropped.times, kept.times)
    assert torch.equal(EventBatch.from_parquet(meds_root, static="error", drop_missing=True).times, kept.times)
    with pytest.raises(ValueError, match="static must be one of"):
        EventBatch.from_parquet(meds_root, static="ignore")
    frame = meds_frame(meds_root)
    with pytest.raises(ValueError, match=r"column 'time' for subject \d+ at row 0 .*static='keep'"):
        EventBatch.from_frame(frame)                                    # a DataFrame: static='error' by default
    assert torch.equal(EventBatch.from_frame(frame, static="keep").static_codes, kept.static_codes)


def test_the_drop_missing_help_says_what_drop_missing_drops(capsys):
    """`omnipos precompute meds --help` (issue 28): events without a numeric_value are kept, as the library does."""
    import pandas as pd

    from omnipos.app.cli import main

    with pytest.raises(SystemExit):
        main(["precompute", "meds", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    said = text[text.index("--drop-missing"):]
    assert "missing code or value" not in said and "without a numeric_value are kept" in said
    df = pd.DataFrame({"subject_id": [1, 1, 1], "code": ["A", None, "B"], "numeric_value": [np.nan, 1.0, 2.0],
                       "time": pd.to_datetime(["2024-01-01", "2024-01-02", "2024-01-03"])})
    batch = EventBatch.from_frame(df, drop_missing=True, static="keep")
    assert [batch.vocab[c] for c in batch.codes[0].tolist()] == ["A", "B"]       # the missing code dropped
    assert bool(batch.values[0, 0].isnan()) and batch.values[0, 1].item() == 2.0  # the missing value kept
