"""The vision demo section prints its grids and cache and draws the similarity mosaic."""

import torch

from omnipos.app.demo.vision import demo_section, similarity_mosaic
from omnipos.vision import sincos_2d


def test_demo_section(tmp_path, capsys):
    demo_section(tmp_path)
    text = capsys.readouterr().out
    for row in ("224x224   (14, 14)    196", "272x192   (17, 12)    204", "200x330   (13, 21)    273"):
        assert row in text
    path = tmp_path / "vision_sincos_similarity.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(path) in text


def test_similarity_mosaic_tiles():
    grid = (3, 4)
    table = sincos_2d(grid, 32)
    mosaic = similarity_mosaic(table, grid)
    assert mosaic.shape == (9, 16)
    unit = torch.nn.functional.normalize(table.double(), dim=-1)
    # tile (1, 2) holds patch (1, 2) against every patch; its own entry is 1
    torch.testing.assert_close(mosaic[3:6, 8:12].reshape(-1), unit @ unit[1 * 4 + 2])
    assert abs(mosaic[3 + 1, 8 + 2].item() - 1.0) < 1e-12
