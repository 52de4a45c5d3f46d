"""Small generated datasets for the scale tests: molecule-like graphs, FASTQ/FASTA files, a MEDS root."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch


def make_molecules(count: int, seed: int = 0) -> list:
    """Molecule-like graphs: a random tree on 1..24 nodes plus a few ring-closing bonds, both directions,
    with node features, a graph label and an explicit node count."""
    from torch_geometric.data import Data

    rng = np.random.default_rng(seed)
    graphs = []
    for i in range(count):
        n = int(rng.integers(1, 25))
        pairs = {(int(rng.integers(0, k)), k) for k in range(1, n)}
        for _ in range(int(rng.integers(0, 3))):
            a, b = rng.integers(0, n, 2)
            if a != b:
                pairs.add((int(min(a, b)), int(max(a, b))))
        edges = torch.tensor(sorted(pairs), dtype=torch.long).T if pairs else torch.zeros(2, 0, dtype=torch.long)
        graphs.append(Data(x=torch.from_numpy(rng.standard_normal((n, 3)).astype(np.float32)),
                           edge_index=torch.cat([edges, edges.flip(0)], 1), y=torch.tensor([float(i)]),
                           num_nodes=n))
    return graphs


def assert_same_graphs(got: list, expected: list) -> None:
    """Bit-for-bit equality of two lists of Data: same attributes, same dtypes, same values."""
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected)):
        assert sorted(a.keys()) == sorted(b.keys()), i
        for key in b.keys():  # noqa: SIM118 - Data.keys() is a method, not a dict view
            if isinstance(b[key], torch.Tensor):
                assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), (i, key)
            else:
                assert a[key] == b[key], (i, key)


def write_fastx(path: Path, count: int, seed: int, *, fasta: bool = False) -> Path:
    """``count`` random reads (lengths 0..59, upper and lower case, some N) as FASTQ (or FASTA), gzip when the
    name ends in .gz."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(count):
        length = int(rng.integers(0, 60))
        sequence = "".join(rng.choice(list("ACGTNacgt"), length))
        if fasta:
            records.append(f">{path.stem}_{i} read\n{sequence}\n")
        else:
            quality = "".join(chr(33 + int(q)) for q in rng.integers(0, 41, length))
            records.append(f"@{path.stem}_{i}\n{sequence}\n+\n{quality}\n")
    data = "".join(records).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return path


def write_meds(root: Path, seed: int = 0, *, files=(("train", 2), ("tuning", 1), ("held_out", 1)),
               static: bool = False) -> Path:
    """A MEDS root in the real layout: data/<split>/<n>.parquet (rows shuffled), metadata/dataset.json and
    metadata/codes.parquet. Subjects are disjoint across files; some events share a time; with ``static``, each
    subject also has a static event (time null), as MEDS allows."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    subject = 1000
    codes = set()
    for split, count in files:
        (root / "data" / split).mkdir(parents=True, exist_ok=True)
        for number in range(count):
            rows = []
            for _ in range(int(rng.integers(2, 8))):
                subject += int(rng.integers(1, 40))
                n = int(rng.integers(1, 25))
                start = np.datetime64("2015-03-01T00:00:00") + np.timedelta64(int(rng.integers(0, 10**8)), "s")
                offsets = np.sort(rng.integers(0, 10**6, n) // 60 * 60)
                for t in start + offsets.astype("timedelta64[s]"):
                    code = f"LAB//{int(rng.integers(0, 30))}"
                    codes.add(code)
                    value = float(rng.normal()) if rng.random() < 0.6 else np.nan
                    rows.append((subject, t, code, value))
                if static:
                    rows.append((subject, None, "GENDER//F", np.nan))
                    codes.add("GENDER//F")
            frame = pd.DataFrame(rows, columns=["subject_id", "time", "code", "numeric_value"])
            frame["subject_id"] = frame["subject_id"].astype("int64")
            frame["time"] = pd.to_datetime(frame["time"]).astype("datetime64[us]")
            frame["numeric_value"] = frame["numeric_value"].astype("float32")
            frame.sample(frac=1.0, random_state=seed + number).reset_index(drop=True).to_parquet(
                root / "data" / split / f"{number}.parquet", index=False)
    (root / "metadata").mkdir(parents=True, exist_ok=True)
    (root / "metadata" / "dataset.json").write_text(json.dumps({"dataset_name": "omnipos-test",
                                                                "meds_version": "0.4.1"}))
    pd.DataFrame({"code": sorted(codes), "description": None}).to_parquet(root / "metadata" / "codes.parquet")
    return root


@pytest.fixture(scope="session")
def molecules():
    return make_molecules


@pytest.fixture(scope="session")
def same_graphs():
    return assert_same_graphs


@pytest.fixture(scope="session")
def fastx():
    return write_fastx


@pytest.fixture(scope="session")
def meds_root():
    return write_meds


@pytest.fixture(scope="session")
def transform():
    """The graph encodings the scale tests precompute: LapPE (with eigenvalues) and RWPE."""
    from torch_geometric.transforms import Compose

    from omnipos.graph import AddLaplacianPE, AddRandomWalkPE

    return lambda: Compose([AddLaplacianPE(3, eigenvalue_attr="eigenvalues"), AddRandomWalkPE(4)])


@pytest.fixture(scope="session")
def graphs():
    return make_molecules(53, seed=1)


@pytest.fixture(scope="session")
def expected(graphs, transform):
    """The single-process reference: the graph domain's own precompute over the whole list at once."""
    from omnipos.graph import precompute

    return precompute(graphs, transform(), progress=False)
