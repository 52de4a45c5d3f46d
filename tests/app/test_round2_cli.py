"""Issue 36 (datasets, round 2), the command line: ``--naive-as`` (which an error tells the user to pass) and
``omnipos dna featurize`` on one 1 Mb read among short ones."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from omnipos.app.cli import main
from omnipos.scale import load_meds
from omnipos.timeseries import EventBatch


def _meds(root):
    (root / "data" / "train").mkdir(parents=True)
    frame = pd.DataFrame({"subject_id": [3, 3, 1], "code": ["A", "B", "A"],
                          "time": pd.to_datetime(["2020-01-01 10:00", "2020-01-01 08:00", "2020-01-02 00:00"]),
                          "numeric_value": np.array([1.0, np.nan, 2.0], dtype=np.float32)})
    frame.to_parquet(root / "data" / "train" / "0.parquet")
    return frame


def test_precompute_meds_naive_as_reads_naive_times_against_an_aware_origin(tmp_path, capsys):
    """Naive MEDS times and an aware --origin: refused, telling the user to pass naive_as='UTC', which the command
    line had no way to pass before (argparse: unrecognized arguments: --naive-as)."""
    frame = _meds(tmp_path / "meds")
    origin = "2020-01-01T00:00+00:00"
    args = ["precompute", "meds", str(tmp_path / "meds"), "--origin", origin, "--no-progress", "--num-cpus", "1"]
    assert main([*args, "--out", str(tmp_path / "refused")]) == 2
    assert "Pass naive_as='UTC'" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "out"), "--naive-as", "UTC"]) == 0
    got = load_meds(tmp_path / "out")
    expected = EventBatch.from_frame(frame, origin=origin, naive_as="UTC")
    assert got.subjects == expected.subjects == [1, 3]
    assert torch.equal(got.times, expected.times) and got.times[1, :2].tolist() == [8.0, 10.0]


_RUN = """
import resource, sys
from omnipos.app.cli import main
code = main(sys.argv[1:])
print("RESULT", code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def _featurize(*args):
    """``omnipos dna featurize ARGS`` in a fresh process: (exit status, peak RSS in bytes, stderr)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _RUN, "dna", "featurize", *map(str, args), "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT"))
    _, code, peak = line.split()
    return int(code), int(peak), done.stderr


def _long_read_file(path, short=2000, long=1_000_000):
    rng = np.random.default_rng(0)
    acgt = np.frombuffer(b"ACGT", dtype=np.uint8)
    records = []
    for i in range(short + 1):
        n = long if i == short // 2 else 150
        seq = acgt[rng.integers(0, 4, n)].tobytes()
        records.append(b"@r%d\n%s\n+\n%s\n" % (i, seq, b"I" * n))
    path.write_bytes(b"".join(records))
    return path


def test_featurize_one_long_read_is_refused_naming_the_flags_in_memory_proportional_to_the_reads(tmp_path):
    """One 1 Mb read among 2,000 of 150 bp: before, the [2001, 1,000,000] mask and tokens went to the allocator
    (failing there, naming max_len=1000000, an option never passed, or taking gigabytes). Now: refused before
    anything padded is allocated, naming the read and the flags that cure it, at a peak RSS of the reads' size
    (plus the interpreter); and the cure works."""
    path = _long_read_file(tmp_path / "long.fq")
    # the same command on the short reads alone: the interpreter, torch, numba's compiler, the outputs
    code, base, err = _featurize(_long_read_file(tmp_path / "short.fq", long=150), "-o", tmp_path / "short.pt")
    assert code == 0, err
    for extra in ([], ["--dim", "0"]):
        code, peak, err = _featurize(path, "-o", tmp_path / "out.pt", *extra)
        assert code == 2, err
        assert "record 1001" in err and "1,000,000 letters" in err and "max_len=1000000" not in err
        assert "--max-len N --truncation split" in err
        assert peak < base + (256 << 20), f"peak RSS {peak / 2**20:.0f} MiB, {base / 2**20:.0f} MiB without it"
    code, peak, err = _featurize(path, "-o", tmp_path / "out.pt", "--max-len", "1000", "--truncation", "split")
    assert code == 0, err
    saved = torch.load(tmp_path / "out.pt", weights_only=True)
    assert saved["tokens"].shape == (2000 + 1000, 1000)
    assert saved["lengths"].sum().item() == 2000 * 150 + 1_000_000
    # outputs of 3,000 x 1,000 positions (~200 MB with the positional encoding) on top of the short file's run
    assert peak < base + (768 << 20), f"peak RSS {peak / 2**20:.0f} MiB, {base / 2**20:.0f} MiB without it"
