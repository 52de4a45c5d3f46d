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


# ------------------------------------------------------------------ random walks and RRWP: float64 references


def numpy_transition(edge_index, n, weight=None) -> np.ndarray:
    """P = D^-1 A from the edge list as given (duplicates add, rows of nodes without out-weight are 0)."""
    a = dense_adjacency(edge_index, n, weight)
    d = a.sum(1, keepdims=True)
    return np.divide(a, d, out=np.zeros_like(a), where=d > 0)


def numpy_return_probabilities(edge_index, n, weight, steps) -> np.ndarray:
    p = numpy_transition(edge_index, n, weight)
    return np.stack([np.diag(np.linalg.matrix_power(p, s)) for s in steps], axis=1).reshape(n, len(steps))


def numpy_rrwp(edge_index, n, weight, k):
    """GRIT's definition, dense: [I, M, ..., M^(k-1)], pairs where any channel is non-zero, row-major."""
    m = numpy_transition(edge_index, n, weight)
    powers = [np.eye(n)]
    for _ in range(1, k):
        powers.append(powers[-1] @ m)
    stacked = np.stack(powers, -1)
    i, j = np.nonzero((stacked != 0).any(-1))
    return np.stack([i, j]), stacked[i, j], np.stack([np.diag(p) for p in powers], 1).reshape(n, k)


def random_walk_batch(seed, sizes, *, directed=False, weighted=True, zero_weights=False, loops=False):
    """A PyG-style batch of random graphs (each: random edges, so some nodes isolated), as
    (edge_index, num_nodes, batch, weight or None, [(edge_index, n, weight) per graph])."""
    rng = np.random.default_rng(seed)
    parts, graphs, offset = [], [], 0
    for n in sizes:
        count = int(rng.integers(0, 2 * n + 1)) if n > 1 else (int(rng.integers(0, 2)) if loops and n else 0)
        e = rng.integers(0, max(n, 1), (2, count))
        if not loops:
            e = e[:, e[0] != e[1]]
        if not directed:
            e = np.concatenate([e, e[::-1]], 1)
        w = rng.random(e.shape[1]) * 4 + 0.05
        if not directed:
            w[e.shape[1] // 2:] = w[:e.shape[1] // 2]
        if zero_weights and w.size:
            w[rng.random(w.size) < 0.2] = 0.0
        e = torch.from_numpy(e).long()
        w = torch.from_numpy(w) if weighted else None
        graphs.append((e, n, w))
        parts.append(e + offset)
        offset += n
    edge_index = torch.cat(parts, 1) if parts else torch.zeros(2, 0, dtype=torch.long)
    weight = torch.cat([w for _, _, w in graphs]) if weighted and graphs else None
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes, dtype=torch.long))
    return edge_index, offset, batch, weight, graphs


@pytest.fixture(scope="session")
def walk_refs():
    """The float64 NumPy references of random_walk_pe / rrwp and a random batch builder."""
    from types import SimpleNamespace

    return SimpleNamespace(transition=numpy_transition, return_probabilities=numpy_return_probabilities,
                           rrwp=numpy_rrwp, batch=random_walk_batch)


# ------------------------------------------------------------------ the canonical eigenspace basis, by definition


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
