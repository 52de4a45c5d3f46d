"""FASTA/FASTQ files to Parquet shards of encoded reads: :func:`precompute_reads`, :func:`load_reads`.

Each input file is a unit of work: one worker parses it with :func:`omnipos.dna.read_fastx` (gzip or plain,
dnaio when installed) and writes shards of ``shard_size`` reads, ``reads-UUUUU-PPPPP.parquet``, with the columns

- ``name`` (string), ``length`` (int64),
- ``record``, ``offset`` (int64: the row's record in its file and where the row starts in it; rows and records
  differ only with ``truncation="split"``), ``rna`` (bool, only with ``rna="keep"``),
- ``tokens`` (binary: one byte per base, the :func:`omnipos.dna.encode` token ids),
- ``qualities`` (binary: Phred scores, one byte per base; null for FASTA).

The Phred offset each shard was read with (given, or found by ``quality_offset="auto"``) is in its metadata.

The RC-symmetric positional encoding is a function of the lengths alone, so it is not stored (it would be
``L * dim`` floats per read): :func:`load_reads` computes it with :func:`omnipos.dna.rc_symmetric_encoding` from
the ``dim`` / ``strand_aware`` recorded in the manifest. The Parquet work is :mod:`omnipos.scale.parquet`'s.
"""

from __future__ import annotations

import os
import zlib
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from omnipos.core import check_positive_int, lengths_to_mask
from omnipos.dna import (
    PAD,
    ReadOptions,
    collate_reads,
    rc_symmetric_encoding,
    read_fastx,
)
from omnipos.dna.alphabet import pad_rows
from omnipos.dna.fastx import check_input_file
from omnipos.dna.reads import MAX_TOKENS, detect_format

from .engine import make_engine
from .job import PrecomputeResult, file_units, run_job
from .manifest import Manifest, MetaSchema, describe_entry, read_verified
from .parquet import (
    binary_column,
    check_row_sizes,
    column,
    flat_binary,
    null_binary_column,
    read_shard_table,
    require_pyarrow,
    to_parquet,
)
from .sharded import ShardedDataset, check_truncation, cut, gather_windows, row_windows
from .shards import ShardWriter

__all__ = ["precompute_reads", "load_reads", "ShardedReadsDataset"]

KIND = "reads"
ENCODING = "omnipos.dna.rc_symmetric_encoding"
#: The columns of a reads shard, as :func:`read_shard_table` checks them (``?``: optional column / nullable).
SHARD_SCHEMA = {"name": "string", "length": "int64", "record": "int64", "offset": "int64", "rna?": "bool",
                "tokens": "large_binary", "qualities": "large_binary?"}
TOKEN_DTYPES = ("uint8", "int16", "int32", "int64")


def _good_config(config: Any) -> bool:
    """Whether a manifest's reads ``config`` is one :func:`precompute_reads` writes (and the loaders can use)."""
    if not (isinstance(config, dict) and config.get("encoding") == ENCODING
            and isinstance(config.get("strand_aware"), bool) and isinstance(config.get("read_options", {}), dict)
            and config.get("read_options", {}).get("quality_encoding", "phred") in ("phred", "solexa")):
        return False
    dim = check_positive_int(config.get("dim"), "dim", minimum=0)
    if dim:
        rc_symmetric_encoding(torch.tensor([1]), dim, strand_aware=config["strand_aware"])  # raises if unusable
    return True


#: What the reads loaders use of the manifest's ``meta`` (checked by :meth:`Manifest.read`).
_CONFIG = ("an object with 'dim' (an integer >= 0 the encoding takes), 'strand_aware' (a bool), 'encoding' "
           f"({ENCODING!r}) and 'read_options' (an object)")
META: MetaSchema = {"config": (_CONFIG, _good_config, True)}


