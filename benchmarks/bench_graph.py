"""omnipos.graph vs PyG's AddLaplacianEigenvectorPE / AddRandomWalkPE on the same graphs, in one process.

(a) 10,000 molecule-sized graphs (10-40 nodes: a random tree plus ring closures, fixed seed), k=8, the whole
    dataset: omnipos `laplacian_pe` on the collated batch (with torch's default threads and with 1 thread; and
    `precompute` over the list of Data, collation included) vs PyG's transform applied graph by graph; and the
    floor of the dense path, its batched eigh alone on the same Laplacians (built before timing). With numba
    installed (`omnipos[fast]`) the dense path runs the compiled lane eigh and canonical basis; the rows "without
    numba" run the same call as it runs without it (LAPACK's eigh, the tensor program), after checking that the
    two agree (max_diff there: |with - without| over all graphs).
(b) one 50,000-node sparse graph (a symmetrised 6-nearest-neighbour graph of random points in the unit square,
    mesh-like), k=8: omnipos's shift-invert eigsh vs PyG's eigsh(which='SA'), timed once.
(c) random-walk PE, 20 steps, on (a): omnipos `random_walk_pe` (float64 powers, the default, and float32, PyG's
    precision) vs PyG's AddRandomWalkPE graph by graph.

(d) RRWP, K=8, on (a)'s graphs: omnipos `rrwp` on the collated batch (and `precompute(AddRRWP(8))`) vs GRIT's
    `add_full_rrwp` rewritten with dense torch ops graph by graph (GRIT's own code needs torch_sparse).
(e) random-walk PE, 16 steps, on single large graphs of four shapes (Barabasi-Albert m=3: hub-heavy; random
    geometric graph of mean degree 3: thousands of components; 2-D grid; ring + n/10 random chords) at 2e4, 1e5
    and 1e6 nodes (--quick: 2e3, 1e4): omnipos vs PyG's AddRandomWalkPE, each case in its own subprocess for its
    time and peak memory (VmHWM above the process's size before the call), stopped at --cap seconds or
    --cap-gib GiB ("> cap"); omnipos reports progress, so a run that would exceed the time cap is stopped
    early with its projected time.

(f) Laplacian eigenvectors, k=8, on (e)'s single large graphs and on 1,000-3,000-node ones: omnipos
    `laplacian_pe` (solver chosen by "auto", named in the table) vs PyG's AddLaplacianEigenvectorPE(is_undirected=
    True), each case in its own subprocess after an untimed warm-up solve of a 6,000-node graph of the same shape,
    capped like (e); graphs up to 20,000 nodes take milliseconds: one more warm-up on the graph itself, then the
    median of 7 solves. torch single-threaded on both sides (omnipos's sparse path runs its small ops on one
    thread itself, so its numbers are the same with torch's default). And the magnetic
    Laplacian (q=0.25, k=8) on the same graphs with every edge directed from the lower to the higher node id (a
    DAG), up to 1e5 nodes: omnipos `magnetic_laplacian_pe` vs what a user would write without it, SciPy
    `eigsh(L_q, k=8, which='SA')` on the sparse Hermitian matrix (PyG has no magnetic transform). max_diff over
    the columns whose eigenvalue is simple (elsewhere any basis of the eigenspace is right), signs matched.

(g) random-walk PE, 16 steps, on one citation-like power-law graph (200,000 nodes, 1M edges, largest degree in
    the hundreds): omnipos exact, omnipos's estimate (`probes=256`, checked against the exact values on a
    20,000-node graph of the same kind first) and PyG, each in its own process, capped like (e).

Targets on a 2-core CPU: (a) >= 10x, (b) >= 3x, (c) >= 5x; (d), (e), (f): faster than the peer on every case, (f)
in seconds to a minute at 1e6 nodes, (g) under 60 s with progress and bounded memory.
(c), (d), (e), (f) run torch single-threaded on both sides (on a shared 2-core machine OpenMP's barriers made small
ops many times slower with 2 threads; omnipos no longer changes torch's thread count itself).
Threads: NumPy's BLAS runs single-threaded
(OPENBLAS_NUM_THREADS=1: on a shared 2-core machine PyG's threaded NumPy eigh was 15x slower, so this favours
PyG); torch keeps its default for omnipos (which runs LAPACK single-threaded per matrix and splits a batch's
eigh over torch.get_num_threads() Python threads) and is set to 1 thread while PyG runs (with 2, its small
per-graph matmuls ran 10x slower on the shared machine). Speedups are
given both in process CPU time (`time.process_time`, summed over threads; other processes on a shared machine
do not inflate it) and in wall-clock time (which they do).

    python benchmarks/bench_graph.py [--quick] [--only a,b,c,d,e,f,g] [--cap 300] [--cap-gib 3]
        [--sizes 1000000] [--shapes 'Barabasi-Albert m=3;ring + n/10 chords']   # (e), (f): chosen cases only
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy is imported (see the docstring)

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _harness import Bench, common_arguments, wall_and_cpu_medians  # noqa: E402

warnings.filterwarnings("ignore")
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.transforms import AddLaplacianEigenvectorPE, AddRandomWalkPE  # noqa: E402

from omnipos.graph import (  # noqa: E402
    AddLaplacianPE,
    AddRRWP,
    laplacian_pe,
    precompute,
    random_walk_pe,
    rrwp,
)
from omnipos.graph._input import check_graph, size_groups  # noqa: E402
from omnipos.graph._workers import cpu_parallelism, run_cpu_work  # noqa: E402
from omnipos.graph.eigensolvers import batched_eigh  # noqa: E402
from omnipos.graph.laplacian import _symmetric_adjacency, dense_laplacian  # noqa: E402


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


def dense_laplacians(edge_index: torch.Tensor, num_nodes: int, batch: torch.Tensor) -> list[torch.Tensor]:
    """The float64 ``[G, n, n]`` Laplacians (normalization "sym", one stack per node count) that
    ``laplacian_pe``'s dense path hands to its eigensolver: timing the solver alone on them gives the floor."""
    g = check_graph(edge_index, num_nodes, batch)
    groups = size_groups(g, keep=g.edge_index[0] != g.edge_index[1])
    return [dense_laplacian(_symmetric_adjacency(group), "sym", overwrite=True)[0] for group in groups]


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


