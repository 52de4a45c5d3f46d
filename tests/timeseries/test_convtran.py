"""ConvTran's tAPE and eRPE: the paper's formulas in float64, ConvTran's own code (restated in
tests/support/convtran.py), FlexAttention, and every bad input."""

import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import convtran

from omnipos.core import relative_bias_score_mod
from omnipos.timeseries import ERPE, TAPE, erpe_attention, erpe_bias, erpe_score_mod, tape


def tape_formula(length, dim):
    """The paper's tAPE, term by term in float64."""
    out = torch.empty(length, dim, dtype=torch.float64)
    for pos in range(length):
        for k in range(dim // 2):
            angle = pos * 10000.0 ** (-2 * k / dim) * dim / length
            out[pos, 2 * k], out[pos, 2 * k + 1] = math.sin(angle), math.cos(angle)
    return out


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 40), st.integers(1, 32).map(lambda h: 2 * h))
def test_tape_is_the_papers_formula(length, dim):
    expected = tape_formula(length, dim)
    torch.testing.assert_close(tape(length, dim, dtype=torch.float64), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(tape(length, dim), expected.float(), rtol=0, atol=1e-6)  # one rounding in float32


@pytest.mark.parametrize("length, dim", [(24, 64), (100, 16), (7, 128)])
def test_tape_matches_convtran(length, dim):
    reference = convtran.tape_table(dim, length)[0]  # ConvTran builds it in float32
    torch.testing.assert_close(tape(length, dim), reference, rtol=0, atol=2e-5)
    x = torch.randn(3, length, dim)
    torch.testing.assert_close(TAPE(dim, length, scale=0.5)(x), x + 0.5 * reference, rtol=0, atol=2e-5)


def test_tape_keeps_short_series_distinct_where_the_plain_sinusoid_does_not():
    """The point of tAPE: with d >> L, the plain sinusoid's channels barely move over L steps."""
    length, dim = 16, 256
    scaled = tape(length, dim, dtype=torch.float64)
    from omnipos.core import sinusoidal

    plain = sinusoidal(torch.arange(length), dim, dtype=torch.float64)
    spread = lambda pe: (pe[1:] - pe[:-1]).norm(dim=-1).min()  # noqa: E731
    assert spread(scaled) > 2 * spread(plain)


def test_tape_module_shorter_series_and_dtypes():
    module = TAPE(8, 10)
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    torch.testing.assert_close(module(x), x + tape(10, 8, dtype=torch.float64)[:6], rtol=0, atol=0)
    assert module(x.half()).dtype == torch.float16
    assert "pe" not in module.state_dict() and "length=10" in repr(module)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 9), st.integers(1, 4), st.integers(0, 2**31 - 1), st.data())
def test_erpe_bias_indexes_the_table_by_offset(max_len, heads, seed, data):
    length = data.draw(st.integers(1, max_len))
    module = ERPE(max_len, heads)
    with torch.no_grad():
        module.table.copy_(torch.randn(2 * max_len - 1, heads, generator=torch.Generator().manual_seed(seed)))
    bias = module.bias(length)
    assert bias.shape == (heads, length, length)
    for h in range(heads):
        for i in range(length):
            for j in range(length):
                assert bias[h, i, j] == module.table[i - j + max_len - 1, h]
    attn = torch.rand(2, heads, length, length).softmax(-1)
    torch.testing.assert_close(module(attn), attn + bias, rtol=0, atol=0)
    torch.testing.assert_close(erpe_bias(module.table, length), bias, rtol=0, atol=0)


def test_erpe_matches_convtran_attention():
    torch.manual_seed(0)
    emb, heads, length = 16, 4, 12
    query, key, value = (torch.nn.Linear(emb, emb, bias=False) for _ in range(3))
    module = ERPE(length, heads)
    torch.nn.init.normal_(module.table)
    x = torch.randn(3, length, emb)
    torch.testing.assert_close(module.bias(length)[None], convtran.relative_bias(module.table, length), rtol=0, atol=0)
    split = lambda t: t.reshape(3, length, heads, -1).transpose(1, 2)  # noqa: E731
    out = erpe_attention(split(query(x)), split(key(x)), split(value(x)), module, scale=emb ** -0.5)
    expected = convtran.attention_rel_scl(x, query, key, value, module.table, heads, emb)
    torch.testing.assert_close(out.transpose(1, 2).reshape(3, length, emb), expected, rtol=1e-5, atol=1e-6)


def test_erpe_attention_placements():
    torch.manual_seed(1)
    q, k, v = torch.randn(3, 2, 2, 5, 4, dtype=torch.float64)
    module = ERPE(6, 2).double()
    torch.nn.init.normal_(module.table)
    scores = q @ k.transpose(-2, -1) / 2.0
    after = erpe_attention(q, k, v, module)
    torch.testing.assert_close(after, (scores.softmax(-1) + module.bias(5)) @ v)
    before = ERPE(6, 2, placement="before_softmax").double()
    before.load_state_dict(module.state_dict())
    torch.testing.assert_close(erpe_attention(q, k, v, before), (scores + module.bias(5)).softmax(-1) @ v)


