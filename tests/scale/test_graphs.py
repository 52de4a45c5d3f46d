"""precompute_graphs / load_graphs / ShardedGraphDataset on the local engine (the Ray engine: test_ray.py)."""

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.loader import DataLoader
from torch_geometric.transforms import Compose

from omnipos.graph import AddLaplacianPE, AddRandomWalkPE, RandomSignFlip, precompute
from omnipos.scale import (
    PrecomputeError,
    ShardedGraphDataset,
    load_graphs,
    precompute_graphs,
)

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.parametrize("shard_size", [1, 7, 53, 1000])
def test_output_equals_precompute_whatever_the_shard_size(tmp_path, graphs, expected, same_graphs, shard_size,
                                                          transform):
    result = precompute_graphs(graphs, tmp_path, transform(), shard_size=shard_size, batch_size=5, progress=False)
    assert result.items == result.items_computed == 53
    assert result.shards == -(-53 // shard_size) and result.units_resumed == 0
    same_graphs(load_graphs(tmp_path), expected)
    assert [g.y.item() for g in load_graphs(tmp_path)] == list(range(53))  # input order kept


def test_input_is_not_modified(tmp_path, graphs, transform):
    keys = [sorted(g.keys()) for g in graphs]
    precompute_graphs(graphs, tmp_path, transform(), shard_size=10, progress=False)
    assert [sorted(g.keys()) for g in graphs] == keys


def test_files_give_the_same_output_as_a_list(tmp_path, graphs, expected, same_graphs, transform):
    first, second = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save(graphs[:20], first)
    torch.save(graphs[20:], second)
    result = precompute_graphs([first, second], tmp_path / "out", transform(), shard_size=6, progress=False)
    assert result.units == 2 and result.shards == 4 + 6  # each file in shards of 6: 20 -> 4, 33 -> 6
    same_graphs(load_graphs(tmp_path / "out"), expected)
    single = precompute_graphs(str(first), tmp_path / "one", transform(), progress=False)
    assert single.items == 20


def test_progress_callback_counts_graphs(tmp_path, graphs, transform):
    calls = []
    precompute_graphs(graphs, tmp_path, transform(), shard_size=20, num_cpus=1,  # one worker: units in order
                      progress=lambda d, t: calls.append((d, t)))
    assert calls == [(20, 53), (40, 53), (53, 53)]


def test_sharded_dataset_is_lazy_and_indexable(tmp_path, graphs, expected, same_graphs, transform):
    precompute_graphs(graphs, tmp_path, transform(), shard_size=8, progress=False)
    dataset = ShardedGraphDataset(tmp_path, cache_shards=2)
    assert len(dataset) == 53 and "53 graphs in 7 shards" in repr(dataset)
    assert not dataset._cache
    same_graphs([dataset[i] for i in (0, 8, 52, -1, -53)], [expected[i] for i in (0, 8, 52, -1, -53)])
    same_graphs([dataset[torch.tensor(9)]], [expected[9]])
    assert len(dataset._cache) <= 2
    with pytest.raises(IndexError, match="index 53 is out of range for 53 graphs"):
        dataset[53]
    with pytest.raises(IndexError):
        dataset[-54]
    with pytest.raises(TypeError, match="index must be an int"):
        dataset[1.0]
    with pytest.raises(TypeError, match="index must be an int"):
        dataset[True]
    clone = pickle.loads(pickle.dumps(dataset))  # what a DataLoader worker gets: same data, empty cache
    assert not clone._cache and len(clone) == 53
    batches = list(DataLoader(dataset, batch_size=16))
    assert [b.num_graphs for b in batches] == [16, 16, 16, 5]
    assert torch.equal(batches[1].laplacian_eigenvector_pe,
                       torch.cat([expected[i].laplacian_eigenvector_pe for i in range(16, 32)]))


def test_sharded_dataset_applies_a_transform(tmp_path, graphs, expected, transform):
    precompute_graphs(graphs, tmp_path, transform(), shard_size=30, progress=False)
    flipped = ShardedGraphDataset(tmp_path, transform=RandomSignFlip(generator=torch.Generator().manual_seed(0)))
    for i in (3, 40):
        got, want = flipped[i].laplacian_eigenvector_pe, expected[i].laplacian_eigenvector_pe
        assert torch.equal(got.abs(), want.abs())


def test_shards_are_pyg_inmemorydataset_files(tmp_path, graphs, expected, same_graphs, transform):
    from torch_geometric.data import InMemoryDataset

    precompute_graphs(graphs, tmp_path, transform(), shard_size=60, progress=False)

    class Shard(InMemoryDataset):
        def __init__(self, path):
            super().__init__()
            self.load(str(path))

    shard = Shard(tmp_path / "graphs-00000-00000.pt")
    same_graphs([shard[i] for i in range(len(shard))], expected)


def test_resume_skips_finished_shards(tmp_path, graphs, expected, same_graphs, transform):
    precompute_graphs(graphs, tmp_path, transform(), shard_size=10, progress=False)
    stamps = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("graphs-*.pt")}
    (tmp_path / "graphs-00002-00000.pt").unlink()  # a shard lost: only its unit is redone
    again = precompute_graphs(graphs, tmp_path, transform(), shard_size=10, progress=False)
    assert again.units_resumed == 5 and again.shards_computed == 1 and again.items_computed == 10
    assert again.items == 53 and again.shards == 6
    for name, stamp in stamps.items():
        if name != "graphs-00002-00000.pt":
            assert (tmp_path / name).stat().st_mtime_ns == stamp
    same_graphs(load_graphs(tmp_path), expected)
    redo = precompute_graphs(graphs, tmp_path, transform(), shard_size=10, resume=False, progress=False)
    assert redo.units_resumed == 0 and redo.shards_computed == 6


