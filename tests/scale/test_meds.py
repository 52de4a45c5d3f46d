"""precompute_meds / load_meds on the local engine (the Ray engine: test_ray.py)."""

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

import omnipos.scale.meds as meds_module
from omnipos.scale import PrecomputeError, load_meds, meds_data_files, precompute_meds
from omnipos.timeseries import EventBatch, TimelineEncoder


def assert_same_batch(got: EventBatch, expected: EventBatch) -> None:
    assert got.subjects == expected.subjects and got.vocab == expected.vocab
    assert (got.unit, got.origin) == (expected.unit, expected.origin)
    for key in ("times", "codes", "values", "mask"):
        a, b = getattr(got, key), getattr(expected, key)
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert torch.equal(torch.nan_to_num(a, nan=-7.0) if a.is_floating_point() else a,
                           torch.nan_to_num(b, nan=-7.0) if b.is_floating_point() else b), key
    assert torch.equal(got.values.isnan(), expected.values.isnan())
    assert (got.clock is None) == (expected.clock is None)
    if expected.clock is not None:
        assert got.clock.dtype == expected.clock.dtype and torch.equal(got.clock, expected.clock)
    for key in ("static_codes", "static_mask", "window"):
        assert torch.equal(getattr(got, key), getattr(expected, key)), key
    assert torch.equal(torch.nan_to_num(got.static_values, nan=-7.0),
                       torch.nan_to_num(expected.static_values, nan=-7.0))


@pytest.fixture
def root(tmp_path, meds_root):
    return meds_root(tmp_path / "meds", seed=3)


@pytest.mark.parametrize("shard_size", [1, 3, 10_000])
def test_output_equals_eventbatch_from_parquet(tmp_path, root, shard_size):
    result = precompute_meds(root, tmp_path / "out", shard_size=shard_size, progress=False)
    expected = EventBatch.from_parquet(root / "data")
    assert result.items == len(expected.subjects) and result.units == 4
    got = load_meds(tmp_path / "out")
    assert_same_batch(got, expected)
    # ready for the encoder, periodic part included: each row's clock is stored
    encoder = TimelineEncoder(8)
    encoded = encoder(got)
    torch.testing.assert_close(encoded, encoder(expected), rtol=0, atol=0)
    assert encoded.shape == (*got.times.shape, 8) and (encoded[~got.mask] == 0).all()


def test_options_pass_through(tmp_path, meds_root):
    root = meds_root(tmp_path / "static", seed=4, static=True)
    with pytest.raises(PrecomputeError) as info:  # MEDS static events (no time) refused when asked to
        precompute_meds(root, tmp_path / "refused", static="error", progress=False)
    assert "4 of 4 units failed" in str(info.value)
    assert "missing value (NaN/NaT/None) in column 'time'" in str(info.value)
    assert str(meds_data_files(root)[0]) in str(info.value)
    precompute_meds(root, tmp_path / "out", unit="d", origin="epoch", drop_missing=True, progress=False)
    expected = EventBatch.from_parquet(root / "data", unit="d", origin="epoch", drop_missing=True)
    assert_same_batch(load_meds(tmp_path / "out"), expected)


def test_a_given_vocabulary_is_kept(tmp_path, root):
    vocab = ["<pad>"] + [f"LAB//{i}" for i in reversed(range(30))]  # not sorted: kept as given
    precompute_meds(root, tmp_path / "out", vocab=vocab, shard_size=2, progress=False)
    got = load_meds(tmp_path / "out")
    assert got.vocab == vocab
    assert_same_batch(got, EventBatch.from_parquet(root / "data", vocab=vocab))


def test_padding_groups_bound_memory_and_change_nothing(tmp_path, root, monkeypatch):
    monkeypatch.setattr(meds_module, "MAX_PADDED_EVENTS", 30)  # forces several padded groups per shard
    counts = np.array([3, 25, 1, 1, 40, 2, 2, 2])
    groups = meds_module._padded_groups(counts, 30)
    assert [g for g in groups] == [(0, 1), (1, 2), (2, 4), (4, 5), (5, 8)]
    assert all(counts[a:b].max() * (b - a) <= 30 or b - a == 1 for a, b in groups)
    precompute_meds(root, tmp_path / "out", shard_size=4, progress=False)
    assert_same_batch(load_meds(tmp_path / "out"), EventBatch.from_parquet(root / "data"))


