"""References shared by the time-series tests."""

import numpy as np
import pandas as pd

from omnipos.timeseries import batch_timelines


def meds_frame(root, pattern="data/**/*.parquet"):
    import pyarrow.parquet as pq

    return pd.concat([pq.read_table(p).to_pandas() for p in sorted(root.glob(pattern))], ignore_index=True)


def reference(df, unit_seconds=3600.0):
    """The straightforward per-subject loop: stable sort, subtract the first time."""
    out = {}
    for sid, g in df.groupby("subject_id", sort=True):
        g = g.sort_values("time", kind="stable")
        hours = (g["time"] - g["time"].iloc[0]).dt.total_seconds().to_numpy() / unit_seconds
        out[sid] = (hours, g["code"].tolist(), g["numeric_value"].to_numpy())
    return out


def random_timelines(seed, batch=3, length=9, scale=5000.0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, length + 1, size=batch)
    lengths[0] = length
    return batch_timelines([np.sort(rng.uniform(-scale, scale, n)) for n in lengths], origin="epoch")
