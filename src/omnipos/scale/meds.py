"""A MEDS cohort to per-subject timelines, in shards: :func:`precompute_meds`, :func:`load_meds`.

MEDS data shards (``<root>/data/**/*.parquet``, columns ``subject_id, time, code, numeric_value``) are
partitioned by subject, so each file is an independent unit of work. A worker reads one file and runs
:meth:`omnipos.timeseries.EventBatch.from_frame` over its subjects, ``shard_size`` subjects per output shard
(``meds-UUUUU-PPPPP.parquet``: one row per subject, or per window with ``truncation="split"``: ``subject_id``,
``window``, ``length``, ``clock`` (float64, the clock time of the row's origin, so periodic features see clock
time), the lists ``times`` (float64 offsets in the job's ``unit``), ``codes`` (int64 indices into the shard's
vocabulary, stored in the file's metadata) and ``values`` (float32, NaN where none), and ``static_codes`` /
``static_values`` (the subject's events without a time, with ``static="keep"``)). Padding is never stored; to
bound memory, a shard's subjects are padded in groups of at most ``MAX_PADDED_EVENTS`` slots.

:func:`load_meds` merges the shards into one :class:`omnipos.timeseries.EventBatch`, equal to
``EventBatch.from_parquet(<root>/data)``: subjects sorted, codes indexed in the sorted vocabulary of every code.
"""

from __future__ import annotations

import inspect
import json
import os
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from omnipos.core import check_choice, check_positive_int, lengths_to_mask
from omnipos.timeseries import PAD_CODE, UNITS, UNK_CODE, EventBatch

from .engine import make_engine
from .job import PrecomputeResult, file_units, run_job
from .manifest import Manifest, read_verified
from .parquet import (
    column,
    empty_frame,
    flat_list,
    list_column,
    read_frame,
    read_parquet,
    require_pyarrow,
    to_parquet,
)
from .shards import ShardWriter

__all__ = ["precompute_meds", "load_meds", "meds_data_files", "check_event_options", "MAX_PADDED_EVENTS",
           "MEDS_COLUMNS"]

KIND = "meds"
MEDS_COLUMNS = ("subject_id", "time", "code", "numeric_value")
#: At most this many padded slots (subjects x longest timeline) per ``EventBatch.from_frame`` call in a worker.
MAX_PADDED_EVENTS = 1 << 24


def meds_data_files(meds_dir: str | os.PathLike) -> list[Path]:
    """The data shards of a MEDS root, ``<meds_dir>/data/**/*.parquet``, in path order."""
    root = Path(meds_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"meds_dir: no such folder {str(root)!r}")
    data = root / "data"
    if not data.is_dir():
        raise ValueError(f"meds_dir: {str(root)!r} is not a MEDS root (no data/ folder); pass the folder that "
                         "holds data/ and metadata/")
    files = sorted(data.rglob("*.parquet"), key=lambda p: p.relative_to(data).parts)
    if not files:
        raise ValueError(f"meds_dir: no Parquet files under {data}")
    return files


