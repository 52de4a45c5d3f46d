"""The manifest and atomic shard writes."""

import hashlib
import json
import os

import pytest

from omnipos.scale.manifest import (
    MANIFEST_NAME,
    Manifest,
    fingerprint,
    read_verified,
    write_atomic,
)
from omnipos.scale.shards import UnitRunner

JOB = {"kind": "reads", "inputs": {"files": ["a"]}, "shard_size": 10, "options": {}}


def test_write_atomic_renames_a_complete_file(tmp_path):
    record = write_atomic(tmp_path / "x.bin", b"hello")
    assert (tmp_path / "x.bin").read_bytes() == b"hello"
    assert record == {"name": "x.bin", "bytes": 5, "sha256": hashlib.sha256(b"hello").hexdigest()}
    assert os.listdir(tmp_path) == ["x.bin"]


def test_write_atomic_leaves_nothing_half_written(tmp_path, monkeypatch):
    (tmp_path / "x.bin").write_bytes(b"old")

    def dies(*args):
        raise KeyboardInterrupt  # the process is interrupted between the write and the rename

    monkeypatch.setattr(os, "replace", dies)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "x.bin", b"new content")
    assert os.listdir(tmp_path) == ["x.bin"] and (tmp_path / "x.bin").read_bytes() == b"old"


def test_unit_runner_records_and_discards(tmp_path):
    def failing(unit, payload, writer):
        writer.write(b"a", 1)
        writer.write(b"bb", 2)
        raise ValueError("x.fq: record 4: bad letter")

    runner = UnitRunner("reads", str(tmp_path), "parquet", ["x.fq"] * 9, ["id"] * 9, failing)
    assert runner(7, None) == {"unit": 7, "error": "x.fq: record 4: bad letter"}
    assert not list(tmp_path.iterdir())  # the shards of a failed unit are removed

    def body(unit, payload, writer):
        writer.write(b"a", 1)
        writer.write(payload, 2)

    done = UnitRunner("reads", str(tmp_path), "parquet", ["x.fq"] * 9, ["id"] * 9, body)(7, b"bb")
    assert [s["name"] for s in done["shards"]] == ["reads-00007-00000.parquet", "reads-00007-00001.parquet"]
    assert [s["items"] for s in done["shards"]] == [1, 2] and done["items"] == 3 and done["seconds"] >= 0
    assert (done["source"], done["input"]) == ("x.fq", "id")
    assert json.loads((tmp_path / ".reads-00007.done.json").read_text()) == done  # the worker's copy
    broken = UnitRunner("reads", str(tmp_path), "parquet", ["y"] * 9, [None] * 9, lambda u, p, w: 1 / 0)
    assert broken(8, None) == {"unit": 8, "error": "ZeroDivisionError: division by zero"}


def unit(tmp_path, number, identity=None, content=b"abc"):
    shard = write_atomic(tmp_path / f"reads-{number:05d}-00000.parquet", content)
    return {"unit": number, "source": "x", "items": 3, "shards": [{**shard, "items": 3}], "input": identity}


def test_manifest_records_and_reads_back(tmp_path):
    manifest = Manifest.open(tmp_path, JOB, [None, None], resume=True, overwrite=False)
    manifest.set_meta({"config": {"dim": 4}})
    manifest.record(unit(tmp_path, 0))
    with pytest.raises(ValueError, match=r"unfinished \(1 of 2 units done\)"):
        Manifest.read(tmp_path, "reads")
    manifest.record({"unit": 1, "source": "b", "items": 0, "shards": []})
    manifest.finish()
    again = Manifest.read(tmp_path, "reads")
    assert again.meta == {"config": {"dim": 4}} and again.complete == {"items": 3, "shards": 1}
    assert [s["name"] for s in again.shards()] == ["reads-00000-00000.parquet"]
    assert read_verified(tmp_path, again.shards()[0]) == b"abc"
    lines = [json.loads(line) for line in (tmp_path / MANIFEST_NAME).read_text().splitlines()]
    assert lines[0]["header"]["fingerprint"] == fingerprint(JOB) and lines[-1] == {"complete": again.complete}
    with pytest.raises(ValueError, match="holds precomputed reads, not meds"):
        Manifest.read(tmp_path, "meds")


