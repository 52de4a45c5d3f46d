"""patch_rotary / unpatch_rotary on tiny random transformers models of every family the integration lists.

Per family: the patched model's logits equal the stock model's within 1e-4 at short positions, greedy generation
gives the same tokens, and unpatch_rotary puts back the very module objects. Runs with the installed transformers
(CI: 5.24); with transformers 4.57 on the path (PYTHONPATH=src:<folder with 4.57>) the same tests check the 4.x
module structures (Gemma 3's rotary_emb_local, Olmo 3's rotary_embs, Qwen2/2.5-VL's un-mixed [3, B, L, D] cos/sin);
a family the installed version lacks is skipped naming the version.
"""

import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModelForCausalLM
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from omnipos.core import RotaryEmbedding
from omnipos.integrations.transformers import (
    SUPPORTED_FAMILIES,
    RotaryPatch,
    patch_rotary,
    unpatch_rotary,
)

VERSION = transformers.__version__
TF4 = int(VERSION.split(".")[0]) < 5
COMMON = {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": 2,
          "intermediate_size": 64, "vocab_size": 128, "max_position_embeddings": 256, "pad_token_id": 0,
          "eos_token_id": 1, "bos_token_id": 2}
LONGROPE = {"type": "longrope", "short_factor": [1.0 + 0.05 * i for i in range(16)],
            "long_factor": [1.5 + 0.2 * i for i in range(16)]}
