"""Conformance with transformers' families, discovered from its config mapping (see rope_conformance.py).

The suite runs every family with its own rope type at short positions (about 12 s) and asserts that at least 95%
are reproduced; the whole table (every family, every rope type it supports, positions past the original lengths)
is the ``slow`` test, a few minutes long, so it runs when asked:
``OMNIPOS_SLOW=1 pytest -n 0 -m slow tests/core/test_rope_conformance.py``. Verified with transformers 5.24
(256 of 267 families).
"""

import math
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")

from core import rope_conformance as conformance  # noqa: E402

from omnipos.core import RotaryEmbedding, rope_layers  # noqa: E402

TF4 = int(transformers.__version__.split(".")[0]) < 5

# Every family omnipos does not reproduce with transformers 5.24, and why. A family that starts failing (or a new
# one that fails) must be added here with its reason; one that starts passing must be removed.
EXCEPTIONS = {
    "blt": "no head dim at the top level: BLT's sub-configs carry their own (the blt_* rows, reproduced)",
    "dots3_note_audio_encoder": "transformers' own rotary class fails on the default config (needs layer_types)",
    "efficientloftr": "an image-matching 2-D RoPE (its partial_rotary_factor is 4.0): a vision RoPE",
    "eomt_dinov3": "DINOv3's 2-D patch RoPE (its forward takes no position ids): a vision RoPE",
    "ernie4_5_vl_moe": "an M-RoPE variant (sections taken h, w, t over its own slot order)",
    "ernie4_5_vl_moe_text": "an M-RoPE variant (sections taken h, w, t over its own slot order)",
    "hunyuan_vl": "transformers' own rotary class fails on the default config (mrope_section None)",
    "hunyuan_vl_text": "transformers' own rotary class fails on the default config (mrope_section None)",
    "llama4_vision_model": "the vision tower's 2-D RoPE; its class needs fields the default config lacks",
    "musicflamingo": "transformers' own rotary class needs audio_frame_step, absent from the default config",
    "nanochat": "rotates by minus the angle (its rotate_half flips the sign): omnipos at negated positions (tested)",
}


def _check(results):
    unexplained = {r.model_type: r.reason for r in results if r.status == "exception"
                   and r.model_type not in EXCEPTIONS}
    assert not unexplained, f"families not reproduced and not explained: {unexplained}"
    stale = [r.model_type for r in results if r.status == "reproduced" and r.model_type in EXCEPTIONS]
    assert not stale, f"reproduced now: remove from EXCEPTIONS {stale}"


@pytest.fixture(scope="module")
def short_results():
    if TF4:
        pytest.skip(f"the discovery reads transformers 5's rope_parameters (installed: {transformers.__version__})")
    return conformance.run()


def test_every_family_with_its_own_rope_type_at_short_positions(short_results):
    results = short_results
    _check(results)
    counted = [r for r in results if r.status != "not counted"]
    reproduced = [r for r in counted if r.status == "reproduced"]
    assert len(counted) > 200  # a transformers with fewer families: the discovery broke
    assert len(reproduced) >= 0.95 * len(counted), conformance.table(results)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("OMNIPOS_SLOW"), reason="minutes long: run with OMNIPOS_SLOW=1 (see the "
                    "module docstring); the suite runs every family's own type above")
def test_every_family_every_rope_type_past_the_original_length():
    results = conformance.run(all_types=True, long=True)
    _check(results)
    counted = [r for r in results if r.status != "not counted"]
    reproduced = [r for r in counted if r.status == "reproduced"]
    assert len(counted) > 200  # a transformers with fewer families: the discovery broke
    assert len(reproduced) >= 0.95 * len(counted), conformance.table(results)  # 256 / 267 with 5.24


def test_the_rotated_q_k_are_checked_through_each_familys_own_apply_function(short_results):
    """Not only frequencies and cos/sin: q and k rotated by the family's own apply function, whatever its name, fed
    what its rotary module returns (Llama 4 and DeepSeek-V2: complex freqs_cis; DeepSeek-V3: cat-form cos/sin into
    apply_rotary_pos_emb_interleave). Llama 4 and DeepSeek-V2 rotated the wrong pairs before (q off by ~7)."""
    by_type = {r.model_type: r for r in short_results}
    assert by_type["llama4_text"].rotation == {"apply_rotary_emb"}
    assert by_type["llama4"].rotation == {"apply_rotary_emb"}
    assert by_type["deepseek_v2"].rotation == {"apply_rotary_emb"}
    assert by_type["deepseek_v3"].rotation == {"apply_rotary_pos_emb_interleave"}
    assert by_type["llama"].rotation == {"apply_rotary_pos_emb"}
    reproduced = [r for r in short_results if r.status == "reproduced"]
    checked = [r for r in reproduced if r.rotation]
    # 242 of 256 with 5.24; the others (MLA heads whose rope part is a slice the attention picks, Gemma 3n/4's
    # per-layer head dims) have their cos/sin compared
    assert len(checked) >= 0.9 * len(reproduced), [r.model_type for r in reproduced if not r.rotation]


