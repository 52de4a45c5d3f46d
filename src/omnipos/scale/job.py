"""The driver of a precompute job: open the manifest, run the unfinished units on the engine, record each as it
finishes, report progress, and sum up (:class:`PrecomputeResult`; :class:`PrecomputeError` when units failed)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omnipos.core import progress_reporter

from .engine import Engine
from .lock import hold_folder
from .manifest import Manifest, check_writable
from .shards import ShardWriter, UnitRunner

__all__ = ["Unit", "file_units", "PrecomputeResult", "PrecomputeError", "run_job"]


@dataclass(frozen=True)
class Unit:
    """One unit of work: its index, what it reads (for messages and the manifest), its item count when known in
    advance, and the identity of its input (a file's size and mtime, a slice's content hash): a finished unit
    whose input identity has changed since is redone on resume."""

    index: int
    source: str
    items: int | None = None
    identity: Any = None


def file_units(files: Sequence[Path]) -> tuple[list[Unit], dict[str, Any]]:
    """One unit per input file, and the job's ``inputs`` entry (the files' resolved paths; their sizes and
    modification times are each unit's identity)."""
    units = []
    for i, path in enumerate(files):
        stat = path.stat()
        units.append(Unit(i, str(path), identity={"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}))
    return units, {"files": [str(p.resolve()) for p in files]}


@dataclass
class PrecomputeResult:
    """What a precompute call did.

    Attributes:
        kind: ``"graphs"``, ``"reads"`` or ``"meds"``. out_dir: the output folder.
        items, shards: in the output folder once the job is finished (finished units only, if some failed).
        items_computed, shards_computed: by this call (the rest were resumed from an earlier run).
        units, units_resumed: units of work of the job, and those this call found finished.
        seconds: wall time of this call. failures: ``(source, message)`` of each unit that failed.
    """

    kind: str
    out_dir: Path
    items: int = 0
    shards: int = 0
    items_computed: int = 0
    shards_computed: int = 0
    units: int = 0
    units_resumed: int = 0
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)

    @property
    def items_per_second(self) -> float:
        """Items computed by this call per second of its wall time."""
        return self.items_computed / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        """One line: items, shards, seconds, items/s (and what was resumed or failed)."""
        line = (f"precompute {self.kind}: {self.items:,} items in {self.shards:,} shards "
                f"({self.shards_computed:,} computed, {self.units_resumed:,} of {self.units:,} units resumed), "
                f"{self.seconds:.1f} s, {self.items_per_second:,.0f} items/s -> {self.out_dir}")
        if self.failures:
            line += f"; FAILED {len(self.failures)} unit(s): " + "; ".join(s for s, _ in self.failures)
        return line


class PrecomputeError(ValueError):
    """Some units failed (bad input, or a worker process that died on every retry: killed, out of memory,
    crashed); the others finished and are recorded. The message names each failed unit, its input (a file, or a
    slice ``graphs[20:30]``) and the cause; ``result`` holds the summary, ``result.failures`` the ``(source,
    message)`` of each failed unit. Running the same call again resumes: it redoes only those."""

    def __init__(self, message: str, result: PrecomputeResult) -> None:
        super().__init__(message)
        self.result = result


def run_job(
    kind: str,
    out_dir: str | Path,
    job: dict[str, Any],
    units: Sequence[Unit],
    body: Callable[[int, Any, ShardWriter], None],
    ext: str,
    *,
    engine: Engine,
    resume: bool,
    overwrite: bool,
    progress: Any,
    payload: Callable[[int], Any] | None = None,
    meta: dict[str, Any] | None = None,
) -> PrecomputeResult:
    """Run ``units`` of ``job`` into ``out_dir``: ``body(unit, payload, writer)`` writes a unit's shards (see
    :class:`omnipos.scale.shards.UnitRunner`); ``payload(unit)`` gives what a unit reads when it is not a file (an
    in-memory slice); ``meta`` is recorded in the manifest for the loaders (e.g. the options they need)."""
    started = time.perf_counter()
    check_writable(out_dir)  # a read-only folder is refused by name before the lock file or anything is written
    with hold_folder(out_dir) as held:  # one run per folder, from reading the manifest to recording the last unit
        manifest = Manifest.open(out_dir, job, [u.identity for u in units], resume=resume, overwrite=overwrite)
        if meta and manifest.meta != meta:
            manifest.set_meta(meta)
        result = PrecomputeResult(kind, manifest.out_dir, units=len(units))
        by_index = {u.index: u for u in units}
        failed: list[tuple[Unit, str]] = []  # in the order units finish; reported in unit order
        pending = [u.index for u in units if u.index not in manifest.units]
        result.units_resumed = len(units) - len(pending)
        known = [u.items for u in units]
        total = sum(known) if all(n is not None for n in known) else None
        # workers write through this run's staging folder, into out_dir only while this run holds it
        if pending:
            held.staging.mkdir(mode=0o700, exist_ok=True)
        work = UnitRunner(kind, str(manifest.out_dir), ext, [u.source for u in units], [u.identity for u in units],
                          body, staging=str(held.staging), token=held.token, driver_pid=os.getpid())
        with progress_reporter(progress, total=total, desc=f"precompute {kind}") as bar:
            resumed_items = sum(r["items"] for r in manifest.units.values())
            if resumed_items:
                bar.update(resumed_items)

            def on_result(record: dict[str, Any]) -> None:
                if "error" in record:
                    failed.append((by_index[int(record["unit"])], record["error"]))
                    return
                manifest.record(record)
                result.items_computed += record["items"]
                result.shards_computed += len(record["shards"])
                bar.update(record["items"])

            with engine.session() as run:
                run(pending, work, payload, on_result)
        if not failed:
            manifest.finish()
    result.items = sum(r["items"] for r in manifest.units.values())
    result.shards = len(manifest.shards())
    result.seconds = time.perf_counter() - started
    failed.sort(key=lambda pair: pair[0].index)
    result.failures = [(unit.source, error) for unit, error in failed]
    # a file's errors name it already
    failed_lines = [f"unit {unit.index}, {unit.source}: {error.removeprefix(f'{unit.source}: ')}"
                    for unit, error in failed]
    if result.failures:
        raise PrecomputeError(f"{len(result.failures)} of {len(units)} units failed (the other "
                              f"{len(units) - len(result.failures)} finished and are recorded; run the same call "
                              "again once the cause is fixed: it resumes, redoing only the failed units):\n"
                              + "\n".join(f"  {line}" for line in failed_lines), result)
    return result
