"""canonical_basis on the CPU in float64 through the compiled kernel (omnipos.graph.canonical_kernel, numba) against
the tensor program it replaces there (the same definition, run with the kernel switched off) and against the
definition's own invariants: a basis fixed by the eigenspace, whatever basis of it the solver returned."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.graph import sign as sign_module
from omnipos.graph.sign import canonical_basis

pytest.importorskip("numba")


def eigenbases(count: int, n: int, seed: int, multiplicities: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` orthonormal bases ``[count, n, n]`` with eigenvalues ``[count, n]`` ascending that repeat as
    ``multiplicities`` say (then simple), each basis random inside its eigenspaces."""
    rng = np.random.default_rng(seed)
    values = []
    for m in multiplicities:
        values += [len(values) + 1.0] * m
    values = np.array(values + list(np.arange(len(values), n) + 1.5))[:n]
    q, _ = np.linalg.qr(rng.standard_normal((count, n, n)))
    return torch.from_numpy(q), torch.from_numpy(np.broadcast_to(values, (count, n)).copy())


def tensor_program(monkeypatch, *args, **kwargs):
    with monkeypatch.context() as patch:
        patch.setattr(sign_module, "_compiled", lambda: None)
        return canonical_basis(*args, **kwargs)


@pytest.mark.parametrize("multiplicities", [[], [1, 1, 1], [3], [2, 1, 4], [5, 5]])
@pytest.mark.parametrize("count", [1, 4, 9])
def test_kernel_matches_the_tensor_program(monkeypatch, multiplicities, count):
    vectors, values = eigenbases(30, 12, seed=count + len(multiplicities), multiplicities=multiplicities)
    width = 12
    ours, nodes, sizes = canonical_basis(vectors, values, count, return_pivots=True)
    theirs, their_nodes, their_sizes = tensor_program(monkeypatch, vectors, values, count, return_pivots=True)
    torch.testing.assert_close(ours, theirs, atol=1e-14, rtol=0)
    assert torch.equal(nodes, their_nodes)
    torch.testing.assert_close(sizes, their_sizes, atol=1e-15, rtol=0)
    assert ours.shape == (30, width, count) and ours.dtype == torch.float64


def test_kernel_with_given_clusters_leading_shape_and_zero_columns(monkeypatch):
    vectors, values = eigenbases(6, 8, seed=1, multiplicities=[2, 3])
    vectors = vectors.reshape(2, 3, 8, 8)
    clusters = torch.tensor([0, 0, 1, 1, 1, 2, 3, 4]).expand(2, 3, 8) + 7  # ids need not start at 0
    ours = canonical_basis(vectors, values.reshape(2, 3, 8), 6, clusters=clusters)
    theirs = tensor_program(monkeypatch, vectors, values.reshape(2, 3, 8), 6, clusters=clusters)
    torch.testing.assert_close(ours, theirs, atol=1e-14, rtol=0)
    zero = torch.zeros(1, 5, 3, dtype=torch.float64)
    assert torch.equal(canonical_basis(zero, torch.zeros(1, 3), 2), torch.zeros(1, 5, 2))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 14), seed=st.integers(0, 2**32 - 1), first=st.integers(1, 4), second=st.integers(1, 4),
       count=st.integers(1, 14))
def test_property_the_basis_depends_only_on_the_eigenspaces(n, seed, first, second, count):
    """Rotating a basis inside its eigenspaces (and flipping signs) leaves the canonical columns unchanged; they
    are orthonormal and span the same eigenspaces."""
    count = min(count, n)
    vectors, values = eigenbases(1, n, seed, [first, second])
    rng = np.random.default_rng(seed + 1)
    mix = np.zeros((n, n))
    start = 0
    for size in [first, second] + [1] * n:
        if start >= n:
            break
        size = min(size, n - start)
        mix[start:start + size, start:start + size] = np.linalg.qr(rng.standard_normal((size, size)))[0]
        start += size
    rotated = vectors @ torch.from_numpy(mix)
    ours = canonical_basis(vectors, values, count)
    again = canonical_basis(rotated, values, count)
    torch.testing.assert_close(again, ours, atol=1e-12, rtol=0)
    torch.testing.assert_close(ours[0].T @ ours[0], torch.eye(count, dtype=torch.float64), atol=1e-13, rtol=0)
    for j in range(count):  # column j lies in the eigenspace of eigenvalue j
        space = vectors[0][:, values[0] == values[0, j]]
        torch.testing.assert_close(space @ (space.T @ ours[0, :, j]), ours[0, :, j], atol=1e-13, rtol=0)


def test_float32_complex_and_gradients_stay_on_the_tensor_program(monkeypatch):
    def refuse(*args):
        raise AssertionError("the compiled kernel was called")

    monkeypatch.setattr(sign_module, "_compiled", lambda: refuse)
    vectors, values = eigenbases(3, 6, seed=0, multiplicities=[2])
    canonical_basis(vectors.float(), values.float(), 3)
    canonical_basis(vectors.to(torch.complex128), values, 3)
    canonical_basis(vectors.clone().requires_grad_(), values, 3, check=False)


@pytest.mark.parametrize("args, message", [
    ((np.zeros((4, 3)), np.zeros((4, 3)), 1, 0.0), r"w must have shape \[G, n, M\]"),
    ((np.zeros((2, 4, 3)), np.zeros((2, 2)), 1, 0.0), r"cluster must have shape \(2, 3\)"),
    ((np.zeros((2, 4, 3)), np.zeros((1, 3)), 1, 0.0), r"cluster must have shape \(2, 3\)"),
    ((np.zeros((2, 4, 3)), np.zeros((2, 3)), 4, 0.0), r"count must be an integer in 0\.\.3"),
    ((np.zeros((2, 4, 3)), np.zeros((2, 3)), -1, 0.0), r"count must be an integer in 0\.\.3"),
    ((np.zeros((2, 4, 3)), np.zeros((2, 3)), 1.5, 0.0), r"count must be an integer"),
    ((np.zeros((2, 4, 3)), np.zeros((2, 3)), 1, float("nan")), r"tol must be a finite number >= 0"),
    ((np.zeros((2, 4, 3)), np.zeros((2, 3)), 1, -1e-3), r"tol must be a finite number >= 0"),
])
def test_canonical_columns_refuses_what_would_read_past_its_arrays(args, message):
    """The compiled loop does not check indices: shapes, count and tol are checked before it runs."""
    from omnipos.graph.canonical_kernel import canonical_columns

    with pytest.raises(ValueError, match=message):
        canonical_columns(*args)
