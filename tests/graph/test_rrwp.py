"""rrwp / AddRRWP against a dense float64 NumPy reference and a GRIT-style dense per-graph implementation (GRIT's
grit/transform/rrwp.py rewritten here without torch_sparse), on random batched graphs with isolated nodes, weights
and directed edges, on both solver paths; permutation equivariance, batch invariance, determinism; bad input."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.data import Batch, Data

from omnipos.graph import AddRRWP, precompute, rrwp


def grit_style(graphs, walk_length):
    """GRIT's add_full_rrwp per graph (dense D^-1 A with inf -> 0, identity first, powers stacked n x n x K,
    pairs where any channel is non-zero), concatenated with PyG's node offsets."""
    indices, values, nodes, offset = [], [], [], 0
    for edge_index, n, weight in graphs:
        adj = torch.zeros(n, n, dtype=torch.float32)
        if edge_index.numel():
            adj.index_put_((edge_index[0], edge_index[1]),
                           torch.ones(edge_index.shape[1]) if weight is None else weight.float(), accumulate=True)
        deg_inv = 1.0 / adj.sum(dim=1)
        deg_inv[deg_inv == float("inf")] = 0
        adj = adj * deg_inv.view(-1, 1)
        pe_list = [torch.eye(n, dtype=torch.float), adj]
        out = adj
        for _ in range(2, walk_length):
            out = out @ adj
            pe_list.append(out)
        pe = torch.stack(pe_list[:walk_length], dim=-1)
        row, col = (pe.abs().sum(-1) != 0).nonzero(as_tuple=True)
        indices.append(torch.stack([row, col]) + offset)
        values.append(pe[row, col])
        nodes.append(pe.diagonal().transpose(0, 1))
        offset += n
    return torch.cat(indices, 1), torch.cat(values), torch.cat(nodes)


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dense_max_nodes", [256, 1, 15])
def test_matches_float64_numpy_and_grit_on_random_batches(walk_refs, directed, weighted, dense_max_nodes):
    sizes = [5, 1, 0, 12, 30, 7, 12, 3, 0]
    e, n, batch, w, graphs = walk_refs.batch(11 + directed + 2 * weighted, sizes, directed=directed,
                                             weighted=weighted, zero_weights=weighted, loops=True)
    pair_index, pair_pe, node_pe = rrwp(e, n, 8, batch=batch, edge_weight=w, dense_max_nodes=dense_max_nodes)
    assert pair_index.dtype == torch.long and pair_pe.dtype == node_pe.dtype == torch.float32
    ref_index, ref_values, ref_nodes = walk_refs.rrwp(e, n, None if w is None else w.numpy(), 8)
    assert np.array_equal(pair_index.numpy(), ref_index)
    np.testing.assert_allclose(pair_pe.numpy(), ref_values.astype(np.float32), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(node_pe.numpy(), ref_nodes.astype(np.float32), rtol=1e-6, atol=1e-7)
    assert (batch[pair_index[0]] == batch[pair_index[1]]).all()  # never a pair across graphs
    grit_index, grit_values, grit_nodes = grit_style(graphs, 8)
    assert torch.equal(pair_index, grit_index)
    torch.testing.assert_close(pair_pe, grit_values, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(node_pe, grit_nodes, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("walk_length", [1, 2, 3, 20])
def test_walk_lengths(walk_refs, walk_length):
    e, n, batch, w, _ = walk_refs.batch(3, [4, 9, 6], directed=True)
    pair_index, pair_pe, node_pe = rrwp(e, n, walk_length, batch=batch, edge_weight=w)
    ref_index, ref_values, _ = walk_refs.rrwp(e, n, w.numpy(), walk_length)
    assert pair_pe.shape == (pair_index.shape[1], walk_length) and node_pe.shape == (n, walk_length)
    assert np.array_equal(pair_index.numpy(), ref_index)
    np.testing.assert_allclose(pair_pe.numpy(), ref_values, rtol=1e-6, atol=1e-7)
    assert (node_pe[:, 0] == 1).all()
    if walk_length == 1:  # only the identity: the pairs are the diagonal
        assert torch.equal(pair_index, torch.arange(n).expand(2, n))


def _dense(pair_index, pair_pe, n):
    out = torch.zeros(n, n, pair_pe.shape[1])
    out[pair_index[0], pair_index[1]] = pair_pe
    return out


@given(st.integers(1, 25), st.integers(0, 2**31), st.booleans(), st.integers(1, 6))
def test_permutation_equivariant(walk_refs, n, seed, directed, walk_length):
    e, n, _, w, _ = walk_refs.batch(seed, [n], directed=directed)
    perm = torch.from_numpy(np.random.default_rng(seed).permutation(n))
    relabel = torch.empty_like(perm)
    relabel[perm] = torch.arange(n)  # node perm[i] of the original is node i of the permuted graph
    pair_index, pair_pe, node_pe = rrwp(e, n, walk_length, edge_weight=w)
    p_index, p_pe, p_node = rrwp(relabel[e], n, walk_length, edge_weight=w)
    torch.testing.assert_close(_dense(p_index, p_pe, n), _dense(pair_index, pair_pe, n)[perm][:, perm],
                               rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(p_node, node_pe[perm], rtol=1e-5, atol=1e-6)


@given(st.lists(st.integers(0, 30), min_size=1, max_size=5), st.integers(0, 2**31), st.booleans(),
       st.sampled_from([256, 10]))
def test_batch_invariant_and_deterministic(walk_refs, sizes, seed, directed, dense_max_nodes):
    e, n, batch, w, graphs = walk_refs.batch(seed, sizes, directed=directed, zero_weights=True)
    together = rrwp(e, n, 6, batch=batch, edge_weight=w, dense_max_nodes=dense_max_nodes)
    again = rrwp(e, n, 6, batch=batch, edge_weight=w, dense_max_nodes=dense_max_nodes)
    assert all(torch.equal(a, b) for a, b in zip(together, again))
    graph_of_pair = batch[together[0][0]]
    offset = 0
    for i, (ge, gn, gw) in enumerate(graphs):
        index, values, nodes = rrwp(ge, gn, 6, edge_weight=gw, dense_max_nodes=dense_max_nodes)
        mine = graph_of_pair == i
        assert torch.equal(together[0][:, mine] - offset, index)
        assert torch.equal(together[1][mine], values)
        assert torch.equal(together[2][offset:offset + gn], nodes)
        offset += gn


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"walk_length": 0}, ValueError, "walk_length must be >= 1"),
        ({"walk_length": 2.0}, TypeError, "walk_length must be an int"),
        ({"edge_index": torch.tensor([[0, 5], [1, 0]])}, ValueError, r"edge_index\[:, 1\] = \(5, 0\).*names node 5"),
        ({"edge_index": torch.tensor([[0, -2], [1, 0]])}, ValueError, "names node -2"),
        ({"edge_weight": torch.tensor([1.0, float("nan")])}, ValueError, r"edge_weight\[1\] = nan.*graph 0"),
        ({"edge_weight": torch.tensor([-1.0, 1.0])}, ValueError, r"edge_weight\[0\] = -1.0.*must be >= 0"),
        ({"batch": torch.tensor([0, 0, 1, 0])}, ValueError, "node 3 has graph id 0 after graph id 1"),
        ({"batch": torch.tensor([0, 0, 1])}, ValueError, r"shape \[num_nodes\] = \[4\]"),
        ({"dense_max_nodes": -3}, ValueError, "dense_max_nodes"),
    ],
)
def test_bad_input(kwargs, error, match):
    arguments = {"edge_index": torch.tensor([[0, 1], [1, 0]]), "num_nodes": 4, "walk_length": 3,
                 "batch": torch.tensor([0, 0, 0, 0])}
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        rrwp(**arguments)