def precompute_reads(
    paths: Any,
    out_dir: str | os.PathLike,
    options: ReadOptions | None = None,
    *,
    dim: int = 16,
    strand_aware: bool = False,
    engine: str = "local",
    address: str | None = None,
    num_cpus: int | None = None,
    shard_size: int = 100_000,
    batch_size: int = 8192,
    max_tokens: int = MAX_TOKENS,
    resume: bool = True,
    overwrite: bool = False,
    progress: Any = True,
    **read_keywords: Any,
) -> PrecomputeResult:
    """Parse and encode FASTA/FASTQ files (plain or gzip) into Parquet shards in ``out_dir``.

    Args:
        paths: a file or a list of files; each is one unit of work (give many files to use many workers).
        out_dir: output folder (``reads-*.parquet`` and ``manifest.jsonl``); on a cluster, a shared folder.
        dim, strand_aware: the positional encoding :func:`load_reads` attaches (``dim=0``: none), see
            :func:`omnipos.dna.rc_symmetric_encoding`.
        engine, address, num_cpus: where the files run, see :func:`omnipos.scale.make_engine`.
        shard_size: reads per output shard (>= 1). batch_size, max_tokens: reads parsed at a time, and the
            padded size a batch may reach (:func:`omnipos.dna.read_fastx`; the output does not change).
        resume, overwrite, progress: as in :func:`omnipos.scale.precompute_graphs`.
        options, **read_keywords: how reads are read, a :class:`omnipos.dna.ReadOptions` and/or its fields as
            keywords (``ambiguity``, ``lowercase``, ``parser``, ``quality_offset``, ...).

    Returns:
        A :class:`omnipos.scale.PrecomputeResult`.

    Raises:
        FileNotFoundError: a path that is not a file. ValueError / TypeError: bad arguments (unknown read
        options included), ``out_dir`` holding another job; :class:`omnipos.scale.PrecomputeError` after the
        other files finished when some were malformed (the message names each file and record).
    """
    engine_ = make_engine(engine, address, num_cpus)
    shard_size = check_positive_int(shard_size, "shard_size")
    batch_size = check_positive_int(batch_size, "batch_size")
    dim = check_positive_int(dim, "dim", minimum=0)
    if dim:
        rc_symmetric_encoding(torch.tensor([1]), dim, strand_aware=strand_aware)  # refuse a bad dim now
    files = [Path(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else list(paths))]
    if not files:
        raise ValueError("paths: no input files given")
    for path in files:
        check_input_file(path, "paths")
    read = ReadOptions.of(options, "precompute_reads", **read_keywords)  # bad options refused before any work
    read_fastx(files[0], read, batch_size=batch_size, max_tokens=max_tokens)  # and a missing parser
    check_one_format(files)
    require_pyarrow()
    units, inputs = file_units(files)
    config = {"dim": dim, "strand_aware": bool(strand_aware), "encoding": ENCODING,
              "read_options": {k: _jsonable(v) for k, v in sorted(read.changed().items())}}
    job = {"kind": KIND, "inputs": inputs, "shard_size": shard_size, "options": config}
    body = partial(_reads_unit, files=[str(p) for p in files], shard_size=shard_size, batch_size=batch_size,
                   max_tokens=max_tokens, options=read)
    return run_job(KIND, out_dir, job, units, body, "parquet", engine=engine_, resume=resume,
                   overwrite=overwrite, progress=progress, meta={"config": config})


def check_one_format(files: list[Path]) -> None:
    """Refuse FASTA and FASTQ files in one job (their shards could not be loaded together), naming one of each;
    a file that is neither is refused by :func:`omnipos.dna.detect_format`'s ValueError. Empty files fit any."""
    seen: dict[str, Path] = {}
    for path in files:
        fmt = detect_format(path)
        if fmt is not None:
            seen.setdefault(fmt, path)
    if len(seen) > 1:
        raise ValueError(f"paths mix FASTA ({str(seen['fasta'])!r}) and FASTQ ({str(seen['fastq'])!r}) files: their "
                         "shards cannot be loaded as one dataset; precompute them into separate folders")


