"""rope_frequencies vs HF transformers' ROPE_INIT_FUNCTIONS on real-looking configs, and CONVENTIONS' values."""

import math

import numpy as np
import pytest
import torch

from omnipos.core import RopeScaling, rope_frequencies
from omnipos.core.rope_scaling import yarn_correction_range

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402


def hf(scaling, *, head_dim, base, max_pos, seq_len=None, partial=None):
    """HF's own frequencies for a LlamaConfig carrying ``scaling`` (a copy: HF mutates the dict)."""
    params = dict(scaling, rope_theta=base)
    if partial is not None:
        params["partial_rotary_factor"] = partial
    config = LlamaConfig(hidden_size=head_dim * 8, num_attention_heads=8, head_dim=head_dim,
                         max_position_embeddings=max_pos, rope_parameters=params)
    kind = config.rope_parameters["rope_type"]
    if kind == "default":
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        return LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    return ROPE_INIT_FUNCTIONS[kind](config, "cpu", seq_len=seq_len)


def check(scaling, *, head_dim, base, max_pos, seq_len=None, ours_scaling=None, partial=None):
    inv_hf, att_hf = hf(scaling, head_dim=head_dim, base=base, max_pos=max_pos, seq_len=seq_len, partial=partial)
    dim = int(head_dim * (partial or 1.0))
    inv, att = rope_frequencies(dim, base=base, scaling=ours_scaling or scaling, seq_len=seq_len)
    assert inv.dtype == torch.float64 and inv.shape == (dim // 2,)
    # HF builds them in float32: agreement to float32 rounding is all there is to ask
    np.testing.assert_allclose(inv.numpy(), inv_hf.double().numpy(), rtol=2e-6, atol=0)
    assert math.isclose(att, float(att_hf), rel_tol=1e-6)
    return inv, att


LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}


def test_default_and_linear():
    check({"rope_type": "default"}, head_dim=128, base=10000.0, max_pos=4096)
    check({"rope_type": "linear", "factor": 2.0}, head_dim=128, base=10000.0, max_pos=4096)
    check({"type": "linear", "factor": 4.0}, head_dim=64, base=10000.0, max_pos=2048)  # pre-rope_type configs
    check({"rope_type": "linear", "factor": 2.0}, head_dim=80, base=10000.0, max_pos=4096, partial=0.5)


def test_llama3_matches_hf_and_conventions_counts():
    inv, att = check(LLAMA31, head_dim=128, base=500000.0, max_pos=131072)
    plain = rope_frequencies(128, base=500000.0)[0]
    kept = int((inv == plain).sum())
    divided = int(torch.isclose(inv, plain / 8, rtol=1e-15).sum())
    assert (kept, 64 - kept - divided, divided) == (29, 6, 29)
    assert att == 1.0


