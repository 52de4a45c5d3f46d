"""Progress reporting for long-running library functions, with no progress-bar dependency.

A library function that can run for minutes takes ``progress=``:

- ``False`` / ``None``: silent;
- ``True``: a plain, throttled line on stderr (``desc: 1200/5000 (24%)``);
- a callable ``progress(done, total)``: called with the number of items finished so far and the total
  (``None`` when unknown) after every step. The CLI (:mod:`omnipos.app`) passes one that draws a tqdm bar;
  any other bar or logger fits the same way.

The library never imports tqdm or matplotlib itself: drawing is the application's business.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ProgressCallback", "ProgressReporter", "progress_reporter"]

#: ``(done, total)`` -> None; ``total`` is None when it is not known in advance.
ProgressCallback = Callable[[int, "int | None"], None]


class _StderrLine:
    """``progress=True``: one line on stderr, rewritten at most every ``interval`` seconds."""

    def __init__(self, desc: str, interval: float = 0.5) -> None:
        self.desc = desc or "progress"
        self.interval = interval
        self.last = 0.0

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        if total is not None and done >= total or now - self.last >= self.interval:
            self.last = now
            share = f" ({100 * done // total}%)" if total else ""
            sys.stderr.write(f"\r{self.desc}: {done}{'' if total is None else f'/{total}'}{share}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.last:
            sys.stderr.write("\n")
            sys.stderr.flush()


class ProgressReporter:
    """What a library function holds while it works: ``update(n)`` after each step, ``close()`` at the end
    (or use it as a context manager). Built by :func:`progress_reporter`."""

    def __init__(self, callback: ProgressCallback | None, total: int | None) -> None:
        self._callback = callback
        self.total = total
        self.done = 0

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._callback is not None:
            self._callback(self.done, self.total)

    def close(self) -> None:
        close = getattr(self._callback, "close", None)
        if callable(close):
            close()

    def __enter__(self) -> ProgressReporter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def progress_reporter(progress: bool | ProgressCallback | None, *, total: int | None = None,
                      desc: str = "", name: str = "progress") -> ProgressReporter:
    """Turn a ``progress=`` argument (see the module docstring) into a :class:`ProgressReporter`."""
    if progress is None or progress is False:
        return ProgressReporter(None, total)
    if progress is True:
        return ProgressReporter(_StderrLine(desc), total)
    if callable(progress):
        return ProgressReporter(progress, total)
    raise TypeError(f"{name} must be True, False or a callable (done, total) -> None, got {progress!r}")
