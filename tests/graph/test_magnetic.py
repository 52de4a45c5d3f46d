"""magnetic_laplacian_pe against the magnetic Laplacian written out in float64 NumPy (Furutani et al. 2020)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.graph import laplacian_pe, magnetic_laplacian, magnetic_laplacian_pe


def numpy_magnetic(edge_index: np.ndarray, n: int, q: float, weight=None) -> np.ndarray:
    """L_q = I - D_s^-1/2 (A_s * exp(i 2 pi q (A - A^T))) D_s^-1/2, A_s = (A + A^T) / 2, self-loops dropped."""
    a = np.zeros((n, n))
    w = np.ones(edge_index.shape[1]) if weight is None else np.asarray(weight, dtype=np.float64)
    np.add.at(a, (edge_index[0], edge_index[1]), w)
    np.fill_diagonal(a, 0.0)
    a_s = (a + a.T) / 2
    d = a_s.sum(1)
    inv = np.where(d > 0, 1 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
    return np.eye(n) - inv[:, None] * (a_s * np.exp(1j * 2 * np.pi * q * (a - a.T))) * inv[None, :]


def random_digraph(n: int, edges: int, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, n, (2, edges)))


def complex_columns(pe: torch.Tensor, k: int, m: int) -> np.ndarray:
    return pe[:, :m].double().numpy() + 1j * pe[:, k:k + m].double().numpy()


@pytest.mark.parametrize("q", [0.05, 0.25, 0.5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_eigenpairs_match_numpy(q, seed):
    n = 9 + 4 * seed
    e = random_digraph(n, 2 * n, seed)
    weight = torch.rand(e.shape[1], dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) + 0.2
    k = 5
    pe, values, mask = magnetic_laplacian_pe(e, n, k, q=q, edge_weight=weight, return_eigenvalues=True)
    assert pe.shape == (n, 2 * k) and pe.dtype == torch.float32 and mask.all()
    lap = numpy_magnetic(e.numpy(), n, q, weight.numpy())
    np.testing.assert_allclose(lap, lap.conj().T, atol=1e-15)  # Hermitian
    expected = np.linalg.eigvalsh(lap)
    assert expected.min() > -1e-12 and expected.max() < 2 + 1e-12
    np.testing.assert_allclose(values[0].double().numpy(), expected[:k], atol=1e-6)
    vectors = complex_columns(pe, k, k)
    lam = values[0].double().numpy()
    np.testing.assert_allclose(lap @ vectors, vectors * lam, atol=2e-6)  # residual
    np.testing.assert_allclose(vectors.conj().T @ vectors, np.eye(k), atol=2e-6)  # orthonormal


def test_phase_rule_largest_entry_real_positive():
    e = random_digraph(12, 30, 7)
    pe, values, _ = magnetic_laplacian_pe(e, 12, 4, q=0.25, return_eigenvalues=True)
    lam = np.sort(np.linalg.eigvalsh(numpy_magnetic(e.numpy(), 12, 0.25)))
    assert np.all(np.diff(lam[:5]) > 1e-4)  # simple eigenvalues: the rule applies column by column
    vectors = complex_columns(pe, 4, 4)
    for j in range(4):
        i = np.argmax(np.abs(vectors[:, j]))
        assert abs(vectors[i, j].imag) < 1e-6 and vectors[i, j].real > 0


@pytest.mark.parametrize("both_directions", [True, False])
def test_q_zero_is_the_normalised_laplacian(graph_factory, both_directions):
    e = graph_factory(14, 9, 3)
    if not both_directions:  # each undirected edge named once: A_s = A / 2 everywhere, same normalised Laplacian
        e = e[:, e[0] < e[1]]
    k = 6
    pe = magnetic_laplacian_pe(e, 14, k, q=0.0)
    assert pe[:, k:].abs().max() == 0  # real eigenvectors
    torch.testing.assert_close(pe[:, :k], laplacian_pe(e, 14, k, drop_trivial=False), atol=1e-6, rtol=0)


def test_direction_matters_and_reversal_conjugates():
    e = torch.tensor([[0, 1, 2, 3, 0], [1, 2, 3, 0, 2]])  # a directed 4-cycle with a chord
    forward, values_f, _ = magnetic_laplacian_pe(e, 4, 4, q=0.25, return_eigenvalues=True)
    backward, values_b, _ = magnetic_laplacian_pe(e.flip(0), 4, 4, q=0.25, return_eigenvalues=True)
    undirected = magnetic_laplacian_pe(torch.cat([e, e.flip(0)], 1), 4, 4, q=0.25)
    # L_q of the reversed graph is the complex conjugate: same eigenvalues, conjugate eigenvectors
    torch.testing.assert_close(values_f, values_b)
    np.testing.assert_allclose(numpy_magnetic(e.flip(0).numpy(), 4, 0.25),
                               numpy_magnetic(e.numpy(), 4, 0.25).conj(), atol=1e-15)
    assert (forward - undirected).abs().max() > 0.1  # the ordinary Laplacian cannot see direction


def test_directed_tree_is_gauge_equivalent_to_undirected():
    """A tree has no cycles, so the phases can be absorbed: the spectrum is the undirected one for any q."""
    e = torch.tensor([[0, 0, 1, 1, 2], [1, 2, 3, 4, 5]])
    undirected = laplacian_pe(e, 6, 6, drop_trivial=False, return_eigenvalues=True)[1]
    for q in (0.1, 0.25, 0.5):
        values = magnetic_laplacian_pe(e, 6, 6, q=q, return_eigenvalues=True)[1]
        torch.testing.assert_close(values, undirected, atol=1e-6, rtol=0)


def test_self_loops_dropped_and_multi_edges_summed():
    e = torch.tensor([[0, 1, 2, 2, 3], [1, 2, 3, 3, 0]])
    loops = torch.tensor([[1, 3], [1, 3]])
    plain = magnetic_laplacian_pe(e, 4, 3)
    torch.testing.assert_close(magnetic_laplacian_pe(torch.cat([e, loops], 1), 4, 3), plain)
    doubled = torch.tensor([1.0, 1.0, 0.5, 0.5, 1.0])
    torch.testing.assert_close(magnetic_laplacian_pe(e, 4, 3, edge_weight=doubled),
                               magnetic_laplacian_pe(e[:, [0, 1, 2, 4]], 4, 3), atol=1e-6, rtol=0)


def test_batch_equals_graph_by_graph_bit_for_bit():
    sizes = [5, 8, 5, 1, 11, 8]
    graphs = [random_digraph(n, 2 * n, s) for s, n in enumerate(sizes)]
    offsets = np.cumsum([0] + sizes[:-1])
    e = torch.cat([g + o for g, o in zip(graphs, offsets)], 1)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    pe, values, mask = magnetic_laplacian_pe(e, sum(sizes), 6, batch=batch, return_eigenvalues=True)
    for i, (g, n, o) in enumerate(zip(graphs, sizes, offsets)):
        single, single_values, single_mask = magnetic_laplacian_pe(g, n, 6, return_eigenvalues=True)
        assert torch.equal(pe[o:o + n], single)
        assert torch.equal(values[i], single_values[0]) and torch.equal(mask[i], single_mask[0])
    assert mask.sum(1).tolist() == [min(6, n) for n in sizes]


def test_isolated_nodes_and_padding():
    pe, values, mask = magnetic_laplacian_pe(torch.tensor([[0], [1]]), 4, 6, return_eigenvalues=True)
    assert mask.tolist() == [[True] * 4 + [False] * 2]
    assert pe[:, 4:6].abs().max() == 0 and pe[:, 10:].abs().max() == 0
    np.testing.assert_allclose(values[0, :4].numpy(), np.linalg.eigvalsh(numpy_magnetic(np.array([[0], [1]]), 4,
                                                                                          0.25)), atol=1e-6)


@pytest.mark.parametrize("solver", ["auto", "shift-invert", "lanczos", "lobpcg"])
def test_sparse_path_matches_dense(solver):
    n = 160
    e = random_digraph(n, 3 * n, 11)
    dense, dense_values, _ = magnetic_laplacian_pe(e, n, 5, return_eigenvalues=True)
    sparse, sparse_values, _ = magnetic_laplacian_pe(e, n, 5, return_eigenvalues=True, dense_max_nodes=40,
                                                     solver=solver)
    torch.testing.assert_close(sparse_values, dense_values, atol=1e-6, rtol=0)
    torch.testing.assert_close(sparse, dense, atol=1e-5, rtol=0)


def test_magnetic_laplacian_matrix_matches_numpy():
    e = random_digraph(7, 15, 5)
    adjacency = torch.zeros(7, 7, dtype=torch.float64).index_put_((e[0], e[1]), torch.ones(15, dtype=torch.float64),
                                                                   accumulate=True)
    adjacency.fill_diagonal_(0)
    np.testing.assert_allclose(magnetic_laplacian(adjacency[None], 0.3)[0].numpy(),
                               numpy_magnetic(e.numpy(), 7, 0.3), atol=1e-14)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 10), st.integers(0, 25), st.integers(0, 10_000), st.sampled_from([0.0, 0.1, 0.25]))
def test_permutation_equivariance_up_to_basis(n, edges, seed, q):
    e = random_digraph(n, edges, seed)
    perm = torch.from_numpy(np.random.default_rng(seed).permutation(n))
    position = torch.empty_like(perm)
    position[perm] = torch.arange(n)
    pe, values, _ = magnetic_laplacian_pe(e, n, n, q=q, return_eigenvalues=True)
    pe_p, values_p, _ = magnetic_laplacian_pe(position[e], n, n, q=q, return_eigenvalues=True)
    np.testing.assert_allclose(values_p.numpy(), values.numpy(), atol=1e-5)
    lam = values[0].double().numpy()
    ours = complex_columns(pe, n, n)[perm.numpy()]
    theirs = complex_columns(pe_p, n, n)
    start = 0
    for j in range(1, n + 1):  # eigenspace projectors agree (bases may differ where eigenvalues repeat)
        if j == n or lam[j] - lam[j - 1] > 1e-6:
            a, b = ours[:, start:j], theirs[:, start:j]
            np.testing.assert_allclose(a @ a.conj().T, b @ b.conj().T, atol=1e-4)
            start = j


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"q": -0.1}, ValueError, r"q must be in \[0, 0.5\]"),
        ({"q": 0.75}, ValueError, r"q must be in \[0, 0.5\]"),
        ({"q": float("nan")}, ValueError, "q must be in"),
        ({"q": True}, TypeError, "q must be a real number"),
        ({"q": "0.25"}, TypeError, "q must be a real number"),
        ({"k": 0}, ValueError, "k must be >= 1"),
        ({"edge_index": torch.tensor([[0, -1], [1, 0]])}, ValueError, r"edge_index\[:, 1\] = \(-1, 0\) names node -1"),
        ({"edge_index": torch.tensor([[0, 5], [1, 0]])}, ValueError, "num_nodes=5"),
        ({"edge_weight": torch.tensor([1.0, float("nan")])}, ValueError, r"edge_weight\[1\] = nan .* must be finite"),
        ({"edge_weight": torch.tensor([1.0, -2.0])}, ValueError,
         r"edge_weight\[1\] = -2.0 \(edge 1 -> 0\) must be >= 0"),
        ({"batch": torch.tensor([0, 0, 1, 1])}, ValueError, r"batch must hold one graph id per node.*\[5\]"),
        ({"batch": torch.tensor([1, 1, 0, 0, 0])}, ValueError, "non-decreasing.*node 2"),
        ({"edge_index": torch.tensor([[0, 1], [1, 0]], device="meta")}, ValueError, "edge_index is on the meta"),
        ({"solver": "arpack"}, ValueError, "solver must be one of"),
        ({"k": 2 ** 40}, ValueError, "k=1099511627776 asks for"),
    ],
)
def test_bad_input(kwargs, error, match):
    arguments = {"edge_index": torch.tensor([[0, 1], [1, 0]]), "num_nodes": 5, "k": 2}
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        magnetic_laplacian_pe(**arguments)


def test_graph_too_large_for_the_dense_path_is_refused_by_name():
    e = torch.tensor([[0, 3], [1, 4]])
    batch = torch.tensor([0, 0, 0] + [1] * 20_000)
    with pytest.raises(ValueError, match=r"graph 1 has 20,000 nodes.*dense_max_nodes=30000"):
        magnetic_laplacian_pe(e, 20_003, 2, batch=batch, dense_max_nodes=30_000)
    with pytest.raises(ValueError, match="dense_max_nodes must be >= 1"):
        magnetic_laplacian_pe(e, 10, 2, dense_max_nodes=0)


def test_pyg_transform_on_data_batch_and_precompute():
    from torch_geometric.data import Batch, Data

    from omnipos.graph import AddMagneticLaplacianPE, precompute

    graphs = [Data(edge_index=random_digraph(n, 2 * n, n), num_nodes=n) for n in (6, 9, 6)]
    transform = AddMagneticLaplacianPE(3, q=0.2, eigenvalue_attr="mag_values", mask_attr="mag_mask")
    assert "q=0.2" in repr(transform)
    single = [transform(g.clone()) for g in graphs]
    batched = transform(Batch.from_data_list([g.clone() for g in graphs]))
    torch.testing.assert_close(batched.magnetic_laplacian_pe, torch.cat([s.magnetic_laplacian_pe for s in single]))
    assert batched.mag_values.shape == (3, 3) and batched.mag_mask.shape == (21, 3)
    done = precompute(graphs, AddMagneticLaplacianPE(3, q=0.2), batch_size=2, progress=False)
    for d, s in zip(done, single):
        torch.testing.assert_close(d.magnetic_laplacian_pe, s.magnetic_laplacian_pe)
    with pytest.raises(ValueError, match="q must be in"):
        AddMagneticLaplacianPE(3, q=0.6)
