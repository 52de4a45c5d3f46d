"""FastxDataset: length-bucketed batches, uint8 tokens through collate, the read options, bad arguments."""

import random

import pytest
import torch

from omnipos.dna import PAD, FastxDataset, ReadBatch, collate_reads, decode, read_fastx


def write_fastq(path, lengths, seed=0):
    rng = random.Random(seed)
    with open(path, "w") as handle:
        for i, n in enumerate(lengths):
            seq = "".join(rng.choice("ACGT") for _ in range(n))
            handle.write(f"@r{i}\n{seq}\n+\n{'I' * n}\n")


def test_items_carry_uint8_tokens_and_where_they_came_from(tmp_path):
    path = tmp_path / "r.fq"
    write_fastq(path, [5, 3, 12])
    items = list(FastxDataset(path, chunk_size=2, max_len=8, truncation="split"))
    assert [(i["name"], len(i["tokens"]), i["record"], i["offset"]) for i in items] == \
        [("r0", 5, 0, 0), ("r1", 3, 1, 0), ("r2", 8, 2, 0), ("r2", 4, 2, 8)]
    assert all(i["tokens"].dtype == torch.uint8 and i["quality_offset"] == 33 for i in items)
    batch = collate_reads(items)
    assert batch.tokens.dtype == torch.uint8 and batch.records.tolist() == [0, 1, 2, 2]
    assert batch.offsets.tolist() == [0, 0, 0, 8] and batch.quality_offset == 33
    wide = collate_reads(list(FastxDataset(path, token_dtype=torch.int64)))
    assert wide.tokens.dtype == torch.int64 and torch.equal(wide.tokens[:, :5].long()[0], batch.tokens[0, :5].long())


def test_length_bucketed_batches_pad_a_long_read_only_with_its_neighbours(tmp_path):
    """One 5,000-letter read among 300 reads of 50-150: a DataLoader batch of 32 pads 32 rows to 5,000 and
    every other batch to ~150; bucketed batches under a token budget put the long read in a batch of its own
    and pad the short ones to their neighbours' length."""
    rng = random.Random(1)
    lengths = [rng.randint(50, 150) for _ in range(300)]
    lengths[123] = 5000
    path = tmp_path / "r.fq"
    write_fastq(path, lengths)
    plain = torch.utils.data.DataLoader(FastxDataset(path, chunk_size=50), batch_size=32, collate_fn=collate_reads)
    plain_padded = sum(b.tokens.numel() for b in plain)
    assert plain_padded > 32 * 5000
    dataset = FastxDataset(path, batch_size=32, max_tokens=32 * 150, bucket_size=128, chunk_size=50)
    batches = list(dataset)
    assert all(isinstance(b, ReadBatch) and len(b) <= 32 for b in batches)
    assert sorted(n for b in batches for n in b.names) == sorted(f"r{i}" for i in range(300))
    widths = sorted(b.tokens.shape[1] for b in batches)
    assert widths[-1] == 5000 and widths[-2] <= 150
    assert [len(b) for b in batches if b.tokens.shape[1] == 5000] == [1]
    padded = sum(b.tokens.numel() for b in batches)
    assert padded < 1.2 * sum(lengths) < plain_padded / 4
    for b in batches:  # every read intact, its quality too
        for name, seq, length in zip(b.names, decode(b.tokens, b.mask), b.lengths.tolist()):
            assert len(seq) == length == lengths[int(name[1:])]
        assert b.lengths.max() - b.lengths.min() <= 5000
    loader = torch.utils.data.DataLoader(dataset, batch_size=None)
    assert sum(len(b) for b in loader) == 300
    assert "batch_size=32, max_tokens=4800, bucket_size=128" in repr(dataset)
    only_rows = list(FastxDataset(path, batch_size=32, bucket_size=128))
    assert sum(len(b) for b in only_rows) == 300 and max(len(b) for b in only_rows) == 32


def test_bucket_default_and_bad_arguments(tmp_path):
    path = tmp_path / "r.fq"
    write_fastq(path, [3, 4])
    assert FastxDataset(path, batch_size=4).bucket_size == 256
    assert FastxDataset(path, max_tokens=100).bucket_size == 4096
    with pytest.raises(ValueError, match="max_tokens"):
        FastxDataset(path, max_tokens=0)
    with pytest.raises(ValueError, match="bucket_size applies to batches"):
        FastxDataset(path, bucket_size=10)
    with pytest.raises(ValueError, match="batch_size"):
        FastxDataset(path, batch_size=0)
    with pytest.raises(TypeError, match="paths"):
        FastxDataset([path, 3])
    with pytest.raises(ValueError, match="rna"):
        FastxDataset(path, rna="drop")
    with pytest.raises(FileNotFoundError):
        FastxDataset(tmp_path / "missing.fq")
    with pytest.raises(TypeError, match="items"):
        collate_reads("not items")
    with pytest.raises(TypeError, match=r"items\[0\]"):
        collate_reads([torch.zeros(3)])


def test_rna_keep_flags_survive_collate(tmp_path):
    path = tmp_path / "r.fa"
    path.write_bytes(b">dna\nACGT\n>rna\nACGU\n")
    items = list(FastxDataset(path, rna="keep"))
    assert [i["rna"] for i in items] == [False, True]
    batch = collate_reads(items)
    assert decode(batch.tokens, batch.mask, rna=batch.rna) == ["ACGT", "ACGU"]
    assert batch.quality_offset is None and batch.qualities is None


def test_items_from_files_read_with_different_offsets_collate_without_an_offset(tmp_path):
    sanger, illumina = tmp_path / "s.fq", tmp_path / "i.fq"
    sanger.write_bytes(b"@s\nAC\n+\n#I\n")
    illumina.write_bytes(b"@i\nAC\n+\nBh\n")
    batch = collate_reads(list(FastxDataset([sanger, illumina], quality_offset="auto")))
    assert batch.quality_offset is None and batch.qualities.tolist() == [[2, 40], [2, 40]]
    assert (batch.tokens[~batch.mask] == PAD).all()
    assert next(read_fastx(illumina, quality_offset="auto")).quality_offset == 64
