"""The PyG transforms: PyG's attribute names, shapes and dtypes, PyG's own tests ported, Batch = graph by graph;
precompute with foreign transforms, integer x, GraphGPS's layout, empty graphs; copies, pickling, no global state."""

import copy

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.datasets import FakeDataset
from torch_geometric.loader import DataLoader
from torch_geometric.transforms import AddLaplacianEigenvectorPE, Compose

from omnipos.graph import (
    AddLaplacianPE,
    AddRandomWalkPE,
    AddRRWP,
    RandomSignFlip,
    laplacian_pe,
    precompute,
)

EDGES = torch.tensor([[0, 1, 0, 4, 1, 4, 2, 3, 3, 5], [1, 0, 4, 0, 4, 1, 3, 2, 5, 3]])


def test_laplacian_attributes_like_pyg():
    """PyG's test_add_laplacian_eigenvector_pe, ported (plus the dtype)."""
    x = torch.randn(6, 4)
    data = Data(x=x, edge_index=EDGES)
    out = AddLaplacianPE(k=3)(data)
    assert out.laplacian_eigenvector_pe.size() == (6, 3)
    assert out.laplacian_eigenvector_pe.dtype == torch.float32
    assert "laplacian_eigenvector_pe" not in data  # the input is not modified
    assert AddLaplacianPE(k=3, attr_name=None)(data).x.size() == (6, 4 + 3)
    assert AddLaplacianPE(k=3, attr_name="x")(data).x.size() == (6, 3)
    assert AddLaplacianPE(k=3, attr_name=None)(Data(edge_index=EDGES, num_nodes=6)).x.size() == (6, 3)

    # Clustering test with the first non-trivial eigenvector (Fiedler vector)
    edges = torch.tensor([[0, 1, 0, 4, 1, 4, 2, 3, 3, 5, 2, 5], [1, 0, 4, 0, 4, 1, 3, 2, 5, 3, 5, 2]])
    pe = AddLaplacianPE(k=1)(Data(x=x, edge_index=edges)).laplacian_eigenvector_pe
    cluster_1, cluster_2 = pe[[0, 1, 4]], pe[[2, 3, 5]]
    assert not torch.allclose(cluster_1, cluster_2)
    assert torch.allclose(cluster_1, cluster_1.mean())
    assert torch.allclose(cluster_2, cluster_2.mean())


def test_laplacian_permutation_invariance_like_pyg():
    """PyG's test_eigenvector_permutation_invariance, ported."""
    data = Data(edge_index=EDGES, num_nodes=6)
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(0))
    transform = AddLaplacianPE(k=2, attr_name="x")
    out1, out2 = transform(data), transform(data.subgraph(perm))
    assert torch.allclose(out1.x[perm].abs(), out2.x.abs(), atol=1e-6)


def test_k_at_least_n_where_pyg_crashes():
    data = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    with pytest.raises(Exception):
        AddLaplacianEigenvectorPE(k=3, is_undirected=True)(data)
    out = AddLaplacianPE(k=3, mask_attr="pe_mask")(data)
    assert out.laplacian_eigenvector_pe.shape == (2, 3)
    assert out.pe_mask.tolist() == [[True, False, False]] * 2


def test_random_walk_attributes_like_pyg():
    x = torch.randn(6, 4)
    data = Data(x=x, edge_index=EDGES)
    out = AddRandomWalkPE(walk_length=3)(data)
    assert out.random_walk_pe.size() == (6, 3) and out.random_walk_pe.dtype == torch.float32
    assert AddRandomWalkPE(walk_length=3, attr_name=None)(data).x.size() == (6, 4 + 3)
    assert AddRandomWalkPE(walk_length=3, attr_name="x")(data).x.tolist()[3] == [0.0, 1.0, 0.0]
    assert AddRandomWalkPE(walk_length=[2, 4])(data).random_walk_pe.shape == (6, 2)


@pytest.fixture
def graphs(graph_factory):
    rng = np.random.default_rng(0)
    out = []
    for i in range(7):
        n = int(rng.integers(2, 12))
        e = graph_factory(n, n, i)
        w = torch.rand(e.shape[1], generator=torch.Generator().manual_seed(i)) + 0.1
        out.append(Data(x=torch.randn(n, 3), edge_index=e, edge_weight=w, num_nodes=n))
    return out


