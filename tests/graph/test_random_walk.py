"""random_walk_pe against PyG's own expected numbers, PyG's AddRandomWalkPE (unweighted) and a float64 NumPy
matrix power (weighted, directed, isolated nodes; where PyG is wrong: pyg-team/pytorch_geometric#10098), on both
solver paths; batch invariance and run-to-run determinism to the bit; bad input."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.data import Data
from torch_geometric.transforms import AddRandomWalkPE

import omnipos.graph.random_walk as rw
import omnipos.graph.walks as walks_module
from omnipos.core import progress_reporter
from omnipos.graph import random_walk_pe, transition_matrix
from omnipos.graph._input import check_graph


def test_pyg_expected_outputs():
    """The expected values of PyG's test/transforms/test_add_positional_encoding.py::test_add_random_walk_pe."""
    edge_index = torch.tensor([[0, 1, 0, 4, 1, 4, 2, 3, 3, 5], [1, 0, 4, 0, 4, 1, 3, 2, 5, 3]])
    expected = [
        [0.0, 0.5, 0.25],
        [0.0, 0.5, 0.25],
        [0.0, 0.5, 0.00],
        [0.0, 1.0, 0.00],
        [0.0, 0.5, 0.25],
        [0.0, 0.5, 0.00],
    ]
    assert random_walk_pe(edge_index, 6, 3).tolist() == expected
    assert random_walk_pe(edge_index, 6, 3, dense_max_nodes=1).tolist() == expected  # the sparse path
    loops = torch.tensor([[0, 1, 2], [0, 1, 2]])
    for dense_max_nodes in (256, 1):
        assert random_walk_pe(loops, 4, 3, dense_max_nodes=dense_max_nodes).tolist() == [
            [1.0, 1.0, 1.0],
            [1.0, 1.0, 1.0],
            [1.0, 1.0, 1.0],
            [0.0, 0.0, 0.0],
        ]


@pytest.mark.parametrize("n,seed", [(5, 0), (17, 1), (40, 2), (300, 3)])
def test_same_as_pyg_on_unweighted_graphs(graph_factory, n, seed):
    e = graph_factory(n, n, seed)
    ours = random_walk_pe(e, n, 20)
    ref = AddRandomWalkPE(20)(Data(edge_index=e, num_nodes=n)).random_walk_pe
    assert ours.shape == ref.shape == (n, 20) and ours.dtype == ref.dtype == torch.float32
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=1e-5)


