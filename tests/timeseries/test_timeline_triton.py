"""The fused TimelineEncoder kernel (omnipos.timeseries.timeline_triton) against the eager path: on the CPU through
Triton's interpreter (the eager reference is then the CPU path), on CUDA for real (gpu); its CUDA path's Python on
meta tensors under a dispatch mode (no host tensor, no sync); a CUDA graph capture replayed against eager (gpu)."""

import textwrap

import pytest
import torch
from support.cuda_graphs import captured
from support.host_work import NoHostWork
from support.triton_interpreter import interpreter_or_skip, run_interpreted

from omnipos.timeseries import TimelineEncoder, timeline_triton

CASES = textwrap.dedent('''
    import os
    import torch
    from omnipos.timeseries import TimelineEncoder
    from omnipos.timeseries import timeline_triton as tt

    def eager(enc, *args):
        os.environ["OMNIPOS_DISABLE_TRITON"] = "1"
        try:
            return enc(*args)
        finally:
            del os.environ["OMNIPOS_DISABLE_TRITON"]

    def fused(enc, *args):
        calls = []
        original = tt.maybe_encode
        tt.maybe_encode = lambda *a: calls.append(original(*a)) or calls[-1]
        try:
            out = enc(*args)
        finally:
            tt.maybe_encode = original
        assert calls and calls[0] is not None, "the kernel did not encode this call"
        return out

    def timelines(g, shape, offset, scale, anywhere, dtype):
        """Sorted real times (padded slots hold NaN / inf / garbage: never read) and a ragged mask."""
        length = shape[-1]
        times = torch.cumsum(torch.rand(shape, generator=g, dtype=torch.float64) * scale, -1) + offset
        if anywhere:  # padding anywhere in a row
            mask = torch.rand(shape, generator=g) < 0.6
        else:  # padding at the end, some rows empty, some full
            lengths = torch.randint(0, length + 1, shape[:-1], generator=g)
            lengths.view(-1)[0] = length
            mask = torch.arange(length) < lengths.unsqueeze(-1)
        junk = torch.tensor([float("nan"), float("inf"), -1e30, 5.0], dtype=torch.float64)
        junk = junk[torch.randint(0, 4, shape, generator=g)]
        return torch.where(mask, times, junk).to(dtype), mask

    def compare(got, want, mask, tol):
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape)
        assert bool((got[~mask] == 0).all()), "padded slots must be exactly 0"
        err = ((got.double() - want.double()).abs() / (1 + want.double().abs())).max().item()
        assert err <= tol, err
        return err

    def check(device):
        tt.KERNEL_DEVICE_TYPES = (device,)
        g = torch.Generator().manual_seed(0)
        worst = 0.0
        cases = [
            # (module kwargs, module dtype, shape, offset, scale, padding anywhere, times dtype, clock, tolerance)
            (dict(dim=64), torch.float32, (5, 23), 4.7e5, 3.0, False, torch.float64, "tensor", 1e-5),
            (dict(dim=34, components=("gap", "periodic", "absolute"), harmonics=3, unit="s",
                  periods=("24h", "7d", "365.25d"), timezone="America/New_York", phase_origin="2024-01-01"),
             torch.float32, (4, 37), 1.6e9, 5e4, True, torch.float64, 1.7e9, 1e-5),
            (dict(dim=12, components=("periodic",), timezone="+05:30", harmonics=2), torch.float32, (2, 3, 9),
             -1e6, 40.0, False, torch.float32, "tensor", 1e-5),
            # large times: turns far beyond float32 (1e12 h) and beyond 2**53 (3e16 h at a 1 h period)
            (dict(dim=8, components=("absolute", "gap")), torch.float32, (3, 16), 1e12, 1e3, True,
             torch.float64, None, 1e-5),
            (dict(dim=8, components=("absolute", "gap")), torch.float32, (2, 11), 3e16, 1e15, False,
             torch.float64, None, 1e-5),
            (dict(dim=16, components=("gap", "absolute"), gap_scale="1d", gap_base=10.0), torch.bfloat16, (3, 20),
             0.0, 1e4, False, torch.float32, None, 2.0 ** -7),
            (dict(dim=10, components=("periodic", "gap"), timezone="Europe/Paris"), torch.float16, (2, 13), 4.2e5,
             30.0, True, torch.float64, "tensor", 2.0 ** -9),
        ]
        for kwargs, dtype, shape, offset, scale, anywhere, time_dtype, clock, tol in cases:
            torch.manual_seed(0)  # the lift's weights
            enc = TimelineEncoder(**kwargs).to(dtype).requires_grad_(False).to(device)
            times, mask = timelines(g, shape, offset, scale, anywhere, time_dtype)
            if clock == "tensor":
                clock = 4.7e5 + torch.rand(shape[:-1], generator=g, dtype=torch.float64) * 1e3
                clock = clock.to(device)
            times, mask = times.to(device), mask.to(device)
            args = (times, mask) if clock is None else (times, mask, clock)
            want = eager(enc, *args)
            got = fused(enc, *args)
            worst = max(worst, compare(got.cpu(), want.cpu(), mask.cpu(), tol))
        # no mask: every slot real
        enc = TimelineEncoder(24, harmonics=2).requires_grad_(False).to(device)
        times = torch.cumsum(torch.rand(3, 14, generator=g, dtype=torch.float64), -1).to(device)
        clock = torch.tensor(4.7e5, dtype=torch.float64).to(device)
        compare(fused(enc, times, None, clock).cpu(), eager(enc, times, None, clock).cpu(),
                torch.ones(3, 14, dtype=torch.bool), 1e-5)
        return worst

    def refusals(device):
        """Bad values are found in-kernel and the eager path names them (the same errors as without the kernel)."""
        import pytest
        tt.KERNEL_DEVICE_TYPES = (device,)
        enc = TimelineEncoder(16).requires_grad_(False).to(device)
        times = torch.tensor([[0.0, 1.0, 5.0, 7.0], [0.0, 2.0, 1.0, 3.0]], dtype=torch.float64).to(device)
        mask = torch.tensor([[True, True, True, False], [True, True, True, True]]).to(device)
        clock = torch.tensor([4.7e5, 4.7e5], dtype=torch.float64).to(device)
        with pytest.raises(ValueError, match="sorted"):
            enc(times, mask, clock)
        nan = times.clone()
        nan[1] = torch.tensor([0.0, 1.0, float("nan"), 3.0])
        with pytest.raises(ValueError, match="finite"):
            enc(nan, mask, clock)
        ok = torch.tensor([[0.0, 1.0, 5.0, 7.0], [0.0, 2.0, 2.0, 3.0]], dtype=torch.float64).to(device)
        with pytest.raises(ValueError, match="clock"):
            enc(ok, mask, torch.tensor([4.7e5, float("nan")], dtype=torch.float64).to(device))
        empty = mask.clone()
        empty[1] = False
        # a NaN clock is fine for a row without events, an infinite one is not
        got = fused(enc, ok, empty, torch.tensor([4.7e5, float("nan")], dtype=torch.float64).to(device))
        assert bool((got[1] == 0).all())
        with pytest.raises(ValueError, match="clock"):
            enc(ok, empty, torch.tensor([4.7e5, float("inf")], dtype=torch.float64).to(device))
        with pytest.raises(ValueError, match="clock must be a finite time"):
            enc(ok, mask, float("inf"))
        with pytest.raises(TypeError, match="clock must be a number"):
            enc(ok, mask, True)
        # float16: a lift that overflows is refused as the eager path refuses it
        half = TimelineEncoder(8).half().requires_grad_(False).to(device)
        half.lift.weight.data.fill_(6e4)
        with pytest.raises(ValueError, match="beyond what torch.float16 holds"):
            half(ok, mask, clock)
        return True
''')