@pytest.mark.parametrize("make", [
    lambda: AddLaplacianPE(4, eigenvalue_attr="eigenvalues", mask_attr="pe_mask"),
    lambda: AddLaplacianPE(3, attr_name=None, normalization="rw"),
    lambda: AddRandomWalkPE(5),
    lambda: Compose([AddLaplacianPE(3, attr_name=None), AddRandomWalkPE(4, attr_name=None)]),
])
def test_batch_equals_graph_by_graph_and_precompute(graphs, make):
    transform = make()
    one_by_one = [transform(g) for g in graphs]
    batched = transform(Batch.from_data_list(graphs))
    expected = Batch.from_data_list(one_by_one)
    for key in expected.keys():
        torch.testing.assert_close(batched[key], expected[key], atol=1e-6, rtol=0)
    done = precompute(graphs, transform, batch_size=3, progress=False)
    assert len(done) == len(graphs)
    for ours, ref in zip(done, one_by_one):
        assert sorted(ours.keys()) == sorted(ref.keys())
        for key in ref.keys():
            torch.testing.assert_close(ours[key], ref[key], atol=1e-6, rtol=0)
    assert "laplacian_eigenvector_pe" not in graphs[0] and graphs[0].x.shape[1] == 3


def test_eigenvalue_features_collate(graphs):
    transform = AddLaplacianPE(4, eigenvalue_attr="eigenvalue_pe", eigenvalue_dim=8)
    batch = Batch.from_data_list([transform(g) for g in graphs])
    assert batch.eigenvalue_pe.shape == (len(graphs), 4, 8)
    _, values, mask = laplacian_pe(graphs[0].edge_index, graphs[0].num_nodes, 4,
                                   edge_weight=graphs[0].edge_weight, return_eigenvalues=True)
    from omnipos.core import sinusoidal

    expected = sinusoidal(values[0].double() * 100.0, 8) * mask[0, :, None]
    torch.testing.assert_close(batch.eigenvalue_pe[0], expected)


def test_transform_and_pre_transform_in_a_dataset(tmp_path):
    dataset = FakeDataset(num_graphs=6, avg_num_nodes=12, avg_degree=3, transform=AddLaplacianPE(4))
    loader = DataLoader(dataset, batch_size=3)
    batch = next(iter(loader))
    assert batch.laplacian_eigenvector_pe.shape == (batch.num_nodes, 4)
    pre = FakeDataset(num_graphs=4, avg_num_nodes=10, transform=AddRandomWalkPE(3))
    assert pre[0].random_walk_pe.shape == (pre[0].num_nodes, 3)


def test_random_sign_flip_per_graph(graphs):
    batch = AddLaplacianPE(4)(Batch.from_data_list(graphs))
    flipped = RandomSignFlip(generator=torch.Generator().manual_seed(0))(batch)
    pe, new = batch.laplacian_eigenvector_pe, flipped.laplacian_eigenvector_pe
    torch.testing.assert_close(new.abs(), pe.abs())
    patterns = set()
    for i in range(len(graphs)):
        rows = batch.batch == i
        ratio = torch.where(pe[rows].abs() > 1e-6, new[rows] / pe[rows], torch.nan)
        for col in range(4):
            values = ratio[:, col][~torch.isnan(ratio[:, col])]
            if values.numel():
                assert torch.allclose(values, values[0].expand_as(values))  # one sign per graph and column
        patterns.add(tuple(torch.nanmean(ratio, 0).sign().nan_to_num(0).tolist()))
    assert len(patterns) > 1  # graphs got different signs
    again = RandomSignFlip(generator=torch.Generator().manual_seed(0))(batch).laplacian_eigenvector_pe
    assert torch.equal(again, new)


def test_repr_and_bad_arguments():
    assert "k=4" in repr(AddLaplacianPE(4)) and "sign='canonical'" in repr(AddLaplacianPE(4))
    assert repr(AddRandomWalkPE(3)) == "AddRandomWalkPE(walk_length=3, attr_name='random_walk_pe')"
    with pytest.raises(ValueError, match="sign"):
        AddLaplacianPE(4, sign="x")
    with pytest.raises(ValueError, match="eigenvalue_attr"):
        AddLaplacianPE(4, eigenvalue_dim=8)
    with pytest.raises(ValueError, match="k must be >= 1"):
        AddLaplacianPE(0)
    with pytest.raises(ValueError, match="per component"):
        AddLaplacianPE(4, per_component=True, mask_attr="m")
    with pytest.raises(ValueError, match="walk_length must be >= 1"):
        AddRandomWalkPE(0)
    with pytest.raises(TypeError, match="transform"):
        precompute([], lambda d: d)


# ---------------------------------------------------------------------------------------- issue 17 and issue 13


