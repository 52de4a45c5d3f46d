"""The large-graph eigensolvers against dense float64 NumPy, and the rules that pick one."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.graph import eigensolvers
from omnipos.graph.eigensolvers import graph_eigenpairs, rcm_envelope, sparse_eigenpairs
from omnipos.graph.laplacian import sparse_laplacian
from omnipos.graph.magnetic import sparse_magnetic_laplacian


def grid_edges(side: int) -> tuple[np.ndarray, np.ndarray]:
    index = np.arange(side * side).reshape(side, side)
    rows = np.concatenate([index[:, :-1].ravel(), index[:-1, :].ravel()])
    cols = np.concatenate([index[:, 1:].ravel(), index[1:, :].ravel()])
    return rows, cols


def hub_edges(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Preferential attachment, 3 edges per new node: hubs, a large spectral gap."""
    rng = np.random.default_rng(seed)
    rows, cols, ends = [], [], [0, 1, 2]
    for v in range(3, n):
        targets = set()
        while len(targets) < 3:
            targets.add(ends[rng.integers(len(ends))])
        for t in targets:
            rows.append(v)
            cols.append(t)
            ends += [v, t]
    return np.array(rows), np.array(cols)


def hypercube_edges(dim: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The d-cube: normalised-Laplacian eigenvalues 2j/d with multiplicity C(d, j)."""
    n = 2 ** dim
    nodes = np.arange(n)
    rows = np.concatenate([nodes] * dim)
    cols = np.concatenate([nodes ^ (1 << bit) for bit in range(dim)])
    keep = rows < cols
    return rows[keep], cols[keep], n


def symmetric_laplacian(rows, cols, n, weight=None):
    weight = np.ones(rows.size) if weight is None else weight
    lap, degree, null_weight = sparse_laplacian(np.concatenate([rows, cols]), np.concatenate([cols, rows]),
                                                np.concatenate([weight, weight]), n, "sym")
    return lap, null_weight


@pytest.mark.parametrize("solver,shape", [("shift-invert", "grid"), ("lobpcg", "grid"), ("shift-invert", "hubs"),
                                          ("lobpcg", "hubs"), ("lanczos", "hubs")])
def test_sparse_eigenpairs_match_dense(solver, shape):
    """(Single-vector Lanczos is not asked for the grid's repeated eigenvalues: the module docstring says it can
    miss copies; "auto" does not choose it for such graphs.)"""
    rows, cols = grid_edges(16) if shape == "grid" else hub_edges(300)
    n = 256 if shape == "grid" else 300
    lap, null_weight = symmetric_laplacian(rows, cols, n)
    null = null_weight / np.linalg.norm(null_weight)
    values, vectors, used = sparse_eigenpairs(lap, 7, null=null, solver=solver)
    assert used == solver and values.size >= 7
    expected = np.linalg.eigvalsh(lap.toarray())
    np.testing.assert_allclose(values[:7], expected[:7], atol=1e-9)
    residual = np.linalg.norm(lap @ vectors[:, :7] - vectors[:, :7] * values[:7], axis=0)
    assert residual.max() < (1e-4 if solver == "lanczos" else 1e-6)  # Lanczos runs in single precision
    np.testing.assert_allclose(vectors.T @ vectors, np.eye(values.size), atol=1e-10)
    # repeated eigenvalues (the grid's pairs) are found with their full multiplicity
    if shape == "grid":
        assert abs(values[1] - values[2]) < 1e-9


@pytest.mark.parametrize("solver", ["shift-invert", "lobpcg", "lanczos"])
def test_complex_hermitian(solver):
    rng = np.random.default_rng(3)
    n = 200
    rows, cols = rng.integers(0, n, 700), rng.integers(0, n, 700)
    lap, _ = sparse_magnetic_laplacian(rows, cols, np.ones(700), n, 0.25)
    dense = lap.toarray()
    expected = np.linalg.eigvalsh(dense)
    values, vectors, _ = graph_eigenpairs(lap, 5, null_weight=None, bound=2.0, dense_max_nodes=20, solver=solver)
    np.testing.assert_allclose(values, expected[:5], atol=1e-9)
    np.testing.assert_allclose(dense @ vectors, vectors * values, atol=1e-6)


def test_components_merge_to_the_canonical_basis_of_the_whole_graph(reference_basis):
    """Two identical components + a different one: eigenvalues repeat across components; the merged result is the
    canonical basis computed from the whole graph's dense eigenvectors."""
    rows, cols = grid_edges(6)
    parts = [(rows, cols), (rows + 36, cols + 36), (hub_edges(40, 1)[0] + 72, hub_edges(40, 1)[1] + 72)]
    rows = np.concatenate([p[0] for p in parts])
    cols = np.concatenate([p[1] for p in parts])
    n = 112
    lap, null_weight = symmetric_laplacian(rows, cols, n)
    values, vectors = np.linalg.eigh(lap.toarray())
    expected = reference_basis(vectors, values, 9, value_tol=1e-8 / 2)  # scale 2 = the spectrum bound
    for dense_max_nodes in (10, 40, 200):  # all sparse, mixed, all dense
        ours, basis, _ = graph_eigenpairs(lap, 9, null_weight=null_weight, bound=2.0,
                                          dense_max_nodes=dense_max_nodes)
        np.testing.assert_allclose(ours, values[:9], atol=1e-10)
        np.testing.assert_allclose(basis, expected, atol=1e-7)


def test_auto_choice_follows_the_measured_rules(monkeypatch):
    rows, cols = grid_edges(40)
    grid, grid_null = symmetric_laplacian(rows, cols, 1600)
    rows, cols = hub_edges(1600)
    hubs, hubs_null = symmetric_laplacian(rows, cols, 1600)
    rows, cols, n = hypercube_edges(9)
    cube, cube_null = symmetric_laplacian(rows, cols, n)
    normalise = lambda v: v / np.linalg.norm(v)  # noqa: E731
    # hubs: a large gap and no symmetry -> Lanczos at any size; a hypercube: a large gap but symmetric -> the block
    # solver; a grid: a small gap and a small factor -> shift-invert (in blocks: it is symmetric)
    assert eigensolvers.lanczos.probe_gap(hubs, normalise(hubs_null), 2.0) > 0.1
    assert eigensolvers.lanczos.probe_gap(grid, normalise(grid_null), 2.0) < 0.02
    assert not eigensolvers.symmetry_probe(hubs).symmetric
    assert eigensolvers.symmetry_probe(grid).symmetric and eigensolvers.symmetry_probe(cube).symmetric
    assert sparse_eigenpairs(hubs, 4, null=normalise(hubs_null))[2] == "lanczos"
    assert sparse_eigenpairs(cube, 4, null=normalise(cube_null))[2] == "lobpcg"
    assert sparse_eigenpairs(grid, 4, null=normalise(grid_null))[2] == "shift-invert"
    monkeypatch.setattr(eigensolvers.choice, "FILL_BUDGET", 1000)  # the factor would be too large: LOBPCG + AMG
    assert sparse_eigenpairs(grid, 4, null=normalise(grid_null))[2] == "lobpcg"


def test_rcm_envelope_of_a_path_and_a_star():
    n = 50
    path = sp.diags([np.ones(n - 1), np.ones(n - 1)], [-1, 1], format="csr")
    assert rcm_envelope(path) == 2 * n - 1  # bandwidth 1: one entry below the diagonal per row, plus the diagonal
    star = sp.coo_matrix((np.ones(2 * (n - 1)), (np.r_[np.zeros(n - 1), np.arange(1, n)],
                                                 np.r_[np.arange(1, n), np.zeros(n - 1)])), shape=(n, n)).tocsr()
    assert rcm_envelope(star) <= n * (n + 1) // 2


def test_deterministic_run_to_run():
    rows, cols = hub_edges(500, 2)
    lap, null_weight = symmetric_laplacian(rows, cols, 500)
    first = graph_eigenpairs(lap, 6, null_weight=null_weight, bound=2.0, dense_max_nodes=50)
    second = graph_eigenpairs(lap, 6, null_weight=null_weight, bound=2.0, dense_max_nodes=50)
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1])


