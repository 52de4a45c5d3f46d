"""Issue 36 (datasets, round 2): PackedEvents' cu_seqlens, and tape / ERPE sizes the allocator refuses, are
ValueErrors naming the argument (before: raw exceptions, or nothing until later)."""

from __future__ import annotations

import pytest
import torch

from omnipos.timeseries import ERPE, PackedEvents, tape
from omnipos.timeseries.erpe import erpe_bias


def _packed(cu_seqlens, events=3, **kwargs):
    return PackedEvents(torch.arange(events, dtype=torch.float64), torch.ones(events, dtype=torch.long),
                        torch.zeros(events), cu_seqlens, ["<pad>", "a"], list(range(max(len(cu_seqlens) - 1, 0)))
                        if isinstance(cu_seqlens, (list, torch.Tensor)) and getattr(cu_seqlens, "ndim", 1) == 1
                        else [0], **kwargs)


def test_good_cu_seqlens_still_build():
    packed = _packed(torch.tensor([0, 1, 3], dtype=torch.int32))
    assert packed.lengths.tolist() == [1, 2] and len(packed) == 2
    assert _packed(torch.tensor([0], dtype=torch.int32), events=0).lengths.tolist() == []


@pytest.mark.parametrize(("cu", "error", "match"), [
    (torch.tensor([1, 3], dtype=torch.int32), ValueError, r"cu_seqlens must start at 0 and be non-decreasing"),
    (torch.tensor([0, 3, 2, 3], dtype=torch.int32), ValueError, r"cu_seqlens must start at 0 and be non-decreasing"),
    (torch.tensor([0, 2], dtype=torch.int32), ValueError, r"cu_seqlens ends at 2 but there are 3 events"),
    (torch.tensor([0, 4], dtype=torch.int32), ValueError, r"cu_seqlens ends at 4 but there are 3 events"),
    (torch.tensor([0.0, 3.0]), TypeError, r"cu_seqlens must be an integer tensor, got dtype torch.float32"),
    (torch.tensor([[0, 3]], dtype=torch.int32), ValueError, r"cu_seqlens must be 1-D"),
    (torch.tensor([], dtype=torch.int32), ValueError, r"cu_seqlens must hold B \+ 1 >= 1 offsets"),
    ([0, 3], TypeError, r"cu_seqlens must be a 1-D integer tensor \[B \+ 1\], got list"),
])
def test_bad_cu_seqlens_is_refused_naming_it(cu, error, match):
    with pytest.raises(error, match=match):
        _packed(cu)


def test_bad_static_cu_seqlens_and_event_tensors_are_refused_naming_them():
    cu = torch.tensor([0, 3], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"static_cu_seqlens ends at 2 but there are 0 events"):
        _packed(cu, static_cu_seqlens=torch.tensor([0, 2], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"times, codes and values must hold the same N events, got 3, 2 and 3"):
        PackedEvents(torch.zeros(3, dtype=torch.float64), torch.ones(2, dtype=torch.long), torch.zeros(3), cu,
                     ["<pad>", "a"], [0])


@pytest.mark.parametrize("call", [lambda: tape(2**40, 2), lambda: tape(2**62, 4)], ids=["2^40", "2^62"])
def test_tape_too_big_for_the_allocator_names_length(call):
    with pytest.raises(ValueError, match=r"tape: length=.* does not fit in memory"):
        call()


def test_erpe_too_big_for_the_allocator_names_max_len():
    with pytest.raises(ValueError, match=r"ERPE: max_len=1,099,511,627,776 with num_heads=2 .* does not fit in "
                                         r"memory"):
        ERPE(2**40, 2)
    with pytest.raises(ValueError, match=r"erpe_bias: length=.* does not fit in memory"):
        erpe_bias(torch.zeros(2**21 * 2 - 1, 1), 2**21)
    assert ERPE(4, 2).bias(3).shape == (2, 3, 3)  # ordinary sizes unchanged
    assert tape(5, 4).shape == (5, 4)
