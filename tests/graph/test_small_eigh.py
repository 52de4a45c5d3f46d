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
