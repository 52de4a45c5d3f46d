"""Fuzzing the random-walk side of omnipos.graph (issue 14): random_walk_pe, rrwp, eigenvalue_encoding, the
networkx helpers and the transforms get NaN / inf / extreme weights, empty and 0-d tensors, non-contiguous views,
wrong dtypes, lists and meta tensors. Only ValueError / TypeError may escape, and every output is finite."""

import math

import networkx as nx
import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.data import Batch, Data

from omnipos.graph import (
    AddRandomWalkPE,
    AddRRWP,
    RandomSignFlip,
    eigenvalue_encoding,
    networkx_random_walk_pe,
    networkx_to_edge_index,
    random_walk_pe,
    rrwp,
)

REFUSALS = (ValueError, TypeError)
DTYPES = [torch.int64, torch.int32, torch.int16, torch.uint8, torch.float32, torch.float16, torch.float64,
          torch.bool, torch.complex64]
EXTREME = [0.0, 1e-320, 1e-300, 1e-30, 1.0, 3.0, 1e30, 1e300, 1.7e308, -1.0, -0.0, math.nan, math.inf, -math.inf]


def _finite(*tensors):
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            assert torch.isfinite(t).all()


@st.composite
def tensors(draw, shape, *, integers=(0, 9), floats=EXTREME, usual=torch.int64):
    """A tensor (or list / array) of roughly ``shape``: mostly ``usual`` dtype and contiguous, sometimes another
    dtype, 0-d, empty, transposed (non-contiguous), a list, an array or a meta tensor."""
    mode = draw(st.sampled_from(["plain"] * 24 + ["0-d", "empty", "transposed", "transposed", "meta", "list",
                                                 "numpy", "1-d"]))
    dtype = draw(st.sampled_from([usual] * 24 + DTYPES))
    if mode == "0-d":
        shape = ()
    elif mode == "empty":
        shape = tuple(0 if i == len(shape) - 1 else s for i, s in enumerate(shape))
    elif mode == "1-d":
        shape = (int(np.prod(shape)),)
    count = int(np.prod(shape)) if shape else 1
    if dtype.is_floating_point or dtype.is_complex:
        values = draw(st.lists(st.sampled_from(floats), min_size=count, max_size=count))
    else:
        values = draw(st.lists(st.integers(*integers), min_size=count, max_size=count))
    base = torch.tensor(values, dtype=torch.float64 if dtype.is_floating_point or dtype.is_complex
                        else torch.int64).reshape(shape)
    with np.errstate(all="ignore"):
        tensor = base.to(dtype)
    if mode == "transposed" and tensor.ndim == 2:
        tensor = tensor.T.contiguous().T  # same values, column-major strides
        assert not tensor.is_contiguous() or tensor.numel() <= 1 or 1 in tensor.shape
    if mode == "meta":
        tensor = tensor.to("meta")
    if mode == "list":
        return tensor.tolist()
    if mode == "numpy" and dtype not in (torch.bfloat16,):
        return tensor.numpy()
    return tensor


@st.composite
def graph_inputs(draw):
    n = draw(st.integers(0, 12))
    edges = draw(st.integers(0, 20))
    ids = draw(st.sampled_from([(0, max(n - 1, 0))] * 4 + [(-3, n + 2), (0, 2**62)]))
    edge_index = draw(tensors((2, edges), integers=ids))
    edge_weight = draw(st.one_of(st.none(), tensors((edges,), usual=torch.float64,
                                                    floats=EXTREME + [0.5, 2.0, 1.0, 7.0] * 3)))
    kind = draw(st.sampled_from(["none", "sorted", "huge", "unsorted", "fuzz"]))
    if kind == "none":
        batch = None
    elif kind == "fuzz":
        batch = draw(tensors((n,), integers=(-1, 3)))
    else:
        cut = draw(st.integers(0, n))
        base = torch.tensor([0] * cut + [1] * (n - cut), dtype=torch.long)
        batch = {"sorted": base, "huge": base * 2**61, "unsorted": base.flip(0)}[kind]
    num_nodes = draw(st.sampled_from([n] * 16 + [n + 1, -1, 2.0, np.int64(n)]))
    return edge_index, num_nodes, batch, edge_weight


@given(graph_inputs(), st.sampled_from([1, 3, [1, 5, 2], [0], [], 2.5, True, [2**62], "4", torch.tensor([2, 3])]),
       st.sampled_from([torch.float64, torch.float32]), st.sampled_from([256, 2]))
def test_random_walk_pe_fuzz(inputs, steps, compute_dtype, dense_max_nodes):
    edge_index, num_nodes, batch, edge_weight = inputs
    try:
        out = random_walk_pe(edge_index, num_nodes, steps, batch=batch, edge_weight=edge_weight,
                             compute_dtype=compute_dtype, dense_max_nodes=dense_max_nodes)
    except REFUSALS:
        return
    assert out.dtype == torch.float32 and out.shape[0] == num_nodes
    _finite(out)
    assert ((out >= 0) & (out <= 1 + 1e-6)).all()


