"""Fuzzing omnipos.core's public API (issue 14): NaN/inf, extreme magnitudes, empty and 0-d tensors, non-contiguous
views, wrong dtypes, meta tensors and junk arguments. Whatever comes in, only ValueError / TypeError may escape, and
whatever is accepted comes out finite (meta tensors: the right shape, no values)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.core import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalEncoding,
    add_positional,
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    check_lengths,
    convert_rope_layout,
    frequency_bands,
    layout_frequencies,
    lengths_to_mask,
    mask_to_lengths,
    pack,
    packed_positions,
    pad_packed,
    pad_ragged,
    rope_frequencies,
    sinusoidal,
    t5_relative_bucket,
    unpad,
)

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTEGERS = (torch.int64, torch.int32, torch.int8, torch.uint8)
DTYPES = FLOATS + INTEGERS + (torch.bool, torch.complex64)
SPECIAL = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-310, 1e300, -1e300, 2.0**53, 2.0**63, -(2.0**63), 65504.0,
           1e5, -1.0, 0.5)
#: sizes: small ones, and ones so large that the allocator refuses at once (nothing in between: it could really
#: allocate gigabytes on a shared machine)
SIZES = st.one_of(st.integers(-2, 9), st.sampled_from([2**40, 2**62]))
JUNK = st.sampled_from([None, "3", 2.5, [1, "a"], object(), [[1, 2], [3]], True])


def ok(out):
    """Every floating tensor in ``out`` is finite (meta tensors have no values to check)."""
    tensors = out if isinstance(out, (tuple, list)) else [out]
    for t in tensors:
        if isinstance(t, (tuple, list)):
            ok(t)
        elif isinstance(t, torch.Tensor) and t.is_floating_point() and not t.is_meta:
            assert torch.isfinite(t).all(), "accepted input gave a non-finite output"


def attempt(fn, *args, **kwargs):
    """Call; ValueError / TypeError are the allowed refusals (None returned); anything else fails the test."""
    try:
        return fn(*args, **kwargs)
    except (ValueError, TypeError):
        return None


@st.composite
def tensors(draw, dtypes=DTYPES, min_dims=0, max_dims=3, max_side=4, values=None, meta=True):
    """Any small tensor: dtype, shape (0-d and empty included), values (special and huge included), non-contiguous
    or on the meta device."""
    shape = draw(st.lists(st.integers(0, max_side), min_size=min_dims, max_size=max_dims))
    dtype = draw(st.sampled_from(dtypes))
    count = math.prod(shape)
    elements = values if values is not None else st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                                                           st.sampled_from(SPECIAL))
    data = torch.tensor(draw(st.lists(elements, min_size=count, max_size=count)), dtype=torch.float64)
    data = data.reshape(shape)
    if dtype == torch.bool:
        t = data != 0
    elif not dtype.is_floating_point and not dtype.is_complex:
        info = torch.iinfo(dtype)
        t = torch.nan_to_num(data, nan=0.0).clamp(info.min, min(info.max, 2**62)).to(dtype)
    else:
        t = data.to(dtype)
    if t.ndim >= 1 and draw(st.booleans()):  # a strided view of a larger tensor: not contiguous
        t = torch.stack([t, t], -1)[..., 0]
    if t.ndim >= 2 and draw(st.booleans()):
        t = t.transpose(0, -1)
    if meta and draw(st.integers(0, 7)) == 0:
        t = t.to("meta")
    return t


def positions():
    return st.one_of(tensors(), JUNK, st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=4))


@st.composite
def moderate_x(draw, dim, *, seq):
    """Finite q/k ``[seq, dim]`` of moderate size (rotating data near a dtype's maximum can overflow it: not ours)."""
    dtype = draw(st.sampled_from(FLOATS))
    values = draw(st.lists(st.floats(-100, 100), min_size=seq * dim, max_size=seq * dim))
    return torch.tensor(values, dtype=torch.float64).reshape(seq, dim).to(dtype)


# ---------------------------------------------------------------------------------------------------------------


@given(p=positions(), dim=SIZES, base=st.one_of(st.floats(allow_nan=True), st.sampled_from([1e4, 2, 1.0, 0]), JUNK),
       layout=st.sampled_from(["interleaved", "split", "fairseq", "mae", None]),
       dtype=st.sampled_from([*DTYPES, None, "float32"]))
def test_sinusoidal(p, dim, base, layout, dtype):
    out = attempt(sinusoidal, p, dim, base=base, layout=layout, dtype=dtype)
    if out is not None:
        ok(out)
        assert out.dtype == dtype and out.shape[-1] == dim


@given(p=positions(), dim=SIZES, scale=st.one_of(st.floats(allow_nan=True), JUNK), learnable=st.booleans())
def test_sinusoidal_encoding(p, dim, scale, learnable):
    module = attempt(SinusoidalEncoding, dim, scale=scale, learnable_scale=learnable)
    if module is not None:
        ok(attempt(module, p))


@given(dim=SIZES, base=st.one_of(st.floats(allow_nan=True), JUNK),
       layout=st.sampled_from(["interleaved", "split", "fairseq", "x"]))
def test_frequencies(dim, base, layout):
    ok(attempt(frequency_bands, dim, base=base))
    ok(attempt(layout_frequencies, dim, base=base, layout=layout))


SCALINGS = st.one_of(
    st.none(), JUNK,
    st.fixed_dictionaries({"rope_type": st.sampled_from(["default", "linear", "dynamic", "yarn", "llama3",
                                                         "longrope", "proportional", "mrope", "bogus"])},
                          optional={"factor": st.one_of(st.floats(allow_nan=True), JUNK),
                                    "original_max_position_embeddings": SIZES,
                                    "max_position_embeddings": SIZES,
                                    "low_freq_factor": st.floats(0, 8), "high_freq_factor": st.floats(0, 8),
                                    "short_factor": st.lists(st.floats(allow_nan=True), max_size=4),
                                    "long_factor": st.lists(st.floats(allow_nan=True), max_size=4),
                                    "rope_theta": st.one_of(st.floats(allow_nan=True), JUNK),
                                    "partial_rotary_factor": st.one_of(st.floats(allow_nan=True), JUNK),
                                    "mrope_section": st.one_of(st.lists(st.integers(-2, 4), max_size=4), JUNK),
                                    "attention_factor": st.floats(allow_nan=True)}),
    st.dictionaries(st.sampled_from(["full_attention", "sliding_attention"]),
                    st.one_of(st.none(), st.just({"rope_type": "default", "rope_theta": 1e4}))))


@given(dim=SIZES, base=st.one_of(st.none(), st.floats(allow_nan=True), JUNK), scaling=SCALINGS,
       seq_len=st.one_of(st.none(), st.integers(-5, 10**6), st.floats(allow_nan=True)),
       layer_type=st.sampled_from([None, "full_attention", 3]))
def test_rope_frequencies(dim, base, scaling, seq_len, layer_type):
    out = attempt(rope_frequencies, dim, base=base, scaling=scaling, seq_len=seq_len, layer_type=layer_type)
    if out is not None:
        inv, factor = out
        ok(inv)
        assert math.isfinite(factor)


ROPES = [
    dict(dim=8),
    dict(dim=8, layout="interleaved", rotary_dim=4),
    dict(dim=8, mrope_section=(1, 2, 1)),
    dict(dim=12, n_axes=3, axes_dims=(2, 4, 6), layout="interleaved"),
    dict(dim=8, scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4}),
    dict(dim=8, layout="interleaved", xpos=True, xpos_center=3.0),
]


