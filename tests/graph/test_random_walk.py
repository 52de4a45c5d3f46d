"""random_walk_pe against PyG's own expected numbers, PyG's AddRandomWalkPE (unweighted) and a float64 NumPy
matrix power (weighted, where PyG is wrong: pyg-team/pytorch_geometric#10098)."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import AddRandomWalkPE

from omnipos.graph import random_walk_pe, transition_matrix


def test_pyg_expected_outputs():
    """The expected values of PyG's test/transforms/test_add_positional_encoding.py::test_add_random_walk_pe."""
    edge_index = torch.tensor([[0, 1, 0, 4, 1, 4, 2, 3, 3, 5], [1, 0, 4, 0, 4, 1, 3, 2, 5, 3]])
    assert random_walk_pe(edge_index, 6, 3).tolist() == [
        [0.0, 0.5, 0.25],
        [0.0, 0.5, 0.25],
        [0.0, 0.5, 0.00],
        [0.0, 1.0, 0.00],
        [0.0, 0.5, 0.25],
        [0.0, 0.5, 0.00],
    ]
    loops = torch.tensor([[0, 1, 2], [0, 1, 2]])
    assert random_walk_pe(loops, 4, 3).tolist() == [
        [1.0, 1.0, 1.0],
        [1.0, 1.0, 1.0],
        [1.0, 1.0, 1.0],
        [0.0, 0.0, 0.0],
    ]


def numpy_return_probabilities(edge_index, n, weight, steps):
    a = np.zeros((n, n))
    np.add.at(a, (edge_index[0].numpy(), edge_index[1].numpy()), weight)
    d = a.sum(1, keepdims=True)
    p = np.divide(a, d, out=np.zeros_like(a), where=d > 0)
    return np.stack([np.diag(np.linalg.matrix_power(p, s)) for s in steps], axis=1), p


@pytest.mark.parametrize("n,seed", [(5, 0), (17, 1), (40, 2)])
def test_same_as_pyg_on_unweighted_graphs(graph_factory, n, seed):
    e = graph_factory(n, n, seed)
    ours = random_walk_pe(e, n, 20)
    ref = AddRandomWalkPE(20)(Data(edge_index=e, num_nodes=n)).random_walk_pe
    assert ours.shape == ref.shape == (n, 20) and ours.dtype == ref.dtype == torch.float32
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=1e-5)


