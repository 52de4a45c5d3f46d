"""``omnipos dna featurize``: a FASTA/FASTQ file -> one ``.pt`` file of tokens, masks, qualities and the
RC-symmetric positional encoding."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from omnipos.core import check_positive_int, lengths_to_mask, pad_packed, progress_reporter
from omnipos.dna import PAD, rc_symmetric_encoding, read_fastx

from .progress import tqdm_progress

__all__ = ["featurize_file", "MAX_POSITIONAL_BYTES"]

MAX_POSITIONAL_BYTES = 2 << 30  # the positional tensor is N * L * dim * 4 bytes: refuse to build more than 2 GiB


def featurize_file(
    path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    dim: int = 16,
    strand_aware: bool = False,
    batch_size: int = 8192,
    ambiguity: str = "keep",
    lowercase: str = "soft_mask",
    parser: str = "auto",
    progress: Any = True,
) -> dict[str, Any]:
    """Read every record of ``path`` and save (``torch.save``) a dict to ``out``; returns the dict.

    Keys: ``names`` (N strings), ``tokens [N, L]`` int64 (``PAD`` past each read), ``mask [N, L]``,
    ``lengths [N]``, ``qualities [N, L]`` uint8 (None for FASTA), ``positional [N, L, dim]`` float32
    (:func:`rc_symmetric_encoding`; omitted when ``dim == 0``) and ``config``. Everything is held in memory.
    ``progress``: True draws a tqdm bar (a plain line without tqdm), False nothing, or a ``(done, total)``
    callable.
    """
    dim = check_positive_int(dim, "dim", minimum=0)
    if dim:
        rc_symmetric_encoding(torch.tensor([1]), dim, strand_aware=strand_aware)  # refuse a bad dim before parsing
    names: list[str] = []
    flat_tokens, flat_qualities, lengths = [], [], []
    has_quality = None
    bar = progress_reporter(tqdm_progress(progress, unit=" reads", desc=Path(path).name) if progress is True
                            else progress, desc=Path(path).name)
    with bar:
        for batch in read_fastx(path, batch_size=batch_size, ambiguity=ambiguity, lowercase=lowercase,
                                parser=parser):
            names += batch.names
            flat_tokens.append(batch.tokens[batch.mask])
            lengths.append(batch.lengths)
            has_quality = batch.qualities is not None
            if has_quality:
                flat_qualities.append(batch.qualities[batch.mask])
            bar.update(len(batch))
    all_lengths = torch.cat(lengths) if lengths else torch.zeros(0, dtype=torch.long)
    mask = lengths_to_mask(all_lengths)
    tokens = pad_packed(torch.cat(flat_tokens) if flat_tokens else torch.zeros(0, dtype=torch.long), mask, PAD)
    result: dict[str, Any] = {
        "names": names,
        "tokens": tokens,
        "mask": mask,
        "lengths": all_lengths,
        "qualities": pad_packed(torch.cat(flat_qualities), mask, 0) if has_quality else None,
        "config": {"source": os.fspath(path), "ambiguity": ambiguity, "lowercase": lowercase, "dim": dim,
                   "strand_aware": strand_aware, "encoding": "omnipos.dna.rc_symmetric_encoding"},
    }
    if dim:
        size = mask.numel() * dim * 4
        if size > MAX_POSITIONAL_BYTES:
            raise ValueError(f"dim={dim}: the positional encoding of {len(names):,} reads x {mask.shape[1]} positions "
                             f"would take {size / 2**30:.1f} GiB; pass dim=0 (--dim 0) and compute it per batch "
                             "from the saved lengths with omnipos.dna.rc_symmetric_encoding, or a smaller dim")
        result["positional"] = rc_symmetric_encoding(all_lengths, dim, strand_aware=strand_aware)
    torch.save(result, out)
    return result
