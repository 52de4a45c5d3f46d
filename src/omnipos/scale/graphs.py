"""Graph encodings for a whole dataset, in shards: :func:`precompute_graphs`, :func:`load_graphs`,
:class:`ShardedGraphDataset`.

Each shard runs :func:`omnipos.graph.precompute` (the graph domain's own batched path) over at most
``shard_size`` graphs and is saved in PyG's ``InMemoryDataset`` format (``torch.save((data.to_dict(), slices,
cls))``, the format of ``InMemoryDataset.save``; ``InMemoryDataset.load`` reads a shard too). The encodings of a
graph depend on that graph only (batched solves are per graph), so the output is the same bit for bit whatever
the engine, the number of workers or the shard size.

What a folder holds is untrusted, so nothing read from it is unpickled: shards and input files are read with
``torch.load(weights_only=True)`` and no fallback (a file the safe loader refuses is a ValueError naming it), and a
shard must have the structure omnipos writes (checked before any graph is rebuilt from it). For that, a shard holds
only what the safe loader rebuilds without running code:

- the class ``torch_geometric.data.Data`` (which PyG allowlists), or a subclass of it that torch's safe loader
  allowlists too (``torch.serialization.add_safe_globals``, in every process that writes or reads the shards); any
  other class is refused before anything is written, naming it;
- attributes that are tensors or plain Python values: ``int``, ``float``, ``bool``, ``str``, ``bytes``, ``None``, and
  lists, tuples and ``str``-keyed dicts of them (a sparse tensor is kept as a list element, as PyG's collate does).
  Anything else (a NumPy array, a function, an open file, a set) is refused before ``out_dir`` is created, naming the
  graph and the attribute.

torch_geometric (extra ``[graph]``) is imported here only, when a graph job runs or loads.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import pickle
import stat
from collections.abc import Callable, Sequence
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
            the driver never holds the dataset; with ``torch.load(weights_only=True)``, never unpickled). In-memory
            graphs travel to Ray workers through Ray's object store; give files for datasets that do not fit in
            memory. Each graph must be a ``torch_geometric.data.Data`` whose attributes are tensors or plain
            Python values (see the module docstring), as a shard stores them.
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
        ValueError: bad arguments; a graph of another class, or with an attribute a shard cannot hold without
            pickle (a NumPy array, a function, an open file; named ``graphs[i].attribute``), before ``out_dir`` is
            created; a transform that cannot be pickled (see ``resume``); ``out_dir`` holding another job, or held by
            another run; :class:`omnipos.scale.PrecomputeError` (a ValueError) after the other units finished when
            some failed (an unreadable input file or one the safe loader refuses, a worker that died on every
            retry).
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
    """``graphs[start:stop]`` in PyG's InMemoryDataset storage format ``(data.to_dict(), slices, cls)``; a graph
    that a shard could not hold without pickle (see the module docstring) is a ValueError naming it."""
    from torch_geometric.data.data import BaseData

    part = [graphs[i] for i in range(start, stop)]
    for i, graph in enumerate(part):
        if not isinstance(graph, BaseData):
            raise TypeError(f"graphs[{start + i}] must be a torch_geometric Data, got {type(graph).__name__}")
    return _collate_list(part, f"graphs[{start}:{stop}]", start, lambda i: f"graphs[{i}]")


def _collate_list(part: list[Any], what: str, first: int = 0,
                  name: Callable[[int], str] = lambda i: f"graph {i}") -> tuple[dict[str, Any], dict[str, Any], type]:
    """Collate graphs that all have the same attributes (PyG's collate reads the first graph's attributes only
    and would drop any other graph's extra ones without a word), each of a class and with attributes a shard can
    hold (``name(first + i)`` names graph ``i`` in the errors)."""
    from torch_geometric.data.collate import collate

    keys = set(part[0].keys())
    for i, graph in enumerate(part):
        if set(graph.keys()) != keys:
            raise ValueError(f"{what} cannot be stored together: graph {first + i} has attributes "
                             f"{sorted(graph.keys())}, graph {first} has {sorted(keys)} (every graph of a shard "
                             "needs the same attributes, as in a PyG InMemoryDataset)")
        why = _unstorable_class(type(graph))
        if why is not None:
            raise ValueError(f"{name(first + i)} is {why}")
    try:
        data, slices, _ = collate(part[0].__class__, data_list=part, increment=False, add_batch=False)
    except Exception as exc:  # noqa: BLE001 - PyG's collate raises KeyError/TypeError/RuntimeError alike
        _refuse_unstorable(part, first, name)  # a value no shard could hold is what to report, if there is one
        raise ValueError(f"{what} cannot be stored together: {type(exc).__name__}: {exc}") from None
    stored = data.to_dict()
    if any(_unstorable(value) is not None for value in stored.values()):
        _refuse_unstorable(part, first, name)
        key, (where, why) = next((k, _unstorable(v)) for k, v in stored.items() if _unstorable(v) is not None)
        raise ValueError(f"{what}: the collated attribute {key}{where} is {why}: {STORABLE}")
    return stored, slices, data.__class__


#: What a shard may hold, said in the errors that refuse anything else.
STORABLE = ("a graph shard holds tensors and plain Python values only (int, float, bool, str, bytes, None, and "
            "lists, tuples and str-keyed dicts of them), so that reading it back never unpickles code; convert it "
            "(a NumPy array with torch.from_numpy) or remove the attribute")
_PLAIN = (int, float, bool, str, bytes, type(None))
_MAX_DEPTH = 32


def _qualified(cls: type) -> str:
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


@functools.cache
def _tensor_types() -> tuple[type, ...]:
    """The tensor classes a shard may hold: torch's, and the index tensors PyG allowlists for the safe loader."""
    import torch_geometric

    return (torch.Tensor, *(c for c in (getattr(torch_geometric, "Index", None),
                                        getattr(torch_geometric, "EdgeIndex", None)) if c is not None))


def _unstorable(value: Any, depth: int = 0) -> tuple[str, str] | None:
    """``(where, why)`` when ``value`` is not a tensor or a plain Python value (where: ``"[2]"``, ``"['k']"`` inside
    a container), else None."""
    if type(value) in _PLAIN:
        return None
    if isinstance(value, torch.Tensor):
        if type(value) in _tensor_types():
            return None
        return "", f"a {_qualified(type(value))} (a tensor subclass; store a plain torch.Tensor)"
    if depth >= _MAX_DEPTH:
        return "", f"nested more than {_MAX_DEPTH} containers deep"
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            found = _unstorable(item, depth + 1)
            if found is not None:
                return f"[{i}]{found[0]}", found[1]
        return None
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str:
                return "", f"a dict with the key {key!r} (dict keys must be str)"
            found = _unstorable(item, depth + 1)
            if found is not None:
                return f"[{key!r}]{found[0]}", found[1]
        return None
    return "", f"a {_qualified(type(value))}"


def _refuse_unstorable(part: list[Any], first: int, name: Callable[[int], str]) -> None:
    """Raise a ValueError naming the first graph and attribute a shard could not hold (if any)."""
    for i, graph in enumerate(part):
        for key, value in graph.to_dict().items():
            found = _unstorable(value)
            if found is not None:
                raise ValueError(f"{name(first + i)}.{key}{found[0]} is {found[1]}: {STORABLE}")


def _unstorable_class(cls: type) -> str | None:
    """Why a shard cannot hold graphs of class ``cls`` (None when it can): Data, or a subclass of it that torch's
    safe loader allowlists."""
    from torch_geometric.data import Data

    if cls is Data or (issubclass(cls, Data) and cls in torch.serialization.get_safe_globals()):
        return None
    name = _qualified(cls)
    return (f"a {name}, which torch.load(weights_only=True) does not allowlist: a graph shard holds "
            f"torch_geometric.data.Data (convert each graph with Data(**graph.to_dict())), or a subclass of it "
            f"registered with torch.serialization.add_safe_globals([{cls.__qualname__}]) in the module that "
            "defines it (the worker processes and every reader need it allowlisted too)")


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
    """The ``torch.save``'d list of Data in ``path``, read with ``torch.load(weights_only=True)`` (PyG's storage
    classes allowlisted for this load, nothing else: :func:`_pyg_storage_classes`), each graph one a shard can hold."""
    from torch_geometric.data.data import BaseData

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the graph list: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{path}: not a regular file (a graph list is a torch.save'd file)")
    with torch.serialization.safe_globals(_pyg_storage_classes()):  # for this load only: no process-wide change
        graphs = _safe_load(path, path, "graph list", map_location="cpu")
    if not isinstance(graphs, (list, tuple)):
        raise ValueError(f"{path}: expected a torch.save'd list of Data, found a {type(graphs).__name__}")
    for i, graph in enumerate(graphs):
        if not isinstance(graph, BaseData):
            raise ValueError(f"{path}: record {i}: expected a torch_geometric Data, found a {type(graph).__name__}")
        try:
            attributes = graph.to_dict()
        except Exception as exc:  # noqa: BLE001 - a Data whose state the file set to something else
            raise ValueError(f"{path}: record {i}: a damaged Data ({type(exc).__name__}: {exc})") from None
        for key, value in attributes.items():
            found = _unstorable(value)
            if found is not None:
                raise ValueError(f"{path}: record {i}: attribute {key}{found[0]} is {found[1]}: {STORABLE}")
    return list(graphs)


def _pyg_storage_classes() -> list[type]:
    """The classes a pickled PyG ``Data`` is made of besides ``Data`` itself (which PyG allowlists): its attribute
    store and the two attribute descriptors. Without them a ``torch.save(list_of_Data)`` file cannot be read with
    ``weights_only=True`` (PyG 2.8); they rebuild plain containers and run no code of the file's choosing. Allowlisted
    for the load of an input file only (``torch.serialization.safe_globals``), never process-wide."""
    from torch_geometric.data import data as data_module
    from torch_geometric.data import storage

    classes = [getattr(storage, "GlobalStorage", None), getattr(data_module, "DataTensorAttr", None),
               getattr(data_module, "DataEdgeAttr", None)]
    return [c for c in classes if c is not None]


def _safe_load(source: Any, path: Any, what: str, map_location: Any = None) -> Any:
    """``torch.load(source, weights_only=True)``, never a full unpickle: a file the safe loader refuses (a global
    it does not allowlist: a class, a function) or cannot read is a ValueError naming ``path``."""
    try:
        return torch.load(source, weights_only=True, map_location=map_location)
    except pickle.UnpicklingError as exc:
        raise ValueError(f"{path}: the safe loader (torch.load(weights_only=True)) refuses it: {_refusal(exc)}. "
                         f"omnipos never unpickles what it reads (a pickle can run any code); "
                         f"{_REFUSED_WHY[what]}") from None
    except Exception as exc:  # noqa: BLE001 - torch raises several types for a damaged file
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        raise ValueError(f"{path}: cannot read the {what} (corrupt or truncated torch.save file): "
                         f"{type(exc).__name__}: {first}") from None


_REFUSED_WHY = {
    "graph list": "save the graphs as torch_geometric Data with tensor and plain Python attributes (a NumPy array: "
                  "torch.from_numpy), or allowlist a class you trust with torch.serialization.add_safe_globals in "
                  "the module that defines it",
    "shard": "a shard an older omnipos wrote with a class or attribute the safe loader does not allowlist must be "
             "written again: rerun precompute_graphs(..., resume=False)",
}


def _refusal(exc: BaseException) -> str:
    """The reason in torch's long 'Weights only load failed' message (its 'WeightsUnpickler error' line, or the
    line that is not the advice around it), cut before the advice to allowlist."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    advice = ("Weights only load failed", "(1)", "(2)", "Check the documentation")
    reasons = [line[len("WeightsUnpickler error:"):].strip() for line in lines
               if line.startswith("WeightsUnpickler error:")]
    reasons += [line for line in lines if not line.startswith(advice)]
    reason = reasons[0] if reasons else (lines[0] if lines else type(exc).__name__)
    return reason.split(". Please use", 1)[0].rstrip(".")[:300]


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
    payload = buffer.getvalue()
    # written only if the safe loader reads it back as a shard: what a reader accepts is exactly what is written
    _check_stored(_safe_load(io.BytesIO(payload), "the encoded graphs of a shard", "shard"),
                  "the encoded graphs of a shard", len(out))
    return payload, len(out)


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
        verify: check each shard's sha256 against the manifest when it is first read. Either way a shard is read
            with ``torch.load(weights_only=True)`` (never unpickled) and checked to have the structure omnipos
            writes; a shard that fails is a ValueError naming it.
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

    def _parse(self, payload: bytes, index: int) -> tuple[Any, dict[str, Any], type, Path]:
        """Shard ``index`` as PyG's ``(data, slices, cls)`` (and its path), read with the safe loader and checked
        against the structure omnipos writes (a ValueError naming the shard otherwise)."""
        path = self.out_dir / self.shards[index]["name"]
        stored = _safe_load(io.BytesIO(payload), path, "shard")
        return (*_check_stored(stored, path, int(self.shards[index]["items"])), path)

    def _item(self, parsed: tuple[Any, dict[str, Any], type, Path], row: int, start: int | None,
              size: int | None) -> Any:
        from torch_geometric.data.separate import separate

        data, slices, cls, path = parsed
        try:
            graph = separate(cls=cls, batch=data, idx=row, slice_dict=slices, decrement=False)
        except Exception as exc:  # noqa: BLE001 - a structure the checks let through is still the shard's fault
            raise ValueError(f"{path}: graph {row} of this shard cannot be rebuilt from it ({type(exc).__name__}: "
                             f"{exc}); rerun precompute_graphs(..., resume=False) to write it again") from None
        return graph if self.transform is None else self.transform(graph)


def _check_stored(stored: Any, path: Any, items: int) -> tuple[Any, dict[str, Any], type]:
    """A shard as the safe loader read it, checked to be what omnipos writes: PyG's ``(data dict, slices, cls)``
    with ``cls`` Data (or an allowlisted subclass), attributes a shard can hold, slices that cut every attribute
    into ``items`` graphs (each a 1-D integer tensor from 0, non-decreasing, ending at the attribute's length along
    the dimension PyG concatenates it on). Returns ``(cls.from_dict(data), slices, cls)``; any other structure is a
    ValueError naming ``path``, so that PyG's ``separate`` never meets it."""
    from torch_geometric.data import Data

    def wrong(detail: str) -> ValueError:
        return ValueError(f"{path}: not a graph shard as omnipos writes it ({detail}); rerun precompute_graphs(..., "
                          "resume=False) to write it again")

    if isinstance(stored, list):
        raise ValueError(  # noqa: TRY004 - a file's content, not an argument
            f"{path}: holds a list, not a graph shard of this omnipos (PyG's InMemoryDataset tuple "
                         "(data, slices, class)): written by an older omnipos or by something else; rerun "
                         "precompute_graphs(..., resume=False) (or overwrite=True) to write it again")
    if type(stored) is not tuple or len(stored) != 3:
        length = f" of {len(stored)}" if isinstance(stored, tuple) else ""
        raise wrong(f"expected PyG's InMemoryDataset tuple (data dict, slices dict, class), found a "
                    f"{type(stored).__name__}{length}")
    as_dict, slices, cls = stored
    if not isinstance(cls, type) or not issubclass(cls, Data):
        raise wrong(f"its class is {cls!r}, not torch_geometric Data")
    for name, table in (("data", as_dict), ("slices", slices)):
        if type(table) is not dict or not all(type(key) is str for key in table):
            raise wrong(f"its {name} is not a dict of attribute names")
    for key, value in as_dict.items():
        found = _unstorable(value)
        if found is not None:
            raise wrong(f"attribute {key}{found[0]} is {found[1]}")
    leaves: list[tuple[str, Any]] = []
    _slice_leaves(slices, "", leaves)
    counts = set()
    for where, leaf in leaves:
        if type(leaf) is not torch.Tensor or leaf.dim() != 1 or leaf.numel() < 1 or leaf.is_floating_point() \
                or leaf.is_complex() or leaf.dtype == torch.bool or leaf.layout != torch.strided:
            raise wrong(f"slices{where} is not a 1-D integer tensor")
        if int(leaf[0]) != 0 or bool((leaf.diff() < 0).any()):
            raise wrong(f"slices{where} do not start at 0 and grow")
        counts.add(leaf.numel() - 1)
    num_nodes = as_dict.get("_num_nodes")
    if not counts and type(num_nodes) is list:
        counts.add(len(num_nodes))
    if len(counts) != 1:
        raise wrong("no slices" if not counts else f"its slices give different graph counts {sorted(counts)}")
    count = counts.pop()
    if count != items:
        raise ValueError(f"{path}: holds {count} graphs, the manifest lists {items} (a shard of another job, or "
                         "edited); rerun precompute_graphs(..., resume=False) to write it again")
    if num_nodes is not None and (type(num_nodes) is not list or len(num_nodes) != count or not all(
            n is None or (type(n) is int and n >= 0) for n in num_nodes)):
        raise wrong(f"its node counts are not a list of {count} non-negative ints")
    try:
        data = cls.from_dict(as_dict)
    except Exception as exc:  # noqa: BLE001 - Data(**mapping) refuses some names and values
        raise wrong(f"{cls.__name__}.from_dict fails: {type(exc).__name__}: {exc}") from None
    unsliced = set(as_dict) - set(slices) - {"num_nodes", "_num_nodes"}
    if unsliced:  # PyG's separate would drop them without a word
        raise wrong(f"attributes {sorted(unsliced)} have no slices")
    for key, cut in slices.items():
        if key not in as_dict:
            raise wrong(f"slices name the attribute {key!r}, which it does not hold")
        _check_sliced(key, key, as_dict[key], cut, count, data, wrong)
    return data, slices, cls


def _slice_leaves(cut: Any, where: str, out: list[tuple[str, Any]]) -> None:
    """Every leaf of a nested slices structure (dicts and lists of tensors), with its position."""
    if type(cut) is dict:
        for key, item in cut.items():
            _slice_leaves(item, f"{where}[{key!r}]", out)
    elif type(cut) in (list, tuple):
        for i, item in enumerate(cut):
            _slice_leaves(item, f"{where}[{i}]", out)
    else:
        out.append((where, cut))


def _check_sliced(name: str, key: str, values: Any, cut: Any, count: int, data: Any,
                  wrong: Callable[[str], ValueError]) -> None:
    """``values`` cut by ``cut`` into ``count`` graphs, each case as PyG's ``separate`` reads it."""
    if isinstance(values, torch.Tensor):
        if not isinstance(cut, torch.Tensor):
            raise wrong(f"attribute {name} is a tensor, its slices are not")
        if values.layout != torch.strided or values.dim() == 0:
            raise wrong(f"attribute {name} is a {values.dim()}-d {values.layout} tensor, not one PyG concatenates")
        try:
            cat_dim = data.__cat_dim__(key, values, data._store)
        except Exception as exc:  # noqa: BLE001 - a subclass's __cat_dim__
            raise wrong(f"__cat_dim__ fails for attribute {name}: {type(exc).__name__}: {exc}") from None
        dim = cat_dim or 0
        if type(dim) is not int or not -values.dim() <= dim < values.dim():
            raise wrong(f"attribute {name} is concatenated along {cat_dim!r}, which its tensor has not")
        if int(cut[-1]) != values.size(dim):
            raise wrong(f"the slices of attribute {name} end at {int(cut[-1])}, its tensor has {values.size(dim)} "
                        f"along dimension {dim}")
    elif type(values) is dict:
        if type(cut) is not dict or set(cut) != set(values):
            raise wrong(f"attribute {name} is a dict with keys {sorted(values)}, its slices are not a dict of them")
        for inner, item in values.items():
            _check_sliced(f"{name}[{inner!r}]", inner, item, cut[inner], count, data, wrong)
    elif type(values) in (list, tuple):
        if not values:
            raise wrong(f"attribute {name} is an empty list")
        head = values[0]
        if type(head) in (list, tuple) and len(head) > 0 and isinstance(head[0], torch.Tensor) \
                and isinstance(cut, Sequence):
            if not all(type(item) in (list, tuple) and len(item) == count for item in values):
                raise wrong(f"attribute {name} is a list of lists, not each of {count} entries")
        elif isinstance(head, torch.Tensor) and isinstance(cut, Sequence):
            if type(cut) not in (list, tuple) or len(cut) != len(values):
                raise wrong(f"attribute {name} is a list of {len(values)} tensors, its slices are not a list of "
                            "as many")
            for i, (item, part) in enumerate(zip(values, cut)):
                _check_sliced(f"{name}[{i}]", key, item, part, count, data, wrong)
        elif len(values) != count:
            raise wrong(f"attribute {name} lists {len(values)} values for {count} graphs")
    else:
        raise wrong(f"attribute {name} is a {type(values).__name__}, which PyG cannot cut into graphs")


def load_graphs(out_dir: str | os.PathLike, *, verify: bool = True) -> list[Any]:
    """Every graph :func:`precompute_graphs` wrote to ``out_dir``, as a list in input order (shard by shard;
    the shards' checksums are verified unless ``verify=False``; with or without, nothing is unpickled and a shard
    of another structure than omnipos writes is a ValueError naming it)."""
    dataset = ShardedGraphDataset(out_dir, verify=verify, cache_shards=1)
    return [dataset[i] for i in range(len(dataset))]
