"""Generated single large graphs for the graph benchmarks (fixed seeds, NumPy only, nothing downloaded).

Each generator returns directed edges ``(source, target)`` as int64 arrays, each undirected edge once, oriented
from the lower to the higher node id except where noted; ``undirected()`` lists both directions (what
``laplacian_pe`` / PyG's ``is_undirected=True`` expect), the one-way list is what the magnetic Laplacian reads.

- ``ba``: Barabasi-Albert preferential attachment, 3 edges per new node, new -> old (a citation-like DAG; hubs).
- ``rgg``: random geometric graph in the unit square, mean degree 4.5 (just above the percolation threshold:
  a large component and thousands of small ones, isolated nodes included).
- ``grid``: a square 2-D grid (``round(sqrt(n))^2`` nodes), edges right and down.
- ``ring``: a ring ``i -> i + 1`` plus ``n / 20`` random chords (long-range edges that defeat sparse LU).
"""

from __future__ import annotations

import numpy as np

SHAPES = ("ba", "rgg", "grid", "ring")


def ba(n: int, m: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(seed)
    ends = np.empty(2 * m * n, dtype=np.int64)  # every edge's two endpoints: degree-proportional sampling
    filled = 0
    sources, targets = [], []
    for v in range(m, n):
        if filled == 0:
            chosen = np.arange(m)
        else:
            chosen = np.unique(ends[rng.integers(0, filled, 4 * m)])[:m]
            while chosen.size < m:
                chosen = np.unique(np.concatenate([chosen, ends[rng.integers(0, filled, m)]]))[:m]
        sources.append(np.full(m, v))
        targets.append(chosen)
        ends[filled:filled + m] = chosen
        ends[filled + m:filled + 2 * m] = v
        filled += 2 * m
    return np.concatenate(sources), np.concatenate(targets), n


def rgg(n: int, mean_degree: float = 4.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    from scipy.spatial import cKDTree

    points = np.random.default_rng(seed).random((n, 2))
    radius = np.sqrt(mean_degree / (np.pi * n))
    pairs = cKDTree(points).query_pairs(radius, output_type="ndarray")
    return pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64), n


def grid(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    side = int(round(np.sqrt(n)))
    index = np.arange(side * side).reshape(side, side)
    sources = np.concatenate([index[:, :-1].ravel(), index[:-1, :].ravel()])
    targets = np.concatenate([index[:, 1:].ravel(), index[1:, :].ravel()])
    return sources, targets, side * side


def ring(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(seed)
    chords = n // 20
    a, b = rng.integers(0, n, chords), rng.integers(0, n, chords)
    keep = a != b
    sources = np.concatenate([np.arange(n), np.minimum(a, b)[keep]])
    targets = np.concatenate([(np.arange(n) + 1) % n, np.maximum(a, b)[keep]])
    return sources, targets, n


GENERATORS = {"ba": ba, "rgg": rgg, "grid": grid, "ring": ring}


def make(shape: str, n: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(sources, targets, num_nodes)`` of the named shape with about ``n`` nodes."""
    return GENERATORS[shape](n)


def undirected(sources: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``[2, 2E]``: both directions of every edge."""
    return np.stack([np.concatenate([sources, targets]), np.concatenate([targets, sources])])
