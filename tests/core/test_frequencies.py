
import numpy as np
import pytest
import torch

from omnipos.core import frequency_bands


def test_frequency_bands_formula():
    w = frequency_bands(64, base=500.0)
    assert w.dtype == torch.float64 and w.shape == (32,)
    np.testing.assert_allclose(w.numpy(), 500.0 ** (-2 * np.arange(32) / 64), rtol=1e-14)


def test_layout_and_geometric_frequencies():
    from omnipos.core.frequencies import geometric_frequencies
    from omnipos.core.sinusoid import layout_frequencies

    np.testing.assert_allclose(layout_frequencies(12, base=50.0, layout="fairseq").numpy(),
                               np.exp(-np.log(50.0) * np.arange(6) / 5), rtol=1e-14)
    np.testing.assert_allclose(layout_frequencies(12, layout="split").numpy(),
                               10000.0 ** (-np.arange(0, 12, 2) / 12), rtol=1e-14)
    np.testing.assert_allclose(geometric_frequencies(5, base=7.0, denominator=2.5).numpy(),
                               7.0 ** (-np.arange(5) / 2.5), rtol=1e-14)
    with pytest.raises(ValueError, match="base"):
        geometric_frequencies(5, base=0.5, denominator=2.5)
    with pytest.raises(ValueError, match="layout"):
        layout_frequencies(12, layout="mae")