@pytest.mark.parametrize("scaling,head_dim,base,max_pos", [
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 128, 1e6, 131072),  # Qwen2.5
    ({"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32,
      "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.707}, 64, 10000.0, 163840),  # DeepSeek-style mscale
    ({"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0,
      "mscale_all_dim": 1.0}, 64, 10000.0, 163840),  # DeepSeek-V3: ratio 1
    ({"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
      "beta_slow": 1.0, "truncate": False}, 64, 150000.0, 131072),  # gpt-oss: untruncated ramp
    ({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192, "attention_factor": 1.3},
     128, 10000.0, 65536),
])
def test_yarn_matches_hf(scaling, head_dim, base, max_pos):
    check(scaling, head_dim=head_dim, base=base, max_pos=max_pos)


def test_yarn_conventions_reference():
    assert yarn_correction_range(128, 1e4, 4096) == (20, 46)
    inv, att = rope_frequencies(128, scaling=RopeScaling("yarn", factor=4.0, original_max_position_embeddings=4096))
    assert att == pytest.approx(1.138629, abs=1e-6)
    plain = rope_frequencies(128)[0]
    torch.testing.assert_close(inv[:21], plain[:21], rtol=0, atol=0)  # index <= low: untouched
    torch.testing.assert_close(inv[46:], plain[46:] / 4, rtol=1e-15, atol=0)  # index >= high: interpolated


def test_yarn_factor_from_lengths_like_hf():
    """No ``factor``: HF takes max_position_embeddings / original_max_position_embeddings (DeepSeek note)."""
    scaling = {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 4096}
    ours = dict(scaling, max_position_embeddings=16384)
    check(scaling, head_dim=64, base=10000.0, max_pos=16384, ours_scaling=ours)


def _phi3_factors(n, seed):
    gen = np.random.default_rng(seed)
    return np.sort(1.0 + gen.gamma(2.0, 8.0, size=n)).round(4).tolist()


@pytest.mark.parametrize("seq_len", [None, 3000, 4096, 4097, 60000])
def test_longrope_matches_hf(seq_len):
    scaling = {"rope_type": "longrope", "short_factor": _phi3_factors(48, 0), "long_factor": _phi3_factors(48, 1),
               "original_max_position_embeddings": 4096}
    # Phi-3-mini-128k: no factor in the dict; the ratio of lengths gives it
    ours = dict(scaling, max_position_embeddings=131072)
    inv, att = check(scaling, head_dim=96, base=10000.0, max_pos=131072, seq_len=seq_len, ours_scaling=ours)
    assert att == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
    check(dict(scaling, factor=16.0), head_dim=96, base=10000.0, max_pos=131072, seq_len=seq_len)
    long = seq_len is not None and seq_len > 4096
    factors = torch.tensor(ours["long_factor" if long else "short_factor"], dtype=torch.float64)
    torch.testing.assert_close(inv, rope_frequencies(96)[0] / factors, rtol=1e-15, atol=0)


@pytest.mark.parametrize("seq_len", [None, 1000, 4096, 4097, 9000, 100000])
def test_dynamic_matches_hf_below_and_above(seq_len):
    scaling = {"rope_type": "dynamic", "factor": 2.0}
    ours = dict(scaling, max_position_embeddings=4096)
    check(scaling, head_dim=128, base=10000.0, max_pos=4096, seq_len=seq_len, ours_scaling=ours)


def test_dynamic_is_stateless_and_traceable():
    scaling = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4096}
    short_before = rope_frequencies(128, scaling=scaling, seq_len=100)[0]
    rope_frequencies(128, scaling=scaling, seq_len=50000)  # a long prompt must not change what follows
    short_after = rope_frequencies(128, scaling=scaling, seq_len=100)[0]
    torch.testing.assert_close(short_before, short_after, rtol=0, atol=0)
    torch.testing.assert_close(short_after, rope_frequencies(128)[0], rtol=0, atol=0)
    for length in (100, 9000):
        as_tensor = rope_frequencies(128, scaling=scaling, seq_len=torch.tensor(length))[0]
        as_int = rope_frequencies(128, scaling=scaling, seq_len=length)[0]
        torch.testing.assert_close(as_tensor, as_int, rtol=1e-13, atol=0)
    formula = 10000.0 * (2 * 9000 / 4096 - 1) ** (128 / 126)
    exponents = torch.arange(0, 128, 2, dtype=torch.float64) / 128
    torch.testing.assert_close(rope_frequencies(128, scaling=scaling, seq_len=9000)[0],
                               torch.tensor(formula, dtype=torch.float64) ** -exponents, rtol=1e-13, atol=0)


def test_dataclass_equals_dict():
    a = rope_frequencies(128, base=500000.0, scaling=LLAMA31)
    b = rope_frequencies(128, base=500000.0, scaling=RopeScaling(**LLAMA31))
    torch.testing.assert_close(a[0], b[0], rtol=0, atol=0)
    assert RopeScaling.from_dict(LLAMA31) == RopeScaling(**LLAMA31)


