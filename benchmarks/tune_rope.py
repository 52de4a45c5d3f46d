"""The Triton RoPE kernel's tiling, measured: positions per program (BLOCK_S) x heads per program, forward, bf16,
both layouts, on the shapes of bench_rope (and GQA 32/8). Every tiling gives the same bits (tested); this picks
the fastest. CUDA only. Times are CUDA-event medians of whole calls: where the host's launch work takes longer
than the kernel (~0.1 ms of kernel at 1x32x8192x128), they measure the host, not the tiling.

    python benchmarks/tune_rope.py
"""

from __future__ import annotations

import torch
from bench_gpu import cuda_median

from omnipos.core import RotaryEmbedding, rope_triton


def main() -> None:
    shapes = [((1, 32, 8192, 128), (1, 32, 8192, 128)), ((8, 32, 2048, 128), (8, 8, 2048, 128)),
              ((4, 16, 2048, 64), (4, 16, 2048, 64))]
    copy = {}
    print(f"{'q / k shape':32s} {'layout':12s} {'BLOCK_S':>7s} {'heads':>5s} {'ms':>8s} {'GB/s':>8s}")
    for qs, ks in shapes:
        q = torch.randn(qs, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(ks, device="cuda", dtype=torch.bfloat16)
        moved = 2 * (q.numel() + k.numel()) * 2
        copy[qs] = 1e3 * cuda_median(lambda: (q.clone(), k.clone()))
        positions = torch.arange(qs[2], device="cuda")[None].expand(qs[0], qs[2])
        for layout in ("half", "interleaved"):
            rope = RotaryEmbedding(qs[-1], layout=layout).cuda()
            inv = rope.frequencies(positions).to("cuda")
            best = None
            for block_s in (8, 16, 32, 64):
                for heads in (None, 8, 4, 2, 1):
                    ms = 1e3 * cuda_median(lambda: rope_triton.rotate_qk(
                        q, k, positions, inv, seq_axis=2, rotary_dim=qs[-1], interleaved=layout == "interleaved",
                        block_s=block_s, heads_per_program=heads))
                    best = min(best or (ms, block_s, heads), (ms, block_s, heads), key=lambda t: t[0])
                    print(f"{str(qs) + ' / ' + str(ks[1]):32s} {layout:12s} {block_s:7d} {str(heads):>5s} {ms:8.4f} "
                          f"{moved / ms / 1e6:8.0f}")
            print(f"   best {layout}: {best[0]:.4f} ms (BLOCK_S {best[1]}, heads {best[2]}); the copy of q and k: "
                  f"{copy[qs]:.4f} ms = {moved / copy[qs] / 1e6:.0f} GB/s")


if __name__ == "__main__":
    main()