def _jsonable(value: Any) -> Any:
    """A read option as the manifest's JSON can hold it (a torch dtype by its name)."""
    return str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else value


class _Pending:
    """Reads parsed but not yet written: names, lengths, records/offsets, and the flat token / quality bytes."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.lengths: list[np.ndarray] = []
        self.records: list[np.ndarray] = []
        self.offsets: list[np.ndarray] = []
        self.rna: list[np.ndarray] | None = []
        self.tokens: list[np.ndarray] = []
        self.qualities: list[np.ndarray] | None = []
        self.tokens_dtype: str | None = None
        self.quality_offsets: set[int] = set()

    def add(self, batch: Any) -> None:
        # NumPy, not torch: boolean indexing of a [8192, 150] batch took 9 ms in NumPy, 78 ms in torch
        tokens, mask = batch.tokens.cpu().numpy(), batch.mask.cpu().numpy()
        if tokens.size and tokens.dtype != np.uint8 and (tokens.min() < 0 or tokens.max() > 255):
            raise ValueError(f"token ids outside 0..255 cannot be stored one byte per base (got "
                             f"{tokens.min()}..{tokens.max()})")
        self.tokens_dtype = str(batch.tokens.dtype).removeprefix("torch.")
        self.names += batch.names
        self.lengths.append(batch.lengths.cpu().numpy().astype(np.int64))
        self.records.append(batch.records.cpu().numpy().astype(np.int64))
        self.offsets.append(batch.offsets.cpu().numpy().astype(np.int64))
        if batch.rna is None:
            self.rna = None
        elif self.rna is not None:
            self.rna.append(batch.rna.cpu().numpy())
        if batch.quality_offset is not None:
            self.quality_offsets.add(int(batch.quality_offset))
        self.tokens.append(_unpad(tokens, mask))
        if batch.qualities is None:
            self.qualities = None
        elif self.qualities is not None:
            self.qualities.append(_unpad(batch.qualities.cpu().numpy(), mask))

    def __len__(self) -> int:
        return len(self.names)

    def take(self, count: int) -> tuple[dict[str, Any], np.ndarray, np.ndarray | None]:
        """The first ``count`` reads, removed from the buffer: their per-row columns, tokens and qualities."""
        rows = {"name": self.names[:count]}
        self.names = self.names[count:]
        for key in ("lengths", "records", "offsets", "rna"):
            parts = getattr(self, key)
            if parts is None:
                continue
            values = np.concatenate(parts) if parts else np.zeros(0, np.int64)
            rows[key] = values[:count]
            setattr(self, key, [values[count:]])
        lengths = rows["lengths"]
        tokens = np.concatenate(self.tokens) if self.tokens else np.zeros(0, np.uint8)
        qualities = None if self.qualities is None else (
            np.concatenate(self.qualities) if self.qualities else np.zeros(0, np.uint8))
        cut = int(lengths.sum())
        self.tokens = [tokens[cut:]]
        if qualities is not None:
            self.qualities = [qualities[cut:]]
        return rows, tokens[:cut], None if qualities is None else qualities[:cut]


def _unpad(padded: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The real values of a padded ``[B, L]`` batch, row after row, as uint8."""
    if mask.all():  # reads of one length (the usual short-read run): no gather at all
        return padded.astype(np.uint8, copy=False).reshape(-1)
    return padded.astype(np.uint8, copy=False)[mask]


