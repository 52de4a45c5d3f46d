"""Graph shards and graph input files are untrusted input: they are read with ``torch.load(weights_only=True)``
and no fallback (a planted pickle never runs), checked against the structure omnipos writes (a ValueError naming
the shard, never a raw KeyError/IndexError from PyG's ``separate``), and graphs that could not be stored that way
are refused before ``out_dir`` is created."""

import hashlib
import io
import json
import os
import shutil

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import Compose

from omnipos.graph import AddRandomWalkPE
from omnipos.scale import (
    PrecomputeError,
    ShardedGraphDataset,
    load_graphs,
    precompute_graphs,
)
from omnipos.scale.manifest import MANIFEST_NAME

SHARD = "graphs-00001-00000.pt"  # the second of three shards of 4 graphs (10 graphs in all)


class Planted:
    """Unpickling it creates the folder ``marker``: proof that a file ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


class CustomData(Data):
    """A Data subclass that torch's safe loader does not allowlist."""


def walk():
    return Compose([AddRandomWalkPE(2)])


@pytest.fixture(scope="module")
def finished_job(tmp_path_factory, molecules):
    """A finished job of 10 graphs in shards of 4 (written once; each test works on a copy)."""
    folder = tmp_path_factory.mktemp("graph-job") / "out"
    precompute_graphs(molecules(10, seed=3), folder, walk(), shard_size=4, num_cpus=1, progress=False)
    return folder


@pytest.fixture
def job(tmp_path, finished_job):
    folder = tmp_path / "out"
    shutil.copytree(finished_job, folder)
    return folder


