"""Every file read back from an output folder is checked before it is read (issue 36): a regular file (no FIFO,
device, folder or symbolic link), its size against the manifest by ``fstat`` before a byte is read, its checksum,
then its structure (the manifest's item counts, each shard listed once, lengths against the data); each failure a
ValueError naming the file and the entry. Tests that could hang on a regression (a FIFO) run under a deadline."""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

import omnipos
from omnipos.scale import (
    ShardedMedsDataset,
    ShardedReadsDataset,
    load_meds,
    load_reads,
    precompute_meds,
    precompute_reads,
)
from omnipos.scale.manifest import (
    MANIFEST_NAME,
    Manifest,
    NotRegularFileError,
    open_regular,
    read_verified,
    sha256_bytes,
)

DEADLINE_S = 30


def within_deadline(call, folder):
    """Run ``call()`` in a thread; return what it raised (None if nothing). A call still running after
    ``DEADLINE_S`` (blocked on a FIFO) fails the test instead of hanging the suite; its FIFOs under ``folder``
    are then opened for writing once, which ends the blocked read."""
    outcome = {}

    def run():
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    if thread.is_alive():
        for path in Path(folder).rglob("*"):
            if stat.S_ISFIFO(os.lstat(path).st_mode):
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass
        thread.join(5)
        pytest.fail(f"{call} still blocked after {DEADLINE_S} s")
    return outcome.get("error")


def expect_error(call, folder, pattern, kind=ValueError):
    error = within_deadline(call, folder)
    assert isinstance(error, kind), f"expected {kind.__name__} matching {pattern!r}, got {error!r}"
    import re

    assert re.search(pattern, str(error)), f"{pattern!r} not in {error}"
    return error


# -- small finished jobs, copied per test ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reads_job(tmp_path_factory, fastx):
    folder = tmp_path_factory.mktemp("reads")
    files = [fastx(folder / f"f{i}.fq", count, seed=40 + i) for i, count in enumerate((17, 12))]
    precompute_reads(files, folder / "out", dim=4, shard_size=7, progress=False, num_cpus=1)
    return folder / "out", files


@pytest.fixture(scope="module")
def meds_job(tmp_path_factory, meds_root):
    folder = tmp_path_factory.mktemp("meds")
    root = meds_root(folder / "root", seed=3, files=(("train", 2),))
    precompute_meds(root, folder / "out", shard_size=3, progress=False, num_cpus=1)
    return folder / "out"


