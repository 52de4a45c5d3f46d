"""Graph positional encodings: Laplacian eigenvectors (also magnetic, for directed graphs), random walks, RRWP,
sign and eigenspace-basis handling, SignNet; PyG transforms, networkx.

The tensor functions and :class:`SignNet` need only torch, NumPy and SciPy (pyamg, in the ``[graph]`` extra,
speeds up the largest mesh-like graphs). The PyG transforms (``AddLaplacianPE``, ``AddMagneticLaplacianPE``,
``AddRandomWalkPE``, ``AddRRWP``, ``RandomSignFlip``, ``precompute``) live in :mod:`omnipos.graph.pyg` and are
imported on first use; they and the ``networkx_*`` helpers need the ``[graph]`` extra
(``pip install "omnipos[graph]"``: torch_geometric, networkx).
"""

from __future__ import annotations

from typing import Any

from .eigensolvers import SOLVERS
from .eigenvalues import eigenvalue_encoding
from .laplacian import (
    DENSE_MAX_NODES,
    NORMALIZATIONS,
    connected_components,
    laplacian_pe,
)
from .magnetic import magnetic_laplacian, magnetic_laplacian_pe
from .networkx import (
    networkx_laplacian_pe,
    networkx_random_walk_pe,
    networkx_to_edge_index,
)
from .random_walk import RW_DENSE_MAX_NODES, RW_EXACT_STEPS, random_walk_pe, transition_matrix
from .rrwp import rrwp
from .sign import canonical_basis, canonical_sign, random_sign_flip
from .signnet import SignNet

__all__ = [
    "laplacian_pe",
    "magnetic_laplacian_pe",
    "magnetic_laplacian",
    "random_walk_pe",
    "transition_matrix",
    "rrwp",
    "SignNet",
    "canonical_sign",
    "canonical_basis",
    "random_sign_flip",
    "connected_components",
    "eigenvalue_encoding",
    "networkx_laplacian_pe",
    "networkx_random_walk_pe",
    "networkx_to_edge_index",
    "NORMALIZATIONS",
    "DENSE_MAX_NODES",
    "RW_DENSE_MAX_NODES",
    "RW_EXACT_STEPS",
    "SOLVERS",
    "AddLaplacianPE",
    "AddMagneticLaplacianPE",
    "AddRandomWalkPE",
    "AddRRWP",
    "RandomSignFlip",
    "precompute",
]

_PYG = ("AddLaplacianPE", "AddMagneticLaplacianPE", "AddRandomWalkPE", "AddRRWP", "RandomSignFlip", "precompute")


def __getattr__(name: str) -> Any:
    if name in _PYG:
        from . import pyg

        return getattr(pyg, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