def test_weighted_transition_rows_sum_to_one_and_match_numpy(graph_factory):
    n = 14
    e = graph_factory(n, 12, 3)
    e = torch.cat([e, torch.tensor([[2, 2], [2, 2]])], 1)  # a self-loop, given twice: weights add
    weight = torch.rand(e.shape[1], dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 5 + 0.05
    p = transition_matrix(e, n, edge_weight=weight)
    torch.testing.assert_close(p.sum(1), torch.ones(n, dtype=torch.float64))
    steps = [1, 2, 3, 7, 16, 21]
    expected, p_ref = numpy_return_probabilities(e, n, weight.numpy(), steps)
    np.testing.assert_allclose(p.numpy(), p_ref, atol=1e-15)
    ours = random_walk_pe(e, n, steps, edge_weight=weight)
    np.testing.assert_allclose(ours.double().numpy(), expected, rtol=1e-6, atol=1e-7)
    # PyG's 1 / sum_j w_ij rows do not sum to 1 here, so its encoding differs (pyg#10098)
    pyg = AddRandomWalkPE(3)(Data(edge_index=e, edge_weight=weight.float(), num_nodes=n)).random_walk_pe
    assert not torch.allclose(pyg, ours[:, :3], atol=1e-3)


def test_float32_compute_within_documented_error(graph_factory):
    sizes = [12, 25, 40, 25]
    graphs = [graph_factory(n, n // 3, 50 + s) for s, n in enumerate(sizes)]
    offsets = np.cumsum([0] + sizes[:-1])
    e = torch.cat([g + o for g, o in zip(graphs, offsets)], 1)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    weight = torch.rand(e.shape[1], generator=torch.Generator().manual_seed(1)) + 0.1
    exact = random_walk_pe(e, sum(sizes), 20, batch=batch, edge_weight=weight)
    fast = random_walk_pe(e, sum(sizes), 20, batch=batch, edge_weight=weight, compute_dtype=torch.float32)
    torch.testing.assert_close(fast, exact, atol=1e-6, rtol=2e-6)
    with pytest.raises(ValueError, match="compute_dtype"):
        random_walk_pe(e, sum(sizes), 4, batch=batch, compute_dtype=torch.float16)


def test_steps_list_and_int_agree():
    e = torch.tensor([[0, 1, 1, 2, 2, 0, 2, 3], [1, 0, 2, 1, 0, 2, 3, 2]])
    full = random_walk_pe(e, 4, 8)
    picked = random_walk_pe(e, 4, [8, 2, 5, 2])
    torch.testing.assert_close(picked, full[:, [7, 1, 4, 1]])
    torch.testing.assert_close(random_walk_pe(e, 4, 1), full[:, :1])


def test_batch_equals_graph_by_graph_and_sparse_path(graph_factory):
    sizes = [6, 11, 6, 1, 30]
    graphs = [graph_factory(n, n, s) for s, n in enumerate(sizes)]
    offsets = np.cumsum([0] + sizes[:-1])
    e = torch.cat([g + o for g, o in zip(graphs, offsets)], 1)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    pe = random_walk_pe(e, sum(sizes), 9, batch=batch)
    sparse = random_walk_pe(e, sum(sizes), 9, batch=batch, dense_max_nodes=8, block=4)
    torch.testing.assert_close(sparse, pe, atol=1e-6, rtol=1e-6)
    for g, n, o in zip(graphs, sizes, offsets):
        torch.testing.assert_close(pe[o:o + n], random_walk_pe(g, n, 9), atol=1e-7, rtol=0)


def test_directed_walk_and_isolated_nodes():
    # 0 -> 1 -> 2 -> 0 (a directed triangle) and node 3 with no edges
    e = torch.tensor([[0, 1, 2], [1, 2, 0]])
    pe = random_walk_pe(e, 4, 6)
    assert pe[:3].tolist() == [[0.0, 0.0, 1.0, 0.0, 0.0, 1.0]] * 3
    assert pe[3].abs().max() == 0


def test_two_runs_identical(graph_factory):
    e = graph_factory(25, 20, 8)
    assert torch.equal(random_walk_pe(e, 25, 12), random_walk_pe(e, 25, 12))


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"steps": 0}, ValueError, "steps must be >= 1"),
        ({"steps": []}, ValueError, "empty"),
        ({"steps": [1, -2]}, ValueError, ">= 1"),
        ({"steps": 2.5}, TypeError, "steps"),
        ({"edge_index": torch.tensor([[0, 3], [1, 0]])}, ValueError, "num_nodes=3"),
        ({"edge_index": torch.tensor([[0, -1], [1, 0]])}, ValueError, r"edge_index\[:, 1\] = \(-1, 0\)"),
        ({"edge_index": torch.tensor([[0.0, 1.0], [1.0, 0.0]])}, TypeError, "integer"),
        ({"edge_weight": torch.tensor([1.0, -0.5])}, ValueError, ">= 0"),
        ({"edge_weight": torch.tensor([float("nan"), 1.0])}, ValueError, "finite"),
        ({"batch": torch.tensor([0, 0])}, ValueError, "num_nodes"),
        ({"batch": torch.tensor([0, 1, 1])}, ValueError, "joins graph"),
    ],
)
def test_bad_input(kwargs, error, match):
    arguments = {"edge_index": torch.tensor([[0, 1], [1, 0]]), "num_nodes": 3, "steps": 4}
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        random_walk_pe(**arguments)


@pytest.mark.parametrize("longest", [1, 2, 3, 5, 9, 10, 17, 20, 31])
def test_baby_step_giant_step_powers(longest):
    from omnipos.graph.random_walk import return_probabilities

    p = torch.rand(3, 7, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(longest))
    p /= p.sum(-1, keepdim=True)
    steps = list(range(longest, 0, -1))  # any order
    expected = np.stack([np.diagonal(np.linalg.matrix_power(p.numpy(), s), axis1=1, axis2=2) for s in steps], -1)
    np.testing.assert_allclose(return_probabilities(p, steps).numpy(), expected, rtol=1e-12, atol=1e-15)
