"""The CUDA path of RotaryEmbedding is capture-safe: run its Python on meta tensors under a dispatch mode that records
every op and fails on any host tensor created or copied to the device, and on any host sync.

The kernel path is chosen by device type (``rope_kernels.KERNEL_DEVICE_TYPES``, ``("cuda",)``); the tests add
``"meta"`` so the very code CUDA tensors run takes meta tensors: shapes, strides, allocations and the small table
ops run, the launch does not (meta tensors hold no data). A CUDA graph capture fails on exactly what is asserted
absent here (a CPU tensor copied to the device, ``.item()``, ``nonzero``).
"""

import pytest
import torch
from support.cuda_graphs import captured
from support.host_work import NoHostWork

from omnipos.core import RotaryEmbedding, rope_kernels

rope_triton = pytest.importorskip("omnipos.core.rope_triton")
if not rope_triton.HAS_TRITON:
    pytest.skip("triton not importable", allow_module_level=True)


@pytest.fixture
def meta_is_a_kernel_device(monkeypatch):
    monkeypatch.setattr(rope_kernels, "KERNEL_DEVICE_TYPES", ("cuda", "meta"))
    calls = []
    original = rope_triton._rotate
    monkeypatch.setattr(rope_triton, "_rotate", lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


def _run(rope, q, k, *, warm=True, **kwargs):
    if warm:  # the first call on a device builds the tables there (from the module's constants on that device)
        rope(q, k, **kwargs)
    with NoHostWork() as mode:
        out = rope(q, k, **kwargs)
    assert not mode.violations, mode.violations
    return out, mode.ops


M = "meta"


def _qk(q_shape, k_shape, dtype=torch.bfloat16):
    return torch.empty(q_shape, device=M, dtype=dtype), torch.empty(k_shape, device=M, dtype=dtype)


CASES = [
    # (module kwargs, q shape, k shape, seq_dim, positions factory)
    ("default positions", {"dim": 128}, (2, 32, 17, 128), (2, 8, 17, 128), -2, None),
    ("positions [seq]", {"dim": 64}, (1, 4, 9, 64), (1, 2, 9, 64), -2, lambda: torch.arange(9, device=M)),
    ("position_ids [batch, seq]", {"dim": 64, "layout": "interleaved"}, (3, 4, 9, 64), (3, 4, 9, 64), -2,
     lambda: torch.empty(3, 9, device=M, dtype=torch.long)),
    ("decode: offsets per row [batch, 1]", {"dim": 128, "base": 5e5}, (4, 32, 1, 128), (4, 8, 1, 128), -2,
     lambda: torch.empty(4, 1, device=M, dtype=torch.long)),
    ("float32 positions", {"dim": 32}, (1, 2, 5, 32), (1, 2, 5, 32), -2,
     lambda: torch.empty(5, device=M, dtype=torch.float32)),
    ("partial rotary, flash layout", {"dim": 48, "rotary_dim": 16}, (2, 20, 4, 48), (2, 20, 1, 48), 1,
     lambda: torch.empty(2, 20, device=M, dtype=torch.long)),
    ("yarn", {"dim": 64, "scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}},
     (1, 4, 8, 64), (1, 2, 8, 64), -2, lambda: torch.empty(8, device=M, dtype=torch.long)),
    ("dynamic (frequencies of this length, on the device)",
     {"dim": 32, "scaling": {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 16}},
     (1, 2, 40, 32), (1, 2, 40, 32), -2, lambda: torch.empty(40, device=M, dtype=torch.long)),
    ("M-RoPE, default (text) positions", {"dim": 128, "mrope_section": (16, 24, 24)}, (1, 8, 12, 128),
     (1, 2, 12, 128), -2, None),
    ("M-RoPE ids [batch, seq, 3]", {"dim": 128, "mrope_section": (24, 20, 20), "mrope_interleaved": True},
     (2, 8, 12, 128), (2, 2, 12, 128), -2, lambda: torch.empty(2, 12, 3, device=M, dtype=torch.long)),
    ("axial 3-D (HunyuanVideo)", {"dim": 128, "n_axes": 3, "axes_dims": (16, 56, 56), "layout": "interleaved"},
     (1, 4, 30, 128), (1, 4, 30, 128), -2, lambda: torch.empty(30, 3, device=M, dtype=torch.long)),
]


@pytest.mark.parametrize("name,kwargs,q_shape,k_shape,seq_dim,positions", CASES, ids=[c[0] for c in CASES])
def test_kernel_path_makes_no_host_tensor_and_no_sync(meta_is_a_kernel_device, name, kwargs, q_shape, k_shape,
                                                      seq_dim, positions):
    rope = RotaryEmbedding(**kwargs).to(M)
    q, k = _qk(q_shape, k_shape)
    extra = {} if positions is None else {"positions": positions()}
    (qo, ko), ops = _run(rope, q, k, seq_dim=seq_dim, **extra)
    assert meta_is_a_kernel_device, "the kernel path was not taken"
    assert qo.shape == q.shape and ko.shape == k.shape and qo.dtype == q.dtype and qo.device.type == M
    assert ops, "nothing was recorded"


@pytest.mark.parametrize("name,kwargs,q_shape,k_shape,seq_dim,positions", CASES, ids=[c[0] for c in CASES])
def test_q_only_rotation_takes_its_launch_plan_with_no_host_tensor_and_no_sync(meta_is_a_kernel_device, name, kwargs,
                                                                             q_shape, k_shape, seq_dim, positions):
    """rotate(x) (one tensor, no k): the kernel path, and from the second call of a signature its launch plan (kept
    beside the q+k plans under a key of its own): no host tensor, no sync, no check or table op."""
    rope = RotaryEmbedding(**kwargs).to(M)
    q, k = _qk(q_shape, k_shape)
    extra = {} if positions is None else {"positions": positions()}
    rope(q, k, seq_dim=seq_dim, **extra)  # a q+k plan first: the q-only call must not take it
    rope.rotate(q, seq_dim=seq_dim, **extra)
    if rope.scaling.rope_type != "dynamic":  # (length-dependent frequencies: no plan, checked each call)
        assert len(rope._plans) == 2, "the q-only call has its own plan"
    planned = []
    original = rope_triton.run_plan
    rope_triton.run_plan = lambda *a, **kw: planned.append(a[2] is None) or original(*a, **kw)
    try:
        with NoHostWork() as mode:
            out = rope.rotate(q, seq_dim=seq_dim, **extra)
    finally:
        rope_triton.run_plan = original
    assert not mode.violations, mode.violations
    assert out.shape == q.shape and out.dtype == q.dtype and out.device.type == M
    if rope.scaling.rope_type != "dynamic":
        assert planned == [True], "the q-only call did not launch from its plan"
        assert not any("div" in op or "zeros" in op or "_to_copy" in op or "arange" in op for op in mode.ops), mode.ops


def test_packed_sequences_from_cu_seqlens(meta_is_a_kernel_device):
    """flash-attn's varlen layout: q [total, heads, dim], per-document positions from device cu_seqlens."""
    rope = RotaryEmbedding(64).to(M)
    q, k = _qk((23, 8, 64), (23, 2, 64))
    cu = torch.empty(4, device=M, dtype=torch.int32)
    (qo, ko), ops = _run(rope, q, k, seq_dim=0, cu_seqlens=cu)
    assert meta_is_a_kernel_device and qo.shape == q.shape and ko.shape == k.shape
    assert "aten.searchsorted.Tensor" in ops


def test_first_call_on_the_module_device_makes_no_host_tensor(meta_is_a_kernel_device):
    """A module moved to the device holds its constants there: even the call that builds the tables is clean."""
    rope = RotaryEmbedding(64, mrope_section=(8, 12, 12)).to(M)
    q, k = _qk((1, 4, 6, 64), (1, 4, 6, 64))
    _run(rope, q, k, warm=False, positions=torch.empty(6, 3, device=M, dtype=torch.long))


def test_tables_are_built_once_per_device_and_dropped_by_to(meta_is_a_kernel_device):
    rope = RotaryEmbedding(64).to(M)
    q, k = _qk((1, 4, 6, 64), (1, 4, 6, 64))
    positions = torch.empty(6, device=M, dtype=torch.long)
    rope(q, k, positions)
    first = rope._tables[torch.device(M)]
    _, ops = _run(rope, q, k, positions=positions)
    assert rope._tables[torch.device(M)] is first
    assert not any("div" in op or "zeros" in op or "_to_copy" in op for op in ops), ops  # no table work per call
    rope.to(M)
    assert not hasattr(rope, "_tables") or not rope._tables
    rope.float()
    assert not rope.__dict__.get("_tables")


def test_module_left_on_the_cpu_copies_its_constants_once(meta_is_a_kernel_device):
    """Warm-up copies the module's CPU constants to the device once; later calls (a captured step) copy nothing."""
    rope = RotaryEmbedding(64)
    q, k = _qk((1, 4, 6, 64), (1, 4, 6, 64))
    positions = torch.arange(6, device=M)
    with NoHostWork() as mode:
        rope(q, k, positions)
    assert mode.violations, "the first call had to copy the CPU constants: the dispatch mode must see it"
    _run(rope, q, k, warm=False, positions=positions)


def test_dispatch_mode_catches_what_it_must():
    """The recorder is not blind: a CPU tensor copied to the device and an .item() are both reported."""
    with NoHostWork() as mode:
        torch.ones(3).to(M)
    assert any("host tensor" in v for v in mode.violations)
    x = torch.ones(3, device="cpu")
    with NoHostWork() as mode:
        x.sum().item()
    assert any("sync" in v for v in mode.violations)


def test_cuda_graph_breaking_paths_are_not_the_kernel_path():
    """On the CPU (not a kernel device) nothing changes: the eager rotation, the same numbers as before."""
    rope = RotaryEmbedding(32)
    q = torch.randn(1, 2, 5, 32)
    assert torch.equal(rope.rotate(q), rope.rotate(q, torch.arange(5)))


def test_cu_seqlens_gives_per_document_positions_on_the_cpu():
    """The device derivation (searchsorted) gives packed_positions' numbers; bad offsets are refused on the CPU."""
    from omnipos.core import packed_positions

    rope = RotaryEmbedding(16)
    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(12, 3, 16, generator=g), torch.randn(12, 1, 16, generator=g)
    for cu in (torch.tensor([0, 3, 3, 10, 12], dtype=torch.int32), torch.tensor([0, 12])):
        want = rope(q, k, packed_positions(cu.long()), seq_dim=0)
        got = rope(q, k, seq_dim=0, cu_seqlens=cu)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        assert torch.equal(rope.rotate(q, seq_dim=0, cu_seqlens=cu), want[0])
    for bad, words in ((torch.tensor([0, 3, 11]), "end at the packed length 12"),
                       (torch.tensor([1, 3, 12]), "start at 0"), (torch.tensor([0, 5, 3, 12]), "never decrease"),
                       (torch.tensor([0.0, 12.0]), "cu_seqlens must be"), (torch.tensor([[0, 12]]), "1-D")):
        with pytest.raises((ValueError, TypeError), match=words):
            rope(q, k, seq_dim=0, cu_seqlens=bad)
    with pytest.raises(ValueError, match="not both"):
        rope(q, k, torch.arange(12), seq_dim=0, cu_seqlens=torch.tensor([0, 12]))
    with pytest.raises(ValueError, match="1-D positions"):
        RotaryEmbedding(16, n_axes=2)(q, k, seq_dim=0, cu_seqlens=torch.tensor([0, 12]))


def test_caches_stay_behind_in_copies_and_pickles(meta_is_a_kernel_device):
    """deepcopy / torch.save of a module that has run keep no per-device tables, plans or checked signatures."""
    import copy
    import io

    rope = RotaryEmbedding(64).to(M)
    q, k = _qk((1, 4, 6, 64), (1, 4, 6, 64))
    rope(q, k)
    rope(q, k)
    assert {"_tables", "_plans", "_checked", "_aranges"} <= set(rope.__dict__)
    clone = copy.deepcopy(rope)
    assert not {"_tables", "_plans", "_checked", "_aranges"} & set(clone.__dict__)
    assert clone(q, k)[0].shape == q.shape
    cpu = RotaryEmbedding(32)
    x = torch.randn(1, 2, 3, 32)
    cpu(x, x)
    buffer = io.BytesIO()
    torch.save(cpu, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)  # our own object, written just above
    assert "_checked" not in loaded.__dict__ and torch.equal(loaded(x, x)[0], cpu(x, x)[0])


@pytest.mark.gpu
@pytest.mark.parametrize("kwargs,positions", [
    ({"dim": 128, "base": 5e5}, lambda s: torch.arange(s, device="cuda")[None] + 4000),
    ({"dim": 128, "mrope_section": (16, 24, 24)}, lambda s: torch.randint(0, 500, (2, s, 3), device="cuda")),
    ({"dim": 64, "layout": "interleaved", "n_axes": 2}, lambda s: torch.randint(0, 64, (s, 2), device="cuda")),
])
def test_cuda_graph_capture_and_replay_equal_eager(kwargs, positions):
    """Capture q+k rotation and q alone (``rotate``) in a CUDA graph (static tensors), change the inputs in place,
    replay: eager's bits."""
    rope = RotaryEmbedding(**kwargs).cuda()
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 32, 16, rope.dim, device="cuda", generator=g).bfloat16()
    k = torch.randn(2, 8, 16, rope.dim, device="cuda", generator=g).bfloat16()
    pos = positions(16)
    graph, ((qo, ko), qa) = captured(lambda: (rope(q, k, pos), rope.rotate(q, pos)))
    for step in range(3):
        q.copy_(torch.randn(q.shape, device="cuda", generator=g))
        k.copy_(torch.randn(k.shape, device="cuda", generator=g))
        pos.copy_(positions(16) + step)
        graph.replay()
        want = rope(q, k, pos)
        assert torch.equal(qo, want[0]) and torch.equal(ko, want[1])
        assert torch.equal(qa, want[0])


@pytest.mark.gpu
def test_cuda_compiled_through_the_op_no_recompile():
    import torch._dynamo

    torch._dynamo.reset()
    rope = RotaryEmbedding(128, base=5e5).cuda()
    f = torch.compile(lambda q, k, p: rope(q, k, p), fullgraph=True, dynamic=True)
    for i, s in enumerate((16, 40, 97)):
        q = torch.randn(2, 32, s, 128, device="cuda").bfloat16()
        k = torch.randn(2, 8, s, 128, device="cuda").bfloat16()
        p = torch.arange(s, device="cuda")[None] + 7
        with torch._dynamo.config.patch(error_on_recompile=i > 0):
            got = f(q, k, p)
        want = rope(q, k, p)
        for a, b in zip(got, want):
            assert ((a.float() - b.float()).abs() / (1 + b.float().abs())).max().item() <= 1e-2
    torch._dynamo.reset()


XPOS_CASES = [
    ("xpos interleaved, default positions", {"dim": 64, "layout": "interleaved", "xpos": True, "xpos_center": 8.0},
     (2, 8, 16, 64), (2, 2, 16, 64), None),
    ("xpos half, decode offsets [batch, 1]", {"dim": 128, "xpos": True, "xpos_center": 2048.0}, (4, 32, 1, 128),
     (4, 8, 1, 128), lambda: torch.empty(4, 1, device=M, dtype=torch.long)),
]


@pytest.mark.parametrize("name,kwargs,q_shape,k_shape,positions", XPOS_CASES, ids=[c[0] for c in XPOS_CASES])
def test_xpos_while_capturing_reads_no_value_and_makes_no_host_tensor(monkeypatch, name, kwargs, q_shape, k_shape,
                                                                      positions):
    """xPos on a device (the eager rotation): its zeta table is kept on the device (built once), and while a CUDA graph
    is captured the range check reads nothing. Meta tensors stand for CUDA ones whose values could be read
    (``can_inspect_values`` made true) inside a capture (``rotary._capturing`` made true): an ``.item()`` or a host
    tensor would be reported."""
    from omnipos.core import rotary

    rope = RotaryEmbedding(**kwargs).to(M)
    q, k = _qk(q_shape, k_shape)
    extra = {} if positions is None else {"positions": positions()}
    rope(q, k, **extra)  # warm-up (eager, outside the capture): the zeta table is built on the device
    zeta = rope._xpos_tables[torch.device(M)]
    monkeypatch.setattr(rotary, "can_inspect_values", lambda *tensors: True)
    monkeypatch.setattr(rotary, "_capturing", lambda t: True)
    with NoHostWork() as mode:
        qo, ko = rope(q, k, **extra)
    assert not mode.violations, mode.violations
    assert qo.shape == q.shape and ko.shape == k.shape and qo.device.type == M
    assert rope._xpos_tables[torch.device(M)] is zeta
    assert not any("arange" in op for op in mode.ops), mode.ops  # the table is not rebuilt per call
    monkeypatch.setattr(rotary, "_capturing", lambda t: False)
    with NoHostWork() as mode, pytest.raises(RuntimeError, match="item"):  # eager: the range check reads a value
        rope(q, k, **extra)                                             # (meta: none to read: it is attempted)
    assert any("sync" in v for v in mode.violations), "the eager range check must read a value (the test's control)"
    rope.to(M)
    assert not rope.__dict__.get("_xpos_tables")


def test_xpos_range_check_still_refuses_in_eager_mode_on_the_cpu():
    """The capture branch changes nothing outside a capture: positions too far from xpos_center are refused."""
    rope = RotaryEmbedding(8, layout="interleaved", xpos=True)
    q = torch.randn(1, 1, 2, 8)
    with pytest.raises(ValueError, match="xpos_center"):
        rope(q, q, torch.tensor([0, 100_000]))
    assert torch.equal(rope(q, q, torch.arange(2))[0], RotaryEmbedding(8, layout="interleaved", xpos=True)(
        q, q, torch.arange(2))[0])


@pytest.mark.gpu
def test_xpos_cuda_graph_capture_and_replay_equal_eager():
    """xPos (eager rotation) captured in a CUDA graph after warm-up on a side stream; new inputs in place, replay:
    eager's bits."""
    rope = RotaryEmbedding(64, layout="interleaved", xpos=True, xpos_center=2048.0).cuda()
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 8, 16, 64, device="cuda", generator=g).bfloat16()
    k = torch.randn(2, 2, 16, 64, device="cuda", generator=g).bfloat16()
    pos = torch.arange(16, device="cuda")[None].repeat(2, 1) + 2000
    graph, (qo, ko) = captured(lambda: rope(q, k, pos))
    for step in range(3):
        q.copy_(torch.randn(q.shape, device="cuda", generator=g))
        k.copy_(torch.randn(k.shape, device="cuda", generator=g))
        pos.add_(16 * (step + 1))
        graph.replay()
        want = rope(q, k, pos)
        assert torch.equal(qo, want[0]) and torch.equal(ko, want[1])


