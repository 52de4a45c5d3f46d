"""Compiled CPU kernels (numba; the optional extra ``omnipos[fast]``): how every domain compiles one, and the
user's switch to turn them all off.

Each domain keeps its kernels in a module of their own that imports numba at its top, and reaches it through a
function returning ``None`` where numba is missing or switched off, with a torch / NumPy path that runs then. So a
numba-free install works everywhere, and the compiled kernels give the same bits as that path wherever the two
exist side by side (the domains' tests compare them).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["compiled", "compiled_kernels_enabled"]


def compiled_kernels_enabled() -> bool:
    """Whether omnipos may use its numba kernels where numba is installed: the user's switch is
    ``OMNIPOS_DISABLE_NUMBA=1`` (the torch / NumPy / LAPACK paths then, as without numba: no compile at the first
    call, numbers as in a numba-free install)."""
    return os.environ.get("OMNIPOS_DISABLE_NUMBA") != "1"


def compiled(function: Callable[..., Any]) -> Any:
    """``numba.njit`` as omnipos' kernels use it: no GIL (worker pools run threads), NumPy's error model (a division
    by zero gives inf/NaN, not an exception, and no check per division), IEEE arithmetic (no ``fastmath``: no
    reassociation, no fused multiply-add), and the machine code cached on disk; where numba finds no writable
    cache directory, compiled in each process. A cache file that cannot be read back (truncated, overwritten,
    from a broken copy) counts as a miss: the kernel is compiled again and the cache rewritten, instead of numba's
    unpickling error reaching the caller. Needs numba (ImportError without it)."""
    import numba

    try:
        dispatcher = numba.njit(cache=True, nogil=True, error_model="numpy")(function)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(nogil=True, error_model="numpy")(function)
    cache = getattr(dispatcher, "_cache", None)
    if cache is not None and hasattr(cache, "load_overload") and hasattr(cache, "save_overload"):
        dispatcher._cache = _UnreadableCacheIsAMiss(cache)
    return dispatcher


class _UnreadableCacheIsAMiss:
    """numba's on-disk cache of one function, with what is read back treated as untrusted: any error while
    loading is a miss (and the unreadable index is removed, so that the fresh compile's save writes a new one);
    an error while saving leaves the process with its compiled code and no cache."""

    def __init__(self, cache: object) -> None:
        self._inner = cache

    def load_overload(self, sig: object, target_context: object) -> object:
        try:
            return self._inner.load_overload(sig, target_context)
        except Exception:
            index = getattr(getattr(self._inner, "_cache_file", None), "_index_path", None)
            if isinstance(index, str):
                try:
                    os.remove(index)
                except OSError:
                    pass
            return None

    def save_overload(self, sig: object, data: object) -> None:
        try:
            self._inner.save_overload(sig, data)
        except Exception:
            pass

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)
