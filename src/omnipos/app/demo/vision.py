"""``omnipos demo --section vision``: a randomly initialised timm ViT at three image sizes, and the 2-D sincos
similarity picture."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from omnipos.vision import patch_grid, sincos_2d

__all__ = ["demo_section", "similarity_mosaic"]

SIZES = ((224, 224), (272, 192), (200, 330))


def similarity_mosaic(table: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """``[H*W, D]`` table -> ``[H*H, W*W]`` image: tile ``(i, j)`` is the cosine similarity of patch ``(i, j)`` with
    every patch (the ViT paper's figure 7)."""
    height, width = grid
    unit = torch.nn.functional.normalize(table.double(), dim=-1)
    sim = (unit @ unit.T).reshape(height, width, height, width)
    return sim.permute(0, 2, 1, 3).reshape(height * height, width * width)


def _ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def demo_section(out_dir: Path | None) -> None:
    import timm

    from omnipos.vision import adapt_vit

    print("== vision: a timm ViT at any image size (omnipos.vision.timm.adapt_vit) ==")
    torch.manual_seed(0)
    model = adapt_vit(timm.create_model("vit_tiny_patch16_224", pretrained=False).eval())
    positions = model.omnipos_positions
    print("vit_tiny_patch16_224, random weights, trained on a 14 x 14 grid:")
    print("  image      grid     tokens  table: build / cached    forward")
    with torch.inference_mode():
        model(torch.randn(1, 3, 224, 224))  # warm-up
        for size in SIZES:
            grid = patch_grid(size, 16)
            positions.clear_cache()
            build = _ms(lambda: positions.tables(model.pos_embed, grid, dtype=torch.float32, device="cpu"))
            cached = _ms(lambda: positions.tables(model.pos_embed, grid, dtype=torch.float32, device="cpu"))
            forward = _ms(lambda: model(torch.randn(1, 3, *size)))
            print(f"  {size[0]}x{size[1]:<5} {str(grid):9} {grid[0] * grid[1]:>5}   {build:7.3f} / {cached:6.3f} ms"
                  f"  {forward:7.1f} ms")
    print("  (timm's dynamic_img_size=True pays the 'build' column on every forward; 200 x 330 is padded to 13 x 21)")

    grid = (8, 12)
    table = sincos_2d(grid, 192, convention="mae")
    mosaic = similarity_mosaic(table, grid)
    corner = mosaic[: grid[0], : grid[1]]  # patch (0, 0) against every patch
    print(f"2-D sincos (MAE), grid {grid}, 192 channels: similarity of patch (0,0) with (0,1) = "
          f"{corner[0, 1]:.3f}, (1,0) = {corner[1, 0]:.3f}, (1,1) = {corner[1, 1]:.3f}, (7,11) = {corner[7, 11]:.3f}")
    if out_dir is not None:
        from ..plotting import require_matplotlib

        plt = require_matplotlib()
        fig, ax = plt.subplots(figsize=(8, 5.6))
        image = ax.imshow(mosaic.numpy(), cmap="viridis", interpolation="nearest")
        for i in range(1, grid[0]):
            ax.axhline(i * grid[0] - 0.5, color="white", lw=0.5)
        for j in range(1, grid[1]):
            ax.axvline(j * grid[1] - 0.5, color="white", lw=0.5)
        ax.set(title=f"2-D sincos (MAE): each tile = one patch's cosine similarity to all {grid[0]}x{grid[1]}",
               xticks=[], yticks=[])
        fig.colorbar(image, ax=ax, label="cosine similarity")
        fig.tight_layout()
        path = out_dir / "vision_sincos_similarity.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(f"  wrote {path}")

