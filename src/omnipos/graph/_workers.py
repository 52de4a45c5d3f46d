"""The graph encodings' private worker threads: where their CPU work runs, and how many pieces run at once."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import torch

__all__ = ["run_cpu_work", "parallel_map", "cpu_parallelism"]

T = TypeVar("T")

# Why CPU work runs on worker threads. torch pins MKL to torch.get_num_threads() threads *in the thread that set
# it* (the main thread, at import) with MKL's dynamic adjustment off, so every LAPACK/BLAS call there, however
# tiny, opens an OpenMP team. The graph encodings are many tiny calls (one eigh per 20-node graph): on a 2-core
# machine shared with other processes that made a 10k-graph batch 8-20x slower than single-threaded (eigh
# 8.7 s vs 0.39 s of CPU, random walk 3.5 s vs 0.41 s). So the encodings run their CPU work on private worker
# threads (and split batches of independent LAPACK calls over several), instead of changing torch's thread
# count, which is process-global and visible to every other thread. A worker thread alone is not enough: torch
# gives a thread its global MKL / OpenMP counts the first time it runs a parallel op there, so the dense path
# also limits both in its own thread while it runs (small_eigh.one_thread: thread-local, restored after).
_POOLS: dict[str, ThreadPoolExecutor] = {}
_POOL_PID = [0]
_POOL_LOCK = threading.Lock()
_WORKER = threading.local()


def _pool(kind: str) -> ThreadPoolExecutor:
    """The private pool ``"call"`` (bodies of encoding calls) or ``"leaf"`` (independent pieces that never wait
    on other tasks, so a call waiting on leaves cannot deadlock); recreated after a fork (its threads are gone)."""
    with _POOL_LOCK:
        if _POOL_PID[0] != os.getpid():
            _POOLS.clear()
            _POOL_PID[0] = os.getpid()
        pool = _POOLS.get(kind)
        if pool is None:
            workers = 32 if kind == "call" else max(1, os.cpu_count() or 1)
            pool = ThreadPoolExecutor(workers, thread_name_prefix=f"omnipos-graph-{kind}",
                                      initializer=_mark_worker)
            _POOLS[kind] = pool
        return pool


def _mark_worker() -> None:
    _WORKER.active = True


def _device_of(like: Any) -> torch.device:
    if isinstance(like, torch.Tensor):
        return like.device
    return torch.device(like if isinstance(like, (str, torch.device)) else "cpu")


def run_cpu_work(like: Any, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, on an omnipos worker thread when ``like`` (a tensor or device; anything else counts
    as CPU) is on the CPU and the caller is not one already (see the comment above ``_POOLS``). Exceptions
    propagate unchanged; nothing process-global is changed."""
    if _device_of(like).type != "cpu" or getattr(_WORKER, "active", False):
        return fn(*args, **kwargs)
    return _pool("call").submit(fn, *args, **kwargs).result()


def parallel_map(fn: Callable[[Any], T], items: Sequence[Any], workers: int) -> list[T]:
    """``[fn(x) for x in items]`` with up to ``workers`` of them at once on leaf worker threads (for calls that
    release the GIL, e.g. LAPACK); ``fn`` must not itself wait on other pool tasks."""
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    return list(_pool("leaf").map(fn, items))


def cpu_parallelism() -> int:
    """How many independent CPU pieces a call may run at once: torch's intra-op thread count (read, never set)."""
    return max(1, torch.get_num_threads())