def _parquet(rows: dict[str, Any], tokens: np.ndarray, qualities: np.ndarray | None, tokens_dtype: str,
             quality_offsets: set[int]) -> bytes:
    lengths = rows["lengths"]
    columns = {"name": column(rows["name"], "string"), "length": column(lengths, "int64"),
               "record": column(rows["records"], "int64"), "offset": column(rows["offsets"], "int64")}
    if "rna" in rows:
        columns["rna"] = column(rows["rna"], "bool_")
    columns["tokens"] = binary_column(tokens, lengths)
    columns["qualities"] = (binary_column(qualities, lengths) if qualities is not None
                            else null_binary_column(len(rows["name"])))
    metadata = {"omnipos.tokens_dtype": tokens_dtype, "omnipos.format": "fastq" if qualities is not None else "fasta"}
    if quality_offsets:
        metadata["omnipos.quality_offset"] = ",".join(map(str, sorted(quality_offsets)))
    return to_parquet(columns, metadata)


def _reads_unit(unit: int, payload: None, writer: ShardWriter, *, files: list[str], shard_size: int,
                batch_size: int, max_tokens: int, options: ReadOptions) -> None:
    """Parse one file and write its shards of ``shard_size`` reads."""
    path = files[unit]
    pending = _Pending()

    def write(count: int) -> None:
        rows, tokens, qualities = pending.take(count)
        writer.write(_parquet(rows, tokens, qualities, pending.tokens_dtype or "uint8", pending.quality_offsets),
                     len(rows["name"]))

    done = 0
    try:
        for batch in read_fastx(path, options, batch_size=batch_size, max_tokens=max_tokens):
            pending.add(batch)
            done += len(batch)
            while len(pending) >= shard_size:
                write(shard_size)
    except (EOFError, zlib.error, OSError) as exc:  # a truncated or damaged gzip stream
        raise ValueError(f"{path}: record {done + 1} or later: the file is damaged or truncated "
                         f"({type(exc).__name__}: {exc})") from None
    if len(pending):
        write(len(pending))