@pytest.mark.parametrize("config", ROPES, ids=lambda c: ",".join(f"{k}" for k in c))
@given(data=st.data())
def test_rotary_embedding(config, data):
    rope = RotaryEmbedding(**config)
    axes = rope.position_axes
    p = data.draw(st.one_of(positions(), tensors(min_dims=1 if axes is None else 2, max_dims=2)), "positions")
    out = attempt(rope.cos_sin, p)
    if out is not None:
        ok(out)
        assert out[0].shape[-1] == rope.rotary_dim
    seq = data.draw(st.integers(0, 4), "seq")
    x = data.draw(st.one_of(moderate_x(rope.dim, seq=seq), tensors(), JUNK), "x")
    if isinstance(p, torch.Tensor) and data.draw(st.booleans(), "fit"):
        # adversarial values at positions that fit x's sequence axis, so that the rotation itself runs
        p = p.flatten()[:4]
        p = p if axes is None else p[:, None].expand(-1, axes)
        x = data.draw(moderate_x(rope.dim, seq=p.shape[0]), "fitted x")
    if not config.get("xpos"):
        out = attempt(rope.rotate, x, p, seq_dim=data.draw(st.sampled_from([-2, 0, -1, 5, 0.5]), "seq_dim"))
        if out is not None:
            ok(out)
            assert out.shape == x.shape and out.dtype == x.dtype
    out = attempt(rope, x, x, p)
    if out is not None:
        ok(out)


