"""The registered op ``torch.ops.omnipos.rope_qk`` (the fused rotation): opcheck on CPU tensors (and on the Triton
kernel under its interpreter), its CPU arithmetic against the module, and torch.compile(fullgraph=True,
dynamic=True) of an attention block across lengths with no graph break and no recompile."""

import textwrap

import pytest
import torch
from support.triton_interpreter import run_interpreted
from torch import nn

from omnipos.core import RotaryEmbedding, rope_kernels

rope_triton = pytest.importorskip("omnipos.core.rope_triton")
op = torch.ops.omnipos.rope_qk.default


def _args(rope, q, k, positions, seq_axis, sign=1.0):
    turns, axis = rope_triton.device_tables(rope.frequencies(positions), getattr(rope, "slot_axis", None), q.device)
    return (q, k, positions, turns, axis, seq_axis, rope.rotary_dim, rope.layout == "interleaved",
            rope.position_axes is not None, float(rope.attention_factor), sign)


def _cases():
    g = torch.Generator().manual_seed(3)
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    return [
        (RotaryEmbedding(32), (2, 4, 10, 32), (2, 2, 10, 32), 2, torch.arange(10)),
        (RotaryEmbedding(32, layout="interleaved"), (2, 4, 10, 32), None, 2, torch.arange(20).view(2, 10) * 7),
        (RotaryEmbedding(48, rotary_dim=16, scaling=yarn), (2, 10, 4, 48), (2, 10, 1, 48), 1,
         torch.rand(2, 10, generator=g, dtype=torch.float64) * 300),
        (RotaryEmbedding(32, mrope_section=(4, 6, 6)), (2, 4, 10, 32), (2, 2, 10, 32), 2,
         torch.randint(0, 300, (3, 2, 10), generator=g).permute(1, 2, 0)),
        (RotaryEmbedding(24, n_axes=3, axes_dims=(4, 6, 10), rotary_dim=20, layout="interleaved"), (1, 2, 12, 24),
         (1, 2, 12, 24), 2, torch.randint(0, 9, (12, 3), generator=g)),
    ]


@pytest.mark.parametrize("case", range(5))
def test_opcheck_on_cpu(case):
    rope, qs, ks, seq_axis, positions = _cases()[case]
    g = torch.Generator().manual_seed(case)
    q = torch.randn(qs, generator=g, requires_grad=True)
    k = None if ks is None else torch.randn(ks, generator=g, requires_grad=True)
    torch.library.opcheck(op, _args(rope, q, k, positions, seq_axis))


@pytest.mark.parametrize("case", range(5))
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-6), (torch.bfloat16, 1e-2)])
def test_cpu_kernel_is_the_module_rotation(case, dtype, tol):
    """The op's arithmetic (phases in float64 turns, float32 sin/cos and products) equals the module's eager
    rotation within an ulp, for q and k and GQA; its backward is the rotation the other way (|R q|^2 / 2 -> q)."""
    rope, qs, ks, seq_axis, positions = _cases()[case]
    g = torch.Generator().manual_seed(10 + case)
    q = torch.randn(qs, generator=g).to(dtype)
    k = q if ks is None else torch.randn(ks, generator=g).to(dtype)
    seq_dim = seq_axis - q.ndim
    want = rope(q, k, positions, seq_dim=seq_dim)
    got = op(*_args(rope, q, k, positions, seq_axis))
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert ((a.float() - b.float()).abs() / (1 + b.float().abs())).max().item() <= tol
    if dtype == torch.float32:
        qg = q.clone().requires_grad_()
        (out,) = op(*_args(rope, qg, None, positions, seq_axis))
        (grad,) = torch.autograd.grad(out, qg, out.detach())
        expected = q.clone()
        expected[..., :rope.rotary_dim] *= rope.attention_factor ** 2
        torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-5)


