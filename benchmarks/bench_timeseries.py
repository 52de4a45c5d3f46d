"""Event table -> encoded timelines: omnipos EventBatch + TimelineEncoder vs a per-patient pandas/numpy loop.

Both start from the same MEDS-style DataFrame (rows in random order) and end with the same float32 encoding
(absolute + log-gap of the time since each patient's first event, periodic of clock time, summed), in two
layouts: padded ``[B, L, dim]`` + mask (``EventBatch``), and packed ``[total_events, dim]`` + ``cu_seqlens``
(``PackedEvents``, what varlen attention consumes; the loop concatenates instead of padding). The loop is what one
writes without omnipos: group by patient, sort, subtract the first time, NumPy sinusoids per patient. The outputs
are checked equal (float32 tolerance) before timing. Target: omnipos >= 20x the loop.

    python benchmarks/bench_timeseries.py [--quick] [--patients N] [--dim D] [--threads T]
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from _harness import Bench, common_arguments, wall_and_cpu_medians

from omnipos.timeseries import EventBatch, PackedEvents, TimelineEncoder


def make_frame(patients: int, max_events: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_events + 1, patients)
    subject = np.repeat(np.arange(patients), lengths)
    start = np.datetime64("2015-01-01", "s") + rng.integers(0, 5 * 365 * 86400, patients).astype("timedelta64[s]")
    offset = rng.exponential(3 * 86400.0, subject.size).astype(np.int64).astype("timedelta64[s]")
    df = pd.DataFrame({
        "subject_id": subject,
        "time": (start[subject] + offset).astype("datetime64[ns]"),  # unsorted within each patient
        "code": rng.choice(np.array([f"CODE//{i}" for i in range(200)], dtype=object), subject.size),
        "numeric_value": np.where(rng.random(subject.size) < 0.4, rng.normal(size=subject.size), np.nan),
    })
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)


def omnipos_pipeline(df: pd.DataFrame, encoder: TimelineEncoder):
    batch = EventBatch.from_frame(df)
    with torch.no_grad():
        return encoder(batch), batch.mask, batch.codes


def omnipos_packed(df: pd.DataFrame, encoder: TimelineEncoder):
    events = PackedEvents.from_frame(df)
    with torch.no_grad():
        return encoder(events), events.cu_seqlens, events.codes


def loop_packed(df: pd.DataFrame, encoder: TimelineEncoder):
    """The loop's encodings concatenated, with cu_seqlens."""
    encoded, codes = loop_rows(df, encoder)
    cu_seqlens = np.concatenate([[0], np.cumsum([len(e) for e in encoded])]).astype(np.int32)
    return np.concatenate(encoded), cu_seqlens, np.concatenate(codes)


def loop_pipeline(df: pd.DataFrame, encoder: TimelineEncoder):
    """The loop's encodings padded at the end of each row."""
    encoded, codes = loop_rows(df, encoder)
    longest = max(len(e) for e in encoded)
    padded = np.zeros((len(encoded), longest, encoder.dim), dtype=np.float32)
    mask = np.zeros((len(encoded), longest), dtype=bool)
    padded_codes = np.zeros((len(encoded), longest), dtype=np.int64)
    for i, (e, c) in enumerate(zip(encoded, codes)):
        padded[i, : len(e)], mask[i, : len(e)], padded_codes[i, : len(e)] = e, True, c
    return padded, mask, padded_codes


