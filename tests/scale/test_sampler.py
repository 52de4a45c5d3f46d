"""ShardSampler and the lazy datasets' byte-budget cache (issue 36, "shuffling that keeps shards warm").

The order itself is checked as a pure function of the shard sizes (hypothesis: every item exactly once, reproducible,
each shard read once by a least-recently-used cache of ``window`` shards, split among ranks and DataLoader workers);
then on real jobs, counting shard parses (deterministic, unlike time): a shuffled epoch through the sampler parses
each shard once, where ``DataLoader(shuffle=True)`` parses one for almost every item."""

from collections import OrderedDict

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.scale import (
    ShardedGraphDataset,
    ShardedMedsDataset,
    ShardedReadsDataset,
    ShardSampler,
)
from omnipos.scale.sampler import epoch_order
from omnipos.scale.sharded import DEFAULT_CACHE_BYTES, nbytes_of


# -- the order, as a function of the shard sizes ----------------------------------------------------------------------
def bounds_of(sizes) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)


def shard_of(bounds: np.ndarray, items) -> np.ndarray:
    return np.searchsorted(bounds, np.asarray(items, np.int64), side="right") - 1


def lru_reads(shards, capacity: int) -> int:
    """Shard reads of a least-recently-used cache of ``capacity`` shards serving items of ``shards`` in order."""
    cache, reads = OrderedDict(), 0
    for shard in shards:
        if shard in cache:
            cache.move_to_end(shard)
            continue
        reads += 1
        cache[shard] = None
        if len(cache) > capacity:
            cache.popitem(last=False)
    return reads


def most_open(shards) -> int:
    """The most shards begun and not yet finished at any point of a sequence of shards."""
    shards = np.asarray(shards)
    if not shards.size:
        return 0
    first = {s: i for i, s in reversed(list(enumerate(shards.tolist())))}
    last = {s: i for i, s in enumerate(shards.tolist())}
    return max(sum(first[s] <= i <= last[s] for s in first) for i in range(shards.size))


def runs(shards) -> int:
    """Runs of one shard in a sequence of shards."""
    shards = np.asarray(shards)
    return int(shards.size and 1 + (shards[1:] != shards[:-1]).sum())


sizes_st = st.lists(st.integers(0, 30), min_size=0, max_size=25)


@settings(max_examples=150, deadline=None)
@given(sizes=sizes_st, window=st.integers(1, 6), seed=st.integers(0, 2**63 - 1), epoch=st.integers(0, 50),
       shuffle=st.booleans())
def test_an_epoch_is_every_item_once_and_reads_each_shard_once(sizes, window, seed, epoch, shuffle):
    bounds = bounds_of(sizes)
    order = epoch_order(bounds, shuffle=shuffle, seed=seed, epoch=epoch, window=window)
    assert order.dtype == np.int64 and np.array_equal(np.sort(order), np.arange(sum(sizes)))
    if not shuffle:
        assert np.array_equal(order, np.arange(sum(sizes)))
    shards = shard_of(bounds, order)
    assert lru_reads(shards.tolist(), window) == sum(size > 0 for size in sizes)  # each shard once
    assert most_open(shards) <= window  # items mix within a window of shards, never more
    if window == 1:  # a window of one shard: shards one after another, each read in one go
        assert runs(shards) == sum(size > 0 for size in sizes)
    assert np.array_equal(order, epoch_order(bounds, shuffle=shuffle, seed=seed, epoch=epoch, window=window))


@settings(max_examples=150, deadline=None)
@given(sizes=sizes_st, window=st.integers(1, 5), seed=st.integers(0, 1000), epoch=st.integers(0, 5),
       num_replicas=st.integers(1, 5), even=st.sampled_from([None, "pad", "drop"]), shuffle=st.booleans())