def test_batched_eigh_threads_give_the_same_bits():
    stack = torch.randn(300, 12, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    stack = stack + stack.transpose(1, 2)
    one = eigensolvers.batched_eigh([stack], 1)[0]
    four = eigensolvers.batched_eigh([stack], 4)[0]
    assert torch.equal(one[0], four[0]) and torch.equal(one[1], four[1])


# --- repeated eigenvalues on the sparse path: every copy, whichever solver "auto" picks (issue 25) ---------------


def with_pendant_paths(rows, cols, n, anchor, copies, length):
    """``copies`` identical paths of ``length`` nodes hanging off ``anchor``: a symmetry without twins, which
    repeats low eigenvalues ``copies - 1`` times."""
    new_rows, new_cols = [rows], [cols]
    for _ in range(copies):
        path = np.arange(n, n + length)
        new_rows.append(np.r_[anchor, path[:-1]])
        new_cols.append(path)
        n += length
    return np.concatenate(new_rows), np.concatenate(new_cols), n


def with_star_twins(rows, cols, n, hubs, leaves):
    """``leaves`` degree-1 nodes on each of ``hubs``: false twins, eigenvalue 1 of the normalised Laplacian with
    multiplicity at least ``len(hubs) * (leaves - 1)``."""
    hub_of = np.repeat(np.asarray(hubs), leaves)
    return np.r_[rows, hub_of], np.r_[cols, n + np.arange(hub_of.size)], n + hub_of.size


def repeated_cases():
    rows, cols = hub_edges(300, 4)
    yield "hypercube", *hypercube_edges(8)
    yield "hubs + pendant paths", *with_pendant_paths(rows, cols, 300, 7, 3, 15)
    core_rows, core_cols = hub_edges(12, 5)
    yield "hubs + star twins", *with_star_twins(core_rows, core_cols, 12, [0, 3, 5], 8)
    yield "two copies of a hub graph", np.r_[rows, rows + 300], np.r_[cols, cols + 300], 600


@pytest.mark.parametrize("case", list(repeated_cases()), ids=lambda case: case[0])
def test_auto_keeps_every_copy_of_repeated_eigenvalues(case, reference_basis):
    """Graphs whose lowest eigenvalues repeat (a hypercube: 2/8 eight times; three identical paths on a hub; twin
    leaves; two copies of one graph), solved on the sparse path with the cut inside the largest repeated
    eigenspace: every copy is found and the canonical basis equals the one from dense float64 NumPy eigh. (Before
    issue 25, "auto" ran single-vector shift-invert on the hypercube and lost 3 of its 9 copies.)"""
    _, rows, cols, n = case
    lap, null_weight = symmetric_laplacian(rows, cols, n)
    values, vectors = np.linalg.eigh(lap.toarray())
    clusters = np.cumsum(np.r_[0, np.diff(values) > 1e-8 * 2])
    copies = np.bincount(clusters)
    repeated = int(np.flatnonzero((copies > 1) & (np.bincount(clusters, weights=values) > 1e-9))[0])
    assert repeated <= 12  # a repeated eigenspace among the lowest (the null space aside)
    count = int(np.searchsorted(clusters, repeated)) + 1 + (copies[repeated] > 2)  # cut inside that eigenspace
    ours, basis, used = graph_eigenpairs(lap, count, null_weight=null_weight, bound=2.0, dense_max_nodes=32)
    np.testing.assert_allclose(ours, values[:count], atol=1e-9)
    expected = reference_basis(vectors, values, count, value_tol=1e-8 / 2)  # scale 2 = the spectrum bound
    np.testing.assert_allclose(basis, expected, atol=5e-5 if "lanczos" in used else 1e-6)
    if case[0] != "two copies of a hub graph":  # (one component: its solver returns the whole eigenspace)
        null = null_weight / np.linalg.norm(null_weight)
        found, _, _ = sparse_eigenpairs(lap, count, null=null)
        assert np.sum(np.abs(found - values[np.searchsorted(clusters, repeated)]) < 1e-8) == copies[repeated]


def test_symmetry_probe_finds_twins_and_symmetries():
    rows, cols = hub_edges(200, 6)
    lap, _ = symmetric_laplacian(rows, cols, 200)
    assert not eigensolvers.symmetry_probe(lap).symmetric
    twin_rows, twin_cols, n = with_star_twins(rows, cols, 200, [3, 9], 4)
    probe = eigensolvers.symmetry_probe(symmetric_laplacian(twin_rows, twin_cols, n)[0])
    assert not probe.symmetric and np.array_equal(probe.twin_values, [1.0])  # twin leaves: L_uu = 1
    path_rows, path_cols, n = with_pendant_paths(rows, cols, 200, 3, 2, 5)
    assert eigensolvers.symmetry_probe(symmetric_laplacian(path_rows, path_cols, n)[0]).symmetric
    # a ring settles only after about n / 2 rounds: unsettled counts as symmetric
    ring = np.arange(200)
    ring_lap, _ = symmetric_laplacian(ring, (ring + 1) % 200, 200)
    assert eigensolvers.symmetry_probe(ring_lap, max_rounds=8).symmetric


def test_repeated_eigenvalues_keep_the_encoding_batch_invariant():
    """The hypercube alone and batched after a hub graph (each on the sparse path): the same bits."""
    from omnipos.graph import laplacian_pe

    rows, cols, n = hypercube_edges(8)
    cube = torch.from_numpy(np.stack([np.r_[rows, cols], np.r_[cols, rows]]))
    hub_rows, hub_cols = hub_edges(150, 2)
    hubs = torch.from_numpy(np.stack([np.r_[hub_rows, hub_cols], np.r_[hub_cols, hub_rows]]))
    alone = laplacian_pe(cube, n, 8, dense_max_nodes=32)
    batch = torch.repeat_interleave(torch.arange(2), torch.tensor([150, n]))
    both = laplacian_pe(torch.cat([hubs, cube + 150], 1), 150 + n, 8, batch=batch, dense_max_nodes=32)
    assert torch.equal(both[150:], alone)


@pytest.mark.parametrize("budget", [None, 400 * 24], ids=["krylov", "basis over budget: LOBPCG"])
def test_block_shift_invert_matches_dense_on_a_grid(budget, monkeypatch, reference_basis):
    """A square grid (eigenvalue pairs) through "auto"'s block shift-invert: the canonical basis of dense float64
    eigh, every copy of each pair; with a Krylov memory budget too small to converge in, the LOBPCG fallback
    gives the same."""
    if budget is not None:
        monkeypatch.setattr(eigensolvers.block_krylov, "KRYLOV_ELEMENTS", budget)
    rows, cols = grid_edges(20)
    lap, null_weight = symmetric_laplacian(rows, cols, 400)
    values, vectors = np.linalg.eigh(lap.toarray())
    calls = []
    original = eigensolvers.block_krylov.block_krylov_pairs

    def spy(*args, **kwargs):
        calls.append(original(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(eigensolvers.block_krylov, "block_krylov_pairs", spy)
    ours, basis, used = graph_eigenpairs(lap, 10, null_weight=null_weight, bound=2.0, dense_max_nodes=32)
    assert calls and (calls[-1] is None) == (budget is not None)
    assert used == ["shift-invert"]  # (the name of the family, whichever block solver finished)
    np.testing.assert_allclose(ours, values[:10], atol=1e-10)
    expected = reference_basis(vectors, values, 10, value_tol=1e-8 / 2)
    np.testing.assert_allclose(basis, expected, atol=1e-7)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), density=st.floats(0.0, 0.5), dtype=st.sampled_from(["f4", "f8", "c8", "c16"]),
       fmt=st.sampled_from(["csr", "csc"]), seed=st.integers(0, 2**31 - 1))
def test_matvec_equals_scipy_product(n, density, dtype, fmt, seed):
    """The ARPACK / probe product (SciPy's CSR kernel called directly) gives SciPy's own product bit for bit, on
    any shape, dtype and format (a non-CSR matrix takes the public product)."""
    rng = np.random.default_rng(seed)
    matrix = sp.random(n, n, density=density, format=fmt, random_state=rng, dtype=np.float64)
    if dtype.startswith("c"):
        matrix = matrix + 1j * sp.random(n, n, density=density, format=fmt, random_state=rng)
    matrix = matrix.astype(dtype).asformat(fmt)
    x = rng.standard_normal(n).astype(dtype)
    assert np.array_equal(eigensolvers.kernels.fast_matvec(matrix)(x), matrix @ x)


def _progress_graph(shape):
    if shape == "grid":
        rows, cols = grid_edges(20)
        n = 400
    else:
        rows, cols = hub_edges(400, 3)
        n = 400
    return torch.from_numpy(np.stack([np.r_[rows, cols], np.r_[cols, rows]])), n


@pytest.mark.parametrize("solver,shape", [("auto", "grid"), ("auto", "hubs"), ("shift-invert", "hubs"),
                                          ("lobpcg", "grid"), ("lanczos", "hubs")])
def test_progress_counts_solver_steps(solver, shape):
    """``progress=`` of laplacian_pe / magnetic_laplacian_pe: called once per solver step with done = 1, 2, 3, ...
    and total None; the encoding is the same bits with and without it."""
    from omnipos.graph import laplacian_pe, magnetic_laplacian_pe

    edge_index, n = _progress_graph(shape)
    for encode in (laplacian_pe, magnetic_laplacian_pe):
        calls = []
        quiet = encode(edge_index, n, 6, dense_max_nodes=32, solver=solver)
        watched = encode(edge_index, n, 6, dense_max_nodes=32, solver=solver,
                         progress=lambda done, total: calls.append((done, total)))
        assert torch.equal(quiet, watched)
        assert len(calls) >= 5, calls  # probes / factor and the iterations
        assert [c[0] for c in calls] == list(range(1, len(calls) + 1)) and {c[1] for c in calls} == {None}


def test_progress_true_writes_a_line_and_bad_values_are_refused(capsys):
    from omnipos.graph import laplacian_pe, magnetic_laplacian_pe

    edge_index, n = _progress_graph("grid")
    laplacian_pe(edge_index, n, 4, dense_max_nodes=32, progress=True)
    assert "laplacian_pe: " in capsys.readouterr().err
    for encode in (laplacian_pe, magnetic_laplacian_pe):
        with pytest.raises(TypeError, match="progress must be True, False or a callable"):
            encode(edge_index, n, 4, dense_max_nodes=32, progress="yes")


def test_sparse_path_leaves_thread_settings_alone():
    """The sparse path runs its small ops on one thread (omnipos.graph.small_eigh.one_thread) and restores the
    caller's torch thread count; the result does not depend on it."""
    from omnipos.graph import laplacian_pe

    edge_index, n = _progress_graph("grid")
    before = torch.get_num_threads()
    first = laplacian_pe(edge_index, n, 6, dense_max_nodes=32)
    assert torch.get_num_threads() == before
    torch.set_num_threads(1)
    try:
        assert torch.equal(laplacian_pe(edge_index, n, 6, dense_max_nodes=32), first)
    finally:
        torch.set_num_threads(before)


def test_lobpcg_with_amg_is_the_same_run_to_run_and_leaves_numpys_global_stream_alone():
    """pyamg draws from NumPy's legacy global random state: omnipos seeds it for the hierarchy's build and puts
    the caller's state back, so the LOBPCG + AMG encoding is the same bits every call and the caller's next draw
    is what it would have been."""
    pytest.importorskip("pyamg")
    from omnipos.graph import laplacian_pe

    edge_index, n = _progress_graph("grid")
    np.random.seed(1234)
    first = laplacian_pe(edge_index, n, 6, dense_max_nodes=32, solver="lobpcg")
    after_call = np.random.rand(3)
    np.random.seed(1234)
    expected_draw = np.random.rand(3)
    np.random.seed(99)  # another caller state: the encoding must not depend on it
    second = laplacian_pe(edge_index, n, 6, dense_max_nodes=32, solver="lobpcg")
    assert torch.equal(first, second)
    assert np.array_equal(after_call, expected_draw)


def test_matvec_falls_back_to_the_public_product_when_scipys_private_kernel_changes(monkeypatch):
    """A SciPy whose private CSR kernel takes other arguments: the product is SciPy's public one (the check
    against the public product's value cannot be staged here: SciPy's own product calls the same kernel)."""
    import scipy.sparse as sp
    import scipy.sparse._sparsetools as sparsetools

    def changed(*args):
        raise TypeError("csr_matvec() takes 6 arguments")

    matrix = sp.random(50, 50, density=0.1, format="csr", random_state=np.random.default_rng(3))
    x = np.random.default_rng(4).standard_normal(50)
    expected = matrix @ x
    with monkeypatch.context() as patch:
        patch.setattr(sparsetools, "csr_matvec", changed)
        product = eigensolvers.kernels.fast_matvec(matrix)
    assert np.array_equal(product(x), expected)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), size=st.integers(0, 60), complex_=st.booleans())
