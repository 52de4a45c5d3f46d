"""The rules of the canonical eigenspace basis (:func:`omnipos.graph.canonical_basis`), in one place, for its two
backends: the tensor program of :mod:`omnipos.graph.sign` (any device and dtype, batched) and the compiled kernel
of :mod:`omnipos.graph.canonical_kernel` (numba; CPU, float64 and complex128). Both read their tolerances from the
constants below and their comparisons from the two functions below (which take Python / NumPy scalars, NumPy
arrays and torch tensors alike, and which the kernel compiles), and each step of each backend names the rule it
implements (``R1`` .. ``R6``). ``tests/graph/test_canonical_kernel.py`` checks that the backends agree on random
orthonormal bases with repeated eigenvalues, exact ties, complex phases and zero columns (bit for bit on real
columns of simple eigenvalues, to 1e-12 elsewhere); ``tests/graph/conftest.py`` holds an independent NumPy
transcription of the definition that the tensor program is checked against.

For orthonormal eigenvectors ``V [n, M]`` (columns in ascending eigenvalue order) and the first ``count`` columns:

- **R1 eigenspaces.** Column ``j`` starts a new eigenspace (cluster) where ``lambda_j - lambda_{j-1} > value_tol *
  scale`` (:func:`starts_cluster`; ``scale`` defaults to ``max(1, max |lambda|)``, the encodings pass their
  spectrum's bound). Ids may instead be given (non-decreasing); only the clusters that reach into the first
  ``count`` columns are computed, and the last of them must be complete within ``M``.
- **R2 pivot magnitudes.** For a cluster with columns ``W [n, m]`` (deflated by R5 after each pivot), node ``i``'s
  magnitude is ``sqrt(P_ii) = sqrt(max(sum_c |W_ic|^2, 0))`` (``|x|^2`` as ``re^2 + im^2``). A simple eigenvalue
  (``m = 1``) uses ``|v_i|`` itself: ``abs`` for real ``v`` (the same number in both backends); for complex ``v``
  the tensor program's ``abs`` and the kernel's ``sqrt(re^2 + im^2)`` (hypot costs the kernel ~15x more per
  entry) may differ by an ulp, which decides a pivot only at a tie at exactly ``TIE_TOL``.
- **R3 pivot.** The pivot is the lowest node ``i`` whose magnitude is within ``TIE_TOL`` of the largest
  (:func:`ties_largest`: ``magnitude >= largest - tol``, float64 for float64 / complex128 input). Exact and near
  ties thus go to the lowest node index; the choice depends on node order only there.
- **R4 simple eigenvalue.** The column is ``v * (conj(v_i) / |v_i|)`` (for real ``v`` a product by +-1, so exact:
  the backends agree bit for bit); a zero column (``|v_i| = 0``) is returned as it is (phase 1), pivot 0,
  magnitude 0.
- **R5 repeated eigenvalue (pivoted Cholesky of ``P = W W^H``).** With ``s = sqrt(P_ii)`` of the pivot, ``a =
  W[i, :] / s`` (``0`` where ``s = 0``: a cluster of zero columns gives zero columns), the output column is ``u = W
  conj(a) = P e_i / s``, and ``W <- W - u a`` deflates before the next pivot of the same cluster. The first column
  of a cluster is therefore real and positive at its pivot node. (For ``m = 1`` R5 is R4 up to rounding; R4 is
  the definition there, and where the tensor program runs R5's step on a simple eigenvalue - a graph that also
  has repeated ones - it divides by ``s`` instead of multiplying by ``1 / s``, which makes it R4 exactly for
  real vectors.)
- **R6 outputs.** Each column's pivot node (int64) and magnitude ``s`` (float64) at its selection come back with
  it (``return_pivots``): a graph's components are computed as separate pieces and merged by R3 over ``(s, global
  node)`` (:mod:`omnipos.graph.eigensolvers.components`), which equals the whole graph's basis because its
  projector is block diagonal.

Backends (chosen in one place, :func:`omnipos.graph.sign.canonical_basis`): the compiled kernel for CPU float64
and complex128 tensors that need no gradient, where numba is installed and not switched off; the tensor program
otherwise (other devices, float32 / complex64, autograd, numba-free installs). The two differ only in the order of
floating-point sums (R2, R5), so away from ties at exactly ``TIE_TOL`` they pick the same pivots and give the same
columns to ~1e-15.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CANONICAL_TOL", "EIGENVALUE_TOL", "NOISE_TOL", "TIE_TOL", "starts_cluster", "ties_largest"]

#: R3: entries whose magnitude is within this of a column's largest magnitude tie (unit-norm float64 columns; the
#: float64 eigensolver error is ~1e-14, CPU vs GPU differences ~1e-13, the sparse solvers' ~1e-10).
TIE_TOL = 1e-8
#: The name the rest of omnipos uses for :data:`TIE_TOL`.
CANONICAL_TOL = TIE_TOL
#: R1: eigenvalues closer than this (times ``max(1, max |lambda|)`` or the given scale) are one eigenspace.
EIGENVALUE_TOL = 1e-8
#: Float64 entries smaller than this in magnitude are eigensolver noise around an exact 0 (a node on a symmetry
#: axis, a zero eigenvalue): :func:`omnipos.graph.sign.round_noise` makes them 0, so float32 outputs agree bit for
#: bit whatever rounding path (batch position, solver) produced them.
NOISE_TOL = 1e-12


def starts_cluster(gap: Any, value_tol: Any, scale: Any) -> Any:
    """R1: whether an eigenvalue ``gap`` to the previous (ascending) value starts a new eigenspace."""
    return gap > value_tol * scale


def ties_largest(magnitude: Any, largest: Any, tol: Any) -> Any:
    """R3: whether ``magnitude`` is a pivot candidate, i.e. within ``tol`` of the ``largest`` (the lowest candidate
    node is the pivot)."""
    return magnitude >= largest - tol