@pytest.mark.parametrize("kwargs,exc,words", [
    ({"dim": 7}, ValueError, "dim must be even"),
    ({"dim": 0}, ValueError, "dim must be >= 1"),
    ({"base": 1.0}, ValueError, "base"),
    ({"scaling": {"rope_type": "ntk-by-parts"}}, ValueError, "rope_type"),
    ({"scaling": {"rope_type": "linear"}}, ValueError, "'factor'"),
    ({"scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192,
                  "high_freq_factor": 4.0}}, ValueError, "'low_freq_factor'"),
    ({"scaling": {"rope_type": "yarn", "factor": 4.0}}, ValueError, "'original_max_position_embeddings'"),
    ({"scaling": {"rope_type": "dynamic", "factor": 2.0}}, ValueError, "'max_position_embeddings'"),
    ({"scaling": {"rope_type": "longrope", "short_factor": [1.0] * 32, "original_max_position_embeddings": 4096,
                  "factor": 4.0}}, ValueError, "'long_factor'"),
    ({"scaling": {"rope_type": "longrope", "short_factor": [1.0] * 3, "long_factor": [1.0] * 3,
                  "original_max_position_embeddings": 4096, "factor": 4.0}}, ValueError, "short_factor"),
    ({"scaling": {"rope_type": "linear", "factr": 2.0}}, ValueError, "factr"),
    ({"scaling": {"rope_type": "linear", "factor": "2"}}, TypeError, "scaling['factor']"),
    ({"scaling": {"rope_type": "linear", "factor": -2.0}}, ValueError, "scaling['factor']"),
    ({"base": 10000.0, "scaling": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0}}, ValueError,
     "rope_theta"),
    ({"scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192,
                  "low_freq_factor": 4.0, "high_freq_factor": 1.0}}, ValueError, "high_freq_factor"),
    ({"scaling": [("rope_type", "linear")]}, TypeError, "scaling"),
])
def test_bad_input(kwargs, exc, words):
    kwargs = {"dim": 64, **kwargs}
    dim = kwargs.pop("dim")
    with pytest.raises(exc) as info:
        rope_frequencies(dim, **kwargs)
    assert words in str(info.value)


# -- transformers v5 rope_parameters: rope_theta inside, nesting by layer type, proportional, M-RoPE keys --------


@pytest.mark.parametrize("head_dim,partial,factor", [(64, 0.25, None), (128, 0.5, 2.0), (256, 0.25, None),
                                                     (48, 1.0, None), (80, 0.3, 4.0)])