def test_ranks_split_an_epoch(sizes, window, seed, epoch, num_replicas, even, shuffle):
    bounds, count = bounds_of(sizes), sum(sizes)
    parts = [ShardSampler(bounds, shuffle=shuffle, seed=seed, window=window, num_replicas=num_replicas, rank=r,
                          even=even) for r in range(num_replicas)]
    for part in parts:
        part.set_epoch(epoch)
    orders = [np.array(list(part), dtype=np.int64) for part in parts]
    assert [len(order) for order in orders] == [len(part) for part in parts]
    together = np.sort(np.concatenate(orders))
    if even is None:  # each item exactly once across ranks, parts within one item of each other
        assert np.array_equal(together, np.arange(count))
        assert max(map(len, orders)) - min(map(len, orders)) <= 1
    elif even == "drop":  # equal parts, no item twice, fewer than num_replicas left out
        assert len(set(map(len, orders))) == 1 and len(orders[0]) == count // num_replicas
        assert np.unique(together).size == together.size and count - together.size < num_replicas
    else:  # equal parts, every item, fewer than num_replicas repeated (DistributedSampler(drop_last=False))
        assert len(set(map(len, orders))) == 1 and len(orders[0]) == -(-count // num_replicas)
        assert set(together.tolist()) == set(range(count)) and together.size - count < max(num_replicas, 1)
    nonempty = sum(size > 0 for size in sizes)
    reads = [lru_reads(shard_of(bounds, order).tolist(), window) for order in orders]
    if even != "pad" and count:  # each rank reads its own shards: only a shard cut between two ranks twice
        assert sum(reads) <= nonempty + num_replicas - 1


@settings(max_examples=150, deadline=None)
@given(sizes=sizes_st, window=st.integers(1, 5), seed=st.integers(0, 1000), batch_size=st.integers(1, 9),
       num_workers=st.integers(2, 4), shuffle=st.booleans(), num_replicas=st.integers(1, 3))
def test_worker_aware_order_gives_each_worker_its_own_shards(sizes, window, seed, batch_size, num_workers, shuffle,
                                                             num_replicas):
    bounds = bounds_of(sizes)
    for rank in range(num_replicas):
        plain = epoch_order(bounds, shuffle=shuffle, seed=seed, window=window, num_replicas=num_replicas, rank=rank)
        order = epoch_order(bounds, shuffle=shuffle, seed=seed, window=window, num_replicas=num_replicas, rank=rank,
                            batch_size=batch_size, num_workers=num_workers)
        assert np.array_equal(np.sort(order), np.sort(plain))  # the same items as without workers
        # the DataLoader cuts batches of batch_size and hands batch j to worker j % num_workers
        batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        assert all(len(b) == batch_size for b in batches[:-1])
        reads = 0
        for worker in range(num_workers):
            mine = np.concatenate([b for j, b in enumerate(batches) if j % num_workers == worker] or [[]])
            reads += lru_reads(shard_of(bounds, mine.astype(np.int64)).tolist(), window)
        assert reads <= runs(shard_of(bounds, np.sort(plain))) + num_workers - 1


def test_epochs_seeds_and_set_epoch():
    bounds = bounds_of([7, 0, 12, 5, 9, 30, 1])
    sampler = ShardSampler(bounds, seed=4, window=2)
    first, second = list(sampler), list(sampler)  # without set_epoch, each pass is the next epoch
    assert first != second and sorted(first) == sorted(second) == list(range(64))
    assert first == ShardSampler(bounds, seed=4, window=2).order(0).tolist()
    assert second == ShardSampler(bounds, seed=4, window=2).order(1).tolist()
    sampler.set_epoch(7)  # as DistributedSampler: fixed until set again
    assert list(sampler) == list(sampler) == sampler.order(7).tolist()
    assert list(ShardSampler(bounds, seed=5, window=2)) != first
    firsts = {int(shard_of(bounds, [ShardSampler(bounds, seed=s).order(0)[0]])[0]) for s in range(30)}
    assert len(firsts) > 3  # the shards come in a random order, not always shard 0 first
    torch.manual_seed(0)
    drawn = ShardSampler(bounds).seed
    torch.manual_seed(0)
    assert ShardSampler(bounds).seed == drawn  # seed=None draws from torch's generator
    assert list(ShardSampler(bounds, shuffle=False)) == list(range(64))
    assert "64 items in 7 shards" in repr(sampler) and "window=2" in repr(sampler)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"bounds": [1, 4]}, ValueError, "start at 0"),
    ({"bounds": [0, 4, 3]}, ValueError, "never decrease"),
    ({"bounds": [0.0, 2.0]}, TypeError, "bounds must be a 1-D sequence of ints"),
    ({"bounds": [[0, 1]]}, TypeError, "bounds"),
    ({"window": 0}, ValueError, "window must be >= 1"),
    ({"num_replicas": 2, "rank": 2, "seed": 0}, ValueError, "rank must be in"),
    ({"num_replicas": 2, "rank": -1, "seed": 0}, ValueError, "rank must be >= 0"),
    ({"num_replicas": 2}, ValueError, "needs seed="),
    ({"even": "repeat"}, ValueError, "even must be one of"),
    ({"seed": -1}, ValueError, "seed must be >= 0"),
    ({"seed": 1.5}, TypeError, "seed must be an int"),
    ({"shuffle": 1}, TypeError, "shuffle must be a bool"),
    ({"batch_size": 4}, ValueError, "batch_size= and num_workers= go together"),
    ({"num_workers": 2}, ValueError, "batch_size= and num_workers= go together")])
