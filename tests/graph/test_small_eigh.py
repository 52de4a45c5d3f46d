"""The small-matrix batched eigensolver behind laplacian_pe's dense path, against float64 NumPy (LAPACK)."""

import threading

import numpy as np
import pytest
import torch

from omnipos.graph import small_eigh as module
from omnipos.graph.small_eigh import one_thread, small_eigh


def random_symmetric(count: int, n: int, seed: int) -> torch.Tensor:
    a = torch.randn(count, n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return a + a.transpose(1, 2)


@pytest.mark.parametrize("n", [1, 7, 30, 40])
def test_small_eigh_matches_numpy(n):
    matrices = random_symmetric(12, n, seed=n)
    values, vectors = small_eigh(matrices)
    expected = np.linalg.eigvalsh(matrices.numpy())
    np.testing.assert_allclose(values.numpy(), expected, atol=1e-12, rtol=0)
    residual = matrices @ vectors - vectors * values.unsqueeze(-2)
    assert float(residual.abs().max()) < 1e-12
    eye = torch.eye(n, dtype=torch.float64).expand(12, n, n)
    torch.testing.assert_close(vectors.transpose(1, 2) @ vectors, eye, atol=1e-13, rtol=0)


def test_one_thread_is_local_and_restored():
    """MKL's limit and torch's OpenMP thread count change in the calling thread only and are restored on exit
    (also after an exception). Run in a thread of its own that first asks for 2 threads (thread-local too), so
    that the change is visible whatever the test process set."""
    mkl_local, omp_get, omp_set = module._thread_setters()
    if mkl_local is None and omp_get is None:
        pytest.skip("torch has neither MKL nor OpenMP: one_thread is a no-op")

    def read() -> tuple[int | None, int]:
        value = None
        if mkl_local is not None:
            value = mkl_local(0)
            mkl_local(value)
        return value, torch.get_num_threads()

    def body(seen: dict) -> None:
        torch.get_num_threads()  # (torch's first-use setup of this thread, which sets both values)
        if omp_set is not None:
            omp_set(2)
        if mkl_local is not None:
            mkl_local(2)
        before = read()
        other = threading.Thread(target=lambda: seen.setdefault("other", read()))
        with one_thread():
            seen["inside"] = read()
            other.start()
            other.join()
        seen["after"] = read()
        try:
            with one_thread():
                raise RuntimeError("boom")
        except RuntimeError:
            seen["after_error"] = read()
        seen["before"] = before

    seen = {}
    main_before = read()
    thread = threading.Thread(target=body, args=(seen,))
    thread.start()
    thread.join()
    expected_before = (2 if mkl_local is not None else None, 2 if omp_get is not None else seen["before"][1])
    assert seen["before"] == expected_before
    assert seen["inside"] == (1 if mkl_local is not None else None, 1 if omp_get is not None else seen["before"][1])
    assert seen["after"] == seen["after_error"] == expected_before
    assert seen["other"] == (0 if mkl_local is not None else None, torch.get_num_threads())  # a fresh thread
    assert read() == main_before


def test_balanced_parts_cut_stacks_at_whole_lane_blocks_into_one_part_per_worker():
    """The lane kernel's stacks go to the worker threads as at most one part per worker, of about equal cost, a
    stack cut only at multiples of LANE_BLOCK matrices (a cut elsewhere leaves the kernel a partly empty block on
    each side); every matrix once, in order."""
    from omnipos.graph.eigensolvers import dense as dense_module
    from omnipos.graph.small_eigh import LANE_BLOCK

    stacks = [random_symmetric(g, n, seed=g + n) for g, n in ((70, 12), (5, 30), (130, 25), (1, 9), (40, 20))]
    work = [s.shape[0] * s.shape[-1] ** 3 for s in stacks]
    block = LANE_BLOCK * max(w / s.shape[0] for w, s in zip(work, stacks))  # the cost of the largest block
    for workers in (2, 3, 4):
        parts = dense_module._balanced_parts(stacks, work, workers)
        assert 1 < len(parts) <= workers
        flat = [piece for part in parts for piece in part]
        covered = [(i, row) for i, lo, hi in flat for row in range(lo, hi)]
        assert covered == [(i, row) for i, s in enumerate(stacks) for row in range(s.shape[0])]
        for i, lo, hi in flat:
            assert lo % LANE_BLOCK == 0 and (hi % LANE_BLOCK == 0 or hi == stacks[i].shape[0])
        costs = [sum((hi - lo) * work[i] / stacks[i].shape[0] for i, lo, hi in part) for part in parts]
        assert max(costs) <= sum(work) / workers + block


def solved_pieces(monkeypatch, stacks, workers):
    """batched_eigh(stacks, workers) and the sizes of the pieces it handed small_eigh."""
    from omnipos.graph.eigensolvers import dense as dense_module

    calls = []

    def counted(matrices):
        calls.append(matrices.shape[0])
        return small_eigh(matrices)

    monkeypatch.setattr(dense_module, "small_eigh", counted)
    return dense_module.batched_eigh(stacks, workers), calls


def test_batched_eigh_gives_the_lane_kernel_whole_parts(monkeypatch):
    """With the lane kernel, 2 workers get 2 parts: at most one stack is cut (it was cut into a piece per stack
    and worker: 10 tasks here); the result is the same bits as one call per stack."""
    pytest.importorskip("numba")
    stacks = [random_symmetric(g, n, seed=g + n) for g, n in ((70, 12), (5, 30), (130, 25), (1, 9), (40, 20))]
    solved, calls = solved_pieces(monkeypatch, stacks, 2)
    assert sum(calls) == sum(s.shape[0] for s in stacks) and len(calls) <= len(stacks) + 1
    for stack, (values, vectors) in zip(stacks, solved):
        alone_values, alone_vectors = small_eigh(stack)
        assert torch.equal(values, alone_values) and torch.equal(vectors, alone_vectors)


def test_batched_eigh_cuts_lapacks_stacks_as_before(monkeypatch):
    """Stacks LAPACK solves (no lane kernel, complex, or over 64 rows) are still cut into a piece per worker:
    MKL's basis (what sign="none" returns) depends on where a matrix sits in its piece, so another cut would
    change those outputs."""
    monkeypatch.setattr(module, "lane_kernel", lambda: None)
    stacks = [random_symmetric(g, n, seed=g + n) for g, n in ((70, 12), (130, 25), (40, 20))]
    solved, calls = solved_pieces(monkeypatch, stacks, 2)
    assert sorted(calls) == sorted(p.shape[0] for s in stacks for p in s.tensor_split(2))
    for stack, (values, vectors) in zip(stacks, solved):
        pieces = [small_eigh(p) for p in stack.tensor_split(2)]
        assert torch.equal(values, torch.cat([p[0] for p in pieces]))
        assert torch.equal(vectors, torch.cat([p[1] for p in pieces]))


def test_lane_block_is_the_lane_kernels_width():
    pytest.importorskip("numba")
    from omnipos.graph.lane_eigh import LANES
    from omnipos.graph.small_eigh import LANE_BLOCK

    assert LANE_BLOCK == LANES
