"""omnipos.core.sinusoidal vs the seeds' naive float32 create_sinusoidal_positional_encoding.

For each size: median time of both (same process, same positions 0..L-1), the time ratio, and the max absolute
error of both against the formula in float64. Target: omnipos error <= 1e-6 at no more than 2x the naive time.

    python benchmarks/bench_sinusoid.py [--quick] [--device cuda]
"""

from __future__ import annotations

import math

import torch
from _harness import Bench, common_arguments

from omnipos.core import sinusoidal


def create_sinusoidal_positional_encoding(seq_len, d_model, device=None):
    """The seeds' implementation, verbatim but for the device argument (float32 throughout)."""
    PE = torch.zeros(seq_len, d_model, device=device)
    position = torch.arange(0, seq_len, device=device).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, d_model, 2, device=device).float() * -(math.log(10000.0) / d_model))
    PE[:, 0::2] = torch.sin(position * div_term)
    PE[:, 1::2] = torch.cos(position * div_term)
    return PE


def float64_reference(seq_len, d_model, device=None):
    position = torch.arange(seq_len, dtype=torch.float64, device=device).unsqueeze(1)
    w = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64, device=device) * -(math.log(10000.0) / d_model))
    out = torch.empty(seq_len, d_model, dtype=torch.float64, device=device)
    out[:, 0::2] = torch.sin(position * w)
    out[:, 1::2] = torch.cos(position * w)
    return out


def main() -> None:
    args = common_arguments(__doc__.splitlines()[0]).parse_args()
    device = torch.device(args.device)
    sizes = [(4096, 512), (100_000, 128), (1_000_000, 64)]
    if args.quick:
        sizes = [(4096, 128), (100_000, 32)]
    bench = Bench("sinusoid", device=device,
                  notes="positions 0..L-1; error = max |PE - float64 formula|; ratio = omnipos time / naive time")
    for seq_len, dim in sizes:
        positions = torch.arange(seq_len, device=device)
        exact = float64_reference(seq_len, dim, device)
        ours = sinusoidal(positions, dim)
        naive = create_sinusoidal_positional_encoding(seq_len, dim, device)
        err_ours = (ours.double() - exact).abs().max().item()
        err_naive = (naive.double() - exact).abs().max().item()
        del exact, ours, naive
        t_ours = bench.time(lambda: sinusoidal(positions, dim), repeats=args.repeats)
        t_naive = bench.time(lambda: create_sinusoidal_positional_encoding(seq_len, dim, device),
                             repeats=args.repeats)
        bench.row(case=f"L={seq_len:,} d={dim}", omnipos_ms=t_ours * 1e3, naive_ms=t_naive * 1e3,
                  time_ratio=t_ours / t_naive, omnipos_max_err=err_ours, naive_max_err=err_naive)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
