"""The default engine from any caller: a script without an ``if __name__ == "__main__":`` guard runs its job once
(the workers never run the caller's top-level code again), and a transform defined in ``__main__`` (a script,
``python -c``, a notebook) runs in the worker processes, sent by value with cloudpickle as Ray does."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.worker_probes import echo_unit

import omnipos
import omnipos.scale.workers as workers_module
from omnipos.scale.workers import InProcessNote, run_on_workers

SRC = Path(omnipos.__file__).parents[1]
TESTS = Path(__file__).parents[1]

GRAPHS_SCRIPT = """
import os, sys, warnings
import torch
from torch_geometric.transforms import BaseTransform, Compose
from omnipos.graph import AddRandomWalkPE, precompute
from omnipos.scale import load_graphs, precompute_graphs
from support.orphan_probes import small_graphs

with open(sys.argv[2], "a") as log:
    log.write("top-level code ran\\n")

class Doubled(BaseTransform):  # defined in __main__: the workers get it by value
    def forward(self, data):
        data.x = data.x * 2 + 1
        data.pid = torch.tensor([os.getpid()])
        return data

graphs = small_graphs()
transform = Compose([Doubled(), AddRandomWalkPE(3)])
with warnings.catch_warnings():
    warnings.simplefilter("error")  # no note that the units ran in this process
    precompute_graphs(graphs, sys.argv[1], transform, shard_size=5, num_cpus=2, progress=False)
got, expected = load_graphs(sys.argv[1]), precompute(graphs, transform, progress=False)
assert [g.x.tolist() for g in got] == [g.x.tolist() for g in expected]
assert [g.random_walk_pe.tolist() for g in got] == [g.random_walk_pe.tolist() for g in expected]
pids = {int(g.pid) for g in got}
assert os.getpid() not in pids and 1 <= len(pids) <= 2, pids
print("equal")
"""


def run_python(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.mark.parametrize("how", ["script", "-c"])
def test_a_transform_defined_in_main_runs_on_the_workers(tmp_path, how):
    """A script without a main guard, or ``python -c``: the job runs once, on the workers, with the output of the
    same transform in this process, and the top-level code (a side effect) ran once. Before: the script's
    top-level code ran again in each worker (multiprocessing imports the main module in every child; their copies
    of the job died on the folder lock), and the transform failed with "the worker processes cannot load the unit
    function"."""
    out, log = tmp_path / "out", tmp_path / "side-effect.txt"
    if how == "script":
        script = tmp_path / "graphs_job.py"
        script.write_text(GRAPHS_SCRIPT)
        done = run_python([str(script), str(out), str(log)], tmp_path)
    else:
        done = run_python(["-c", GRAPHS_SCRIPT, str(out), str(log)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["equal"]
    assert log.read_text() == "top-level code ran\n"


def main_unit(unit, payload):
    """A unit function that says it was defined in ``__main__`` (as in a notebook or ``python -c``)."""
    return {"unit": unit, "payload": payload, "pid": os.getpid()}


main_unit.__module__ = "__main__"


class MainPayload:
    """A payload of a class defined in ``__main__`` (a notebook's own Data subclass)."""

    def __init__(self, value):
        self.value = value


MainPayload.__module__ = "__main__"
MainPayload.__init__.__module__ = "__main__"  # as every method of a class a notebook defines (else cloudpickle sends
# the method by reference to this test module, which a worker can import only when the caller's cwd is on its path)


def value_unit(unit, payload):
    return {"unit": unit, "value": payload.value, "pid": os.getpid()}


value_unit.__module__ = "__main__"


def test_code_of_main_is_sent_by_value():
    got = []
    run_on_workers([0, 1, 2], main_unit, lambda u: u * 10, got.append, workers=2, retries=0)
    assert sorted((r["unit"], r["payload"]) for r in got) == [(0, 0), (1, 10), (2, 20)]
    assert os.getpid() not in {r["pid"] for r in got}
    got = []
    run_on_workers([0, 1], value_unit, MainPayload, got.append, workers=2, retries=0)
    assert sorted((r["unit"], r["value"]) for r in got) == [(0, 0), (1, 1)]
    assert os.getpid() not in {r["pid"] for r in got}


EXEC_CELL = """
import os

class Scale:
    def __init__(self, factor):
        self.factor = factor

    def __call__(self, unit, payload):
        return {"unit": unit, "value": payload * self.factor, "pid": os.getpid()}
"""


def test_code_run_by_exec_is_sent_by_value():
    """A class made by ``exec`` in a namespace that is no module (as some notebook front ends and README runners
    do): before, pickle refused it in this process ("the unit function cannot be sent to worker processes")."""
    namespace = {"__name__": "cell_without_a_module"}
    exec(EXEC_CELL, namespace)  # noqa: S102 - the code above
    got = []
    run_on_workers([0, 1], namespace["Scale"](3), lambda u: u + 1, got.append, workers=2, retries=0)
    assert sorted((r["unit"], r["value"]) for r in got) == [(0, 3), (1, 6)]
    assert os.getpid() not in {r["pid"] for r in got}


def test_without_cloudpickle_the_units_run_in_this_process_with_a_note(monkeypatch):
    monkeypatch.setattr(workers_module, "_cloudpickle", lambda: None)
    got = []
    with pytest.warns(InProcessNote, match=r"defined in __main__ .*\(pip install cloudpickle\): its units run in "
                                           "this process, one at a time"):
        run_on_workers([0, 1, 2], main_unit, lambda u: u * 10, got.append, workers=2, retries=0)
    assert [(r["unit"], r["payload"], r["pid"]) for r in got] == [(u, u * 10, os.getpid()) for u in range(3)]
    with pytest.raises(ValueError, match=r"unit 0's input holds a class or function defined in __main__ .* pip "
                                         "install cloudpickle"):
        run_on_workers([0], echo_unit, MainPayload, got.append, workers=1, retries=0)


@pytest.mark.parametrize("spec_name", [None, "jobs.nightly"])
def test_workers_start_without_the_main_module(monkeypatch, tmp_path, spec_name):
    """``python script.py`` (a path) and ``python -m jobs.nightly`` (a name): multiprocessing would have each worker
    import it, running its top level again; the workers' preparation data name neither."""
    import types
    from importlib.machinery import ModuleSpec
    from multiprocessing import spawn

    main = types.ModuleType("__main__")
    main.__file__ = str(tmp_path / "nightly.py")
    main.__spec__ = None if spec_name is None else ModuleSpec(spec_name, None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    key = "init_main_from_path" if spec_name is None else "init_main_from_name"
    assert key in spawn.get_preparation_data("x")
    with workers_module._without_main():
        data = spawn.get_preparation_data("x")
    assert "init_main_from_path" not in data and "init_main_from_name" not in data
    assert data["sys_path"] == sys.path  # the rest is kept: the script's folder stays importable
    assert key in spawn.get_preparation_data("x")  # only while a worker starts
