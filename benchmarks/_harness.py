"""Shared benchmark harness: warm-up, repeats, medians, CUDA synchronisation, a printed table and JSON.

Every benchmark runs omnipos and its peer in the same process on the same data; the ratio is the figure
(absolute times on a shared machine are noise).

    from _harness import Bench
    bench = Bench("sinusoid")
    t_ours = bench.time(lambda: ours(x), device=x.device)
    bench.row(case="L=4096", omnipos_s=t_ours, peer_s=t_peer, speedup=t_peer / t_ours)
    bench.finish()          # prints the table, writes benchmarks/results/sinusoid.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def device_name(device: torch.device | str | None = None) -> str:
    device = torch.device(device or "cpu")
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"


def synchronize(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], Any], *, device: torch.device | str | None = None, warmup: int = 3,
              repeats: int = 10, min_seconds: float = 0.0) -> float:
    """Median wall time of ``fn()`` in seconds, after ``warmup`` untimed calls, synchronising CUDA around each."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < repeats or time.perf_counter() - started < min_seconds:
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def paired_times(fns: dict[str, Callable[[], Any]], *, device: torch.device | str | None,
                 repeats: int, calls: int = 1) -> dict[str, float]:
    """Median seconds per call of each function, the functions interleaved (a, b, c, a, b, c, ...) so that all of
    them see the same load on a shared machine; each sample times ``calls`` calls together (for calls of a few
    microseconds); each function is called twice untimed first."""
    for fn in fns.values():
        fn()
        fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            synchronize(device)
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            synchronize(device)
            samples[name].append((time.perf_counter() - start) / calls)
    return {name: statistics.median(values) for name, values in samples.items()}


def wall_and_cpu_medians(fn: Callable[[], Any], *, repeats: int, warmup: int = 0) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds of this process) of ``fn()``: on a shared machine the CPU figure
    is what the work costs; the wall figure also counts waiting for a core (and gains from using both)."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)



def cuda_median(fn: Callable[[], Any], *, warmup: int = 3, repeats: int = 20) -> float:
    """Median seconds of ``fn()`` between CUDA events, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    return statistics.median(samples)


def graph_of(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` captured in a CUDA graph after two warm-up calls on a side stream (static inputs): the replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def common_arguments(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats (a smoke run)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default: benchmarks/results/NAME.json)")
    return parser


class Bench:
    """Collects rows of one benchmark, prints them as a table and writes them as JSON."""

    def __init__(self, name: str, *, device: torch.device | str | None = None, notes: str = "") -> None:
        self.name = name
        self.device = torch.device(device or "cpu")
        self.notes = notes
        self.rows: list[dict[str, Any]] = []

    def time(self, fn: Callable[[], Any], **kwargs: Any) -> float:
        kwargs.setdefault("device", self.device)
        return time_call(fn, **kwargs)

    def row(self, **values: Any) -> None:
        self.rows.append(values)

    def table(self) -> str:
        if not self.rows:
            return "(no rows)"
        columns = list(dict.fromkeys(key for row in self.rows for key in row))
        cells = [[_format(row.get(col, "")) for col in columns] for row in self.rows]
        widths = [max(len(col), *(len(r[i]) for r in cells)) for i, col in enumerate(columns)]
        lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |",
                 "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        lines += ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |" for r in cells]
        return "\n".join(lines)

    def finish(self, out: Path | None = None) -> Path:
        header = f"{self.name} on {device_name(self.device)} (torch {torch.__version__})"
        print(header)
        if self.notes:
            print(self.notes)
        print(self.table())
        out = out or RESULTS / f"{self.name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"benchmark": self.name, "device": device_name(self.device), "torch": torch.__version__,
                   "python": platform.python_version(), "notes": self.notes, "rows": self.rows}
        out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
        print(f"wrote {out}")
        return out


def _format(value: Any) -> str:
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1e4 or abs(value) < 1e-3:
            return f"{value:.2e}"
        return f"{value:.3f}"
    return str(value)
