"""The Ray engine for real: one local Ray (2 CPUs, no dashboard) for every test of this module.

Every Ray test lives in this file so that pytest-xdist (``--dist loadfile``) never starts two Ray clusters at
once; Ray's files and its address file go to a private temporary folder (``RAY_TMPDIR``), and Ray is shut down
at the end of the module.
"""

import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from support.worker_probes import DieOnce
from torch_geometric.transforms import Compose

import omnipos
import omnipos.scale.engine as engine_module
from omnipos.app.featurize import featurize_file
from omnipos.graph import AddLaplacianPE, AddRandomWalkPE, precompute
from omnipos.scale import (
    PrecomputeError,
    load_graphs,
    load_meds,
    load_reads,
    precompute_graphs,
    precompute_meds,
    precompute_reads,
)
from omnipos.timeseries import EventBatch

ray = pytest.importorskip("ray")
SRC = str(Path(omnipos.__file__).resolve().parents[1])
TESTS = str(Path(__file__).resolve().parents[1])  # where `support` (the worker probes) is imported from


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    saved = {name: os.environ.get(name) for name in ("RAY_TMPDIR", "PYTHONPATH")}
    temp = tempfile.mkdtemp(prefix="omr", dir="/tmp")  # short: Ray's socket paths must stay < 108 bytes
    os.environ["RAY_TMPDIR"] = temp
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, TESTS, saved["PYTHONPATH"]) if p)  # for the workers
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test transforms below, for the workers
    try:
        yield ray
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        ray.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(temp, ignore_errors=True)


def test_cli_runs_on_a_cluster_by_address(tmp_path, fastx):
    """`omnipos precompute reads --engine ray --address HOST:PORT` from another process joins this module's Ray
    as it would a cluster's head node. First in this module: a new driver's job starts workers of its own (on
    2 CPUs Ray first ends this process's idle workers to make room, which took longer than starting fresh)."""
    files = [fastx(tmp_path / "a.fq", 25, 1), fastx(tmp_path / "b.fq", 15, 2)]
    address = ray.get_runtime_context().gcs_address
    run = subprocess.run([sys.executable, "-m", "omnipos", "precompute", "reads", *map(str, files),
                          "--out", str(tmp_path / "out"), "--engine", "ray", "--address", address,
                          "--num-cpus", "1", "--shard-size", "10", "--no-progress"],
                         capture_output=True, text=True, timeout=180, env=os.environ.copy(), check=False)
    assert run.returncode == 0, run.stderr
    assert "precompute reads: 40 items in 5 shards (5 computed, 0 of 2 units resumed)" in run.stdout
    assert load_reads(tmp_path / "out")["names"] == [f"a_{i}" for i in range(25)] + [f"b_{i}" for i in range(15)]


def test_graphs_on_ray_equal_local_and_precompute(tmp_path, graphs, expected, same_graphs, transform):
    on_ray = precompute_graphs(graphs, tmp_path / "ray", transform(), engine="ray", shard_size=7,
                               progress=False)
    assert on_ray.shards == 8 and on_ray.items_computed == 53
    local = precompute_graphs(graphs, tmp_path / "local", transform(), shard_size=25, progress=False)
    assert local.shards == 3
    same_graphs(load_graphs(tmp_path / "ray"), expected)
    same_graphs(load_graphs(tmp_path / "local"), expected)
    files = [tmp_path / "a.pt", tmp_path / "b.pt"]
    torch.save(graphs[:33], files[0])
    torch.save(graphs[33:], files[1])
    precompute_graphs(files, tmp_path / "files", transform(), engine="ray", shard_size=10, progress=False)
    same_graphs(load_graphs(tmp_path / "files"), expected)


def test_reads_on_ray_equal_local_and_featurize(tmp_path, fastx):
    files = [fastx(tmp_path / "a.fq.gz", 120, 1), fastx(tmp_path / "b.fq", 45, 2), fastx(tmp_path / "c.fq.gz", 80, 3)]
    precompute_reads(files, tmp_path / "ray", dim=4, engine="ray", shard_size=40, progress=False)
    precompute_reads(files, tmp_path / "local", dim=4, shard_size=1000, progress=False)
    everything = tmp_path / "all.fq"
    everything.write_bytes(b"".join(gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()
                                    for f in files))
    expected = featurize_file(everything, tmp_path / "all.pt", dim=4, progress=False)
    for out in ("ray", "local"):
        got = load_reads(tmp_path / out)
        assert got["names"] == expected["names"]
        for key in ("tokens", "mask", "lengths", "qualities", "positional"):
            assert torch.equal(got[key], expected[key]), (out, key)


def test_meds_on_ray_equal_local_and_from_parquet(tmp_path, meds_root):
    root = meds_root(tmp_path / "meds", seed=7)
    precompute_meds(root, tmp_path / "ray", engine="ray", shard_size=2, progress=False)
    precompute_meds(root, tmp_path / "local", shard_size=100, progress=False)
    expected = EventBatch.from_parquet(root / "data")
    for out in ("ray", "local"):
        got = load_meds(tmp_path / out)
        assert got.subjects == expected.subjects and got.vocab == expected.vocab
        for key in ("times", "codes", "mask"):
            assert torch.equal(getattr(got, key), getattr(expected, key)), (out, key)
        assert torch.equal(got.values.nan_to_num(-9.0), expected.values.nan_to_num(-9.0))


