"""The driver of a precompute job: open the manifest, run the unfinished units on the engine, record each as it
finishes, report progress, and sum up (:class:`PrecomputeResult`; :class:`PrecomputeError` when units failed)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omnipos.core import progress_reporter

from .engine import Engine
from .manifest import Manifest

__all__ = ["Unit", "PrecomputeResult", "PrecomputeError", "run_job"]


@dataclass(frozen=True)
class Unit:
    """One unit of work: its index, what it reads (for messages and the manifest), and its item count when known
    in advance."""

    index: int
    source: str
    items: int | None = None


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
    """Some units failed (bad input); the others finished and are recorded. ``result`` holds the summary,
    ``result.failures`` the ``(source, message)`` of each failed unit. Rerunning retries only those."""

    def __init__(self, message: str, result: PrecomputeResult) -> None:
        super().__init__(message)
        self.result = result


def run_job(
    kind: str,
    out_dir: str | Path,
    job: dict[str, Any],
    units: Sequence[Unit],
    make_work: Callable[[dict[str, Any]], Callable[[int, Any], dict]],
    *,
    engine: Engine,
    resume: bool,
    overwrite: bool,
    progress: Any,
    payload: Callable[[int], Any] | None = None,
    prepare: Callable[[Callable[..., None]], dict[str, Any]] | None = None,
) -> PrecomputeResult:
    """Run ``units`` of ``job`` into ``out_dir``.

    ``make_work(meta)`` builds the unit function ``work(unit, payload) -> record`` (see
    :func:`omnipos.scale.shards.run_unit`) from the manifest's meta; ``payload(unit)`` gives what a unit reads
    when it is not a file (an in-memory slice); ``prepare(run)`` computes the meta when the manifest has none yet
    (e.g. a code vocabulary), with the same engine session.
    """
    started = time.perf_counter()
    manifest = Manifest.open(out_dir, job, len(units), resume=resume, overwrite=overwrite)
    result = PrecomputeResult(kind, manifest.out_dir, units=len(units))
    by_index = {u.index: u for u in units}
    pending = [u.index for u in units if u.index not in manifest.units]
    result.units_resumed = len(units) - len(pending)
    known = [u.items for u in units]
    total = sum(known) if all(n is not None for n in known) else None
    with progress_reporter(progress, total=total, desc=f"precompute {kind}") as bar:
        resumed_items = sum(r["items"] for r in manifest.units.values())
        if resumed_items:
            bar.update(resumed_items)

        def on_result(record: dict[str, Any]) -> None:
            unit = int(record["unit"])
            if "error" in record:
                result.failures.append((by_index[unit].source, record["error"]))
                return
            done = manifest.record(unit, by_index[unit].source, record["shards"])
            result.items_computed += done["items"]
            result.shards_computed += len(done["shards"])
            bar.update(done["items"])

        with engine.session() as run:
            if prepare is not None and not manifest.meta and pending:
                manifest.set_meta(prepare(run))
            run(pending, make_work(manifest.meta), payload, on_result)
    if not result.failures:
        manifest.finish()
    result.items = sum(r["items"] for r in manifest.units.values())
    result.shards = len(manifest.shards())
    result.seconds = time.perf_counter() - started
    if result.failures:
        failed = "\n".join(f"  {message}" for _, message in result.failures)
        raise PrecomputeError(f"{len(result.failures)} of {len(units)} units failed (the other "
                              f"{len(units) - len(result.failures)} finished and are recorded; fix the input and "
                              f"run again to redo only the failed ones):\n{failed}", result)
    return result
