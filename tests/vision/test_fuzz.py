"""Fuzzing the public vision API (issue 14): NaN / inf, extreme magnitudes, empty, 0-d, non-contiguous, wrong
dtypes, meta tensors. Whatever the input, only ValueError / TypeError escape, and what comes back is finite."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.vision import (
    RotaryEmbedding2D,
    grid_coords,
    mrope_decode_position_ids,
    mrope_position_ids,
    packed_patch_coords,
    patch_grid,
    patch_padding_mask,
    pixel_padding_mask,
    prefix_attention_mask,
    resample_pos_embed,
    resample_pos_embed_per_image,
    rope_2d_positions,
    sincos_2d,
    sincos_2d_from_coords,
    video_position_ids,
)

FUZZ = settings(max_examples=int(__import__("os").environ.get("VISION_FUZZ", "40")), deadline=None)
SPECIAL = [math.nan, math.inf, -math.inf, 1e300, -1e300, 1e-310, 0.0, -0.0, 3.5, -2.0]
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8,
          torch.bool, torch.complex64]


def finite(out):
    """Every floating tensor in ``out`` is finite (meta tensors have no values to check)."""
    if isinstance(out, torch.Tensor):
        if out.is_floating_point() and not out.is_meta and out.numel():
            assert torch.isfinite(out).all(), "non-finite output"
    elif isinstance(out, (tuple, list)):
        for item in out:
            finite(item)


def attempt(fn, *args, values=None, **kwargs):
    """Call ``fn``: a ValueError / TypeError is an accepted refusal; anything else fails the test. The output must be
    finite unless ``values`` (a learned table: data, not positions) held NaN / inf, which then propagate as through
    any layer."""
    try:
        out = fn(*args, **kwargs)
    except (ValueError, TypeError):
        return None
    if values is None or values.is_meta or not values.is_floating_point() or torch.isfinite(values).all():
        finite(out)
    return out


@st.composite
def tensors(draw, max_dims=4, max_side=5, dtypes=DTYPES, special=True):
    """Random tensors: any of DTYPES, 0-d to max_dims, empty axes, special values, non-contiguous, or meta."""
    ndim = draw(st.integers(0, max_dims))
    shape = [draw(st.integers(0, max_side)) for _ in range(ndim)]
    dtype = draw(st.sampled_from(dtypes))
    values = torch.randn(shape, dtype=torch.float64) * draw(st.sampled_from([1.0, 1e3, 1e30]))
    if special and values.numel() and draw(st.booleans()):
        flat = values.view(-1)
        flat[draw(st.integers(0, flat.numel() - 1))] = draw(st.sampled_from(SPECIAL))
    if dtype.is_complex:
        tensor = values.to(dtype)
    elif dtype == torch.bool:
        tensor = values > 0
    elif dtype.is_floating_point:
        tensor = values.to(dtype)
    else:
        tensor = torch.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0).clamp(-100, 100).round().to(dtype)
    how = draw(st.sampled_from(["plain", "transposed", "meta"]))
    if how == "transposed" and tensor.ndim >= 2:
        tensor = tensor.transpose(0, -1).contiguous().transpose(0, -1)
        assert tensor.ndim < 2 or not tensor.is_contiguous() or tensor.numel() <= 1 or 1 in tensor.shape
    elif how == "meta":
        tensor = torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")
    return tensor


sizes = st.one_of(st.integers(-3, 6), st.tuples(st.integers(-2, 6), st.integers(-2, 6)), st.floats(-2, 6),
                  st.just((2, 3, 4)), st.just("3"), st.none(), st.just(True),
                  st.tuples(st.floats(0, 4), st.integers(1, 3)))


@FUZZ
@given(grid=sizes, dim=st.integers(-4, 12), convention=st.sampled_from(["mae", "timm", "other"]),
       prefix=st.integers(-1, 2), ref=st.one_of(st.none(), sizes))
def test_sincos_2d(grid, dim, convention, prefix, ref):
    out = attempt(sincos_2d, grid, dim, convention=convention, num_prefix_tokens=prefix, ref_grid=ref)
    if out is not None:
        assert out.shape[-1] == dim


@FUZZ
@given(coords=tensors(), dim=st.sampled_from([-4, 0, 3, 4, 8]), base=st.sampled_from([10000.0, 0.0, -1.0, math.nan,
                                                                                     math.inf, 1e300]))
def test_sincos_2d_from_coords(coords, dim, base):
    out = attempt(sincos_2d_from_coords, coords, dim, base=base)
    if out is not None:
        assert out.shape == (*coords.shape[:-1], dim) and out.device == coords.device


@FUZZ
@given(grid=sizes, ref=st.one_of(st.none(), sizes), indexing=st.sampled_from(["ij", "xy", "yx"]))
def test_grid_coordinates(grid, ref, indexing):
    attempt(grid_coords, grid, ref_grid=ref)
    attempt(rope_2d_positions, grid, indexing=indexing, ref_grid=ref)
    attempt(patch_grid, grid, ref if ref is not None else 4)


@FUZZ
@given(table=tensors(max_dims=3, max_side=10), grid=sizes, old=st.one_of(st.none(), sizes), prefix=st.integers(-1, 3),
       mode=st.sampled_from(["bicubic", "bilinear", "nearest", "area", "lanczos"]), antialias=st.booleans())
def test_resample_pos_embed(table, grid, old, prefix, mode, antialias):
    out = attempt(resample_pos_embed, table, grid, old_grid=old, num_prefix_tokens=prefix, mode=mode,
                  antialias=antialias, values=table)
    if out is not None:
        assert out.dtype == table.dtype and out.device == table.device


@FUZZ
@given(table=tensors(max_dims=4, max_side=6), grids=st.one_of(tensors(max_dims=2, max_side=4, special=False),
                                                            st.lists(sizes, max_size=4)),
       max_length=st.integers(-1, 40), prefix=st.integers(-1, 2), padding=st.sampled_from(["zeros", "first", "x"]))
def test_resample_pos_embed_per_image(table, grids, max_length, prefix, padding):
    out = attempt(resample_pos_embed_per_image, table, grids, max_length=max_length, num_prefix_tokens=prefix,
                  padding=padding, values=table)
    if out is not None:
        assert out[0].shape[1] == max_length and out[1].dtype == torch.bool


@FUZZ
@given(image_sizes=st.one_of(tensors(max_dims=3, max_side=4, special=False),
                             st.lists(st.lists(st.integers(-2, 40), max_size=3), max_size=3)),
       patch=sizes, grid=sizes, padded=sizes, prefix=st.integers(-1, 3))
def test_masks(image_sizes, patch, grid, padded, prefix):
    mask = attempt(patch_padding_mask, image_sizes, patch, grid)
    attempt(pixel_padding_mask, image_sizes, padded)
    if mask is not None:
        attempt(prefix_attention_mask, mask, prefix)


@FUZZ
@given(patch_mask=tensors(max_dims=3, max_side=4, special=False), prefix=st.integers(-1, 3))
def test_prefix_attention_mask(patch_mask, prefix):
    attempt(prefix_attention_mask, patch_mask, prefix)


rope_configs = st.fixed_dictionaries({
    "dim": st.sampled_from([-4, 0, 6, 8, 16]), "base": st.sampled_from([10000.0, 100.0, math.nan, 0.0, -5.0]),
    "indexing": st.sampled_from(["ij", "xy", "zz"]), "layout": st.sampled_from(["half", "interleaved", "other"]),
    "ref_grid": st.one_of(st.none(), sizes), "mixed": st.booleans(),
    "num_heads": st.one_of(st.none(), st.integers(-1, 3)),
    "mixed_base": st.sampled_from([10.0, math.nan, math.inf, 0.0, -1.0])})


@FUZZ
@given(config=rope_configs, x=tensors(max_dims=4, max_side=6), grid=sizes, prefix=st.integers(-1, 2))
def test_rotary_embedding_2d(config, x, grid, prefix):
    rope = attempt(RotaryEmbedding2D, **config)
    if rope is None:
        return
    out = attempt(rope.rotate, x, grid, num_prefix_tokens=prefix)
    if out is not None:
        assert out.shape == x.shape and out.dtype == x.dtype
    attempt(rope.cos_sin, grid)


@FUZZ
@given(config=rope_configs, x=tensors(max_dims=3, max_side=6), coords=tensors(max_dims=2, max_side=6),
       cu=st.one_of(st.none(), st.lists(st.integers(-1, 8), max_size=4)), prefix=st.integers(-1, 2))
def test_rotary_embedding_2d_packed(config, x, coords, cu, prefix):
    rope = attempt(RotaryEmbedding2D, **config)
    if rope is None:
        return
    out = attempt(rope.rotate_packed, x, coords, cu, num_prefix_tokens=prefix)
    if out is not None:
        assert out.shape == x.shape


@FUZZ
@given(grids=st.one_of(tensors(max_dims=2, max_side=4, special=False), st.lists(sizes, max_size=3)),
       prefix=st.integers(-1, 2))
def test_packed_patch_coords(grids, prefix):
    attempt(packed_patch_coords, grids, num_prefix_tokens=prefix)


@FUZZ
@given(types=tensors(max_dims=3, max_side=8, special=False), images=st.one_of(st.none(), tensors(max_dims=2, max_side=4,
                                                                                               special=False)),
       videos=st.one_of(st.none(), st.lists(st.lists(st.integers(-1, 4), min_size=3, max_size=3), max_size=2)),
       merge=st.integers(-1, 2), mask=st.one_of(st.none(), tensors(max_dims=2, max_side=8, special=False)),
       seconds=st.one_of(st.none(), st.lists(st.sampled_from(SPECIAL), max_size=2)),
       tps=st.sampled_from([None, 2, 0, -1, math.nan, 2.5]))
def test_mrope_position_ids(types, images, videos, merge, mask, seconds, tps):
    out = attempt(mrope_position_ids, types, images, videos, spatial_merge_size=merge, attention_mask=mask,
                  second_per_grid_ts=seconds, tokens_per_second=tps)
    if out is not None:
        ids, deltas = out
        assert ids.shape == (*types.shape, 3) and ids.dtype == deltas.dtype == torch.int64
        attempt(mrope_decode_position_ids, deltas, types.shape[-1])


def test_mrope_on_valid_random_layouts_never_leaks():
    # the refusals above are mostly early; fuzz the counting checks with token runs that nearly fit the grids
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        types = torch.randint(0, 3, (2, 12), generator=g)
        grids = torch.randint(1, 3, (torch.randint(0, 4, (1,), generator=g).item(), 3), generator=g) * \
            torch.tensor([1, 2, 2])
        attempt(mrope_position_ids, types, grids, grids.flip(0))


@FUZZ
@given(deltas=tensors(max_dims=3, max_side=3, special=False), position=st.one_of(
    st.integers(-2, 5), tensors(max_dims=3, max_side=3, special=False)))
def test_mrope_decode_position_ids(deltas, position):
    attempt(mrope_decode_position_ids, deltas, position)


@FUZZ
@given(grid=st.one_of(st.tuples(st.integers(-1, 4), st.integers(-1, 4), st.integers(-1, 4)), sizes,
                      tensors(max_dims=1, max_side=3, special=False)),
       interpolation=st.one_of(st.sampled_from(SPECIAL), st.tuples(st.sampled_from(SPECIAL), st.floats(0.1, 2))),
       offset=st.one_of(st.sampled_from(SPECIAL), st.just("0")))
def test_video_position_ids(grid, interpolation, offset):
    attempt(video_position_ids, grid, interpolation=interpolation, offset=offset)


@FUZZ
@given(old=st.integers(1, 5), new=st.tuples(st.integers(1, 6), st.integers(1, 6)), prefix=st.integers(0, 2),
       scale=st.sampled_from([1.0, 1e-30, 1e30, 1e38]), dtype=st.sampled_from([torch.float16, torch.bfloat16,
                                                                            torch.float32, torch.float64]))
def test_resample_valid_tables_of_extreme_magnitude(old, new, prefix, scale, dtype):
    # valid shapes (the fuzz above mostly meets refusals): finite tables of any magnitude give finite tables
    table = (torch.randn(prefix + old * old, 8, dtype=torch.float64) * scale).to(dtype)
    if not torch.isfinite(table).all():
        return
    out = resample_pos_embed(table.transpose(0, 1).contiguous().transpose(0, 1), new, num_prefix_tokens=prefix,
                             mode="bilinear")
    assert out.shape == (prefix + new[0] * new[1], 8) and out.dtype == dtype
    assert torch.isfinite(out.double()).all()  # bilinear is a convex combination: it never overshoots
    out, _ = resample_pos_embed_per_image(table.reshape(-1, 8)[prefix:].reshape(old, old, 8), [new, (1, 1), new],
                                             max_length=40, mode="bilinear")
    assert torch.isfinite(out.double()).all()


# -- meta tensors: shapes without values --------------------------------------------------------------------------


def test_meta_tensors_flow_through_or_are_refused_by_name():
    meta = torch.device("meta")
    out = resample_pos_embed(torch.empty(1, 17, 8, device=meta), (3, 5))
    assert out.is_meta and out.shape == (1, 16, 8)
    out, _ = resample_pos_embed_per_image(torch.empty(4, 4, 8, device=meta), [(2, 3), (3, 2)], max_length=8)
    assert out.is_meta and out.shape == (2, 8, 8)
    assert sincos_2d_from_coords(torch.empty(5, 2, device=meta), 8).is_meta
    rope = RotaryEmbedding2D(8)
    assert rope.rotate(torch.empty(1, 2, 6, 8, device=meta), (2, 3)).is_meta
    with pytest.raises(ValueError, match="mm_token_type_ids.*meta"):
        mrope_position_ids(torch.empty(1, 4, dtype=torch.long, device=meta))
    assert patch_padding_mask(torch.empty(2, 2, dtype=torch.long, device=meta), 4, (2, 2)).is_meta
    with pytest.raises(ValueError, match="grids is a meta tensor"):
        packed_patch_coords(torch.empty(2, 2, dtype=torch.long, device=meta))
    with pytest.raises(ValueError, match="new_grid is a meta tensor"):
        resample_pos_embed(torch.randn(1, 17, 8), torch.empty(2, dtype=torch.long, device=meta))
