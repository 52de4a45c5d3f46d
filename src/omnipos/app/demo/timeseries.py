"""``omnipos demo --section timeseries``: a synthetic clinical cohort through EventBatch and the time encodings."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from omnipos.timeseries import (
    EventBatch,
    GapBucketEmbedding,
    TimelineEncoder,
    batch_timelines,
    periodic_encoding,
    time_gaps,
)

from ..synthetic import synthetic_cohort

__all__ = ["demo_section"]


def demo_section(out_dir: Path | None) -> None:
    print("== timeseries: irregular clinical timelines (synthetic cohort, seed 0) ==")
    try:
        events, labels = synthetic_cohort(100, seed=0)
    except ImportError as err:
        print(f"  (skipped: {err})")
        return
    batch = EventBatch.from_frame(events)
    print(f"{len(batch)} patients ({int(labels.sum())} shift workers), {int(batch.mask.sum()):,} events, "
          f"{len(batch.vocab) - 1} codes, padded to {tuple(batch.times.shape)}; "
          f"times in hours from each patient's first event, batch.clock = that event on the clock")

    gaps = time_gaps(batch.times, batch.mask)
    buckets = GapBucketEmbedding(dim=2)
    counts = torch.bincount(buckets.bucketize(gaps, batch.mask)[batch.mask], minlength=buckets.num_buckets)
    print("gaps between events, by bucket (left-closed; 0 = first event or same time):")
    print("  " + "  ".join(f"{name}: {int(n)}" for name, n in zip(buckets.bucket_names(), counts)))

    # the seeds' claim: 24 h encodings of t + H and u have dot product cos(2 pi (t + H - u) / 24)
    epoch = EventBatch.from_frame(events, origin="epoch")
    t = epoch.times[epoch.mask][:200].sort().values.unsqueeze(0)
    pe = periodic_encoding(t, ("24h",), dtype=torch.float64, clock=0)[0]  # hours since 1970: clock time
    exact = torch.cos(2 * math.pi * (t[0, :, None] - t[0, None, :]) / 24)
    print(f"24 h periodic encoding: max |PE(a).PE(b) - cos(2 pi (a - b) / 24)| over 200 x 200 events = "
          f"{(pe @ pe.T - exact).abs().max():.1e}")

    hours = events.groupby("subject_id")["time"].apply(lambda s: np.sort(s.to_numpy())).tolist()[:8]
    a = TimelineEncoder(32, combine="concat")(*batch_timelines(hours, return_clock=True))
    minutes = [(h - h[0]) / np.timedelta64(1, "m") for h in hours]
    start = torch.tensor([(h[0] - np.datetime64(0, "ns")) / np.timedelta64(1, "m") for h in hours])
    b = TimelineEncoder(32, combine="concat", unit="min")(*batch_timelines(minutes, unit="min"), start)
    print(f"same moments as datetime64 and as minutes since each first event (unit='min', clock = that event "
          f"in minutes since 1970): max difference {(a - b).abs().max():.1e}")

    # time of day on the clock, from the default batch (origin="first") and its clock: no need for epoch times
    day = periodic_encoding(batch.times, ("24h",), mask=batch.mask, clock=batch.clock)
    torch.testing.assert_close(day, periodic_encoding(epoch.times, ("24h",), mask=epoch.mask, clock=0),
                               rtol=0, atol=1e-6)
    shift = torch.tensor(labels.loc[batch.subjects].to_numpy())
    for name, rows in (("day workers", ~shift), ("shift workers", shift)):
        mean = day[rows][batch.mask[rows]].double().mean(0)
        hour = (math.atan2(mean[0], mean[1]) / (2 * math.pi) * 24) % 24
        print(f"  {name:13s}: mean 24 h encoding (sin, cos) = ({mean[0]:+.2f}, {mean[1]:+.2f}) "
              f"-> circular mean time of day {hour:4.1f} h")

    if out_dir is not None:
        from ..plotting import plot_heatmap, require_matplotlib

        row = int(batch.lengths.argmax())
        n = int(batch.lengths[row])
        enc = TimelineEncoder(48, components=("absolute", "periodic", "gap"), combine="concat")
        picture = enc(batch.times[row : row + 1, :n], None, batch.clock[row : row + 1])[0]
        heat = plot_heatmap(picture, out_dir / "timeline_encoding.png", ylabel="event",
                            title=f"TimelineEncoder(48, concat) of patient {batch.subjects[row]} ({n} events)")
        plt = require_matplotlib()
        fig, ax = plt.subplots(figsize=(5, 5))
        for name, rows, colour in (("day workers", ~shift, "tab:blue"), ("shift workers", shift, "tab:red")):
            points = day[rows][batch.mask[rows]]
            ax.scatter(points[:, 1], points[:, 0], s=4, alpha=0.3, color=colour, label=name)
        ax.set(xlabel="cos(2 pi t / 24 h)", ylabel="sin(2 pi t / 24 h)", aspect="equal",
               title="Events on the 24 h circle")
        ax.legend(loc="lower left")
        fig.tight_layout()
        circle = out_dir / "timeline_daily_circle.png"
        fig.savefig(circle, dpi=110)
        plt.close(fig)
        print(f"  wrote {heat}\n  wrote {circle}")
