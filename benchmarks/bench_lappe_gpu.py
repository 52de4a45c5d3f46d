"""LapPE on the GPU (issue 35): ``laplacian_pe(k=8)`` of 10,000 molecule-like graphs (bench_graph's generator, 10-40
nodes) with the batch on CUDA, its small size groups solved by the batched Jacobi kernel of
``omnipos.graph.jacobi_triton``, against PyG's ``AddLaplacianEigenvectorPE(8, is_undirected=True)`` graph by graph on
the CPU of the same machine (target: >= 100x). Outputs are checked before anything is timed: CUDA against omnipos on
the CPU (the canonical bases make them comparable column by column), and PyG against omnipos on the columns of
simple eigenvalues (up to sign).

Rows:
- LapPE on CUDA, Jacobi kernel (the default) / cuSOLVER ``syevd`` (the kernel switched off) / ``sign="none"``
  (no canonical basis: what the basis costs) / omnipos on the CPU; PyG per graph on the CPU; ratios to PyG.
- the eigensolver alone on the same ``[G, n, n]`` float64 Laplacians (one stack per node count): the kernel vs
  ``torch.linalg.eigh`` on CUDA, and the kernel at other ``num_warps`` per size bucket (the default's choice,
  ``jacobi_triton._warps``, is not tuned on a GPU yet).

CUDA times: CUDA events around each call, medians after a warm-up call (the first call compiles each bucket's
kernel); the CPU rows are wall medians.

``--large``: instead, LapPE k=8 of one Barabasi-Albert graph (m=3, ``--large-nodes``, default 1e6; target < 10 s on
CUDA) by the device eigensolver (``omnipos.graph.eigensolvers.device_krylov``: block Lanczos in float64 with sparse
products on the device): the first call and the median of the next ones (wall, synchronised), the restarts
(progress ticks), and the output checked against SciPy's float64 Laplacian of the same graph (residual
``||L v - lambda v||`` of the float32 columns, orthonormality). ``--large-cpu-path`` adds the CPU path (SciPy /
ARPACK, what the graph takes on the CPU) on the same graph, once, and its eigenvalues' difference. With
``--cpu-only`` the device solver runs on CPU tensors (a dry run at a small size; it is not meant to be fast there).

    python benchmarks/bench_lappe_gpu.py [--count 10000] [--out results/lappe_gpu.json]
    python benchmarks/bench_lappe_gpu.py --count 50 --cpu-only     # the CPU part alone (no GPU needed)
    python benchmarks/bench_lappe_gpu.py --large [--large-nodes 1000000] [--large-cpu-path]
    python benchmarks/bench_lappe_gpu.py --large --cpu-only --large-nodes 20000 --large-cpu-path   # dry run
"""

from __future__ import annotations

import contextlib
import statistics
import time

import numpy as np
import torch
from _harness import Bench, common_arguments, cuda_median
from bench_graph import (
    collate,
    dense_laplacians,
    large_graph,
    molecule_like,
    per_graph,
    simple_columns_agree,
)
from torch_geometric.transforms import AddLaplacianEigenvectorPE

import omnipos.graph.laplacian as laplacian_module
from omnipos.graph import jacobi_triton, laplacian_pe, small_eigh

K = 8


