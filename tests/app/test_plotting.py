import numpy as np
import torch

from omnipos.app.plotting import cosine_similarity_matrix, plot_heatmap


def test_cosine_similarity_matrix_matches_numpy():
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(2))
    a = x.double().numpy()
    unit = a / np.linalg.norm(a, axis=1, keepdims=True)
    np.testing.assert_allclose(cosine_similarity_matrix(x).numpy(), unit @ unit.T, atol=1e-12)


def test_plot_heatmap_writes_a_png(tmp_path):
    path = plot_heatmap(torch.rand(4, 6) * 2 - 1, tmp_path / "h.png", title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