def replace_shard(folder, name, payload, *, fix_manifest=True):
    """Put ``payload`` in shard ``name``; with ``fix_manifest``, as an attacker who controls the folder would, also
    rewrite the manifest's size and checksum of that shard to match it."""
    (folder / name).write_bytes(payload)
    if not fix_manifest:
        return
    path = folder / MANIFEST_NAME
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for line in lines:
        for shard in line.get("shards", []):
            if shard["name"] == name:
                shard["bytes"], shard["sha256"] = len(payload), hashlib.sha256(payload).hexdigest()
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def saved(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def stored(folder, name=SHARD):
    """The shard as it is stored: PyG's ``(data dict, slices, class)``."""
    return torch.load(folder / name, weights_only=True)


def every_way_of_reading(folder, verify=True):
    """load_graphs, and the lazy dataset's item in the shard (item 5 is in the second shard)."""
    yield lambda: load_graphs(folder, verify=verify)
    yield lambda: ShardedGraphDataset(folder, verify=verify)[5]


# -- 1. a planted shard does not run


@pytest.mark.parametrize("verify", [True, False], ids=["verify", "no-verify"])
@pytest.mark.parametrize("where", ["whole", "inside"])
def test_a_planted_shard_does_not_run(job, tmp_path, verify, where):
    marker = tmp_path / "ran"
    as_dict, slices, cls = stored(job)
    payload = Planted(marker) if where == "whole" else ({**as_dict, "x": Planted(marker)}, slices, cls)
    replace_shard(job, SHARD, saved(payload))
    for read in every_way_of_reading(job, verify):
        with pytest.raises(ValueError, match=rf"{SHARD}: the safe loader .*weights_only=True.* refuses it"):
            read()
    assert not marker.exists()


def test_the_intact_shards_still_read_beside_a_planted_one(job, tmp_path):
    marker = tmp_path / "ran"
    replace_shard(job, SHARD, saved(Planted(marker)))
    lazy = ShardedGraphDataset(job)
    assert lazy[0].random_walk_pe.shape[1] == 2 and lazy[9].random_walk_pe.shape[1] == 2
    with pytest.raises(ValueError, match=SHARD):
        lazy[4]
    assert not marker.exists()


# -- 2. a planted input file does not run


def test_a_planted_input_file_does_not_run(tmp_path, molecules):
    marker = tmp_path / "ran"
    good, planted = tmp_path / "good.pt", tmp_path / "planted.pt"
    torch.save(molecules(3), good)
    torch.save([Planted(marker)], planted)
    with pytest.raises(PrecomputeError) as info:
        precompute_graphs([good, planted], tmp_path / "out", walk(), num_cpus=1, progress=False)
    message = str(info.value)
    assert f"{planted}: the safe loader (torch.load(weights_only=True)) refuses it" in message
    assert "posix.mkdir" in message  # torch's reason: the global it would have called
    assert info.value.result.items == 3  # the good file was encoded
    assert not marker.exists()


def test_a_saved_list_of_data_still_loads(tmp_path, molecules, same_graphs):
    """``torch.save(list_of_Data)`` pickles PyG's storage classes, which PyG does not allowlist: omnipos loads it
    with them allowlisted (and nothing else)."""
    graphs = molecules(5, seed=4)
    path = tmp_path / "list.pt"
    torch.save(graphs, path)
    precompute_graphs(path, tmp_path / "out", walk(), num_cpus=1, progress=False)
    from omnipos.graph import precompute

    same_graphs(load_graphs(tmp_path / "out"), precompute(graphs, walk(), progress=False))


def test_loading_a_list_of_data_changes_no_process_wide_allowlist(tmp_path, molecules):
    """The storage classes are allowlisted for that one load (torch.serialization.safe_globals), never added to
    torch's process-wide list: another library's torch.load in the same process is not widened by omnipos."""
    from omnipos.scale.graphs import _load_graph_file

    graphs = molecules(3, seed=5)
    path = tmp_path / "list.pt"
    torch.save(graphs, path)
    before = list(torch.serialization.get_safe_globals())
    loaded = _load_graph_file(str(path))
    assert len(loaded) == 3 and torch.equal(loaded[1].edge_index, graphs[1].edge_index)
    assert list(torch.serialization.get_safe_globals()) == before


# -- 3. a shard of the wrong structure is a ValueError naming it


def _wrong_structures():
    """name -> f(data dict, slices, class) giving what the planted shard holds."""

    def without(table, key):
        return {k: v for k, v in table.items() if k != key}

    def edited(table, key, value):
        return {**table, key: value}

    from torch_geometric.data.data import DataTensorAttr

    return {
        "a dict": lambda d, s, c: {"data": d, "slices": s},
        "a list (older format)": lambda d, s, c: [d, s, c],
        "two fields": lambda d, s, c: (d, s),
        "four fields": lambda d, s, c: (d, s, c, 1),
        "class is not Data": lambda d, s, c: (d, s, DataTensorAttr),
        "class is a string": lambda d, s, c: (d, s, "Data"),
        "data is a list": lambda d, s, c: (list(d.values()), s, c),
        "slices is a tensor": lambda d, s, c: (d, torch.arange(5), c),
        "a sliced attribute missing": lambda d, s, c: (without(d, "x"), s, c),
        "an attribute key not a string": lambda d, s, c: ({**d, 3: torch.zeros(4)}, edited(s, 3, s["y"]), c),
        "x is a string": lambda d, s, c: (edited(d, "x", "hello"), s, c),
        "x is a number": lambda d, s, c: (edited(d, "x", 3.5), s, c),
        "x is a 0-d tensor": lambda d, s, c: (edited(d, "x", torch.tensor(1.0)), s, c),
        "x is a nested dict": lambda d, s, c: (edited(d, "x", {"a": torch.zeros(2)}), s, c),
        "slices past the end": lambda d, s, c: (d, edited(s, "x", s["x"] + 1000), c),
        "slices not starting at 0": lambda d, s, c: (d, edited(s, "x", s["x"] + 1), c),
        "slices decreasing": lambda d, s, c: (d, edited(s, "x", s["x"].flip(0)), c),
        "slices as floats": lambda d, s, c: (d, edited(s, "x", s["x"].double()), c),
        "slices 2-D": lambda d, s, c: (d, edited(s, "x", s["x"][None]), c),
        "slices of another count": lambda d, s, c: (d, edited(s, "x", s["x"][:-1]), c),
        "every slice one short (count differs from the manifest)": lambda d, s, c: (
            {**d, "_num_nodes": d["_num_nodes"][:-1]}, {k: v[:-1] for k, v in s.items()}, c),
        "slices a list": lambda d, s, c: (d, edited(s, "x", s["x"].tolist()), c),
        "num_nodes list short": lambda d, s, c: (edited(d, "_num_nodes", d["_num_nodes"][:2]), s, c),
        "num_nodes list of strings": lambda d, s, c: (edited(d, "_num_nodes", ["a"] * 4), s, c),
        "a list attribute too short": lambda d, s, c: ({**d, "name": ["a"]}, {**s, "name": torch.arange(5)}, c),
        "an empty list attribute": lambda d, s, c: ({**d, "name": []}, {**s, "name": torch.arange(5)}, c),
        "a dict attribute with other slices": lambda d, s, c: ({**d, "m": {"a": torch.zeros(4)}},
                                                               {**s, "m": {"b": s["y"]}}, c),
        "a tensor list with one slice too few": lambda d, s, c: (
            {**d, "parts": [torch.zeros(4), torch.zeros(4)]}, {**s, "parts": [s["y"]]}, c),
        "a shard with no slices": lambda d, s, c: (d, {}, c),
    }


WRONG = _wrong_structures()


@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_shard_of_the_wrong_structure_is_a_value_error_naming_it(job, case):
    payload = saved(WRONG[case](*stored(job)))
    replace_shard(job, SHARD, payload)
    for read in every_way_of_reading(job):
        with pytest.raises(ValueError, match=SHARD):
            read()


def test_an_old_list_shard_says_to_rerun(job):
    replace_shard(job, SHARD, saved(list(stored(job))))
    with pytest.raises(ValueError, match=rf"{SHARD}: .*older omnipos.*resume=False"):
        load_graphs(job)


def test_a_shard_of_another_count_than_the_manifest_is_refused(job):
    """A well-formed shard of 3 graphs where the manifest says 4."""
    shards = sorted(p.name for p in job.glob("graphs-*.pt"))
    as_dict, slices, cls = stored(job, shards[2])  # the last shard: 2 graphs
    replace_shard(job, SHARD, saved((as_dict, slices, cls)))
    with pytest.raises(ValueError, match=rf"{SHARD}: .*2 graphs, the manifest lists 4"):
        load_graphs(job)


def test_a_shard_omnipos_writes_passes_and_round_trips(job, molecules):
    """The checks accept what omnipos writes, including plain Python attributes."""
    from omnipos.graph import precompute

    graphs = molecules(6, seed=5)
    for i, g in enumerate(graphs):
        g.name, g.weight, g.tags, g.info = f"mol{i}", 0.5 * i, [i, "a", None], {"k": torch.ones(2) * i}
        g.flag, g.pair, g.raw = i % 2 == 0, (i, "b"), b"\x00\xff"
        g.adj = torch.eye(g.num_nodes).to_sparse()  # a sparse tensor is stored as a list element
    out = job.parent / "plain"
    precompute_graphs(graphs, out, walk(), shard_size=4, num_cpus=1, progress=False)
    got, want = load_graphs(out), precompute(graphs, walk(), progress=False)
    assert [g.name for g in got] == [f"mol{i}" for i in range(6)]
    assert [g.tags for g in got] == [[i, "a", None] for i in range(6)]
    assert [g.pair for g in got] == [(i, "b") for i in range(6)]
    assert [g.raw for g in got] == [b"\x00\xff"] * 6
    # PyG's InMemoryDataset turns a number into a 1-element tensor; the shards keep doing what it does
    for i, g in enumerate(got):
        assert torch.equal(g.weight, torch.tensor([0.5 * i])) and torch.equal(g.flag, torch.tensor([i % 2 == 0]))
        assert torch.equal(g.info["k"], torch.ones(2) * i)
        assert g.adj.layout == torch.sparse_coo and torch.equal(g.adj.to_dense(), torch.eye(g.num_nodes))
        assert torch.equal(g.random_walk_pe, want[i].random_walk_pe) and torch.equal(g.x, want[i].x)


# -- 4. graphs that cannot be stored without pickle are refused before anything is created


UNSTORABLE = {
    "a lambda": (lambda: (lambda x: x), "function"),
    "an open file": (lambda: open(os.devnull), "TextIOWrapper"),  # noqa: SIM115 - the attribute is the open file
    "a numpy array": (lambda: __import__("numpy").zeros(3), "numpy.ndarray"),
    "a set": (lambda: {1, 2}, "set"),
    "a lambda in a list": (lambda: [1, lambda x: x], "function"),
    "a dict with int keys": (lambda: {1: 2}, "key 1"),
}


@pytest.mark.parametrize("case", sorted(UNSTORABLE))
def test_an_unstorable_attribute_is_refused_before_out_dir_exists(tmp_path, molecules, case):
    make, what = UNSTORABLE[case]
    graphs = molecules(12, seed=6)
    for g in graphs:
        g.extra = 0
    graphs[9].extra = make()
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=rf"graphs\[9\]\.extra(\[1\])? is .*{what}"):
        precompute_graphs(graphs, out, walk(), shard_size=5, num_cpus=1, resume=False, progress=False)
    assert not out.exists()


def test_a_custom_data_class_is_refused_before_out_dir_exists(tmp_path, molecules):
    graphs = [CustomData(**g.to_dict()) for g in molecules(4)]
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"graphs\[0\] is a .*CustomData.*torch_geometric\.data\.Data"):
        precompute_graphs(graphs, out, walk(), num_cpus=1, progress=False)
    assert not out.exists()


def test_a_transform_adding_an_unstorable_attribute_fails_its_unit_by_name(tmp_path, molecules):
    """What the transform adds is checked in the worker before the shard is written: the unit fails, naming the
    graph and the attribute, and leaves no shard."""
    from support.graph_transforms import AddNumpyAttribute

    path = tmp_path / "in.pt"
    torch.save(molecules(6), path)
    with pytest.raises(PrecomputeError, match=rf"{path}: records 0..3: .*graph 0\.array is a numpy\.ndarray"):
        precompute_graphs(path, tmp_path / "out", Compose([AddRandomWalkPE(2), AddNumpyAttribute()]), shard_size=4,
                          num_cpus=1, progress=False)
    assert not list((tmp_path / "out").glob("graphs-*"))
