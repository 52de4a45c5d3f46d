"""canonical_basis against a direct NumPy transcription of its definition; sign helpers' bad input."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.graph import canonical_basis, canonical_sign, random_sign_flip


def random_hermitian(n: int, spectrum: np.ndarray, rng, complex_: bool) -> np.ndarray:
    z = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if complex_ else 0)
    q, _ = np.linalg.qr(z)
    return (q * spectrum) @ q.conj().T


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(0, 10_000), st.booleans())
def test_matches_the_definition_and_ignores_the_solver_basis(reference_basis, n, seed, complex_):
    rng = np.random.default_rng(seed)
    spectrum = np.sort(rng.choice([0.0, 0.3, 1.0, 1.7], n))  # repeated eigenvalues on purpose
    h = random_hermitian(n, spectrum, rng, complex_)
    values, vectors = np.linalg.eigh(h)
    count = int(rng.integers(1, n + 1))
    ours = canonical_basis(torch.from_numpy(vectors), torch.from_numpy(values), count).numpy()
    np.testing.assert_allclose(ours, reference_basis(vectors, values, count), atol=1e-10)
    # any other orthonormal basis of the same eigenspaces gives the same canonical vectors
    rotated = vectors.copy()
    for value in np.unique(spectrum):
        cols = np.flatnonzero(np.abs(values - value) < 1e-6)
        z = rng.standard_normal((cols.size, cols.size))
        if complex_:
            z = z + 1j * rng.standard_normal((cols.size,) * 2)
        rotated[:, cols] = rotated[:, cols] @ np.linalg.qr(z)[0]
    again = canonical_basis(torch.from_numpy(rotated), torch.from_numpy(values), count).numpy()
    np.testing.assert_allclose(again, ours, atol=1e-8)
    np.testing.assert_allclose(ours.conj().T @ ours, np.eye(count), atol=1e-10)
    np.testing.assert_allclose(h @ ours, ours * values[:count], atol=1e-10)  # still eigenvectors


def test_simple_eigenvalues_reduce_to_canonical_sign():
    vectors = torch.linalg.qr(torch.randn(3, 7, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))[0]
    values = torch.arange(4, dtype=torch.float64).expand(3, 4)
    expected = vectors * canonical_sign(vectors).unsqueeze(-2)
    torch.testing.assert_close(canonical_basis(vectors, values), expected, atol=1e-15, rtol=0)


def test_block_diagonal_eigenspace_gives_one_vector_per_block():
    # two disjoint triangles: eigenvalue 1.5 of each (multiplicity 4 together); canonical vectors stay in a block
    block = np.eye(3) - (np.ones((3, 3)) - np.eye(3)) / 2
    lap = np.kron(np.eye(2), block)
    values, vectors = np.linalg.eigh(lap)
    basis = canonical_basis(torch.from_numpy(vectors), torch.from_numpy(values)).numpy()
    for j in range(6):
        support = np.abs(basis[:, j]) > 1e-12
        assert not (support[:3].any() and support[3:].any())


def test_pivots_are_returned():
    values = torch.tensor([0.0, 1.0], dtype=torch.float64)
    vectors = torch.tensor([[0.6, 0.8], [-0.8, 0.6]], dtype=torch.float64)
    basis, node, size = canonical_basis(vectors, values, return_pivots=True)
    assert node.tolist() == [1, 0] and size.tolist() == pytest.approx([0.8, 0.8])
    torch.testing.assert_close(basis, torch.tensor([[-0.6, 0.8], [0.8, 0.6]], dtype=torch.float64))


@pytest.mark.parametrize(
    "vectors,error,match",
    [
        (torch.ones(4), ValueError, r"vectors must have shape \[\.\.\., n, k\]"),
        (torch.tensor(1.0), ValueError, r"vectors must have shape"),
        ([[1.0]], TypeError, "vectors must be a tensor"),
        (torch.ones(3, 2, dtype=torch.long), TypeError, "floating or complex"),
        (torch.tensor([[1.0], [float("nan")]]), ValueError, "vectors must be finite"),
        (torch.tensor([[1.0], [float("inf")]]), ValueError, "vectors must be finite"),
    ],
)
def test_canonical_sign_bad_input(vectors, error, match):
    with pytest.raises(error, match=match):
        canonical_sign(vectors)


def test_canonical_sign_refuses_complex_and_works_on_meta():
    with pytest.raises(TypeError, match="canonical_basis"):
        canonical_sign(torch.ones(3, 2, dtype=torch.complex64))
    assert canonical_sign(torch.empty(5, 3, device="meta")).shape == (3,)
    assert canonical_sign(torch.zeros(0, 3)).tolist() == [1.0, 1.0, 1.0]


def test_canonical_basis_bad_input():
    with pytest.raises(ValueError, match="values must be a tensor of shape"):
        canonical_basis(torch.eye(3, dtype=torch.float64), torch.zeros(2))
    with pytest.raises(ValueError, match="count must be in 0..3"):
        canonical_basis(torch.eye(3, dtype=torch.float64), torch.zeros(3), 4)


@pytest.mark.parametrize(
    "batch,error,match",
    [
        (torch.tensor([0, 0, -2]), ValueError, "graph ids >= 0, found -2"),
        (torch.tensor([-1, 0, 0]), ValueError, "graph ids >= 0, found -1"),  # no silent wrap to the last graph
        (torch.tensor([0.0, 0, 1]), TypeError, "batch must be integer graph ids"),
        (torch.tensor([0, 1]), ValueError, r"batch must have shape \[N\] = \[3\]"),
        ([0, 0, 1], TypeError, "batch must be"),
        (torch.tensor([0, 0, 1], device="meta"), ValueError, "meta"),
    ],
)
def test_random_sign_flip_bad_batch(batch, error, match):
    with pytest.raises(error, match=match):
        random_sign_flip(torch.ones(3, 2), batch)


def test_random_sign_flip_bad_pe_and_huge_ids():
    with pytest.raises(ValueError, match=r"pe must be a \[N, k\] tensor"):
        random_sign_flip(torch.ones(3))
    with pytest.raises(TypeError, match="pe must be a floating"):
        random_sign_flip(torch.ones(3, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="generator"):
        random_sign_flip(torch.ones(3, 2), generator=3)
    # ids far apart draw signs for the graphs present only (no 2**40-row allocation); same as contiguous ids
    pe = torch.randn(4, 3)
    sparse_ids = random_sign_flip(pe, torch.tensor([0, 0, 2 ** 40, 2 ** 40]),
                                  generator=torch.Generator().manual_seed(5))
    dense_ids = random_sign_flip(pe, torch.tensor([0, 0, 1, 1]), generator=torch.Generator().manual_seed(5))
    assert torch.equal(sparse_ids, dense_ids)


def test_compiled_switch_chooses_the_tensor_program_and_is_checked():
    """``compiled=False`` takes the tensor program: the same pivots and columns (to 1e-12) as the default backend,
    here with repeated eigenvalues, where the backends differ only in the order of sums; a non-bool is refused."""
    rng = np.random.default_rng(7)
    q, _ = np.linalg.qr(rng.standard_normal((3, 12, 12)))
    vectors = torch.from_numpy(q)
    values = torch.tensor([0.0, 1.0, 1.0, 1.0, 2.0, 3.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], dtype=torch.float64)
    values = values.expand(3, 12)
    default, node, size = canonical_basis(vectors, values, 8, return_pivots=True)
    program, node_p, size_p = canonical_basis(vectors, values, 8, return_pivots=True, compiled=False)
    assert torch.equal(node, node_p)
    torch.testing.assert_close(program, default, atol=1e-12, rtol=0)
    torch.testing.assert_close(size_p, size, atol=1e-12, rtol=0)
    with pytest.raises(TypeError, match="compiled must be a bool"):
        canonical_basis(vectors, values, 8, compiled="no")