def load_reads(out_dir: str | os.PathLike, *, positional: bool = True, verify: bool = True,
               max_len: int | None = None, truncation: str = "error") -> dict[str, Any]:
    """Every read :func:`precompute_reads` wrote to ``out_dir``, in input order, as one padded batch.

    Everything is held at once, padded to the longest row: for a job of any size iterate a
    :class:`ShardedReadsDataset` instead (its memory is one shard and one batch), or bound the width here with
    ``max_len``.

    Args:
        out_dir: the output folder of a finished job.
        positional: attach the RC-symmetric encoding the job asked for (``dim > 0``).
        verify: check each shard's sha256 against the manifest (its being a regular file, its size, item count
            and structure are checked whatever ``verify`` says).
        max_len, truncation: a row longer than ``max_len`` is an error (``"error"``, the default: a ValueError
            naming the read), keeps its first / last ``max_len`` bases (``"head"`` / ``"tail"``) or is cut into
            windows of ``max_len`` (``"split"``); ``records`` / ``offsets`` say where each row came from.

    Returns:
        A dict with the keys of ``omnipos dna featurize``'s output: ``names`` (N strings), ``tokens [N, L]``
        (the dtype :func:`omnipos.dna.read_fastx` gave, ``PAD`` past each read), ``mask [N, L]`` bool,
        ``lengths [N]`` int64, ``records [N]`` / ``offsets [N]`` int64 (each row's record in its file and its
        start in it), ``rna [N]`` bool (only with ``rna="keep"``), ``qualities [N, L]`` uint8 Phred (0 at pads;
        None for FASTA; ``config["quality_offset"]`` is the offset the files were read with), ``positional
        [N, L, dim]`` float32 (:func:`omnipos.dna.rc_symmetric_encoding`; only when the job's ``dim > 0`` and
        ``positional=True``) and ``config``.
    """
    max_len = check_truncation(max_len, truncation)
    manifest = Manifest.read(out_dir, KIND, META)
    names: list[str] = []
    lengths, tokens, qualities, formats, dtypes = [], [], [], {}, set()
    per_row: dict[str, list[np.ndarray]] = {"records": [], "offsets": [], "rna": []}
    offsets_used: set[str] = set()
    for shard in manifest.shards():
        table, metadata = _read_shard(manifest.out_dir, shard, verify)
        formats.setdefault(metadata["omnipos.format"], shard["name"])
        dtypes.add(metadata["omnipos.tokens_dtype"])
        names += table.column("name").to_pylist()
        lengths.append(table.column("length").to_numpy())
        for key, name in (("records", "record"), ("offsets", "offset"), ("rna", "rna")):
            if name in table.column_names:
                per_row[key].append(table.column(name).to_numpy(zero_copy_only=False))
        if "omnipos.quality_offset" in metadata:
            offsets_used.update(metadata["omnipos.quality_offset"].split(","))
        tokens.append(flat_binary(table.column("tokens")))
        if metadata["omnipos.format"] == "fastq":
            qualities.append(flat_binary(table.column("qualities")))
    if len(formats) > 1:
        raise ValueError(f"{out_dir} mixes FASTA and FASTQ shards ({formats.get('fasta')} and "
                         f"{formats.get('fastq')}); precompute them into separate folders")
    if len(dtypes) > 1:
        raise ValueError(f"{out_dir}: the shards record different token dtypes ({', '.join(sorted(dtypes))}); one "
                         "job writes one: the folder was edited, rerun the job with resume=False")
    row_lengths = np.concatenate(lengths).astype(np.int64) if lengths else np.zeros(0, np.int64)
    flat = np.concatenate(tokens) if tokens else np.zeros(0, np.uint8)
    flat_q = np.concatenate(qualities) if qualities else None
    columns = {key: np.concatenate(parts) for key, parts in per_row.items() if parts}
    windows = row_windows(row_lengths, max_len, truncation, lambda i: f"{out_dir}: read {i} ({names[i]!r})")
    if windows is not None:
        index, starts, sizes = windows
        flat = gather_windows(flat, row_lengths, windows)
        flat_q = None if flat_q is None else gather_windows(flat_q, row_lengths, windows)
        names = [names[i] for i in index.tolist()]
        columns = {key: values[index] for key, values in columns.items()}
        if "offsets" in columns:
            columns["offsets"] = columns["offsets"] + starts
        row_lengths = sizes.astype(np.int64)
    all_lengths = torch.from_numpy(row_lengths)
    mask = lengths_to_mask(all_lengths)
    dtype = getattr(torch, dtypes.pop()) if dtypes else torch.int64
    config = dict(manifest.meta["config"])
    config["quality_offset"] = int(offsets_used.pop()) if len(offsets_used) == 1 else (
        sorted(int(o) for o in offsets_used) or None)
    result: dict[str, Any] = {
        "names": names,
        "tokens": pad_rows(flat, mask.numpy(), PAD, dtype),
        "mask": mask,
        "lengths": all_lengths,
        "qualities": pad_rows(flat_q, mask.numpy(), 0) if flat_q is not None else None,
        "config": config,
    }
    for key, values in columns.items():
        result[key] = torch.from_numpy(values)
    if positional and config["dim"]:
        result["positional"] = rc_symmetric_encoding(all_lengths, config["dim"],
                                                     strand_aware=config["strand_aware"])
    return result


