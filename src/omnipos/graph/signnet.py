"""SignNet (Lim et al., "Sign and Basis Invariant Networks for Spectral Graph Representation Learning", 2022): a
learnable encoder of Laplacian eigenvectors that does not care about their arbitrary signs.

An eigenvector ``v`` and ``-v`` are equally valid, so a model fed raw eigenvectors must learn the same function
for all ``2^k`` sign patterns (hence the random sign flips of Dwivedi et al.). SignNet builds the invariance in:

    ``f(v_1, ..., v_k) = rho([phi(v_i, lambda_i) + phi(-v_i, lambda_i)]_{i=1..k})``

``phi`` sees a whole eigenvector of a graph (each node's entry with the eigenvalue, plus the mean over the graph's
nodes, a DeepSets layer; so it is permutation equivariant), ``phi(v) + phi(-v)`` is unchanged when ``v`` flips,
and ``rho`` (an MLP over the ``k`` sign-invariant features of a node) mixes the columns. The inputs are what
``laplacian_pe(..., return_eigenvalues=True)`` returns: columns a graph does not have (``mask`` False) are ignored,
whatever they hold (zeros, or NaN as in GraphGPS's padding). GraphGPS's ``SignNetPositionalEncoder`` (its MLP
variant) is the same construction without the eigenvalue and the graph mean.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch import nn

from ..core import check_positive_int

__all__ = ["SignNet"]


class SignNet(nn.Module):
    """Sign-invariant encoder of ``k`` eigenvectors per node into ``dim`` channels.

    Args:
        k: eigenvector columns (``laplacian_pe``'s ``k``).
        dim: output channels per node.
        hidden: width of ``phi`` and ``rho``.
        phi_layers: linear layers of ``phi`` (ReLU between them).
        rho_layers: linear layers of ``rho``.
        use_eigenvalues: feed each column's eigenvalue to ``phi`` with the entry.
        graph_context: add the mean of ``phi``'s first layer over the graph's nodes (per column).
        device, dtype: of the parameters; the output has the parameters' dtype (``.half()``, ``.double()``).

    Shape:
        ``forward(pe [N, k], eigenvalues [B, k], mask [B, k] bool = None, batch [N] = None)`` -> ``[N, dim]``.
        ``batch=None`` means one graph (``B = 1``); ``mask=None`` means every column is real.
    """

    def __init__(self, k: int, dim: int, *, hidden: int = 16, phi_layers: int = 2, rho_layers: int = 2,
                 use_eigenvalues: bool = True, graph_context: bool = True, device: Any = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.k = check_positive_int(k, "k")
        self.dim = check_positive_int(dim, "dim")
        self.hidden = check_positive_int(hidden, "hidden")
        phi_layers = check_positive_int(phi_layers, "phi_layers")
        rho_layers = check_positive_int(rho_layers, "rho_layers")
        self.use_eigenvalues = bool(use_eigenvalues)
        self.graph_context = bool(graph_context)
        factory = {"device": device, "dtype": dtype}
        inputs = 2 if self.use_eigenvalues else 1
        self.phi = nn.ModuleList([nn.Linear(inputs if i == 0 else hidden, hidden, **factory)
                                  for i in range(phi_layers)])
        self.context = nn.Linear(hidden, hidden, bias=False, **factory) if self.graph_context else None
        widths = [self.k * hidden] + [hidden] * (rho_layers - 1) + [self.dim]
        self.rho = nn.ModuleList([nn.Linear(a, b, **factory) for a, b in itertools.pairwise(widths)])

    def reset_parameters(self) -> None:
        """Re-draw every weight as ``__init__`` does (``nn.Linear``'s initialisation), e.g. after meta-device
        construction and ``to_empty``."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def _check(self, pe: torch.Tensor, eigenvalues: torch.Tensor, mask: torch.Tensor | None,
               batch: torch.Tensor | None) -> None:
        for name, value in (("pe", pe), ("eigenvalues", eigenvalues)):
            if not isinstance(value, torch.Tensor) or not value.is_floating_point():
                raise TypeError(f"{name} must be a floating tensor, got {getattr(value, 'dtype', type(value))}")
            if value.ndim != 2 or value.shape[1] != self.k:
                raise ValueError(f"{name} must have shape [*, k={self.k}], got {tuple(value.shape)}")
        if mask is not None:
            if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
                raise TypeError(f"mask must be a bool tensor, got {getattr(mask, 'dtype', type(mask))}")
            if mask.shape != eigenvalues.shape:
                raise ValueError(f"mask must have the shape of eigenvalues {tuple(eigenvalues.shape)}, got "
                                 f"{tuple(mask.shape)}")
        if batch is None:
            if eigenvalues.shape[0] != 1:
                raise ValueError(f"without batch, eigenvalues must have one row (one graph), got "
                                 f"{eigenvalues.shape[0]}")
            return
        if not isinstance(batch, torch.Tensor) or batch.dtype in (torch.bool,) or batch.is_floating_point():
            raise TypeError(f"batch must be an integer tensor, got {getattr(batch, 'dtype', type(batch))}")
        if batch.shape != pe.shape[:1]:
            raise ValueError(f"batch must have shape [N] = [{pe.shape[0]}], got {tuple(batch.shape)}")
        if torch.compiler.is_compiling() or not batch.numel() or batch.device.type == "meta":
            return
        low, high = int(batch.min()), int(batch.max())
        if low < 0 or high >= eigenvalues.shape[0]:
            bad = int(((batch < 0) | (batch >= eigenvalues.shape[0])).nonzero()[0])
            raise ValueError(f"batch[{bad}] = {int(batch[bad])} is not a row of eigenvalues (graphs 0.."
                             f"{eigenvalues.shape[0] - 1})")

    def forward(self, pe: torch.Tensor, eigenvalues: torch.Tensor, mask: torch.Tensor | None = None,
                batch: torch.Tensor | None = None) -> torch.Tensor:
        self._check(pe, eigenvalues, mask, batch)
        dtype = self.rho[0].weight.dtype
        nodes, graphs = pe.shape[0], eigenvalues.shape[0]
        if batch is None:
            batch = torch.zeros(nodes, dtype=torch.long, device=pe.device)
        batch = batch.long()
        valid = (mask if mask is not None else torch.ones_like(eigenvalues, dtype=torch.bool))[batch]  # [N, k]
        if not torch.compiler.is_compiling() and pe.device.type != "meta":
            chosen = torch.where(valid, pe, 0.0), torch.where(valid, eigenvalues[batch], 0.0)
            if not bool(torch.isfinite(chosen[0]).all() & torch.isfinite(chosen[1]).all()):
                raise ValueError("pe and eigenvalues must be finite where mask is True")
        vectors = torch.where(valid, pe, 0.0).to(dtype)
        features = [torch.stack([vectors, -vectors])]  # [2, N, k]: phi(v) and phi(-v) in one pass
        if self.use_eigenvalues:
            values = torch.where(valid, eigenvalues[batch], 0.0).to(dtype)
            features.append(values.expand(2, -1, -1))
        h = torch.stack(features, dim=-1)  # [2, N, k, inputs]
        for i, layer in enumerate(self.phi):
            h = layer(h)
            if i == 0 and self.context is not None:
                h = h + self.context(self._graph_mean(h, batch, graphs))
            if i < len(self.phi) - 1:
                h = torch.relu(h)
        h = (h[0] + h[1]) * valid.unsqueeze(-1).to(dtype)  # [N, k, hidden], sign invariant
        h = h.reshape(nodes, self.k * self.hidden)
        for i, layer in enumerate(self.rho):
            h = layer(h)
            if i < len(self.rho) - 1:
                h = torch.relu(h)
        return h

    @staticmethod
    def _graph_mean(h: torch.Tensor, batch: torch.Tensor, graphs: int) -> torch.Tensor:
        """Mean of ``h [2, N, k, H]`` over the nodes of each graph, broadcast back to the nodes."""
        sums = h.new_zeros(h.shape[0], graphs, *h.shape[2:]).index_add_(1, batch, h)
        counts = h.new_zeros(graphs).index_add_(0, batch, h.new_ones(batch.shape[0]))
        return (sums / counts.clamp_min(1.0).view(1, graphs, 1, 1))[:, batch]

    def extra_repr(self) -> str:
        return (f"k={self.k}, dim={self.dim}, hidden={self.hidden}, phi_layers={len(self.phi)}, "
                f"rho_layers={len(self.rho)}, use_eigenvalues={self.use_eigenvalues}, "
                f"graph_context={self.graph_context}")
