"""The ``omnipos`` command line: ``omnipos demo``, and one subcommand per domain tool."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main", "build_parser"]


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(args.out, plot=not args.no_plot, sections=args.section)
    return 0


def _dna_featurize(args: argparse.Namespace) -> int:
    import torch

    from .featurize import featurize_file

    offset = args.quality_offset if args.quality_offset in (None, "auto") else int(args.quality_offset)
    result = featurize_file(args.reads, args.output, dim=args.dim, strand_aware=args.strand_aware,
                            batch_size=args.batch_size, ambiguity=args.ambiguity, lowercase=args.lowercase,
                            parser=args.parser, quality_offset=offset, quality_encoding=args.quality_encoding,
                            rna=args.rna, max_len=args.max_len, truncation=args.truncation,
                            token_dtype=getattr(torch, args.token_dtype), progress=not args.no_progress)
    config = result["config"]
    print(f"wrote {args.output}: {len(result['names'])} reads, tokens {tuple(result['tokens'].shape)} "
          f"{config['token_dtype']}"
          + (f", positional {tuple(result['positional'].shape)}" if "positional" in result else ""))
    if config["quality_offset"] is not None:
        how = "detected by --quality-offset auto" if config["quality_offset_detected"] else "as given"
        print(f"qualities: Phred+{config['quality_offset']} ({config['quality_format']}, {how}), stored as Phred "
              "scores")
    return 0


def _add_dna(commands) -> None:
    dna = commands.add_parser("dna", help="DNA reads: featurize FASTA/FASTQ files",
                              description="DNA tools built on omnipos.dna.")
    tools = dna.add_subparsers(dest="dna_command", metavar="TOOL")
    tools.required = True
    featurize = tools.add_parser(
        "featurize", help="FASTA/FASTQ (plain or gzip) -> a .pt file of tokens, masks, qualities, encodings",
        description="Parse and encode every read; save tokens [N, L], mask, lengths, qualities (FASTQ) and the "
                    "RC-symmetric positional encoding [N, L, dim] with torch.save.")
    featurize.add_argument("reads", help="FASTA or FASTQ file, plain or gzip")
    featurize.add_argument("-o", "--output", required=True, help="where to write the .pt file")
    featurize.add_argument("--dim", type=int, default=16, help="positional channels (0: none; default 16)")
    featurize.add_argument("--strand-aware", action="store_true", help="half the channels are sign-flipping sines")
    featurize.add_argument("--batch-size", type=int, default=8192, help="reads parsed at a time")
    featurize.add_argument("--ambiguity", choices=("keep", "to_n"), default="keep")
    featurize.add_argument("--lowercase", choices=("soft_mask", "fold"), default="soft_mask")
    featurize.add_argument("--parser", choices=("auto", "dnaio", "python"), default="auto")
    featurize.add_argument("--quality-offset", choices=("33", "64", "auto"), default=None,
                           help="FASTQ quality offset: 33 (Sanger, Illumina 1.8+; the default), 64 (Illumina "
                                "1.3-1.7) or auto (from the file's quality range); the one used is printed and saved")
    featurize.add_argument("--quality-encoding", choices=("phred", "solexa"), default="phred",
                           help="solexa: Solexa-scaled scores (offset 64), converted to Phred as Biopython does")
    featurize.add_argument("--rna", choices=("error", "to_t", "keep"), default="error",
                           help="U in a read: refuse (default), read as T, or read as T and flag the read as RNA")
    featurize.add_argument("--max-len", type=int, default=None,
                           help="longest row to save; longer reads follow --truncation")
    featurize.add_argument("--truncation", choices=("error", "head", "tail", "split"), default="error",
                           help="a read longer than --max-len: refuse (default), keep its head or tail, or split "
                                "it into windows")
    featurize.add_argument("--token-dtype", choices=("uint8", "int16", "int32", "int64"), default="uint8",
                           help="integer dtype of the saved tokens (default uint8: one byte per base)")
    featurize.add_argument("--no-progress", action="store_true", help="no progress bar (tqdm)")
    featurize.set_defaults(handler=_dna_featurize)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="omnipos",
        description="Positional encodings for transformers: time series, vision, graphs and DNA on one core.",
    )
    from omnipos import __version__

    parser.add_argument("--version", action="version", version=f"omnipos {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    demo = commands.add_parser("demo", help="print and draw a tour of the encodings",
                               description="Print the encodings' numbers and draw their pictures.")
    demo.add_argument("--out", default="omnipos-demo", help="folder for the pictures (default: ./omnipos-demo)")
    demo.add_argument("--no-plot", action="store_true", help="print only, draw nothing")
    demo.add_argument("--section", action="append", help="run only this section (repeatable)")
    demo.set_defaults(handler=_demo)
    _add_dna(commands)
    from .precompute import add_precompute_parser

    add_precompute_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as exc:
        print(f"omnipos {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
