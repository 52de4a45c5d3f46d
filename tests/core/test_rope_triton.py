"""The fused Triton kernel vs the eager path: on CPU through Triton's interpreter, on CUDA for real (gpu)."""

import textwrap

import pytest
import torch
from support.triton_interpreter import interpreter_or_skip, run_interpreted

from omnipos.core import RotaryEmbedding

CASES = textwrap.dedent('''
    import torch
    from omnipos.core import RotaryEmbedding
    from omnipos.core import rope_triton

    def maybe_rotate(rope, q, k, pos, seq_axis):
        slot_axis = getattr(rope, "slot_axis", None)
        return rope_triton.maybe_rotate(q, k, pos, rope.frequencies(pos).to(q.device), seq_axis=seq_axis,
                                        rotary_dim=rope.rotary_dim, interleaved=rope.layout == "interleaved",
                                        attention_factor=rope.attention_factor, slot_axis=slot_axis)

    def check(device, dtype, tol):
        g = torch.Generator().manual_seed(0)
        yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
        dynamic = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 16}
        cases = [
            # (module kwargs, q shape, k shape, seq_dim, positions)
            (dict(dim=32), (2, 4, 20, 32), (2, 2, 20, 32), -2, torch.arange(20)),
            (dict(dim=32, layout="interleaved"), (2, 4, 20, 32), (2, 4, 20, 32), -2,
             torch.stack([torch.arange(20), torch.arange(20) + 1000])),
            (dict(dim=48, rotary_dim=16), (2, 20, 4, 48), (2, 20, 1, 48), 1, torch.arange(20) + 5),
            (dict(dim=24, layout="interleaved", rotary_dim=12, scaling=yarn), (3, 9, 2, 24), (3, 9, 2, 24), 1,
             torch.rand(3, 9, generator=g, dtype=torch.float64) * 300),
            (dict(dim=16, scaling=dynamic), (1, 2, 40, 16), (1, 2, 40, 16), -2, torch.arange(40)),
            (dict(dim=40, layout="interleaved", n_axes=2, rotary_dim=32), (2, 3, 12, 40), (2, 3, 12, 40), -2,
             torch.stack(torch.meshgrid(torch.arange(3), torch.arange(4), indexing="ij"), -1).reshape(12, 2)),
            (dict(dim=16), (17, 3, 16), (17, 3, 16), 0,
             torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 6])),
            # 3-D RoPE with unequal per-axis dims (HunyuanVideo's rope_dim_list), partial
            (dict(dim=24, n_axes=3, axes_dims=(4, 6, 10), rotary_dim=20, layout="interleaved"), (1, 2, 12, 24),
             (1, 2, 12, 24), -2, torch.randint(0, 9, (12, 3), generator=g)),
            # M-RoPE, contiguous sections (Qwen2-VL), GQA, ids given HF-style [3, batch, seq] and permuted: the
            # coordinate axis is not contiguous
            (dict(dim=32, mrope_section=(4, 6, 6)), (2, 4, 10, 32), (2, 2, 10, 32), -2,
             torch.randint(0, 300, (3, 2, 10), generator=g).permute(1, 2, 0)),
            # M-RoPE, interleaved sections (Qwen3-VL), flash-attn layout, real-valued ids
            (dict(dim=32, mrope_section=(6, 5, 5), mrope_interleaved=True), (2, 10, 4, 32), (2, 10, 1, 32), 1,
             torch.rand(2, 10, 3, generator=g, dtype=torch.float64) * 500),
        ]
        worst = 0.0
        for kwargs, qs, ks, seq_dim, pos in cases:
            rope = RotaryEmbedding(**kwargs).to(device)
            q = torch.randn(qs, generator=g).to(device=device, dtype=dtype)
            k = torch.randn(ks, generator=g).to(device=device, dtype=dtype)
            pos = pos.to(device)
            seq_axis = seq_dim % q.ndim
            got = maybe_rotate(rope, q, k, pos, seq_axis)
            assert got is not None, "kernel not selected"
            import os
            os.environ["OMNIPOS_DISABLE_TRITON"] = "1"
            want = rope(q, k, pos, seq_dim=seq_dim)
            one = rope.rotate(q, pos, seq_dim=seq_dim)
            del os.environ["OMNIPOS_DISABLE_TRITON"]
            for a, b in zip(got, want):
                assert a.dtype == b.dtype and a.shape == b.shape
                err = ((a.float() - b.float()).abs() / (1 + b.float().abs())).max().item()  # 1 ulp
                worst = max(worst, err)
                assert err <= tol, (kwargs, err)
            alone = maybe_rotate(rope, q, None, pos, seq_axis)[0]
            assert ((alone.float() - one.float()).abs() / (1 + one.float().abs())).max().item() <= tol
            # autograd through the kernel: the backward turns the other way, so grad of |R q|^2 / 2 is a^2 q
            if dtype == torch.float32:
                qg = q.clone().requires_grad_()
                out = maybe_rotate(rope, qg, None, pos, seq_axis)[0]
                (grad,) = torch.autograd.grad(out, qg, out.detach())
                expected = q.clone()
                expected[..., :rope.rotary_dim] *= rope.attention_factor ** 2
                assert ((grad - expected).abs() / (1 + expected.abs())).max().item() < 1e-5
                # double backward: the backward is the kernel again (R^T v), differentiable in v: d<R^T v, w>/dv = R w
                v = torch.randn(out.shape, generator=g).to(device).requires_grad_()
                w = torch.randn(out.shape, generator=g).to(device)
                out = maybe_rotate(rope, qg, None, pos, seq_axis)[0]
                (first,) = torch.autograd.grad(out, qg, v, create_graph=True)
                (second,) = torch.autograd.grad(first, v, w)
                rotated_w = maybe_rotate(rope, w, None, pos, seq_axis)[0]
                assert ((second - rotated_w).abs() / (1 + rotated_w.abs())).max().item() < 1e-5
        return worst

    def tilings_agree(device):
        """Any tiling (positions and heads per program) gives the same bits: each element is computed alone."""
        g = torch.Generator().manual_seed(1)
        for layout, dim, rotary_dim in (("half", 32, 32), ("interleaved", 24, 20), ("interleaved", 40, 40)):
            rope = RotaryEmbedding(dim, layout=layout, rotary_dim=rotary_dim).to(device)
            q = torch.randn(2, 5, 19, dim, generator=g).to(device)
            k = torch.randn(2, 3, 19, dim, generator=g).to(device)
            pos = torch.randint(0, 5000, (2, 19), generator=g).to(device)
            options = dict(seq_axis=2, rotary_dim=rotary_dim, interleaved=layout == "interleaved")
            base = rope_triton.rotate_qk(q, k, pos, rope.frequencies(pos).to(device), **options)
            for block_s, heads in ((4, 1), (32, 2), (16, 3)):
                other = rope_triton.rotate_qk(q, k, pos, rope.frequencies(pos).to(device), block_s=block_s,
                                              heads_per_program=heads, **options)
                assert all(torch.equal(a, b) for a, b in zip(base, other)), (layout, block_s, heads)
            as_float = rope_triton.rotate_qk(q, k, pos.double(), rope.frequencies(pos).to(device), **options)
            assert all(torch.equal(a, b) for a, b in zip(base, as_float)), "integer vs float64 positions"
        return True
''')


