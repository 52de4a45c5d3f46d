"""canonical_basis on the CPU in float64 and complex128 through the compiled kernel (omnipos.graph.canonical_kernel,
numba) against the tensor program it replaces there (the same rules, omnipos.graph.canonical_spec, run with the
kernel switched off) and against the definition's own invariants: a basis fixed by the eigenspace, whatever basis of
it the solver returned."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.graph import sign as sign_module
from omnipos.graph.sign import canonical_basis

pytest.importorskip("numba")


def eigenbases(count: int, n: int, seed: int, multiplicities: list[int], complex_: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` orthonormal bases ``[count, n, n]`` with eigenvalues ``[count, n]`` ascending that repeat as
    ``multiplicities`` say (then simple), each basis random inside its eigenspaces."""
    rng = np.random.default_rng(seed)
    values = []
    for m in multiplicities:
        values += [len(values) + 1.0] * m
    values = np.array(values + list(np.arange(len(values), n) + 1.5))[:n]
    z = rng.standard_normal((count, n, n))
    if complex_:
        z = z + 1j * rng.standard_normal((count, n, n))
    q, _ = np.linalg.qr(z)
    return torch.from_numpy(q), torch.from_numpy(np.broadcast_to(values, (count, n)).copy())


def tensor_program(monkeypatch, *args, **kwargs):
    with monkeypatch.context() as patch:
        patch.setattr(sign_module, "_compiled", lambda: None)
        return canonical_basis(*args, **kwargs)


@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("multiplicities", [[], [1, 1, 1], [3], [2, 1, 4], [5, 5]])
@pytest.mark.parametrize("count", [1, 4, 9])
def test_kernel_matches_the_tensor_program(monkeypatch, multiplicities, count, complex_):
    vectors, values = eigenbases(30, 12, seed=count + len(multiplicities), multiplicities=multiplicities,
                                 complex_=complex_)
    width = 12
    ours, nodes, sizes = canonical_basis(vectors, values, count, return_pivots=True)
    theirs, their_nodes, their_sizes = tensor_program(monkeypatch, vectors, values, count, return_pivots=True)
    torch.testing.assert_close(ours, theirs, atol=1e-14, rtol=0)
    assert torch.equal(nodes, their_nodes)
    torch.testing.assert_close(sizes, their_sizes, atol=1e-15, rtol=0)
    assert ours.shape == (30, width, count) and ours.dtype == vectors.dtype


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


def test_the_backend_is_chosen_as_the_spec_says(monkeypatch):
    """canonical_spec: the compiled kernel for CPU float64 and complex128 without gradients; the tensor program for
    float32, complex64 and tensors that need gradients. (complex128 ran the tensor program before: on 2,000
    complex 25-node graphs with a repeated eigenvalue, ~50 ms instead of ~6 ms.)"""
    taken = []

    def kernel(w, *args):
        taken.append(w.dtype)
        return canonical_columns(w, *args)

    from omnipos.graph.canonical_kernel import canonical_columns

    monkeypatch.setattr(sign_module, "_compiled", lambda: kernel)
    vectors, values = eigenbases(3, 6, seed=0, multiplicities=[2])
    canonical_basis(vectors.float(), values.float(), 3)
    canonical_basis(vectors.to(torch.complex64), values.float(), 3)
    canonical_basis(vectors.clone().requires_grad_(), values, 3, check=False)
    canonical_basis(vectors.to(torch.complex128).requires_grad_(), values, 3, check=False)
    assert taken == []
    canonical_basis(vectors, values, 3)
    canonical_basis(vectors.to(torch.complex128), values, 3)
    assert taken == [np.float64, np.complex128]


@st.composite
def awkward_bases(draw):
    """One basis ``[n, M]`` with eigenspace ids ``[M]``: random orthonormal, or a cycle's Laplacian eigenvectors
    (every node ties in every eigenspace's ``P_ii``), rotated at random inside its eigenspaces; with complex phases,
    exact ties, ties within and beyond the tolerance in simple columns, and zero columns."""
    complex_ = draw(st.booleans())
    n = draw(st.integers(1, 14))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if draw(st.booleans()) and n >= 3:  # the cycle
        lap = 2 * np.eye(n) - np.roll(np.eye(n), 1, 0) - np.roll(np.eye(n), -1, 0)
        values, vectors = np.linalg.eigh(lap)
        ids = np.cumsum(np.r_[0, np.diff(values) > 1e-9])
    else:
        multiplicities = draw(st.lists(st.integers(1, 4), min_size=1, max_size=n))
        ids = np.repeat(np.arange(len(multiplicities)), multiplicities)[:n]  # (then simple eigenvalues)
        ids = np.r_[ids, np.arange(n - ids.size) + len(multiplicities)]
        vectors = np.linalg.qr(rng.standard_normal((n, n)))[0]
    if complex_:
        vectors = vectors.astype(np.complex128)
    width = draw(st.integers(1, n))
    ids, vectors = ids[:width], vectors[:, :width]
    for cluster in np.unique(ids):  # any basis of each eigenspace, and any phase of each column
        cols = np.flatnonzero(ids == cluster)
        z = rng.standard_normal((cols.size, cols.size)) + (1j * rng.standard_normal((cols.size,) * 2)
                                                          if complex_ else 0)
        vectors[:, cols] = vectors[:, cols] @ np.linalg.qr(z)[0]
    simple = [j for j in range(width) if (ids == ids[j]).sum() == 1]
    if simple and n >= 2:  # two entries of one simple column at the top: tied, nearly tied, or not
        j, (a, b) = simple[draw(st.integers(0, len(simple) - 1))], sorted(rng.choice(n, 2, replace=False))
        gap = draw(st.sampled_from([0.0, 1e-12, -1e-12, 1e-6, -1e-6]))
        top = np.abs(vectors[:, j]).max() * 1.5
        phase = np.exp(1j * rng.uniform(0, 2 * np.pi, 2)) if complex_ else rng.choice([-1.0, 1.0], 2)
        vectors[a, j], vectors[b, j] = top * (1 + gap) * phase[0], top * phase[1]
    for j in draw(st.lists(st.integers(0, width - 1), max_size=2)):  # zero columns, simple or in an eigenspace
        vectors[:, j] = 0
    count = draw(st.integers(1, width))
    return vectors, ids, count


