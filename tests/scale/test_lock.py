"""One run per output folder: a second run is refused at once, naming the first; a crashed run leaves no lock."""

import os
import signal
import socket
import subprocess
import sys

import pytest

import omnipos.scale.lock as lock_module
from omnipos.scale import load_reads, precompute_reads
from omnipos.scale.lock import LOCK_NAME, hold_folder

HOLDER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("lock", sys.argv[2])  # the module alone: no torch to import
lock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lock)
with lock.hold_folder(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_second_run_is_refused_while_the_first_runs(tmp_path, fastx):
    """The second run starts while the first is between two units (a lock is per open file, so a second run in
    this process contends as another process would; the two-process case is the next test); it is refused at
    once, even with overwrite=True, and the first finishes undisturbed, with the output of an uncontested run."""
    files = [fastx(tmp_path / f"{name}.fq", 9, seed) for seed, name in enumerate("abc")]
    refusals = []

    def progress(done, total):
        if not refusals:  # the first unit is recorded: the job holds the folder and has work left
            for overwrite in (False, True):
                with pytest.raises(ValueError) as refused:
                    precompute_reads(files[:1], tmp_path / "out", dim=8, overwrite=overwrite, progress=False)
                refusals.append(str(refused.value))

    result = precompute_reads(files, tmp_path / "out", progress=progress)
    for message in refusals:
        assert f"is in use by another run (pid {os.getpid()} on {socket.gethostname()}, started " in message
    assert result.units == 3 and not result.failures
    precompute_reads(files, tmp_path / "clean", progress=False)
    first, clean = load_reads(tmp_path / "out"), load_reads(tmp_path / "clean")
    assert first["names"] == clean["names"] and first["tokens"].equal(clean["tokens"])
    assert first["positional"].equal(clean["positional"])


def test_the_lock_names_its_holder_and_outlives_no_crash(tmp_path, fastx):
    reads = fastx(tmp_path / "a.fq", 5, 0)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "out"), lock_module.__file__],
                              stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ValueError, match=rf"is in use by another run \(pid {holder.pid} on "):
            precompute_reads([reads], tmp_path / "out", progress=False)
        with pytest.raises(ValueError, match="in use by another run"), hold_folder(tmp_path / "out"):
            pass
        assert not (tmp_path / "out" / "manifest.jsonl").exists()  # refused before reading or writing anything
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: no cleanup runs
        holder.wait(timeout=30)
    assert (tmp_path / "out" / LOCK_NAME).exists()  # the file stays; the lock died with its process
    assert precompute_reads([reads], tmp_path / "out", progress=False).items == 5
    with hold_folder(tmp_path / "out"):  # and a finished run released it too
        pass


def test_the_folder_must_be_a_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a folder"), hold_folder(tmp_path / "file"):
        pass
