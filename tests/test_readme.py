"""Every Python example in the README runs as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples():
    assert BLOCKS, "README.md has no ```python examples"


TEST_COMMAND = 'pip install -e ".[dev]" -c constraints-dev.txt && pytest'


def test_readme_setup_commands():
    text = README.read_text()
    assert 'pip install -e ".[all]" && omnipos demo' in text
    assert TEST_COMMAND in text


def test_ci_runs_the_readme_test_command_on_pinned_releases():
    root = README.parent
    assert TEST_COMMAND in (root / ".ci" / "run").read_text()
    pins = {}
    for line in (root / "constraints-dev.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints-dev.txt: {line!r} is not an exact pin (name==version)"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    # every peer a test compares with is pinned, so CI is reproducible
    for peer in ("torch", "transformers", "timm", "torch-geometric", "rotary-embedding-torch", "numpy", "scipy",
                 "pandas", "pyarrow", "ray", "dnaio", "biopython", "networkx", "hypothesis", "pytest", "diffusers"):
        assert peer in pins, f"constraints-dev.txt does not pin {peer}"


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[index], f"README.md example {index + 1}", "exec"), {"__name__": f"readme_{index}"})
