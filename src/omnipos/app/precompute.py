"""``omnipos precompute graphs|reads|meds INPUT... -o DIR``: the command line of :mod:`omnipos.scale`.

Draws a tqdm bar (``--no-progress``: none) and ends with the job's summary line (items, shards, seconds,
items/s). Exit status 2 on bad input; when some input files fail, the others still finish, the summary names the
failed ones and the status is 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .paths import add_output_argument, check_output_folder
from .read_arguments import add_read_arguments, batching, read_options

__all__ = ["add_precompute_parser", "run_precompute"]

_UNITS = {"graphs": " graphs", "reads": " reads", "meds": " subjects"}


def _common(parser: argparse.ArgumentParser, shard_size: int, what: str) -> None:
    add_output_argument(parser, "output folder (shards and manifest.jsonl)")
    parser.add_argument("--engine", choices=("local", "ray"), default="local",
                        help="local: worker processes on this machine (default); ray: Ray tasks, local or a cluster")
    parser.add_argument("--address", default=None,
                        help="a running Ray cluster: 'auto', 'host:port' or 'ray://host:port' (needs --engine ray)")
    parser.add_argument("--num-cpus", type=int, default=None,
                        help="local: worker processes (default: the machine's cores); Ray: CPUs of the local Ray "
                             "started here, or the most units at once on a cluster")
    parser.add_argument("--num-gpus", type=float, default=0, help="GPUs per shard (graphs only; default 0)")
    parser.add_argument("--shard-size", type=int, default=shard_size, help=f"{what} per shard (default {shard_size:,})")
    parser.add_argument("--no-resume", action="store_true", help="redo every shard, even those already finished")
    parser.add_argument("--overwrite", action="store_true", help="replace another job's output found in -o/--output")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_precompute_parser(commands: Any) -> None:
    """Add ``precompute`` and its three kinds to the ``omnipos`` subcommands."""
    precompute = commands.add_parser(
        "precompute", help="dataset-scale precompute: graph encodings, reads, MEDS timelines, in shards",
        description="Run omnipos over a whole dataset, shard by shard, on worker processes or on Ray; an "
                    "interrupted job resumes where it stopped.")
    kinds = precompute.add_subparsers(dest="kind", metavar="KIND")
    kinds.required = True

    graphs = kinds.add_parser("graphs", help="torch.save'd lists of PyG Data -> Laplacian / random-walk encodings",
                              description="Add AddLaplacianPE(k) and AddRandomWalkPE(steps) encodings to every "
                                          "graph; shards in PyG's InMemoryDataset format.")
    graphs.add_argument("inputs", nargs="+", metavar="INPUT", help="torch.save'd list(s) of torch_geometric Data")
    graphs.add_argument("--laplacian", type=int, default=8, metavar="K",
                        help="Laplacian eigenvectors per node (0: none; default 8)")
    graphs.add_argument("--random-walk", type=int, default=16, metavar="STEPS",
                        help="random-walk return probabilities per node (0: none; default 16)")
    graphs.add_argument("--batch-size", type=int, default=1024, help="graphs per batched solve (default 1024)")
    _common(graphs, 10_000, "graphs")

    reads = kinds.add_parser("reads", help="FASTA/FASTQ (gzip) -> Parquet shards of tokens, lengths, qualities",
                             description="Parse and encode reads into Parquet shards (one unit of work per file).")
    reads.add_argument("inputs", nargs="+", metavar="INPUT", help="FASTA or FASTQ files, plain or gzip")
    add_read_arguments(reads)
    _common(reads, 100_000, "reads")

    meds = kinds.add_parser("meds", help="a MEDS cohort -> per-subject times, codes, values",
                            description="Turn the data shards of a MEDS root (data/**/*.parquet) into "
                                        "per-subject timelines (one unit of work per data file).")
    meds.add_argument("inputs", nargs=1, metavar="INPUT", help="the MEDS root (the folder holding data/)")
    meds.add_argument("--unit", default="h", help="time unit of the offsets (s, min, h, d, w; default h)")
    meds.add_argument("--origin", default="first", help="'first' (each subject's first event) or 'epoch'")
    meds.add_argument("--naive-as", choices=("UTC",), default=None,
                      help="read naive times (no time zone) as this zone where they meet timezone-aware ones (an "
                           "aware --origin, or aware data); default: refuse the mix")
    meds.add_argument("--static", choices=("keep", "drop", "error"), default="keep",
                      help="events without a time (MEDS static events): each subject's static codes (default), "
                           "dropped, or refused")
    meds.add_argument("--drop-missing", action="store_true",
                      help="drop events with a missing subject or code (with --static error, also a missing "
                           "time) instead of failing; events without a numeric_value are kept (value NaN)")
    meds.add_argument("--split", default=None,
                      help="only the subjects of this split of metadata/subject_splits.parquet (train, tuning, "
                           "held_out, ...; another name is refused, listing the file's); default: every subject")
    meds.add_argument("--vocab", default=None, metavar="CODES",
                      help="a codes file (e.g. ROOT/metadata/codes.parquet: its 'code' column) fixing the code "
                           "indices (one listing no codes is refused); default: the cohort's own codes, sorted")
    meds.add_argument("--unknown-code", choices=("error", "unk"), default="error",
                      help="a code missing from --vocab: refuse (default) or map to <unk>")
    meds.add_argument("--max-len", type=int, default=None, help="the most events per row; longer follow --truncation")
    meds.add_argument("--truncation", choices=("error", "head", "tail", "split"), default="error",
                      help="a subject longer than --max-len: refuse (default), keep the first or last events, or "
                           "split it into windows (head, tail and split need --max-len)")
    _common(meds, 10_000, "subjects")
    for parser in (graphs, reads, meds):
        parser.set_defaults(handler=run_precompute)


def _transform(args: argparse.Namespace) -> Any:
    from torch_geometric.transforms import Compose

    from omnipos.graph import AddLaplacianPE, AddRandomWalkPE

    parts = []
    if args.laplacian:
        parts.append(AddLaplacianPE(args.laplacian))
    if args.random_walk:
        parts.append(AddRandomWalkPE(args.random_walk))
    if not parts:
        raise ValueError("--laplacian 0 and --random-walk 0: nothing to compute")
    return Compose(parts)


def run_precompute(args: argparse.Namespace) -> int:
    """The ``precompute`` handler: run the job, print its summary line."""
    from omnipos import scale

    from .progress import tqdm_progress

    common = {"engine": args.engine, "address": args.address, "num_cpus": args.num_cpus,
              "shard_size": args.shard_size, "resume": not args.no_resume, "overwrite": args.overwrite,
              "progress": tqdm_progress(not args.no_progress, desc=f"precompute {args.kind}",
                                        unit=_UNITS[args.kind])}
    if args.kind != "graphs" and args.num_gpus:
        raise ValueError(f"--num-gpus: precompute {args.kind} runs on CPUs only (GPUs serve graphs)")
    check_output_folder(args.output)
    try:
        if args.kind == "graphs":
            result = scale.precompute_graphs(args.inputs, args.output, _transform(args), num_gpus=args.num_gpus,
                                             batch_size=args.batch_size, **common)
        elif args.kind == "reads":
            result = scale.precompute_reads(args.inputs, args.output, read_options(args), dim=args.dim,
                                            strand_aware=args.strand_aware, **batching(args), **common)
        else:
            meds = {"unit": args.unit, "origin": args.origin, "static": args.static,
                    "drop_missing": args.drop_missing, "unknown_code": args.unknown_code, "max_len": args.max_len,
                    "truncation": args.truncation}
            if args.vocab is not None:
                meds["vocab"] = args.vocab
            if args.naive_as is not None:  # only when given: a job's recorded options stay as they were
                meds["naive_as"] = args.naive_as
            result = scale.precompute_meds(args.inputs[0], args.output, split=args.split, **meds, **common)
    except scale.PrecomputeError as exc:
        print(exc.result.summary())
        print(f"omnipos precompute: error: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:
        print(f"omnipos precompute: error: {exc}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0
