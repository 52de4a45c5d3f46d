"""Real graphs nobody here wrote: all 1253 graphs of networkx's atlas (every graph of up to 7 nodes, the 0-node
graph included) and drug molecules built from SMILES with rdkit. The transforms, run batched through
``precompute``, against PyG's own transforms graph by graph where PyG gives a reference (random walks, Laplacian
eigenvectors with a simple eigenvalue) and against float64 references otherwise (RRWP, weighted walks)."""

import networkx as nx
import numpy as np
import pytest
import torch
from support.molecules import DRUGS
from torch_geometric.data import Batch, Data
from torch_geometric.transforms import AddLaplacianEigenvectorPE, Compose
from torch_geometric.transforms import AddRandomWalkPE as PyGRandomWalkPE

from omnipos.graph import (
    AddLaplacianPE,
    AddRandomWalkPE,
    AddRRWP,
    SignNet,
    laplacian_pe,
    networkx_random_walk_pe,
    networkx_to_edge_index,
    precompute,
    random_walk_pe,
)


@pytest.fixture(scope="module")
def atlas():
    graphs = []
    for graph in nx.graph_atlas_g():
        edge_index, _, nodes = networkx_to_edge_index(graph)
        graphs.append(Data(edge_index=edge_index, num_nodes=len(nodes)))
    graphs.append(Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=0))  # and one more at the end
    return graphs


