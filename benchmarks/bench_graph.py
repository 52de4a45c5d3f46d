"""omnipos.graph vs PyG's AddLaplacianEigenvectorPE / AddRandomWalkPE on the same graphs, in one process.

(a) 10,000 molecule-sized graphs (10-40 nodes: a random tree plus ring closures, fixed seed), k=8, the whole
    dataset: omnipos `laplacian_pe` on the collated batch (and `precompute` over the list of Data, collation
    included) vs PyG's transform applied graph by graph.
(b) one 50,000-node sparse graph (a symmetrised 6-nearest-neighbour graph of random points in the unit square,
    mesh-like), k=8: omnipos's shift-invert eigsh vs PyG's eigsh(which='SA'), timed once.
(c) random-walk PE, 20 steps, on (a): omnipos `random_walk_pe` (float64 powers, the default, and float32, PyG's
    precision) vs PyG's AddRandomWalkPE graph by graph.
(d) single large graphs (benchmarks/graph_shapes.py: Barabasi-Albert, random geometric with thousands of
    components, 2-D grid, ring + n/20 random chords) at 2e4, 1e5 and 1e6 nodes, LapPE k=8: omnipos `laplacian_pe`
    (solver chosen by "auto", named in the table) vs PyG's AddLaplacianEigenvectorPE(is_undirected=True). Each
    solve runs in a fresh subprocess after an untimed warm-up solve of a 6,000-node graph of the same shape (time,
    CPU time and peak memory above the level before the solve); PyG is stopped at --cap seconds and reported as
    "> cap". max_diff over the columns whose eigenvalue is simple.
(e) the magnetic Laplacian (q=0.25, k=8) on the directed versions of (d)'s graphs up to 1e5 nodes: omnipos
    `magnetic_laplacian_pe` vs the straightforward code a user would write (SciPy `eigsh(L_q, k, which='SA')` on
    the sparse Hermitian matrix, as PyG does for LapPE), capped the same way.

Targets on a 2-core CPU: (a) >= 10x, (b) >= 3x, (c) >= 5x, (d) never slower than PyG, seconds to a minute. Threads: NumPy's BLAS runs single-threaded
(OPENBLAS_NUM_THREADS=1: on a shared 2-core machine PyG's threaded NumPy eigh was 15x slower, so this favours
PyG); torch keeps its default for omnipos (which runs LAPACK single-threaded per matrix and splits a batch's
eigh over torch.get_num_threads() Python threads) and is set to 1 thread while PyG runs (with 2, its small
per-graph matmuls ran 10x slower on the shared machine). Speedups are
given both in process CPU time (`time.process_time`, summed over threads; other processes on a shared machine
do not inflate it) and in wall-clock time (which they do).

    python benchmarks/bench_graph.py [--quick] [--large-sizes 20000,100000,1000000] [--cap 300] [--skip-large]

--quick: 1,000 molecules, one 5,000-node graph for (b), (d)/(e) at 2e4 nodes only with a 60 s cap.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy is imported (see the docstring)

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _harness import Bench, common_arguments, wall_and_cpu_medians  # noqa: E402

warnings.filterwarnings("ignore")
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.transforms import AddLaplacianEigenvectorPE, AddRandomWalkPE  # noqa: E402

from omnipos.graph import AddLaplacianPE, laplacian_pe, precompute, random_walk_pe  # noqa: E402


def molecule_like(count: int, seed: int = 0) -> list[Data]:
    """Random trees (max degree 4) on 10-40 nodes with ~n/8 ring closures: sparse, molecule-sized graphs."""
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(count):
        n = int(rng.integers(10, 41))
        degree = np.zeros(n, dtype=int)
        pairs = []
        for i in range(1, n):
            candidates = np.flatnonzero(degree[:i] < 4)
            j = int(rng.choice(candidates))
            pairs.append((j, i))
            degree[i] += 1
            degree[j] += 1
        for _ in range(max(1, n // 8)):
            a, b = rng.choice(n, 2, replace=False)
            if (a, b) not in pairs and (b, a) not in pairs:
                pairs.append((int(a), int(b)))
        e = torch.tensor(pairs, dtype=torch.long).T
        graphs.append(Data(edge_index=torch.cat([e, e.flip(0)], 1), num_nodes=n))
    return graphs


def collate(graphs: list[Data]) -> tuple[torch.Tensor, int, torch.Tensor]:
    sizes = torch.tensor([g.num_nodes for g in graphs])
    offsets = torch.cumsum(sizes, 0) - sizes
    edge_index = torch.cat([g.edge_index + int(o) for g, o in zip(graphs, offsets)], 1)
    return edge_index, int(sizes.sum()), torch.repeat_interleave(torch.arange(len(graphs)), sizes)


def knn_graph(n: int, neighbours: int = 6, seed: int = 0) -> torch.Tensor:
    from scipy.spatial import cKDTree

    points = np.random.default_rng(seed).random((n, 2))
    _, index = cKDTree(points).query(points, neighbours + 1)
    src = np.repeat(np.arange(n), neighbours)
    dst = index[:, 1:].reshape(-1)
    pairs = np.unique(np.sort(np.stack([src, dst], 1), axis=1), axis=0)
    e = torch.from_numpy(pairs.T.copy()).long()
    return torch.cat([e, e.flip(0)], 1)


def per_graph(transform, graphs):
    """PyG's way: the transform graph by graph, with torch single-threaded (its per-graph matmuls are small;
    with 2 threads on a shared machine its random walk ran 10x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [transform(g) for g in graphs]
    finally:
        torch.set_num_threads(threads)


