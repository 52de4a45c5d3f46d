"""PyTorch Geometric integration: transforms with PyG's names, shapes and dtypes, batched when given a Batch.

- :class:`AddLaplacianPE`: drop-in for ``torch_geometric.transforms.AddLaplacianEigenvectorPE`` (attribute
  ``laplacian_eigenvector_pe``, ``[N, k]`` float32; ``attr_name=None`` concatenates to ``x``), but batched,
  deterministic by default (``sign="canonical"``; PyG draws a random sign), and no crash when ``k >= N``.
- :class:`AddRandomWalkPE`: drop-in for ``AddRandomWalkPE`` (``random_walk_pe``, ``[N, walk_length]``), with the
  weighted transition ``w_ij / sum_j w_ij`` (PyG uses ``1 / sum_j w_ij``, pyg#10098).
- :class:`RandomSignFlip`: training-time sign augmentation, an independent sign per graph of a Batch.
- :func:`precompute`: a whole dataset through a transform in batches (one batched solve per batch), with tqdm.

Each transform works as ``transform=`` or ``pre_transform=`` of a PyG dataset (one graph at a time) and on a
collated ``Batch`` (all graphs in one call; the Batch's ``batch`` vector says which node is whose).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch_geometric.data import Batch, Data
from torch_geometric.transforms import BaseTransform

from ..core import check_choice, check_positive_int
from .eigenvalues import eigenvalue_encoding
from .laplacian import DENSE_MAX_NODES, _check_normalization, laplacian_pe
from .random_walk import random_walk_pe
from .sign import SIGNS, random_sign_flip

__all__ = ["AddLaplacianPE", "AddRandomWalkPE", "RandomSignFlip", "precompute", "add_node_attr"]


def add_node_attr(data: Data, value: torch.Tensor, attr_name: str | None) -> Data:
    """PyG's rule: ``attr_name=None`` concatenates ``value`` to ``data.x`` (cast to x's dtype; ``x`` becomes
    ``value`` when there is none), otherwise ``data[attr_name] = value``."""
    if attr_name is None:
        if data.x is not None:
            x = data.x.view(-1, 1) if data.x.dim() == 1 else data.x
            data.x = torch.cat([x, value.to(x.device, x.dtype)], dim=-1)
        else:
            data.x = value
    else:
        data[attr_name] = value
    return data


def _graph_arguments(data: Data) -> dict[str, Any]:
    if data.edge_index is None:
        raise ValueError("data has no edge_index")
    batch = getattr(data, "batch", None) if isinstance(data, Batch) else None
    return {"edge_index": data.edge_index, "num_nodes": data.num_nodes, "batch": batch,
            "edge_weight": getattr(data, "edge_weight", None)}


def _collate_structure(graphs: list[Data], device: torch.device | str | None) -> tuple[dict[str, Any], list[int]]:
    """edge_index / edge_weight / batch of a list of graphs (what ``Batch.from_data_list`` would give for them,
    without collating every other attribute), and the node offsets ``ptr``."""
    sizes = [g.num_nodes for g in graphs]
    ptr = [0]
    for n in sizes:
        ptr.append(ptr[-1] + n)
    for i, g in enumerate(graphs):
        if g.edge_index is None:
            raise ValueError(f"graph {i} has no edge_index")
    edge_index = torch.cat([g.edge_index + offset for g, offset in zip(graphs, ptr)], dim=1)
    weights = [getattr(g, "edge_weight", None) for g in graphs]
    if all(w is None for w in weights):
        edge_weight = None
    elif any(w is None for w in weights):
        raise ValueError("some graphs have edge_weight and some do not; give all of them weights or none")
    else:
        edge_weight = torch.cat(weights)
    batch = torch.repeat_interleave(torch.arange(len(graphs)), torch.tensor(sizes))
    target = device if device is not None else edge_index.device
    arguments = {"edge_index": edge_index.to(target), "num_nodes": ptr[-1], "batch": batch.to(target),
                 "edge_weight": None if edge_weight is None else edge_weight.to(target)}
    return arguments, ptr


class _PETransform(BaseTransform):
    """Shared plumbing: ``encode(data) -> {attr: (value, level)}`` computed once, attached by one helper
    (``level`` is ``"node"`` for ``[N, ...]`` values, ``"graph"`` for ``[B, ...]`` ones)."""

    def encode(self, data: Data) -> dict[str | None, tuple[torch.Tensor, str]]:
        return self.encode_structure(**_graph_arguments(data))

    def encode_structure(self, edge_index: torch.Tensor, num_nodes: int, batch: torch.Tensor | None,
                         edge_weight: torch.Tensor | None) -> dict[str | None, tuple[torch.Tensor, str]]:
        raise NotImplementedError

    def forward(self, data: Data) -> Data:
        for name, (value, _) in self.encode(data).items():
            add_node_attr(data, value, name)
        return data


class AddLaplacianPE(_PETransform):
    r"""Adds the Laplacian eigenvector positional encoding from `"Benchmarking Graph Neural Networks"
    <https://arxiv.org/abs/2003.00982>`_ (Dwivedi et al., 2020), batched and deterministic.

    Args:
        k (int): number of non-trivial eigenvectors.
        attr_name (str, optional): attribute to write (``[N, k]`` float32); ``None`` concatenates to ``x``.
            (default: ``"laplacian_eigenvector_pe"``)
        normalization (str, optional): ``"sym"`` (PyG's), ``"rw"`` or ``None``. (default: ``"sym"``)
        drop_trivial (bool): drop the eigenvector of the smallest eigenvalue. (default: ``True``)
        sign (str): ``"canonical"``, ``"random"`` (PyG's behaviour) or ``"none"``. (default: ``"canonical"``)
        per_component (bool): encode each connected component as its own graph. (default: ``False``)
        eigenvalue_attr (str, optional): also store the eigenvalues there, ``[1, k]`` per graph (``[B, k]``
            once collated), or their sinusoidal features ``[1, k, eigenvalue_dim]``. (default: ``None``)
        eigenvalue_dim (int, optional): encode the eigenvalues with :func:`omnipos.core.sinusoidal` into this
            many channels (as SAN / Specformer do) instead of storing them raw. (default: ``None``)
        mask_attr (str, optional): also store the ``[N, k]`` boolean mask of real (not padded) columns.
            (default: ``None``)
        dense_max_nodes (int): graphs with more nodes use the sparse solver. (default: 512)
        generator (torch.Generator, optional): random source for ``sign="random"``.
    """

    def __init__(self, k: int, attr_name: str | None = "laplacian_eigenvector_pe", *,
                 normalization: str | None = "sym", drop_trivial: bool = True, sign: str = "canonical",
                 per_component: bool = False, eigenvalue_attr: str | None = None,
                 eigenvalue_dim: int | None = None, mask_attr: str | None = None,
                 dense_max_nodes: int = DENSE_MAX_NODES, generator: torch.Generator | None = None) -> None:
        self.k = check_positive_int(k, "k")
        self.attr_name = attr_name
        self.normalization = _check_normalization(normalization)
        self.drop_trivial = bool(drop_trivial)
        self.sign = check_choice(sign, "sign", SIGNS)
        self.per_component = bool(per_component)
        if eigenvalue_dim is not None:
            if eigenvalue_attr is None:
                raise ValueError("eigenvalue_dim needs eigenvalue_attr (the attribute to write the features to)")
            eigenvalue_dim = check_positive_int(eigenvalue_dim, "eigenvalue_dim")
        if per_component and (eigenvalue_attr is not None or mask_attr is not None):
            raise ValueError("eigenvalue_attr and mask_attr are per graph; with per_component=True eigenvalues "
                             "and mask are per component: call laplacian_pe(..., per_component=True, "
                             "return_eigenvalues=True)")
        self.eigenvalue_attr = eigenvalue_attr
        self.eigenvalue_dim = eigenvalue_dim
        self.mask_attr = mask_attr
        self.dense_max_nodes = check_positive_int(dense_max_nodes, "dense_max_nodes")
        self.generator = generator

    def encode_structure(self, edge_index: torch.Tensor, num_nodes: int, batch: torch.Tensor | None,
                         edge_weight: torch.Tensor | None) -> dict[str | None, tuple[torch.Tensor, str]]:
        pe, values, mask = laplacian_pe(
            edge_index, num_nodes, self.k, batch=batch, edge_weight=edge_weight,
            normalization=self.normalization, drop_trivial=self.drop_trivial,
            sign=self.sign, return_eigenvalues=True, per_component=self.per_component,
            dense_max_nodes=self.dense_max_nodes, generator=self.generator)
        out: dict[str | None, tuple[torch.Tensor, str]] = {self.attr_name: (pe, "node")}
        if self.eigenvalue_attr is not None:
            if self.eigenvalue_dim is not None:
                values = eigenvalue_encoding(values, self.eigenvalue_dim, mask=mask)
            out[self.eigenvalue_attr] = (values, "graph")
        if self.mask_attr is not None:
            out[self.mask_attr] = (mask[batch] if batch is not None else mask.expand(pe.shape[0], -1), "node")
        return out

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(k={self.k}, attr_name={self.attr_name!r}, "
                f"normalization={self.normalization!r}, sign={self.sign!r}, drop_trivial={self.drop_trivial}, "
                f"per_component={self.per_component})")


class AddRandomWalkPE(_PETransform):
    r"""Adds the random-walk positional encoding from `"Graph Neural Networks with Learnable Structural and
    Positional Representations" <https://arxiv.org/abs/2110.07875>`_ (Dwivedi et al., 2022): the return
    probabilities ``(P^s)_ii``, ``s = 1..walk_length``, with ``P_ij = w_ij / sum_j w_ij``.

    Args:
        walk_length (int or list of int): number of steps, or the list of step counts to use.
        attr_name (str, optional): attribute to write (``[N, len(steps)]`` float32); ``None`` concatenates to
            ``x``. (default: ``"random_walk_pe"``)
        compute_dtype (torch.dtype): precision of the matrix powers, see :func:`omnipos.graph.random_walk_pe`.
            (default: ``torch.float64``)
    """

    def __init__(self, walk_length: int | Sequence[int], attr_name: str | None = "random_walk_pe", *,
                 compute_dtype: torch.dtype = torch.float64) -> None:
        from ._input import check_steps

        self.steps = check_steps(walk_length)
        self.walk_length = walk_length
        self.attr_name = attr_name
        if compute_dtype not in (torch.float32, torch.float64):
            raise ValueError(f"compute_dtype must be torch.float32 or torch.float64, got {compute_dtype!r}")
        self.compute_dtype = compute_dtype

    def encode_structure(self, edge_index: torch.Tensor, num_nodes: int, batch: torch.Tensor | None,
                         edge_weight: torch.Tensor | None) -> dict[str | None, tuple[torch.Tensor, str]]:
        pe = random_walk_pe(edge_index, num_nodes, self.steps, batch=batch, edge_weight=edge_weight,
                            compute_dtype=self.compute_dtype)
        return {self.attr_name: (pe, "node")}

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(walk_length={self.walk_length!r}, attr_name={self.attr_name!r})"


class RandomSignFlip(BaseTransform):
    """Flips the sign of each eigenvector column at random, independently for every graph of a Batch (the
    augmentation of Dwivedi et al. 2020, meant as a training-time ``transform``, or on each collated batch).

    Args:
        attr_name (str): the encoding to flip. (default: ``"laplacian_eigenvector_pe"``)
        generator (torch.Generator, optional): random source.
    """

    def __init__(self, attr_name: str = "laplacian_eigenvector_pe", *,
                 generator: torch.Generator | None = None) -> None:
        self.attr_name = attr_name
        self.generator = generator

    def forward(self, data: Data) -> Data:
        pe = data[self.attr_name]
        batch = getattr(data, "batch", None) if isinstance(data, Batch) else None
        data[self.attr_name] = random_sign_flip(pe, batch, generator=self.generator)
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(attr_name={self.attr_name!r})"


def precompute(dataset: Sequence[Data], transform: BaseTransform, *, batch_size: int = 1024,
               device: torch.device | str | None = None, progress: bool = True) -> list[Data]:
    """Run ``transform`` over a whole dataset, ``batch_size`` graphs per batched solve.

    Args:
        dataset: a PyG dataset or any sequence of ``Data``.
        transform: an omnipos transform (:class:`AddLaplacianPE`, :class:`AddRandomWalkPE`, or a
            ``torch_geometric.transforms.Compose`` of them); any other transform is applied to each collated
            Batch, which is then split back with ``Batch.to_data_list``.
        batch_size: graphs per batch.
        device: where to compute (e.g. ``"cuda"``); results come back to each graph's own device.
        progress: show a tqdm progress bar (needs tqdm: ``pip install 'omnipos[bench]'``).

    Returns:
        A list of new ``Data`` objects (shallow copies carrying the new attributes; ``dataset`` is unchanged),
        ready for ``InMemoryDataset.collate`` or a ``DataLoader``.
    """
    from torch_geometric.transforms import Compose

    batch_size = check_positive_int(batch_size, "batch_size")
    if not isinstance(transform, BaseTransform):
        raise TypeError(f"transform must be a torch_geometric BaseTransform, got {type(transform).__name__}")
    parts = list(transform.transforms) if isinstance(transform, Compose) else [transform]
    ours = all(isinstance(t, _PETransform) for t in parts)
    total = len(dataset)
    bar = None
    if progress:
        try:
            from tqdm.auto import tqdm
        except ImportError as exc:  # pragma: no cover - exercised only without the extra
            raise ImportError("precompute(progress=True) needs tqdm: pip install 'omnipos[bench]' "
                              "(or pass progress=False)") from exc
        bar = tqdm(total=total, desc=f"precompute {type(transform).__name__}", unit="graph")
    out: list[Data] = []
    for start in range(0, total, batch_size):
        graphs = [dataset[i] for i in range(start, min(start + batch_size, total))]
        home = graphs[0].edge_index.device if graphs[0].edge_index is not None else torch.device("cpu")
        if ours:
            # The encodings read only the structure (edge_index, edge_weight, node counts), which none of them
            # changes: collate just that, once, and attach each part's output to shallow copies.
            arguments, ptr = _collate_structure(graphs, device)
            copies = [copy.copy(g) for g in graphs]
            for part in parts:
                for name, (value, level) in part.encode_structure(**arguments).items():
                    value = value.to(home)
                    bounds = ptr if level == "node" else list(range(len(graphs) + 1))
                    for i, g in enumerate(copies):
                        add_node_attr(g, value[bounds[i]:bounds[i + 1]], name)
            out.extend(copies)
        else:
            batch = Batch.from_data_list(graphs)
            if device is not None:
                batch = batch.to(device)
            out.extend(g.to(home) for g in transform(batch).to_data_list())
        if bar is not None:
            bar.update(len(graphs))
    if bar is not None:
        bar.close()
    return out


class AddMagneticLaplacianPE(_PETransform):
    r"""Adds the magnetic Laplacian eigenvector positional encoding for directed graphs from `"Transformers Meet
    Directed Graphs" <https://arxiv.org/abs/2302.00049>`_ (Geisler et al., 2023): ``[Re | Im]`` of the ``k``
    lowest eigenvectors of the Hermitian ``L_q``, phase-canonical, batched (see
    :func:`omnipos.graph.magnetic_laplacian_pe`).

    Args:
        k (int): number of (complex) eigenvectors; the attribute has ``2 k`` columns.
        q (float): the potential in ``[0, 0.5]``. (default: ``0.25``)
        attr_name (str, optional): attribute to write (``[N, 2k]`` float32); ``None`` concatenates to ``x``.
            (default: ``"magnetic_laplacian_pe"``)
        eigenvalue_attr (str, optional): also store the eigenvalues there, ``[1, k]`` per graph. (default: ``None``)
        mask_attr (str, optional): also store the ``[N, k]`` mask of real (not padded) columns. (default: ``None``)
        dense_max_nodes (int): graphs with more nodes use the sparse solver. (default: 512)
        solver (str): the sparse path's solver. (default: ``"auto"``)
    """

    def __init__(self, k: int, q: float = 0.25, attr_name: str | None = "magnetic_laplacian_pe", *,
                 eigenvalue_attr: str | None = None, mask_attr: str | None = None,
                 dense_max_nodes: int = DENSE_MAX_NODES, solver: str = "auto") -> None:
        from .eigensolvers import check_solver
        from .magnetic import check_q

        self.k = check_positive_int(k, "k")
        self.q = check_q(q)
        self.attr_name = attr_name
        self.eigenvalue_attr = eigenvalue_attr
        self.mask_attr = mask_attr
        self.dense_max_nodes = check_positive_int(dense_max_nodes, "dense_max_nodes")
        self.solver = check_solver(solver)

    def encode_structure(self, edge_index: torch.Tensor, num_nodes: int, batch: torch.Tensor | None,
                         edge_weight: torch.Tensor | None) -> dict[str | None, tuple[torch.Tensor, str]]:
        from .magnetic import magnetic_laplacian_pe

        pe, values, mask = magnetic_laplacian_pe(edge_index, num_nodes, self.k, q=self.q, batch=batch,
                                                 edge_weight=edge_weight, return_eigenvalues=True,
                                                 dense_max_nodes=self.dense_max_nodes, solver=self.solver)
        out: dict[str | None, tuple[torch.Tensor, str]] = {self.attr_name: (pe, "node")}
        if self.eigenvalue_attr is not None:
            out[self.eigenvalue_attr] = (values, "graph")
        if self.mask_attr is not None:
            out[self.mask_attr] = (mask[batch] if batch is not None else mask.expand(pe.shape[0], -1), "node")
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(k={self.k}, q={self.q}, attr_name={self.attr_name!r})"
