"""The NumPy fast paths of issue 25's DNA row (padding from a mask, the RC of a padded one-hot batch) against
per-row references, on random values (pads included, so a pad slot that moved would show)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.dna import rc_symmetric_encoding, read_fastx, reverse_complement
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


def _random_fastq(rng, count, low=0, high=120):
    out = []
    for i, n in enumerate(rng.integers(low, high, count).tolist()):
        seq = np.frombuffer(b"ACGTN", np.uint8)[rng.integers(0, 5, n)].tobytes()
        out.append(b"@r%d\n%s\n+\n%s\n" % (i, seq, bytes(rng.integers(33, 74, n).astype(np.uint8))))
    return b"".join(out)


def _same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.names == y.names and torch.equal(x.tokens, y.tokens) and torch.equal(x.records, y.records)
        assert torch.equal(x.qualities, y.qualities) and torch.equal(x.mask, y.mask)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from([b"\n", b"\r\n", b" \n", b"\t", b"  ", b"\x0b\n"]), max_size=5),
       st.sampled_from([b"\n", b"\r\n"]), st.integers(1, 40))
def test_trailing_blank_lines_read_by_dnaio_alone_like_the_reference(tmp_path_factory, tail, eol, count):
    """Blank lines at the end of a plain FASTQ are cut off before dnaio reads it: the same batches as the
    reference parser, and the reference is not asked to take over (it would have to re-read the file)."""
    rng = np.random.default_rng(count)
    path = tmp_path_factory.mktemp("blank") / "r.fq"
    path.write_bytes(_random_fastq(rng, count).replace(b"\n", eol) + b"".join(tail))
    reference = list(read_fastx(path, batch_size=16, parser="python"))
    import omnipos.dna.reads as reads

    original = reads.python_records

    def refuse(*args, **kwargs):
        raise AssertionError("the reference parser took over")

    reads.python_records = refuse
    try:
        fast = list(read_fastx(path, batch_size=16, parser="dnaio"))
    finally:
        reads.python_records = original
    _same_batches(fast, reference)


@pytest.mark.parametrize("tail", [b"", b"\n", b"\n\n", b"\r\n \n"])
def test_a_last_empty_read_keeps_its_empty_quality_line(tmp_path, tail):
    path = tmp_path / "r.fq"
    path.write_bytes(b"@a\nAC\n+\nII\n@empty\n\n+\n\n" + tail)
    for parser in ("python", "dnaio"):
        (batch,) = read_fastx(path, parser=parser)
        assert batch.names == ["a", "empty"] and batch.lengths.tolist() == [2, 0]


@pytest.mark.parametrize("data", [
    b"@a\nACGT\n+\nIIII  \n\n",  # spaces after the last quality: part of its line, refused by both
    b"@a\nACGT\n+\nIIII\n@b\nAC\n\n\n",  # a truncated last record before the blank lines
    b"@a\nACGT\n+\n\n\n",  # a missing quality line: blank lines are no quality
])
def test_trailing_whitespace_that_is_no_blank_line_gets_the_reference_error(tmp_path, data):
    path = tmp_path / "r.fq"
    path.write_bytes(data)
    errors = []
    for parser in ("python", "dnaio"):
        with pytest.raises(ValueError) as info:
            list(read_fastx(path, parser=parser))
        errors.append(str(info.value))
    assert errors[0] == errors[1]


def test_dnaio_reads_a_bucket_a_slice_at_a_time_and_loses_nothing(tmp_path, monkeypatch):
    import omnipos.dna.dnaio as fast

    monkeypatch.setattr(fast, "_SLICE", 7)  # records alive at a time inside the parser: many slices per bucket
    path = tmp_path / "r.fq"
    path.write_bytes(_random_fastq(np.random.default_rng(5), 300))
    for bucket in (None, 100):
        _same_batches(list(read_fastx(path, batch_size=32, bucket_size=bucket, parser="dnaio")),
                      list(read_fastx(path, batch_size=32, bucket_size=bucket, parser="python")))


@pytest.mark.parametrize("parser", ["python", "dnaio"])
def test_bucket_size_names_the_first_bad_record_in_the_file(tmp_path, parser):
    """Records are put in length order before they are validated: a bad record that sorts first must not hide
    the one that comes first in the file."""
    path = tmp_path / "r.fq"
    path.write_bytes(b"@long\nACGTACGTXC\n+\nIIIIIIIIII\n@ok\nACG\n+\nIII\n@short\nAXG\n+\nIII\n")
    with pytest.raises(ValueError, match=r"record 1 \('long'\).*'X'"):
        list(read_fastx(path, bucket_size=8, parser=parser))
    with pytest.raises(ValueError, match=r"record 1 \('long'\).*'X'"):
        list(read_fastx(path, parser=parser))


@pytest.mark.parametrize("truncation", ["head", "split"])
def test_bucket_size_with_rows_cut_by_max_len(tmp_path, truncation):
    path = tmp_path / "r.fq"
    path.write_bytes(_random_fastq(np.random.default_rng(9), 80, 1, 60))
    plain = list(read_fastx(path, batch_size=16, max_len=25, truncation=truncation))
    rows = {}
    for b in plain:
        for i in range(len(b)):
            rows[int(b.records[i]), int(b.offsets[i])] = b.tokens[i, :int(b.lengths[i])]
    bucketed = list(read_fastx(path, batch_size=16, bucket_size=50, max_len=25, truncation=truncation))
    seen = 0
    for b in bucketed:
        assert (b.lengths[1:] >= b.lengths[:-1]).all()
        for i in range(len(b)):
            assert torch.equal(rows[int(b.records[i]), int(b.offsets[i])], b.tokens[i, :int(b.lengths[i])])
            seen += 1
    assert seen == len(rows)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=20), st.sampled_from([3, 16]), st.booleans())
def test_cached_length_blocks_equal_the_per_batch_blocks_and_the_formula(lengths, dim, same):
    """rc_symmetric_encoding from lengths: the cached per-length table (short reads) and the per-batch blocks
    (long reads) give the same bits, and both the float64 formula."""
    import omnipos.dna.positional as positional

    if same:
        lengths = [lengths[0]] * len(lengths)
    lengths_t = torch.tensor(lengths)
    cached = rc_symmetric_encoding(lengths_t, dim)
    original = positional._BLOCKS_BYTES
    positional._BLOCKS_BYTES = 0
    try:
        blocks = rc_symmetric_encoding(lengths_t, dim)
    finally:
        positional._BLOCKS_BYTES = original
    assert torch.equal(cached, blocks)
    w = 10000.0 ** (-np.arange(dim) / dim)
    for b, n in enumerate(lengths):
        c = np.arange(n) - (n - 1) / 2
        np.testing.assert_allclose(cached[b, :n].double().numpy(), np.cos(c[:, None] * w), atol=1e-6, rtol=0)
        assert (cached[b, n:] == 0).all()


@pytest.mark.parametrize("dtype, bits", [(torch.float32, torch.int32), (torch.float16, torch.int16),
                                         (torch.float64, torch.int64)])
def test_padded_one_hot_rc_moves_bits_not_values(dtype, bits):
    """The NumPy path moves each position's channels as raw bytes: NaN payloads, -0.0 and subnormals come out
    exactly where the per-row reference (flip within the length, channels reversed) puts them."""
    rng = np.random.default_rng(13)
    lengths = rng.integers(0, 20, 40)
    lengths[0] = 20
    info = torch.iinfo(bits)
    raw = torch.from_numpy(rng.integers(info.min, info.max, (40, 20, 4), dtype=np.int64)).to(bits)
    x = raw.view(dtype)  # every bit pattern: NaNs with payloads included
    mask = torch.arange(20) < torch.from_numpy(lengths)[:, None]
    got = reverse_complement(x, mask).view(bits)
    for row, n in enumerate(lengths.tolist()):
        assert torch.equal(got[row, :n], raw[row, :n].flip(0).flip(-1))
        assert torch.equal(got[row, n:], raw[row, n:])


def _torch_reference_rc(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The torch (autograd) path of reverse_complement: a gather with one index, not the NumPy window path."""
    return reverse_complement(x.clone().requires_grad_(), mask).detach()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=9), st.integers(0, 3),
       st.sampled_from([torch.float32, torch.float64, torch.float16]), st.booleans())
