"""The device eigensolver for one large graph (omnipos.graph.eigensolvers.device_krylov), run here on CPU tensors
(the same code runs on CUDA; the gpu-marked test at the end runs it there): its Laplacian against the CPU path's
SciPy one, its eigenpairs against SciPy's float64 ``eigsh`` and dense ``eigh``, and ``laplacian_pe`` through it
against the CPU path (eigenspaces compared through their canonical bases, so repeated eigenvalues compare too)."""

import contextlib

import numpy as np
import pytest
import torch
from scipy.sparse import identity
from scipy.sparse.linalg import eigsh

import omnipos.graph.laplacian as laplacian_module
from omnipos.graph import canonical_basis, laplacian_pe
from omnipos.graph.eigensolvers import device_krylov
from omnipos.graph.eigensolvers.device_krylov import device_eigenpairs, device_laplacian
from omnipos.graph.laplacian import sparse_laplacian


def barabasi_albert(n: int, m: int = 3, seed: int = 0) -> torch.Tensor:
    """Preferential attachment (each new node links to m distinct earlier nodes drawn by degree), both directions."""
    rng = np.random.default_rng(seed)
    ends = list(range(m))
    pairs = []
    targets = list(range(m))
    for v in range(m, n):
        pairs += [(v, t) for t in targets]
        ends += targets + [v] * m
        chosen: set[int] = set()
        while len(chosen) < m:
            chosen.add(ends[int(rng.integers(len(ends)))])
        targets = sorted(chosen)
    e = torch.tensor(pairs, dtype=torch.long).T
    return torch.cat([e, e.flip(0)], 1)


def ring_chords(n: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n])
    chords = rng.integers(0, n, (2, n // 10))
    e = torch.from_numpy(np.concatenate([ring, chords[:, chords[0] != chords[1]]], 1))
    return torch.cat([e, e.flip(0)], 1)


def grid(side: int) -> torch.Tensor:
    ids = np.arange(side * side).reshape(side, side)
    e = torch.from_numpy(np.concatenate([np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()]),
                                         np.stack([ids[:-1].ravel(), ids[1:].ravel()])], 1))
    return torch.cat([e, e.flip(0)], 1)


def spider(arms: int, length: int) -> torch.Tensor:
    """A hub with ``arms`` paths of ``length`` nodes: eigenvalues of multiplicity ``arms - 1`` (more than the
    starting block of 4 for 6 arms)."""
    pairs = []
    for a in range(arms):
        first = 1 + a * length
        pairs.append((0, first))
        pairs += [(first + i, first + i + 1) for i in range(length - 1)]
    e = torch.tensor(pairs, dtype=torch.long).T
    return torch.cat([e, e.flip(0)], 1)


class DevicePath:
    """laplacian_pe's large graphs on CPU tensors through the device solver inside ``with path.on():``;
    ``calls`` records whether each call of the device solver solved (True) or declined (False)."""

    def __init__(self, monkeypatch):
        self.calls = []
        self._patch = monkeypatch
        real = laplacian_module.device_eigenpairs

        def spy(*args, **kwargs):
            found = real(*args, **kwargs)
            self.calls.append(found is not None)
            return found

        monkeypatch.setattr(laplacian_module, "device_eigenpairs", spy)

    @contextlib.contextmanager
    def on(self):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(laplacian_module, "_DEVICE_SOLVER_TYPES", ("cpu",))
            yield


@pytest.fixture
def path(monkeypatch):
    return DevicePath(monkeypatch)


def scipy_laplacian(edge_index, n, weight, normalization):
    w = np.ones(edge_index.shape[1]) if weight is None else weight.numpy()
    return sparse_laplacian(edge_index[0].numpy(), edge_index[1].numpy(), w, n, normalization)


