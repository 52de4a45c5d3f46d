"""Graph encodings for a whole dataset, in shards: :func:`precompute_graphs`, :func:`load_graphs`,
:class:`ShardedGraphDataset`.

Each shard runs :func:`omnipos.graph.precompute` (the graph domain's own batched path) over at most
``shard_size`` graphs and is saved in PyG's ``InMemoryDataset`` format (``torch.save((data.to_dict(), slices,
cls))``, the format of ``InMemoryDataset.save``; ``InMemoryDataset.load`` reads a shard too). The encodings of a
graph depend on that graph only (batched solves are per graph), so the output is the same bit for bit whatever
the engine, the number of workers or the shard size.

torch_geometric (extra ``[graph]``) is imported here only, when a graph job runs or loads.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch

from omnipos.core import check_positive_int

from .engine import make_engine
from .job import PrecomputeResult, Unit, file_units, run_job
from .manifest import sha256_bytes
from .sharded import ShardedDataset
from .shards import ShardWriter

__all__ = ["precompute_graphs", "load_graphs", "ShardedGraphDataset"]

KIND = "graphs"


def _require_pyg() -> None:
    """Raise ImportError naming the extra when torch_geometric is missing."""
    try:
        import torch_geometric.data  # noqa: F401
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError('graph precompute needs torch_geometric: pip install "omnipos[graph]"') from exc


def precompute_graphs(
    graphs: Any,
    out_dir: str | os.PathLike,
    transform: Any,
    *,
    engine: str = "local",
    address: str | None = None,
    num_cpus: int | None = None,
    num_gpus: float = 0,
    shard_size: int = 10_000,
    batch_size: int = 1024,
    resume: bool = True,
    overwrite: bool = False,
    progress: Any = True,
) -> PrecomputeResult:
    """Run a graph transform over a whole dataset, shard by shard, into ``out_dir``.

    Args:
        graphs: a list (any sequence, e.g. a PyG ``InMemoryDataset``) of ``Data``; or a path, or a list of
            paths, of ``torch.save``'d lists of ``Data`` (each file is read by the worker that encodes it, so
            the driver never holds the dataset). In-memory graphs travel to Ray workers through Ray's object
            store; give files for datasets that do not fit in memory.
        out_dir: output folder: shards ``graphs-UUUUU-PPPPP.pt`` and ``manifest.jsonl``. On a cluster, a folder
            every node sees (a shared filesystem).
        transform: an omnipos graph transform (``omnipos.graph.AddLaplacianPE``, ``AddRandomWalkPE``, a PyG
            ``Compose`` of them, or any PyG ``BaseTransform``), applied through :func:`omnipos.graph.precompute`.
        engine, address, num_cpus, num_gpus: where the units run, see :func:`omnipos.scale.make_engine`
            (default: worker processes, one per core); ``num_gpus > 0`` computes on CUDA.
        shard_size: graphs per output shard (and per unit of work for in-memory input); must be >= 1.
        batch_size: graphs per batched solve inside a shard (does not change the output).
        resume: skip the units a previous run of the same job finished (if their input is unchanged: a file's
            size and mtime, a slice's content hash); ``False`` redoes everything. A transform that cannot be
            pickled (a lambda, a closure) cannot be told from a changed one, so it is refused with ``resume=True``.
        overwrite: replace the output of a different job (or an unreadable manifest) found in ``out_dir``
            (otherwise a ValueError). A folder another run holds is refused either way.
        progress: ``True`` (a line on stderr), ``False``, or a ``(done, total)`` callable.

    Returns:
        A :class:`omnipos.scale.PrecomputeResult`; read the output with :func:`load_graphs` or
        :class:`ShardedGraphDataset`.

    Raises:
        ValueError: bad arguments; a transform that cannot be pickled (see ``resume``); ``out_dir`` holding
            another job, or held by another run; :class:`omnipos.scale.PrecomputeError` (a ValueError) after the
            other units finished when some failed (an unreadable input file, a worker that died on every retry).
    """
    engine_ = make_engine(engine, address, num_cpus, num_gpus)
    shard_size = check_positive_int(shard_size, "shard_size")
    batch_size = check_positive_int(batch_size, "batch_size")
    _require_pyg()
    from torch_geometric.transforms import BaseTransform

    if not isinstance(transform, BaseTransform):
        raise TypeError(f"transform must be an omnipos graph transform or a torch_geometric BaseTransform, got "
                        f"{type(transform).__name__}")
    description = _describe(transform)
    _check_fingerprintable(description, bool(resume), engine_.name)
    device = "cuda" if engine_.num_gpus > 0 else "cpu"
    files = _as_paths(graphs)
    if files is not None:
        units, inputs = file_units(files)
        payload = None
    else:
        if not isinstance(graphs, Sequence) and not (hasattr(graphs, "__len__") and hasattr(graphs, "__getitem__")):
            raise TypeError(f"graphs must be a sequence of Data or path(s) to torch.save'd lists, got "
                            f"{type(graphs).__name__}")
        count = len(graphs)
        bounds = [(start, min(start + shard_size, count)) for start in range(0, count, shard_size)]
        # A slice's content hash (of the slice collated) is the unit's identity; the collated slice is also what
        # a worker process gets (pickling 10k PyG Data objects took 1.7 s and unpickling them 2.4 s, longer than
        # their encodings; the collated tensors pickle in 0.03 s and separate again in 0.8 s). It is collated
        # again when its unit is sent rather than kept: the driver holds the dataset once, not twice.
        units = [Unit(i, f"graphs[{a}:{b}]", b - a, {"sha256": _content_hash(_collate(graphs, a, b))})
                 for i, (a, b) in enumerate(bounds)]
        inputs = {"graphs": count}

        def payload(unit: int) -> Any:
            return _collate(graphs, *bounds[unit])

    job = {"kind": KIND, "inputs": inputs, "transform": description, "shard_size": shard_size, "device": device}
    body = partial(_graph_unit, files=None if files is None else [str(p) for p in files], transform=transform,
                   shard_size=shard_size, batch_size=batch_size, device=device)
    return run_job(KIND, out_dir, job, units, body, "pt", engine=engine_, resume=resume, overwrite=overwrite,
                   progress=progress, payload=payload)


def _as_paths(graphs: Any) -> list[Path] | None:
    if isinstance(graphs, (str, os.PathLike)):
        graphs = [graphs]
    elif not isinstance(graphs, (list, tuple)) or not graphs or not all(
            isinstance(g, (str, os.PathLike)) for g in graphs):
        return None
    paths = [Path(p) for p in graphs]
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"graphs: no such file {str(path)!r}")
    return paths


def _describe(transform: Any) -> dict[str, Any]:
    """The transform's identity for the job fingerprint: its repr, and a hash of its pickled state (the repr
    does not show every argument). ``"sha256": None`` when it cannot be pickled (a lambda, a closure): then
    nothing identifies it reliably, and :func:`precompute_graphs` refuses to resume with it."""
    import pickle

    try:
        state = pickle.dumps(transform, protocol=4)
    except Exception as exc:  # noqa: BLE001 - pickle raises PicklingError, AttributeError, TypeError alike
        return {"repr": repr(transform), "sha256": None, "unpicklable": f"{type(exc).__name__}: {exc}"}
    return {"repr": repr(transform), "sha256": sha256_bytes(state)}


def _check_fingerprintable(description: dict[str, Any], resume: bool, engine: str) -> None:
    """Refuse an unpicklable transform where its identity matters: a resume (its repr alone would match a
    changed lambda and keep shards it did not compute) and the local engine's worker processes (which receive
    it pickled)."""
    if description["sha256"] is not None:
        return
    why = (f"transform {description['repr']} cannot be pickled ({description['unpicklable']}); give a picklable "
           "transform (a class defined at module level, not a lambda or a closure)")
    if resume:
        raise ValueError(f"{why}, or pass resume=False: a resumed job could not tell whether it changed since "
                         "the shards in out_dir were computed")
    if engine == "local":
        raise ValueError(f"{why}: engine='local' runs the units in worker processes, which receive the transform "
                         "pickled")


def _collate(graphs: Any, start: int, stop: int) -> tuple[dict[str, Any], dict[str, Any], type]:
    """``graphs[start:stop]`` in PyG's InMemoryDataset storage format ``(data.to_dict(), slices, cls)``."""
    from torch_geometric.data.data import BaseData

    part = [graphs[i] for i in range(start, stop)]
    for i, graph in enumerate(part):
        if not isinstance(graph, BaseData):
            raise TypeError(f"graphs[{start + i}] must be a torch_geometric Data, got {type(graph).__name__}")
    return _collate_list(part, f"graphs[{start}:{stop}]", start)


