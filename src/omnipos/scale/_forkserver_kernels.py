"""Imported last by the local engine's fork server (:mod:`omnipos.scale.workers`) when the driver has loaded the
graph encodings' compiled kernels: the fork server loads them too (from numba's disk cache, which the driver's
first call filled), so that each worker forked from it starts with them loaded instead of loading them at its
first call (~0.1 s a worker). A failure here only means the workers load them themselves."""

try:
    from omnipos.graph.small_eigh import load_kernels

    load_kernels()
except Exception:  # noqa: BLE001, S110 - the workers' own first call loads (or compiles) the kernels then
    pass
