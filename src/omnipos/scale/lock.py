"""One run per output folder: an OS-level lock (``fcntl.flock``) on ``.omnipos.lock`` in the folder.

A job holds its folder from before it reads the manifest until it has recorded its last unit. A second run on a
folder that a live run holds is refused at once (a ValueError naming the holder's pid, host and start time), so
it never deletes the first run's temporaries or rewrites its manifest. The lock belongs to the open file: the
operating system releases it when the holder exits, however it exits (a crash or ``kill -9`` leaves nothing
stuck), and the lock file itself is never deleted (deleting it would let two runs lock two different files).
On a shared filesystem the lock is as good as that filesystem's ``flock`` (NFS v4 and Lustre honour it).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; a job there runs unlocked
    fcntl = None

__all__ = ["LOCK_NAME", "hold_folder"]

LOCK_NAME = ".omnipos.lock"


@contextmanager
def hold_folder(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Create ``out_dir`` if needed and hold it for this run; yields the folder's path.

    Raises:
        ValueError: ``out_dir`` exists and is not a folder; or another live run holds it (the message names
            that run's pid, host and start time).
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"out_dir: {str(out_dir)!r} exists and is not a folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    if fcntl is None:  # pragma: no cover
        yield out_dir
        return
    handle = os.open(out_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"out_dir: {str(out_dir)!r} is in use by another run ({_holder(handle)}); wait for "
                             "it to finish, or choose another folder") from None
        os.ftruncate(handle, 0)
        os.pwrite(handle, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                      "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}).encode(), 0)
        yield out_dir
    finally:
        os.close(handle)  # releases the lock


def _holder(handle: int) -> str:
    try:
        holder = json.loads(os.pread(handle, 4096, 0))
        return f"pid {holder['pid']} on {holder['host']}, started {holder['started']}"
    except (ValueError, KeyError, TypeError, OSError):  # the holder is between taking the lock and writing this
        return "a run that is just starting"
