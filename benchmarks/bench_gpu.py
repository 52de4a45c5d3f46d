"""CUDA figures: omnipos' batched paths on a GPU, each checked against the CPU result first, as a fraction of the
card's measured copy bandwidth where the work is moving bytes, and against a peer where one exists.

- copy: a 2 GiB device-to-device copy (bytes read + written / time): the ceiling the rows below are measured against.
- LapPE k=8 on 10,000 and 100,000 molecule-sized graphs (bench_graph's generator): ``laplacian_pe`` with the batch
  on CUDA, vs PyG's ``AddLaplacianEigenvectorPE(8, is_undirected=True)`` graph by graph on the CPU (10,000 only:
  its per-graph loop takes seconds); checked against omnipos on the CPU (the canonical sign makes them comparable).
- ``TimelineEncoder(64)`` (absolute + periodic + gap, UTC) and ``TimelineEncoder(128)`` (New York, 2 harmonics) on
  [10,000, 500] irregular timelines, float32 and bfloat16 modules; ``one_hot`` (uint8 in, float32 / bfloat16 out)
  and ``reverse_complement`` (tokens, padded tokens with and without a mask, a padded one-hot batch) of 1,000,000
  reads of 150 bp: each as a percentage of the clone of an output-sized tensor (the floor of writing the output
  once), through the Triton kernel (an eager call: the encoder's in-kernel checks cost one host sync; and replayed
  in a CUDA graph: no checks, no sync) and through the kernel-less eager path (``OMNIPOS_DISABLE_TRITON=1``), each
  checked against the CPU path first. ``rc_symmetric_encoding`` of 100,000 reads (dim 16).

CUDA times: CUDA events around each call, medians of 20 after 3 warm-ups; the peer's CPU time is one wall median.

    python benchmarks/bench_gpu.py [--quick] [--only timelines,dna] [--out results/gpu.json]
    python benchmarks/bench_gpu.py --dry-run --out /tmp/gpu-dry.json   # no GPU: the script's code at toy sizes
"""

from __future__ import annotations

import os
import statistics
import time

import torch
from _harness import Bench, common_arguments, cuda_median


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


