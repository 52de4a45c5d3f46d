"""Rotary embeddings: HF-compatible cos/sin, a scaled RoPE, the relative-offset property, 2-D axial RoPE, multimodal
M-RoPE (Qwen2-VL), 3-D video RoPE (HunyuanVideo), transformers v5 rope_parameters, xPos under a KV cache, ALiBi."""

import torch

from omnipos.core import RotaryEmbedding, alibi_bias, alibi_slopes, rope_frequencies

# Llama-3.1 scaling, exactly the dict in its config.json; q/k in HF's [batch, heads, seq, head_dim] layout.
llama31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}
rope = RotaryEmbedding(128, base=500000.0, scaling=llama31)
print(rope)
q, k = torch.randn(1, 8, 6, 128), torch.randn(1, 2, 6, 128)
q_rot, k_rot = rope(q, k, torch.arange(6))
print("rotated:", tuple(q_rot.shape), tuple(k_rot.shape))

inv_freq, factor = rope_frequencies(128, base=500000.0, scaling=llama31)
kept = (inv_freq == rope_frequencies(128, base=500000.0)[0]).sum().item()
print(f"llama3: {kept} of 64 frequencies kept as trained")

# <rope(q, m), rope(k, n)> depends only on m - n: move both by 1000 positions and the score stays.
plain = RotaryEmbedding(64)
a, b = torch.randn(1, 64, dtype=torch.float64), torch.randn(1, 64, dtype=torch.float64)
for m, n in [(3, 7), (1003, 1007)]:
    score = plain.rotate(a, torch.tensor([m])) @ plain.rotate(b, torch.tensor([n])).T
    print(f"score(m={m}, n={n}) = {score.item():.10f}")

# Dynamic NTK is stateless: a long prompt does not change what later short calls get.
dynamic = RotaryEmbedding(64, scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 512})
x = torch.randn(1, 4, 64)
before = dynamic.rotate(x, torch.arange(4))
dynamic.rotate(torch.randn(1, 2000, 64), torch.arange(2000))
print("dynamic NTK unchanged after a long call:", torch.equal(before, dynamic.rotate(x, torch.arange(4))))

# 2-D axial RoPE for a 4 x 5 patch grid (row, col), timm / rotary-embedding-torch convention.
grid = torch.stack(torch.meshgrid(torch.arange(4), torch.arange(5), indexing="ij"), -1).reshape(20, 2)
vision = RotaryEmbedding(32, layout="interleaved", n_axes=2)
print("axial:", tuple(vision.rotate(torch.randn(2, 3, 20, 32), grid).shape))

# M-RoPE (Qwen2-VL): ids (t, h, w) per token, axes last; a text token has the same id on all three axes.
mrope = RotaryEmbedding(128, base=1e6, mrope_section=(16, 24, 24))
text = torch.arange(4)[:, None].expand(4, 3)                               # 4 text tokens
rows, cols = torch.meshgrid(torch.arange(2), torch.arange(3), indexing="ij")
image = torch.stack([torch.zeros(6, dtype=torch.long), rows.flatten(), cols.flatten()], -1) + 4   # a 2 x 3 grid
ids = torch.cat([text, image])[None]                                         # [batch, seq, 3]
q, k = mrope(torch.randn(1, 8, 10, 128), torch.randn(1, 2, 10, 128), ids)
same_id = torch.arange(10)[:, None].expand(10, 3)                           # pure text: (p, p, p)
print("M-RoPE:", tuple(q.shape), "; on text it is 1-D RoPE:",
      torch.equal(mrope.rotate(q, same_id), RotaryEmbedding(128, base=1e6).rotate(q, torch.arange(10))))

# A transformers v5 config writes rope_theta, the sections and per-layer-type dicts into rope_parameters.
rope_parameters = {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20],
                   "mrope_interleaved": True}                                # Qwen3-VL
print(RotaryEmbedding(128, scaling=rope_parameters))
gemma_like = {"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6},
              "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
print(RotaryEmbedding(256, scaling=gemma_like, layer_type="full_attention"))

# 3-D video RoPE with unequal per-axis dims (HunyuanVideo's rope_dim_list), ids [T*H*W, 3].
video = RotaryEmbedding(128, n_axes=3, axes_dims=(16, 56, 56), layout="interleaved", base=256.0)
t, h, w = torch.meshgrid(torch.arange(2), torch.arange(3), torch.arange(4), indexing="ij")
video_ids = torch.stack([t, h, w], -1).reshape(24, 3)
print("3-D RoPE:", tuple(video.rotate(torch.randn(1, 4, 24, 128), video_ids).shape))

# xPos with a fixed centre: keys rotated at prefill + a decode-step query = one full call, exactly.
xpos = RotaryEmbedding(32, layout="interleaved", xpos=True, xpos_center=512.0)
q, k = torch.randn(1, 9, 32, dtype=torch.float64), torch.randn(1, 9, 32, dtype=torch.float64)
q_full, k_full = xpos(q, k, torch.arange(9))
_, k_cache = xpos(q[:, :8], k[:, :8], torch.arange(8))
q_step, k_step = xpos(q[:, 8:], k[:, 8:], torch.tensor([8]))
cached = q_step @ torch.cat([k_cache, k_step], 1).transpose(-1, -2)
print("xPos cached == full:", torch.allclose(cached, q_full[:, 8:] @ k_full.transpose(-1, -2), atol=1e-12))

print("ALiBi slopes for 12 heads:", [round(s, 4) for s in alibi_slopes(12).tolist()])
print("ALiBi bias head 0, query 3:", alibi_bias(12, 5, 5)[0, 3].tolist())
