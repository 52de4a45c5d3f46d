"""The vision tower's positions against transformers' own ``vision_utils`` (verified with transformers 5.24.0) on
random mixed image / video batches, against independent references (``F.interpolate`` for the interpolation
weights; the window definition for the window order), and bad input."""

import random

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.vision import vision_interpolation_indices_and_weights, vision_position_ids, vision_window_index


def random_grids(rng, merge, count=None, largest=6):
    """Images (T = 1) and videos (T up to 3), H and W multiples of ``merge``."""
    count = rng.randint(1, 6) if count is None else count
    return torch.tensor([[rng.choice([1, 1, 2, 3]), merge * rng.randint(1, largest), merge * rng.randint(1, largest)]
                         for _ in range(count)])


@pytest.fixture(scope="module")
def vision_utils():
    from transformers import vision_utils

    return vision_utils


@pytest.mark.parametrize("merge", [1, 2, 3])
@pytest.mark.parametrize("seed", range(3))
def test_position_ids_equal_transformers(vision_utils, merge, seed):
    grids = random_grids(random.Random(seed), merge)
    for include_temporal in (False, True):
        ours = vision_position_ids(grids, merge, include_temporal=include_temporal)
        theirs = vision_utils.get_vision_position_ids(grids, merge, include_temporal=include_temporal)
        assert ours.dtype == torch.int64 and torch.equal(ours, theirs)


