"""A process's first call vs its later ones: omnipos vs PyG, each run in a fresh process, timed from the import.

Cases (each side in its own fresh process, both sides in the same run, alternating, ``--runs`` times; medians):

- ``molecules``: Laplacian PE, k=8, on ``--graphs`` molecule-like graphs (bench_graph.py's generator: 10-40 nodes,
  a random tree plus ring closures): omnipos ``laplacian_pe`` on the collated batch (torch's default threads, as
  bench_graph.py's (a)) vs PyG's ``AddLaplacianEigenvectorPE(8, is_undirected=True)`` graph by graph (torch 1
  thread). Also omnipos with its numba kernels switched off (``OMNIPOS_DISABLE_NUMBA=1``: LAPACK).
- ``ba``: Laplacian PE, k=8, on one Barabasi-Albert graph (m=3) of ``--nodes`` nodes (12,000 by default), torch 1
  thread and NumPy's BLAS 1 thread on both sides; ``ba-threads``: the same with torch's and the BLAS libraries'
  default threads on both sides (as a user runs it; where omnipos's solver lost before, its NumPy products
  leaving OpenBLAS's helper threads spinning).

``first``: the first call alone (``cold`` less the import). ``cold``: seconds from before ``import omnipos.graph`` / ``import torch_geometric`` (torch and NumPy, which both
sides need, already imported; the inputs already loaded) to the end of the first call (PyG: its first pass over
every graph; its ``Data`` objects are built after the import, untimed). ``warm``: the median of the next calls in
the same process. Time is process CPU time (all threads; what other processes on a shared machine do not inflate)
and wall time. The numba disk cache is filled first (an untimed process of each kind), so ``cold`` is "a new
process, warm disk cache", as a precompute worker or a new training run meets it; Python's bytecode cache is used
(``PYTHONDONTWRITEBYTECODE`` unset for the workers, as for an installed package). NumPy's BLAS runs 1 thread
(OPENBLAS_NUM_THREADS=1) on both sides, except in ``ba-threads``. Outputs are checked against PyG's before timing (bench_graph.py's check:
columns of simple eigenvalues, signs matched).

    python benchmarks/bench_cold.py [--runs 5] [--graphs 4000] [--nodes 12000] [--only molecules,ba] [--out F]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy is imported (see bench_graph.py)

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
METHODS = {"molecules": ("omnipos", "omnipos-no-numba", "pyg"), "ba": ("omnipos", "pyg"),
           "ba-threads": ("omnipos", "pyg")}


def worker(spec: dict) -> None:
    """One fresh process: load the inputs, then time the import and the first call, then the warm calls."""
    import warnings

    warnings.filterwarnings("ignore")
    data = torch.load(spec["data"], weights_only=True)
    method, case, k = spec["method"], spec["case"], 8
    if (method == "pyg" and case == "molecules") or case == "ba":
        torch.set_num_threads(1)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    if method == "pyg":
        from torch_geometric.data import Data
        from torch_geometric.transforms import AddLaplacianEigenvectorPE

        wall1, cpu1 = time.perf_counter(), time.process_time()
        imported = (wall1 - wall0, cpu1 - cpu0)
        if case == "molecules":
            graphs = [Data(edge_index=e, num_nodes=int(n)) for e, n in zip(data["edges"], data["sizes"])]
        else:
            graphs = [Data(edge_index=data["edge_index"], num_nodes=int(data["num_nodes"]))]
        built_wall, built_cpu = time.perf_counter() - wall1, time.process_time() - cpu1
        transform = AddLaplacianEigenvectorPE(k, is_undirected=True)

        def call() -> torch.Tensor:
            return torch.cat([transform(g).laplacian_eigenvector_pe for g in graphs])
    else:
        from omnipos.graph import laplacian_pe

        imported = (time.perf_counter() - wall0, time.process_time() - cpu0)
        built_wall = built_cpu = 0.0
        edge_index, num_nodes = data["edge_index"], int(data["num_nodes"])
        batch = data.get("batch")

        def call() -> torch.Tensor:
            return laplacian_pe(edge_index, num_nodes, k, batch=batch)

    out = call()
    cold = (time.perf_counter() - wall0 - built_wall, time.process_time() - cpu0 - built_cpu)
    warm = []
    for _ in range(spec["warm"]):
        w, c = time.perf_counter(), time.process_time()
        call()
        warm.append((time.perf_counter() - w, time.process_time() - c))
    if spec.get("out"):
        np.save(spec["out"], out.double().numpy())
    print(json.dumps({"cold_wall": cold[0], "cold_cpu": cold[1],
                      "first_wall": cold[0] - imported[0], "first_cpu": cold[1] - imported[1],
                      "warm_wall": float(np.median([t[0] for t in warm])),
                      "warm_cpu": float(np.median([t[1] for t in warm]))}))


def run(spec: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if spec["case"] == "ba-threads":  # NumPy's and SciPy's BLAS with their default threads
        env.pop("OPENBLAS_NUM_THREADS", None)
    if spec["method"] == "omnipos-no-numba":
        env["OMNIPOS_DISABLE_NUMBA"] = "1"
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], env=env, capture_output=True,
                          text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"{spec['method']} worker failed: {done.stderr[-2000:]}")
    return json.loads(lines[-1])


def prepare(case: str, args: argparse.Namespace, folder: str) -> str:
    sys.path.insert(0, str(HERE))
    from bench_graph import collate, large_graph, molecule_like

    path = os.path.join(folder, f"{case}.pt")
    if case == "molecules":
        graphs = molecule_like(args.graphs)
        edge_index, num_nodes, batch = collate(graphs)
        torch.save({"edge_index": edge_index, "num_nodes": torch.tensor(num_nodes), "batch": batch,
                    "edges": [g.edge_index for g in graphs], "sizes": torch.tensor([g.num_nodes for g in graphs])},
                   path)
    else:
        edge_index, num_nodes = large_graph("Barabasi-Albert m=3", args.nodes)
        torch.save({"edge_index": edge_index, "num_nodes": torch.tensor(num_nodes)}, path)
    return path


def agree(ours: np.ndarray, theirs: np.ndarray, case: str, path: str) -> float | str:
    """bench_graph.py's check of omnipos's PE against PyG's (columns of simple eigenvalues, signs matched)."""
    from bench_graph import simple_column_diff

    if not case.startswith("ba"):
        return ""  # (the molecules are checked graph by graph in bench_graph.py's (a))
    from omnipos.graph import laplacian_pe

    data = torch.load(path, weights_only=True)
    _, values, _ = laplacian_pe(data["edge_index"], int(data["num_nodes"]), 8, return_eigenvalues=True)
    return simple_column_diff(ours, values[0].double().numpy(), theirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warm", type=int, default=3, help="warm calls per process (their median)")
    parser.add_argument("--graphs", type=int, default=4000)
    parser.add_argument("--nodes", type=int, default=12_000)
    parser.add_argument("--only", default="molecules,ba,ba-threads")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default: benchmarks/results/cold.json)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    from _harness import Bench

    bench = Bench("cold", notes=(
        f"LapPE k=8; each side in a fresh process ({args.runs} runs, alternating; medians). cold = import + first "
        f"call, warm = median of the next {args.warm} calls in that process; cpu = process CPU time; speedup = PyG "
        "/ omnipos. numba's disk cache filled first (an untimed process). molecules: omnipos torch default threads, "
        "PyG 1 thread; ba: 1 thread on both sides; ba-threads: default threads on both sides."))
    with tempfile.TemporaryDirectory() as folder:
        for case in args.only.split(","):
            path = prepare(case, args, folder)
            methods = METHODS[case]
            outs = {m: os.path.join(folder, f"{case}-{m}.npy") for m in methods}
            for method in methods:  # untimed: fills numba's disk cache, the bytecode cache, the page cache
                run({"method": method, "case": case, "data": path, "warm": 1, "out": outs[method]})
            diff = agree(np.load(outs["omnipos"]), np.load(outs["pyg"]), case, path)
            results: dict[str, list[dict]] = {m: [] for m in methods}
            for r in range(args.runs):
                for method in methods:
                    results[method].append(run({"method": method, "case": case, "data": path, "warm": args.warm}))
                print(f"  {case} run {r + 1}: " + ", ".join(f"{m} cold {results[m][-1]['cold_cpu']:.3f} s cpu"
                                                           for m in methods), flush=True)
            med = {m: {key: float(np.median([x[key] for x in results[m]])) for key in results[m][0]}
                   for m in methods}
            peer = med["pyg"]
            for method in methods:
                if method == "pyg":
                    continue
                ours = med[method]
                bench.row(case=f"molecules x{args.graphs}" if case == "molecules" else f"{case} {args.nodes}",
                          omnipos=method, **{f"omnipos_{key}": value for key, value in ours.items()},
                          **{f"pyg_{key}": value for key, value in peer.items()},
                          speedup_cold_cpu=peer["cold_cpu"] / ours["cold_cpu"],
                          speedup_first_cpu=peer["first_cpu"] / ours["first_cpu"],
                          speedup_warm_cpu=peer["warm_cpu"] / ours["warm_cpu"],
                          speedup_cold_wall=peer["cold_wall"] / ours["cold_wall"],
                          speedup_warm_wall=peer["warm_wall"] / ours["warm_wall"],
                          max_diff=diff if method == "omnipos" else "")
    bench.finish(args.out)


if __name__ == "__main__":
    main()
