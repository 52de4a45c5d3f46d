"""Fuzz the public DNA API (issue 14): odd tensors (NaN/inf, extreme magnitudes, empty, 0-d, non-contiguous,
every dtype, meta), odd Python values and random bytes as FASTA/FASTQ files. Only ValueError / TypeError may
escape, outputs are finite, and the two parsers give the same result on every file."""

import gzip
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omnipos.dna import (
    FastxDataset,
    RCEquivariant,
    RCSymmetricEncoding,
    centered_positions,
    collate_reads,
    complement_tokens,
    decode,
    encode,
    flip_within_lengths,
    kmer_tokens,
    one_hot,
    rc_symmetric_encoding,
    read_fastx,
    relative_basis,
    reverse_complement,
    soft_mask,
    vocab_size,
)

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])
DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool, torch.complex64]
SHAPES = [(), (0,), (4,), (2, 0), (0, 3), (2, 5), (3, 1), (1, 3, 4), (2, 4, 5), (2, 3, 4, 2)]
INT_VALUES = [0, 1, 3, 4, 14, 15, 16, 19, 30, 31, 32, 255, -1, 2**31 - 1, -(2**63), 2**63 - 1]
FLOAT_VALUES = [0.0, 0.5, -1.5, 1.0, 1e-310, 1e38, -1e308, float("nan"), float("inf"), float("-inf")]


@st.composite
def odd_tensors(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.sampled_from(SHAPES))
    numel = 1
    for s in shape:
        numel *= s
    if dtype == torch.bool:
        values = torch.tensor(draw(st.lists(st.booleans(), min_size=numel, max_size=numel)), dtype=torch.bool)
    elif dtype.is_floating_point or dtype.is_complex:
        values = torch.tensor(draw(st.lists(st.sampled_from(FLOAT_VALUES), min_size=numel, max_size=numel)),
                              dtype=torch.float64).to(dtype)
    else:
        info = torch.iinfo(dtype)
        pool = [v for v in INT_VALUES if info.min <= v <= info.max]
        values = torch.tensor(draw(st.lists(st.sampled_from(pool), min_size=numel, max_size=numel)),
                              dtype=torch.int64).to(dtype)
    tensor = values.reshape(shape)
    layout = draw(st.sampled_from(["plain", "transposed", "strided", "meta"]))
    if layout == "transposed" and tensor.ndim >= 2:
        tensor = tensor.transpose(0, 1).contiguous().transpose(0, 1)  # same values, non-contiguous
    elif layout == "strided" and tensor.ndim >= 1:
        tensor = torch.stack([tensor, tensor], -1)[..., 0]  # non-contiguous view of the same values
    elif layout == "meta":
        tensor = torch.empty(shape, dtype=dtype, device="meta")
    return tensor


# Integers small enough to run, or so large they must be refused by name (the sizes in between are valid and
# would only make the test slow: a 4 GiB batch is allowed, and this machine is shared).
ODD_INTS = st.one_of(st.integers(-3, 64), st.integers(2**40, 2**70), st.sampled_from([-(2**63), 2**63 - 1]))
ODD_VALUES = st.one_of(odd_tensors(), st.none(), ODD_INTS, st.floats(allow_nan=True),
                       st.text(max_size=5), st.lists(st.integers(-3, 40), max_size=4),
                       st.lists(st.lists(st.booleans(), max_size=3), max_size=3), st.booleans())


def finite(out):
    if isinstance(out, torch.Tensor):
        if out.is_meta or not (out.is_floating_point() or out.is_complex()):
            return True
        return bool(torch.isfinite(out).all())
    if isinstance(out, (tuple, list)):
        return all(finite(o) for o in out)
    if isinstance(out, float):
        return out == out and abs(out) != float("inf")
    return True


