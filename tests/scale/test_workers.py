"""The local engine's worker processes: output equal to one worker's, and a worker that dies costs only its unit.
(The same on Ray: test_ray.py.)"""

import os
import sys
import types

import pytest
from support.worker_probes import Deadly, echo_unit
from torch_geometric.transforms import BaseTransform, Compose

import omnipos.scale.engine as engine_module
from omnipos.graph import AddLaplacianPE, AddRandomWalkPE, precompute
from omnipos.scale import PrecomputeError, load_graphs, load_reads, precompute_graphs, precompute_reads
from omnipos.scale.manifest import Manifest
from omnipos.scale.workers import death_cause, least_loaded_device, run_on_workers


def test_workers_give_the_output_of_one_worker(tmp_path, fastx):
    files = [fastx(tmp_path / f"{i}.fq", 20, i) for i in range(5)]
    one = precompute_reads(files, tmp_path / "one", dim=8, shard_size=7, num_cpus=1, progress=False)
    two = precompute_reads(files, tmp_path / "two", dim=8, shard_size=7, num_cpus=2, progress=False)
    assert one.items == two.items == 100 and one.shards == two.shards
    a, b = Manifest.read(tmp_path / "one", "reads"), Manifest.read(tmp_path / "two", "reads")
    assert [s["sha256"] for s in a.shards()] == [s["sha256"] for s in b.shards()]  # bit for bit, shard by shard
    assert load_reads(tmp_path / "one")["tokens"].equal(load_reads(tmp_path / "two")["tokens"])


def test_a_dead_worker_fails_its_unit_and_the_others_finish(tmp_path, graphs, same_graphs, monkeypatch):
    """Units 0, 2 and 4 kill their worker every time (three ways), unit 3 once; with one retry, units 0, 2, 4
    are failed units naming their slice and the cause, 1, 3 and 5 are recorded, and a rerun resumes them."""
    monkeypatch.setattr(engine_module, "MAX_RETRIES", 1)
    armed, marker = tmp_path / "armed", tmp_path / "died-once"
    armed.touch()
    deadly = Compose([Deadly({5.0: "exit", 25.0: "kill", 45.0: "segv", 35.0: "once"}, str(armed), str(marker)),
                      AddLaplacianPE(3), AddRandomWalkPE(4)])
    with pytest.raises(PrecomputeError) as info:
        precompute_graphs(graphs, tmp_path / "out", deadly, shard_size=10, num_cpus=2, progress=False)
    message = str(info.value)
    assert "3 of 6 units failed (the other 3 finished and are recorded; run the same call again" in message
    assert "it resumes, redoing only the failed units" in message
    assert "unit 0, graphs[0:10]: its worker process died 2 times (it exited with status 17)" in message
    assert "unit 2, graphs[20:30]: its worker process died 2 times (killed by SIGKILL: killed, e.g. by the " \
           "out-of-memory killer)" in message
    assert "unit 4, graphs[40:50]: its worker process died 2 times (killed by SIGSEGV: a crash in native " \
           "code)" in message
    assert marker.exists()  # unit 3's worker died once and the retry finished it
    # in unit order, whatever order the units finished in
    assert [s for s, _ in info.value.result.failures] == ["graphs[0:10]", "graphs[20:30]", "graphs[40:50]"]
    assert sorted(Manifest._load(tmp_path / "out").units) == [1, 3, 5]
    armed.unlink()  # the cause is fixed
    resumed = precompute_graphs(graphs, tmp_path / "out", deadly, shard_size=10, progress=False)
    assert resumed.units_resumed == 3 and resumed.shards_computed == 3
    same_graphs(load_graphs(tmp_path / "out"), precompute(graphs, deadly, progress=False))


def test_death_causes_in_words():
    assert death_cause(-9) == "killed by SIGKILL: killed, e.g. by the out-of-memory killer"
    assert death_cause(-15) == "killed by SIGTERM"
    assert death_cause(3) == "it exited with status 3"
    assert death_cause(None) == "it stopped answering"


def test_run_on_workers_sends_each_unit_its_payload_once():
    got = []
    run_on_workers(list(range(7)), echo_unit, lambda u: u * 10, got.append, workers=3, retries=0)
    assert sorted((r["unit"], r["payload"]) for r in got) == [(u, u * 10) for u in range(7)]
    assert 1 <= len({r["pid"] for r in got}) <= 3 and os.getpid() not in {r["pid"] for r in got}


def test_cuda_units_run_in_spawned_workers(monkeypatch):
    """CUDA units need processes that did not fork after the CUDA driver started (the fork server's imports may
    start it): cuda=True takes the spawn start method, with the same results."""
    import omnipos.scale.workers as workers_module

    assert workers_module._context(cuda=True).get_start_method() == "spawn"
    got = []
    run_on_workers(list(range(3)), echo_unit, lambda u: u * 10, got.append, workers=2, retries=0, cuda=True)
    assert sorted((r["unit"], r["payload"]) for r in got) == [(0, 0), (1, 10), (2, 20)]