MOE = {"num_local_experts": 2, "num_experts_per_tok": 1}
FAMILIES = {  # model_type -> config keywords (tiny sizes; the RoPE as the released models have it)
    "llama": {"rope_theta": 5e5, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
    "llama4_text": {"head_dim": 32, "intermediate_size_mlp": 64, "rope_theta": 5e5, **MOE},
    "qwen2": {"rope_theta": 1e6, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 64}},
    "qwen3": {"head_dim": 32, "rope_theta": 1e6},
    "gemma3_text": {"head_dim": 32, "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8,
                    "rope_theta": 1e6, "rope_local_base_freq": 1e4,
                    "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
    "phi3": {"rope_scaling": LONGROPE, "original_max_position_embeddings": 64},
    "phimoe": {"rope_scaling": {**LONGROPE, "short_mscale": 1.1, "long_mscale": 1.2,
                                "original_max_position_embeddings": 64},
               "original_max_position_embeddings": 64, **MOE},
    "deepseek_v3": {"kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16,
                    "v_head_dim": 16, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
                    "moe_intermediate_size": 32, "first_k_dense_replace": 1, "rope_interleave": True,
                    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                     "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}},
    "mistral": {"rope_theta": 1e6, "sliding_window": None},
    "ministral": {"head_dim": 32, "rope_theta": 1e6, "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8},
    "olmo": {"rope_theta": 1e4},
    "olmo3": {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8, "rope_theta": 5e5,
              "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}},
    "gpt_neox": {"rotary_pct": 0.25, "rotary_emb_base": 1e4, "partial_rotary_factor": 0.25},
    "smollm3": {"no_rope_layer_interval": 2},
    "hunyuan_v1_dense": {"head_dim": 32, "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0}},
    # (transformers 5.x only) one rotary module per theta, read through rotary_emb.config: GraniteSWA;
    # a layer type without RoPE (its rope entry None), never passed to the module: Beam
    "granite_swa": {"head_dim": 32},
    "beam": {"head_dim": 32},
}
VLMS = {  # model_type -> (text config keywords, vision config keywords)
    "qwen2_vl": ({"rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]}},
                 {"depth": 1, "embed_dim": 32, "num_heads": 2, "hidden_size": 64, "mlp_ratio": 1}),
    "qwen2_5_vl": ({"rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]}},
                   {"depth": 1, "hidden_size": 32, "num_heads": 2, "out_hidden_size": 64, "intermediate_size": 32,
                    "fullatt_block_indexes": [0]}),
    "qwen3_vl": ({"head_dim": 32, "rope_scaling": {"rope_type": "default", "mrope_section": [8, 4, 4],
                                                   "mrope_interleaved": True}},
                 {"depth": 1, "hidden_size": 32, "num_heads": 2, "out_hidden_size": 64, "intermediate_size": 32,
                  "deepstack_visual_indexes": [0], "num_position_embeddings": 16}),
}


def _available(model_type):
    if model_type not in CONFIG_MAPPING:
        pytest.skip(f"transformers {VERSION} has no {model_type!r}")


def _check_patched(model, ids, runner=None, **forward):
    """Logits within 1e-4 of the stock model's, greedy tokens equal, unpatch restores the module objects.
    ``runner``: what computes the logits and generates (default: the patched model itself)."""
    model.eval()
    runner = model if runner is None else runner
    before = {n: m for n, m in model.named_modules()}
    with torch.no_grad():
        stock_logits = runner(ids, **forward).logits
        stock_tokens = runner.generate(ids, max_new_tokens=3, do_sample=False)
    assert patch_rotary(model) is model
    patches = [m for m in model.modules() if isinstance(m, RotaryPatch)]
    assert patches
    with torch.no_grad():
        logits = runner(ids, **forward).logits
        tokens = runner.generate(ids, max_new_tokens=3, do_sample=False)
    torch.testing.assert_close(logits, stock_logits, rtol=0, atol=1e-4)
    assert torch.equal(tokens, stock_tokens)
    assert unpatch_rotary(model) is model
    patch_rotary(model, scaling={"rope_type": "linear", "factor": 16.0})  # the logits do see the RoPE:
    with torch.no_grad():
        assert (runner(ids, **forward).logits - stock_logits).abs().max() > 4e-4  # 4x the tolerance above
    unpatch_rotary(model)
    after = {n: m for n, m in model.named_modules()}
    assert after.keys() == before.keys() and all(after[n] is before[n] for n in before)
    assert not any(isinstance(m, RotaryPatch) for m in model.modules())
    return patches


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_a_patched_language_model_gives_the_stock_logits_and_tokens(model_type):
    _available(model_type)
    config = AutoConfig.for_model(model_type, **{**COMMON, **FAMILIES[model_type]})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    ids = torch.randint(3, 128, (2, 9), generator=torch.Generator().manual_seed(1))
    _check_patched(model, ids)


WRAPPERS = {  # multimodal wrappers of text families: model_type -> (text family, vision config, top-level keywords)
    "gemma3": ("gemma3_text", {"hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1,
                               "num_attention_heads": 2, "image_size": 28, "patch_size": 14},
               {"mm_tokens_per_image": 4, "image_token_index": 120, "boi_token_index": 121, "eoi_token_index": 122}),
    "llama4": ("llama4_text", {"hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1,
                               "num_attention_heads": 2, "image_size": 28, "patch_size": 14, "vision_output_dim": 32,
                               "projector_input_dim": 32, "projector_output_dim": 64}, {"image_token_index": 120}),
}


@pytest.mark.parametrize("model_type", sorted(WRAPPERS))
def test_a_patched_multimodal_wrapper_patches_its_language_model(model_type):
    """Gemma 3 / Llama 4 ...ForConditionalGeneration: the language model's rotary modules are patched, the vision
    tower's left alone."""
    _available(model_type)
    text, vision, top = WRAPPERS[model_type]
    config = AutoConfig.for_model(model_type, text_config={**COMMON, **FAMILIES[text]}, vision_config=vision, **top)
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(config)
    runner = None
    if model_type == "llama4" and not TF4:
        # transformers 5.24's Llama4ForConditionalGeneration fails on a text-only forward (outputs.image_outputs
        # on its language model's output): its language model computes the logits
        runner = model.get_decoder()
    ids = torch.randint(3, 110, (1, 9), generator=torch.Generator().manual_seed(1))
    patches = _check_patched(model, ids, runner)
    assert all(type(p.original).__name__.startswith(("Gemma3RotaryEmbedding", "Llama4TextRotaryEmbedding"))
               for p in patches)


def _vlm(model_type):
    _available(model_type)
    text, vision = VLMS[model_type]
    text = {**COMMON, **text}
    config = AutoConfig.for_model(model_type, text_config=text, vision_config=vision,
                                  image_token_id=120, video_token_id=121, vision_start_token_id=122)
    torch.manual_seed(0)
    return transformers.AutoModelForImageTextToText.from_config(config)


@pytest.mark.parametrize("model_type", sorted(VLMS))
def test_a_patched_vision_language_model_takes_transformers_own_mrope_ids(model_type):
    """Text tokens through generate (get_rope_index's ids), and the forward at 3-D ids that differ per axis
    ([3, B, L], as transformers passes them), so a wrong section or axis order would show."""
    model = _vlm(model_type)
    ids = torch.randint(3, 110, (1, 9), generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(2)
    position_ids = torch.sort(torch.randint(0, 20, (3, 1, 9), generator=g), -1).values
    _check_patched(model, ids, position_ids=position_ids)


@pytest.mark.parametrize("model_type", sorted(VLMS))
def test_a_patched_vision_language_model_with_an_image(model_type):
    """An image among text tokens: transformers' get_rope_index gives the image's tokens (t, h, w) ids that differ
    per axis, handed to the rotary module as [3, B, L] unchanged; logits and greedy tokens equal the stock model's."""
    model = _vlm(model_type).eval()
    vision = model.config.vision_config
    grid = torch.tensor([[1, 4, 4]])  # 16 patches, 4 image tokens after the 2 x 2 merge
    pixels = torch.randn(16, 3 * vision.temporal_patch_size * vision.patch_size ** 2,
                         generator=torch.Generator().manual_seed(3))
    ids = torch.tensor([[5, 6, 122, 120, 120, 120, 120, 7, 8, 9]])
    inputs = {"pixel_values": pixels, "image_grid_thw": grid}
    if not TF4:  # transformers 5 asks for the processor's token types
        inputs["mm_token_type_ids"] = (ids == 120).long()
    with torch.no_grad():
        stock_logits = model(ids, **inputs).logits
        stock_tokens = model.generate(ids, max_new_tokens=3, do_sample=False, **inputs)
        patch_rotary(model)
        seen = []
        patch = model.model.language_model.rotary_emb  # (4.57 also has unused per-layer copies)
        assert isinstance(patch, RotaryPatch)
        hook = patch.register_forward_pre_hook(lambda module, args: seen.append(args[1]))
        logits = model(ids, **inputs).logits
        tokens = model.generate(ids, max_new_tokens=3, do_sample=False, **inputs)
        hook.remove()
    torch.testing.assert_close(logits, stock_logits, rtol=0, atol=1e-4)
    assert torch.equal(tokens, stock_tokens)
    first = seen[0]
    assert first.shape[0] == 3 and first.shape[-1] == ids.shape[1]  # [3, B, L] as transformers passes them
    assert not torch.equal(first[1], first[2])  # the image's rows and columns: the axes differ


def _patched(model_type):
    """{where: (form, call, layer types)} of the patched modules of the family's tiny model."""
    if model_type in VLMS:
        model = _vlm(model_type)
    else:
        _available(model_type)
        model = AutoModelForCausalLM.from_config(
            AutoConfig.for_model(model_type, **{**COMMON, **FAMILIES[model_type]}))
    patch_rotary(model)
    return {name: (m.form, m.call, tuple(sorted(m.ropes))) for name, m in model.named_modules()
            if isinstance(m, RotaryPatch)}


@pytest.mark.skipif(TF4, reason=f"transformers 5.x module structures (installed: {VERSION})")
def test_the_transformers_5_module_structures():
    both = ("full_attention", "sliding_attention")
    assert _patched("gemma3_text") == {"model.rotary_emb": ("cat", "layer_type", both)}
    assert _patched("olmo3") == {"model.rotary_emb": ("cat", "layer_type", both)}
    assert _patched("llama4_text") == {"model.rotary_emb": ("complex", "positions", ("default",))}  # freqs_cis
    assert _patched("qwen2_vl") == {"model.language_model.rotary_emb": ("cat", "positions", ("default",))}
    assert _patched("phimoe") == {"model.rotary_emb": ("cat", "positions", ("default",))}


@pytest.mark.skipif(not TF4, reason=f"transformers 4.x module structures (installed: {VERSION}; run with 4.57 on "
                                    "the path, see the module docstring)")
def test_the_transformers_4_module_structures():
    plain = ("cat", "positions", ("default",))
    assert _patched("gemma3_text") == {"model.rotary_emb": plain, "model.rotary_emb_local": plain}
    assert _patched("olmo3") == {"model.rotary_embs.sliding_attention": plain,
                                 "model.rotary_embs.full_attention": plain}
    assert _patched("llama4_text") == {"model.rotary_emb": ("complex", "positions", ("default",))}
    for vlm in ("qwen2_vl", "qwen2_5_vl"):  # un-mixed [3, B, L, D], mixed by apply_multimodal_rotary_pos_emb
        patched = _patched(vlm)  # (4.57 also gives each attention layer a rotary module of its own)
        assert "model.language_model.rotary_emb" in patched
        assert set(patched.values()) == {("mrope_split", "positions", ("default",))}
    assert _patched("phimoe") == {"model.rotary_emb": ("cat", "table", ("default",))}  # (x, seq_len=n)


def test_scaling_overrides_the_configs_and_matches_omnipos_rope():
    """YaRN x4 on a model whose config has none: the patched cos/sin are that RoPE's (theta from the config)."""
    config = AutoConfig.for_model("llama", **{**COMMON, "rope_theta": 5e5})
    model = AutoModelForCausalLM.from_config(config).eval()
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    patch_rotary(model, scaling=yarn)
    patch = next(m for m in model.modules() if isinstance(m, RotaryPatch))
    positions = torch.arange(100, 110)[None]
    cos, sin = patch(torch.zeros(1, 10, 64), positions)
    want = RotaryEmbedding(32, base=5e5, scaling=yarn).cos_sin(positions)
    torch.testing.assert_close((cos, sin), want)
    stock = patch.original(torch.zeros(1, 10, 64), positions)[0]
    assert (cos - stock).abs().max() > 0.1  # the override did change something


def test_cos_sin_follow_the_models_dtype_and_device_moves():
    config = AutoConfig.for_model("llama", **COMMON)
    model = AutoModelForCausalLM.from_config(config).eval()
    patch_rotary(model)
    model.to(torch.bfloat16)
    patch = next(m for m in model.modules() if isinstance(m, RotaryPatch))
    ids = torch.arange(4)[None]
    cos, sin = patch(torch.zeros(1, 4, 64, dtype=torch.bfloat16), ids)
    stock = patch.original(torch.zeros(1, 4, 64, dtype=torch.bfloat16), ids)
    assert cos.dtype == sin.dtype == torch.bfloat16 and cos.shape == stock[0].shape
    torch.testing.assert_close(cos, stock[0])
    torch.testing.assert_close(sin, stock[1])
    assert {k for k in model.state_dict()} == {k for k in unpatch_rotary(model).state_dict()}


def test_a_model_it_cannot_patch_is_refused_by_name_and_left_untouched():
    config = AutoConfig.for_model("gpt2", n_embd=64, n_layer=1, n_head=2, vocab_size=128)  # learned positions
    model = AutoModelForCausalLM.from_config(config)
    with pytest.raises(ValueError, match=r"GPT2LMHeadModel.*'gpt2'.*llama"):
        patch_rotary(model)
    with pytest.raises(TypeError, match="PreTrainedModel"):
        patch_rotary(torch.nn.Linear(2, 2))
    llama = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **COMMON))
    with pytest.raises(ValueError, match="kernel"):
        patch_rotary(llama, kernel="triton")
    with pytest.raises(ValueError, match="nothing to unpatch"):
        unpatch_rotary(llama)
    patch_rotary(llama)
    with pytest.raises(ValueError, match="patched already"):
        patch_rotary(llama)


def test_a_rotary_module_omnipos_does_not_reproduce_is_refused_before_anything_is_swapped():
    """The stock module is run first: one whose output omnipos does not give (here: its frequencies edited) is
    refused, naming the module and the class, and nothing is patched."""
    config = AutoConfig.for_model("llama", **COMMON)
    model = AutoModelForCausalLM.from_config(config)
    rotary = model.model.rotary_emb
    rotary.inv_freq.mul_(1.5)
    with pytest.raises(ValueError, match=r"LlamaForCausalLM.*model\.rotary_emb.*LlamaRotaryEmbedding"):
        patch_rotary(model)
    assert model.model.rotary_emb is rotary


def test_every_family_tested_here_is_listed_as_supported():
    assert set(FAMILIES) | set(VLMS) <= set(SUPPORTED_FAMILIES)


def test_a_missing_transformers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "omnipos\[transformers\]"'):
        patch_rotary(torch.nn.Linear(2, 2))


def test_a_patched_model_deep_copies_saves_and_compiles():
    """A training loop's uses of a patched model: ``copy.deepcopy`` (EMA), a state_dict round trip (what
    ``save_pretrained`` stores), and the rotary module under ``torch.compile(fullgraph=True, dynamic=True)`` at three
    lengths without a recompile, each giving the stock module's cos/sin."""
    import copy

    import torch._dynamo.testing

    config = AutoConfig.for_model("llama", **COMMON)
    model = AutoModelForCausalLM.from_config(config).eval()
    patch_rotary(model)
    ids = torch.randint(3, 100, (1, 9))
    with torch.no_grad():
        logits = model(ids).logits
        twin = copy.deepcopy(model)
        assert isinstance(twin.model.rotary_emb, RotaryPatch) and twin.model.rotary_emb is not model.model.rotary_emb
        torch.testing.assert_close(twin(ids).logits, logits, rtol=0, atol=0)
        fresh = AutoModelForCausalLM.from_config(config).eval()
        patch_rotary(fresh)
        fresh.load_state_dict(model.state_dict())
        torch.testing.assert_close(fresh(ids).logits, logits, rtol=0, atol=0)
    patch = model.model.rotary_emb
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(patch, backend=counter, fullgraph=True, dynamic=True)
    for length in (5, 11, 23):
        x, positions = torch.zeros(1, length, 64), torch.arange(length)[None] + 100
        for ours, stock in zip(compiled(x, positions), patch.original(x, positions)):
            torch.testing.assert_close(ours, stock)
    assert counter.frame_count == 1, counter.frame_count