@pytest.mark.parametrize("merge, window_size, patch_size", [(2, 112, 14), (2, 8, 1), (1, 3, 1), (3, 6, 1), (2, 4, 2)])
@pytest.mark.parametrize("seed", range(3))
def test_window_index_equals_transformers(vision_utils, merge, window_size, patch_size, seed):
    grids = random_grids(random.Random(seed), merge, largest=10)
    index, cu = vision_window_index(grids, merge, window_size, patch_size)
    ref_index, ref_cu = vision_utils.get_vision_window_index(grids, merge, window_size, patch_size)
    assert torch.equal(index, ref_index) and torch.equal(cu, ref_cu) and cu.dtype == ref_cu.dtype == torch.int32


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("merge", [1, 2])
def test_interpolation_equals_transformers(vision_utils, mode, align_corners, merge):
    grids = random_grids(random.Random(hash((mode, align_corners, merge)) % 100), merge, largest=12)
    ours = vision_interpolation_indices_and_weights(grids, 7, mode=mode, align_corners=align_corners,
                                                    spatial_merge_size=merge)
    theirs = vision_utils.get_vision_interpolation_indices_and_weights(grids, 7, mode=mode,
                                                                       align_corners=align_corners,
                                                                       spatial_merge_size=merge)
    assert ours[0].dtype == torch.int64 and ours[1].dtype == torch.float32
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolated_table_equals_f_interpolate(mode, align_corners):
    # the gathered, weighted table rows are F.interpolate of the table at every patch's (h, w)
    torch.manual_seed(0)
    side, merge, dim = 6, 2, 5
    table = torch.randn(side, side, dim, dtype=torch.float64)
    grids = torch.tensor([[1, 4, 10], [2, 12, 6], [1, 2, 2], [1, 6, 6]])
    indices, weights = vision_interpolation_indices_and_weights(grids, side, mode=mode, align_corners=align_corners,
                                                                spatial_merge_size=merge)
    embedded = (table.reshape(-1, dim)[indices] * weights.double()[..., None]).sum(1)
    positions = vision_position_ids(grids, merge)
    start = 0
    for t, h, w in grids.tolist():
        expected = F.interpolate(table.permute(2, 0, 1)[None], size=(h, w), mode=mode,
                                 align_corners=align_corners)[0].permute(1, 2, 0)
        rows = positions[start: start + t * h * w]
        torch.testing.assert_close(embedded[start: start + t * h * w], expected[rows[:, 0], rows[:, 1]],
                                   rtol=0, atol=5e-6)  # float32 weights (as transformers'), up to 16 taps
        start += t * h * w
    assert start == indices.shape[0]


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), merge=st.sampled_from([1, 2, 3]), side=st.integers(1, 4))
def test_property_window_order_is_the_window_definition(seed, merge, side):
    # a permutation of the merged tokens, windows one after another, each window's tokens in one (frame, window)
    # cell and row-major inside it; cu_window_seqlens in patches
    grids = random_grids(random.Random(seed), merge, largest=7)
    index, cu = vision_window_index(grids, merge, side * merge, 1)
    tokens = []  # (grid, t, h, w) of every merged token, in the merger's order
    for g, (t, h, w) in enumerate(grids.tolist()):
        tokens += [(g, f, i, j) for f in range(t) for i in range(h // merge) for j in range(w // merge)]
    assert sorted(index.tolist()) == list(range(len(tokens)))
    ordered = [tokens[i] for i in index.tolist()]
    cells = [(g, f, i // side, j // side) for g, f, i, j in ordered]
    assert cells == sorted(cells, key=lambda c: (c[0], c[1], c[2], c[3]))
    assert ordered == sorted(ordered, key=lambda c: (c[0], c[1], c[2] // side, c[3] // side, c[2], c[3]))
    bounds = [0] + [k + 1 for k in range(len(cells)) if k + 1 == len(cells) or cells[k + 1] != cells[k]]
    assert cu.tolist() == [b * merge**2 for b in bounds]


def test_position_ids_are_merge_blocks_in_row_major_order():
    ids = vision_position_ids(torch.tensor([[2, 4, 6]]), 2, include_temporal=True)
    assert ids.shape == (48, 3)
    assert ids[:8].tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1], [0, 0, 2], [0, 0, 3], [0, 1, 2], [0, 1, 3]]
    assert ids[24:, 0].eq(1).all() and torch.equal(ids[24:, 1:], ids[:24, 1:])  # frame 1 repeats frame 0's (h, w)


def test_meta_grids_are_refused():
    grids = torch.tensor([[1, 4, 4]], device="meta")
    with pytest.raises(ValueError, match="grid_thw is a meta tensor"):
        vision_position_ids(grids, 2)


def test_bad_input():
    with pytest.raises(ValueError, match=r"grid_thw must be \[N, 3\]"):
        vision_position_ids(torch.tensor([1, 4, 4]), 2)
    with pytest.raises(TypeError, match="grid_thw must be an integer tensor"):
        vision_position_ids(torch.tensor([[1.0, 4.0, 4.0]]), 2)
    with pytest.raises(ValueError, match=r"grid_thw\[1\] = \(1, 0, 4\)"):
        vision_position_ids([[1, 4, 4], [1, 0, 4]], 2)
    with pytest.raises(ValueError, match=r"grid_thw\[0\] = \(1, 4, 5\).*spatial_merge_size=2"):
        vision_window_index([[1, 4, 5]], 2, 112, 14)
    with pytest.raises(ValueError, match="spatial_merge_size"):
        vision_position_ids([[1, 4, 4]], 0)
    with pytest.raises(TypeError, match="include_temporal"):
        vision_position_ids([[1, 4, 4]], 2, include_temporal=1)
    with pytest.raises(ValueError, match="a window must hold at least one merged token"):
        vision_window_index([[1, 4, 4]], 2, 16, 14)
    with pytest.raises(ValueError, match="window_size"):
        vision_window_index([[1, 4, 4]], 2, -1, 14)
    with pytest.raises(ValueError, match="mode must be 'bilinear' or 'bicubic'"):
        vision_interpolation_indices_and_weights([[1, 4, 4]], 8, mode="nearest")
    with pytest.raises(ValueError, match="num_grid_per_side"):
        vision_interpolation_indices_and_weights([[1, 4, 4]], 0)
    with pytest.raises(TypeError, match="align_corners"):
        vision_interpolation_indices_and_weights([[1, 4, 4]], 8, align_corners=None)


def test_sizes_beyond_memory_are_refused_before_allocating():
    huge = [[10**6, 10**4, 10**4]]
    with pytest.raises(ValueError, match="grid_thw .*does not fit in memory"):
        vision_position_ids(huge, 2)
    with pytest.raises(ValueError, match="grid_thw .*does not fit in memory"):
        vision_window_index(huge, 2, 112, 14)
    with pytest.raises(ValueError, match="grid_thw .*does not fit in memory"):
        vision_interpolation_indices_and_weights(huge, 48)
    with pytest.raises(ValueError, match="more than int64 can count"):
        vision_position_ids([[2**40, 2**20, 2**20]], 2)
