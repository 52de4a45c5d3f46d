"""collector_paused: Python's cyclic collector paused while numba and the cached kernels load (each collection
they trigger walks every object the process holds), nested and concurrent blocks pausing it once, and the
caller's state put back."""

import gc
import threading

from omnipos.core.compiled_kernels import collector_paused


def test_the_collector_is_paused_inside_and_restored_after_nested_and_concurrent_blocks():
    assert gc.isenabled()
    entered, leave = threading.Event(), threading.Event()

    def other():
        with collector_paused():
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
        thread.start()
        entered.wait(10)
    assert not gc.isenabled()  # the other thread's block is still open
    leave.set()
    thread.join()
    assert gc.isenabled()


def test_a_collector_the_caller_disabled_stays_disabled():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_an_error_inside_restores_the_collector():
    try:
        with collector_paused():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert gc.isenabled()
