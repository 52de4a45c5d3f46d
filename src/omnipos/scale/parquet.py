"""pyarrow integration (extras ``[scale]`` / ``[clinical]``): the Parquet shards of reads and MEDS timelines.

The only module of :mod:`omnipos.scale` that imports pyarrow, and only when called. Ragged data (the bases of each
read, the events of each subject) is stored without padding: a flat NumPy buffer plus per-row lengths becomes
one Arrow binary or list column, and comes back as the flat buffer in one copy, with no Python object per value.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from omnipos.core import require

__all__ = ["require_pyarrow", "column", "binary_column", "list_column", "null_binary_column", "to_parquet",
           "read_parquet", "read_frame", "flat_binary", "flat_list", "read_shard_table", "row_sizes", "check_row_sizes"]


def require_pyarrow():
    """Return ``pyarrow`` (with ``pyarrow.parquet`` loaded), or raise ImportError naming the extra."""
    require("pyarrow.parquet", "scale", "Parquet shards")
    return require("pyarrow", "scale", "Parquet shards")


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def column(values: Any, dtype: str | None = None) -> Any:
    """An Arrow array of ``values`` (``dtype``: an Arrow type name such as ``"string"``, ``"int64"``; None
    infers it)."""
    pa = require_pyarrow()
    return pa.array(values, None if dtype is None else getattr(pa, dtype)())


def binary_column(flat: np.ndarray, lengths: np.ndarray) -> Any:
    """Rows of ``lengths[i]`` bytes cut from the uint8 buffer ``flat``, as one large_binary array (no copy)."""
    pa = require_pyarrow()
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(lengths),
                                            [None, pa.py_buffer(_offsets(lengths)), pa.py_buffer(flat)])


def null_binary_column(count: int) -> Any:
    """``count`` nulls of the large_binary type (FASTA reads have no qualities)."""
    pa = require_pyarrow()
    return pa.nulls(count, pa.large_binary())


def list_column(flat: np.ndarray, lengths: np.ndarray, dtype: str) -> Any:
    """Rows of ``lengths[i]`` values cut from ``flat``, as one large_list array of ``dtype`` (an Arrow type name)."""
    pa = require_pyarrow()
    return pa.LargeListArray.from_arrays(pa.array(_offsets(lengths)), column(flat, dtype))


def to_parquet(columns: dict[str, Any], metadata: dict[str, str]) -> bytes:
    """One Parquet file (zstd) of Arrow ``columns`` with key-value ``metadata``, as bytes."""
    pa = require_pyarrow()
    table = pa.table(columns).replace_schema_metadata(metadata)
    buffer = io.BytesIO()
    pa.parquet.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def read_parquet(payload: bytes) -> tuple[Any, dict[str, str]]:
    """The Arrow table of a Parquet file's bytes, and its key-value metadata as strings."""
    pa = require_pyarrow()
    table = pa.parquet.read_table(pa.BufferReader(payload))
    metadata = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    return table, metadata


def read_frame(path: str, columns: list[str]) -> Any:
    """``columns`` of the Parquet file at ``path`` as a pandas DataFrame (a MEDS data shard)."""
    pa = require_pyarrow()
    return pa.parquet.read_table(path, columns=columns).to_pandas()


def read_columns(path: str | Path, columns: list[str]) -> tuple[Any, dict[str, str]]:
    """Only ``columns`` of the Parquet file at ``path`` (the other column chunks are not read; a column the file
    lacks is left out), and its key-value metadata: what a lazy dataset reads of every shard to build its index."""
    pa = require_pyarrow()
    present = set(pa.parquet.read_schema(path).names)
    table = pa.parquet.read_table(path, columns=[c for c in columns if c in present])
    metadata = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    return table, metadata


def empty_frame(path: str | Path, columns: list[str]) -> Any:
    """``columns`` of the Parquet file at ``path`` with no rows (its schema only, no data read), as pandas."""
    pa = require_pyarrow()
    return pa.parquet.read_schema(path).empty_table().select(columns).to_pandas()


def flat_binary(chunked: Any) -> np.ndarray:
    """The concatenated bytes of a (chunked) binary column, row after row, as uint8."""
    parts = []
    for chunk in chunked.chunks:
        offsets = np.frombuffer(chunk.buffers()[1], np.int64)[chunk.offset:chunk.offset + len(chunk) + 1]
        data = chunk.buffers()[2]
        if data is not None and len(offsets):
            parts.append(np.frombuffer(data, np.uint8)[offsets[0]:offsets[-1]])
    return np.concatenate(parts) if parts else np.zeros(0, np.uint8)


