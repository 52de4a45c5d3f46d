"""laplacian_pe against PyG's AddLaplacianEigenvectorPE and an independent float64 NumPy/SciPy computation."""

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data
from torch_geometric.transforms import AddLaplacianEigenvectorPE

from omnipos.graph import laplacian_pe


def numpy_laplacian(a: np.ndarray, normalization):
    """The Laplacian in float64 NumPy, written from the definitions (isolated node: L_ii = 1 when normalised)."""
    np.fill_diagonal(a, 0.0)
    d = a.sum(1)
    if normalization is None:
        return np.diag(d) - a
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, 1 / d, 0.0)
    if normalization == "sym":
        return np.eye(len(d)) - np.sqrt(inv)[:, None] * a * np.sqrt(inv)[None, :]
    return np.eye(len(d)) - inv[:, None] * a  # "rw": not symmetric


def align(ours: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Flip each column of ``ref`` to the sign of the matching column of ``ours``."""
    signs = np.sign((ours * ref).sum(0))
    signs[signs == 0] = 1
    return ref * signs


def distinct(values: np.ndarray, first: int, gap: float = 1e-4) -> bool:
    """The ``first`` smallest eigenvalues are distinct (and apart from the next one)."""
    return bool(np.all(np.diff(np.sort(values)[:first + 1]) > gap))


def connected_graph_with_distinct_spectrum(factory, n, seed, adjacency, first=8):
    for attempt in range(50):
        e = factory(n, n // 2 + 2, seed * 100 + attempt)
        if distinct(np.linalg.eigvalsh(numpy_laplacian(adjacency(e, n), "sym")), min(first, n - 1)):
            return e
    raise AssertionError("no graph with a distinct spectrum found")


@pytest.mark.parametrize("n,seed", [(7, 0), (15, 1), (30, 2), (57, 3), (120, 4)])
def test_same_eigenvectors_as_pyg_up_to_sign(graph_factory, adjacency, n, seed):
    e = connected_graph_with_distinct_spectrum(graph_factory, n, seed, adjacency)
    k = 5
    torch.manual_seed(seed)
    ref = AddLaplacianEigenvectorPE(k, is_undirected=True)(Data(edge_index=e, num_nodes=n))
    ref = ref.laplacian_eigenvector_pe.double().numpy()
    ours = laplacian_pe(e, n, k)
    assert ours.shape == (n, k) and ours.dtype == torch.float32
    ours = ours.double().numpy()
    np.testing.assert_allclose(ours, align(ours, ref), atol=2e-4)  # PyG solves in float32


@pytest.mark.parametrize("normalization", ["sym", "rw", None])
def test_matches_float64_numpy_reference(graph_factory, adjacency, normalization):
    n = 18
    e = connected_graph_with_distinct_spectrum(graph_factory, n, 7, adjacency)
    weight = torch.rand(e.shape[1] // 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) + 0.1
    weight = torch.cat([weight, weight])  # same weight both directions
    lap = numpy_laplacian(adjacency(e, n, weight), normalization)
    if normalization == "rw":
        values, vectors = scipy.linalg.eig(lap)  # the non-symmetric problem, solved as such
        values, vectors = values.real, vectors.real
    else:
        values, vectors = np.linalg.eigh(lap)
    order = np.argsort(values)
    values, vectors = values[order], vectors[:, order]
    vectors /= np.linalg.norm(vectors, axis=0)
    k = 6
    pe, ev, mask = laplacian_pe(e, n, k, edge_weight=weight, normalization=normalization, return_eigenvalues=True)
    assert mask.all()
    np.testing.assert_allclose(ev[0].double().numpy(), values[1:k + 1], rtol=1e-6, atol=1e-6)
    ours = pe.double().numpy()
    np.testing.assert_allclose(ours, align(ours, vectors[:, 1:k + 1]), atol=1e-6)
    if normalization == "rw":  # L_rw u = lambda u for the returned columns
        np.testing.assert_allclose(lap @ ours, ours * ev[0].double().numpy(), atol=1e-5)
        full = laplacian_pe(e, n, 2, edge_weight=weight, normalization="rw", drop_trivial=False)
        np.testing.assert_allclose(full[:, 0].double().numpy(), np.full(n, n ** -0.5), atol=1e-6)


def projector(vectors: np.ndarray) -> np.ndarray:
    return vectors @ vectors.T


@pytest.mark.parametrize("n", [8, 11])
def test_repeated_eigenvalues_same_eigenspaces(n):
    """A cycle's eigenvalues 1 - cos(2 pi j / n) come in pairs: compare the eigenspaces (projectors)."""
    src = torch.arange(n)
    e = torch.cat([torch.stack([src, (src + 1) % n]), torch.stack([(src + 1) % n, src])], dim=1)
    k = 6  # pairs j = 1, 2, 3: complete eigenspaces
    pe, ev, _ = laplacian_pe(e, n, k, return_eigenvalues=True)
    expected = np.sort(1 - np.cos(2 * np.pi * np.arange(n) / n))[1:k + 1]
    np.testing.assert_allclose(ev[0].double().numpy(), expected, atol=1e-6)
    ref = AddLaplacianEigenvectorPE(k, is_undirected=True)(Data(edge_index=e, num_nodes=n))
    ref = ref.laplacian_eigenvector_pe.double().numpy()
    ours = pe.double().numpy()
    for pair in range(3):
        cols = slice(2 * pair, 2 * pair + 2)
        np.testing.assert_allclose(projector(ours[:, cols]), projector(ref[:, cols]), atol=2e-5)


@pytest.mark.parametrize("n", [5, 6, 9, 16, 31])
def test_cycle_nodes_get_distinct_rows(n):
    """The seeds' claim: on a cycle every node is structurally the same, yet its spectral coordinates differ."""
    src = torch.arange(n)
    e = torch.cat([torch.stack([src, (src + 1) % n]), torch.stack([(src + 1) % n, src])], dim=1)
    pe = laplacian_pe(e, n, 2).double()
    distances = torch.cdist(pe, pe) + torch.eye(n) * 10
    assert distances.min() > 1e-3


def eigenspace_projectors(pe: np.ndarray, values: np.ndarray, tol: float = 1e-6):
    """Projectors onto the eigenspaces (columns grouped by equal eigenvalue)."""
    groups, start = [], 0
    for j in range(1, len(values) + 1):
        if j == len(values) or values[j] - values[j - 1] > tol:
            groups.append(projector(pe[:, start:j]))
            start = j
    return groups


@given(st.integers(2, 14), st.integers(0, 20), st.integers(0, 10_000), st.booleans())
def test_permutation_equivariance_up_to_basis(graph_factory, n, extra, seed, connected):
    e = graph_factory(n, extra, seed, connected=connected)
    perm = torch.from_numpy(np.random.default_rng(seed).permutation(n))
    position = torch.empty_like(perm)
    position[perm] = torch.arange(n)  # node perm[i] of the original is node i of the permuted graph
    pe, ev, _ = laplacian_pe(e, n, n, drop_trivial=False, return_eigenvalues=True)
    pe_p, ev_p, _ = laplacian_pe(position[e], n, n, drop_trivial=False, return_eigenvalues=True)
    np.testing.assert_allclose(ev_p.numpy(), ev.numpy(), atol=1e-5)
    values = ev[0].double().numpy()
    ours = eigenspace_projectors(pe.double().numpy()[perm.numpy()], values)
    theirs = eigenspace_projectors(pe_p.double().numpy(), values)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_k_at_least_n_pads_with_zeros_and_masks():
    e = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    pe, ev, mask = laplacian_pe(e, 3, 5, return_eigenvalues=True)
    assert pe.shape == (3, 5) and ev.shape == (1, 5)
    assert mask.tolist() == [[True, True, False, False, False]]
    assert pe[:, 2:].abs().max() == 0 and ev[0, 2:].abs().max() == 0
    np.testing.assert_allclose(ev[0, :2].numpy(), [1.0, 2.0], atol=1e-6)  # path P3: 0, 1, 2
    one = laplacian_pe(torch.zeros(2, 0, dtype=torch.long), 1, 3, return_eigenvalues=True)
    assert one[0].abs().max() == 0 and not one[2].any()


def test_batch_equals_graph_by_graph(graph_factory):
    graphs = [graph_factory(n, n, s) for s, n in enumerate([6, 9, 6, 12, 3, 9, 1])]
    sizes = [6, 9, 6, 12, 3, 9, 1]
    offsets = np.cumsum([0] + sizes[:-1])
    e = torch.cat([g + o for g, o in zip(graphs, offsets)], dim=1)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    pe, ev, mask = laplacian_pe(e, sum(sizes), 4, batch=batch, return_eigenvalues=True)
    for i, (g, n, o) in enumerate(zip(graphs, sizes, offsets)):
        single, single_ev, single_mask = laplacian_pe(g, n, 4, return_eigenvalues=True)
        torch.testing.assert_close(pe[o:o + n], single, atol=1e-6, rtol=0)
        torch.testing.assert_close(ev[i], single_ev[0])
        assert torch.equal(mask[i], single_mask[0])


def test_isolated_nodes(adjacency):
    # a triangle plus two isolated nodes: the isolated ones have L_ii = 1 (PyG's get_laplacian), eigenvalue 1
    e = torch.tensor([[0, 1, 1, 2, 2, 0], [1, 0, 2, 1, 0, 2]])
    pe, ev, _ = laplacian_pe(e, 5, 4, return_eigenvalues=True)
    values, _ = np.linalg.eigh(numpy_laplacian(adjacency(e, 5), "sym"))
    np.testing.assert_allclose(ev[0].numpy(), values[1:5], atol=1e-6)
    # the isolated nodes' eigenspace (eigenvalue 1) is spanned by their unit vectors
    ones = np.isclose(ev[0].numpy(), 1.0)
    block = pe.double().numpy()[:, ones]
    np.testing.assert_allclose(projector(block), np.diag([0, 0, 0, 1.0, 1.0]), atol=1e-6)
    combinatorial = laplacian_pe(e, 5, 4, normalization=None, return_eigenvalues=True)[1]
    expected = np.sort(np.linalg.eigvalsh(numpy_laplacian(adjacency(e, 5), None)))[1:5]  # 0, 0, 3, 3
    np.testing.assert_allclose(combinatorial[0].numpy(), expected, atol=1e-6)


def test_self_loops_are_ignored(graph_factory):
    e = graph_factory(10, 6, 11)
    loops = torch.tensor([[0, 3, 3], [0, 3, 3]])
    for normalization in ("sym", "rw", None):
        plain = laplacian_pe(e, 10, 4, normalization=normalization)
        looped = laplacian_pe(torch.cat([e, loops], 1), 10, 4, normalization=normalization)
        torch.testing.assert_close(looped, plain, atol=1e-6, rtol=0)


def test_directed_edge_list_is_symmetrised(graph_factory):
    e = graph_factory(12, 8, 5)
    one_way = e[:, : e.shape[1] // 2]
    reversed_ = one_way.flip(0)
    both = laplacian_pe(e, 12, 5)
    torch.testing.assert_close(laplacian_pe(one_way, 12, 5), both, atol=1e-6, rtol=0)
    torch.testing.assert_close(laplacian_pe(reversed_, 12, 5), both, atol=1e-6, rtol=0)
    mixed = torch.cat([one_way, reversed_[:, :3]], 1)  # some edges in both directions, some in one
    torch.testing.assert_close(laplacian_pe(mixed, 12, 5), both, atol=1e-6, rtol=0)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 25), edges=st.integers(0, 70), seed=st.integers(0, 2**31 - 1),
       normalization=st.sampled_from(["sym", None]))