def copy(job, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(job, out)
    return out


def lines(out):
    return [json.loads(line) for line in (out / MANIFEST_NAME).read_text().splitlines()]


def write_lines(out, records):
    (out / MANIFEST_NAME).write_text("".join(json.dumps(r) + "\n" for r in records))


def first_shard(out):
    return Manifest.read(out, lines(out)[0]["header"]["job"]["kind"]).shards()[0]


def replace_shard(out, name, payload, items=None):
    """Put ``payload`` under the shard ``name`` and edit the manifest to match it (size, sha256, and ``items``
    when given): the folder edited consistently, so that only the structure checks can see it."""
    (out / name).write_bytes(payload)
    records = lines(out)
    for record in records:
        for shard in record.get("shards", []):
            if shard["name"] == name:
                shard.update(bytes=len(payload), sha256=sha256_bytes(payload))
                if items is not None:
                    record["items"] += items - shard["items"]
                    shard["items"] = items
    total = sum(r["items"] for r in records if "unit" in r)
    for record in records:
        if "complete" in record:
            record["complete"]["items"] = total
    write_lines(out, records)


def edited_table(out, name, edit):
    """The Parquet bytes of shard ``name`` after ``edit(table) -> table`` (metadata kept unless edited)."""
    import io

    import pyarrow.parquet as pq

    table = edit(pq.read_table(out / name))
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


# -- 1. not a regular file: never opened, never waited on ---------------------------------------------------------
def test_the_door_names_what_a_file_is(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "zero")
    (tmp_path / "folder").mkdir()
    expect_error(lambda: open_regular(tmp_path / "fifo"), tmp_path, r"fifo: the file is a FIFO", NotRegularFileError)
    expect_error(lambda: open_regular(tmp_path / "zero"), tmp_path, r"zero: the file is a symbolic link to '/dev/zero'")
    expect_error(lambda: open_regular(tmp_path / "folder"), tmp_path, r"folder: the file is a folder")
    expect_error(lambda: open_regular(Path("/dev/null")), tmp_path, r"/dev/null: the file is a character device")
    (tmp_path / "plain").write_bytes(b"12345")
    expect_error(lambda: open_regular(tmp_path / "plain", 4, what="shard"), tmp_path,
                 r"plain: the shard has 5 bytes, but the manifest records 4")
    with open_regular(tmp_path / "plain", 5) as handle:
        assert handle.read() == b"12345"


def test_a_fifo_manifest_blocks_no_job_and_no_loader(tmp_path, fastx):
    reads = fastx(tmp_path / "a.fq", 5, seed=1)
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / MANIFEST_NAME)
    pattern = r"manifest.jsonl: the manifest is a FIFO \(named pipe\), not a regular file"
    for overwrite in (False, True):  # not replaced under overwrite either: omnipos did not make it
        expect_error(lambda o=overwrite: precompute_reads([reads], out, shard_size=7, progress=False, num_cpus=1,
                                                          overwrite=o), tmp_path, pattern)
    expect_error(lambda: load_reads(out), tmp_path, pattern)
    expect_error(lambda: ShardedReadsDataset(out), tmp_path, pattern)
    assert stat.S_ISFIFO(os.lstat(out / MANIFEST_NAME).st_mode)


def test_a_manifest_linked_elsewhere_is_not_followed(tmp_path, reads_job):
    out = copy(reads_job[0], tmp_path)
    (tmp_path / "elsewhere.jsonl").write_bytes((out / MANIFEST_NAME).read_bytes())
    (out / MANIFEST_NAME).unlink()
    os.symlink(tmp_path / "elsewhere.jsonl", out / MANIFEST_NAME)
    expect_error(lambda: load_reads(out), tmp_path, r"manifest.jsonl: the manifest is a symbolic link")


@pytest.mark.parametrize("planted", ["fifo", "dev-zero", "folder"])
def test_a_shard_that_is_not_a_regular_file_is_refused_by_every_reader(tmp_path, reads_job, planted):
    out = copy(reads_job[0], tmp_path)
    name = first_shard(out)["name"]
    (out / name).unlink()
    {"fifo": lambda p: os.mkfifo(p), "dev-zero": lambda p: os.symlink("/dev/zero", p),
     "folder": lambda p: p.mkdir()}[planted](out / name)
    what = {"fifo": "a FIFO", "dev-zero": "a symbolic link to '/dev/zero'", "folder": "a folder"}[planted]
    pattern = rf"{name}: the shard is {what}"
    dataset = ShardedReadsDataset(out)
    expect_error(lambda: dataset[0], tmp_path, pattern)
    expect_error(lambda: load_reads(out), tmp_path, pattern)
    expect_error(lambda: ShardedReadsDataset(out, max_len=3, truncation="split"), tmp_path, pattern)
    for verify in (True, False):
        expect_error(lambda v=verify: read_verified(out, first_shard(out), v), tmp_path, pattern)


def test_resume_over_a_planted_shard_or_unit_record_does_not_block(tmp_path, reads_job):
    out, files = reads_job
    out = copy(out, tmp_path)
    name = first_shard(out)["name"]
    (out / name).unlink()
    os.mkfifo(out / name)  # the unit is redone: its name (the job's own) is replaced, never opened
    records = lines(out)
    write_lines(out, [r for r in records if r.get("unit") != 1 and "complete" not in r])
    os.mkfifo(out / ".reads-00001.done.json")  # a worker's record of unit 1: a FIFO is no record
    error = within_deadline(lambda: precompute_reads(files, out, dim=4, shard_size=7, progress=False, num_cpus=1),
                            tmp_path)
    assert error is None, error
    assert load_reads(out)["names"] == load_reads(reads_job[0])["names"]