def _check_shard(payload: bytes, out_dir: Path, shard: dict[str, Any],
                 columns: list[str] | None = None) -> tuple[Any, dict[str, str]]:
    """A reads shard's bytes (size and checksum checked by :func:`read_verified`) as its Arrow table (of
    ``columns``; None: all) and metadata, its structure checked: the manifest's item count, the columns and
    metadata :func:`precompute_reads` writes, and every row's ``length`` equal to its tokens' (and qualities')
    byte count, so that nothing is sized from the ``length`` column alone. ValueError naming the file and its
    manifest entry otherwise."""
    where = f"{Path(out_dir) / shard['name']} ({describe_entry(shard)})"
    table, metadata = read_shard_table(payload, where, SHARD_SCHEMA, shard["items"], columns,
                                       ("omnipos.format", "omnipos.tokens_dtype"))
    fmt, dtype = metadata["omnipos.format"], metadata["omnipos.tokens_dtype"]
    if fmt not in ("fasta", "fastq") or dtype not in TOKEN_DTYPES:
        raise ValueError(f"{where}: the shard's metadata says format {fmt!r} and token dtype {dtype!r}; expected "
                         f"'fasta' or 'fastq', and one of {', '.join(TOKEN_DTYPES)}")
    used = metadata.get("omnipos.quality_offset")
    if used is not None and not all(part.isdigit() for part in used.split(",")):
        raise ValueError(f"{where}: the shard's quality offset {used!r} is not a list of integers")
    names = table.column_names
    if "qualities" in names:
        nulls = table.column("qualities").null_count
        if nulls != (table.num_rows if fmt == "fasta" else 0):
            raise ValueError(f"{where}: a {fmt.upper()} shard with {nulls:,} of {table.num_rows:,} qualities "
                             "missing")
    if "length" in names:
        lengths = table.column("length").to_numpy()
        for data in ("tokens", "qualities"):
            if data in names and (data == "tokens" or fmt == "fastq"):
                check_row_sizes(table, data, lengths, where, "the length column says {:,} bases")
    return table, metadata


def _read_shard(out_dir: Path, shard: dict[str, Any], verify: bool,
                columns: list[str] | None = None) -> tuple[Any, dict[str, str]]:
    """A reads shard read (regular file, size, checksum: :func:`read_verified`) and checked
    (:func:`_check_shard`)."""
    return _check_shard(read_verified(out_dir, shard, verify), out_dir, shard, columns)


class _ReadsShard:
    """One parsed reads shard: its columns as arrays and the flat token / quality bytes."""

    def __init__(self, table: Any, metadata: dict[str, str], name: str) -> None:
        self.names = table.column("name").to_pylist()
        self.lengths = table.column("length").to_numpy().astype(np.int64)
        self.starts = np.cumsum(self.lengths) - self.lengths
        self.records = table.column("record").to_numpy().astype(np.int64)
        self.offsets = table.column("offset").to_numpy().astype(np.int64)
        self.rna = table.column("rna").to_numpy(zero_copy_only=False) if "rna" in table.column_names else None
        self.tokens = flat_binary(table.column("tokens"))
        fastq = metadata["omnipos.format"] == "fastq"
        self.qualities = flat_binary(table.column("qualities")) if fastq else None
        self.dtype = getattr(torch, metadata["omnipos.tokens_dtype"])
        used = metadata.get("omnipos.quality_offset")
        self.quality_offset = int(used) if used and "," not in used else None
        self.format = metadata["omnipos.format"]
        self.name = name


