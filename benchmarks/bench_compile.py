"""Eager vs ``torch.compile`` (inductor) on CPU for the modules users put in training loops: RoPE forward +
backward, TimelineEncoder, and a timm ViT adapted by omnipos (forward at a new image size).

The claim under test (issue 13): compiling omnipos never makes a step slower. Both variants run the same module on
the same tensors in one process, calls interleaved (eager, compiled, eager, ...), medians after warm-up; compile
time is reported apart and excluded from the per-call figure.

    python benchmarks/bench_compile.py [--quick] [--threads N]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from _harness import Bench, common_arguments


def interleaved_medians(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(values) for name, values in samples.items()}


def measure(bench: Bench, case: str, eager: Callable[[], object], compiled: Callable[[], object], repeats: int) -> None:
    eager()
    t0 = time.perf_counter()
    compiled()  # first call compiles
    compile_s = time.perf_counter() - t0
    for _ in range(2):
        eager()
        compiled()
    times = interleaved_medians({"eager": eager, "compiled": compiled}, repeats)
    bench.row(case=case, eager_ms=times["eager"] * 1e3, compiled_ms=times["compiled"] * 1e3,
              speedup=times["eager"] / times["compiled"], compile_s=compile_s)


def rope_case(bench: Bench, quick: bool, repeats: int) -> None:
    from omnipos.core import RotaryEmbedding

    batch, heads, kv_heads, seq, dim = (1, 4, 2, 256, 64) if quick else (2, 16, 4, 2048, 64)
    rope = RotaryEmbedding(dim)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, seq, dim, generator=g).requires_grad_()
    k = torch.randn(batch, kv_heads, seq, dim, generator=g).requires_grad_()
    positions = torch.arange(seq)

    def step(module: Callable[..., object]) -> None:
        q.grad = k.grad = None
        qr, kr = module(q, k, positions)
        (qr.square().sum() + kr.square().sum()).backward()

    compiled = torch.compile(rope, dynamic=False)
    measure(bench, f"RoPE fwd+bwd {batch}x{heads}/{kv_heads}x{seq}x{dim}", lambda: step(rope), lambda: step(compiled),
            repeats)


def timeline_case(bench: Bench, quick: bool, repeats: int) -> None:
    from omnipos.timeseries import TimelineEncoder

    rows, length = (32, 100) if quick else (256, 500)
    g = torch.Generator().manual_seed(0)
    times = (torch.rand(rows, length, generator=g, dtype=torch.float64) * 48).cumsum(-1)
    mask = torch.arange(length) < torch.randint(1, length + 1, (rows, 1), generator=g)
    clock = torch.full((rows,), 473_000.0, dtype=torch.float64)  # each row's origin on the clock (hours since 1970)
    encoder = TimelineEncoder(64)
    compiled = torch.compile(encoder, dynamic=False)
    with torch.no_grad():
        measure(bench, f"TimelineEncoder {rows}x{length} dim=64", lambda: encoder(times, mask, clock),
                lambda: compiled(times, mask, clock), repeats)


def vit_case(bench: Bench, quick: bool, repeats: int) -> None:
    import timm

    from omnipos.vision import adapt_vit

    name = "vit_tiny_patch16_224" if quick else "vit_small_patch16_224"
    model = adapt_vit(timm.create_model(name, pretrained=False, num_classes=10)).eval()
    images = torch.randn(2 if quick else 8, 3, 256, 320, generator=torch.Generator().manual_seed(0))
    compiled = torch.compile(model, dynamic=False)
    with torch.no_grad():
        measure(bench, f"adapt_vit({name}) forward {tuple(images.shape)}", lambda: model(images),
                lambda: compiled(images), repeats)


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = 3 if args.quick else args.repeats
    bench = Bench("compile",
                  notes="eager vs torch.compile (inductor, dynamic=False) on CPU; speedup = eager / compiled")
    for case in (rope_case, timeline_case, vit_case):
        case(bench, args.quick, repeats)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
