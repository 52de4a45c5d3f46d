import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.core import SinusoidalEncoding, add_positional, frequency_bands, sinusoidal


def reference(positions, dim, base=10000.0, layout="interleaved"):
    """The conventions' formulas, written out in float64 NumPy, independent of omnipos."""
    p = np.asarray(positions, dtype=np.float64)[..., None]
    half = dim // 2
    i = np.arange(half, dtype=np.float64)
    if layout == "fairseq":
        w = np.exp(-math.log(base) * i / (half - 1))
    else:
        w = 1.0 / base ** (2 * i / dim)
    s, c = np.sin(p * w), np.cos(p * w)
    if layout == "interleaved":
        out = np.empty(p.shape[:-1] + (dim,))
        out[..., 0::2], out[..., 1::2] = s, c
        return out
    return np.concatenate([s, c], axis=-1)


def test_seed_reference_values():
    pe = sinusoidal(torch.tensor([0, 1, 2]), 4)
    assert torch.allclose(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    assert torch.allclose(pe[1], torch.tensor([0.841, 0.540, 0.010, 1.000]), atol=5e-4)
    assert torch.allclose(pe[2], torch.tensor([0.909, -0.416, 0.020, 1.000]), atol=5e-4)


def test_matches_hf_distilbert_table():
    """HF DistilBERT's create_sinusoidal_embeddings is the interleaved convention, up to float32."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.distilbert.modeling_distilbert import (
        create_sinusoidal_embeddings,
    )

    n, dim = 64, 32
    out = torch.empty(n, dim)
    create_sinusoidal_embeddings(n, dim, out)
    assert transformers is not None
    assert torch.allclose(sinusoidal(torch.arange(n), dim), out, atol=1e-6)


@pytest.mark.parametrize("layout", ["interleaved", "split", "fairseq"])
@pytest.mark.parametrize("dim", [4, 6, 64, 130])
def test_layouts_match_formula(layout, dim):
    gen = torch.Generator().manual_seed(dim)
    positions = torch.rand(3, 17, generator=gen, dtype=torch.float64) * 5000 - 1000
    out = sinusoidal(positions, dim, layout=layout, base=777.0, dtype=torch.float64)
    assert out.shape == (3, 17, dim)
    np.testing.assert_allclose(out.numpy(), reference(positions.numpy(), dim, 777.0, layout), atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float16, torch.bfloat16, torch.float32,
                                   torch.float64])
def test_float32_output_within_1e6_of_float64_for_large_positions(dtype):
    gen = torch.Generator().manual_seed(0)
    raw = (torch.rand(4000, generator=gen, dtype=torch.float64) * 2 - 1) * 1e7
    if dtype == torch.float16:  # float16 tops out at 65504
        raw = raw * 6e-3
    positions = raw.to(dtype)
    exact = reference(positions.to(torch.float64).numpy(), 128)
    out = sinusoidal(positions, 128)
    assert out.dtype == torch.float32
    assert np.abs(out.numpy().astype(np.float64) - exact).max() <= 1e-6


def test_inputs_as_list_array_scalar_and_shape():
    expected = torch.from_numpy(reference([[0.5, 2.25], [1e6 + 0.1, -3.0]], 8)).float()
    for given_positions in ([[0.5, 2.25], [1e6 + 0.1, -3.0]], np.array([[0.5, 2.25], [1e6 + 0.1, -3.0]])):
        out = sinusoidal(given_positions, 8)
        assert out.shape == (2, 2, 8)
        assert torch.allclose(out, expected, atol=1e-6)
    assert sinusoidal(3, 8).shape == (8,)
    assert sinusoidal(torch.empty(0, 5), 8).shape == (0, 5, 8)


def test_output_dtypes():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        out = sinusoidal(torch.arange(10), 16, dtype=dtype)
        assert out.dtype == dtype
        assert torch.allclose(out.double(), torch.from_numpy(reference(np.arange(10), 16)),
                              atol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6)


@given(
    dim=st.integers(1, 40).map(lambda h: 2 * h),
    k=st.floats(-50, 50, allow_nan=False),
    positions=st.lists(st.floats(-1e4, 1e4, allow_nan=False), min_size=1, max_size=30),
)
def test_shift_is_one_fixed_linear_map(dim, k, positions):
    """PE(p + k) = T_k PE(p) with one block-rotation T_k for every p (the seeds' relative-position claim)."""
    p = torch.tensor(positions, dtype=torch.float64)
    pe, shifted = sinusoidal(p, dim, dtype=torch.float64), sinusoidal(p + k, dim, dtype=torch.float64)
    w = frequency_bands(dim)
    c, s = torch.cos(k * w), torch.sin(k * w)
    T = torch.zeros(dim, dim, dtype=torch.float64)
    # [sin(a+b), cos(a+b)] = [[cos b, sin b], [-sin b, cos b]] @ [sin a, cos a]
    T[0::2, 0::2] = torch.diag(c)
    T[0::2, 1::2] = torch.diag(s)
    T[1::2, 0::2] = torch.diag(-s)
    T[1::2, 1::2] = torch.diag(c)
    assert torch.allclose(shifted, pe @ T.T, atol=1e-9)


@given(
    dim=st.integers(1, 64).map(lambda h: 2 * h),
    i=st.integers(-10_000, 10_000), j=st.integers(-10_000, 10_000), shift=st.integers(-10_000, 10_000),
)
def test_dot_product_depends_only_on_offset(dim, i, j, shift):
    a = sinusoidal(torch.tensor([i, j]), dim, dtype=torch.float64)
    b = sinusoidal(torch.tensor([i + shift, j + shift]), dim, dtype=torch.float64)
    assert torch.allclose(a[0] @ a[1], b[0] @ b[1], atol=1e-9)
    w = frequency_bands(dim)
    assert torch.allclose(a[0] @ a[1], torch.cos((i - j) * w).sum(), atol=1e-9)


@pytest.mark.parametrize("dim", [0, -2, 3, 7])
def test_bad_dim(dim):
    with pytest.raises(ValueError, match="dim"):
        sinusoidal(torch.arange(3), dim)


def test_bad_dim_type():
    with pytest.raises(TypeError, match="dim"):
        sinusoidal(torch.arange(3), 4.0)
    with pytest.raises(TypeError, match="dim"):
        sinusoidal(torch.arange(3), True)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_positions(bad):
    with pytest.raises(ValueError, match="positions must be finite"):
        sinusoidal(torch.tensor([0.0, bad]), 4)
    with pytest.raises(ValueError, match="positions must be finite"):
        sinusoidal([1.0, bad], 4)


def test_complex_boolean_and_text_positions():
    with pytest.raises(TypeError, match="positions.*complex"):
        sinusoidal(torch.tensor([1 + 2j]), 4)
    with pytest.raises(TypeError, match="positions.*boolean"):
        sinusoidal(torch.tensor([True, False]), 4)
    with pytest.raises(TypeError, match="positions"):
        sinusoidal(np.array([True]), 4)
    with pytest.raises(TypeError, match="positions"):
        sinusoidal(["a", "b"], 4)


def test_unknown_layout_and_bad_base_and_dtype():
    with pytest.raises(ValueError, match="layout.*'interleaved'"):
        sinusoidal(torch.arange(3), 4, layout="vaswani")
    with pytest.raises(ValueError, match="base"):
        sinusoidal(torch.arange(3), 4, base=1.0)
    with pytest.raises(TypeError, match="dtype"):
        sinusoidal(torch.arange(3), 4, dtype=torch.int64)
    with pytest.raises(ValueError, match="fairseq"):
        sinusoidal(torch.arange(3), 2, layout="fairseq")


def test_module_scale_and_repr():
    enc = SinusoidalEncoding(16, scale=0.25)
    p = torch.arange(7)
    assert torch.allclose(enc(p), 0.25 * torch.from_numpy(reference(np.arange(7), 16)).float(), atol=1e-6)
    assert "scale=0.25" in repr(enc) and "layout='interleaved'" in repr(enc)
    assert not list(enc.parameters())

    learn = SinusoidalEncoding(16, layout="split", scale=16 ** -0.5, learnable_scale=True)
    (param,) = list(learn.parameters())
    learn(p).sum().backward()
    assert param.grad is not None and torch.isfinite(param.grad)


def test_add_positional_modes():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 8, generator=gen, dtype=torch.float64)
    pe = sinusoidal(torch.arange(5), 8)
    added = add_positional(x, pe)
    assert added.dtype == torch.float64
    assert torch.equal(added, x + pe.double())
    cat = add_positional(x, sinusoidal(torch.arange(5), 4), mode="concat")
    assert cat.shape == (2, 5, 12)
    assert torch.equal(cat[..., :8], x)
    assert torch.equal(cat[1, :, 8:], sinusoidal(torch.arange(5), 4).double())


def test_add_positional_bad_input():
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="mode"):
        add_positional(x, sinusoidal(torch.arange(5), 8), mode="mul")
    with pytest.raises(ValueError, match="broadcast"):
        add_positional(x, sinusoidal(torch.arange(6), 8))
    with pytest.raises(ValueError, match="broadcast"):
        add_positional(x, sinusoidal(torch.arange(5), 4))
    with pytest.raises(ValueError, match="broadcast"):
        add_positional(x, sinusoidal(torch.arange(4), 4), mode="concat")


