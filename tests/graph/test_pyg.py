"""The PyG transforms: PyG's attribute names, shapes and dtypes, PyG's own tests ported, Batch = graph by graph."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.datasets import FakeDataset
from torch_geometric.loader import DataLoader
from torch_geometric.transforms import AddLaplacianEigenvectorPE, Compose

from omnipos.graph import AddLaplacianPE, AddRandomWalkPE, RandomSignFlip, laplacian_pe, precompute

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
    with pytest.raises(ValueError, match="steps"):
        AddRandomWalkPE(0)
    with pytest.raises(TypeError, match="transform"):
        precompute([], lambda d: d)
