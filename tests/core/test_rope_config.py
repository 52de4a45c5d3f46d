"""RoPE from released configs: ``scaling=`` as transformers stores it, ``RotaryEmbedding.from_config`` against the
model classes' own rotary embeddings, issue 29's keys (llama3 low == high, longrope mscales, NTK alpha), the
``inv_freq=`` escape hatch, ``rope_layers`` and DeepSeek-V3's channel order.

Verified with transformers 5.24 (the peer's float32 cos/sin: compared with a tolerance).
"""

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from omnipos.core import (
    RopeScaling,
    RotaryEmbedding,
    deinterleaved_channel_order,
    rope_arguments_from_config,
    rope_frequencies,
    rope_layers,
)

transformers = pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    Cohere2Config,
    DeepseekV3Config,
    Gemma3TextConfig,
    HunYuanDenseV1Config,
    Llama4TextConfig,
    LlamaConfig,
    Phi3Config,
    PhiConfig,
    PhimoeConfig,
    Qwen2_5_VLConfig,
    Qwen2VLConfig,
    Qwen3VLConfig,
    SmolLM3Config,
)
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # transformers' notes on unknown rope keys

SMALL = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=2, intermediate_size=32,
             vocab_size=32)
HALF = 8  # head dim 16 -> 8 frequency slots
SHORT = [1.0 + 0.1 * i for i in range(HALF)]
LONG = [2.0 + 0.37 * i for i in range(HALF)]


def rotary_class(config):
    """The family's rotary class (``<Family>RotaryEmbedding`` / ``...TextRotaryEmbedding``) from its modeling file."""
    import importlib

    module = importlib.import_module(f"transformers.models.{config.__class__.__module__.split('.')[-2]}.modeling_"
                                     f"{config.__class__.__module__.split('.')[-2]}")
    names = [n for n in dir(module) if n.endswith("RotaryEmbedding") and "Vision" not in n]
    text = [n for n in names if "Text" in n]
    return getattr(module, (text or names)[0])


def hf_rope(config, positions, layer_type=None):
    """transformers' inv_freq (after the forward: dynamic / longrope update it), attention factor and cos/sin.

    positions: [seq] or [seq, 3] (M-RoPE, omnipos's axes-last order). The attention factor is read off the output
    (|cos + i sin|), which is what multiplies q and k (Phimoe's mscales bypass its attention_scaling attribute)."""
    config = getattr(config, "text_config", None) or config
    module = rotary_class(config)(config)
    ids = positions[None] if positions.ndim == 1 else positions.T[:, None]
    kwargs = {} if layer_type is None else {"layer_type": layer_type}
    cos, sin = module(torch.zeros(1), ids, **kwargs)
    prefix = "" if layer_type is None else f"{layer_type}_"
    factor = (cos[0].double() ** 2 + sin[0].double() ** 2).sqrt().mean()
    return getattr(module, f"{prefix}inv_freq"), float(factor), cos[0], sin[0]


def assert_matches_transformers(config, positions, layer_type=None, *, freq_tol=2e-6):
    inv_hf, factor_hf, cos_hf, sin_hf = hf_rope(config, positions, layer_type)
    ours = RotaryEmbedding.from_config(config, layer_type=layer_type)
    checked = positions if ours.position_axes is None else positions
    inv = ours.frequencies(checked)
    torch.testing.assert_close(inv, inv_hf.double(), rtol=freq_tol, atol=0)
    assert math.isclose(float(ours.attention_factor_at(checked)), factor_hf, rel_tol=2e-6)
    cos, sin = ours.cos_sin(positions)
    tol = 4e-6 * max(1.0, float(positions.max()) / 100)  # HF's float32 angles lose ~ulp(position) each
    torch.testing.assert_close(cos, cos_hf, rtol=0, atol=tol)
    torch.testing.assert_close(sin, sin_hf, rtol=0, atol=tol)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, positions.shape[0], ours.dim, generator=g)
    k = torch.randn(1, 2, positions.shape[0], ours.dim, generator=g)
    rotary = cos_hf.shape[-1]  # partial rotary: the model rotates the first channels, the rest pass through
    q_hf, k_hf = apply_rotary_pos_emb(q[..., :rotary], k[..., :rotary], cos_hf[None], sin_hf[None])
    q_hf, k_hf = torch.cat((q_hf, q[..., rotary:]), -1), torch.cat((k_hf, k[..., rotary:]), -1)
    q_ours, k_ours = ours(q, k, positions[None])
    torch.testing.assert_close(q_ours, q_hf, rtol=0, atol=20 * tol)
    torch.testing.assert_close(k_ours, k_hf, rtol=0, atol=20 * tol)
    return ours


