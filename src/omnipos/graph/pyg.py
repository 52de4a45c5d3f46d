"""PyTorch Geometric integration: transforms with PyG's names, shapes and dtypes, batched when given a Batch.

- :class:`AddLaplacianPE`: drop-in for ``torch_geometric.transforms.AddLaplacianEigenvectorPE`` (attribute
  ``laplacian_eigenvector_pe``, ``[N, k]`` float32; ``attr_name=None`` concatenates to ``x``), but batched,
  deterministic by default (``sign="canonical"``; PyG draws a random sign), and no crash when ``k >= N``.
- :class:`AddRandomWalkPE`: drop-in for ``AddRandomWalkPE`` (``random_walk_pe``, ``[N, walk_length]``), with the
  weighted transition ``w_ij / sum_j w_ij`` (PyG uses ``1 / sum_j w_ij``, pyg#10098).
- :class:`AddRRWP`: GRIT's relative random-walk probabilities with GRIT's attributes (``rrwp``, ``rrwp_index``,
  ``rrwp_val``).
- :class:`AddMagneticLaplacianPE`: the magnetic Laplacian encoding of directed graphs (``magnetic_laplacian_pe``,
  ``[N, 2k]``: ``[Re | Im]``).
- :class:`RandomSignFlip`: training-time sign augmentation, an independent sign per graph of a Batch.
- :func:`precompute`: a whole dataset through a transform in batches (one batched solve per batch).

Each transform works as ``transform=`` or ``pre_transform=`` of a PyG dataset (one graph at a time) and on a
collated ``Batch`` (all graphs in one call; the Batch's ``batch`` vector says which node is whose). Attributes
added to a Batch are not in its slicing bookkeeping, so ``Batch.to_data_list()`` does not return them (PyG's
behaviour): to encode a dataset once, use :func:`precompute`, which attaches them graph by graph.

Needs torch_geometric (``pip install "omnipos[graph]"``).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from typing import Any

import torch

from ..core import check_choice, check_positive_int, progress_reporter, require

require("torch_geometric", "graph", "the PyG transforms")
from torch_geometric.data import Batch, Data  # noqa: E402 - after the check that names the extra
from torch_geometric.transforms import BaseTransform, Compose  # noqa: E402

from ._input import check_walk_length
from .eigenvalues import eigenvalue_encoding
from .laplacian import DENSE_MAX_NODES, check_normalization, laplacian_pe
from .random_walk import random_walk_pe
from .rrwp import rrwp
from .sign import SIGNS, random_sign_flip

__all__ = ["AddLaplacianPE", "AddMagneticLaplacianPE", "AddRandomWalkPE", "AddRRWP", "RandomSignFlip", "precompute",
           "add_node_attr", "EIGENVALUE_LAYOUTS"]

#: ``"graph"``: eigenvalues ``[1, k]`` per graph (``[B, k]`` once collated), 0 where missing.
#: ``"graphgps"``: GraphGPS's ``EigVals``, ``[N, k, 1]`` per node, NaN where the graph has no such eigenvalue.
EIGENVALUE_LAYOUTS = ("graph", "graphgps")

Encoded = dict[str, tuple[torch.Tensor, str]]


def add_node_attr(data: Data, value: torch.Tensor, attr_name: str | None) -> Data:
    """PyG's rule: ``attr_name=None`` concatenates ``value`` to ``data.x`` (``x`` becomes ``value`` when there is
    none), otherwise ``data[attr_name] = value``. Refuses an integer or boolean ``x`` (OGB molecules): the float
    encoding cast to it would become integers, mostly zeros; name an attribute instead."""
    if attr_name is None:
        if data.x is not None:
            x = data.x.view(-1, 1) if data.x.dim() == 1 else data.x
            if not x.is_floating_point():
                raise TypeError(
                    f"attr_name=None concatenates the encoding to data.x, but x has dtype {x.dtype}: the float "
                    "encoding would be rounded to integers (mostly zeros). Give attr_name='...' to keep it in its "
                    "own attribute, or convert x to a floating dtype first")
            if x.shape[0] != value.shape[0]:
                raise ValueError(f"attr_name=None: data.x has {x.shape[0]} rows but the encoding has "
                                 f"{value.shape[0]} (one per node)")
            data.x = torch.cat([x, value.to(x.device, x.dtype)], dim=-1)
        else:
            data.x = value
    else:
        data[attr_name] = value
    return data


def _graph_arguments(data: Data) -> dict[str, Any]:
    if data.edge_index is None:
        raise ValueError("data has no edge_index")
    is_batch = isinstance(data, Batch)
    return {"edge_index": data.edge_index, "num_nodes": data.num_nodes,
            "batch": getattr(data, "batch", None) if is_batch else None,
            "edge_weight": getattr(data, "edge_weight", None),
            "num_graphs": data.num_graphs if is_batch else 1}


def _collate_structure(graphs: list[Data], device: torch.device | str | None) -> tuple[dict[str, Any], list[int]]:
    """edge_index / edge_weight / batch of a list of graphs (what ``Batch.from_data_list`` would give for them,
    without collating every other attribute), and the node offsets ``ptr``."""
    sizes = []
    for i, g in enumerate(graphs):
        if g.edge_index is None:
            raise ValueError(f"graph {i} has no edge_index")
        sizes.append(int(g.num_nodes))
    ptr = [0]
    for n in sizes:
        ptr.append(ptr[-1] + n)
    edge_index = torch.cat([g.edge_index + offset for g, offset in zip(graphs, ptr)], dim=1)
    weights = [getattr(g, "edge_weight", None) for g in graphs]
    if all(w is None for w in weights):
        edge_weight = None
    elif any(w is None for w in weights):
        missing = next(i for i, w in enumerate(weights) if w is None)
        raise ValueError(f"some graphs have edge_weight and some do not (graph {missing} has none); give all of "
                         "them weights or none")
    else:
        edge_weight = torch.cat(weights)
    batch = torch.repeat_interleave(torch.arange(len(graphs)), torch.tensor(sizes, dtype=torch.long))
    target = device if device is not None else edge_index.device
    arguments = {"edge_index": edge_index.to(target), "num_nodes": ptr[-1], "batch": batch.to(target),
                 "edge_weight": None if edge_weight is None else edge_weight.to(target),
                 "num_graphs": len(graphs)}
    return arguments, ptr


def _pad_graph_rows(value: torch.Tensor, num_graphs: int, fill: float | bool = 0) -> torch.Tensor:
    """Graph-level ``[B', ...]`` -> ``[num_graphs, ...]``: graph ids after the last node (empty graphs at the end
    of a batch) have no row in the encodings' output; they get ``fill``."""
    if value.shape[0] >= num_graphs:
        return value
    pad = value.new_full((num_graphs - value.shape[0], *value.shape[1:]), fill)
    return torch.cat([value, pad])