def test_sparse_laplacian_is_the_float64_formula_in_canonical_csr(n, edges, seed, normalization):
    """The large-graph path's CSR Laplacian (diagonal inserted into each sorted row) equals the definition on a
    directed list with self-loops, duplicates and zero weights (summed, then ``max(A, A^T)``), its null weight
    is ``sqrt(degree)`` / ones, and it is canonical CSR (sorted, no duplicates, every diagonal entry stored)."""
    from omnipos.graph.laplacian import sparse_laplacian

    rng = np.random.default_rng(seed)
    row, col = rng.integers(0, n, edges), rng.integers(0, n, edges)
    weight = rng.uniform(0.0, 3.0, edges) * (rng.random(edges) > 0.2)
    a = np.zeros((n, n))
    np.add.at(a, (row, col), weight)
    np.fill_diagonal(a, 0.0)
    expected = numpy_laplacian(np.maximum(a, a.T), normalization)
    lap, degree, null_weight = sparse_laplacian(row, col, weight, n, normalization)
    np.testing.assert_allclose(lap.toarray(), expected, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(degree, np.maximum(a, a.T).sum(1), rtol=1e-13)
    np.testing.assert_allclose(null_weight, np.sqrt(degree) if normalization else np.ones(n))
    canonical = lap.copy()
    canonical.sum_duplicates()
    canonical.sort_indices()
    assert lap.has_sorted_indices and np.array_equal(canonical.indices, lap.indices)
    assert np.array_equal(canonical.indptr, lap.indptr)
    assert np.array_equal(np.repeat(np.arange(n), np.diff(lap.indptr))[lap.indices == np.repeat(
        np.arange(n), np.diff(lap.indptr))], np.arange(n))


def test_two_runs_identical_and_random_sign_reproducible(graph_factory):
    e = graph_factory(40, 30, 9)
    assert torch.equal(laplacian_pe(e, 40, 8), laplacian_pe(e, 40, 8))
    a = laplacian_pe(e, 40, 8, sign="random", generator=torch.Generator().manual_seed(1))
    b = laplacian_pe(e, 40, 8, sign="random", generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    canonical = laplacian_pe(e, 40, 8)
    torch.testing.assert_close(a.abs(), canonical.abs())
    signs = (a * canonical).sum(0).sign()
    assert set(signs.tolist()) <= {-1.0, 1.0}


def test_canonical_sign_makes_largest_entry_positive(graph_factory):
    e = graph_factory(25, 20, 2)
    pe = laplacian_pe(e, 25, 6, sign="canonical").double()
    raw = laplacian_pe(e, 25, 6, sign="none").double()
    torch.testing.assert_close(pe.abs(), raw.abs())
    largest = pe.abs().argmax(0)
    assert (pe[largest, torch.arange(6)] > 0).all()


def test_sparse_path_matches_dense_and_is_deterministic(graph_factory):
    n = 90
    e = graph_factory(n, 60, 4)
    dense, dense_ev, _ = laplacian_pe(e, n, 6, return_eigenvalues=True)
    for normalization in ("sym", "rw", None):
        dense, dense_ev, _ = laplacian_pe(e, n, 6, normalization=normalization, return_eigenvalues=True)
        sparse, sparse_ev, _ = laplacian_pe(e, n, 6, normalization=normalization, return_eigenvalues=True,
                                            dense_max_nodes=50)
        torch.testing.assert_close(sparse_ev, dense_ev, atol=1e-6, rtol=1e-6)
        ours = sparse.double().numpy()
        np.testing.assert_allclose(ours, align(ours, dense.double().numpy()), atol=1e-5)
        assert torch.equal(sparse, laplacian_pe(e, n, 6, normalization=normalization, dense_max_nodes=50))


def test_per_component(graph_factory):
    a, b = graph_factory(7, 4, 1), graph_factory(5, 3, 2)
    # interleave the two components' node ids: component nodes need not be contiguous
    ids_a, ids_b = torch.tensor([0, 2, 4, 6, 8, 10, 11]), torch.tensor([1, 3, 5, 7, 9])
    e = torch.cat([ids_a[a], ids_b[b]], 1)
    pe, ev, mask = laplacian_pe(e, 12, 3, per_component=True, return_eigenvalues=True)
    assert ev.shape == (2, 3) and mask.all()
    torch.testing.assert_close(pe[ids_a], laplacian_pe(a, 7, 3), atol=1e-6, rtol=0)
    torch.testing.assert_close(pe[ids_b], laplacian_pe(b, 5, 3), atol=1e-6, rtol=0)
    # without it, a disconnected graph keeps the second zero eigenvalue (as PyG)
    whole_ev = laplacian_pe(e, 12, 3, return_eigenvalues=True)[1]
    assert abs(float(whole_ev[0, 0])) < 1e-6


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"edge_index": torch.tensor([[0, 5], [5, 0]])}, ValueError, "num_nodes=5"),
        ({"edge_index": torch.tensor([[0, -1], [1, 0]])}, ValueError, "names node -1; node ids must be in 0..4"),
        ({"edge_index": torch.tensor([[0.0, 1.0], [1.0, 0.0]])}, TypeError, "integer"),
        ({"edge_index": torch.tensor([0, 1, 1, 0])}, ValueError, r"\[2, E\]"),
        ({"edge_weight": torch.tensor([1.0, -1.0])}, ValueError, r"edge_weight\[1\] = -1.0 .* must be >= 0"),
        ({"edge_weight": torch.tensor([1.0, float("nan")])}, ValueError, "finite"),
        ({"edge_weight": torch.tensor([1.0, float("inf")])}, ValueError, "finite"),
        ({"edge_weight": torch.tensor([1.0])}, ValueError, "shape"),
        ({"batch": torch.tensor([0, 0, 1, 1])}, ValueError, "num_nodes"),
        ({"batch": torch.tensor([0, 1, 1, 1, 1])}, ValueError, "joins graph 0 to graph 1"),
        ({"batch": torch.tensor([1, 1, 0, 0, 0])}, ValueError, "non-decreasing"),
        ({"batch": torch.tensor([0.0, 0, 0, 0, 0])}, TypeError, "integer"),
        ({"k": 0}, ValueError, "k must be >= 1"),
        ({"k": 2.0}, TypeError, "k must be an int"),
        ({"normalization": "random-walk"}, ValueError, "normalization"),
        ({"sign": "positive"}, ValueError, "sign"),
    ],
)
def test_bad_input(kwargs, error, match):
    arguments = {"edge_index": torch.tensor([[0, 1], [1, 0]]), "num_nodes": 5, "k": 2}
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        laplacian_pe(**arguments)