@given(x=tensors(), cos=tensors(), sin=tensors(), layout=st.sampled_from(["half", "interleaved", "neox"]))
def test_apply_rotary(x, cos, sin, layout):
    out = attempt(apply_rotary, x, cos, sin, layout=layout)
    if out is not None:
        assert out.shape == x.shape and out.dtype == x.dtype
        if all(t.is_meta or bool(torch.isfinite(t).all() and t.abs().max() < 1e30) for t in (x, cos, sin)
               if t.numel()):
            ok(out)


OFFSETS = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.sampled_from([-(2**63), 2**63 - 1, 2**53]),
                    st.floats(allow_nan=True), JUNK)


@given(heads=st.one_of(SIZES, JUNK), q_len=st.one_of(SIZES, JUNK), k_len=SIZES, q_offset=OFFSETS,
       dtype=st.sampled_from([*DTYPES, None]))
def test_alibi(heads, q_len, k_len, q_offset, dtype):
    out = attempt(alibi_bias, heads, q_len, k_len, q_offset=q_offset, dtype=dtype)
    if out is not None:
        ok(out)
        assert (out <= 0).all()  # a distance penalty never rewards
    ok(attempt(alibi_slopes, heads, dtype=dtype))


@given(rel=st.one_of(tensors(), JUNK), bidirectional=st.booleans(), buckets=SIZES, max_distance=SIZES)
def test_t5_buckets(rel, bidirectional, buckets, max_distance):
    out = attempt(t5_relative_bucket, rel, bidirectional=bidirectional, num_buckets=buckets,
                  max_distance=max_distance)
    if out is not None and not out.is_meta and out.numel():
        assert 0 <= int(out.min()) and int(out.max()) < buckets


@given(heads=st.one_of(SIZES, JUNK), buckets=SIZES, max_distance=SIZES, q_len=st.one_of(SIZES, JUNK), k_len=SIZES,
       q_offset=OFFSETS)
def test_relative_position_bias(heads, buckets, max_distance, q_len, k_len, q_offset):
    module = attempt(RelativePositionBias, heads, num_buckets=buckets, max_distance=max_distance)
    if module is not None:
        ok(attempt(module, q_len, k_len, q_offset=q_offset))


@given(p=positions(), max_len=st.one_of(SIZES, JUNK), dim=SIZES,
       beyond=st.sampled_from(["error", "clamp", "interpolate", "wrap"]),
       max_position=st.one_of(st.none(), st.floats(allow_nan=True), st.integers(-3, 100)))
def test_learned(p, max_len, dim, beyond, max_position):
    module = attempt(LearnedPositionalEmbedding, max_len, dim, beyond=beyond)
    if module is not None:
        ok(attempt(module, p, max_position=max_position))


@given(seqs=st.one_of(st.lists(tensors(min_dims=0, max_dims=2), max_size=3), JUNK, tensors()),
       pad_value=st.one_of(st.floats(allow_nan=True), st.integers(-(2**70), 2**70), st.booleans(), JUNK),
       max_len=st.one_of(st.none(), SIZES))
def test_padding_and_packing(seqs, pad_value, max_len):
    out = attempt(pad_ragged, seqs, pad_value, max_len=max_len)
    if out is not None:
        padded, mask = out
        if not padded.is_meta:
            assert mask.sum().item() == sum(len(s) for s in seqs)
            given = [torch.as_tensor(s) for s in seqs]
            assert all(torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))
                       for a, b in zip(unpad(padded, mask), given))
    attempt(pack, seqs)


@given(lengths=st.one_of(tensors(values=st.sampled_from(SPECIAL)), JUNK, st.lists(st.integers(-3, 6), max_size=4)),
       max_len=st.one_of(st.none(), SIZES),
       mask=tensors(), data=tensors(), pad_value=st.one_of(st.floats(allow_nan=True), st.integers(-300, 300)))
def test_lengths_and_masks(lengths, max_len, mask, data, pad_value):
    out = attempt(lengths_to_mask, lengths, max_len)
    if out is not None:
        assert out.dtype == torch.bool and out.ndim == 2
    attempt(check_lengths, lengths)
    attempt(mask_to_lengths, mask)
    attempt(packed_positions, lengths)
    attempt(pad_packed, data, mask, pad_value)
    attempt(unpad, data, mask)


@given(weight=tensors(), heads=SIZES, to=st.sampled_from(["half", "interleaved", "neox"]),
       rotary_dim=st.one_of(st.none(), SIZES))
def test_convert_rope_layout(weight, heads, to, rotary_dim):
    out = attempt(convert_rope_layout, weight, heads, to=to, rotary_dim=rotary_dim)
    if out is not None:
        assert out.shape == weight.shape


@given(x=tensors(), pe=tensors(), mode=st.sampled_from(["add", "concat", "mul"]))
def test_add_positional(x, pe, mode):
    attempt(add_positional, x, pe, mode)