def precompute_meds(
    meds_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    engine: str = "local",
    address: str | None = None,
    num_cpus: int | None = None,
    shard_size: int = 10_000,
    resume: bool = True,
    overwrite: bool = False,
    progress: Any = True,
    **event_options: Any,
) -> PrecomputeResult:
    """Turn a MEDS cohort's data shards into per-subject timelines in ``out_dir``.

    Args:
        meds_dir: the MEDS root (the folder holding ``data/``); every ``data/**/*.parquet`` is one unit.
        out_dir: output folder (``meds-*.parquet`` and ``manifest.jsonl``); on a cluster, a shared folder.
        engine, address, num_cpus: where the files run, see :func:`omnipos.scale.make_engine`.
        shard_size: subjects per output shard (>= 1).
        resume, overwrite, progress: as in :func:`omnipos.scale.precompute_graphs`.
        **event_options: passed to :meth:`omnipos.timeseries.EventBatch.from_frame`, with the defaults of
            :meth:`~omnipos.timeseries.EventBatch.from_parquet` on a MEDS root: ``unit`` (hours), ``origin``,
            ``static`` (``"keep"``: MEDS static events, which have no time, become each subject's static codes),
            ``drop_missing``, ``vocab``, ``unknown_code``, ``max_len``, ``truncation``, ...

    Returns:
        A :class:`omnipos.scale.PrecomputeResult` (items are subjects).

    Raises:
        ValueError: no MEDS data, bad options, ``out_dir`` holding another job;
            :class:`omnipos.scale.PrecomputeError` after the other files finished when some were unreadable or
            held bad rows (the message names the file and the row).
    """
    engine_ = make_engine(engine, address, num_cpus)
    shard_size = check_positive_int(shard_size, "shard_size")
    accepted = [name for name, p in inspect.signature(EventBatch.from_frame).parameters.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY]
    for name in event_options:
        if name not in accepted:
            raise TypeError(f"precompute_meds got an unknown option {name!r}; EventBatch.from_frame takes "
                            f"{', '.join(accepted)}")
    event_options.setdefault("static", "keep")  # a MEDS root's static events, as from_parquet reads them
    if "unit" in event_options:
        check_choice(event_options["unit"], "unit", UNITS)
    if isinstance(event_options.get("vocab"), (list, tuple)):
        event_options["vocab"] = [str(code) for code in event_options["vocab"]]
    require_pyarrow()
    files = meds_data_files(meds_dir)
    check_event_options(files[0], event_options)  # before out_dir is touched: a refused job leaves it as it was
    units, inputs = file_units(files)
    options = {k: event_options[k] for k in sorted(event_options)}
    job = {"kind": KIND, "inputs": inputs, "shard_size": shard_size, "options": options}
    body = partial(_meds_unit, files=[str(p) for p in files], shard_size=shard_size, options=event_options)
    meta = {"options": json.loads(json.dumps(options, default=str))}
    return run_job(KIND, out_dir, job, units, body, "parquet", engine=engine_, resume=resume,
                   overwrite=overwrite, progress=progress, meta=meta)


def check_event_options(path: Path, options: dict[str, Any]) -> None:
    """Run :meth:`EventBatch.from_frame` with ``options`` over no rows of ``path``'s columns (its Parquet schema,
    read without its data), so that an option it refuses (``origin``, ``unit``, ``vocab``, ``unknown_code``,
    ``max_len``, ``truncation``, ...) is refused here, by name, before any unit runs."""
    import pandas as pd

    try:
        empty = empty_frame(path, list(MEDS_COLUMNS))
    except Exception:  # noqa: BLE001 - an unreadable file fails as its unit, naming itself; check on MEDS types
        empty = pd.DataFrame({"subject_id": pd.Series([], dtype="int64"),
                              "time": pd.Series([], dtype="datetime64[us]"), "code": pd.Series([], dtype=object),
                              "numeric_value": pd.Series([], dtype="float32")})
    EventBatch.from_frame(empty, *MEDS_COLUMNS, **options)