def columns_agree(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """Largest difference after matching each column's sign (eigenvectors are defined up to sign)."""
    ours, theirs = ours.double(), theirs.double()
    signs = torch.sign((ours * theirs).sum(0))
    return float((ours - theirs * signs).abs().max())


def simple_columns_agree(graphs: list[Data], k: int) -> float:
    """``columns_agree`` graph by graph vs PyG, over the columns whose eigenvalue is simple (gap > 1e-4 to both
    neighbours): elsewhere any basis of the eigenspace is right and vectors cannot be compared."""
    worst = 0.0
    pyg = AddLaplacianEigenvectorPE(k, is_undirected=True)
    for g in graphs:
        ours, values, _ = laplacian_pe(g.edge_index, g.num_nodes, k + 1, return_eigenvalues=True)
        spectrum = torch.cat([torch.zeros(1), values[0].double()])  # the trivial 0, then k + 1 values
        gaps = spectrum.diff()
        simple = (gaps[:k] > 1e-4) & (gaps[1:k + 1] > 1e-4)
        theirs = pyg(g).laplacian_eigenvector_pe
        if simple.any():
            worst = max(worst, columns_agree(ours[:, :k][:, simple], theirs[:, simple]))
    return worst


# --- (d), (e): single large graphs, one solve per subprocess --------------------------------------------------------


class PeakMemory:
    """Peak resident memory (MiB) above the level at construction, sampled every 2 ms on a thread (ru_maxrss
    would report the graph generator's own peak instead)."""

    def __init__(self) -> None:
        import threading

        self.start = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    @staticmethod
    def _rss() -> float:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20

    def _poll(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, self._rss())

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return max(self.peak, self._rss()) - self.start


def single_solve(spec: dict) -> None:
    """Run one solve described by ``spec`` (who, shape, n, k, out) and print a JSON line: wall / CPU seconds, peak
    memory above the baseline (graph generated, libraries imported), the solver used; ``pe`` saved to ``out``."""
    import graph_shapes

    sources, targets, n = graph_shapes.make(spec["shape"], spec["n"])
    k = spec["k"]
    who = spec["who"]
    info = ""
    if who in ("omnipos", "pyg"):
        edge_index = torch.from_numpy(graph_shapes.undirected(sources, targets))
    if who == "pyg":
        torch.set_num_threads(1)
        data = Data(edge_index=edge_index, num_nodes=n)
        transform = AddLaplacianEigenvectorPE(k, is_undirected=True)
    elif who == "omnipos":
        from omnipos.graph import eigensolvers

        used = []
        original = eigensolvers.sparse_eigenpairs

        def spy(*a, **kw):
            out = original(*a, **kw)
            used.append(out[2])
            return out

        eigensolvers.sparse_eigenpairs = spy
    elif who in ("omnipos-magnetic", "scipy-magnetic"):
        from omnipos.graph.magnetic import sparse_magnetic_laplacian

        directed = torch.from_numpy(np.stack([sources, targets]))
    # warm-up on a 6,000-node graph of the same shape (above LANCZOS_MIN_NODES, so every solver's first-call costs
    # are paid): imports, thread pools (both sides), then the timed solve
    small_sources, small_targets, small_n = graph_shapes.make(spec["shape"], 6000)
    small = torch.from_numpy(graph_shapes.undirected(small_sources, small_targets))
    if who == "pyg":
        transform(Data(edge_index=small, num_nodes=small_n))
    elif who == "omnipos":
        laplacian_pe(small, small_n, k)
    elif who == "omnipos-magnetic":
        from omnipos.graph import magnetic_laplacian_pe

        magnetic_laplacian_pe(torch.from_numpy(np.stack([small_sources, small_targets])), small_n, k, q=0.25)
    else:
        from scipy.sparse.linalg import eigsh

        eigsh(sparse_magnetic_laplacian(small_sources, small_targets, np.ones(small_sources.size), small_n, 0.25)[0],
              k=k, which="SA")
    if who == "omnipos":
        used.clear()
    monitor = PeakMemory()
    wall, cpu = time.perf_counter(), time.process_time()
    if who == "pyg":
        pe = transform(data).laplacian_eigenvector_pe
    elif who == "omnipos":
        pe, values, _ = laplacian_pe(edge_index, n, k, return_eigenvalues=True)
        info = ",".join(sorted(set(used))) or "null space / dense"
    elif who == "omnipos-magnetic":
        from omnipos.graph import magnetic_laplacian_pe

        pe = magnetic_laplacian_pe(directed, n, k, q=0.25)
    else:
        from scipy.sparse.linalg import eigsh

        lap, _ = sparse_magnetic_laplacian(sources, targets, np.ones(sources.size), n, 0.25)
        _, vectors = eigsh(lap, k=k, which="SA")
        pe = torch.from_numpy(np.concatenate([vectors.real, vectors.imag], 1))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = monitor.stop()
    np.save(spec["out"], pe.double().numpy())
    if who == "omnipos":
        np.save(spec["out"] + ".values.npy", values[0].double().numpy())
    print(json.dumps({"wall": wall, "cpu": cpu, "peak_mb": peak, "n": n, "solver": info}))


def run_single(who: str, shape: str, n: int, k: int, cap: float, workdir: Path) -> dict | None:
    """One solve in a fresh process; ``None`` when it ran past ``cap`` seconds."""
    out = str(workdir / f"{who}-{shape}-{n}.npy")
    spec = {"who": who, "shape": shape, "n": n, "k": k, "out": out}
    try:
        done = subprocess.run([sys.executable, __file__, "--single", json.dumps(spec)], capture_output=True,
                              text=True, timeout=cap, check=False)
    except subprocess.TimeoutExpired:
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"{who} on {shape} n={n} failed:\n{done.stderr[-2000:]}")
    result = json.loads(lines[-1])
    result["pe"] = np.load(out)
    if who == "omnipos":
        result["values"] = np.load(out + ".values.npy")
    return result


