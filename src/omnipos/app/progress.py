"""tqdm integration: the progress bars the command line draws for library functions' ``progress=`` argument.

The library (core, domains, scale) never imports tqdm; it calls a ``progress(done, total)`` callable
(:mod:`omnipos.core.progress`). :func:`tqdm_progress` builds one that draws a tqdm bar, or, without tqdm, falls
back to the library's plain stderr line (``progress=True``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["tqdm_progress"]


class _TqdmCallback:
    """``(done, total)`` -> a tqdm bar moved to ``done``; ``close()`` closes the bar."""

    def __init__(self, tqdm: Any, **kwargs: Any) -> None:
        self._tqdm = tqdm
        self._kwargs = kwargs
        self._bar = None

    def __call__(self, done: int, total: int | None) -> None:
        if self._bar is None:
            self._bar = self._tqdm(total=total, **self._kwargs)
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def tqdm_progress(enabled: bool = True, **kwargs: Any) -> Any:
    """A ``progress=`` value for library functions: a tqdm bar (``kwargs`` go to ``tqdm``, e.g. ``desc``,
    ``unit``) when ``enabled`` and tqdm is installed; ``True`` (the library's plain line) without tqdm;
    ``False`` when not ``enabled``."""
    if not enabled:
        return False
    try:
        from tqdm import tqdm
    except ImportError:
        return True
    return _TqdmCallback(tqdm, **kwargs)
