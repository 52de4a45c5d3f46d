"""The local engine's worker processes: units of work on ``workers`` processes of this machine.

Each worker is a process of the ``forkserver`` start method (``spawn`` where there is none): forking a process
that runs torch's thread pools is unsafe, and the fork server, started once per driver process with omnipos and
torch imported, starts each worker in milliseconds. Units that compute on CUDA run in ``spawn`` processes
instead: a process forked after the CUDA driver was initialised (by any import of the fork server's that asks
``torch.cuda.is_available()``) cannot use CUDA ("CUDA error: initialization error", seen on an H200).

The caller may be anything: a script without an ``if __name__ == "__main__":`` guard, a notebook, ``python -c``.
A worker never imports the caller's main module (``multiprocessing`` would, running a script's top-level code
again in each worker): it starts from the preparation data without the main module's name or path. What the
unit function needs from ``__main__`` (a transform class defined in a notebook cell or in the script) is sent
by value with cloudpickle, as Ray does (``cloudpickle``, or the copy Ray ships); without cloudpickle, such a job
runs its units in the calling process, one at a time, and says so in one warning line.

Workers die with their driver, however it dies (``kill -9``, the out-of-memory killer, SIGTERM): on Linux the
fork server gets a parent-death signal from the driver and each worker one from the fork server (a spawned
worker, from the driver); everywhere, each worker also watches a pipe whose other end only the driver holds and
exits the moment it closes. And a worker writes into the output folder only while its run holds the folder (see
:mod:`omnipos.scale.lock`).

Each worker computes on one thread (one core per worker, as a Ray task of ``num_cpus=1``). The driver sends a
worker one unit at a time over a pipe and waits on every worker's pipe and process at once,
so it knows which unit each worker holds. A worker that dies (a segfault, an out-of-memory kill, ``os._exit``)
costs only its unit: the unit is retried on a fresh worker up to ``retries`` times, then reported as failed with
the cause, and the other units go on. Results come back in the order units finish; the driver records them by
unit, so the output does not depend on the number of workers.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import io
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import types
import warnings
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from multiprocessing import spawn
from multiprocessing.connection import wait
from typing import Any

__all__ = ["InProcessNote", "death_cause", "die_with_parent", "least_loaded_device", "run_on_workers"]

#: Imported once by the fork server, so that each worker starts with them loaded (one missing is skipped) ...
PRELOAD = ("omnipos.scale", "pyarrow.parquet", "pandas", "dnaio")
#: ... and these too when the driver has imported them (a graph job's transform needs torch_geometric; omnipos's
#: compiled kernels need numba, ~0.1-0.3 s to import in each worker otherwise).
PRELOAD_IF_IMPORTED = ("torch_geometric", "omnipos.graph", "numba")
#: ... and, when the driver has loaded compiled kernels (the first module named here is imported once they are),
#: the module that loads them in the fork server too: from numba's disk cache, which the driver's run filled.
KERNEL_PRELOAD = {"omnipos.graph.lane_eigh": "omnipos.scale._forkserver_kernels"}
JOIN_TIMEOUT_S = 10.0
#: The exit status of a worker that saw its driver's pipe close.
DRIVER_GONE_EXIT = 75
_PR_SET_PDEATHSIG = 1
_START_LOCK = threading.Lock()


class InProcessNote(UserWarning):
    """The local engine ran a job's units in the calling process (see :func:`run_on_workers`)."""


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (``PR_SET_PDEATHSIG``); nothing elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - no prctl: the pipe below still stops the worker
        pass


def _context(cuda: bool = False) -> Any:
    if cuda or "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # no effect once the fork server runs (it is started once per driver process)
    context.set_forkserver_preload(["omnipos.scale._forkserver", *PRELOAD,
                                    *(m for m in PRELOAD_IF_IMPORTED if m in sys.modules),
                                    *(KERNEL_PRELOAD.values() if KERNEL_PRELOAD.keys() & sys.modules.keys() else ())])
    return context


# -- what is sent to a worker --------------------------------------------------------------------------------------
class _MainFinder(pickle.Pickler):
    """Pickles to nowhere, noting whether anything pickled refers to code defined in ``__main__`` (which a worker
    cannot import by name: it does not run the caller's main module) or in no module at all (code run by
    ``exec``). Tensors and plain arrays are not walked into: they hold no code."""

    def __init__(self) -> None:
        super().__init__(_Nowhere(), protocol=pickle.HIGHEST_PROTOCOL)
        self.found = False
        self.plain = _plain_types()

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType)) and _by_value(getattr(obj, "__module__", None)):
            self.found = True
        elif type(obj) in self.plain and getattr(obj, "dtype", None) != object:
            return int, ()
        return NotImplemented