def test_transform_grit_layout_batch_and_precompute(walk_refs):
    _, _, _, _, graphs = walk_refs.batch(5, [6, 1, 9, 0, 4], directed=True)
    data = [Data(edge_index=e, edge_weight=w.float(), num_nodes=n, x=torch.randn(n, 3)) for e, n, w in graphs]
    transform = AddRRWP(walk_length=5)
    one_by_one = [transform(d.clone()) for d in data]
    for d, (e, n, w) in zip(one_by_one, graphs):
        index, values, nodes = rrwp(e, n, 5, edge_weight=w.float())
        assert torch.equal(d.rrwp_index, index) and torch.equal(d.rrwp_val, values) and torch.equal(d.rrwp, nodes)
    collated = Batch.from_data_list(one_by_one)  # PyG offsets rrwp_index (its name contains "index")
    batched = transform(Batch.from_data_list(data))
    for key in ("rrwp", "rrwp_index", "rrwp_val"):
        assert torch.equal(batched[key], collated[key])
    done = precompute(data, transform, batch_size=2, progress=False)
    for ours, ref in zip(done, one_by_one):
        for key in ("rrwp", "rrwp_index", "rrwp_val", "x"):
            assert torch.equal(ours[key], ref[key])
    named = AddRRWP(3, attr_name=None, pair_attr_name=("pair_index", "pair_value"))(data[0].clone())
    assert named.x.shape == (6, 3 + 3) and named.pair_index.shape[0] == 2 and named.pair_value.shape[1] == 3
    assert repr(AddRRWP()) == "AddRRWP(walk_length=8, attr_name='rrwp', pair_attr_name=('rrwp_index', 'rrwp_val'))"
    with pytest.raises(ValueError, match="must contain 'index'"):
        AddRRWP(pair_attr_name=("pairs", "values"))
    with pytest.raises(TypeError, match="pair_attr_name"):
        AddRRWP(pair_attr_name=3)
    with pytest.raises(ValueError, match="walk_length"):
        AddRRWP(0)


def test_torch_dense_path_padded_chunks(walk_refs, monkeypatch):
    """The dense path other devices take (torch, padded chunks, torch merge), run on the CPU."""
    import sys

    monkeypatch.setattr(sys.modules["omnipos.graph.walks"], "_TORCH_ON_CPU", True)
    e, n, batch, w, _ = walk_refs.batch(23, [5, 5, 9, 1, 0, 5, 30, 300], directed=True)
    ref_index, ref_values, ref_nodes = walk_refs.rrwp(e, n, w.numpy(), 6)
    pair_index, pair_pe, node_pe = rrwp(e, n, 6, batch=batch, edge_weight=w)
    assert np.array_equal(pair_index.numpy(), ref_index)
    np.testing.assert_allclose(pair_pe.numpy(), ref_values, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(node_pe.numpy(), ref_nodes, rtol=1e-6, atol=1e-7)


@pytest.mark.gpu
def test_cuda_matches_cpu(walk_refs):
    e, n, batch, w, _ = walk_refs.batch(24, [6, 40, 1, 300], directed=True)
    cpu = rrwp(e, n, 6, batch=batch, edge_weight=w)
    cuda = rrwp(e.cuda(), n, 6, batch=batch.cuda(), edge_weight=w.cuda())
    assert all(t.device.type == "cuda" for t in cuda)
    assert torch.equal(cuda[0].cpu(), cpu[0])
    torch.testing.assert_close(cuda[1].cpu(), cpu[1], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(cuda[2].cpu(), cpu[2], atol=1e-6, rtol=1e-5)
