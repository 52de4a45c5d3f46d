"""The lane-batched eigensolver (omnipos.graph.lane_eigh, numba) against float64 NumPy ``eigh`` (LAPACK), its
bitwise batch invariance, and small_eigh's LAPACK fallback where numba is missing or a matrix is flagged."""

import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.graph import small_eigh as small_eigh_module
from omnipos.graph.small_eigh import LANE_MAX_NODES, one_thread, small_eigh

pytest.importorskip("numba")
from omnipos.graph.lane_eigh import LANES, lane_eigh  # noqa: E402

EIGENVALUE_TOL = 1e-8  # eigenvalues closer than this (times the spectrum's scale) are one eigenspace


def clusters(values: np.ndarray, scale: float) -> list[np.ndarray]:
    """Column indices of each eigenspace of ascending ``values``."""
    starts = np.flatnonzero(np.diff(values) > EIGENVALUE_TOL * scale) + 1
    return np.split(np.arange(values.size), starts)


def assert_eigh_matches_numpy(matrices: np.ndarray, values: np.ndarray, vectors: np.ndarray,
                              value_tol: float = 1e-13, projector_tol: float = 1e-12) -> None:
    """Eigenvalues within ``value_tol`` of NumPy's and every eigenspace projector within ``projector_tol`` (both
    relative to the matrix's scale); the vectors orthonormal and ``A V = V diag(values)``."""
    ref_values, ref_vectors = np.linalg.eigh(matrices)
    for a, lam, v, ref_lam, ref_v in zip(matrices, values, vectors, ref_values, ref_vectors):
        n = a.shape[0]
        scale = max(float(np.abs(a).max()), np.finfo(float).tiny)
        np.testing.assert_allclose(lam / scale, ref_lam / scale, atol=value_tol, rtol=0)
        np.testing.assert_allclose(v.T @ v, np.eye(n), atol=1e-13, rtol=0)
        assert np.abs(a @ v - v * lam).max() <= 1e-13 * scale * max(n, 1)
        for columns in clusters(ref_lam, scale):
            ours = v[:, columns] @ v[:, columns].T
            theirs = ref_v[:, columns] @ ref_v[:, columns].T
            np.testing.assert_allclose(ours, theirs, atol=projector_tol, rtol=0)