class Timer:
    """Medians of a call: CUDA events on a GPU; on the CPU (``--dry-run``) wall clock, no graphs."""

    def __init__(self, device: str, repeats: int = 20) -> None:
        self.cuda = device == "cuda"
        self.repeats = repeats

    def median(self, fn) -> float:
        if self.cuda:
            return cuda_median(fn, repeats=self.repeats)
        fn()
        samples = []
        for _ in range(max(3, self.repeats // 4)):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    def graph_median(self, fn) -> float | None:
        """Median of replaying ``fn`` captured in a CUDA graph (None on the CPU)."""
        if not self.cuda:
            return None
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return cuda_median(graph.replay, repeats=self.repeats)


def eager_path(fn):
    """``fn`` on the path without the Triton kernels (OMNIPOS_DISABLE_TRITON=1): the ~80-launch eager form."""
    def call():
        os.environ["OMNIPOS_DISABLE_TRITON"] = "1"
        try:
            return fn()
        finally:
            del os.environ["OMNIPOS_DISABLE_TRITON"]
    return call


def versus_clone(bench: Bench, timer: Timer, case: str, fn, out: torch.Tensor, **extra) -> None:
    """One row: ``fn`` through the kernel (eager call, and replayed in a CUDA graph), the kernel-less eager path,
    and the clone of an output-sized tensor (the floor of writing the output once); pct = clone time / time."""
    clone = timer.median(lambda: out.clone())
    kernel = timer.median(fn)
    old = timer.median(eager_path(fn))
    graph = timer.graph_median(fn)
    row = dict(case=case, clone_ms=clone * 1e3, kernel_ms=kernel * 1e3, pct_of_clone=100 * clone / kernel,
               eager_path_ms=old * 1e3, eager_pct_of_clone=100 * clone / old, speedup_vs_eager=old / kernel)
    if graph is not None:
        row.update(graph_ms=graph * 1e3, graph_pct_of_clone=100 * clone / graph)
    row.update(extra)
    bench.row(**row)


def timelines_section(bench: Bench, timer: Timer, device: str, quick: bool, dry: bool = False) -> None:
    from omnipos.timeseries import TimelineEncoder

    rows, length = (4, 16) if dry else (1_000, 500) if quick else (10_000, 500)
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, length + 1, (rows,), generator=gen)
    mask = torch.arange(length)[None] < lengths[:, None]
    times = torch.cumsum(torch.rand(rows, length, generator=gen, dtype=torch.float64) * 10, 1) * mask
    clock = 1.7e9 + torch.rand(rows, generator=gen, dtype=torch.float64) * 1e8
    configs = [("TimelineEncoder(64)", {}), ("TimelineEncoder(128), New York, 2 harmonics",
                                            {"timezone": "America/New_York", "harmonics": 2, "dim": 128})]
    for name, kwargs in configs:
        for dtype in (torch.float32, torch.bfloat16):
            encoder = TimelineEncoder(**{"dim": 64, **kwargs}, unit="s").requires_grad_(False)
            few = min(rows, 200)  # (a timeline encodes to the same numbers alone or in any batch)
            cpu = encoder(times[:few], mask[:few], clock[:few])
            encoder = encoder.to(device).to(dtype)
            args = times.to(device), mask.to(device), clock.to(device)
            out = encoder(*args)
            old = eager_path(lambda: encoder(*args))()
            diff = float((out[:few].float().cpu() - cpu).abs().max())
            versus_clone(bench, timer, f"{name} [{rows:,}, {length}] {str(dtype)[6:]}", lambda: encoder(*args), out,
                         max_diff_vs_cpu=diff, max_diff_vs_eager_path=float((out.float() - old.float()).abs().max()))


def dna_section(bench: Bench, timer: Timer, device: str, quick: bool, dry: bool = False) -> None:
    from omnipos.dna import PAD, one_hot, rc_symmetric_encoding, reverse_complement

    reads, length = (8, 150) if dry else (100_000, 150) if quick else (1_000_000, 150)
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(1, 5, (reads, length), dtype=torch.uint8, generator=gen)
    lengths = torch.randint(length // 2, length + 1, (reads,), generator=gen)
    mask = torch.arange(length)[None] < lengths[:, None]
    padded = torch.where(mask, tokens, torch.tensor(PAD, dtype=torch.uint8))
    gpu_tokens, gpu_padded, gpu_mask = tokens.to(device), padded.to(device), mask.to(device)
    check = max(1, reads // 100)
    for dtype in (torch.float32, torch.bfloat16):
        out = one_hot(gpu_tokens, dtype=dtype)
        same = bool(torch.equal(out[:check].cpu(), one_hot(tokens[:check], dtype=dtype)))
        versus_clone(bench, timer, f"one_hot {reads:,} x {length} bp -> {str(dtype)[6:]}",
                     lambda: one_hot(gpu_tokens, dtype=dtype), out, equal_to_cpu=same)
        del out
    for name, fn, cpu_fn in (
            ("tokens", lambda: reverse_complement(gpu_tokens), lambda: reverse_complement(tokens[:check])),
            ("padded tokens", lambda: reverse_complement(gpu_padded), lambda: reverse_complement(padded[:check])),
            ("padded tokens + mask", lambda: reverse_complement(gpu_padded, gpu_mask),
             lambda: reverse_complement(padded[:check], mask[:check]))):
        out = fn()
        same = bool(torch.equal(out[:check].cpu(), cpu_fn()))
        versus_clone(bench, timer, f"reverse_complement {reads:,} x {length} bp {name}", fn, out, equal_to_cpu=same)
    hot = one_hot(gpu_padded)
    out = reverse_complement(hot, gpu_mask)
    same = bool(torch.equal(out[:check].cpu(), reverse_complement(hot[:check].cpu(), mask[:check])))
    versus_clone(bench, timer, f"reverse_complement one-hot [{reads:,}, {length}, 4] + mask",
                 lambda: reverse_complement(hot, gpu_mask), out, equal_to_cpu=same)
    hot = out = None  # (free them before the next row)
    if dry:
        return
    few = reads // 10
    lengths = torch.full((few,), length)
    out = rc_symmetric_encoding(lengths.to(device), 16)
    diff = float((out[:100].cpu() - rc_symmetric_encoding(lengths[:100], 16)).abs().max())
    seconds = timer.median(lambda: rc_symmetric_encoding(lengths.to(device), 16))
    bench.row(case=f"rc_symmetric_encoding {few:,} x {length} bp, dim 16", kernel_ms=seconds * 1e3,
              clone_ms=timer.median(lambda: out.clone()) * 1e3, max_diff_vs_cpu=diff)


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--only", default="graphs,timelines,dna")
    parser.add_argument("--dry-run", action="store_true",
                        help="the timelines and DNA sections on the CPU at toy sizes (wall-clock medians, no graphs, "
                             "no kernels): checks this script runs where no GPU is")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if args.dry_run:
        timer = Timer("cpu", repeats=4)
        bench = Bench("gpu-dry-run", device=torch.device("cpu"), notes="dry run on the CPU: the numbers mean nothing")
        if "timelines" in only:
            timelines_section(bench, timer, "cpu", True, dry=True)
        if "dna" in only:
            dna_section(bench, timer, "cpu", True, dry=True)
        bench.finish(args.out)
        return
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu needs a CUDA device (--dry-run runs it on the CPU at toy sizes)")
    copy = copy_bandwidth(0.25 if args.quick else 2.0)
    timer = Timer("cuda")
    bench = Bench("gpu", device=torch.device("cuda"), notes=(
        f"device-to-device copy {copy / 1e9:.0f} GB/s (read + written); pct_of_clone = the time of cloning an "
        "output-sized tensor / the call's time (kernel: the Triton path, eager call; graph: it replayed in a CUDA "
        "graph; eager_path: OMNIPOS_DISABLE_TRITON=1); CUDA-event medians of 20 after 3 warm-ups; the PyG peer "
        "runs on the CPU of the same machine"))
    bench.row(case="copy (ceiling)", GBps=copy / 1e9, pct_of_copy=100.0)
    if "graphs" in only:
        graphs_section(bench, args.quick)
    if "timelines" in only:
        timelines_section(bench, timer, "cuda", args.quick)
    if "dna" in only:
        dna_section(bench, timer, "cuda", args.quick)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