def test_bad_arguments_are_refused_by_name(kwargs, error, match):
    kwargs = {"bounds": [0, 3, 5], **kwargs}
    with pytest.raises(error, match=match):
        ShardSampler(kwargs.pop("bounds"), **kwargs)


def test_nbytes_of_counts_buffers_once():
    array = np.zeros(1000, np.float64)
    tensor = torch.zeros(250, dtype=torch.float32)

    class Parsed:
        def __init__(self):
            self.a, self.view, self.t, self.same = array, array[:10], tensor, tensor[10:]
            self.names = ["x" * 100] * 3
            self.kind = Parsed

    got = nbytes_of(Parsed())
    fixed = 8000 + 80 + 1000  # the array, its view (counted as its bytes), one storage for both tensors
    assert fixed + 100 <= got <= fixed + 3000  # plus the strings and containers' own overhead
    assert nbytes_of(tensor) == 1000 and 1000 < nbytes_of((tensor, tensor.view(2, 125))) < 1000 + 200


# -- on real jobs: shard parses ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reads_job(tmp_path_factory, fastx):
    from omnipos.scale import precompute_reads

    folder = tmp_path_factory.mktemp("reads")
    files = [fastx(folder / f"f{i}.fq", count, seed=20 + i) for i, count in enumerate((31, 0, 45, 20))]
    precompute_reads(files, folder / "out", dim=4, shard_size=4, progress=False)
    dataset = ShardedReadsDataset(folder / "out")
    names = [dataset[i]["name"] for i in range(len(dataset))]
    return folder / "out", names


def shard_bytes(out) -> int:
    """The largest parsed shard of the job, in the cache's measure."""
    probe = ShardedReadsDataset(out, cache_shards=1)
    sizes = []
    for shard in range(len(probe.shards)):
        probe.shard(shard)
        sizes.append(probe.cache_info()["bytes"])
    return max(sizes)


def names_of(loader) -> list:
    return [name for batch in loader for name in batch["names"]]


def test_shuffled_epoch_parses_each_shard_once_where_plain_shuffle_parses_one_per_item(reads_job):
    out, names = reads_job
    budget = 3 * shard_bytes(out)  # room for ~3 of the job's 25 shards
    plain = ShardedReadsDataset(out, cache_bytes=budget)
    shards = len(plain.shards)
    assert shards == 25 and len(plain) == 96
    loader = torch.utils.data.DataLoader(plain, batch_size=8, shuffle=True, collate_fn=plain.collate,
                                         generator=torch.Generator().manual_seed(0))
    assert sorted(names_of(loader)) == sorted(names)
    assert plain.cache_info()["parses"] > 60  # the defect: a shard read for most items

    dataset = ShardedReadsDataset(out, cache_bytes=budget)
    sampler = dataset.sampler(shuffle=True, seed=0)
    assert 1 <= sampler.window < shards  # the window comes from the budget
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, sampler=sampler, collate_fn=dataset.collate)
    epoch = names_of(loader)
    assert sorted(epoch) == sorted(names) and epoch != names
    assert dataset.cache_info()["parses"] == shards  # each shard once
    again = names_of(loader)  # the next epoch: another order, each shard once more
    assert sorted(again) == sorted(names) and again != epoch
    assert dataset.cache_info()["parses"] == 2 * shards
    repeat = ShardedReadsDataset(out, cache_bytes=budget)
    loader = torch.utils.data.DataLoader(repeat, batch_size=8, sampler=repeat.sampler(shuffle=True, seed=0),
                                         collate_fn=repeat.collate)
    assert names_of(loader) == epoch  # reproducible by seed


