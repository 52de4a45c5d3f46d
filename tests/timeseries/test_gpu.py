"""CPU and CUDA give the same numbers (skipped without a CUDA device)."""

import numpy as np
import pytest
import torch

from omnipos.timeseries import GapBucketEmbedding, TimelineEncoder, batch_timelines, time_gaps

pytestmark = pytest.mark.gpu


def test_encoder_cpu_equals_cuda():
    rng = np.random.default_rng(0)
    times, mask = batch_timelines([np.sort(rng.uniform(0, 1e5, n)) for n in (50, 0, 7, 300)], origin="epoch")
    enc = TimelineEncoder(64, components=("absolute", "periodic", "gap", "gap_bucket", "time2vec"))
    cpu = enc(times, mask)
    gpu = enc.cuda()(times.cuda(), mask.cuda())
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5, atol=1e-5)


def test_gaps_and_buckets_stay_on_device():
    times = torch.tensor([[0.0, 1.0, 1.0, 30.0, 800.0]], device="cuda", dtype=torch.float64)
    gaps = time_gaps(times)
    assert gaps.device.type == "cuda"
    emb = GapBucketEmbedding(dim=4).cuda()
    assert emb.bucketize(gaps).tolist() == [[0, 1, 0, 2, 4]]