def _padded_groups(counts: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Consecutive ranges of subjects whose padded size (subjects x longest) stays within ``budget`` (a subject
    longer than the budget gets a range of its own)."""
    if counts.size == 0:
        return []
    if int(counts.max()) * counts.size <= budget:
        return [(0, counts.size)]
    groups, start, longest = [], 0, 0
    for i, count in enumerate(counts.tolist()):
        longest_with = max(longest, count)
        if i > start and longest_with * (i - start + 1) > budget:
            groups.append((start, i))
            start, longest_with = i, count
        longest = longest_with
    groups.append((start, counts.size))
    return groups


def merge_vocabularies(vocabs: list[list[str]]) -> tuple[list[str], list[np.ndarray]]:
    """One vocabulary for several EventBatch vocabularies: the common one when they are all equal (a caller's
    ``vocab=``), else the special codes they start with (``"<pad>"``, and ``"<unk>"`` with ``unknown_code="unk"``)
    then the sorted union of the codes (what ``EventBatch.from_frame`` builds over all rows). Also, for each
    input, the map old index -> new index."""
    if all(v == vocabs[0] for v in vocabs[1:]):
        return list(vocabs[0]), [np.arange(len(v)) for v in vocabs]
    special = [PAD_CODE] + ([UNK_CODE] if len(vocabs[0]) > 1 and vocabs[0][1] == UNK_CODE else [])
    n = len(special)
    codes = np.array(sorted(set().union(*(v[n:] for v in vocabs))), dtype=object)
    merged = special + codes.tolist()
    maps = [np.concatenate([np.arange(n), np.searchsorted(codes, np.array(v[n:], dtype=object)) + n]).astype(np.int64)
            for v in vocabs]
    return merged, maps


def _read_events(path: str) -> Any:
    try:
        return read_frame(path, list(MEDS_COLUMNS))
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError / KeyError alike
        raise ValueError(f"{path}: cannot read the MEDS columns {', '.join(MEDS_COLUMNS)} (corrupt, truncated or "
                         f"not MEDS): {type(exc).__name__}: {exc}") from None


def _meds_unit(unit: int, payload: None, writer: ShardWriter, *, files: list[str], shard_size: int,
               options: dict[str, Any]) -> None:
    """Read one MEDS data file and write its subjects' timelines, ``shard_size`` subjects per shard."""
    import pandas as pd

    path = files[unit]
    frame = _read_events(path)
    subject_ix, subjects = pd.factorize(frame["subject_id"], sort=True)
    missing = int((subject_ix < 0).sum())
    order = np.argsort(subject_ix, kind="stable")  # rows without a subject first, then subject by subject
    if missing and not options.get("drop_missing", False):
        _from_frame(path, frame.iloc[np.sort(order[:missing])], options)  # raises, naming the row
    counts = np.bincount(subject_ix[subject_ix >= 0], minlength=len(subjects))
    starts = missing + np.concatenate([[0], np.cumsum(counts)])
    for first in range(0, len(subjects), shard_size):
        last = min(first + shard_size, len(subjects))
        batches = [_from_frame(path, frame.iloc[np.sort(order[starts[first + a]:starts[first + b]])], options)
                   for a, b in _padded_groups(counts[first:last], MAX_PADDED_EVENTS)]
        writer.write(_shard_parquet(batches), last - first)


def _from_frame(path: str, frame: Any, options: dict[str, Any]) -> EventBatch:
    try:
        return EventBatch.from_frame(frame, *MEDS_COLUMNS, **options)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def _shard_parquet(batches: list[EventBatch]) -> bytes:
    vocab, maps = merge_vocabularies([b.vocab for b in batches])
    lengths = torch.cat([b.lengths for b in batches]).numpy().astype(np.int64)
    times = np.concatenate([b.times[b.mask].numpy() for b in batches])
    codes = np.concatenate([m[b.codes[b.mask].numpy()] for b, m in zip(batches, maps)]).astype(np.int64)
    values = np.concatenate([b.values[b.mask].numpy() for b in batches])
    static_lengths = torch.cat([b.static_mask.sum(1) for b in batches]).numpy().astype(np.int64)
    static_codes = np.concatenate([m[b.static_codes[b.static_mask].numpy()] for b, m in zip(batches, maps)])
    static_values = np.concatenate([b.static_values[b.static_mask].numpy() for b in batches])
    first = batches[0]
    clock = (torch.cat([b.clock for b in batches]).numpy() if all(b.clock is not None for b in batches)
             else np.full(lengths.size, np.nan))
    return to_parquet({"subject_id": column([s for b in batches for s in b.subjects]),
                       "window": column(torch.cat([b.window for b in batches]).numpy(), "int64"),
                       "length": column(lengths, "int64"), "clock": column(clock, "float64"),
                       "times": list_column(times, lengths, "float64"),
                       "codes": list_column(codes, lengths, "int64"),
                       "values": list_column(values, lengths, "float32"),
                       "static_codes": list_column(static_codes.astype(np.int64), static_lengths, "int64"),
                       "static_values": list_column(static_values, static_lengths, "float32")},
                      {"omnipos.vocab": json.dumps(vocab), "omnipos.unit": first.unit,
                       "omnipos.origin": str(first.origin)})


def load_meds(out_dir: str | os.PathLike, *, verify: bool = True) -> EventBatch:
    """Every subject :func:`precompute_meds` wrote to ``out_dir``, as one padded
    :class:`omnipos.timeseries.EventBatch` (subjects sorted; codes indexed in the merged vocabulary): the batch
    ``EventBatch.from_parquet(<root>/data, **options)`` builds in one process.

    Raises:
        ValueError: a subject found in two data files (MEDS shards must partition the subjects).
    """
    manifest = Manifest.read(out_dir, KIND)
    tables, vocabs, names = [], [], []  # each table: one row per subject (per window when split)
    for shard in manifest.shards():
        table, metadata = read_parquet(read_verified(manifest.out_dir, shard, verify))
        tables.append(table)
        vocabs.append(json.loads(metadata["omnipos.vocab"]))
        names.append(shard["name"])
    options = manifest.meta.get("options", {})
    unit, origin = options.get("unit", "h"), options.get("origin", "first")
    if not tables:
        return EventBatch(torch.zeros(0, 0, dtype=torch.float64), torch.zeros(0, 0, dtype=torch.long),
                          torch.zeros(0, 0), torch.zeros(0, 0, dtype=torch.bool), options.get("vocab") or
                          [PAD_CODE], [], unit=unit, origin=origin, clock=torch.zeros(0, dtype=torch.float64))
    vocab, maps = merge_vocabularies(vocabs)
    subjects = [s for t in tables for s in t.column("subject_id").to_pylist()]
    lengths = np.concatenate([t.column("length").to_numpy() for t in tables])
    times = np.concatenate([flat_list(t.column("times")) for t in tables])
    codes = np.concatenate([m[flat_list(t.column("codes"))] for t, m in zip(tables, maps)])
    values = np.concatenate([flat_list(t.column("values")) for t in tables])
    windows = np.concatenate([t.column("window").to_numpy() for t in tables])
    order = np.argsort(np.array(subjects), kind="stable")  # a subject's windows are consecutive, in one shard
    ordered = [subjects[i] for i in order]
    repeated = [i for i in range(1, len(ordered)) if ordered[i] == ordered[i - 1]
                and windows[order[i]] != windows[order[i - 1]] + 1]
    if repeated:
        subject = ordered[repeated[0]]
        owners = np.repeat(np.arange(len(tables)), [t.num_rows for t in tables])
        where = [names[owners[i]] for i in range(len(subjects)) if subjects[i] == subject]
        raise ValueError(f"subject {subject!r} is in two shards ({where[0]} and {where[1]}): MEDS data files must "
                         "partition the subjects")
    starts = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64))[order]
    lengths_t = torch.from_numpy(lengths.astype(np.int64))[order]
    mask = lengths_to_mask(lengths_t)
    index = (starts.unsqueeze(1) + torch.arange(mask.shape[1])).masked_fill_(~mask, 0)
    pad = ~mask
    take = (lambda flat, fill: torch.from_numpy(flat)[index].masked_fill_(pad, fill)) if len(times) else (
        lambda flat, fill: torch.full(mask.shape, fill, dtype=torch.from_numpy(flat).dtype))
    clock = torch.from_numpy(np.concatenate([t.column("clock").to_numpy() for t in tables]))[order]
    static_lengths = np.concatenate([_list_lengths(t.column("static_codes")) for t in tables])
    static_codes = np.concatenate([m[flat_list(t.column("static_codes")).astype(np.int64)]
                                   for t, m in zip(tables, maps)])
    static_values = np.concatenate([flat_list(t.column("static_values")) for t in tables])
    static = [_padded(flat, static_lengths, order, fill)
              for flat, fill in ((static_codes.astype(np.int64), 0), (static_values.astype(np.float32), float("nan")))]
    return EventBatch(take(times, 0.0), take(codes.astype(np.int64), 0), take(values, float("nan")), mask, vocab,
                      ordered, unit=unit, origin=origin, clock=None if bool(clock.isnan().any()) else clock,
                      static_codes=static[0][0], static_values=static[1][0], static_mask=static[0][1],
                      window=torch.from_numpy(windows.astype(np.int64))[order])


def _list_lengths(chunked: Any) -> np.ndarray:
    """Row lengths of a (chunked) list column."""
    return np.concatenate([np.diff(chunk.offsets.to_numpy()) for chunk in chunked.chunks] or [np.zeros(0, np.int64)])


def _padded(flat: np.ndarray, lengths: np.ndarray, order: np.ndarray, fill: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``lengths`` cut from ``flat`` (in stored order), reordered by ``order`` and padded with ``fill``."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    ordered_lengths = torch.from_numpy(lengths.astype(np.int64))[order]
    mask = lengths_to_mask(ordered_lengths)
    index = (torch.from_numpy(starts)[order].unsqueeze(1) + torch.arange(mask.shape[1])).masked_fill_(~mask, 0)
    values = torch.from_numpy(flat)
    if values.numel() == 0:
        return torch.full(mask.shape, fill, dtype=values.dtype), mask
    return values[index].masked_fill_(~mask, fill), mask
