"""ShardedReadsDataset and load_reads(max_len=) (issue 23): a lazy map-style dataset over a reads job, one
unpadded read per item, a collate that pads one batch; checked against Biopython's reading of the same files
(Biopython 1.8x) and against load_reads."""

import gzip
import pickle

import numpy as np
import pytest
import torch
from Bio import SeqIO

from omnipos.dna import decode
from omnipos.scale import ShardedReadsDataset, load_reads, precompute_reads


@pytest.fixture(scope="module")
def job(tmp_path_factory, fastx):
    write_fastx = fastx
    folder = tmp_path_factory.mktemp("reads")
    files = [write_fastx(folder / f"f{i}.fq.gz", count, seed=10 + i) for i, count in enumerate((23, 0, 41))]
    precompute_reads(files, folder / "out", dim=8, shard_size=7, progress=False)
    records = []
    for path in files:
        with gzip.open(path, "rt") as handle:
            records += list(SeqIO.parse(handle, "fastq"))
    return folder / "out", records


def test_items_are_the_reads_biopython_reads(job):
    out, records = job
    dataset = ShardedReadsDataset(out)
    assert len(dataset) == len(records) == 64 and len(dataset.shards) > 2
    for i in np.random.default_rng(0).permutation(len(dataset)).tolist():
        item, record = dataset[i], records[i]
        assert item["name"] == record.description
        assert decode(item["tokens"][None], torch.ones(1, len(item["tokens"]), dtype=torch.bool))[0] == str(record.seq)
        assert item["quality"].tolist() == record.letter_annotations["phred_quality"]
        assert item["offset"] == 0 and item["quality_offset"] == 33 and item["quality_encoding"] == "phred"
    assert dataset[-1]["name"] == records[-1].description


def test_collate_pads_one_batch_and_equals_load_reads(job):
    out, _ = job
    dataset = ShardedReadsDataset(out)
    whole = load_reads(out)
    picked = [5, 40, 41, 63]
    batch = dataset.collate([dataset[i] for i in picked])
    width = int(whole["lengths"][picked].max())
    assert batch["tokens"].shape == (4, width) and batch["positional"].shape == (4, width, 8)
    assert batch["names"] == [whole["names"][i] for i in picked]
    for key in ("tokens", "mask", "qualities", "positional"):
        assert torch.equal(batch[key], whole[key][picked, :width]), key
    for key in ("lengths", "records", "offsets"):
        assert torch.equal(batch[key], whole[key][picked]), key


def test_dataloader_with_workers_sees_every_read_once_in_order(job):
    out, records = job
    dataset = pickle.loads(pickle.dumps(ShardedReadsDataset(out, cache_shards=1)))
    loader = torch.utils.data.DataLoader(dataset, batch_size=10, num_workers=2, collate_fn=dataset.collate)
    batches = list(loader)
    assert [n for b in batches for n in b["names"]] == [r.description for r in records]
    for b in batches:  # each batch is padded to its own longest read, not the job's
        assert b["tokens"].shape[1] == int(b["lengths"].max())


@pytest.mark.parametrize("truncation", ["head", "tail", "split"])
def test_max_len_cuts_reads_like_load_reads_and_slicing(job, truncation):
    out, records = job
    dataset = ShardedReadsDataset(out, max_len=16, truncation=truncation)
    whole = load_reads(out, max_len=16, truncation=truncation)
    expected = []
    for number, record in enumerate(records):
        seq, qual = str(record.seq), record.letter_annotations["phred_quality"]
        if truncation == "split":
            starts = range(0, max(len(seq), 1), 16)
        else:
            starts = [max(len(seq) - 16, 0) if truncation == "tail" else 0]
        expected += [(record.description, seq[s:s + 16], qual[s:s + 16], number, s) for s in starts]
    assert len(dataset) == len(whole["names"]) == len(expected)
    for i, (name, seq, qual, record, start) in enumerate(expected):
        item = dataset[i]
        assert (item["name"], item["offset"], item["quality"].tolist()) == (name, start, qual)
        assert whole["names"][i] == name and int(whole["offsets"][i]) == start and int(whole["lengths"][i]) == len(seq)
        got = decode(item["tokens"][None], torch.ones(1, len(seq), dtype=torch.bool))[0]
        assert got == seq
        assert torch.equal(whole["tokens"][i, :len(seq)], item["tokens"])
    assert whole["tokens"].shape[1] <= 16


def test_max_len_error_names_the_read(job):
    out, records = job
    longest = max(range(len(records)), key=lambda i: len(records[i]))
    with pytest.raises(ValueError, match=r"more than max_len=5; pass truncation="):
        load_reads(out, max_len=5)
    dataset = ShardedReadsDataset(out, max_len=5)
    with pytest.raises(ValueError, match=rf"read \d+ \('{records[longest].description}'\) has"):
        dataset[longest]


@pytest.mark.parametrize("kwargs, error, words", [
    ({"max_len": 0}, ValueError, "max_len"), ({"max_len": "8"}, TypeError, "max_len"),
    ({"truncation": "head"}, ValueError, "needs max_len"), ({"max_len": 4, "truncation": "cut"}, ValueError,
                                                            "truncation"),
    ({"cache_shards": 0}, ValueError, "cache_shards")])
def test_bad_arguments_refused_by_name(job, kwargs, error, words):
    out, _ = job
    with pytest.raises(error, match=words):
        ShardedReadsDataset(out, **kwargs)


def test_bad_index_refused(job):
    dataset = ShardedReadsDataset(job[0])
    with pytest.raises(IndexError, match="out of range for 64 reads"):
        dataset[64]
    with pytest.raises(TypeError, match="index must be an int"):
        dataset[True]
    with pytest.raises(TypeError, match="index must be an int"):
        dataset["3"]
