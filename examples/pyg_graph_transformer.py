"""A tiny GraphGPS-style transformer trained for a few steps with omnipos's Laplacian PE, read by SignNet.

The task is a classic one that message passing alone cannot solve: one cycle of 2m nodes or two cycles of m
nodes? Every node has degree 2 in both, so a GNN (1-WL) sees the same thing; the Laplacian eigenvectors differ
(two components give a second zero eigenvalue, whose eigenvector is constant on each cycle). An eigenvector's sign
is arbitrary: SignNet encodes the eigenvectors (with their eigenvalues) as phi(v) + phi(-v), so the model cannot
depend on it (the alternative is RandomSignFlip at every step, and hoping the model learns the invariance).

    python examples/pyg_graph_transformer.py
"""

import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GINConv, GPSConv, global_mean_pool

from omnipos.graph import AddLaplacianPE, SignNet, precompute

K = 4  # eigenvectors per node


def cycle_edges(n: int, offset: int = 0) -> torch.Tensor:
    src = torch.arange(n)
    e = torch.stack([src, (src + 1) % n]) + offset
    return torch.cat([e, e.flip(0)], dim=1)


def dataset() -> list[Data]:
    graphs = []
    for m in range(4, 11):
        for _ in range(6):
            one = Data(edge_index=cycle_edges(2 * m), num_nodes=2 * m, y=torch.tensor([0]))
            two = Data(edge_index=torch.cat([cycle_edges(m), cycle_edges(m, m)], 1), num_nodes=2 * m,
                       y=torch.tensor([1]))
            graphs += [one, two]
    return graphs


class TinyGPS(nn.Module):
    """GPS layers (local GIN message passing + global attention) over [constant feature | SignNet(LapPE)]."""

    def __init__(self, channels: int = 16, layers: int = 2) -> None:
        super().__init__()
        self.signnet = SignNet(K, 8, hidden=8)
        self.embed = nn.Linear(1 + 8, channels)
        self.layers = nn.ModuleList(
            GPSConv(channels, GINConv(nn.Sequential(nn.Linear(channels, channels), nn.ReLU(),
                                                    nn.Linear(channels, channels))), heads=2)
            for _ in range(layers))
        self.head = nn.Linear(channels, 2)

    def forward(self, batch) -> torch.Tensor:
        pe = self.signnet(batch.laplacian_eigenvector_pe, batch.eigenvalues, batch=batch.batch)
        x = torch.cat([torch.ones(batch.num_nodes, 1), pe], dim=-1)
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h, batch.edge_index, batch.batch)
        return self.head(global_mean_pool(h, batch.batch))


def main() -> None:
    torch.manual_seed(0)
    # Encode the whole dataset once, batched (the transform works as pre_transform= of a PyG dataset too).
    graphs = precompute(dataset(), AddLaplacianPE(K, eigenvalue_attr="eigenvalues"), batch_size=64,
                        progress=False)
    print(f"{len(graphs)} graphs, laplacian_eigenvector_pe {tuple(graphs[0].laplacian_eigenvector_pe.shape)}, "
          f"eigenvalues {tuple(graphs[0].eigenvalues.shape)}")
    loader = DataLoader(graphs, batch_size=32, shuffle=True)
    model = TinyGPS()
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(6):
        correct = total = 0
        for batch in loader:
            logits = model(batch)
            loss = nn.functional.cross_entropy(logits, batch.y)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            correct += int((logits.argmax(-1) == batch.y).sum())
            total += batch.num_graphs
        if epoch % 2 == 1:
            print(f"epoch {epoch + 1:2d}: loss {loss.item():.3f}, train accuracy {correct / total:.2f}")


if __name__ == "__main__":
    main()