def with_spectrum(values: np.ndarray, seed: int) -> np.ndarray:
    """A symmetric matrix ``Q diag(values) Q^T`` with a random orthogonal ``Q``."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((values.size, values.size)))
    a = (q * values) @ q.T
    return (a + a.T) / 2


def laplacian(edges: list[tuple[int, int]], n: int) -> np.ndarray:
    """The normalised Laplacian ``I - D^-1/2 A D^-1/2`` (isolated node: 1 on the diagonal)."""
    a = np.zeros((n, n))
    for i, j in edges:
        a[i, j] = a[j, i] = 1.0
    degree = a.sum(1)
    inv = np.where(degree > 0, 1 / np.sqrt(np.where(degree > 0, degree, 1)), 0.0)
    return np.eye(n) - inv[:, None] * a * inv[None, :]


def random_molecule(rng: np.random.Generator) -> tuple[list[tuple[int, int]], int]:
    """A random tree of maximum degree 4 on 6-40 nodes with ~n/8 ring closures (the benchmark's molecules)."""
    n = int(rng.integers(6, 41))
    degree = np.zeros(n, dtype=int)
    edges = []
    for i in range(1, n):
        j = int(rng.choice(np.flatnonzero(degree[:i] < 4)))
        edges.append((j, i))
        degree[[i, j]] += 1
    for _ in range(max(1, n // 8)):
        a, b = rng.choice(n, 2, replace=False)
        edges.append((int(a), int(b)))
    return edges, n


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint64)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 24, 33, 40])
def test_random_symmetric_matrices_match_numpy(n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((LANES + 5, n, n))  # a full block and a partly filled one
    a = a + a.transpose(0, 2, 1)
    values, vectors, failed = lane_eigh(a)
    assert not failed.any()
    assert_eigh_matches_numpy(a, values, vectors)


def test_repeated_eigenvalues_zero_and_diagonal_matrices():
    n = 12
    spectra = [np.array([0.5] * 4 + [1.0] * 3 + [2.0, 3.0, 3.0, 3.0, 4.0]),
               np.array([1.0] * n),  # a multiple of the identity: one eigenspace
               np.array([0.0] * 6 + [1.0] * 6),
               np.linspace(-1, 1, n)]
    a = [with_spectrum(s, seed) for seed, s in enumerate(spectra)]
    a += [np.zeros((n, n)), np.diag(np.random.default_rng(0).standard_normal(n)), np.diag([2.0, 1.0] * 6),
          np.eye(n) * 1e-300, with_spectrum(np.linspace(1, 2, n), 5) * 1e300]
    a = np.stack(a)
    values, vectors, failed = lane_eigh(a)
    assert not failed.any()
    assert_eigh_matches_numpy(a, values, vectors)
    np.testing.assert_array_equal(values[4], np.zeros(n))
    np.testing.assert_array_equal(values[6], np.sort(np.diag(a[6])))  # diagonal: exact, eigenvectors unit
    np.testing.assert_array_equal(np.abs(vectors[6]).max(0), np.ones(n))


def test_laplacians_of_molecules_and_symmetric_graphs_match_numpy():
    """Random molecules, and graphs whose Laplacian repeats eigenvalues: stars, a symmetric tree, a cycle,
    disjoint copies of one graph, isolated nodes."""
    rng = np.random.default_rng(7)
    graphs = [random_molecule(rng) for _ in range(120)]
    graphs += [([(0, i) for i in range(1, n)], n) for n in (4, 9, 17)]  # stars
    tree = [(0, 1), (0, 2), (0, 3)] + [(p, 4 + 3 * (p - 1) + c) for p in (1, 2, 3) for c in range(3)]
    graphs += [(tree, 13), ([(i, (i + 1) % 12) for i in range(12)], 12)]
    molecule, n = random_molecule(rng)
    graphs += [(molecule + [(i + n, j + n) for i, j in molecule] + [(i + 2 * n, j + 2 * n) for i, j in molecule],
                3 * n)]
    graphs += [([(0, 1), (2, 3)], 6)]  # two isolated nodes
    by_size: dict[int, list[np.ndarray]] = {}
    for edges, n in graphs:
        by_size.setdefault(n, []).append(laplacian(edges, n))
    for n, stack in by_size.items():
        a = np.stack(stack)
        values, vectors, failed = lane_eigh(a)
        assert not failed.any()
        assert_eigh_matches_numpy(a, values, vectors)


def test_real_graphs_networkx_ships_match_numpy():
    """Real graphs (the ones networkx ships, all <= LANE_MAX_NODES nodes, several with repeated eigenvalues):
    Zachary's karate club (34), Davis's southern women (32), the Florentine families (15), Krackhardt's kite (10),
    the Petersen graph (10), and the chvatal, frucht and heawood graphs."""
    nx = pytest.importorskip("networkx")
    graphs = [nx.karate_club_graph(), nx.davis_southern_women_graph(), nx.florentine_families_graph(),
              nx.krackhardt_kite_graph(), nx.petersen_graph(), nx.chvatal_graph(), nx.frucht_graph(),
              nx.heawood_graph()]
    for graph in graphs:
        graph = nx.convert_node_labels_to_integers(graph)
        n = graph.number_of_nodes()
        assert n <= LANE_MAX_NODES
        a = laplacian(list(graph.edges()), n)[None]
        values, vectors, failed = lane_eigh(a)
        assert not failed.any()
        assert_eigh_matches_numpy(a, values, vectors)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 16), count=st.integers(1, 40), seed=st.integers(0, 2**32 - 1),
       repeat=st.integers(1, 4), exponent=st.integers(-200, 200))