def test_resume_after_the_driver_was_killed_mid_job(tmp_path, graphs, expected, same_graphs, transform):
    """A local run whose driver is killed (os._exit, no cleanup) after recording two units, with a writer's
    temporary file left behind, leaves two recorded shards; the resumed run skips the two, redoes the rest, removes
    the temporary and equals a clean run."""
    source = tmp_path / "graphs.pt"
    torch.save(graphs, source)
    out = tmp_path / "out"
    script = f"""
import os, torch
from torch_geometric.transforms import Compose
from omnipos.graph import AddLaplacianPE, AddRandomWalkPE
from omnipos.scale import precompute_graphs
def dying_progress(done, total):
    if done == 20:  # the second unit is recorded; the one worker is idle until the driver sends the third
        open(os.path.join({str(out)!r}, ".graphs-00002-00000.pt.tmp-1-deadbeef"), "w").close()
        os._exit(9)
graphs = torch.load({str(source)!r}, weights_only=False)
precompute_graphs(graphs, {str(out)!r}, Compose([AddLaplacianPE(3, eigenvalue_attr="eigenvalues"),
                  AddRandomWalkPE(4)]), shard_size=10, num_cpus=1, progress=dying_progress)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert run.returncode == 9, run.stderr
    assert sorted(p.name for p in out.glob("graphs-*.pt")) == ["graphs-00000-00000.pt", "graphs-00001-00000.pt"]
    with pytest.raises(ValueError, match=r"unfinished \(2 of 6 units done\)"):
        load_graphs(out)
    resumed = precompute_graphs(graphs, out, transform(), shard_size=10, progress=False)
    assert resumed.units_resumed == 2 and resumed.shards_computed == 4
    assert not list(out.glob(".*tmp-*"))
    same_graphs(load_graphs(out), expected)


def test_another_jobs_folder_is_refused_unless_overwrite(tmp_path, graphs, expected, same_graphs, transform):
    precompute_graphs(graphs, tmp_path, transform(), shard_size=10, progress=False)
    with pytest.raises(ValueError, match="holds the manifest of another job .*different transform.*overwrite=True"):
        precompute_graphs(graphs, tmp_path, Compose([AddLaplacianPE(2)]), shard_size=10, progress=False)
    with pytest.raises(ValueError, match="another job .*different inputs"):
        precompute_graphs(graphs[:-1], tmp_path, transform(), shard_size=10, progress=False)
    with pytest.raises(ValueError, match="another job .*different shard_size"):
        precompute_graphs(graphs, tmp_path, transform(), shard_size=11, progress=False)
    result = precompute_graphs(graphs[:20], tmp_path, Compose([AddLaplacianPE(2)]), shard_size=10,
                               overwrite=True, progress=False)
    assert result.shards == 2 and sorted(p.name for p in tmp_path.glob("graphs-*")) == [
        "graphs-00000-00000.pt", "graphs-00001-00000.pt"]  # the old job's other shards are gone
    assert load_graphs(tmp_path)[0].laplacian_eigenvector_pe.shape[1] == 2


def test_corrupt_input_file_fails_alone(tmp_path, graphs, expected, same_graphs, transform):
    good, bad, worse = tmp_path / "good.pt", tmp_path / "bad.pt", tmp_path / "worse.pt"
    torch.save(graphs[:30], good)
    torch.save(graphs[30:], bad)
    bad.write_bytes(bad.read_bytes()[:200])  # truncated
    torch.save(graphs[:2] + ["not a graph"], worse)
    odd = tmp_path / "odd.pt"
    torch.save(graphs[:9] + [graphs[9].clone().update({"edge_attr": torch.ones(2)})], odd)
    with pytest.raises(PrecomputeError) as info:
        precompute_graphs([good, bad, worse, odd], tmp_path / "out", transform(), shard_size=7, progress=False)
    message = str(info.value)
    assert "3 of 4 units failed" in message and f"{bad}: cannot read the graph list" in message
    assert f"{odd}: records 7..9: the encoded graphs of a shard cannot be stored together: graph 2 has" in message
    assert f"{worse}: record 2: expected a torch_geometric Data, found a str" in message
    result = info.value.result
    assert result.items == 30 and result.shards == 5
    assert [s for s, _ in result.failures] == [str(bad), str(worse), str(odd)]
    assert "FAILED 3 unit(s)" in result.summary() and str(bad) in result.summary()
    assert sorted(p.name for p in (tmp_path / "out").glob("graphs-*")) == [
        f"graphs-00000-0000{i}.pt" for i in range(5)]  # nothing of the failed files is left behind
    torch.save(graphs[30:], bad)  # repaired: the rerun redoes only the failed files
    torch.save(graphs[:2], worse)
    torch.save(graphs[:3], odd)
    again = precompute_graphs([good, bad, worse, odd], tmp_path / "out", transform(), shard_size=7, progress=False)
    assert again.units_resumed == 1 and again.items == 30 + 23 + 2 + 3
    same_graphs(load_graphs(tmp_path / "out"), expected[:30] + expected[30:] + expected[:2] + expected[:3])


def test_a_changed_input_is_redone_on_resume(tmp_path, graphs, expected, same_graphs, transform):
    precompute_graphs(graphs, tmp_path, transform(), shard_size=10, progress=False)
    changed = [g.clone() for g in graphs]
    changed[31].x[0, 0] += 1.0  # one value of the fourth slice differs
    changed[31].edge_index = changed[31].edge_index[:, 2:]
    again = precompute_graphs(changed, tmp_path, transform(), shard_size=10, progress=False)
    assert again.units_resumed == 5 and again.shards_computed == 1
    same_graphs(load_graphs(tmp_path), precompute(changed, transform(), progress=False))
    path = tmp_path / "list.pt"
    torch.save(graphs[:20], path)
    precompute_graphs(path, tmp_path / "file", transform(), shard_size=10, progress=False)
    torch.save(graphs[20:40], path)  # the same file, new content (a new size or mtime)
    os.utime(path, ns=(1, 1))
    again = precompute_graphs(path, tmp_path / "file", transform(), shard_size=10, progress=False)
    assert again.units_resumed == 0 and again.items_computed == 20
    same_graphs(load_graphs(tmp_path / "file"), expected[20:40])


def test_bad_arguments(tmp_path, graphs, transform):
    with pytest.raises(ValueError, match="shard_size must be >= 1, got 0"):
        precompute_graphs(graphs, tmp_path, transform(), shard_size=0)
    with pytest.raises(TypeError, match="shard_size must be an int"):
        precompute_graphs(graphs, tmp_path, transform(), shard_size=2.5)
    with pytest.raises(ValueError, match="engine must be one of 'local', 'ray'; got 'spark'"):
        precompute_graphs(graphs, tmp_path, transform(), engine="spark")
    with pytest.raises(TypeError, match="transform must be an omnipos graph transform"):
        precompute_graphs(graphs, tmp_path, lambda g: g)
    with pytest.raises(TypeError, match=r"graphs\[1\] must be a torch_geometric Data, got int"):
        precompute_graphs([graphs[0], 3], tmp_path, transform())
    odd = [g.clone() for g in graphs[:12]]
    odd[11].edge_attr = torch.ones(odd[11].edge_index.shape[1])
    with pytest.raises(ValueError, match=r"graphs\[10:12\] cannot be stored together: graph 11 has .*edge_attr"):
        precompute_graphs(odd, tmp_path, transform(), shard_size=5)
    with pytest.raises(FileNotFoundError, match="no such file"):
        precompute_graphs(tmp_path / "missing.pt", tmp_path, transform())
    with pytest.raises(TypeError, match="graphs must be a sequence"):
        precompute_graphs(iter(graphs), tmp_path, transform())
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a folder"):
        precompute_graphs(graphs, tmp_path / "file", transform())


def test_loading_refuses_a_damaged_shard(tmp_path, graphs, transform):
    precompute_graphs(graphs, tmp_path, transform(), shard_size=30, progress=False)
    shard = tmp_path / "graphs-00001-00000.pt"
    payload = bytearray(shard.read_bytes())
    payload[-10] ^= 0xFF
    shard.write_bytes(bytes(payload))
    with pytest.raises(ValueError, match="graphs-00001-00000.pt: shard does not match its checksum"):
        load_graphs(tmp_path)
    lazy = ShardedGraphDataset(tmp_path)
    assert lazy[0].num_nodes == graphs[0].num_nodes  # the intact shard still reads
    with pytest.raises(ValueError, match="does not match its checksum"):
        lazy[45]
    shard.unlink()
    with pytest.raises(ValueError, match="shard listed in the manifest is missing"):
        load_graphs(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a precompute output"):
        load_graphs(tmp_path / "nothing")


def test_empty_dataset(tmp_path, transform):
    result = precompute_graphs([], tmp_path, transform(), progress=False)
    assert result.items == 0 and result.shards == 0
    assert load_graphs(tmp_path) == [] and len(ShardedGraphDataset(tmp_path)) == 0


@pytest.mark.gpu
def test_num_gpus_computes_on_cuda(tmp_path, graphs):
    """num_gpus > 0: the shards are encoded on CUDA and come back to the CPU; the random-walk encoding (no sign
    or eigenspace choice) agrees with the CPU's within float32 rounding."""
    walk = Compose([AddRandomWalkPE(6)])
    result = precompute_graphs(graphs, tmp_path, walk, num_gpus=1, shard_size=20, progress=False)
    assert result.items == 53
    cpu = precompute(graphs, walk, progress=False)
    for a, b in zip(load_graphs(tmp_path), cpu):
        assert a.random_walk_pe.device.type == "cpu"
        torch.testing.assert_close(a.random_walk_pe, b.random_walk_pe, rtol=1e-5, atol=1e-6)
