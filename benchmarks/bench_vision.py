"""ViT-S/16 at a non-native size: omnipos.vision.timm.adapt_vit (cached table) vs timm dynamic_img_size=True.

Same weights, same process, same batches. Reported: the positional-embedding step alone (each model's
``_pos_embed`` on the same patch tokens: timm resamples its table on every call, omnipos looks it up) and the
whole forward per batch (the two models' batches interleaved), medians, with ratios timm / omnipos; plus
the largest logit difference between the two. Targets: pos-embed >= 10x faster, whole forward never slower.

    python benchmarks/bench_vision.py [--quick] [--device cuda] [--batches 50] [--batch-size 8] [--threads 1]
    python benchmarks/bench_vision.py --compiled-training [--model vit_tiny_patch16_224]   (issue 24)
"""

from __future__ import annotations

import argparse
import statistics
import time

import timm
import torch
from _harness import Bench, common_arguments, synchronize
from timm.layers import resample_abs_pos_embed

from omnipos.vision.timm import adapt_vit


def interleaved(ours, peer, *, repeats: int, device: torch.device) -> tuple[float, float]:
    """Median seconds of ``ours()`` and ``peer()``, timed alternately so that a shared machine's load changes hit
    both alike."""
    for _ in range(5):
        ours(), peer()
    samples: tuple[list[float], list[float]] = ([], [])
    for i in range(repeats):
        pair = [(ours, samples[0]), (peer, samples[1])]
        for fn, bucket in pair if i % 2 else pair[::-1]:
            synchronize(device)
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            bucket.append(time.perf_counter() - t0)
    return statistics.median(samples[0]), statistics.median(samples[1])


TRAINING_SIZES = ((160, 96), (224, 224), (192, 256), (48, 80))


