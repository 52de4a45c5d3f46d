"""omnipos.scale: items/s and peak memory of dataset-scale precompute, the local engine (1 and 2 worker
processes) vs Ray, on this machine, and a projection to a cluster from the per-shard timings.

Two workloads, generated here:

- graphs: 100,000 molecule-like graphs (5..50 atoms, chain-like trees with ring closures), LapPE k=8 + RWPE 16
  (``Compose([AddLaplacianPE(8), AddRandomWalkPE(16)])``), given as an in-memory list;
- reads: 2,000,000 150-bp FASTQ reads in 8 gzip files (level 1).

Each case runs in a fresh child process (so that its peak memory is its own): the single-process domain function
(``omnipos.graph.precompute`` / a ``read_fastx`` loop, no output written), ``engine="local"`` with 1 and with 2
worker processes (``local1``, ``local2``) and ``engine="ray"`` (a local Ray with ``--num-cpus`` CPUs). An engine
is started before the clock by a tiny warm-up job (Ray: ``ray.init`` and its workers' imports; local: the fork
server, which imports torch and omnipos once); that start-up is the ``start_s`` column, what a small job pays on
top of its work. Peak memory is the peak sum of PSS (proportional set size: shared pages counted once) over the case's
process tree: driver, Ray's GCS/raylet/workers and the object store's shared memory. The closing projection uses
the measured per-shard times and bytes, see ``project``.

Lazy datasets (``--lazy``, a second table): peak memory of reading a finished job back, all at once
(``load_graphs`` / ``load_reads`` / ``load_meds``) against iterating its lazy dataset through a ``DataLoader``
(``ShardedGraphDataset`` / ``ShardedReadsDataset`` / ``ShardedMedsDataset``, batches of ``--lazy-batch``), each
in a fresh child process: peak RSS (``ru_maxrss``) above the child's own after its imports. The jobs hold what
issue 23 measured: reads, 40,000 of 151 bp and ten of 507 bp; MEDS, 20,000 subjects of ~50 events and one of
8,000; graphs, the molecules above.

Shuffled epochs (``--shuffle``, a third table): one epoch of each lazy dataset through a ``DataLoader`` (batches
of ``--lazy-batch``), each case with a fresh dataset in one child process per dataset: in order; shuffled by
``dataset.sampler(shuffle=True, seed=0)``; ``shuffle=True`` with the default cache and with the old default of two
cached shards (``cache_shards=2``); and with a tight budget (``cache_bytes`` = a quarter of the parsed job) in order,
by the sampler and with ``shuffle=True``; then two workers, the sampler's plain and worker-aware orders
(``batch_size=``/``num_workers=``). ``parses`` counts shard reads (summed over workers); seconds are wall and this
process's CPU (with workers, the workers' CPU is not counted). The jobs have 20 shards (graphs: 12).

    python benchmarks/bench_scale.py [--quick] [--graphs N] [--reads N] [--num-cpus 2] [--lazy] [--shuffle]
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import pickle
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


# -- data ---------------------------------------------------------------------------------------------------------
def molecules(count: int, seed: int = 0) -> list:
    """Molecule-like graphs: sizes ~ N(23, 7) clipped to 5..50 atoms; atom k bonds to one of the 3 atoms before it
    (chains with short branches), plus a ring closure k -> k-5 on ~1 atom in 7; both directions; x [n, 9]."""
    import torch
    from torch_geometric.data import Data

    rng = np.random.default_rng(seed)
    sizes = np.clip(rng.normal(23, 7, count).round(), 5, 50).astype(np.int64)
    out = []
    for n in sizes.tolist():
        k = np.arange(1, n)
        parent = np.maximum(k - rng.integers(1, 4, n - 1), 0)
        ring = k[(k >= 5) & (rng.random(n - 1) < 1 / 7)]
        src = np.concatenate([k, ring])
        dst = np.concatenate([parent, ring - 5])
        edges = torch.from_numpy(np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])]))
        out.append(Data(x=torch.from_numpy(rng.standard_normal((n, 9)).astype(np.float32)), edge_index=edges,
                        num_nodes=n))
    return out


def write_reads(folder: Path, total: int, files: int, length: int = 150, seed: int = 0) -> list[Path]:
    """``total`` random reads of ``length`` bases (0.1% N, Phred 2..40) in ``files`` gzip FASTQ files."""
    acgt = np.frombuffer(b"ACGT", dtype=np.uint8)
    rng = np.random.default_rng(seed)
    paths = []
    per_file = -(-total // files)
    for f in range(files):
        count = min(per_file, total - f * per_file)
        path = folder / f"reads_{f}.fq.gz"
        with gzip.open(path, "wb", compresslevel=1) as handle:
            for start in range(0, count, 50_000):
                n = min(50_000, count - start)
                bases = acgt[rng.integers(0, 4, (n, length))]
                bases[rng.random((n, length)) < 0.001] = ord("N")
                quals = (33 + rng.integers(2, 41, (n, length))).astype(np.uint8)
                handle.write(b"".join(b"@f%dr%d\n%s\n+\n%s\n" % (f, start + i, bases[i].tobytes(), quals[i].tobytes())
                                      for i in range(n)))
        paths.append(path)
    return paths


# -- one case, in a child process -----------------------------------------------------------------------------
class PeakPss:
    """Samples the summed PSS of this process and all its descendants every ``interval`` seconds."""

    def __init__(self, interval: float = 0.2) -> None:
        import psutil

        self.psutil, self.interval, self.peak = psutil, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        me = self.psutil.Process()
        total = 0
        for proc in [me, *me.children(recursive=True)]:
            try:
                total += proc.memory_full_info().pss
            except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakPss:
        self.peak = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def unit_stats(out: Path) -> dict:
    """Per-unit worker seconds, items and shard bytes from the job's manifest."""
    units = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()[1:]]
    units = [u for u in units if "unit" in u]
    seconds = [u["seconds"] for u in units]
    items = [u["items"] for u in units]
    shards = [s for u in units for s in u["shards"]]
    return {"units": len(units), "shards": len(shards), "unit_seconds_median": statistics.median(seconds),
            "unit_seconds_max": max(seconds), "unit_seconds_sum": sum(seconds),
            "items_per_unit": statistics.median(items),
            "output_bytes_per_item": sum(s["bytes"] for s in shards) / max(sum(items), 1)}