def flat_list(chunked: Any) -> np.ndarray:
    """The concatenated values of a (chunked) list column, row after row."""
    parts = [chunk.flatten().to_numpy(zero_copy_only=False) for chunk in chunked.chunks]
    return np.concatenate(parts) if parts else np.zeros(0)


def _type_is(pa: Any, dtype: Any, kind: str) -> bool:
    types = pa.types
    if kind == "any":
        return True
    if kind == "string":
        return types.is_string(dtype) or types.is_large_string(dtype)
    if kind == "large_binary":
        return types.is_large_binary(dtype)
    if kind.startswith("large_list<"):
        return types.is_large_list(dtype) and str(dtype.value_type) == kind[len("large_list<"):-1]
    return str(dtype) == kind


def read_shard_table(payload: bytes, where: str, schema: dict[str, str], items: int, columns: list[str] | None = None,
                     metadata_keys: tuple[str, ...] = ()) -> tuple[Any, dict[str, str]]:
    """A shard's Parquet bytes (already size- and checksum-checked) as an Arrow table of ``columns`` (None: all)
    and its key-value metadata, its structure checked against what the job writes: ``items`` rows (the
    manifest's count), every column of ``schema`` (name -> Arrow type: ``"int64"``, ``"string"``,
    ``"large_binary"``, ``"large_list<double>"``, ``"any"``; a name ending in ``?`` is optional; a type ending
    in ``?`` may hold nulls) of that type, and the ``metadata_keys``. Every failure, pyarrow's own included, is
    a ValueError starting with ``where`` (the file and its manifest entry); nothing beyond the footer is read
    before the row count and the schema are checked."""
    pa = require_pyarrow()
    try:
        file = pa.parquet.ParquetFile(pa.BufferReader(payload))
        arrow_schema, rows = file.schema_arrow, file.metadata.num_rows
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError alike for a damaged file
        raise ValueError(f"{where}: not a readable Parquet file ({type(exc).__name__}: {exc})") from None
    if rows != items:
        raise ValueError(f"{where}: the shard holds {rows:,} rows, the manifest records {items:,} items")
    for name, kind in schema.items():
        optional, name = name.endswith("?"), name.rstrip("?")
        if name not in arrow_schema.names:
            if optional:
                continue
            raise ValueError(f"{where}: the shard has no {name!r} column (its columns: "
                             f"{', '.join(arrow_schema.names)})")
        dtype = arrow_schema.field(name).type
        if not _type_is(pa, dtype, kind.rstrip("?")):
            raise ValueError(f"{where}: the shard's {name!r} column is {dtype}, expected {kind.rstrip('?')}")
    try:
        metadata = {k.decode(): v.decode() for k, v in (arrow_schema.metadata or {}).items()}
    except UnicodeDecodeError:
        raise ValueError(f"{where}: the shard's metadata is not UTF-8 text") from None
    for key in metadata_keys:
        if key not in metadata:
            raise ValueError(f"{where}: the shard's metadata lacks {key!r} (not a shard this job wrote)")
    try:
        table = file.read(columns=columns)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{where}: the shard's data cannot be read ({type(exc).__name__}: {exc})") from None
    if table.num_rows != items:
        raise ValueError(f"{where}: the shard holds {table.num_rows:,} rows, the manifest records {items:,} items")
    for name, kind in schema.items():
        name = name.rstrip("?")
        if name in table.column_names and not kind.endswith("?") and table.column(name).null_count:
            raise ValueError(f"{where}: the shard's {name!r} column has missing values")
    return table, metadata


def row_sizes(chunked: Any) -> np.ndarray:
    """The per-row sizes of a (chunked) binary or list column, from its offsets (no values copied)."""
    parts = []
    for chunk in chunked.chunks:
        offsets = np.frombuffer(chunk.buffers()[1], np.int64)[chunk.offset:chunk.offset + len(chunk) + 1]
        parts.append(np.diff(offsets) if len(offsets) else np.zeros(0, np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def check_row_sizes(table: Any, data: str, lengths: np.ndarray, where: str, counted: str) -> None:
    """Every row of the list / binary column ``data`` holds ``lengths`` values (as the shard's own count
    ``counted`` says, e.g. "length says 12 events"); ValueError naming the shard (``where``) and the first bad row."""
    sizes = row_sizes(table.column(data))
    bad = np.flatnonzero(sizes != lengths)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{where}: row {i}: {counted.format(int(lengths[i]))}, its {data} hold {int(sizes[i]):,}")
