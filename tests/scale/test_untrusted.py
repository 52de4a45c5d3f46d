"""What a job reads back from its output folder is untrusted: names outside the folder, damaged manifests and
other people's files are refused or left alone, never read or deleted."""

import json
from pathlib import PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.scale import load_reads, precompute_reads
from omnipos.scale.manifest import (
    MANIFEST_NAME,
    ForeignNameError,
    Manifest,
    is_own_temporary,
    is_shard_name,
    write_atomic,
)

JOB = {"kind": "reads", "inputs": {"files": ["a"]}, "shard_size": 10, "options": {}}


def finished(folder, identities=("v1", "v1")):
    """A finished two-unit job in ``folder`` (one shard per unit)."""
    manifest = Manifest.open(folder, JOB, list(identities), resume=True, overwrite=False)
    for number, identity in enumerate(identities):
        shard = write_atomic(folder / f"reads-{number:05d}-00000.parquet", b"abc%d" % number)
        manifest.record({"unit": number, "source": "x", "items": 3, "shards": [{**shard, "items": 3}],
                         "input": identity})
    manifest.finish()
    return manifest


def hostile_names(tmp_path):
    """``(name, victim)``: a shard name pointing outside the folder, and the file it would reach."""
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "precious.txt"
    victim.write_text("keep me")
    return [("../outside/precious.txt", victim), (str(victim), victim), ("a/../../outside/precious.txt", victim)]


def rename_shard(folder, unit, name):
    """Edit the manifest so that unit ``unit``'s shard is called ``name``."""
    path = folder / MANIFEST_NAME
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        if line.get("unit") == unit:
            line["shards"][0]["name"] = name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.mark.parametrize("case", [0, 1, 2], ids=["dotdot", "absolute", "nested"])
def test_a_manifest_naming_a_file_outside_the_folder_is_refused(tmp_path, case):
    name, victim = hostile_names(tmp_path)[case]
    folder = tmp_path / "out"
    folder.mkdir()
    finished(folder)
    rename_shard(folder, 1, name)
    pattern = rf"manifest.jsonl: line \d+: unit 1: shard name '{name}' is not a file this job writes"
    other_job = {**JOB, "shard_size": 20}
    with pytest.raises(ForeignNameError, match=pattern):  # overwrite=True would delete what the manifest lists
        Manifest.open(folder, other_job, ["v1", "v1"], resume=True, overwrite=True)
    with pytest.raises(ValueError, match=pattern):  # a resume whose input changed would delete the unit's shards
        Manifest.open(folder, JOB, ["v1", "v2"], resume=True, overwrite=False)
    with pytest.raises(ValueError, match=pattern):  # a loader would read it
        Manifest.read(folder, "reads")
    assert victim.read_text() == "keep me"
    assert (folder / "reads-00000-00000.parquet").exists()  # nothing deleted before the check either


@pytest.mark.parametrize("case", [0, 1, 2], ids=["dotdot", "absolute", "nested"])
def test_a_worker_record_naming_a_file_outside_the_folder_is_refused(tmp_path, case):
    name, victim = hostile_names(tmp_path)[case]
    folder = tmp_path / "out"
    folder.mkdir()
    Manifest.open(folder, JOB, ["v1", "v1"], resume=True, overwrite=False)
    done = folder / ".reads-00001.done.json"
    done.write_text(json.dumps({"unit": 1, "source": "x", "items": 3, "input": "v0", "shards": [
        {"name": name, "items": 3, "bytes": 7, "sha256": "0" * 64}]}))
    with pytest.raises(ForeignNameError, match=rf"\.reads-00001\.done\.json: unit 1: shard name '{name}'"):
        Manifest.open(folder, JOB, ["v1", "v1"], resume=True, overwrite=False)  # input changed: would delete
    assert victim.read_text() == "keep me"


def test_another_units_shard_name_is_foreign(tmp_path):
    """A plain name, but not one that unit writes: deleting it would remove another unit's output."""
    finished(tmp_path)
    rename_shard(tmp_path, 1, "reads-00000-00000.parquet")
    with pytest.raises(ForeignNameError, match="unit 1: shard name 'reads-00000-00000.parquet'"):
        Manifest.open(tmp_path, JOB, ["v1", "v2"], resume=True, overwrite=False)
    assert (tmp_path / "reads-00000-00000.parquet").exists()