# -- 2. size by fstat first, then exactly that many bytes ------------------------------------------------------
READ_IN_A_BOX = """
import importlib.util, json, resource, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("manifest", sys.argv[3])  # stdlib only: no torch to import
manifest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(manifest)
shard = json.loads(sys.argv[2])
size = int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (512 << 20), resource.RLIM_INFINITY))  # a 3 GiB read fails
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    manifest.read_verified(Path(sys.argv[1]), shard)
    print("read it")
except Exception as exc:
    print(type(exc).__name__, exc)
print("grew_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_a_shard_grown_to_3_gib_is_refused_by_its_size_without_reading_it(tmp_path, reads_job):
    out = copy(reads_job[0], tmp_path)
    shard = first_shard(out)
    os.truncate(out / shard["name"], 3 << 30)  # sparse: costs no disk, a read of it would cost 3 GiB of memory
    module = Path(omnipos.__file__).parent / "scale" / "manifest.py"
    run = subprocess.run([sys.executable, "-c", READ_IN_A_BOX, str(out), json.dumps(shard), str(module)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    message, grew = run.stdout.strip().rsplit("\n", 1)
    assert message.startswith("ValueError"), message
    assert shard["name"] in message and "3,221,225,472 bytes" in message and f"records {shard['bytes']:,}" in message
    assert MANIFEST_NAME in message  # the entry is named too
    assert int(grew.split()[1]) < 64 << 10  # KiB: nothing of the 3 GiB was read


def test_a_shard_shorter_than_recorded_names_both_sizes(tmp_path, reads_job):
    out = copy(reads_job[0], tmp_path)
    shard = first_shard(out)
    os.truncate(out / shard["name"], 10)
    for verify in (True, False):
        expect_error(lambda v=verify: load_reads(out, verify=v), tmp_path,
                     rf"{shard['name']}: the shard has 10 bytes, but its manifest.jsonl entry .* records "
                     rf"{shard['bytes']:,}")


# -- 3. item counts against the shards, each shard once ----------------------------------------------------------
def test_a_read_dropped_from_a_shard_is_refused_not_skipped(tmp_path, reads_job):
    out = copy(reads_job[0], tmp_path)
    shard = first_shard(out)
    replace_shard(out, shard["name"], edited_table(out, shard["name"], lambda t: t.slice(0, t.num_rows - 1)))
    pattern = rf"{shard['name']} \(its manifest.jsonl entry .*\): the shard holds 6 rows, the manifest records 7"
    expect_error(lambda: load_reads(out), tmp_path, pattern)
    dataset = ShardedReadsDataset(out)
    assert len(dataset) == 29
    expect_error(lambda: [dataset[i] for i in range(len(dataset))], tmp_path, pattern)


def test_a_shard_listed_twice_is_refused_when_the_manifest_is_read(tmp_path, reads_job):
    out = copy(reads_job[0], tmp_path)
    records = lines(out)
    unit = next(r for r in records if r.get("unit") == 0)
    unit["shards"].insert(1, dict(unit["shards"][0]))
    unit["items"] += unit["shards"][0]["items"]
    records[-1]["complete"] = {"items": records[-1]["complete"]["items"] + unit["shards"][0]["items"],
                               "shards": records[-1]["complete"]["shards"] + 1}
    write_lines(out, records)
    pattern = r"manifest.jsonl: line \d+: unit 0 lists shard 'reads-00000-00000.parquet' more than once"
    expect_error(lambda: load_reads(out), tmp_path, pattern)
    expect_error(lambda: ShardedReadsDataset(out), tmp_path, pattern)


def test_a_unit_recorded_twice_or_missing_from_a_complete_job_is_refused(tmp_path, reads_job):
    out = copy(reads_job[0], tmp_path)
    records = lines(out)
    write_lines(out, records[:-1] + [next(r for r in records if r.get("unit") == 1), records[-1]])
    expect_error(lambda: load_reads(out), tmp_path, r"line \d+: unit 1 is recorded twice \(also on line \d+\)")
    write_lines(out, [r for r in records if r.get("unit") != 1])
    expect_error(lambda: load_reads(out), tmp_path,
                 r"manifest.jsonl: line \d+: the job is recorded as complete .* but unit 1 of 2 is not recorded")
    edited = [dict(r) for r in records]
    edited[-1] = {"complete": {"items": 28, "shards": edited[-1]["complete"]["shards"]}}
    write_lines(out, edited)
    expect_error(lambda: ShardedReadsDataset(out), tmp_path, r"recorded as complete .* list 29 items")


# -- 4. the constructors: every shard they index read through the same door, before any allocation -------------
def set_column(name, values):
    import pyarrow as pa

    def edit(table):
        field = table.schema.field(name)
        return table.set_column(table.schema.get_field_index(name), field, pa.array(values, field.type))
    return edit


@pytest.mark.parametrize("damage", ["not-parquet", "no-vocab", "bogus-length"])
def test_meds_constructor_and_loader_name_a_damaged_shard(tmp_path, meds_job, damage):
    out = copy(meds_job, tmp_path)
    shard = first_shard(out)
    name = shard["name"]
    if damage == "not-parquet":
        payload = b"PAR1 not a parquet file at all PAR1"
        pattern = rf"{name} \(its manifest.jsonl entry .*\): not a readable Parquet file"
    elif damage == "no-vocab":
        payload = edited_table(out, name, lambda t: t.replace_schema_metadata({}))
        pattern = rf"{name} \(its manifest.jsonl entry .*\): the shard's metadata lacks 'omnipos.vocab'"
    else:  # a length of 10**12 events: 2.43 TiB of windows, or a mask as wide, if it were believed
        import pyarrow.parquet as pq

        column = pq.read_table(out / name).column("length").to_numpy().copy()
        column[0] = 10**12
        payload = edited_table(out, name, set_column("length", column))
        pattern = rf"{name} \(its manifest.jsonl entry .*\): row 0: length says 1,000,000,000,000 events, its times"
    replace_shard(out, name, payload)
    expect_error(lambda: ShardedMedsDataset(out, max_len=1, truncation="split"), tmp_path, pattern)
    expect_error(lambda: load_meds(out), tmp_path, pattern)
    expect_error(lambda: load_meds(out, max_len=1, truncation="split"), tmp_path, pattern)
    if damage != "bogus-length":  # the length column is read, and checked, only where it cuts windows
        expect_error(lambda: ShardedMedsDataset(out), tmp_path, pattern)


def test_meds_codes_outside_the_vocabulary_are_refused(tmp_path, meds_job):
    out = copy(meds_job, tmp_path)
    name = first_shard(out)["name"]
    import pyarrow.parquet as pq

    table = pq.read_table(out / name)
    vocab = json.loads(table.schema.metadata[b"omnipos.vocab"])
    codes = table.column("codes").to_pylist()
    codes[0][0] = len(vocab) + 5
    replace_shard(out, name, edited_table(out, name, set_column("codes", codes)))
    pattern = rf"{name} .*: the shard's 'codes' hold indices outside its vocabulary of {len(vocab)} codes"
    expect_error(lambda: load_meds(out), tmp_path, pattern)
    dataset = ShardedMedsDataset(out)
    expect_error(lambda: dataset[0], tmp_path, pattern)


@pytest.mark.parametrize("damage", ["not-parquet", "bogus-length", "dtype"])
def test_reads_constructor_and_loader_name_a_damaged_shard(tmp_path, reads_job, damage):
    out = copy(reads_job[0], tmp_path)
    name = first_shard(out)["name"]
    import pyarrow.parquet as pq

    if damage == "not-parquet":
        payload = b"PAR1 not a parquet file at all PAR1"
        pattern = rf"{name} \(its manifest.jsonl entry .*\): not a readable Parquet file"
    elif damage == "bogus-length":
        column = pq.read_table(out / name).column("length").to_numpy().copy()
        column[2] = 10**12
        payload = edited_table(out, name, set_column("length", column))
        pattern = rf"{name} \(its manifest.jsonl entry .*\): row 2: the length column says 1,000,000,000,000 bases"
    else:  # a token dtype that is not one: getattr(torch, 'load') is a function
        payload = edited_table(out, name, lambda t: t.replace_schema_metadata(
            {**t.schema.metadata, b"omnipos.tokens_dtype": b"load"}))
        pattern = rf"{name} .*: the shard's metadata says format 'fastq' and token dtype 'load'"
    replace_shard(out, name, payload)
    expect_error(lambda: ShardedReadsDataset(out, max_len=1, truncation="split"), tmp_path, pattern)
    expect_error(lambda: load_reads(out), tmp_path, pattern)
    dataset = ShardedReadsDataset(out)
    expect_error(lambda: dataset[0], tmp_path, pattern)


# -- 5. the manifest's meta records ------------------------------------------------------------------------------
@pytest.mark.parametrize("meta", [{}, {"config": 7}, {"config": {"dim": "x"}}, {"config": {"dim": -2}}],
                         ids=["missing", "not-an-object", "bad-dim", "negative-dim"])
def test_a_malformed_reads_meta_line_names_the_manifest_line(tmp_path, reads_job, meta):
    out = copy(reads_job[0], tmp_path)
    records = lines(out)
    for record in records:
        if "meta" in record:
            record["meta"] = meta if not meta else {
                "config": meta["config"] if not isinstance(meta["config"], dict) else
                {**record["meta"]["config"], **meta["config"]}}
    write_lines(out, records)
    line = next(i for i, r in enumerate(records, 1) if "meta" in r)
    pattern = rf"manifest.jsonl: line {line}: .*(meta|config)"
    expect_error(lambda: load_reads(out), tmp_path, pattern)
    expect_error(lambda: ShardedReadsDataset(out), tmp_path, pattern)


@pytest.mark.parametrize("options", [5, {"unit": "fortnight"}, {"max_len": "ten"}], ids=["number", "unit", "max_len"])
def test_a_malformed_meds_meta_line_names_the_manifest_line(tmp_path, meds_job, options):
    out = copy(meds_job, tmp_path)
    records = lines(out)
    for record in records:
        if "meta" in record:
            record["meta"]["options"] = options if not isinstance(options, dict) else {
                **record["meta"]["options"], **options}
    write_lines(out, records)
    line = next(i for i, r in enumerate(records, 1) if "meta" in r)
    pattern = rf"manifest.jsonl: line {line}: meta 'options' must be"
    expect_error(lambda: load_meds(out), tmp_path, pattern)
    expect_error(lambda: ShardedMedsDataset(out), tmp_path, pattern)


# -- 6. a read-only folder: loading works, a job is refused by name before any work ---------------------------
AS_ANOTHER_USER = """
import os, sys
from pathlib import Path
from omnipos.dna import read_fastx
from omnipos.scale import ShardedReadsDataset, load_reads, precompute_reads
out, reads = Path(sys.argv[1]), sys.argv[2]
if __name__ == "__main__":
    if sys.argv[3] != "-":  # root writes through any mode: drop to the unprivileged user
        list(read_fastx(reads)), load_reads(out)  # (as root: the modules it needs, under /root, imported first)
        os.setgid(int(sys.argv[3]))
        os.setuid(int(sys.argv[3]))
    before = sorted(os.listdir(out))
    print("loaded", len(load_reads(out)["names"]), len([x for x in ShardedReadsDataset(out)]))
    for target in (out, out / "new"):
        try:
            precompute_reads([reads], target, dim=4, shard_size=7, progress=False, num_cpus=1)
            print("ran")
        except Exception as exc:
            print(type(exc).__name__, exc)
    print("left as it was", sorted(os.listdir(out)) == before)
