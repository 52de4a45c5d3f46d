"""The manifest of a precompute job: what was asked, which shards are finished, and their checksums.

One file per output folder, ``manifest.jsonl``, append-only JSON lines:

- ``{"header": {...}}``: the job (kind, inputs, transform or options, shard size) and its fingerprint;
- ``{"meta": {...}}``: what the loaders need to know of the job (e.g. the reads' positional encoding options);
- ``{"unit": i, "source": ..., "items": n, "shards": [{"name", "items", "bytes", "sha256"}, ...], "seconds": t,
  "input": ...}``: one line per finished unit of work (an input file, or a slice of an in-memory list), written
  once all its shards are (``seconds``: the unit's wall time on its worker; ``input``: the identity of what it
  read, a file's size and mtime or a slice's content hash, so that a changed input is redone on resume);
- ``{"complete": {"items": n, "shards": m}}``: the job finished.

Each line is flushed and fsync'd before the next unit is recorded; a torn last line (the process died mid-write)
is ignored when the manifest is read again. A worker also leaves each finished unit's record beside its shards
(``.{kind}-{unit}.done.json``) until the driver has recorded it, so that a unit finished while the driver died (or
Ray aborted the job) is adopted on resume, not redone. Shard files are
written to a temporary name and renamed when complete (:func:`write_atomic`), so a shard file either is whole or
does not exist under its name.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "MANIFEST_NAME", "Manifest", "write_atomic", "sha256_bytes", "fingerprint", "read_verified",
           "done_name"]

FORMAT = "omnipos.scale/1"
MANIFEST_NAME = "manifest.jsonl"
_TEMP_MARK = ".tmp-"


def done_name(kind: str, unit: int) -> str:
    """The file a worker leaves beside a finished unit's shards: that unit's manifest record."""
    return f".{kind}-{unit:05d}.done.json"


def sha256_bytes(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def fingerprint(job: dict[str, Any]) -> str:
    """sha256 of the job description in canonical JSON (sorted keys)."""
    return sha256_bytes(json.dumps(job, sort_keys=True, default=str).encode())


def write_atomic(path: Path, payload: bytes) -> dict[str, Any]:
    """Write ``payload`` to a temporary name beside ``path``, fsync, and rename it to ``path`` (atomic on POSIX).

    Returns the shard record ``{"name", "bytes", "sha256"}``."""
    temp = path.with_name(f".{path.name}{_TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(temp, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return {"name": path.name, "bytes": len(payload), "sha256": sha256_bytes(payload)}


def read_verified(out_dir: Path, shard: dict[str, Any], verify: bool = True) -> bytes:
    """The bytes of a finished shard; with ``verify``, refuse a file whose size or sha256 is not the manifest's."""
    path = out_dir / shard["name"]
    try:
        payload = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{path}: shard listed in the manifest is missing") from None
    if verify and (len(payload) != shard["bytes"] or sha256_bytes(payload) != shard["sha256"]):
        raise ValueError(f"{path}: shard does not match its checksum in the manifest (corrupt or replaced; "
                         f"{len(payload)} bytes, expected {shard['bytes']}); rerun the job with resume=False")
    return payload


def _read_lines(path: Path) -> list[dict[str, Any]]:
    records = []
    with open(path, "rb") as handle:
        lines = handle.read().split(b"\n")
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines) - 1 or all(not rest.strip() for rest in lines[number + 1:]):
                break  # torn last line: the writer died mid-line; that unit is simply not finished
            raise ValueError(f"{path}: line {number + 1} is not JSON (the manifest is corrupt)") from None
    if not records or "header" not in records[0]:
        raise ValueError(f"{path}: not an omnipos.scale manifest (no header line)")
    return records


