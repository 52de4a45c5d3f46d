"""omnipos' RoPE inside a transformers model: patch a (tiny, random, nothing downloaded) Llama 3.1-style model,
generate, check it against the stock model, try YaRN x4 without editing the model's code, and undo.

Needs transformers (pip install "omnipos[transformers]"). With a real checkpoint the calls are the same:
``model = AutoModelForCausalLM.from_pretrained(...); patch_rotary(model)``.
"""

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from omnipos.integrations.transformers import RotaryPatch, patch_rotary, unpatch_rotary

config = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                     intermediate_size=128, vocab_size=256, max_position_embeddings=1024, rope_theta=5e5,
                     rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 128},
                     pad_token_id=0, eos_token_id=1, bos_token_id=2)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(config).eval()
prompt = torch.randint(3, 256, (1, 12), generator=torch.Generator().manual_seed(1))

with torch.no_grad():
    stock_logits = model(prompt).logits
    stock_tokens = model.generate(prompt, max_new_tokens=8, do_sample=False)
    stock_rotary = model.model.rotary_emb

    patch_rotary(model)                                   # in place; returns the model
    print(model.model.rotary_emb)                         # RotaryPatch(form='cat', ...) around omnipos' RoPE
    logits = model(prompt).logits
    tokens = model.generate(prompt, max_new_tokens=8, do_sample=False)
    print(f"logits vs stock: max |diff| = {(logits - stock_logits).abs().max().item():.2e}")
    print("greedy tokens identical:", torch.equal(tokens, stock_tokens), tokens[0, -8:].tolist())

    # the research workflow: another scaling, theta and lengths from the config
    unpatch_rotary(model)
    patch_rotary(model, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128})
    yarn = model(prompt).logits
    print(f"YaRN x4 moves the logits by {(yarn - stock_logits).abs().max().item():.2e}")

    unpatch_rotary(model)                                 # the very module objects come back
    assert model.model.rotary_emb is stock_rotary
    assert not any(isinstance(m, RotaryPatch) for m in model.modules())
    assert torch.equal(tokens, stock_tokens) and (logits - stock_logits).abs().max() < 1e-4
print("unpatched: back to the stock rotary module")