@pytest.mark.parametrize("normalization", ["sym", "rw", None])
def test_laplacian_matches_the_cpu_path(normalization):
    # self-loops, duplicate edges (summed), one direction only, both directions with different weights (max),
    # a zero-weight edge (dropped), an isolated node
    edges = torch.tensor([[0, 1, 1, 2, 3, 3, 4, 5, 2, 6, 0], [1, 0, 0, 3, 2, 3, 5, 4, 4, 2, 0]])
    weight = torch.tensor([1.0, 0.5, 0.25, 2.0, 3.0, 7.0, 1.5, 0.0, 0.75, 0.0, 4.0], dtype=torch.float64)
    n = 8
    matrix, degree, null_weight, bound = device_laplacian(edges[0], edges[1], weight, n, normalization)
    want, want_degree, want_null = scipy_laplacian(edges, n, weight, normalization)
    assert matrix.layout == torch.sparse_csr
    np.testing.assert_array_equal(matrix.crow_indices().numpy(), want.indptr)
    np.testing.assert_array_equal(matrix.col_indices().numpy(), want.indices)
    np.testing.assert_allclose(matrix.values().numpy(), want.data, rtol=1e-15, atol=0)
    np.testing.assert_array_equal(degree.numpy(), want_degree)
    np.testing.assert_allclose(null_weight.numpy(), want_null, rtol=1e-15)
    assert bound == laplacian_module._spectrum_bound(normalization, float(want_degree.max()))
    shifted = device_laplacian(edges[0], edges[1], weight, n, normalization, shifted=True)[0]
    np.testing.assert_allclose(shifted.to_dense().numpy(), bound * np.eye(n) - want.toarray(), rtol=0, atol=1e-15)


def test_barabasi_albert_against_eigsh():
    n, count = 10_000, 9
    edges = barabasi_albert(n)
    values, vectors, _ = device_eigenpairs(edges[0], edges[1], torch.ones(edges.shape[1], dtype=torch.float64), n,
                                           count, "sym")
    lap, _, _ = scipy_laplacian(edges, n, None, "sym")
    # independent reference: SciPy's float64 ARPACK on 2I - L (largest), tight tolerance
    ref_values, ref_vectors = eigsh(2 * identity(n) - lap, k=count + 2, which="LA", tol=1e-13,
                                              v0=np.ones(n))
    ref_values, ref_vectors = 2 - ref_values[::-1], ref_vectors[:, ::-1].copy()
    np.testing.assert_allclose(values.numpy(), ref_values[:count], rtol=1e-8, atol=1e-12)
    residual = np.linalg.norm(lap @ vectors.numpy() - vectors.numpy() * values.numpy(), axis=0)
    assert residual.max() < 1e-9
    np.testing.assert_allclose(vectors.T @ vectors, np.eye(count), atol=1e-12)
    ref_basis = canonical_basis(torch.from_numpy(ref_vectors), torch.from_numpy(ref_values), count, scale=2.0)
    np.testing.assert_allclose(vectors.numpy(), ref_basis.numpy(), atol=1e-6)


def test_repeated_eigenvalues_grow_the_block():
    # 6 arms: the eigenvalues of the arms' antisymmetric modes have multiplicity 5 > the starting block (4)
    edges = spider(6, 100)
    n, count = edges.max().item() + 1, 12
    values, vectors, _ = device_eigenpairs(edges[0], edges[1], torch.ones(edges.shape[1], dtype=torch.float64), n,
                                           count, None)
    lap, _, _ = scipy_laplacian(edges, n, None, None)
    ref_values, ref_vectors = np.linalg.eigh(lap.toarray())
    assert np.sum(np.abs(ref_values[:count] - ref_values[1]) < 1e-8) == 5  # the premise: a 5-fold eigenvalue
    np.testing.assert_allclose(values.numpy(), ref_values[:count], rtol=1e-8, atol=1e-12)
    ref_basis = canonical_basis(torch.from_numpy(ref_vectors[:, :count + 6]),
                                torch.from_numpy(ref_values[:count + 6]), count, scale=2 * 3.0)
    np.testing.assert_allclose(vectors.numpy(), ref_basis.numpy(), atol=1e-6)


