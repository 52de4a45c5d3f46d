"""Random-walk structural encoding (Dwivedi et al., "Graph Neural Networks with Learnable Structural and
Positional Representations", 2022; GraphGPS's RWSE): the probability that a random walk from node ``i`` is back
at ``i`` after ``s`` steps, ``(P^s)_ii``, for each requested ``s``.

The transition matrix is ``P_ij = w_ij / sum_j w_ij`` (row-stochastic: each row of a node with edges sums to 1).
PyG's ``AddRandomWalkPE`` uses ``1 / sum_j w_ij`` instead, which ignores the weight of the edge taken and gives
rows that do not sum to 1 on weighted graphs (pyg-team/pytorch_geometric#10098); on unweighted graphs the two
agree. Edges are used as given: ``i -> j`` is a step from ``i`` to ``j`` (a directed list gives a directed walk, as
in PyG; list both directions for an undirected graph). Self-loops are steps too; duplicate edges add their
weights; a node with no out-edge of positive weight has a zero row (its encoding is 0, as in PyG). Weights are
divided by the largest out-weight of their node before they are summed, so weights near float64's limits
(1e-300, 1e300) neither overflow nor underflow.

Solvers, chosen per graph by its node count (so a graph gets the same path, and the same bits, alone and in any
batch):

- dense (``n <= dense_max_nodes``): graphs are grouped by node count; each group's ``[C, n, n]`` transition
  matrices are multiplied in batched ``matmul``s, about ``2 sqrt(max(walk_length))`` of them (baby-step giant-step, see
  :func:`return_probabilities`; steps above 4096 by repeated squaring, so ``walk_length=[2**62]`` takes ~120 products,
  not 2**62). float64 unless ``compute_dtype`` says otherwise. On the CPU this runs in NumPy, one BLAS call per
  matrix (no OpenMP threads); on other devices the chunk size ``C`` depends on ``n`` only and the last chunk of a
  group is padded with empty graphs. Either way each matrix's products do not depend on the other graphs of the
  batch: a graph gets the same bits alone and batched.
- sparse (bigger graphs; SciPy on the CPU, results moved back to the input's device): never a dense power.
  ``(P^s)_ii = sum_l (P^a)_il (P^b)_li`` with ``a = ceil(s/2)``, ``b = floor(s/2)``: the rows of ``P^a`` and the
  columns of ``P^b`` of a block of nodes are propagated by sparse products (``ceil(max(walk_length) / 2)`` of them, not
  ``max(walk_length)`` as PyG's powers), and each diagonal is a row-wise dot product. On an undirected graph one
  propagation serves both, through the symmetric ``S = D^-1/2 A D^-1/2`` (``(S^s)_ii = (P^s)_ii``). Memory is
  bounded by working on blocks of rows sized so that their ``P^a`` rows fit in ~4M entries (a block that could
  outgrow that at its next product is split first); rows whose walks have spread over a good part of their graph
  (hub-heavy graphs) continue as dense ``[graph nodes, block]`` columns, which computes the same sums in the same
  order, so the bits do not depend on the blocking either. Graphs of 16,384 nodes or more are walked one at a
  time with their nodes in reverse Cuthill-McKee order (a function of the graph alone), which keeps each
  node's neighbourhood in nearby memory.
  Time ``O(sum_i sum_{t <= max(walk_length)/2} |ball_t(i)| * degree)``: a 20,000-node grid with 16 steps takes ~0.2 s
  (PyG's ``AddRandomWalkPE`` ~1 s), a million-node grid ~8 s in ~600 MB; a Barabasi-Albert graph needs
  ``O(n * E * steps / 2)`` because its walks reach every node within a few steps (20,000 nodes: ~25 s; PyG runs
  out of memory). ``max(walk_length)`` is capped at ``RW_SPARSE_MAX_STEPS`` there.

Accuracy: float64 throughout (the output is float32); the two paths agree to ~1e-15 before the cast.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..core import check_positive_int, progress_reporter, renamed_argument
from ._input import (
    MAX_ELEMENTS,
    check_dense_size,
    check_graph,
    check_output_size,
    check_walk_length,
    size_groups,
)
from .walks import (
    dense_transitions,
    estimated_return_probabilities,
    return_probabilities,
    sparse_return_probabilities,
    sparse_transitions,
    transition_weights,
)

__all__ = ["random_walk_pe", "transition_matrix", "RW_DENSE_MAX_NODES", "RW_SPARSE_MAX_STEPS", "RW_EXACT_STEPS"]

#: Graphs with more nodes than this use the sparse path. Measured on 2 cores, 8k nodes in graphs of n nodes, 16
#: steps: at n = 256 the dense path takes ~0.17 s whatever the shape, the sparse one 0.02 s (local graphs) to 1.6 s
#: (Barabasi-Albert); at n = 128, 0.08-0.10 s vs 0.02-0.24 s.
RW_DENSE_MAX_NODES = 256
#: The sparse path propagates ``ceil(max(walk_length) / 2)`` times: longer walks are refused there.
RW_SPARSE_MAX_STEPS = 1024
#: With ``probes=``, steps up to this many stay exact on the sparse path (rows of ``P^2``: cheap even on hub-heavy
#: graphs, 6 s of CPU for a 200,000-node, 1M-edge power-law graph); longer ones are estimated.
RW_EXACT_STEPS = 4
_NUMPY = {torch.float32: np.float32, torch.float64: np.float64}
# Graphs of at least this many nodes are renumbered for locality and walked one at a time (see sparse_transitions).
_RELABEL_MIN_NODES = 16384


def transition_matrix(edge_index: Any, num_nodes: int, *, batch: Any = None, edge_weight: Any = None) -> torch.Tensor:
    """The dense float64 transition matrices ``P_ij = w_ij / sum_j w_ij`` of a graph ``[N, N]`` (or of each graph
    of a batch of equal-sized graphs, ``[B, n, n]``); rows of nodes without out-edges are 0. For inspection and
    small graphs: :func:`random_walk_pe` never forms the big ones densely."""
    g = check_graph(edge_index, num_nodes, batch, edge_weight)
    if int(g.counts.min()) != int(g.counts.max()):
        raise ValueError("transition_matrix needs graphs of one size; call it per graph")
    n = int(g.counts[0])
    if n * n * g.num_graphs > MAX_ELEMENTS:
        raise ValueError(f"num_nodes={g.num_nodes} ({g.num_graphs} dense [{n}, {n}] matrices) does not fit in "
                         f"memory: at most {MAX_ELEMENTS:,} elements; random_walk_pe works without them")
    group = size_groups(transition_weights(g))[0]
    transition = torch.cat([torch.as_tensor(p[:graphs.numel()]).to(g.device) for graphs, p in dense_transitions(group)])
    return transition[0] if batch is None else transition


def random_walk_pe(
    edge_index: Any,
    num_nodes: int,
    walk_length: int | list[int] | None = 16,
    *,
    batch: Any = None,
    edge_weight: Any = None,
    dense_max_nodes: int = RW_DENSE_MAX_NODES,
    compute_dtype: torch.dtype = torch.float64,
    block: int | None = None,
    progress: Any = None,
    probes: int | None = None,
    generator: torch.Generator | None = None,
    return_stderr: bool = False,
    steps: int | list[int] | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Random-walk return probabilities of every node of a graph or of a PyG batch of graphs.

    Args:
        edge_index: ``[2, E]`` integer node pairs; ``i -> j`` is a possible step (see the module docstring).
        num_nodes: ``N``, total number of nodes (of all graphs of the batch).
        walk_length: ``S`` for steps ``1..S`` (PyG's ``walk_length``), or a list of step counts (any positive
            ints, output columns in the given order, as GraphGPS's ``kernel.times``). Its old name ``steps=`` still
            works.
        batch: ``[N]`` non-decreasing graph id per node (PyG's ``batch``); ``None`` = one graph.
        edge_weight: ``[E]`` finite, non-negative weights (default 1); the walk takes ``i -> j`` with probability
            ``w_ij / sum_j w_ij``.
        dense_max_nodes: graphs with more nodes use the sparse path (see the module docstring).
        compute_dtype: dtype of the dense path's matrix powers. float64 (default) is exact to the float32
            output; ``torch.float32`` is ~1.3x faster and, the terms being non-negative (no cancellation), stays
            within ~1e-6 relative (2.7e-7 absolute measured over 10k molecule-sized graphs, 20 steps): PyG's
            precision. Either way a graph gives the same bits alone and in any batch. The sparse path is float64.
        block: rows per block on the sparse path (default: sized to ~4M entries); the result does not depend on it.
        progress: ``True``, a callable ``(done, total)`` or ``None`` (see :mod:`omnipos.core.progress`); ``done``
            counts nodes, and with ``probes`` also nodes times probes of the estimate.
        probes: ``None`` (default): exact. An int ``m >= 2``: on graphs of the sparse path, steps above
            ``RW_EXACT_STEPS`` are *estimated* (Hutchinson: the mean over ``m`` random +-1 vectors ``z`` of
            ``z_i (P^s z)_i``), in ``O(m * edges * max(walk_length))`` time instead of the exact
            ``O(nodes * edges * max(walk_length) / 2)`` of hub-heavy graphs (see the module docstring). The
            estimate is unbiased; its error has standard deviation ``sqrt(sum_{l != i} (P^s)_il^2 / m)``, which
            ``return_stderr=True`` reports per entry (the probes' sample standard deviation / ``sqrt(m)``): by
            Chebyshev, ``|error| <= t * stderr`` with probability at least ``1 - 1/t^2``. Estimates may fall
            slightly outside ``[0, 1]`` (they are not clamped) and depend on the batch and the ``generator``.
            Steps up to ``RW_EXACT_STEPS`` and graphs of the dense path stay exact (their stderr is 0).
        generator: random source of the probes (default: a fixed seed, so a call repeats its numbers).
        return_stderr: also return the ``[N, len(walk_length)]`` float32 standard errors (0 where exact).

    Returns:
        ``[N, len(walk_length)]`` float32 on the input's device: column ``c`` is ``(P^walk_length[c])_ii``;
        with ``return_stderr`` also the standard errors.

    Raises:
        ValueError / TypeError: bad walk_length, node ids, weights (NaN, negative), batch (unsorted, wrong length),
        meta tensors, sizes beyond ``MAX_ELEMENTS``, or more than ``RW_SPARSE_MAX_STEPS`` steps on a graph of the
        sparse path.
    """
    steps = check_walk_length(renamed_argument(walk_length, steps, "walk_length", "steps", default=16))
    dense_max_nodes = check_positive_int(dense_max_nodes, "dense_max_nodes")
    if block is not None:
        block = check_positive_int(block, "block")
    if compute_dtype not in (torch.float32, torch.float64):
        raise ValueError(f"compute_dtype must be torch.float32 or torch.float64, got {compute_dtype!r}")
    if probes is not None:
        probes = check_positive_int(probes, "probes", minimum=2)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    g = check_graph(edge_index, num_nodes, batch, edge_weight)
    check_output_size(g, "walk_length", f"{len(steps)} steps", len(steps))
    out = torch.zeros(g.num_nodes, len(steps), dtype=torch.float32, device=g.device)
    stderr = torch.zeros_like(out) if return_stderr else None
    big = g.counts > dense_max_nodes
    estimated = sorted({s for s in steps if s > RW_EXACT_STEPS}) if probes is not None else []
    total = g.num_nodes + (int(g.counts[big].sum()) * probes if estimated else 0)
    rng = None
    if estimated:
        seed = 0 if generator is None else int(torch.randint(0, 2 ** 62, (1,), generator=generator,
                                                             device=generator.device))
        rng = np.random.default_rng(seed)
    with progress_reporter(progress, total=total, desc="random_walk_pe", name="progress") as report:
        if bool(big.any()):
            if max(steps) > RW_SPARSE_MAX_STEPS:
                first = int(big.nonzero()[0])
                raise ValueError(
                    f"walk_length: {max(steps)} steps on graph {int(g.graph_ids[first])} (nodes "
                    f"{int(g.ptr[first])}..{int(g.ptr[first + 1]) - 1}, more than dense_max_nodes="
                    f"{dense_max_nodes}) exceed RW_SPARSE_MAX_STEPS={RW_SPARSE_MAX_STEPS}, the longest walk the "
                    "sparse path computes; raise dense_max_nodes to use dense repeated squaring")
            huge = big & (g.counts >= _RELABEL_MIN_NODES)
            parts = [big & ~huge] + [g.counts.new_zeros(big.shape).bool().index_fill_(0, i, True)
                                     for i in huge.nonzero()]
            for i, part in enumerate(parts):  # the huge graphs one by one, each in its own cache-friendly order
                if i == 0 and not bool(part.any()):
                    continue
                walks = sparse_transitions(g, part, relabel=i > 0)
                exact = [s for s in steps if s not in estimated]
                values = np.zeros((walks.n, len(steps)))
                if exact:
                    columns = [c for c, s in enumerate(steps) if s not in estimated]
                    values[:, columns] = sparse_return_probabilities(walks, exact, block, report)
                else:
                    report.update(walks.n)
                if estimated:
                    mean, error = estimated_return_probabilities(walks.matrix, estimated, probes, rng, report)
                    columns = [c for c, s in enumerate(steps) if s in estimated]
                    where = [estimated.index(s) for s in steps if s in estimated]
                    values[:, columns] = mean[:, where]
                    if stderr is not None:
                        stderr[walks.nodes[:, None], torch.tensor(columns, device=g.device)] = \
                            torch.from_numpy(error[:, where]).to(device=g.device, dtype=torch.float32)
                out[walks.nodes] = torch.from_numpy(values).to(device=g.device, dtype=torch.float32)
        for group in size_groups(transition_weights(g, edge_weight is not None)):
            if group.n == 0 or group.n > dense_max_nodes:
                continue
            check_dense_size(group, g, dense_max_nodes, "transition matrix")
            for graphs, transition in dense_transitions(group):
                if isinstance(transition, np.ndarray):
                    values = torch.from_numpy(return_probabilities(transition.astype(_NUMPY[compute_dtype]), steps))
                else:
                    values = return_probabilities(transition.to(compute_dtype), steps)[:graphs.numel()]
                nodes = g.ptr[graphs].unsqueeze(1) + torch.arange(group.n, device=g.device)
                out[nodes.reshape(-1)] = values.reshape(-1, len(steps)).to(torch.float32)
                report.update(nodes.numel())
    return (out, stderr) if return_stderr else out