def test_proportional_matches_hf(head_dim, partial, factor):
    """transformers' "proportional" (Gemma 4 full attention): the first int(partial * head_dim // 2) slots turn at
    base^(-2i / head_dim), the rest get frequency 0; all divided by factor. dim is the whole head dim here."""
    params = {"rope_type": "proportional", "rope_theta": 1_000_000.0, "partial_rotary_factor": partial}
    if factor is not None:
        params["factor"] = factor
    config = LlamaConfig(hidden_size=head_dim * 8, num_attention_heads=8, head_dim=head_dim,
                         max_position_embeddings=4096, rope_parameters=dict(params))
    inv_hf, att_hf = ROPE_INIT_FUNCTIONS["proportional"](config, "cpu")
    inv, att = rope_frequencies(head_dim, scaling=params)  # base from the dict's rope_theta
    assert inv.shape == (head_dim // 2,) and inv.dtype == torch.float64 and att == att_hf == 1.0
    np.testing.assert_allclose(inv.numpy(), inv_hf.double().numpy(), rtol=2e-6, atol=0)
    turned = int(partial * head_dim // 2)
    assert (inv[turned:] == 0).all() and (inv[:turned] > 0).all()


def test_rope_theta_comes_from_the_dict_when_base_is_not_given():
    from_dict = rope_frequencies(64, scaling={"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5})
    explicit = rope_frequencies(64, base=5e5, scaling={"rope_type": "linear", "factor": 2.0})
    torch.testing.assert_close(from_dict[0], explicit[0], rtol=0, atol=0)
    agreeing = rope_frequencies(64, base=5e5, scaling={"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5})
    torch.testing.assert_close(agreeing[0], explicit[0], rtol=0, atol=0)
    assert RopeScaling.from_dict({"rope_theta": 5e5}).rope_theta == 5e5
    torch.testing.assert_close(rope_frequencies(64)[0], rope_frequencies(64, base=1e4)[0], rtol=0, atol=0)


NESTED = {"full_attention": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024,
                             "rope_theta": 1e6},
          "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}


def test_nested_rope_parameters_by_layer_type():
    full = rope_frequencies(64, scaling=NESTED, layer_type="full_attention")
    flat = rope_frequencies(64, base=1e6, scaling={"rope_type": "yarn", "factor": 4.0,
                                                    "original_max_position_embeddings": 1024})
    torch.testing.assert_close(full[0], flat[0], rtol=0, atol=0)
    assert full[1] == flat[1] > 1
    sliding = rope_frequencies(64, scaling=NESTED, layer_type="sliding_attention")
    torch.testing.assert_close(sliding[0], rope_frequencies(64)[0], rtol=0, atol=0)


@pytest.mark.parametrize("kwargs,words", [
    ({"scaling": NESTED}, "pass layer_type="),
    ({"scaling": NESTED, "layer_type": "chunked_attention"}, "not a layer type"),
    ({"scaling": {"rope_type": "default"}, "layer_type": "full_attention"}, "not nested by layer type"),
    ({"scaling": {"full_attention": None, "sliding_attention": {}}, "layer_type": "full_attention"}, "None"),
    ({"scaling": {"rope_type": "longrope", "short_factor": [1.0] * 32, "long_factor": [1.0] * 32,
                  "original_max_position_embeddings": 1, "factor": 4.0}}, "original_max_position_embeddings"),
    ({"scaling": {"rope_type": "default", "partial_rotary_factor": 1.5}}, "partial_rotary_factor"),
    ({"scaling": {"rope_type": "default", "mrope_section": [16, -1, 8]}}, "mrope_section"),
])
def test_bad_rope_parameters(kwargs, words):
    with pytest.raises(ValueError) as info:
        rope_frequencies(64, **kwargs)
    assert words in str(info.value)
    with pytest.raises(TypeError, match="layer_type must be a str"):
        rope_frequencies(64, scaling=NESTED, layer_type=1)


def test_mrope_keys_and_legacy_mrope_type_are_the_plain_ladder():
    """Qwen2-VL's rope_parameters ({"type": "mrope", "mrope_section": [...]} in old configs): the frequencies are
    the default ladder; the sections only say which coordinate turns each slot (RotaryEmbedding)."""
    for params in ({"type": "mrope", "mrope_section": [16, 24, 24], "rope_theta": 1e6},
                   {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True,
                    "rope_theta": 1e6}):
        inv, att = rope_frequencies(128, scaling=params)
        torch.testing.assert_close(inv, rope_frequencies(128, base=1e6)[0], rtol=0, atol=0)
        assert att == 1.0


def test_a_float_length_in_a_scaling_dict_is_the_length_it_is():
    """A rope_scaling dict copied from a config.json that writes 1024.0 (transformers runs it) gives the same
    frequencies as 1024, compared with transformers' own yarn; failed before ('must be an int'). 1024.5 is refused."""
    written = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024.0}
    scaling = RopeScaling.from_dict(written)
    assert scaling.original_max_position_embeddings == 1024 and type(scaling.original_max_position_embeddings) is int
    ours, factor = rope_frequencies(64, base=10000.0, scaling=written)
    config = LlamaConfig(hidden_size=128, num_attention_heads=2, rope_theta=10000.0, max_position_embeddings=4096,
                         rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024})
    hf_inv, hf_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    torch.testing.assert_close(ours.to(torch.float32), hf_inv.to(torch.float32), rtol=1e-6, atol=0)
    assert factor == pytest.approx(hf_factor)
    with pytest.raises(TypeError, match="original_max_position_embeddings"):
        rope_frequencies(64, scaling={**written, "original_max_position_embeddings": 1024.5})
