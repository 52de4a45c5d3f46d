"""The module contract (ARCHITECTURE.md, issue 13) for every public time-series module and the main functional
paths: compile without graph breaks, dtypes, gradients with respect to times (and clocks, parameters), meta init,
copies, threads. The checks themselves are in ``contract/harness.py``."""

import pytest
import torch
from contract.harness import CHECKS, Case, run

from omnipos.timeseries import (
    ERPE,
    TAPE,
    EventBatch,
    GapBucketEmbedding,
    Time2Vec,
    TimelineEncoder,
    absolute_time_encoding,
    erpe_attention,
    log_gap_encoding,
    periodic_encoding,
    tape,
    time_gaps,
)

FUNCTION = {"dtypes": "a function: its output dtype is its dtype= argument, there is no module to convert",
            "meta": "a function: no parameters or buffers to build on the meta device",
            "copies": "a function: no module state to copy, pickle or save"}


def timelines(size, dtype=None, *, seed=0, clock_dtype=torch.float64):
    """Sorted float64 times [B, L] in hours with padding at the end, a mask, and one clock per row."""
    gen = torch.Generator().manual_seed(seed + size)
    batch, length = 2 * size, 3 + 2 * size
    gaps = torch.rand(batch, length, generator=gen, dtype=torch.float64) * 30 + 0.05  # > gradcheck's eps
    times = gaps.cumsum(-1) - gaps[:, :1]
    lengths = torch.randint(1, length + 1, (batch,), generator=gen)
    lengths[0] = length
    mask = torch.arange(length) < lengths[:, None]
    times = times.masked_fill(~mask, 0.0)
    clock = 473_000 + torch.rand(batch, generator=gen, dtype=torch.float64) * 1000  # hours since 1970: ~2024
    return times, mask, clock.to(clock_dtype)


def short_timelines(size, dtype=None):
    """Times within a few hours: a float16 / bfloat16 Time2Vec rounds its learned frequencies to 11 / 8 bits, so
    its phase error grows with |t| (|t| * 2**-9 * |w| for bfloat16): the output is the float32 one rounded only
    for times near the origin, which is what Time2Vec is for (relative times)."""
    times, mask, clock = timelines(size)
    return times / 20, mask, clock


def gaps_of(size, dtype=None):
    times, mask, _ = timelines(size, seed=1)
    return time_gaps(times, mask) + 0.3, mask  # away from the bucket boundaries


def event_batch(size, dtype=None):
    times, mask, clock = timelines(size, seed=2)
    codes = torch.where(mask, 1, 0)
    values = torch.full(times.shape, float("nan"))
    return (EventBatch(times * 60, codes, values, mask, ["<pad>", "X"], list(range(len(times))), unit="min",
                       origin="first", clock=clock * 60),)


def features(size, dtype=torch.float32):
    gen = torch.Generator().manual_seed(size)
    x = torch.randn(2 * size, 3 + size, 3, generator=gen, dtype=torch.float64)
    mask = torch.ones(x.shape[:-1], dtype=torch.bool)
    mask[1:, -1] = False
    return x.to(dtype), mask


def series(size, dtype=torch.float32):
    """Embedded series [B, L, 8], L <= 12 (deterministic per size)."""
    gen = torch.Generator().manual_seed(size)
    return (torch.randn(2, 5 + 3 * size, 8, generator=gen, dtype=torch.float64).to(dtype or torch.float32),)


def attention_weights(size, dtype=torch.float32):
    gen = torch.Generator().manual_seed(size)
    scores = torch.randn(2, 3, 4 + 3 * size, 4 + 3 * size, generator=gen, dtype=torch.float64)
    return (scores.softmax(-1).to(dtype or torch.float32),)


def qkv(size, dtype=torch.float32):
    gen = torch.Generator().manual_seed(size)
    return tuple(torch.randn(3, 2, 3, 4 + 3 * size, 4, generator=gen, dtype=torch.float64).to(dtype or torch.float32))