@pytest.mark.gpu
def test_cpu_and_gpu_agree_with_canonical_sign(graph_factory, adjacency):
    graphs = [connected_graph_with_distinct_spectrum(graph_factory, n, n, adjacency) for n in (12, 20, 12, 33)]
    sizes = [12, 20, 12, 33]
    offsets = np.cumsum([0] + sizes[:-1])
    e = torch.cat([g + o for g, o in zip(graphs, offsets)], 1)
    batch = torch.repeat_interleave(torch.arange(4), torch.tensor(sizes))
    cpu = laplacian_pe(e, sum(sizes), 6, batch=batch)
    gpu = laplacian_pe(e.cuda(), sum(sizes), 6, batch=batch.cuda())
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-5, rtol=0)
    from omnipos.graph import random_walk_pe

    torch.testing.assert_close(random_walk_pe(e.cuda(), sum(sizes), 8, batch=batch.cuda()).cpu(),
                               random_walk_pe(e, sum(sizes), 8, batch=batch), atol=1e-6, rtol=0)


# --- issue 14: the same graph gives the same bits alone, in any batch, run to run, on either path -------------------


def test_identical_disconnected_graphs_in_one_batch_get_identical_encodings():
    b = torch.tensor([[0, 0], [2, 4]])  # 5 nodes: a path 2-0-4 and two isolated nodes (eigenvalue 1, three times)
    pe = laplacian_pe(torch.cat([b, b + 5], 1), 10, 2, batch=torch.tensor([0] * 5 + [1] * 5))
    assert torch.equal(pe[:5], pe[5:])
    assert torch.equal(pe[:5], laplacian_pe(b, 5, 2))
    # the canonical basis of the 3-dimensional eigenspace of 1: the isolated nodes' unit vectors first (P_ii = 1)
    expected = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    torch.testing.assert_close(pe[:5], expected, atol=1e-7, rtol=0)


