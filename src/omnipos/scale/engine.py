"""Where the units run: ``"local"`` (worker processes on this machine) or ``"ray"`` (Ray tasks, for clusters).

The only module of :mod:`omnipos.scale` that imports Ray (extra ``[scale]``), and only when a job asks for it.

Both engines call the same unit function ``work(unit, payload) -> dict`` (a JSON-able record of the shards it
wrote); the driver records each result in the manifest as it arrives. Locally, the units run on ``num_cpus``
worker processes (default: this machine's cores; :mod:`omnipos.scale.workers`). With Ray, each unit is one Ray
task (``num_cpus=1``, ``num_gpus`` when asked). On either engine a unit whose worker process dies (a segfault,
an out-of-memory kill) is retried ``MAX_RETRIES`` times on a fresh worker and then reported as a failed unit
with its cause; the other units go on. A unit that raises is not retried (its input is bad).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import re
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from omnipos.core import check_choice, check_positive_int, require

from .workers import run_on_workers

__all__ = ["ENGINES", "CONNECT_TIMEOUT_S", "MAX_RETRIES", "Engine", "make_engine", "require_ray", "check_address",
           "check_reachable", "PROBE_TIMEOUT_S", "default_workers"]

ENGINES = ("local", "ray")
#: Seconds to wait for a cluster's address to answer before giving up (an unreachable address must not hang).
CONNECT_TIMEOUT_S = 3.0
#: Seconds a trial connection to a cluster address may take (in a child process, killed after that).
PROBE_TIMEOUT_S = 20.0
#: Times a unit whose worker process died (killed, out of memory, crashed) is retried on a fresh worker, on
#: either engine, before it is reported as failed; a unit that raises is not retried.
MAX_RETRIES = 3

Work = Callable[[int, Any], dict]


def require_ray():
    """Return the ``ray`` module, or raise ImportError naming the extra."""
    return require("ray", "scale", 'engine="ray"')


def default_workers() -> int:
    """The local engine's worker count when ``num_cpus`` is not given: the cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Engine:
    """A checked engine choice (built by :func:`make_engine`)."""

    name: str
    address: str | None = None
    num_cpus: int | None = None
    num_gpus: float = 0.0

    @contextmanager
    def session(self) -> Iterator[Callable[..., None]]:
        """Yields ``run(units, work, payload, on_result)``: local worker processes live for one ``run``; a Ray
        session is started (or joined) on the first call that has units to run, and a Ray this session started
        is shut down on exit."""
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
        if units:
            run_on_workers(units, work, payload, on_result, workers=min(self.workers, len(units)),
                           retries=MAX_RETRIES, cuda=self.num_gpus > 0)

    @property
    def workers(self) -> int:
        """Local worker processes: ``num_cpus``, or this machine's cores; with ``num_gpus``, no more than the
        visible GPUs hold at ``num_gpus`` each (as Ray schedules GPU tasks)."""
        workers = self.num_cpus if self.num_cpus is not None else default_workers()
        if self.num_gpus > 0:
            import torch

            workers = min(workers, max(1, int(torch.cuda.device_count() / self.num_gpus + 1e-9)))
        return workers

    def _run_ray(self, state: dict[str, Any], units: Sequence[int], work: Work,
                 payload: Callable[[int], Any] | None, on_result: Callable[[dict], None]) -> None:
        if not units:
            return
        if "ray" not in state:
            state["ray"], state["started"] = _connect(self)
        ray = state["ray"]
        options: dict[str, Any] = {"num_cpus": 1, "max_retries": MAX_RETRIES, "retry_exceptions": False}
        if self.num_gpus:
            options["num_gpus"] = self.num_gpus
        task = ray.remote(_ray_unit).options(**options)
        if self.num_cpus is not None and not state["started"]:  # on a cluster: at most num_cpus units at once
            limit = self.num_cpus
        else:  # Ray schedules by resources; keep the queue fed without holding every payload in its store
            limit = 2 * max(1, int(ray.cluster_resources().get("CPU", 1)))
        shared = ray.put(work)
        queue, running = deque(units), {}
        while queue or running:
            while queue and len(running) < limit:
                unit = queue.popleft()
                running[task.remote(shared, unit, None if payload is None else payload(unit))] = unit
            done, _ = ray.wait(list(running), num_returns=1)
            for ref in done:
                unit = running.pop(ref)
                try:
                    record = ray.get(ref)
                except ray.exceptions.RayError as exc:  # the worker died MAX_RETRIES + 1 times, or Ray lost it
                    first = first_line_plain(exc)
                    tries = "once" if MAX_RETRIES == 0 else f"{MAX_RETRIES + 1} times"
                    record = {"unit": unit, "error": f"its Ray worker died {tries} ({type(exc).__name__}: {first})"}
                on_result(record)


_TERMINAL_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def first_line_plain(exc: BaseException) -> str:
    """The first non-empty line of an exception's text without terminal colour codes (Ray colours its messages
    for a terminal; an exception's text goes to logs and files)."""
    lines = [line.strip() for line in _TERMINAL_ESCAPES.sub("", str(exc)).splitlines()]
    return next((line for line in lines if line), "")


def _ray_unit(work: Work, unit: int, payload: Any) -> dict:
    """One unit as a Ray task (a module-level function: Ray workers import it by name)."""
    return work(unit, payload)


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
        engine: ``"local"`` (worker processes on this machine) or ``"ray"`` (Ray tasks; ImportError naming
            ``[scale]`` without Ray).
        address: ``None`` (start a local Ray, or use the one this process already runs), ``"auto"`` (the
            running cluster Ray finds) or ``"host:port"`` / ``"ray://host:port"``. Only with ``engine="ray"``.
        num_cpus: ``"local"``: worker processes (default: this machine's cores). Ray: the CPUs of a local Ray
            started here; on a cluster (or a Ray this process already runs), at most this many units at once.
        num_gpus: GPUs per unit (a fraction shares a GPU between units, as Ray's ``num_gpus``); > 0 means the
            units compute on CUDA. Refused at once when no CUDA device is visible here (``engine="local"``, or
            a Ray started here); a cluster's GPUs are the cluster's to check.
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
    if num_gpus > 0 and (engine == "local" or address is None):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"num_gpus={num_gpus:g}: no CUDA device is available here (torch.cuda.is_available() "
                             "is False); pass num_gpus=0 to compute on CPUs")
    if engine == "ray":
        require_ray()
        if address is not None:
            check_address(address)
    return Engine(engine, address, num_cpus, float(num_gpus))
