"""Slot -> coordinate maps of axial RoPE and M-RoPE, against transformers' recomposition of Qwen2/3-VL."""

import pytest
import torch

from omnipos.core.rope_axes import (
    axial_slot_axes,
    check_axes_dims,
    check_mrope_section,
    mrope_slot_axes,
)


def hf_recomposition(section, interleaved):
    """Run transformers' own recomposition on a tensor whose value is its axis: the slot -> axis map it uses."""
    half = sum(section)
    freq = torch.arange(3, dtype=torch.float32)[:, None, None, None].expand(3, 1, 1, half).clone()
    if interleaved:
        from transformers.models.qwen3_vl.modeling_qwen3_vl import (
            Qwen3VLTextRotaryEmbedding as Rotary,
        )
    else:
        from transformers.models.qwen2_vl.modeling_qwen2_vl import (
            Qwen2VLRotaryEmbedding as Rotary,
        )
    holder = Rotary.__new__(Rotary)
    holder.mrope_section = list(section)
    return Rotary.recomposition_frequencies(holder, freq)[0, 0, :half].long().tolist()  # [1, 1, 2 * half]


@pytest.mark.parametrize("section,interleaved", [((16, 24, 24), False), ((24, 20, 20), True), ((3, 1, 4), False),
                                                 ((6, 5, 5), True), ((2, 1, 1), True)])
def test_mrope_slot_axes_match_transformers(section, interleaved):
    pytest.importorskip("transformers")
    assert mrope_slot_axes(section, interleaved=interleaved) == hf_recomposition(section, interleaved)


def test_axial_slot_axes():
    assert axial_slot_axes((4, 2, 6)) == [0, 0, 1, 2, 2, 2]


def test_checks_name_the_argument():
    assert check_mrope_section([16, 24, 24], 64) == (16, 24, 24)
    with pytest.raises(ValueError, match="sums to 63, expected rotary_dim / 2 = 64"):
        check_mrope_section((16, 24, 23), 64)
    with pytest.raises(TypeError, match=r"mrope_section\[1\] must be an int"):
        check_mrope_section((16, 24.0, 24), 64)
    with pytest.raises(ValueError, match=r"mrope_section\[0\] must be >= 1"):
        check_mrope_section((0, 32, 32), 64)
    with pytest.raises(TypeError, match="mrope_section must be a tuple"):
        check_mrope_section("16,24,24", 64)
    with pytest.raises(ValueError, match=r"gives \(t, h, w\)"):
        check_mrope_section((2, 31, 31), 64, interleaved=True)
    assert check_axes_dims([16, 56, 56], 128, 3) == (16, 56, 56)
    with pytest.raises(ValueError, match=r"axes_dims\[1\]=55"):
        check_axes_dims((16, 55, 57), 128, None)
    with pytest.raises(ValueError, match="sums to 126, expected the rotary dim 128"):
        check_axes_dims((16, 56, 54), 128, None)
