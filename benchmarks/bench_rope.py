"""Rotate q and k: omnipos RotaryEmbedding vs HF transformers' eager apply_rotary_pos_emb vs rotary-embedding-torch.

Each side builds its own cos/sin from positions inside the timed call (HF: LlamaRotaryEmbedding.forward's
formula; rotary-embedding-torch: rotate_queries_or_keys on q and on k, its cache disabled so both do the same
work). Medians over repeats, the candidates' calls interleaved, same process, same tensors. fp32 on CPU, bf16
on CUDA. Speedup = HF time / ours.
On CUDA also the achieved bandwidth (bytes of q and k read and written / time) and liger-kernel where installed.
The "mrope" rows: M-RoPE (Qwen2-VL sections, ids [B, S, 3] of an image grid after a text prefix) vs transformers'
own Qwen2VLRotaryEmbedding (cos/sin from [3, B, S] ids) + apply_rotary_pos_emb, eager.

The "table" part is issue 35's table (``--only table``): per q / k shape (bf16; [1,32,8192,128] / [1,8,..],
[4,32,4096,128] / [4,8,..], [8,16,2048,64], decode [64,32,1,128] / [64,8,1,128] at position 4096) the copy floor,
omnipos' call, compile(HF), Liger, HF eager, forward+backward of omnipos / Liger / HF, compile(omnipos), and
omnipos, HF and compile(HF) captured in CUDA graphs; every output checked against the float64 rotation first (the
max error reported; a wrong one is not timed); CUDA-event medians of 5 x 50 calls. Printed as the issue's markdown
table, JSON in results/rope_table_cuda.json. ``--device cpu`` runs the same code at two tiny shapes (no Liger, no
graphs; compile only with ``--compile``).

    python benchmarks/bench_rope.py [--quick] [--device cuda] [--only table,layouts] [--layout half|interleaved|both]
        [--no-mrope] [--no-compile | --compile] [--out PATH]
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from _harness import (
    RESULTS,
    Bench,
    common_arguments,
    device_name,
    graph_of,
    paired_times,
    synchronize,
)

from omnipos.core import RotaryEmbedding

THETA = 500000.0


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


# ----------------------------------------------------------------------------------------------------------------
# The table of issue 35: one row per q / k shape, every column a way of rotating the same q and k
# ----------------------------------------------------------------------------------------------------------------

#: (batch, q heads, k heads, seq, head dim): Llama-3-8B prefill, a batch of prefills, a 64-dim model, a decode step
TABLE_SHAPES = [(1, 32, 8, 8192, 128), (4, 32, 8, 4096, 128), (8, 16, 16, 2048, 64), (64, 32, 8, 1, 128)]
TINY_SHAPES = [(1, 4, 2, 16, 32), (4, 4, 2, 1, 32)]  # the CPU run: a smoke test of the same code
#: the issue's columns, in its order, then the added ones: (key, heading)
TABLE_COLUMNS = [("copy", "copy"), ("omnipos", "omnipos call"), ("compile_hf", "compile(HF)"), ("liger", "Liger"),
                 ("hf_eager", "HF eager"), ("fwd_bwd_omnipos", "omnipos fwd+bwd"), ("fwd_bwd_liger", "Liger fwd+bwd"),
                 ("compile_omnipos", "compile(omnipos)"), ("omnipos_graph", "omnipos in graph"),
                 ("hf_graph", "HF in graph"), ("compile_hf_graph", "compile(HF) in graph"),
                 ("fwd_bwd_hf", "HF fwd+bwd")]
_PCT_OF_COPY = ("omnipos", "compile_hf", "omnipos_graph", "compile_omnipos", "compile_hf_graph", "hf_graph")
WRONG = 0.05  # max |out - ref| / (1 + |ref|) beyond which an output is wrong (bf16 rounding is ~4e-3)


def event_medians(fns: dict[str, Callable[[], object]], *, device: torch.device, samples: int = 5,
                  calls: int = 50) -> dict[str, float]:
    """Median seconds per call: ``samples`` samples of ``calls`` back-to-back calls each, between CUDA events on
    CUDA (host-bound calls count their host time: the device waits), perf_counter on the CPU; the candidates
    interleaved sample by sample, each warmed up twice first."""
    cuda = device.type == "cuda"
    for fn in fns.values():
        fn()
        fn()
    synchronize(device)
    per: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(samples):
        for name, fn in fns.items():
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(calls):
                    fn()
                end.record()
                end.synchronize()
                per[name].append(start.elapsed_time(end) / 1e3 / calls)
            else:
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                per[name].append((time.perf_counter() - t0) / calls)
    return {name: statistics.median(v) for name, v in per.items()}


def rotation_f64(x: torch.Tensor, position_ids: torch.Tensor, inv_freq: torch.Tensor, sign: float = 1.0):
    """The reference: x [B, H, S, D] (half layout) rotated by sign * position * inv_freq, all in float64."""
    theta = position_ids.double()[:, None, :, None] * inv_freq.double()
    c, s = theta.cos(), sign * theta.sin()
    x = x.double()
    x1, x2 = x.chunk(2, -1)
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)


def max_err(outs, refs) -> tuple[float, float]:
    """(max |out - ref|, max |out - ref| / (1 + |ref|)) over the tensors."""
    abs_err = max((o.double() - r).abs().max().item() for o, r in zip(outs, refs))
    rel_err = max(((o.double() - r).abs() / (1 + r.abs())).max().item() for o, r in zip(outs, refs))
    return abs_err, rel_err


def table_row(batch: int, hq: int, hk: int, seq: int, dim: int, *, device: torch.device, dtype: torch.dtype,
              compile_: bool, liger: Callable | None, samples: int, calls: int) -> dict:
    """One row of the table: every candidate's output checked against the float64 rotation of the same bf16 inputs
    first (a wrong one is reported, not timed), then CUDA-event medians."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    cuda = device.type == "cuda"
    g = torch.Generator().manual_seed(seq + batch)
    q = torch.randn(batch, hq, seq, dim, generator=g).to(device=device, dtype=dtype)
    k = torch.randn(batch, hk, seq, dim, generator=g).to(device=device, dtype=dtype)
    past = 4096 if seq == 1 else 0  # decode: one new token per row after a 4096-token prefix
    position_ids = (torch.arange(seq) + past).expand(batch, seq).contiguous().to(device)
    rope = RotaryEmbedding(dim, base=THETA).to(device)
    inv_freq = rope.inv_freq.float()  # what HF's LlamaRotaryEmbedding keeps (float32)

    def cos_sin(position_ids):  # LlamaRotaryEmbedding.forward: float32 angles, cast to the activations' dtype
        freqs = position_ids[:, :, None].float() * inv_freq
        emb = torch.cat((freqs, freqs), -1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def hf(q, k, position_ids):
        cos, sin = cos_sin(position_ids)
        return apply_rotary_pos_emb(q, k, cos, sin)

    forward: dict[str, Callable[[], object]] = {
        "copy": lambda: (q.clone(), k.clone()),  # the floor of an out-of-place rotation of q and k
        "omnipos": lambda: rope(q, k, position_ids),
        "hf_eager": lambda: hf(q, k, position_ids),
    }
    if liger is not None:
        # Liger rotates in place wherever q.transpose(1, 2) is contiguous already (a [B, S, H, D] buffer, or any
        # decode step): it gets tensors of its own, fresh ones for the check, so nobody else's inputs change. Newer
        # versions also return cos and sin: q and k are its first two outputs.
        lq, lk = q.clone(), k.clone()

        def liger_qk(q, k):
            return tuple(liger(q, k, *cos_sin(position_ids))[:2])

        forward["liger"] = lambda: liger_qk(lq, lk)
    compile_s = {}
    if compile_:
        torch._dynamo.reset()  # each row compiles afresh (dynamo's per-code cache would fill up across rows)
        for name, fn in (("compile_hf", hf), ("compile_omnipos", lambda q, k, p: rope(q, k, p))):
            compiled = torch.compile(fn, dynamic=False)
            start = time.perf_counter()
            compiled(q, k, position_ids)
            compile_s[name] = time.perf_counter() - start
            forward[name] = lambda compiled=compiled: compiled(q, k, position_ids)
    refs = [rotation_f64(t, position_ids, rope.inv_freq) for t in (q, k)]
    row: dict = {"q / k shape": f"[{batch},{hq},{seq},{dim}]" + (f" / [{batch},{hk},..]" if hk != hq else "")}
    wrong = []
    with torch.no_grad():
        for name, fn in list(forward.items()):
            if name == "copy":
                continue
            abs_err, rel_err = max_err(liger_qk(q.clone(), k.clone()) if name == "liger" else fn(), refs)
            row[f"err_{name}"] = abs_err
            if rel_err > WRONG:
                wrong.append(name)
                del forward[name]
        if cuda:  # captured after warm-up on a side stream; checked from the graph's own outputs
            for name in ("omnipos", "hf_eager", "compile_hf"):
                if name not in forward:
                    continue
                call = forward[name]
                box: list = []
                replay = graph_of(lambda call=call, box=box: box.append(call()))
                replay()
                key = "hf_graph" if name == "hf_eager" else f"{name}_graph"
                abs_err, rel_err = max_err(box[-1], refs)
                row[f"err_{key}"] = abs_err
                if rel_err > WRONG:
                    wrong.append(key)
                else:
                    forward[key] = replay
        times = event_medians(forward, device=device, samples=samples, calls=calls)
    # forward + backward: q and k leaves, the same output gradients; torch.autograd.grad (no .grad accumulation)
    qg, kg = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    grads = (torch.randn(q.shape, generator=g).to(device=device, dtype=dtype),
             torch.randn(k.shape, generator=g).to(device=device, dtype=dtype))
    grad_refs = [rotation_f64(gr, position_ids, rope.inv_freq, sign=-1.0) for gr in grads]
    backward: dict[str, Callable[[], object]] = {}
    candidates = [("fwd_bwd_omnipos", lambda q, k: rope(q, k, position_ids), (qg, kg), grads),
                  ("fwd_bwd_hf", lambda q, k: hf(q, k, position_ids), (qg, kg), grads)]
    if liger is not None:  # its own leaves and output gradients (its backward, too, rotates them in place)
        candidates.append(("fwd_bwd_liger", liger_qk, tuple(t.detach().clone().requires_grad_() for t in (q, k)),
                           tuple(gr.clone() for gr in grads)))
    for name, fn, leaves, outer in candidates:
        step = lambda fn=fn, leaves=leaves, outer=outer: torch.autograd.grad(fn(*leaves), leaves, outer)
        abs_err, rel_err = max_err(step(), grad_refs)
        row[f"err_{name}"] = abs_err
        if rel_err > WRONG:
            wrong.append(name)
        else:
            backward[name] = step
    times.update(event_medians(backward, device=device, samples=samples, calls=calls))
    for key, _ in TABLE_COLUMNS:
        if key in times:
            row[f"{key}_ms"] = times[key] * 1e3
    for key in _PCT_OF_COPY:  # the share of the copy floor reached (100% = as fast as cloning q and k)
        if key in times:
            row[f"{key}_pct_of_copy"] = 100 * times["copy"] / times[key]
    row.update({f"compile_s_{name}": s for name, s in compile_s.items()})
    if wrong:
        row["wrong"] = ",".join(wrong)
    return row


def issue_table(rows: list[dict]) -> str:
    """The rows as the issue's markdown table: ms, with the share of copy in parentheses where it means something."""
    columns = [(key, heading) for key, heading in TABLE_COLUMNS if any(f"{key}_ms" in r for r in rows)]
    lines = ["| q / k shape | " + " | ".join(h for _, h in columns) + " | max error omnipos / HF / Liger |",
             "|---|" + "---|" * len(columns) + "---|"]
    for r in rows:
        cells = []
        for key, _ in columns:
            ms = r.get(f"{key}_ms")
            cell = "-" if ms is None else f"{ms:.3f}"
            if ms is not None and key in _PCT_OF_COPY:
                cell += f" ({r[f'{key}_pct_of_copy']:.0f}%)"
            cells.append(cell)
        errors = " / ".join(f"{r[e]:.1e}" if e in r else "-" for e in ("err_omnipos", "err_hf_eager", "err_liger"))
        lines.append(f"| {r['q / k shape']} | " + " | ".join(cells) + f" | {errors} |")
    return "\n".join(lines)


def table_section(args, device: torch.device, out) -> None:
    cuda = device.type == "cuda"
    liger = None
    if cuda:
        try:
            from liger_kernel.transformers.rope import liger_rotary_pos_emb as liger
        except ImportError:
            print("(liger-kernel not installed: no Liger columns)")
    compile_ = cuda and not args.no_compile or args.compile
    shapes = TABLE_SHAPES if cuda and not args.quick else TINY_SHAPES
    bench = Bench("rope_table", device=device, notes=(
        "issue 35's table: q and k bf16, contiguous [B, H, S, D] (half layout, theta 5e5), positions [B, S] "
        "(decode: 4096); Liger copies such q and k to [B, S, H, D] and rotates the copies in place (a decode step: "
        "in place, on tensors of its own here); "
        "HF = transformers' apply_rotary_pos_emb with LlamaRotaryEmbedding's cos/sin built in the call, Liger = "
        "liger_rotary_pos_emb on the same cos/sin; compile = torch.compile(dynamic=False); graphs captured after "
        "warm-up on a side stream; every output (and fwd+bwd's input gradients) first checked against the float64 "
        "rotation of the same bf16 inputs (err_* = max |out - ref|); medians of 5 x 50 calls (CUDA events)"))
    for shape in shapes:
        row = table_row(*shape, device=device, dtype=torch.bfloat16, compile_=compile_, liger=liger,
                        samples=5, calls=50 if cuda else 5)
        bench.row(**row)
        print(issue_table([row]).splitlines()[-1], flush=True)  # a row as it is measured (a timeout keeps them)
        out.parent.mkdir(parents=True, exist_ok=True)  # and the JSON so far
        out.write_text(json.dumps({"benchmark": bench.name, "device": device_name(device), "partial": True,
                                   "torch": torch.__version__, "notes": bench.notes, "rows": bench.rows},
                                  indent=2, default=str) + "\n")
    bench.finish(out)
    print(issue_table(bench.rows))


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--layout", default="both", choices=["half", "interleaved", "both"])
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    parser.add_argument("--no-mrope", action="store_true", help="skip the M-RoPE rows")
    parser.add_argument("--only", default="table,layouts",
                        help="comma-separated parts: table (issue 35's table), layouts (half / interleaved / M-RoPE "
                             "vs HF, rotary-embedding-torch, Liger)")
    parser.add_argument("--no-compile", action="store_true", help="table: no torch.compile columns (CUDA)")
    parser.add_argument("--compile", action="store_true", help="table: the torch.compile columns on the CPU too")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    parts = [p for p in args.only.split(",") if p]
    unknown = set(parts) - {"table", "layouts"}
    if unknown:
        parser.error(f"--only: unknown parts {sorted(unknown)} (table, layouts)")
    cuda = device.type == "cuda"
    # --out names the first part's JSON; a second part writes beside it (NAME_layouts.json)
    outs = {}
    for i, part in enumerate(parts):
        if args.out is None:
            default = "rope_table" if part == "table" else "rope"
            outs[part] = RESULTS / f"{default}{'_cuda' if cuda and part == 'table' else ''}.json"
        else:
            outs[part] = Path(args.out) if i == 0 else Path(args.out).with_name(f"{Path(args.out).stem}_{part}.json")
    if "table" in parts:
        table_section(args, device, outs["table"])
    if "layouts" in parts:
        layouts_section(args, device, outs["layouts"])


def layouts_section(args, device: torch.device, out) -> None:
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
    bench.finish(out)


if __name__ == "__main__":
    main()
