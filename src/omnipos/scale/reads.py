"""FASTA/FASTQ files to Parquet shards of encoded reads: :func:`precompute_reads`, :func:`load_reads`.

Each input file is a unit of work: one worker parses it with :func:`omnipos.dna.read_fastx` (gzip or plain,
dnaio when installed) and writes shards of ``shard_size`` reads, ``reads-UUUUU-PPPPP.parquet``, with the columns

- ``name`` (string), ``length`` (int64),
- ``tokens`` (binary: one byte per base, the :func:`omnipos.dna.encode` token ids),
- ``qualities`` (binary: Phred scores, one byte per base; null for FASTA).

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

from omnipos.core import check_positive_int, lengths_to_mask, pad_packed
from omnipos.dna import PAD, rc_symmetric_encoding, read_fastx

from .engine import make_engine
from .job import PrecomputeResult, file_units, run_job
from .manifest import Manifest, read_verified
from .parquet import binary_column, column, flat_binary, null_binary_column, read_parquet, require_pyarrow, to_parquet
from .shards import ShardWriter

__all__ = ["precompute_reads", "load_reads"]

KIND = "reads"
ENCODING = "omnipos.dna.rc_symmetric_encoding"


def precompute_reads(
    paths: Any,
    out_dir: str | os.PathLike,
    *,
    dim: int = 16,
    strand_aware: bool = False,
    engine: str = "local",
    address: str | None = None,
    num_cpus: int | None = None,
    shard_size: int = 100_000,
    batch_size: int = 8192,
    resume: bool = True,
    overwrite: bool = False,
    progress: Any = True,
    **read_options: Any,
) -> PrecomputeResult:
    """Parse and encode FASTA/FASTQ files (plain or gzip) into Parquet shards in ``out_dir``.

    Args:
        paths: a file or a list of files; each is one unit of work (give many files to use many workers).
        out_dir: output folder (``reads-*.parquet`` and ``manifest.jsonl``); on a cluster, a shared folder.
        dim, strand_aware: the positional encoding :func:`load_reads` attaches (``dim=0``: none), see
            :func:`omnipos.dna.rc_symmetric_encoding`.
        engine, address, num_cpus: where the files run, see :func:`omnipos.scale.make_engine`.
        shard_size: reads per output shard (>= 1). batch_size: reads parsed at a time (output unchanged).
        resume, overwrite, progress: as in :func:`omnipos.scale.precompute_graphs`.
        **read_options: passed to :func:`omnipos.dna.read_fastx` (``ambiguity``, ``lowercase``, ``parser``,
            ``quality_offset``, ...).

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
        if not isinstance(path, Path) or not path.is_file():
            raise FileNotFoundError(f"paths: no such file {str(path)!r}")
    read_fastx(files[0], batch_size=batch_size, **read_options)  # refuses unknown or bad options before any work
    require_pyarrow()
    units, inputs = file_units(files)
    config = {"dim": dim, "strand_aware": bool(strand_aware), "encoding": ENCODING,
              "read_options": {k: read_options[k] for k in sorted(read_options)}}
    job = {"kind": KIND, "inputs": inputs, "shard_size": shard_size, "options": config}
    body = partial(_reads_unit, files=[str(p) for p in files], shard_size=shard_size, batch_size=batch_size,
                   read_options=read_options)
    return run_job(KIND, out_dir, job, units, body, "parquet", engine=engine_, resume=resume,
                   overwrite=overwrite, progress=progress, meta={"config": config})


class _Pending:
    """Reads parsed but not yet written: names, lengths, and the flat token / quality bytes."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.lengths: list[np.ndarray] = []
        self.tokens: list[np.ndarray] = []
        self.qualities: list[np.ndarray] | None = []
        self.tokens_dtype: str | None = None

    def add(self, batch: Any) -> None:
        # NumPy, not torch: boolean indexing of a [8192, 150] batch took 9 ms in NumPy, 78 ms in torch
        tokens, mask = batch.tokens.cpu().numpy(), batch.mask.cpu().numpy()
        if tokens.size and tokens.dtype != np.uint8 and (tokens.min() < 0 or tokens.max() > 255):
            raise ValueError(f"token ids outside 0..255 cannot be stored one byte per base (got "
                             f"{tokens.min()}..{tokens.max()})")
        self.tokens_dtype = str(batch.tokens.dtype).removeprefix("torch.")
        self.names += batch.names
        self.lengths.append(batch.lengths.cpu().numpy().astype(np.int64))
        self.tokens.append(_unpad(tokens, mask))
        if batch.qualities is None:
            self.qualities = None
        elif self.qualities is not None:
            self.qualities.append(_unpad(batch.qualities.cpu().numpy(), mask))

    def __len__(self) -> int:
        return len(self.names)

    def take(self, count: int) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray | None]:
        """The first ``count`` reads, removed from the buffer."""
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        tokens = np.concatenate(self.tokens) if self.tokens else np.zeros(0, np.uint8)
        qualities = None if self.qualities is None else (
            np.concatenate(self.qualities) if self.qualities else np.zeros(0, np.uint8))
        cut = int(lengths[:count].sum())
        names, self.names = self.names[:count], self.names[count:]
        self.lengths, self.tokens = [lengths[count:]], [tokens[cut:]]
        if qualities is not None:
            self.qualities = [qualities[cut:]]
        return names, lengths[:count], tokens[:cut], None if qualities is None else qualities[:cut]


def _unpad(padded: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The real values of a padded ``[B, L]`` batch, row after row, as uint8."""
    if mask.all():  # reads of one length (the usual short-read run): no gather at all
        return padded.astype(np.uint8, copy=False).reshape(-1)
    return padded.astype(np.uint8, copy=False)[mask]