def test_property_eigenpairs_and_scale(n, count, seed, repeat, exponent):
    """Any symmetric batch (some spectra with repeated eigenvalues, any power-of-two scale): NumPy's eigenvalues,
    its eigenspaces, orthonormal vectors; scaling a matrix by 2^k scales its eigenvalues by exactly 2^k and
    leaves its vectors' bits unchanged."""
    rng = np.random.default_rng(seed)
    spectrum = np.repeat(rng.standard_normal(-(-n // repeat)), repeat)[:n]
    a = np.stack([with_spectrum(spectrum, seed + i) if i % 2 else rng.standard_normal((n, n)) for i in range(count)])
    a = (a + a.transpose(0, 2, 1)) / 2
    values, vectors, failed = lane_eigh(a)
    assert not failed.any()
    assert_eigh_matches_numpy(a, values, vectors)
    scaled_values, scaled_vectors, _ = lane_eigh(np.ldexp(a, exponent))
    np.testing.assert_array_equal(scaled_values, np.ldexp(values, exponent))
    np.testing.assert_array_equal(bits(scaled_vectors), bits(vectors))


def test_batch_invariant_bit_for_bit():
    """A matrix gives the same bits alone, at any lane of a block, in the first or a later block, and beside
    any other matrices (here ones needing more and fewer QL sweeps, and a failed one)."""
    rng = np.random.default_rng(3)
    edges, n = random_molecule(np.random.default_rng(11))
    target = laplacian(edges, n)
    others = rng.standard_normal((3 * LANES, n, n))
    others = others + others.transpose(0, 2, 1)
    others[5] = np.diag(np.arange(n, dtype=float))  # needs no sweep at all
    others[9, 0, 0] = np.nan  # flagged as failed
    alone_values, alone_vectors, alone_failed = lane_eigh(target[None])
    assert not alone_failed.any()
    for position in (0, 1, LANES - 1, LANES, 2 * LANES + 3):
        for start in (0, LANES // 2):
            batch = others[start:start + position + 7].copy()
            batch = np.concatenate([batch[:position], target[None], batch[position:]])
            values, vectors, failed = lane_eigh(batch)
            np.testing.assert_array_equal(bits(values[position]), bits(alone_values[0]))
            np.testing.assert_array_equal(bits(vectors[position]), bits(alone_vectors[0]))
            assert not failed[position]


def test_non_finite_matrices_are_flagged_and_small_eigh_hands_them_to_lapack():
    a = np.stack([np.eye(4), np.eye(4), np.eye(4)])
    a[1, 2, 3] = a[1, 3, 2] = np.inf
    a[2, 0, 0] = np.nan
    _, _, failed = lane_eigh(a)
    np.testing.assert_array_equal(failed, [False, True, True])
    matrices = torch.from_numpy(a)
    with one_thread():
        try:
            expected = torch.linalg.eigh(matrices)
        except RuntimeError as error:
            with pytest.raises(RuntimeError, match=str(error)[:30]):
                small_eigh(matrices)
            return
    values, vectors = small_eigh(matrices)
    torch.testing.assert_close(values, expected[0], equal_nan=True, atol=0, rtol=0)


def test_lane_eigh_refuses_non_square_input():
    with pytest.raises(ValueError, match=r"matrices must have shape \[G, n, n\]"):
        lane_eigh(np.zeros((2, 3, 4)))
    values, vectors, failed = lane_eigh(np.zeros((0, 5, 5)))
    assert values.shape == (0, 5) and vectors.shape == (0, 5, 5) and failed.shape == (0,)


def test_small_eigh_uses_the_kernel_and_flagged_matrices_get_lapack(monkeypatch):
    a = torch.randn(40, 9, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    a = a + a.transpose(1, 2)
    values, vectors, _ = lane_eigh(a.numpy())
    got = small_eigh(a)
    assert torch.equal(got[0], torch.from_numpy(values)) and torch.equal(got[1], torch.from_numpy(vectors))

    def flag_some(matrices):
        values, vectors, failed = lane_eigh(matrices)
        failed[[3, 17]] = True
        return values, vectors, failed

    monkeypatch.setattr(small_eigh_module, "lane_kernel", lambda: flag_some)
    mixed = small_eigh(a)
    with one_thread():
        lapack = torch.linalg.eigh(a[[3, 17]])
    assert torch.equal(mixed[0][[3, 17]], lapack[0]) and torch.equal(mixed[1][[3, 17]], lapack[1])
    keep = [i for i in range(40) if i not in (3, 17)]
    assert torch.equal(mixed[1][keep], got[1][keep])


def test_without_numba_small_eigh_is_lapack(monkeypatch):
    """numba missing (its import fails): ``lane_kernel()`` is None and small_eigh returns LAPACK's bits."""
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.delitem(sys.modules, "omnipos.graph.lane_eigh")
    assert small_eigh_module.lane_kernel() is None
    a = torch.randn(20, 11, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    a = a + a.transpose(1, 2)
    values, vectors = small_eigh(a)
    with one_thread():
        expected = torch.linalg.eigh(a)
    assert torch.equal(values, expected[0]) and torch.equal(vectors, expected[1])


def test_disable_numba_switch_gives_lapack_and_the_tensor_program(monkeypatch):
    """``OMNIPOS_DISABLE_NUMBA=1`` (the user's switch, as ``OMNIPOS_DISABLE_TRITON``): with numba installed,
    small_eigh returns LAPACK's bits and canonical_basis the tensor program's, as in a numba-free install."""
    import omnipos.graph.sign as sign_module
    from omnipos.graph import canonical_basis

    a = torch.randn(24, 13, 13, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    a = a + a.transpose(1, 2)
    compiled = small_eigh(a)
    monkeypatch.setenv("OMNIPOS_DISABLE_NUMBA", "1")
    assert small_eigh_module.lane_kernel() is None and sign_module._compiled() is None
    values, vectors = small_eigh(a)
    with one_thread():
        expected = torch.linalg.eigh(a)
    assert torch.equal(values, expected[0]) and torch.equal(vectors, expected[1])
    assert torch.allclose(values, compiled[0], atol=1e-12)  # the kernel's eigenvalues, to rounding
    switched_off = canonical_basis(vectors, values, 6)
    with monkeypatch.context() as patch:
        patch.setattr(sign_module, "_compiled", lambda: None)
        tensor_program = canonical_basis(vectors, values, 6)
    assert torch.equal(switched_off, tensor_program)
    monkeypatch.setenv("OMNIPOS_DISABLE_NUMBA", "0")  # any other value leaves the kernels on
    assert small_eigh_module.lane_kernel() is not None and sign_module._compiled() is not None


def test_small_eigh_sends_other_cases_to_lapack(monkeypatch):
    """float32, complex, more than LANE_MAX_NODES rows, a leading shape other than [G]: LAPACK, as before."""
    def refuse(*args):
        raise AssertionError("the lane kernel was called")

    monkeypatch.setattr(small_eigh_module, "lane_kernel", lambda: refuse)
    generator = torch.Generator().manual_seed(2)
    for a in (torch.randn(3, 6, 6, generator=generator),
              torch.randn(3, 6, 6, dtype=torch.complex128, generator=generator),
              torch.randn(2, LANE_MAX_NODES + 1, LANE_MAX_NODES + 1, dtype=torch.float64, generator=generator),
              torch.randn(2, 3, 6, 6, dtype=torch.float64, generator=generator)):
        a = a + a.transpose(-2, -1).conj()
        values, vectors = small_eigh(a)
        torch.testing.assert_close(values, torch.linalg.eigvalsh(a))


def test_an_unreadable_cache_file_is_a_miss_and_is_rewritten(tmp_path):
    """Cached machine code is read back from disk, so it is untrusted: garbage in numba's index and data files
    gives the right answer (compiled again), and the next process loads the rewritten cache."""
    import subprocess

    module = tmp_path / "tiny_kernel.py"
    module.write_text(
        "import numpy as np\n"
        "from omnipos.graph.lane_eigh import compiled\n\n"
        "@compiled\n"
        "def twice_plus_one(x):\n"
        "    out = np.empty_like(x)\n"
        "    for i in range(x.size):\n"
        "        out[i] = 2.0 * x[i] + 1.0\n"
        "    return out\n\n"
        "x = np.arange(5.0)\n"
        "assert (twice_plus_one(x) == 2 * x + 1).all()\n"
        "print('ok', sum(twice_plus_one.stats.cache_hits.values()))\n")
    cache = tmp_path / "cache"
    env = {**__import__("os").environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": __import__("os").pathsep.join(
        [str(tmp_path)] + sys.path)}

    def run() -> str:
        done = subprocess.run([sys.executable, str(module)], env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    assert run().split() == ["ok", "0"]  # compiles, writes the cache
    files = [f for f in cache.rglob("*") if f.suffix in (".nbi", ".nbc")]
    assert {f.suffix for f in files} == {".nbi", ".nbc"}
    for f in files:
        f.write_bytes(b"\x80\x04not a pickle" + bytes(range(256)))
    assert run().split() == ["ok", "0"]  # garbage read back: compiled again, not an unpickling error
    assert run().split() == ["ok", "1"]  # the rewritten cache is loaded


FIRST_LOAD = """
import gc
import numpy as np
import torch
held = [torch.zeros(3) for _ in range(4000)]  # a caller's data: 4,000 tensors
from omnipos.graph.small_eigh import lane_kernel
runs = []
gc.callbacks.append(lambda phase, info: runs.append(info["generation"]) if phase == "start" else None)
kernel = lane_kernel()
kernel(np.eye(3)[None])
during = list(runs)
print(len(during), gc.isenabled())
"""


def test_loading_numba_and_the_cached_kernel_runs_no_collection():
    """A process's first lane-kernel call (importing numba, loading the kernel from the disk cache) runs mostly
    with Python's cyclic collector paused: each collection walked every object the process held, ~0.13 s of the first
    LapPE call for a process holding 4,000 PyG graphs' tensors (failed before: the import and the load ran dozens
    of collections). The collector is enabled again afterwards."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", FIRST_LOAD], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    collections, enabled = done.stdout.split()
    assert int(collections) <= 10 and enabled == "True"  # (~100 before; a few remain in numba's dispatch)
