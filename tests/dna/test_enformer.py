"""relative_basis against the TF reference formulas evaluated independently in float64 (NumPy / scipy.stats), and
against the trained Enformer's own gamma features (peer-data/enformer_pytorch_tf_gammas.pt)."""

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from omnipos.dna import relative_basis

PEER_GAMMAS = Path("/work/shared/peer-data/enformer_pytorch_tf_gammas.pt")


def reference(seq_len, num_features, kinds=("exponential", "central_mask", "gamma"), symmetric=True,
              gamma_normalization="per_feature"):
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
            if gamma_normalization == "global":  # the 2021 release: tf.reduce_max with no axis
                blocks.append(pdf / pdf.max())
            else:  # the trained model: tf.reduce_max(p, axis=1, keepdims=True), one maximum per feature
                blocks.append(pdf / pdf.max(axis=0, keepdims=True))
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


@pytest.mark.parametrize("seq_len, num_features", [(7, 6), (200, 24), (1536, 192)])
@pytest.mark.parametrize("symmetric", [True, False])
def test_global_normalization_by_name_matches_the_first_release(seq_len, num_features, symmetric):
    ours = relative_basis(seq_len, num_features, symmetric=symmetric, dtype=torch.float64,
                          gamma_normalization="global").numpy()
    expected = reference(seq_len, num_features, symmetric=symmetric, gamma_normalization="global")
    np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-12)


def test_every_gamma_column_peaks_at_one_by_default_and_below_one_when_global():
    per_feature = relative_basis(100, 8, kinds=("gamma",), dtype=torch.float64)
    assert torch.equal(per_feature.max(0).values, torch.ones(8, dtype=torch.float64))
    column_max = relative_basis(100, 8, kinds=("gamma",), dtype=torch.float64,
                                gamma_normalization="global").max(0).values
    assert column_max.max().item() == pytest.approx(1.0)
    assert (column_max < 0.99).any()


def test_matches_the_trained_enformers_gamma_block():
    """The trained model's gamma features at T=1536, F=32 (TF float32, as enformer-pytorch stores them for
    use_tf_gamma): the per-feature default matches within TF's float32 rounding of the log-pdf; the global
    normalisation (the first release) is 0.11 off."""
    peer = torch.load(PEER_GAMMAS).double()
    assert peer.shape == (2 * 1536 - 1, 32)
    ours = relative_basis(1536, 32, kinds=("gamma",), dtype=torch.float64)
    assert (ours - peer).abs().max() < 3e-3
    torch.testing.assert_close(ours.max(0).values, peer.max(0).values, rtol=0, atol=1e-6)  # both peak at 1.0
    legacy = relative_basis(1536, 32, kinds=("gamma",), dtype=torch.float64, gamma_normalization="global")
    assert (legacy - peer).abs().max() > 0.1
    # the full 192-feature basis holds the same block at features 64..95 (symmetric half)
    full = relative_basis(1536, 192, symmetric=False, dtype=torch.float64)
    assert (full[:, 64:96] - peer).abs().max() < 3e-3


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
    with pytest.raises(ValueError, match="gamma_normalization"):
        relative_basis(10, 3, gamma_normalization="per_distance")
    with pytest.raises(ValueError, match="kinds"):
        relative_basis(10, 3, kinds=(["gamma"],))