class Manifest:
    """The state of one output folder. Built by :meth:`open` (a job starting) or :meth:`read` (a loader)."""

    def __init__(self, out_dir: Path, header: dict[str, Any]) -> None:
        self.out_dir = out_dir
        self.header = header
        self.meta: dict[str, Any] = {}
        self.units: dict[int, dict[str, Any]] = {}
        self.complete: dict[str, Any] | None = None

    @property
    def path(self) -> Path:
        return self.out_dir / MANIFEST_NAME

    @property
    def kind(self) -> str:
        return self.header["job"]["kind"]

    # -- reading ------------------------------------------------------------------------------------------------
    @classmethod
    def _load(cls, out_dir: Path) -> Manifest:
        records = _read_lines(out_dir / MANIFEST_NAME)
        manifest = cls(out_dir, records[0]["header"])
        for record in records[1:]:
            if "meta" in record:
                manifest.meta.update(record["meta"])
            elif "unit" in record:
                manifest.units[int(record["unit"])] = record
            elif "complete" in record:
                manifest.complete = record["complete"]
        return manifest

    @classmethod
    def read(cls, out_dir: str | os.PathLike, kind: str) -> Manifest:
        """The manifest of a finished job of ``kind`` in ``out_dir`` (what the loaders call)."""
        out_dir = Path(out_dir)
        if not (out_dir / MANIFEST_NAME).is_file():
            raise FileNotFoundError(f"out_dir: no {MANIFEST_NAME} in {str(out_dir)!r} (not a precompute output)")
        manifest = cls._load(out_dir)
        if manifest.kind != kind:
            raise ValueError(f"{out_dir} holds precomputed {manifest.kind}, not {kind}")
        if manifest.complete is None:
            total = manifest.header["units"]
            raise ValueError(f"{out_dir}: the job is unfinished ({len(manifest.units)} of {total} units done); "
                             "run the same precompute call again to finish it (resume=True)")
        return manifest

    def shards(self) -> list[dict[str, Any]]:
        """Every finished shard, in output order (by unit, then by position within the unit)."""
        return [shard for unit in sorted(self.units) for shard in self.units[unit]["shards"]]

    # -- a job starting -----------------------------------------------------------------------------------------
    @classmethod
    def open(cls, out_dir: str | os.PathLike, job: dict[str, Any], identities: Sequence[Any], *, resume: bool,
             overwrite: bool) -> Manifest:
        """Start (or resume) the job ``job``, of ``len(identities)`` units, in ``out_dir``.

        An existing manifest of the same job is resumed (``resume=True``: finished units whose input identity is
        still ``identities[unit]`` and whose shard files are all present, with their recorded sizes, are kept) or
        started over (``resume=False``). A manifest of a different job (another kind, transform or options,
        other input files, another shard size) is refused unless ``overwrite=True``; then its shard files are
        deleted first.
        """
        units = len(identities)
        out_dir = Path(out_dir)
        if out_dir.exists() and not out_dir.is_dir():
            raise ValueError(f"out_dir: {str(out_dir)!r} exists and is not a folder")
        out_dir.mkdir(parents=True, exist_ok=True)
        header = {"format": FORMAT, "job": job, "fingerprint": fingerprint(job), "units": units}
        old = None
        if (out_dir / MANIFEST_NAME).exists():
            try:
                old = cls._load(out_dir)
            except ValueError:
                if not overwrite:
                    raise ValueError(f"out_dir: {out_dir / MANIFEST_NAME} is unreadable; pass overwrite=True "
                                     "(--overwrite) to replace it, or choose another folder") from None
        if old is not None and old.header.get("fingerprint") != header["fingerprint"] and not overwrite:
            raise ValueError(f"out_dir: {str(out_dir)!r} holds the manifest of another job "
                                 f"({_difference(old.header.get('job', {}), job)}); pass overwrite=True "
                                 "(--overwrite) to replace it, or choose another folder")
        manifest = cls(out_dir, header)
        kind = job["kind"]
        if old is not None and old.header.get("fingerprint") == header["fingerprint"] and resume:
            manifest.meta = old.meta
            found = dict(old.units)
            for unit in range(units):  # units finished but not recorded (the driver died, Ray aborted the job)
                done = out_dir / done_name(kind, unit)
                if unit not in found and done.is_file():
                    try:
                        found[unit] = json.loads(done.read_bytes())
                    except (json.JSONDecodeError, OSError):
                        pass
            manifest.units = {u: r for u, r in found.items()
                              if u < units and r.get("input") == identities[u] and manifest._present(r)}
            for unit, record in found.items():
                if unit not in manifest.units:  # its input changed or a shard is gone: redone, old shards removed
                    for shard in record.get("shards", []):
                        (out_dir / shard["name"]).unlink(missing_ok=True)
        elif old is not None:
            old.remove_files()
        manifest._remove_temporaries()
        manifest._rewrite()
        return manifest

    def _present(self, record: dict[str, Any]) -> bool:
        for shard in record["shards"]:
            path = self.out_dir / shard["name"]
            if not path.is_file() or path.stat().st_size != shard["bytes"]:
                return False
        return True

    def remove_files(self) -> None:
        """Delete the shard files this manifest lists, and the manifest itself."""
        for unit in self.units.values():
            for shard in unit["shards"]:
                (self.out_dir / shard["name"]).unlink(missing_ok=True)
        self.path.unlink(missing_ok=True)

    def _remove_temporaries(self) -> None:
        """Half-written files of killed writers, and the workers' unit records (recorded or stale by now)."""
        kind = self.kind
        for path in self.out_dir.iterdir():
            name = path.name
            if name.startswith(".") and (_TEMP_MARK in name or name.startswith(f".{kind}-")
                                         and name.endswith(".done.json")):
                path.unlink(missing_ok=True)

    def _rewrite(self) -> None:
        lines = [{"header": self.header}]
        if self.meta:
            lines.append({"meta": self.meta})
        lines += [self.units[u] for u in sorted(self.units)]
        write_atomic(self.path, "".join(json.dumps(r) + "\n" for r in lines).encode())

    def _append(self, record: dict[str, Any]) -> None:
        with open(self.path, "ab") as handle:
            handle.write((json.dumps(record) + "\n").encode())
            handle.flush()
            os.fsync(handle.fileno())

    def set_meta(self, meta: dict[str, Any]) -> None:
        self.meta.update(meta)
        self._append({"meta": meta})

    def record(self, record: dict[str, Any]) -> None:
        """Record a finished unit (``{"unit", "source", "items", "shards", "seconds", "input"}``, as a worker's
        :class:`omnipos.scale.shards.UnitRunner` returns it), then drop the worker's copy of it."""
        unit = int(record["unit"])
        self.units[unit] = record
        self._append(record)
        (self.out_dir / done_name(self.kind, unit)).unlink(missing_ok=True)

    def finish(self) -> None:
        self.complete = {"items": sum(r["items"] for r in self.units.values()), "shards": len(self.shards())}
        self._append({"complete": self.complete})


def _difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    fields = sorted(key for key in set(old) | set(new) if old.get(key) != new.get(key))
    if "kind" in fields:
        return f"it precomputed {old.get('kind')!r}, this job is {new.get('kind')!r}"
    return "different " + ", ".join(fields) if fields else "a different format"