def run_case(args: argparse.Namespace) -> dict:
    import torch
    from torch_geometric.transforms import Compose

    from omnipos.dna import read_fastx
    from omnipos.graph import AddLaplacianPE, AddRandomWalkPE, precompute
    from omnipos.scale import precompute_graphs, precompute_reads

    workload, how = args.case.split("-")
    out = Path(args.work) / f"out-{args.case}"
    result: dict = {"case": args.case}
    if workload == "graphs":
        data = molecules(args.graphs)
        transform = Compose([AddLaplacianPE(8), AddRandomWalkPE(16)])
        from omnipos.scale.graphs import _collate, _content_hash

        result["input_bytes_per_item"] = len(pickle.dumps(_collate(data, 0, 1000), protocol=5)) / 1000
        # what the driver does with every in-memory graph before Ray gets it: collate, hash, pickle
        sample = data[:10_000]
        t0 = time.process_time()
        for start in range(0, len(sample), 1000):
            stored = _collate(sample, start, min(start + 1000, len(sample)))
            _content_hash(stored)
            pickle.dumps(stored, protocol=5)
        result["driver_cpu_per_item_s"] = (time.process_time() - t0) / len(sample)
    elif workload == "dispatch":  # many one-read files: what the driver spends per unit, whatever its size
        data = []
        for i in range(args.dispatch_units):
            data.append(Path(args.work) / f"tiny_{i}.fq")
            data[-1].write_bytes(b"@t%d\nACGT\n+\nIIII\n" % i)
    else:
        data = sorted(Path(args.work).glob("reads_*.fq.gz"))
    engine = "local" if how.startswith("local") else how
    num_cpus = int(how[len("local"):]) if how.startswith("local") else args.num_cpus
    started = None
    if how != "single":
        t0 = time.perf_counter()
        if how == "ray":
            import ray

            ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        # warm the engine up (Ray's workers import torch, torch_geometric, omnipos; the local engine's fork server
        # imports them once): a one-time cost per process, paid by the first job
        warm = Path(args.work) / f"warm-{args.case}"
        if workload == "graphs":
            precompute_graphs(data[:64], warm, transform, engine=engine, num_cpus=num_cpus, shard_size=8,
                              progress=False)
        else:
            tiny = Path(args.work) / "warm.fq"
            tiny.write_bytes(b"@w\nACGT\n+\nIIII\n")
            precompute_reads([tiny] * num_cpus * 4, warm, engine=engine, num_cpus=num_cpus, progress=False)
        started = time.perf_counter() - t0
    torch.set_num_threads(1)
    with PeakPss() as memory:
        t0, cpu0 = time.perf_counter(), time.process_time()
        if how == "single":
            if workload == "graphs":
                items = len(precompute(data, transform, batch_size=1024, progress=False))
            else:
                items = sum(len(batch) for path in data for batch in read_fastx(path, batch_size=8192))
        elif workload == "dispatch":
            items = precompute_reads(data, out, engine="ray", resume=False, overwrite=True, progress=False).items
        elif workload == "graphs":
            items = precompute_graphs(data, out, transform, engine=engine, shard_size=args.graph_shard_size,
                                      num_cpus=num_cpus, resume=False, overwrite=True, progress=False).items
        else:
            items = precompute_reads(data, out, engine=engine, shard_size=args.read_shard_size, num_cpus=num_cpus,
                                     resume=False, overwrite=True, progress=False).items
        seconds, driver_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    result.update(items=items, seconds=seconds, items_per_s=items / seconds, peak_pss_mib=memory.peak / 2**20,
                  start_s=started, driver_cpu_s=driver_cpu)
    if how != "single":
        result.update(unit_stats(out))
    return result


