"""QK-norm + RoPE: omnipos qk_norm_rope vs transformers' eager Qwen3 / OLMo 2 composition, and torch.compile of it.

The peer is what Qwen3Attention runs between the projections and attention: ``Qwen3RMSNorm`` on q and on k (per
head, over head_dim), ``Qwen3RotaryEmbedding`` (cos/sin from position_ids, inside the timed call) and
``apply_rotary_pos_emb``; for OLMo 2 (``variant="olmo2"``) what Olmo2Attention runs: ``Olmo2RMSNorm`` on the
projections ``[batch, seq, heads * head_dim]`` (over all heads of a token), the view into heads and the transpose,
``Olmo2RotaryEmbedding`` and ``apply_rotary_pos_emb``; omnipos takes the same projections as the transposed views
``[batch, heads, seq, head_dim]`` the model makes. omnipos: ``QKNormRope`` (one fused Triton kernel each way on CUDA; the eager composition
with one rounding on the CPU). Every output is first checked against a float64 evaluation (``max_err``: max
|out - ref| / (1 + |ref|)); then medians of interleaved calls, same process, same tensors. float32 on the CPU,
bfloat16 on CUDA. ``speedup`` = HF eager / omnipos, ``vs_compile`` = compile(HF) / omnipos. On CUDA also
omnipos captured in a CUDA graph and forward+backward (q, k and the norm weights).

    python benchmarks/bench_qknorm.py [--quick] [--device cuda] [--no-compile] [--variants qwen3,olmo2] [--out PATH]
"""

from __future__ import annotations

import time

import torch
from _harness import RESULTS, Bench, common_arguments, graph_of, paired_times

from omnipos.core import QKNormRope, RotaryEmbedding

HEAD_DIM, THETA, EPS = 128, 1e6, 1e-6


def hf_modules(head_dim: int, q_heads: int, kv_heads: int, device: torch.device, dtype: torch.dtype,
               whole: bool = False):
    """transformers' q / k RMS norms and rotary embedding: Qwen3's (one norm per head), or OLMo 2's (``whole``: one
    norm over all heads, its weight ``[heads * head_dim]``)."""
    if whole:
        from transformers import Olmo2Config as Config
        from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm as Norm
        from transformers.models.olmo2.modeling_olmo2 import (
            Olmo2RotaryEmbedding as Rotary,
        )
    else:
        from transformers import Qwen3Config as Config
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm as Norm
        from transformers.models.qwen3.modeling_qwen3 import (
            Qwen3RotaryEmbedding as Rotary,
        )

    config = Config(head_dim=head_dim, hidden_size=head_dim * q_heads, num_attention_heads=q_heads,
                    num_key_value_heads=kv_heads, rms_norm_eps=EPS,
                    rope_parameters={"rope_type": "default", "rope_theta": THETA})
    q_norm = Norm(q_heads * head_dim if whole else head_dim, eps=EPS).to(device=device, dtype=dtype)
    k_norm = Norm(kv_heads * head_dim if whole else head_dim, eps=EPS).to(device=device, dtype=dtype)
    return q_norm, k_norm, Rotary(config).to(device)


def hf_olmo2_call(q_norm, k_norm, rotary):
    """Olmo2Attention between the projections and attention: norm the projections, split into heads, rotate."""
    from transformers.models.olmo2.modeling_olmo2 import apply_rotary_pos_emb

    def call(q_proj, k_proj, position_ids):
        batch, seq = q_proj.shape[:2]
        q = q_norm(q_proj).view(batch, seq, -1, HEAD_DIM).transpose(1, 2)
        k = k_norm(k_proj).view(batch, seq, -1, HEAD_DIM).transpose(1, 2)
        cos, sin = rotary(q, position_ids)
        return apply_rotary_pos_emb(q, k, cos, sin)

    return call


def heads_view(proj: torch.Tensor) -> torch.Tensor:
    """[batch, seq, heads * D] -> the [batch, heads, seq, D] view Olmo2Attention makes (no copy)."""
    return proj.view(*proj.shape[:2], -1, HEAD_DIM).transpose(1, 2)