def loop_rows(df: pd.DataFrame, encoder: TimelineEncoder):
    """Per patient: sort, hours from the first event, NumPy sin/cos of each component."""
    dim = encoder.dim
    absolute_periods = 1.0 / encoder.cycles.numpy()
    periods = encoder.periods.numpy()
    lift = encoder.lift.weight.detach().numpy().astype(np.float64)
    gap_w = encoder.gap_base ** (-np.arange(dim // 2) * 2.0 / dim)
    vocab = {c: i + 1 for i, c in enumerate(sorted(df["code"].unique()))}
    encoded, codes = [], []
    for _, g in df.groupby("subject_id", sort=True):
        g = g.sort_values("time", kind="stable")
        t = (g["time"] - g["time"].iloc[0]).dt.total_seconds().to_numpy() / 3600.0
        clock = (g["time"].iloc[0] - pd.Timestamp(0)).total_seconds() / 3600.0  # time of day is on the clock
        codes.append(g["code"].map(vocab).to_numpy())
        out = np.empty((t.size, dim))
        phase = 2 * np.pi * t[:, None] / absolute_periods
        out[:, 0::2], out[:, 1::2] = np.sin(phase), np.cos(phase)
        pphase = 2 * np.pi * np.mod(t[:, None] + clock, periods) / periods
        per = np.empty((t.size, 2 * periods.size))
        per[:, 0::2], per[:, 1::2] = np.sin(pphase), np.cos(pphase)
        out += per @ lift.T
        x = np.log1p(np.diff(t, prepend=t[0]) / encoder.gap_scale)[:, None] * gap_w
        out[:, 0::2] += np.sin(x)
        out[:, 1::2] += np.cos(x)
        encoded.append(out.astype(np.float32))
    return encoded, codes


def largest_difference(ours: tuple, theirs: tuple) -> float:
    """Both pipelines' ``(encoded, layout, codes)``: the layouts (mask or cu_seqlens) and codes must be equal and
    the encodings within 1e-4; returns the largest |difference| of the encodings."""
    (encoded, layout, codes), (their_encoded, their_layout, their_codes) = ours, theirs
    assert np.array_equal(layout.numpy(), their_layout) and np.array_equal(codes.numpy(), their_codes)
    err = float(np.abs(encoded.numpy() - their_encoded).max())
    assert err < 1e-4, err
    return err


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--patients", type=int, default=10_000)
    parser.add_argument("--max-events", type=int, default=500)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: the same one core as the single-threaded NumPy loop)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    patients, max_events, repeats = args.patients, args.max_events, args.repeats
    if args.quick:
        patients, max_events, repeats = 500, 200, 3
    df = make_frame(patients, max_events)
    events = len(df)
    torch.manual_seed(0)
    encoder = TimelineEncoder(args.dim, components=("absolute", "periodic", "gap"), combine="sum")

    err = largest_difference(omnipos_pipeline(df, encoder), loop_pipeline(df, encoder))
    packed_err = largest_difference(omnipos_packed(df, encoder), loop_packed(df, encoder))

    bench = Bench("timeseries", notes=(
        f"{patients:,} timelines of 1-{max_events} events ({events:,} events), DataFrame rows shuffled -> "
        f"[B, L, {args.dim}] + mask or [N, {args.dim}] + cu_seqlens (absolute + periodic + log-gap, sum); "
        f"max |omnipos - loop| = {err:.1e} padded, {packed_err:.1e} packed"))
    case = f"{patients:,} x 1-{max_events} events, dim={args.dim}"
    layouts = (("padded [B, L, D]", omnipos_pipeline, loop_pipeline, EventBatch.from_frame),
               ("packed [N, D] + cu_seqlens", omnipos_packed, loop_packed, PackedEvents.from_frame))
    for layout, ours_fn, loop_fn, build in layouts:
        # wall and CPU medians: on a shared machine the CPU figure is what the work costs
        wall, cpu = wall_and_cpu_medians(lambda: ours_fn(df, encoder), warmup=1, repeats=repeats)
        loop_wall, loop_cpu = wall_and_cpu_medians(lambda: loop_fn(df, encoder), repeats=max(1, repeats // 3))
        build_wall, build_cpu = wall_and_cpu_medians(lambda: build(df), warmup=1, repeats=repeats)
        bench.row(case=case, layout=layout, omnipos_s=wall, loop_s=loop_wall, speedup=loop_wall / wall,
                  omnipos_cpu_s=cpu, loop_cpu_s=loop_cpu, cpu_speedup=loop_cpu / cpu,
                  of_which_from_frame_cpu_s=build_cpu, omnipos_events_per_s=events / wall)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