@pytest.mark.parametrize("normalization", ["sym", None])
def test_krylov_breakdown_is_survived(normalization):
    # a broom (a 40-node path ending in 600 leaves): the leaves' eigenvalue has 599 copies, so the Krylov space of
    # a random block has only ~45 dimensions and breaks down (an invariant subspace) while the lowest eigenvalues,
    # all simple, are still being found; the second Gram-Schmidt pass turns the noise left into fresh directions.
    # (Before that guard: "sym" reached residual 0.3, eigenvalues off by 0.07.)
    edges = torch.tensor([(i, i + 1) for i in range(39)] + [(39, 40 + j) for j in range(600)]).T
    edges = torch.cat([edges, edges.flip(0)], 1)
    n, weight = 640, torch.ones(edges.shape[1], dtype=torch.float64)
    values, vectors, _ = device_eigenpairs(edges[0], edges[1], weight, n, 6, normalization)
    lap, _, _, bound = device_laplacian(edges[0], edges[1], weight, n, normalization)
    ref_values, ref_vectors = torch.linalg.eigh(lap.to_dense())
    torch.testing.assert_close(values, ref_values[:6], rtol=1e-8, atol=1e-12)
    ref_basis = canonical_basis(ref_vectors[:, :10], ref_values[:10], 6, scale=bound)
    torch.testing.assert_close(vectors, ref_basis, rtol=0, atol=1e-9)


@pytest.mark.parametrize("normalization", ["sym", "rw", None])
@pytest.mark.parametrize("weighted", [False, True])
def test_laplacian_pe_ring_chords_matches_the_cpu_path(path, normalization, weighted):
    n = 2_000
    edges = ring_chords(n)
    weight = None
    if weighted:  # the two directions with different weights: A <- max(A, A^T) on both paths
        weight = torch.from_numpy(np.random.default_rng(1).uniform(0.5, 3.0, edges.shape[1]))
    want = laplacian_pe(edges, n, 8, edge_weight=weight, normalization=normalization, return_eigenvalues=True)
    assert not path.calls  # the CPU path above (CPU tensors)
    with path.on():
        got = laplacian_pe(edges, n, 8, edge_weight=weight, normalization=normalization, return_eigenvalues=True)
    assert path.calls == [True]  # the device solver, here on the CPU
    torch.testing.assert_close(got[1], want[1], rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=1e-6)
    assert torch.equal(got[2], want[2])


@pytest.mark.parametrize("normalization", ["sym", None])
def test_laplacian_pe_grid_canonical_bases_match(path, normalization):
    # a 2-D grid: eigenvalue pairs, compared through the canonical basis (the CPU path: block shift-invert)
    edges = grid(40)
    want = laplacian_pe(edges, 1600, 10, normalization=normalization, return_eigenvalues=True)
    with path.on():
        got = laplacian_pe(edges, 1600, 10, normalization=normalization, return_eigenvalues=True)
    assert path.calls == [True]
    values = want[1][0].double()
    assert (values[1:] - values[:-1]).abs().min() < 1e-6  # the premise: repeated eigenvalues among the columns
    torch.testing.assert_close(got[1], want[1], rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=1e-6)


def test_several_components_take_the_cpu_path(path):
    edges = torch.cat([ring_chords(900), ring_chords(700) + 900], 1)
    want = laplacian_pe(edges, 1600, 6, dense_max_nodes=100, return_eigenvalues=True)
    assert not path.calls
    with path.on():
        got = laplacian_pe(edges, 1600, 6, dense_max_nodes=100, return_eigenvalues=True)
    assert path.calls == [False]  # declined: two components
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_named_factorising_solvers_stay_on_the_cpu_path(path):
    # solver="shift-invert" / "lobpcg" name a CPU solver (a factorisation, AMG): not the device one
    edges = ring_chords(1_000)
    want = laplacian_pe(edges, 1_000, 4, solver="shift-invert")
    with path.on():
        got = laplacian_pe(edges, 1_000, 4, solver="shift-invert")
        laplacian_pe(edges, 1_000, 4, solver="lanczos")
    assert path.calls == [True]  # the "lanczos" call only
    assert torch.equal(got, want)


