import pytest
import torch

from omnipos.timeseries import Time2Vec


def test_time2vec_linear_term_first():
    t2v = Time2Vec(5)
    times = torch.tensor([[0.0, 1.5, 4.0]])
    out = t2v(times)
    w0, b0 = t2v.linear.weight[0, 0], t2v.linear.bias[0]
    w, b = t2v.periodic.weight[:, 0], t2v.periodic.bias
    expected = torch.cat([(w0 * times + b0).unsqueeze(-1), torch.sin(times.unsqueeze(-1) * w + b)], dim=-1)
    torch.testing.assert_close(out, expected)
    assert out.shape == (1, 3, 5)


def test_time2vec_matches_mtan_layout():
    """mTAN's learn_time_embedding: out = cat([linear(t), sin(periodic(t))], -1)."""
    torch.manual_seed(0)
    t2v = Time2Vec(8)
    linear, periodic = torch.nn.Linear(1, 1), torch.nn.Linear(1, 7)
    linear.load_state_dict(t2v.linear.state_dict())
    periodic.load_state_dict(t2v.periodic.state_dict())
    tt = (torch.rand(2, 6) * 10).sort(-1).values
    mtan = torch.cat([linear(tt.unsqueeze(-1)), torch.sin(periodic(tt.unsqueeze(-1)))], -1)
    torch.testing.assert_close(t2v(tt), mtan)


def test_time2vec_features_and_mask():
    t2v = Time2Vec(4, in_features=3)
    x = torch.randn(2, 5, 3)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    out = t2v(x, mask)
    assert out.shape == (2, 5, 4) and (out[1, 2:] == 0).all()
    torch.testing.assert_close(out[mask], t2v(x)[mask])
    with pytest.raises(ValueError, match="in_features=3"):
        t2v(torch.randn(2, 5))


def test_time2vec_one_channel_and_bad_input():
    assert Time2Vec(1)(torch.tensor([[0.0, 2.0]])).shape == (1, 2, 1)
    with pytest.raises(ValueError, match="sorted"):
        Time2Vec(3)(torch.tensor([[2.0, 0.0]]))
    with pytest.raises(ValueError, match=">= 1"):
        Time2Vec(0)
    assert "out_features=3, in_features=1" in repr(Time2Vec(3))


def test_list_masks_are_refused_by_name():
    """A Python list as mask raised AttributeError ('list' object has no attribute 'unsqueeze')."""
    times = torch.tensor([[0.0, 1.0]])
    for module, x in ((Time2Vec(3), times), (Time2Vec(3, in_features=2), torch.randn(1, 2, 2))):
        with pytest.raises(TypeError, match="mask must be a boolean tensor"):
            module(x, [[True, False]])
        with pytest.raises(ValueError, match="mask .* must have the shape"):
            module(x, torch.ones(1, 3, dtype=torch.bool))


def test_times_beyond_the_compute_dtype_are_refused():
    with pytest.raises(ValueError, match="beyond what Time2Vec computes in"):
        Time2Vec(3)(torch.tensor([[0.0, 1e39]], dtype=torch.float64))
    assert torch.isfinite(Time2Vec(3).double()(torch.tensor([[0.0, 1e39]], dtype=torch.float64))).all()


def test_half_time2vec_is_the_float32_result_rounded():
    torch.manual_seed(0)
    t2v = Time2Vec(6)
    times = torch.linspace(0, 3, 7).unsqueeze(0)
    reference = t2v(times)
    half = Time2Vec(6).half()
    half.load_state_dict({k: v.half().float() for k, v in t2v.state_dict().items()})  # same (rounded) weights
    rounded_weights = Time2Vec(6)
    rounded_weights.load_state_dict({k: v.half().float() for k, v in t2v.state_dict().items()})
    out = half(times)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, rounded_weights(times).half(), rtol=0, atol=0)
    torch.testing.assert_close(out.float(), reference, rtol=0, atol=2e-2)


def test_half_time2vec_refuses_a_linear_term_beyond_float16():
    """The float32 result cast to float16 was inf where |w t + b| > 65504 (t = 1e5 hours, w ~ 1): now refused."""
    torch.manual_seed(0)
    t2v = Time2Vec(6).half()
    with pytest.raises(ValueError, match="Time2Vec's linear term reaches .* beyond what torch.float16 holds"):
        t2v(torch.tensor([[0.0, 1e5 / float(t2v.linear.weight.abs().max())]]))
    assert torch.isfinite(t2v.bfloat16()(torch.tensor([[0.0, 1e6]]))).all()  # bfloat16 has float32's range


def test_time2vec_is_batch_invariant_to_the_bit():
    torch.manual_seed(1)
    t2v = Time2Vec(9)
    gen = torch.Generator().manual_seed(0)
    times = (torch.rand(37, 11, generator=gen) * 100).sort(-1).values
    whole = t2v(times)
    for row in (0, 5, 36):
        assert torch.equal(t2v(times[row : row + 1])[0], whole[row])
