"""A job's workers die with its driver: after a ``kill -9`` of the driver in the middle of a unit, none of its
processes survives, and what they were writing never lands in the folder that a second run holds meanwhile."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.orphan_probes import sleepy_unit, small_graphs

import omnipos
from omnipos.graph import AddRandomWalkPE, precompute
from omnipos.scale import load_graphs, precompute_graphs
from omnipos.scale.manifest import Manifest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

DRIVER = """
import sys
from support.orphan_probes import Hold, small_graphs
from omnipos.scale import precompute_graphs
precompute_graphs(small_graphs(), sys.argv[1], Hold(sys.argv[2], 1000.0), shard_size=10, num_cpus=2, progress=False)
"""


def descendants(pid: int) -> set[int]:
    """The live (not zombie) processes below ``pid``, from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    living = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            living.add(pid)
    return living


def wait_for(condition, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


def test_kill_9_of_the_driver_takes_its_workers_and_their_writes_with_it(tmp_path):
    """Before, the fork server's workers outlived the driver, finished their unit once released and overwrote
    the shards (and unit records) of the run that took the folder meanwhile."""
    out, gate = tmp_path / "out", tmp_path / "gate"
    gate.mkdir()
    src = Path(omnipos.__file__).parents[1]
    tests = Path(__file__).parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(tests), os.environ.get("PYTHONPATH", "")])}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(out), str(gate)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: len(list(gate.glob("started-*"))) == 2 or driver.poll() is not None, 120), \
            "the driver's workers did not start their units"
        assert driver.poll() is None, driver.stderr.read().decode()[-3000:]
        workers = {int(p.read_text()) for p in gate.glob("started-*")}
        family = descendants(driver.pid)
        assert workers <= family
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    assert wait_for(lambda: not alive(workers), 5), f"workers of the killed driver survive: {alive(workers)}"
    # its fork server too, and then the resource tracker (which exits once nobody holds its pipe)
    assert wait_for(lambda: not alive(family), 10), f"processes of the killed driver survive: {alive(family)}"
    # a second run takes the folder (another job: overwrite=True) and finishes
    second = AddRandomWalkPE(4)
    graphs = small_graphs()
    precompute_graphs(graphs, out, second, shard_size=10, num_cpus=1, overwrite=True, progress=False)
    (gate / "release").touch()  # a surviving worker would now finish its unit
    assert wait_for(lambda: not alive(workers), 30)
    time.sleep(0.5)
    assert len(Manifest.read(out, "graphs").shards()) == 2
    got = load_graphs(out)  # verifies every shard against the second run's manifest
    expected = precompute(graphs, second, progress=False)
    assert [g.x.tolist() for g in got] == [g.x.tolist() for g in expected]
    assert [g.random_walk_pe.tolist() for g in got] == [g.random_walk_pe.tolist() for g in expected]
    assert not list(out.glob(".graphs-*.done.json"))  # no unit record of the dead run landed either
    assert [p.name for p in out.glob(".omnipos-*")] == []  # the dead run's staging folder is gone


def test_a_worker_exits_when_its_driver_is_gone_without_a_parent_death_signal():
    """The portable fallback (no prctl, or a worker whose parent is not the driver): a worker watches a pipe from
    its driver and exits the moment it closes, in the middle of a unit."""
    from omnipos.scale.workers import DRIVER_GONE_EXIT, _context, _serialize, _Worker

    worker = _Worker(_context(), _serialize(sleepy_unit)[0])
    try:
        worker.connection.send((0, 60.0, False))
        time.sleep(0.5)
        assert worker.process.is_alive()
        worker.alive.close()  # what the driver's death does to its end
        worker.process.join(5)
        assert worker.process.exitcode == DRIVER_GONE_EXIT
    finally:
        worker.stop(kill=True)


def test_a_unit_is_not_moved_into_a_folder_its_run_no_longer_holds(tmp_path):
    """The check a worker makes before each rename: the lock must still be held, and by its run (the token in the
    lock file); otherwise the unit's files stay in its staging folder, out of the folder's names."""
    from omnipos.scale.lock import LOCK_NAME, LockLost, check_held, hold_folder
    from omnipos.scale.shards import UnitRunner

    def body(unit, payload, writer):
        writer.write(b"shard", 1)

    out = tmp_path / "out"
    with hold_folder(out) as held:
        held.staging.mkdir()
        runner = UnitRunner("reads", str(out), "parquet", ["x"], [None], body, staging=str(held.staging),
                            token=held.token, driver_pid=-1)
        assert runner(0, None)["items"] == 1  # held by this run: moved in
        (out / "reads-00000-00000.parquet").unlink()
        (out / ".reads-00000.done.json").unlink()
        other = UnitRunner("reads", str(out), "parquet", ["x"], [None], body, staging=str(held.staging),
                           token="0" * 32, driver_pid=-1)
        record = other(0, None)
        assert "held by another run now" in record["error"]
    record = runner(0, None)  # the run ended: its staging folder is gone
    assert "staging folder" in record["error"] and "no longer holds the folder" in record["error"]
    held.staging.mkdir()  # and with it back, the lock is free: nothing is moved in either
    assert "is no longer held: the run that started this unit ended" in runner(0, None)["error"]
    with hold_folder(out) as second:  # another run holds the folder now: the first run's unit moves nothing in
        second.staging.mkdir()
        assert "no longer hold" in runner(0, None)["error"]
        held.staging.mkdir()  # even with its staging folder back, the lock names the other run
        assert "held by another run now" in runner(0, None)["error"]
    assert not (out / "reads-00000-00000.parquet").exists() and not (out / ".reads-00000.done.json").exists()
    with pytest.raises(LockLost):
        check_held(out, held.token)
    assert (out / LOCK_NAME).exists()