def test_default_settings_shuffle_a_job_that_fits_in_one_window(reads_job):
    out, names = reads_job
    dataset = ShardedReadsDataset(out)
    info = dataset.cache_info()
    assert (info["max_bytes"], info["max_shards"]) == (DEFAULT_CACHE_BYTES, None)
    sampler = dataset.sampler(shuffle=True, seed=1)
    assert sampler.window == len(dataset.shards)  # all 25 fit: one window, a uniform shuffle
    assert [dataset[i]["name"] for i in sampler] == [names[i] for i in sampler.order(0)]
    assert dataset.cache_info()["parses"] == len(dataset.shards)
    assert dataset.cache_info()["bytes"] <= DEFAULT_CACHE_BYTES


def test_the_cache_holds_its_budget_and_cache_shards_still_counts(reads_job):
    out, _ = reads_job
    budget = 2 * shard_bytes(out)
    dataset = ShardedReadsDataset(out, cache_bytes=budget)
    for i in range(len(dataset)):
        dataset[i]
        info = dataset.cache_info()
        assert info["bytes"] <= budget or info["shards"] == 1
    assert dataset.cache_info()["parses"] == len(dataset.shards) and dataset.cache_info()["evictions"] > 0
    counted = ShardedReadsDataset(out, cache_shards=2)  # the older setting: a count, no byte limit
    for i in range(len(counted)):
        counted[i]
        assert len(counted._cache) <= 2
    assert counted.cache_info()["max_bytes"] is None and counted.cache_bytes is None
    both = ShardedReadsDataset(out, cache_shards=3, cache_bytes=budget)
    assert (both.cache_info()["max_shards"], both.cache_info()["max_bytes"]) == (3, budget)
    for kwargs, error in (({"cache_bytes": 0}, ValueError), ({"cache_bytes": "1"}, TypeError),
                          ({"cache_shards": 0}, ValueError)):
        with pytest.raises(error, match=next(iter(kwargs))):
            ShardedReadsDataset(out, **kwargs)


def test_a_window_larger_than_the_cache_is_kept_whole(reads_job):
    out, names = reads_job
    dataset = ShardedReadsDataset(out, cache_shards=1)
    sampler = dataset.sampler(shuffle=True, seed=2, window=5)
    assert [dataset[i]["name"] for i in sampler] == [names[i] for i in sampler.order(0)]
    assert dataset.cache_info()["parses"] == len(dataset.shards) and dataset.cache_info()["keep"] == 5
    clone = __import__("pickle").loads(__import__("pickle").dumps(dataset))  # a DataLoader worker's copy
    assert clone.cache_info()["keep"] == 5 and clone.cache_info()["parses"] == 0


def names_parses_worker(items):
    """A collate for DataLoader workers: the names, and the worker's id and shard parses so far."""
    info = torch.utils.data.get_worker_info()
    return [item["name"] for item in items], info.id, info.dataset.cache_info()["parses"]


