"""Where the shards run: ``"local"`` (this process, one shard after another) or ``"ray"`` (Ray Data).

The only module of :mod:`omnipos.scale` that imports Ray (extra ``[scale]``), and only when a job asks for it.

Both engines call the same unit function ``work(unit, payload) -> dict`` (a JSON-able record of the shards it
wrote); the driver records each result in the manifest as it arrives. With Ray, the units become the rows of a
Ray Data dataset mapped by one task per unit (``num_cpus=1`` each, ``num_gpus`` each when asked): Ray streams the
results back as tasks finish and retries a task whose worker process died (``MAX_RETRIES`` times).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import pickle
import socket
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from omnipos.core import check_choice, check_positive_int, require

__all__ = ["ENGINES", "CONNECT_TIMEOUT_S", "MAX_RETRIES", "Engine", "make_engine", "require_ray", "check_address",
           "check_reachable", "PROBE_TIMEOUT_S"]

ENGINES = ("local", "ray")
#: Seconds to wait for a cluster's address to answer before giving up (an unreachable address must not hang).
CONNECT_TIMEOUT_S = 3.0
#: Seconds a trial connection to a cluster address may take (in a child process, killed after that).
PROBE_TIMEOUT_S = 20.0
#: Times Ray retries a unit whose worker died (killed, out of memory); a unit that raises is not retried.
MAX_RETRIES = 3

Work = Callable[[int, Any], dict]


def require_ray():
    """Return the ``ray`` module with Ray Data, or raise ImportError naming the extra."""
    require("ray.data", "scale", 'engine="ray"')
    return require("ray", "scale", 'engine="ray"')


@dataclass(frozen=True)
class Engine:
    """A checked engine choice (built by :func:`make_engine`)."""

    name: str
    address: str | None = None
    num_cpus: int | None = None
    num_gpus: float = 0.0

    @contextmanager
    def session(self) -> Iterator[Callable[..., None]]:
        """Yields ``run(units, work, payload, on_result)``. A Ray session is started (or joined) on the first call
        that has units to run, and a Ray this session started is shut down on exit."""
        if self.name == "local":
            yield self._run_local
            return
        state: dict[str, Any] = {}
        try:
            yield lambda *args: self._run_ray(state, *args)
        finally:
            if state.get("started"):
                state["ray"].shutdown()

    def _run_local(self, units: Sequence[int], work: Work, payload: Callable[[int], Any] | None,
                   on_result: Callable[[dict], None]) -> None:
        for unit in units:
            on_result(work(unit, None if payload is None else payload(unit)))

    def _run_ray(self, state: dict[str, Any], units: Sequence[int], work: Work,
                 payload: Callable[[int], Any] | None, on_result: Callable[[dict], None]) -> None:
        if not units:
            return
        if "ray" not in state:
            state["ray"], state["started"] = _connect(self)
        ray = state["ray"]
        items = [{"unit": u, "payload": b"" if payload is None else pickle.dumps(payload(u), protocol=5)}
                 for u in units]
        options: dict[str, Any] = {"num_cpus": 1}
        if self.num_gpus:
            options["num_gpus"] = self.num_gpus
        if self.num_cpus is not None and not state["started"]:  # a Ray started here has num_cpus CPUs already
            options["concurrency"] = self.num_cpus
        with _quiet_ray_data(ray):
            with warnings.catch_warnings():
                # Ray 2.60 deprecates ray_remote_args_fn but names no other way to bound the retries of a unit
                # whose worker dies (the default retries forever: a unit that always crashes would hang the job)
                warnings.filterwarnings("ignore", message=".*ray_remote_args_fn.*deprecated")
                dataset = ray.data.from_items(items, override_num_blocks=len(items)).map(
                    _RayUnit(work), ray_remote_args_fn=_retries, **options)
            for row in dataset.iter_rows():
                on_result(json.loads(row["result"]))


class _RayUnit:
    """The function Ray Data maps over the rows (a plain callable object, so Ray runs it as tasks)."""

    def __init__(self, work: Work) -> None:
        self.work = work

    def __call__(self, row: dict[str, Any]) -> dict[str, str]:
        payload = pickle.loads(row["payload"]) if row["payload"] else None
        return {"result": json.dumps(self.work(int(row["unit"]), payload))}


def _retries() -> dict[str, Any]:
    return {"max_retries": MAX_RETRIES}


@contextmanager
def _quiet_ray_data(ray: Any) -> Iterator[None]:
    """Ray Data settings for a job, restored afterwards: no progress bars or execution banners (the caller's
    ``progress=`` reports), and no per-operator resource reservation. The pipeline is one map, and Ray Data's
    reservation (a share of the CPUs held back for other operators) ran the shards one at a time on 2 CPUs
    (measured: 20 shards of 0.15 s took 3.3 s with it, 1.6 s without)."""
    context = ray.data.DataContext.get_current()
    wanted = {"enable_progress_bars": False, "print_on_execution_start": False,
              "op_resource_reservation_enabled": False}
    saved = {name: getattr(context, name) for name in wanted if hasattr(context, name)}  # (older Rays lack some)
    logger = logging.getLogger("ray.data")
    level = logger.level
    try:
        for name in saved:
            setattr(context, name, wanted[name])
        logger.setLevel(logging.ERROR)
        yield
    finally:
        for name, value in saved.items():
            setattr(context, name, value)
        logger.setLevel(level)


def _connect(engine: Engine) -> tuple[Any, bool]:
    """``(ray, started)``: join the Ray this process already runs, connect to ``engine.address``, or start a
    local Ray with ``engine.num_cpus`` CPUs."""
    ray = require_ray()
    if ray.is_initialized():
        if engine.address is not None:
            raise ValueError(f"address={engine.address!r}: Ray is already initialised in this process; call "
                             "ray.shutdown() first, or pass address=None to run on that Ray")
        return ray, False
    if engine.address is None:
        ray.init(num_cpus=engine.num_cpus, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
        return ray, True
    try:  # make_engine has checked the address (check_address): a cluster answered there
        ray.init(address=engine.address, log_to_driver=False, logging_level=logging.WARNING)
    except ConnectionError as exc:
        raise ConnectionError(f"address={engine.address!r}: {exc}") from exc
    return ray, True


def check_address(address: str) -> None:
    """Fail fast on a cluster address instead of letting ``ray.init`` retry for a minute or more.

    1. A TCP connection to ``host:port`` (for ``"auto"``: to ``$RAY_ADDRESS`` when set) within
       ``CONNECT_TIMEOUT_S``: nothing listening is a ConnectionError at once.
    2. ``ray://`` without Ray Client installed: ImportError naming ``ray[client]``.
    3. ``ray.init(address)`` in a child process, killed after ``PROBE_TIMEOUT_S``: something that accepts the
       connection but is not a Ray cluster (another service, a proxy) is a ConnectionError, not a hang.
    """
    if address == "auto":
        if os.environ.get("RAY_ADDRESS"):
            check_reachable(os.environ["RAY_ADDRESS"], "RAY_ADDRESS")
    else:
        check_reachable(address, "address")
    if address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        raise ImportError(f'address={address!r} uses Ray Client, which needs pip install "ray[client]"')
    probe = ("import sys, ray; ray.init(address=sys.argv[1], log_to_driver=False, logging_level='ERROR'); "
             "ray.shutdown()")
    try:
        done = subprocess.run([sys.executable, "-c", probe, address], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise ConnectionError(f"address={address!r}: no Ray cluster answered within {PROBE_TIMEOUT_S:g} s "
                              "(something accepts connections there, but not as a Ray cluster's GCS)") from None
    if done.returncode:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise ConnectionError(f"address={address!r}: cannot connect to a Ray cluster: "
                              f"{lines[-1] if lines else f'exit status {done.returncode}'}")


def check_reachable(address: str, name: str = "address", timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raise ConnectionError within ``timeout`` seconds when nothing listens at ``[ray://]host:port``."""
    host, port = _host_port(address, name)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ConnectionError(f"{name}={address!r}: cannot reach {host}:{port} ({reason}, waited at most "
                              f"{timeout:g} s); is the Ray cluster running there?") from None


