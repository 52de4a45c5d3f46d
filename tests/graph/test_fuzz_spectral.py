"""Fuzz the spectral side of omnipos.graph (issue 14): laplacian_pe, magnetic_laplacian_pe and the sign helpers.

Whatever comes in, only ValueError / TypeError come out, and whatever comes out is finite."""

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omnipos.graph import (
    canonical_basis,
    canonical_sign,
    laplacian_pe,
    magnetic_laplacian_pe,
    random_sign_flip,
)

FLOATS = st.sampled_from([0.0, 1.0, 0.5, 1e-300, 1e-30, 1e30, 1e300, 3.0e38, float("nan"), float("inf"),
                          -float("inf"), -1.0, 5e-324])
DTYPES = st.sampled_from([torch.int64, torch.int32, torch.uint8, torch.int16, torch.float32, torch.float64,
                          torch.bool, torch.complex64])
DEVICES = st.sampled_from(["cpu", "cpu", "cpu", "meta"])


@st.composite
def graph_inputs(draw):
    n = draw(st.integers(0, 9))
    edges = draw(st.integers(0, 14))
    high = max(n, 1) + draw(st.sampled_from([0, 0, 0, 2]))  # sometimes out of range
    low = draw(st.sampled_from([0, 0, 0, -2]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    edge_index = torch.from_numpy(rng.integers(low, high, (2, edges)))
    layout = draw(st.sampled_from(["plain", "transposed", "0-d", "1-d", "list", "dtype"]))
    if layout == "transposed":  # non-contiguous, same values
        edge_index = edge_index.T.contiguous().T
    elif layout == "0-d":
        edge_index = torch.tensor(3)
    elif layout == "1-d":
        edge_index = edge_index.reshape(-1)
    elif layout == "list":
        edge_index = edge_index.tolist()
    elif layout == "dtype":
        edge_index = edge_index.to(draw(DTYPES))
    if isinstance(edge_index, torch.Tensor):
        edge_index = edge_index.to(draw(DEVICES))
    weight = None
    if draw(st.booleans()):
        weight = torch.tensor([draw(FLOATS) for _ in range(edges)], dtype=torch.float64)
        if draw(st.booleans()):
            weight = weight.to(draw(DTYPES))
    batch = None
    if draw(st.booleans()) and n:
        cuts = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
        batch = torch.from_numpy(np.searchsorted(np.array(cuts), np.arange(n), side="right"))
        if draw(st.booleans()):
            batch = batch.flip(0)  # unsorted
        if draw(st.booleans()):
            batch = batch[: max(n - 1, 0)]  # wrong length
    k = draw(st.sampled_from([1, 2, 5, 0, -1, 2 ** 40, 2.0]))
    return edge_index, n, k, weight, batch


def assert_clean(call):
    try:
        out = call()
    except (ValueError, TypeError):
        return
    outputs = out if isinstance(out, tuple) else (out,)
    for tensor in outputs:
        if tensor.is_floating_point():
            assert bool(torch.isfinite(tensor).all())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_inputs(), st.sampled_from(["sym", "rw", None]), st.booleans())
def test_laplacian_pe(inputs, normalization, per_component):
    edge_index, n, k, weight, batch = inputs
    assert_clean(lambda: laplacian_pe(edge_index, n, k, edge_weight=weight, batch=batch, normalization=normalization,
                                      per_component=per_component, return_eigenvalues=True))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_inputs(), st.sampled_from([0.0, 0.25, 0.5, -0.1, 0.7, float("nan"), "0.1", None]))
def test_magnetic_laplacian_pe(inputs, q):
    edge_index, n, k, weight, batch = inputs
    assert_clean(lambda: magnetic_laplacian_pe(edge_index, n, k, q=q, edge_weight=weight, batch=batch,
                                               return_eigenvalues=True))


@st.composite
def matrices(draw):
    shape = draw(st.sampled_from([(), (4,), (0, 3), (3, 0), (5, 3), (2, 4, 3)]))
    values = [draw(FLOATS) for _ in range(int(np.prod(shape)) if shape else 1)]
    tensor = torch.tensor(values, dtype=torch.float64).reshape(shape)
    kind = draw(st.sampled_from(["plain", "transposed", "dtype", "meta", "list"]))
    if kind == "transposed" and tensor.ndim >= 2:
        tensor = tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif kind == "dtype":
        tensor = tensor.to(draw(DTYPES))
    elif kind == "meta":
        tensor = tensor.to("meta")
    elif kind == "list":
        return tensor.tolist()
    return tensor


@settings(max_examples=150, deadline=None)
@given(matrices())
def test_canonical_sign(vectors):
    def call():
        out = canonical_sign(vectors)
        return out if out.device.type != "meta" else torch.zeros(1)

    assert_clean(call)


@settings(max_examples=100, deadline=None)
@given(matrices())
def test_canonical_basis(vectors):
    if isinstance(vectors, torch.Tensor) and vectors.ndim >= 2:
        values = torch.zeros(vectors.shape[:-2] + vectors.shape[-1:], dtype=torch.float64)
    else:
        values = torch.zeros(1)
    assert_clean(lambda: canonical_basis(vectors, values) if not (isinstance(vectors, torch.Tensor)
                                                                  and vectors.device.type == "meta")
                 else canonical_basis(vectors, values.to("meta")).new_zeros(1, device="cpu"))


@settings(max_examples=150, deadline=None)
@given(matrices(), st.sampled_from([None, "ok", "negative", "short", "float", "huge", "list", "meta"]))
def test_random_sign_flip(pe, batch_kind):
    rows = pe.shape[0] if isinstance(pe, torch.Tensor) and pe.ndim else 1
    batch = {None: None, "ok": torch.zeros(rows, dtype=torch.long), "negative": torch.full((rows,), -2),
             "short": torch.zeros(max(rows - 1, 0), dtype=torch.long), "float": torch.zeros(rows),
             "huge": torch.full((rows,), 2 ** 62), "list": [0] * rows,
             "meta": torch.zeros(rows, dtype=torch.long, device="meta")}[batch_kind]

    def call():
        out = random_sign_flip(pe, batch, generator=torch.Generator().manual_seed(0))
        return out if out.device.type != "meta" else torch.zeros(1)

    assert_clean(call)