def calls_cleanly(fn, *args, **kwargs):
    """Call ``fn``; a ValueError or TypeError is a clean refusal. Anything else escapes (and fails the test).
    A result from finite inputs must be finite (a rearrangement of the caller's own inf is the caller's)."""
    try:
        out = fn(*args, **kwargs)
    except (ValueError, TypeError):
        return None
    if finite(list(args) + list(kwargs.values())):
        assert finite(out), f"non-finite output from {getattr(fn, '__name__', fn)}"
    return out


# -- token functions -------------------------------------------------------------------------------------------------

@FUZZ
@given(tokens=ODD_VALUES, mask=ODD_VALUES)
def test_token_functions_refuse_cleanly(tokens, mask):
    calls_cleanly(one_hot, tokens)
    calls_cleanly(one_hot, tokens, ambiguity="fractional", soft_mask_channel=True, dtype=torch.float16)
    calls_cleanly(soft_mask, tokens)
    calls_cleanly(complement_tokens, tokens)
    calls_cleanly(decode, tokens)
    calls_cleanly(decode, tokens, mask)
    calls_cleanly(reverse_complement, tokens)
    calls_cleanly(reverse_complement, tokens, mask)
    calls_cleanly(kmer_tokens, tokens, 3)
    calls_cleanly(kmer_tokens, tokens, 2, mask=mask, canonical=True, stride=2)
    calls_cleanly(flip_within_lengths, tokens, mask)
    calls_cleanly(RCEquivariant(lambda t: t.sum(1) if t.is_floating_point() else one_hot(t).sum(1)), tokens)


@FUZZ
@given(k=ODD_VALUES, stride=ODD_VALUES, canonical=ODD_VALUES)
def test_kmer_arguments_refuse_cleanly(k, stride, canonical):
    tokens, mask = encode(["ACGTAC", "GA"])
    calls_cleanly(kmer_tokens, tokens, k, stride=stride, canonical=canonical)
    calls_cleanly(kmer_tokens, tokens, 3, stride=stride, mask=mask)
    calls_cleanly(kmer_tokens, tokens, k, mask=mask)


@FUZZ
@given(seqs=st.one_of(st.lists(st.one_of(st.text(max_size=8), st.binary(max_size=8), st.integers()), max_size=4),
                      st.text(max_size=8), st.binary(max_size=8), ODD_VALUES),
       max_len=ODD_VALUES, ambiguity=st.sampled_from(["keep", "to_n", "drop", None]),
       rna=st.sampled_from(["error", "to_t", "keep", 3]),
       token_dtype=st.sampled_from([torch.uint8, torch.int64, torch.float32, torch.bool, "uint8", None]))
def test_encode_refuses_cleanly_and_round_trips(seqs, max_len, ambiguity, rna, token_dtype):
    out = calls_cleanly(encode, seqs, max_len=max_len, ambiguity=ambiguity, rna=rna, token_dtype=token_dtype)
    if out is not None:
        tokens, mask = out
        assert tokens.dtype == token_dtype and mask.shape == tokens.shape
        assert len(decode(tokens, mask)) == tokens.shape[0]


# -- positional encodings and the basis -------------------------------------------------------------------------------

@FUZZ
@given(values=ODD_VALUES, dim=ODD_VALUES, max_len=st.one_of(st.none(), ODD_INTS),
       strand_aware=ODD_VALUES, base=st.one_of(st.floats(allow_nan=True), st.integers(-5, 2**70)))
def test_positional_encodings_refuse_cleanly_and_stay_finite(values, dim, max_len, strand_aware, base):
    calls_cleanly(rc_symmetric_encoding, values, 4)
    calls_cleanly(rc_symmetric_encoding, values, dim, max_len=max_len)
    calls_cleanly(rc_symmetric_encoding, values, 4, strand_aware=strand_aware, base=base)
    calls_cleanly(centered_positions, values)
    calls_cleanly(centered_positions, values, max_len)
    module = calls_cleanly(RCSymmetricEncoding, 4 if not isinstance(dim, int) or isinstance(dim, bool) else dim,
                           base=base)
    if module is not None:
        calls_cleanly(module, values)
        calls_cleanly(module, values, max_len=max_len)


