"""The worker side of a unit of work: write its shards atomically, report them, or report why it failed.

A unit (an input file, or a slice of an in-memory list) writes one or more shards of at most ``shard_size`` items,
named ``{kind}-{unit:05d}-{part:05d}.{ext}`` so that name order is output order. :class:`UnitRunner` runs a
kind's ``body(unit, payload, writer)`` and turns the outcome into the JSON-able record the driver puts in the
manifest. The worker also leaves that record beside the shards (``.{kind}-{unit:05d}.done.json``, written
atomically): if the driver dies, or Ray aborts the job, before it records a finished unit, the next run adopts
the unit from it instead of redoing it. A unit that raises reports its error (the other units go on) and leaves
no shard behind.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .manifest import done_name, shard_name, write_atomic

__all__ = ["ShardWriter", "UnitRunner"]


class ShardWriter:
    """Writes the shards of one unit: ``write(payload, items)`` per shard, in order."""

    def __init__(self, out_dir: str | Path, kind: str, unit: int, ext: str) -> None:
        self.out_dir = Path(out_dir)
        self.kind, self.unit, self.ext = kind, unit, ext
        self.records: list[dict[str, Any]] = []

    def write(self, payload: bytes, items: int) -> None:
        name = shard_name(self.kind, self.unit, len(self.records), self.ext)
        record = write_atomic(self.out_dir / name, payload)
        self.records.append({"name": record["name"], "items": int(items), "bytes": record["bytes"],
                             "sha256": record["sha256"]})

    def discard(self) -> None:
        for record in self.records:
            (self.out_dir / record["name"]).unlink(missing_ok=True)
        self.records = []


@dataclass
class UnitRunner:
    """``work(unit, payload) -> record``, the function an engine runs for each unit (picklable: Ray ships it).

    ``sources[unit]`` / ``identities[unit]`` name the unit's input and its identity (recorded with its shards);
    ``body(unit, payload, writer)`` does the kind's work."""

    kind: str
    out_dir: str
    ext: str
    sources: Sequence[str]
    identities: Sequence[Any]
    body: Callable[[int, Any, ShardWriter], None]

    def __call__(self, unit: int, payload: Any) -> dict[str, Any]:
        """``{"unit", "source", "items", "shards", "seconds", "input"}`` when the unit finishes; ``{"unit",
        "error"}`` when it raises (its shards deleted): one bad input file does not stop the others."""
        writer = ShardWriter(self.out_dir, self.kind, unit, self.ext)
        started = time.perf_counter()
        try:
            self.body(unit, payload, writer)
        except Exception as exc:  # noqa: BLE001 - reported to the driver, which raises after the other units finish
            writer.discard()
            message = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            return {"unit": unit, "error": message}
        record = {"unit": unit, "source": self.sources[unit], "items": sum(s["items"] for s in writer.records),
                  "shards": writer.records, "seconds": round(time.perf_counter() - started, 6),
                  "input": self.identities[unit]}
        write_atomic(Path(self.out_dir) / done_name(self.kind, unit), json.dumps(record).encode())
        return record
