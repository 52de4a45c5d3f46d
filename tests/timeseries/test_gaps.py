"""time_gaps, log_gap_encoding and GapBucketEmbedding: formulas, boundaries, bad input."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.timeseries import (
    GapBucketEmbedding,
    batch_timelines,
    log_gap_encoding,
    time_gaps,
)


def test_time_gaps_first_zero_duplicates_zero_padding_zero():
    times, mask = batch_timelines([[0.0, 1.5, 1.5, 30.0], [], [5.0]], origin="epoch")
    gaps = time_gaps(times, mask)
    assert gaps.tolist() == [[0.0, 1.5, 0.0, 28.5], [0.0] * 4, [0.0] * 4]
    assert gaps.dtype == torch.float64


def test_time_gaps_skip_masked_slots_anywhere():
    times = torch.tensor([[1.0, 99.0, 4.0, -7.0, 10.0]])
    mask = torch.tensor([[True, False, True, False, True]])
    assert time_gaps(times, mask).tolist() == [[0.0, 0.0, 3.0, 0.0, 6.0]]


@given(st.lists(st.lists(st.floats(-1e5, 1e5), max_size=8), min_size=1, max_size=4))
def test_time_gaps_match_numpy_diff(timelines):
    times, mask = batch_timelines(timelines, sort=True, origin="epoch")
    gaps = time_gaps(times, mask)
    for row, timeline in enumerate(timelines):
        expected = np.diff(np.sort(np.asarray(timeline, dtype=np.float64)), prepend=min(timeline, default=0.0))
        np.testing.assert_allclose(gaps[row][mask[row]].numpy(), expected, rtol=0, atol=1e-9)


def test_time_gaps_unsorted_raise():
    with pytest.raises(ValueError, match=r"sorted.*index \(0, 2\)"):
        time_gaps(torch.tensor([[0.0, 2.0, 1.0]]))


def test_log_gap_encoding_formula():
    gaps = torch.tensor([[0.0, 0.5, 24.0, 8760.0]], dtype=torch.float64)
    out = log_gap_encoding(gaps, 6, base=100.0)
    x = np.log1p(gaps.numpy())[..., None]
    w = 100.0 ** (-np.arange(3) * 2 / 6)
    ref = np.empty(x.shape[:-1] + (6,))
    ref[..., 0::2], ref[..., 1::2] = np.sin(x * w), np.cos(x * w)
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-6)


def test_log_gap_encoding_is_unit_free_with_its_scale():
    hours = torch.tensor([[0.0, 0.25, 36.0, 2000.0]], dtype=torch.float64)
    a = log_gap_encoding(hours, 16)
    b = log_gap_encoding(hours * 60, 16, unit="min")
    c = log_gap_encoding(hours / 24, 16, unit="d", scale=1 / 24)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    torch.testing.assert_close(a, c, rtol=0, atol=1e-6)


def test_log_gap_encoding_bad_input():
    with pytest.raises(ValueError, match="gaps must be >= 0"):
        log_gap_encoding(torch.tensor([[1.0, -0.5]]), 4)
    with pytest.raises(ValueError, match="scale must be a positive"):
        log_gap_encoding(torch.tensor([[1.0]]), 4, scale="0h")
    masked = log_gap_encoding(torch.tensor([[1.0, -0.5]]), 4, mask=torch.tensor([[True, False]]))
    assert (masked[0, 1] == 0).all()


DAY, WEEK = 24.0, 168.0
DEFAULT_HOURS = [1.0, DAY, 7 * DAY, 30 * DAY, 90 * DAY, 180 * DAY, 365 * DAY]


@pytest.mark.parametrize("unit, per_hour", [("h", 1.0), ("min", 60.0), ("s", 3600.0), ("d", 1 / 24)])
def test_gap_buckets_at_and_around_each_boundary(unit, per_hour):
    """Left-closed buckets: a gap exactly at a boundary is in the bucket that boundary opens."""
    emb = GapBucketEmbedding(dim=4, unit=unit)
    for k, b in enumerate(DEFAULT_HOURS):
        at = b * per_hour
        gaps = torch.tensor([np.nextafter(at, 0), at, np.nextafter(at, np.inf), at * 0.99, at * 1.01],
                            dtype=torch.float64)
        assert emb.bucketize(gaps).tolist() == [k, k + 1, k + 1, k, k + 1], (unit, b)
    assert emb.bucketize(torch.tensor([0.0, 1e9])).tolist() == [0, 7]


def test_gap_bucket_names_and_seeds_examples():
    emb = GapBucketEmbedding(dim=4)
    names = emb.bucket_names()
    assert names == ["<1h", "1h-1d", "1d-7d", "7d-30d", "30d-90d", "90d-180d", "180d-365d", ">=365d"]
    # the seeds' "less than a week" and "one to three months"
    assert names[emb.bucketize(torch.tensor([3 * DAY])).item()] == "1d-7d"
    assert names[emb.bucketize(torch.tensor([45 * DAY])).item()] == "30d-90d"


def test_gap_bucket_embedding_vectors_and_padding():
    emb = GapBucketEmbedding(("1d", 7.0 * DAY), dim=3)
    gaps = torch.tensor([[0.0, 5.0, DAY, 200.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, True], [True, False, False, False]])
    out = emb(gaps, mask)
    table = emb.embedding.weight
    assert torch.equal(out[0], table[[0, 0, 1, 2]])
    assert torch.equal(out[1, 0], table[0]) and (out[1, 1:] == 0).all()
    out.sum().backward()
    assert emb.embedding.weight.grad is not None


def test_gap_bucket_bad_arguments():
    with pytest.raises(ValueError, match="strictly increasing"):
        GapBucketEmbedding(("1d", "1h"), 4)
    with pytest.raises(ValueError, match="strictly increasing"):
        GapBucketEmbedding(("1d", "24h"), 4)
    with pytest.raises(ValueError, match="positive"):
        GapBucketEmbedding(("0h", "1h"), 4)
    with pytest.raises(TypeError, match="dim="):
        GapBucketEmbedding()
    with pytest.raises(ValueError, match="known units"):
        GapBucketEmbedding(("1 day",), 4)
    with pytest.raises(ValueError, match="gaps must be >= 0"):
        GapBucketEmbedding(dim=2)(torch.tensor([-1.0]))
    assert "boundaries=('1h'" in repr(GapBucketEmbedding(dim=2))


# --- issues 13 and 14: dtypes, integer and meta inputs, extreme gaps -------------------------------------------


def test_time_gaps_on_unsigned_integers_still_sees_unsorted_times():
    """uint8 differences wrapped around (3 - 5 = 254) and hid the unsorted times."""
    with pytest.raises(ValueError, match="sorted"):
        time_gaps(torch.tensor([[5, 3]], dtype=torch.uint8))
    gaps = time_gaps(torch.tensor([[0, 200, 255]], dtype=torch.uint8))
    assert gaps.dtype == torch.float64 and gaps.tolist() == [[0.0, 200.0, 55.0]]
    big = time_gaps(torch.tensor([[-2**62, 2**62]]))
    assert big.tolist() == [[0.0, 2.0**63]]


def test_time_gaps_on_meta_tensors_gives_the_shape_without_reading_values():
    times, mask = torch.empty(2, 5, device="meta"), torch.empty(2, 5, dtype=torch.bool, device="meta")
    for gaps in (time_gaps(times), time_gaps(times, mask)):
        assert gaps.is_meta and gaps.shape == (2, 5)
    with torch.device("meta"):
        emb = GapBucketEmbedding(dim=3)
    out = emb(times, mask)
    assert out.is_meta and out.shape == (2, 5, 3)


def test_half_gap_buckets_keep_float64_boundaries():
    """GapBucketEmbedding(dim=4, unit='s').half() rounded 3.15e7 s boundaries to inf: 1e7 s landed in bucket 1."""
    emb = GapBucketEmbedding(dim=4, unit="s")
    gaps = torch.tensor([[0.0, 3599.0, 1e7, 3.2e7]], dtype=torch.float64)
    expected = emb.bucketize(gaps)
    assert expected.tolist() == [[0, 0, 5, 7]]
    for convert in (lambda m: m.half(), lambda m: m.bfloat16(), lambda m: m.to(torch.float16)):
        low = convert(GapBucketEmbedding(dim=4, unit="s"))
        low.load_state_dict(emb.state_dict())
        assert low.boundaries.dtype == torch.float64 and torch.isfinite(low.boundaries).all()
        assert torch.equal(low.bucketize(gaps), expected)
        out = low(gaps)
        assert out.dtype == low.embedding.weight.dtype
        assert torch.equal(out[0], low.embedding.weight[expected[0]])


def test_log_gap_encoding_of_enormous_ratios_is_finite():
    gaps = torch.tensor([[0.0, 1e300, 1.7e308]], dtype=torch.float64)
    out = log_gap_encoding(gaps, 4, scale="1e-10h", dtype=torch.float64)
    assert torch.isfinite(out).all()
    x = np.log(gaps[0, 1:].numpy()) - np.log(1e-10)
    w = 1000.0 ** (-np.arange(2) * 2 / 4)
    np.testing.assert_allclose(out[0, 1:, 0::2].numpy(), np.sin(x[:, None] * w), atol=1e-9)