# ------------------------------------------------------------------------------------ (d) RRWP, (e) large graphs


@contextmanager
def torch_threads(count: int):
    """torch's intra-op thread count for a block of this benchmark (an application may set it; the library
    never does)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def without_numba():
    """The dense path as it runs where numba is not installed: LAPACK's eigh one matrix at a time and the tensor
    program of the canonical basis (for the side-by-side rows of (a))."""
    from omnipos.graph import sign, small_eigh

    kernels = small_eigh.lane_kernel, sign._compiled
    small_eigh.lane_kernel = sign._compiled = lambda: None
    try:
        yield
    finally:
        small_eigh.lane_kernel, sign._compiled = kernels


def grit_rrwp(data: Data, walk_length: int = 8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GRIT's ``add_full_rrwp`` (grit/transform/rrwp.py) for one graph, with dense torch ops where GRIT uses
    torch_sparse (``SparseTensor.from_dense`` keeps the pairs whose channels are not all zero):
    ``(node [n, K], pair_index [2, P], pair_value [P, K])``."""
    n, edge_index = data.num_nodes, data.edge_index
    adj = torch.zeros(n, n).index_put_((edge_index[0], edge_index[1]), torch.ones(edge_index.shape[1]),
                                       accumulate=True)
    deg_inv = 1.0 / adj.sum(dim=1)
    deg_inv[deg_inv == float("inf")] = 0
    adj = adj * deg_inv.view(-1, 1)
    pe_list = [torch.eye(n), adj]
    out = adj
    for _ in range(2, walk_length):
        out = out @ adj
        pe_list.append(out)
    pe = torch.stack(pe_list, dim=-1)
    row, col = (pe.abs().sum(-1) != 0).nonzero(as_tuple=True)
    return pe.diagonal().transpose(0, 1), torch.stack([row, col]), pe[row, col]


