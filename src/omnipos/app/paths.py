"""Where the commands write: one ``-o/--output`` flag for every command, and the checks that an output path can be
written, made before any work (a whole file parsed, then a ``torch.save`` traceback, is what they replace)."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

__all__ = ["add_output_argument", "check_output_file", "check_output_folder"]


def add_output_argument(parser: argparse.ArgumentParser, help: str, *, default: str | None = None) -> None:
    """``-o/--output`` (``--out`` too, its older spelling), required unless a ``default`` is given."""
    parser.add_argument("-o", "--output", "--out", dest="output", required=default is None, default=default,
                        help=help)


def _probe(folder: Path, what: str) -> None:
    """Refuse a folder this process cannot create files in (a temporary file is made and removed at once)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ValueError(f"{what}: cannot write in {str(folder)!r} ({exc.strerror or exc})") from None


def check_output_file(path: str | os.PathLike, what: str = "-o/--output") -> Path:
    """A file path that can be written: not a folder, in an existing folder this process can write in."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what}: {str(path)!r} is a folder; give a file name in it, e.g. "
                         f"{str(path / 'reads.pt')!r}")
    if path.exists() and not path.is_file():
        raise ValueError(f"{what}: {str(path)!r} exists and is not a regular file")
    parent = path.parent
    if not parent.is_dir():
        raise ValueError(f"{what}: the folder {str(parent)!r} does not exist" if not parent.exists() else
                         f"{what}: {str(parent)!r} is not a folder")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{what}: {str(path)!r} is not writable")
    _probe(parent, what)
    return path


def check_output_folder(path: str | os.PathLike, what: str = "-o/--output") -> Path:
    """An output folder that exists or can be created: not a file, under a folder this process can write in."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what}: {str(path)!r} exists and is not a folder")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{what}: {str(existing)!r} is not a folder")
    _probe(existing, what)
    return path