def test_weighted_transition_rows_sum_to_one_and_match_numpy(graph_factory, walk_refs):
    n = 14
    e = graph_factory(n, 12, 3)
    e = torch.cat([e, torch.tensor([[2, 2], [2, 2]])], 1)  # a self-loop, given twice: weights add
    weight = torch.rand(e.shape[1], dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 5 + 0.05
    p = transition_matrix(e, n, edge_weight=weight)
    torch.testing.assert_close(p.sum(1), torch.ones(n, dtype=torch.float64))
    np.testing.assert_allclose(p.numpy(), walk_refs.transition(e, n, weight.numpy()), atol=1e-15)
    steps = [1, 2, 3, 7, 16, 21]
    expected = walk_refs.return_probabilities(e, n, weight.numpy(), steps)
    for dense_max_nodes in (256, 1):
        ours = random_walk_pe(e, n, steps, edge_weight=weight, dense_max_nodes=dense_max_nodes)
        np.testing.assert_allclose(ours.double().numpy(), expected, rtol=1e-6, atol=1e-7)
    # PyG's 1 / sum_j w_ij rows do not sum to 1 here, so its encoding differs (pyg#10098)
    pyg = AddRandomWalkPE(3)(Data(edge_index=e, edge_weight=weight.float(), num_nodes=n)).random_walk_pe
    assert not torch.allclose(pyg, ours[:, :3], atol=1e-3)


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("zero_weights", [False, True])
def test_both_paths_match_float64_numpy_on_random_batches(walk_refs, directed, zero_weights):
    """Weighted, directed or not, isolated nodes, self-loops, duplicate and zero-weight edges, a 0-node graph:
    the dense and the sparse path against the float64 matrix powers, on the float64 values before the cast."""
    sizes = [6, 1, 0, 23, 40, 9, 70]
    e, n, batch, w, _ = walk_refs.batch(7 + directed + 2 * zero_weights, sizes, directed=directed,
                                        zero_weights=zero_weights, loops=True)
    e = torch.cat([e, e[:, :5]], 1)  # duplicates
    w = torch.cat([w, w[:5]])
    steps = [1, 2, 3, 4, 5, 8, 13, 2]
    expected = walk_refs.return_probabilities(e, n, w.numpy(), steps)
    g = check_graph(e, n, batch, w)
    sparse = walks_module.sparse_return_probabilities(walks_module.sparse_transitions(g, g.counts > 0), steps, None,
                                                      progress_reporter(None))
    np.testing.assert_allclose(sparse, expected, rtol=1e-12, atol=1e-15)
    for dense_max_nodes in (256, 1, 30):
        ours = random_walk_pe(e, n, steps, batch=batch, edge_weight=w, dense_max_nodes=dense_max_nodes)
        np.testing.assert_allclose(ours.numpy(), expected.astype(np.float32), rtol=1e-6, atol=1e-7)
    with pytest.MonkeyPatch.context() as patch:  # graphs of >= 20 nodes renumbered, one at a time
        patch.setattr(rw, "_RELABEL_MIN_NODES", 20)
        ours = random_walk_pe(e, n, steps, batch=batch, edge_weight=w, dense_max_nodes=5)
        np.testing.assert_allclose(ours.numpy(), expected.astype(np.float32), rtol=1e-6, atol=1e-7)


def test_sparse_path_bits_do_not_depend_on_blocks_or_dense_continuation(walk_refs, monkeypatch):
    """Sparse rows and dense columns add the same products in the same order: any block size, and continuing
    densely always / never, give identical float64 values (a hub-heavy graph and a directed one)."""
    hub = torch.cat([torch.stack([torch.zeros(40, dtype=torch.long), torch.arange(1, 41)]),
                     torch.stack([torch.arange(1, 40), torch.arange(2, 41)])], 1)
    for e, directed in ((torch.cat([hub, hub.flip(0)], 1), False), (hub, True)):
        g = check_graph(e, 41, None, torch.rand(e.shape[1], dtype=torch.float64) + 0.5)
        walks = walks_module.sparse_transitions(g, torch.tensor([True]))
        assert walks.symmetric != directed or not directed
        results = []
        for fill in (0.0, 0.05, math.inf):
            monkeypatch.setattr(walks_module, "_DENSE_FILL", fill)
            for block, entries in ((None, 1 << 22), (1, 1 << 22), (2, 1 << 22), (41, 1 << 22), (None, 16), (7, 16)):
                # 16: blocks outgrow it and are split again
                monkeypatch.setattr(walks_module, "_BLOCK_ENTRIES", entries)
                results.append(walks_module.sparse_return_probabilities(walks, list(range(1, 12)), block,
                                                                        progress_reporter(None)))
        assert all(np.array_equal(r, results[0]) for r in results)


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
    torch.testing.assert_close(random_walk_pe(e, 4, [8, 2, 5, 2], dense_max_nodes=1), picked)


def test_directed_walk_and_isolated_nodes():
    # 0 -> 1 -> 2 -> 0 (a directed triangle) and node 3 with no edges
    e = torch.tensor([[0, 1, 2], [1, 2, 0]])
    for dense_max_nodes in (256, 1):
        pe = random_walk_pe(e, 4, 6, dense_max_nodes=dense_max_nodes)
        assert pe[:3].tolist() == [[0.0, 0.0, 1.0, 0.0, 0.0, 1.0]] * 3
        assert pe[3].abs().max() == 0


@st.composite
def batches(draw, max_graphs=5, max_nodes=40):
    sizes = draw(st.lists(st.integers(0, max_nodes), min_size=1, max_size=max_graphs))
    return sizes, draw(st.integers(0, 2**31)), draw(st.booleans()), draw(st.booleans())


@given(batches(), st.sampled_from([torch.float64, torch.float32]), st.sampled_from([256, 12]), st.booleans())
def test_batch_invariant_to_the_bit(walk_refs, case, compute_dtype, dense_max_nodes, relabel):
    """A graph gets the same bits alone and in any batch (issue 14: float32 compute differed in ~1/3 of rows by
    up to 2.4e-7), on the dense path (NumPy, one BLAS call per matrix) and the sparse one (graphs above 12;
    ``relabel``: graphs above 20 walked one by one in reverse Cuthill-McKee order, as huge graphs are)."""
    sizes, seed, directed, zero_weights = case
    e, n, batch, w, graphs = walk_refs.batch(seed, sizes, directed=directed, zero_weights=zero_weights)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rw, "_RELABEL_MIN_NODES", 20 if relabel else 1 << 30)
        together = random_walk_pe(e, n, [1, 2, 3, 6, 11], batch=batch, edge_weight=w, compute_dtype=compute_dtype,
                                  dense_max_nodes=dense_max_nodes)
        start = 0
        for ge, gn, gw in graphs:
            alone = random_walk_pe(ge, gn, [1, 2, 3, 6, 11], edge_weight=gw, compute_dtype=compute_dtype,
                                   dense_max_nodes=dense_max_nodes)
            assert torch.equal(alone, together[start:start + gn])
            start += gn