def test_overwrite_through_the_api_keeps_files_outside(tmp_path, fastx):
    """The issue's reproduction: precompute_reads(..., overwrite=True) over a manifest naming ../x."""
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    reads = fastx(tmp_path / "a.fq", 7, 1)
    precompute_reads([reads], tmp_path / "out", progress=False)
    rename_shard(tmp_path / "out", 0, "../precious.txt")
    with pytest.raises(ValueError, match="shard name '../precious.txt' is not a file this job writes"):
        precompute_reads([reads], tmp_path / "out", dim=8, overwrite=True, progress=False)
    with pytest.raises(ValueError, match="shard name '../precious.txt'"):
        load_reads(tmp_path / "out")
    assert victim.read_text() == "keep me"


MALFORMED = {
    "header is a list": '{"header": [1, 2]}\n',
    "job is a number": '{"header": {"format": "omnipos.scale/1", "job": 3, "fingerprint": "f", "units": 1}}\n',
    "a line is a string": None,
    "units is text": '{"header": {"format": "omnipos.scale/1", "job": {"kind": "reads"}, "fingerprint": "f", '
                     '"units": "one"}}\n',
    "shards is a string": {"unit": 0, "source": "x", "items": 1, "shards": "reads-00000-00000.parquet"},
    "a shard is a number": {"unit": 0, "source": "x", "items": 1, "shards": [5]},
    "a shard lacks its size": {"unit": 0, "source": "x", "items": 1,
                               "shards": [{"name": "reads-00000-00000.parquet", "items": 1}]},
    "unit is text": {"unit": "zero", "source": "x", "items": 1, "shards": []},
    "unit past the end": {"unit": 9, "source": "x", "items": 1, "shards": []},
    "items is null": {"unit": 0, "source": "x", "items": None, "shards": []},
    "complete is a number": {"complete": 5},
    "meta is a list": {"meta": [1]},
    "unknown record": {"what": 1},
    "not UTF-8": b'{"unit": "\xff\xfe"}',
}


def write_malformed(folder, entry):
    header = {"header": {"format": "omnipos.scale/1", "job": JOB, "fingerprint": "f", "units": 1}}
    path = folder / MANIFEST_NAME
    if isinstance(entry, str) and entry.startswith("{"):
        path.write_text(entry)
    elif isinstance(entry, bytes):
        path.write_bytes(json.dumps(header).encode() + b"\n" + entry + b"\n{}\n")
    else:
        line = json.dumps(entry) if entry is not None else '"just a string"'
        path.write_text(json.dumps(header) + "\n" + line + "\n")


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_manifest_is_a_value_error_or_replaced_under_overwrite(tmp_path, name):
    write_malformed(tmp_path, MALFORMED[name])
    with pytest.raises(ValueError, match=r"manifest.jsonl"):
        Manifest.read(tmp_path, "reads")
    with pytest.raises(ValueError, match="is unreadable; pass overwrite=True"):
        Manifest.open(tmp_path, JOB, ["v1"], resume=True, overwrite=False)
    replaced = Manifest.open(tmp_path, JOB, ["v1"], resume=True, overwrite=True)
    assert replaced.units == {} and Manifest._load(tmp_path).header["job"] == JOB


def test_only_the_jobs_own_temporaries_are_deleted(tmp_path):
    own = [".reads-00002-00000.parquet.tmp-17-deadbeef", ".manifest.jsonl.tmp-3-0123abcd",
           "..reads-00004.done.json.tmp-9-00ff00ff", ".reads-00003.done.json"]
    theirs = ["notes.tmp-1", ".data.csv.tmp-17-deadbeef", "my.tmp-draft.txt", ".reads-00002-00000.parquet.tmp-x",
              "reads-00009-00000.parquet.bak", ".meds-00001.done.json"]
    for name in own + theirs:
        (tmp_path / name).write_text("x")
    Manifest.open(tmp_path, JOB, ["v1"], resume=True, overwrite=False)
    left = sorted(p.name for p in tmp_path.iterdir() if p.name not in (MANIFEST_NAME, ".omnipos.lock"))
    assert left == sorted(theirs)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=40), st.from_regex(r"\.?\.?(reads|graphs)-[0-9/.]{5,8}-[0-9a-z/.]{5,8}\.[a-z./]{1,8}"
                                                    r"(\.tmp-[0-9]+-[0-9a-f]{8})?", fullmatch=True)))
def test_an_accepted_name_is_a_plain_file_in_the_folder(name):
    """Whatever the text, a name the job would read, write or delete never leaves the folder."""
    for accepted in (is_shard_name(name, "reads"), is_shard_name(name, "graphs", 3), is_own_temporary(name, "reads")):
        if accepted:
            assert "/" not in name and "\\" not in name and "\x00" not in name and name not in (".", "..")
            assert PurePosixPath(name).name == name and not PurePosixPath(name).is_absolute()