def _q_k(dim, length=12, heads=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, heads, length, dim, generator=g), torch.randn(1, heads, length, dim, generator=g)


def test_llama4_rotates_interleaved_pairs_as_its_apply_rotary_emb():
    """Failed before the fix (layout 'half': q off by 6.4 from transformers' apply_rotary_emb)."""
    from transformers import Llama4TextConfig
    from transformers.models.llama4 import modeling_llama4 as m

    config = Llama4TextConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=2, head_dim=32,
                              num_hidden_layers=2, rope_theta=5e5)
    rope = RotaryEmbedding.from_config(config)
    assert rope.layout == "interleaved"
    positions = torch.arange(40, 52)
    freqs_cis = m.Llama4TextRotaryEmbedding(config)(torch.zeros(1, 12, 64), positions[None])
    q, k = _q_k(32)
    q_hf, k_hf = m.apply_rotary_emb(q.transpose(1, 2), k.transpose(1, 2), freqs_cis)  # [B, L, H, D] there
    q_ours, k_ours = rope(q, k, positions[None])
    torch.testing.assert_close(q_ours, q_hf.transpose(1, 2), rtol=0, atol=1e-5)
    torch.testing.assert_close(k_ours, k_hf.transpose(1, 2), rtol=0, atol=1e-5)


GEMMA3_V4 = {  # config.json as transformers 4 wrote Gemma 3's (tiny sizes)
    "model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
    "head_dim": 32, "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"],
    "rope_theta": 1e6, "rope_local_base_freq": 1e4, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "max_position_embeddings": 512, "sliding_window": 16, "vocab_size": 128, "intermediate_size": 64}
OLMO3_V4 = {  # Olmo 3: a flat yarn rope_scaling beside layer_types
    "model_type": "olmo3", "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"], "rope_theta": 5e5,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    "max_position_embeddings": 256, "sliding_window": 16, "vocab_size": 128, "intermediate_size": 64}


def _hf_per_layer_cos(v4, layer_type, positions):
    """transformers' cos for ``layer_type`` of a model built from the v4 config.json: 4.57's rotary_emb_local /
    rotary_embs, 5.x's per-layer-type rotary_emb."""
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.for_model(**v4)
    torch.manual_seed(0)
    model = AutoModel.from_config(config)
    x = torch.zeros(1, positions.shape[0], 64)
    if hasattr(model, "rotary_emb_local"):  # Gemma 3, transformers 4
        rotary = model.rotary_emb_local if layer_type == "sliding_attention" else model.rotary_emb
        return rotary(x, positions[None])[0][0]
    if hasattr(model, "rotary_embs"):  # Olmo 3, transformers 4
        return model.rotary_embs[layer_type](x, positions[None])[0][0]
    return model.rotary_emb(x, positions[None], layer_type)[0][0]


@pytest.mark.parametrize("v4", [GEMMA3_V4, OLMO3_V4], ids=["gemma3", "olmo3"])
@pytest.mark.parametrize("layer_type", ["sliding_attention", "full_attention"])
def test_a_config_as_transformers_4_wrote_it_gives_each_layer_type_its_rope(v4, layer_type):
    """Gemma 3's sliding layers: theta rope_local_base_freq (1e4), unscaled; Olmo 3's sliding layers: the default
    RoPE (its flat yarn is the full layers'). Failed before the fix (the global RoPE on sliding layers: Gemma 3's
    cos off by ~1.9, Olmo 3's yarn attention factor 1.14 on sliding layers)."""
    positions = torch.arange(100, 112)
    cos_hf = _hf_per_layer_cos(v4, layer_type, positions)
    cos, _ = RotaryEmbedding.from_config(v4, layer_type=layer_type).cos_sin(positions)
    torch.testing.assert_close(cos, cos_hf.float(), rtol=0, atol=2e-5)
    expected = {"sliding_attention": ("default", v4["rope_local_base_freq"] if "rope_local_base_freq" in v4
                                      else v4["rope_theta"]),
                "full_attention": (v4["rope_scaling"]["rope_type"], v4["rope_theta"])}[layer_type]
    rope = RotaryEmbedding.from_config(v4, layer_type=layer_type)
    assert (rope.scaling.rope_type, rope.base) == expected