def hf_call(q_norm, k_norm, rotary):
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    def call(q, k, position_ids):
        cos, sin = rotary(q, position_ids)
        return apply_rotary_pos_emb(q_norm(q), k_norm(k), cos, sin)

    return call


def reference(q, k, qw, kw, positions, whole=False):
    """float64: rms-norm times weight (per head; whole: over all heads of a token, weights [H * D]), then the
    rotation with float64 cos/sin of positions * inv_freq."""
    inv_freq = THETA ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64, device=q.device) / HEAD_DIM)
    angles = positions.double()[..., None] * inv_freq  # [B, S, D/2]
    cos, sin = angles.cos()[:, None], angles.sin()[:, None]
    outs = []
    for x, w in ((q, qw), (k, kw)):
        x = x.double()
        if whole:  # x [B, H, S, D]: the rms over H and D of each (b, s)
            n = x * torch.rsqrt(x.pow(2).mean((1, 3), keepdim=True) + EPS) * w.double().view(1, -1, 1, HEAD_DIM)
        else:
            n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
        x1, x2 = n[..., : HEAD_DIM // 2], n[..., HEAD_DIM // 2:]
        outs.append(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1))
    return outs


def max_err(outs, refs) -> float:
    return max(((o.double() - r).abs() / (1 + r.abs())).max().item() for o, r in zip(outs, refs))


