"""Dense ``eigh`` for many small graphs (the small-graph path of :func:`omnipos.graph.laplacian_pe` and
:func:`omnipos.graph.magnetic_laplacian_pe`, and the large-graph path's small components): batched over ``[G, n, n]``
stacks split across worker threads, in chunks of bounded memory; and every eigenpair of one small sparse
component (the block solvers' fallback once their block would be a fifth of the graph)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch

from .._input import SizeGroup
from .._workers import parallel_map
from ..sign import canonical_basis
from ..small_eigh import LANE_BLOCK, small_eigh, uses_lane_kernel

# Below this much eigh work (sum of G * n^3; 2e6 is ~130 graphs of 25 nodes, ~8 ms of LAPACK), splitting it
# over threads costs more than it saves.
_PARALLEL_MIN_WORK = 2_000_000
# Elements of dense [G, n, n] blocks solved at once on the large-graph path (float64: 256 MB).
CHUNK_ELEMENTS = 32_000_000


def batched_eigh(stacks: list[torch.Tensor], workers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``torch.linalg.eigh`` of each ``[G, n, n]`` stack. On the CPU the work is split over up to ``workers``
    worker threads (LAPACK and the lane kernel release the GIL), each small matrix on one thread
    (:func:`omnipos.graph.small_eigh.small_eigh`). The stacks the lane kernel solves are cut into at most
    ``workers`` parts of about equal cost (``G * n^3``), a run of whole stacks and pieces of stacks cut at
    multiples of ``LANE_BLOCK`` matrices: the kernel solves ``LANE_BLOCK`` matrices side by side, so a cut
    elsewhere would leave a partly empty block on each side (on 4,000 molecules cut into a piece per stack and
    thread: a fifth more CPU time, and a task, a wake-up and a concatenation per piece); where a matrix is cut
    does not change its result (the lanes are independent). A stack LAPACK solves is cut into ``workers`` pieces
    as before: MKL's results (the basis ``sign="none"`` returns) depend on where a matrix sits in its piece."""
    work = [s.shape[0] * s.shape[-1] ** 3 for s in stacks]
    if not stacks or workers <= 1 or sum(work) < _PARALLEL_MIN_WORK or stacks[0].device.type != "cpu":
        return [small_eigh(s) for s in stacks]
    lane = [i for i, s in enumerate(stacks) if uses_lane_kernel(s)]
    tasks: list[list[tuple[int, torch.Tensor]]] = []
    if lane:
        parts = _balanced_parts([stacks[i] for i in lane], [work[i] for i in lane], workers)
        tasks += [[(lane[j], stacks[lane[j]][lo:hi]) for j, lo, hi in part] for part in parts]
    chosen = set(lane)
    for i, s in enumerate(stacks):
        if i not in chosen:
            tasks += [[(i, piece)] for piece in s.tensor_split(min(workers, s.shape[0]))]
    solved = parallel_map(lambda task: [small_eigh(piece) for _, piece in task], tasks, workers)
    pieces: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in stacks]
    for task, results in zip(tasks, solved):
        for (i, _), result in zip(task, results):
            pieces[i].append(result)
    return [chunk[0] if len(chunk) == 1 else (torch.cat([c[0] for c in chunk]), torch.cat([c[1] for c in chunk]))
            for chunk in pieces]


def _balanced_parts(stacks: list[torch.Tensor], work: list[int], workers: int) -> list[list[tuple[int, int, int]]]:
    """``stacks`` (their costs ``work``) cut into at most ``workers`` consecutive parts of about equal cost, each a
    list of ``(stack, first matrix, end)``; a stack is cut only at multiples of ``LANE_BLOCK`` matrices."""
    target = sum(work) / workers
    parts: list[list[tuple[int, int, int]]] = [[]]
    filled = 0.0
    for i, stack in enumerate(stacks):
        count = stack.shape[0]
        each = work[i] / max(1, count)
        lo = 0
        while lo < count:
            room = target - filled
            if len(parts) == workers:  # the last part takes the rest
                hi = count
            else:
                hi = lo + max(0, round(room / each / LANE_BLOCK)) * LANE_BLOCK if each else count
                if not parts[-1]:  # (at least one block per part)
                    hi = max(hi, lo + LANE_BLOCK)
                hi = min(max(hi, lo), count)
            if hi > lo:
                parts[-1].append((i, lo, hi))
                filled += (hi - lo) * each
            if hi < count:  # the part is full: the next one starts here
                parts.append([])
                filled = 0.0
            lo = hi
    return [part for part in parts if part]


def solve_dense_groups(groups: Iterable[SizeGroup], build: Callable[[SizeGroup], tuple[torch.Tensor, Any]],
                       workers: int, max_elements: int,
                       canonical: Callable[[SizeGroup, Any], tuple[int, Any]] | None = None,
                       ) -> Iterator[tuple[SizeGroup, Any, torch.Tensor, torch.Tensor]]:
    """Batched ``eigh`` of the matrices ``build(chunk) -> ([G, n, n], extra)`` of the groups, cut into chunks and
    solved a few at a time so that at most about ``max_elements`` matrix elements are alive at once. Yields
    ``(chunk, extra, values [G, n], vectors [G, n, n])``; with ``canonical(chunk, extra) -> (count, scale)`` the
    vectors are instead the first ``count`` columns of the canonical basis (:func:`canonical_basis`, clusters
    scaled by ``scale``)."""
    pending: list[SizeGroup] = []
    elements = 0

    def flush() -> Iterator[tuple[SizeGroup, Any, torch.Tensor, torch.Tensor]]:
        built = [build(chunk) for chunk in pending]
        solved = batched_eigh([matrix for matrix, _ in built], workers)
        if canonical is None:
            for chunk, (_, extra), (values, vectors) in zip(pending, built, solved):
                yield chunk, extra, values, vectors
            return
        wanted = [canonical(chunk, extra) for chunk, (_, extra) in zip(pending, built)]
        bases = [canonical_basis(vectors, values, count, scale=scale, check=False)
                 for (values, vectors), (count, scale) in zip(solved, wanted)]
        for chunk, (_, extra), (values, _), basis in zip(pending, built, solved, bases):
            yield chunk, extra, values, basis

    for group in groups:
        for chunk in group.chunks(max_elements):
            pending.append(chunk)
            elements += chunk.graphs.numel() * chunk.n * chunk.n
            if elements >= max_elements:
                yield from flush()
                pending, elements = [], 0
    if pending:
        yield from flush()


def dense_lowest(lap: Any, null: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Every eigenpair of a (small) component by dense ``eigh``, without the null vector's."""
    values, vectors = np.linalg.eigh(lap.toarray())
    if null is not None:  # a connected component's null space is the one known vector: drop its pair
        values, vectors = values[1:], vectors[:, 1:]
    return values, vectors
