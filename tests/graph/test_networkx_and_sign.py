"""networkx input, sign handling and eigenvalue features."""

import networkx as nx
import numpy as np
import pytest
import torch

from omnipos.graph import (
    canonical_sign,
    eigenvalue_encoding,
    laplacian_pe,
    networkx_laplacian_pe,
    networkx_random_walk_pe,
    networkx_to_edge_index,
    random_sign_flip,
    random_walk_pe,
)


def test_karate_club_matches_networkx_spectrum():
    graph = nx.karate_club_graph()
    pe, values, _ = networkx_laplacian_pe(graph, 4, return_eigenvalues=True)
    expected = np.sort(nx.normalized_laplacian_spectrum(graph, weight=None))[1:5]
    np.testing.assert_allclose(values[0].numpy(), expected, atol=1e-6)
    lap = nx.normalized_laplacian_matrix(graph, weight=None).toarray()
    np.testing.assert_allclose(lap @ pe.double().numpy(), pe.double().numpy() * values[0].double().numpy(),
                               atol=1e-5)
    weighted = networkx_laplacian_pe(graph, 4, weight="weight", return_eigenvalues=True)[1]
    np.testing.assert_allclose(weighted[0].numpy(),
                               np.sort(nx.normalized_laplacian_spectrum(graph, weight="weight"))[1:5], atol=1e-6)


def test_node_labels_order_and_direction():
    graph = nx.Graph([("c", "a"), ("a", "b"), ("b", "d")])
    edge_index, weight, nodes = networkx_to_edge_index(graph)
    assert nodes == ["c", "a", "b", "d"] and weight is None and edge_index.shape == (2, 6)
    path = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])  # c-a-b-d relabelled 0..3
    torch.testing.assert_close(networkx_laplacian_pe(graph, 2), laplacian_pe(path, 4, 2))
    directed = nx.DiGraph([(0, 1), (1, 2), (2, 0)])
    assert networkx_random_walk_pe(directed, 3)[:, 2].tolist() == [1.0, 1.0, 1.0]
    torch.testing.assert_close(networkx_random_walk_pe(nx.cycle_graph(5), 4),
                               random_walk_pe(networkx_to_edge_index(nx.cycle_graph(5))[0], 5, 4))
    with pytest.raises(TypeError, match="networkx"):
        networkx_laplacian_pe([(0, 1)], 2)


def test_canonical_sign_tie_rule():
    v = torch.tensor([[0.5, -0.7, 0.1], [-0.5, 0.7, -0.9], [0.2, 0.1, 0.3]], dtype=torch.float64)
    # column 0: |0.5| tie between rows 0 and 1 -> row 0 decides (+); column 1: row 0 (-0.7) -> flip;
    # column 2: row 1 (-0.9) -> flip
    assert canonical_sign(v).tolist() == [1.0, -1.0, -1.0]
    assert canonical_sign(torch.zeros(3, 2)).tolist() == [1.0, 1.0]


def test_random_sign_flip_function():
    pe = torch.randn(7, 3)
    batch = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    out = random_sign_flip(pe, batch, generator=torch.Generator().manual_seed(3))
    ratio = out / pe
    for g in range(3):
        rows = ratio[batch == g]
        assert torch.equal(rows, rows[:1].expand_as(rows))
    assert set(ratio.unique().tolist()) <= {-1.0, 1.0}
    with pytest.raises(ValueError, match="batch"):
        random_sign_flip(pe, batch[:3])


def test_eigenvalue_encoding():
    values = torch.tensor([[0.0, 0.5, 1.9]])
    out = eigenvalue_encoding(values, 4, mask=torch.tensor([[True, True, False]]))
    expected = torch.tensor([[0.0, 1.0, 0.0, 1.0], [np.sin(50.0), np.cos(50.0), np.sin(0.5), np.cos(0.5)]])
    torch.testing.assert_close(out[0, :2], expected.float())
    assert out[0, 2].abs().max() == 0
    with pytest.raises(ValueError, match="even"):
        eigenvalue_encoding(values, 3)


def test_eigenvalue_encoding_list_masks_and_padding():
    """Issue 14: a list mask raised AttributeError; masked-out entries may hold anything (GraphGPS: NaN)."""
    values = torch.tensor([[0.0, 0.5, 1.9]])
    expected = eigenvalue_encoding(values, 4, mask=torch.tensor([[True, True, False]]))
    torch.testing.assert_close(eigenvalue_encoding(values, 4, mask=[[True, True, False]]), expected)
    torch.testing.assert_close(eigenvalue_encoding([[0.0, 0.5, float("nan")]], 4, mask=[[True, True, False]]),
                               expected)
    with pytest.raises(TypeError, match="mask must hold booleans"):
        eigenvalue_encoding(values, 4, mask=[[1, 1, 0]])
    with pytest.raises(ValueError, match="mask .* must match"):
        eigenvalue_encoding(values, 4, mask=[True, False])
    with pytest.raises(ValueError, match=r"eigenvalues \* scale must be finite.*\[0, 2\]"):
        eigenvalue_encoding([[0.0, 0.5, float("nan")]], 4)
    with pytest.raises(ValueError, match=r"eigenvalues \* scale must be finite"):
        eigenvalue_encoding([[1e307]], 4)
    with pytest.raises(TypeError, match="scale must be a real number"):
        eigenvalue_encoding(values, 4, scale="100")
    with pytest.raises(ValueError, match="meta tensor"):
        eigenvalue_encoding(values.to("meta"), 4)


def test_networkx_weights_must_be_real_numbers():
    graph = nx.Graph()
    graph.add_edge("a", "b", weight=True)
    with pytest.raises(TypeError, match=r"must hold real numbers; edge 'a' -> 'b' has True"):
        networkx_random_walk_pe(graph, 3, weight="weight")
    graph["a"]["b"]["weight"] = 10**400
    with pytest.raises(ValueError, match="beyond float64's range"):
        networkx_to_edge_index(graph, "weight")
    graph["a"]["b"]["weight"] = float("nan")
    with pytest.raises(ValueError, match=r"edge_weight\[0\] = nan .* must be finite"):
        networkx_random_walk_pe(graph, 3, weight="weight")
    graph["a"]["b"]["weight"] = 2.5
    multi = nx.MultiGraph([("a", "b"), ("a", "b")])  # parallel edges add up
    torch.testing.assert_close(networkx_random_walk_pe(multi, 3), networkx_random_walk_pe(graph, 3))