def measure(batch: int, hq: int, hk: int, seq: int, *, device: torch.device, dtype: torch.dtype, repeats: int,
            compile_hf: bool, g: torch.Generator, variant: str = "qwen3") -> dict:
    """One row: q [batch, hq, seq, 128], k [batch, hk, seq, 128] (OLMo 2: the projections [batch, seq, hq * 128]
    for transformers, their [batch, hq, seq, 128] views for omnipos); on CUDA also copy (the floor), omnipos in a
    CUDA graph and compile(omnipos)."""
    cuda = device.type == "cuda"
    whole = variant == "olmo2"
    if whole:
        q_in = torch.randn(batch, seq, hq * HEAD_DIM, generator=g).to(device=device, dtype=dtype)
        k_in = torch.randn(batch, seq, hk * HEAD_DIM, generator=g).to(device=device, dtype=dtype)
        as_heads = heads_view
    else:
        q_in = torch.randn(batch, hq, seq, HEAD_DIM, generator=g).to(device=device, dtype=dtype)
        k_in = torch.randn(batch, hk, seq, HEAD_DIM, generator=g).to(device=device, dtype=dtype)
        as_heads = lambda x: x
    q, k = as_heads(q_in), as_heads(k_in)
    sizes = (hq * HEAD_DIM, hk * HEAD_DIM) if whole else (HEAD_DIM, HEAD_DIM)
    qw = (torch.rand(sizes[0], generator=g) + 0.5).to(device=device, dtype=dtype)
    kw = (torch.rand(sizes[1], generator=g) + 0.5).to(device=device, dtype=dtype)
    past = 4096 if seq == 1 else 0  # decode: one new token after a 4096-token prefix
    positions = (torch.arange(seq) + past).expand(batch, seq).to(device)
    heads = {"num_heads": hq, "num_kv_heads": hk} if whole else {}
    ours_module = QKNormRope(RotaryEmbedding(HEAD_DIM, base=THETA), eps=EPS, variant=variant, **heads).to(
        device=device, dtype=dtype)
    q_norm, k_norm, rotary = hf_modules(HEAD_DIM, hq, hk, device, dtype, whole=whole)
    with torch.no_grad():
        for p, w in ((ours_module.q_weight, qw), (ours_module.k_weight, kw), (q_norm.weight, qw),
                     (k_norm.weight, kw)):
            p.copy_(w)
    hf = (hf_olmo2_call if whole else hf_call)(q_norm, k_norm, rotary)

    def ours(q_, k_, positions_):  # from the peer's inputs (OLMo 2: the projections, viewed as heads)
        return ours_module(as_heads(q_), as_heads(k_), positions_)

    q, k = q_in, k_in  # both take the same tensors
    fns = {"omnipos": lambda: ours(q, k, positions), "hf_eager": lambda: hf(q, k, positions)}
    refs = reference(as_heads(q), as_heads(k), qw, kw, positions, whole)
    errors = {name: max_err(fn(), refs) for name, fn in fns.items()}
    compile_s = None
    if compile_hf:
        compiled = torch.compile(hf, dynamic=False)
        start = time.perf_counter()
        errors["compile_hf"] = max_err(compiled(q, k, positions), refs)
        compile_s = time.perf_counter() - start
        fns["compile_hf"] = lambda: compiled(q, k, positions)
    if cuda:
        fns["omnipos_graph"] = graph_of(lambda: ours(q, k, positions))
        if compile_hf:  # omnipos inside a compiled model: its op in inductor's graph
            compiled_ours = torch.compile(ours, dynamic=False)
            errors["compile_omnipos"] = max_err(compiled_ours(q, k, positions), refs)
            fns["compile_omnipos"] = lambda: compiled_ours(q, k, positions)
        copy = lambda: (q.clone(), k.clone())  # the floor of an out-of-place q/k pass
        fns["copy"] = copy
    with torch.no_grad():
        times = paired_times(fns, device=device, repeats=repeats)
    row = {"variant": variant, "q / k": f"[{batch},{hq},{seq},{HEAD_DIM}] / [{batch},{hk},..]"}
    row.update({f"{name}_ms": t * 1e3 for name, t in times.items()})
    row["speedup"] = times["hf_eager"] / times["omnipos"]
    if "compile_hf" in times:
        row["vs_compile"] = times["compile_hf"] / times["omnipos"]
        row["compile_s"] = compile_s
    if "copy" in times:  # the share of the copy floor reached (100% = as fast as cloning q and k)
        row["omnipos_pct_of_copy"] = 100 * times["copy"] / times["omnipos"]
        row["graph_pct_of_copy"] = 100 * times["copy"] / times["omnipos_graph"]
    row.update({f"err_{name}": e for name, e in errors.items()})
    # forward + backward (q, k and the norm weights)
    qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
    grads = tuple(torch.randn(as_heads(x).shape, dtype=dtype, device=device) for x in (q, k))

    def fwd_bwd(call):
        return lambda: torch.autograd.backward(call(qg, kg, positions), grads)

    both = paired_times({"omnipos": fwd_bwd(ours), "hf_eager": fwd_bwd(hf)}, device=device,
                        repeats=max(3, repeats // 2))
    row["fwd_bwd_omnipos_ms"] = both["omnipos"] * 1e3
    row["fwd_bwd_hf_ms"] = both["hf_eager"] * 1e3
    return row


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile of the HF composition")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    parser.add_argument("--variants", default="qwen3,olmo2",
                        help="comma-separated: qwen3 (per-head norm), olmo2 (the norm over all heads of a token)")
    args = parser.parse_args()
    variants = args.variants.split(",")
    if not set(variants) <= {"qwen3", "olmo2"}:
        parser.error(f"--variants must be qwen3 and/or olmo2, got {args.variants!r}")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    repeats = 5 if args.quick else args.repeats * (5 if cuda else 1)
    # (batch, q heads, kv heads, seq): Qwen3-8B's attention (32 q heads, 8 kv heads, head_dim 128)
    if cuda:
        shapes = [(1, 32, 8, 8192), (4, 32, 8, 4096), (64, 32, 8, 1)]
    elif args.quick:
        shapes = [(1, 32, 8, 256), (64, 32, 8, 1)]
    else:
        shapes = [(1, 32, 8, 2048), (4, 16, 8, 512), (64, 32, 8, 1)]
    bench = Bench("qknorm", device=device, notes=(
        f"{dtype}; Qwen3 q_norm/k_norm (head_dim {HEAD_DIM}) and OLMo 2's (over all heads of a token) + RoPE "
        f"(theta {THETA:g}); max_err vs float64; "
        "speedup = HF eager / omnipos; vs_compile = compile(HF eager) / omnipos"))
    g = torch.Generator().manual_seed(0)
    for variant in variants:
        for batch, hq, hk, seq in shapes:
            bench.row(**measure(batch, hq, hk, seq, device=device, dtype=dtype, repeats=repeats,
                                compile_hf=not args.no_compile, g=g, variant=variant))
    bench.finish(args.out or RESULTS / ("qknorm_cuda.json" if cuda else "qknorm.json"))


if __name__ == "__main__":
    main()