class Attention(nn.Module):
    """A small attention block with omnipos RoPE (GQA: 4 query heads, 2 key/value heads)."""

    def __init__(self, width=64, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, width // heads
        self.q = nn.Linear(width, width, bias=False)
        self.kv = nn.Linear(width, 2 * kv_heads * self.head_dim, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.rope = RotaryEmbedding(self.head_dim)

    def forward(self, x, positions):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = self.rope(q, k, positions)
        k = k.repeat_interleave(self.heads // self.kv_heads, 1)
        v = v.repeat_interleave(self.heads // self.kv_heads, 1)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, -1))


@pytest.mark.parametrize("through_op", [False, True], ids=["cpu-path", "registered-op"])
def test_compiled_attention_block_no_graph_break_no_recompile(monkeypatch, through_op):
    """fullgraph=True (a graph break is an error), dynamic=True, three lengths, recompiles an error; outputs equal
    eager. ``registered-op``: the CPU is made a kernel device, so the compiled block calls torch.ops.omnipos.rope_qk
    exactly as a CUDA model does (and the eager reference is the op's arithmetic, within an ulp of the module's)."""
    import torch._dynamo
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    torch.manual_seed(0)
    block = Attention().eval()
    seen = []

    def inductor(gm, example_inputs):  # inductor, recording what the graph calls
        seen.extend(str(node.target) for node in gm.graph.nodes)
        return compile_fx(gm, example_inputs)

    compiled = torch.compile(block, fullgraph=True, dynamic=True, backend=inductor)
    lengths = (12, 29, 50)
    with torch.no_grad():
        eager = [block(torch.randn(2, n, 64, generator=torch.Generator().manual_seed(n)), torch.arange(n) + 3)
                 for n in lengths]
        if through_op:
            monkeypatch.setattr(rope_kernels, "KERNEL_DEVICE_TYPES", ("cpu",))
        for i, n in enumerate(lengths):
            x = torch.randn(2, n, 64, generator=torch.Generator().manual_seed(n))
            with torch._dynamo.config.patch(error_on_recompile=i > 0):
                got = compiled(x, torch.arange(n) + 3)
            torch.testing.assert_close(got, eager[i], rtol=1e-5, atol=1e-5)
    assert ("omnipos.rope_qk" in seen) == through_op, seen
    torch._dynamo.reset()


TRITON_OPCHECK = textwrap.dedent('''
    import torch
    from omnipos.core import RotaryEmbedding, rope_triton
    op = torch.ops.omnipos.rope_qk.default
    g = torch.Generator().manual_seed(0)
    for rope, qs, ks, pos in ((RotaryEmbedding(16), (1, 2, 5, 16), (1, 1, 5, 16), torch.arange(5)),
                              (RotaryEmbedding(16, mrope_section=(2, 3, 3)), (1, 2, 5, 16), None,
                               torch.randint(0, 50, (5, 3), generator=g))):
        q = torch.randn(qs, generator=g, requires_grad=True)
        k = None if ks is None else torch.randn(ks, generator=g, requires_grad=True)
        turns, axis = rope_triton.device_tables(rope.inv_freq, getattr(rope, "slot_axis", None), q.device)
        args = (q, k, pos, turns, axis, 2, 16, False, rope.position_axes is not None, 1.0, 1.0)
        torch.library.opcheck(op, args)
        got = op(*args)
        want = rope_triton._rope_qk_torch(*args)
        assert all((a - b).abs().max().item() <= 2e-6 for a, b in zip(got, want))
    # compiled as a CUDA model is (the CPU made a kernel device): the graph calls the op, which runs the kernel
    import torch._dynamo
    from omnipos.core import rope_kernels
    rope_kernels.KERNEL_DEVICE_TYPES = ("cpu",)
    launches = []
    launch = rope_triton._launch
    rope_triton._launch = lambda *a, **k: launches.append(1) or launch(*a, **k)
    rope = RotaryEmbedding(32, mrope_section=(4, 6, 6))
    f = torch.compile(lambda q, k, p: rope(q, k, p), fullgraph=True, dynamic=True)
    for n in (5, 9, 14):
        q, k = torch.randn(2, 4, n, 32, generator=g), torch.randn(2, 2, n, 32, generator=g)
        p = torch.randint(0, 300, (2, n, 3), generator=g)
        with torch._dynamo.config.patch(error_on_recompile=n != 5):
            got = f(q, k, p)
        want = rope(q, k, p)  # eager: the kernel too
        assert all(((a - b).abs() / (1 + b.abs())).max().item() <= 2e-6 for a, b in zip(got, want)), n
    assert len(launches) == 6, launches
    print("ok")
''')


def test_opcheck_of_the_triton_kernel_under_the_interpreter():
    """The op runs the Triton kernel on CPU tensors when TRITON_INTERPRET=1: opcheck it there."""
    if not rope_triton.HAS_TRITON:
        pytest.skip("triton not importable")
    result = run_interpreted(TRITON_OPCHECK)
    if result.returncode and "active drivers" in result.stderr and "interpret" not in result.stderr.lower():
        pytest.skip("Triton's interpreter cannot run here")
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


PLAN_CASES = textwrap.dedent('''
    import torch
    from omnipos.core import RotaryEmbedding, rope_kernels, rope_triton
    rope_kernels.KERNEL_DEVICE_TYPES = ("cpu",)  # the kernel path on CPU tensors, through Triton's interpreter
    g = torch.Generator().manual_seed(7)
    cases = [
        # (module, q shape, k shape, seq_dim, positions): HF position_ids [B, S] against q [B, H, S, D] are read
        # with a row divisor (no copy); decode offsets per row; flash layout; M-RoPE ids permuted from [3, B, S]
        (RotaryEmbedding(32), (3, 4, 6, 32), (3, 2, 6, 32), -2, torch.randint(0, 5000, (3, 6), generator=g)),
        (RotaryEmbedding(32, layout="interleaved"), (4, 4, 1, 32), (4, 1, 1, 32), -2,
         torch.randint(0, 5000, (4, 1), generator=g)),
        (RotaryEmbedding(48, rotary_dim=16), (2, 7, 4, 48), (2, 7, 1, 48), 1, torch.arange(14).view(2, 7)),
        (RotaryEmbedding(32, mrope_section=(4, 6, 6)), (2, 4, 5, 32), (2, 2, 5, 32), -2,
         torch.randint(0, 300, (3, 2, 5), generator=g).permute(1, 2, 0)),
        (RotaryEmbedding(32), (2, 4, 5, 32), (2, 2, 5, 32), -2, None),
        (RotaryEmbedding(32, mrope_section=(4, 6, 6)), (1, 2, 5, 32), (1, 2, 5, 32), -2, None),
    ]
    planned = 0
    for rope, qs, ks, seq_dim, pos in cases:
        q, k = torch.randn(qs, generator=g), torch.randn(ks, generator=g)
        first = rope(q, k, pos, seq_dim=seq_dim)           # checked, launched, plan kept
        planned += len(rope.__dict__.get("_plans", {}))
        again = rope(q.clone(), k.clone(), pos, seq_dim=seq_dim)   # the plan: no checks, the same launch
        p = torch.arange(qs[seq_dim]) if pos is None else pos
        if pos is None and rope.mrope_section is not None:
            p = p[:, None].expand(-1, 3)
        direct = rope_triton.rotate_qk(q, k, p, rope.inv_freq, seq_axis=seq_dim % q.ndim,
                                       rotary_dim=rope.rotary_dim, interleaved=rope.layout == "interleaved",
                                       slot_axis=getattr(rope, "slot_axis", None))
        rope_kernels.KERNEL_DEVICE_TYPES = ()
        eager = rope(q, k, pos, seq_dim=seq_dim)
        rope_kernels.KERNEL_DEVICE_TYPES = ("cpu",)
        for a, b, c, e in zip(first, again, direct, eager):
            assert torch.equal(a, b) and torch.equal(a, c)
            assert ((a - e).abs() / (1 + e.abs())).max().item() <= 2e-6
        # q alone (rotate): its own plan in the same cache, the bits of the q+k launch's q
        alone = rope.rotate(q, pos, seq_dim=seq_dim)
        assert len(rope._plans) == 2, rope._plans.keys()
        alone_again = rope.rotate(q.clone(), pos, seq_dim=seq_dim)
        assert torch.equal(alone, first[0]) and torch.equal(alone_again, first[0])
        kq = rope.rotate(k, pos, seq_dim=seq_dim)  # another signature: checked, planned, equal k's rotation
        assert torch.equal(kq, first[1])
    assert planned == len(cases), planned
    print("ok")
''')


def test_launch_plans_give_the_checked_calls_bits_under_the_interpreter():
    """The second call of a signature skips the checks and launches from its plan (positions read in place,
    [B, S] ids against [B, H, S, D] through a row divisor): the same bits as the first call and as rotate_qk;
    q alone (``rotate``) has its plan in the same cache and gives the q+k launch's bits."""
    if not rope_triton.HAS_TRITON:
        pytest.skip("triton not importable")
    result = run_interpreted(PLAN_CASES)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


def test_a_new_signature_is_checked_again(monkeypatch):
    """Plans are per signature: another shape goes through every check (and a bad one is refused)."""
    monkeypatch.setattr(rope_kernels, "KERNEL_DEVICE_TYPES", ("meta",))
    rope = RotaryEmbedding(32).to("meta")
    q, k = torch.empty(1, 4, 6, 32, device="meta"), torch.empty(1, 2, 6, 32, device="meta")
    positions = torch.empty(6, device="meta", dtype=torch.long)
    rope(q, k, positions)
    rope(q, k, positions)
    assert len(rope._plans) == 1
    with pytest.raises(ValueError, match="do not fit"):
        rope(q, k, torch.empty(7, device="meta", dtype=torch.long))
    with pytest.raises(ValueError, match="head dim"):
        rope(q, torch.empty(1, 2, 6, 16, device="meta"), positions)
    rope.to("meta")
    assert "_plans" not in rope.__dict__


def _rotation_f64(x, positions, inv_freq, rotary_dim, interleaved, factor, sign=1.0):
    """The float64 formula of one tensor [B, H, S, D] (positions [S] or [B, S]): pairs turned by sign * theta,
    scaled by the attention factor; channels past rotary_dim unchanged."""
    theta = positions.double()[..., None] * inv_freq.double()  # [(B,) S, R/2]
    if theta.ndim == 3:
        theta = theta[:, None]
    c, s = theta.cos() * factor, theta.sin() * factor * sign
    x = x.double()
    if interleaved:
        x1, x2 = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        rotated = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), -1).flatten(-2)
    else:
        x1, x2 = x[..., :rotary_dim // 2], x[..., rotary_dim // 2:rotary_dim]
        rotated = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)
    return torch.cat((rotated, x[..., rotary_dim:]), -1)


GRAD_CASES = [
    # (module kwargs, q shape, k shape, positions)
    ({"dim": 16}, (1, 3, 5, 16), (1, 1, 5, 16), torch.arange(5) + 3),
    ({"dim": 24, "rotary_dim": 16, "layout": "interleaved"}, (1, 2, 4, 24), (1, 1, 4, 24),
     torch.tensor([[7, 8, 9, 4000]])),
    ({"dim": 16, "scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}},
     (2, 2, 3, 16), None, torch.tensor([[0, 1, 2], [30, 31, 32]])),
]


@pytest.mark.parametrize("case", range(len(GRAD_CASES)))
def test_gradcheck_of_the_op_in_double_on_the_cpu(case):
    """torch.autograd.gradcheck (and gradgradcheck) of torch.ops.omnipos.rope_qk on float64 CPU tensors: its
    registered backward (the op again with the sign flipped, q and k in one call) is the Jacobian's transpose; and
    the gradient equals the float64 formula of R^T g (attention factor included, pass-through channels: g)."""
    kwargs, qs, ks, positions = GRAD_CASES[case]
    rope = RotaryEmbedding(**kwargs)
    g = torch.Generator().manual_seed(case)
    q = torch.randn(qs, generator=g, dtype=torch.float64, requires_grad=True)
    k = None if ks is None else torch.randn(ks, generator=g, dtype=torch.float64, requires_grad=True)
    args = _args(rope, q, k, positions, 2)
    inputs = (q,) if k is None else (q, k)

    def f(*tensors):
        return tuple(op(tensors[0], tensors[1] if k is not None else None, *args[2:]))

    assert torch.autograd.gradcheck(f, inputs)
    assert torch.autograd.gradgradcheck(f, inputs, fast_mode=True)
    grads = [torch.randn(t.shape, generator=g, dtype=torch.float64) for t in inputs]
    got = torch.autograd.grad(f(*inputs), inputs, grads)
    for grad, gout in zip(got, grads):
        want = _rotation_f64(gout, positions, rope.inv_freq, rope.rotary_dim, rope.layout == "interleaved",
                             rope.attention_factor, sign=-1.0)
        torch.testing.assert_close(grad, want, rtol=1e-12, atol=1e-12)


FUSED_BACKWARD = textwrap.dedent('''
    import torch
    from omnipos.core import RotaryEmbedding, rope_kernels, rope_triton
    exec(FORMULA)

    def check(device, tol):
        saved = rope_kernels.KERNEL_DEVICE_TYPES, rope_triton._launch
        if device == "cpu":  # the CUDA path on CPU tensors: the Triton kernel, interpreted
            rope_kernels.KERNEL_DEVICE_TYPES = ("cpu",)
        launches = []
        rope_triton._launch = lambda grid, *a, **kw: launches.append(grid) or saved[1](grid, *a, **kw)
        try:
            g = torch.Generator().manual_seed(0)
            worst = 0.0
            for kwargs, qs, ks, pos in CASES:
                rope = RotaryEmbedding(**kwargs).to(device)
                pos = pos.to(device)
                q = torch.randn(qs, generator=g).to(device).requires_grad_()
                k = None if ks is None else torch.randn(ks, generator=g).to(device).requires_grad_()
                for through_op in (False, True):  # the module's eager autograd, then the registered op's
                    del launches[:]
                    if through_op:
                        turns, axis = rope_triton.device_tables(rope.inv_freq, None, q.device)
                        outs = torch.ops.omnipos.rope_qk(q, k, pos, turns, axis, 2, rope.rotary_dim,
                                                         rope.layout == "interleaved", False, rope.attention_factor,
                                                         1.0)
                    else:
                        outs = (rope.rotate(q, pos),) if k is None else rope(q, k, pos)
                    assert len(launches) == 1, ("forward", launches)
                    inputs = (q,) if k is None else (q, k)
                    grads = [torch.randn(t.shape, generator=g).to(device) for t in inputs]
                    got = torch.autograd.grad(outs, inputs, grads)
                    assert len(launches) == 2, ("backward: one launch for q and k", launches)
                    assert launches[1] == launches[0], launches  # the same programs: q's and k's grads together
                    for grad, gout in zip(got, grads):
                        want = rotation_f64(gout, pos, rope.inv_freq, rope.rotary_dim, rope.layout == "interleaved",
                                            rope.attention_factor, sign=-1.0)
                        err = ((grad.double() - want).abs() / (1 + want.abs())).max().item()
                        worst = max(worst, err)
                        assert err <= tol, (kwargs, through_op, err)
            return worst
        finally:
            rope_kernels.KERNEL_DEVICE_TYPES, rope_triton._launch = saved
''')


def _fused_backward_script() -> str:
    import inspect

    formula = inspect.getsource(_rotation_f64).replace("def _rotation_f64", "def rotation_f64")
    return f"import torch\nFORMULA = {formula!r}\nCASES = {_grad_cases_source()}\n" + FUSED_BACKWARD


def test_fused_backward_is_one_launch_turning_the_other_way_under_the_interpreter():
    """The backward of the kernel path (the module's autograd and the registered op's) is the same Triton kernel with
    the sign flipped: one launch for both q's and k's gradients, equal to the float64 formula of R^T g (float32
    products: within 2e-6)."""
    if not rope_triton.HAS_TRITON:
        pytest.skip("triton not importable")
    result = run_interpreted(_fused_backward_script() + "\nprint('ok', check('cpu', 2e-6))\n")
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


@pytest.mark.gpu
def test_fused_backward_is_one_launch_on_cuda():
    """The same on a GPU (float32 inputs): one launch forward, one backward for q and k, R^T g within 2e-6."""
    if not rope_triton.HAS_TRITON:
        pytest.skip("triton not importable")
    namespace: dict = {}
    exec(_fused_backward_script(), namespace)  # noqa: S102 (this file's own script)
    assert namespace["check"]("cuda", 2e-6) <= 2e-6


def _grad_cases_source() -> str:
    """GRAD_CASES as source for the interpreter's process."""
    rows = []
    for kwargs, qs, ks, positions in GRAD_CASES:
        rows.append(f"({kwargs!r}, {qs!r}, {ks!r}, torch.tensor({positions.tolist()!r}))")
    return "[" + ", ".join(rows) + "]"
