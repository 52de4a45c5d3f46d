"""Rotate q and k: omnipos RotaryEmbedding vs HF transformers' eager apply_rotary_pos_emb vs rotary-embedding-torch.

Each side builds its own cos/sin from positions inside the timed call (HF: LlamaRotaryEmbedding.forward's
formula; rotary-embedding-torch: rotate_queries_or_keys on q and on k, its cache disabled so both do the same
work). Medians over repeats, same process, same tensors. fp32 on CPU, bf16 on CUDA. Speedup = HF time / ours.
On CUDA also the achieved bandwidth (bytes of q and k read and written / time) and liger-kernel where installed.

    python benchmarks/bench_rope.py [--quick] [--device cuda] [--layout half|interleaved|both]
"""

from __future__ import annotations

import torch
from _harness import Bench, common_arguments

from omnipos.core import RotaryEmbedding


def hf_eager(q, k, position_ids, inv_freq):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    freqs = position_ids[..., None].float() * inv_freq.float()  # LlamaRotaryEmbedding.forward
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(q.dtype), emb.sin().to(q.dtype)
    return apply_rotary_pos_emb(q, k, cos, sin)


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--layout", default="both", choices=["half", "interleaved", "both"])
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shapes = [(4, 16, 2048, 64), (1, 32, 8192, 128)]
    repeats = args.repeats
    if args.quick:
        shapes, repeats = [(2, 8, 512, 64)], 3
    layouts = ["half", "interleaved"] if args.layout == "both" else [args.layout]
    try:
        import rotary_embedding_torch as ret
    except ImportError:
        ret = None
    try:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb
    except ImportError:
        liger_rotary_pos_emb = None
    bench = Bench("rope", device=device,
                  notes=f"q and k [B, H, S, D] {dtype}; cos/sin built inside every timed call; "
                        "speedup_vs_hf = HF eager time / omnipos time (same layout for HF: 'half'; "
                        "rotary-embedding-torch is interleaved)")
    for shape in shapes:
        b, h, s, d = shape
        gen = torch.Generator(device="cpu").manual_seed(0)
        q = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
        k = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
        position_ids = torch.arange(s, device=device)[None].expand(b, s)
        hf_rope = RotaryEmbedding(d)
        inv_freq = hf_rope.inv_freq.float().to(device)
        t_hf = bench.time(lambda: hf_eager(q, k, position_ids, inv_freq), repeats=repeats)
        t_ret = None
        if ret is not None:
            theirs = ret.RotaryEmbedding(dim=d, cache_if_possible=False).to(device)
            t_ret = bench.time(lambda: (theirs.rotate_queries_or_keys(q), theirs.rotate_queries_or_keys(k)),
                               repeats=repeats)
        t_liger = None
        if liger_rotary_pos_emb is not None and device.type == "cuda":
            freqs = position_ids[..., None].float() * inv_freq
            emb = torch.cat((freqs, freqs), -1)

            def liger():
                return liger_rotary_pos_emb(q, k, emb.cos().to(dtype), emb.sin().to(dtype))

            t_liger = bench.time(liger, repeats=repeats)
        moved = 2 * 2 * q.numel() * q.element_size()  # q and k, each read once and written once
        for layout in layouts:
            rope = RotaryEmbedding(d, layout=layout).to(device)
            t_ours = bench.time(lambda: rope(q, k, position_ids), repeats=repeats)
            row = dict(shape="x".join(map(str, shape)), layout=layout, omnipos_ms=t_ours * 1e3,
                       hf_eager_ms=t_hf * 1e3, speedup_vs_hf=t_hf / t_ours)
            if t_ret is not None:
                row.update(rotary_embedding_torch_ms=t_ret * 1e3, speedup_vs_ret=t_ret / t_ours)
            if device.type == "cuda":
                row["omnipos_GBps"] = moved / t_ours / 1e9
                if t_liger is not None:
                    row.update(liger_ms=t_liger * 1e3, speedup_vs_liger=t_liger / t_ours)
            bench.row(**row)
        del q, k
    bench.finish(args.out)


if __name__ == "__main__":
    main()
