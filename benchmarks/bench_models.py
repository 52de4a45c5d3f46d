"""Caduceus RCPS and ConvTran tAPE / eRPE: omnipos against the reference formulas, same process, same data.

The peers do not install here (Caduceus's repository is not a package; sktime's ConvTran needs another pandas),
so the peer columns run their code as restated in tests/support (caduceus_rcps.py, convtran.py), which the tests
check equal to omnipos. Rows (forward + backward where a layer trains):

- RCPS(conv) layer, unpadded: the paper's split variant, omnipos vs Caduceus's wrapper.
- RCPS(conv) layer, padded (``mask=``): omnipos reverses within each read's length (pads stay at the end); Caduceus
  reverses whole rows (not padding-aware): the cost of keeping pads in place.
- RCPSLMHead: omnipos forms the reverse strand's logits as the RC of the RC half's logits (bitwise equivariant);
  Caduceus multiplies by complement-gathered weights.
- eRPE attention (after the softmax) and the bias alone: omnipos vs ConvTran's ``Attention_Rel_Scl`` gather.
- tAPE table: omnipos (float64 phases, one rounding) vs ConvTran's float32 build.

    python benchmarks/bench_models.py [--quick] [--device cuda]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from _harness import Bench, common_arguments
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import caduceus_rcps, convtran  # noqa: E402

from omnipos.dna import RCPS, RCPSLMHead, complement_map  # noqa: E402
from omnipos.timeseries import ERPE, erpe_attention, tape  # noqa: E402


class Conv(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, 5, padding=2)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.conv(h.transpose(1, 2)).transpose(1, 2)


def forward_backward(fn, *inputs):
    def run():
        out = fn(*inputs)
        out.float().square().mean().backward()
    return run


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    args = parser.parse_args()
    device = torch.device(args.device)
    repeats = 3 if args.quick else args.repeats
    batch, length, dim = (4, 256, 64) if args.quick else (16, 2048, 256)
    series_len, emb, heads = (64, 32, 4) if args.quick else (512, 64, 8)
    torch.manual_seed(0)
    bench = Bench("models", device=device, notes=(
        f"RCPS: [B={batch}, L={length}, C={dim}] float32, conv kernel 5, split variant, forward + backward; "
        f"padded rows: lengths uniform in [L/2, L]. eRPE: [B={batch}, H={heads}, L={series_len}], emb={emb}. "
        "Peer = the reference's code restated in tests/support."))

    h = torch.randn(batch, length, dim, device=device, requires_grad=True)
    conv = Conv(dim // 2).to(device)
    ours = RCPS(conv)
    lengths = torch.randint(length // 2, length + 1, (batch,), device=device)
    mask = torch.arange(length, device=device) < lengths[:, None]
    for case, mask_arg in (("RCPS(conv), unpadded", None), ("RCPS(conv), padded mask", mask)):
        with torch.no_grad():
            assert torch.equal(ours(h), caduceus_rcps.wrapper(conv, h, "split"))
        t_ours = bench.time(forward_backward(lambda x: ours(x, mask_arg), h), repeats=repeats)
        t_peer = bench.time(forward_backward(lambda x: caduceus_rcps.wrapper(conv, x, "split"), h), repeats=repeats)
        bench.row(case=case, omnipos_s=t_ours, peer_s=t_peer, speedup=t_peer / t_ours)

    head = RCPSLMHead(dim, 32, "iupac").to(device)
    complement = complement_map("iupac", 32).to(device)
    with torch.no_grad():
        err = (head(h) - caduceus_rcps.lm_head(h, head.weight, complement, "split")).abs().max().item()
    assert err < 1e-4, err
    t_ours = bench.time(forward_backward(lambda x: head(x), h), repeats=repeats)
    t_peer = bench.time(forward_backward(lambda x: caduceus_rcps.lm_head(x, head.weight, complement, "split"), h),
                        repeats=repeats)
    bench.row(case="RCPSLMHead (vocab 32)", omnipos_s=t_ours, peer_s=t_peer, speedup=t_peer / t_ours)

    erpe = ERPE(series_len, heads).to(device)
    nn.init.normal_(erpe.table)
    x = torch.randn(batch, series_len, emb, device=device)
    query, key, value = (nn.Linear(emb, emb, bias=False).to(device) for _ in range(3))

    def ours_attention(inp):
        split = lambda t: t.reshape(batch, series_len, heads, -1).transpose(1, 2)  # noqa: E731
        out = erpe_attention(split(query(inp)), split(key(inp)), split(value(inp)), erpe, scale=emb ** -0.5)
        return out.transpose(1, 2).reshape(batch, series_len, emb)

    def peer_attention(inp):
        return convtran.attention_rel_scl(inp, query, key, value, erpe.table, heads, emb)

    with torch.no_grad():
        err = (ours_attention(x) - peer_attention(x)).abs().max().item()
    assert err < 1e-4, err
    t_ours = bench.time(forward_backward(ours_attention, x), repeats=repeats)
    t_peer = bench.time(forward_backward(peer_attention, x), repeats=repeats)
    bench.row(case="eRPE attention (after softmax)", omnipos_s=t_ours, peer_s=t_peer, speedup=t_peer / t_ours)
    t_ours = bench.time(lambda: erpe.bias(series_len), repeats=repeats)
    t_peer = bench.time(lambda: convtran.relative_bias(erpe.table, series_len), repeats=repeats)
    bench.row(case="eRPE bias [H, L, L] alone", omnipos_s=t_ours, peer_s=t_peer, speedup=t_peer / t_ours)

    t_ours = bench.time(lambda: tape(series_len, emb, device=device), repeats=repeats)
    t_peer = bench.time(lambda: convtran.tape_table(emb, series_len).to(device), repeats=repeats)
    bench.row(case=f"tAPE table [{series_len}, {emb}]", omnipos_s=t_ours, peer_s=t_peer, speedup=t_peer / t_ours)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