def _collate_list(part: list[Any], what: str, first: int = 0) -> tuple[dict[str, Any], dict[str, Any], type]:
    """Collate graphs that all have the same attributes (PyG's collate reads the first graph's attributes only
    and would drop any other graph's extra ones without a word)."""
    from torch_geometric.data.collate import collate

    keys = set(part[0].keys())
    for i, graph in enumerate(part):
        if set(graph.keys()) != keys:
            raise ValueError(f"{what} cannot be stored together: graph {first + i} has attributes "
                             f"{sorted(graph.keys())}, graph {first} has {sorted(keys)} (every graph of a shard "
                             "needs the same attributes, as in a PyG InMemoryDataset)")
    try:
        data, slices, _ = collate(part[0].__class__, data_list=part, increment=False, add_batch=False)
    except Exception as exc:  # noqa: BLE001 - PyG's collate raises KeyError/TypeError/RuntimeError alike
        raise ValueError(f"{what} cannot be stored together: {type(exc).__name__}: {exc}") from None
    return data.to_dict(), slices, data.__class__


def _separate(stored: tuple[dict[str, Any], dict[str, Any], type]) -> list[Any]:
    from torch_geometric.data.separate import separate

    as_dict, slices, cls = stored
    data = cls.from_dict(as_dict)
    count = next(iter(slices.values())).numel() - 1 if slices else 0
    return [separate(cls=cls, batch=data, idx=i, slice_dict=slices, decrement=False) for i in range(count)]