def compiled_training(args: argparse.Namespace, device: torch.device) -> None:
    """``--compiled-training``: cross-entropy + backward through ``torch.compile`` (inductor), default and
    ``dynamic=True``, at 4 image sizes x {fp32, bf16 autocast}: the adapted model and timm's own
    ``dynamic_img_size=True`` model, same weights. Reports how far each gets, compile + first-step seconds, and the
    adapted model's largest gradient difference from eager (issue 24: timm's resample backward does not compile).
    Seen with PyTorch 2.14 on CPU: the adapted model also stops at a later size change on an inductor stride
    assertion about the patch convolution's input, which timm's ViT built with ``pos_embed="none"`` (no resample at
    all) hits as well: a separate inductor bug, reported in the failure column."""
    import copy

    import torch.nn.functional as F

    bench = Bench("vision_compiled_training", device=device, notes=(
        f"{args.model}, batch 2, sizes {TRAINING_SIZES} x (fp32, bf16 autocast), inductor; steps = steps that ran"))
    labels = torch.tensor([1, 3], device=device)
    for dynamic in (None, True):
        for name in ("omnipos", "timm"):
            torch._dynamo.reset()
            torch.manual_seed(0)
            if name == "omnipos":
                model = adapt_vit(timm.create_model(args.model, pretrained=False)).to(device)
            else:
                model = timm.create_model(args.model, pretrained=False, dynamic_img_size=True,
                                          dynamic_img_pad=True).to(device)
            eager = copy.deepcopy(model)
            compiled = torch.compile(model, dynamic=dynamic)
            steps, worst, failure, t0 = 0, 0.0, "", time.perf_counter()
            try:
                for bf16 in (False, True):
                    for size in TRAINING_SIZES:
                        x = torch.randn(2, 3, *size, device=device)
                        for net, fn in ((model, compiled), (eager, eager)):
                            net.zero_grad()
                            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                                F.cross_entropy(fn(x), labels).backward()
                        grads = zip(model.parameters(), eager.parameters())
                        worst = max(worst, max((a.grad - b.grad).abs().max().item() for a, b in grads))
                        steps += 1
            except Exception as err:  # timm's own model: BackendCompilerFailed in the resample's backward
                failure = f"{type(err).__name__}: {str(err).splitlines()[-1][:80]}"
            bench.row(model=name, dynamic=str(dynamic), steps=f"{steps}/{2 * len(TRAINING_SIZES)}",
                      seconds=time.perf_counter() - t0, max_grad_diff_vs_eager=worst, failure=failure)
    bench.finish(args.out)


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit_small_patch16_224")
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--size", type=int, nargs=2, default=(272, 192), metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("--compiled-training", action="store_true",
                        help="instead: train under torch.compile (inductor) at 4 sizes x 2 dtypes, omnipos and timm")
    args = parser.parse_args()
    if args.quick:
        args.batches, args.batch_size, args.repeats = 8, 2, 20
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.compiled_training:
        return compiled_training(args, device)
    torch.manual_seed(0)
    ours = timm.create_model(args.model, pretrained=False).eval().to(device)
    with torch.no_grad():
        ours.pos_embed.normal_(std=0.02)
    peer = timm.create_model(args.model, pretrained=False, dynamic_img_size=True).eval().to(device)
    peer.load_state_dict(ours.state_dict())
    adapt_vit(ours)

    height, width = args.size
    batches = [torch.randn(args.batch_size, 3, height, width, device=device) for _ in range(args.batches)]
    bench = Bench("vision", device=device, notes=(
        f"{args.model} at {height}x{width} (native 224x224), batch {args.batch_size}, {args.batches} batches; "
        "speedup = timm time / omnipos time"))
    with torch.inference_mode():
        tokens = peer.patch_embed(batches[0])  # [B, H, W, C]: the input of both models' _pos_embed
        torch.testing.assert_close(ours._pos_embed(tokens), peer._pos_embed(tokens), rtol=0, atol=0)
        t_ours, t_peer = interleaved(lambda: ours._pos_embed(tokens), lambda: peer._pos_embed(tokens),
                                     repeats=args.repeats * 10, device=device)
        bench.row(step="pos-embed step (_pos_embed)", omnipos_ms=t_ours * 1e3, timm_ms=t_peer * 1e3,
                  speedup=t_peer / t_ours, max_abs_diff=0.0)
        # the overhead inside that step: producing the grid's table (timm resamples, omnipos looks it up)
        grid = tuple(tokens.shape[1:3])
        prefix = 0 if peer.no_embed_class else peer.num_prefix_tokens
        positions = ours.omnipos_positions
        t_ours, t_peer = interleaved(
            lambda: positions.tables(ours.pos_embed, grid, dtype=ours.pos_embed.dtype, device=device),
            lambda: resample_abs_pos_embed(peer.pos_embed, new_size=grid, old_size=peer.patch_embed.grid_size,
                                           num_prefix_tokens=prefix),
            repeats=args.repeats * 10, device=device)
        bench.row(step="pos-embed overhead (table for the grid)", omnipos_ms=t_ours * 1e3, timm_ms=t_peer * 1e3,
                  speedup=t_peer / t_ours, max_abs_diff=0.0)
        positions.verify = False  # trust identity + version counter only (no snapshot comparison)
        t_ours, t_peer = interleaved(
            lambda: positions.tables(ours.pos_embed, grid, dtype=ours.pos_embed.dtype, device=device),
            lambda: resample_abs_pos_embed(peer.pos_embed, new_size=grid, old_size=peer.patch_embed.grid_size,
                                           num_prefix_tokens=prefix),
            repeats=args.repeats * 10, device=device)
        positions.verify = True
        bench.row(step="pos-embed overhead, verify=False", omnipos_ms=t_ours * 1e3, timm_ms=t_peer * 1e3,
                  speedup=t_peer / t_ours, max_abs_diff=0.0)

        for x in batches[:3]:  # warm-up
            ours(x), peer(x)
        ours_s, peer_s, diff = [], [], 0.0
        for i, x in enumerate(batches):
            pair = [(ours, ours_s), (peer, peer_s)]
            for model, samples in pair if i % 2 else pair[::-1]:  # alternate who goes first
                synchronize(device)
                t0 = time.perf_counter()
                out = model(x)
                synchronize(device)
                samples.append(time.perf_counter() - t0)
                if model is ours:
                    out_ours = out
                else:
                    out_peer = out
            diff = max(diff, (out_ours - out_peer).abs().max().item())
        t_ours, t_peer = statistics.median(ours_s), statistics.median(peer_s)
        bench.row(step="whole forward (per batch)", omnipos_ms=t_ours * 1e3, timm_ms=t_peer * 1e3,
                  speedup=t_peer / t_ours, max_abs_diff=diff)
        bench.row(step=f"whole forward ({args.batches} batches, total)", omnipos_ms=sum(ours_s) * 1e3,
                  timm_ms=sum(peer_s) * 1e3, speedup=sum(peer_s) / sum(ours_s), max_abs_diff=diff)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
