"""The ``omnipos`` command line: ``omnipos demo``, and one subcommand per domain tool."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .paths import add_output_argument
from .read_arguments import add_read_arguments, batching, read_options

__all__ = ["main", "build_parser"]


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(args.output, plot=not args.no_plot, sections=args.section)
    return 0


def _dna_featurize(args: argparse.Namespace) -> int:
    from .featurize import featurize_file

    result = featurize_file(args.reads, args.output, read_options(args), dim=args.dim, strand_aware=args.strand_aware,
                            progress=not args.no_progress, **batching(args))
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
    add_output_argument(featurize, "where to write the .pt file")
    add_read_arguments(featurize)
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
    add_output_argument(demo, "folder for the pictures (default: ./omnipos-demo)", default="omnipos-demo")
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