class ERPEAttention(torch.nn.Module):
    """erpe_attention as a module (for the checks): ERPE before the softmax, q/k/v given."""

    def __init__(self) -> None:
        super().__init__()
        self.erpe = ERPE(12, 3, placement="before_softmax")

    def reset_parameters(self) -> None:
        self.erpe.reset_parameters()

    def forward(self, q, k, v):
        return erpe_attention(q, k, v, self.erpe)


CASES = [
    Case("TAPE", make=lambda: TAPE(8, 12, scale=0.5), inputs=series, grad_inputs=(0,)),
    # zeros at init, as ConvTran (the copy check perturbs the table, gradcheck differentiates through it)
    Case("ERPE(after_softmax)", make=lambda: ERPE(12, 3), inputs=attention_weights, grad_inputs=(0,)),
    Case("erpe_attention(before_softmax)", make=ERPEAttention, inputs=qkv, grad_inputs=(0, 1, 2)),
    Case("tape", fn=lambda length: tape(length, 16), inputs=lambda size, dtype: (7 * size,),
         skip={**FUNCTION, "grad": "a function of integer sizes only: nothing to differentiate"}),
    Case("TimelineEncoder", make=lambda: TimelineEncoder(8), inputs=timelines, grad_inputs=(0, 2), gradgrad=True,
         low_tol=5e-3),
    Case("TimelineEncoder-all-concat",
         make=lambda: TimelineEncoder(24, components=("absolute", "periodic", "gap", "gap_bucket", "time2vec"),
                                      combine="concat"),
         inputs=short_timelines, grad_inputs=(0, 2), gradgrad=True),
    Case("TimelineEncoder-all-sum-timezone",
         make=lambda: TimelineEncoder(12, components=("absolute", "periodic", "gap", "gap_bucket", "time2vec"),
                                      unit="h", timezone="America/New_York", phase_origin="2024-01-01",
                                      harmonics=2),
         inputs=short_timelines, grad_inputs=(0, 2)),
    Case("TimelineEncoder-seconds", make=lambda: TimelineEncoder(8, unit="s"),
         inputs=lambda size, dtype: tuple(x * 3600 for x in timelines(size)[:1]) + timelines(size)[1:2]
         + (timelines(size)[2] * 3600,), grad_inputs=(0,), low_tol=5e-3),
    Case("TimelineEncoder-EventBatch", make=lambda: TimelineEncoder(8), inputs=event_batch, low_tol=5e-3),
    Case("Time2Vec", make=lambda: Time2Vec(6), inputs=lambda size, dtype: short_timelines(size)[:2],
         grad_inputs=(0,), gradgrad=True),
    Case("Time2Vec-features", make=lambda: Time2Vec(5, in_features=3), inputs=features, grad_inputs=(0,),
         gradgrad=True),
    Case("GapBucketEmbedding", make=lambda: GapBucketEmbedding(dim=4), inputs=gaps_of),
    Case("GapBucketEmbedding-seconds", make=lambda: GapBucketEmbedding(dim=4, unit="s"),
         inputs=lambda size, dtype: (gaps_of(size)[0] * 3600 + torch.tensor(1e7), gaps_of(size)[1])),
    Case("absolute_time_encoding",
         fn=lambda t, m: absolute_time_encoding(t, 8, min_period="1h", max_period="365d", mask=m,
                                                      dtype=t.dtype),
         inputs=lambda size, dtype: timelines(size)[:2], grad_inputs=(0,), gradgrad=True, skip=FUNCTION),
    Case("periodic_encoding",
         fn=lambda t, m, c: periodic_encoding(t, ("24h", "7d"), 2, mask=m, clock=c, timezone="Europe/Paris",
                                                 dtype=t.dtype),
         inputs=timelines, grad_inputs=(0, 2), gradgrad=True, skip=FUNCTION),
    Case("log_gap_encoding", fn=lambda g, m: log_gap_encoding(g, 8, mask=m, dtype=g.dtype), inputs=gaps_of,
         grad_inputs=(0,), gradgrad=True, skip=FUNCTION),
    Case("time_gaps", fn=time_gaps, inputs=lambda size, dtype: timelines(size)[:2], grad_inputs=(0,),
         skip=FUNCTION),
]


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_contract(case, check):
    run(case, check)
