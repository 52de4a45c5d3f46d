"""The graph domain's one door (``_input.check_graph``): laplacian_pe, magnetic_laplacian_pe, random_walk_pe and
rrwp accept or refuse the same input the same way, with the same words (issue 25); and sizes the allocator would
refuse are ValueErrors naming the argument, raised before anything of that size is allocated (issue 28)."""

import time

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data

from omnipos.graph import (
    AddLaplacianPE,
    AddMagneticLaplacianPE,
    AddRandomWalkPE,
    AddRRWP,
    laplacian_pe,
    magnetic_laplacian_pe,
    random_walk_pe,
    rrwp,
    transition_matrix,
)

FOUR = {
    "laplacian_pe": lambda e, n, **kw: laplacian_pe(e, n, 3, return_eigenvalues=True, **kw),
    "magnetic_laplacian_pe": lambda e, n, **kw: magnetic_laplacian_pe(e, n, 3, return_eigenvalues=True, **kw),
    "random_walk_pe": lambda e, n, **kw: random_walk_pe(e, n, 5, **kw),
    "rrwp": lambda e, n, **kw: rrwp(e, n, 4, **kw),
}

EDGES = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
BATCH = torch.tensor([0, 0, 0, 1, 1])
WEIGHT = torch.tensor([1.0, 1.0, 2.0, 2.0, 0.5, 0.5])

