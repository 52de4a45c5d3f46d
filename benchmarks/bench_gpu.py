"""CUDA figures: omnipos' batched paths on a GPU, each checked against the CPU result first, as a fraction of the
card's measured copy bandwidth where the work is moving bytes, and against a peer where one exists.

- copy: a 2 GiB device-to-device copy (bytes read + written / time): the ceiling the rows below are measured against.
- LapPE k=8 on 10,000 and 100,000 molecule-sized graphs (bench_graph's generator): ``laplacian_pe`` with the batch
  on CUDA, vs PyG's ``AddLaplacianEigenvectorPE(8, is_undirected=True)`` graph by graph on the CPU (10,000 only:
  its per-graph loop takes seconds); checked against omnipos on the CPU (the canonical sign makes them comparable).
- ``TimelineEncoder(64)`` on [10,000, 500] irregular timelines, float32 and bfloat16 modules (bytes: the float64
  times and clock read, the bool mask read, the output written).
- DNA on 1,000,000 reads of 150 bp: ``one_hot`` (uint8 in, float32 / bfloat16 out), ``reverse_complement`` of the
  tokens, and ``rc_symmetric_encoding`` of 100,000 reads (dim 16).

CUDA times: CUDA events around each call, medians of 20 after 3 warm-ups; the peer's CPU time is one wall median.

    python benchmarks/bench_gpu.py [--quick] [--out results/gpu.json]
"""

from __future__ import annotations

import statistics
import time

import torch
from _harness import Bench, common_arguments


def cuda_median(fn, *, warmup: int = 3, repeats: int = 20) -> float:
    """Median seconds of ``fn()`` between CUDA events."""
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