@given(batches(max_graphs=3, max_nodes=60))
def test_run_to_run_deterministic(walk_refs, case):
    sizes, seed, directed, zero_weights = case
    e, n, batch, w, _ = walk_refs.batch(seed, sizes, directed=directed, zero_weights=zero_weights)
    for dense_max_nodes in (256, 8):
        first = random_walk_pe(e, n, 9, batch=batch, edge_weight=w, dense_max_nodes=dense_max_nodes)
        assert torch.equal(first, random_walk_pe(e, n, 9, batch=batch, edge_weight=w,
                                                 dense_max_nodes=dense_max_nodes))


# ------------------------------------------------------------------------------------- issue 14 reproductions


def test_sparse_path_zero_weight_out_edges_give_zero_not_nan():
    """Node 2's only out-edge has weight 0: it cannot move, its return probabilities are 0 (NaN before on the
    sparse path, > 2048 nodes by default then; the dense path gave 0)."""
    e = torch.tensor([[0, 1, 2, 1], [1, 0, 1, 2]])
    w = torch.tensor([1.0, 1.0, 0.0, 1.0])
    dense = random_walk_pe(e, 3, 4, edge_weight=w)
    sparse = random_walk_pe(e, 3, 4, edge_weight=w, dense_max_nodes=1)
    assert torch.isfinite(sparse).all() and torch.equal(dense, sparse)
    assert sparse[2].tolist() == [0.0] * 4
    torch.testing.assert_close(sparse[0], torch.tensor([0.0, 0.5, 0.0, 0.25]))


def test_huge_step_count_by_squaring():
    """steps=[2**62] ran for ever (one product per step): repeated squaring takes 62 products."""
    e = torch.tensor([[0, 1, 1, 2, 2, 0, 0], [1, 0, 2, 1, 0, 2, 0]])  # a triangle with a self-loop at 0
    w = torch.tensor([1.0, 2.0, 1.0, 3.0, 1.0, 1.0, 0.5], dtype=torch.float64)
    out = random_walk_pe(e, 3, [2**62, 5000, 3], edge_weight=w)
    p = np.zeros((3, 3))
    np.add.at(p, (e[0].numpy(), e[1].numpy()), w.numpy())
    p /= p.sum(1, keepdims=True)
    values, vectors = np.linalg.eig(p.T)  # the limit of P^s: every row is the stationary distribution
    stationary = np.real(vectors[:, np.argmin(np.abs(values - 1))])
    np.testing.assert_allclose(out[:, 0].numpy(), stationary / stationary.sum(), rtol=1e-6)
    for column, s in ((1, 5000), (2, 3)):  # (NumPy's own squaring drifts to 1e-40 by s = 2**62)
        np.testing.assert_allclose(out[:, column].numpy(), np.diag(np.linalg.matrix_power(p, s)), rtol=1e-6)
    with pytest.raises(ValueError, match=r"walk_length: 5000 steps on graph 0 .* RW_SPARSE_MAX_STEPS"):
        random_walk_pe(e, 3, [2, 5000], dense_max_nodes=2)
    # sixty squarings would square a row sum of 1 + 1e-7 into inf (found by the fuzz test): the limit is the
    # stationary distribution of 0 -> 0 (1/8), 0 -> 1 (7/8), 1 -> 0: [8/15, 7/15]
    e = torch.tensor([[0, 0, 0, 0, 0, 0, 0, 0, 1], [0, 1, 1, 1, 1, 1, 1, 1, 0]])
    for compute_dtype in (torch.float32, torch.float64):
        out = random_walk_pe(e, 2, [2**62], compute_dtype=compute_dtype)
        torch.testing.assert_close(out[:, 0], torch.tensor([8 / 15, 7 / 15]), rtol=1e-5, atol=1e-6)