class _Nowhere(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return len(data)


def _plain_types() -> tuple[type, ...]:
    plain: list[type] = []
    if "torch" in sys.modules:
        plain.append(sys.modules["torch"].Tensor)
    if "numpy" in sys.modules:
        plain.append(sys.modules["numpy"].ndarray)
    return tuple(plain)


def _by_value(module: Any) -> bool:
    """Whether code of ``module`` must travel by value: ``__main__``, or a name no module has (code run by
    ``exec``: a worker could not import it by name)."""
    if module == "__main__" or not isinstance(module, str):
        return True
    if module in sys.modules:
        return False
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def _refers_to_main(obj: Any) -> bool:
    """Whether pickling ``obj`` meets a class or function defined in ``__main__`` or in no imported module (it may
    fail after that)."""
    finder = _MainFinder()
    with suppress(Exception):  # a lambda of __main__ fails after it was seen; anything else fails in _serialize
        finder.dump(obj)
    return finder.found


def _cloudpickle() -> Any:
    """The ``cloudpickle`` module, or Ray's copy of it, or None."""
    for name, top in (("cloudpickle", "cloudpickle"), ("ray.cloudpickle", "ray")):
        if importlib.util.find_spec(top) is not None:
            try:
                return importlib.import_module(name)
            except ImportError:  # pragma: no cover
                continue
    return None


def _serialize(obj: Any) -> tuple[bytes | None, bool]:
    """``(bytes, by_value)``: ``obj`` pickled for a worker; what it holds of ``__main__`` by value (cloudpickle).
    ``(None, True)`` when it needs cloudpickle and there is none. ValueError when it cannot be pickled at all."""
    by_value = _refers_to_main(obj)
    try:
        if by_value:
            cloudpickle = _cloudpickle()
            if cloudpickle is None:
                return None, True
            return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), True
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), False
    except Exception as exc:  # noqa: BLE001 - pickle raises PicklingError, AttributeError, TypeError alike
        raise ValueError(f"the unit function cannot be sent to worker processes (it must be picklable): "
                         f"{type(exc).__name__}: {exc}") from None


@contextmanager
def _without_main() -> Iterator[None]:
    """While a worker starts: its preparation data name no main module, so it never imports (runs) the caller's
    script or ``python -m`` module as ``multiprocessing`` otherwise does (``init_main_from_path`` /
    ``init_main_from_name``). Only the starting thread's calls are changed."""
    with _START_LOCK:
        original = spawn.get_preparation_data
        starter = threading.get_ident()

        def preparation_data(name: str) -> dict[str, Any]:
            data = original(name)
            if threading.get_ident() == starter:
                data.pop("init_main_from_path", None)
                data.pop("init_main_from_name", None)
            return data

        spawn.get_preparation_data = preparation_data
        try:
            yield
        finally:
            spawn.get_preparation_data = original


# -- the worker ----------------------------------------------------------------------------------------------------
def _watch(alive: Any) -> None:
    """Wait on the pipe whose other end only the driver holds; when it closes (the driver died), exit at once."""
    try:
        alive.recv_bytes()
    except (EOFError, OSError):
        pass
    os._exit(DRIVER_GONE_EXIT)


def _serve(connection: Any, alive: Any, pickled_work: bytes, filters: list[Any], device: int | None = None) -> None:
    """A worker's loop: ``(unit, payload, by_value)`` in, ``work(unit, payload)`` out, until ``None`` or the pipe
    closes. A unit function or payload it cannot load is reported (``{"fatal": ...}``) instead of a traceback
    and a dead worker. ``device``: the CUDA device its units compute on (``"cuda"`` means it)."""
    die_with_parent()
    if alive.poll():  # the driver died before the parent-death signal was set
        os._exit(DRIVER_GONE_EXIT)
    threading.Thread(target=_watch, args=(alive,), daemon=True, name="omnipos-driver-watch").start()
    import torch

    if device is not None:
        torch.cuda.set_device(device)
    warnings.filters[:] = filters  # the driver's warning filters
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle: it stops the workers
    torch.set_num_threads(1)  # one core per worker, as a Ray task of num_cpus=1 (no oversubscription)
    try:
        work = pickle.loads(pickled_work)
    except Exception as exc:  # noqa: BLE001 - e.g. a class of a module the worker cannot import
        connection.send({"fatal": f"{type(exc).__name__}: {exc}"})
        return
    while True:
        try:
            task = connection.recv()
        except EOFError:
            return
        if task is None:
            return
        unit, payload, by_value = task
        if by_value:
            try:
                payload = pickle.loads(payload)
            except Exception as exc:  # noqa: BLE001
                connection.send({"fatal": f"unit {unit}'s input: {type(exc).__name__}: {exc}"})
                return
        connection.send(work(unit, payload))


class _Worker:
    def __init__(self, context: Any, pickled_work: bytes, device: int | None = None) -> None:
        self.connection, child = context.Pipe()
        alive, self.alive = context.Pipe(duplex=False)  # only this process holds self.alive
        self.process = context.Process(target=_serve, args=(child, alive, pickled_work, list(warnings.filters),
                                                            device),
                                       daemon=True, name="omnipos-scale-worker")
        self.device = device
        try:
            with _without_main():
                self.process.start()
        finally:
            child.close()
            alive.close()
        self.unit: int | None = None

    def stop(self, kill: bool) -> None:
        if kill:
            self.process.kill()
        else:
            try:
                self.connection.send(None)
            except OSError:
                pass
        self.process.join(JOIN_TIMEOUT_S)
        if self.process.is_alive():  # pragma: no cover - a worker stuck in native code
            self.process.kill()
            self.process.join()
        self.connection.close()
        self.alive.close()


