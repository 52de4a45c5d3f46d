"""`omnipos precompute graphs|reads|meds` end to end (local engine; Ray by address: tests/scale/test_ray.py)."""

import gzip
import re

import numpy as np
import pandas as pd
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import Compose

from omnipos.app.cli import main
from omnipos.graph import AddLaplacianPE, AddRandomWalkPE, precompute
from omnipos.scale import load_graphs, load_meds, load_reads
from omnipos.timeseries import EventBatch

SUMMARY = re.compile(r"precompute (\w+): ([\d,]+) items in ([\d,]+) shards \(([\d,]+) computed, (\d+) of (\d+) units "
                     r"resumed\), [\d.]+ s, [\d,]+ items/s -> (.+)")


def graphs(count, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n = int(rng.integers(2, 12))
        edges = torch.tensor([[int(rng.integers(0, k)), k] for k in range(1, n)]).T
        out.append(Data(x=torch.ones(n, 1), edge_index=torch.cat([edges, edges.flip(0)], 1), num_nodes=n))
    return out


def test_precompute_graphs(tmp_path, capsys):
    data = graphs(30, 0)
    torch.save(data[:12], tmp_path / "a.pt")
    torch.save(data[12:], tmp_path / "b.pt")
    out = tmp_path / "out"
    inputs = ["precompute", "graphs", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--out", str(out),
              "--shard-size", "5", "--no-progress", "--random-walk", "6"]
    args = inputs + ["--laplacian", "4"]
    assert main(args) == 0
    kind, items, shards, computed, resumed, units, where = SUMMARY.fullmatch(capsys.readouterr().out.strip()).groups()
    assert (kind, items, shards, computed, resumed, units, where) == ("graphs", "30", "7", "7", "0", "2", str(out))
    expected = precompute(data, Compose([AddLaplacianPE(4), AddRandomWalkPE(6)]), progress=False)
    got = load_graphs(out)
    for a, b in zip(got, expected):
        assert torch.equal(a.laplacian_eigenvector_pe, b.laplacian_eigenvector_pe)
        assert torch.equal(a.random_walk_pe, b.random_walk_pe)
    assert main(args) == 0  # resumed: nothing to do
    assert "(0 computed, 2 of 2 units resumed)" in capsys.readouterr().out
    assert main(inputs + ["--laplacian", "2"]) == 2
    assert "holds the manifest of another job" in capsys.readouterr().err
    assert main(inputs + ["--laplacian", "2", "--overwrite"]) == 0
    assert load_graphs(out)[0].laplacian_eigenvector_pe.shape == (data[0].num_nodes, 2)
    assert main(args + ["--no-resume", "--overwrite"]) == 0
    assert "(7 computed, 0 of 2 units resumed)" in capsys.readouterr().out


def test_precompute_reads_with_a_bad_file(tmp_path, capsys):
    good = tmp_path / "good.fq.gz"
    good.write_bytes(gzip.compress(b"".join(b"@r%d\nACGTN\n+\nIIIII\n" % i for i in range(7))))
    bad = tmp_path / "bad.fq"
    bad.write_bytes(b"@x1\nACGT\n+\nIII\n")
    out = tmp_path / "out"
    code = main(["precompute", "reads", str(good), str(bad), "--out", str(out), "--shard-size", "3", "--dim", "4"])
    captured = capsys.readouterr()
    assert code == 2
    assert "7 items in 3 shards" in captured.out and f"FAILED 1 unit(s): {bad}" in captured.out
    assert f"{bad}: record 1 ('x1'): the sequence has 4 letters but the quality has 3" in captured.err
    assert "precompute reads:" in captured.err  # the progress bar
    bad.write_bytes(b"@x1\nACGT\n+\nIIII\n")
    assert main(["precompute", "reads", str(good), str(bad), "--out", str(out), "--overwrite", "--no-progress",
                 "--dim", "4"]) == 0
    got = load_reads(out)
    assert got["names"] == [f"r{i}" for i in range(7)] + ["x1"] and got["positional"].shape == (8, 5, 4)


def test_precompute_meds(tmp_path, capsys):
    (tmp_path / "meds" / "data" / "train").mkdir(parents=True)
    frame = pd.DataFrame({"subject_id": [3, 3, 1, 2, 1], "code": ["A", "B", "A", "C", "D"],
                          "time": pd.to_datetime(["2020-01-01 10:00", "2020-01-01 08:00", "2020-01-02 00:00", None,
                                                  "2020-01-03 00:00"]),
                          "numeric_value": np.array([1.0, np.nan, 2.0, np.nan, 3.0], dtype=np.float32)})
    frame.to_parquet(tmp_path / "meds" / "data" / "train" / "0.parquet")
    out = tmp_path / "out"
    assert main(["precompute", "meds", str(tmp_path / "meds"), "--out", str(out), "--unit", "d",
                 "--drop-missing", "--no-progress"]) == 0
    assert "precompute meds: 3 items in 1 shards" in capsys.readouterr().out
    got = load_meds(out)
    expected = EventBatch.from_frame(frame, unit="d", drop_missing=True)
    assert got.subjects == expected.subjects == [1, 2, 3] and torch.equal(got.times, expected.times)
    assert main(["precompute", "meds", str(tmp_path / "meds"), "--out", str(tmp_path / "o2"), "--static", "error",
                 "--no-progress"]) == 2
    assert "missing value (NaN/NaT/None) in column 'time'" in capsys.readouterr().err
    assert main(["precompute", "meds", str(tmp_path / "meds"), "--out", str(tmp_path / "o3"), "--no-progress"]) == 0
    kept = load_meds(tmp_path / "o3")  # the default keeps subject 2's static event as a static code
    assert kept.static_mask.sum().item() == 1 and kept.vocab[kept.static_codes[kept.static_mask].item()] == "C"


def test_precompute_bad_options(tmp_path, capsys):
    reads = tmp_path / "r.fa"
    reads.write_text(">a\nACGT\n")
    base = ["precompute", "reads", str(reads), "--out", str(tmp_path / "out"), "--no-progress"]
    assert main(base + ["--shard-size", "0"]) == 2
    assert "shard_size must be >= 1, got 0" in capsys.readouterr().err
    assert main(base + ["--num-gpus", "1"]) == 2
    assert "runs on CPUs only" in capsys.readouterr().err
    assert main(base + ["--num-cpus", "0"]) == 2
    assert "num_cpus must be >= 1, got 0" in capsys.readouterr().err
    assert main(base + ["--engine", "ray", "--address", "127.0.0.1:1"]) == 2
    assert "cannot reach 127.0.0.1:1" in capsys.readouterr().err
    assert main(["precompute", "graphs", str(reads), "--out", str(tmp_path / "g"), "--laplacian", "0",
                 "--random-walk", "0"]) == 2
    assert "nothing to compute" in capsys.readouterr().err