@settings(max_examples=150, deadline=None)
@given(awkward_bases())
def test_property_the_backends_agree(basis):
    """The compiled kernel and the tensor program are one definition (canonical_spec): the same pivots; real
    columns of simple eigenvalues (and their pivot magnitudes) bit for bit; everything else to 1e-12."""
    vectors, ids, count = basis
    w = torch.from_numpy(vectors)[None]
    values = torch.from_numpy(ids.astype(np.float64))[None]
    clusters = torch.from_numpy(ids)[None]
    kernel = canonical_basis(w, values, count, clusters=clusters, return_pivots=True)
    original = sign_module._compiled
    sign_module._compiled = lambda: None
    try:
        program = canonical_basis(w, values, count, clusters=clusters, return_pivots=True)
    finally:
        sign_module._compiled = original
    assert torch.equal(kernel[1], program[1])  # the pivot nodes
    torch.testing.assert_close(kernel[0], program[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(kernel[2], program[2], atol=1e-12, rtol=0)
    simple = [j for j in range(count) if (ids == ids[j]).sum() == 1]
    if not w.is_complex():
        assert torch.equal(kernel[0][..., simple], program[0][..., simple])
        assert torch.equal(kernel[2][..., simple], program[2][..., simple])


@pytest.mark.parametrize("complex_", [False, True])
def test_simple_eigenvalues_beside_repeated_ones_follow_the_sign_rule(monkeypatch, complex_):
    """In a graph that also has repeated eigenvalues, the tensor program gives its simple eigenvalues' columns by
    the sign / phase rule (canonical_spec R4), as the kernel does: real ones bit for bit. (It ran them through the
    pivoted Cholesky step, v * (v_i * (1 / |v_i|)), off by an ulp in some entries: this failed before.)"""
    vectors, values = eigenbases(300, 12, seed=7, multiplicities=[2, 1, 3], complex_=complex_)
    simple = [2] + list(range(6, 12))
    ours, nodes, sizes = canonical_basis(vectors, values, 12, return_pivots=True)
    theirs, their_nodes, their_sizes = tensor_program(monkeypatch, vectors, values, 12, return_pivots=True)
    alone, _, _ = tensor_program(monkeypatch, vectors[..., simple], values[..., simple], len(simple),
                                 return_pivots=True)
    assert torch.equal(nodes, their_nodes)
    if complex_:  # (complex abs and products round by memory layout in torch: to rounding)
        torch.testing.assert_close(theirs[..., simple], alone, atol=1e-15, rtol=0)
        torch.testing.assert_close(ours, theirs, atol=1e-15, rtol=0)
    else:
        assert torch.equal(theirs[..., simple], alone)
        assert torch.equal(ours[..., simple], theirs[..., simple])
        assert torch.equal(sizes[..., simple], their_sizes[..., simple])


def test_kernel_writes_every_entry_it_returns(monkeypatch):
    """The kernel's outputs are allocated empty (not zeroed): each returned entry is written by the loop."""
    from omnipos.graph import canonical_kernel

    vectors, values = eigenbases(4, 9, seed=3, multiplicities=[3, 1, 2])
    cases = [(vectors.numpy(), np.array([0, 0, 0, 1, 2, 2, 3, 4, 5])), (vectors.numpy() * 0, np.zeros(9, int))]
    cases.append((cases[0][0].astype(np.complex128) * 1j, cases[0][1]))
    for w, ids in cases:
        canonical_kernel.canonical_columns(w, np.broadcast_to(ids, (4, 9)), 9, 1e-8)  # compiled before the patch
    empty = np.empty
    monkeypatch.setattr(np, "empty", lambda shape, dtype=float: np.full(shape, -7, dtype=dtype)
                        if empty((), dtype).dtype.kind in "iu" else np.full(shape, np.nan, dtype=dtype))
    for w, ids in cases:
        for count in (1, 4, 6, 9):
            out, nodes, sizes = canonical_kernel.canonical_columns(w, np.broadcast_to(ids, (4, 9)), count, 1e-8)
            assert not np.isnan(out).any() and not np.isnan(sizes).any() and (nodes >= 0).all()


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
