"""Compiled CPU kernels (numba; the optional extra ``omnipos[fast]``): how every domain compiles one, where their
machine code is cached, and the user's switch to turn them all off.

Each domain keeps its kernels in a module of their own that imports numba at its top, and reaches it through a
function returning ``None`` where numba is missing or switched off, with a torch / NumPy path that runs then. So a
numba-free install works everywhere, and the compiled kernels give the same bits as that path wherever the two
exist side by side (the domains' tests compare them).

Where the machine code is cached. numba's cache files (``.nbi`` / ``.nbc``) are pickles, and loading a pickle can run
any code, so omnipos' kernels keep theirs only in a folder no one else can write: ``NUMBA_CACHE_DIR`` when it is
such a folder, otherwise ``$XDG_CACHE_HOME/omnipos/numba`` (``~/.cache/omnipos/numba`` without ``XDG_CACHE_HOME``),
created with mode 0700 (:func:`kernel_cache_folder`). A folder on the way that is a symbolic link, is owned by another
user, or is writable by its group or by others is not used (a warning says so once): a refused ``NUMBA_CACHE_DIR``
gives way to the per-user folder, a refused per-user folder to no disk cache (each process compiles its kernels,
about a second each the first time they run). They are never cached in the ``__pycache__`` beside omnipos' sources.
Only omnipos' own kernels are concerned: numba's settings (``numba.config.CACHE_DIR``) and other code's ``cache=True``
are left as they are. Worker processes (the local engine's fork server and its workers, Ray workers) decide the
same way, from the environment they inherit.

A process's first call. A kernel read back from the disk cache is rebuilt without numba's compiler set-up (its
``load_overload`` first imports and installs every registry numba has, NumPy's, linalg's with SciPy's BLAS, random,
typed containers: 0.5-1 s a process, of which loading the kernel itself is ~0.05 s); only a kernel that has to be
compiled pays for it (numba's compiler sets itself up before compiling). The machine code, and so the bits, are the
same either way.
"""

from __future__ import annotations

import functools
import gc
import inspect
import os
import stat
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["collector_paused", "compiled", "compiled_kernels_enabled", "kernel_cache_folder"]

#: The per-user folder, under ``$XDG_CACHE_HOME`` (or ``~/.cache``).
CACHE_SUBFOLDER = ("omnipos", "numba")


def compiled_kernels_enabled() -> bool:
    """Whether omnipos may use its numba kernels where numba is installed: the user's switch is
    ``OMNIPOS_DISABLE_NUMBA=1`` (the torch / NumPy / LAPACK paths then, as without numba: no compile at the first
    call, numbers as in a numba-free install)."""
    return os.environ.get("OMNIPOS_DISABLE_NUMBA") != "1"


def compiled(function: Callable[..., Any]) -> Any:
    """``numba.njit`` as omnipos' kernels use it: no GIL (worker pools run threads), NumPy's error model (a division
    by zero gives inf/NaN, not an exception, and no check per division), IEEE arithmetic (no ``fastmath``: no
    reassociation, no fused multiply-add), and the machine code cached on disk in :func:`kernel_cache_folder` (see
    the module docstring); where there is none, compiled in each process. A cache file that cannot be read back
    (truncated, overwritten, from a broken copy) counts as a miss: the kernel is compiled again and the cache
    rewritten, instead of numba's unpickling error reaching the caller. Needs numba (ImportError without it)."""
    import numba

    dispatcher = numba.njit(nogil=True, error_model="numpy")(function)
    cache = _private_cache(dispatcher.py_func)
    if cache is not None:
        dispatcher._cache = _UnreadableCacheIsAMiss(cache)  # what numba's cache=True sets, with our locator
    return dispatcher


_PAUSE_LOCK = threading.Lock()
_PAUSES = [0, False]  # blocks inside collector_paused(), whether the collector was enabled when the first began


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with Python's cyclic garbage collector paused (process-wide; nested and concurrent blocks
    pause it once, and the last one to end restores the state the first found). For loading numba and the
    cached kernels, which allocate ~10^5 objects: each collection they trigger walks every object the process
    holds, so their cost grew with the caller's data (a process holding 4,000 PyG graphs' tensors paid ~0.13 s
    more on its first LapPE call, as much as numba's import). What the block leaves unreachable is collected later,
    as usual."""
    with _PAUSE_LOCK:
        if _PAUSES[0] == 0:
            _PAUSES[1] = gc.isenabled()
            gc.disable()
        _PAUSES[0] += 1
    try:
        yield
    finally:
        with _PAUSE_LOCK:
            _PAUSES[0] -= 1
            if _PAUSES[0] == 0 and _PAUSES[1]:
                gc.enable()


def kernel_cache_folder() -> str | None:
    """The folder omnipos' compiled kernels cache their machine code in (created if missing), or None when there is
    none they may use (then each process compiles them): ``NUMBA_CACHE_DIR`` (as numba read it) when it is a folder
    only this user can write, else ``$XDG_CACHE_HOME/omnipos/numba`` or ``~/.cache/omnipos/numba``, created 0700.
    A folder that is a symbolic link, owned by another user or writable by its group or others is refused, with a
    warning (once per folder and reason)."""
    import numba

    chosen = str(getattr(numba.config, "CACHE_DIR", "") or "")
    if chosen:
        chosen = os.path.abspath(chosen)
        why = _make_private([chosen], os.path.dirname(chosen))  # its parents created as numba would
        if why is None:
            return chosen
        _warn_once(f"omnipos: NUMBA_CACHE_DIR={chosen!r} {why}: omnipos' compiled kernels do not cache there (numba's "
                   "cache files are pickles, which can run code when loaded); they use their per-user folder instead")
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset, or relative (which the XDG specification says to ignore)
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    folders = [os.path.join(base, *CACHE_SUBFOLDER[:i + 1]) for i in range(len(CACHE_SUBFOLDER))]
    why = _make_private(folders, base)
    if why is not None:
        _warn_once(f"omnipos: the kernel cache folder {why}: omnipos' compiled kernels are compiled in each process, "
                   "without a disk cache (numba's cache files are pickles, which can run code when loaded)")
        return None
    return folders[-1]


def _make_private(folders: Sequence[str], base: str | None = None) -> str | None:
    """Create each of ``folders`` (each inside the one before; ``base``, their parent, too if missing) with mode
    0700 where missing, and check each is private; why one is not (naming it), or None."""
    try:
        if base is not None and not os.path.isdir(base):
            os.makedirs(base, mode=0o700, exist_ok=True)
        for folder in folders:
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                pass
            why = _not_private(folder)
            if why is not None:
                return f"{folder!r} {why}"
    except OSError as exc:
        return f"{exc.filename!r} cannot be created ({exc.strerror})"
    return None


def _not_private(folder: str) -> str | None:
    """Why only this user may not be the one writing in ``folder`` (None when only they can)."""
    try:
        info = os.lstat(folder)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if hasattr(os, "geteuid"):  # POSIX owners and modes (on Windows, folders' ACLs are not checked)
        if info.st_uid != os.geteuid():
            return f"is owned by another user (uid {info.st_uid}, not {os.geteuid()})"
        if info.st_mode & 0o022:
            return f"is writable by its group or by others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def _private_cache(py_func: Callable[..., Any]) -> Any:
    """numba's on-disk cache of ``py_func`` in :func:`kernel_cache_folder`, or None (no such folder; a function
    without a source file; numba's cache internals not as expected)."""
    folder = kernel_cache_folder()
    if folder is None:
        return None
    try:
        return _cache_class()(py_func, folder)
    except Exception:  # noqa: BLE001 - no disk cache is always a correct answer
        return None


