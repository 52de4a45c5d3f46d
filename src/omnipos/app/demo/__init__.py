"""``omnipos demo``: a tour of what omnipos computes, one section per part, printed and drawn.

Each section is a function ``(out_dir: Path | None) -> None`` that prints its numbers and, when ``out_dir`` is
given (matplotlib installed), writes its pictures there and says where.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from omnipos.core import sinusoidal

from .dna import demo_section as dna_demo_section
from .graph import demo_section as graph_demo_section
from .timeseries import demo_section as timeseries_demo_section
from .vision import demo_section as vision_demo_section

__all__ = ["run_demo", "SECTIONS"]


def _format_row(values: torch.Tensor) -> str:
    return "[" + ", ".join(f"{v:6.3f}" for v in values.tolist()) + "]"


def core_section(out_dir: Path | None) -> None:
    """The seeds' d=4 table, a d=128 summary, and the heatmap / similarity pictures."""
    print("== core: sinusoidal positional encoding (Vaswani et al.; layout='interleaved') ==")
    small = sinusoidal(torch.arange(3), 4)
    print("d = 4:")
    for p in range(3):
        print(f"  PE[{p}] = {_format_row(small[p])}")
    table = sinusoidal(torch.arange(50), 128)
    print(f"d = 128, 50 positions: shape {tuple(table.shape)}, values in [{table.min():.3f}, {table.max():.3f}]")
    print("            Dim 0   Dim 1   Dim 2   Dim 3  ...  Dim 127")
    for p in (0, 1, 2, 49):
        row = table[p]
        print(f"  Pos {p:>2}  " + "  ".join(f"{v:6.2f}" for v in row[:4].tolist()) + f"  ...  {row[127]:6.2f}")
    gram = table.double() @ table.double().T
    drift = max((gram.diagonal(k) - gram.diagonal(k).mean()).abs().max().item() for k in range(1, 10))
    print(f"  PE(i).PE(j) depends only on i - j: largest spread along a diagonal = {drift:.1e}")
    if out_dir is not None:
        from ..plotting import plot_heatmap, plot_similarity

        heat = plot_heatmap(table, out_dir / "sinusoid_heatmap.png",
                            title="Sinusoidal positional encoding, 50 positions x 128 channels")
        sim = plot_similarity(table, out_dir / "sinusoid_similarity.png",
                              title="Cosine similarity between positions")
        print(f"  wrote {heat}\n  wrote {sim}")


SECTIONS: list[tuple[str, Callable[[Path | None], None]]] = [
    ("core", core_section),
    ("timeseries", timeseries_demo_section),
    ("vision", vision_demo_section),
    ("graph", graph_demo_section),
    ("dna", dna_demo_section),
]


def run_demo(out_dir: str | Path | None = "omnipos-demo", *, plot: bool = True,
             sections: list[str] | None = None) -> Path | None:
    """Run the demo sections (all, or those named) and return the picture folder (None when not drawing)."""
    known = [name for name, _ in SECTIONS]
    if sections is not None:
        unknown = sorted(set(sections) - set(known))
        if unknown:
            raise ValueError(f"unknown demo section(s) {unknown}; known: {known}")
    target: Path | None = None
    if plot:
        try:
            from ..plotting import require_matplotlib

            require_matplotlib()
        except ImportError:
            print("(matplotlib is not installed: printing only; pip install 'omnipos[plot]' for the pictures)")
        else:
            target = Path(out_dir if out_dir is not None else "omnipos-demo")
            target.mkdir(parents=True, exist_ok=True)
    for name, section in SECTIONS:
        if sections is None or name in sections:
            section(target)
            print()
    if target is not None:
        print(f"pictures are in {target.resolve()}")
    return target
