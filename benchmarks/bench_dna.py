"""omnipos.dna vs a Biopython SeqIO + per-read NumPy loop: parse + encode + RC + positional encoding of FASTQ reads.

Both sides turn every read of a generated FASTQ into the same three arrays: one-hot ``[L, 4]`` (N = zero row),
the one-hot of its reverse complement, and the RC-symmetric positional encoding ``[L, dim]`` (cosines of the
centered coordinate). omnipos does it in batches (``read_fastx`` -> ``one_hot`` -> ``reverse_complement`` ->
``rc_symmetric_encoding``); the peer loops over ``SeqIO.parse`` records with NumPy per read. The outputs are
checked equal on the first reads before timing. Everything runs on one thread (``torch.set_num_threads(1)``).
The Biopython loop is timed on a subset of the reads and its per-read rate extrapolated (it is linear in the
number of reads); omnipos is timed on the whole file. A third file ends in a blank line, which dnaio refuses at
the very end: the pure-Python reference parser then takes over (skipping the records dnaio read), so its row shows
what that hand-over costs.

With ``--bucket-size`` (default 8192) the variable-length file also runs with ``read_fastx(bucket_size=)``: reads
sorted by length that many at a time and cut into batches of ``--batch-size``, so padding (and the one-hot, RC
and positional work on it) nearly vanishes; outputs are checked equal per record.

The last column says where omnipos' time goes: CPU seconds in reading + collating, one-hot, RC and positional
encoding, summed over the file (one more instrumented run per row, median of the repeats).

A second table (``dna_parse``, its own JSON) times parsing alone on the fixed-length file, plain and gzip:
``read_fastx`` producing tokens, mask and qualities (each parser) against dnaio's bare parse (``for r in
dnaio.open(path): pass``) and Biopython's ``FastqGeneralIterator``, all in this process on the same file, each
after a warm-up, medians of ``--parse-repeats`` runs interleaved (so a busy spell on a shared machine hits all
alike); ``ratio`` is dnaio's bare time over the row's (1 = as fast as dnaio's bare parse, 0.5 = twice its time).
``--parse-only`` runs only this table.

    python benchmarks/bench_dna.py [--quick] [--reads N] [--dim 16] [--batch-size 1024] [--bucket-size 8192]
                                   [--parse-only] [--parse-repeats 7]
"""

from __future__ import annotations

import gzip
import shutil
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from _harness import Bench, common_arguments, wall_and_cpu_medians
from Bio import SeqIO

from omnipos.dna import one_hot, rc_symmetric_encoding, read_fastx, reverse_complement

ACGT = np.frombuffer(b"ACGT", dtype=np.uint8)


def write_fastq(path: Path, lengths: np.ndarray, seed: int = 0) -> None:
    """Random reads (A/C/G/T, 0.1% N) with Phred qualities 2..40; names read0000000, read0000001, ..."""
    rng = np.random.default_rng(seed)
    n = len(lengths)
    width = len(str(n))
    with open(path, "wb") as handle:
        for start in range(0, n, 100_000):
            chunk = lengths[start:start + 100_000]
            total = int(chunk.sum())
            bases = ACGT[rng.integers(0, 4, total)]
            bases[rng.random(total) < 0.001] = ord("N")
            quals = (33 + rng.integers(2, 41, total)).astype(np.uint8)
            seq_text, qual_text = bases.tobytes(), quals.tobytes()
            ends = np.cumsum(chunk).tolist()
            out, begin = [], 0
            for i, end in enumerate(ends):
                out.append(b"@read%0*d\n%s\n+\n%s\n" % (width, start + i, seq_text[begin:end], qual_text[begin:end]))
                begin = end
            handle.write(b"".join(out))


