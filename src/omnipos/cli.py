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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="omnipos",
        description="Positional encodings for transformers: time series, vision, graphs and DNA on one core.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"omnipos {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    demo = commands.add_parser("demo", help="print and draw a tour of the encodings",
                               description="Print the encodings' numbers and draw their pictures.")
    demo.add_argument("--out", default="omnipos-demo", help="folder for the pictures (default: ./omnipos-demo)")
    demo.add_argument("--no-plot", action="store_true", help="print only, draw nothing")
    demo.add_argument("--section", action="append", help="run only this section (repeatable)")
    demo.set_defaults(handler=_demo)
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
