"""The NumPy fast paths of issue 25's DNA row (padding from a mask, the RC of a padded one-hot batch) against
per-row references, on random values (pads included, so a pad slot that moved would show)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.dna import reverse_complement
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
