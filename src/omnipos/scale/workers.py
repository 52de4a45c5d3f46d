"""The local engine's worker processes: units of work on ``workers`` processes of this machine.

Each worker is a process of the ``forkserver`` start method (``spawn`` where there is none): forking a process
that runs torch's thread pools is unsafe, and the fork server, started once per driver process with omnipos and
torch imported, starts each worker in milliseconds. (As with any ``multiprocessing`` code, a script that runs a
job at its top level needs an ``if __name__ == "__main__":`` guard: each worker imports the main module.)
Units that compute on CUDA run in ``spawn`` processes instead: a process forked after the CUDA driver was
initialised (by any import of the fork server's that asks ``torch.cuda.is_available()``) cannot use CUDA
("CUDA error: initialization error", seen on an H200).

Each worker computes on one thread (one core per worker, as a Ray task of ``num_cpus=1``). The driver sends a
worker one unit at a time over a pipe and waits on every worker's pipe and process at once,
so it knows which unit each worker holds. A worker that dies (a segfault, an out-of-memory kill, ``os._exit``)
costs only its unit: the unit is retried on a fresh worker up to ``retries`` times, then reported as failed with
the cause, and the other units go on. Results come back in the order units finish; the driver records them by
unit, so the output does not depend on the number of workers.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
import sys
import warnings
from collections import Counter, deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

__all__ = ["run_on_workers", "death_cause", "least_loaded_device"]

#: Imported once by the fork server, so that each worker starts with them loaded (one missing is skipped) ...
PRELOAD = ("omnipos.scale", "pyarrow.parquet", "pandas", "dnaio")
#: ... and these too when the driver has imported them (a graph job's transform needs torch_geometric; omnipos's
#: compiled kernels need numba, ~0.1-0.3 s to import in each worker otherwise).
PRELOAD_IF_IMPORTED = ("torch_geometric", "omnipos.graph", "numba")
JOIN_TIMEOUT_S = 10.0


def _context(cuda: bool = False) -> Any:
    if cuda or "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # no effect once the fork server runs (it is started once per driver process)
    context.set_forkserver_preload(["omnipos.scale._forkserver", *PRELOAD,
                                    *(m for m in PRELOAD_IF_IMPORTED if m in sys.modules)])
    return context


def _serve(connection: Any, pickled_work: bytes, filters: list[Any], device: int | None = None) -> None:
    """A worker's loop: ``(unit, payload)`` in, ``work(unit, payload)`` out, until ``None`` or the pipe closes.
    A unit function it cannot load is reported (``{"fatal": ...}``) instead of a traceback and a dead worker.
    ``device``: the CUDA device its units compute on (``"cuda"`` means it)."""
    import torch

    if device is not None:
        torch.cuda.set_device(device)
    warnings.filters[:] = filters  # the driver's warning filters
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle: it stops the workers
    torch.set_num_threads(1)  # one core per worker, as a Ray task of num_cpus=1 (no oversubscription)
    try:
        work = pickle.loads(pickled_work)
    except Exception as exc:  # noqa: BLE001 - e.g. a class defined in a notebook, which a worker cannot import
        connection.send({"fatal": f"{type(exc).__name__}: {exc}"})
        return
    while True:
        try:
            task = connection.recv()
        except EOFError:
            return
        if task is None:
            return
        connection.send(work(*task))


class _Worker:
    def __init__(self, context: Any, work: Callable[[int, Any], dict], device: int | None = None) -> None:
        try:
            pickled_work = pickle.dumps(work, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - pickle raises PicklingError, AttributeError, TypeError alike
            raise ValueError(f"the unit function cannot be sent to worker processes (it must be picklable): "
                             f"{type(exc).__name__}: {exc}") from None
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, pickled_work, list(warnings.filters), device),
                                       daemon=True, name="omnipos-scale-worker")
        self.device = device
        try:
            self.process.start()
        finally:
            child.close()
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
    device the fewest other workers use."""
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
                pool.append(_Worker(context, work, device))
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
                                     "a transform defined in a notebook or in a script run without an import path "
                                     "must move to an importable module")
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
    try:
        worker.connection.send((unit, None if payload is None else payload(unit)))
    except (BrokenPipeError, ConnectionResetError):
        pass  # the worker died before its unit arrived: seen as a death of this unit by the wait that follows
