"""ShardedMedsDataset, MEDS splits and max_len (issue 23): checked against the timeseries domain's own
EventBatch.from_parquet on the same MEDS root (split= from metadata/subject_splits.parquet, max_len/truncation)."""

import pickle

import numpy as np
import pandas as pd
import pytest
import torch

from omnipos.scale import ShardedMedsDataset, load_meds, precompute_meds, vocab_from_codes
from omnipos.timeseries import EventBatch


def same(got: EventBatch, expected: EventBatch, *, by_name: bool = False) -> None:
    """Equal batches; ``by_name`` compares codes as strings (the vocabularies may differ)."""
    assert got.subjects == expected.subjects and (got.unit, got.origin) == (expected.unit, expected.origin)
    assert torch.equal(got.mask, expected.mask) and torch.equal(got.window, expected.window)
    assert torch.equal(got.times, expected.times)
    assert torch.equal(torch.nan_to_num(got.values, nan=-7.0), torch.nan_to_num(expected.values, nan=-7.0))
    if by_name:
        names = lambda b: [[b.vocab[c] for c in row[m].tolist()] for row, m in zip(b.codes, b.mask)]  # noqa: E731
        assert names(got) == names(expected)
    else:
        assert got.vocab == expected.vocab and torch.equal(got.codes, expected.codes)
    assert (got.clock is None) == (expected.clock is None)
    if expected.clock is not None:
        assert torch.equal(got.clock, expected.clock)


@pytest.fixture(scope="module")
def root(tmp_path_factory, meds_root):
    root = meds_root(tmp_path_factory.mktemp("meds") / "root", seed=5)
    subjects = sorted(EventBatch.from_parquet(root / "data").subjects)
    rng = np.random.default_rng(1)  # splits that do not follow the data folders: read from the file
    pd.DataFrame({"subject_id": subjects, "split": rng.choice(["train", "tuning", "held_out"], len(subjects))}
                 ).to_parquet(root / "metadata" / "subject_splits.parquet")
    return root


@pytest.fixture(scope="module")
def job(root, tmp_path_factory):
    out = tmp_path_factory.mktemp("job") / "out"
    precompute_meds(root, out, shard_size=3, progress=False)
    return out


def test_items_are_the_subjects_from_parquet_reads(root, job):
    expected = EventBatch.from_parquet(root / "data")
    dataset = ShardedMedsDataset(job)
    assert len(dataset) == len(expected.subjects) and len(dataset.shards) > 2
    row_of = {s: i for i, s in enumerate(expected.subjects)}
    for i in range(len(dataset)):
        item = dataset[i]
        row = row_of[item["subject_id"]]
        m = expected.mask[row]
        assert torch.equal(item["times"], expected.times[row][m])
        assert [dataset.vocab[c] for c in item["codes"].tolist()] == [expected.vocab[c]
                                                                       for c in expected.codes[row][m].tolist()]
        assert torch.equal(torch.nan_to_num(item["values"], nan=-7.0), torch.nan_to_num(expected.values[row][m],
                                                                                         nan=-7.0))
        assert item["clock"] == float(expected.clock[row]) and item["split"] in ("train", "tuning", "held_out")


def test_collate_pads_one_batch_and_dataloader_workers(job):
    dataset = pickle.loads(pickle.dumps(ShardedMedsDataset(job, cache_shards=1)))
    whole = load_meds(job)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=dataset.collate)
    seen = []
    for batch in loader:
        assert isinstance(batch, EventBatch) and batch.times.shape[1] == int(batch.mask.sum(1).max())
        for row, subject in enumerate(batch.subjects):
            target = whole.subjects.index(subject)
            width = int(batch.mask[row].sum())
            assert torch.equal(batch.codes[row, :width], whole.codes[target, :width])
            assert torch.equal(batch.times[row], whole.times[target, :batch.times.shape[1]])
        seen += batch.subjects
    assert sorted(seen) == whole.subjects


@pytest.mark.parametrize("split", ["train", "held_out"])
def test_split_selects_the_subjects_of_subject_splits(root, job, tmp_path, split):
    expected = EventBatch.from_parquet(root, split=split)
    assert 0 < len(expected.subjects) < len(EventBatch.from_parquet(root).subjects)
    same(load_meds(job, split=split), expected, by_name=True)  # the job's vocabulary holds every split's codes
    assert sorted(item["subject_id"] for item in ShardedMedsDataset(job, split=split)) == expected.subjects
    precompute_meds(root, tmp_path / "only", split=split, progress=False)  # precompute one split only
    same(load_meds(tmp_path / "only"), expected)
    with pytest.raises(ValueError, match="holds only the"):
        ShardedMedsDataset(tmp_path / "only", split="tuning" if split == "train" else "train")


@pytest.mark.parametrize("truncation", ["head", "tail", "split"])
def test_max_len_cuts_like_from_parquet(root, job, truncation):
    expected = EventBatch.from_parquet(root, max_len=4, truncation=truncation)
    same(load_meds(job, max_len=4, truncation=truncation), expected)
    assert len(ShardedMedsDataset(job, max_len=4, truncation=truncation)) == len(expected.subjects)


def test_max_len_error_names_the_subject(job):
    with pytest.raises(ValueError, match=r"subject \d+ has \d+ entries, more than max_len=2"):
        load_meds(job, max_len=2)


def test_vocab_from_the_codes_file_as_it_is(root, tmp_path):
    vocab = vocab_from_codes(root / "metadata" / "codes.parquet")
    assert vocab[0] == "<pad>" and vocab[1:] == sorted(pd.read_parquet(root / "metadata" / "codes.parquet")["code"])
    precompute_meds(root, tmp_path / "v", vocab=root / "metadata" / "codes.parquet", progress=False)
    same(load_meds(tmp_path / "v"), EventBatch.from_parquet(root / "data"))
    assert vocab_from_codes(root / "metadata" / "codes.parquet", "unk")[:2] == ["<pad>", "<unk>"]


def test_bad_split_and_vocab_refused_before_any_work(root, tmp_path, meds_root):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"split='dev' is not in .*subject_splits.parquet, whose splits are"):
        precompute_meds(root, out, split="dev", progress=False)
    with pytest.raises(TypeError, match="split must be a split name"):
        precompute_meds(root, out, split=1, progress=False)
    with pytest.raises(FileNotFoundError, match="no such codes file"):
        precompute_meds(root, out, vocab=tmp_path / "codes.parquet", progress=False)
    pd.DataFrame({"name": ["A"]}).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="cannot read the 'code' column"):
        precompute_meds(root, out, vocab=tmp_path / "bad.parquet", progress=False)
    bare = meds_root(tmp_path / "bare", seed=2)  # no subject_splits.parquet
    with pytest.raises(ValueError, match="has no .*subject_splits.parquet"):
        precompute_meds(bare, out, split="train", progress=False)
    assert not out.exists()
    precompute_meds(bare, out, progress=False)
    with pytest.raises(ValueError, match="stores no splits"):
        ShardedMedsDataset(out, split="train")
    with pytest.raises(TypeError, match="split must be"):
        ShardedMedsDataset(out, split=["train"])
    with pytest.raises(IndexError, match="out of range"):
        ShardedMedsDataset(out)[10**6]