PAST = torch.arange(100)  # past every original length below (32)
MROPE_IDS = torch.randint(0, 120, (40, 3), generator=torch.Generator().manual_seed(3))


def llama_dynamic():
    return LlamaConfig(**SMALL, max_position_embeddings=32, rope_parameters={"rope_type": "dynamic", "factor": 2.0})


def phi3_longrope():  # as Phi-3-mini-128k's config.json writes it: no factor, original length on the config
    return Phi3Config(**SMALL, max_position_embeddings=256, original_max_position_embeddings=32,
                      rope_scaling={"type": "longrope", "short_factor": SHORT, "long_factor": LONG})


def qwen2_vl():  # the released "type": "mrope" (transformers 5 adds rope_type "default" beside it)
    return Qwen2VLConfig(text_config=dict(SMALL, rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}))


def qwen2_5_vl():
    return Qwen2_5_VLConfig(text_config=dict(SMALL, rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
                                             rope_theta=1e6))


def qwen3_vl():
    return Qwen3VLConfig(text_config=dict(SMALL, head_dim=16, rope_scaling={
        "rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True}))


def phi_partial():
    return PhiConfig(**SMALL, partial_rotary_factor=0.5, max_position_embeddings=32)


def llama4_scout_llama3():  # Llama 4 Scout: llama3 with low_freq_factor == high_freq_factor (an empty ramp)
    return LlamaConfig(**SMALL, rope_parameters={"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 1.0, "original_max_position_embeddings": 32,
                                                 "rope_theta": 5e5})


def hunyuan_alpha():  # Hunyuan dense's config.json: "dynamic" with alpha (and unused yarn keys)
    return HunYuanDenseV1Config(**SMALL, head_dim=16, rope_scaling={
        "type": "dynamic", "alpha": 1000.0, "factor": 1.0, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
        "mscale_all_dim": 1.0})


def phimoe_mscale():
    return PhimoeConfig(**SMALL, max_position_embeddings=256, rope_scaling={
        "rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG, "short_mscale": 1.21,
        "long_mscale": 1.35, "original_max_position_embeddings": 32})


@pytest.mark.parametrize("make,positions", [
    (llama_dynamic, PAST), (llama_dynamic, torch.arange(20)),
    (phi3_longrope, PAST), (phi3_longrope, torch.arange(20)),
    (qwen2_vl, MROPE_IDS), (qwen2_5_vl, MROPE_IDS), (qwen3_vl, MROPE_IDS),
    (phi_partial, PAST), (llama4_scout_llama3, PAST), (hunyuan_alpha, PAST),
    (phimoe_mscale, torch.arange(20)),
], ids=lambda v: v.__name__ if callable(v) else f"len{len(v)}")
def test_from_config_matches_the_model_class(make, positions):
    assert_matches_transformers(make(), positions)


def test_from_config_reads_the_vlm_top_level_the_text_config_and_the_config_json_dict():
    config = qwen2_5_vl()
    top, text = RotaryEmbedding.from_config(config), RotaryEmbedding.from_config(config.text_config)
    as_json = RotaryEmbedding.from_config(config.to_dict())
    for other in (text, as_json):
        assert repr(other) == repr(top)
        torch.testing.assert_close(other.cos_sin(MROPE_IDS), top.cos_sin(MROPE_IDS), rtol=0, atol=0)
    assert top.mrope_section == (2, 3, 3) and top.base == 1e6
    qwen3 = RotaryEmbedding.from_config(Qwen3VLConfig(text_config=dict(SMALL, head_dim=128)))  # section by default
    assert qwen3.mrope_section == (24, 20, 20) and qwen3.mrope_interleaved


def test_from_config_per_layer_type_parameters_match_gemma3():
    config = Gemma3TextConfig(**SMALL, head_dim=16, layer_types=["sliding_attention", "full_attention"],
                              rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                  "rope_theta": 1e6},
                                               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    for layer_type in ("full_attention", "sliding_attention"):
        assert_matches_transformers(config, PAST, layer_type)
    with pytest.raises(ValueError, match="layer_type"):
        RotaryEmbedding.from_config(config)


def test_from_config_never_edits_the_config():
    config = phi3_longrope()
    before = copy.deepcopy(config.to_dict())
    RotaryEmbedding.from_config(config)
    RotaryEmbedding.from_config(config.to_dict())
    assert config.to_dict() == before


def test_phimoe_mscales_past_the_original_length():
    """Past original_max_position_embeddings the released Phi-3.5-MoE code takes the long factors and long_mscale.
    transformers 5.24's PhimoeRotaryEmbedding takes long_mscale too but recomputes its frequencies without the length
    (short factors): omnipos follows the released model; the factor is compared with transformers, the frequencies
    with the float64 formula."""
    config = phimoe_mscale()
    _, factor_hf, _, _ = hf_rope(config, PAST)
    ours = RotaryEmbedding.from_config(config)
    assert float(ours.attention_factor_at(PAST)) == 1.35 and math.isclose(factor_hf, 1.35, rel_tol=2e-6)
    exponents = torch.arange(0, 16, 2, dtype=torch.float64) / 16
    expected = 1.0 / (torch.tensor(LONG, dtype=torch.float64) * 1e6 ** exponents)
    torch.testing.assert_close(ours.frequencies(PAST), expected, rtol=1e-12, atol=0)
    cos, _ = ours.cos_sin(PAST, dtype=torch.float64)
    angles = PAST.double()[:, None] * expected
    torch.testing.assert_close(cos[:, :HALF], 1.35 * torch.cos(angles), rtol=0, atol=1e-12)


def test_deepseek_v3_rope_interleave_is_interleaved_rotation_in_deinterleaved_order():
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3RotaryEmbedding,
        apply_rotary_pos_emb_interleave,
    )

    config = DeepseekV3Config(**SMALL, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, kv_lora_rank=8,
                              q_lora_rank=8, max_position_embeddings=128, rope_scaling={
                                  "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                                  "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0})
    ours = RotaryEmbedding.from_config(config)
    assert ours.layout == "interleaved" and ours.dim == 8
    cos_hf, sin_hf = DeepseekV3RotaryEmbedding(config)(torch.zeros(1), PAST[None])
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 2, 100, 8, generator=g), torch.randn(1, 2, 100, 8, generator=g)
    q_hf, k_hf = apply_rotary_pos_emb_interleave(q, k, cos_hf, sin_hf)
    q_ours, k_ours = ours(q, k, PAST[None])
    order = deinterleaved_channel_order(8)
    assert order.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    torch.testing.assert_close(q_ours[..., order], q_hf, rtol=0, atol=2e-5)
    torch.testing.assert_close(k_ours[..., order], k_hf, rtol=0, atol=2e-5)
    torch.testing.assert_close(q_ours @ k_ours.transpose(-1, -2), q_hf @ k_hf.transpose(-1, -2), rtol=0, atol=1e-4)
    assert deinterleaved_channel_order(6, 4).tolist() == [0, 2, 1, 3, 4, 5]


# -- scaling= as written --------------------------------------------------------------------------------------------

def test_scaling_accepts_the_released_qwen2_vl_dict_as_transformers_5_stores_it_and_leaves_it_alone():
    stored = qwen2_vl().text_config.rope_parameters
    assert stored["type"] == "mrope" and stored["rope_type"] == "default"  # what transformers 5.24 keeps
    before = copy.deepcopy(stored)
    rope = RotaryEmbedding(16, scaling=stored)
    assert stored == before
    assert rope.mrope_section == (2, 3, 3) and rope.base == 1e6 and rope.scaling.rope_type == "default"


@pytest.mark.parametrize("scaling,words", [
    ({"type": "linear", "rope_type": "default", "factor": 2.0}, "mean different things"),
    ({"rope_type": "dynamic", "factor": 2.0}, "from_config"),
    ({"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG, "original_max_position_embeddings": 32},
     "from_config"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
      "original_max_position_embeddings": 32}, "high_freq_factor"),
    ({"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG, "factor": 4.0,
      "original_max_position_embeddings": 32, "short_mscale": 1.2}, "long_mscale"),
    ({"rope_type": "ntk_alpha"}, "'alpha'"),
    ({"rope_type": "ntk_alpha", "alpha": -1.0}, "alpha"),
])
def test_bad_scaling_dicts_name_the_key(scaling, words):
    with pytest.raises(ValueError, match=words):
        RotaryEmbedding(16, scaling=scaling)


def test_hunyuan_alpha_formula_in_float64():
    inv, factor = rope_frequencies(16, base=1e4, scaling={"type": "dynamic", "alpha": 50.0, "factor": 1.0})
    base = 1e4 * 50.0 ** (16 / 14)
    torch.testing.assert_close(inv, base ** -(torch.arange(0, 16, 2, dtype=torch.float64) / 16), rtol=1e-14, atol=0)
    assert factor == 1.0 and RopeScaling.from_dict({"type": "dynamic", "alpha": 50.0}).rope_type == "ntk_alpha"


def test_llama3_empty_ramp_is_a_step_at_the_threshold():
    inv, _ = rope_frequencies(64, base=5e5, scaling={"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 1.0, "original_max_position_embeddings": 64})
    plain = 5e5 ** -(torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    long_waves = 2 * math.pi / plain > 64
    torch.testing.assert_close(inv, torch.where(long_waves, plain / 16, plain), rtol=1e-14, atol=0)
    assert 0 < int(long_waves.sum()) < 32 and torch.isfinite(inv).all()


# -- inv_freq= -------------------------------------------------------------------------------------------------------

@given(seed=st.integers(0, 2**16), layout=st.sampled_from(["half", "interleaved"]),
       partial=st.sampled_from([None, 8]))
@settings(max_examples=15, deadline=None)
def test_inv_freq_given_equals_the_module_that_computes_it(seed, layout, partial):
    g = torch.Generator().manual_seed(seed)
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    reference = RotaryEmbedding(16, layout=layout, rotary_dim=partial, scaling=scaling, base=500.0)
    given_ = RotaryEmbedding(16, layout=layout, rotary_dim=partial, inv_freq=reference.inv_freq)
    positions = torch.randint(0, 4000, (2, 7), generator=g)
    q, k = torch.randn(2, 3, 7, 16, generator=g), torch.randn(2, 3, 7, 16, generator=g)
    rotated, expected = given_(q, k, positions), reference(q, k, positions)
    factor = reference.attention_factor  # yarn's cos/sin factor is the only difference
    rotary = partial or 16
    for got, want, x in zip(rotated, expected, (q, k)):
        torch.testing.assert_close(got[..., :rotary] * factor, want[..., :rotary], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[..., rotary:], x[..., rotary:], rtol=0, atol=0)


def test_inv_freq_with_mrope_and_copies():
    inv = torch.rand(8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    rope = RotaryEmbedding(16, inv_freq=inv, mrope_section=(2, 3, 3))
    angles = rope.angles(MROPE_IDS)
    axes = torch.tensor([0, 0, 1, 1, 1, 2, 2, 2])
    torch.testing.assert_close(angles, MROPE_IDS.double()[:, axes] * inv, rtol=1e-15, atol=0)
    clone = copy.deepcopy(rope).half()
    assert clone.inv_freq.dtype == torch.float64 and torch.equal(clone.inv_freq, inv)
    assert "inv_freq=given" in repr(rope)


@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(inv_freq=torch.ones(7)), ValueError, "rotary_dim // 2 = 8"),
    (dict(inv_freq=torch.ones(8), base=500.0), ValueError, "give one"),
    (dict(inv_freq=torch.ones(8), scaling={"rope_type": "linear", "factor": 2.0}), ValueError, "linear"),
    (dict(inv_freq=[1.0] * 7 + [float("nan")]), ValueError, "finite"),
    (dict(inv_freq=[1.0] * 7 + [-1.0]), ValueError, ">= 0"),
    (dict(inv_freq="fast"), TypeError, "inv_freq"),
    (dict(inv_freq=torch.ones(8, dtype=torch.complex64)), TypeError, "inv_freq"),
])
def test_bad_inv_freq(kwargs, exc, words):
    with pytest.raises(exc, match=words):
        RotaryEmbedding(16, **kwargs)


# -- which layers use RoPE -------------------------------------------------------------------------------------------

def _layers_of(model):
    return model.model.layers if hasattr(model, "model") else model.layers


@pytest.mark.parametrize("make,rule", [
    (lambda: SmolLM3Config(**dict(SMALL, num_hidden_layers=8), pad_token_id=0),
     lambda layer: bool(layer.self_attn.use_rope)),
    (lambda: SmolLM3Config(**dict(SMALL, num_hidden_layers=5), no_rope_layer_interval=2, pad_token_id=0),
     lambda layer: bool(layer.self_attn.use_rope)),
    (lambda: SmolLM3Config(**dict(SMALL, num_hidden_layers=3), no_rope_layers=[0, 1, 0], pad_token_id=0),
     lambda layer: bool(layer.self_attn.use_rope)),
    (lambda: Llama4TextConfig(**dict(SMALL, num_hidden_layers=8), intermediate_size_mlp=32, num_local_experts=2),
     lambda layer: bool(layer.self_attn.use_rope)),
    (lambda: Cohere2Config(**dict(SMALL, num_hidden_layers=8), sliding_window_pattern=4),
     lambda layer: layer.self_attn.sliding_window is not None),
], ids=["smollm3-default", "smollm3-interval", "smollm3-list", "llama4", "cohere2"])
def test_rope_layers_agree_with_the_model_attention(make, rule):
    config = make()
    model = transformers.AutoModel.from_config(config)
    expected = tuple(rule(layer) for layer in _layers_of(model))
    assert rope_layers(config) == expected
    assert rope_layers(config.to_dict()) == expected
    assert not all(expected) and any(expected)


def test_rope_layers_nested_none_and_plain():
    assert rope_layers(LlamaConfig(**SMALL)) == (True, True)
    config = {"num_hidden_layers": 3, "layer_types": ["a", "b", "a"],
              "rope_parameters": {"a": {"rope_type": "default", "rope_theta": 1e4}, "b": None}}
    assert rope_layers(config) == (True, False, True)
    with pytest.raises(ValueError, match="no_rope_layers"):
        rope_layers({"num_hidden_layers": 2, "no_rope_layers": [1]})
    with pytest.raises(ValueError, match="num_hidden_layers"):
        rope_layers({"hidden_size": 8})
    with pytest.raises(TypeError, match="config"):
        rope_arguments_from_config("llama")


def test_nanochat_is_rope_at_negated_positions():
    """NanoChat's rotate_half flips the sign (the conformance exception): the same rotation by minus the angle."""
    from transformers.models.nanochat import modeling_nanochat

    config = transformers.NanoChatConfig(**SMALL)
    cos, sin = modeling_nanochat.NanoChatRotaryEmbedding(config)(torch.zeros(1), PAST[None])
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(1, 2, 100, 16, generator=g), torch.randn(1, 2, 100, 16, generator=g)
    q_hf, k_hf = modeling_nanochat.apply_rotary_pos_emb(q, k, cos, sin)
    q_ours, k_ours = RotaryEmbedding.from_config(config)(q, k, -PAST[None])
    torch.testing.assert_close(q_ours, q_hf, rtol=0, atol=1e-5)
    torch.testing.assert_close(k_ours, k_hf, rtol=0, atol=1e-5)
