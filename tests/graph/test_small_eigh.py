"""The small-matrix batched eigensolver behind laplacian_pe's dense path, against float64 NumPy (LAPACK)."""

import threading

import numpy as np
import pytest
import torch

from omnipos.graph import small_eigh as module
from omnipos.graph.small_eigh import one_mkl_thread, small_eigh


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


def test_one_mkl_thread_is_local_and_restored():
    """The limit applies to the calling thread only and is undone on exit (also after an exception). (torch's
    set_num_threads sets the same thread-local value in the thread that calls it, so it is read, not assumed.)"""
    set_local = module._mkl_set_local()
    if set_local is None:
        pytest.skip("torch is built without MKL: one_mkl_thread is a no-op")

    def read() -> int:
        value = set_local(0)
        set_local(value)
        return value

    before, seen = read(), {}
    other = threading.Thread(target=lambda: seen.setdefault("other", read()))
    with one_mkl_thread():
        inside = read()
        other.start()
        other.join()
    assert inside == 1 and seen["other"] == 0 and read() == before
    with pytest.raises(RuntimeError), one_mkl_thread():
        raise RuntimeError("boom")
    assert read() == before
