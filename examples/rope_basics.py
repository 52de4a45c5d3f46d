"""Rotary embeddings: HF-compatible cos/sin, a scaled RoPE, the relative-offset property, 2-D axial RoPE, ALiBi."""

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

print("ALiBi slopes for 12 heads:", [round(s, 4) for s in alibi_slopes(12).tolist()])
print("ALiBi bias head 0, query 3:", alibi_bias(12, 5, 5)[0, 3].tolist())
