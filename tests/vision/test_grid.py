"""packed_patch_coords and check_cu_seqlens (patch_grid is tested with the masks it sizes, in test_masks.py)."""

import pytest
import torch

from omnipos.vision import grid_coords, packed_patch_coords
from omnipos.vision.grid import check_cu_seqlens


def test_packed_coords_are_each_images_row_major_grid():
    grids = [(2, 3), (1, 1), (3, 2)]
    coords, cu = packed_patch_coords(grids, num_prefix_tokens=1)
    assert cu.tolist() == [0, 7, 9, 16] and coords.dtype == torch.int64
    for i, grid in enumerate(grids):
        part = coords[int(cu[i]): int(cu[i + 1])]
        assert part[0].tolist() == [0, 0]  # the prefix token
        assert torch.equal(part[1:].double(), grid_coords(grid))
    same, same_cu = packed_patch_coords(torch.tensor(grids), num_prefix_tokens=1)
    assert torch.equal(same, coords) and torch.equal(same_cu, cu)
    empty, empty_cu = packed_patch_coords([])
    assert empty.shape == (0, 2) and empty_cu.tolist() == [0]


def test_packed_coords_bad_inputs():
    with pytest.raises(ValueError, match=r"grids\[1\]"):
        packed_patch_coords([(2, 2), (0, 2)])
    with pytest.raises(TypeError, match="grids"):
        packed_patch_coords(torch.tensor([[2.0, 2.0]]))
    with pytest.raises(ValueError, match=r"\[n, 2\]"):
        packed_patch_coords([2, 2])
    with pytest.raises(ValueError, match="num_prefix_tokens"):
        packed_patch_coords([(2, 2)], num_prefix_tokens=-1)


def test_check_cu_seqlens():
    assert check_cu_seqlens([0, 2, 2, 5], 5).tolist() == [0, 2, 2, 5]
    with pytest.raises(ValueError, match="end at the number of tokens 5"):
        check_cu_seqlens([0, 4], 5)
    with pytest.raises(ValueError, match="non-decreasing"):
        check_cu_seqlens([0, 3, 2, 5], 5)
    with pytest.raises(TypeError, match="cu_seqlens"):
        check_cu_seqlens(torch.tensor([0.0, 5.0]), 5)
    with pytest.raises(ValueError, match=r"\[n \+ 1\]"):
        check_cu_seqlens([0], 0)
