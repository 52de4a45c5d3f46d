"""ALiBi, T5 buckets, RelativePositionBias and the FlexAttention score_mods vs BLOOM, T5 (HF) and dense attention."""

import math

import pytest
import torch

from omnipos.core import (
    RelativePositionBias,
    alibi_bias,
    alibi_score_mod,
    alibi_slopes,
    relative_bias_score_mod,
    t5_relative_bucket,
)

transformers = pytest.importorskip("transformers")
from transformers.models.bloom.modeling_bloom import build_alibi_tensor  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Attention, T5Config  # noqa: E402


@pytest.mark.parametrize("heads", [8, 12, 20])
def test_alibi_matches_bloom(heads):
    length = 37
    bloom = build_alibi_tensor(torch.ones(1, length, dtype=torch.long), heads, torch.float32)  # [H, 1, k]: m_h * j
    slopes = alibi_slopes(heads)
    torch.testing.assert_close(slopes, bloom[:, 0, 1], rtol=3e-7, atol=0)  # BLOOM's pow is float32 (1 ulp)
    ours = alibi_bias(heads, length, length)
    i = torch.arange(length, dtype=torch.float32)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    # causal part: -m (i - j) = m j - m i: BLOOM's bias shifted by a constant per query row
    shifted = bloom - slopes[:, None, None] * i[None, :, None]
    torch.testing.assert_close(ours[:, causal], shifted[:, causal], rtol=1e-6, atol=1e-4)
    scores = torch.randn(heads, length, length, generator=torch.Generator().manual_seed(heads))
    masked = torch.full_like(scores, float("-inf")).masked_fill(causal, 0)
    torch.testing.assert_close(torch.softmax(scores + ours + masked, -1), torch.softmax(scores + bloom + masked, -1),
                               rtol=1e-5, atol=1e-6)


def test_alibi_conventions_reference():
    torch.testing.assert_close(alibi_slopes(8, dtype=torch.float64), 2.0 ** -torch.arange(1, 9, dtype=torch.float64))
    s12 = alibi_slopes(12, dtype=torch.float64)
    assert s12[0] == 0.5 and abs(2 ** (-8 / 12) - 0.630) < 1e-3  # the closed form attention-gym uses is wrong here
    expected = [2 ** (-k) for k in range(1, 9)] + [2 ** (-(2 * i + 1) / 2) for i in range(4)]
    torch.testing.assert_close(s12, torch.tensor(expected, dtype=torch.float64), rtol=1e-15, atol=0)
    bias = alibi_bias(2, 3, 5)  # queries are the last 3 of 5 positions
    assert bias.shape == (2, 3, 5)
    torch.testing.assert_close(bias[0, 0], -2.0**-4 * torch.tensor([2.0, 1, 0, 1, 2]), rtol=0, atol=0)
    torch.testing.assert_close(alibi_bias(2, 3, 5, q_offset=0)[1, 2], -2.0**-8 * torch.tensor([2.0, 1, 0, 1, 2]),
                               rtol=0, atol=0)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (64, 256), (8, 20)])
def test_t5_buckets_match_hf(bidirectional, num_buckets, max_distance):
    rel = torch.arange(-3000, 3001)
    theirs = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                                   max_distance=max_distance)
    ours = t5_relative_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert ours.dtype == torch.int64
    assert torch.equal(ours, theirs)


def test_t5_conventions_reference():
    rel = torch.tensor([-128, -9, -8, -1, 0, 1, 8, 16, 127])
    assert t5_relative_bucket(rel).tolist() == [15, 8, 8, 1, 0, 17, 24, 26, 31]


@pytest.mark.parametrize("is_decoder", [False, True])
def test_relative_position_bias_matches_hf_t5(is_decoder):
    config = T5Config(d_model=32, d_kv=8, num_heads=4, relative_attention_num_buckets=32,
                      relative_attention_max_distance=128, is_decoder=is_decoder)
    hf = T5Attention(config, has_relative_attention_bias=True)
    ours = RelativePositionBias(4, num_buckets=32, max_distance=128, bidirectional=not is_decoder)
    ours.relative_attention_bias.weight.data.copy_(hf.relative_attention_bias.weight.data)
    torch.testing.assert_close(ours(50, 50), hf.compute_bias(50, 50)[0], rtol=0, atol=0)
    # decoding with a cache: 3 new queries after 60 cached tokens
    torch.testing.assert_close(ours(3, 63), hf.compute_bias(3, 63, past_seen_tokens=60)[0], rtol=0, atol=0)
    assert "num_heads=4" in repr(ours)


def _flex():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    return flex.flex_attention


def _dense(q, k, v, bias):
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias, -1) @ v


def test_alibi_score_mod_with_flex_attention():
    flex_attention = _flex()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 12, 16, 8, generator=gen) for _ in range(3))
    out = flex_attention(q, k, v, score_mod=alibi_score_mod(12))
    torch.testing.assert_close(out, _dense(q, k, v, alibi_bias(12, 16, 16)), rtol=1e-5, atol=1e-5)
    q_last = q[:, :, -4:]
    out = flex_attention(q_last, k, v, score_mod=alibi_score_mod(12, q_offset=12))
    torch.testing.assert_close(out, _dense(q_last, k, v, alibi_bias(12, 4, 16)), rtol=1e-5, atol=1e-5)