def disjoint_copies(e: torch.Tensor, n: int, copies: int) -> torch.Tensor:
    return torch.cat([e + n * c for c in range(copies)], 1)


def test_sparse_path_is_repeatable_and_equals_the_dense_path_on_disjoint_triangles():
    triangle = torch.tensor([[0, 1, 1, 2, 2, 0], [1, 0, 2, 1, 0, 2]])
    e = disjoint_copies(triangle, 3, 200)  # 600 nodes > DENSE_MAX_NODES: sparse path by default
    runs = [laplacian_pe(e, 600, 4, return_eigenvalues=True) for _ in range(3)]
    assert all(torch.equal(r[0], runs[0][0]) and torch.equal(r[1], runs[0][1]) for r in runs)
    dense = laplacian_pe(e, 600, 4, dense_max_nodes=600, return_eigenvalues=True)
    torch.testing.assert_close(runs[0][1], dense[1], atol=1e-7, rtol=0)
    torch.testing.assert_close(runs[0][0], dense[0], atol=1e-7, rtol=0)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 14), st.integers(0, 12), st.integers(0, 10_000), st.booleans()),
                min_size=1, max_size=6),
       st.integers(0, 5))
def test_batch_invariance_bit_for_bit(graph_factory, specs, position):
    """Any graph gives the same bits alone and at any place in a batch of other graphs (repeated eigenvalues
    included: symmetric random trees and disconnected graphs are common here)."""
    graphs = [graph_factory(n, extra, seed, connected=connected) for n, extra, seed, connected in specs]
    sizes = [n for n, *_ in specs]
    offsets = np.cumsum([0] + sizes[:-1])
    e = torch.cat([g + int(o) for g, o in zip(graphs, offsets)], 1)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    for sign in ("canonical", "none"):
        if sign == "none" and len(sizes) > 1:
            continue
        pe, values, mask = laplacian_pe(e, sum(sizes), 5, batch=batch, return_eigenvalues=True, sign=sign)
        i = position % len(sizes)
        alone, alone_values, _ = laplacian_pe(graphs[i], sizes[i], 5, return_eigenvalues=True, sign=sign)
        o, n = int(offsets[i]), sizes[i]
        assert torch.equal(pe[o:o + n], alone)
        assert torch.equal(values[i], alone_values[0])
        assert torch.equal(pe, laplacian_pe(e, sum(sizes), 5, batch=batch, sign=sign))  # run to run


