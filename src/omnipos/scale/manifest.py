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

What is read back from a folder is untrusted input (the folder may be shared, copied or edited): every record is
checked before anything it names is read or deleted. A shard name must be one this job itself writes
(``{kind}-{unit:05d}-{part:05d}.{ext}``, the unit its record's); anything else (``../x``, an absolute path, a nested
``a/../../b``) is a ValueError naming the file and the entry, even under ``overwrite=True``. A job deletes only
files of its own names: its listed shards, its unit records and the temporaries of its own writes.

Every file read back from a folder goes through one door, :func:`open_regular`, in this order: the name must be a
regular file (``lstat``: a symbolic link, FIFO, device, socket or folder under a name omnipos reads is a
:class:`NotRegularFileError` naming the file and what it is, and is never opened), it is opened with
``O_NOFOLLOW | O_NONBLOCK`` and checked again by ``fstat`` (so it cannot be swapped for a link or a pipe in
between), its size is compared with the manifest's record before a byte is read, then exactly that many bytes are
read, then (``verify=True``) their sha256 is compared, and only then is the content parsed and its structure
checked against the manifest (item counts, lengths against the data) by the kind's loader. The manifest itself
must list each unit and each shard once, and a finished job must list every unit, with the totals of its
``complete`` line.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["FORMAT", "MANIFEST_NAME", "Manifest", "write_atomic", "sha256_bytes", "fingerprint", "read_verified",
           "describe_entry", "done_name", "shard_name", "is_shard_name", "is_own_temporary", "check_unit_record",
           "ForeignNameError", "NotRegularFileError", "open_regular", "read_regular", "check_writable", "MetaSchema"]

FORMAT = "omnipos.scale/1"
MANIFEST_NAME = "manifest.jsonl"
_TEMP_MARK = ".tmp-"
_KIND = re.compile(r"[a-z]+")
_TEMP = re.compile(r"\.(?P<name>.+)\.tmp-\d+-[0-9a-f]{8}")  # write_atomic's temporary name for <name>
_SHA256 = re.compile(r"[0-9a-f]{64}")


def done_name(kind: str, unit: int) -> str:
    """The file a worker leaves beside a finished unit's shards: that unit's manifest record."""
    return f".{kind}-{unit:05d}.done.json"


def shard_name(kind: str, unit: int, part: int, ext: str) -> str:
    """The name of shard ``part`` of ``unit`` (name order is output order)."""
    return f"{kind}-{unit:05d}-{part:05d}.{ext}"


def is_shard_name(name: str, kind: str, unit: int | None = None) -> bool:
    """Whether ``name`` is a plain file name a job of ``kind`` writes as a shard (of ``unit``, when given)."""
    number = r"\d{5,}" if unit is None else f"{unit:05d}"
    return re.fullmatch(rf"{re.escape(kind)}-{number}-\d{{5,}}\.[a-z0-9]+", name) is not None


def _is_done_name(name: str, kind: str) -> bool:
    return re.fullmatch(rf"\.{re.escape(kind)}-\d{{5,}}\.done\.json", name) is not None


def is_own_temporary(name: str, kind: str) -> bool:
    """Whether ``name`` is a temporary of :func:`write_atomic` writing a file a job of ``kind`` writes (a
    shard, a unit record, the manifest): the only temporaries a job deletes."""
    match = _TEMP.fullmatch(name)
    if match is None:
        return False
    inner = match["name"]
    return inner == MANIFEST_NAME or is_shard_name(inner, kind) or _is_done_name(inner, kind)


class ForeignNameError(ValueError):
    """A record read back from an output folder names a file that the job would not write (``../x``, an
    absolute path, another job's shard): refused even under ``overwrite=True``, so nothing it names is read or
    deleted."""


class NotRegularFileError(ValueError):
    """A name an output folder's reader would open is not a regular file (a symbolic link, a FIFO, a device, a
    socket, a folder): never opened (a FIFO would block, ``/dev/zero`` never ends), and refused even under
    ``overwrite=True`` (omnipos did not make it, so it does not replace it); remove it by hand."""


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)


