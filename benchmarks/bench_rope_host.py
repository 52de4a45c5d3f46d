"""RoPE's host time per call, measured on the CPU (issue 35): the kernel path's Python with the launch stubbed, and
the CPU eager path against HF transformers' rotary module + apply_rotary_pos_emb (decode step, bf16 prefill).

(a) host: RotaryEmbedding(q, k, positions) through the CUDA code path on CPU tensors (``rope_kernels.
    KERNEL_DEVICE_TYPES = ("cpu",)``) with ``rope_triton._launch`` replaced by a no-op: every check, table, plan,
    allocation and the launch's argument list, no kernel. Target <= 15 us per q+k call at any shape, and per
    q-only ``rotate(q, positions)`` call (the ``q-only`` rows; ``cpu_alloc_us`` is then one output's). ``first_us``
    is the first call of a signature (checks, tables, launch plan), ``omnipos_us`` the median of later ones,
    ``cpu_alloc_us`` what the CPU allocator alone takes for the two outputs (large ones are mmap'd and unmapped
    each call; CUDA's caching allocator serves them in ~1-2 us), ``without_alloc_us`` the difference (noisy where
    mmap dominates). (Meta tensors are no shortcut: an empty_like on meta alone costs ~13 us.)
(b) decode: q [B, 32, 1, 128], k [B, 8, 1, 128] at position 4096 (per row), float32 and bfloat16, vs HF's
    LlamaRotaryEmbedding + apply_rotary_pos_emb (what a Llama layer runs). Target <= 1.5x HF.
(c) prefill bf16: q [1, 32, S, 128], k [1, 8, S, 128] vs HF in bf16 (its cos/sin rounded to bf16, products in
    bf16); omnipos rotates in float32 from float64 phases and rounds once. Target <= 1.0x HF; ``err`` is the
    largest difference from the float64 rotation of the same bf16 inputs (omnipos' exactness kept).

Same process, calls interleaved, medians. One thread by default (``--threads``).

    python benchmarks/bench_rope_host.py [--quick] [--threads N] [--out PATH]
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from _harness import Bench, common_arguments, paired_times

from omnipos.core import RotaryEmbedding, rope_kernels

THETA = 500000.0



def hf_rotary(head_dim: int, heads: int, kv_heads: int):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = LlamaConfig(hidden_size=head_dim * heads, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         head_dim=head_dim, rope_parameters={"rope_type": "default", "rope_theta": THETA})
    module = LlamaRotaryEmbedding(config)

    def call(q, k, position_ids):
        cos, sin = module(q, position_ids)
        return apply_rotary_pos_emb(q, k, cos, sin)

    return call


def both(rope, hf, q, k, pos) -> dict[str, Callable[[], object]]:
    return {"omnipos": lambda: rope(q, k, pos), "hf": lambda: hf(q, k, pos)}


def host_rows(bench: Bench, quick: bool, repeats: int) -> None:
    from omnipos.core import rope_triton

    if not rope_triton.HAS_TRITON:
        print("(a) skipped: triton is not importable")
        return
    saved = rope_kernels.KERNEL_DEVICE_TYPES, rope_triton._launch
    rope_kernels.KERNEL_DEVICE_TYPES = ("cpu",)
    rope_triton._launch = lambda *args, **kwargs: None
    bf = torch.bfloat16
    cases = [
        ("decode 1x32x1x128 / 1x8, pos [1,1]", RotaryEmbedding(128, base=THETA), (1, 32, 1, 128), (1, 8, 1, 128),
         torch.tensor([[4096]])),
        ("decode 64x32x1x128 / 64x8, pos [64,1]", RotaryEmbedding(128, base=THETA), (64, 32, 1, 128),
         (64, 8, 1, 128), torch.arange(64)[:, None] + 4000),
        ("prefill 1x32x8192x128 / 1x8, pos [1,S]", RotaryEmbedding(128, base=THETA), (1, 32, 8192, 128),
         (1, 8, 8192, 128), torch.arange(8192)[None]),
        ("prefill 4x32x4096x128 / 4x8, pos [4,S]", RotaryEmbedding(128, base=THETA), (4, 32, 4096, 128),
         (4, 8, 4096, 128), torch.arange(4096).repeat(4, 1)),
        ("8x16x2048x64, default positions", RotaryEmbedding(64, layout="interleaved"), (8, 16, 2048, 64),
         (8, 16, 2048, 64), None),
        ("M-RoPE 1x32x8192x128, ids [1,S,3]", RotaryEmbedding(128, mrope_section=(16, 24, 24), base=1e6),
         (1, 32, 8192, 128), (1, 8, 8192, 128), torch.arange(8192)[None, :, None].expand(1, 8192, 3)),
        ("3-D axial 1x24x4096x128 (HunyuanVideo)",
         RotaryEmbedding(128, n_axes=3, axes_dims=(16, 56, 56), layout="interleaved"), (1, 24, 4096, 128),
         (1, 24, 4096, 128), torch.stack(torch.meshgrid(torch.arange(4), torch.arange(32), torch.arange(32),
                                                        indexing="ij"), -1).reshape(4096, 3)),
        # q alone (rotate(q), no k): its own launch plan, in the same cache
        ("q-only decode 1x32x1x128, pos [1,1]", RotaryEmbedding(128, base=THETA), (1, 32, 1, 128), None,
         torch.tensor([[4096]])),
        ("q-only prefill 1x32x8192x128, pos [1,S]", RotaryEmbedding(128, base=THETA), (1, 32, 8192, 128), None,
         torch.arange(8192)[None]),
    ]
    if quick:
        cases = cases[:2] + cases[-2:-1]
    try:
        for name, rope, qs, ks, pos in cases:
            q = torch.empty(qs, dtype=bf)
            k = q if ks is None else torch.empty(ks, dtype=bf)
            if ks is None:
                call = lambda rope=rope, q=q, pos=pos: rope.rotate(q, pos)
                alloc = lambda q=q: torch.empty_like(q, memory_format=torch.contiguous_format)
            else:
                call = lambda rope=rope, q=q, k=k, pos=pos: rope(q, k, pos)
                alloc = lambda q=q, k=k: (torch.empty_like(q, memory_format=torch.contiguous_format),
                                          torch.empty_like(k, memory_format=torch.contiguous_format))
            start = time.perf_counter()
            call()
            first = time.perf_counter() - start
            times = paired_times({"call": call, "alloc": alloc}, device=None, repeats=repeats, calls=500)
            t, alloc = times["call"], times["alloc"]
            # the two output allocations are the CPU allocator's (mmap above ~128 KiB); CUDA's caching allocator
            # serves them in ~1-2 us: the rest is the Python of checks, plan and launch
            bench.row(part="(a) host, launch stubbed", case=name, first_us=first * 1e6, omnipos_us=t * 1e6,
                      cpu_alloc_us=alloc * 1e6, without_alloc_us=(t - alloc) * 1e6, target_us=15.0,
                      met=(t - alloc) * 1e6 <= 15.0)
    finally:
        rope_kernels.KERNEL_DEVICE_TYPES, rope_triton._launch = saved


def peer_rows(bench: Bench, quick: bool, repeats: int) -> None:
    batches = (1,) if quick else (1, 64)
    for dtype in (torch.float32, torch.bfloat16):
        for b in batches:
            g = torch.Generator().manual_seed(b)
            q = torch.randn(b, 32, 1, 128, generator=g).to(dtype)
            k = torch.randn(b, 8, 1, 128, generator=g).to(dtype)
            pos = torch.full((b, 1), 4096)
            rope, hf = RotaryEmbedding(128, base=THETA), hf_rotary(128, 32, 8)
            t = paired_times(both(rope, hf, q, k, pos), device=None, repeats=repeats, calls=200)
            bench.row(part="(b) decode step, CPU", case=f"{b}x32x1x128 / {b}x8 {str(dtype)[6:]} at 4096",
                      omnipos_us=t["omnipos"] * 1e6, hf_us=t["hf"] * 1e6, ratio=t["omnipos"] / t["hf"],
                      target=1.5, met=t["omnipos"] / t["hf"] <= 1.5)
    for s in ((256,) if quick else (1024, 4096)):
        g = torch.Generator().manual_seed(s)
        q = torch.randn(1, 32, s, 128, generator=g).bfloat16()
        k = torch.randn(1, 8, s, 128, generator=g).bfloat16()
        pos = torch.arange(s)[None] + 100
        rope, hf = RotaryEmbedding(128, base=THETA), hf_rotary(128, 32, 8)
        t = paired_times(both(rope, hf, q, k, pos), device=None, repeats=repeats, calls=3)
        reference = RotaryEmbedding(128, base=THETA)(q.double(), k.double(), pos)  # float64 phases and products
        errors = {}
        for name, out in (("omnipos", rope(q, k, pos)), ("hf", hf(q, k, pos))):
            errors[name] = max((o.double() - r).abs().max().item() for o, r in zip(out, reference))
        bench.row(part="(c) prefill bf16, CPU", case=f"1x32x{s}x128 / 1x8", omnipos_us=t["omnipos"] * 1e6,
                  hf_us=t["hf"] * 1e6, ratio=t["omnipos"] / t["hf"], target=1.0, met=t["omnipos"] / t["hf"] <= 1.0,
                  omnipos_err=errors["omnipos"], hf_err=errors["hf"])


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.set_defaults(repeats=9)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    repeats = 3 if args.quick else args.repeats
    bench = Bench("rope_host", device="cpu",
                  notes="(a) the CUDA path's Python on CPU tensors, launch stubbed; (b), (c) the CPU eager path vs "
                        "HF LlamaRotaryEmbedding + apply_rotary_pos_emb; medians, calls interleaved, same process")
    host_rows(bench, args.quick, repeats)
    peer_rows(bench, args.quick, repeats)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