def copy_bandwidth(gib: float = 2.0) -> float:
    """Bytes read + written per second of a large device-to-device copy."""
    src = torch.randn(int(gib * 2**30) // 4, device="cuda")
    dst = torch.empty_like(src)
    seconds = cuda_median(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / seconds


def graphs_section(bench: Bench, quick: bool) -> None:
    from bench_graph import collate, molecule_like, per_graph
    from torch_geometric.transforms import AddLaplacianEigenvectorPE

    from omnipos.graph import laplacian_pe

    for count in (1_000,) if quick else (10_000, 100_000):
        graphs = molecule_like(count)
        edge_index, num_nodes, batch = collate(graphs)
        cpu = laplacian_pe(edge_index, num_nodes, 8, batch=batch)
        gpu_edges, gpu_batch = edge_index.cuda(), batch.cuda()
        gpu = laplacian_pe(gpu_edges, num_nodes, 8, batch=gpu_batch)
        assert gpu.device.type == "cuda"
        diff = float((gpu.cpu() - cpu).abs().max())
        again = laplacian_pe(gpu_edges, num_nodes, 8, batch=gpu_batch)
        seconds = cuda_median(lambda: laplacian_pe(gpu_edges, num_nodes, 8, batch=gpu_batch), warmup=0,
                              repeats=3 if count <= 10_000 else 1)  # (seconds per call: the first one warmed up)
        row = dict(case=f"LapPE k=8, {count:,} molecules", omnipos_ms=seconds * 1e3,
                   max_diff_vs_cpu=diff, deterministic=bool(torch.equal(gpu, again)))
        if count <= 10_000:
            start = time.perf_counter()
            per_graph(AddLaplacianEigenvectorPE(8, is_undirected=True), graphs)
            peer = time.perf_counter() - start
            row.update(peer="PyG AddLaplacianEigenvectorPE per graph (CPU)", peer_ms=peer * 1e3,
                       speedup=peer / seconds)
        bench.row(**row)


def timelines_section(bench: Bench, copy: float, quick: bool) -> None:
    from omnipos.timeseries import TimelineEncoder

    rows, length = (1_000, 500) if quick else (10_000, 500)
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, length + 1, (rows,), generator=gen)
    mask = torch.arange(length)[None] < lengths[:, None]
    times = torch.cumsum(torch.rand(rows, length, generator=gen, dtype=torch.float64) * 10, 1) * mask
    clock = 1.7e9 + torch.rand(rows, generator=gen, dtype=torch.float64) * 1e8
    for dtype in (torch.float32, torch.bfloat16):
        encoder = TimelineEncoder(64, unit="s").requires_grad_(False)
        cpu = encoder(times, mask, clock)
        encoder = encoder.cuda().to(dtype)
        args = times.cuda(), mask.cuda(), clock.cuda()
        out = encoder(*args)
        diff = float((out.float().cpu() - cpu).abs().max())
        seconds = cuda_median(lambda: encoder(*args))
        moved = times.numel() * 9 + clock.numel() * 8 + out.numel() * out.element_size()
        bench.row(case=f"TimelineEncoder(64) [{rows:,}, {length}] {str(dtype)[6:]}", omnipos_ms=seconds * 1e3,
                  GBps=moved / seconds / 1e9, pct_of_copy=100 * moved / seconds / copy, max_diff_vs_cpu=diff)


def dna_section(bench: Bench, copy: float, quick: bool) -> None:
    from omnipos.dna import one_hot, rc_symmetric_encoding, reverse_complement

    reads, length = (100_000, 150) if quick else (1_000_000, 150)
    tokens = torch.randint(1, 5, (reads, length), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    gpu_tokens = tokens.cuda()
    for dtype in (torch.float32, torch.bfloat16):
        out = one_hot(gpu_tokens, dtype=dtype)
        check = reads // 100
        diff = float((out[:check].float().cpu() - one_hot(tokens[:check])).abs().max())
        seconds = cuda_median(lambda: one_hot(gpu_tokens, dtype=dtype))
        moved = tokens.numel() + out.numel() * out.element_size()
        bench.row(case=f"one_hot {reads:,} x {length} bp -> {str(dtype)[6:]}", omnipos_ms=seconds * 1e3,
                  GBps=moved / seconds / 1e9, pct_of_copy=100 * moved / seconds / copy, max_diff_vs_cpu=diff)
        del out
    rc = reverse_complement(gpu_tokens)
    same = bool(torch.equal(rc.cpu(), reverse_complement(tokens)))
    seconds = cuda_median(lambda: reverse_complement(gpu_tokens))
    moved = 2 * tokens.numel()
    bench.row(case=f"reverse_complement {reads:,} x {length} bp tokens", omnipos_ms=seconds * 1e3,
              GBps=moved / seconds / 1e9, pct_of_copy=100 * moved / seconds / copy,
              max_diff_vs_cpu=0.0 if same else float("nan"))
    few = reads // 10
    lengths = torch.full((few,), length)
    out = rc_symmetric_encoding(lengths.cuda(), 16)
    diff = float((out[:100].cpu() - rc_symmetric_encoding(lengths[:100], 16)).abs().max())
    seconds = cuda_median(lambda: rc_symmetric_encoding(lengths.cuda(), 16))
    moved = out.numel() * out.element_size()
    bench.row(case=f"rc_symmetric_encoding {few:,} x {length} bp, dim 16", omnipos_ms=seconds * 1e3,
              GBps=moved / seconds / 1e9, pct_of_copy=100 * moved / seconds / copy, max_diff_vs_cpu=diff)


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--only", default="graphs,timelines,dna")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu needs a CUDA device")
    only = set(args.only.split(","))
    copy = copy_bandwidth(0.25 if args.quick else 2.0)
    bench = Bench("gpu", device=torch.device("cuda"), notes=(
        f"device-to-device copy {copy / 1e9:.0f} GB/s (read + written); pct_of_copy = achieved / that; "
        "CUDA-event medians; the PyG peer runs on the CPU of the same machine"))
    bench.row(case="copy (ceiling)", GBps=copy / 1e9, pct_of_copy=100.0)
    if "graphs" in only:
        graphs_section(bench, args.quick)
    if "timelines" in only:
        timelines_section(bench, copy, args.quick)
    if "dna" in only:
        dna_section(bench, copy, args.quick)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