BAD = {
    "meta edge_index": ({"edge_index": EDGES.to("meta")}, ValueError, "edge_index is on the meta device"),
    "meta batch": ({"batch": BATCH.to("meta")}, ValueError, "batch is on the meta device"),
    "meta edge_weight": ({"edge_weight": WEIGHT.to("meta")}, ValueError, "edge_weight is on the meta device"),
    "float edge_index": ({"edge_index": EDGES.double()}, TypeError, "edge_index must be integer node ids"),
    "string edge_index": ({"edge_index": [["a", "b"], ["b", "a"]]}, TypeError, "edge_index must be a tensor"),
    "edge_index [3, E]": ({"edge_index": torch.zeros(3, 2, dtype=torch.long)}, ValueError, r"shape \[2, E\]"),
    "negative id": ({"edge_index": torch.tensor([[0, 3], [1, -1]])}, ValueError,
                    r"edge_index\[:, 1\] = \(3, -1\) of graph 1 names node -1; node ids must be in 0..4"),
    "id >= num_nodes": ({"edge_index": torch.tensor([[0, 5], [1, 3]])}, ValueError,
                        r"edge_index\[:, 1\] = \(5, 3\) of graph 1 names node 5; .*\(num_nodes=5\)"),
    "batch too short": ({"batch": BATCH[:4]}, ValueError, r"one graph id per node, shape \[num_nodes\] = \[5\]"),
    "batch unsorted": ({"batch": torch.tensor([0, 0, 1, 0, 0])}, ValueError, "non-decreasing.*node 3 has graph id 0"),
    "batch negative": ({"batch": torch.tensor([-1, -1, -1, 0, 0])}, ValueError, r"batch\[0\] = -1: graph ids"),
    "float batch": ({"batch": BATCH.double()}, TypeError, "batch must be integer graph ids"),
    "bool batch": ({"batch": BATCH.bool()}, TypeError, "batch must be integer graph ids"),
    "edge across graphs": ({"batch": torch.tensor([0, 0, 1, 1, 1])}, ValueError,
                           r"edge_index\[:, 2\] = \(1, 2\) joins graph 0 to graph 1"),
    "nan weight": ({"edge_weight": WEIGHT.clone().index_fill_(0, torch.tensor([4]), float("nan"))}, ValueError,
                   r"edge_weight\[4\] = nan \(edge 3 -> 4 of graph 1\) must be finite"),
    "negative weight": ({"edge_weight": -WEIGHT}, ValueError, r"edge_weight\[0\] = -1.0 .* must be >= 0"),
    "bool weight": ({"edge_weight": WEIGHT.bool()}, TypeError, "edge_weight must be real numbers"),
    "complex weight": ({"edge_weight": WEIGHT.to(torch.complex64)}, TypeError, "edge_weight must be real"),
    "weight shape": ({"edge_weight": WEIGHT[:5]}, ValueError, r"edge_weight must have shape \[E\] = \[6\]"),
    "num_nodes negative": ({"num_nodes": -1}, ValueError, "num_nodes must be >= 0"),
    "num_nodes float": ({"num_nodes": 5.0}, TypeError, "num_nodes must be an int"),
    "num_nodes 2**40": ({"num_nodes": 2 ** 40, "batch": None}, ValueError,
                        "num_nodes=1099511627776 .* does not fit in memory"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_the_four_refuse_the_same_input_with_the_same_words(case):
    change, error, match = BAD[case]
    arguments = {"edge_index": EDGES, "num_nodes": 5, "batch": BATCH, "edge_weight": WEIGHT}
    arguments.update(change)
    messages = {}
    for name, encode in FOUR.items():
        with pytest.raises(error, match=match) as caught:
            encode(arguments["edge_index"], arguments["num_nodes"], batch=arguments["batch"],
                   edge_weight=arguments["edge_weight"])
        messages[name] = str(caught.value)
    assert len(set(messages.values())) == 1, messages


def _graph(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, n, size=(2, 2 * n))
    pairs = pairs[:, pairs[0] != pairs[1]]
    e = torch.from_numpy(np.concatenate([pairs, pairs[::-1]], 1)).long()
    return e, torch.from_numpy(rng.uniform(0.5, 2.0, e.shape[1]))


def test_the_four_accept_skipped_graph_ids_as_the_graphs_alone():
    """Graph ids 0, 3, 7 (1, 2, 4, 5, 6 have no nodes): every encoding gives each graph what it gives it alone,
    as a list, a NumPy array or a tensor; per-graph rows (eigenvalues, mask) sit at the caller's ids."""
    sizes, ids = [6, 4, 7], [0, 3, 7]
    graphs = [_graph(10 + i, n) for i, n in enumerate(sizes)]
    offsets = np.cumsum([0] + sizes[:-1])
    e = torch.cat([g + int(o) for (g, _), o in zip(graphs, offsets)], 1)
    w = torch.cat([w for _, w in graphs])
    batch = torch.repeat_interleave(torch.tensor(ids), torch.tensor(sizes))
    for name, encode in FOUR.items():
        for form in (lambda t: t, np.asarray, lambda t: t.tolist()):
            together = encode(form(e), sum(sizes), batch=form(batch), edge_weight=form(w))
            for (ge, gw), n, offset, graph_id in zip(graphs, sizes, offsets, ids):
                alone = encode(ge, n, edge_weight=gw)
                nodes = slice(int(offset), int(offset) + n)
                if name == "rrwp":
                    mine = (together[0][0] >= offset) & (together[0][0] < offset + n)
                    assert torch.equal(together[0][:, mine] - int(offset), alone[0]), name
                    assert torch.equal(together[1][mine], alone[1]), name
                    assert torch.equal(together[2][nodes], alone[2]), name
                elif name == "random_walk_pe":
                    assert torch.equal(together[nodes], alone), name
                else:
                    torch.testing.assert_close(together[0][nodes], alone[0], atol=1e-5, rtol=0, msg=name)
                    torch.testing.assert_close(together[1][graph_id], alone[1][0], atol=1e-6, rtol=0, msg=name)
                    assert torch.equal(together[2][graph_id], alone[2][0]), name
            if name in ("laplacian_pe", "magnetic_laplacian_pe"):
                assert together[1].shape[0] == 8 and not together[2][[1, 2, 4, 5, 6]].any(), name
                assert not together[1][[1, 2, 4, 5, 6]].any(), name


def test_huge_graph_ids_cost_nothing_where_no_output_has_a_row_per_id():
    """Random walks and RRWP have no per-graph output: a graph id of 2**60 costs nothing. The Laplacian
    encodings return a row per graph id: that many rows are refused by name before allocating."""
    e = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]])
    compact, huge = torch.tensor([0, 0, 1, 1]), torch.tensor([3, 3, 2 ** 60, 2 ** 60])
    assert torch.equal(random_walk_pe(e, 4, 5, batch=compact), random_walk_pe(e, 4, 5, batch=huge))
    assert all(torch.equal(a, b) for a, b in zip(rrwp(e, 4, 3, batch=compact), rrwp(e, 4, 3, batch=huge)))
    for encode in (laplacian_pe, magnetic_laplacian_pe):
        with pytest.raises(ValueError, match="batch holds graph id 1152921504606846976: .* at most 1073741824"):
            encode(e, 4, 1, batch=huge)


TWO_EDGES = torch.tensor([[0, 1], [1, 0]])
HUGE = 2 ** 40


@pytest.mark.parametrize("call", [
    lambda: laplacian_pe(TWO_EDGES, HUGE, 2),
    lambda: laplacian_pe(TWO_EDGES, HUGE, 2, per_component=True),
    lambda: magnetic_laplacian_pe(TWO_EDGES, HUGE, 2),
    lambda: random_walk_pe(TWO_EDGES, HUGE, 4),
    lambda: rrwp(TWO_EDGES, HUGE, 4),
    lambda: transition_matrix(TWO_EDGES, HUGE),
    lambda: AddLaplacianPE(2)(Data(edge_index=TWO_EDGES, num_nodes=HUGE)),
    lambda: AddMagneticLaplacianPE(2)(Data(edge_index=TWO_EDGES, num_nodes=HUGE)),
    lambda: AddRandomWalkPE(4)(Data(edge_index=TWO_EDGES, num_nodes=HUGE)),
    lambda: AddRRWP(4)(Data(edge_index=TWO_EDGES, num_nodes=HUGE)),
], ids=["laplacian_pe", "per_component", "magnetic", "random_walk_pe", "rrwp", "transition_matrix",
        "AddLaplacianPE", "AddMagneticLaplacianPE", "AddRandomWalkPE", "AddRRWP"])