def test_value_keys_partition_entries_as_unique_does(seed, size, complex_):
    """The symmetry probe's edge keys (mixed bit patterns) are equal exactly where NumPy's ``unique`` ids are:
    repeated values, +0.0 and -0.0, values one ulp apart, complex parts swapped."""
    rng = np.random.default_rng(seed)
    pool = np.array([0.0, -0.0, 1.0, np.nextafter(1.0, 2.0), -0.5, 0.25, 1e-300, -1e300])
    values = rng.choice(pool, size) * rng.choice([1.0, -1.0], size)
    if complex_:
        values = values + 1j * rng.choice(pool, size)
        values[: size // 3] = values[: size // 3].imag + 1j * values[: size // 3].real
    _, ids = np.unique(values, return_inverse=True)
    keys = eigensolvers.probe.value_keys(values)
    assert np.array_equal(ids.ravel()[:, None] == ids.ravel()[None, :], keys[:, None] == keys[None, :])


@pytest.mark.parametrize("complex_", [False, True])
def test_one_large_component_takes_canonical_basis(monkeypatch, reference_basis, complex_):
    """A graph of one large component gets its canonical basis from canonical_basis, the one entry point (its
    tensor program: one graph's basis does not repay loading numba), equal to the definition applied to the whole
    graph's dense eigenvectors. (It had a NumPy copy of the algorithm, canonical_one: this failed before.)"""
    from omnipos.graph import sign as sign_module

    entered, taken = [], []
    compiled, entry = sign_module._compiled, eigensolvers.components.canonical_basis

    def spy():
        kernel = compiled()
        return None if kernel is None else lambda w, *args: taken.append(w.dtype) or kernel(w, *args)

    monkeypatch.setattr(sign_module, "_compiled", spy)
    def entry_spy(vectors, *args, **kwargs):
        entered.append(vectors.dtype)
        return entry(vectors, *args, **kwargs)

    monkeypatch.setattr(eigensolvers.components, "canonical_basis", entry_spy)
    rows, cols = grid_edges(12)
    if complex_:
        lap, _ = sparse_magnetic_laplacian(rows, cols, np.ones(rows.size), 144, 0.25)
        null_weight = None
    else:
        lap, null_weight = symmetric_laplacian(rows, cols, 144)
    values, basis, _ = graph_eigenpairs(lap, 7, null_weight=null_weight, bound=2.0, dense_max_nodes=20)
    assert entered == [torch.complex128 if complex_ else torch.float64]
    assert taken == []
    dense_values, dense_vectors = np.linalg.eigh(lap.toarray())
    np.testing.assert_allclose(values, dense_values[:7], atol=1e-10)
    np.testing.assert_allclose(basis, reference_basis(dense_vectors, dense_values, 7, value_tol=1e-8 / 2), atol=1e-7)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), size=st.integers(0, 30))