def wall_median(fn, *, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def cpu_part(bench: Bench, graphs, edge_index, num_nodes, batch, repeats: int) -> tuple[torch.Tensor, float]:
    """omnipos and PyG on the CPU; PyG checked against omnipos first. Returns (omnipos' CPU output, PyG seconds)."""
    cpu = laplacian_pe(edge_index, num_nodes, K, batch=batch)
    agree = simple_columns_agree(graphs[:500], K)
    assert agree < 1e-4, f"PyG and omnipos differ by {agree} on simple-eigenvalue columns"
    start = time.perf_counter()
    per_graph(AddLaplacianEigenvectorPE(K, is_undirected=True), graphs)
    peer = time.perf_counter() - start
    ours = wall_median(lambda: laplacian_pe(edge_index, num_nodes, K, batch=batch), repeats=repeats)
    bench.row(case=f"LapPE k={K}, {len(graphs):,} molecules", path="PyG AddLaplacianEigenvectorPE per graph (CPU)",
              ms=peer * 1e3, vs_pyg=1.0, max_diff="(vs omnipos CPU, simple columns, first 500) "
              f"{agree:.1e}")
    bench.row(case="", path="omnipos laplacian_pe, CPU", ms=ours * 1e3, vs_pyg=peer / ours, max_diff="reference")
    return cpu, peer


def cuda_part(bench: Bench, edge_index, num_nodes, batch, cpu: torch.Tensor, peer: float, repeats: int) -> None:
    edges, ids = edge_index.cuda(), batch.cuda()

    def run(**kwargs):
        return laplacian_pe(edges, num_nodes, K, batch=ids, **kwargs)

    calls = []
    original = jacobi_triton.jacobi_eigh
    jacobi_triton.jacobi_eigh = lambda *a, **k: calls.append(a[0].shape) or original(*a, **k)
    try:
        gpu = run()
    finally:
        jacobi_triton.jacobi_eigh = original
    assert calls, "the Jacobi kernel was not used"
    diff = float((gpu.cpu() - cpu).abs().max())
    assert diff < 1e-4, f"CUDA (Jacobi) differs from the CPU by {diff}"
    deterministic = bool(torch.equal(run(), gpu))
    seconds = cuda_median(run, warmup=1, repeats=repeats)
    bench.row(case="", path="omnipos laplacian_pe, CUDA, Jacobi kernel", ms=seconds * 1e3, vs_pyg=peer / seconds,
              max_diff=diff, deterministic=deterministic, launches=len(calls))
    unsigned = cuda_median(lambda: run(sign="none"), warmup=1, repeats=repeats)
    bench.row(case="", path="  the same, sign='none' (no canonical basis)", ms=unsigned * 1e3,
              vs_pyg=peer / unsigned)
    devices = small_eigh.JACOBI_DEVICE_TYPES
    small_eigh.JACOBI_DEVICE_TYPES = ()
    try:
        syevd = run()
        diff_syevd = float((syevd.cpu() - cpu).abs().max())
        slow = cuda_median(run, warmup=1, repeats=max(1, repeats // 3))
    finally:
        small_eigh.JACOBI_DEVICE_TYPES = devices
    bench.row(case="", path="omnipos laplacian_pe, CUDA, cuSOLVER syevd (before)", ms=slow * 1e3,
              vs_pyg=peer / slow, max_diff=diff_syevd)


def solver_part(bench: Bench, edge_index, num_nodes, batch, repeats: int) -> None:
    """The eigensolver alone on the Laplacian stacks laplacian_pe builds (one per node count)."""
    stacks = [s.cuda() for s in dense_laplacians(edge_index, num_nodes, batch)]
    worst = 0.0
    for s in stacks:
        values, vectors, info = jacobi_triton.batched_jacobi_eigh(s, return_info=True)
        assert bool((info >= 0).all()), "a matrix did not converge"
        want = torch.linalg.eigvalsh(s)
        worst = max(worst, float((values - want).abs().max()))
        residual = s @ vectors - vectors * values.unsqueeze(-2)
        worst = max(worst, float(residual.abs().max()))
    sweeps = torch.cat([jacobi_triton.batched_jacobi_eigh(s, return_info=True)[2] for s in stacks]).float()
    kernel = cuda_median(lambda: [jacobi_triton.batched_jacobi_eigh(s) for s in stacks], warmup=1, repeats=repeats)
    syevd = cuda_median(lambda: [torch.linalg.eigh(s) for s in stacks], warmup=1, repeats=max(1, repeats // 3))
    bench.row(case=f"eigh alone, {len(stacks)} stacks [G, n, n]", path="Jacobi kernel (CUDA)", ms=kernel * 1e3,
              max_diff=f"{worst:.1e} (eigenvalues, residual)",
              sweeps=f"{sweeps.mean().item():.1f} mean, {sweeps.max().item():.0f} max")
    bench.row(case="", path="torch.linalg.eigh (cuSOLVER, CUDA)", ms=syevd * 1e3, vs_syevd=syevd / kernel)
    default = jacobi_triton._warps
    for bucket, sizes in ((16, range(10, 17)), (32, range(17, 33)), (64, range(33, 41))):
        chosen = [s for s in stacks if s.shape[-1] in sizes]
        if not chosen:
            continue
        for warps in sorted({max(1, default(bucket) // 2), default(bucket), min(32, default(bucket) * 2)}):
            jacobi_triton._warps = lambda block, warps=warps: warps
            try:
                seconds = cuda_median(lambda chosen=chosen: [jacobi_triton.batched_jacobi_eigh(s) for s in chosen],
                                      warmup=1, repeats=repeats)
            finally:
                jacobi_triton._warps = default
            bench.row(case=f"  bucket {bucket} ({sum(s.shape[0] for s in chosen)} matrices)",
                      path=f"num_warps={warps}{' (default)' if warps == default(bucket) else ''}",
                      ms=seconds * 1e3)


def large_part(bench: Bench, nodes: int, cuda: bool, repeats: int, cpu_path: bool) -> None:
    """LapPE k=8 of one Barabasi-Albert graph by the device eigensolver (on CUDA, or forced onto CPU tensors)."""
    edges, n = large_graph("Barabasi-Albert m=3", nodes)
    device = torch.device("cuda" if cuda else "cpu")
    on_device = edges.to(device)
    ticks = []

    @contextlib.contextmanager
    def device_solver():
        saved = laplacian_module._DEVICE_SOLVER_TYPES
        laplacian_module._DEVICE_SOLVER_TYPES = (device.type,)  # (on the CPU: the dry run's switch)
        try:
            yield
        finally:
            laplacian_module._DEVICE_SOLVER_TYPES = saved

    def run(progress=None):
        out = laplacian_pe(on_device, n, K, return_eigenvalues=True, progress=progress)
        if cuda:
            torch.cuda.synchronize()
        return out

    calls = []
    real = laplacian_module.device_eigenpairs
    laplacian_module.device_eigenpairs = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        with device_solver():
            start = time.perf_counter()
            pe, values, _ = run(progress=lambda done, total: ticks.append(done))
            first = time.perf_counter() - start
            seconds = wall_median(run, repeats=repeats)
    finally:
        laplacian_module.device_eigenpairs = real
    assert calls, "the device solver was not used"
    from omnipos.graph.laplacian import sparse_laplacian

    lap, _, _ = sparse_laplacian(edges[0].numpy(), edges[1].numpy(), np.ones(edges.shape[1]), n, "sym")
    vectors, lam = pe.double().cpu().numpy(), values[0].double().cpu().numpy()
    residual = float(np.linalg.norm(lap @ vectors - vectors * lam, axis=0).max())
    orthonormal = float(np.abs(vectors.T @ vectors - np.eye(K)).max())
    assert residual < 1e-5 and orthonormal < 1e-5, (residual, orthonormal)
    where = "CUDA" if cuda else "CPU tensors"
    bench.row(case=f"LapPE k={K}, Barabasi-Albert m=3, {n:,} nodes", path=f"device block Lanczos ({where})",
              ms=seconds * 1e3, first_call_ms=first * 1e3, restarts=len(ticks), residual=f"{residual:.1e}",
              orthonormality=f"{orthonormal:.1e}", target="< 10 s on CUDA")
    if cpu_path:
        start = time.perf_counter()
        _, cpu_values, _ = laplacian_pe(edges, n, K, return_eigenvalues=True)
        cpu_seconds = time.perf_counter() - start
        diff = float(((cpu_values.double() - values.double().cpu()).abs() / cpu_values.double().abs()).max())
        bench.row(case="", path="CPU path (SciPy: ARPACK single precision on 2I - L), one call", ms=cpu_seconds * 1e3,
                  eigenvalues_rel_diff=f"{diff:.1e}")


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--cpu-only", action="store_true", help="the CPU rows only (no GPU needed)")
    parser.add_argument("--large", action="store_true", help="one large Barabasi-Albert graph instead (docstring)")
    parser.add_argument("--large-nodes", type=int, default=1_000_000)
    parser.add_argument("--large-cpu-path", action="store_true", help="also time the CPU path on that graph")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.cpu_only
    if not cuda and not args.cpu_only:
        raise SystemExit("bench_lappe_gpu needs a CUDA device (or --cpu-only)")
    if args.large:
        bench = Bench("lappe_gpu_large", device=torch.device("cuda" if cuda else "cpu"), notes=(
            f"LapPE k={K} of one Barabasi-Albert graph (m=3, {args.large_nodes:,} nodes) by the device eigensolver; "
            "wall times (synchronised), median after a first call; residual of the float32 columns on SciPy's "
            "float64 Laplacian"))
        large_part(bench, args.large_nodes, cuda, 1 if args.quick else 3, args.large_cpu_path)
        bench.finish(args.out)
        return
    graphs = molecule_like(args.count)
    edge_index, num_nodes, batch = collate(graphs)
    bench = Bench("lappe_gpu", device=torch.device("cuda" if cuda else "cpu"), notes=(
        f"LapPE k={K} of {args.count:,} molecule-like graphs (10-40 nodes); vs_pyg = PyG's CPU time / this row's; "
        "CUDA rows: CUDA-event medians after a warm-up call; max_diff vs omnipos on the CPU"))
    repeats = 3 if args.quick else 5
    cpu, peer = cpu_part(bench, graphs, edge_index, num_nodes, batch, repeats)
    if cuda:
        cuda_part(bench, edge_index, num_nodes, batch, cpu, peer, repeats)
        solver_part(bench, edge_index, num_nodes, batch, repeats)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