def test_gpu_workers_spread_over_the_visible_devices():
    assert least_loaded_device([], 2) == 0
    assert least_loaded_device([0], 2) == 1
    assert least_loaded_device([0, 1, 0], 2) == 1
    assert least_loaded_device([1, 1, 0, None], 3) == 2
    assert [least_loaded_device([0, 1, 1, 2, 2][:k], 3) for k in range(6)] == [0, 1, 2, 2, 0, 0]


@pytest.mark.parametrize(("gpus", "per_unit", "cpus", "expected"), [(1, 1.0, 8, 1), (1, 0.25, 8, 4), (2, 0.5, 3, 3),
                                                                    (0, 1.0, 4, 1)])
def test_local_gpu_workers_are_capped_by_the_visible_gpus(monkeypatch, gpus, per_unit, cpus, expected):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert engine_module.Engine("local", None, cpus, per_unit).workers == expected
    assert engine_module.Engine("local", None, cpus, 0.0).workers == cpus


def test_an_unpicklable_transform_is_refused_for_resume(tmp_path, graphs):
    """Its repr alone would match a changed lambda (x * 2 then x * 3) and resume shards it did not compute."""

    class Scaled(BaseTransform):
        def __init__(self, fn):
            self.fn = fn

        def forward(self, data):
            data.x = self.fn(data.x)
            return data

        def __repr__(self):
            return "Scaled()"

    for transform in (Scaled(lambda x: x * 2), Compose([AddLaplacianPE(2), Scaled(lambda x: x * 3)])):
        with pytest.raises(ValueError, match=r"cannot be pickled .*; give a picklable transform \(a class defined "
                                             r"at module level, not a lambda or a closure\), or pass resume=False"):
            precompute_graphs(graphs[:4], tmp_path / "out", transform, progress=False)
        with pytest.raises(ValueError, match="engine='local' runs the units in worker processes"):
            precompute_graphs(graphs[:4], tmp_path / "out", transform, resume=False, progress=False)
    assert not (tmp_path / "out").exists()  # refused before any work


def test_a_unit_function_the_workers_cannot_load_is_a_clear_error(monkeypatch):
    """As a transform defined in a notebook: the driver pickles it by reference, the workers cannot import it."""
    module = types.ModuleType("omnipos_driver_only")

    class Work:
        def __call__(self, unit, payload):
            return {"unit": unit}

    Work.__module__, Work.__qualname__ = module.__name__, "Work"
    module.Work = Work
    monkeypatch.setitem(sys.modules, module.__name__, module)
    with pytest.raises(ValueError, match=r"the worker processes cannot load the unit function \(ModuleNotFound"
                                         r"Error: No module named 'omnipos_driver_only'\); a transform defined in"):
        run_on_workers([0, 1], Work(), None, [].append, workers=2, retries=0)


KERNEL_PROBE = """
def probe(unit, payload):
    import sys
    lane = sys.modules.get("omnipos.graph.lane_eigh")
    return {"unit": unit, "loaded": 0 if lane is None else len(lane._lane_eigh.overloads)}
"""

KERNEL_DRIVER = """
import sys
import torch
from omnipos.graph import laplacian_pe
from omnipos.scale.workers import run_on_workers
from kernel_probe import probe
edge_index = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
laplacian_pe(edge_index, 5, 2, batch=torch.tensor([0, 0, 0, 1, 1]))  # loads the graph kernels here
loaded_here = "omnipos.graph.lane_eigh" in sys.modules
got = []
run_on_workers([0, 1], probe, None, got.append, workers=2, retries=0)
print(loaded_here, sorted(r["loaded"] for r in got))
"""


def test_workers_start_with_the_graph_kernels_the_driver_loaded(tmp_path):
    """When the driver has loaded the graph encodings' compiled kernels, the fork server loads them too (from the
    disk cache the driver's call filled), and each worker starts with them loaded instead of paying ~0.1 s at its
    first call. (Failed before: the fork server imported numba and omnipos.graph but not the kernels.)"""
    pytest.importorskip("numba")
    import multiprocessing
    import subprocess

    from omnipos.graph.small_eigh import compiled_kernels_enabled

    if "forkserver" not in multiprocessing.get_all_start_methods() or not compiled_kernels_enabled():
        pytest.skip("no fork server here (spawn workers import what they need themselves), or numba switched off")
    (tmp_path / "kernel_probe.py").write_text(KERNEL_PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-c", KERNEL_DRIVER], env=env, capture_output=True, text=True,
                          timeout=600, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded_here, counts = done.stdout.strip().split(" ", 1)
    assert loaded_here == "True"
    assert counts == "[1, 1]"
