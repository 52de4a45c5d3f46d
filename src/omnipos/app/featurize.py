"""``omnipos dna featurize``: a FASTA/FASTQ file -> one ``.pt`` file of tokens, masks, qualities and the
RC-symmetric positional encoding."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from omnipos.core import (
    check_positive_int,
    lengths_to_mask,
    pad_packed,
    progress_reporter,
)
from omnipos.dna import PAD, ReadOptions, rc_symmetric_encoding, read_fastx
from omnipos.dna.fastx import check_input_file
from omnipos.dna.reads import MAX_TOKENS

from .paths import check_output_file
from .progress import tqdm_progress

__all__ = ["MAX_PADDED_RATIO", "MAX_POSITIONAL_BYTES", "PADDED_BYTES_FLOOR", "featurize_file"]

MAX_POSITIONAL_BYTES = 2 << 30  # the positional tensor is N * L * dim * 4 bytes: refuse to build more than 2 GiB
#: The saved tensors are padded to the longest row ([N, L]): above :data:`PADDED_BYTES_FLOOR`, padding may cost at
#: most this many times the reads' own positions, so one long read among short ones is refused (naming the flags that
#: cut it) before its padding of every other row is allocated.
MAX_PADDED_RATIO = 4
PADDED_BYTES_FLOOR = 1 << 30


def _check_padded_size(path: Any, names: list[str], lengths: torch.Tensor, records: torch.Tensor, dim: int,
                       bytes_per_position: int) -> None:
    """Refuse, before anything padded is allocated, a result whose padding to the longest row would dwarf the
    reads (one long read among short ones) or whose positional encoding would pass :data:`MAX_POSITIONAL_BYTES`,
    naming the longest read and the options that bound the width."""
    if not lengths.numel():
        return
    rows, longest = lengths.numel(), int(lengths.max())
    where = int(lengths.argmax())
    read = (f"the longest row (record {int(records[where]) + 1} of {os.fspath(path)!r}, "
            f"{names[where][:100]!r}: {longest:,} letters)")
    cure = ("pass --max-len N --truncation split (or head / tail) to cut reads into rows of at most N letters "
            "(max_len=, truncation= in Python), or read the file batch by batch, each within a token budget: "
            "omnipos.dna.read_fastx(path, max_tokens=...) or omnipos precompute reads")
    if dim and rows * longest * dim * 4 > MAX_POSITIONAL_BYTES:
        size = rows * longest * dim * 4
        raise ValueError(f"dim={dim}: the positional encoding of {rows:,} rows x {longest:,} positions ({read}) "
                         f"would take {size / 2**30:.1f} GiB (more than omnipos.app.featurize.MAX_POSITIONAL_BYTES = "
                         f"{MAX_POSITIONAL_BYTES / 2**30:g} GiB); pass --dim 0 (dim=0) and compute it per batch from "
                         f"the saved lengths with omnipos.dna.rc_symmetric_encoding, a smaller --dim, or {cure}")
    per_position = bytes_per_position + dim * 4
    padded, real = rows * longest * per_position, int(lengths.sum()) * per_position
    if padded > PADDED_BYTES_FLOOR and padded > MAX_PADDED_RATIO * real:
        raise ValueError(f"{read} pads all {rows:,} rows to its length: the saved tensors [{rows:,}, {longest:,}] "
                         f"would take {padded / 2**30:.1f} GiB for {real / 2**20:,.1f} MiB of reads (more than "
                         f"{MAX_PADDED_RATIO}x their own size, above {PADDED_BYTES_FLOOR / 2**30:g} GiB); {cure}")


def featurize_file(
    path: str | os.PathLike,
    out: str | os.PathLike,
    options: ReadOptions | None = None,
    *,
    dim: int = 16,
    strand_aware: bool = False,
    batch_size: int = 8192,
    max_tokens: int = MAX_TOKENS,
    progress: Any = True,
    **read_keywords: Any,
) -> dict[str, Any]:
    """Read every record of ``path`` and save (``torch.save``) a dict to ``out``; returns the dict.

    Keys: ``names`` (N strings), ``tokens [N, L]`` (uint8 unless ``token_dtype`` says otherwise; ``PAD`` past
    each read), ``mask [N, L]``, ``lengths [N]``, ``qualities [N, L]`` uint8 Phred (None for FASTA), ``records
    [N]`` and ``offsets [N]`` (each row's record in the file and its start in it: rows differ from records
    with ``truncation="split"``), ``rna [N]`` (with ``rna="keep"``), ``positional [N, L, dim]`` float32
    (:func:`rc_symmetric_encoding`; omitted when ``dim == 0``) and ``config`` (every option, and the quality
    offset and format actually used: ``quality_offset`` 33 or 64, ``quality_format`` Biopython's name,
    ``quality_offset_detected`` True when ``"auto"`` chose it). Everything is held in memory.

    The reading options are a :class:`omnipos.dna.ReadOptions` and/or its fields as keywords, as in
    :func:`omnipos.dna.read_fastx`; ``max_len`` with ``truncation`` bounds the padded width (a single long read
    otherwise pads every row to its length: above :data:`PADDED_BYTES_FLOOR`, padding of more than
    :data:`MAX_PADDED_RATIO` times the reads is refused before it is allocated, naming the longest read and these
    options; so is a positional encoding over :data:`MAX_POSITIONAL_BYTES`). ``out`` is checked (a writable file name, not a folder) before the
    file is read. ``progress``: True draws a tqdm bar (a plain line without tqdm), False nothing, or a
    ``(done, total)`` callable.
    """
    read = ReadOptions.of(options, "featurize_file", **read_keywords)
    ambiguity, lowercase, quality_offset = read.ambiguity, read.lowercase, read.quality_offset
    quality_encoding, rna, max_len, truncation, token_dtype = (read.quality_encoding, read.rna, read.max_len,
                                                               read.truncation, read.token_dtype)
    dim = check_positive_int(dim, "dim", minimum=0)
    if dim:
        rc_symmetric_encoding(torch.tensor([1]), dim, strand_aware=strand_aware)  # refuse a bad dim before parsing
    check_output_file(out, "out")  # before parsing: a path that cannot be written is refused now, not after
    check_input_file(path)
    names: list[str] = []
    flat_tokens, flat_qualities, lengths, records, offsets, rna_flags = [], [], [], [], [], []
    has_quality = None
    used_offset = used_format = None
    bar = progress_reporter(tqdm_progress(progress, unit=" reads", desc=Path(path).name) if progress is True
                            else progress, desc=Path(path).name)
    with bar:
        for batch in read_fastx(path, read, batch_size=batch_size, max_tokens=max_tokens):
            names += batch.names
            flat_tokens.append(batch.tokens[batch.mask])
            lengths.append(batch.lengths)
            records.append(batch.records)
            offsets.append(batch.offsets)
            if batch.rna is not None:
                rna_flags.append(batch.rna)
            has_quality = batch.qualities is not None
            if has_quality:
                flat_qualities.append(batch.qualities[batch.mask])
                used_offset, used_format = batch.quality_offset, batch.quality_format
            bar.update(len(batch))
    empty = torch.zeros(0, dtype=torch.long)
    all_lengths = torch.cat(lengths) if lengths else empty
    _check_padded_size(path, names, all_lengths, torch.cat(records) if records else empty, dim,
                       token_dtype.itemsize + 1 + bool(has_quality))
    mask = lengths_to_mask(all_lengths)
    tokens = pad_packed(torch.cat(flat_tokens) if flat_tokens else torch.zeros(0, dtype=token_dtype), mask, PAD)
    result: dict[str, Any] = {
        "names": names,
        "tokens": tokens,
        "mask": mask,
        "lengths": all_lengths,
        "qualities": pad_packed(torch.cat(flat_qualities), mask, 0) if has_quality else None,
        "records": torch.cat(records) if records else empty,
        "offsets": torch.cat(offsets) if offsets else empty,
        "config": {"source": os.fspath(path), "ambiguity": ambiguity, "lowercase": lowercase, "dim": dim,
                   "strand_aware": strand_aware, "encoding": "omnipos.dna.rc_symmetric_encoding", "rna": rna,
                   "max_len": max_len, "truncation": truncation, "token_dtype": str(token_dtype).removeprefix("torch."),
                   "quality_offset": used_offset, "quality_encoding": quality_encoding if has_quality else None,
                   "quality_format": used_format,
                   "quality_offset_detected": bool(quality_offset == "auto" and has_quality)},
    }
    if rna == "keep":
        result["rna"] = torch.cat(rna_flags) if rna_flags else torch.zeros(0, dtype=torch.bool)
    if dim:
        result["positional"] = rc_symmetric_encoding(all_lengths, dim, strand_aware=strand_aware)
    torch.save(result, out)
    return result
