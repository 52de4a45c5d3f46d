"""What the orphan-worker test (tests/scale/test_orphans.py) runs: a graph transform that holds its worker in the
middle of a unit until the test lets it go, and the small graph list both the driver subprocess and the test build.

It lives here, not in a test module: worker processes unpickle the transform by module name, and ``support`` is on
their path (the driver subprocess gets ``tests`` on PYTHONPATH)."""

import os
import time
from pathlib import Path

import torch
from torch_geometric.transforms import BaseTransform

#: The longest a held worker waits for its release (a test that failed leaves no process behind for long).
HOLD_LIMIT_S = 120.0


def small_graphs(count: int = 20) -> list:
    """``count`` path graphs of 2..6 nodes with node features and a label."""
    from torch_geometric.data import Data

    graphs = []
    for i in range(count):
        n = 2 + i % 5
        edges = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
        graphs.append(Data(x=torch.arange(n, dtype=torch.float32)[:, None] + i, edge_index=torch.cat(
            [edges, edges.flip(0)], 1), y=torch.tensor([float(i)]), num_nodes=n))
    return graphs


class Hold(BaseTransform):
    """On its first graph, writes its process id to ``folder/started-<pid>`` and waits until ``folder/release``
    exists (at most HOLD_LIMIT_S); then adds ``offset`` to each graph's features."""

    def __init__(self, folder: str, offset: float) -> None:
        self.folder, self.offset = folder, offset

    def forward(self, data):
        folder = Path(self.folder)
        started = folder / f"started-{os.getpid()}"
        if not started.exists():
            started.write_text(str(os.getpid()))
            deadline = time.monotonic() + HOLD_LIMIT_S
            while not (folder / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        data.x = data.x + self.offset
        return data


def sleepy_unit(unit, payload):
    """A unit function that sleeps ``payload`` seconds."""
    time.sleep(payload)
    return {"unit": unit}