def test_kernel_matches_eager_in_triton_interpreter():
    interpreter_or_skip()
    result = run_interpreted(CASES + "\nprint(check('cpu', torch.float32, 2e-6), check('cpu', torch.bfloat16, 1e-2), "
                          "tilings_agree('cpu'))\n")
    assert result.returncode == 0, result.stderr[-3000:]


def test_host_tiling_arithmetic_is_tritons():
    """The launch's sizes come from plain integer arithmetic (Triton's own helpers are jit functions, ~4.5 us a call
    from the host): the same numbers as triton.cdiv / triton.next_power_of_2."""
    triton = pytest.importorskip("triton")
    from omnipos.core import rope_triton

    for a in range(1, 600):
        assert rope_triton._next_power_of_2(a) == triton.next_power_of_2(a)
        for b in (1, 2, 3, 7, 16, 33):
            assert rope_triton._cdiv(a, b) == triton.cdiv(a, b)


def _cuda_check(dtype, tol):
    namespace: dict = {}
    exec(CASES, namespace)
    return namespace["check"]("cuda", dtype, tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-6), (torch.bfloat16, 1e-2), (torch.float16, 2e-3)])
def test_kernel_matches_eager_on_cuda(dtype, tol):
    pytest.importorskip("triton")
    assert _cuda_check(dtype, tol) <= tol


@pytest.mark.gpu
def test_tilings_agree_on_cuda():
    pytest.importorskip("triton")
    namespace: dict = {}
    exec(CASES, namespace)
    assert namespace["tilings_agree"]("cuda")


@pytest.mark.gpu
def test_kernel_is_chosen_automatically_on_cuda(monkeypatch):
    from omnipos.core import rope_triton

    if not rope_triton.HAS_TRITON:
        pytest.skip("triton not importable")
    calls = []
    original = rope_triton.rotate_qk
    monkeypatch.setattr(rope_triton, "rotate_qk", lambda *a, **k: calls.append(1) or original(*a, **k))
    rope = RotaryEmbedding(64).cuda()
    q = torch.randn(2, 8, 128, 64, device="cuda", dtype=torch.bfloat16)
    rope(q, q, torch.arange(128, device="cuda"))
    assert calls


@pytest.mark.gpu
def test_bf16_long_positions_on_cuda():
    rope = RotaryEmbedding(128, base=500000.0).cuda()
    x = torch.randn(2, 4, 256, 128, device="cuda").bfloat16()
    positions = torch.arange(3840, 4096, device="cuda")
    ref = rope.rotate(x.float(), positions)
    out = rope.rotate(x, positions).float()
    assert bool(((out - ref).abs() <= ref.abs() * 2.0**-8 + 1e-30).all())