def _content_hash(stored: tuple[dict[str, Any], dict[str, Any], type]) -> str:
    """sha256 of a collated slice (class, attribute names, dtypes, shapes, values): a slice's identity in the
    manifest (hashing the collated tensors is 20x faster than graph by graph)."""
    as_dict, slices, cls = stored
    digest = hashlib.sha256(f"{cls.__module__}.{cls.__qualname__}".encode())
    for name, table in (("data", as_dict), ("slices", slices)):
        for key in sorted(table, key=str):
            value = table[key]
            digest.update(f"{name}:{key}".encode())
            if isinstance(value, torch.Tensor):
                value = value.detach().cpu().contiguous()
                digest.update(f"{value.dtype}{tuple(value.shape)}".encode())
                digest.update(value.view(torch.uint8).numpy().tobytes() if value.numel() else b"")
            else:
                digest.update(repr(value).encode())
    return digest.hexdigest()


def _load_graph_file(path: str) -> list[Any]:
    from torch_geometric.data.data import BaseData

    try:
        graphs = torch.load(path, weights_only=False, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - torch raises several types for a damaged file
        raise ValueError(f"{path}: cannot read the graph list (corrupt or truncated torch.save file): "
                         f"{type(exc).__name__}: {exc}") from None
    if not isinstance(graphs, (list, tuple)):
        raise ValueError(f"{path}: expected a torch.save'd list of Data, found a {type(graphs).__name__}")
    for i, graph in enumerate(graphs):
        if not isinstance(graph, BaseData):
            raise ValueError(f"{path}: record {i}: expected a torch_geometric Data, found a {type(graph).__name__}")
    return list(graphs)


def _graph_unit(unit: int, payload: Any, writer: ShardWriter, *, files: list[str] | None, transform: Any,
                shard_size: int, batch_size: int, device: str) -> None:
    """Encode one unit (an in-memory slice, or a whole file in shards of ``shard_size``) and write its shards."""
    if files is None:
        graphs = payload if isinstance(payload, list) else _separate(payload)
        for start in range(0, len(graphs), shard_size):
            writer.write(*_encode_shard(graphs[start:start + shard_size], transform, batch_size, device))
        return
    graphs = _load_graph_file(files[unit])
    for start in range(0, len(graphs), shard_size):
        try:
            writer.write(*_encode_shard(graphs[start:start + shard_size], transform, batch_size, device))
        except ValueError as exc:
            raise ValueError(f"{files[unit]}: records {start}..{min(start + shard_size, len(graphs)) - 1}: "
                             f"{exc}") from None


def _encode_shard(graphs: list[Any], transform: Any, batch_size: int, device: str) -> tuple[bytes, int]:
    from omnipos.graph import precompute

    out = precompute(graphs, transform, batch_size=batch_size, device=None if device == "cpu" else device,
                     progress=False)
    buffer = io.BytesIO()
    torch.save(_collate_list(out, "the encoded graphs of a shard"), buffer)
    return buffer.getvalue(), len(out)


class ShardedGraphDataset(ShardedDataset):
    """A lazy dataset over the shards :func:`precompute_graphs` wrote: ``dataset[i]`` is graph ``i`` (in input
    order), read from its shard on first use; the most recently used shards stay in memory (``cache_bytes``).

    Works with ``torch_geometric.loader.DataLoader`` and ``torch.utils.data.DataLoader`` (each DataLoader
    worker keeps its own cache). Shuffle with ``sampler=dataset.sampler(shuffle=True, seed=...)`` (shards in a
    random order, items mixed within a window of shards: each shard read once per epoch), not ``shuffle=True``:
    a fully random order reads a shard for almost every item once the shards outgrow the cache.

    Args:
        out_dir: the output folder of a finished :func:`precompute_graphs` job.
        transform: applied to each graph as it is read (e.g. ``omnipos.graph.RandomSignFlip()``).
        verify: check each shard's sha256 against the manifest when it is first read.
        cache_bytes, cache_shards: the parsed shards kept in memory: their size (default 256 MiB per process)
            and / or count (see :class:`omnipos.scale.sharded.ShardedDataset`).
    """

    kind = KIND
    what = "graphs"

    def __init__(self, out_dir: str | os.PathLike, transform: Any = None, *, verify: bool = True,
                 cache_shards: int | None = None, cache_bytes: int | None = None) -> None:
        _require_pyg()
        super().__init__(out_dir, verify=verify, cache_shards=cache_shards, cache_bytes=cache_bytes)
        self.transform = transform

    def _parse(self, payload: bytes, index: int) -> tuple[Any, dict[str, Any], type]:
        """Shard ``index`` as PyG's ``(data, slices, cls)``."""
        stored, slices, cls = _torch_load(io.BytesIO(payload), self.out_dir / self.shards[index]["name"])
        return cls.from_dict(stored), slices, cls

    def _item(self, parsed: tuple[Any, dict[str, Any], type], row: int, start: int | None,
              size: int | None) -> Any:
        from torch_geometric.data.separate import separate

        data, slices, cls = parsed
        graph = separate(cls=cls, batch=data, idx=row, slice_dict=slices, decrement=False)
        return graph if self.transform is None else self.transform(graph)


def _torch_load(source: Any, path: Path) -> Any:
    """PyG's safe-globals load (``weights_only=True``); a custom Data class PyG does not allowlist falls back to a
    full unpickle of this checksummed shard."""
    import pickle

    try:
        return torch.load(source, weights_only=True)
    except pickle.UnpicklingError:
        source.seek(0)
        return torch.load(source, weights_only=False)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{path}: unreadable shard: {type(exc).__name__}: {exc}") from None


def load_graphs(out_dir: str | os.PathLike, *, verify: bool = True) -> list[Any]:
    """Every graph :func:`precompute_graphs` wrote to ``out_dir``, as a list in input order (shard by shard;
    the shards' checksums are verified unless ``verify=False``)."""
    dataset = ShardedGraphDataset(out_dir, verify=verify, cache_shards=1)
    return [dataset[i] for i in range(len(dataset))]
