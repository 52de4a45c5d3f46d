import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# Property tests: no per-example deadline (a shared 2-core machine is noisy), a modest example count in CI, and
# the same examples on every run, so that CI's verdict on a commit is reproducible. Exploring new examples is a
# deliberate act: OMNIPOS_HYPOTHESIS_RANDOM=1 (with OMNIPOS_HYPOTHESIS_EXAMPLES=1000, say) searches afresh.
settings.register_profile(
    "omnipos", deadline=None, max_examples=int(os.environ.get("OMNIPOS_HYPOTHESIS_EXAMPLES", "60")),
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=os.environ.get("OMNIPOS_HYPOTHESIS_RANDOM", "") not in ("1", "true", "yes"),
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
