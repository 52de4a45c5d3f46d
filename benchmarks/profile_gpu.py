"""Where the CUDA time goes in bench_gpu's slow rows: torch.profiler's kernels (self device time), host syncs and
launches per call, and timed variants of the DNA one-hot lookup. A diagnostic companion of bench_gpu.py (its
output is read, not asserted).

    python benchmarks/profile_gpu.py [--only rope,one_hot,lappe,timeline] [--out profile.txt]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from bench_gpu import cuda_median
from torch.profiler import ProfilerActivity, profile


def cuda_ms(fn) -> float:
    """Median milliseconds of ``fn()`` between CUDA events (bench_gpu's timer)."""
    return 1e3 * cuda_median(fn, repeats=15)


def report(name: str, fn, log, rows: int = 10) -> None:
    """One profiled call after warm-up: wall ms, device ms, kernel launches, syncs, top kernels."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = prof.key_averages()
    device = [e for e in events if getattr(e, "self_device_time_total", 0) > 0]
    device_ms = sum(e.self_device_time_total for e in device) / 1e3
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx"))
    syncs = sum(e.count for e in events if "Synchronize" in e.key or e.key == "cudaMemcpyAsync")
    wall = cuda_ms(fn)
    print(f"\n== {name}: {wall:.3f} ms per call (events); kernels {device_ms:.3f} ms; launches {launches}; "
          f"syncs/memcpys {syncs}", file=log)
    for e in sorted(device, key=lambda e: -e.self_device_time_total)[:rows]:
        print(f"   {e.self_device_time_total / 1e3:8.3f} ms  x{e.count:<5d} {e.key[:110]}", file=log)


def rope(log) -> None:
    from omnipos.core import RotaryEmbedding

    q = torch.randn(1, 32, 8192, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn_like(q)
    positions = torch.arange(8192, device="cuda")[None]
    for layout in ("half", "interleaved"):
        module = RotaryEmbedding(128, layout=layout).cuda()
        report(f"RoPE {layout} 1x32x8192x128 bf16, positions given", lambda: module(q, k, positions), log)
    module = RotaryEmbedding(128).cuda()
    report("RoPE half, default positions", lambda: module(q, k), log)
    copy_ms = cuda_ms(lambda: q.clone())
    print(f"   (q.clone: {copy_ms:.3f} ms = the copy floor for one of the two tensors)", file=log)


def one_hot_variants(log) -> None:
    from omnipos.dna import one_hot
    from omnipos.dna.alphabet import _cached_one_hot_table

    tokens = torch.randint(0, 16, (1_000_000, 150), device="cuda", dtype=torch.uint8)
    for dtype in (torch.float32, torch.bfloat16):
        table = _cached_one_hot_table("zeros", dtype, tokens.device, False)
        reference = one_hot(tokens, dtype=dtype)
        variants = {
            "one_hot (index_select, int64 ids)": lambda: one_hot(tokens, dtype=dtype),
            "index_select, int32 ids": lambda: table.index_select(0, tokens.reshape(-1).int()),
            "embedding, int32 ids": lambda: torch.nn.functional.embedding(tokens.int(), table),
            "table.t()[:, ids] transposed gather": lambda: table.t().contiguous()[:, tokens.reshape(-1).int()],
            "4 compares, stacked": lambda: torch.stack([tokens == b for b in (0, 1, 2, 3)], -1).to(dtype),
        }
        for name, fn in variants.items():
            out = fn()
            same = out.shape == reference.reshape(out.shape).shape and torch.equal(
                out.reshape(reference.shape), reference) if "transposed" not in name else \
                torch.equal(out.t().reshape(reference.shape), reference)
            print(f"   one_hot {str(dtype)[6:]:9s} {name:40s} {cuda_ms(fn):8.3f} ms  equal={same}", file=log)
            del out
        report(f"one_hot {dtype}", lambda: one_hot(tokens, dtype=dtype), log, rows=6)


def lappe(log) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_graph import collate, molecule_like

    from omnipos.graph import laplacian_pe

    edge_index, num_nodes, batch = collate(molecule_like(10_000))
    edge_index, batch = edge_index.cuda(), batch.cuda()
    report("LapPE k=8, 10k molecules (CUDA)", lambda: laplacian_pe(edge_index, num_nodes, 8, batch=batch), log,
           rows=14)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        laplacian_pe(edge_index, num_nodes, 8, batch=batch)
    print("   host side, top self CPU time:", file=log)
    for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:14]:
        print(f"   {e.self_cpu_time_total / 1e3:8.3f} ms  x{e.count:<6d} {e.key[:100]}", file=log)


def timeline(log) -> None:
    from omnipos.timeseries import TimelineEncoder

    rows, length = 10_000, 500
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, length + 1, (rows,), generator=gen)
    mask = (torch.arange(length)[None] < lengths[:, None]).cuda()
    times = (torch.cumsum(torch.rand(rows, length, generator=gen, dtype=torch.float64) * 10, 1)).cuda() * mask
    clock = (1.7e9 + torch.rand(rows, generator=gen, dtype=torch.float64) * 1e8).cuda()
    encoder = TimelineEncoder(64, unit="s").requires_grad_(False).cuda()
    report("TimelineEncoder(64) [10k, 500] float32", lambda: encoder(times, mask, clock), log, rows=14)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="rope,one_hot,lappe,timeline")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    sections = {"rope": rope, "one_hot": one_hot_variants, "lappe": lappe, "timeline": timeline}
    log = sys.stdout if args.out is None else open(args.out, "w")  # noqa: SIM115 - closed below
    print(torch.cuda.get_device_name(), "torch", torch.__version__, file=log)
    for name in args.only.split(","):
        try:
            sections[name](log)
        except Exception as exc:  # noqa: BLE001 - a diagnostic: report and go on to the next section
            print(f"\n== {name} failed: {type(exc).__name__}: {exc}", file=log)
        log.flush()
    if log is not sys.stdout:
        log.close()
        print(Path(args.out).read_text())


if __name__ == "__main__":
    main()