def test_dataloader_workers(reads_job):
    out, names = reads_job
    budget = 3 * shard_bytes(out)
    dataset = ShardedReadsDataset(out, cache_bytes=budget)
    one = dataset.sampler(shuffle=True, seed=3, window=2)
    single = names_of(torch.utils.data.DataLoader(dataset, batch_size=5, sampler=one, collate_fn=dataset.collate))
    one.set_epoch(0)  # the same order with two workers: the sampler runs in the main process
    # a dataset not read in this process: forked workers inherit the cache (and its counts) as it is
    dataset = ShardedReadsDataset(out, cache_bytes=budget)
    loader = torch.utils.data.DataLoader(dataset, batch_size=5, sampler=one, num_workers=2,
                                         collate_fn=names_parses_worker)
    batches = list(loader)
    assert [n for b in batches for n in b[0]] == single
    plain_parses = sum(max(p for _, w, p in batches if w == worker) for worker in (0, 1))
    dataset = ShardedReadsDataset(out, cache_bytes=budget)
    aware = dataset.sampler(shuffle=True, seed=3, window=2, batch_size=5, num_workers=2)
    loader = torch.utils.data.DataLoader(dataset, batch_size=5, sampler=aware, num_workers=2,
                                         collate_fn=names_parses_worker)
    batches = list(loader)
    assert sorted(n for b in batches for n in b[0]) == sorted(names)
    assert [w for _, w, _ in batches] == [j % 2 for j in range(len(batches))]  # round-robin, as assumed
    aware_parses = sum(max(p for _, w, p in batches if w == worker) for worker in (0, 1))
    shards = len(dataset.shards)
    assert aware_parses <= shards + 1 < plain_parses  # each worker its own shards vs every worker every shard


def test_ranks_read_their_own_shards(reads_job):
    out, names = reads_job
    got, parses = [], 0
    for rank in range(3):
        dataset = ShardedReadsDataset(out, cache_bytes=3 * shard_bytes(out))
        sampler = dataset.sampler(shuffle=True, seed=9, num_replicas=3, rank=rank)
        got += [dataset[i]["name"] for i in sampler]
        parses += dataset.cache_info()["parses"]
    assert sorted(got) == sorted(names) and parses <= 25 + 2


def test_meds_items_of_a_split_cut_into_windows(tmp_path, meds_root):
    import pandas as pd

    from omnipos.scale import precompute_meds
    from omnipos.timeseries import EventBatch

    root = meds_root(tmp_path / "root", seed=3)
    subjects = sorted(EventBatch.from_parquet(root / "data").subjects)
    pd.DataFrame({"subject_id": subjects, "split": np.where(np.arange(len(subjects)) % 3, "train", "tuning")}
                 ).to_parquet(root / "metadata" / "subject_splits.parquet")
    precompute_meds(root, tmp_path / "out", shard_size=2, progress=False)
    dataset = ShardedMedsDataset(tmp_path / "out", split="train", max_len=4, truncation="split")
    bounds = dataset.item_bounds()
    assert bounds[-1] == len(dataset) and len(bounds) == len(dataset.shards) + 1
    assert [dataset.locate(i)[0] for i in range(len(dataset))] == shard_of(bounds, range(len(dataset))).tolist()
    expected = sorted((dataset[i]["subject_id"], dataset[i]["window"]) for i in range(len(dataset)))
    fresh = ShardedMedsDataset(tmp_path / "out", split="train", max_len=4, truncation="split", cache_shards=1)
    sampler = fresh.sampler(shuffle=True, seed=0, window=2)
    got = [(item["subject_id"], item["window"]) for item in map(fresh.__getitem__, sampler)]
    assert sorted(got) == expected and got != expected
    assert fresh.cache_info()["parses"] == int((np.diff(bounds) > 0).sum())  # shards with no train subject unread


def test_graphs_through_pyg_loader(tmp_path, graphs, transform):
    from torch_geometric.loader import DataLoader

    from omnipos.scale import precompute_graphs

    precompute_graphs(graphs, tmp_path, transform(), shard_size=5, progress=False)
    dataset = ShardedGraphDataset(tmp_path, cache_shards=2)
    loader = DataLoader(dataset, batch_size=4, sampler=dataset.sampler(shuffle=True, seed=0, window=3))
    labels = torch.cat([batch.y for batch in loader]).tolist()
    assert sorted(labels) == [float(i) for i in range(53)] and labels != sorted(labels)
    assert dataset.cache_info()["parses"] == len(dataset.shards) == 11
