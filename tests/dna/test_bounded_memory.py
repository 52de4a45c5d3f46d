"""Bounded memory when reading FASTA/FASTQ (issue 23): one long read among short ones costs memory in proportion to
its own length. Batches are cut by a token budget (``max_tokens``), padding is charged at its true cost, and the
padded batches hold exactly what one unbudgeted batch would."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.dna import decode, read_fastx
from omnipos.dna import limits as dna_limits
from omnipos.dna.reads import MAX_TOKENS, MIN_GROUP_TOKENS, token_groups

LETTERS = np.frombuffer(b"ACGT", dtype=np.uint8)


def write_fastq(path, lengths, seed=0):
    """A FASTQ file of random reads of ``lengths``, qualities varying per base; returns the sequences."""
    rng = np.random.default_rng(seed)
    sequences = []
    with open(path, "wb") as handle:
        for i, size in enumerate(lengths):
            seq = LETTERS[rng.integers(0, 4, size)].tobytes()
            qual = (rng.integers(0, 42, size) + 33).astype(np.uint8).tobytes()
            handle.write(b"@r%d\n%s\n+\n%s\n" % (i, seq, qual))
            sequences.append((seq.decode(), qual))
    return sequences


def test_one_long_read_gets_a_batch_of_its_own_in_file_order(tmp_path):
    lengths = [150] * 40 + [30_000] + [150] * 30
    path = tmp_path / "long.fq"
    truth = write_fastq(path, lengths)
    batches = list(read_fastx(path, batch_size=8192, parser="python"))
    assert [len(b) for b in batches][0] == 40 and len(batches[1]) <= 2  # the long read pads at most one neighbour
    for batch in batches:  # no batch pads more than twice its bases (or MIN_GROUP_TOKENS)
        assert batch.tokens.numel() <= max(MIN_GROUP_TOKENS, 2 * int(batch.lengths.sum()))
    names = [n for b in batches for n in b.names]
    assert names == [f"r{i}" for i in range(len(lengths))]
    assert torch.cat([b.records for b in batches]).tolist() == list(range(len(lengths)))
    got = [s for b in batches for s in decode(b.tokens, b.mask)]
    assert got == [seq for seq, _ in truth]
    qualities = [bytes((q + 33).tolist()) for b in batches for q, m in zip(b.qualities, b.mask) for q in [q[m]]]
    assert qualities == [q for _, q in truth]


@pytest.mark.parametrize("parser", ["python", "dnaio"])
def test_max_tokens_cuts_batches_without_changing_the_reads(tmp_path, parser):
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 400, 300).tolist()
    path = tmp_path / "mixed.fq"
    truth = write_fastq(path, lengths, seed=4)
    for budget in (1, 500, 4_000, 10**9):
        batches = list(read_fastx(path, batch_size=64, max_tokens=budget, parser=parser))
        for batch in batches:
            assert len(batch) <= 64
            assert len(batch) == 1 or batch.tokens.numel() <= budget
        assert [s for b in batches for s in decode(b.tokens, b.mask)] == [seq for seq, _ in truth]
        assert torch.cat([b.lengths for b in batches]).tolist() == lengths


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 5_000), min_size=1, max_size=60), st.integers(1, 20_000))
def test_token_groups_cover_the_rows_in_order_within_the_budget(lengths, budget):
    sizes = np.array(lengths, dtype=np.int64)
    groups = token_groups(sizes, budget)
    assert groups[0][0] == 0 and groups[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:]))
    for first, last in groups:
        assert last > first
        rows = sizes[first:last]
        padded = rows.size * int(rows.max())
        assert rows.size == 1 or padded <= min(budget, max(MIN_GROUP_TOKENS, 2 * int(rows.sum())))


def test_padding_is_charged_at_its_true_cost(tmp_path, monkeypatch):
    """A FASTQ batch costs tokens + mask + qualities = 3 bytes per padded position in uint8 (the guard budgeted
    2); the guard names the read."""
    path = tmp_path / "one.fq"
    write_fastq(path, [1000])
    monkeypatch.setattr(dna_limits, "MAX_BATCH_BYTES", 3 * 1000 - 1)
    with pytest.raises(ValueError, match=r"record 1 \('r0'\) \(1,000 letters\).*1 rows x 1,000 positions"):
        list(read_fastx(path, parser="python"))
    monkeypatch.setattr(dna_limits, "MAX_BATCH_BYTES", 3 * 1000)
    assert len(next(read_fastx(path, parser="python"))) == 1


@pytest.mark.parametrize("value, error", [(0, ValueError), (-5, ValueError), ("many", TypeError),
                                          (2.5, TypeError), (None, TypeError)])
def test_bad_max_tokens_is_refused_by_name(tmp_path, value, error):
    path = tmp_path / "one.fq"
    write_fastq(path, [10])
    with pytest.raises(error, match="max_tokens"):
        read_fastx(path, max_tokens=value)


_CHILD = textwrap.dedent("""
    import json, resource, sys, tempfile
    from omnipos.dna import read_fastx
    from omnipos.scale import precompute_reads
    import pyarrow.parquet  # imports are the baseline, not the work measured
    peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    base = peak()
    report = {}
    for path in sys.argv[1:]:  # ru_maxrss only grows: the smaller file first, then the 1 Mb read
        rows = sum(len(b) for b in read_fastx(path, batch_size=8192))
        after_read = peak()
        with tempfile.TemporaryDirectory() as out:
            result = precompute_reads(path, out + "/job", progress=False)
        report[path] = {"rows": rows, "items": result.items, "read_fastx": after_read - base,
                        "precompute_reads": peak() - base}
    print(json.dumps(report))
""")


def test_one_long_read_among_short_ones_peaks_in_proportion_to_itself(tmp_path):
    """Issue 23's FASTQ (one 100 kb read among 8,191 of 150 bp) peaked at 8.4 GB in read_fastx(batch_size=8192)
    and in precompute_reads with its defaults; a 1 Mb read could not be read at all. Peak RSS above the
    interpreter with torch and pyarrow imported, measured in a child process: under 500 MB for both files."""
    rng = np.random.default_rng(0)
    paths = []
    for long_read in (100_000, 1_000_000):
        path = tmp_path / f"long{long_read}.fq"
        sizes = np.full(8192, 150)
        sizes[4000] = long_read
        bases = LETTERS[rng.integers(0, 4, int(sizes.sum()))].tobytes()
        ends = np.cumsum(sizes).tolist()
        with open(path, "wb") as handle:
            handle.write(b"".join(b"@r%d\n%s\n+\n%s\n" % (i, bases[end - size:end], b"I" * size)
                                  for i, (size, end) in enumerate(zip(sizes.tolist(), ends))))
        paths.append(str(path))
    run = subprocess.run([sys.executable, "-c", _CHILD, *paths], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    for path in paths:
        got = report[path]
        assert got["rows"] == got["items"] == 8192
        assert got["read_fastx"] < 500 * 2**20, (path, got)
        assert got["precompute_reads"] < 500 * 2**20, (path, got)


def test_default_budget_keeps_short_read_batches_whole():
    assert 8192 * 150 * 2 < MAX_TOKENS  # a default precompute batch of short reads is never cut