@settings(max_examples=12, deadline=None)
@given(st.integers(2, 5), st.integers(8, 30), st.integers(0, 1000), st.sampled_from(["sym", "rw", None]))
def test_dense_and_sparse_paths_agree_with_repeated_spectra(graph_factory, copies, n, seed, normalization):
    """Identical components repeat every eigenvalue `copies` times; both paths give the same canonical vectors."""
    e = disjoint_copies(graph_factory(n, n // 3, seed), n, copies)
    total = n * copies
    dense, dense_values, _ = laplacian_pe(e, total, 6, normalization=normalization, return_eigenvalues=True)
    sparse, sparse_values, _ = laplacian_pe(e, total, 6, normalization=normalization, return_eigenvalues=True,
                                            dense_max_nodes=n - 1)
    torch.testing.assert_close(sparse_values, dense_values, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(sparse, dense, atol=1e-6, rtol=0)


def test_canonical_basis_is_the_documented_one(graph_factory, adjacency, reference_basis):
    """laplacian_pe's columns equal the definition applied to NumPy's own eigenvectors (repeated spectrum)."""
    e = disjoint_copies(graph_factory(7, 3, 4), 7, 3)
    lap = numpy_laplacian(adjacency(e, 21), "sym")
    values, vectors = np.linalg.eigh(lap)
    expected = reference_basis(vectors, values, 6)[:, 1:]
    np.testing.assert_allclose(laplacian_pe(e, 21, 5).double().numpy(), expected, atol=1e-6)


# --- the sparse path's solvers against dense float64 ----------------------------------------------------------------


@pytest.mark.parametrize("solver", ["auto", "shift-invert", "lobpcg", "lanczos"])
@pytest.mark.parametrize("normalization", ["sym", "rw", None])
def test_large_graph_solvers_match_dense_reference(graph_factory, adjacency, solver, normalization):
    n = 220
    parts = [graph_factory(150, 60, 1), graph_factory(40, 10, 2), graph_factory(30, 5, 3)]  # three components
    e = torch.cat([parts[0], parts[1] + 150, parts[2] + 190], 1)
    half = torch.rand(e.shape[1] // 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 0.5
    e = torch.cat([e[:, e[0] < e[1]], e[:, e[0] < e[1]].flip(0)], 1)
    weight = torch.cat([half, half])  # the same weight both ways
    lap = numpy_laplacian(adjacency(e, n, weight), normalization)
    pe, values, _ = laplacian_pe(e, n, 6, edge_weight=weight, normalization=normalization, return_eigenvalues=True,
                                 dense_max_nodes=100, solver=solver)
    expected = np.sort(np.linalg.eigvals(lap).real)[1:7]
    np.testing.assert_allclose(values[0].double().numpy(), expected, atol=1e-7, rtol=1e-7)
    ours = pe.double().numpy()
    # Lanczos runs in single precision (as PyG): residual ~1e-6, vectors ~1e-6 / gap (module docstring)
    atol = 5e-5 if solver in ("lanczos", "auto") else 1e-6
    np.testing.assert_allclose(lap @ ours, ours * values[0].double().numpy(), atol=max(atol, 1e-5))
    dense = laplacian_pe(e, n, 6, edge_weight=weight, normalization=normalization)
    torch.testing.assert_close(pe, dense, atol=atol, rtol=0)


# --- no process-global side effects, and bad input ------------------------------------------------------------------


def test_does_not_touch_torchs_thread_count(monkeypatch, graph_factory):
    def refuse(*_):
        raise AssertionError("laplacian_pe changed torch's process-global thread count")

    monkeypatch.setattr(torch, "set_num_threads", refuse)
    e = graph_factory(30, 20, 0)
    laplacian_pe(e, 30, 4)
    laplacian_pe(e, 30, 4, dense_max_nodes=10)


def test_works_from_many_threads_at_once(graph_factory):
    from concurrent.futures import ThreadPoolExecutor

    graphs = [(graph_factory(n, n, n), n) for n in range(5, 25)]
    expected = [laplacian_pe(e, n, 3) for e, n in graphs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda item: laplacian_pe(item[0], item[1], 3), graphs))
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"edge_index": torch.tensor([[0, 1], [1, 0]], device="meta")}, ValueError, "edge_index is on the meta"),
        ({"batch": torch.zeros(5, dtype=torch.long, device="meta")}, ValueError, "batch is on the meta"),
        ({"edge_weight": torch.ones(2, device="meta")}, ValueError, "edge_weight is on the meta"),
        ({"k": 2 ** 40}, ValueError, "k=1099511627776 asks for"),
        ({"batch": torch.tensor([0, 0, 0, 0, 2 ** 40])}, ValueError, "at most 1073741824 graphs"),
        ({"solver": "eigsh"}, ValueError, "solver must be one of"),
        ({"generator": 3}, TypeError, "generator must be a torch.Generator"),
        ({"edge_index": torch.tensor([[0, 1], [1, 7]])}, ValueError, r"edge_index\[:, 1\] = \(1, 7\)"),
    ],
)
def test_more_bad_input(kwargs, error, match):
    arguments = {"edge_index": torch.tensor([[0, 1], [1, 0]]), "num_nodes": 5, "k": 2}
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        laplacian_pe(**arguments)


