"""The manifest and atomic shard writes."""

import hashlib
import json
import os

import pytest

from omnipos.scale.manifest import MANIFEST_NAME, Manifest, fingerprint, read_verified, write_atomic
from omnipos.scale.shards import ShardWriter, run_unit

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


def test_shard_writer_names_and_discards(tmp_path):
    writer = ShardWriter(tmp_path, "reads", 7, "parquet")

    def body(w):
        w.write(b"a", 1)
        w.write(b"bb", 2)
        raise ValueError("x.fq: record 4: bad letter")

    assert run_unit(writer, body) == {"unit": 7, "error": "x.fq: record 4: bad letter"}
    assert not list(tmp_path.iterdir())  # the shards of a failed unit are removed
    done = run_unit(ShardWriter(tmp_path, "reads", 7, "parquet"), lambda w: (w.write(b"a", 1), w.write(b"bb", 2)))
    assert [s["name"] for s in done["shards"]] == ["reads-00007-00000.parquet", "reads-00007-00001.parquet"]
    assert [s["items"] for s in done["shards"]] == [1, 2]
    other = run_unit(ShardWriter(tmp_path, "reads", 8, "parquet"), lambda w: 1 / 0)
    assert other == {"unit": 8, "error": "ZeroDivisionError: division by zero"}


def test_manifest_records_and_reads_back(tmp_path):
    manifest = Manifest.open(tmp_path, JOB, 2, resume=True, overwrite=False)
    manifest.set_meta({"config": {"dim": 4}})
    shard = write_atomic(tmp_path / "reads-00000-00000.parquet", b"abc")
    manifest.record(0, "a", [{**shard, "items": 3}])
    with pytest.raises(ValueError, match=r"unfinished \(1 of 2 units done\)"):
        Manifest.read(tmp_path, "reads")
    manifest.record(1, "b", [])
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
    manifest = Manifest.open(tmp_path, JOB, 2, resume=True, overwrite=False)
    shard = write_atomic(tmp_path / "reads-00000-00000.parquet", b"abc")
    manifest.record(0, "a", [{**shard, "items": 3}])
    with open(tmp_path / MANIFEST_NAME, "a") as handle:
        handle.write('{"unit": 1, "source": "b", "ite')  # the driver died mid-line
    resumed = Manifest.open(tmp_path, JOB, 2, resume=True, overwrite=False)
    assert sorted(resumed.units) == [0]
    (tmp_path / MANIFEST_NAME).write_text('{"header": {}}\nnot json\n{"unit": 0}\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        Manifest.read(tmp_path, "reads")


def test_an_unreadable_manifest_needs_overwrite(tmp_path):
    (tmp_path / MANIFEST_NAME).write_text("garbage\n")
    with pytest.raises(ValueError, match="is unreadable; pass overwrite=True"):
        Manifest.open(tmp_path, JOB, 1, resume=True, overwrite=False)
    Manifest.open(tmp_path, JOB, 1, resume=True, overwrite=True)
    assert Manifest._load(tmp_path).header["fingerprint"] == fingerprint(JOB)


def test_another_kind_is_named(tmp_path):
    Manifest.open(tmp_path, JOB, 1, resume=True, overwrite=False)
    with pytest.raises(ValueError, match="it precomputed 'reads', this job is 'meds'"):
        Manifest.open(tmp_path, {**JOB, "kind": "meds"}, 1, resume=True, overwrite=False)


def test_resume_drops_units_whose_files_changed(tmp_path):
    manifest = Manifest.open(tmp_path, JOB, 2, resume=True, overwrite=False)
    for unit in (0, 1):
        shard = write_atomic(tmp_path / f"reads-0000{unit}-00000.parquet", b"abc")
        manifest.record(unit, "x", [{**shard, "items": 3}])
    (tmp_path / "reads-00001-00000.parquet").write_bytes(b"abcd")  # a different size: not this job's shard
    (tmp_path / ".reads-00002-00000.parquet.tmp-1-deadbeef").write_bytes(b"half")
    resumed = Manifest.open(tmp_path, JOB, 2, resume=True, overwrite=False)
    assert sorted(resumed.units) == [0]
    assert not list(tmp_path.glob(".*tmp-*"))  # leftovers of killed writers are cleaned up