def test_a_torn_last_line_is_an_unfinished_unit(tmp_path):
    manifest = Manifest.open(tmp_path, JOB, [None, None], resume=True, overwrite=False)
    manifest.record(unit(tmp_path, 0))
    with open(tmp_path / MANIFEST_NAME, "a") as handle:
        handle.write('{"unit": 1, "source": "b", "ite')  # the driver died mid-line
    resumed = Manifest.open(tmp_path, JOB, [None, None], resume=True, overwrite=False)
    assert sorted(resumed.units) == [0]
    (tmp_path / MANIFEST_NAME).write_text('{"header": {}}\nnot json\n{"unit": 0}\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        Manifest.read(tmp_path, "reads")


def test_an_unreadable_manifest_needs_overwrite(tmp_path):
    (tmp_path / MANIFEST_NAME).write_text("garbage\n")
    with pytest.raises(ValueError, match="is unreadable; pass overwrite=True"):
        Manifest.open(tmp_path, JOB, [None], resume=True, overwrite=False)
    Manifest.open(tmp_path, JOB, [None], resume=True, overwrite=True)
    assert Manifest._load(tmp_path).header["fingerprint"] == fingerprint(JOB)


def test_another_kind_is_named(tmp_path):
    Manifest.open(tmp_path, JOB, [None], resume=True, overwrite=False)
    with pytest.raises(ValueError, match="it precomputed 'reads', this job is 'meds'"):
        Manifest.open(tmp_path, {**JOB, "kind": "meds"}, [None], resume=True, overwrite=False)


def test_resume_drops_units_whose_files_changed(tmp_path):
    manifest = Manifest.open(tmp_path, JOB, [None, None], resume=True, overwrite=False)
    for number in (0, 1):
        manifest.record(unit(tmp_path, number))
    (tmp_path / "reads-00001-00000.parquet").write_bytes(b"abcd")  # a different size: not this job's shard
    (tmp_path / ".reads-00002-00000.parquet.tmp-1-deadbeef").write_bytes(b"half")
    resumed = Manifest.open(tmp_path, JOB, [None, None], resume=True, overwrite=False)
    assert sorted(resumed.units) == [0]
    assert not list(tmp_path.glob(".*tmp-*"))  # leftovers of killed writers are cleaned up


def test_resume_redoes_units_whose_input_changed(tmp_path):
    manifest = Manifest.open(tmp_path, JOB, ["v1", "v1"], resume=True, overwrite=False)
    for number in (0, 1):
        manifest.record(unit(tmp_path, number, "v1"))
    resumed = Manifest.open(tmp_path, JOB, ["v1", "v2"], resume=True, overwrite=False)
    assert sorted(resumed.units) == [0] and resumed.units[0]["input"] == "v1"
    assert sorted(p.name for p in tmp_path.glob("reads-*")) == ["reads-00000-00000.parquet"]


def test_resume_adopts_units_the_driver_did_not_record(tmp_path):
    """A worker finished unit 1 and left its record, but the driver died before recording it."""
    Manifest.open(tmp_path, JOB, ["a", "b", "c"], resume=True, overwrite=False).record(unit(tmp_path, 0, "a"))
    (tmp_path / ".reads-00001.done.json").write_text(json.dumps(unit(tmp_path, 1, "b")))
    (tmp_path / ".reads-00002.done.json").write_text(json.dumps(unit(tmp_path, 2, "old")))  # stale: input changed
    resumed = Manifest.open(tmp_path, JOB, ["a", "b", "c"], resume=True, overwrite=False)
    assert sorted(resumed.units) == [0, 1]
    assert not (tmp_path / "reads-00002-00000.parquet").exists() and not list(tmp_path.glob(".*.done.json"))
    assert sorted(Manifest._load(tmp_path).units) == [0, 1]  # adopted into the manifest file itself