def least_loaded_device(devices: Sequence[int | None], count: int) -> int:
    """The CUDA device (of ``count``) that the fewest of the live workers' ``devices`` use (the lowest on ties)."""
    load = Counter(d for d in devices if d is not None)
    return min(range(count), key=lambda d: (load[d], d))


def death_cause(exitcode: int | None) -> str:
    """How a worker process ended, in words (``-9`` -> killed by SIGKILL, as the out-of-memory killer does)."""
    if exitcode is None:
        return "it stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = {"SIGKILL": ": killed, e.g. by the out-of-memory killer", "SIGSEGV": ": a crash in native code"}
        return f"killed by {name}{hint.get(name, '')}"
    return f"it exited with status {exitcode}"


def run_on_workers(units: Sequence[int], work: Callable[[int, Any], dict],
                   payload: Callable[[int], Any] | None, on_result: Callable[[dict], None], *, workers: int,
                   retries: int, cuda: bool = False) -> None:
    """Run ``work(unit, payload(unit))`` for each unit on ``workers`` processes; ``on_result(record)`` in this
    process as each finishes. A unit whose worker died ``retries + 1`` times gives ``{"unit", "error"}``.
    ``cuda``: the units compute on CUDA (``spawn`` processes, see the module docstring), each worker on the visible
    device the fewest other workers use. A unit function that holds code of ``__main__`` while no cloudpickle is
    installed runs here instead, unit by unit, with one :class:`InProcessNote` warning."""
    pickled_work, _ = _serialize(work)
    if pickled_work is None:
        warnings.warn("the job's transform or unit function is defined in __main__ (a notebook, a script, python -c) "
                      "or by exec, which worker processes can load only by value, with cloudpickle (pip install "
                      "cloudpickle): its units run in this process, one at a time", InProcessNote, stacklevel=3)
        for unit in units:
            on_result(work(unit, None if payload is None else payload(unit)))
        return
    context = _context(cuda)
    devices = 0
    if cuda:
        import torch

        devices = torch.cuda.device_count()
    queue = deque(units)
    deaths: Counter[int] = Counter()
    pool: list[_Worker] = []
    finished = False
    try:
        while queue or any(w.unit is not None for w in pool):
            for worker in pool:
                if worker.unit is None and queue:
                    _send(worker, queue.popleft(), payload)
            while queue and len(pool) < workers:
                device = least_loaded_device([w.device for w in pool], devices) if devices else None
                pool.append(_Worker(context, pickled_work, device))
                _send(pool[-1], queue.popleft(), payload)
            busy = [w for w in pool if w.unit is not None]
            ready = set(wait([w.connection for w in busy] + [w.process.sentinel for w in busy]))
            for worker in busy:
                if worker.connection not in ready and worker.process.sentinel not in ready:
                    continue
                record = None
                if worker.connection in ready or worker.connection.poll():
                    try:
                        record = worker.connection.recv()
                    except (EOFError, OSError):
                        record = None  # the worker died: its end of the pipe closed
                unit, worker.unit = worker.unit, None
                if record is not None and "fatal" in record:
                    raise ValueError(f"the worker processes cannot load the unit function ({record['fatal']}); "
                                     "a transform defined in a module the workers cannot import (one made at run "
                                     "time, or found through a path they do not have) must move to an importable "
                                     "module, or to the main script or notebook")
                if record is not None:
                    on_result(record)
                    continue
                worker.process.join(JOIN_TIMEOUT_S)
                cause = death_cause(worker.process.exitcode)
                worker.stop(kill=True)
                pool.remove(worker)
                deaths[unit] += 1
                if deaths[unit] > retries:
                    tries = f"{deaths[unit]} times" if deaths[unit] > 1 else "once"
                    on_result({"unit": unit, "error": f"its worker process died {tries} ({cause})"})
                else:
                    queue.appendleft(unit)
        finished = True
    finally:
        for worker in pool:
            worker.stop(kill=not finished)


def _send(worker: _Worker, unit: int, payload: Callable[[int], Any] | None) -> None:
    worker.unit = unit
    value = None if payload is None else payload(unit)
    by_value = value is not None and _refers_to_main(value)
    if by_value:
        pickled, _ = _serialize(value)
        if pickled is None:
            raise ValueError(f"unit {unit}'s input holds a class or function defined in __main__ (a notebook, a "
                             "script, python -c) or by exec, which worker processes can load only with cloudpickle: "
                             "pip install cloudpickle, or define it in an importable module")
        value = pickled
    try:
        worker.connection.send((unit, value, by_value))
    except (BrokenPipeError, ConnectionResetError):
        pass  # the worker died before its unit arrived: seen as a death of this unit by the wait that follows
