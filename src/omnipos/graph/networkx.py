"""networkx input: encode an ``nx.Graph`` / ``nx.DiGraph`` / multigraph directly.

Rows follow ``list(graph.nodes)`` (networkx's insertion order), whatever the node labels are. Edge weights are
read from the ``weight`` attribute when one is named (missing values count as 1); parallel edges of a multigraph
add up. An undirected graph gives both directions of each edge; a DiGraph gives its edges as they are (so the
random walk is directed, the Laplacian symmetrised, as for an edge list).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch

from ..core import renamed_argument, require
from .laplacian import laplacian_pe
from .random_walk import random_walk_pe

__all__ = ["networkx_to_edge_index", "networkx_laplacian_pe", "networkx_random_walk_pe"]


def networkx_to_edge_index(graph: Any, weight: str | None = None) -> tuple[torch.Tensor, torch.Tensor | None, list]:
    """``(edge_index [2, E], edge_weight [E] float64 or None, nodes)`` of a networkx graph."""
    nx = require("networkx", "graph", "networkx input")
    if not isinstance(graph, nx.Graph):
        raise TypeError(f"graph must be a networkx graph, got {type(graph).__name__}")
    nodes = list(graph.nodes)
    position = {node: i for i, node in enumerate(nodes)}
    pairs, weights = [], []
    for u, v, attributes in graph.edges(data=True):
        w = 1.0 if weight is None else attributes.get(weight, 1.0)
        pairs.append((position[u], position[v]))
        weights.append(w)
        if not graph.is_directed() and u != v:
            pairs.append((position[v], position[u]))
            weights.append(w)
    edge_index = torch.tensor(pairs, dtype=torch.long).reshape(-1, 2).T.contiguous()
    if weight is None:
        return edge_index, None, nodes
    values = []
    for w, (u, v) in zip(weights, pairs):
        if isinstance(w, (bool, np.bool_)) or not isinstance(w, numbers.Real):
            raise TypeError(f"edge attribute {weight!r} must hold real numbers; edge {nodes[u]!r} -> {nodes[v]!r} "
                            f"has {w!r}")
        try:
            values.append(float(w))
        except OverflowError:
            raise ValueError(f"edge attribute {weight!r} of edge {nodes[u]!r} -> {nodes[v]!r} is beyond float64's "
                             f"range: {w!r}") from None
    return edge_index, torch.tensor(values, dtype=torch.float64), nodes


def networkx_laplacian_pe(graph: Any, k: int, *, weight: str | None = None, **kwargs: Any) -> Any:
    """:func:`~omnipos.graph.laplacian_pe` of a networkx graph: ``[N, k]`` rows in ``list(graph.nodes)`` order
    (keyword arguments as there, e.g. ``normalization``, ``return_eigenvalues``)."""
    edge_index, edge_weight, nodes = networkx_to_edge_index(graph, weight)
    return laplacian_pe(edge_index, len(nodes), k, edge_weight=edge_weight, **kwargs)


def networkx_random_walk_pe(graph: Any, walk_length: Any = 16, *, weight: str | None = None,
                            steps: Any = None, **kwargs: Any) -> torch.Tensor:
    """:func:`~omnipos.graph.random_walk_pe` of a networkx graph: ``[N, len(walk_length)]`` in
    ``list(graph.nodes)`` order (``steps=``, the old name of ``walk_length``, still works)."""
    edge_index, edge_weight, nodes = networkx_to_edge_index(graph, weight)
    walk_length = renamed_argument(walk_length, steps, "walk_length", "steps", default=16)
    return random_walk_pe(edge_index, len(nodes), walk_length, edge_weight=edge_weight, **kwargs)
