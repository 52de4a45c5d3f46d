"""Integrations are optional: with timm, PyG, networkx, pandas, pyarrow, dnaio, matplotlib, tqdm, ray and numba hidden,
every domain imports and computes, and each integration refuses with an ImportError naming its extra.

Runs in a subprocess whose import system refuses those packages, as a fresh ``pip install -e .`` would.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

HIDDEN = ("timm", "torch_geometric", "networkx", "pandas", "pyarrow", "dnaio", "matplotlib", "tqdm", "ray",
          "torchvision", "transformers", "pyamg", "numba")

SCRIPT = textwrap.dedent('''
    import importlib.abc, sys

    HIDDEN = {hidden!r}

    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {{name!r}} (hidden by the test)", name=name)
            return None

    sys.meta_path.insert(0, Hide())

    import torch
    import omnipos.core, omnipos.timeseries, omnipos.vision, omnipos.graph, omnipos.dna

    tokens, mask = omnipos.dna.encode(["ACGTN", "GG"])
    assert tokens.shape == (2, 5) and omnipos.dna.decode(tokens, mask) == ["ACGTN", "GG"]
    ring = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])
    pe = omnipos.graph.laplacian_pe(torch.cat([ring, ring.flip(0)], 1), 5, 2)
    assert pe.shape == (5, 2) and torch.isfinite(pe).all()
    assert omnipos.vision.sincos_2d((3, 4), 16).shape == (12, 16)
    encoder = omnipos.timeseries.TimelineEncoder(8)
    out = encoder(torch.tensor([[0.0, 1.5, 30.0]]), clock=0.0)
    assert out.shape == (1, 3, 8) and torch.isfinite(out).all()

    def refuses(call, extra):
        try:
            call()
        except ImportError as err:
            assert f"omnipos[{{extra}}]" in str(err), (extra, str(err))
            return
        raise AssertionError(f"expected an ImportError naming omnipos[{{extra}}]")

    refuses(lambda: omnipos.vision.adapt_vit(torch.nn.Linear(2, 2)), "vision")
    refuses(lambda: omnipos.graph.AddLaplacianPE(2), "graph")
    refuses(lambda: omnipos.graph.networkx_to_edge_index(object()), "graph")
    refuses(lambda: omnipos.timeseries.EventBatch.from_frame(object()), "clinical")

    # large graphs: "auto" solves without pyamg (Lanczos in LOBPCG's place); naming "lobpcg" asks for the extra
    big = torch.arange(400)
    ladder = torch.cat([torch.stack([big, (big + 1) % 400]), torch.stack([big, (big + 7) % 400])], 1)
    sparse = omnipos.graph.laplacian_pe(ladder, 400, 3, dense_max_nodes=10)
    dense = omnipos.graph.laplacian_pe(ladder, 400, 3)
    assert torch.isfinite(sparse).all() and sparse.shape == dense.shape == (400, 3)
    refuses(lambda: omnipos.graph.laplacian_pe(ladder, 400, 3, dense_max_nodes=10, solver="lobpcg"), "graph")
    for name in HIDDEN:
        assert name not in sys.modules, f"{{name}} was imported"
    print("ok")
''').format(hidden=HIDDEN)


def test_domains_work_without_their_integrations():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
