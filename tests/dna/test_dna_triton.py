"""The DNA Triton kernels (omnipos.dna.dna_triton) give the eager outputs bit for bit: on the CPU through Triton's
interpreter (the eager reference is then the CPU path), on CUDA for real (gpu); their CUDA path's Python on meta
tensors under a dispatch mode (no host tensor, no sync); reverse_complement and one_hot captured in a CUDA graph and
replayed against eager (gpu)."""

import textwrap

import pytest
import torch
from support.cuda_graphs import captured
from support.host_work import NoHostWork
from support.triton_interpreter import interpreter_or_skip, run_interpreted

from omnipos.dna import PAD, dna_triton, one_hot, reverse_complement

CASES = textwrap.dedent('''
    import os
    import torch
    from omnipos.dna import IUPAC_COMPLEMENT, PAD, TOKENS, complement_tokens, one_hot, reverse_complement
    from omnipos.dna import dna_triton as dt

    def eager(fn, *args, **kwargs):
        os.environ["OMNIPOS_DISABLE_TRITON"] = "1"
        try:
            return fn(*args, **kwargs)
        finally:
            del os.environ["OMNIPOS_DISABLE_TRITON"]

    def kernel(fn, *args, **kwargs):
        calls = []
        originals = dt.one_hot_rows, dt.reverse_complement_rows
        dt.one_hot_rows = lambda *a, **k: calls.append(1) or originals[0](*a, **k)
        dt.reverse_complement_rows = lambda *a, **k: calls.append(2) or originals[1](*a, **k)
        try:
            out = fn(*args, **kwargs)
        finally:
            dt.one_hot_rows, dt.reverse_complement_rows = originals
        assert calls, "the kernel did not run"
        return out

    def same(a, b):
        assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device, (a.dtype, b.dtype, a.shape)
        if a.is_floating_point():  # bit for bit, NaN payloads and signed zeros included
            bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
            return torch.equal(a.view(bits), b.view(bits))
        return torch.equal(a, b)

    def batch(g, rows, length, dtype, device):
        """Every token id (A..V, lowercase, both pads) in ragged rows: pads at the end, rows empty and full."""
        tokens = torch.randint(0, 32, (rows, length), generator=g)
        tokens[tokens == PAD] = 4
        lengths = torch.randint(0, length + 1, (rows,), generator=g)
        lengths[0], lengths[-1] = length, 0
        mask = torch.arange(length) < lengths[:, None]
        padded = torch.where(mask, tokens, torch.full_like(tokens, PAD))
        return padded.to(device=device, dtype=dtype), tokens.to(device=device, dtype=dtype), mask.to(device)

    def check(device):
        dt.KERNEL_DEVICE_TYPES = (device,)
        g = torch.Generator().manual_seed(0)
        # the complement the kernel computes from its 64-bit constant is the alphabet's table
        ids = torch.arange(32, dtype=torch.uint8)
        every = torch.ones(1, 32, dtype=torch.bool, device=device)
        assert same(kernel(reverse_complement, ids.to(device)[None], every).cpu()[0].flip(0), complement_tokens(ids))
        for letter, other in IUPAC_COMPLEMENT.items():
            assert dt.COMPLEMENT_NIBBLES >> 4 * TOKENS.index(letter) & 15 == TOKENS.index(other)
        for rows, length, dtype in ((5, 37, torch.uint8), (5, 37, torch.int64), (4, 9, torch.int32),
                                    (3, 1, torch.uint8), (2, 3000, torch.uint8)):  # 3000: a 2-round length search
            padded, unpadded, mask = batch(g, rows, length, dtype, device)
            for args in ((padded,), (padded, mask), (unpadded, mask)):  # pads: PAD ids, or letters masked out
                assert same(kernel(reverse_complement, *args), eager(reverse_complement, *args)), (length, dtype)
            assert same(kernel(reverse_complement, padded[0]), eager(reverse_complement, padded[0]))
            assert same(kernel(reverse_complement, padded[-1], mask[-1]), eager(reverse_complement, padded[-1],
                                                                              mask[-1]))
        padded, _, mask = batch(g, 5, 37, torch.uint8, device)
        for ambiguity in ("zeros", "fractional"):
            for channel in (False, True):
                for out_dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
                    options = dict(ambiguity=ambiguity, soft_mask_channel=channel, dtype=out_dtype)
                    assert same(kernel(one_hot, padded, **options), eager(one_hot, padded, **options))
                # one-hot reverse complements, the pads holding their own values (noise, NaN, -0.0)
                hot = eager(one_hot, padded, ambiguity=ambiguity, soft_mask_channel=channel)
                noise = torch.randn(hot.shape, generator=g).to(device)
                noise.view(-1)[:3] = torch.tensor([float("nan"), -0.0, float("inf")])
                hot = torch.where(mask[..., None], hot, noise)
                for args in ((hot, mask), (hot,), (hot[1], mask[1])):
                    assert same(kernel(reverse_complement, *args), eager(reverse_complement, *args))
                half = hot.to(torch.bfloat16)
                assert same(kernel(reverse_complement, half, mask), eager(reverse_complement, half, mask))
        # a one-hot batch with a non-contiguous channel axis, and an empty one
        hot = eager(one_hot, batch(g, 3, 8, torch.uint8, device)[0])
        wide = torch.cat([hot, hot], -1)[..., ::2]
        assert same(kernel(reverse_complement, wide), eager(reverse_complement, wide))
        empty = torch.zeros(2, 0, dtype=torch.uint8, device=device)
        assert same(kernel(reverse_complement, empty), eager(reverse_complement, empty))
        assert same(kernel(one_hot, empty), eager(one_hot, empty))
        return True

    def refusals(device):
        """The eager checks still run before the launch: the same errors."""
        import pytest
        dt.KERNEL_DEVICE_TYPES = (device,)
        tokens = torch.tensor([[0, 1, PAD, 2]], dtype=torch.uint8, device=device)
        with pytest.raises(ValueError, match="padding at the end"):
            reverse_complement(tokens)
        with pytest.raises(ValueError, match="padding at the end"):
            reverse_complement(tokens, torch.tensor([[True, False, True, False]], device=device))
        with pytest.raises(ValueError, match="token ids in 0..31"):
            one_hot(torch.tensor([[0, 40]], device=device))
        with pytest.raises(ValueError, match="token ids in 0..31"):
            reverse_complement(torch.tensor([[0, -1]], device=device))
        return True
''')


