"""A shard that cannot be written (a full disk) fails its unit as a write error naming the file and the errno,
not as a damaged input file."""

import errno
import os
import re

import pytest

import omnipos.scale.engine as engine_module
from omnipos.scale import PrecomputeError, precompute_reads


def in_this_process(units, work, payload, on_result, **_):
    for unit in units:
        on_result(work(unit, None if payload is None else payload(unit)))


def test_a_full_disk_is_reported_as_a_write_error_not_a_damaged_input(tmp_path, fastx, monkeypatch):
    """Before: "a.fq: record 1 or later: the file is damaged or truncated (OSError: [Errno 28] ...)"."""
    reads = fastx(tmp_path / "a.fq", 8, 0)
    monkeypatch.setattr(engine_module, "run_on_workers", in_this_process)  # the units see this fsync
    real_fsync = os.fsync

    def fsync(fd):
        if re.search(r"reads-\d{5}-\d{5}\.parquet", os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(PrecomputeError) as info:
        precompute_reads([reads], tmp_path / "out", dim=8, shard_size=5, progress=False)
    message = str(info.value)
    assert "damaged" not in message
    shard = tmp_path / "out" / "reads-00000-00000.parquet"
    assert f"its output could not be written: {shard}: [Errno 28 ENOSPC] No space left on device (a problem of " \
           "the output folder or its disk, not of the input)" in message
    assert not shard.exists()
    monkeypatch.setattr(os, "fsync", real_fsync)  # space again: the same call resumes and finishes
    assert precompute_reads([reads], tmp_path / "out", dim=8, shard_size=5, progress=False).items == 8