HUNYUAN = {"model_type": "hunyuan_v1_dense", "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2,
           "head_dim": 32, "num_hidden_layers": 2, "rope_theta": 1e4, "max_position_embeddings": 64,
           "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0}, "vocab_size": 128,
           "intermediate_size": 64}


def _inv_freq(base, dim=32):
    return 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def test_hunyuan_dynamic_alpha_in_both_transformers_versions():
    """Hunyuan's "dynamic" + alpha: base * alpha^(d/(d-2)) at every length (omnipos, as transformers 5.x).
    transformers 4.57 recomputes past max_position_embeddings with plain dynamic NTK (alpha dropped): omnipos gives
    that with scaling={"rope_type": "dynamic", "factor": ...} (checked here against the 4.57 formula, and against
    the 4.57 module itself when 4.57 is the installed version)."""
    from transformers import AutoConfig, AutoModel

    d, theta, alpha, max_len = 32, 1e4, 1000.0, 64
    rope = RotaryEmbedding.from_config(HUNYUAN)
    alpha_freq = _inv_freq(theta * alpha ** (d / (d - 2)))
    for length in (16, 64, 200):  # below, at and past max_position_embeddings: the same frequencies
        positions = torch.arange(length)
        torch.testing.assert_close(rope.frequencies(positions), alpha_freq, rtol=1e-12, atol=0)
    # transformers 4.57 past max_position_embeddings (seq_len = max position + 1 = 200): dynamic NTK from theta
    seq_len, factor = 200, 1.0
    ntk_base = theta * ((factor * seq_len / max_len) - (factor - 1)) ** (d / (d - 2))
    tf4 = RotaryEmbedding(d, base=theta, scaling={"rope_type": "dynamic", "factor": factor,
                                                   "max_position_embeddings": max_len})
    positions = torch.arange(seq_len)
    torch.testing.assert_close(tf4.frequencies(positions), _inv_freq(ntk_base), rtol=1e-12, atol=0)
    assert not torch.allclose(tf4.frequencies(positions), alpha_freq)  # the two versions differ there
    config = AutoConfig.for_model(**HUNYUAN)
    torch.manual_seed(0)
    model = AutoModel.from_config(config)
    x = torch.zeros(1, seq_len, 64)
    cos_hf = model.rotary_emb(x, positions[None])[0][0].double()
    reference = tf4 if TF4 else rope
    torch.testing.assert_close(cos_hf, reference.cos_sin(positions, dtype=torch.float64)[0], rtol=0, atol=1e-4)


def test_from_config_reads_a_models_config():
    """Failed before: 'config has neither head_dim ...' for a model."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=2, num_hidden_layers=2,
                         intermediate_size=64, vocab_size=128, rope_theta=5e5)
    model = LlamaForCausalLM(config)
    ours = RotaryEmbedding.from_config(model)
    assert (ours.dim, ours.base) == (32, 5e5)
    assert rope_layers(model) == (True, True)
    with pytest.raises(TypeError, match="pass the model's config"):
        RotaryEmbedding.from_config(torch.nn.Linear(2, 2))


def test_a_float_original_max_position_embeddings_is_read_as_the_length_it_is():
    """1024.0 in a config.json (transformers runs it); failed before ('must be an int'). 1024.5 is refused."""
    base = {"hidden_size": 64, "num_attention_heads": 2, "max_position_embeddings": 4096,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    as_float = RotaryEmbedding.from_config({**base, "original_max_position_embeddings": 1024.0})
    as_int = RotaryEmbedding.from_config({**base, "original_max_position_embeddings": 1024})
    assert as_float.scaling == as_int.scaling and as_float.scaling.original_max_position_embeddings == 1024
    in_dict = RotaryEmbedding.from_config({**base, "rope_scaling": {**base["rope_scaling"],
                                                                    "original_max_position_embeddings": 1024.0}})
    assert in_dict.scaling == as_int.scaling
    with pytest.raises(TypeError, match="original_max_position_embeddings"):
        RotaryEmbedding.from_config({**base, "original_max_position_embeddings": 1024.5})


def test_rope_layers_refuses_an_absurd_layer_count_by_name():
    """Failed before: a bare MemoryError building 10**12 flags."""
    with pytest.raises(ValueError, match="num_hidden_layers"):
        rope_layers({"num_hidden_layers": 10**12, "hidden_size": 64, "num_attention_heads": 2})
    assert math.prod(rope_layers({"num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 2})) == 1