def test_huge_batch_ids_cost_nothing():
    """Graph ids may skip numbers (empty graphs); a huge id used to allocate a count per id."""
    e = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]])
    compact = random_walk_pe(e, 4, 5, batch=torch.tensor([0, 0, 1, 1]))
    huge = random_walk_pe(e, 4, 5, batch=torch.tensor([3, 3, 2**60, 2**60]))
    assert torch.equal(compact, huge)


def test_extreme_weights_neither_overflow_nor_underflow():
    """Weights near float64's limits: each row's weights are divided by its largest before they are summed."""
    e = torch.tensor([[0, 0, 1, 2, 2], [1, 2, 0, 0, 1]])
    for w, p01 in ((torch.tensor([1e308, 1e308, 1.0, 1.0, 1.0], dtype=torch.float64), 0.5),
                   (torch.tensor([1e-320, 3e-320, 1.0, 1.0, 1.0], dtype=torch.float64), 0.25)):
        expected = transition_matrix(e, 3, edge_weight=w)
        assert expected[0, 1].item() == pytest.approx(p01, rel=1e-2)
        for dense_max_nodes in (256, 1):
            out = random_walk_pe(e, 3, [2, 3], edge_weight=w, dense_max_nodes=dense_max_nodes)
            p = expected.numpy()
            np.testing.assert_allclose(out.numpy(), np.stack([np.diag(p @ p), np.diag(p @ p @ p)], 1), rtol=1e-5)


def test_progress_reports_every_node():
    calls = []
    e = torch.tensor([[0, 1], [1, 0]])
    random_walk_pe(e, 300, 4, batch=torch.tensor([0] * 2 + [1] * 298), dense_max_nodes=100,
                   progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1] == (300, 300)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"walk_length": 0}, ValueError, "walk_length must be >= 1"),
        ({"walk_length": []}, ValueError, "empty"),
        ({"walk_length": [1, -2]}, ValueError, ">= 1"),
        ({"walk_length": 2.5}, TypeError, "walk_length"),
        ({"walk_length": 2 ** 40}, ValueError, "walk_length=1099511627776 .* does not fit in memory"),
        ({"walk_length": 5, "steps": 4}, TypeError, "its old name steps=4; pass walk_length only"),
        ({"edge_index": torch.tensor([[0, 3], [1, 0]])}, ValueError,
         r"edge_index\[:, 1\] = \(3, 0\) of graph 0 names node 3; node ids must be in 0..2"),
        ({"edge_index": torch.tensor([[0, 1], [1, -1]])}, ValueError,
         r"edge_index\[:, 1\] = \(1, -1\) of graph 0 names node -1"),
        ({"edge_index": torch.tensor([[0.0, 1.0], [1.0, 0.0]])}, TypeError, "edge_index must be integer"),
        ({"edge_index": torch.tensor([0, 1])}, ValueError, r"edge_index must have shape \[2, E\]"),
        ({"edge_weight": torch.tensor([1.0, -0.5])}, ValueError,
         r"edge_weight\[1\] = -0.5 \(edge 1 -> 0 of graph 0\) must be >= 0"),
        ({"edge_weight": torch.tensor([float("nan"), 1.0])}, ValueError,
         r"edge_weight\[0\] = nan \(edge 0 -> 1 of graph 0\) must be finite"),
        ({"edge_weight": torch.tensor([float("inf"), 1.0])}, ValueError, "must be finite"),
        ({"edge_weight": torch.tensor([True, False])}, TypeError, "edge_weight must be real"),
        ({"edge_weight": torch.tensor([1.0])}, ValueError, r"edge_weight must have shape \[E\] = \[2\]"),
        ({"batch": torch.tensor([0, 0])}, ValueError, r"batch must hold one graph id per node.*\[3\]"),
        ({"batch": torch.tensor([1, 0, 0])}, ValueError, "non-decreasing.*node 1 has graph id 0 after graph id 1"),
        ({"batch": torch.tensor([0, 0, -1])}, ValueError, r"batch\[2\] = -1"),
        ({"batch": torch.tensor([0.0, 0.0, 1.0])}, TypeError, "batch must be integer"),
        ({"batch": torch.tensor([0, 1, 1])}, ValueError, r"edge_index\[:, 0\] = \(0, 1\) joins graph 0 to graph 1"),
        ({"num_nodes": -1}, ValueError, "num_nodes must be >= 0"),
        ({"num_nodes": 3.0}, TypeError, "num_nodes must be an int"),
        ({"dense_max_nodes": 0}, ValueError, "dense_max_nodes"),
        ({"block": 0}, ValueError, "block"),
        ({"edge_index": torch.empty(2, 2, dtype=torch.long, device="meta")}, ValueError, "meta tensor"),
        ({"edge_index": [["a", "b"], ["c", "d"]]}, TypeError, "edge_index must be a tensor or array of numbers"),
        ({"progress": "yes"}, TypeError, "progress"),
    ],
)
def test_bad_input(kwargs, error, match):
    arguments = {"edge_index": torch.tensor([[0, 1], [1, 0]]), "num_nodes": 3, "walk_length": 4,
                 "batch": torch.tensor([0, 0, 0])}
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        random_walk_pe(**arguments)


