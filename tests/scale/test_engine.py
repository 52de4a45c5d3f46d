"""Engine choice and cluster address checks (no Ray cluster is started here; Ray for real: test_ray.py)."""

import importlib.util
import os
import socket
import sys
import time

import pytest
import torch
from torch_geometric.transforms import Compose

import omnipos.scale.engine as engine_module
from omnipos.graph import AddLaplacianPE
from omnipos.scale import (
    CONNECT_TIMEOUT_S,
    Engine,
    PrecomputeResult,
    make_engine,
    precompute_graphs,
)
from omnipos.scale.engine import check_reachable


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_engine_defaults_and_choices():
    assert make_engine("local") == Engine("local", None, None, 0.0)
    assert make_engine("local").workers == len(os.sched_getaffinity(0))  # the machine's cores by default
    assert make_engine("local", num_cpus=3).workers == 3
    if torch.cuda.is_available():
        assert make_engine("local", num_cpus=1, num_gpus=0.5) == Engine("local", None, 1, 0.5)
    assert make_engine("ray", num_cpus=4) == Engine("ray", None, 4, 0.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_gpus_without_cuda_are_refused_before_any_work(tmp_path, graphs, transform):
    for engine in ("local", "ray"):
        if engine == "ray" and importlib.util.find_spec("ray") is None:
            continue
        with pytest.raises(ValueError, match=r"num_gpus=1: no CUDA device is available here .* num_gpus=0"):
            precompute_graphs(graphs, tmp_path / "out", transform(), engine=engine, num_gpus=1, progress=False)
    with pytest.raises(ValueError, match=r"num_gpus=0.5: no CUDA device"):
        make_engine("local", num_gpus=0.5)
    assert not (tmp_path / "out").exists()  # refused before the folder was touched


@pytest.mark.parametrize("arguments, error, match", [
    (("dask",), ValueError, "engine must be one of 'local', 'ray'; got 'dask'"),
    (("local", None, 0), ValueError, "num_cpus must be >= 1, got 0"),
    (("ray", None, 0), ValueError, "num_cpus must be >= 1, got 0"),
    (("ray", None, 1.5), TypeError, "num_cpus must be an int"),
    (("ray", None, None, -1), ValueError, "num_gpus must be a finite number >= 0"),
    (("ray", None, None, float("nan")), ValueError, "num_gpus must be a finite number >= 0"),
    (("ray", None, None, True), ValueError, "num_gpus must be a finite number >= 0"),
    (("local", "auto"), ValueError, "address='auto' needs engine='ray'"),
    (("ray", "head"), ValueError, "address must be 'auto', 'host:port' or 'ray://host:port'; got 'head'"),
    (("ray", "ray://head:port"), ValueError, "address must be 'auto'"),
    (("ray", "head:70000"), ValueError, "address must be 'auto'"),
    (("ray", 6379), TypeError, "address must be a str"),
])
def test_make_engine_refuses(arguments, error, match):
    with pytest.raises(error, match=match):
        make_engine(*arguments)


def test_ray_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ImportError, match=r'pip install "omnipos\[scale\]"'):
        make_engine("ray")
    with pytest.raises(ImportError, match=r"omnipos\[scale\]"):
        precompute_graphs([], "unused", Compose([AddLaplacianPE(2)]), engine="ray")
    assert make_engine("local").name == "local"  # the local engine needs no Ray


def test_unreachable_address_fails_within_seconds(tmp_path):
    pytest.importorskip("ray")
    for address in (f"127.0.0.1:{closed_port()}", f"ray://127.0.0.1:{closed_port()}"):
        started = time.monotonic()
        with pytest.raises(ConnectionError, match=r"cannot reach .* is the Ray cluster running there\?"):
            precompute_graphs([], tmp_path, Compose([AddLaplacianPE(2)]), engine="ray", address=address,
                              progress=False)
        assert time.monotonic() - started < CONNECT_TIMEOUT_S + 2
    assert not (tmp_path / "manifest.jsonl").exists()  # refused before any work


def test_an_address_that_is_not_a_ray_cluster_fails_within_seconds(tmp_path, monkeypatch):
    """Something accepts the connection but never answers as Ray: ray.init alone would retry for a minute."""
    pytest.importorskip("ray")
    monkeypatch.setattr(engine_module, "PROBE_TIMEOUT_S", 3.0)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        started = time.monotonic()
        with pytest.raises(ConnectionError, match="no Ray cluster answered within 3 s"):
            precompute_graphs([], tmp_path, Compose([AddLaplacianPE(2)]), engine="ray",
                              address=f"127.0.0.1:{server.getsockname()[1]}", progress=False)
        assert time.monotonic() - started < 3.0 + 2


def test_auto_checks_ray_address(monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed_port()}")
    with pytest.raises(ConnectionError, match="RAY_ADDRESS='127.0.0.1:.*': cannot reach"):
        make_engine("ray", "auto")


def test_check_reachable_accepts_a_listener():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        check_reachable(f"ray://127.0.0.1:{server.getsockname()[1]}")


@pytest.mark.skipif(importlib.util.find_spec("grpc") is not None, reason="ray[client] is installed")
def test_ray_client_without_its_extra_names_it(tmp_path):
    pytest.importorskip("ray")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        address = f"ray://127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(ImportError, match=r'Ray Client, which needs pip install "ray\[client\]"'):
            precompute_graphs([], tmp_path, Compose([AddLaplacianPE(2)]), engine="ray", address=address,
                              progress=False)


def test_summary_line():
    result = PrecomputeResult("reads", "out", items=2_000_000, shards=20, items_computed=1_500_000,
                              shards_computed=15, units=8, units_resumed=2, seconds=10.0)
    assert result.items_per_second == 150_000
    assert result.summary() == ("precompute reads: 2,000,000 items in 20 shards (15 computed, 2 of 8 units "
                                "resumed), 10.0 s, 150,000 items/s -> out")
    result.failures.append(("x.fq", "x.fq: record 3: bad"))
    assert result.summary().endswith("; FAILED 1 unit(s): x.fq")
    assert PrecomputeResult("graphs", "o").items_per_second == 0.0