def test_padded_one_hot_rc_windows_equal_the_per_row_reference(lengths, extra, dtype, strided_mask):
    """The NumPy path (a reversed copy, one gather of whole windows, the pads written back) against the per-row
    formula and the torch path, on random values in the pads: empty rows, a short first row (whose window starts
    before the data), all rows full, masks wider than the longest read, and a non-contiguous mask."""
    rng = np.random.default_rng(len(lengths) * 31 + extra)
    width = max(lengths) + extra
    sizes = torch.tensor(lengths)
    x = torch.from_numpy(rng.standard_normal((len(lengths), width, 4))).to(dtype)
    mask = torch.arange(width) < sizes[:, None]
    if strided_mask:  # same values, another memory layout
        mask = (torch.arange(width)[:, None] < sizes[None, :]).t()
    got = reverse_complement(x, mask)
    assert got.dtype == dtype and got.shape == x.shape
    for row, n in enumerate(lengths):
        assert torch.equal(got[row, :n], x[row, :n].flip(0).flip(-1))
        assert torch.equal(got[row, n:], x[row, n:])
    assert torch.equal(got, _torch_reference_rc(x, mask))
    assert torch.equal(reverse_complement(got, mask), x)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=5, max_size=5), min_size=1, max_size=6))
def test_rc_numpy_mask_check_refuses_exactly_what_check_mask_refuses(rows):
    """The NumPy path checks the mask's order itself (first False per row, count of Trues): it refuses a True
    after a False, in any row, with check_mask's words, and accepts every mask check_mask accepts."""
    from omnipos.dna.reverse_complement import check_mask

    mask = torch.tensor(rows)
    x = torch.from_numpy(np.random.default_rng(len(rows)).standard_normal((len(rows), 5, 4))).float()
    try:
        check_mask(mask, mask.shape)
    except ValueError as exc:
        with pytest.raises(ValueError, match="padding at the end of each row") as info:
            reverse_complement(x, mask)
        assert str(info.value) == str(exc)
    else:
        assert torch.equal(reverse_complement(x, mask), _torch_reference_rc(x, mask))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=0, max_size=12), st.sampled_from([0, 3, 2000]))
def test_length_mask_equals_the_comparison_with_positions(lengths, extra):
    """The cached-table mask (widths up to 1,024) and the broadcast one (wider) both equal position < length,
    and the caller gets a fresh writable array (the cached table stays as it was)."""
    from omnipos.dna.alphabet import length_mask

    sizes = np.array(lengths, dtype=np.int64)
    width = (max(lengths) if lengths else 0) + extra
    mask = length_mask(sizes, width)
    assert mask.dtype == np.bool_ and mask.shape == (len(lengths), width)
    np.testing.assert_array_equal(mask, np.arange(width)[None, :] < sizes.reshape(-1, 1))
    if mask.size:
        mask[...] = ~mask
        np.testing.assert_array_equal(length_mask(sizes, width), ~mask)