def test_precompute_with_foreign_transforms_in_the_chain(graphs):
    """Compose([ToUndirected(), AddLaplacianPE(3)]) lost the encoding (the fallback transformed a collated Batch
    and to_data_list() dropped what was added to it): foreign parts now run graph by graph, ours batched."""
    from torch_geometric.transforms import AddSelfLoops, ToUndirected

    directed = [Data(x=g.x, edge_index=g.edge_index[:, ::2], num_nodes=g.num_nodes) for g in graphs]
    chains = [
        Compose([ToUndirected(), AddLaplacianPE(3)]),
        Compose([AddLaplacianPE(3), ToUndirected(), AddRandomWalkPE(4)]),
        Compose([Compose([ToUndirected(), AddSelfLoops()]), AddRandomWalkPE(4), AddLaplacianPE(2, "lap2")]),
    ]
    for chain in chains:
        expected = [chain(g.clone()) for g in directed]
        done = precompute(directed, chain, batch_size=3, progress=False)
        for ours, ref in zip(done, expected):
            assert sorted(ours.keys()) == sorted(ref.keys())
            for key in ref.keys():  # noqa: SIM118 - Data, not a dict
                torch.testing.assert_close(ours[key], ref[key], atol=1e-6, rtol=0)
    assert all("laplacian_eigenvector_pe" not in g for g in directed)


def test_attr_name_none_refuses_integer_x():
    """OGB molecules: x holds int64 atom features; concatenating the float encoding cast it to integers (zeros)."""
    data = Data(x=torch.tensor([[6], [8], [6]]), edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]))
    for transform in (AddLaplacianPE(2, attr_name=None), AddRandomWalkPE(3, attr_name=None)):
        with pytest.raises(TypeError, match="x has dtype torch.int64.*attr_name="):
            transform(data.clone())
        with pytest.raises(TypeError, match="x has dtype torch.int64"):
            precompute([data], transform, progress=False)
    kept = AddRandomWalkPE(3)(data.clone())
    assert kept.x.dtype == torch.int64 and kept.random_walk_pe.dtype == torch.float32
    as_float = AddRandomWalkPE(3, attr_name=None)(Data(x=data.x.float(), edge_index=data.edge_index))
    assert as_float.x.shape == (3, 4)


def test_graphgps_eigenvalue_layout():
    """GraphGPS reads EigVals per node, [N, k, 1], NaN where the graph has fewer eigenvalues."""
    graphs = [Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), num_nodes=3),
              Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2)]
    transform = AddLaplacianPE(3, attr_name="EigVecs", eigenvalue_attr="EigVals", eigenvalue_layout="graphgps",
                               drop_trivial=False)
    out = [transform(g.clone()) for g in graphs]
    _, values, _ = laplacian_pe(graphs[0].edge_index, 3, 3, drop_trivial=False, return_eigenvalues=True)
    assert out[0].EigVals.shape == (3, 3, 1)
    torch.testing.assert_close(out[0].EigVals[:, :, 0], values.expand(3, 3))
    assert out[1].EigVals.shape == (2, 3, 1) and torch.isnan(out[1].EigVals[:, 2]).all()
    assert not torch.isnan(out[1].EigVals[:, :2]).any()
    batched = transform(Batch.from_data_list(graphs))
    torch.testing.assert_close(batched.EigVals, torch.cat([o.EigVals for o in out]), equal_nan=True)
    with pytest.raises(ValueError, match="eigenvalue_layout"):
        AddLaplacianPE(3, eigenvalue_layout="dgl")
    with pytest.raises(ValueError, match="eigenvalue_dim"):
        AddLaplacianPE(3, eigenvalue_attr="v", eigenvalue_dim=4, eigenvalue_layout="graphgps")


def test_empty_graphs_keep_one_eigenvalue_row_each():
    """A 0-node graph at the end of a precompute list gave fewer eigenvalue rows than graphs."""
    graphs = [Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2),
              Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=0),
              Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), num_nodes=3),
              Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=0)]
    transform = AddLaplacianPE(2, eigenvalue_attr="eigenvalues", mask_attr="pe_mask")
    done = precompute(graphs, transform, batch_size=4, progress=False)
    one_by_one = [transform(g.clone()) for g in graphs]
    for ours, ref in zip(done, one_by_one):
        assert ours.eigenvalues.shape == ref.eigenvalues.shape == (1, 2)
        torch.testing.assert_close(ours.eigenvalues, ref.eigenvalues)
    assert done[3].eigenvalues.tolist() == [[0.0, 0.0]] and done[3].laplacian_eigenvector_pe.shape == (0, 2)
    batch = Batch.from_data_list(done)
    assert batch.eigenvalues.shape == (4, 2)
    assert transform(Batch.from_data_list(graphs)).eigenvalues.shape == (4, 2)


