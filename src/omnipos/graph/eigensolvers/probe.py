"""The symmetry probe (:func:`symmetry_probe`): colour refinement of the weighted graph, hashed with wrapping 64-bit
sums, which tells ``"auto"`` whether a graph may have a symmetry that repeats an eigenvalue (then a block solver)
or none beyond swapping twins (then single-vector Krylov, checked against the twins' eigenvalues)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: Rounds of colour refinement :func:`symmetry_probe` runs before it calls a graph whose colouring has not settled
#: symmetric (a round costs about one sort of the nodes; Barabasi-Albert graphs and rings with chords settle in
#: 1-28 rounds up to 200,000 nodes, grids need half their diameter).
SYMMETRY_ROUNDS = 32


@dataclass(frozen=True)
class Symmetry:
    """What :func:`symmetry_probe` found. ``symmetric``: the graph may have a symmetry other than swapping twins
    (so an eigenvalue may repeat anywhere in the spectrum); ``twin_values``: the eigenvalues that twin nodes give
    exactly (each of multiplicity at least the class size - 1)."""

    symmetric: bool
    twin_values: np.ndarray


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijective scrambling of 64-bit integers (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def _row_sums(terms: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Wrapping uint64 sum of ``terms`` over each CSR row (a hash of the row's multiset of terms)."""
    total = np.zeros(terms.size + 1, dtype=np.uint64)
    np.cumsum(terms, out=total[1:])
    return total[indptr[1:]] - total[indptr[:-1]]


def value_keys(values: np.ndarray) -> np.ndarray:
    """A 64-bit key per entry of ``values`` (float64 or complex128) that is equal exactly where the values are:
    the mixed bit patterns (-0.0 made +0.0 first; complex: both parts, the imaginary one mixed twice). Equal
    values give equal keys, and different ones different keys but for a 64-bit collision on complex entries
    (which can only merge colours: towards "symmetric"). The same partition of the entries as ``np.unique``'s
    ids, without its sort (a third of the probe on a 1,000-node graph)."""
    if np.iscomplexobj(values):
        values = values.astype(np.complex128) + 0.0
        return _mix(np.ascontiguousarray(values.real).view(np.uint64) + _GOLDEN) \
            ^ _mix(_mix(np.ascontiguousarray(values.imag).view(np.uint64)))
    return _mix((np.asarray(values, dtype=np.float64) + 0.0).view(np.uint64) + _GOLDEN)


def symmetry_probe(lap: Any, max_rounds: int = SYMMETRY_ROUNDS) -> Symmetry:
    """Colour refinement (1-dimensional Weisfeiler-Leman) of the weighted graph of ``lap`` (its diagonal the
    starting colours, each off-diagonal entry's exact value a label of its edge), hashed with wrapping 64-bit
    sums so that a round costs one pass over the entries and one sort of the nodes.

    An automorphism of the graph (a permutation ``P`` with ``P L P^T = L``) maps every node to one of its own
    colour, so when the stable colouring gives every node its own colour, or groups only twins (nodes with the
    same off-diagonal row of ``L``: ``e_u - e_v`` is then an eigenvector, of eigenvalue ``L_uu``), the graph has no
    symmetry beyond swapping twins: the eigenvalues repeated by symmetry are exactly the twins'. A graph with an
    eigenvalue repeated without any symmetry exists but is not generic; one whose colouring has not settled
    after ``max_rounds`` rounds (a large diameter) counts as symmetric. A hash collision can only merge colours,
    which errs towards "symmetric".
    """
    import scipy.sparse as sp

    lap = sp.csr_matrix(lap)
    n = lap.shape[0]
    rows = np.repeat(np.arange(n), np.diff(lap.indptr))
    off = lap.indices != rows
    cols = lap.indices[off]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows[off], minlength=n))])
    value_key = value_keys(lap.data[off])
    diagonal = lap.diagonal()
    _, colour = np.unique(diagonal, return_inverse=True)
    colour = colour.ravel()
    classes = int(colour.max()) + 1 if n else 0
    settled = classes == n
    colour = colour.astype(np.uint64)
    for round_ in range(1, max_rounds + 1):
        if settled:
            break
        signature = _row_sums(_mix(colour[cols] * _GOLDEN ^ value_key), indptr)
        colour = _mix(signature ^ _mix(colour))
        if round_ % 4 and round_ < max_rounds:  # count the colours every 4 rounds: a sort is most of a round's cost
            continue
        _, colour = np.unique(colour, return_inverse=True)
        colour = colour.ravel().astype(np.uint64)
        refined = int(colour.max()) + 1
        settled = refined in (classes, n)  # (refinement only splits: 4 rounds without a split is stable)
        classes = refined
        if not settled and (8 * classes < n if round_ >= 8 else 16 * classes < n):
            # few colours after 4 or 8 rounds: a symmetric or long, thin graph (a 2-D grid: 21 colours after 4
            # rounds at any size; rings with chords and Barabasi-Albert graphs: over n / 3); counting it symmetric
            # early only costs speed (the block solvers are exact on any graph), and saves the remaining rounds
            return Symmetry(True, np.zeros(0))
    if not settled:
        return Symmetry(True, np.zeros(0))
    colour = colour.astype(np.int64)
    size = np.bincount(colour)
    shared = np.flatnonzero(size[colour] > 1)
    if shared.size == 0:
        return Symmetry(False, np.zeros(0))
    row_hash = _row_sums(_mix(cols.astype(np.uint64) * _GOLDEN ^ value_key), indptr)
    pairs = np.unique(np.stack([colour[shared].astype(np.uint64), row_hash[shared]]), axis=1)
    if pairs.shape[1] != np.unique(colour[shared]).size:  # a colour class of nodes that are not all twins
        return Symmetry(True, np.zeros(0))
    return Symmetry(False, np.unique(diagonal[shared].real))