# -- lazy datasets: memory of reading a job back --------------------------------------------------------------------
LAZY_KINDS = ("graphs", "reads", "meds")


def lazy_sizes(args: argparse.Namespace) -> dict:
    """The lazy-dataset jobs' sizes (issue 23's shapes; --quick scales them down 10x)."""
    scale = 10 if args.quick else 1
    return {"short_reads": 40_000 // scale, "long_reads": 10, "subjects": 20_000 // scale, "events": 50,
            "long_subject": 8_000, "graphs": min(args.graphs, 20_000)}


def lazy_prepare(args: argparse.Namespace) -> dict:
    """Write the three jobs the lazy cases read back (in a child process of its own)."""
    import pandas as pd

    from omnipos.scale import precompute_graphs, precompute_meds, precompute_reads

    work, sizes = Path(args.work), lazy_sizes(args)
    rng = np.random.default_rng(5)
    lengths = np.concatenate([np.full(sizes["short_reads"], 151), np.full(sizes["long_reads"], 507)])
    rng.shuffle(lengths)
    bases = np.frombuffer(b"ACGT", np.uint8)[rng.integers(0, 4, int(lengths.sum()))].tobytes()
    ends = np.cumsum(lengths).tolist()
    fastq = work / "lazy_reads.fq"
    fastq.write_bytes(b"".join(b"@r%d\n%s\n+\n%s\n" % (i, bases[e - n:e], b"I" * n)
                               for i, (n, e) in enumerate(zip(lengths.tolist(), ends))))
    precompute_reads(fastq, work / "lazy-reads", dim=16, shard_size=10_000, progress=False)
    counts = rng.poisson(sizes["events"], sizes["subjects"]).clip(1)
    counts[sizes["subjects"] // 2] = sizes["long_subject"]
    subject = np.repeat(np.arange(sizes["subjects"]), counts)
    frame = pd.DataFrame({"subject_id": subject, "code": rng.choice([f"LAB//{i}" for i in range(300)], subject.size),
                          "time": pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 10**8, subject.size),
                                                                               unit="s"),
                          "numeric_value": rng.normal(size=subject.size).astype(np.float32)})
    (work / "lazy_meds" / "data").mkdir(parents=True)
    for part in range(4):
        frame[frame["subject_id"] % 4 == part].to_parquet(work / "lazy_meds" / "data" / f"{part}.parquet")
    precompute_meds(work / "lazy_meds", work / "lazy-meds", shard_size=2_000, progress=False)
    from torch_geometric.transforms import Compose

    from omnipos.graph import AddLaplacianPE, AddRandomWalkPE

    precompute_graphs(molecules(sizes["graphs"]), work / "lazy-graphs", Compose([AddLaplacianPE(8),
                                                                                  AddRandomWalkPE(16)]),
                      shard_size=max(sizes["graphs"] // 10, 1), progress=False)
    return {"case": "lazy-prepare", **sizes}


def lazy_case(args: argparse.Namespace) -> dict:
    """``lazy-<kind>-load`` or ``lazy-<kind>-iterate``: read a job back, peak RSS above the imports."""
    import resource

    import torch

    from omnipos import scale

    _, kind, how = args.case.split("-")
    out = Path(args.work) / f"lazy-{kind}"
    if kind == "graphs":
        import torch_geometric.loader  # noqa: F401 - imports are the baseline, not the work measured
    else:
        import pandas  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    torch.set_num_threads(1)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    if how == "load":
        loaded = {"graphs": scale.load_graphs, "reads": scale.load_reads, "meds": scale.load_meds}[kind](out)
        items = len(loaded) if kind == "graphs" else len(loaded["names"]) if kind == "reads" else len(loaded.subjects)
        widest = "" if kind == "graphs" else tuple(loaded["tokens"].shape if kind == "reads" else loaded.times.shape)
    else:
        if kind == "graphs":
            from torch_geometric.loader import DataLoader

            dataset = scale.ShardedGraphDataset(out)
            loader = DataLoader(dataset, batch_size=args.lazy_batch)
        else:
            dataset = scale.ShardedReadsDataset(out) if kind == "reads" else scale.ShardedMedsDataset(out)
            loader = torch.utils.data.DataLoader(dataset, batch_size=args.lazy_batch, collate_fn=dataset.collate)
        items, widest = 0, 0
        for batch in loader:
            if kind == "graphs":
                items += batch.num_graphs
            elif kind == "reads":
                items, widest = items + len(batch["names"]), max(widest, batch["tokens"].shape[1])
            else:
                items, widest = items + len(batch.subjects), max(widest, batch.times.shape[1])
        widest = f"widest batch {widest}" if kind != "graphs" else ""
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {"case": args.case, "items": items, "seconds": seconds, "peak_mib": peak / 2**20, "shape": str(widest)}


def run_lazy(args: argparse.Namespace, work: str) -> list[dict]:
    """The lazy-dataset cases, each in its own child process."""
    rows = [run_child(args, "lazy-prepare", work)]
    for kind in LAZY_KINDS:
        for how in ("load", "iterate"):
            rows.append(run_child(args, f"lazy-{kind}-{how}", work))
            print(f"lazy-{kind}-{how}: peak {rows[-1]['peak_mib']:,.0f} MiB", flush=True)
    return rows[1:]


# -- shuffled epochs: shard reads and time -------------------------------------------------------------------------
def shuffle_sizes(args: argparse.Namespace) -> dict:
    """The shuffle jobs (--quick: 10x fewer reads and subjects, 3,000 graphs as issue 36 measured)."""
    scale = 10 if args.quick else 1
    return {"reads": 40_000 // scale, "subjects": 20_000 // scale, "graphs": 3_000 if args.quick else 12_000,
            "shards": 20, "graph_shards": 12}


def shuffle_prepare(args: argparse.Namespace) -> dict:
    """Write the three jobs the shuffle cases read (in a child process of its own)."""
    import pandas as pd
    from torch_geometric.transforms import Compose

    from omnipos.graph import AddLaplacianPE, AddRandomWalkPE
    from omnipos.scale import precompute_graphs, precompute_meds, precompute_reads

    work, sizes = Path(args.work), shuffle_sizes(args)
    rng = np.random.default_rng(7)
    n = sizes["reads"]
    bases = np.frombuffer(b"ACGT", np.uint8)[rng.integers(0, 4, (n, 151))]
    quals = (33 + rng.integers(2, 41, (n, 151))).astype(np.uint8)
    fastq = work / "shuffle_reads.fq"
    fastq.write_bytes(b"".join(b"@r%d\n%s\n+\n%s\n" % (i, bases[i].tobytes(), quals[i].tobytes()) for i in range(n)))
    precompute_reads(fastq, work / "shuffle-reads", dim=16, shard_size=-(-n // sizes["shards"]), progress=False)
    counts = rng.poisson(50, sizes["subjects"]).clip(1)
    subject = np.repeat(np.arange(sizes["subjects"]), counts)
    frame = pd.DataFrame({"subject_id": subject, "code": rng.choice([f"LAB//{i}" for i in range(300)], subject.size),
                          "time": pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 10**8, subject.size),
                                                                               unit="s"),
                          "numeric_value": rng.normal(size=subject.size).astype(np.float32)})
    (work / "shuffle_meds" / "data").mkdir(parents=True)
    frame.to_parquet(work / "shuffle_meds" / "data" / "0.parquet")
    precompute_meds(work / "shuffle_meds", work / "shuffle-meds", shard_size=-(-sizes["subjects"] // sizes["shards"]),
                    progress=False)
    precompute_graphs(molecules(sizes["graphs"]), work / "shuffle-graphs",
                      Compose([AddLaplacianPE(8), AddRandomWalkPE(16)]),
                      shard_size=-(-sizes["graphs"] // sizes["graph_shards"]), progress=False)
    return {"case": "shuffle-prepare", **sizes}


class CountingCollate:
    """A worker case's collate: collates the batch (the work timed), then returns its item count, the worker's id
    and that worker's shard parses so far (each worker counts in its own copy of the dataset)."""

    def __init__(self, collate) -> None:
        self.collate = collate

    def __call__(self, items: list) -> tuple[int, int, int]:
        import torch

        self.collate(items)
        info = torch.utils.data.get_worker_info()
        return len(items), info.id, info.dataset.cache_info()["parses"]


def shuffle_case(args: argparse.Namespace) -> dict:
    """``shuffle-<kind>``: one epoch per way of ordering it, each with a fresh dataset."""
    import torch

    from omnipos import scale

    kind = args.case.split("-")[1]
    out = Path(args.work) / f"shuffle-{kind}"
    make = {"graphs": scale.ShardedGraphDataset, "reads": scale.ShardedReadsDataset,
            "meds": scale.ShardedMedsDataset}[kind]
    if kind == "graphs":
        from torch_geometric.loader.dataloader import Collater

    def collate_of(dataset):
        return Collater(dataset) if kind == "graphs" else dataset.collate
    torch.set_num_threads(1)
    probe = make(out)
    for shard in range(len(probe.shards)):
        probe.shard(shard)
    parsed = probe.cache_info()["bytes"]
    tight = parsed // 4
    del probe
    rows = []

    def epoch(name: str, how: str, cache: dict, workers: int = 0, probe: int | None = None, repeats: int = 3,
              keep: bool = True) -> None:
        """One epoch (the median of ``repeats`` when an epoch takes under a second); ``probe``: only the first
        ``probe`` batches, parses and seconds scaled to the whole epoch."""
        runs = []
        for _ in range(repeats):
            runs.append(one_epoch(how, cache, workers, probe))
            if runs[-1]["seconds"] > 1.0:
                break
        row = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
        if keep:
            rows.append({"case": name, **row})

    def one_epoch(how: str, cache: dict, workers: int, probe: int | None) -> dict:
        dataset = make(out, **cache)
        kw: dict = {}
        window = ""
        if how in ("sampler", "aware"):
            extra = {"batch_size": args.lazy_batch, "num_workers": workers} if how == "aware" else {}
            sampler = dataset.sampler(shuffle=True, seed=0, **extra)
            kw["sampler"], window = sampler, sampler.window
        elif how == "shuffle":
            kw.update(shuffle=True, generator=torch.Generator().manual_seed(0))
        collate = collate_of(dataset)
        if workers:
            kw.update(num_workers=workers)
            collate = CountingCollate(collate)
        t0, c0 = time.perf_counter(), time.process_time()
        items, last = 0, {}
        loader = torch.utils.data.DataLoader(dataset, batch_size=args.lazy_batch, collate_fn=collate, **kw)
        for batch in itertools.islice(loader, probe):  # probe None: every batch
            if workers:
                count, worker, parses = batch
                items, last[worker] = items + count, parses
            else:
                items += batch.num_graphs if kind == "graphs" else len(batch["names"] if kind == "reads" else
                                                                       batch.subjects)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        parses = sum(last.values()) if workers else dataset.cache_info()["parses"]
        factor = len(dataset) / items if probe is not None and items < len(dataset) else 1.0
        return {"items": len(dataset) if factor != 1.0 else items, "shards": len(dataset.shards), "window": window,
                "parses": round(parses * factor), "seconds": seconds * factor, "cpu_s": cpu * factor,
                "scaled_from": items if factor != 1.0 else ""}

    default = {}
    epoch("warm-up", "order", default, repeats=1, keep=False)  # imports and first-call costs, untimed
    epoch("in order", "order", default)
    epoch("sampler", "sampler", default)
    epoch("shuffle=True", "shuffle", default)
    epoch("shuffle=True, cache_shards=2", "shuffle", {"cache_shards": 2}, probe=args.shuffle_probe)
    budget = {"cache_bytes": tight}
    epoch("in order, 1/4 budget", "order", budget)
    epoch("sampler, 1/4 budget", "sampler", budget)
    epoch("shuffle=True, 1/4 budget", "shuffle", budget, probe=args.shuffle_probe)
    epoch("2 workers, in order", "order", default, workers=2)
    epoch("2 workers, sampler", "sampler", default, workers=2)
    epoch("2 workers, sampler(num_workers=2)", "aware", default, workers=2)
    return {"case": args.case, "parsed_mib": parsed / 2**20, "tight_mib": tight / 2**20, "rows": rows}


def shuffle_main(args: argparse.Namespace) -> None:
    """The third table: shuffled vs in-order epochs of each lazy dataset."""
    sys.path.insert(0, str(HERE))
    from _harness import Bench

    sizes = shuffle_sizes(args)
    with tempfile.TemporaryDirectory(prefix="bench_scale_shuffle_") as work:
        run_child(args, "shuffle-prepare", work)
        results = [run_child(args, f"shuffle-{kind}", work) for kind in LAZY_KINDS]
    bench = Bench("scale_shuffle", device="cpu", notes=(
        f"one epoch through a DataLoader (batches of {args.lazy_batch}; the median of 3 when under 1 s; "
        f"scaled_from: only that many items were read, parses and seconds scaled to the epoch): reads {sizes['reads']:,} x 151 bp, MEDS "
        f"{sizes['subjects']:,} subjects of ~50 events (20 shards each), {sizes['graphs']:,} graphs (LapPE 8 + "
        "RWPE 16, 12 shards); a fresh dataset per case; parses: shard reads (summed over workers); vs_order: "
        "seconds / the in-order epoch's with the same cache (cpu_vs_order: the same for this process's CPU "
        "seconds, the steadier figure on a shared machine; not with workers, whose CPU it does not see); 1/4 "
        "budget: cache_bytes = a quarter of the parsed job; default cache 256 MiB"))
    for result in results:
        kind = result["case"].split("-")[1]
        rows = {row["case"]: row for row in result["rows"]}
        for row in result["rows"]:
            base = rows["in order, 1/4 budget"] if "1/4" in row["case"] else \
                rows["2 workers, in order"] if "workers" in row["case"] else rows["in order"]
            bench.row(job=kind, case=row["case"], items=row["items"], shards=row["shards"], window=row["window"],
                      parses=row["parses"], seconds=row["seconds"], cpu_s=row["cpu_s"],
                      vs_order=row["seconds"] / base["seconds"],
                      cpu_vs_order="" if "workers" in row["case"] else row["cpu_s"] / base["cpu_s"],
                      scaled_from=row["scaled_from"],
                      parsed_mib=result["parsed_mib"])
    bench.finish(args.out.with_name("scale_shuffle.json") if args.out else None)


def run_child(args: argparse.Namespace, case: str, work: str) -> dict:
    passed = [a for a in sys.argv[1:]]
    run = subprocess.run([sys.executable, __file__, *passed, "--case", case, "--work", work],
                         capture_output=True, text=True, check=False)
    if run.returncode:
        print(run.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"case {case} failed")
    return json.loads(run.stdout.strip().splitlines()[-1])


# -- the projection -----------------------------------------------------------------------------------------------
def project(rows: dict, args: argparse.Namespace) -> list[str]:
    """A cluster of ``--nodes`` x ``--cpus-per-node`` from the measured numbers.

    - r, items/s per CPU: items per unit / the median worker time of one unit with ``engine="local"`` and one
      worker (the same shard function on one core, alone on the machine);
    - the driver, which does not spread over the cluster: d0 CPU seconds per unit whatever its size (Ray Data's
      scheduling, the manifest; the driver's CPU time in the ``dispatch`` case, many one-read units, so also
      Ray Data's polling while it waits: an upper bound) plus c per item (what the driver does with every
      item: for in-memory graphs, collating, hashing and pickling them for the object store, timed apart; for
      files nothing). It hands out at most n / (d0 + c n) items/s with units of n items;
    - bytes per item written (the shards) and, for in-memory graphs, sent from the driver.

    The cluster reaches the least of: CPUs x r, the driver's rate, filesystem bandwidth / output bytes per item,
    NIC bandwidth / input bytes per item."""
    lines = []
    cpus = args.nodes * args.cpus_per_node
    dispatch = rows.get("dispatch-ray")
    if dispatch is None:
        return lines
    d0 = dispatch["driver_cpu_s"] / dispatch["units"]
    lines.append(f"- driver: {d0 * 1e3:.1f} ms of CPU per unit ({dispatch['units']} one-read units: "
                 f"{dispatch['units'] / dispatch['seconds']:,.0f} units/s wall on 2 CPUs).")
    for workload in ("graphs", "reads"):
        ray_row, local_row = rows.get(f"{workload}-ray"), rows.get(f"{workload}-local1")
        if not ray_row or not local_row:
            continue
        n = ray_row["items_per_unit"]
        per_cpu = local_row["items_per_unit"] / local_row["unit_seconds_median"]
        c = ray_row.get("driver_cpu_per_item_s", 0.0)  # files: the driver never touches an item
        limits = {"CPUs": cpus * per_cpu, f"driver ({n:,.0f}-item units)": n / (d0 + c * n),
                  f"output ({args.fs_gb_s:g} GB/s)": args.fs_gb_s * 1e9 / ray_row["output_bytes_per_item"]}
        if workload == "graphs":
            limits[f"input ({args.nic_gb_s:g} GB/s NIC)"] = args.nic_gb_s * 1e9 / ray_row["input_bytes_per_item"]
        bound = min(limits, key=limits.get)
        want = cpus * per_cpu
        if c * want < 1:
            enough = f"units of >= {d0 * want / (1 - c * want):,.0f} items keep the driver ahead of the CPUs"
        else:
            enough = (f"no unit size lets the driver feed {cpus} CPUs (it touches every item: "
                      f"{1 / c:,.0f} items/s at most); give files, which the workers read themselves")
        lines.append(f"- {workload}: r = {per_cpu:,.0f} items/s per CPU (a {local_row['items_per_unit']:,.0f}-item "
                     f"unit in {local_row['unit_seconds_median']:.2f} s), driver c = {c * 1e6:.1f} us per item, "
                     f"{ray_row['output_bytes_per_item']:.0f} output bytes per item.")
        lines.append(f"  {args.nodes} nodes x {args.cpus_per_node} CPUs: "
                     + ", ".join(f"{name} {value:,.0f}/s" for name, value in limits.items())
                     + f" -> about {limits[bound]:,.0f} items/s, bound by {bound}; {enough}.")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 graphs and 200,000 reads")
    parser.add_argument("--graphs", type=int, default=None, help="graphs (default 100,000; quick 10,000)")
    parser.add_argument("--reads", type=int, default=None, help="reads (default 2,000,000; quick 200,000)")
    parser.add_argument("--read-files", type=int, default=8)
    parser.add_argument("--graph-shard-size", type=int, default=None, help="default: graphs / 10")
    parser.add_argument("--read-shard-size", type=int, default=100_000)
    parser.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local Ray (and of the dispatch case)")
    parser.add_argument("--dispatch-units", type=int, default=256, help="one-read units of the dispatch case")
    parser.add_argument("--cases", default="graphs-single,graphs-local1,graphs-local2,graphs-ray,reads-single,"
                                           "reads-local1,reads-local2,reads-ray,dispatch-ray")
    parser.add_argument("--nodes", type=int, default=16, help="projection: cluster nodes")
    parser.add_argument("--cpus-per-node", type=int, default=16, help="projection: CPUs per node")
    parser.add_argument("--nic-gb-s", type=float, default=1.25, help="projection: driver NIC, GB/s (10 GbE)")
    parser.add_argument("--fs-gb-s", type=float, default=1.0, help="projection: shared filesystem writes, GB/s")
    parser.add_argument("--lazy", action="store_true",
                        help="also measure reading jobs back: load_* vs iterating the lazy datasets (peak memory)")
    parser.add_argument("--lazy-only", action="store_true", help="only the lazy-dataset cases")
    parser.add_argument("--lazy-batch", type=int, default=256, help="batch size of the lazy datasets' DataLoader")
    parser.add_argument("--shuffle", action="store_true",
                        help="also measure shuffled vs in-order epochs of the lazy datasets (shard parses, seconds)")
    parser.add_argument("--shuffle-only", action="store_true", help="only the shuffled-epoch cases")
    parser.add_argument("--shuffle-probe", type=int, default=None,
                        help="batches read of the slow shuffle=True cases (default: the whole epoch; quick: 3)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/scale.json)")
    args = parser.parse_args()
    args.graphs = args.graphs or (10_000 if args.quick else 100_000)
    args.reads = args.reads or (200_000 if args.quick else 2_000_000)
    args.graph_shard_size = args.graph_shard_size or max(args.graphs // 10, 1)
    if args.shuffle_probe is None and args.quick:
        args.shuffle_probe = 3
    if args.case:
        if args.case == "lazy-prepare":
            print(json.dumps(lazy_prepare(args)))
        elif args.case == "shuffle-prepare":
            print(json.dumps(shuffle_prepare(args)))
        elif args.case.startswith("shuffle-"):
            print(json.dumps(shuffle_case(args)))
        else:
            print(json.dumps(lazy_case(args) if args.case.startswith("lazy-") else run_case(args)))
        return
    if args.lazy_only:
        lazy_main(args)
        return
    if args.shuffle_only:
        shuffle_main(args)
        return

    sys.path.insert(0, str(HERE))
    from _harness import Bench

    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as work:
        t0 = time.perf_counter()
        write_reads(Path(work), args.reads, args.read_files)
        print(f"wrote {args.reads:,} reads in {args.read_files} files in {time.perf_counter() - t0:.1f} s")
        passed = [a for a in sys.argv[1:]]
        for case in args.cases.split(","):
            run = subprocess.run([sys.executable, __file__, *passed, "--case", case, "--work", work],
                                 capture_output=True, text=True, check=False)
            if run.returncode:
                print(run.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"case {case} failed")
            rows[case] = json.loads(run.stdout.strip().splitlines()[-1])
            print(f"{case}: {rows[case]['items_per_s']:,.0f} items/s", flush=True)
    bench = Bench("scale", device="cpu", notes=(
        f"{args.graphs:,} molecule-like graphs (LapPE k=8 + RWPE 16, shards of {args.graph_shard_size:,}) and "
        f"{args.reads:,} 150-bp reads ({args.read_files} gzip files, shards of {args.read_shard_size:,}); local1/2: "
        f"engine='local' with 1/2 worker processes; Ray: local, {args.num_cpus} CPUs. Engines started before the "
        "clock (start_s: Ray init / fork server and a warm-up job). Peak memory: PSS of the whole process tree."))
    for case, row in rows.items():
        workload = case.split("-")[0]
        single = rows.get(f"{workload}-single")
        bench.row(case=case, items=row["items"], seconds=row["seconds"], items_per_s=row["items_per_s"],
                  vs_single=row["items_per_s"] / single["items_per_s"] if single else "",
                  peak_mib=row["peak_pss_mib"], shards=row.get("shards", ""),
                  unit_s_median=row.get("unit_seconds_median", ""), driver_cpu_s=row["driver_cpu_s"],
                  start_s=row["start_s"] if row["start_s"] is not None else "")
    bench.finish(args.out)
    print("\nProjection:")
    for line in project(rows, args):
        print(line)
    if args.lazy:
        lazy_main(args)
    if args.shuffle:
        shuffle_main(args)


def lazy_main(args: argparse.Namespace) -> None:
    """The second table: peak memory of load_* against iterating each lazy dataset."""
    sys.path.insert(0, str(HERE))
    from _harness import Bench

    sizes = lazy_sizes(args)
    with tempfile.TemporaryDirectory(prefix="bench_scale_lazy_") as work:
        rows = run_lazy(args, work)
    bench = Bench("scale_lazy", device="cpu", notes=(
        f"reading a finished job back: reads {sizes['short_reads']:,} x 151 bp + {sizes['long_reads']} x 507 bp; "
        f"MEDS {sizes['subjects']:,} subjects of ~{sizes['events']} events + one of {sizes['long_subject']:,}; "
        f"{sizes['graphs']:,} graphs; DataLoader batches of {args.lazy_batch}; peak RSS above the child's imports"))
    by_case = {row["case"]: row for row in rows}
    for kind in LAZY_KINDS:
        load, lazy = by_case[f"lazy-{kind}-load"], by_case[f"lazy-{kind}-iterate"]
        bench.row(job=kind, items=load["items"], load_peak_mib=load["peak_mib"], load_shape=load["shape"],
                  iterate_peak_mib=lazy["peak_mib"], iterate_shape=lazy["shape"],
                  memory_ratio=load["peak_mib"] / max(lazy["peak_mib"], 1e-9), load_s=load["seconds"],
                  iterate_s=lazy["seconds"])
    bench.finish(args.out.with_name("scale_lazy.json") if args.out else None)


if __name__ == "__main__":
    main()