"""


def test_a_read_only_folder_loads_and_refuses_a_job_by_name(fastx):
    """A finished job in a folder made read-only (0555): loading it works; running the same job again (which
    rewrites its manifest) or a job into a new folder inside it is refused by name. Root writes through any mode,
    so as root the script runs in a subprocess that first drops to the unprivileged user 'nobody' (os.setuid,
    the folder chown'ed to it): the kernel then really refuses the writes, as for any user; without root, the
    same script runs as this user."""
    base = Path(tempfile.mkdtemp(prefix="omnipos-readonly-"))  # outside pytest's 0700 folders: 'nobody' can enter
    out = base / "out"
    try:
        os.chmod(base, 0o755)
        reads = fastx(base / "a.fq", 12, seed=7)
        precompute_reads([reads], out, dim=4, shard_size=7, progress=False, num_cpus=1)  # a finished job
        user = "-"
        if os.geteuid() == 0:
            import pwd

            nobody = pwd.getpwnam("nobody")
            for path in [base, reads, out, *out.iterdir()]:
                os.chown(path, nobody.pw_uid, nobody.pw_gid)
            user = str(nobody.pw_uid)
        os.chmod(out, 0o555)
        script = base / "script.py"
        script.write_text(AS_ANOTHER_USER)
        script.chmod(0o644)
        env = {**os.environ, "PYTHONPATH": str(Path(omnipos.__file__).parents[1]), "HOME": str(base),
               "NUMBA_CACHE_DIR": str(base / "numba")}
        run = subprocess.run([sys.executable, str(script), str(out), str(reads), user], capture_output=True,
                             text=True, timeout=300, env=env, cwd=base, check=False)
        assert run.returncode == 0, run.stderr[-3000:]
        printed = run.stdout.strip().splitlines()
        assert printed[0] == "loaded 12 12"
        assert printed[1].startswith(f"ValueError out_dir: {str(out)!r} is not writable"), printed[1]
        assert printed[2].startswith(f"ValueError out_dir: {str(out)!r} is not writable"), printed[2]
        assert f"out_dir {str(out / 'new')!r} would be created in it" in printed[2]
        assert printed[3] == "left as it was True"  # no lock file, no temporaries: nothing was written
    finally:
        if out.exists():
            os.chmod(out, 0o755)
        shutil.rmtree(base)


def test_a_length_check_costs_no_allocation_of_the_claimed_size(tmp_path, reads_job):
    """The lengths are compared with the data's own row sizes: the check allocates in proportion to the rows."""
    out = copy(reads_job[0], tmp_path)
    name = first_shard(out)["name"]
    import pyarrow.parquet as pq

    column = pq.read_table(out / name).column("length").to_numpy().copy()
    column[:] = np.iinfo(np.int64).max
    replace_shard(out, name, edited_table(out, name, set_column("length", column)))
    expect_error(lambda: ShardedReadsDataset(out, max_len=1, truncation="split"), tmp_path,
                 rf"{name} .*: row 0: the length column says 9,223,372,036,854,775,807 bases")


def test_a_folder_under_a_shard_name_is_named_when_a_resume_would_replace_it(tmp_path, reads_job):
    out, files = reads_job
    out = copy(out, tmp_path)
    name = first_shard(out)["name"]
    (out / name).unlink()
    (out / name).mkdir()
    (out / name / "keep.txt").write_text("mine")
    expect_error(lambda: precompute_reads(files, out, dim=4, shard_size=7, progress=False, num_cpus=1), tmp_path,
                 rf"{name}: the shard is a folder, not a regular file", NotRegularFileError)
    assert (out / name / "keep.txt").read_text() == "mine"