@pytest.fixture(scope="module")
def molecules():
    from rdkit import Chem

    out = []
    for name, smiles in DRUGS.items():
        molecule = Chem.MolFromSmiles(smiles)
        pairs = [(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in molecule.GetBonds()]
        orders = [b.GetBondTypeAsDouble() for b in molecule.GetBonds()]
        e = torch.tensor(pairs, dtype=torch.long).T
        atoms = torch.tensor([[a.GetAtomicNum()] for a in molecule.GetAtoms()])  # int64, as OGB's x
        out.append(Data(x=atoms, edge_index=torch.cat([e, e.flip(0)], 1),
                        edge_weight=torch.tensor(orders * 2, dtype=torch.float64),
                        num_nodes=molecule.GetNumAtoms(), name=name))
    return out


def simple_columns(values: torch.Tensor, k: int) -> torch.Tensor:
    """Columns 1..k of a spectrum whose eigenvalue is simple (elsewhere any basis of the eigenspace is right)."""
    gaps = values.diff()
    simple = torch.ones(values.numel(), dtype=torch.bool)
    simple[1:] &= gaps > 1e-5
    simple[:-1] &= gaps > 1e-5
    return simple[1:k + 1]


def assert_like_pyg_laplacian(ours: torch.Tensor, data: Data, k: int) -> int:
    """PyG's eigenvectors on the columns of simple eigenvalues, up to sign; returns how many were compared."""
    n = data.num_nodes
    if n < k + 2:  # PyG needs k < n - 1 eigenpairs here (it crashes or pads otherwise)
        return 0
    theirs = AddLaplacianEigenvectorPE(k, is_undirected=True)(data.clone()).laplacian_eigenvector_pe
    _, values, _ = laplacian_pe(data.edge_index, n, n, drop_trivial=False, return_eigenvalues=True)
    columns = simple_columns(values[0].double(), k)
    if not columns.any():
        return 0
    a, b = ours[:, columns].double(), theirs[:, columns].double()
    signs = torch.sign((a * b).sum(0))
    torch.testing.assert_close(a, b * signs, atol=2e-5, rtol=0)
    return int(columns.sum())


def test_atlas_random_walk_like_pyg(atlas):
    done = precompute(atlas, AddRandomWalkPE(8), batch_size=400, progress=False)
    assert len(done) == len(atlas)
    for ours, data in zip(done, atlas):
        assert ours.random_walk_pe.shape == (data.num_nodes, 8)
        if data.num_nodes:
            theirs = PyGRandomWalkPE(8)(data.clone()).random_walk_pe
            torch.testing.assert_close(ours.random_walk_pe, theirs, atol=1e-6, rtol=1e-5)


def test_atlas_random_walk_sparse_path_is_the_dense_one(atlas):
    batch = Batch.from_data_list(atlas)
    dense = random_walk_pe(batch.edge_index, batch.num_nodes, 8, batch=batch.batch)
    sparse = random_walk_pe(batch.edge_index, batch.num_nodes, 8, batch=batch.batch, dense_max_nodes=1)
    torch.testing.assert_close(sparse, dense, atol=1e-7, rtol=0)


def test_atlas_laplacian_like_pyg(atlas):
    k = 3
    done = precompute(atlas, AddLaplacianPE(k, eigenvalue_attr="eigenvalues"), batch_size=500, progress=False)
    compared = sum(assert_like_pyg_laplacian(ours.laplacian_eigenvector_pe, data, k)
                   for ours, data in zip(done, atlas))
    assert compared > 1500  # most atlas graphs have simple eigenvalues among their first ones
    assert all(d.eigenvalues.shape == (1, k) for d in done)  # one row per graph, the two 0-node graphs too


def test_atlas_rrwp_like_the_float64_reference(atlas, walk_refs):
    done = precompute(atlas, AddRRWP(5), batch_size=500, progress=False)
    for ours, data in zip(done, atlas):
        index, values, nodes = walk_refs.rrwp(data.edge_index, data.num_nodes, None, 5)
        assert np.array_equal(ours.rrwp_index.numpy(), index)
        np.testing.assert_allclose(ours.rrwp_val.numpy(), values, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(ours.rrwp.numpy(), nodes, rtol=1e-6, atol=1e-7)
    collated = Batch.from_data_list(done)  # PyG collates GRIT's layout: pair ids offset per graph
    assert (collated.batch[collated.rrwp_index[0]] == collated.batch[collated.rrwp_index[1]]).all()


def test_networkx_helper_on_atlas_graphs_with_labels(atlas):
    for graph in nx.graph_atlas_g()[::50]:
        relabelled = nx.relabel_nodes(graph, {v: f"atom{v}" for v in graph.nodes})
        torch.testing.assert_close(networkx_random_walk_pe(relabelled, 6), networkx_random_walk_pe(graph, 6))


def test_drug_molecules(molecules, walk_refs):
    unweighted = [Data(x=m.x, edge_index=m.edge_index, num_nodes=m.num_nodes) for m in molecules]
    chain_done = precompute(unweighted, AddRandomWalkPE(16), batch_size=7, progress=False)
    for ours, data in zip(chain_done, unweighted):
        theirs = PyGRandomWalkPE(16)(data.clone()).random_walk_pe
        torch.testing.assert_close(ours.random_walk_pe, theirs, atol=1e-6, rtol=1e-5)
        assert ours.x.dtype == torch.int64 and torch.equal(ours.x, data.x)  # atom numbers untouched
    compared = sum(assert_like_pyg_laplacian(AddLaplacianPE(4)(d.clone()).laplacian_eigenvector_pe, d, 4)
                   for d in unweighted)
    assert compared >= 60
    # bond orders as weights: the walk PyG gets wrong (pyg#10098), RRWP, against float64 references
    done = precompute(molecules, Compose([AddRandomWalkPE([1, 2, 3, 5, 8]), AddRRWP(6)]), batch_size=6,
                      progress=False)
    for ours, m in zip(done, molecules):
        expected = walk_refs.return_probabilities(m.edge_index, m.num_nodes, m.edge_weight.numpy(), [1, 2, 3, 5, 8])
        np.testing.assert_allclose(ours.random_walk_pe.numpy(), expected, rtol=1e-6, atol=1e-7)
        index, values, _ = walk_refs.rrwp(m.edge_index, m.num_nodes, m.edge_weight.numpy(), 6)
        assert np.array_equal(ours.rrwp_index.numpy(), index)
        np.testing.assert_allclose(ours.rrwp_val.numpy(), values, rtol=1e-6, atol=1e-7)
    salt = done[list(DRUGS).index("metformin hydrochloride")]
    assert salt.rrwp[9, 1:].abs().sum() == 0  # the chloride ion cannot walk anywhere


def test_drug_molecules_integer_x_and_signnet(molecules):
    with pytest.raises(TypeError, match="x has dtype torch.int64"):
        AddLaplacianPE(4, attr_name=None)(molecules[0].clone())
    batch = Batch.from_data_list([AddLaplacianPE(4, eigenvalue_attr="ev", mask_attr="m")(m.clone())
                                  for m in molecules])
    _, _, mask = laplacian_pe(batch.edge_index, batch.num_nodes, 4, batch=batch.batch, return_eigenvalues=True)
    model = SignNet(4, 8).double()
    out = model(batch.laplacian_eigenvector_pe, batch.ev, mask, batch.batch)
    signs = torch.randint(0, 2, (batch.num_graphs, 4), generator=torch.Generator().manual_seed(0)) * 2 - 1
    flipped = model(batch.laplacian_eigenvector_pe * signs[batch.batch], batch.ev, mask, batch.batch)
    torch.testing.assert_close(flipped, out, rtol=1e-12, atol=1e-12)
    assert out.shape == (batch.num_nodes, 8)