def rrwp_section(args: Any, graphs: list[Data]) -> None:
    repeats = 1 if args.quick else 3
    bench = Bench("graph_rrwp", notes=(
        f"(d) RRWP, K=8, {len(graphs):,} molecule-like graphs (10-40 nodes), torch single-threaded on both sides. "
        "GRIT = add_full_rrwp's steps with dense torch ops, graph by graph. speedup = GRIT / omnipos."))
    edge_index, num_nodes, batch = collate(graphs)
    with torch_threads(1):
        index, values, nodes = rrwp(edge_index, num_nodes, 8, batch=batch)
        grit = [grit_rrwp(g) for g in graphs]
        offsets = torch.cumsum(torch.tensor([0] + [g.num_nodes for g in graphs[:-1]]), 0)
        grit_index = torch.cat([p + int(o) for (_, p, _), o in zip(grit, offsets)], 1)
        assert torch.equal(grit_index, index), "RRWP pairs differ from GRIT's"
        diff = max(float((torch.cat([v for _, _, v in grit]) - values).abs().max()),
                   float((torch.cat([a for a, _, _ in grit]) - nodes).abs().max()))
        ours = wall_and_cpu_medians(lambda: rrwp(edge_index, num_nodes, 8, batch=batch), repeats=repeats, warmup=1)
        pre = wall_and_cpu_medians(lambda: precompute(graphs, AddRRWP(8), batch_size=2048, progress=False),
                                   repeats=repeats, warmup=1)
        peer = wall_and_cpu_medians(lambda: [grit_rrwp(g) for g in graphs], repeats=max(1, repeats - 1), warmup=1)
    for case, timing in (("rrwp(batch)", ours), ("precompute(AddRRWP(8))", pre)):
        bench.row(case=case, pairs=index.shape[1], omnipos_cpu_s=timing[1], grit_cpu_s=peer[1],
                  speedup_cpu=peer[1] / timing[1], omnipos_wall_s=timing[0], grit_wall_s=peer[0],
                  speedup_wall=peer[0] / timing[0], max_diff=diff)
    bench.finish(None if args.out is None else args.out.with_name("graph_rrwp.json"))


def barabasi_albert(n: int, m: int = 3, seed: int = 0) -> np.ndarray:
    """Preferential attachment: each new node links to m distinct earlier nodes drawn by degree (a draw from
    the list of all edge endpoints so far)."""
    rng = np.random.default_rng(seed)
    ends = np.empty(2 * m * n, dtype=np.int64)  # every edge's two endpoints, in order
    ends[:m] = np.arange(m)
    filled, targets = m, list(range(m))
    pairs = np.empty((2, m * (n - m)), dtype=np.int64)
    draws = rng.random(8 * m * n)
    used = 0
    for v in range(m, n):
        k = (v - m) * m
        pairs[0, k:k + m], pairs[1, k:k + m] = v, targets
        ends[filled:filled + m], ends[filled + m:filled + 2 * m] = targets, v
        filled += 2 * m
        chosen: list[int] = []
        while len(chosen) < m:
            if used == draws.size:
                draws, used = rng.random(8 * m * n), 0
            pick = int(ends[int(draws[used] * filled)])
            used += 1
            if pick not in chosen:
                chosen.append(pick)
        targets = chosen
    return pairs


def random_geometric(n: int, degree: float = 3.0, seed: int = 0) -> np.ndarray:
    from scipy.spatial import cKDTree

    points = np.random.default_rng(seed).random((n, 2))
    return cKDTree(points).query_pairs(np.sqrt(degree / (np.pi * n)), output_type="ndarray").T


def grid_2d(n: int) -> np.ndarray:
    side = int(round(np.sqrt(n)))
    ids = np.arange(side * side).reshape(side, side)
    return np.concatenate([np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()]),
                           np.stack([ids[:-1].ravel(), ids[1:].ravel()])], 1)


