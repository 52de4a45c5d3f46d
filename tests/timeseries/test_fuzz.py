"""Fuzz (issue 14): the public time-series API on hostile input.

NaN / inf, extreme magnitudes, empty and 0-d tensors, non-contiguous views, wrong dtypes, meta tensors, odd
Python values. Whatever comes in, only ValueError / TypeError escape, and what comes out is finite (meta outputs
have the right shape)."""

import datetime as dt

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omnipos.timeseries import (
    EventBatch,
    GapBucketEmbedding,
    Time2Vec,
    TimelineEncoder,
    absolute_time_encoding,
    batch_timelines,
    log_gap_encoding,
    parse_duration,
    periodic_encoding,
    time_gaps,
    to_offsets,
)

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REFUSED = (ValueError, TypeError)
EXTREME = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-310, 1e-300, 3.0e38, 7e4, 1e15, 2.0**53, 1e300, 1.7e308, -1.7e308,
           float("nan"), float("inf"), -float("inf")]
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8,
          torch.bool, torch.complex64]

numbers = st.one_of(st.sampled_from(EXTREME), st.floats(allow_nan=True, allow_infinity=True),
                    st.floats(-1e6, 1e6))


@st.composite
def tensors(draw, max_dims=3):
    """A tensor of times / gaps: any rank (0-d included), empty axes, extreme values, any dtype, sometimes
    sorted along the last axis, sometimes a non-contiguous view, sometimes on the meta device."""
    scalar = draw(st.integers(0, 9)) == 9  # (not 0: hypothesis favours small draws)
    shape = [] if scalar else draw(st.lists(st.integers(0, 4), min_size=1, max_size=max_dims))
    values = draw(st.lists(numbers, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    array = np.array(values, dtype=np.float64).reshape(shape)
    if draw(st.booleans()) and array.ndim:
        array = np.sort(array, axis=-1)  # NaN last: sorted real values get through to the encoders
    dtype = draw(st.sampled_from(DTYPES + [torch.float64] * 4 + [torch.float32] * 2))
    with np.errstate(invalid="ignore", over="ignore"):
        if dtype.is_floating_point or dtype.is_complex:
            tensor = torch.from_numpy(array).to(dtype)
        elif dtype == torch.bool:
            tensor = torch.from_numpy(np.asarray(array > 0))
        else:
            info = torch.iinfo(dtype)
            tensor = torch.from_numpy(np.asarray(np.nan_to_num(array, nan=0.0).clip(info.min, info.max)
                                                 .astype(np.int64))).to(dtype)
    layout = draw(st.sampled_from(["plain", "strided", "transposed", "meta"]))
    if layout == "strided" and tensor.ndim:
        tensor = torch.repeat_interleave(tensor, 2, dim=-1)[..., ::2]
    elif layout == "transposed" and tensor.ndim >= 2:
        tensor = tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif layout == "meta":
        tensor = tensor.to("meta")
    return tensor


@st.composite
def masks(draw, times):
    kind = draw(st.sampled_from(["none", "match", "random", "random", "wrong_shape", "int", "list", "meta"]))
    shape = tuple(times.shape)
    if kind == "none":
        return None
    if kind == "match":
        return torch.ones(shape, dtype=torch.bool, device=times.device)
    if kind == "random":
        gen = torch.Generator().manual_seed(draw(st.integers(0, 1000)))
        lengths = torch.randint(0, (shape[-1] if shape else 0) + 1, shape[:-1] or (1,), generator=gen)
        mask = torch.arange(shape[-1] if shape else 0) < lengths.reshape(*shape[:-1], 1) if shape else \
            torch.ones((), dtype=torch.bool)
        return mask.to(times.device)
    if kind == "wrong_shape":
        return torch.ones(*shape, 2, dtype=torch.bool)
    if kind == "int":
        return torch.ones(shape, dtype=torch.int64)
    if kind == "list":
        return torch.ones(shape, dtype=torch.bool).tolist()
    return torch.ones(shape, dtype=torch.bool, device="meta")


def finite(out):
    """Only real outputs are checked (meta ones have no values, only a shape)."""
    outs = out if isinstance(out, tuple) else (out,)
    for o in outs:
        if isinstance(o, torch.Tensor) and not o.is_meta and (o.is_floating_point() or o.is_complex()):
            assert torch.isfinite(o).all(), o


def attempt(call, *args, **kwargs):
    try:
        out = call(*args, **kwargs)
    except REFUSED:
        return None
    finite(out)
    return out


ENCODERS = {}


def encoder(device, name):
    """Modules built once per device (meta ones under torch.device('meta'))."""
    key = (device, name)
    if key not in ENCODERS:
        with torch.device(device):
            ENCODERS[key] = {
                "default": lambda: TimelineEncoder(8),
                "all": lambda: TimelineEncoder(12, components=("absolute", "periodic", "gap", "gap_bucket",
                                                               "time2vec"), timezone="Europe/Paris"),
                "concat": lambda: TimelineEncoder(12, components=("absolute", "periodic", "gap"), combine="concat",
                                                  unit="s"),
                "time2vec": lambda: Time2Vec(5),
                "buckets": lambda: GapBucketEmbedding(dim=3, unit="min"),
            }[name]()
    return ENCODERS[key]


@FUZZ
@given(st.data())
def test_functions_on_hostile_tensors(data):
    times = data.draw(tensors())
    mask = data.draw(masks(times))
    for call in (
        lambda: time_gaps(times, mask),
        lambda: absolute_time_encoding(times, 6, min_period="1h", max_period="3650d", mask=mask),
        lambda: log_gap_encoding(times, 4, mask=mask, scale="1e-10h"),
        lambda: periodic_encoding(times, ("24h", "7d"), 2, mask=mask, clock=data.draw(clocks(times))),
        lambda: periodic_encoding(times, mask=mask, clock=0, timezone="America/New_York", dtype=torch.float64),
    ):
        out = attempt(call)
        if out is not None and times.ndim:
            assert out.shape[: times.ndim] == times.shape and out.is_meta == times.is_meta


@st.composite
def clocks(draw, times):
    kind = draw(st.sampled_from(["number", "tensor", "huge int", "odd"]))
    if kind == "number":
        return draw(numbers)
    if kind == "huge int":
        return 10**400
    if kind == "odd":
        return draw(st.sampled_from([None, "2024-01-01", [1.0], True, torch.tensor([1.0], dtype=torch.float16)]))
    shape = tuple(times.shape[:-1]) if times.ndim else ()
    values = torch.tensor(draw(st.lists(numbers, min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                          dtype=torch.float64).reshape(shape)
    return values.to(times.device) if times.is_meta else values


@FUZZ
@given(st.data(), st.sampled_from(["default", "all", "concat", "time2vec", "buckets"]), st.integers(0, 9))
def test_modules_on_hostile_tensors(data, name, swap_device):
    times = data.draw(tensors())
    mask = data.draw(masks(times))
    on_meta = times.is_meta != (swap_device == 9)  # now and then a module on the other device
    module = encoder("meta" if on_meta else "cpu", name)
    if name in ("default", "all", "concat"):
        out = attempt(module, times, mask, data.draw(clocks(times)))
    else:
        out = attempt(module, times, mask)
    if out is not None:
        assert out.shape[:-1] == times.shape and out.dtype == torch.float32 and out.is_meta == times.is_meta


@FUZZ
@given(st.one_of(st.text(max_size=30), numbers, st.integers(-10**400, 10**400), st.none(), st.booleans(),
                 st.sampled_from([np.timedelta64("NaT"), pd.NaT, np.timedelta64(2**62, "s"), np.timedelta64(3, "M"),
                                  dt.timedelta(days=10**8), pd.Timedelta("1ns"), "1" * 500 + "h", "1e-320h",
                                  "١٢h", "12 H", "inf h", "nan h", "1_000h", [1, 2]])),
       st.sampled_from(["s", "min", "h", "d", "w", "hours", None]))
def test_parse_duration_on_anything(value, unit):
    out = attempt(parse_duration, value, unit)
    if out is not None:
        assert isinstance(out, float)


def moments():
    return st.one_of(
        numbers,
        st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
        st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30),
                     timezones=st.sampled_from([dt.timezone.utc, dt.timezone(dt.timedelta(hours=-7))])),
        st.timedeltas(),
        st.sampled_from([None, np.datetime64("NaT"), np.datetime64("9999-12-31"), np.datetime64("1500-01-01", "ns"),
                         np.datetime64("2262-04-11T23:47:16.854775807", "ns"), np.timedelta64(10**18, "s"),
                         pd.Timestamp("2024-01-01", tz="Asia/Tokyo"), "2024-01-01", b"x", object()]),
    )


@FUZZ
@given(st.lists(st.one_of(st.lists(moments(), max_size=5), st.sampled_from([[], 5.0, np.zeros((2, 2)),
                                                                            torch.ones(3), torch.ones(2, 2)])),
                max_size=4),
       st.sampled_from(["first", "epoch", "2020-01-01", 3.0, float("nan"), 10**400, dt.timedelta(hours=1),
                        pd.Timestamp("2020-01-01", tz="UTC"), None]),
       st.booleans(), st.booleans(), st.sampled_from([None, "UTC", "local"]))
def test_batch_timelines_on_anything(timelines, origin, sort, drop_missing, naive_as):
    out = attempt(batch_timelines, timelines, origin=origin, sort=sort, drop_missing=drop_missing,
                  naive_as=naive_as, return_clock=True)
    if out is not None:
        times, mask, clock = out
        assert times.dtype == clock.dtype == torch.float64 and times.shape == mask.shape
        assert (times[~mask] == 0).all()
    if timelines:
        attempt(to_offsets, timelines[0], origin=origin, naive_as=naive_as)


@st.composite
def frames(draw):
    n = draw(st.integers(0, 8))
    subject = draw(st.lists(st.one_of(st.integers(-3, 3), st.sampled_from(["a", None, float("nan")])),
                            min_size=n, max_size=n))
    kind = draw(st.sampled_from(["float", "datetime", "object"]))
    if kind == "float":
        time = draw(st.lists(numbers, min_size=n, max_size=n))
    elif kind == "datetime":
        time = pd.Series(draw(st.lists(st.sampled_from(
            [np.datetime64("2024-01-01", "us"), np.datetime64("9999-12-31", "us"), np.datetime64("NaT", "us"),
             np.datetime64("1700-06-01T12:00", "us"), np.datetime64("2024-03-10T07:30", "us")]), min_size=n,
            max_size=n)), dtype="datetime64[us]")
    else:
        time = pd.Series(draw(st.lists(moments(), min_size=n, max_size=n)), dtype=object)
    code = draw(st.lists(st.sampled_from(["A", "B", None, "<pad>", "<unk>", 3]), min_size=n, max_size=n))
    value = draw(st.lists(st.one_of(numbers, st.sampled_from([1e39, -1e39, None, "x"])), min_size=n, max_size=n))
    return pd.DataFrame({"subject_id": pd.Series(subject, dtype=object), "time": time,
                         "code": pd.Series(code, dtype=object), "numeric_value": pd.Series(value, dtype=object)})


@FUZZ
@given(frames(), st.fixed_dictionaries({}, optional={
    "origin": st.sampled_from(["first", "epoch", "2020-01-01", 1.0, float("inf")]),
    "unit": st.sampled_from(["s", "d", "year"]),
    "static": st.sampled_from(["keep", "drop", "error", "maybe"]),
    "drop_missing": st.booleans(),
    "max_len": st.sampled_from([1, 2, 0, None, 2.5]),
    "truncation": st.sampled_from(["error", "head", "tail", "split", "none"]),
    "unknown_code": st.sampled_from(["error", "unk", "zero"]),
    "naive_as": st.sampled_from([None, "UTC", "GMT"]),
    "vocab": st.sampled_from([None, ["<pad>", "<unk>", "A"], ["<pad>", "A"], ["A"], "A"])}))
def test_event_batch_on_odd_frames(df, options):
    batch = attempt(EventBatch.from_frame, df, **options)
    if batch is None:
        return
    assert torch.isfinite(batch.times).all() and torch.isfinite(batch.clock[batch.mask.any(1)]).all()
    assert not torch.isinf(batch.clock).any()  # a row without timed events has a missing (NaN) clock, never 1970
    real = batch.values[batch.mask]
    assert not torch.isinf(real).any()                                  # NaN means "no value"; never inf
    assert (batch.codes[~batch.mask] == 0).all() and batch.times.shape == batch.mask.shape
    out = attempt(TimelineEncoder(4, components=("absolute", "periodic", "gap")), batch)
    assert out is None or out.shape == (*batch.times.shape, 4)


@settings(max_examples=40, deadline=None)
@given(st.integers(-2, 20), st.sampled_from([(), ("absolute",), ("periodic",), ("fourier",), "gap", ALL := (
    "absolute", "periodic", "gap", "gap_bucket", "time2vec")]), st.sampled_from(["sum", "concat", "mean"]),
       st.sampled_from(["1h", "1e-310h", float("nan"), "0h", 1e308, "1e400h", 2]),
       st.sampled_from(["3650d", "1e308h", "1h", float("inf"), 1e-300]),
       st.sampled_from([("24h",), (), "24h", ("24h", float("nan")), (1e-320,), ("7d", "1e300d")]),
       st.sampled_from([1, 0, -1, 2.0, True]), st.sampled_from([1000.0, 0.0, float("inf"), -5.0, "x"]),
       st.sampled_from([None, "UTC", "Europe/Paris", "+14:00", "nowhere", 5]),
       st.sampled_from([torch.float32, torch.float16, torch.int64, "float32"]))
def test_timeline_encoder_construction(dim, components, combine, min_period, max_period, periods, harmonics,
                                       gap_base, timezone, dtype):
    try:
        module = TimelineEncoder(dim, components, combine, min_period=min_period, max_period=max_period,
                                 periods=periods, harmonics=harmonics, gap_base=gap_base, timezone=timezone,
                                 dtype=dtype)
    except REFUSED:
        return
    for name in ("periods", "tz_transitions", "tz_offsets", "cycles", "gap_cycles"):
        if hasattr(module, name):
            assert torch.isfinite(getattr(module, name)).all(), name
    out = module(*batch_timelines([[0.0, 1.0, 1e5], [2.0]], return_clock=True))
    finite(out)


@pytest.mark.parametrize("boundaries", [("1h", "1h"), ("1d", "1h"), (), ("1e-320h",), (float("nan"),), "1h",
                                        ("1e400h",), (np.timedelta64("NaT"),)])
def test_gap_bucket_boundaries_are_refused(boundaries):
    with pytest.raises(REFUSED):
        GapBucketEmbedding(boundaries, dim=2)
