"""Rotate q and k: omnipos RotaryEmbedding vs HF transformers' eager apply_rotary_pos_emb vs rotary-embedding-torch.

Each side builds its own cos/sin from positions inside the timed call (HF: LlamaRotaryEmbedding.forward's
formula; rotary-embedding-torch: rotate_queries_or_keys on q and on k, its cache disabled so both do the same
work). Medians over repeats, the candidates' calls interleaved, same process, same tensors. fp32 on CPU, bf16
on CUDA. Speedup = HF time / ours.
On CUDA also the achieved bandwidth (bytes of q and k read and written / time) and liger-kernel where installed.
The "mrope" rows: M-RoPE (Qwen2-VL sections, ids [B, S, 3] of an image grid after a text prefix) vs transformers'
own Qwen2VLRotaryEmbedding (cos/sin from [3, B, S] ids) + apply_rotary_pos_emb, eager.

    python benchmarks/bench_rope.py [--quick] [--device cuda] [--layout half|interleaved|both] [--no-mrope]
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from _harness import Bench, common_arguments, paired_times

from omnipos.core import RotaryEmbedding


def hf_eager(q, k, position_ids, inv_freq):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    freqs = position_ids[..., None].float() * inv_freq.float()  # LlamaRotaryEmbedding.forward
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(q.dtype), emb.sin().to(q.dtype)
    return apply_rotary_pos_emb(q, k, cos, sin)


def qwen2_vl_rotary(head_dim: int, section: list[int], device: torch.device):
    """transformers' Qwen2VLRotaryEmbedding for a config of this head dim (no weights)."""
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    config = Qwen2VLTextConfig(hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim,
                               rope_parameters={"rope_type": "default", "mrope_section": section, "rope_theta": 1e6})
    return Qwen2VLRotaryEmbedding(config).to(device)


def image_ids(batch: int, seq: int, device: torch.device) -> torch.Tensor:
    """[B, S, 3] M-RoPE ids: 16 text tokens, then a square grid of image tokens, then text again."""
    side = max(1, int((seq - 32) ** 0.5))
    text = torch.arange(16)[:, None].expand(16, 3)
    rows, cols = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    grid = torch.stack([torch.zeros(side * side, dtype=torch.long), rows.flatten(), cols.flatten()], -1) + 16
    rest = seq - 16 - side * side
    tail = (16 + side + torch.arange(rest))[:, None].expand(rest, 3)
    return torch.cat([text, grid, tail])[None].expand(batch, seq, 3).to(device)


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--layout", default="both", choices=["half", "interleaved", "both"])
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    parser.add_argument("--no-mrope", action="store_true", help="skip the M-RoPE rows")
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
        inv_freq = RotaryEmbedding(d).inv_freq.float().to(device)
        fns: dict[str, Callable[[], object]] = {"hf": lambda: hf_eager(q, k, position_ids, inv_freq)}
        if ret is not None:
            theirs = ret.RotaryEmbedding(dim=d, cache_if_possible=False).to(device)
            fns["ret"] = lambda: (theirs.rotate_queries_or_keys(q), theirs.rotate_queries_or_keys(k))
        if liger_rotary_pos_emb is not None and device.type == "cuda":
            freqs = position_ids[..., None].float() * inv_freq
            emb = torch.cat((freqs, freqs), -1)
            fns["liger"] = lambda: liger_rotary_pos_emb(q, k, emb.cos().to(dtype), emb.sin().to(dtype))
        for layout in layouts:
            rope = RotaryEmbedding(d, layout=layout).to(device)
            fns[layout] = (lambda rope: lambda: rope(q, k, position_ids))(rope)
        times = paired_times(fns, device=device, repeats=repeats)
        moved = 2 * 2 * q.numel() * q.element_size()  # q and k, each read once and written once
        for layout in layouts:
            t_ours = times[layout]
            row = dict(shape="x".join(map(str, shape)), layout=layout, omnipos_ms=t_ours * 1e3,
                       hf_eager_ms=times["hf"] * 1e3, speedup_vs_hf=times["hf"] / t_ours)
            if "ret" in times:
                row.update(rotary_embedding_torch_ms=times["ret"] * 1e3, speedup_vs_ret=times["ret"] / t_ours)
            if device.type == "cuda":
                row["omnipos_GBps"] = moved / t_ours / 1e9
                if "liger" in times:
                    row.update(liger_ms=times["liger"] * 1e3, speedup_vs_liger=times["liger"] / t_ours)
            bench.row(**row)
        if not args.no_mrope:
            from transformers.models.qwen2_vl.modeling_qwen2_vl import (
                apply_rotary_pos_emb,
            )

            section = [d // 8, 3 * d // 16, 3 * d // 16]  # (16, 24, 24) at d = 128, as Qwen2-VL
            hf_rotary = qwen2_vl_rotary(d, section, device)
            ids = image_ids(b, s, device)
            hf_ids = ids.permute(2, 0, 1)  # transformers lays ids out [3, batch, seq]
            mrope = RotaryEmbedding(d, mrope_section=section, base=1e6).to(device)

            def hf_mrope():
                cos, sin = hf_rotary(q, hf_ids)
                return apply_rotary_pos_emb(q, k, cos, sin)

            times = paired_times({"hf": hf_mrope, "ours": lambda: mrope(q, k, ids)}, device=device, repeats=repeats)
            bench.row(shape="x".join(map(str, shape)), layout="mrope (half)", omnipos_ms=times["ours"] * 1e3,
                      hf_eager_ms=times["hf"] * 1e3, speedup_vs_hf=times["hf"] / times["ours"])
    bench.finish(args.out)


if __name__ == "__main__":
    main()