def test_graph_too_large_for_the_dense_path():
    batch = torch.tensor([0, 0] + [1] * 12_000)
    with pytest.raises(ValueError, match=r"graph 1 has 12,000 nodes.*lower dense_max_nodes=20000"):
        laplacian_pe(torch.tensor([[0], [1]]), 12_002, 2, batch=batch, dense_max_nodes=20_000)


def test_extreme_weights_stay_finite(graph_factory):
    e = graph_factory(12, 8, 1)
    base = laplacian_pe(e, 12, 4)
    for scale in (1e-300, 1e300):
        weight = torch.full((e.shape[1],), scale, dtype=torch.float64)
        torch.testing.assert_close(laplacian_pe(e, 12, 4, edge_weight=weight), base, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="overflow float32"):
        laplacian_pe(e, 12, 4, edge_weight=torch.full((e.shape[1],), 1e300, dtype=torch.float64),
                     normalization=None)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=6), st.integers(0, 60), st.integers(0, 10_000))
def test_dense_path_builds_max_symmetrised_laplacians(sizes, edges, seed):
    """The dense path's [G, n, n] matrices from a directed, weighted edge list with duplicates and self-loops:
    duplicates summed, then max(A, A^T) (only at edge positions: the rest must stay 0), then the Laplacian;
    against NumPy written from the definitions, and dense_laplacian(overwrite=True) equal bit for bit to the
    out-of-place form."""
    from omnipos.graph._input import check_graph, size_groups
    from omnipos.graph.laplacian import _symmetric_adjacency, dense_laplacian

    rng = np.random.default_rng(seed)
    sizes = np.array(sizes)
    ptr = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    owner = rng.integers(0, sizes.size, edges)
    row = ptr[owner] + (rng.random(edges) * sizes[owner]).astype(int)
    col = ptr[owner] + (rng.random(edges) * sizes[owner]).astype(int)
    weight = rng.choice([0.0, 0.5, 1.0, 3.0], edges)
    batch = torch.repeat_interleave(torch.arange(sizes.size), torch.from_numpy(sizes))
    g = check_graph(torch.from_numpy(np.stack([row, col])), int(sizes.sum()), batch, torch.from_numpy(weight))
    for group in size_groups(g, keep=g.edge_index[0] != g.edge_index[1]):
        adjacency = _symmetric_adjacency(group)
        for slot, graph in enumerate(group.graphs.tolist()):
            lo, n = ptr[graph], group.n
            mine = (owner == graph) & (row != col)
            expected = np.zeros((n, n))
            np.add.at(expected, (row[mine] - lo, col[mine] - lo), weight[mine])
            np.testing.assert_array_equal(adjacency[slot].numpy(), np.maximum(expected, expected.T))
        for normalization in ("sym", "rw", None):
            laplacian, scale = dense_laplacian(adjacency, normalization)
            again, scale_again = dense_laplacian(adjacency.clone(), normalization, overwrite=True)
            assert torch.equal(laplacian, again) and torch.equal(scale, scale_again)
            # ("rw": dense_laplacian gives the symmetric matrix that shares its eigenvalues)
            kind = "sym" if normalization == "rw" else normalization
            reference = np.stack([numpy_laplacian(a.copy(), kind) for a in adjacency.numpy()])
            np.testing.assert_allclose(laplacian.numpy(), reference, atol=1e-15, rtol=0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=25), st.integers(0, 150), st.integers(0, 10_000),
       st.booleans())