def simple_column_diff(ours: dict, theirs: dict) -> float | str:
    """Largest |omnipos - peer| over columns whose eigenvalue is simple (gap > 1e-6 to both neighbours), signs
    matched; "" when no column is simple (e.g. the null space of a graph of many components)."""
    values = np.concatenate([[0.0], ours["values"]])
    gaps = np.diff(values)
    simple = np.flatnonzero((gaps[:-1] > 1e-6) & (np.append(gaps[1:], np.inf)[:-1] > 1e-6))
    if not simple.size:
        return ""
    a, b = ours["pe"][:, simple], theirs["pe"][:, simple]
    signs = np.sign((a * b).sum(0))
    signs[signs == 0] = 1
    return float(np.abs(a - b * signs).max())


def large_graphs(sizes: list[int], cap: float, out: Path | None) -> None:
    import graph_shapes

    bench = Bench("graph_large", notes=(
        f"(d), (e): one graph per row, one solve per fresh process, LapPE / magnetic k=8; peers stopped at {cap:.0f} s "
        "(reported as '> cap'); peak_mb: peak resident memory above the process's baseline (graph built, libraries "
        "imported); pyg_* columns of (e) are SciPy eigsh(L_q, which='SA') on the sparse Hermitian matrix."))

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for shape in graph_shapes.SHAPES:
            for n in sizes:
                ours = run_single("omnipos", shape, n, 8, 4 * cap, workdir)
                peer = run_single("pyg", shape, n, 8, cap, workdir)
                fmt = lambda r, key: r[key] if r is not None else f"> {cap:.0f}"  # noqa: E731
                row = {"case": f"(d) LapPE k=8, {shape}, n={n:,}", "solver": ours["solver"] if ours else "",
                       "omnipos_cpu_s": fmt(ours, "cpu"), "pyg_cpu_s": fmt(peer, "cpu"),
                       "omnipos_wall_s": fmt(ours, "wall"), "pyg_wall_s": fmt(peer, "wall"),
                       "omnipos_peak_mb": ours["peak_mb"] if ours else "", "pyg_peak_mb": peer["peak_mb"] if peer
                       else "", "speedup_wall": (peer["wall"] / ours["wall"]) if ours and peer else
                       (f"> {cap / ours['wall']:.1f}" if ours else ""),
                       "max_diff": simple_column_diff(ours, peer) if ours and peer else ""}
                bench.row(**row)
                print(row, flush=True)
        for shape in graph_shapes.SHAPES:
            for n in [n for n in sizes if n <= 100_000]:  # (the straightforward peer is hopeless beyond)
                ours = run_single("omnipos-magnetic", shape, n, 8, 4 * cap, workdir)
                peer = run_single("scipy-magnetic", shape, n, 8, cap, workdir)
                fmt = lambda r, key: r[key] if r is not None else f"> {cap:.0f}"  # noqa: E731
                row = {"case": f"(e) magnetic q=0.25 k=8, {shape}, n={n:,}", "solver": "",
                       "omnipos_cpu_s": fmt(ours, "cpu"), "pyg_cpu_s": fmt(peer, "cpu"),
                       "omnipos_wall_s": fmt(ours, "wall"), "pyg_wall_s": fmt(peer, "wall"),
                       "omnipos_peak_mb": ours["peak_mb"] if ours else "", "pyg_peak_mb": peer["peak_mb"] if peer
                       else "", "speedup_wall": (peer["wall"] / ours["wall"]) if ours and peer else
                       (f"> {cap / ours['wall']:.1f}" if ours else ""), "max_diff": ""}
                bench.row(**row)
                print(row, flush=True)
    bench.finish(out)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--single":
        single_solve(json.loads(sys.argv[2]))
        return
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--big-nodes", type=int, default=50_000)
    parser.add_argument("--large-sizes", default="20000,100000,1000000",
                        help="node counts of (d)/(e), comma-separated")
    parser.add_argument("--cap", type=float, default=300.0, help="seconds before a peer solve of (d)/(e) is stopped")
    parser.add_argument("--skip-large", action="store_true", help="leave out (d) and (e)")
    args = parser.parse_args()
    device = torch.device(args.device)
    count = 1_000 if args.quick else 10_000
    repeats = 1 if args.quick else 3
    big_nodes = 5_000 if args.quick else args.big_nodes
    bench = Bench("graph", device=device, notes=(
        f"(a), (c): {count:,} molecule-like graphs (10-40 nodes), whole dataset; (b): one {big_nodes:,}-node "
        "6-NN graph, timed once. PyG = its transform graph by graph; speedup = PyG time / omnipos time "
        "(process CPU time and wall time). "
        "max_diff: largest |omnipos - PyG| (LapPE: over 300 graphs, columns of simple eigenvalues, signs matched)."))

    graphs = molecule_like(count)
    edge_index, num_nodes, batch = collate(graphs)
    edge_index, batch = edge_index.to(device), batch.to(device)

    def row(case, ours, peer, peer_name, max_diff=""):
        bench.row(case=case, omnipos_cpu_s=ours[1], pyg_cpu_s=peer[1], speedup_cpu=peer[1] / ours[1],
                  omnipos_wall_s=ours[0], pyg_wall_s=peer[0], speedup_wall=peer[0] / ours[0], max_diff=max_diff,
                  peer=peer_name)

    # (a) Laplacian PE, k=8
    diff = simple_columns_agree(graphs[:300], 8)
    peer_repeats = max(1, repeats - 1)  # PyG takes seconds per pass
    ours = wall_and_cpu_medians(lambda: laplacian_pe(edge_index, num_nodes, 8, batch=batch),
                                repeats=repeats, warmup=1)
    pre = wall_and_cpu_medians(
        lambda: precompute(graphs, AddLaplacianPE(8), batch_size=2048, device=device, progress=False),
        repeats=repeats, warmup=1)
    pyg_sym = wall_and_cpu_medians(lambda: per_graph(AddLaplacianEigenvectorPE(8, is_undirected=True), graphs),
                                   repeats=peer_repeats, warmup=1)
    pyg_default = wall_and_cpu_medians(lambda: per_graph(AddLaplacianEigenvectorPE(8), graphs),
                                       repeats=peer_repeats, warmup=1)
    row("(a) LapPE k=8, laplacian_pe(batch)", ours, pyg_sym, "AddLaplacianEigenvectorPE(is_undirected=True)", diff)
    row("(a) LapPE k=8, precompute(list)", pre, pyg_sym, "AddLaplacianEigenvectorPE(is_undirected=True)")
    row("(a) LapPE k=8, laplacian_pe(batch)", ours, pyg_default, "AddLaplacianEigenvectorPE() (default: eig)")

    # (c) random walk, 20 steps
    rw = random_walk_pe(edge_index, num_nodes, 20, batch=batch)
    pyg = torch.cat([g.random_walk_pe for g in per_graph(AddRandomWalkPE(20), graphs)])
    diff = float((rw.cpu() - pyg).abs().max())
    ours = wall_and_cpu_medians(lambda: random_walk_pe(edge_index, num_nodes, 20, batch=batch),
                                repeats=repeats, warmup=1)
    peer = wall_and_cpu_medians(lambda: per_graph(AddRandomWalkPE(20), graphs), repeats=peer_repeats,
                                warmup=1)
    row("(c) RWPE 20 steps, random_walk_pe(batch)", ours, peer, "AddRandomWalkPE(20)", diff)
    fast = random_walk_pe(edge_index, num_nodes, 20, batch=batch, compute_dtype=torch.float32)
    diff = float((fast.cpu() - pyg).abs().max())
    ours = wall_and_cpu_medians(
        lambda: random_walk_pe(edge_index, num_nodes, 20, batch=batch, compute_dtype=torch.float32),
        repeats=repeats, warmup=1)
    row("(c) RWPE 20 steps, compute_dtype=float32", ours, peer, "AddRandomWalkPE(20)", diff)

    # (b) one big sparse graph, k=8: each side timed once (PyG's Lanczos is slow on it)
    big = knn_graph(big_nodes)
    data = Data(edge_index=big, num_nodes=big_nodes)
    results = {}

    def solve_ours():
        results["ours"] = laplacian_pe(big.to(device), big_nodes, 8)

    def solve_pyg():
        results["pyg"] = AddLaplacianEigenvectorPE(8, is_undirected=True)(data).laplacian_eigenvector_pe

    w0, c0 = time.perf_counter(), time.process_time()
    solve_ours()
    ours = (time.perf_counter() - w0, time.process_time() - c0)
    w0, c0 = time.perf_counter(), time.process_time()
    solve_pyg()
    peer = (time.perf_counter() - w0, time.process_time() - c0)
    row(f"(b) LapPE k=8, one {big_nodes:,}-node 6-NN graph", ours, peer,
        "AddLaplacianEigenvectorPE(is_undirected=True): eigsh(which='SA')",
        columns_agree(results["ours"].cpu(), results["pyg"]))
    bench.finish(args.out)
    if not args.skip_large:
        sizes = [20_000] if args.quick else [int(x) for x in args.large_sizes.split(",")]
        large_graphs(sizes, 60.0 if args.quick else args.cap,
                     args.out.with_name(args.out.stem + "_large.json") if args.out else None)


if __name__ == "__main__":
    main()