def test_shard_layout(tmp_path, root):
    precompute_meds(root, tmp_path / "out", shard_size=2, progress=False)
    table = pq.read_table(tmp_path / "out" / "meds-00000-00000.parquet")
    assert table.column_names == ["subject_id", "window", "length", "clock", "times", "codes", "values",
                                  "static_codes", "static_values"]
    assert table.num_rows == 2
    vocab = json.loads(table.schema.metadata[b"omnipos.vocab"])
    frame = pd.read_parquet(meds_data_files(root)[0])
    first = frame[frame.subject_id == table.column("subject_id")[0].as_py()].sort_values("time", kind="stable")
    codes = [vocab[i] for i in table.column("codes")[0].as_py()]
    assert codes == first.code.tolist() and table.column("length")[0].as_py() == len(first)
    hours = (first.time - first.time.iloc[0]).dt.total_seconds().to_numpy() / 3600
    assert table.column("times")[0].as_py() == hours.tolist()


def test_bad_rows_and_files_fail_alone(tmp_path, root):
    files = meds_data_files(root)
    frame = pd.read_parquet(files[1])
    frame.loc[2, "code"] = None
    frame.to_parquet(files[1], index=False)
    files[2].write_bytes(files[2].read_bytes()[:100])  # truncated Parquet
    with pytest.raises(PrecomputeError) as info:
        precompute_meds(root, tmp_path / "out", progress=False)
    message = str(info.value)
    assert f"{files[1]}: missing value (NaN/NaT/None) in column 'code'" in message and "at row 2" in message
    assert f"{files[2]}: cannot read the MEDS columns" in message
    assert [s for s, _ in info.value.result.failures] == [str(files[1]), str(files[2])]
    good = [pd.read_parquet(f) for f in (files[0], files[3])]
    assert info.value.result.items == sum(g.subject_id.nunique() for g in good)


def test_a_subject_in_two_files_is_refused_at_load(tmp_path, root):
    files = meds_data_files(root)
    frame = pd.read_parquet(files[0])
    moved = pd.read_parquet(files[3]).iloc[:1].assign(subject_id=frame.subject_id.iloc[0])
    pd.concat([pd.read_parquet(files[3]), moved]).to_parquet(files[3], index=False)
    refused = rf"subject {frame.subject_id.iloc[0]} is in two MEDS data files, .*\(shard meds-00000-"
    with pytest.raises(ValueError, match=refused):  # once every file is done (issue 36)
        precompute_meds(root, tmp_path / "out", progress=False)
    with pytest.raises(ValueError, match=refused):
        load_meds(tmp_path / "out")


def test_bad_arguments(tmp_path, root):
    with pytest.raises(ValueError, match="is not a MEDS root"):
        precompute_meds(root / "data", tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="no such folder"):
        precompute_meds(tmp_path / "nowhere", tmp_path / "out")
    (tmp_path / "empty" / "data").mkdir(parents=True)
    with pytest.raises(ValueError, match="no Parquet files"):
        precompute_meds(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(TypeError, match="unknown option 'subject'"):
        precompute_meds(root, tmp_path / "out", subject="patient_id")
    with pytest.raises(ValueError, match="unit must be one of"):
        precompute_meds(root, tmp_path / "out", unit="fortnight")
    with pytest.raises(ValueError, match="shard_size must be >= 1"):
        precompute_meds(root, tmp_path / "out", shard_size=0)
    precompute_meds(root, tmp_path / "out", progress=False)
    with pytest.raises(ValueError, match="holds precomputed meds, not graphs"):
        from omnipos.scale import load_graphs

        load_graphs(tmp_path / "out")


def test_static_codes_windows_and_unknown_codes_survive_the_shards(tmp_path, meds_root):
    """MEDS static events kept, long timelines split into windows, codes outside a vocabulary mapped to <unk>:
    load_meds gives what EventBatch.from_parquet gives in one process."""
    root = meds_root(tmp_path / "static", seed=5, static=True)
    vocab = ["<pad>", "<unk>", "LAB//0", "LAB//1", "LAB//2"]  # most codes of the cohort are outside it
    options = dict(static="keep", max_len=4, truncation="split", unknown_code="unk", vocab=vocab)
    precompute_meds(root, tmp_path / "out", shard_size=2, progress=False, **options)
    got = load_meds(tmp_path / "out")
    expected = EventBatch.from_parquet(root / "data", **options)
    assert (got.window > 0).any() and got.static_mask.any() and (got.codes == 1).any()  # the cases are exercised
    assert_same_batch(got, expected)
