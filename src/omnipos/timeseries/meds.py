"""MEDS data on disk (extra ``[clinical]``): the Parquet shards a source names, the subjects of a split, and the
shards read into one Arrow table. :meth:`omnipos.timeseries.EventBatch.from_parquet` builds on it.

A MEDS root is a folder holding ``data/`` (``data/**/*.parquet``, columns ``subject_id``, ``time``, ``code``,
``numeric_value``) beside ``metadata/`` (``dataset.json``, ``codes.parquet``, ``subject_splits.parquet``).
pyarrow is imported here only, when first needed.
"""

from __future__ import annotations

import glob as _glob
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core import require

__all__ = ["meds_root", "parquet_files", "split_subjects", "read_meds_table"]


def _require_pyarrow() -> Any:
    for module in ("pyarrow.compute", "pyarrow.parquet"):
        require(module, "clinical", "reading Parquet")
    return require("pyarrow", "clinical", "reading Parquet")


def meds_root(path: Path) -> bool:
    """True for a MEDS root: a folder holding a ``data/`` folder."""
    return path.is_dir() and (path / "data").is_dir()


def parquet_files(source: Any) -> tuple[list[Path], Path | None]:
    """The Parquet files a source names, sorted, and the MEDS root when the source is one."""
    if isinstance(source, (list, tuple)):
        if not source:
            raise ValueError("the list of Parquet files is empty")
        files = [Path(p) for p in source]
        for f in files:
            if not f.is_file():
                raise FileNotFoundError(f"no Parquet file at {f}")
        return files, None
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"path must be a MEDS root, a folder, a file, a glob or a list of files, got "
                        f"{type(source).__name__}")
    text = os.fspath(source)
    if any(ch in text for ch in "*?[") and not Path(text).exists():
        files = sorted(Path(p) for p in _glob.glob(text, recursive=True) if Path(p).is_file())
        if not files:
            raise FileNotFoundError(f"no Parquet file matches {text!r}")
        return files, None
    path = Path(text)
    if not path.exists():
        raise FileNotFoundError(f"no Parquet file or folder at {path}")
    if path.is_file():
        return [path], None
    root = path if meds_root(path) else None
    files = sorted((path / "data" if root else path).rglob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"no *.parquet files under {path / 'data' if root else path}")
    return files, root


def split_subjects(root: Path | None, split: str | Sequence[str], subject: str) -> list[Any]:
    """Subject ids of one or more named splits from ``metadata/subject_splits.parquet``."""
    pa = _require_pyarrow()
    if root is None:
        raise ValueError("split= needs a MEDS root (a folder with data/ and metadata/subject_splits.parquet)")
    names = [split] if isinstance(split, str) else list(split)
    where = root / "metadata" / "subject_splits.parquet"
    if not where.is_file():
        raise FileNotFoundError(f"split={split!r} needs {where}, which does not exist")
    table = pa.parquet.read_table(where)
    if "split" not in table.column_names or subject not in table.column_names:
        raise ValueError(f"{where} must have columns {subject!r} and 'split', has {table.column_names}")
    splits = table["split"].cast(pa.string())
    known = sorted(set(splits.to_pylist()))
    for name in names:
        if name not in known:
            raise ValueError(f"split {name!r} is not in {where}; its splits: {known}")
    return table[subject].filter(pa.compute.is_in(splits, value_set=pa.array(names))).to_pylist()


def read_meds_table(source: Any, columns: list[str], subject: str,
                    split: str | Sequence[str] | None = None) -> tuple[Any, list[str], list[int]]:
    """Read ``columns`` of every shard a source names (see :func:`parquet_files`), only the subjects of ``split``
    when given, into one Arrow table. Also returns each shard's name (relative to the MEDS root when there is one)
    and its number of rows, in table order, so callers can name the shard and row of a bad event."""
    pa = _require_pyarrow()
    files, root = parquet_files(source)
    wanted = None if split is None else split_subjects(root, split, subject)
    tables, names = [], []
    for f in files:
        try:
            table = pa.parquet.read_table(f, columns=columns)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError / KeyError alike
            raise ValueError(f"{f}: cannot read columns {', '.join(columns)} (missing, corrupt or not Parquet): "
                             f"{type(exc).__name__}: {exc}") from None
        if wanted is not None:
            table = table.filter(pa.compute.is_in(table[subject], value_set=pa.array(wanted,
                                                                                      type=table[subject].type)))
        tables.append(table)
        names.append(str(f.relative_to(root)) if root is not None else str(f))
    try:
        merged = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    except pa.ArrowInvalid as exc:
        raise ValueError(f"the Parquet files do not share one schema ({exc}); MEDS shards must (time: "
                         f"timestamp[us], numeric_value: float32)") from None
    return merged, names, [t.num_rows for t in tables]