@pytest.mark.parametrize("shape", ["star", "complete bipartite"])
def test_huge_multiplicity_takes_the_cpu_path(path, shape):
    # an eigenvalue with hundreds of copies at the cut (its whole eigenspace is needed for the canonical basis):
    # the block Krylov space breaks down (an invariant subspace) and would need a basis of most of the graph; the
    # device solver declines and laplacian_pe's answer is the CPU path's, bit for bit
    if shape == "star":
        e = torch.stack([torch.zeros(600, dtype=torch.long), torch.arange(1, 601)])
    else:
        i, j = torch.meshgrid(torch.arange(200), torch.arange(200, 600), indexing="ij")
        e = torch.stack([i.reshape(-1), j.reshape(-1)])
    e = torch.cat([e, e.flip(0)], 1)
    n = int(e.max()) + 1
    want = laplacian_pe(e, n, 5, return_eigenvalues=True)
    with path.on():
        got = laplacian_pe(e, n, 5, return_eigenvalues=True)
    assert path.calls == [False]
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_progress_ticks_per_restart(path, monkeypatch):
    monkeypatch.setattr(device_krylov, "BASIS_BLOCKS", 3)  # a small basis: several restarts
    ticks = []
    with path.on():
        laplacian_pe(barabasi_albert(2_000), 2_000, 4, progress=lambda done, total: ticks.append(done))
    assert path.calls == [True]
    assert len(ticks) >= 3 and ticks == list(range(1, len(ticks) + 1))


def test_barabasi_albert_10k_laplacian_pe_matches_the_cpu_path(path):
    # the CPU path's "lanczos" solver runs ARPACK in single precision (residual ~1e-5): compare eigenvalues and
    # the eigenspaces (projections), not columns
    n = 10_000
    edges = barabasi_albert(n, seed=1)
    with path.on():
        got, values, _ = laplacian_pe(edges, n, 8, return_eigenvalues=True, sign="none")
    assert path.calls == [True]
    want, want_values, _ = laplacian_pe(edges, n, 8, return_eigenvalues=True, sign="none")
    torch.testing.assert_close(values, want_values, rtol=1e-5, atol=0)
    overlap = torch.linalg.svdvals(got.double().T @ want.double())
    assert float(overlap.min()) > 1 - 1e-4


@pytest.mark.gpu
def test_one_million_nodes_on_cuda():
    n = 1_000_000
    edges = barabasi_albert(n).cuda()
    pe, values, mask = laplacian_pe(edges, n, 8, return_eigenvalues=True)
    assert pe.is_cuda and bool(mask.all())
    lap, _, _ = scipy_laplacian(edges.cpu(), n, None, "sym")
    vectors, lam = pe.double().cpu().numpy(), values[0].double().cpu().numpy()
    residual = np.linalg.norm(lap @ vectors - vectors * lam, axis=0)
    assert residual.max() < 1e-6  # (float32 output)
    np.testing.assert_allclose(vectors.T @ vectors, np.eye(8), atol=1e-5)
    # 1e5 nodes: the CUDA answer against the CPU path's (eigenvalues; eigenspaces by their projections)
    n = 100_000
    edges = barabasi_albert(n, seed=2)
    cpu, cpu_values, _ = laplacian_pe(edges, n, 8, return_eigenvalues=True)
    gpu, gpu_values, _ = laplacian_pe(edges.cuda(), n, 8, return_eigenvalues=True)
    torch.testing.assert_close(gpu_values.cpu(), cpu_values, rtol=1e-5, atol=0)
    # (the CPU path's vectors are good to its residual, ~1e-5, over the gap to the eigenvalues past the cut, which
    # is small at 1e5 nodes: its first 6 columns, well inside the 8 the GPU found, lie in their span)
    inside = (gpu.double().cpu().T @ cpu.double()[:, :6]).norm(dim=0)
    assert float(inside.min()) > 1 - 1e-3