def test_relative_bias_score_mod_with_flex_attention():
    flex_attention = _flex()
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, 24, 8, generator=gen) for _ in range(3))
    bias = RelativePositionBias(4, num_buckets=8, max_distance=16)
    torch.nn.init.normal_(bias.relative_attention_bias.weight, generator=gen)
    expected = _dense(q, k, v, bias(24, 24))
    with torch.no_grad():
        torch.testing.assert_close(flex_attention(q, k, v, score_mod=relative_bias_score_mod(bias)), expected,
                                   rtol=1e-5, atol=1e-5)
        dense_bias = bias(24, 24)
        torch.testing.assert_close(flex_attention(q, k, v, score_mod=relative_bias_score_mod(dense_bias)), expected,
                                   rtol=1e-5, atol=1e-5)
        out = flex_attention(q[:, :, -5:], k, v, score_mod=relative_bias_score_mod(bias, q_offset=19))
        torch.testing.assert_close(out, _dense(q[:, :, -5:], k, v, bias(5, 24)), rtol=1e-5, atol=1e-5)
    # the learned table gets the same gradient through the score_mod as through the dense bias
    weight = bias.relative_attention_bias.weight
    (grad_flex,) = torch.autograd.grad(flex_attention(q, k, v, score_mod=relative_bias_score_mod(bias)).sum(), weight)
    (grad_dense,) = torch.autograd.grad(_dense(q, k, v, bias(24, 24)).sum(), weight)
    torch.testing.assert_close(grad_flex, grad_dense, rtol=1e-4, atol=1e-5)


def test_bad_input():
    with pytest.raises(ValueError, match="num_heads must be >= 1"):
        alibi_slopes(0)
    with pytest.raises(TypeError, match="num_heads must be an int"):
        alibi_bias(2.5, 3, 3)
    with pytest.raises(ValueError, match="q_len must be >= 0"):
        alibi_bias(4, -1, 3)
    with pytest.raises(TypeError, match="relative_position must be an integer tensor"):
        t5_relative_bucket(torch.tensor([0.5]))
    with pytest.raises(ValueError, match="max_distance must be > 8"):
        t5_relative_bucket(torch.tensor([3]), max_distance=8)
    with pytest.raises(ValueError, match="num_buckets must be >= 4"):
        RelativePositionBias(4, num_buckets=2)
    with pytest.raises(TypeError, match="bias must be a RelativePositionBias"):
        relative_bias_score_mod(torch.zeros(4, 4))
    with pytest.raises(TypeError, match="q_offset must be an int"):
        alibi_bias(4, 3, 3, q_offset=1.5)


# -- issue 14: int64 overflow and silently accepted dtypes -----------------------------------------------------------


def test_alibi_offset_near_int64_edge_is_refused_not_a_positive_bias():
    """alibi_bias(1, 1, 1, q_offset=-2**63) gave +3.6e16: |0 - (-2**63)| wraps to -2**63."""
    with pytest.raises(ValueError, match="q_offset"):
        alibi_bias(1, 1, 1, q_offset=-2**63)
    with pytest.raises(ValueError, match="q_offset"):
        alibi_bias(2, 3, 3, q_offset=2**62)
    far = alibi_bias(1, 1, 2, q_offset=2**53 - 3, dtype=torch.float64)  # still exact: the right (negative) bias
    expected = -torch.tensor([2.0**53 - 3, 2.0**53 - 4], dtype=torch.float64) / 256  # one head: slope 2^-8
    assert far.max() < 0 and torch.equal(far[0, 0], expected)


def test_t5_bucket_of_int64_min_is_the_far_bucket():
    """t5_relative_bucket(tensor([-2**63])) gave bucket -2**63 (abs overflows)."""
    out = t5_relative_bucket(torch.tensor([-2**63, -2**62, 2**63 - 1, -129, 129]))
    assert out.tolist() == [15, 15, 31, 15, 31]
    out = t5_relative_bucket(torch.tensor([-2**63, 2**63 - 1]), bidirectional=False)
    assert out.tolist() == [31, 0]


def test_relative_position_bias_offset_near_int64_edge_is_a_value_error():
    """RelativePositionBias(1)(1, 3, q_offset=-2**63+1) raised IndexError."""
    with pytest.raises(ValueError, match="q_offset"):
        RelativePositionBias(1)(1, 3, q_offset=-2**63 + 1)
    bias = RelativePositionBias(2)
    far = bias(1, 3, q_offset=-(2**52))  # keys far after the query: all in the last bucket
    assert torch.equal(far, bias.relative_attention_bias.weight[31][:, None, None].expand(2, 1, 3))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
def test_alibi_integer_dtype_is_refused(dtype):
    """alibi_bias(..., dtype=torch.int32) was accepted (every slope rounds to 0)."""
    with pytest.raises(TypeError, match="dtype"):
        alibi_bias(4, 3, 3, dtype=dtype)
    with pytest.raises(TypeError, match="dtype"):
        alibi_slopes(4, dtype=dtype)


def test_relative_position_bias_reset_parameters_and_meta():
    torch.manual_seed(3)
    fresh = RelativePositionBias(4, num_buckets=8, max_distance=16)
    with torch.device("meta"):
        meta = RelativePositionBias(4, num_buckets=8, max_distance=16)
    meta.to_empty(device="cpu")
    torch.manual_seed(3)
    meta.reset_parameters()
    assert torch.equal(meta.relative_attention_bias.weight, fresh.relative_attention_bias.weight)
    torch.manual_seed(3)
    assert torch.equal(torch.randn(8, 4), fresh.relative_attention_bias.weight)  # N(0, 1), nn.Embedding's init