class ShardedReadsDataset(ShardedDataset):
    """A lazy, map-style dataset over the shards :func:`precompute_reads` wrote: ``dataset[i]`` is row ``i`` (in
    input order), unpadded, read from its shard on first use; the most recently used shards stay in memory
    (``cache_bytes``). ``dataset.collate`` pads one batch of items, so iterating a job costs a few shards and one
    batch of memory, not the job padded to its longest read.

    Works in a ``torch.utils.data.DataLoader`` with workers (``collate_fn=dataset.collate``): the dataset pickles
    without its cache and each worker opens the shards it reads. Shuffle with
    ``sampler=dataset.sampler(shuffle=True, seed=...)``, not ``shuffle=True`` (which reads a shard for almost
    every item once the shards outgrow the cache).

    Args:
        out_dir: the output folder of a finished :func:`precompute_reads` job.
        max_len, truncation: a read longer than ``max_len`` is an error when read (``"error"``, the default),
            keeps its first / last ``max_len`` bases (``"head"`` / ``"tail"``) or is cut into windows of
            ``max_len`` that are items of their own (``"split"``; the index then reads every shard's lengths).
        positional: ``collate`` attaches the job's RC-symmetric encoding (when its ``dim > 0``).
        verify: check each shard's sha256 against the manifest when it is read (its being a regular file, its
            size, item count and structure are checked whatever ``verify`` says; shards the index needs, MEDS
            vocabularies or lengths to cut, are read and checked when the dataset is built).
        cache_bytes, cache_shards: the parsed shards kept in memory: their size (default 256 MiB per process)
            and / or count (see :class:`omnipos.scale.sharded.ShardedDataset`).

    Items are dicts, those of :class:`omnipos.dna.FastxDataset`: ``{"name": str, "tokens": [L] (the job's token
    dtype), "quality": [L] uint8 Phred or None (FASTA), "record": int, "offset": int (where the row starts in its
    record), "rna": bool or None, "quality_offset": int or None, "quality_encoding": str or None}``.
    """

    kind = KIND
    what = "reads"
    meta_schema = META
    parsed_per_file_byte = 4.0  # zstd packs 4-letter tokens ~4x; names become Python strings

    def __init__(self, out_dir: str | os.PathLike, *, max_len: int | None = None, truncation: str = "error",
                 positional: bool = True, verify: bool = True, cache_shards: int | None = None,
                 cache_bytes: int | None = None) -> None:
        super().__init__(out_dir, verify=verify, cache_shards=cache_shards, cache_bytes=cache_bytes)
        self.max_len = check_truncation(max_len, truncation)
        self.truncation = truncation
        self.positional = bool(positional)
        self.config = dict(self.manifest.meta["config"])
        self.quality_encoding = self.config.get("read_options", {}).get("quality_encoding", "phred")
        if truncation == "split":  # each shard read and checked (its lengths against its tokens) one at a time
            lengths = np.concatenate(
                [_read_shard(self.out_dir, shard, self.verify, ["length", "tokens"])[0].column("length").to_numpy()
                 for shard in self.shards] or [np.zeros(0, np.int64)])
            self._select(None, row_windows(lengths, self.max_len, truncation, str))

    def _parse(self, payload: bytes, index: int) -> _ReadsShard:
        shard = self.shards[index]
        return _ReadsShard(*_check_shard(payload, self.out_dir, shard), shard["name"])

    def _item(self, shard: _ReadsShard, row: int, start: int | None, size: int | None) -> dict[str, Any]:
        length = int(shard.lengths[row])
        if start is None:
            start, size = cut(length, self.max_len, self.truncation,
                              lambda: f"{self.out_dir / shard.name}: read {row} ({shard.names[row]!r})")
        begin = int(shard.starts[row]) + start
        tokens = torch.from_numpy(shard.tokens[begin:begin + size].copy()).to(shard.dtype)
        quality = None if shard.qualities is None else torch.from_numpy(shard.qualities[begin:begin + size].copy())
        return {"name": shard.names[row], "tokens": tokens, "quality": quality, "record": int(shard.records[row]),
                "offset": int(shard.offsets[row]) + start,
                "rna": None if shard.rna is None else bool(shard.rna[row]),
                "quality_offset": shard.quality_offset,
                "quality_encoding": self.quality_encoding if quality is not None else None}

    def collate(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Items -> one padded batch, a dict with the keys of :func:`load_reads` (``positional`` when the job's
        ``dim > 0`` and ``positional=True``)."""
        batch = collate_reads(items)
        result: dict[str, Any] = {"names": batch.names, "tokens": batch.tokens, "mask": batch.mask,
                                  "lengths": batch.lengths, "qualities": batch.qualities, "records": batch.records,
                                  "offsets": batch.offsets, "config": self.config}
        if batch.rna is not None:
            result["rna"] = batch.rna
        if self.positional and self.config["dim"]:
            result["positional"] = rc_symmetric_encoding(batch.lengths, self.config["dim"],
                                                         strand_aware=self.config["strand_aware"])
        return result