def test_kernel_matches_eager_in_triton_interpreter():
    interpreter_or_skip()
    result = run_interpreted(CASES + "\nprint('worst', check('cpu'), refusals('cpu'))\n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "worst" in result.stdout


def test_cuda_path_on_meta_makes_no_host_tensor_and_no_sync(monkeypatch):
    """The kernel path's Python (checks, clock, tables, output) on meta tensors: nothing on the host, no sync."""
    if not timeline_triton.HAS_TRITON:
        pytest.skip("triton not importable")
    monkeypatch.setattr(timeline_triton, "KERNEL_DEVICE_TYPES", ("cuda", "meta"))
    calls = []
    original = timeline_triton.maybe_encode
    monkeypatch.setattr(timeline_triton, "maybe_encode", lambda *a: calls.append(original(*a)) or calls[-1])
    cases = [
        ({"dim": 64}, "tensor"),
        ({"dim": 32, "components": ("gap", "periodic"), "timezone": "America/New_York", "harmonics": 2}, 1.7e9),
        ({"dim": 16, "components": ("absolute", "gap")}, None),
    ]
    for kwargs, clock in cases:
        with torch.device("meta"):
            enc = TimelineEncoder(**kwargs).requires_grad_(False)
        times = torch.empty(4, 50, device="meta", dtype=torch.float64)
        mask = torch.empty(4, 50, device="meta", dtype=torch.bool)
        args = [times, mask]
        if clock == "tensor":
            args.append(torch.empty(4, device="meta", dtype=torch.float64))
        elif clock is not None:
            args.append(clock)
        calls.clear()
        with NoHostWork() as mode:
            out = enc(*args)
        assert calls and calls[0] is not None, "the kernel path was not taken"
        assert not mode.violations, mode.violations
        assert out.shape == (4, 50, kwargs["dim"]) and out.device.type == "meta" and mode.ops


def test_calls_it_does_not_cover_keep_the_eager_path(monkeypatch):
    if not timeline_triton.HAS_TRITON:
        pytest.skip("triton not importable")
    monkeypatch.setattr(timeline_triton, "KERNEL_DEVICE_TYPES", ("cpu",))  # only the configuration decides here
    times = torch.zeros(1, 3)
    assert timeline_triton.applies(TimelineEncoder(8).requires_grad_(False), times)
    assert timeline_triton.applies(TimelineEncoder(8, components=("gap", "absolute")).half(), times)
    for kwargs in ({"components": ("absolute", "time2vec")}, {"components": ("absolute", "gap_bucket")},
                   {"combine": "concat", "components": ("absolute", "gap")}):
        assert not timeline_triton.applies(TimelineEncoder(8, **kwargs).requires_grad_(False), times)
    assert not timeline_triton.applies(TimelineEncoder(8, components=("absolute",)).double(), times)
    assert not timeline_triton.applies(TimelineEncoder(8), times)  # the lift's weight wants a gradient
    with torch.no_grad():
        assert timeline_triton.applies(TimelineEncoder(8), times)
    assert not timeline_triton.applies(TimelineEncoder(8).requires_grad_(False), times.requires_grad_())
    monkeypatch.setenv("OMNIPOS_DISABLE_TRITON", "1")
    assert not timeline_triton.applies(TimelineEncoder(8).requires_grad_(False), torch.zeros(1, 3))


def _cuda(script_function):
    pytest.importorskip("triton")
    namespace: dict = {}
    exec(CASES, namespace)
    return namespace[script_function]("cuda")


@pytest.mark.gpu
def test_kernel_matches_eager_on_cuda():
    assert _cuda("check") <= 1e-5


@pytest.mark.gpu
def test_kernel_refusals_on_cuda():
    assert _cuda("refusals")


@pytest.mark.gpu
@pytest.mark.parametrize("kwargs", [{"dim": 64}, {"dim": 32, "components": ("gap", "periodic", "absolute"),
                                                  "timezone": "Europe/Paris", "harmonics": 2}])
def test_cuda_graph_capture_and_replay_equal_eager(kwargs):
    """Capture the encoder in a CUDA graph, change the inputs in place, replay: the eager numbers each time."""
    enc = TimelineEncoder(**kwargs).cuda().requires_grad_(False)
    g = torch.Generator(device="cuda").manual_seed(0)

    def fill(times, mask, clock):
        times.copy_(torch.cumsum(torch.rand(times.shape, device="cuda", generator=g, dtype=torch.float64), 1))
        lengths = torch.randint(0, times.shape[1] + 1, (times.shape[0],), device="cuda", generator=g)
        mask.copy_(torch.arange(times.shape[1], device="cuda") < lengths[:, None])
        clock.copy_(4.7e5 + torch.rand(clock.shape, device="cuda", generator=g, dtype=torch.float64) * 1e4)

    times = torch.empty(8, 64, device="cuda", dtype=torch.float64)
    mask = torch.empty(8, 64, device="cuda", dtype=torch.bool)
    clock = torch.empty(8, device="cuda", dtype=torch.float64)
    fill(times, mask, clock)
    graph, out = captured(lambda: enc(times, mask, clock))
    for _ in range(3):
        fill(times, mask, clock)
        graph.replay()
        assert torch.equal(out, enc(times, mask, clock))


def test_cpu_summed_path_keeps_the_leading_axes():
    """[..., L] -> [..., L, dim] on the CPU's summed-blocks path too (it returned [rows, L, dim]: found by the kernel
    tests, which compare shapes)."""
    enc = TimelineEncoder(12, components=("absolute", "gap")).requires_grad_(False)
    times = torch.cumsum(torch.rand(2, 3, 5, dtype=torch.float64), -1)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[1, 2, 3:] = False
    out = enc(times, mask)
    assert out.shape == (2, 3, 5, 12)
    assert torch.equal(out[1, 2], enc(times[1, 2:3], mask[1, 2:3])[0])


@pytest.mark.parametrize("variant", ["all, New York, mask, checks", "gap first, fixed zone, no mask, bf16 out"])
def test_kernel_compiles_for_hopper(variant):
    """The device branch (libdevice's exact fmod and log1p, no FMA contraction: the eager path rounds each product
    and each sum) lowers to sm_90 PTX; Triton's interpreter runs the other branch."""
    if not timeline_triton.HAS_TRITON:
        pytest.skip("triton not importable")
    from support.triton_compile import compile_for

    all_parts = variant.startswith("all")
    f64 = "*fp64"
    types = dict(t_ptr=f64, m_ptr="*u8", c_ptr=f64, o_ptr="*fp32" if all_parts else "*bf16", flag_ptr="*i32",
                 cyc_ptr=f64, gcyc_ptr=f64, per_ptr=f64, pmod_ptr=f64, tzt_ptr=f64, tzo_ptr=f64, w_ptr="*fp32",
                 scr_ptr=f64, L="i32", L_BLOCKS="i32", t_sr="i32", m_sr="i32", c_sr="i32", o_sr="i32", w_sd="i32",
                 w_sk="i32", T="i32", gap_scale="fp64", log_gap_scale="fp64", clock_scalar="fp64")
    dim = 64 if all_parts else 16  # (a smaller tile compiles faster)
    constexprs = dict(DIM=dim, HALF=dim // 2, BLOCK_L=64, BLOCK_HALF=dim // 2, ABS_AT=0 if all_parts else 1, PER_AT=1 if all_parts
                      else 2, GAP_AT=2 if all_parts else 0, HAS_PER=True, HAS_GAP=True, P=2,
                      H=1 if all_parts else 2, HAS_MASK=all_parts, CLOCK_MODE=1 if all_parts else 2,
                      TZ_STEPS=9 if all_parts else 0, CHECK=all_parts, CHECK_F16=False, LIBDEVICE=True,
                      GAP_SLOTS=1, SLOTS=1 + (4 if all_parts else 8))
    ptx = compile_for(timeline_triton._timeline_kernel, types, constexprs, enable_fp_fusion=False)
    assert ".entry _timeline_kernel" in ptx
    assert "fma.rn.f32" not in ptx and "sin.approx" not in ptx and "cos.approx" not in ptx
    # the per-event float64 work (two remainders and a division per period) is done once per event, not again by
    # each thread holding the event's row of a tile (a program holds 64 events, 128 threads: <= 1 event a thread)
    assert ptx.count("div.rn.f64") <= 2 * 2, ptx.count("div.rn.f64")