def _what_it_is(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return f"not a regular file (mode {oct(mode)})"


def _not_regular(path: Path, mode: int, what: str) -> NotRegularFileError:
    target = ""
    if stat.S_ISLNK(mode):
        try:
            target = f" to {os.readlink(path)!r}"
        except OSError:
            pass
    return NotRegularFileError(f"{path}: the {what} is {_what_it_is(mode)}{target}, not a regular file; omnipos "
                               "reads only regular files it wrote there (never a link, pipe or device): remove "
                               "it, or rerun the job into a fresh folder")


def open_regular(path: str | os.PathLike, size: int | None = None, *, what: str = "file",
                 entry: str = "") -> BinaryIO:
    """Open ``path`` for reading once it is known to be a regular file of ``size`` bytes (when given): the one
    door through which every file of an output folder is read (the manifest, unit records, shards).

    ``lstat`` first (a symbolic link, FIFO, device, socket or folder is refused without being opened), then
    ``open`` with ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat`` (a name swapped for a link or a pipe in between is
    refused too; the open cannot block), then the size against ``size``. ``what`` names the file's role and
    ``entry`` the manifest entry that lists it, in messages.

    Raises:
        FileNotFoundError: no such name. NotRegularFileError (a ValueError): not a regular file. ValueError: the
            size is not ``size``.
    """
    path = Path(path)
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode, what)
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC | _BINARY)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # replaced by a symbolic link after the lstat
            raise _not_regular(path, stat.S_IFLNK, what) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(path, info.st_mode, what)
        if size is not None and info.st_size != size:
            raise ValueError(f"{path}: the {what} has {info.st_size:,} bytes, but {entry or 'the manifest'} "
                             f"records {size:,}: it was changed, truncated or replaced since the job wrote it "
                             "(nothing of it was read); rerun the job with resume=False")
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike, size: int | None = None, *, what: str = "file",
                 entry: str = "") -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`'s checks): exactly ``size`` bytes, or the
    size ``fstat`` gives when ``size`` is None, read in one allocation (never "until the end", which a growing
    file or a device does not reach)."""
    with open_regular(path, size, what=what, entry=entry) as handle:
        expected = os.fstat(handle.fileno()).st_size if size is None else size
        payload = handle.read(expected)
    if len(payload) != expected:
        raise ValueError(f"{path}: the {what} shrank while it was read ({len(payload):,} of {expected:,} bytes); "
                         "is another program writing into the folder?")
    return payload


def check_writable(out_dir: str | os.PathLike) -> None:
    """Refuse, before any work, a job whose output folder (or, when it does not exist yet, the folder it would
    be created in) this process cannot write into: a ValueError saying so, rather than a PermissionError on an
    internal file half way. Reading a finished job back needs no writes (:meth:`Manifest.read`)."""
    out_dir = Path(out_dir)
    target = out_dir
    while not os.path.lexists(target) and target.parent != target:
        target = target.parent
    if not target.is_dir():
        return  # not a folder: refused by name where the folder is opened
    if not os.access(target, os.W_OK | os.X_OK):
        where = "" if target == out_dir else f" (out_dir {str(out_dir)!r} would be created in it)"
        raise ValueError(f"out_dir: {str(target)!r} is not writable by this process{where}: a job writes its "
                         "shards, manifest and lock file there. Choose a writable folder, or, for a finished job, "
                         "read it with load_*() / the Sharded*Dataset classes, which need no writes")


#: What a kind's loader needs of the manifest's ``meta`` records: key -> (what is expected, a check of the value,
#: whether the key is required). :meth:`Manifest.read` checks them, naming the manifest's line.
MetaSchema = dict[str, tuple[str, Callable[[Any], bool], bool]]


def _natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_unit_record(record: Any, kind: str, where: str, units: int | None = None) -> dict[str, Any]:
    """``record`` if it is a well-formed finished-unit record of a ``kind`` job (of ``units`` units, when given);
    ValueError naming ``where`` (the file and line) and the entry otherwise (:class:`ForeignNameError` for a shard
    name the job would not write)."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: a unit record must be a JSON object, got {type(record).__name__}")
    unit = record.get("unit")
    if not _natural(unit) or units is not None and unit >= units:
        bound = "" if units is None else f" below {units}"
        raise ValueError(f"{where}: 'unit' must be an integer >= 0{bound}, got {unit!r}")
    if not isinstance(record.get("source", ""), str) or not _natural(record.get("items")):
        raise ValueError(f"{where}: unit {unit}: 'source' must be a string and 'items' an integer >= 0, got "
                         f"{record.get('source')!r} and {record.get('items')!r}")
    shards = record.get("shards")
    if not isinstance(shards, list):
        raise ValueError(f"{where}: unit {unit}: 'shards' must be a list, got {type(shards).__name__}")
    for shard in shards:
        if not isinstance(shard, dict):
            raise ValueError(f"{where}: unit {unit}: a shard entry must be a JSON object, got {shard!r}")
        name = shard.get("name")
        if not isinstance(name, str) or not is_shard_name(name, kind, unit):
            raise ForeignNameError(
                f"{where}: unit {unit}: shard name {name!r} is not a file this job writes (expected a plain name "
                f"{shard_name(kind, unit, 0, 'ext')!r} ...); nothing it names is read or deleted: remove the "
                "entry (or the folder's manifest) by hand, or choose another folder")
        if not _natural(shard.get("items")) or not _natural(shard.get("bytes")) or not isinstance(
                shard.get("sha256"), str) or not _SHA256.fullmatch(shard["sha256"]):
            raise ValueError(f"{where}: unit {unit}: shard {name!r} needs 'items' and 'bytes' (integers >= 0) and "
                             f"'sha256' (64 hex digits), got {shard!r}")
    return record


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


def describe_entry(shard: dict[str, Any]) -> str:
    """How messages name a shard's manifest entry."""
    return f"its {MANIFEST_NAME} entry ({shard['name']!r}, {shard['items']:,} items, {shard['bytes']:,} bytes)"


def read_verified(out_dir: Path, shard: dict[str, Any], verify: bool = True) -> bytes:
    """The bytes of a finished shard (an entry of a checked manifest): a regular file (:func:`open_regular`) whose
    size is the manifest's (checked by ``fstat`` before anything is read; a file grown to 3 GiB costs nothing),
    read to exactly that size; with ``verify``, its sha256 must be the manifest's too. Its structure (item
    count, lengths) is the kind's loader's to check next. ValueError naming the file and the entry otherwise."""
    path = Path(out_dir) / shard["name"]
    entry = describe_entry(shard)
    try:
        payload = read_regular(path, shard["bytes"], what="shard", entry=entry)
    except FileNotFoundError:
        raise ValueError(f"{path}: shard listed in the manifest is missing ({entry})") from None
    if verify and sha256_bytes(payload) != shard["sha256"]:
        raise ValueError(f"{path}: shard does not match its checksum in the manifest (corrupt or replaced; "
                         f"{entry}); rerun the job with resume=False")
    return payload


def _read_lines(path: Path) -> list[tuple[int, Any]]:
    """The manifest's records with their line numbers."""
    records = []
    lines = read_regular(path, what="manifest").split(b"\n")
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append((number + 1, json.loads(line)))
        except (json.JSONDecodeError, UnicodeDecodeError):
            if number == len(lines) - 1 or all(not rest.strip() for rest in lines[number + 1:]):
                break  # torn last line: the writer died mid-line; that unit is simply not finished
            raise ValueError(f"{path}: line {number + 1} is not JSON (the manifest is corrupt)") from None
    if not records or not isinstance(records[0][1], dict) or "header" not in records[0][1]:
        raise ValueError(f"{path}: not an omnipos.scale manifest (no header line)")
    return records


def _check_header(header: Any, path: Path) -> dict[str, Any]:
    job = header.get("job") if isinstance(header, dict) else None
    if not isinstance(job, dict) or not isinstance(job.get("kind"), str) or not _KIND.fullmatch(job["kind"]) \
            or header.get("format") != FORMAT or not isinstance(header.get("fingerprint"), str) \
            or not _natural(header.get("units")):
        raise ValueError(f"{path}: line 1: not an {FORMAT} header (needs 'format', 'job' with a 'kind', "
                         f"'fingerprint', 'units'): {json.dumps(header)[:200]}")
    return header


class Manifest:
    """The state of one output folder. Built by :meth:`open` (a job starting) or :meth:`read` (a loader)."""

    def __init__(self, out_dir: Path, header: dict[str, Any]) -> None:
        self.out_dir = out_dir
        self.header = header
        self.meta: dict[str, Any] = {}
        self.units: dict[int, dict[str, Any]] = {}
        self.complete: dict[str, Any] | None = None
        self.meta_lines: dict[str, int] = {}  # where each meta key / unit / the complete record was read
        self.meta_line: int | None = None  # the last meta record
        self.unit_lines: dict[int, int] = {}
        self.complete_line: int | None = None

    @property
    def path(self) -> Path:
        return self.out_dir / MANIFEST_NAME

    @property
    def kind(self) -> str:
        return self.header["job"]["kind"]

    # -- reading ------------------------------------------------------------------------------------------------
    @classmethod
    def _load(cls, out_dir: Path) -> Manifest:
        """The manifest in ``out_dir``, every line checked (ValueError naming the line otherwise): each unit
        recorded once, each shard listed once, a unit's ``items`` the sum of its shards'."""
        path = out_dir / MANIFEST_NAME
        records = _read_lines(path)
        manifest = cls(out_dir, _check_header(records[0][1]["header"], path))
        kind, units = manifest.kind, manifest.header["units"]
        for number, record in records[1:]:
            where = f"{path}: line {number}"
            if isinstance(record, dict) and len(record) == 1 and "meta" in record:
                if not isinstance(record["meta"], dict):
                    raise ValueError(f"{where}: a 'meta' record must hold a JSON object, got "
                                     f"{json.dumps(record['meta'])[:200]}")
                manifest.meta.update(record["meta"])
                manifest.meta_lines.update(dict.fromkeys(record["meta"], number))
                manifest.meta_line = number
            elif isinstance(record, dict) and "unit" in record:
                record = check_unit_record(record, kind, where, units)
                unit = record["unit"]
                if unit in manifest.units:
                    raise ValueError(f"{where}: unit {unit} is recorded twice (also on line "
                                     f"{manifest.unit_lines[unit]}): its shards would be read twice; the manifest "
                                     "was edited or damaged, rerun the job with resume=False")
                names = [shard["name"] for shard in record["shards"]]
                twice = sorted({name for name in names if names.count(name) > 1})
                if twice:
                    raise ValueError(f"{where}: unit {unit} lists shard {twice[0]!r} more than once: its items "
                                     "would be read twice; rerun the job with resume=False")
                counted = sum(shard["items"] for shard in record["shards"])
                if counted != record["items"]:
                    raise ValueError(f"{where}: unit {unit} records {record['items']:,} items but its shards "
                                     f"list {counted:,}; rerun the job with resume=False")
                manifest.units[unit] = record
                manifest.unit_lines[unit] = number
            elif isinstance(record, dict) and len(record) == 1 and isinstance(record.get("complete"), dict) \
                    and _natural(record["complete"].get("items")) and _natural(record["complete"].get("shards")):
                manifest.complete = record["complete"]
                manifest.complete_line = number
            else:
                raise ValueError(f"{where}: not a manifest record (a 'meta', 'unit' or 'complete' object): "
                                 f"{json.dumps(record)[:200]}")
        return manifest

    @classmethod
    def read(cls, out_dir: str | os.PathLike, kind: str, meta: MetaSchema | None = None) -> Manifest:
        """The manifest of a finished job of ``kind`` in ``out_dir`` (what the loaders call; it writes nothing,
        so a read-only folder loads). A finished job must record every unit once, with the totals of its
        ``complete`` line; ``meta`` (the kind's :data:`MetaSchema`) checks what the loader will use of the
        ``meta`` records. ValueError naming ``manifest.jsonl`` and the line otherwise."""
        out_dir = Path(out_dir)
        path = out_dir / MANIFEST_NAME
        if not os.path.lexists(path):
            raise FileNotFoundError(f"out_dir: no {MANIFEST_NAME} in {str(out_dir)!r} (not a precompute output)")
        manifest = cls._load(out_dir)
        if manifest.kind != kind:
            raise ValueError(f"{out_dir} holds precomputed {manifest.kind}, not {kind}")
        total = manifest.header["units"]
        if manifest.complete is None:
            raise ValueError(f"{out_dir}: the job is unfinished ({len(manifest.units)} of {total} units done); "
                             "run the same precompute call again to finish it (resume=True)")
        missing = sorted(set(range(total)) - set(manifest.units))
        items = sum(record["items"] for record in manifest.units.values())
        shards = len(manifest.shards())
        if missing or manifest.complete != {"items": items, "shards": shards}:
            found = (f"unit {missing[0]} of {total} is not recorded" if missing else
                     f"the unit lines list {items:,} items in {shards:,} shards")
            raise ValueError(f"{path}: line {manifest.complete_line}: the job is recorded as complete with "
                             f"{json.dumps(manifest.complete)}, but {found}: the manifest was edited or damaged; "
                             "rerun the job with resume=False")
        if meta:
            manifest._check_meta(meta)
        return manifest

    def _check_meta(self, schema: MetaSchema) -> None:
        for key, (expected, check, required) in schema.items():
            if key not in self.meta:
                if not required:
                    continue
                where = f"line {self.meta_line}: the job's 'meta' record" if self.meta_line else "no 'meta' record"
                raise ValueError(f"{self.path}: {where} lacks {key!r} ({expected}); the manifest was edited or "
                                 "damaged, rerun the job with resume=False")
            value = self.meta[key]
            try:
                good = bool(check(value))
            except Exception:  # noqa: BLE001 - a check meeting a value of the wrong shape: a bad value
                good = False
            if not good:
                raise ValueError(f"{self.path}: line {self.meta_lines[key]}: meta {key!r} must be {expected}, got "
                                 f"{json.dumps(value, default=str)[:200]}; the manifest was edited or damaged, "
                                 "rerun the job with resume=False")

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
        deleted first. An unreadable or malformed manifest is a ValueError naming its line, or is replaced under
        ``overwrite=True`` (deleting nothing it lists); one naming a file the job would not write is a
        :class:`ForeignNameError` either way. The caller holds the folder (:func:`omnipos.scale.lock.hold_folder`).
        """
        units = len(identities)
        out_dir = Path(out_dir)
        if out_dir.exists() and not out_dir.is_dir():
            raise ValueError(f"out_dir: {str(out_dir)!r} exists and is not a folder")
        out_dir.mkdir(parents=True, exist_ok=True)
        header = {"format": FORMAT, "job": job, "fingerprint": fingerprint(job), "units": units}
        old = None
        if os.path.lexists(out_dir / MANIFEST_NAME):
            try:
                old = cls._load(out_dir)
            except (ForeignNameError, NotRegularFileError):
                raise
            except ValueError as exc:  # replaced under overwrite=True; nothing it lists is deleted
                if not overwrite:
                    raise ValueError(f"out_dir: {out_dir / MANIFEST_NAME} is unreadable; pass overwrite=True "
                                     f"(--overwrite) to replace it, or choose another folder ({exc})") from None
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
                if unit not in found and os.path.lexists(done):
                    record = _read_done(done, kind, unit)
                    if record is not None:
                        found[unit] = record
            manifest.units = {u: r for u, r in found.items()
                              if u < units and r.get("input") == identities[u] and manifest._present(r)}
            for unit, record in found.items():
                if unit not in manifest.units:  # its input changed or a shard is gone: redone, old shards removed
                    for shard in record.get("shards", []):
                        _remove(out_dir / shard["name"], "shard")
        elif old is not None:
            old.remove_files()
            old._remove_temporaries()  # another kind's unit records and temporaries, too
        manifest._remove_temporaries()
        manifest._rewrite()
        return manifest

    def _present(self, record: dict[str, Any]) -> bool:
        """Whether every shard of a (checked) unit record is in the folder with its recorded size."""
        for shard in record["shards"]:
            try:
                info = os.lstat(self.out_dir / shard["name"])
            except FileNotFoundError:
                return False
            if not stat.S_ISREG(info.st_mode) or info.st_size != shard["bytes"]:
                return False  # redone; the name (the job's own) is removed first, whatever it is
        return True

    def remove_files(self) -> None:
        """Delete the shard files this manifest lists, and the manifest itself."""
        for unit in self.units.values():
            for shard in unit["shards"]:
                _remove(self.out_dir / shard["name"], "shard")
        _remove(self.path, "manifest")

    def _remove_temporaries(self) -> None:
        """Half-written files of this job's killed writers, and its workers' unit records (recorded or stale by
        now); only those names (see :func:`is_own_temporary`): a user's ``notes.tmp-1`` stays."""
        kind = self.kind
        for path in self.out_dir.iterdir():
            if is_own_temporary(path.name, kind) or _is_done_name(path.name, kind):
                _remove(path, "temporary file")

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


def _remove(path: Path, what: str) -> None:
    """Delete one of the job's own names (a link or a pipe under it is just unlinked); a folder under it is
    refused by name (nothing inside it is touched) instead of an IsADirectoryError."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            raise _not_regular(path, stat.S_IFDIR, what)
    except FileNotFoundError:
        return
    path.unlink(missing_ok=True)


def _read_done(path: Path, kind: str, unit: int) -> dict[str, Any] | None:
    """A worker's record of ``unit`` (checked like a manifest line), or None when it is damaged (the unit is then
    redone; the file is removed with the other temporaries). A record naming foreign files is refused."""
    try:
        record = json.loads(read_regular(path, what="unit record"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, NotRegularFileError):
        return None  # a link, pipe or device under the name is never opened: removed, the unit redone
    if not isinstance(record, dict) or record.get("unit") != unit:
        return None
    try:
        return check_unit_record(record, kind, str(path))
    except ForeignNameError:
        raise
    except ValueError:
        return None


def _difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    fields = sorted(key for key in set(old) | set(new) if old.get(key) != new.get(key))
    if "kind" in fields:
        return f"it precomputed {old.get('kind')!r}, this job is {new.get('kind')!r}"
    return "different " + ", ".join(fields) if fields else "a different format"