def _parquet(names: list[str], lengths: np.ndarray, tokens: np.ndarray, qualities: np.ndarray | None,
             tokens_dtype: str) -> bytes:
    quality_column = (binary_column(qualities, lengths) if qualities is not None
                      else null_binary_column(len(names)))
    return to_parquet({"name": column(names, "string"), "length": column(lengths, "int64"),
                       "tokens": binary_column(tokens, lengths), "qualities": quality_column},
                      {"omnipos.tokens_dtype": tokens_dtype,
                       "omnipos.format": "fastq" if qualities is not None else "fasta"})


def _reads_unit(unit: int, payload: None, writer: ShardWriter, *, files: list[str], shard_size: int,
                batch_size: int, read_options: dict[str, Any]) -> None:
    """Parse one file and write its shards of ``shard_size`` reads."""
    path = files[unit]
    pending = _Pending()

    def write(count: int) -> None:
        names, lengths, tokens, qualities = pending.take(count)
        writer.write(_parquet(names, lengths, tokens, qualities, pending.tokens_dtype or "int64"), len(names))

    done = 0
    try:
        for batch in read_fastx(path, batch_size=batch_size, **read_options):
            pending.add(batch)
            done += len(batch)
            while len(pending) >= shard_size:
                write(shard_size)
    except (EOFError, zlib.error, OSError) as exc:  # a truncated or damaged gzip stream
        raise ValueError(f"{path}: record {done + 1} or later: the file is damaged or truncated "
                         f"({type(exc).__name__}: {exc})") from None
    if len(pending):
        write(len(pending))


def load_reads(out_dir: str | os.PathLike, *, positional: bool = True, verify: bool = True) -> dict[str, Any]:
    """Every read :func:`precompute_reads` wrote to ``out_dir``, in input order, as one padded batch.

    Returns:
        A dict with the keys of ``omnipos dna featurize``'s output: ``names`` (N strings), ``tokens [N, L]``
        (the dtype :func:`omnipos.dna.read_fastx` gave, ``PAD`` past each read), ``mask [N, L]`` bool,
        ``lengths [N]`` int64, ``qualities [N, L]`` uint8 (0 at pads; None for FASTA), ``positional
        [N, L, dim]`` float32 (:func:`omnipos.dna.rc_symmetric_encoding`; only when the job's ``dim > 0`` and
        ``positional=True``) and ``config``.
    """
    manifest = Manifest.read(out_dir, KIND)
    names: list[str] = []
    lengths, tokens, qualities, formats, dtypes = [], [], [], {}, set()
    for shard in manifest.shards():
        table, metadata = read_parquet(read_verified(manifest.out_dir, shard, verify))
        formats.setdefault(metadata.get("omnipos.format", "?"), shard["name"])
        dtypes.add(metadata.get("omnipos.tokens_dtype", "int64"))
        names += table.column("name").to_pylist()
        lengths.append(table.column("length").to_numpy())
        tokens.append(flat_binary(table.column("tokens")))
        if table.column("qualities").null_count < table.num_rows:
            qualities.append(flat_binary(table.column("qualities")))
    if len(formats) > 1:
        raise ValueError(f"{out_dir} mixes FASTA and FASTQ shards ({formats.get('fasta')} and "
                         f"{formats.get('fastq')}); precompute them into separate folders")
    all_lengths = torch.from_numpy(np.concatenate(lengths)) if lengths else torch.zeros(0, dtype=torch.long)
    mask = lengths_to_mask(all_lengths)
    dtype = getattr(torch, dtypes.pop()) if dtypes else torch.int64
    flat = torch.from_numpy(np.concatenate(tokens)) if tokens else torch.zeros(0, dtype=torch.uint8)
    config = dict(manifest.meta["config"])
    result: dict[str, Any] = {
        "names": names,
        "tokens": pad_packed(flat.to(dtype), mask, PAD),
        "mask": mask,
        "lengths": all_lengths,
        "qualities": pad_packed(torch.from_numpy(np.concatenate(qualities)), mask, 0) if qualities else None,
        "config": config,
    }
    if positional and config["dim"]:
        result["positional"] = rc_symmetric_encoding(all_lengths, config["dim"],
                                                     strand_aware=config["strand_aware"])
    return result