def test_edges_by_graph_size_is_the_stable_sort(counts, edges, seed, collated):
    """The edge order size_groups uses equals torch's stable argsort by graph size, both where the edges come
    graph by graph (PyG's collation: the fast path) and where they do not."""
    from omnipos.graph._input import _edges_by_graph_size

    counts = torch.tensor(counts)
    edge_graph = torch.from_numpy(np.random.default_rng(seed).integers(0, counts.numel(), edges))
    if collated:
        edge_graph = edge_graph.sort().values
    graph_order = torch.argsort(counts, stable=True)
    expected = torch.from_numpy(np.argsort(counts.numpy()[edge_graph.numpy()], kind="stable"))
    assert torch.equal(_edges_by_graph_size(edge_graph, graph_order, counts), expected)


def test_laplacian_pe_checks_a_cpu_batch_on_one_thread(monkeypatch):
    """The input checks and the output allocation of a CPU call are a few element-wise passes: they run with torch
    limited to one thread in the calling thread (with torch's team their CPU time was 5x, its threads spinning
    between the ops), and the caller's thread count is left as it was."""
    from omnipos.graph import laplacian as module

    seen = []
    check = module.check_graph
    zeros = torch.zeros

    def spy_check(*args, **kwargs):
        seen.append(("check", torch.get_num_threads()))
        return check(*args, **kwargs)

    def spy_zeros(*args, **kwargs):
        seen.append(("zeros", torch.get_num_threads()))
        return zeros(*args, **kwargs)

    monkeypatch.setattr(module, "check_graph", spy_check)
    monkeypatch.setattr(module.torch, "zeros", spy_zeros)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        edge_index = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
        module.laplacian_pe(edge_index, 5, 2, batch=torch.tensor([0, 0, 0, 1, 1]))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert ("check", 1) in seen and all(threads == 1 for kind, threads in seen if kind in ("check", "zeros"))