@pytest.mark.parametrize("k_heads", [2, None], ids=["q+k (GQA)", "q only"])
def test_backward_is_one_kernel_call_with_no_host_tensor_and_no_sync(meta_is_a_kernel_device, k_heads):
    """Forward and backward through the kernel path on meta tensors that require grad: the backward is the same
    kernel once more (``_rotate``: one call for q's and k's gradients together), with no host tensor and no sync."""
    rope = RotaryEmbedding(128, base=5e5).to(M)
    q = torch.empty(2, 8, 16, 128, device=M, dtype=torch.bfloat16, requires_grad=True)
    k = None if k_heads is None else torch.empty(2, k_heads, 16, 128, device=M, dtype=torch.bfloat16,
                                                  requires_grad=True)
    positions = torch.empty(2, 16, device=M, dtype=torch.long)
    call = (lambda: rope.rotate(q, positions)) if k is None else (lambda: rope(q, k, positions))
    call()  # warm-up: tables on the device
    inputs = (q,) if k is None else (q, k)
    del meta_is_a_kernel_device[:]
    with NoHostWork() as mode:
        outs = call()
        outs = (outs,) if k is None else outs
        grads = torch.autograd.grad(outs, inputs, [torch.empty_like(o) for o in outs])
    assert not mode.violations, mode.violations
    assert len(meta_is_a_kernel_device) == 2, "forward and backward: one kernel call each"
    assert all(gr.shape == t.shape and gr.dtype == t.dtype for gr, t in zip(grads, inputs))
