import numpy as np
import pytest
import torch


def make_graph(n: int, extra: int, seed: int, *, connected: bool = True) -> torch.Tensor:
    """Undirected edge list (both directions, no self-loops, no duplicates) of a random graph on n nodes:
    a random spanning tree (when connected) plus ``extra`` random chords."""
    rng = np.random.default_rng(seed)
    pairs = set()
    if connected:
        order = rng.permutation(n)
        for i in range(1, n):
            j = order[rng.integers(0, i)]
            pairs.add((min(order[i], j), max(order[i], j)))
    for _ in range(extra):
        a, b = rng.integers(0, n, 2)
        if a != b:
            pairs.add((min(a, b), max(a, b)))
    if not pairs:
        return torch.zeros(2, 0, dtype=torch.long)
    e = torch.tensor(sorted(pairs), dtype=torch.long).T
    return torch.cat([e, e.flip(0)], dim=1)


@pytest.fixture(scope="session")
def graph_factory():
    return make_graph


def dense_adjacency(edge_index, n, weight=None) -> np.ndarray:
    a = np.zeros((n, n))
    w = np.ones(edge_index.shape[1]) if weight is None else np.asarray(weight, dtype=np.float64)
    np.add.at(a, (edge_index[0].numpy(), edge_index[1].numpy()), w)
    return a


@pytest.fixture(scope="session")
def adjacency():
    return dense_adjacency


def _reference_basis(vectors: np.ndarray, values: np.ndarray, count: int, tol=1e-8, value_tol=1e-8) -> np.ndarray:
    """The definition, literally: per eigenspace, pivoted Cholesky of its projector P = V V^H (largest P_ii,
    ties within tol on sqrt(P_ii) to the lowest index; u = P e_i / sqrt(P_ii); P <- P - u u^H)."""
    n, m = vectors.shape
    scale = max(1.0, np.abs(values).max())
    out = np.zeros((n, count), dtype=vectors.dtype)
    j = 0
    while j < count:
        end = j + 1
        while end < m and values[end] - values[end - 1] <= value_tol * scale:
            end += 1
        p = vectors[:, j:end] @ vectors[:, j:end].conj().T
        for column in range(j, min(end, count)):
            d = np.sqrt(np.clip(np.real(np.diag(p)), 0, None))
            i = np.flatnonzero(d >= d.max() - tol)[0]
            u = p[:, i] / d[i]
            out[:, column] = u
            p = p - np.outer(u, u.conj())
        j = end
    return out


@pytest.fixture(scope="session")
def reference_basis():
    """The canonical basis computed from its definition in NumPy (independent of omnipos.graph.sign)."""
    return _reference_basis