def test_clusters_equal_eigenvalue_clusters(seed, size):
    from omnipos.graph.sign import eigenvalue_clusters

    rng = np.random.default_rng(seed)
    values = np.sort(np.concatenate([rng.uniform(0, 2, size), rng.uniform(0, 2, size // 3)]))
    values[1::4] = values[0::4][:values[1::4].size] + rng.choice([0.0, 1e-9, 1e-7], values[1::4].size)
    values = np.sort(values)
    assert np.array_equal(eigensolvers.kernels.value_clusters(values, 2.0),
                          eigenvalue_clusters(torch.from_numpy(values), scale=2.0).numpy())


def test_shifted_equals_scipys_subtraction():
    """``bound I - L`` built in place of SciPy's sparse subtraction: the same entries, on a Laplacian (every
    diagonal entry stored) and on a matrix with diagonal entries missing (SciPy's subtraction then)."""
    rng = np.random.default_rng(3)
    rows, cols = hub_edges(120, 4)
    lap, _ = symmetric_laplacian(rows, cols, 120, rng.uniform(0.1, 3.0, rows.size))
    holes = sp.csr_matrix(lap.toarray() * (rng.random((120, 120)) < 0.5))
    for matrix in (lap, holes, lap.astype(np.complex128) * np.exp(0.3j)):
        expected = (2.0 * sp.identity(120, format="csr") - matrix).toarray()
        assert np.array_equal(eigensolvers.lanczos.bound_minus_lap(matrix, 2.0).toarray(), expected)


def test_a_large_graph_does_not_load_numba():
    """A fresh process's LapPE of one large graph never imports numba: its canonical basis is the tensor program,
    ~1 ms, where loading numba's kernels costs ~0.2 s of the first call (issue 38's BA 12k cold row fell from 10x to
    6.5x PyG when the one-component path took the compiled kernel: this failed then)."""
    import subprocess
    import sys

    script = (
        "import sys, numpy as np, torch\n"
        "from omnipos.graph import laplacian_pe\n"
        "rng = np.random.default_rng(0)\n"
        "n = 3000\n"
        "src = np.repeat(np.arange(1, n), 2); dst = (rng.random(src.size) * np.repeat(np.arange(1, n), 2)).astype(int)\n"
        "edges = torch.from_numpy(np.stack([np.r_[src, dst], np.r_[dst, src]]))\n"
        "pe = laplacian_pe(edges, n, 8)\n"
        "assert torch.isfinite(pe).all() and pe.abs().sum() > 0\n"
        "print('numba' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"