def test_erpe_score_mod_equals_dense_bias():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    torch.manual_seed(2)
    module = ERPE(16, 2, placement="before_softmax")
    torch.nn.init.normal_(module.table)
    q, k, v = torch.randn(3, 1, 2, 16, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()": fine for a check
        out = flex.flex_attention(q, k, v, score_mod=erpe_score_mod(module))
    with torch.no_grad():
        expected = erpe_attention(q, k, v, module)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    # the score_mod on a grid of indices, directly
    score_mod = erpe_score_mod(module.table)
    qi, ki = torch.meshgrid(torch.arange(5), torch.arange(5), indexing="ij")
    got = score_mod(torch.zeros(5, 5), torch.tensor(0), torch.tensor(1), qi, ki)
    torch.testing.assert_close(got, module.bias(5)[1], rtol=0, atol=0)
    # the core's dense score_mod over the materialised bias agrees (it builds [H, L, L]; this one indexes the table)
    dense = relative_bias_score_mod(module.bias(5).detach())
    torch.testing.assert_close(dense(torch.zeros(5, 5), torch.tensor(0), torch.tensor(1), qi, ki), got.detach(),
                               rtol=0, atol=0)


def test_erpe_is_zero_at_init_as_convtran():
    module = ERPE(4, 3)
    assert torch.equal(module.table, torch.zeros(7, 3))
    attn = torch.rand(1, 3, 4, 4)
    assert torch.equal(module(attn), attn)


def test_bad_inputs():
    with pytest.raises(ValueError, match="dim must be even"):
        tape(10, 7)
    with pytest.raises(ValueError, match="length must be >= 1"):
        tape(0, 8)
    with pytest.raises(TypeError, match="length must be an int"):
        tape(10.0, 8)
    with pytest.raises(ValueError, match="base"):
        tape(10, 8, base=1.0)
    with pytest.raises(TypeError, match="dtype"):
        tape(10, 8, dtype=torch.int64)
    with pytest.raises(ValueError, match="dim must be even"):
        TAPE(5, 10)
    with pytest.raises(ValueError, match="scale"):
        TAPE(4, 10, scale=float("nan"))
    with pytest.raises(ValueError, match="more than length=10"):
        TAPE(4, 10)(torch.randn(1, 11, 4))
    with pytest.raises(ValueError, match=r"dim=4"):
        TAPE(4, 10)(torch.randn(1, 5, 6))
    with pytest.raises(TypeError, match="floating"):
        TAPE(4, 10)(torch.ones(1, 5, 4, dtype=torch.long))
    module = ERPE(5, 2)
    with pytest.raises(ValueError, match="beyond max_len=5"):
        module.bias(6)
    with pytest.raises(ValueError, match="beyond max_len=5"):
        module(torch.rand(1, 2, 6, 6))
    with pytest.raises(ValueError, match=r"\[B, H=2, L, L\]"):
        module(torch.rand(1, 3, 4, 4))
    with pytest.raises(ValueError, match=r"\[B, H=2, L, L\]"):
        module(torch.rand(1, 2, 4, 3))
    with pytest.raises(ValueError, match=r"\[B, H=2, L, L\]"):
        module(torch.rand(2, 4, 4))
    with pytest.raises(TypeError, match="attn"):
        module(torch.ones(1, 2, 4, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="placement"):
        ERPE(5, 2, placement="scores")
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        ERPE(0, 2)
    with pytest.raises(ValueError, match="placement='after_softmax'"):
        erpe_score_mod(module)
    with pytest.raises(ValueError, match="odd number of rows"):
        erpe_bias(torch.zeros(4, 2), 2)
    with pytest.raises(TypeError, match="table"):
        erpe_score_mod([[0.0]])
    with pytest.raises(TypeError, match="ERPE"):
        erpe_attention(*torch.randn(3, 1, 2, 4, 4), erpe=torch.zeros(7, 2))
    with pytest.raises(ValueError, match="share"):
        erpe_attention(torch.randn(1, 2, 4, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 4, 4), module)
    with pytest.raises(ValueError, match=r"q must be a tensor \[B, H, L, D\]"):
        erpe_attention(torch.randn(2, 4, 4), torch.randn(2, 4, 4), torch.randn(2, 4, 4), module)


@pytest.mark.gpu
def test_cuda_equals_cpu():
    torch.testing.assert_close(tape(30, 64, device="cuda").cpu(), tape(30, 64), rtol=0, atol=1e-6)
    module = TAPE(16, 20)
    x = torch.randn(2, 20, 16)
    torch.testing.assert_close(module.cuda()(x.cuda()).cpu(), module.cpu()(x), rtol=0, atol=1e-6)
    erpe = ERPE(8, 2)
    torch.nn.init.normal_(erpe.table)
    q, k, v = torch.randn(3, 2, 2, 8, 4)
    cpu = erpe_attention(q, k, v, erpe)
    gpu = erpe_attention(q.cuda(), k.cuda(), v.cuda(), erpe.cuda())
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5, atol=1e-5)
