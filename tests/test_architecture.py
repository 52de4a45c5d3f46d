"""The house rules of ../shared/ARCHITECTURE.md, checked on the source: layers, the core's declared API, private
names, import cycles, application code and integrations.

Every ``import`` statement in ``src/omnipos`` is read with ``ast`` (module level and inside functions alike, since
a lazy import is still a dependency) and resolved to the omnipos module it names.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "omnipos"
DOMAINS = ("timeseries", "vision", "graph", "dna")
LIBRARY = ("core", *DOMAINS, "integrations", "scale")  # everything but app/
# integrations/ sits beside the domains: it imports omnipos.core (and may import a domain), never scale or app;
# no domain, scale or app module imports it (a user does)
RANK = {"core": 0, **{d: 1 for d in DOMAINS}, "integrations": 1, "scale": 2, "app": 3}

#: Third-party integrations and the only library modules that may import them (ARCHITECTURE: one module each,
#: optional). matplotlib and tqdm are never imported by a library package. app/ is a user of these libraries (the
#: demo builds a timm model and a networkx graph) and may import them where it needs them.
INTEGRATIONS = {
    "timm": {"omnipos.vision.timm", *(f"omnipos.vision.timm.{m}" for m in ("adapt", "adapter", "checkpoints",
                                                                          "families", "forward"))},
    "torch_geometric": {"omnipos.graph.pyg", "omnipos.scale.graphs"},
    "networkx": {"omnipos.graph.networkx"},
    "pandas": {"omnipos.timeseries.events", "omnipos.scale.meds"},
    "pyarrow": {"omnipos.timeseries.meds", "omnipos.scale.parquet"},
    "dnaio": {"omnipos.dna.dnaio"},
    "ray": {"omnipos.scale.engine"},
    "pyamg": {"omnipos.graph.eigensolvers.multigrid"},
    # (numba: the compiled kernels, each domain's in modules of their own; core says how they are compiled)
    "numba": {"omnipos.core.compiled_kernels", "omnipos.dna.fastq_kernels", "omnipos.graph.lane_eigh",
              "omnipos.graph.canonical_kernel",
              "omnipos.timeseries.summed_kernels"},
    "transformers": {"omnipos.integrations.transformers"},
    "diffusers": {"omnipos.integrations.diffusers"},
    "matplotlib": set(),
    "tqdm": set(),
}
APPLICATION_IMPORTS = ("argparse",)  # a library module parses no command line


@dataclass(frozen=True)
class Import:
    source: str  # importing module, e.g. "omnipos.dna.reads"
    target: str  # imported module, e.g. "omnipos.core" or "numpy"
    names: tuple[str, ...]  # names taken from it (from-imports), empty for "import x"
    line: int

    def where(self) -> str:
        return f"{self.source} (line {self.line})"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def resolve(source: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = source.split(".") if is_package(source) else source.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str) -> list[Import]:
    found = []
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            found += [Import(name, alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = resolve(name, node)
            names = tuple(alias.name for alias in node.names)
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
            if submodules:  # "from . import rope_triton": the module, not the package
                found += [Import(name, sub, (), node.lineno) for sub in submodules]
                names = tuple(n for n in names if f"{target}.{n}" not in MODULES)
                if not names:
                    continue
            found.append(Import(name, target, names, node.lineno))
    return found


ALL_IMPORTS = [imp for name in MODULES for imp in imports_of(name)]
INTERNAL = [imp for imp in ALL_IMPORTS if imp.target == "omnipos" or imp.target.startswith("omnipos.")]


def package_of(module: str) -> str:
    """``"omnipos.dna.reads"`` -> ``"dna"``; the top-level ``omnipos`` and ``omnipos.__main__`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANK else ""


def test_every_import_was_found():
    """Guard against a parser that silently finds nothing: the tree is known to have these edges."""
    edges = {(i.source, i.target) for i in INTERNAL}
    assert ("omnipos.dna.alphabet", "omnipos.core") in edges
    assert ("omnipos.app.cli", "omnipos.app.demo") in edges or ("omnipos.app.cli", "omnipos.app") in edges
    assert len(MODULES) > 40


def points_up(src: str, dst: str) -> bool:
    """Whether package ``src`` importing package ``dst`` breaks the layers (a domain importing another domain or
    integrations, the same rank, counts; integrations may build on a domain)."""
    if not src or not dst or src == dst:
        return False
    if src == "integrations" and dst in DOMAINS:
        return False
    return RANK[dst] >= RANK[src]


def test_no_arrow_points_up_a_layer():
    bad = []
    for imp in INTERNAL:
        if points_up(package_of(imp.source), package_of(imp.target)):
            bad.append(f"{imp.where()} imports {imp.target}")
    assert not bad, "imports that point up (or across) the layers app -> scale -> domains -> core:\n" + "\n".join(bad)


def test_domains_use_only_the_core_namespace():
    """A domain imports ``omnipos.core`` (its declared API), never a core submodule."""
    bad = [f"{imp.where()} imports {imp.target}" for imp in INTERNAL
           if package_of(imp.source) in (*DOMAINS, "integrations", "scale", "app")
           and imp.target.startswith("omnipos.core.")]
    assert not bad, "\n".join(bad)


def test_no_private_name_crosses_a_file():
    """No module imports an underscore-prefixed module or name of another file (a file exports what its siblings
    use; a private kernel stays in its file)."""
    bad = []
    for imp in INTERNAL:
        private_module = [p for p in imp.target.split(".") if p.startswith("_") and p != "__main__"]
        private_names = [n for n in imp.names if n.startswith("_") and not (n.startswith("__") and n.endswith("__"))]
        if private_module and package_of(imp.target) != package_of(imp.source):
            bad.append(f"{imp.where()} imports the private module {imp.target}")
        if private_names and imp.target != imp.source:
            bad.append(f"{imp.where()} imports private name(s) {private_names} from {imp.target}")
    assert not bad, "\n".join(bad)


def test_core_exports_every_name_a_domain_uses():
    import omnipos.core

    missing = [f"{imp.where()}: {name}" for imp in INTERNAL if imp.target == "omnipos.core"
               for name in imp.names if name not in omnipos.core.__all__]
    assert not missing, "names used from omnipos.core but not in its __all__:\n" + "\n".join(missing)


def test_no_import_cycles():
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for imp in INTERNAL:
        if imp.target in MODULES and imp.target != imp.source:
            graph[imp.source].add(imp.target)
    # a submodule importing its own package's __init__ is a cycle too (the package imports its submodules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("integration", sorted(INTEGRATIONS))
def test_integrations_live_in_their_one_module(integration):
    bad = [f"{imp.where()} imports {imp.target}" for imp in ALL_IMPORTS
           if (imp.target == integration or imp.target.startswith(integration + "."))
           and package_of(imp.source) in LIBRARY and imp.source not in INTEGRATIONS[integration]]
    assert not bad, f"{integration} may be imported only in {sorted(INTEGRATIONS[integration])}:\n" + "\n".join(bad)


def test_library_packages_hold_no_application_code():
    """No command-line parsing, no printing, no demo/plotting module outside app/."""
    bad = []
    for name, path in MODULES.items():
        if package_of(name) not in LIBRARY:
            continue
        if name.rsplit(".", 1)[-1] in ("cli", "demo", "plotting", "featurize", "synthetic"):
            bad.append(f"{name}: application module inside a library package")
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                bad.append(f"{name} (line {node.lineno}): print()")
    bad += [f"{imp.where()} imports {imp.target}" for imp in ALL_IMPORTS
            if package_of(imp.source) in LIBRARY and imp.target in APPLICATION_IMPORTS]
    assert not bad, "\n".join(bad)


def test_the_check_catches_violations(tmp_path, monkeypatch):
    """The checks above can fail: feed them a module that breaks each rule."""
    bad = ast.parse("from ..core.rotary import _rotate\nimport matplotlib\nfrom ...app import cli\n")
    names = [(n.level, n.module, [a.name for a in n.names]) for n in ast.walk(bad) if isinstance(n, ast.ImportFrom)]
    assert names == [(2, "core.rotary", ["_rotate"]), (3, "app", ["cli"])]
    fake = Import("omnipos.dna.bad", "omnipos.core.rotary", ("_rotate",), 1)
    assert package_of(fake.source) == "dna" and fake.target.startswith("omnipos.core.")
    assert RANK[package_of("omnipos.app.cli")] > RANK[package_of(fake.source)]
    # integrations: beside the domains, above the core, below scale and app
    assert package_of("omnipos.integrations.transformers") == "integrations"
    assert not points_up("integrations", "core") and not points_up("integrations", "vision")
    assert points_up("integrations", "scale") and points_up("integrations", "app")
    assert points_up("core", "integrations") and points_up("dna", "integrations")
