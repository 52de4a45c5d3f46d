"""matplotlib integration (extra ``[plot]``): the pictures ``omnipos demo`` draws. Imported only when drawing."""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["require_matplotlib", "save_figure", "plot_heatmap", "plot_similarity", "cosine_similarity_matrix"]


def require_matplotlib():
    """Return ``matplotlib.pyplot`` on the non-interactive Agg backend, or raise naming the extra."""
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError("plotting needs matplotlib: pip install 'omnipos[plot]'") from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path) -> Path:
    """Lay out, write (PNG by suffix) and close ``fig``; return the path."""
    plt = require_matplotlib()
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def cosine_similarity_matrix(pe: torch.Tensor) -> torch.Tensor:
    """``[N, D]`` encodings -> ``[N, N]`` cosine similarities, in float64."""
    unit = torch.nn.functional.normalize(pe.detach().to(torch.float64).reshape(pe.shape[0], -1), dim=-1)
    return unit @ unit.T


def plot_heatmap(pe: torch.Tensor, path: str | Path, *, title: str, xlabel: str = "channel",
                 ylabel: str = "position") -> Path:
    """Draw a ``[N, D]`` encoding as a heatmap (rows = positions) into ``path``."""
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    image = ax.imshow(pe.detach().cpu().float().numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1,
                      interpolation="nearest")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    fig.colorbar(image, ax=ax, label="value")
    return save_figure(fig, path)


def plot_similarity(pe: torch.Tensor, path: str | Path, *, title: str, label: str = "position") -> Path:
    """Draw the cosine-similarity matrix of ``[N, D]`` encodings into ``path``."""
    plt = require_matplotlib()
    sim = cosine_similarity_matrix(pe).cpu().numpy()
    fig, ax = plt.subplots(figsize=(5.5, 4.8))
    image = ax.imshow(sim, cmap="viridis", interpolation="nearest")
    ax.set(title=title, xlabel=label, ylabel=label)
    fig.colorbar(image, ax=ax, label="cosine similarity")
    return save_figure(fig, path)
