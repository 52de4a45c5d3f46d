"""relative_basis against the TF reference formulas evaluated independently in float64 (NumPy / scipy.stats)."""

import numpy as np
import pytest
import torch
from scipy import stats

from omnipos.dna import relative_basis


def reference(seq_len, num_features, kinds=("exponential", "central_mask", "gamma"), symmetric=True):
    """deepmind-research enformer/attention_module.py positional_features_all, re-derived in NumPy float64."""
    r = np.arange(-(seq_len - 1), seq_len, dtype=np.float64)
    d = np.abs(r)[:, None]
    per = num_features // (len(kinds) * (1 if symmetric else 2))
    blocks = []
    for kind in kinds:
        if kind == "exponential":
            half_life = 2.0 ** np.linspace(3.0, np.log2(seq_len), per)
            blocks.append(np.exp(-np.log(2.0) / half_life * d))
        elif kind == "central_mask":
            widths = 2.0 ** np.arange(1, per + 1) - 1
            blocks.append((widths > d).astype(np.float64))
        else:
            stddev = seq_len / (2 * per)
            mean = np.linspace(seq_len / per, seq_len, per)
            pdf = stats.gamma.pdf(d, a=(mean / stddev) ** 2, scale=1.0 / (mean / stddev**2)) + 1e-8
            blocks.append(pdf / pdf.max())  # ONE global maximum (tf.reduce_max with no axis)
    e = np.concatenate(blocks, axis=-1)
    if not symmetric:
        e = np.concatenate([e, np.sign(r)[:, None] * e], axis=-1)
    return e


@pytest.mark.parametrize("seq_len, num_features", [(1, 6), (7, 6), (64, 12), (200, 24), (1536, 192)])
@pytest.mark.parametrize("symmetric", [True, False])
def test_matches_reference(seq_len, num_features, symmetric):
    ours = relative_basis(seq_len, num_features, symmetric=symmetric, dtype=torch.float64).numpy()
    expected = reference(seq_len, num_features, symmetric=symmetric)
    assert ours.shape == (2 * seq_len - 1, num_features)
    np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-12)
    f32 = relative_basis(seq_len, num_features, symmetric=symmetric)
    assert f32.dtype == torch.float32
    np.testing.assert_allclose(f32.double().numpy(), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kinds", [("gamma",), ("central_mask", "exponential"), ("gamma", "exponential")])
def test_kind_selection_and_order(kinds):
    ours = relative_basis(50, 4 * len(kinds), kinds=kinds, dtype=torch.float64).numpy()
    np.testing.assert_allclose(ours, reference(50, 4 * len(kinds), kinds=kinds), rtol=1e-9, atol=1e-12)


def test_gamma_uses_one_global_maximum_not_one_per_feature():
    gamma = relative_basis(100, 8, kinds=("gamma",), dtype=torch.float64)
    column_max = gamma.max(0).values
    assert column_max.max().item() == pytest.approx(1.0)
    assert (column_max < 0.99).any()  # enformer-pytorch's per-feature division would make every column peak at 1


def test_non_symmetric_is_concat_of_e_and_sign_times_e():
    e = relative_basis(9, 6, symmetric=False, dtype=torch.float64)
    first, second = e[:, :3], e[:, 3:]
    sign = torch.arange(-8, 9, dtype=torch.float64).sign().unsqueeze(1)
    assert torch.equal(second, sign * first)
    assert torch.equal(first, relative_basis(9, 3, dtype=torch.float64))


def test_errors():
    with pytest.raises(ValueError, match="divisible by 3"):
        relative_basis(10, 4)
    with pytest.raises(ValueError, match="divisible by 6"):
        relative_basis(10, 9, symmetric=False)
    with pytest.raises(ValueError, match="unknown basis 'cosine'"):
        relative_basis(10, 3, kinds=("cosine",))
    with pytest.raises(ValueError, match="repeats"):
        relative_basis(10, 2, kinds=("gamma", "gamma"))
    with pytest.raises(ValueError, match="non-empty"):
        relative_basis(10, 2, kinds=())
    with pytest.raises(ValueError, match="seq_len"):
        relative_basis(0, 3)
    with pytest.raises(TypeError, match="num_features"):
        relative_basis(10, 3.0)
