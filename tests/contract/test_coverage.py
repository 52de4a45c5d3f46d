"""Every public nn.Module of omnipos has a contract case (tests/contract/test_<domain>.py)."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

from torch import nn

import omnipos.core
import omnipos.dna
import omnipos.graph
import omnipos.graph.pyg
import omnipos.timeseries
import omnipos.vision
import omnipos.vision.timm

HERE = Path(__file__).resolve().parent


def public_module_classes() -> set[type]:
    classes = set()
    packages = (omnipos.core, omnipos.timeseries, omnipos.vision, omnipos.vision.timm, omnipos.graph,
                omnipos.graph.pyg, omnipos.dna)
    for package in packages:
        for name in package.__all__:
            obj = getattr(package, name)
            if inspect.isclass(obj) and issubclass(obj, nn.Module) and not inspect.isabstract(obj):
                classes.add(obj)
    classes.discard(omnipos.core.ConstantBuffers)  # a base class, not a module users build
    return classes


def covered_classes() -> set[type]:
    covered = set()
    for path in sorted(HERE.glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        spec = importlib.util.spec_from_file_location(f"_contract_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses defined in the file look their module up
        spec.loader.exec_module(module)
        for case in getattr(module, "CASES", []):
            if case.make is not None:
                built = case.make()
                covered.update(type(m) for m in built.modules())
    return covered


def test_every_public_module_has_a_contract_case():
    public = public_module_classes()
    assert {omnipos.core.RotaryEmbedding, omnipos.timeseries.TimelineEncoder, omnipos.graph.SignNet} <= public
    missing = sorted(c.__qualname__ for c in public - covered_classes())
    assert not missing, f"public nn.Modules without a contract case: {missing}"