def test_resume_after_an_interrupted_ray_run(tmp_path, graphs, expected, same_graphs, transform):
    """Ctrl-C in the driver as the first shard comes back: the job stops; the shards finished by then (recorded
    by the driver, or left by their workers beside the shards) are kept, the resumed run does the rest."""

    def interrupt(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        precompute_graphs(graphs, tmp_path, transform(), engine="ray", shard_size=6, progress=interrupt)
    resumed = precompute_graphs(graphs, tmp_path, transform(), engine="ray", shard_size=6, progress=False)
    assert resumed.units_resumed >= 1 and resumed.units_resumed + resumed.shards_computed == 9
    same_graphs(load_graphs(tmp_path), expected)


def test_bad_input_file_fails_alone_on_ray(tmp_path, fastx):
    good = fastx(tmp_path / "good.fq", 30, 1)
    bad = tmp_path / "bad.fq"
    bad.write_bytes(b"@r1\nACGT\n+\nIIII\n@r2\nACGX\n+\nIIII\n")
    with pytest.raises(PrecomputeError) as info:
        precompute_reads([good, bad], tmp_path / "out", engine="ray", progress=False)
    assert f"{bad}: record 2 ('r2')" in str(info.value)
    assert info.value.result.items == 30 and info.value.result.failures[0][0] == str(bad)


def test_an_address_while_ray_runs_here_is_refused(tmp_path, graphs, transform):
    address = ray.get_runtime_context().gcs_address
    with pytest.raises(ValueError, match="Ray is already initialised in this process"):
        precompute_graphs(graphs[:3], tmp_path, transform(), engine="ray", address=address, progress=False)


def test_a_worker_killed_mid_shard_is_retried(tmp_path, graphs, same_graphs):
    """The worker dies while encoding the second shard of a file (the first is already written); Ray retries
    the unit on a fresh worker and the output equals a clean run's."""
    files = [tmp_path / "a.pt", tmp_path / "b.pt"]
    torch.save(graphs[:30], files[0])
    torch.save(graphs[30:], files[1])
    marker = tmp_path / "died"
    killer = Compose([DieOnce(str(marker), victim=12.0), AddLaplacianPE(3), AddRandomWalkPE(4)])
    result = precompute_graphs(files, tmp_path / "out", killer, engine="ray", shard_size=10, progress=False)
    assert marker.exists()  # the worker did die
    assert result.items == 53 and result.shards == 6 and not result.failures
    clean = precompute(graphs, killer, progress=False)  # marker present: DieOnce is the identity now
    same_graphs(load_graphs(tmp_path / "out"), clean)


def test_a_quiet_successful_run(tmp_path, meds_root, capfd):
    """No Ray internals on stderr during a successful job. (Issue 23 saw Ray Data print ERROR ... KeyError:
    'dataset_...' tracebacks in a MEDS run; not reproduced on this machine with Ray 2.60, where this passed before
    too. Jobs no longer use Ray Data; this guards against any such output returning.)"""
    root = meds_root(tmp_path / "meds")
    capfd.readouterr()
    precompute_meds(root, tmp_path / "out", engine="ray", progress=False)
    err = capfd.readouterr().err
    assert "ERROR" not in err and "Traceback" not in err, err


def test_a_unit_that_always_kills_its_worker_is_a_failed_unit(tmp_path, graphs, same_graphs, monkeypatch):
    """Ray retries a dead worker's unit MAX_RETRIES times (here 0), then that unit is a failed unit of
    PrecomputeError (not a raw WorkerCrashedError); the other units finish and are recorded, and a rerun resumes.
    Last in this module: it leaves Ray respawning a worker."""
    monkeypatch.setattr(engine_module, "MAX_RETRIES", 0)
    marker, armed = tmp_path / "died", tmp_path / "armed"
    armed.touch()
    killer = Compose([DieOnce(str(marker), victim=45.0, armed=str(armed)), AddLaplacianPE(3), AddRandomWalkPE(4)])
    with pytest.raises(PrecomputeError) as info:
        precompute_graphs(graphs, tmp_path / "out", killer, engine="ray", shard_size=10, progress=False)
    message = str(info.value)
    assert "1 of 6 units failed (the other 5 finished and are recorded; run the same call again" in message
    assert "unit 4, graphs[40:50]: its Ray worker died once (WorkerCrashedError: " in message
    assert marker.exists() and info.value.result.items == 43
    with pytest.raises(ValueError, match="unfinished"):
        load_graphs(tmp_path / "out")
    armed.unlink()
    resumed = precompute_graphs(graphs, tmp_path / "out", killer, engine="ray", shard_size=10, progress=False)
    assert resumed.units_resumed == 5 and resumed.shards_computed == 1
    same_graphs(load_graphs(tmp_path / "out"), precompute(graphs, killer, progress=False))


def test_a_dead_workers_message_loses_terminal_colour_codes():
    exc = RuntimeError("\n\x1b[36mray::_ray_unit()\x1b[39m (pid=7, ip=10.0.0.1)\n  File x\n")
    assert engine_module.first_line_plain(exc) == "ray::_ray_unit() (pid=7, ip=10.0.0.1)"
    assert engine_module.first_line_plain(RuntimeError("")) == ""
