"""The read options shared by ``omnipos dna featurize`` and ``omnipos precompute reads``: one definition of each
flag, and the :class:`omnipos.dna.ReadOptions` they stand for."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_read_arguments", "read_options", "batching"]


def add_read_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the positional-encoding and parsing flags to ``parser``."""
    parser.add_argument("--dim", type=int, default=16, help="positional channels (0: none; default 16)")
    parser.add_argument("--strand-aware", action="store_true", help="half the channels are sign-flipping sines")
    parser.add_argument("--batch-size", type=int, default=8192, help="reads parsed at a time")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="the padded size (reads x longest read) a batch may reach; a long read gets a batch of "
                             "its own (default: omnipos.dna.reads.MAX_TOKENS)")
    parser.add_argument("--ambiguity", choices=("keep", "to_n"), default="keep")
    parser.add_argument("--lowercase", choices=("soft_mask", "fold"), default="soft_mask")
    parser.add_argument("--parser", choices=("auto", "dnaio", "python"), default="auto")
    parser.add_argument("--quality-offset", choices=("33", "64", "auto"), default=None,
                        help="FASTQ quality offset: 33 (Sanger, Illumina 1.8+; the default), 64 (Illumina "
                             "1.3-1.7) or auto (from the file's quality range); the one used is printed and saved")
    parser.add_argument("--quality-encoding", choices=("phred", "solexa"), default="phred",
                        help="solexa: Solexa-scaled scores (offset 64), converted to Phred as Biopython does")
    parser.add_argument("--rna", choices=("error", "to_t", "keep"), default="error",
                        help="U in a read: refuse (default), read as T, or read as T and flag the read as RNA")
    parser.add_argument("--max-len", type=int, default=None,
                        help="longest row to save; longer reads follow --truncation")
    parser.add_argument("--truncation", choices=("error", "head", "tail", "split"), default="error",
                        help="a read longer than --max-len: refuse (default), keep its head or tail, or split "
                             "it into windows")
    parser.add_argument("--token-dtype", choices=("uint8", "int16", "int32", "int64"), default="uint8",
                        help="integer dtype of the saved tokens (default uint8: one byte per base)")


def read_options(args: argparse.Namespace) -> Any:
    """The :class:`omnipos.dna.ReadOptions` of parsed flags (checked, by name, as it is made)."""
    import torch

    from omnipos.dna import ReadOptions

    offset = args.quality_offset if args.quality_offset in (None, "auto") else int(args.quality_offset)
    return ReadOptions(ambiguity=args.ambiguity, lowercase=args.lowercase, parser=args.parser, quality_offset=offset,
                       quality_encoding=args.quality_encoding, rna=args.rna, max_len=args.max_len,
                       truncation=args.truncation, token_dtype=getattr(torch, args.token_dtype))


def batching(args: argparse.Namespace) -> dict[str, Any]:
    """``batch_size`` and (when given) ``max_tokens`` of parsed flags."""
    return {"batch_size": args.batch_size, **({"max_tokens": args.max_tokens} if args.max_tokens is not None else {})}
