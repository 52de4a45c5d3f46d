"""The worker side of a unit of work: write its shards atomically, report them, or report why it failed.

A unit (an input file, or a slice of an in-memory list) writes one or more shards of at most ``shard_size`` items,
named ``{kind}-{unit:05d}-{part:05d}.{ext}`` so that name order is output order. :class:`UnitRunner` runs a
kind's ``body(unit, payload, writer)`` and turns the outcome into the JSON-able record the driver puts in the
manifest. The worker also leaves that record beside the shards (``.{kind}-{unit:05d}.done.json``, written
atomically): if the driver dies, or Ray aborts the job, before it records a finished unit, the next run adopts
the unit from it instead of redoing it. A unit that raises reports its error (the other units go on) and leaves
no shard behind.

In a job, each file is written whole into the run's staging folder first, then moved into the output folder,
and only while the run still holds the folder (:func:`omnipos.scale.lock.check_held`; a worker whose driver died
moves nothing). A file that cannot be written (a full disk, no permission) fails its unit as an
:class:`OutputWriteError`, which names the file and the OS error: the output is at fault, not the input.
"""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .lock import LockLost, check_held
from .manifest import done_name, sha256_bytes, shard_name, write_atomic

__all__ = ["OutputWriteError", "ShardWriter", "UnitRunner"]


class OutputWriteError(Exception):
    """A file of a unit's output could not be written (``ENOSPC``, ``EACCES``, ...). Not an OSError: the unit
    bodies report an OSError while reading as a damaged input."""

    def __init__(self, path: Path, exc: OSError) -> None:
        code = errno.errorcode.get(exc.errno, "") if exc.errno is not None else ""
        reason = f"[Errno {exc.errno}{' ' + code if code else ''}] {exc.strerror or exc}"
        super().__init__(f"its output could not be written: {path}: {reason} (a problem of the output folder or "
                         "its disk, not of the input)")


class _Output:
    """Where a unit's files go: straight into ``out_dir`` (:func:`write_atomic`), or through ``staging`` and only
    while ``guard()`` passes (a job's run: it raises :class:`LockLost` once the run no longer holds the folder)."""

    def __init__(self, out_dir: Path, staging: Path | None, guard: Callable[[], None] | None) -> None:
        self.out_dir, self.staging, self.guard = out_dir, staging, guard

    def put(self, name: str, payload: bytes) -> dict[str, Any]:
        path = self.out_dir / name
        if self.staging is None:
            try:
                return write_atomic(path, payload)
            except OSError as exc:
                raise OutputWriteError(path, exc) from None
        temp = self.staging / name
        try:
            with open(temp, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            raise self._failure(temp, path, exc) from None
        self.check()
        try:
            os.replace(temp, path)
        except OSError as exc:
            raise self._failure(temp, path, exc) from None
        return {"name": name, "bytes": len(payload), "sha256": sha256_bytes(payload)}

    def _failure(self, temp: Path, path: Path, exc: OSError) -> Exception:
        """What a failed staging write or move means, its temporary removed: the run lost its folder (its staging
        folder is gone) or the output could not be written (a full disk, ...)."""
        _unlink(temp)
        if not self.staging.is_dir():
            return LockLost(f"its staging folder {self.staging} is gone: the run that started this unit no longer "
                            "holds the folder")
        return OutputWriteError(path, exc)

    def check(self) -> None:
        if self.guard is not None:
            self.guard()


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


class ShardWriter:
    """Writes the shards of one unit: ``write(payload, items)`` per shard, in order."""

    def __init__(self, out_dir: str | Path, kind: str, unit: int, ext: str, output: _Output | None = None) -> None:
        self.out_dir = Path(out_dir)
        self.kind, self.unit, self.ext = kind, unit, ext
        self.output = output or _Output(self.out_dir, None, None)
        self.records: list[dict[str, Any]] = []

    def write(self, payload: bytes, items: int) -> None:
        """Raises :class:`OutputWriteError` when the shard cannot be written, :class:`LockLost` when the run no
        longer holds the folder."""
        record = self.output.put(shard_name(self.kind, self.unit, len(self.records), self.ext), payload)
        self.records.append({"name": record["name"], "items": int(items), "bytes": record["bytes"],
                             "sha256": record["sha256"]})

    def discard(self) -> None:
        self.output.check()  # a run that no longer holds the folder deletes nothing there
        for record in self.records:
            (self.out_dir / record["name"]).unlink(missing_ok=True)
        self.records = []


@dataclass
class UnitRunner:
    """``work(unit, payload) -> record``, the function an engine runs for each unit (picklable: Ray ships it).

    ``sources[unit]`` / ``identities[unit]`` name the unit's input and its identity (recorded with its shards);
    ``body(unit, payload, writer)`` does the kind's work. ``staging``, ``token``, ``driver_pid``: the run's
    staging folder and lock token (:class:`omnipos.scale.lock.HeldFolder`) and the process holding the lock;
    without them files go straight into ``out_dir``."""

    kind: str
    out_dir: str
    ext: str
    sources: Sequence[str]
    identities: Sequence[Any]
    body: Callable[[int, Any, ShardWriter], None]
    staging: str | None = None
    token: str | None = None
    driver_pid: int | None = None

    def _output(self) -> _Output:
        if self.staging is None:
            return _Output(Path(self.out_dir), None, None)
        guard = None
        if self.token is not None and os.getpid() != self.driver_pid:  # the driver itself holds the lock
            out_dir, token = self.out_dir, self.token

            def guard() -> None:
                check_held(out_dir, token)
        return _Output(Path(self.out_dir), Path(self.staging), guard)

    def __call__(self, unit: int, payload: Any) -> dict[str, Any]:
        """``{"unit", "source", "items", "shards", "seconds", "input"}`` when the unit finishes; ``{"unit",
        "error"}`` when it raises (its shards deleted): one bad input file does not stop the others."""
        output = self._output()
        writer = ShardWriter(self.out_dir, self.kind, unit, self.ext, output)
        started = time.perf_counter()
        try:
            self.body(unit, payload, writer)
            record = {"unit": unit, "source": self.sources[unit], "items": sum(s["items"] for s in writer.records),
                      "shards": writer.records, "seconds": round(time.perf_counter() - started, 6),
                      "input": self.identities[unit]}
            output.put(done_name(self.kind, unit), json.dumps(record).encode())
        except LockLost as exc:  # nothing more is written or deleted in a folder another run may hold now
            return {"unit": unit, "error": f"not written: {exc}"}
        except Exception as exc:  # noqa: BLE001 - reported to the driver, which raises after the other units finish
            try:
                writer.discard()
            except LockLost as lost:
                return {"unit": unit, "error": f"not written: {lost}"}
            message = str(exc) if isinstance(exc, (ValueError, OutputWriteError)) else f"{type(exc).__name__}: {exc}"
            return {"unit": unit, "error": message}
        return record
