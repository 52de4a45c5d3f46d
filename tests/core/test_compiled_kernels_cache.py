"""numba's cache files are pickles: omnipos' kernels keep theirs only in a folder no one else can write (a private
NUMBA_CACHE_DIR, else $XDG_CACHE_HOME/omnipos/numba created 0700), never in __pycache__, and never read a cache
from a folder that is a symbolic link or writable by others; the local engine's workers follow the same rule."""

import importlib.util
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

numba = pytest.importorskip("numba")

from numba.core.caching import _CacheLocator

from omnipos.core.compiled_kernels import kernel_cache_folder

SRC = Path(__file__).resolve().parents[2] / "src"
KERNEL = ("import numpy as np\n"
          "from omnipos.core import compiled\n\n"
          "@compiled\n"  # line 4: numba names the cache files by the first line of the decorated function
          "def twice_plus_one(x):\n"
          "    return 2.0 * x + 1.0\n")
LINE = 4


class Planted:
    """Unpickling it creates the folder ``marker``: proof that a cache file ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def index_name(module):
    abi = getattr(sys, "abiflags", "")
    return f"{module.stem}.twice_plus_one-{LINE}.py{sys.version_info[0]}{sys.version_info[1]}{abi}.nbi"


def plant(folder, module, marker):
    """A numba index for ``module``'s kernel in cache folder ``folder`` (as numba lays it out) whose unpickling
    creates ``marker``; its path."""
    sub = folder / _CacheLocator.get_suitable_cache_subpath(str(module))
    sub.mkdir(parents=True, exist_ok=True)
    path = sub / index_name(module)
    path.write_bytes(pickle.dumps(numba.__version__) + pickle.dumps(Planted(marker)))
    return path


def run_kernel(module):
    """Import ``module`` afresh (a new dispatcher, as a new process would make) and run its kernel; the number of
    cache hits."""
    import numpy as np

    spec = importlib.util.spec_from_file_location(module.stem, module)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    x = np.arange(5.0)
    assert (loaded.twice_plus_one(x) == 2 * x + 1).all()
    return sum(loaded.twice_plus_one.stats.cache_hits.values())


def cache_files(folder):
    return sorted(p for p in folder.rglob("*") if p.suffix in (".nbi", ".nbc"))


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A kernel module in its own folder, XDG_CACHE_HOME in tmp_path, and no NUMBA_CACHE_DIR."""
    source = tmp_path / "src"
    source.mkdir()
    module = source / f"tiny_kernel_{tmp_path.name[:20].replace('-', '_')}.py"
    module.write_text(KERNEL)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(numba.config, "CACHE_DIR", "")
    return module


def test_the_default_folder_is_created_0700_and_used(tmp_path, setup):
    module = setup
    assert run_kernel(module) == 0
    folder = tmp_path / "xdg" / "omnipos" / "numba"
    assert folder.stat().st_mode & 0o777 == 0o700 and folder.parent.stat().st_mode & 0o777 == 0o700
    assert {p.suffix for p in cache_files(folder)} == {".nbi", ".nbc"}
    assert not cache_files(module.parent)  # nothing in the __pycache__ beside the source
    assert run_kernel(module) == 1  # the next process loads it
    assert kernel_cache_folder() == str(folder)


def test_a_private_numba_cache_dir_is_used(tmp_path, setup, monkeypatch):
    module = setup
    mine = tmp_path / "mine"
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(mine))
    assert run_kernel(module) == 0 and run_kernel(module) == 1
    assert mine.stat().st_mode & 0o777 == 0o700 and cache_files(mine)
    assert not (tmp_path / "xdg").exists()


def _group_writable(path):
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o775)
    return path


def _symlink(path, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700, exist_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target, target_is_directory=True)
    return path


