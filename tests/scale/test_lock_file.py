"""The lock file is opened without following a symbolic link and must be a regular file: a planted
``.omnipos.lock`` (a symlink, a folder, a FIFO) is refused by name, and whatever a symlink points to is untouched."""

import os

import pytest

from omnipos.scale import precompute_reads
from omnipos.scale.lock import LOCK_NAME, hold_folder


def test_a_symlinked_lock_file_is_refused_and_its_target_untouched(tmp_path, fastx):
    """Before, every job opened the link's target and truncated it to write its holder line."""
    victim = tmp_path / "precious.txt"
    victim.write_text("do not truncate me\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).symlink_to(victim)
    with pytest.raises(ValueError, match=rf"{LOCK_NAME}.* is a symbolic link"), hold_folder(out):
        pass
    with pytest.raises(ValueError, match=rf"{LOCK_NAME}.* is a symbolic link"):
        precompute_reads([fastx(tmp_path / "a.fq", 3, 0)], out, progress=False)
    assert victim.read_text() == "do not truncate me\n"
    assert not (out / "manifest.jsonl").exists()
    dangling = tmp_path / "dangling"
    dangling.mkdir()
    (dangling / LOCK_NAME).symlink_to(tmp_path / "created-by-the-lock")
    with pytest.raises(ValueError, match="is a symbolic link"), hold_folder(dangling):
        pass
    assert not (tmp_path / "created-by-the-lock").exists()  # a dangling link's target is not created either


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_lock_file_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    """Each is refused by what it is (before: a raw IsADirectoryError, and for a FIFO a raw OSError from truncating
    it); the FIFO is opened without blocking."""
    out = tmp_path / "out"
    out.mkdir()
    if kind == "folder":
        (out / LOCK_NAME).mkdir()
    else:
        os.mkfifo(out / LOCK_NAME)
    expected = "is a folder" if kind == "folder" else "is a FIFO"
    with pytest.raises(ValueError, match=rf"{LOCK_NAME}.* {expected}, not a regular file"), hold_folder(out):
        pass


def test_a_hard_linked_lock_file_is_refused(tmp_path):
    """Another name of the same file would be truncated as the lock is written."""
    victim = tmp_path / "precious.txt"
    victim.write_text("keep\n")
    out = tmp_path / "out"
    out.mkdir()
    os.link(victim, out / LOCK_NAME)
    with pytest.raises(ValueError, match="has 2 names"), hold_folder(out):
        pass
    assert victim.read_text() == "keep\n"
