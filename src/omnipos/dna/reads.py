"""FASTA/FASTQ reads, plain or gzip, as batches of tokens: ``read_fastx`` and ``ReadBatch``.

The parsers give identical batches and identical errors: dnaio (extra ``[dna]``, C speed; ``omnipos.dna.dnaio``),
a pure-Python one (:mod:`omnipos.dna.fastx`, the reference: its docstring states the format rules) and, under
``parser="auto"`` where numba is installed (extra ``[fast]``), the block parser for plain 4-line FASTQ
(:mod:`omnipos.dna.fastq_blocks`: joined arrays of token ids and qualities, no Python object per sequence). The
fast paths read what they can; whatever they refuse is re-read by dnaio (from the start) or the reference (from
where they stopped, which has the last word on every error).

The format is told by the first significant character ('@' FASTQ, '>' FASTA), gzip by its magic bytes, never by
the file name. A malformed record (quality and sequence lengths differ, a truncated record, a missing '@' or '+'
line, a character outside the IUPAC alphabet, a non-ASCII byte, a quality character outside the offset's range)
is a ``ValueError`` naming the file and the record (its number, 1-based, and its name when the header was read)
and pointing at the bad character; a damaged gzip stream names the last record read in full.

Policies, all by name:

- ``quality_offset``: 33 (the default; Sanger, Illumina 1.8+: Biopython's "fastq-sanger"), 64 (Illumina 1.3-1.7:
  "fastq-illumina") or ``"auto"``: 33 as soon as a quality character below ``';'`` (59) appears; otherwise, after
  :data:`AUTO_WINDOW` records (or the whole file), 64 when every character is ``'@'`` (64) or above and some is
  above ``'J'`` (74, the top of Phred+33 Illumina); a range that fits both readings is a ValueError asking for
  the offset by name. Every batch says which offset it used (``ReadBatch.quality_offset``).
- ``quality_encoding``: ``"phred"`` or ``"solexa"`` (Biopython's "fastq-solexa": offset 64, Solexa scores
  -5..62 converted to Phred as Biopython does, ``round(10 log10(10^(q/10) + 1))``). Qualities are always Phred.
- ``rna``: ``"error"`` (U refused, saying it is RNA), ``"to_t"`` (U read as T) or ``"keep"`` (U read as T, and
  ``ReadBatch.rna`` flags the reads that had U, so ``decode(..., rna=batch.rna)`` gives them back; a read with
  both T and U is refused).
- ``max_len`` with ``truncation``: a read longer than ``max_len`` is an error (``"error"``, the default), keeps
  its first (``"head"``) or last (``"tail"``) ``max_len`` bases, or is cut into windows of ``max_len``
  (``"split"``, the last one shorter). ``ReadBatch.records`` and ``ReadBatch.offsets`` say where each row
  came from.
- ``token_dtype``: ``torch.uint8`` (default: one byte per base) or a wider integer dtype.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..core import check_positive_int
from .alphabet import (
    PAD,
    InvalidLetterError,
    encode_table,
    length_mask,
    letter_codes,
    pad_rows,
)
from .fastx import RawRecords, check_input_file, detect_format, is_gzip, python_records, record_label
from .limits import check_batch_bytes
from .read_options import (
    PARSERS,
    QUALITY_ENCODINGS,
    QUALITY_OFFSETS,
    READ_RNA_POLICIES,
    TRUNCATIONS,
    ReadOptions,
)

__all__ = [
    "ReadBatch",
    "ReadOptions",
    "read_fastx",
    "read_options",
    "PARSERS",
    "TRUNCATIONS",
    "QUALITY_OFFSETS",
    "QUALITY_ENCODINGS",
    "READ_RNA_POLICIES",
    "QUALITY_FORMATS",
    "AUTO_WINDOW",
    "MAX_TOKENS",
    "token_groups",
    "detect_format",
    "solexa_to_phred",
]

QUALITY_FORMATS = {(33, "phred"): "fastq-sanger", (64, "phred"): "fastq-illumina", (64, "solexa"): "fastq-solexa"}
AUTO_WINDOW = 10_000  # records quality_offset="auto" examines before deciding on the evidence seen
#: Default ``max_tokens`` of :func:`read_fastx`: padded positions (rows x longest) per batch, ~4.2 million
#: (tokens, mask and qualities: ~13 MB at one byte each), far above a batch of 8,192 short reads.
MAX_TOKENS = 1 << 22
#: A batch this small (padded positions) is never cut for its padding alone.
MIN_GROUP_TOKENS = 1 << 16
_SOLEXA_OFFSET, _SOLEXA_MIN = 64, -5


def solexa_to_phred(solexa: Any) -> Any:
    """Biopython's ``phred_quality_from_solexa`` rounded as its Solexa-to-Sanger conversion does:
    ``round(10 * log10(10 ** (q / 10) + 1))``, for an int or an array of ints."""
    return np.round(10.0 * np.log10(np.power(10.0, np.asarray(solexa, dtype=np.float64) / 10.0) + 1.0))


# Quality character -> Phred score under Solexa scaling (255 = not a Solexa character).
_SOLEXA_TABLE = np.full(256, 255, dtype=np.uint8)
_SOLEXA_TABLE[_SOLEXA_OFFSET + _SOLEXA_MIN:127] = solexa_to_phred(np.arange(_SOLEXA_MIN, 127 - _SOLEXA_OFFSET))


@dataclass
class ReadBatch:
    """A batch of reads.

    Attributes:
        names: B record names (header lines without '@' / '>' and trailing whitespace).
        tokens: ``[B, L]`` token ids (``omnipos.dna.encode``; uint8 unless ``token_dtype`` said otherwise),
            ``PAD`` past each read.
        mask: ``[B, L]`` bool, True at real bases.
        lengths: ``[B]`` int64 read lengths.
        qualities: FASTQ only: ``[B, L]`` uint8 Phred scores, 0 at pads; None for FASTA.
        records: ``[B]`` int64, the 0-based number of each row's record in its file (rows of one record share it
            with ``truncation="split"``).
        offsets: ``[B]`` int64, where each row starts within its record (0 unless truncated or split).
        rna: ``[B]`` bool with ``rna="keep"``: True for reads that had U (pass it to ``decode``); else None.
        quality_offset: the Phred ASCII offset used (33 or 64; None for FASTA).
        quality_encoding: ``"phred"`` or ``"solexa"`` (converted to Phred; None for FASTA).
    """

    names: list[str]
    tokens: torch.Tensor
    mask: torch.Tensor
    lengths: torch.Tensor
    qualities: torch.Tensor | None = None
    records: torch.Tensor | None = None
    offsets: torch.Tensor | None = None
    rna: torch.Tensor | None = None
    quality_offset: int | None = None
    quality_encoding: str | None = field(default=None)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def quality_format(self) -> str | None:
        """Biopython's name of the quality format read: ``"fastq-sanger"``, ``"fastq-illumina"``,
        ``"fastq-solexa"`` (None for FASTA)."""
        if self.quality_offset is None:
            return None
        return QUALITY_FORMATS[self.quality_offset, self.quality_encoding or "phred"]

    def to(self, device: torch.device | str) -> ReadBatch:
        """The same batch with its tensors on ``device``."""
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return ReadBatch(self.names, self.tokens.to(device), self.mask.to(device), self.lengths.to(device),
                         move(self.qualities), move(self.records), move(self.offsets), move(self.rna),
                         self.quality_offset, self.quality_encoding)

    def __repr__(self) -> str:
        kind = f"FASTQ ({self.quality_format})" if self.qualities is not None else "FASTA"
        return f"ReadBatch({len(self)} {kind} reads, tokens {tuple(self.tokens.shape)} {self.tokens.dtype})"


def _quality_bytes(raw: RawRecords) -> np.ndarray | None:
    """The quality characters of a batch joined (uint8), None for FASTA."""
    if raw.packed is not None:
        return raw.packed.scores
    return None if raw.qualities is None else np.frombuffer(_join(raw.qualities), dtype=np.uint8)


def _join(parts: Sequence[str] | Sequence[bytes]) -> bytes:
    if parts and isinstance(parts[0], str):
        return "".join(parts).encode("ascii", errors="replace")  # a non-ASCII letter becomes '?', refused below
    return b"".join(parts)


@dataclass
class _Options:
    """The validated options of one read_fastx call (shared by the parsers and the assembly)."""

    batch_size: int
    max_tokens: int
    bucket_size: int | None
    ambiguity: str
    lowercase: str
    rna: str
    quality_offset: int | str
    quality_encoding: str
    max_len: int | None
    truncation: str
    token_dtype: torch.dtype


@dataclass
class _Quality:
    """The offset in use, and how it was chosen (for messages)."""

    offset: int | None = None
    detected_from: int | None = None  # records examined when "auto" decided


def _windows(lengths: np.ndarray, options: _Options) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The rows ``max_len`` / ``truncation`` make of reads of ``lengths``: (read index, start, length) per row;
    None when every read fits. (``truncation="error"`` is checked by the caller.)"""
    limit = options.max_len
    if limit is None or not lengths.size or int(lengths.max()) <= limit:
        return None
    if options.truncation in ("head", "tail"):
        index = np.arange(lengths.size)
        starts = np.maximum(lengths - limit, 0) if options.truncation == "tail" else np.zeros_like(lengths)
        return index, starts, np.minimum(lengths, limit)
    pieces = np.maximum(-(-lengths // limit), 1)  # ceil(L / max_len) windows, one (empty) row for an empty read
    index = np.repeat(np.arange(lengths.size), pieces)
    first_row = np.cumsum(pieces) - pieces
    starts = (np.arange(index.size) - first_row[index]) * limit
    return index, starts, np.minimum(lengths[index] - starts, limit)


def _gather(values: np.ndarray, lengths: np.ndarray, window: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """The letters (or qualities) of each window, joined: ``values [sum lengths]`` -> ``[sum window lengths]``."""
    index, starts, sizes = window
    read_starts = np.cumsum(lengths) - lengths
    row_starts = read_starts[index] + starts
    offsets = np.repeat(row_starts - (np.cumsum(sizes) - sizes), sizes)
    return values[np.arange(int(sizes.sum())) + offsets]


def _rna_flags(path: Path, raw: RawRecords, data: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per row: True where the read has U/u; a read with both T and U is refused (one flag per read)."""
    is_u = (data == ord("U")) | (data == ord("u"))
    is_t = (data == ord("T")) | (data == ord("t"))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    u_count = np.concatenate([[0], np.cumsum(is_u)])
    t_count = np.concatenate([[0], np.cumsum(is_t)])
    has_u = (u_count[ends] - u_count[starts]) > 0
    has_t = (t_count[ends] - t_count[starts]) > 0
    both = np.flatnonzero(has_u & has_t)
    if both.size:
        i = int(both[0])
        row = data[starts[i]:ends[i]]
        u = int(np.flatnonzero((row == ord("U")) | (row == ord("u")))[0])
        t = int(np.flatnonzero((row == ord("T")) | (row == ord("t")))[0])
        raise ValueError(f"{record_label(path, raw.first + i, raw.names[i])}: has both T (position {t}) and U "
                         f"(position {u}); rna='keep' keeps one RNA flag per read: pass rna='to_t' to read U as T")
    return has_u


def _quality_error(path: Path, raw: RawRecords, lengths: np.ndarray, scores: np.ndarray, bad: np.ndarray,
                   options: _Options, quality: _Quality) -> tuple[int, str]:
    flat = int(np.flatnonzero(bad)[0])
    index = int(np.searchsorted(np.cumsum(lengths), flat, side="right"))
    position = flat - int(lengths[:index].sum())
    char = chr(scores[flat])
    shown = repr(char) if " " <= char <= "~" else f"{char!r} (0x{scores[flat]:02x})"
    if options.quality_encoding == "solexa":
        expected = "';'..'~' (Solexa scores -5..62 at offset 64)"
    else:
        expected = f"{chr(quality.offset)!r}..'~' (Phred offset {quality.offset})"
    how = ""
    if quality.detected_from is not None:
        how = (f"; quality_offset='auto' chose {quality.offset} from the first {quality.detected_from:,} records: "
               "pass quality_offset=33 or 64 by name")
    return index, (f"{record_label(path, raw.first + index, raw.names[index])}: quality character {shown} at position "
                   f"{position} is outside {expected}{how}")


def assemble(path: Path, raw: RawRecords, options: _Options, quality: _Quality) -> list[ReadBatch]:
    """Raw records -> ReadBatches (shared by both parsers, so both validate and encode alike): one, or several
    when ``options.max_tokens`` cuts the records (:func:`token_groups`). Whole reads are validated, also where
    ``truncation`` then drops a part; of several bad records in a batch, the first one in the file is reported."""
    if options.bucket_size is not None and len(raw.names) > 1:
        batches = _assemble_presorted(path, raw, options, quality)
        if batches is not None:
            return batches
    return _assemble(path, raw, options, quality)


def _assemble_presorted(path: Path, raw: RawRecords, options: _Options, quality: _Quality) -> list[ReadBatch] | None:
    """``bucket_size``'s fast path: the records' strings put in length order before they are joined (a list
    reorder instead of gathering every base and quality through an index), so the joined bytes come out sorted.
    None where it does not apply: a read that ``max_len`` cuts into rows, or a record that is refused (the file-order
    path then names the first bad record in the file, as without ``bucket_size``)."""
    if raw.packed is not None:  # already joined: the file-order path gathers them in length order
        return None
    lengths = np.fromiter(map(len, raw.sequences), dtype=np.int64, count=len(raw.sequences))
    if options.max_len is not None and int(lengths.max()) > options.max_len:
        return None
    order = np.argsort(lengths, kind="stable")
    pick = itemgetter(*order.tolist())
    ordered = RawRecords(raw.first, list(pick(raw.names)), list(pick(raw.sequences)),
                         None if raw.qualities is None else list(pick(raw.qualities)))
    try:
        return _assemble(path, ordered, options, quality, records=raw.first + order, lengths=lengths[order])
    except ValueError:
        return None


def _assemble(path: Path, raw: RawRecords, options: _Options, quality: _Quality,
              records: np.ndarray | None = None, lengths: np.ndarray | None = None) -> list[ReadBatch]:
    """:func:`assemble` in file order, or (``records``: each record's number; ``lengths``: each sequence's length)
    of records already sorted by length by :func:`_assemble_presorted`."""
    presorted = records is not None
    packed = raw.packed
    if lengths is None:
        lengths = packed.lengths if packed is not None else np.fromiter(map(len, raw.sequences), dtype=np.int64,
                                                                        count=len(raw.sequences))
    data = packed.data if packed is not None else np.frombuffer(_join(raw.sequences), dtype=np.uint8)
    errors: list[tuple[int, str]] = []
    codes = scores = phred = None
    if packed is not None:
        if packed.table is not encode_table(options.ambiguity, options.lowercase, options.rna != "error"):
            raise ValueError("the block parser looked the letters up in another table")  # (the reference reads)
        codes = packed.codes  # every letter valid (fastq_blocks hands a batch with an invalid one over)
    else:
        try:
            codes = letter_codes(data, lengths, ambiguity=options.ambiguity, lowercase=options.lowercase,
                                 rna="error" if options.rna == "error" else "to_t")
        except InvalidLetterError as exc:
            errors.append((exc.index, f"{record_label(path, raw.first + exc.index, raw.names[exc.index])}: "
                                      f"{exc.detail}"))
    scores = _quality_bytes(raw)
    if scores is not None:
        if options.quality_encoding == "solexa":
            phred = np.take(_SOLEXA_TABLE, scores)
            bad = phred == 255
            refused = bool(scores.size and bad.any())
        else:  # one pass and a max: below the offset wraps around to 256 - offset and up, above 126 - offset too
            # (the block parser's scores are its own: they become the Phred scores in place, no new array)
            phred = np.subtract(scores, np.uint8(quality.offset), out=scores if packed is not None else None)
            refused = bool(scores.size and int(phred.max()) > 126 - quality.offset)
            if refused:
                scores = phred + np.uint8(quality.offset) if packed is not None else scores  # the characters
                bad = (scores < quality.offset) | (scores > 126)
        if refused:
            errors.append(_quality_error(path, raw, lengths, scores, bad, options, quality))
    if options.max_len is not None and options.truncation == "error" and lengths.size \
            and int(lengths.max()) > options.max_len:
        i = int(np.flatnonzero(lengths > options.max_len)[0])
        errors.append((i, f"{record_label(path, raw.first + i, raw.names[i])}: {int(lengths[i]):,} letters, more "
                          f"than max_len={options.max_len:,}; pass truncation='head', 'tail' or 'split' to cut it "
                          "by name"))
    if errors:
        raise ValueError(min(errors)[1])
    rna = _rna_flags(path, raw, data, lengths) if options.rna == "keep" else None
    names, offsets = raw.names, None
    if records is None:
        records = np.arange(raw.first, raw.first + lengths.size, dtype=np.int64)
    window = _windows(lengths, options)
    if window is not None:
        index, offsets, sizes = window
        codes = _gather(codes, lengths, window)
        phred = None if phred is None else _gather(phred, lengths, window)
        names, records, lengths = [raw.names[i] for i in index.tolist()], records[index], sizes
        rna = None if rna is None else rna[index]
    if offsets is None:
        offsets = np.zeros(lengths.size, dtype=np.int64)
    if options.bucket_size is None:
        groups = token_groups(lengths, options.max_tokens)
    else:  # rows sorted by length, then batch_size rows at a time, each within the token budget
        if not presorted:
            order = np.argsort(lengths, kind="stable")
            sorted_lengths = lengths[order]
            codes = _gather(codes, lengths, (order, np.zeros_like(order), sorted_lengths))
            phred = None if phred is None else _gather(phred, lengths, (order, np.zeros_like(order),
                                                                        sorted_lengths))
            names, records, offsets = [names[i] for i in order.tolist()], records[order], offsets[order]
            rna = None if rna is None else rna[order]
            lengths = sorted_lengths
        groups = [(start + a, start + b) for start in range(0, max(lengths.size, 1), options.batch_size)
                  for a, b in token_groups(lengths[start:start + options.batch_size], options.max_tokens)]
    row_starts = np.cumsum(lengths) - lengths
    batches = []
    for first, last in groups:
        sizes = lengths[first:last]
        begin = int(row_starts[first]) if first < lengths.size else 0
        end = begin + int(sizes.sum())
        width = int(sizes.max()) if sizes.size else 0
        check_batch_bytes(sizes.size, width, options.token_dtype.itemsize + 1 + (phred is not None),
                          f"{record_label(path, int(records[first]), names[first])} ({width:,} letters)")
        mask = length_mask(sizes, width)
        tokens = pad_rows(codes[begin:end], mask, PAD, options.token_dtype)
        qualities = None if phred is None else pad_rows(phred[begin:end], mask, 0)
        batches.append(ReadBatch(
            names[first:last], tokens, torch.from_numpy(mask), torch.from_numpy(sizes), qualities,
            torch.from_numpy(records[first:last]), torch.from_numpy(offsets[first:last]),
            None if rna is None else torch.from_numpy(rna[first:last]), quality.offset,
            options.quality_encoding if scores is not None else None))
    return batches


def token_groups(lengths: np.ndarray, max_tokens: int) -> list[tuple[int, int]]:
    """Consecutive row ranges ``[first, last)`` that a batch of reads of ``lengths`` is cut into, so that padding
    costs memory in proportion to the reads: a range ends before a read that would make its padded size (rows x
    longest) exceed ``max_tokens``, or exceed both :data:`MIN_GROUP_TOKENS` and twice its real bases (a long read
    among short ones gets a range of its own instead of padding its neighbours). A read longer than
    ``max_tokens`` is a range of its own. Rows stay in file order."""
    count = lengths.size
    if count == 0:
        return [(0, 0)]
    longest, total = int(lengths.max()), int(lengths.sum())
    if count * longest <= min(max_tokens, max(MIN_GROUP_TOKENS, 2 * total)):  # the usual case: one range
        return [(0, count)]
    groups, first, longest, real = [], 0, 0, 0
    for i, size in enumerate(lengths.tolist()):
        wide = max(longest, size)
        if i > first and (i - first + 1) * wide > min(max_tokens, max(MIN_GROUP_TOKENS, 2 * (real + size))):
            groups.append((first, i))
            first, wide, real = i, size, 0
        longest, real = wide, real + size
    groups.append((first, count))
    return groups


def _resolve_parser(parser: str) -> str:
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


def read_options(options: ReadOptions, *, batch_size: int = 1024, max_tokens: int = MAX_TOKENS,
                 bucket_size: int | None = None) -> _Options:
    """The validated options of one :func:`read_fastx` call: ``options`` (already checked when made) and the
    batching, each refused by name before any file is opened."""
    batch_size = check_positive_int(batch_size, "batch_size")
    max_tokens = check_positive_int(max_tokens, "max_tokens")
    if bucket_size is not None:
        bucket_size = check_positive_int(bucket_size, "bucket_size")
    return _Options(batch_size, max_tokens, bucket_size, options.ambiguity, options.lowercase, options.rna,
                    options.offset, options.quality_encoding, options.max_len, options.truncation, options.token_dtype)


def read_fastx(
    path: str | os.PathLike,
    options: ReadOptions | None = None,
    *,
    batch_size: int = 1024,
    max_tokens: int = MAX_TOKENS,
    bucket_size: int | None = None,
    **read_keywords: Any,
) -> Iterator[ReadBatch]:
    """Read a FASTA or FASTQ file (plain or gzip) in batches of encoded reads.

    Args:
        path: the file; format from its first character, compression from its magic bytes.
        options: how records are read and encoded, a :class:`ReadOptions` (default: its defaults);
            ``**read_keywords`` (``ambiguity=``, ``lowercase=``, ``parser=``, ``quality_offset=``,
            ``quality_encoding=``, ``rna=``, ``max_len=``, ``truncation=``, ``token_dtype=``, the fields of
            :class:`ReadOptions`) replace its fields.
        batch_size: records parsed at a time, and the most per batch (the last one may be smaller;
            ``truncation="split"`` may give more rows).
        max_tokens: the padded size (rows x longest row) a batch may reach, :data:`MAX_TOKENS` by default: the
            records parsed at a time are cut, in file order, into batches within it, and a read that pads more
            than its neighbours' bases gets a batch of its own (:func:`token_groups`), so one long read costs
            memory in proportion to its own length. A read longer than ``max_tokens`` is a batch of one.
        bucket_size: None (default): batches follow the file. An int: records are parsed ``bucket_size`` at a
            time, sorted by length (stably) and cut into batches of at most ``batch_size`` reads, so that reads of
            similar length share a batch and padding nearly vanishes (one-hot, RC and positional work follow the
            bases, not the longest read); batches then hold reads out of file order: ``batch.records`` (and
            ``offsets``) say where each row came from. All records of a bucket are in memory at once.

    Yields:
        :class:`ReadBatch` objects; ``qualities`` is None for FASTA.

    Raises:
        ValueError: a malformed record (named by file, number and name), a file that is neither FASTA nor FASTQ,
            a damaged gzip stream (naming the last record read in full), a read longer than ``max_len`` under
            ``truncation="error"``, an option outside its choices.
        TypeError: an option of the wrong type, or an unknown one.
        FileNotFoundError: no such file. ValueError: a folder, pipe or device (saying which) in place of a file.
    """
    path = Path(path)
    read = ReadOptions.of(options, "read_fastx", **read_keywords)
    settings = read_options(read, batch_size=batch_size, max_tokens=max_tokens, bucket_size=bucket_size)
    engine = _resolve_parser(read.parser)
    check_input_file(path)
    return _read(path, settings, engine, blocks=read.parser == "auto")


def _decide_offset(path: Path, raw_batches: Iterable[RawRecords], quality: _Quality) -> Iterator[RawRecords]:
    """Pass the raw batches through, holding them back until ``quality_offset="auto"`` has decided."""
    held: list[RawRecords] = []
    low, high, seen = 255, 0, 0
    iterator = iter(raw_batches)
    for raw in iterator:
        held.append(raw)
        seen += len(raw.names)
        scores = _quality_bytes(raw)
        if scores.size:
            low, high = min(low, int(scores.min())), max(high, int(scores.max()))
        if low < 59 or seen >= AUTO_WINDOW:
            break
    if low < 59 or low == 255:  # a character below ';' (or no qualities at all): Phred+33
        quality.offset = 33
    elif low >= 64 and high > 74:
        quality.offset = 64
    else:
        raise ValueError(
            f"{path}: quality_offset='auto' cannot tell the offset from the first {seen:,} records: their quality "
            f"characters span {chr(low)!r}..{chr(high)!r}, which read as Phred {low - 33}..{high - 33} at offset 33 or "
            f"{low - 64}..{high - 64} at offset 64"
            + (" (or Solexa scores: quality_encoding='solexa')" if low >= 59 else "")
            + "; pass quality_offset=33 or 64 by name")
    quality.detected_from = seen
    yield from held
    yield from iterator


def _assembled(path: Path, fmt: str, raw_batches: Iterable[RawRecords], options: _Options,
               quality: _Quality) -> Iterator[tuple[ReadBatch, int]]:
    if fmt == "fastq" and quality.offset is None:
        raw_batches = _decide_offset(path, raw_batches, quality)
    for raw in raw_batches:
        for batch in assemble(path, raw, options, quality):  # all validated before the first is handed over
            yield batch, raw.first + len(raw.names)


def _initial_quality(fmt: str, options: _Options) -> _Quality:
    if fmt == "fasta" or options.quality_offset == "auto":
        return _Quality()
    return _Quality(offset=int(options.quality_offset))


def _use_blocks(path: Path, fmt: str, engine: str) -> bool:
    """Whether ``parser="auto"`` reads this file with the block parser: FASTQ, numba at hand, and plain (a gzip
    file goes to dnaio where it is installed: it gunzips in threads)."""
    from .fastq_blocks import block_kernels

    return fmt == "fastq" and block_kernels() is not None and (engine != "dnaio" or not is_gzip(path))


def _read(path: Path, options: _Options, engine: str, blocks: bool = False) -> Iterator[ReadBatch]:
    fmt = detect_format(path)
    if fmt is None:
        return
    chunk = options.bucket_size or options.batch_size  # records parsed (and validated) at a time
    quality = _initial_quality(fmt, options)
    done = 0
    four_line_prefix = False  # the first `done` records are plain 4-line records (a fast path read them)
    if blocks and _use_blocks(path, fmt, engine):
        from .fastq_blocks import BlockStopped, block_records

        table = encode_table(options.ambiguity, options.lowercase, options.rna != "error")
        try:
            for batch, done in _assembled(path, fmt, block_records(path, chunk, table, options.rna == "keep"),
                                          options, quality):
                yield batch
            return
        except (BlockStopped, ValueError):
            pass  # the parsers behind it re-read from the first record not yet handed over
        if done == 0:  # nothing handed over: dnaio (where installed) reads what the block parser does not
            quality = _initial_quality(fmt, options)
        else:
            engine, four_line_prefix = "python", True  # the reference, from the first record not handed over
    if engine == "dnaio":
        from .dnaio import DnaioStopped, dnaio_records

        try:
            for batch, done in _assembled(path, fmt, dnaio_records(path, fmt, chunk), options,
                                          quality):
                yield batch
            return
        except (DnaioStopped, ValueError):
            pass  # the reference parser re-reads from the first record not yet handed over, and has the last word
        if done == 0:  # nothing handed over: the reference decides everything afresh ("auto" included)
            quality = _initial_quality(fmt, options)
        four_line_prefix = True
    source = python_records(path, fmt, chunk, skip=done, four_line_prefix=four_line_prefix)
    for batch, _ in _assembled(path, fmt, source, options, quality):
        yield batch

