"""The NumPy fast paths of issue 25's DNA row (padding from a mask, the RC of a padded one-hot batch) against
per-row references, on random values (pads included, so a pad slot that moved would show)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.dna import read_fastx, reverse_complement
from omnipos.dna.alphabet import pad_rows


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=12), st.sampled_from([torch.uint8, torch.int16,
                                                                              torch.int64]))
def test_pad_rows_places_each_row_at_its_start(lengths, dtype):
    rng = np.random.default_rng(len(lengths))
    sizes = np.array(lengths)
    flat = rng.integers(0, 15, int(sizes.sum())).astype(np.uint8)
    width = int(sizes.max()) + int(rng.integers(0, 3))
    out = pad_rows(flat, np.arange(width) < sizes[:, None], 15, dtype)
    assert out.dtype == dtype and out.shape == (len(lengths), width)
    start = 0
    for row, n in enumerate(lengths):
        assert out[row, :n].tolist() == flat[start:start + n].tolist()
        assert (out[row, n:] == 15).all()
        start += n


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_padded_one_hot_rc_numpy_path_equals_per_row_reference(dtype):
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 30, 50)
    lengths[3] = 30
    x = torch.from_numpy(rng.standard_normal((50, 30, 4))).to(dtype)  # pads hold values too: they must stay
    mask = torch.arange(30) < torch.from_numpy(lengths)[:, None]
    got = reverse_complement(x, mask)
    for row, n in enumerate(lengths.tolist()):
        assert torch.equal(got[row, :n], x[row, :n].flip(0).flip(-1))
        assert torch.equal(got[row, n:], x[row, n:])
    assert torch.equal(got, reverse_complement(x.clone().requires_grad_(), mask).detach())  # the torch path


@pytest.mark.parametrize("parser", ["python", "dnaio"])
def test_bucket_size_batches_reads_of_similar_length_and_loses_none(tmp_path, parser):
    rng = np.random.default_rng(11)
    lengths = rng.integers(0, 120, 500)
    path = tmp_path / "v.fq"
    with open(path, "wb") as handle:
        for i, n in enumerate(lengths.tolist()):
            seq = np.frombuffer(b"ACGTN", np.uint8)[rng.integers(0, 5, n)].tobytes()
            handle.write(b"@r%d\n%s\n+\n%s\n" % (i, seq, bytes(rng.integers(33, 74, n).astype(np.uint8))))
    plain = list(read_fastx(path, batch_size=64, parser=parser))
    bucketed = list(read_fastx(path, batch_size=64, bucket_size=200, parser=parser))
    assert all(len(b) <= 64 for b in bucketed) and sum(len(b) for b in bucketed) == 500
    by_record = {}
    for b in bucketed:
        assert (b.lengths[1:] >= b.lengths[:-1]).all()  # sorted within a bucket
        for row, record in enumerate(b.records.tolist()):
            n = int(b.lengths[row])
            by_record[record] = (b.names[row], b.tokens[row, :n], b.qualities[row, :n])
    assert sorted(by_record) == list(range(500))
    padded = sum(b.tokens.numel() for b in bucketed)
    assert padded < 0.75 * sum(b.tokens.numel() for b in plain)  # less padding (64 of 200 sorted per batch)
    for b in plain:
        for row, record in enumerate(b.records.tolist()):
            n = int(b.lengths[row])
            name, tokens, qualities = by_record[record]
            assert name == b.names[row] and torch.equal(tokens, b.tokens[row, :n])
            assert torch.equal(qualities, b.qualities[row, :n])


@pytest.mark.parametrize("value, error", [(0, ValueError), ("8", TypeError)])
def test_bad_bucket_size_refused(tmp_path, value, error):
    path = tmp_path / "r.fq"
    path.write_bytes(b"@a\nAC\n+\nII\n")
    with pytest.raises(error, match="bucket_size"):
        read_fastx(path, bucket_size=value)