@given(graph_inputs(), st.sampled_from([1, 2, 5, 0, -1, 2.0, None]), st.sampled_from([256, 2]))
def test_rrwp_fuzz(inputs, walk_length, dense_max_nodes):
    edge_index, num_nodes, batch, edge_weight = inputs
    try:
        pair_index, pair_pe, node_pe = rrwp(edge_index, num_nodes, walk_length, batch=batch, edge_weight=edge_weight,
                                            dense_max_nodes=dense_max_nodes)
    except REFUSALS:
        return
    _finite(pair_pe, node_pe)
    assert pair_index.shape == (2, pair_pe.shape[0]) and node_pe.shape == (num_nodes, walk_length)
    assert ((pair_pe >= 0) & (pair_pe <= 1 + 1e-6)).all()


@given(tensors((2, 3), floats=EXTREME + [0.5, 1.99], usual=torch.float32), st.sampled_from([4, 2, 3, 0, -2, 2.0]),
       st.sampled_from([100.0, 1.0, 0.0, -5.0, math.nan, math.inf, True, "1", 1e300]),
       st.one_of(st.none(), st.sampled_from(["ok", "list", "int", "shape", "meta"])))
def test_eigenvalue_encoding_fuzz(eigenvalues, dim, scale, mask_kind):
    mask = None
    shape = tuple(getattr(eigenvalues, "shape", np.shape(eigenvalues)))
    if mask_kind is not None:
        base = torch.rand(shape) > 0.3 if all(isinstance(s, int) for s in shape) else torch.tensor(True)
        mask = {"ok": base, "list": base.tolist(), "int": base.long(), "shape": base.reshape(-1)[:1],
                "meta": base.to("meta")}[mask_kind]
    try:
        out = eigenvalue_encoding(eigenvalues, dim, scale=scale, mask=mask)
    except REFUSALS:
        return
    _finite(out)
    assert out.shape[-1] == dim


@given(st.sampled_from([nx.Graph, nx.DiGraph, nx.MultiGraph]), st.integers(0, 8),
       st.lists(st.sampled_from(EXTREME + [None, "heavy", True, 1 + 2j, np.float32(2.0), 7, 10**400]), max_size=12),
       st.sampled_from([None, "weight", "missing"]), st.sampled_from([4, [1, 3], 0]))
def test_networkx_fuzz(kind, n, weights, attribute, steps):
    graph = kind()
    graph.add_nodes_from(["a", 1, (2, 3), 4.5, "e", "f", "g", "h"][:n])
    nodes = list(graph.nodes)
    for i, w in enumerate(weights):
        if len(nodes) > 1:
            graph.add_edge(nodes[i % len(nodes)], nodes[(3 * i + 1) % len(nodes)], weight=w)
    try:
        out = networkx_random_walk_pe(graph, steps, weight=attribute)
    except REFUSALS:
        return
    _finite(out)
    assert out.shape[0] == len(nodes)
    edge_index, edge_weight, _ = networkx_to_edge_index(graph, weight=attribute)
    assert edge_index.dtype == torch.long and (edge_weight is None or edge_weight.dtype == torch.float64)


@given(graph_inputs(), st.sampled_from(["rw", "rrwp", "flip"]), st.sampled_from(["none", "float", "int", "rows"]),
       st.booleans())
def test_transforms_fuzz(inputs, which, x_kind, collated):
    edge_index, num_nodes, _, edge_weight = inputs
    if not isinstance(num_nodes, (int, np.integer)) or num_nodes < 0:
        return  # Data does not hold such a node count
    data = Data(edge_index=edge_index if isinstance(edge_index, torch.Tensor) else torch.as_tensor(
        np.asarray(edge_index)), num_nodes=int(num_nodes))
    if isinstance(edge_weight, torch.Tensor):
        data.edge_weight = edge_weight
    x_rows = int(num_nodes) + (1 if x_kind == "rows" else 0)
    if x_kind != "none":
        data.x = torch.zeros(x_rows, 2, dtype=torch.int64 if x_kind == "int" else torch.float32)
    transform = {"rw": AddRandomWalkPE(3, attr_name=None), "rrwp": AddRRWP(3, attr_name=None),
                 "flip": RandomSignFlip("x")}[which]
    if collated:
        try:
            data = Batch.from_data_list([data, data])
        except (RuntimeError, ValueError, TypeError, IndexError):  # PyG refuses to collate it: not omnipos's input
            return
    try:
        out = transform(data)
    except REFUSALS:
        return
    _finite(out.x)