@functools.cache
def _cache_class() -> type:
    """numba's ``FunctionCache`` with a locator of our own: the one folder given, checked private before each
    read and write (numba's own locators read ``NUMBA_CACHE_DIR``, ``__pycache__`` or
    ``NUMBA_CACHE_LOCATOR_CLASSES``, unchecked)."""
    from numba.core import caching

    class PrivateLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        def __init__(self, py_func: Callable[..., Any], py_file: str, root: str) -> None:
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._root = root
            self._cache_path = os.path.join(root, self.get_suitable_cache_subpath(py_file))

        def get_cache_path(self) -> str:
            return self._cache_path

        def ensure_cache_path(self) -> None:  # numba calls it before each save
            why = _make_private([self._root, self._cache_path])
            if why is not None:
                raise OSError(why)

        def is_private(self) -> bool:
            return _not_private(self._root) is None and _not_private(self._cache_path) is None

    class PrivateImpl(caching.CompileResultCacheImpl):
        def __init__(self, py_func: Callable[..., Any], root: str) -> None:
            # numba's CacheImpl.__init__, with this locator instead of its search
            self._lineno = py_func.__code__.co_firstlineno
            qualname = getattr(py_func, "__qualname__", py_func.__name__)
            source = inspect.getfile(py_func)
            if not os.path.isfile(source):  # "<stdin>", "<ipython-input-...>": no stamp to check the cache by
                raise FileNotFoundError(source)
            self._locator = PrivateLocator(py_func, source, root)
            self._locator.ensure_cache_path()
            modname = os.path.splitext(os.path.basename(source))[0]
            self._filename_base = self.get_filename_base(f"{modname}.{qualname}", getattr(sys, "abiflags", ""))

    class PrivateCache(caching.FunctionCache):
        def __init__(self, py_func: Callable[..., Any], root: str) -> None:
            self._impl_class = functools.partial(PrivateImpl, root=root)  # read by FunctionCache.__init__
            super().__init__(py_func)

    return PrivateCache


class _UnreadableCacheIsAMiss:
    """numba's on-disk cache of one function, with what is read back treated as untrusted: nothing is read unless
    the folder is still private, any error while loading is a miss (and the unreadable index is removed, so that
    the fresh compile's save writes a new one); an error while saving leaves the process with its compiled code
    and no cache."""

    def __init__(self, cache: object) -> None:
        self._inner = cache

    def load_overload(self, sig: object, target_context: object) -> object:
        locator = getattr(getattr(self._inner, "_impl", None), "locator", None)
        if locator is None or not hasattr(locator, "is_private") or not locator.is_private():
            return None
        try:
            with collector_paused():
                return _load_without_refresh(self._inner, sig, target_context)
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


def _load_without_refresh(cache: Any, sig: object, target_context: Any) -> object:
    """``cache.load_overload(sig, target_context)`` without its first step, ``target_context.refresh()``: that
    imports and installs every numba registry (NumPy, linalg (SciPy's BLAS), random, typed containers, ...), ~0.5-1 s
    the first time in a process, which only compiling needs (numba's compiler refreshes the context itself before it
    compiles, so a miss still compiles as before). Rebuilding a cached kernel needs numba's runtime (NRT, for the
    arrays it allocates) only: initialised here. numba's private steps as expected, else its public call."""
    load = getattr(cache, "_load_overload", None)
    guard = getattr(cache, "_guard_against_spurious_io_errors", None)
    try:
        from numba.core.runtime import rtsys
    except ImportError:
        rtsys = None
    if load is None or guard is None or rtsys is None or not hasattr(rtsys, "initialize"):
        return cache.load_overload(sig, target_context)
    rtsys.initialize(target_context)
    with guard():
        return load(sig, target_context)
    return None  # (the guard swallowed a spurious I/O error: a miss)
