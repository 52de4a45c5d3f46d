"""One vocabulary across domains: ``dim`` for channel counts, ``base`` for frequency bases (the old names kept as
aliases that give the same result), and a TypeError for an invalid dtype everywhere."""

from __future__ import annotations

import pytest
import torch

from omnipos.core import sinusoidal
from omnipos.dna import one_hot, rc_symmetric_encoding, relative_basis
from omnipos.timeseries import (
    Time2Vec,
    TimelineEncoder,
    absolute_time_encoding,
    log_gap_encoding,
    periodic_encoding,
)
from omnipos.vision import RotaryEmbedding2D, sincos_2d, sincos_2d_from_coords

COORDS = torch.rand(5, 2, dtype=torch.float64) * 7


@pytest.mark.parametrize("new, old", [
    (lambda: sincos_2d((3, 5), 16, base=100.0), lambda: sincos_2d((3, 5), 16, temperature=100.0)),
    (lambda: sincos_2d_from_coords(COORDS, 8, base=50.0), lambda: sincos_2d_from_coords(COORDS, 8, temperature=50.0)),
    (lambda: relative_basis(9, dim=6), lambda: relative_basis(9, num_features=6)),
    (lambda: RotaryEmbedding2D(dim=8).cos_sin((2, 3)), lambda: RotaryEmbedding2D(head_dim=8).cos_sin((2, 3))),
])
def test_old_names_are_aliases(new, old):
    a, b = new(), old()
    for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_old_names_are_aliases_for_modules():
    torch.manual_seed(0)
    new = Time2Vec(dim=5)
    torch.manual_seed(0)
    old = Time2Vec(out_features=5)
    t = torch.tensor([[0.0, 1.0, 2.5]])
    torch.testing.assert_close(new(t), old(t), rtol=0, atol=0)
    assert new.dim == old.out_features == 5
    torch.manual_seed(1)
    mixed_new = RotaryEmbedding2D(8, mixed=True, num_heads=2, mixed_base=7.0)
    torch.manual_seed(1)
    mixed_old = RotaryEmbedding2D(8, mixed=True, num_heads=2, mixed_temperature=7.0)
    torch.testing.assert_close(mixed_new.freqs, mixed_old.freqs, rtol=0, atol=0)
    assert mixed_new.head_dim == 8


@pytest.mark.parametrize("call", [
    lambda: sincos_2d((3, 5), 16, base=100.0, temperature=10.0),
    lambda: relative_basis(9, 6, num_features=12),
    lambda: Time2Vec(4, out_features=5),
    lambda: RotaryEmbedding2D(8, head_dim=16),
    lambda: RotaryEmbedding2D(8, mixed=True, num_heads=2, mixed_base=3.0, mixed_temperature=7.0),
    lambda: Time2Vec(),
])
def test_both_names_or_neither_is_a_type_error(call):
    with pytest.raises(TypeError):
        call()


TIMES = torch.tensor([[0.0, 1.0, 30.0]])

DTYPE_CALLS = {
    "sinusoidal": lambda d: sinusoidal(torch.arange(3), 4, dtype=d),
    "sincos_2d": lambda d: sincos_2d((2, 2), 8, dtype=d),
    "sincos_2d_from_coords": lambda d: sincos_2d_from_coords(COORDS, 8, dtype=d),
    "RotaryEmbedding2D.cos_sin": lambda d: RotaryEmbedding2D(8).cos_sin((2, 2), dtype=d),
    "absolute_time_encoding": lambda d: absolute_time_encoding(TIMES, 4, min_period="1h", max_period="10d", dtype=d),
    "periodic_encoding": lambda d: periodic_encoding(TIMES, dtype=d),
    "log_gap_encoding": lambda d: log_gap_encoding(torch.tensor([[0.0, 2.0]]), 4, dtype=d),
    "TimelineEncoder": lambda d: TimelineEncoder(8, dtype=d),
    "relative_basis": lambda d: relative_basis(5, 6, dtype=d),
    "rc_symmetric_encoding": lambda d: rc_symmetric_encoding(torch.tensor([4]), 4, dtype=d),
    "one_hot": lambda d: one_hot(torch.tensor([[0, 1]]), dtype=d),
}


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, "float32", torch.complex64])
@pytest.mark.parametrize("name", sorted(DTYPE_CALLS))
def test_an_invalid_dtype_is_a_type_error(name, dtype):
    with pytest.raises(TypeError, match="dtype"):
        DTYPE_CALLS[name](dtype)