@pytest.mark.gpu
def test_cuda_matches_cpu():
    positions = (torch.rand(64, 100, dtype=torch.float64) * 2e6 - 1e6)
    cpu = sinusoidal(positions, 256)
    gpu = sinusoidal(positions.cuda(), 256)
    assert gpu.device.type == "cuda"
    assert torch.allclose(gpu.cpu(), cpu, atol=1e-6)
    bf = positions.to(torch.bfloat16)
    assert torch.allclose(sinusoidal(bf.cuda(), 64).cpu(), sinusoidal(bf, 64), atol=1e-6)


def test_sinusoid_of_turns_inplace_consumes_only_when_asked():
    from omnipos.core.sinusoid import sinusoid_of_turns

    turns = torch.rand(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 1e5
    keep = turns.clone()
    expected = torch.from_numpy(
        np.stack([np.sin(2 * np.pi * keep.numpy()), np.cos(2 * np.pi * keep.numpy())], -1).reshape(5, 6))
    out = sinusoid_of_turns(turns)
    assert torch.equal(turns, keep)
    assert np.abs(out.double().numpy() - expected.numpy()).max() < 1e-6
    consumed = sinusoid_of_turns(turns, inplace=True)
    assert torch.equal(consumed, out)
    with pytest.raises(TypeError, match="float64"):
        sinusoid_of_turns(keep.float(), inplace=True)


def test_sinusoid_of_angles_matches_formula_and_validates_layout():
    from omnipos.core.sinusoid import sinusoid_of_angles

    angles = (torch.rand(4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(8)) - 0.5) * 2e6
    out = sinusoid_of_angles(angles, layout="split")
    a = angles.numpy()
    assert np.abs(out.double().numpy() - np.concatenate([np.sin(a), np.cos(a)], -1)).max() < 1e-6
    with pytest.raises(ValueError, match="layout"):
        sinusoid_of_angles(angles, layout="half")




@pytest.mark.parametrize("base", [float("inf"), float("nan"), -5.0])
def test_non_finite_base_is_refused(base):
    """sinusoidal(..., base=inf) was accepted (every frequency but the first became 0)."""
    with pytest.raises(ValueError, match="base must be a finite number > 1"):
        sinusoidal(torch.arange(3), 4, base=base)
    with pytest.raises(ValueError, match="base"):
        SinusoidalEncoding(4, base=base)


def test_gradient_with_respect_to_positions():
    """sinusoidal(t.requires_grad_(), 4).sum().backward() raised "functions with out=... arguments don't support
    automatic differentiation"; d sin(p w)/dp = w cos(p w)."""
    for dtype in (torch.float32, torch.float64):
        t = torch.tensor([0.5, 3.0, 1e5], dtype=torch.float64, requires_grad=True)
        sinusoidal(t, 4, dtype=dtype).sum().backward()
        w = frequency_bands(4)
        p = t.detach()[:, None]
        expected = (w * (torch.cos(p * w) - torch.sin(p * w))).sum(-1)
        torch.testing.assert_close(t.grad, expected, rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-9)
    t = torch.tensor([0.5, 3.0], requires_grad=True)  # float32 positions too
    SinusoidalEncoding(4)(t).sum().backward()
    assert t.grad is not None and torch.isfinite(t.grad).all()


def test_module_output_follows_half_and_double():
    """SinusoidalEncoding kept float32 output after .half() / .double()."""
    t = torch.tensor([0.0, 1.5, 1e4], dtype=torch.float64)
    enc = SinusoidalEncoding(8, scale=0.5)
    ref = enc(t)
    assert enc.half()(t).dtype == torch.float16 and enc.dtype == torch.float16
    torch.testing.assert_close(enc(t).float(), ref, rtol=0, atol=1e-3)
    assert enc.double()(t).dtype == torch.float64
    torch.testing.assert_close(enc(t), 0.5 * sinusoidal(t, 8, dtype=torch.float64), rtol=0, atol=0)
    assert SinusoidalEncoding(8, dtype=torch.bfloat16)(t).dtype == torch.bfloat16


@pytest.mark.parametrize("layout", ["interleaved", "split"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sinusoid_of_turns_out_writes_and_adds_the_same_numbers(layout, dtype):
    """out= writes the channels into a strided view of a larger tensor (the float64 formula within float
    tolerance, and bit for bit the values without out=); accumulate=True adds them to what out holds."""
    from omnipos.core.sinusoid import sinusoid_of_turns

    g = torch.Generator().manual_seed(11)
    turns = (torch.rand(7, 5, dtype=torch.float64, generator=g) - 0.5) * 2e5
    half_turns = turns.numpy()
    s, c = np.sin(2 * np.pi * half_turns), np.cos(2 * np.pi * half_turns)
    formula = np.stack([s, c], -1).reshape(7, 10) if layout == "interleaved" else np.concatenate([s, c], -1)
    expected = sinusoid_of_turns(turns, layout=layout, dtype=dtype)
    assert np.abs(expected.double().numpy() - formula).max() < 1e-6
    wide = torch.full((7, 13), 7.0, dtype=dtype)
    into = wide[:, 2:12]  # rows strided, last axis contiguous
    assert sinusoid_of_turns(turns, layout=layout, dtype=dtype, out=into) is into
    assert torch.equal(into, expected)
    assert torch.equal(wide[:, :2], torch.full((7, 2), 7.0, dtype=dtype))  # nothing outside out is touched
    assert torch.equal(wide[:, 12:], torch.full((7, 1), 7.0, dtype=dtype))
    base = torch.rand(7, 10, dtype=dtype, generator=g)
    summed = base.clone()
    sinusoid_of_turns(turns.clone(), layout=layout, dtype=dtype, inplace=True, out=summed, accumulate=True)
    assert torch.equal(summed, base + expected)


def test_sinusoid_of_turns_refuses_a_bad_out():
    from omnipos.core.sinusoid import sinusoid_of_turns

    turns = torch.rand(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with pytest.raises(TypeError, match="out must be a tensor"):
        sinusoid_of_turns(turns, out=np.zeros((4, 6), dtype=np.float32))
    with pytest.raises(TypeError, match="out must be float32 or float64 and match dtype"):
        sinusoid_of_turns(turns, out=torch.zeros(4, 6, dtype=torch.float64))
    with pytest.raises(TypeError, match="out must be float32 or float64"):
        sinusoid_of_turns(turns, dtype=torch.float16, out=torch.zeros(4, 6, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"out must have shape \(4, 6\)"):
        sinusoid_of_turns(turns, out=torch.zeros(4, 5))
    with pytest.raises(ValueError, match="last axis must be contiguous"):
        sinusoid_of_turns(turns, out=torch.zeros(6, 4).t())
    with pytest.raises(ValueError, match="pass out"):
        sinusoid_of_turns(turns, accumulate=True)
    with pytest.raises(TypeError, match="not differentiable"):
        sinusoid_of_turns(turns.requires_grad_(), out=torch.zeros(4, 6))
    with pytest.raises(TypeError, match="not differentiable"):
        sinusoid_of_turns(turns.detach(), out=torch.zeros(4, 6, requires_grad=True))


@pytest.mark.parametrize("layout", ["interleaved", "split"])
def test_centered_turns_are_no_less_accurate_than_the_default(layout):
    """centered=True (nearest whole turn removed, NumPy's float32 sin/cos on CPU) changes last bits, never for
    the worse: against the float64 formula its largest and its mean error are at most the default's, on fresh
    random phases from 1e-3 to 1e7 turns (measured with numpy 2.4 / torch 2.14: max 1.6e-7 vs 2.5e-7)."""
    from omnipos.core.sinusoid import sinusoid_of_turns

    rng = np.random.default_rng(2026)
    turns_np = rng.normal(size=(20_000, 8)) * 10.0 ** rng.uniform(-3, 7, (20_000, 8))
    turns = torch.from_numpy(turns_np)
    whole = 2 * np.pi * np.fmod(turns_np, 1.0)  # exact: fmod of a float64 by 1 loses nothing
    s, c = np.sin(whole), np.cos(whole)
    formula = np.stack([s, c], -1).reshape(20_000, 16) if layout == "interleaved" else np.concatenate([s, c], -1)
    default = np.abs(sinusoid_of_turns(turns, layout=layout).double().numpy() - formula)
    centered = np.abs(sinusoid_of_turns(turns, layout=layout, centered=True).double().numpy() - formula)
    assert centered.max() <= default.max() and centered.mean() <= default.mean()
    assert centered.max() < 2e-7
    # float64 work is exact as before: centered changes nothing there
    assert torch.equal(sinusoid_of_turns(turns, layout=layout, dtype=torch.float64, centered=True),
                       sinusoid_of_turns(turns, layout=layout, dtype=torch.float64))
    # the autograd path (torch's sin/cos of the same centered phase) agrees within a float32 rounding
    grad_path = sinusoid_of_turns(turns.clone().requires_grad_(), layout=layout, centered=True)
    np.testing.assert_allclose(grad_path.detach().double().numpy(), formula, rtol=0, atol=2e-7)


@given(st.integers(1, 40), st.integers(1, 9), st.floats(1e-3, 1e9), st.integers(0, 2**32 - 1))
def test_centered_sincos_into_is_the_centered_sinusoid_to_the_bit(n, h, scale, seed):
    """The block kernel's sin/cos equal ``sinusoid_of_turns(centered=True)``'s channels bit for bit, and are within
    2e-7 of the float64 formula (math.sin / math.cos of the exact phase)."""
    from omnipos.core import centered_sincos_into, sinusoid_of_turns

    rng = np.random.default_rng(seed)
    turns = torch.from_numpy((rng.random((n, h)) - 0.5) * scale)
    expected = sinusoid_of_turns(turns, layout="split", centered=True)
    sin, cos = torch.empty(n, h), torch.empty(n, h)
    reference = turns.numpy().copy()
    centered_sincos_into(turns.clone(), sin, cos, scratch=np.empty((n, h)))
    assert torch.equal(torch.cat([sin, cos], -1), expected)
    again_sin, again_cos = torch.empty(n, h), torch.empty(n, h)
    centered_sincos_into(torch.from_numpy(reference.copy()), again_sin, again_cos)  # its own work space
    assert torch.equal(again_sin, sin) and torch.equal(again_cos, cos)
    angle = 2 * np.pi * np.fmod(reference, 1.0)
    assert np.abs(sin.double().numpy() - np.sin(angle)).max() < 2e-7
    assert np.abs(cos.double().numpy() - np.cos(angle)).max() < 2e-7


def test_centered_sincos_into_refuses_bad_buffers_by_name():
    from omnipos.core import centered_sincos_into

    turns, sin, cos = torch.zeros(3, 2, dtype=torch.float64), torch.empty(3, 2), torch.empty(3, 2)
    with pytest.raises(TypeError, match="tensors"):
        centered_sincos_into(turns.numpy(), sin, cos)
    with pytest.raises(TypeError, match="float64"):
        centered_sincos_into(turns.float(), sin, cos)
    with pytest.raises(TypeError, match="float32"):
        centered_sincos_into(turns, sin.double(), cos)
    with pytest.raises(ValueError, match=r"\[n, h\] of one shape"):
        centered_sincos_into(turns, torch.empty(3, 3), cos)
    with pytest.raises(ValueError, match=r"\[n, h\] of one shape"):
        centered_sincos_into(turns.reshape(6), sin.reshape(6), cos.reshape(6))
    with pytest.raises(ValueError, match="contiguous CPU"):
        centered_sincos_into(torch.zeros(2, 3, dtype=torch.float64).t(), sin, cos)
    with pytest.raises(ValueError, match="contiguous CPU"):
        centered_sincos_into(turns, torch.empty(3, 2, requires_grad=True), cos)
    with pytest.raises(ValueError, match="scratch must be a contiguous float64"):
        centered_sincos_into(turns, sin, cos, scratch=np.empty((3, 2), np.float32))
    with pytest.raises(ValueError, match="scratch must be a contiguous float64"):
        centered_sincos_into(turns, sin, cos, scratch=np.empty((2, 3)))