def ring_chords(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n])
    chords = rng.integers(0, n, (2, n // 10))
    return np.concatenate([ring, chords[:, chords[0] != chords[1]]], 1)


CITATION = "citation-like power law"
SHAPES = {"Barabasi-Albert m=3": barabasi_albert, "random geometric (deg 3)": random_geometric,
          "2-D grid": grid_2d, "ring + n/10 chords": ring_chords}


def citation_like(n: int, seed: int = 0) -> np.ndarray:
    """A power-law graph like a citation network: ``5 n`` distinct edges between endpoints drawn with weights
    ``~ rank^(-1/1.5)`` (degree exponent 2.5, Chung-Lu), capped so that the largest degree stays in the hundreds
    (~230-340 at 200,000 nodes and 1M edges)."""
    rng = np.random.default_rng(seed)
    weight = (np.arange(1, n + 1) / n) ** (-1 / 1.5)
    weight = np.minimum(weight / weight.mean() * 10, 160)
    pairs = rng.choice(n, size=(2, int(5.3 * n)), p=weight / weight.sum())
    pairs = np.unique(np.sort(pairs[:, pairs[0] != pairs[1]], axis=0), axis=1)
    return pairs[:, rng.permutation(pairs.shape[1])[:5 * n]]


def large_graph(shape: str, n: int) -> tuple[torch.Tensor, int]:
    """Both directions of each edge, duplicates removed (PyG's AddRandomWalkPE drops parallel edges on graphs of
    <= 2000 nodes, where it writes a dense matrix, and sums them above: both sides see simple graphs here)."""
    pairs = np.sort((citation_like if shape == CITATION else SHAPES[shape])(n), axis=0)
    pairs = np.unique(pairs[:, pairs[0] != pairs[1]], axis=1)
    n = int(round(np.sqrt(n))) ** 2 if shape == "2-D grid" else n
    both = np.concatenate([pairs, pairs[::-1]], 1)
    return torch.from_numpy(np.ascontiguousarray(both)).long(), n


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


class Measurement:
    """The timed part of a worker process: peak memory counted from here (VmHWM reset to the current size), a
    timer that reports ``"time"`` and exits at the cap, and the one JSON line the parent reads."""

    def __init__(self, spec: dict, edge_index: torch.Tensor, n: int) -> None:
        import gc
        import threading

        gc.collect()
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        self.before = _status_kib("VmRSS")
        self.report = {"nodes": n, "edges": int(edge_index.shape[1])}
        threading.Timer(spec["cap"], self.give_up, ("time",)).start()
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    def elapsed(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall0, time.process_time() - self.cpu0

    def peak_mib(self) -> float:
        return (_status_kib("VmHWM") - self.before) / 1024

    def give_up(self, status: str, **extra: Any) -> None:
        print(json.dumps({**self.report, "status": status, **extra}), flush=True)
        os._exit(0)


def worker(spec: dict) -> None:
    """One (method, graph) case in its own process: time and peak memory of the call alone."""
    if spec["method"] in SPECTRAL:
        return spectral_worker(spec)
    torch.set_num_threads(1)
    ring = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    random_walk_pe(ring, 4, spec["steps"], dense_max_nodes=1)  # warm-up: imports and first calls of both
    random_walk_pe(ring, 4, spec["steps"])
    AddRandomWalkPE(spec["steps"])(Data(edge_index=ring, num_nodes=4))
    AddRandomWalkPE(spec["steps"])(Data(edge_index=torch.cat([ring, ring + 4] * 520, 1) % 2100, num_nodes=2100))
    edge_index, n = large_graph(spec["shape"], spec["n"])
    measured = Measurement(spec, edge_index, n)

    first: list[tuple[float, int]] = []

    def projected(done: int, total: int | None) -> None:
        """Stop when the rate since the first finished block projects the call past 1.5x the time cap."""
        now = time.perf_counter()
        if not first:
            first.append((now, done))
            return
        (t1, d1), elapsed = first[0], measured.elapsed()[0]
        if total and done > d1 and now - t1 > 10:
            estimate = elapsed + (total - done) * (now - t1) / (done - d1)
            if estimate > 1.5 * spec["cap"]:
                measured.give_up("time", projected_s=estimate)

    if spec["method"] == "omnipos":
        out = random_walk_pe(edge_index, n, spec["steps"], progress=projected)
    elif spec["method"] == "omnipos-estimate":
        out = random_walk_pe(edge_index, n, spec["steps"], probes=spec["probes"], progress=projected)
    else:
        out = AddRandomWalkPE(spec["steps"])(Data(edge_index=edge_index, num_nodes=n)).random_walk_pe
    wall, cpu = measured.elapsed()
    np.save(spec["out"], out.numpy())
    measured.give_up("ok", wall_s=wall, cpu_s=cpu, peak_mib=measured.peak_mib())


# ---------------------------------------------------------------- (f) eigenvectors of single large graphs


SPECTRAL = ("omnipos-lappe", "pyg-lappe", "omnipos-magnetic", "scipy-magnetic")
# (f): graphs up to this size take milliseconds; their times are medians of SMALL_REPEATS solves
SMALL_SPECTRAL, SMALL_REPEATS = 20_000, 7


def spectral_worker(spec: dict) -> None:
    """One (method, graph) eigenvector case in its own process, as ``worker``: a warm-up solve of a 6,000-node
    graph of the same shape (so that the solver "auto" picks for that shape has had its first call), then the
    timed one. Writes ``pe`` (and omnipos's eigenvalues) for the comparison."""
    from omnipos.graph import eigensolvers, magnetic_laplacian_pe
    from omnipos.graph.magnetic import sparse_magnetic_laplacian

    method, k = spec["method"], 8
    used: list[str] = []
    original = eigensolvers.components.sparse_eigenpairs  # (the name graph_eigenpairs calls)

    def spy(*a: Any, **kw: Any) -> Any:  # which solver "auto" chose, for the table
        out = original(*a, **kw)
        used.append(out[2])
        return out

    eigensolvers.components.sparse_eigenpairs = spy

    def directed(edge_index: torch.Tensor) -> torch.Tensor:
        return edge_index[:, edge_index[0] < edge_index[1]]  # each edge once, lower -> higher id: a DAG

    torch.set_num_threads(spec.get("threads", 1))  # the same on both sides (module docstring)

    def solve(edge_index: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        if method == "omnipos-lappe":
            pe, values, _ = laplacian_pe(edge_index, n, k, return_eigenvalues=True)
            return pe, values[0]
        if method == "pyg-lappe":
            return AddLaplacianEigenvectorPE(k, is_undirected=True)(Data(edge_index=edge_index, num_nodes=n)) \
                .laplacian_eigenvector_pe, None
        one_way = directed(edge_index)
        if method == "omnipos-magnetic":
            pe, values, _ = magnetic_laplacian_pe(one_way, n, k, q=0.25, return_eigenvalues=True)
            return pe, values[0]
        from scipy.sparse.linalg import eigsh

        rows, cols = one_way.numpy()
        lap, _ = sparse_magnetic_laplacian(rows, cols, np.ones(rows.size), n, 0.25)
        _, vectors = eigsh(lap, k=k, which="SA")
        return torch.from_numpy(np.concatenate([vectors.real, vectors.imag], 1)), None

    solve(*large_graph(spec["shape"], 6000))
    used.clear()
    edge_index, n = large_graph(spec["shape"], spec["n"])
    if n <= SMALL_SPECTRAL:  # milliseconds: one more warm-up on this graph, then the median of a few solves
        solve(edge_index, n)
        used.clear()
        times = []
        for _ in range(SMALL_REPEATS):
            wall0, cpu0 = time.perf_counter(), time.process_time()
            solve(edge_index, n)
            times.append((time.perf_counter() - wall0, time.process_time() - cpu0))
    measured = Measurement(spec, edge_index, n)
    pe, values = solve(edge_index, n)
    wall, cpu = measured.elapsed()
    if n <= SMALL_SPECTRAL:
        wall, cpu = (float(np.median([t[i] for t in times])) for i in (0, 1))
    np.save(spec["out"], pe.double().numpy())
    if values is not None:
        np.save(spec["out"] + ".values.npy", values.double().numpy())
    measured.give_up("ok", wall_s=wall, cpu_s=cpu, peak_mib=measured.peak_mib(),
            solver=",".join(sorted(set(used))) or ("null space / dense" if method.startswith("omnipos") else ""))


def simple_column_diff(ours: np.ndarray, values: np.ndarray, theirs: np.ndarray) -> float | str:
    """Largest |omnipos - peer| over columns whose eigenvalue is simple (gap > 1e-6 to both neighbours; the
    trivial 0 before the first), signs matched; "" when none is (a graph of many components: the null space)."""
    spectrum = np.concatenate([[0.0], values, [np.inf]])
    gaps = np.diff(spectrum)
    simple = np.flatnonzero((gaps[:-1] > 1e-6) & (gaps[1:] > 1e-6))
    if not simple.size:
        return ""
    a, b = ours[:, simple], theirs[:, simple]
    signs = np.sign((a * b).sum(0))
    signs[signs == 0] = 1
    return float(np.abs(a - b * signs).max())


def large_sizes_and_cap(args: Any) -> tuple[list[int], float]:
    """(e) and (f)'s graph sizes (``--sizes`` where given) and per-case time cap."""
    if args.sizes:
        return [int(size) for size in args.sizes.split(",")], args.cap
    return ([2_000, 10_000], 60.0) if args.quick else ([20_000, 100_000, 1_000_000], args.cap)


def chosen_shapes(args: Any) -> list[str]:
    """(e) and (f)'s graph shapes: ``--shapes`` (names of SHAPES, ';'-separated) where given, else all."""
    if not args.shapes:
        return list(SHAPES)
    shapes = args.shapes.split(";")
    unknown = [shape for shape in shapes if shape not in SHAPES]
    if unknown:
        raise SystemExit(f"--shapes: unknown {unknown}; choose from {list(SHAPES)}")
    return shapes


def columns(side: str, result: dict, cap: float, cap_gib: float) -> dict[str, Any]:
    """``{side}_s``, ``{side}_cpu_s``, ``{side}_peak_mib`` of one case for the table."""
    return {f"{side}_s": shown(result, cap, cap_gib, "wall_s"), f"{side}_cpu_s": shown(result, cap, cap_gib, "cpu_s"),
            f"{side}_peak_mib": shown(result, cap, cap_gib, "peak_mib")}


def shown(result: dict, cap: float, cap_gib: float, key: str) -> Any:
    """A case's ``key`` for the table: its value, or what stopped it ("> cap" in the wall-time column, with the
    projected time where omnipos projected one; "> cap GiB" in the peak column)."""
    if result["status"] == "ok":
        return result[key]
    if result["status"] == "time":
        projected = f" ({result['projected_s']:.0f} s)" if "projected_s" in result else ""
        return f"> {cap:.0f} s{projected}" if key == "wall_s" else ""
    if result["status"] == "memory":
        return f"> {cap_gib:g} GiB" if key == "peak_mib" else ""
    return result["status"]


def spectral_section(args: Any) -> None:
    import tempfile

    sizes, cap = large_sizes_and_cap(args)
    if not args.sizes:
        sizes = sorted({1_000, 2_000, 3_000, *sizes})  # (the small shapes where a fixed cost could lose to PyG)
    threads = 1
    bench = Bench("graph_eigen_large", notes=(
        f"(f) k=8 eigenvectors of one large graph, each case in its own process after a warm-up solve; capped at "
        f"{cap:.0f} s and {args.cap_gib:g} GiB ('> cap'). peak = VmHWM above the process's size before the call "
        f"(the graph itself excluded); s = wall seconds, cpu_s = process CPU seconds (graphs up to "
        f"{SMALL_SPECTRAL:,} nodes: medians of {SMALL_REPEATS} solves); torch {threads} thread and NumPy's BLAS 1 "
        "thread on both sides; speedup_cpu = peer / omnipos "
        "CPU time; max_diff over columns of simple eigenvalues, signs matched (both sides' float32 precision). "
        "LapPE peer: PyG's AddLaplacianEigenvectorPE(is_undirected=True); magnetic (q=0.25, edges lower -> higher "
        "id) peer: SciPy eigsh(L_q, 8, which='SA') on the sparse Hermitian matrix."))
    cases = [("LapPE", "omnipos-lappe", "pyg-lappe", n) for n in sizes]
    # (magnetic up to 1e5 nodes unless --sizes names the sizes: SciPy's eigsh runs into the cap above)
    cases += [("magnetic", "omnipos-magnetic", "scipy-magnetic", n) for n in sizes if n <= 100_000 or args.sizes]
    with tempfile.TemporaryDirectory() as tmp:
        for shape in chosen_shapes(args):
            for encoding, ours_method, peer_method, n in cases:
                results = {}
                for method in (ours_method, peer_method):
                    spec = {"method": method, "shape": shape, "n": n, "cap": cap, "out": f"{tmp}/{method}.npy",
                            "threads": threads}
                    results[method] = run_case(spec, args.cap_gib)
                    print(f"  {encoding}, {shape}, n={n:,}, {method}: {results[method]}", flush=True)
                ours, theirs = results[ours_method], results[peer_method]
                both = ours["status"] == theirs["status"] == "ok"
                diff = ""
                if both and encoding == "LapPE":
                    diff = simple_column_diff(np.load(f"{tmp}/{ours_method}.npy"),
                                              np.load(f"{tmp}/{ours_method}.npy.values.npy"),
                                              np.load(f"{tmp}/{peer_method}.npy"))

                bench.row(encoding=encoding, graph=shape, nodes=ours.get("nodes", theirs.get("nodes", n)),
                          edges=ours.get("edges", theirs.get("edges", "")), solver=ours.get("solver", ""),
                          **columns("omnipos", ours, cap, args.cap_gib),
                          **columns("peer", theirs, cap, args.cap_gib),
                          speedup_cpu=theirs["cpu_s"] / ours["cpu_s"] if both else
                          (f"> {cap / ours['cpu_s']:.0f}" if ours["status"] == "ok" and theirs["status"] == "time"
                           else ""), max_diff=diff)
    bench.finish(None if args.out is None else args.out.with_name("graph_eigen_large.json"))


def run_case(spec: dict, cap_gib: float) -> dict:
    """Run ``worker(spec)`` in a subprocess, killing it above ``cap_gib`` GiB of resident memory."""
    proc = subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(spec)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as status:
                rss = next((int(line.split()[1]) for line in status if line.startswith("VmRSS")), 0)
        except (FileNotFoundError, ProcessLookupError):
            rss = 0
        peak = max(peak, rss)
        if rss > cap_gib * 2**20:
            proc.kill()
            proc.wait()
            return {"status": "memory"}
        time.sleep(0.1)
    lines = [line for line in proc.stdout.read().splitlines() if line.startswith("{")]
    if not lines:
        return {"status": "error", "error": proc.stderr.read()[-500:]}
    return json.loads(lines[-1])


def large_graph_section(args: Any) -> None:
    import tempfile

    sizes, cap = large_sizes_and_cap(args)
    bench = Bench("graph_walks_large", notes=(
        f"(e) RWPE 16 steps on one large graph, each case in its own process, torch single-threaded; capped at "
        f"{cap:.0f} s and {args.cap_gib:g} GiB ('> cap'; omnipos stops early when its progress projects past "
        "the time cap: projected time in brackets). peak = VmHWM above the process's size before the call "
        "(the graph itself excluded). s = wall seconds, cpu_s = process CPU seconds (what the work costs on a shared "
        "machine); speedup_cpu = PyG / omnipos CPU time; max_diff = max |omnipos - PyG|."))
    with tempfile.TemporaryDirectory() as tmp:
        for shape in chosen_shapes(args):
            for n in sizes:
                results = {}
                for method in ("omnipos", "pyg"):
                    spec = {"method": method, "shape": shape, "n": n, "steps": 16, "cap": cap,
                            "out": f"{tmp}/{method}.npy"}
                    results[method] = run_case(spec, args.cap_gib)
                    print(f"  {shape}, n={n:,}, {method}: {results[method]}", flush=True)
                ours, theirs = results["omnipos"], results["pyg"]
                both = ours["status"] == theirs["status"] == "ok"
                diff = float(np.abs(np.load(f"{tmp}/omnipos.npy") - np.load(f"{tmp}/pyg.npy")).max()) if both else ""

                bench.row(graph=shape, nodes=ours.get("nodes", theirs.get("nodes", n)),
                          edges=ours.get("edges", theirs.get("edges", "")),
                          **columns("omnipos", ours, cap, args.cap_gib),
                          **columns("pyg", theirs, cap, args.cap_gib),
                          speedup_cpu=theirs["cpu_s"] / ours["cpu_s"] if both else "", max_diff=diff)
    bench.finish(None if args.out is None else args.out.with_name("graph_walks_large.json"))


def citation_section(args: Any) -> None:
    """(g) RWPE 16 steps on one citation-like power-law graph (200,000 nodes, 1M edges; --quick: 20,000): exact
    (O(nodes * edges) there: every walk reaches most of the graph within a few steps), the estimate with
    ``probes=256`` and PyG, each in its own process as (e). The estimate is checked first on a 20,000-node graph
    of the same kind (5,000 with --quick) against the exact values: the largest |difference|, and the largest
    and the 99.9th percentile of |difference| / its standard error (Gaussian: ~3.3)."""
    import tempfile

    n, check_n = (20_000, 5_000) if args.quick else (200_000, 20_000)
    cap = 60.0 if args.quick else args.cap
    edge_index, m = large_graph(CITATION, check_n)
    exact = random_walk_pe(edge_index, m, 16)
    estimate, stderr = random_walk_pe(edge_index, m, 16, probes=256, return_stderr=True)
    late = slice(4, None)  # (steps 1..4 stay exact)
    diff = (estimate - exact).abs()[:, late].double()
    z = diff / stderr[:, late].double().clamp_min(1e-12)
    assert torch.equal(estimate[:, :4], exact[:, :4]), "exact steps of the estimate differ"
    check = (f"check on {m:,} nodes: max |estimate - exact| {float(diff.max()):.2e}, mean stderr "
             f"{float(stderr[:, late].mean()):.1e}, |diff|/stderr max {float(z.max()):.2f}, 99.9% "
             f"{float(torch.quantile(z.flatten()[:1_000_000].float(), 0.999)):.2f}")
    print("  (g)", check, flush=True)
    bench = Bench("graph_walks_citation", notes=(
        f"(g) RWPE 16 steps on one citation-like power-law graph, each case in its own process, torch "
        f"single-threaded, capped at {cap:.0f} s and {args.cap_gib:g} GiB (projected time in brackets). "
        f"omnipos estimate: probes=256 (steps 1-4 exact, 5-16 Hutchinson's unbiased estimate); {check}."))
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for method in ("omnipos-estimate", "omnipos", "pyg"):
            spec = {"method": method, "shape": CITATION, "n": n, "steps": 16, "cap": cap, "probes": 256,
                    "out": f"{tmp}/{method}.npy"}
            results[method] = run_case(spec, args.cap_gib)
            print(f"  {CITATION}, n={n:,}, {method}: {results[method]}", flush=True)
            result = results[method]
            bench.row(graph=CITATION, method=method, nodes=result.get("nodes", n), edges=result.get("edges", ""),
                      **columns("run", result, cap, args.cap_gib))
    bench.finish(None if args.out is None else args.out.with_name("graph_walks_citation.json"))


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--big-nodes", type=int, default=50_000)
    parser.add_argument("--only", default="a,b,c,d,e,f,g", help="sections to run, e.g. 'd,e'")
    parser.add_argument("--cap", type=float, default=300.0, help="(e): seconds per case")
    parser.add_argument("--cap-gib", type=float, default=3.0, help="(e): resident GiB per case")
    parser.add_argument("--sizes", help="(e), (f): node counts instead of the defaults, e.g. '1000000'")
    parser.add_argument("--shapes", help="(e), (f): graph shapes, ';'-separated, e.g. 'Barabasi-Albert m=3'")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    only = set(args.only.split(","))
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

    if "d" in only:
        rrwp_section(args, graphs)
    if "e" in only:
        large_graph_section(args)
    if "f" in only:
        spectral_section(args)
    if "g" in only:
        citation_section(args)
    if not only & {"a", "b", "c"}:
        return

    peer_repeats = max(1, repeats - 1)  # PyG takes seconds per pass
    if "a" in only:
        # (a) Laplacian PE, k=8
        diff = simple_columns_agree(graphs[:300], 8)
        ours = wall_and_cpu_medians(lambda: laplacian_pe(edge_index, num_nodes, 8, batch=batch),
                                    repeats=repeats, warmup=1)
        pre = wall_and_cpu_medians(
            lambda: precompute(graphs, AddLaplacianPE(8), batch_size=2048, device=device, progress=False),
            repeats=repeats, warmup=1)
        pyg_sym = wall_and_cpu_medians(lambda: per_graph(AddLaplacianEigenvectorPE(8, is_undirected=True), graphs),
                                       repeats=peer_repeats, warmup=1)
        pyg_default = wall_and_cpu_medians(lambda: per_graph(AddLaplacianEigenvectorPE(8), graphs),
                                           repeats=peer_repeats, warmup=1)
        with torch_threads(1):
            ours_1 = wall_and_cpu_medians(lambda: laplacian_pe(edge_index, num_nodes, 8, batch=batch),
                                          repeats=repeats, warmup=1)
        stacks = dense_laplacians(edge_index, num_nodes, batch)
        floor = wall_and_cpu_medians(lambda: run_cpu_work(device, batched_eigh, stacks, cpu_parallelism()),
                                     repeats=repeats, warmup=1)
        compiled = laplacian_pe(edge_index, num_nodes, 8, batch=batch)
        with without_numba():  # checked equal first: |with numba - without| over all 10k graphs
            lapack_diff = float((laplacian_pe(edge_index, num_nodes, 8, batch=batch) - compiled).abs().max())
            ours_lapack = wall_and_cpu_medians(lambda: laplacian_pe(edge_index, num_nodes, 8, batch=batch),
                                               repeats=repeats, warmup=1)
            floor_lapack = wall_and_cpu_medians(
                lambda: run_cpu_work(device, batched_eigh, stacks, cpu_parallelism()), repeats=repeats, warmup=1)
        row("(a) LapPE k=8, laplacian_pe(batch)", ours, pyg_sym, "AddLaplacianEigenvectorPE(is_undirected=True)", diff)
        row("(a) LapPE k=8, laplacian_pe(batch), torch 1 thread", ours_1, pyg_sym,
            "AddLaplacianEigenvectorPE(is_undirected=True)")
        row("(a) floor: its batched eigh alone", floor, pyg_sym, "AddLaplacianEigenvectorPE(is_undirected=True)")
        row("(a) LapPE k=8, laplacian_pe(batch), without numba", ours_lapack, pyg_sym,
            "AddLaplacianEigenvectorPE(is_undirected=True)", f"{lapack_diff:.2e} (vs with numba)")
        row("(a) floor without numba: LAPACK's eigh alone", floor_lapack, pyg_sym,
            "AddLaplacianEigenvectorPE(is_undirected=True)")
        row("(a) LapPE k=8, precompute(list)", pre, pyg_sym, "AddLaplacianEigenvectorPE(is_undirected=True)")
        row("(a) LapPE k=8, laplacian_pe(batch)", ours, pyg_default, "AddLaplacianEigenvectorPE() (default: eig)")

    # (c) random walk, 20 steps
    if "c" in only:
        with torch_threads(1):  # both sides: see the module docstring
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

    if "b" in only:
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


if __name__ == "__main__":
    main()
