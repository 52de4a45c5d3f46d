"""``solver="shift-invert"``: Lanczos (ARPACK) on ``(L + sigma I)^-1`` with a sparse LU of ``L + sigma I``
(``sigma = 1e-6 * bound``; SuperLU, minimum-degree ordering of ``A + A^T``, no pivoting: the matrix is Hermitian
positive definite), on the complement of the known null vector. Converges in a few dozen solves whatever the
spectral gap. Also :func:`rcm_envelope`, the bound on the factor's size by which ``"auto"`` decides whether a
factor fits (:data:`~omnipos.graph.eigensolvers.FILL_BUDGET`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .arpack import arpack_vectors
from .kernels import count_step, deflate


def rcm_envelope(pattern: Any) -> int:
    """Envelope (profile) size of a symmetric sparse pattern under reverse Cuthill-McKee: the number of entries
    of its Cholesky / no-pivoting LU factor under that ordering, at most."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    pattern = sp.csr_matrix((np.ones(pattern.nnz), pattern.indices, pattern.indptr), shape=pattern.shape)
    order = reverse_cuthill_mckee(pattern, symmetric_mode=True)
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    coo = pattern.tocoo()
    rows, cols = position[coo.row], position[coo.col]
    first = np.arange(order.size)
    np.minimum.at(first, rows, cols)
    return int((np.arange(order.size) - first).sum()) + order.size


def shift_invert_vectors(lap: Any, width: int, null: np.ndarray | None, bound: float) -> np.ndarray:
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    n = lap.shape[0]
    sigma = 1e-6 * bound
    factor = splu((lap + sigma * sp.identity(n, dtype=lap.dtype, format="csr")).tocsc(),
                  permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
    count_step()
    # (L + sigma)^-1 on the complement of the null vector: its largest eigenvalues are L's smallest there
    return arpack_vectors(lambda x: deflate(null, factor.solve(deflate(null, x))), n, width, lap.dtype, tol=1e-12)