def test_per_component_accepts_zero_weight_edges():
    """Issue 14: per_component=True refused valid zero-weight edges ("batch is inconsistent", no batch given)."""
    e = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3]])
    w = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])  # the 1-2 edge has weight 0: {0, 1}, {2, 3, 4}
    out = AddLaplacianPE(1, per_component=True)(Data(edge_index=e, edge_weight=w, num_nodes=5))
    expected = AddLaplacianPE(1, per_component=True)(Data(edge_index=e[:, w > 0], num_nodes=5))
    torch.testing.assert_close(out.laplacian_eigenvector_pe, expected.laplacian_eigenvector_pe)
    assert out.laplacian_eigenvector_pe[2:].abs().sum() > 0


def test_random_sign_flip_missing_attribute_and_huge_graph_ids():
    data = Data(edge_index=EDGES, num_nodes=6)
    with pytest.raises(ValueError, match="no attribute 'laplacian_eigenvector_pe'.*AddLaplacianPE"):
        RandomSignFlip()(data)
    with pytest.raises(TypeError, match="attr_name"):
        RandomSignFlip(3)
    batch = AddLaplacianPE(2)(Batch.from_data_list([data, data]))
    batch.batch = batch.batch * 2**50  # graph ids far apart: no allocation per id
    flipped = RandomSignFlip(generator=torch.Generator().manual_seed(0))(batch.clone())
    torch.testing.assert_close(flipped.laplacian_eigenvector_pe.abs(), batch.laplacian_eigenvector_pe.abs())


@pytest.mark.parametrize("make", [
    lambda: AddLaplacianPE(3, eigenvalue_attr="ev", sign="random", generator=torch.Generator().manual_seed(0)),
    lambda: AddRandomWalkPE([1, 4]),
    lambda: AddRRWP(4),
    lambda: RandomSignFlip(generator=torch.Generator().manual_seed(1)),
    lambda: Compose([AddRandomWalkPE(3), AddRRWP(3)]),
])
def test_transforms_copy_pickle_and_save(tmp_path, make):
    """Issue 13: every transform deep-copies, pickles and saves, and the copy behaves as the original (the
    generator state travels with it)."""
    import io
    import pickle

    transform = make()
    data = AddLaplacianPE(2)(Data(edge_index=EDGES, num_nodes=6, x=torch.randn(6, 2)))
    buffer = io.BytesIO()
    torch.save(transform, buffer)
    buffer.seek(0)
    copies = [copy.deepcopy(transform), pickle.loads(pickle.dumps(transform)), torch.load(buffer, weights_only=False)]
    expected = transform(data.clone())
    for other in copies:
        assert repr(other) == repr(transform)
        out = other(data.clone())
        for key in expected.keys():  # noqa: SIM118 - Data, not a dict
            torch.testing.assert_close(out[key], expected[key])


def test_no_process_global_side_effects(graphs):
    """Issue 13: the graph code set torch's thread count during each call; nothing global may change."""
    threads, dtype, rng = torch.get_num_threads(), torch.get_default_dtype(), torch.get_rng_state()
    seen = []
    original = torch.set_num_threads
    try:
        torch.set_num_threads = lambda n: seen.append(n)
        batch = Batch.from_data_list(graphs)
        for transform in (AddRandomWalkPE(5), AddRRWP(4)):
            transform(batch.clone())
        precompute(graphs, Compose([AddRandomWalkPE(3), AddRRWP(3)]), batch_size=2, progress=False)
    finally:
        torch.set_num_threads = original
    assert seen == [] and torch.get_num_threads() == threads and torch.get_default_dtype() == dtype
    assert torch.equal(torch.get_rng_state(), rng)


def test_missing_extras_name_the_extra(monkeypatch):
    """torch_geometric / networkx are the [graph] extra: a missing one raises ImportError naming it, while
    omnipos.graph and its tensor functions work without them."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch_geometric'] = None; sys.modules['networkx'] = None\n"
        "import torch, omnipos.graph as g\n"
        "e = torch.tensor([[0, 1], [1, 0]])\n"
        "assert g.random_walk_pe(e, 2, 3).shape == (2, 3) and g.rrwp(e, 2, 3)[1].shape == (4, 3)\n"
        "assert g.laplacian_pe(e, 2, 1).shape == (2, 1) and g.SignNet(2, 3) is not None\n"
        "for name in ('AddRRWP', 'precompute'):\n"
        "    try:\n"
        "        getattr(g, name)\n"
        "    except ImportError as exc:\n"
        "        assert 'pip install \"omnipos[graph]\"' in str(exc), exc\n"
        "    else:\n"
        "        raise AssertionError(name)\n"
        "try:\n"
        "    g.networkx_random_walk_pe(None)\n"
        "except ImportError as exc:\n"
        "    assert 'omnipos[graph]' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('networkx')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
