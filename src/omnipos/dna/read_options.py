"""``ReadOptions``: the nine options that say how FASTA/FASTQ records become tokens, defined once.

:func:`omnipos.dna.read_fastx`, :class:`omnipos.dna.FastxDataset`, :func:`omnipos.scale.precompute_reads`,
``omnipos.app.featurize.featurize_file`` and the command line's read flags all take a ``ReadOptions`` (or the same
options as keywords, which keep working): one definition, one validation, one set of defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from ..core import check_choice, check_positive_int
from .alphabet import AMBIGUITY_POLICIES, LOWERCASE_POLICIES
from .limits import check_token_dtype

__all__ = ["ReadOptions", "PARSERS", "TRUNCATIONS", "QUALITY_OFFSETS", "QUALITY_ENCODINGS", "READ_RNA_POLICIES"]

PARSERS = ("auto", "dnaio", "python")
TRUNCATIONS = ("error", "head", "tail", "split")
QUALITY_OFFSETS = (33, 64, "auto")
QUALITY_ENCODINGS = ("phred", "solexa")
READ_RNA_POLICIES = ("error", "to_t", "keep")


@dataclass(frozen=True)
class ReadOptions:
    """How FASTA/FASTQ records are read and encoded; every option is checked, by name, when it is made.

    Attributes:
        ambiguity: ``"keep"`` (IUPAC ambiguity codes keep their tokens) or ``"to_n"`` (:func:`omnipos.dna.encode`).
        lowercase: ``"soft_mask"`` (lowercase = token + ``SOFT_MASK``) or ``"fold"``.
        parser: ``"auto"`` (plain FASTQ: the compiled block parser where numba is installed; else dnaio when
            installed, else pure Python), ``"dnaio"`` or ``"python"``; all give identical batches and errors.
        quality_offset: 33, 64 or ``"auto"``; None (default): 33, or 64 with Solexa (:attr:`offset`).
        quality_encoding: ``"phred"`` or ``"solexa"`` (Solexa scores converted to Phred as Biopython does).
        rna: ``"error"`` (U refused), ``"to_t"`` (U read as T) or ``"keep"`` (read as T, each read flagged).
        max_len, truncation: the longest row, and what a longer read becomes: ``"error"`` (default), ``"head"``,
            ``"tail"``, ``"split"`` (windows of ``max_len``).
        token_dtype: integer dtype of the tokens (``torch.uint8``: one byte per base).
    """

    ambiguity: str = "keep"
    lowercase: str = "soft_mask"
    parser: str = "auto"
    quality_offset: int | str | None = None
    quality_encoding: str = "phred"
    rna: str = "error"
    max_len: int | None = None
    truncation: str = "error"
    token_dtype: torch.dtype = torch.uint8

    def __post_init__(self) -> None:
        check_choice(self.ambiguity, "ambiguity", AMBIGUITY_POLICIES)
        check_choice(self.lowercase, "lowercase", LOWERCASE_POLICIES)
        check_choice(self.parser, "parser", PARSERS)
        check_choice(self.rna, "rna", READ_RNA_POLICIES)
        check_choice(self.quality_encoding, "quality_encoding", QUALITY_ENCODINGS)
        offset = self.quality_offset
        if isinstance(offset, str):
            if offset != "auto":
                raise ValueError(f"quality_offset must be 33, 64 or 'auto', got {offset!r}")
        elif offset is not None:
            if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
                raise TypeError(f"quality_offset must be 33, 64 or 'auto', got {type(offset).__name__} "
                                f"({offset!r})")
            if int(offset) not in (33, 64):
                raise ValueError(f"quality_offset must be 33 (Sanger, Illumina 1.8+), 64 (Illumina 1.3-1.7) or "
                                 f"'auto', got {offset}")
            object.__setattr__(self, "quality_offset", int(offset))
            if self.quality_encoding == "solexa" and int(offset) == 33:
                raise ValueError("quality_encoding='solexa' uses offset 64 (Biopython's 'fastq-solexa'); got "
                                 "quality_offset=33")
        if self.max_len is not None:
            object.__setattr__(self, "max_len", check_positive_int(self.max_len, "max_len"))
        check_choice(self.truncation, "truncation", TRUNCATIONS)
        if self.truncation != "error" and self.max_len is None:
            raise ValueError(f"truncation={self.truncation!r} needs max_len= (the length to cut reads to)")
        check_token_dtype(self.token_dtype)

    @classmethod
    def of(cls, options: ReadOptions | None = None, /, where: str = "read_fastx", **keywords: Any) -> ReadOptions:
        """``options`` (default: the defaults) with ``keywords`` replacing its fields: how every function that
        takes read options reads them. An unknown keyword is a TypeError naming it and ``where``."""
        if options is not None and not isinstance(options, ReadOptions):
            raise TypeError(f"{where}: options must be an omnipos.dna.ReadOptions, got {type(options).__name__}")
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(keywords) - set(names))
        if unknown:
            raise TypeError(f"{where} got an unknown read option {unknown[0]!r}; the read options are "
                            f"{', '.join(names)}")
        return replace(options, **keywords) if options is not None else cls(**keywords)

    @property
    def offset(self) -> int | str:
        """The quality offset in use: ``quality_offset``, or the format's own (33; 64 with Solexa) when None."""
        if self.quality_encoding == "solexa":
            return 64 if self.quality_offset != "auto" else "auto"
        return 33 if self.quality_offset is None else self.quality_offset

    def changed(self) -> dict[str, Any]:
        """The options that differ from the defaults, by name (what a job records of them)."""
        default = ReadOptions()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(default, f.name)}

    def keywords(self) -> dict[str, Any]:
        """Every option by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