def _host_port(address: str, name: str) -> tuple[str, int]:
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{name} must be 'auto', 'host:port' or 'ray://host:port'; got {address!r}")
    return host.strip("[]"), int(port)


def make_engine(engine: Any, address: Any = None, num_cpus: Any = None, num_gpus: Any = 0) -> Engine:
    """Check an engine choice before any work starts.

    Args:
        engine: ``"local"`` (this process) or ``"ray"`` (Ray Data; ImportError naming ``[scale]`` without Ray).
        address: ``None`` (start a local Ray, or use the one this process already runs), ``"auto"`` (the
            running cluster Ray finds) or ``"host:port"`` / ``"ray://host:port"``. Only with ``engine="ray"``.
        num_cpus: Ray: the CPUs of a local Ray started here; on a cluster (or a Ray this process already
            runs), at most this many shards at once.
            ``"local"`` runs one shard at a time: ``None`` or 1 only.
        num_gpus: GPUs per shard (a fraction shares a GPU between shards, as Ray's ``num_gpus``); > 0 means the
            shards compute on CUDA.
    """
    engine = check_choice(engine, "engine", ENGINES)
    if num_cpus is not None:
        num_cpus = check_positive_int(num_cpus, "num_cpus")
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, (int, float)) or not math.isfinite(num_gpus) \
            or num_gpus < 0:
        raise ValueError(f"num_gpus must be a finite number >= 0, got {num_gpus!r}")
    if address is not None:
        if not isinstance(address, str):
            raise TypeError(f"address must be a str ('auto', 'host:port' or 'ray://host:port'), got "
                            f"{type(address).__name__}")
        if engine != "ray":
            raise ValueError(f"address={address!r} needs engine='ray' (engine='local' runs in this process)")
        if address != "auto":
            _host_port(address, "address")
    if engine == "local" and num_cpus not in (None, 1):
        raise ValueError(f"num_cpus={num_cpus} needs engine='ray': engine='local' runs one shard at a time in this "
                         "process")
    if engine == "ray":
        require_ray()
        if address is not None:
            check_address(address)
    return Engine(engine, address, num_cpus, float(num_gpus))