class _PETransform(BaseTransform):
    """Shared plumbing: ``encode_structure(...) -> {attr: (value, level)}`` computed once, attached by one
    helper. ``level``: ``"node"`` (``[N, ...]``), ``"graph"`` (``[B, ...]``), ``"pair_index"`` (``[2, P]`` node
    pairs, global ids) or ``"pair"`` (``[P, ...]``, one row per pair of the ``"pair_index"`` output)."""

    def encode(self, data: Data) -> Encoded:
        return self.encode_structure(**_graph_arguments(data))

    def encode_structure(self, edge_index: torch.Tensor, num_nodes: int, batch: torch.Tensor | None,
                         edge_weight: torch.Tensor | None, num_graphs: int = 1) -> Encoded:
        raise NotImplementedError

    def forward(self, data: Data) -> Data:
        for name, (value, _) in self.encode(data).items():
            add_node_attr(data, value, None if name.startswith("\0") else name)
        return data


def _x_key(attr_name: str | None, suffix: str) -> str:
    """Key of an output: the attribute name, or (for ``attr_name=None``: concatenate to ``x``) a private key."""
    return attr_name if attr_name is not None else f"\0x{suffix}"


class AddLaplacianPE(_PETransform):
    r"""Adds the Laplacian eigenvector positional encoding from `"Benchmarking Graph Neural Networks"
    <https://arxiv.org/abs/2003.00982>`_ (Dwivedi et al., 2020), batched and deterministic.

    Args:
        k (int): number of non-trivial eigenvectors.
        attr_name (str, optional): attribute to write (``[N, k]`` float32); ``None`` concatenates to ``x`` (a
            floating ``x``; an integer one is refused). (default: ``"laplacian_eigenvector_pe"``)
        normalization (str, optional): ``"sym"`` (PyG's), ``"rw"`` or ``None``. (default: ``"sym"``)
        drop_trivial (bool): drop the eigenvector of the smallest eigenvalue. (default: ``True``)
        sign (str): ``"canonical"``, ``"random"`` (PyG's behaviour) or ``"none"``. (default: ``"canonical"``)
        per_component (bool): encode each connected component as its own graph. (default: ``False``)
        eigenvalue_attr (str, optional): also store the eigenvalues there, laid out as ``eigenvalue_layout``
            says, or their sinusoidal features ``[1, k, eigenvalue_dim]``. (default: ``None``)
        eigenvalue_dim (int, optional): encode the eigenvalues with :func:`omnipos.core.sinusoidal` into this
            many channels (as SAN / Specformer do) instead of storing them raw. (default: ``None``)
        eigenvalue_layout (str): ``"graph"``: ``[1, k]`` per graph (``[B, k]`` once collated), 0 where missing;
            ``"graphgps"``: GraphGPS's ``EigVals`` layout, ``[N, k, 1]`` per node, NaN where the graph has no such
            eigenvalue (for GraphGPS's LapPE encoder use ``attr_name="EigVecs"``, ``eigenvalue_attr="EigVals"``,
            ``drop_trivial=False``: GraphGPS keeps the trivial eigenvector). (default: ``"graph"``)
        mask_attr (str, optional): also store the ``[N, k]`` boolean mask of real (not padded) columns.
            (default: ``None``)
        dense_max_nodes (int): graphs with more nodes use the sparse solver. (default: 512)
        solver (str): the sparse path's solver, see :func:`omnipos.graph.laplacian_pe`. (default: ``"auto"``)
        generator (torch.Generator, optional): random source for ``sign="random"``.
    """

    def __init__(self, k: int, attr_name: str | None = "laplacian_eigenvector_pe", *,
                 normalization: str | None = "sym", drop_trivial: bool = True, sign: str = "canonical",
                 per_component: bool = False, eigenvalue_attr: str | None = None,
                 eigenvalue_dim: int | None = None, eigenvalue_layout: str = "graph", mask_attr: str | None = None,
                 dense_max_nodes: int = DENSE_MAX_NODES, solver: str = "auto",
                 generator: torch.Generator | None = None) -> None:
        from .eigensolvers import check_solver

        self.k = check_positive_int(k, "k")
        self.attr_name = attr_name
        self.normalization = check_normalization(normalization)
        self.drop_trivial = bool(drop_trivial)
        self.sign = check_choice(sign, "sign", SIGNS)
        self.per_component = bool(per_component)
        self.eigenvalue_layout = check_choice(eigenvalue_layout, "eigenvalue_layout", EIGENVALUE_LAYOUTS)
        if eigenvalue_dim is not None:
            if eigenvalue_attr is None:
                raise ValueError("eigenvalue_dim needs eigenvalue_attr (the attribute to write the features to)")
            if eigenvalue_layout != "graph":
                raise ValueError("eigenvalue_dim (sinusoidal features) goes with eigenvalue_layout='graph'; "
                                 "GraphGPS's layout stores the raw eigenvalues")
            eigenvalue_dim = check_positive_int(eigenvalue_dim, "eigenvalue_dim")
        if per_component and (eigenvalue_attr is not None or mask_attr is not None):
            raise ValueError("eigenvalue_attr and mask_attr are per graph; with per_component=True eigenvalues "
                             "and mask are per component: call laplacian_pe(..., per_component=True, "
                             "return_eigenvalues=True)")
        self.eigenvalue_attr = eigenvalue_attr
        self.eigenvalue_dim = eigenvalue_dim
        self.mask_attr = mask_attr
        self.dense_max_nodes = check_positive_int(dense_max_nodes, "dense_max_nodes")
        self.solver = check_solver(solver)
        self.generator = generator

    def encode_structure(self, edge_index: torch.Tensor, num_nodes: int, batch: torch.Tensor | None,
                         edge_weight: torch.Tensor | None, num_graphs: int = 1) -> Encoded:
        if (isinstance(edge_weight, torch.Tensor) and isinstance(edge_index, torch.Tensor) and edge_index.ndim == 2
                and edge_weight.numel() == edge_index.shape[1] and edge_weight.shape[0] == edge_index.shape[1]
                and edge_weight.dtype != torch.bool):
            # zero-weight edges change no Laplacian; dropped here they also cannot join components that
            # per_component=True has split (their weight says they do not connect). NaN and negative weights
            # stay, for laplacian_pe to refuse.
            keep = edge_weight.reshape(-1) != 0
            edge_index, edge_weight = edge_index[:, keep], edge_weight[keep]
        pe, values, mask = laplacian_pe(
            edge_index, num_nodes, self.k, batch=batch, edge_weight=edge_weight,
            normalization=self.normalization, drop_trivial=self.drop_trivial,
            sign=self.sign, return_eigenvalues=True, per_component=self.per_component,
            dense_max_nodes=self.dense_max_nodes, solver=self.solver, generator=self.generator)
        out: Encoded = {_x_key(self.attr_name, "pe"): (pe, "node")}
        if self.per_component:  # (eigenvalue and mask attributes are refused then: their rows are components)
            return out
        values, mask = _pad_graph_rows(values, num_graphs), _pad_graph_rows(mask, num_graphs, False)
        node_mask = mask[batch] if batch is not None else mask.expand(pe.shape[0], -1)
        if self.eigenvalue_attr is not None:
            if self.eigenvalue_layout == "graphgps":
                per_node = values[batch] if batch is not None else values.expand(pe.shape[0], -1)
                out[self.eigenvalue_attr] = (torch.where(node_mask, per_node, torch.nan).unsqueeze(-1), "node")
            elif self.eigenvalue_dim is not None:
                out[self.eigenvalue_attr] = (eigenvalue_encoding(values, self.eigenvalue_dim, mask=mask), "graph")
            else:
                out[self.eigenvalue_attr] = (values, "graph")
        if self.mask_attr is not None:
            out[self.mask_attr] = (node_mask, "node")
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
        probes (int, optional): estimate the long walks of large graphs with this many random probes instead of
            computing them exactly (an unbiased estimate with a known standard error, see
            :func:`omnipos.graph.random_walk_pe`). (default: ``None``: exact)
        generator (torch.Generator, optional): random source of the probes.
    """

    def __init__(self, walk_length: int | Sequence[int], attr_name: str | None = "random_walk_pe", *,
                 compute_dtype: torch.dtype = torch.float64, probes: int | None = None,
                 generator: torch.Generator | None = None) -> None:
        self.steps = check_walk_length(walk_length)
        self.probes = None if probes is None else check_positive_int(probes, "probes", minimum=2)
        self.generator = generator
        self.walk_length = walk_length
        self.attr_name = attr_name
        if compute_dtype not in (torch.float32, torch.float64):
            raise ValueError(f"compute_dtype must be torch.float32 or torch.float64, got {compute_dtype!r}")
        self.compute_dtype = compute_dtype

    def encode_structure(self, edge_index: torch.Tensor, num_nodes: int, batch: torch.Tensor | None,
                         edge_weight: torch.Tensor | None, num_graphs: int = 1) -> Encoded:
        pe = random_walk_pe(edge_index, num_nodes, self.steps, batch=batch, edge_weight=edge_weight,
                            compute_dtype=self.compute_dtype, probes=self.probes, generator=self.generator)
        return {_x_key(self.attr_name, "rw"): (pe, "node")}

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(walk_length={self.walk_length!r}, attr_name={self.attr_name!r})"


class AddRRWP(_PETransform):
    r"""Adds the relative random-walk probabilities of `"Graph Inductive Biases in Transformers without Message
    Passing" <https://arxiv.org/abs/2305.17589>`_ (GRIT, Ma et al., 2023) in GRIT's layout: the node feature
    ``rrwp`` ``[N, K]`` and the pair features ``rrwp_index`` ``[2, P]`` / ``rrwp_val`` ``[P, K]`` (float32), see
    :func:`omnipos.graph.rrwp`. ``rrwp_index`` holds node ids, so PyG offsets it when collating (its name
    contains ``"index"``), as it does ``edge_index``. GRIT also stores ``log_deg``; its layers compute it from
    ``edge_index`` when it is missing.

    Args:
        walk_length (int): ``K``, powers ``0..K-1`` of ``D^-1 A``. (default: ``8``)
        attr_name (str, optional): node attribute (``None`` concatenates to a floating ``x``, as GRIT's
            ``attr_name_abs=None``). (default: ``"rrwp"``)
        pair_attr_name (str or (str, str)): a prefix ``p`` for ``p_index`` / ``p_val`` (GRIT's
            ``attr_name_rel``), or the two names; the index name must contain ``"index"``. (default: ``"rrwp"``)
    """

    def __init__(self, walk_length: int = 8, attr_name: str | None = "rrwp",
                 pair_attr_name: str | tuple[str, str] = "rrwp") -> None:
        self.walk_length = check_positive_int(walk_length, "walk_length")
        self.attr_name = attr_name
        if isinstance(pair_attr_name, str):
            names = (f"{pair_attr_name}_index", f"{pair_attr_name}_val")
        elif (isinstance(pair_attr_name, (tuple, list)) and len(pair_attr_name) == 2
              and all(isinstance(name, str) for name in pair_attr_name)):
            names = tuple(pair_attr_name)
        else:
            raise TypeError(f"pair_attr_name must be a str prefix or a pair of names, got {pair_attr_name!r}")
        if "index" not in names[0]:
            raise ValueError(f"pair_attr_name: the pair index attribute {names[0]!r} must contain 'index', or PyG "
                             "would not offset its node ids when collating graphs into a batch")
        self.pair_names = names

    def encode_structure(self, edge_index: torch.Tensor, num_nodes: int, batch: torch.Tensor | None,
                         edge_weight: torch.Tensor | None, num_graphs: int = 1) -> Encoded:
        pair_index, pair_pe, node_pe = rrwp(edge_index, num_nodes, self.walk_length, batch=batch,
                                            edge_weight=edge_weight)
        return {_x_key(self.attr_name, "rrwp"): (node_pe, "node"), self.pair_names[0]: (pair_index, "pair_index"),
                self.pair_names[1]: (pair_pe, "pair")}

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(walk_length={self.walk_length}, attr_name={self.attr_name!r}, "
                f"pair_attr_name={self.pair_names!r})")


class RandomSignFlip(BaseTransform):
    """Flips the sign of each eigenvector column at random, independently for every graph of a Batch (the
    augmentation of Dwivedi et al. 2020, meant as a training-time ``transform``, or on each collated batch).

    Args:
        attr_name (str): the encoding to flip. (default: ``"laplacian_eigenvector_pe"``)
        generator (torch.Generator, optional): random source.
    """

    def __init__(self, attr_name: str = "laplacian_eigenvector_pe", *,
                 generator: torch.Generator | None = None) -> None:
        if not isinstance(attr_name, str):
            raise TypeError(f"attr_name must be a str, got {type(attr_name).__name__}")
        self.attr_name = attr_name
        self.generator = generator

    def forward(self, data: Data) -> Data:
        if self.attr_name not in data:
            raise ValueError(f"RandomSignFlip: data has no attribute {self.attr_name!r} (it has "
                             f"{sorted(data.keys())}); add the encoding first, e.g. with AddLaplacianPE")
        pe = data[self.attr_name]
        batch = getattr(data, "batch", None) if isinstance(data, Batch) else None
        if batch is not None:
            batch = torch.unique(batch, return_inverse=True)[1]  # graph ids as 0..B-1, whatever they were
        data[self.attr_name] = random_sign_flip(pe, batch, generator=self.generator)
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(attr_name={self.attr_name!r})"


def _flatten(transform: Any) -> list[Any]:
    if isinstance(transform, Compose):
        return [part for inner in transform.transforms for part in _flatten(inner)]
    return [transform]


def _attach(copies: list[Data], encoded: Encoded, ptr: list[int], batch: torch.Tensor,
            home: torch.device) -> None:
    """Split batched outputs graph by graph (pair indices back to each graph's own node numbering)."""
    sizes = [b - a for a, b in itertools.pairwise(ptr)]
    pair_sizes, pair_graph = None, None
    for value, level in encoded.values():
        if level == "pair_index":
            pair_graph = batch[value[0]]
            pair_sizes = torch.bincount(pair_graph, minlength=len(copies)).tolist()
    offsets = torch.tensor(ptr[:-1], device=batch.device)
    for name, (value, level) in encoded.items():
        if level == "node":
            pieces = value.to(home).split(sizes)
        elif level == "graph":
            pieces = value.to(home).split(1)
        elif level == "pair":
            pieces = value.to(home).split(pair_sizes)
        else:
            pieces = (value - offsets[pair_graph]).to(home).split(pair_sizes, dim=1)
        target = None if name.startswith("\0") else name
        for g, piece in zip(copies, pieces):
            add_node_attr(g, piece, target)


def precompute(dataset: Sequence[Data], transform: Any, *, batch_size: int = 1024,
               device: torch.device | str | None = None, progress: Any = True) -> list[Data]:
    """Run ``transform`` over a whole dataset, ``batch_size`` graphs per batched solve.

    Args:
        dataset: a PyG dataset or any sequence of ``Data``.
        transform: an omnipos transform (:class:`AddLaplacianPE`, :class:`AddRandomWalkPE`, :class:`AddRRWP`) or
            a ``torch_geometric.transforms.Compose`` that mixes them with any other transforms. Consecutive
            omnipos encodings run batched (one solve per batch); any other transform runs graph by graph, in
            the chain's order, so nothing is lost (a transform applied to a collated Batch and split back with
            ``to_data_list`` would drop what it added).
        batch_size: graphs per batch.
        device: where to compute the omnipos encodings (e.g. ``"cuda"``); results come back to each graph's
            own device.
        progress: ``True`` (a line on stderr, the default), a callable ``(done_graphs, total)`` (the CLI passes a
            tqdm bar), or ``False`` for silence.

    Returns:
        A list of new ``Data`` objects (shallow copies carrying the new attributes; ``dataset`` is unchanged),
        ready for ``InMemoryDataset.collate`` or a ``DataLoader``. Every graph keeps one row of each per-graph
        attribute, empty graphs included.
    """
    batch_size = check_positive_int(batch_size, "batch_size")
    if not isinstance(transform, BaseTransform):
        raise TypeError(f"transform must be a torch_geometric BaseTransform, got {type(transform).__name__}")
    parts = _flatten(transform)
    runs: list[list[Any]] = []
    for part in parts:
        if isinstance(part, _PETransform) and runs and isinstance(runs[-1][0], _PETransform):
            runs[-1].append(part)
        else:
            runs.append([part])
    total = len(dataset)
    out: list[Data] = []
    with progress_reporter(progress, total=total, desc=f"precompute {type(transform).__name__}") as report:
        for start in range(0, total, batch_size):
            copies = [copy.copy(dataset[i]) for i in range(start, min(start + batch_size, total))]
            for run in runs:
                if not isinstance(run[0], _PETransform):
                    for i, g in enumerate(copies):
                        result = run[0](g)
                        if not isinstance(result, Data):
                            raise TypeError(f"precompute: {run[0]!r} returned {type(result).__name__} for graph "
                                            f"{start + i}, not a Data")
                        copies[i] = result
                    continue
                home = copies[0].edge_index.device if copies[0].edge_index is not None else torch.device("cpu")
                arguments, ptr = _collate_structure(copies, device)
                for part in run:
                    _attach(copies, part.encode_structure(**arguments), ptr, arguments["batch"], home)
            out.extend(copies)
            report.update(len(copies))
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
                         edge_weight: torch.Tensor | None, num_graphs: int = 1) -> Encoded:
        from .magnetic import magnetic_laplacian_pe

        pe, values, mask = magnetic_laplacian_pe(edge_index, num_nodes, self.k, q=self.q, batch=batch,
                                                 edge_weight=edge_weight, return_eigenvalues=True,
                                                 dense_max_nodes=self.dense_max_nodes, solver=self.solver)
        out: Encoded = {_x_key(self.attr_name, "magnetic"): (pe, "node")}
        values, mask = _pad_graph_rows(values, num_graphs), _pad_graph_rows(mask, num_graphs, False)
        if self.eigenvalue_attr is not None:
            out[self.eigenvalue_attr] = (values, "graph")
        if self.mask_attr is not None:
            out[self.mask_attr] = (mask[batch] if batch is not None else mask.expand(pe.shape[0], -1), "node")
        return out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(k={self.k}, q={self.q}, attr_name={self.attr_name!r})"
