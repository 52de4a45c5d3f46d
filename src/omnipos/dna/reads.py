"""FASTA/FASTQ reads, plain or gzip, as batches of tokens: ``read_fastx`` and ``ReadBatch``.

Two parsers give identical batches and identical errors: dnaio (extra ``[dna]``, C speed; ``omnipos.dna.dnaio``)
and a pure-Python one (:mod:`omnipos.dna.fastx`). The format is told by the first character ('@' FASTQ, '>' FASTA), gzip by its
magic bytes, never by the file name. Windows line endings are read like Unix ones; empty reads are reads of length
0. A malformed record (quality and sequence lengths differ, a truncated record, a missing '@' or '+' line, a
character outside the IUPAC alphabet, a non-ASCII byte, a quality below '!') is a ``ValueError`` naming the file
and the record (its number, 1-based, and its name when the header was read). When dnaio rejects a file, the
pure-Python parser re-reads it to name the record the same way.

FASTQ records are the standard four lines (sequence and quality on one line each, as dnaio requires); FASTA
sequences may span lines, blank lines are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..core import check_choice, check_positive_int, pad_packed
from .alphabet import AMBIGUITY_POLICIES, LOWERCASE_POLICIES, InvalidLetterError, encode_joined
from .fastx import RawRecords, detect_format, python_records, record_label

__all__ = ["ReadBatch", "read_fastx", "PARSERS", "detect_format"]

PARSERS = ("auto", "dnaio", "python")


@dataclass
class ReadBatch:
    """A batch of reads.

    Attributes:
        names: B header lines (without '@' / '>').
        tokens: ``[B, L]`` int64 token ids (``omnipos.dna.encode``), ``PAD`` past each read.
        mask: ``[B, L]`` bool, True at real bases.
        lengths: ``[B]`` int64 read lengths.
        qualities: FASTQ only: ``[B, L]`` uint8 Phred scores (ASCII - offset), 0 at pads; None for FASTA.
    """

    names: list[str]
    tokens: torch.Tensor
    mask: torch.Tensor
    lengths: torch.Tensor
    qualities: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.names)

    def to(self, device: torch.device | str) -> ReadBatch:
        """The same batch with its tensors on ``device``."""
        return ReadBatch(self.names, self.tokens.to(device), self.mask.to(device), self.lengths.to(device),
                         None if self.qualities is None else self.qualities.to(device))

    def __repr__(self) -> str:
        kind = "FASTQ" if self.qualities is not None else "FASTA"
        return f"ReadBatch({len(self)} {kind} reads, tokens {tuple(self.tokens.shape)})"


def _join(parts: Sequence[str] | Sequence[bytes]) -> bytes:
    if parts and isinstance(parts[0], str):
        return "".join(parts).encode("ascii", errors="replace")  # a non-ASCII letter becomes '?', refused below
    return b"".join(parts)


def assemble(path: Path, raw: RawRecords, *, ambiguity: str, lowercase: str, quality_offset: int) -> ReadBatch:
    """Raw records -> ReadBatch (shared by both parsers, so both validate and encode alike)."""
    lengths = np.fromiter(map(len, raw.sequences), dtype=np.int64, count=len(raw.sequences))
    try:
        tokens, mask = encode_joined(_join(raw.sequences), lengths, ambiguity=ambiguity, lowercase=lowercase)
    except InvalidLetterError as exc:
        raise ValueError(f"{record_label(path, raw.first + exc.index, raw.names[exc.index])}: {exc.detail}") from None
    qualities = None
    if raw.qualities is not None:
        scores = np.frombuffer(_join(raw.qualities), dtype=np.uint8)
        if scores.size and (scores.min() < quality_offset or scores.max() > 126):
            flat = int(np.flatnonzero((scores < quality_offset) | (scores > 126))[0])
            index = int(np.searchsorted(np.cumsum(lengths), flat, side="right"))
            position = flat - int(lengths[:index].sum())
            raise ValueError(f"{record_label(path, raw.first + index, raw.names[index])}: quality character "
                             f"{chr(scores[flat])!r} at position {position} is outside "
                             f"{chr(quality_offset)!r}..'~' (Phred offset {quality_offset})")
        qualities = pad_packed(torch.from_numpy(scores - np.uint8(quality_offset)), mask, 0)
    return ReadBatch(raw.names, tokens, mask, torch.from_numpy(lengths), qualities)


def _resolve_parser(parser: str) -> str:
    check_choice(parser, "parser", PARSERS)
    if parser == "python":
        return parser
    try:
        from .dnaio import require_dnaio

        require_dnaio()
    except ImportError:
        if parser == "dnaio":
            raise
        return "python"
    return "dnaio"


def read_fastx(
    path: str | os.PathLike,
    *,
    batch_size: int = 1024,
    ambiguity: str = "keep",
    lowercase: str = "soft_mask",
    parser: str = "auto",
    quality_offset: int = 33,
) -> Iterator[ReadBatch]:
    """Read a FASTA or FASTQ file (plain or gzip) in batches of encoded reads.

    Args:
        path: the file; format from its first character, compression from its magic bytes.
        batch_size: reads per batch (the last one may be smaller).
        ambiguity, lowercase: the alphabet policies of :func:`omnipos.dna.encode`.
        parser: ``"auto"`` (dnaio when installed, else pure Python), ``"dnaio"`` (ImportError naming the
            ``[dna]`` extra when missing) or ``"python"``. Both give identical batches and errors.
        quality_offset: Phred ASCII offset of FASTQ qualities (33, Sanger / Illumina 1.8+).

    Yields:
        :class:`ReadBatch` objects; ``qualities`` is None for FASTA.

    Raises:
        ValueError: a malformed record (named by file, number and name), a file that is neither FASTA nor FASTQ.
        FileNotFoundError: no such file.
    """
    path = Path(path)
    batch_size = check_positive_int(batch_size, "batch_size")
    check_choice(ambiguity, "ambiguity", AMBIGUITY_POLICIES)
    check_choice(lowercase, "lowercase", LOWERCASE_POLICIES)
    quality_offset = check_positive_int(quality_offset, "quality_offset")
    engine = _resolve_parser(parser)
    if not path.is_file():
        raise FileNotFoundError(f"path: no such file {str(path)!r}")
    return _read(path, batch_size, ambiguity, lowercase, engine, quality_offset)


def _read(path: Path, batch_size: int, ambiguity: str, lowercase: str, engine: str,
          quality_offset: int) -> Iterator[ReadBatch]:
    fmt = detect_format(path)
    if fmt is None:
        return
    if engine == "dnaio":
        from .dnaio import dnaio_records

        source = dnaio_records(path, fmt, batch_size)
    else:
        source = python_records(path, fmt, batch_size)
    for raw in source:
        yield assemble(path, raw, ambiguity=ambiguity, lowercase=lowercase, quality_offset=quality_offset)