def omnipos_pipeline(path: Path, dim: int, batch_size: int, parser: str = "auto", keep: int = 0,
                     bucket_size: int | None = None):
    """Parse + encode + RC + positional encoding; returns the number of reads (and the outputs of the first
    ``keep`` records, in file order: with ``bucket_size`` batches hold reads sorted by length)."""
    count, kept = 0, {}
    for batch in read_fastx(path, batch_size=batch_size, parser=parser, bucket_size=bucket_size):
        x = one_hot(batch.tokens)
        x_rc = reverse_complement(x, batch.mask)
        pe = rc_symmetric_encoding(batch.lengths, dim)
        if keep:
            for i in (batch.records < keep).nonzero().flatten().tolist():
                n = int(batch.lengths[i])
                kept[int(batch.records[i])] = (x[i, :n].numpy(), x_rc[i, :n].numpy(), pe[i, :n].numpy())
        count += len(batch)
    return count, [kept[i] for i in sorted(kept)]


def stage_cpu_seconds(path: Path, dim: int, batch_size: int, parser: str, bucket_size: int | None,
                      repeats: int) -> dict[str, float]:
    """Where omnipos' time goes: CPU seconds of this process in each stage of :func:`omnipos_pipeline` (reading
    and collating a batch, one-hot, RC, positional encoding), summed over the file, median of ``repeats`` runs."""
    runs = []
    for _ in range(repeats):
        spent = dict.fromkeys(("read", "one_hot", "rc", "pe"), 0.0)
        batches = iter(read_fastx(path, batch_size=batch_size, parser=parser, bucket_size=bucket_size))
        while True:
            t0 = time.process_time()
            batch = next(batches, None)
            t1 = time.process_time()
            spent["read"] += t1 - t0
            if batch is None:
                break
            x = one_hot(batch.tokens)
            t2 = time.process_time()
            x_rc = reverse_complement(x, batch.mask)
            t3 = time.process_time()
            pe = rc_symmetric_encoding(batch.lengths, dim)
            t4 = time.process_time()
            spent["one_hot"] += t2 - t1
            spent["rc"] += t3 - t2
            spent["pe"] += t4 - t3
            del x, x_rc, pe  # as in omnipos_pipeline: a batch's outputs live until the next batch's are made
        runs.append(spent)
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def biopython_loop(path: Path, dim: int, limit: int, keep: int = 0):
    """The per-read loop a Biopython user writes: SeqIO records, NumPy one-hot, Seq.reverse_complement, np.cos."""
    w = 10000.0 ** (-np.arange(dim) / dim)  # the frequencies of rc_symmetric_encoding's cosines
    count, kept = 0, []
    for record in SeqIO.parse(str(path), "fastq"):
        seq = np.frombuffer(bytes(record.seq), dtype=np.uint8)
        x = (seq[:, None] == ACGT).astype(np.float32)
        rc = np.frombuffer(bytes(record.seq.reverse_complement()), dtype=np.uint8)
        x_rc = (rc[:, None] == ACGT).astype(np.float32)
        c = np.arange(len(seq)) - (len(seq) - 1) / 2
        pe = np.cos(c[:, None] * w).astype(np.float32)
        if count < keep:
            kept.append((x, x_rc, pe))
        count += 1
        if count == limit:
            break
    return count, kept


def check_same(ours, theirs) -> float:
    assert len(ours) == len(theirs) > 0
    worst = 0.0
    for (a, b, c), (x, y, z) in zip(ours, theirs):
        np.testing.assert_array_equal(a, x)
        np.testing.assert_array_equal(b, y)
        worst = max(worst, float(np.abs(c - z).max()))
    assert worst < 1e-6, worst
    return worst


def _dnaio_bare(path: Path) -> int:
    import dnaio

    count = 0
    with dnaio.open(path) as reader:
        for _ in reader:
            count += 1
    return count


def _biopython_bare(path: Path) -> int:
    from Bio.SeqIO.QualityIO import FastqGeneralIterator

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return sum(1 for _ in FastqGeneralIterator(handle))