def test_num_nodes_beyond_memory_is_a_value_error_before_allocating(call):
    """Issue 28: num_nodes=2**40 on a 2-edge graph was ``RuntimeError: DefaultCPUAllocator: can't allocate``."""
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"num_nodes=1099511627776 .*does not fit in memory: at most "):
        call()
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("call,match", [
    (lambda: laplacian_pe(TWO_EDGES, 5, HUGE), "k=1099511627776 asks for"),
    (lambda: magnetic_laplacian_pe(TWO_EDGES, 5, HUGE), "k=1099511627776 asks for"),
    (lambda: random_walk_pe(TWO_EDGES, 5, HUGE), "walk_length=1099511627776 .* does not fit in memory"),
    (lambda: random_walk_pe(TWO_EDGES, 2 ** 29, [1, 2, 3]), "walk_length=3 steps asks for"),
    (lambda: rrwp(TWO_EDGES, 5, HUGE), "walk_length=1099511627776 asks for"),
    (lambda: rrwp(TWO_EDGES, 40, 2 ** 20), r"walk_length=1048576 on graphs of 40 nodes .* does not fit in memory"),
    (lambda: transition_matrix(TWO_EDGES, 2 ** 16), r"num_nodes=65536 \(1 dense \[65536, 65536\] matrices\)"),
    (lambda: random_walk_pe(TWO_EDGES, 12_000, 4, dense_max_nodes=20_000),
     r"graph 0 has 12,000 nodes: its dense \[n, n\] transition matrix .* lower dense_max_nodes=20000"),
    (lambda: rrwp(TWO_EDGES, 12_000, 4, dense_max_nodes=20_000),
     r"graph 0 has 12,000 nodes: its dense \[n, n\] transition matrix .* lower dense_max_nodes=20000"),
    (lambda: AddLaplacianPE(HUGE)(Data(edge_index=TWO_EDGES, num_nodes=5)), "k=1099511627776 asks for"),
    (lambda: AddMagneticLaplacianPE(HUGE)(Data(edge_index=TWO_EDGES, num_nodes=5)), "k=1099511627776 asks for"),
    (lambda: AddRandomWalkPE(HUGE), "walk_length=1099511627776 .* does not fit in memory"),
    (lambda: AddRRWP(HUGE)(Data(edge_index=TWO_EDGES, num_nodes=5)), "walk_length=1099511627776 asks for"),
], ids=["laplacian k", "magnetic k", "rw walk_length", "rw columns", "rrwp walk_length", "rrwp dense powers",
        "transition_matrix", "rw dense_max_nodes", "rrwp dense_max_nodes", "AddLaplacianPE k",
        "AddMagneticLaplacianPE k", "AddRandomWalkPE walk_length", "AddRRWP walk_length"])
def test_other_size_arguments_are_checked_before_allocating(call, match):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        call()
    assert time.perf_counter() - start < 5


def test_old_argument_name_steps_still_works():
    e, w = _graph(3, 9)
    new = random_walk_pe(e, 9, walk_length=[1, 3, 4], edge_weight=w)
    assert torch.equal(random_walk_pe(e, 9, steps=[1, 3, 4], edge_weight=w), new)
    nx = pytest.importorskip("networkx")
    from omnipos.graph import networkx_random_walk_pe

    karate = nx.karate_club_graph()
    assert torch.equal(networkx_random_walk_pe(karate, steps=6), networkx_random_walk_pe(karate, walk_length=6))
    with pytest.raises(TypeError, match="pass walk_length only"):
        networkx_random_walk_pe(karate, 5, steps=6)


def test_add_laplacian_pe_takes_solver_as_laplacian_pe(monkeypatch):
    """``solver=`` on every eigenvector entry point (it was missing on AddLaplacianPE): it reaches laplacian_pe,
    and each solver's encoding agrees with the default's on a graph of the sparse path."""
    import omnipos.graph.pyg as pyg_module

    sizes = [530, 40]
    data = [Data(edge_index=_graph(20 + i, n)[0], num_nodes=n) for i, n in enumerate(sizes)]
    batch = Batch.from_data_list(data)
    default = laplacian_pe(batch.edge_index, batch.num_nodes, 3, batch=batch.batch)
    seen = []
    original = pyg_module.laplacian_pe
    monkeypatch.setattr(pyg_module, "laplacian_pe", lambda *a, **kw: seen.append(kw["solver"]) or original(*a, **kw))
    for solver in ("auto", "lanczos", "lobpcg", "shift-invert"):
        out = AddLaplacianPE(3, solver=solver)(batch.clone()).laplacian_eigenvector_pe
        torch.testing.assert_close(out, default, atol=1e-4, rtol=0)
    assert seen == ["auto", "lanczos", "lobpcg", "shift-invert"]
    with pytest.raises(ValueError, match="solver must be one of"):
        AddLaplacianPE(3, solver="arpack")