@FUZZ
@given(seq_len=st.one_of(st.integers(-3, 2000), ODD_VALUES), dim=st.one_of(st.integers(-3, 48), ODD_VALUES),
       symmetric=ODD_VALUES, kinds=st.one_of(st.lists(st.sampled_from(["gamma", "exponential", "central_mask",
                                                                        "cosine"]), max_size=3), ODD_VALUES),
       normalization=st.sampled_from(["per_feature", "global", "per_distance", None]))
def test_relative_basis_refuses_cleanly_and_stays_finite(seq_len, dim, symmetric, kinds, normalization):
    calls_cleanly(relative_basis, seq_len, dim, symmetric=symmetric, kinds=kinds,
                  gamma_normalization=normalization)


# -- files ------------------------------------------------------------------------------------------------------------

PIECES = [b"@", b"+", b">", b"#", b"\n", b"\r", b"\r\n", b"\n\n", b" ", b"\t", b"ACGT", b"acgtn", b"U", b"IIII",
          b"!~", b"r1 x", b"\xef\xbb\xbf", b"\xc2\xa0", b"\x00", b"\x1c", b"\xff", b"@r\nACGT\n+\nIIII\n",
          b">r\nACGT\n", b"+r\n"]


@st.composite
def fastx_bytes(draw):
    data = b"".join(draw(st.lists(st.sampled_from(PIECES), max_size=14)))
    wrap = draw(st.sampled_from(["plain", "gzip", "truncated gzip", "garbage after gzip"]))
    if wrap == "plain":
        return data
    packed = gzip.compress(data, mtime=0)
    if wrap == "truncated gzip":
        return packed[: draw(st.integers(0, len(packed) - 1))]
    return packed + b"junk" if wrap == "garbage after gzip" else packed


def read_all(path, parser, **options):
    try:
        return [(b.names, b.tokens.tolist(), b.lengths.tolist(), None if b.qualities is None else
                 b.qualities.tolist(), b.records.tolist(), b.offsets.tolist(), b.quality_offset)
                for b in read_fastx(path, parser=parser, batch_size=2, **options)]
    except ValueError as exc:  # the only exception a file may raise
        return str(exc)


@FUZZ
@given(data=fastx_bytes(), options=st.sampled_from([{}, {"rna": "keep", "quality_offset": "auto"},
                                                    {"max_len": 2, "truncation": "split", "lowercase": "fold"}]))
def test_parsers_agree_on_random_files_and_raise_only_value_errors(data, options):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "reads.gz"
        path.write_bytes(data)
        fast, reference = read_all(path, "dnaio", **options), read_all(path, "python", **options)
        assert fast == reference
        if isinstance(reference, list) and reference:  # the dataset reads what read_fastx reads
            items = list(FastxDataset(path, chunk_size=3, parser="python", **options))
            assert [i["name"] for i in items] == [n for b in reference for n in b[0]]
            assert len(collate_reads(items)) == len(items)


@FUZZ
@given(options=st.fixed_dictionaries({}, optional={
    "batch_size": ODD_VALUES, "quality_offset": ODD_VALUES, "quality_encoding": ODD_VALUES, "rna": ODD_VALUES,
    "max_len": ODD_VALUES, "truncation": ODD_VALUES, "token_dtype": ODD_VALUES, "parser": ODD_VALUES,
    "ambiguity": ODD_VALUES, "lowercase": ODD_VALUES}))
def test_read_options_refuse_cleanly(tmp_path_factory, options):
    path = tmp_path_factory.getbasetemp() / "fuzz_options.fq"
    path.write_bytes(b"@a\nACGT\n+\nIIII\n")
    try:
        batches = list(read_fastx(path, **options))
    except (ValueError, TypeError):
        return
    assert sum(len(b) for b in batches) >= 1


@pytest.mark.parametrize("lowercase", ["soft_mask", "fold"])
def test_vocab_size_and_bad_policy(lowercase):
    assert vocab_size(lowercase) in (16, 32)
    with pytest.raises(ValueError, match="lowercase"):
        vocab_size("upper")