def _read_fastx_all(path: Path, parser: str, batch_size: int) -> int:
    """Every batch's tokens, mask and qualities made (and touched): the reads counted."""
    count = 0
    for batch in read_fastx(path, parser=parser, batch_size=batch_size):
        assert batch.qualities is not None and batch.mask.shape == batch.tokens.shape
        count += len(batch)
    return count


def parse_table(tmp: Path, reads: int, length: int, batch_size: int, repeats: int, out: Path | None) -> None:
    """``read_fastx`` (tokens, mask, qualities) vs dnaio's bare parse on one file, plain and gzip (module doc)."""
    from omnipos.dna.fastq_blocks import block_kernels

    bench = Bench("dna_parse", device="cpu", notes=(
        f"one thread; {reads:,} generated reads of {length} bp; read_fastx batch_size={batch_size} (tokens, mask, "
        f"qualities) vs dnaio's bare parse and Biopython's FastqGeneralIterator on the same file in one process, "
        f"after a warm-up, medians of {repeats} interleaved runs; ratio = dnaio bare time / row time (CPU time "
        f"ratio in brackets); 'auto' is the block parser (numba {'on' if block_kernels() else 'OFF'}) on the plain "
        "file and dnaio on the gzip one"))
    plain = tmp / "parse.fastq"
    write_fastq(plain, np.full(reads, length))
    packed = tmp / "parse.fastq.gz"
    with open(plain, "rb") as source, gzip.open(packed, "wb", compresslevel=1) as target:
        shutil.copyfileobj(source, target)
    for path in (plain, packed):
        runs = {"dnaio bare parse": partial(_dnaio_bare, path),
                "read_fastx parser='auto'": partial(_read_fastx_all, path, "auto", batch_size),
                "read_fastx parser='dnaio'": partial(_read_fastx_all, path, "dnaio", batch_size),
                "read_fastx parser='python'": partial(_read_fastx_all, path, "python", batch_size),
                "Biopython FastqGeneralIterator": partial(_biopython_bare, path)}
        for name, run in runs.items():
            assert run() == reads, name  # and the warm-up (page cache, numba's compile)
        wall: dict[str, list[float]] = {name: [] for name in runs}
        cpu: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(repeats):
            for name, run in runs.items():
                w0, c0 = time.perf_counter(), time.process_time()
                run()
                wall[name].append(time.perf_counter() - w0)
                cpu[name].append(time.process_time() - c0)
        base_w, base_c = statistics.median(wall["dnaio bare parse"]), statistics.median(cpu["dnaio bare parse"])
        for name in runs:
            w, c = statistics.median(wall[name]), statistics.median(cpu[name])
            bench.row(file=f"{path.name} ({path.stat().st_size / 1e6:,.0f} MB)", parse=name, wall_s=w,
                      reads_per_s=f"{reads / w:,.0f} ({reads / c:,.0f})",
                      ratio=f"{base_w / w:.2f} ({base_c / c:.2f})")
    bench.finish(out)


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=None, help="reads in the FASTQ (default 1,000,000; quick 50,000)")
    parser.add_argument("--length", type=int, default=150)
    parser.add_argument("--dim", type=int, default=16, help="positional channels")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--bucket-size", type=int, default=8192,
                        help="variable-length rows also run with read_fastx(bucket_size=): reads sorted by length "
                             "this many at a time, then cut into batches of --batch-size (0: no such rows)")
    parser.add_argument("--peer-reads", type=int, default=None,
                        help="reads the Biopython loop is timed on (default 20,000; quick 5,000)")
    parser.add_argument("--parse-only", action="store_true", help="only the parse table (read_fastx vs dnaio)")
    parser.add_argument("--parse-repeats", type=int, default=7)
    parser.add_argument("--parse-reads", type=int, default=None,
                        help="reads of the parse table's file (default 200,000; quick 50,000)")
    parser.add_argument("--parse-out", type=Path, default=None, help="JSON of the parse table")
    parser.set_defaults(repeats=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.parse_only:
        with tempfile.TemporaryDirectory() as tmp:
            parse_table(Path(tmp), args.parse_reads or (50_000 if args.quick else 200_000), args.length,
                        args.batch_size, 3 if args.quick else args.parse_repeats, args.parse_out)
        return
    n = args.reads or (50_000 if args.quick else 1_000_000)
    peer_n = min(n, args.peer_reads or (5_000 if args.quick else 20_000))
    repeats = 1 if args.quick else args.repeats
    bench = Bench("dna", device="cpu", notes=(
        f"one thread; parse + one-hot + RC one-hot + positional encoding (dim={args.dim}) of generated FASTQ "
        f"reads; omnipos timed on all reads (median of {repeats}), batch_size={args.batch_size}; the Biopython "
        f"loop timed on the first {peer_n:,} reads and its per-read rate extrapolated; outputs checked equal; "
        "rates are wall clock (CPU time of this process in brackets: the machine is shared)"))
    rng = np.random.default_rng(1)
    variable = rng.integers(50, args.length + 1, max(peer_n, n // 5))
    # The third case ends in a blank line, which dnaio refuses at the very end: the pure-Python reference takes
    # over there (skipping the 4-line records dnaio read), so it shows what that hand-over costs.
    bucketed = [("dnaio", args.bucket_size)] if args.bucket_size else []
    cases = [(f"{args.length} bp", np.full(n, args.length), [("dnaio", None), ("python", None)], b""),
             (f"50-{args.length} bp", variable, [("dnaio", None), ("python", None), *bucketed], b""),
             (f"50-{args.length} bp + trailing blank line", variable, [("dnaio", None)], b"\n")]
    with tempfile.TemporaryDirectory() as tmp:
        for label, lengths, engines, tail in cases:
            path = Path(tmp) / "reads.fastq"
            write_fastq(path, lengths)
            with open(path, "ab") as handle:
                handle.write(tail)
            size_mb = path.stat().st_size / 1e6
            t_peer, c_peer = wall_and_cpu_medians(lambda: biopython_loop(path, args.dim, peer_n),
                                                  repeats=1 if args.quick else 2)
            theirs = biopython_loop(path, args.dim, 500, keep=500)[1]
            for engine, bucket in engines:
                worst = check_same(omnipos_pipeline(path, args.dim, args.batch_size, parser=engine, keep=500,
                                                    bucket_size=bucket)[1], theirs)
                run = partial(omnipos_pipeline, path, args.dim, args.batch_size, parser=engine, bucket_size=bucket)
                run()  # warm-up (page cache)
                t_ours, c_ours = wall_and_cpu_medians(run, repeats=repeats)
                stages = stage_cpu_seconds(path, args.dim, args.batch_size, engine, bucket, repeats)
                how = f"{engine} parser" + (f", bucket_size={bucket}" if bucket else "")
                bench.row(case=f"{label}, {how}", reads=f"{len(lengths):,}", fastq_mb=round(size_mb),
                          omnipos_wall_s=t_ours,
                          omnipos_reads_per_s=f"{len(lengths) / t_ours:,.0f} ({len(lengths) / c_ours:,.0f})",
                          biopython_loop_reads_per_s=f"{peer_n / t_peer:,.0f} ({peer_n / c_peer:,.0f})",
                          speedup=f"{(peer_n / t_peer) ** -1 * len(lengths) / t_ours:.1f} "
                                  f"({(peer_n / c_peer) ** -1 * len(lengths) / c_ours:.1f})",
                          max_pe_diff=worst,
                          cpu_s_read_onehot_rc_pe=" / ".join(f"{stages[k]:.3f}" for k in stages))
            path.unlink()
        bench.finish(args.out)
        parse_table(Path(tmp), args.parse_reads or (50_000 if args.quick else 200_000), args.length,
                    args.batch_size, 3 if args.quick else args.parse_repeats, args.parse_out)


if __name__ == "__main__":
    main()