# (where the planted cache is, how that folder is made unsafe, whether the per-user folder is used instead)
REFUSED = {
    "NUMBA_CACHE_DIR group-writable": ("numba", _group_writable, True),
    "NUMBA_CACHE_DIR a symbolic link": ("numba", _symlink, True),
    "__pycache__ world-writable": ("pycache", lambda p: (p.mkdir(), p.chmod(0o777), p)[2], True),
    "per-user folder group-writable": ("xdg", _group_writable, False),
    "per-user folder a symbolic link": ("xdg", _symlink, False),
    "per-user folder's parent group-writable": ("xdg-parent", _group_writable, False),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_folder_others_can_write_is_never_read(tmp_path, setup, monkeypatch, case):
    module = setup
    where, unsafe, falls_back = REFUSED[case]
    marker = tmp_path / "ran"
    xdg = tmp_path / "xdg" / "omnipos" / "numba"
    if where == "numba":
        folder = unsafe(tmp_path / "shared", tmp_path) if unsafe is _symlink else unsafe(tmp_path / "shared")
        monkeypatch.setattr(numba.config, "CACHE_DIR", str(folder))
        planted = plant(folder, module, marker)
    elif where == "pycache":
        folder = unsafe(module.parent / "__pycache__")
        planted = folder / index_name(module)
        planted.write_bytes(pickle.dumps(numba.__version__) + pickle.dumps(Planted(marker)))
    elif where == "xdg":
        folder = unsafe(xdg, tmp_path) if unsafe is _symlink else unsafe(xdg)
        planted = plant(folder, module, marker)
    else:
        _group_writable(xdg.parent)
        folder = xdg
        xdg.mkdir(mode=0o700)
        planted = plant(folder, module, marker)
    before = planted.read_bytes()
    if where in ("numba", "xdg", "xdg-parent"):
        with pytest.warns(RuntimeWarning, match="symbolic link|writable by its group or by others"):
            hits = run_kernel(module)
    else:
        hits = run_kernel(module)
    assert hits == 0
    assert not marker.exists()  # the planted index was never unpickled
    assert planted.read_bytes() == before  # nor replaced
    assert cache_files(module.parent) == ([planted] if where == "pycache" else [])  # nothing cached beside the source
    if falls_back:
        assert xdg.stat().st_mode & 0o777 == 0o700 and {p.suffix for p in cache_files(xdg)} == {".nbi", ".nbc"}
    else:
        assert kernel_cache_folder() is None
        assert cache_files(tmp_path / "xdg") == ([planted] if where != "xdg" or unsafe is _group_writable else [])


WORKER_JOB = """
import numpy as np, torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform
from omnipos.scale import load_graphs, precompute_graphs
from {module} import Twice

if __name__ == "__main__":
    graphs = [Data(x=torch.arange(3.0 * n).reshape(n, 3), edge_index=torch.zeros(2, 0, dtype=torch.long),
                   num_nodes=n) for n in (1, 2, 3)]
    precompute_graphs(graphs, {out!r}, Twice(), num_cpus=1, progress=False)
    for g in load_graphs({out!r}):
        assert torch.equal(g.z, 2 * g.x.double() + 1)
    print("ok")
"""

TRANSFORM = KERNEL + """
import torch
from torch_geometric.transforms import BaseTransform


class Twice(BaseTransform):
    def forward(self, data):
        data = data.clone()
        data.z = torch.from_numpy(twice_plus_one(data.x.double().numpy()))
        return data
"""


def test_the_local_engines_workers_follow_the_same_rule(tmp_path):
    """A graph job whose transform runs a compiled kernel, with a world-writable NUMBA_CACHE_DIR holding a planted
    index: the kernel runs (compiled) in a worker process of the local engine, which never reads the planted file
    and caches in the per-user folder."""
    source = tmp_path / "src"
    source.mkdir()
    module = source / "tiny_transform.py"
    module.write_text(TRANSFORM)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    marker = tmp_path / "ran"
    plant(shared, module, marker)
    script = tmp_path / "job.py"
    script.write_text(WORKER_JOB.format(module=module.stem, out=str(tmp_path / "out")))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(shared), "XDG_CACHE_HOME": str(tmp_path / "xdg"),
           "PYTHONPATH": os.pathsep.join([str(source), str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0 and done.stdout.split() == ["ok"], done.stderr[-3000:]
    assert not marker.exists()
    assert {p.suffix for p in cache_files(tmp_path / "xdg" / "omnipos" / "numba")} == {".nbi", ".nbc"}


ALLOCATING = ("import numpy as np\n"
              "from omnipos.core import compiled\n\n"
              "@compiled\n"
              "def cumulative(x):\n"
              "    out = np.empty(x.size)\n"  # an array allocated in the kernel: numba's runtime (NRT) is needed
              "    total = 0.0\n"
              "    for i in range(x.size):\n"
              "        total += x[i] * x[i]\n"
              "        out[i] = total\n"
              "    return out\n")

FIRST_CALL = """
import sys, time
import numpy as np
sys.path.insert(0, {source!r})
import numba
from allocating_kernel import cumulative
x = np.linspace(0.1, 3.0, 7)
start = time.perf_counter()
out = cumulative(x)
print(repr(out.tobytes().hex()), sum(cumulative.stats.cache_hits.values()),
      "numba.np.arraymath" in sys.modules, "scipy.linalg" in sys.modules, time.perf_counter() - start)
"""


def test_a_cached_kernel_loads_without_numbas_compiler_registries(tmp_path):
    """A process whose kernels all come from the disk cache does not pay for numba's compiler set-up: loading a
    cached kernel does not import numba's registries (NumPy, linalg and SciPy's BLAS, ...; ~0.5-1 s, most of a
    process's first call before), and the kernel gives the same bits as the process that compiled it. (Failed
    before: numba's load_overload refreshes the whole target context first, which imports numba.np.arraymath and
    scipy.linalg.)"""
    source = tmp_path / "src"
    source.mkdir()
    (source / "allocating_kernel.py").write_text(ALLOCATING)
    script = tmp_path / "first_call.py"
    script.write_text(FIRST_CALL.format(source=str(source)))
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "NUMBA_CACHE_DIR": "",
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300,
                              check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        bits, hits, registries, scipy_linalg, _ = done.stdout.split()
        runs.append((bits, int(hits), registries == "True", scipy_linalg == "True"))
    (compiled_bits, compiled_hits, _, _), (cached_bits, cached_hits, registries, scipy_linalg) = runs
    assert compiled_hits == 0 and cached_hits == 1
    assert cached_bits == compiled_bits
    assert not registries and not scipy_linalg
