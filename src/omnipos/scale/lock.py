"""One run per output folder: an OS-level lock (``fcntl.flock``) on ``.omnipos.lock`` in the folder.

A job holds its folder from before it reads the manifest until it has recorded its last unit. A second run on a
folder that a live run holds is refused at once (a ValueError naming the holder's pid, host and start time), so
it never deletes the first run's temporaries or rewrites its manifest. The lock belongs to the open file: the
operating system releases it when the holder exits, however it exits (a crash or ``kill -9`` leaves nothing
stuck), and the lock file itself is never deleted (deleting it would let two runs lock two different files).
On a shared filesystem the lock is as good as that filesystem's ``flock`` (NFS v4 and Lustre honour it).

The lock file is untrusted like the rest of the folder: it is opened without following a symbolic link and
without blocking, and must be a regular file of one name (a symlink, a folder, a FIFO or a hard link planted
under its name is a ValueError naming it; nothing it points to is opened or truncated).

Each run writes a random token into the lock file and gets a staging folder of its own, ``.omnipos-run-<token>``:
its workers write every file there first and move it into the folder only while the lock still names their run
(:func:`check_held`). A run that takes the lock renames the staging folders of earlier runs away before it
writes anything, so a worker that outlived its driver (killed by ``kill -9`` or the out-of-memory killer) can no
longer move a file into the folder: whatever it finishes stays in a folder the new run deletes.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import stat
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; a job there runs unlocked
    fcntl = None

__all__ = ["LOCK_NAME", "STAGING_PREFIX", "HeldFolder", "LockLost", "check_held", "hold_folder"]

LOCK_NAME = ".omnipos.lock"
STAGING_PREFIX = ".omnipos-run-"
_STALE_PREFIX = ".omnipos-stale-"
_OWN_FOLDER = re.compile(rf"({re.escape(STAGING_PREFIX)}|{re.escape(_STALE_PREFIX)})[0-9a-f]{{32}}")
_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFLNK: "a symbolic link"}


class HeldFolder(NamedTuple):
    """A folder this run holds: ``path``; ``token``, the run's identity written in the lock file; ``staging``,
    the folder its workers write temporaries to (not made yet: a job makes it when it has units to run; deleted
    when the run ends, or by the next run if it died)."""

    path: Path
    token: str
    staging: Path


class LockLost(Exception):
    """The run that started a unit no longer holds its output folder (its driver died; another run may hold it):
    the unit's files are not moved into the folder. Not an OSError or ValueError, which a unit's body reports as
    a problem of its input."""


@contextmanager
def hold_folder(out_dir: str | os.PathLike) -> Iterator[HeldFolder]:
    """Create ``out_dir`` if needed and hold it for this run; yields the :class:`HeldFolder`.

    Raises:
        ValueError: ``out_dir`` exists and is not a folder; its ``.omnipos.lock`` is not a regular file of one
            name, or cannot be opened; or another live run holds it (the message names that run's pid, host and
            start time).
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"out_dir: {str(out_dir)!r} exists and is not a folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    if fcntl is None:  # pragma: no cover
        with _staging(out_dir, token) as held:
            yield held
        return
    handle = _open_lock(out_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"out_dir: {str(out_dir)!r} is in use by another run ({_holder(handle)}); wait for "
                             "it to finish, or choose another folder") from None
        os.ftruncate(handle, 0)
        os.pwrite(handle, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                      "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                                      "token": token}).encode(), 0)
        with _staging(out_dir, token) as held:
            yield held
    finally:
        os.close(handle)  # releases the lock


def check_held(out_dir: str | os.PathLike, token: str) -> None:
    """Raise :class:`LockLost` unless a live run holds ``out_dir`` and the lock names ``token``: what a worker
    asks before it moves a finished file into the folder. Never call it in the process that holds the lock (on
    a filesystem that emulates ``flock`` with POSIX locks, closing another handle of the file would release it)."""
    if fcntl is None:  # pragma: no cover
        return
    path = Path(out_dir) / LOCK_NAME
    try:
        handle = _open_lock(path, os.O_RDONLY)
    except (ValueError, OSError) as exc:
        raise LockLost(f"{path}: cannot read the lock ({exc})") from None
    try:
        try:
            holder = json.loads(os.pread(handle, 4096, 0))
        except (ValueError, OSError):
            holder = {}
        if not isinstance(holder, dict) or holder.get("token") != token:
            raise LockLost(f"out_dir: {str(out_dir)!r} is held by another run now ({_holder(handle)})")
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # held, and by this run
        raise LockLost(f"out_dir: {str(out_dir)!r} is no longer held: the run that started this unit ended")
    finally:
        os.close(handle)  # releases the shared lock just taken, if any


def _open_lock(path: Path, mode: int) -> int:
    """A handle on the lock file: not through a symbolic link, without blocking (a FIFO), a regular file."""
    flags = mode | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        handle = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            what = "a symbolic link"
        elif exc.errno == errno.EISDIR:
            what = "a folder"
        else:
            raise ValueError(f"out_dir: cannot open the lock file {str(path)!r} ({exc.strerror}); the folder must "
                             "be writable") from None
        raise ValueError(f"out_dir: {str(path)!r} is {what}, not a regular file; omnipos writes this lock file "
                         "itself: remove it, or choose another folder") from None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            what = _KINDS.get(stat.S_IFMT(info.st_mode), "not a file")
            raise ValueError(f"out_dir: {str(path)!r} is {what}, not a regular file; omnipos writes this lock "
                             "file itself: remove it, or choose another folder")
        if info.st_nlink > 1:
            raise ValueError(f"out_dir: {str(path)!r} has {info.st_nlink} names (hard links): another name of it "
                             "would be overwritten by the lock; remove it, or choose another folder")
    except BaseException:
        os.close(handle)
        raise
    return handle


@contextmanager
def _staging(out_dir: Path, token: str) -> Iterator[HeldFolder]:
    """Move earlier runs' staging folders out of reach; this run's is deleted when the run ends."""
    for entry in os.scandir(out_dir):
        if _OWN_FOLDER.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
            stale = Path(entry.path)
            if entry.name.startswith(STAGING_PREFIX):
                # atomic: a dead run's worker that still writes there can no longer move a file into out_dir
                stale = out_dir / f"{_STALE_PREFIX}{uuid.uuid4().hex}"
                os.rename(entry.path, stale)
            shutil.rmtree(stale, ignore_errors=True)
    staging = out_dir / f"{STAGING_PREFIX}{token}"  # made by the job when it has units to run
    try:
        yield HeldFolder(out_dir, token, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _holder(handle: int) -> str:
    try:
        holder = json.loads(os.pread(handle, 4096, 0))
        return f"pid {holder['pid']} on {holder['host']}, started {holder['started']}"
    except (ValueError, KeyError, TypeError, OSError):  # the holder is between taking the lock and writing this
        return "a run that is just starting"
