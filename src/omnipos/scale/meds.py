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

A subject in two data files (the MEDS standard forbids it: "data about a single subject cannot be split across
parquet files") would be two timelines, each with its own origin, truncation and windows, since each file is
read on its own: :func:`precompute_meds` (once every file is done), :func:`load_meds` and
:class:`ShardedMedsDataset` all refuse it, naming the subject and both files.
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

from omnipos.core import check_choice, check_positive_int, lengths_to_mask, pad_ragged
from omnipos.timeseries import PAD_CODE, UNITS, UNK_CODE, EventBatch

from .engine import make_engine
from .job import PrecomputeResult, file_units, run_job
from .manifest import Manifest, MetaSchema, describe_entry, read_verified
from .parquet import (
    check_row_sizes,
    column,
    empty_frame,
    flat_list,
    list_column,
    read_frame,
    read_shard_table,
    require_pyarrow,
    row_sizes,
    to_parquet,
)
from .sharded import TRUNCATIONS, ShardedDataset, check_truncation, cut, row_windows
from .shards import ShardWriter

__all__ = ["precompute_meds", "load_meds", "ShardedMedsDataset", "meds_data_files", "check_event_options",
           "vocab_from_codes", "read_subject_splits", "MAX_PADDED_EVENTS", "MEDS_COLUMNS", "SPLITS_FILE"]

KIND = "meds"
MEDS_COLUMNS = ("subject_id", "time", "code", "numeric_value")
#: At most this many padded slots (subjects x longest timeline) per ``EventBatch.from_frame`` call in a worker.
MAX_PADDED_EVENTS = 1 << 24
SPLITS_FILE = "subject_splits.parquet"  # MEDS: <root>/metadata/subject_splits.parquet, columns subject_id, split
#: The columns of a MEDS shard, as :func:`read_shard_table` checks them (``?``: optional column / nullable).
SHARD_SCHEMA = {"subject_id": "any", "split?": "string?", "window": "int64", "length": "int64", "clock": "double",
                "times": "large_list<double>", "codes": "large_list<int64>", "values": "large_list<float>",
                "static_codes": "large_list<int64>", "static_values": "large_list<float>"}


def _good_options(options: Any) -> bool:
    """Whether a manifest's MEDS ``options`` are what the loaders can use (as :func:`precompute_meds` writes)."""
    vocab, max_len = options.get("vocab"), options.get("max_len")
    return (isinstance(options, dict) and options.get("unit", "h") in UNITS
            and options.get("truncation", "error") in TRUNCATIONS
            and (max_len is None or isinstance(max_len, int) and not isinstance(max_len, bool) and max_len > 0)
            and (vocab is None or isinstance(vocab, list) and all(isinstance(c, str) for c in vocab)))


#: What the MEDS loaders use of the manifest's ``meta`` (checked by :meth:`Manifest.read`).
_OPTIONS = ("an object of EventBatch.from_frame options ('unit' one of the units, 'max_len' an integer > 0 or "
            "null, 'truncation' one of the truncations, 'vocab' a list of codes or null)")
META: MetaSchema = {
    "options": (_OPTIONS, _good_options, True),
    "split": ("a split name or null", lambda split: split is None or isinstance(split, str), False),
}


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
    split: str | None = None,
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
        split: only the subjects of this split (``"train"``, ``"tuning"``, ``"held_out"``, ...) of
            ``metadata/subject_splits.parquet``; None (default): every subject. Whenever that file exists, each
            subject's split is stored, so :class:`ShardedMedsDataset` and :func:`load_meds` can select one later.
        engine, address, num_cpus: where the files run, see :func:`omnipos.scale.make_engine`.
        shard_size: subjects per output shard (>= 1).
        resume, overwrite, progress: as in :func:`omnipos.scale.precompute_graphs`.
        **event_options: passed to :meth:`omnipos.timeseries.EventBatch.from_frame`, with the defaults of
            :meth:`~omnipos.timeseries.EventBatch.from_parquet` on a MEDS root: ``unit`` (hours), ``origin``,
            ``static`` (``"keep"``: MEDS static events, which have no time, become each subject's static codes),
            ``drop_missing``, ``vocab`` (a previous batch's vocab, or a codes file such as the root's
            ``metadata/codes.parquet``: its ``code`` column, read as :func:`vocab_from_codes` says),
            ``unknown_code``, ``max_len``, ``truncation``, ...

    Every option is checked before the first unit runs (and before ``out_dir`` is created or touched):
    ``truncation`` other than ``"error"`` needs ``max_len``, a codes file listing no codes (or a vocab list of
    only ``"<pad>"`` / ``"<unk>"``) is refused. What no single file shows is checked once all are done: a subject
    in two data files, and, with ``unknown_code="unk"``, a vocab that knows none of the cohort's codes.

    Returns:
        A :class:`omnipos.scale.PrecomputeResult` (items are subjects).

    Raises:
        ValueError: no MEDS data, bad options, a split the splits file does not name (the known ones are listed),
            ``out_dir`` holding another job, a subject in two data files, a vocab that makes every event
            ``"<unk>"``; :class:`omnipos.scale.PrecomputeError` after the other files finished when some were unreadable
            or held bad rows (the message names the file and the row).
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
    # what the loaders refuse is refused here too: a truncation needs a max_len to cut to
    check_truncation(event_options.get("max_len"), event_options.get("truncation", "error"))
    vocab = event_options.get("vocab")
    vocab_source = None
    if isinstance(vocab, (str, os.PathLike)):
        event_options["vocab"] = vocab_from_codes(vocab, event_options.get("unknown_code", "error"))
        vocab_source = str(vocab)
    elif isinstance(vocab, (list, tuple)):
        event_options["vocab"] = [str(code) for code in vocab]
        if not set(event_options["vocab"]) - {PAD_CODE, UNK_CODE}:
            raise ValueError(f"vocab={event_options['vocab']!r} holds no codes, so every code would be unknown; "
                             "pass the vocab of a batch built from this cohort's codes, or none")
        vocab_source = "the vocab list given"
    require_pyarrow()
    files = meds_data_files(meds_dir)
    splits_file = Path(meds_dir) / "metadata" / SPLITS_FILE
    # resolved: the job is the same whichever spelling of the root (relative, absolute, via a link) runs it
    splits = str(splits_file.resolve()) if splits_file.is_file() else None
    names = split_names(splits) if splits is not None else None
    if split is not None:
        check_split(split, splits, splits_file, names)
    check_event_options(files[0], event_options)  # before out_dir is touched: a refused job leaves it as it was
    units, inputs = file_units(files)
    options = {k: event_options[k] for k in sorted(event_options)}
    job = {"kind": KIND, "inputs": inputs, "shard_size": shard_size, "options": options}
    if split is not None or splits is not None:
        job["split"] = {"split": split, "splits": _identity(splits)}
    body = partial(_meds_unit, files=[str(p) for p in files], shard_size=shard_size, options=event_options,
                   splits=splits, split=split)
    meta = {"options": json.loads(json.dumps(options, default=str)), "split": split, "splits": splits is not None,
            "split_names": names}
    result = run_job(KIND, out_dir, job, units, body, "parquet", engine=engine_, resume=resume,
                     overwrite=overwrite, progress=progress, meta=meta)
    if vocab_source is not None and event_options.get("unknown_code") == "unk":
        vocab_source += f": {len(set(event_options['vocab']) - {PAD_CODE, UNK_CODE}):,} codes"
    else:
        vocab_source = None
    _check_finished_job(out_dir, vocab_source)
    return result


def _check_finished_job(out_dir: str | os.PathLike, vocab_source: str | None) -> None:
    """What no single unit can see, checked once every file is done, from each shard's subject ids and metadata:
    a subject in two data files (:func:`check_partition`, which the loaders apply too), and, with a given vocab and
    ``unknown_code="unk"`` (``vocab_source`` names it), a cohort none of whose codes the vocab holds (every event
    ``"<unk>"``: a vocab of another cohort)."""
    manifest = Manifest.read(out_dir, KIND, META)
    subjects, known, events = [], 0, 0
    for shard in manifest.shards():
        table, metadata = _shard_columns(manifest, shard, ["subject_id"])
        subjects.append(table.column("subject_id").to_numpy(zero_copy_only=False))
        counts = [metadata.get(key, "") for key in ("omnipos.known_events", "omnipos.events")]
        if all(count.isdigit() for count in counts):  # absent from shards of an older omnipos: not counted
            known, events = known + int(counts[0]), events + int(counts[1])
    check_partition(subjects, manifest)
    if vocab_source is not None and events and not known:
        raise ValueError(f"none of the cohort's codes is in the vocab ({vocab_source}), so "
                         f"with unknown_code='unk' every one of its {events:,} events became {UNK_CODE!r} in "
                         f"{manifest.out_dir}; pass the codes file of this cohort (overwrite=True), or no vocab")


def _shard_columns(manifest: Manifest, shard: dict[str, Any], columns: list[str]) -> tuple[Any, dict[str, str]]:
    """``columns`` and the metadata of a finished shard, read through the folder's door (:func:`read_verified`:
    a regular file of its recorded size and checksum) and checked against the manifest's item count."""
    where = f"{manifest.out_dir / shard['name']} ({describe_entry(shard)})"
    payload = read_verified(manifest.out_dir, shard, True)
    return read_shard_table(payload, where, SHARD_SCHEMA, shard["items"], columns)


def _identity(path: str | None) -> Any:
    """What a resume compares of the splits file: its size and mtime (a changed file redoes the job)."""
    if path is None:
        return None
    stat = os.stat(path)
    return {"path": path, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def vocab_from_codes(path: str | os.PathLike, unknown_code: str = "error") -> list[str]:
    """An :class:`~omnipos.timeseries.EventBatch` vocab from a codes file as MEDS writes it
    (``metadata/codes.parquet``: a ``code`` column, and others that are ignored): ``"<pad>"``, ``"<unk>"`` with
    ``unknown_code="unk"``, then the file's distinct codes sorted, the order ``EventBatch.from_frame`` gives the
    codes it finds, so a codes file listing exactly a cohort's codes gives the vocab that cohort builds."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"vocab: no such codes file {str(path)!r} (a Parquet file with a 'code' column, "
                                "e.g. <meds root>/metadata/codes.parquet)")
    check_choice(unknown_code, "unknown_code", ("error", "unk"))
    try:
        codes = read_frame(str(path), ["code"])["code"]
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError / KeyError alike
        raise ValueError(f"vocab: cannot read the 'code' column of {path} ({type(exc).__name__}: {exc})") from None
    if codes.isna().any():
        raise ValueError(f"vocab: {path} has a missing code at row {int(codes.isna().to_numpy().argmax())}")
    reserved = [PAD_CODE] + ([UNK_CODE] if unknown_code == "unk" else [])
    names = sorted({str(code) for code in codes} - set(reserved))
    if not names:  # e.g. the empty codes.parquet meds-testing-helpers writes: every code would be unknown
        raise ValueError(f"vocab: {path} lists no codes ({len(codes)} rows in its 'code' column"
                         f"{', only reserved ones' if len(codes) else ''}), so every code of the cohort would be "
                         f"unknown; pass a codes file listing the cohort's codes, or no vocab to build it from the "
                         "data")
    return reserved + names


def check_split(split: Any, splits: str | None, splits_file: Path, names: list[str] | None = None) -> None:
    """Refuse a ``split`` that is not a string, or that ``metadata/subject_splits.parquet`` does not name."""
    if not isinstance(split, str):
        raise TypeError(f"split must be a split name such as 'train', got {type(split).__name__} ({split!r})")
    if splits is None:
        raise ValueError(f"split={split!r}: this MEDS root has no {splits_file} (columns subject_id, split) to "
                         "select subjects from; pass split=None for every subject")
    names = split_names(splits) if names is None else names
    if split not in names:
        raise ValueError(f"split={split!r} is not in {splits_file}, whose splits are {', '.join(map(repr, names))}")


def split_names(splits: str) -> list[str]:
    """The split names of a ``metadata/subject_splits.parquet``, sorted."""
    return sorted({str(name) for name in read_subject_splits(splits).values()})


def shard_data_files(manifest: Manifest) -> list[str]:
    """The MEDS data file each shard of ``manifest.shards()`` was written from (the job's resolved input paths,
    else the unit's source)."""
    job = manifest.header.get("job")
    inputs = job.get("inputs") if isinstance(job, dict) else None
    files = inputs.get("files") if isinstance(inputs, dict) else None
    named = []
    for unit in sorted(manifest.units):
        record = manifest.units[unit]
        if isinstance(files, list) and unit < len(files) and isinstance(files[unit], str):
            name = files[unit]
        else:
            name = str(record.get("source"))
        named += [name] * len(record["shards"])
    return named


def check_partition(subjects: list[Any], manifest: Manifest) -> None:
    """Refuse a job in which a subject is in two shards: ``subjects[i]`` holds the subject ids of the rows of
    shard ``i`` of ``manifest.shards()``. A data file's subjects are written to its shards once each (a subject's
    windows are consecutive rows of one shard), so a subject in two shards came from two data files, which the MEDS
    standard forbids ("data about a single subject cannot be split across parquet files"): each file is read on
    its own, so its part would be a timeline of its own, with its own origin, truncation and windows."""
    import pandas as pd

    firsts = [pd.unique(np.asarray(ids, dtype=object) if not isinstance(ids, np.ndarray) else ids)
              for ids in subjects]
    if sum(len(f) for f in firsts) < 2:
        return
    every = pd.Index(np.concatenate([np.asarray(f, dtype=object) for f in firsts]))
    repeated = every.duplicated()
    if not repeated.any():
        return
    subject = every[int(np.flatnonzero(repeated)[0])]
    owner = np.repeat(np.arange(len(firsts)), [len(f) for f in firsts])
    a, b = owner[np.flatnonzero(every == subject)[:2]].tolist()
    shards, files = manifest.shards(), shard_data_files(manifest)
    if files[a] == files[b]:
        raise ValueError(f"{manifest.out_dir}: subject {subject!r} is in two shards of one data file ({files[a]}: "
                         f"{shards[a]['name']} and {shards[b]['name']}); the output folder was altered, run "
                         "precompute_meds again with overwrite=True")
    raise ValueError(f"subject {subject!r} is in two MEDS data files, {files[a]} (shard {shards[a]['name']}) and "
                     f"{files[b]} (shard {shards[b]['name']}) of {manifest.out_dir}: MEDS data files must partition "
                     "the subjects (the standard: a subject's data is in one and only one file); each file is read "
                     "on its own, so the subject would come back twice, each part with its own origin. Put each "
                     "subject's events in one data file and run precompute_meds again")


def read_subject_splits(path: str) -> dict[Any, str]:
    """``metadata/subject_splits.parquet`` as ``{subject_id: split}``."""
    try:
        frame = read_frame(path, ["subject_id", "split"])
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError / KeyError alike
        raise ValueError(f"{path}: cannot read the columns subject_id, split ({type(exc).__name__}: {exc})") from None
    return dict(zip(frame["subject_id"].tolist(), frame["split"].astype(str).tolist()))


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
               options: dict[str, Any], splits: str | None = None, split: str | None = None) -> None:
    """Read one MEDS data file and write its subjects' timelines, ``shard_size`` subjects per shard (only those
    of ``split`` when given; each subject's split stored when the root has a splits file)."""
    import pandas as pd

    path = files[unit]
    frame = _read_events(path)
    of_subject = read_subject_splits(splits) if splits is not None else None
    if split is not None:
        frame = frame[frame["subject_id"].map(of_subject).eq(split).to_numpy()]
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
        # subjects written, not read: static_only='drop' leaves out subjects without timed events
        writer.write(_shard_parquet(batches, of_subject), sum(len(b.subjects) for b in batches))


def _from_frame(path: str, frame: Any, options: dict[str, Any]) -> EventBatch:
    try:
        return EventBatch.from_frame(frame, *MEDS_COLUMNS, **options)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def _shard_parquet(batches: list[EventBatch], of_subject: dict[Any, str] | None = None) -> bytes:
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
    subjects = [s for b in batches for s in b.subjects]
    # events whose code the vocab knows (not "<unk>"): the driver refuses a cohort of none (a wrong vocab)
    unk = vocab.index(UNK_CODE) if UNK_CODE in vocab else -1
    known = int((codes != unk).sum() + (static_codes != unk).sum())
    columns = {"split": column([of_subject.get(s) for s in subjects], "string")} if of_subject is not None else {}
    return to_parquet({"subject_id": column(subjects), **columns,
                       "window": column(torch.cat([b.window for b in batches]).numpy(), "int64"),
                       "length": column(lengths, "int64"), "clock": column(clock, "float64"),
                       "times": list_column(times, lengths, "float64"),
                       "codes": list_column(codes, lengths, "int64"),
                       "values": list_column(values, lengths, "float32"),
                       "static_codes": list_column(static_codes.astype(np.int64), static_lengths, "int64"),
                       "static_values": list_column(static_values, static_lengths, "float32")},
                      {"omnipos.vocab": json.dumps(vocab), "omnipos.unit": first.unit,
                       "omnipos.origin": str(first.origin), "omnipos.known_events": str(known),
                       "omnipos.events": str(int(codes.size + static_codes.size))})


def load_meds(out_dir: str | os.PathLike, *, split: str | None = None, max_len: int | None = None,
              truncation: str = "error", verify: bool = True) -> EventBatch:
    """Every subject :func:`precompute_meds` wrote to ``out_dir``, as one padded
    :class:`omnipos.timeseries.EventBatch` (subjects sorted; codes indexed in the merged vocabulary): the batch
    ``EventBatch.from_parquet(<root>/data, **options)`` builds in one process.

    Everything is held at once, padded to the longest row: iterate a :class:`ShardedMedsDataset` for a cohort of
    any size (its memory is one shard and one batch), or bound the width here with ``max_len``.

    Args:
        out_dir: the output folder of a finished job.
        split: only the subjects of this split (see :class:`ShardedMedsDataset`); None: all.
        max_len, truncation: as in :class:`ShardedMedsDataset`: ``"error"`` (default) refuses a longer timeline,
            ``"head"`` / ``"tail"`` keep ``max_len`` events, ``"split"`` cuts windows (rows of their own).
        verify: check each shard's sha256 against the manifest (its being a regular file, its size, item count
            and structure are checked whatever ``verify`` says).

    Raises:
        ValueError: a subject found in two data files (MEDS data files must partition the subjects; every loader
            refuses it, naming the subject and both files), a split the job does not know (the known ones are
            listed), ``truncation`` other than ``"error"`` without ``max_len``.
    """
    if split is not None or max_len is not None or truncation != "error":
        dataset = ShardedMedsDataset(out_dir, split=split, max_len=max_len, truncation=truncation, verify=verify,
                                     cache_shards=1)
        items = [dataset[i] for i in range(len(dataset))]  # shard by shard: one shard in memory at a time
        if not items:
            return _empty_batch(dataset.options, dataset.vocab)
        keys = np.array([item["subject_id"] for item in items])
        order = np.lexsort((np.array([item["window"] for item in items]), keys))
        return dataset.collate([items[i] for i in order.tolist()])
    manifest = Manifest.read(out_dir, KIND, META)
    tables, vocabs, names = [], [], []  # each table: one row per subject (per window when split)
    for shard in manifest.shards():
        table, vocab = _read_shard(manifest.out_dir, shard, verify)
        tables.append(table)
        vocabs.append(vocab)
        names.append(shard["name"])
    options = manifest.meta.get("options", {})
    unit, origin = options.get("unit", "h"), options.get("origin", "first")
    if not tables:
        return _empty_batch(options, options.get("vocab") or [PAD_CODE])
    check_partition([t.column("subject_id").to_numpy(zero_copy_only=False) for t in tables], manifest)
    vocab, maps = merge_vocabularies(vocabs)
    subjects = [s for t in tables for s in t.column("subject_id").to_pylist()]
    lengths = np.concatenate([t.column("length").to_numpy() for t in tables])
    times = np.concatenate([flat_list(t.column("times")) for t in tables])
    codes = np.concatenate([m[flat_list(t.column("codes"))] for t, m in zip(tables, maps)])
    values = np.concatenate([flat_list(t.column("values")) for t in tables])
    windows = np.concatenate([t.column("window").to_numpy() for t in tables])
    order = np.argsort(np.array(subjects), kind="stable")  # a subject's windows are consecutive, in one shard
    ordered = [subjects[i] for i in order]
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
                      ordered, unit=unit, origin=origin, clock=_known_clock(clock, lengths_t > 0),
                      static_codes=static[0][0], static_values=static[1][0], static_mask=static[0][1],
                      window=torch.from_numpy(windows.astype(np.int64))[order])


def _known_clock(clock: torch.Tensor, has_events: torch.Tensor) -> torch.Tensor | None:
    """The rows' clock, or None when a row with events has none (a job stored without clock times). A row without
    timed events (a static-only subject kept by ``static_only="keep"``) has a NaN clock, which is not missing."""
    return None if bool(clock[has_events].isnan().any()) else clock


def _empty_batch(options: dict[str, Any], vocab: list[str]) -> EventBatch:
    return EventBatch(torch.zeros(0, 0, dtype=torch.float64), torch.zeros(0, 0, dtype=torch.long),
                      torch.zeros(0, 0), torch.zeros(0, 0, dtype=torch.bool), vocab, [],
                      unit=options.get("unit", "h"), origin=options.get("origin", "first"),
                      clock=torch.zeros(0, dtype=torch.float64))


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


def _check_shard(payload: bytes, out_dir: Path, shard: dict[str, Any],
                 columns: list[str] | None = None) -> tuple[Any, list[str]]:
    """A MEDS shard's bytes (size and checksum checked by :func:`read_verified`) as its Arrow table (of
    ``columns``; None: all) and vocabulary, its structure checked: the manifest's item count, the columns and
    the ``omnipos.vocab`` metadata :func:`precompute_meds` writes, every row's ``length`` equal to its event
    lists' (and its static codes' count to its static values'), windows >= 0 and codes indices into the vocab.
    ValueError naming the file and its manifest entry otherwise."""
    where = f"{Path(out_dir) / shard['name']} ({describe_entry(shard)})"
    table, metadata = read_shard_table(payload, where, SHARD_SCHEMA, shard["items"], columns, ("omnipos.vocab",))
    try:
        vocab = json.loads(metadata["omnipos.vocab"])
    except json.JSONDecodeError:
        vocab = None
    if not isinstance(vocab, list) or not vocab or not all(isinstance(code, str) for code in vocab):
        raise ValueError(f"{where}: the shard's 'omnipos.vocab' metadata is not a JSON list of codes: "
                         f"{metadata['omnipos.vocab'][:200]!r}")
    names = table.column_names
    if "window" in names and table.num_rows and int(table.column("window").to_numpy().min()) < 0:
        raise ValueError(f"{where}: the shard's 'window' column holds a negative window")
    for counted, lists in (("length", ("times", "codes", "values")), ("static_codes", ("static_values",))):
        if counted not in names:
            continue
        lengths = table.column(counted).to_numpy() if counted == "length" else row_sizes(table.column(counted))
        for data in lists:
            if data in names:
                check_row_sizes(table, data, lengths, where, counted + " says {:,} events")
    for data in ("codes", "static_codes"):
        if data in names:
            codes = flat_list(table.column(data))
            if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= len(vocab)):
                raise ValueError(f"{where}: the shard's {data!r} hold indices outside its vocabulary of "
                                 f"{len(vocab):,} codes ({int(codes.min())}..{int(codes.max())})")
    return table, vocab


def _read_shard(out_dir: Path, shard: dict[str, Any], verify: bool,
                columns: list[str] | None = None) -> tuple[Any, list[str]]:
    """A MEDS shard read (regular file, size, checksum: :func:`read_verified`) and checked (:func:`_check_shard`)."""
    return _check_shard(read_verified(out_dir, shard, verify), out_dir, shard, columns)


class _MedsShard:
    """One parsed MEDS shard: per-row columns and the flat event / static lists, codes in the merged vocab."""

    def __init__(self, table: Any, code_map: np.ndarray) -> None:
        self.subjects = table.column("subject_id").to_pylist()
        self.window = table.column("window").to_numpy().astype(np.int64)
        self.lengths = table.column("length").to_numpy().astype(np.int64)
        self.starts = np.cumsum(self.lengths) - self.lengths
        self.clock = table.column("clock").to_numpy()
        self.times = flat_list(table.column("times")).astype(np.float64)
        self.codes = code_map[flat_list(table.column("codes")).astype(np.int64)]
        self.values = flat_list(table.column("values")).astype(np.float32)
        self.static_lengths = _list_lengths(table.column("static_codes"))
        self.static_starts = np.cumsum(self.static_lengths) - self.static_lengths
        self.static_codes = code_map[flat_list(table.column("static_codes")).astype(np.int64)]
        self.static_values = flat_list(table.column("static_values")).astype(np.float32)
        self.split = table.column("split").to_pylist() if "split" in table.column_names else None


class ShardedMedsDataset(ShardedDataset):
    """A lazy, map-style dataset over the shards :func:`precompute_meds` wrote: ``dataset[i]`` is one subject's
    timeline (one window of it with ``truncation="split"``), unpadded, read from its shard on first use; the
    most recently used shards stay in memory (``cache_bytes``). ``dataset.collate`` pads one batch into an
    :class:`omnipos.timeseries.EventBatch`, so iterating a cohort costs one shard and one batch of memory, not the
    cohort padded to its longest subject.

    Items follow the shards (each data file's subjects sorted); codes index :attr:`vocab`, the vocabulary
    :func:`load_meds` uses. Works in a ``torch.utils.data.DataLoader`` with workers
    (``collate_fn=dataset.collate``): the dataset pickles without its cache and each worker opens the shards it
    reads. Shuffle with ``sampler=dataset.sampler(shuffle=True, seed=...)``, not ``shuffle=True`` (which reads a
    shard for almost every item once the shards outgrow the cache).

    Args:
        out_dir: the output folder of a finished :func:`precompute_meds` job.
        split: only the subjects of this split of the root's ``metadata/subject_splits.parquet`` (stored by the
            job); None: every subject. A split that file did not name is a ValueError listing those it did.
        max_len, truncation: a timeline longer than ``max_len`` events is an error when read (``"error"``, the
            default), keeps its first / last ``max_len`` events (``"head"`` / ``"tail"``), or is cut into windows
            of ``max_len`` events, items of their own (``"split"``). Times stay offsets from the subject's origin.
        verify: check each shard's sha256 against the manifest when it is read (its being a regular file, its
            size, item count and structure are checked whatever ``verify`` says; shards the index needs, MEDS
            vocabularies or lengths to cut, are read and checked when the dataset is built).
        cache_bytes, cache_shards: the parsed shards kept in memory: their size (default 256 MiB per process)
            and / or count (see :class:`omnipos.scale.sharded.ShardedDataset`).

    Raises:
        ValueError: a subject in two MEDS data files (whatever ``split`` selects; naming the subject and both
            files), an unknown ``split``, ``truncation`` other than ``"error"`` without ``max_len``.

    Items are dicts ``{"subject_id", "window": int, "times": [L] float64, "codes": [L] int64, "values": [L]
    float32 (NaN: no value), "clock": float (NaN: none), "static_codes": [S] int64, "static_values": [S] float32,
    "split": str or None}``.
    """

    kind = KIND
    what = "timelines"
    meta_schema = META
    parsed_per_file_byte = 2.0  # 1.4 measured on 50-event timelines (zstd Parquet -> NumPy columns)

    def __init__(self, out_dir: str | os.PathLike, *, split: str | None = None, max_len: int | None = None,
                 truncation: str = "error", verify: bool = True, cache_shards: int | None = None,
                 cache_bytes: int | None = None) -> None:
        super().__init__(out_dir, verify=verify, cache_shards=cache_shards, cache_bytes=cache_bytes)
        self.max_len = check_truncation(max_len, truncation)
        self.truncation = truncation
        if split is not None and not isinstance(split, str):
            raise TypeError(f"split must be a split name such as 'train', got {type(split).__name__} ({split!r})")
        self.split = split
        self.options = dict(self.manifest.meta.get("options", {}))
        self.unit, self.origin = self.options.get("unit", "h"), self.options.get("origin", "first")
        # each shard read and checked one at a time (with its event lists when the lengths cut windows)
        wanted = ["subject_id", "length"] + (["split"] if split is not None else []) \
            + (["times"] if truncation == "split" else [])
        vocabs, lengths, splits, subjects = [], [], [], []
        for shard, path in zip(self.shards, self.shard_paths()):
            table, vocab = _read_shard(self.out_dir, shard, self.verify, wanted)
            vocabs.append(vocab)
            lengths.append(table.column("length").to_numpy().astype(np.int64))
            subjects.append(table.column("subject_id").to_numpy(zero_copy_only=False))
            if split is not None:
                splits.append(self._split_column(table, path))
        check_partition(subjects, self.manifest)  # every subject of the job, whatever the split selects
        if split is not None:
            self._check_split(splits)
        if vocabs:
            self.vocab, self._maps = merge_vocabularies(vocabs)
        else:
            self.vocab, self._maps = list(self.options.get("vocab") or [PAD_CODE]), []
        lengths_all = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        rows = None
        if split is not None:
            rows = np.flatnonzero(np.concatenate(splits) == split) if splits else np.zeros(0, np.int64)
            lengths_all = lengths_all[rows]
        windows = None
        if truncation == "split":
            windows = row_windows(lengths_all, self.max_len, truncation, str)
        self._select(rows, windows)
        stored_len = self.options.get("max_len") if self.options.get("truncation") == "split" else None
        self._pieces = -(-int(stored_len) // self.max_len) if stored_len and self.max_len else 1

    def _split_column(self, table: Any, path: str) -> np.ndarray:
        if "split" not in table.column_names:
            raise ValueError(f"split={self.split!r}: {path} stores no splits (its MEDS root had no "
                             f"metadata/{SPLITS_FILE} when the job ran); pass split=None")
        return np.array(table.column("split").to_pylist(), dtype=object)

    def _check_split(self, splits: list[np.ndarray]) -> None:
        """Refuse a split the job's splits file did not name (the job records the names; a job written before
        it did: the splits its shards store), then one that a job of one split does not hold."""
        known = self.manifest.meta.get("split_names")
        if not (isinstance(known, list) and all(isinstance(name, str) for name in known)):
            known = sorted({str(name) for column in splits for name in column.tolist() if name is not None})
        if self.split not in known:
            raise ValueError(f"split={self.split!r} is not a split of {self.out_dir} (its MEDS root's "
                             f"metadata/{SPLITS_FILE}); its splits: {', '.join(map(repr, known)) or 'none'}")
        stored = self.manifest.meta.get("split")
        if stored is not None and stored != self.split:
            raise ValueError(f"split={self.split!r}: this job holds only the {stored!r} subjects")

    def _parse(self, payload: bytes, index: int) -> _MedsShard:
        table, vocab = _check_shard(payload, self.out_dir, self.shards[index])
        if len(vocab) != len(self._maps[index]):
            raise ValueError(f"{self.out_dir / self.shards[index]['name']}: the shard's vocabulary changed since "
                             "the dataset was built (the folder is being rewritten?)")
        return _MedsShard(table, self._maps[index])

    def _item(self, shard: _MedsShard, row: int, start: int | None, size: int | None) -> dict[str, Any]:
        length = int(shard.lengths[row])
        window = int(shard.window[row])
        if start is None:
            start, size = cut(length, self.max_len, self.truncation,
                              lambda: f"{self.out_dir}: subject {shard.subjects[row]!r}")
        else:
            window = window * self._pieces + start // self.max_len
        begin = int(shard.starts[row]) + start
        s_begin, s_size = int(shard.static_starts[row]), int(shard.static_lengths[row])
        return {"subject_id": shard.subjects[row], "window": window,
                "times": torch.from_numpy(shard.times[begin:begin + size].copy()),
                "codes": torch.from_numpy(shard.codes[begin:begin + size].copy()),
                "values": torch.from_numpy(shard.values[begin:begin + size].copy()),
                "clock": float(shard.clock[row]),
                "static_codes": torch.from_numpy(shard.static_codes[s_begin:s_begin + s_size].copy()),
                "static_values": torch.from_numpy(shard.static_values[s_begin:s_begin + s_size].copy()),
                "split": None if shard.split is None else shard.split[row]}

    def collate(self, items: list[dict[str, Any]]) -> EventBatch:
        """Items -> one :class:`omnipos.timeseries.EventBatch` padded to its longest row (times 0, codes 0
        (``"<pad>"``), values NaN at pads), in the items' order, with :attr:`vocab`, the job's unit and origin."""
        if not isinstance(items, (list, tuple)) or not items:
            raise ValueError("items must be a non-empty list of ShardedMedsDataset items")
        times, mask = pad_ragged([item["times"] for item in items], 0.0)
        codes = pad_ragged([item["codes"] for item in items], 0)[0]
        values = pad_ragged([item["values"] for item in items], float("nan"))[0]
        static_codes, static_mask = pad_ragged([item["static_codes"] for item in items], 0)
        static_values = pad_ragged([item["static_values"] for item in items], float("nan"))[0]
        clock = torch.tensor([item["clock"] for item in items], dtype=torch.float64)
        return EventBatch(times, codes, values, mask, self.vocab, [item["subject_id"] for item in items],
                          unit=self.unit, origin=self.origin, clock=_known_clock(clock, mask.any(1)),
                          static_codes=static_codes, static_values=static_values, static_mask=static_mask,
                          window=torch.tensor([item["window"] for item in items], dtype=torch.int64))