def test_kernels_equal_eager_in_triton_interpreter():
    interpreter_or_skip()
    result = run_interpreted(CASES + "\nprint('ok', check('cpu'), refusals('cpu'))\n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ok True True" in result.stdout


@pytest.fixture
def meta_is_a_kernel_device(monkeypatch):
    if not dna_triton.HAS_TRITON:
        pytest.skip("triton not importable")
    monkeypatch.setattr(dna_triton, "KERNEL_DEVICE_TYPES", ("cuda", "meta"))
    calls = []
    for name in ("one_hot_rows", "reverse_complement_rows"):
        original = getattr(dna_triton, name)
        monkeypatch.setattr(dna_triton, name, lambda *a, original=original, **k: calls.append(1) or original(*a, **k))
    return calls


@pytest.mark.parametrize("call", [
    lambda t, m: one_hot(t, dtype=torch.bfloat16),
    lambda t, m: one_hot(t, ambiguity="fractional", soft_mask_channel=True),
    lambda t, m: reverse_complement(t),
    lambda t, m: reverse_complement(t, m),
    lambda t, m: reverse_complement(t[0]),
    lambda t, m: reverse_complement(torch.empty(*t.shape, 4, device="meta"), m),
    lambda t, m: reverse_complement(torch.empty(*t.shape, 5, device="meta", dtype=torch.float16)),
], ids=["one_hot", "one_hot fractional 5", "rc tokens", "rc tokens mask", "rc [L]", "rc one-hot mask",
        "rc one-hot 5"])
def test_cuda_path_on_meta_makes_no_host_tensor_and_no_sync(meta_is_a_kernel_device, call):
    tokens = torch.empty(6, 150, device="meta", dtype=torch.uint8)
    mask = torch.empty(6, 150, device="meta", dtype=torch.bool)
    call(tokens, mask)  # warm-up: the one-hot table is made on the device once (cached)
    meta_is_a_kernel_device.clear()
    with NoHostWork() as mode:
        out = call(tokens, mask)
    assert meta_is_a_kernel_device, "the kernel path was not taken"
    assert not mode.violations, mode.violations
    assert out.device.type == "meta"


def test_complement_constant_is_the_alphabets():
    """The kernel's 64-bit complement constant says what the alphabet's complement table says, pads kept."""
    from omnipos.dna import complement_tokens

    ids = torch.arange(32)
    nibbles = torch.tensor([(dna_triton.COMPLEMENT_NIBBLES >> 4 * (int(i) & 15)) & 15 for i in ids])
    from_constant = torch.where(ids % 16 == PAD, ids % 16, nibbles) | (ids & 16)
    assert torch.equal(from_constant, complement_tokens(ids))


def _cuda(name):
    pytest.importorskip("triton")
    namespace: dict = {}
    exec(CASES, namespace)
    return namespace[name]("cuda")


@pytest.mark.gpu
def test_kernels_equal_eager_on_cuda():
    assert _cuda("check")


@pytest.mark.gpu
def test_kernel_refusals_on_cuda():
    assert _cuda("refusals")


@pytest.mark.gpu
def test_cuda_graph_capture_and_replay_equal_eager():
    """reverse_complement (tokens, with and without a mask; one-hot) and one_hot captured, inputs changed in
    place, replayed: the eager outputs each time."""
    g = torch.Generator(device="cuda").manual_seed(0)
    tokens = torch.empty(64, 300, device="cuda", dtype=torch.uint8)
    mask = torch.empty(64, 300, device="cuda", dtype=torch.bool)
    hot = torch.empty(64, 300, 4, device="cuda")

    def fill():
        letters = torch.randint(0, 5, tokens.shape, device="cuda", generator=g, dtype=torch.uint8)
        lengths = torch.randint(0, 301, (64,), device="cuda", generator=g)
        mask.copy_(torch.arange(300, device="cuda") < lengths[:, None])
        tokens.copy_(torch.where(mask, letters, torch.full_like(letters, PAD)))
        hot.copy_(torch.randn(hot.shape, device="cuda", generator=g))

    calls = {"rc": lambda: reverse_complement(tokens), "rc mask": lambda: reverse_complement(tokens, mask),
             "rc one-hot": lambda: reverse_complement(hot, mask), "one_hot": lambda: one_hot(tokens)}
    fill()
    graph, outs = captured(lambda: {name: call() for name, call in calls.items()}, warmups=1)
    for _ in range(3):
        fill()
        graph.replay()
        for name, call in calls.items():
            assert torch.equal(outs[name], call()), name


def test_kernels_compile_for_hopper():
    """Both kernels (tokens and one-hot, with and without a mask: the in-kernel row-length search) lower to sm_90
    PTX, where Triton's interpreter cannot show it."""
    if not dna_triton.HAS_TRITON:
        pytest.skip("triton not importable")
    from support.triton_compile import compile_for

    ptx = compile_for(dna_triton._one_hot_kernel, dict(tok_ptr="*u8", table_ptr="*bf16", out_ptr="*bf16", N="i64"),
                      dict(C=5, CP=8, BLOCK=1024))
    assert ".entry _one_hot_kernel" in ptx
    for tokens, has_mask, channels, dtype in ((True, False, 1, "u8"), (True, True, 1, "i64"), (False, True, 4, "fp32"),
                                              (False, False, 5, "bf16")):
        types = dict(x_ptr="*" + dtype, m_ptr="*u8" if has_mask else "*" + dtype, out_ptr="*" + dtype, L="i32",
                     L_BLOCKS="i32", x_sb="i32", x_sl="i32", m_sb="i32", o_sb="i32")
        constexprs = dict(C=channels, CP=1 << (channels - 1).bit_length(), BLOCK_L=1024, HAS_MASK=has_mask,
                          TOKENS=tokens, COMPLEMENT_PADS=channels == 5, NIBBLES=dna_triton.COMPLEMENT_NIBBLES,
                          PROBES=128)
        assert ".entry _rc_kernel" in compile_for(dna_triton._rc_kernel, types, constexprs)
