"""CPU and CUDA give the same numbers (skipped without a CUDA device)."""

import copy

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
    torch.manual_seed(0)
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
    # float16 learned parts are a rounded copy of the float32 ones: the reference is the float32 module with those
    # rounded weights (Time2Vec's frequencies times 1e4 hours turn a rounding of the weight into whole radians)
    hours, mask, clock = batch_timelines([np.sort(rng.uniform(0, 1e4, n)) for n in (50, 0, 7, 300)],
                                         return_clock=True)
    reference = copy.deepcopy(half).float().cpu()(hours, mask, clock)
    torch.testing.assert_close(half(hours.cuda(), mask.cuda(), clock.cuda()).float().cpu(), reference,
                               rtol=2e-3, atol=2e-2)
    far = hours * (1e5 / float(half.time2vec.linear.weight.float().abs().max()) / float(hours.max()))
    with pytest.raises(ValueError, match="beyond what torch.float16 holds"):  # |w t| reaches 1e5 > 65504
        half(far.cuda(), mask.cuda(), clock.cuda())


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
