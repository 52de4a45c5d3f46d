"""CPU and CUDA give the same numbers (skipped without a CUDA device)."""

import numpy as np
import pytest
import torch

from omnipos.timeseries import (
    GapBucketEmbedding,
    TimelineEncoder,
    batch_timelines,
    periodic_encoding,
    time_gaps,
)

pytestmark = pytest.mark.gpu


def test_encoder_cpu_equals_cuda():
    rng = np.random.default_rng(0)
    times, mask, clock = batch_timelines([np.sort(rng.uniform(0, 1e5, n)) for n in (50, 0, 7, 300)],
                                         return_clock=True)
    enc = TimelineEncoder(64, components=("absolute", "periodic", "gap", "gap_bucket", "time2vec"),
                          timezone="America/New_York")
    cpu = enc(times, mask, clock)
    gpu = enc.cuda()(times.cuda(), mask.cuda(), clock.cuda())
    assert gpu.device.type == "cuda" and enc.tz_transitions.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="module is on cuda"):
        enc(times, mask, clock)
    half = enc.half()
    assert half.periods.dtype == torch.float64
    torch.testing.assert_close(half(times.cuda(), mask.cuda(), clock.cuda()).float().cpu(), cpu, rtol=0, atol=2e-2)


def test_functional_forms_and_buckets_stay_on_device():
    times = torch.tensor([[0.0, 1.0, 1.0, 30.0, 800.0]], device="cuda", dtype=torch.float64)
    gaps = time_gaps(times)
    assert gaps.device.type == "cuda"
    emb = GapBucketEmbedding(dim=4).cuda()
    assert emb.bucketize(gaps).tolist() == [[0, 1, 0, 2, 4]]
    pe = periodic_encoding(times, clock=torch.tensor([473000.0], device="cuda", dtype=torch.float64),
                           timezone="Europe/Paris")
    assert pe.device.type == "cuda"
    cpu = periodic_encoding(times.cpu(), clock=torch.tensor([473000.0], dtype=torch.float64),
                            timezone="Europe/Paris")
    torch.testing.assert_close(pe.cpu(), cpu, rtol=0, atol=1e-6)
