"""The worker side of a unit of work: write its shards atomically, report them, or report why it failed.

A unit (an input file, or a slice of an in-memory list) writes one or more shards of at most ``shard_size`` items,
named ``{kind}-{unit:05d}-{part:05d}.{ext}`` so that name order is output order. :func:`run_unit` turns the unit's
outcome into the JSON-able record the driver puts in the manifest; a unit that raises reports its error (the other
units go on) and leaves no shard behind.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .manifest import write_atomic

__all__ = ["ShardWriter", "run_unit"]


class ShardWriter:
    """Writes the shards of one unit: ``write(payload, items)`` per shard, in order."""

    def __init__(self, out_dir: str | Path, kind: str, unit: int, ext: str) -> None:
        self.out_dir = Path(out_dir)
        self.kind, self.unit, self.ext = kind, unit, ext
        self.records: list[dict[str, Any]] = []

    def write(self, payload: bytes, items: int) -> None:
        name = f"{self.kind}-{self.unit:05d}-{len(self.records):05d}.{self.ext}"
        record = write_atomic(self.out_dir / name, payload)
        self.records.append({"name": record["name"], "items": int(items), "bytes": record["bytes"],
                             "sha256": record["sha256"]})

    def discard(self) -> None:
        for record in self.records:
            (self.out_dir / record["name"]).unlink(missing_ok=True)
        self.records = []


def run_unit(writer: ShardWriter, body: Callable[[ShardWriter], None]) -> dict[str, Any]:
    """Run ``body(writer)``: ``{"unit", "shards"}`` when it finishes, ``{"unit", "error"}`` when it raises
    (its shards deleted). Errors are reported, not raised, so that one bad input file does not stop the others."""
    try:
        body(writer)
    except Exception as exc:  # noqa: BLE001 - reported to the driver, which raises after the other units finish
        writer.discard()
        message = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        return {"unit": writer.unit, "error": message}
    return {"unit": writer.unit, "shards": writer.records}
