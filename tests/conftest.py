import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# Property tests: no per-example deadline (a shared 2-core machine is noisy), a modest example count in CI.
settings.register_profile(
    "omnipos", deadline=None, max_examples=int(os.environ.get("OMNIPOS_HYPOTHESIS_EXAMPLES", "60")),
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("omnipos")

# pytest-xdist already runs one worker per core; intra-op threads on top would oversubscribe the cores
# (OpenMP barriers then wait on descheduled workers: several times slower, measured). Subprocesses inherit this.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