def test_graph_index_in_errors_is_the_callers():
    """Errors name the graph by the caller's id, before any renumbering."""
    e = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]])
    with pytest.raises(ValueError, match=r"edge 3 -> 2 of graph 7\) must be finite"):
        random_walk_pe(e, 4, 3, batch=torch.tensor([2, 2, 7, 7]),
                       edge_weight=torch.tensor([1.0, 1.0, 1.0, float("nan")]))


@pytest.mark.parametrize("longest", [1, 2, 3, 5, 9, 10, 17, 20, 31, 5000])
def test_baby_step_giant_step_powers(longest):
    from omnipos.graph.walks import return_probabilities

    p = torch.rand(3, 7, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(longest))
    p /= p.sum(-1, keepdim=True)
    steps = sorted({longest, *range(min(longest, 31), 0, -1)}, reverse=True)  # any order
    expected = np.stack([np.diagonal(np.linalg.matrix_power(p.numpy(), s), axis1=1, axis2=2) for s in steps], -1)
    np.testing.assert_allclose(return_probabilities(p, steps).numpy(), expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(return_probabilities(p.numpy(), steps), expected, rtol=1e-12, atol=1e-15)


def test_torch_dense_path_padded_chunks(walk_refs, monkeypatch):
    """The dense path other devices take (torch, chunks padded to a size that depends on n only), run on the
    CPU: same numbers as NumPy's, and the same bits alone and batched."""
    monkeypatch.setattr(walks_module, "_TORCH_ON_CPU", True)
    sizes = [5, 5, 9, 1, 0, 5, 30]
    e, n, batch, w, graphs = walk_refs.batch(21, sizes, directed=True)
    expected = walk_refs.return_probabilities(e, n, w.numpy(), [1, 2, 5, 9])
    for compute_dtype in (torch.float64, torch.float32):
        together = random_walk_pe(e, n, [1, 2, 5, 9], batch=batch, edge_weight=w, compute_dtype=compute_dtype)
        np.testing.assert_allclose(together.numpy(), expected, rtol=1e-5, atol=1e-6)
        start = 0
        for ge, gn, gw in graphs:
            alone = random_walk_pe(ge, gn, [1, 2, 5, 9], edge_weight=gw, compute_dtype=compute_dtype)
            assert torch.equal(alone, together[start:start + gn])
            start += gn


@pytest.mark.gpu
def test_cuda_matches_cpu_and_stays_on_the_device(walk_refs):
    e, n, batch, w, graphs = walk_refs.batch(22, [6, 40, 1, 300], directed=True)
    cpu = random_walk_pe(e, n, 12, batch=batch, edge_weight=w)
    cuda = random_walk_pe(e.cuda(), n, 12, batch=batch.cuda(), edge_weight=w.cuda())
    assert cuda.device.type == "cuda"
    torch.testing.assert_close(cuda.cpu(), cpu, atol=1e-6, rtol=1e-5)
    start = 0
    for ge, gn, gw in graphs:
        alone = random_walk_pe(ge.cuda(), gn, 12, edge_weight=gw.cuda())
        assert torch.equal(alone, cuda[start:start + gn])
        start += gn


# --- issue 25: an estimator with an error bound for hub-heavy graphs, as an option (probes=) -----------------------


def _hub_graph(n: int, seed: int) -> torch.Tensor:
    """Preferential attachment (3 edges per new node), both directions: walks reach every node in a few steps."""
    rng = np.random.default_rng(seed)
    ends, pairs = [0, 1, 2], []
    for v in range(3, n):
        targets = {int(ends[i]) for i in rng.integers(0, len(ends), 6)}
        targets = sorted(targets)[:3]
        pairs += [(v, t) for t in targets]
        ends += targets + [v] * len(targets)
    e = torch.tensor(pairs).T
    return torch.cat([e, e.flip(0)], 1)


def test_probes_estimate_is_unbiased_within_its_standard_error(walk_refs):
    """Hutchinson's estimate against the float64 matrix powers: steps up to RW_EXACT_STEPS bit-identical to the
    exact path, the others within a few standard errors (z-scores distributed as the theory says), and the
    standard error shrinks as 1/sqrt(probes). Directed and weighted too (the estimate uses P as given)."""
    e = _hub_graph(300, 4)
    steps = [1, 2, 3, 4, 5, 6, 8, 11, 16, 6]
    expected = torch.from_numpy(walk_refs.return_probabilities(e, 300, None, steps))
    exact = random_walk_pe(e, 300, steps, dense_max_nodes=64)
    errors = {}
    for probes in (200, 3200):
        est, err = random_walk_pe(e, 300, steps, dense_max_nodes=64, probes=probes, return_stderr=True,
                                  generator=torch.Generator().manual_seed(probes))
        assert torch.equal(est[:, :4], exact[:, :4]) and not err[:, :4].any()
        z = (est[:, 4:].double() - expected[:, 4:]).abs() / err[:, 4:].double()
        assert float(z.max()) < 6 and float((z > 3).double().mean()) < 0.02
        assert torch.equal(est[:, 5], est[:, 9])  # a repeated step is one estimate
        errors[probes] = float(err[:, 4:].mean())
    assert 3 < errors[200] / errors[3200] < 5.5  # 1/sqrt(probes): 4
    directed = e[:, ::2]
    weight = torch.rand(directed.shape[1], generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 0.5
    reference = torch.from_numpy(walk_refs.return_probabilities(directed, 300, weight.numpy(), [6, 9]))
    est, err = random_walk_pe(directed, 300, [6, 9], edge_weight=weight, dense_max_nodes=64, probes=800,
                              return_stderr=True)
    assert float(((est.double() - reference).abs() / err.double().clamp_min(1e-12)).max()) < 6


def test_probes_leave_dense_graphs_exact_and_repeat_with_the_same_generator():
    e = _hub_graph(300, 5)
    small = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]) + 300
    both, batch = torch.cat([e, small], 1), torch.tensor([0] * 300 + [1] * 3)
    est, err = random_walk_pe(both, 303, 8, batch=batch, dense_max_nodes=64, probes=16, return_stderr=True)
    assert torch.equal(est[300:], random_walk_pe(small - 300, 3, 8)) and not err[300:].any()
    again = random_walk_pe(both, 303, 8, batch=batch, dense_max_nodes=64, probes=16)
    assert torch.equal(est, again)  # default: a fixed seed
    one = random_walk_pe(e, 300, 8, dense_max_nodes=64, probes=16, generator=torch.Generator().manual_seed(3))
    two = random_walk_pe(e, 300, 8, dense_max_nodes=64, probes=16, generator=torch.Generator().manual_seed(3))
    other = random_walk_pe(e, 300, 8, dense_max_nodes=64, probes=16, generator=torch.Generator().manual_seed(4))
    assert torch.equal(one, two) and not torch.equal(one, other)
    seen = []
    random_walk_pe(e, 300, 8, dense_max_nodes=64, probes=16, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (300 + 300 * 16, 300 + 300 * 16)


@pytest.mark.parametrize("kwargs,error,match", [
    ({"probes": 1}, ValueError, "probes must be >= 2"),
    ({"probes": 2.5}, TypeError, "probes must be an int"),
    ({"probes": 8, "generator": 3}, TypeError, "generator must be a torch.Generator"),
])
def test_probes_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        random_walk_pe(torch.tensor([[0, 1], [1, 0]]), 2, 8, **kwargs)


def test_omnipos_add_random_walk_pe_passes_probes():
    from omnipos.graph import AddRandomWalkPE as OmniposAddRandomWalkPE

    e = _hub_graph(300, 6)  # 300 nodes > RW_DENSE_MAX_NODES: the sparse path, where probes apply
    data = OmniposAddRandomWalkPE(8, probes=16)(Data(edge_index=e, num_nodes=300))
    assert torch.equal(data.random_walk_pe, random_walk_pe(e, 300, 8, probes=16))
    assert not torch.equal(data.random_walk_pe, random_walk_pe(e, 300, 8))
    with pytest.raises(ValueError, match="probes must be >= 2"):
        OmniposAddRandomWalkPE(8, probes=1)
