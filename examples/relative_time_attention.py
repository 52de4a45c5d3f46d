"""Relative time in attention: core RotaryEmbedding turned by real-valued event times (hours).

RoPE rotates q and k by angles proportional to their positions; with event times as the positions, the attention
score between two events depends only on how far apart in time they are, not on when the timeline started or how
many events came before. This script checks that on a clinical-style timeline and prints the scores.
"""

import numpy as np
import torch

from omnipos.core import RotaryEmbedding
from omnipos.timeseries import batch_timelines

torch.manual_seed(0)
visits = [np.array(["2024-03-01T08:00", "2024-03-01T08:30", "2024-03-02T20:00", "2024-03-09T08:00"],
                   dtype="datetime64[ns]")]
times, mask = batch_timelines(visits, origin="epoch")   # [1, 4] float64 hours since 1970: large, real-valued
# slowest frequency base ** (-(d - 2) / d) ~ 1 / 4 years in hours: angles stay distinct over clinical spans
rope = RotaryEmbedding(16, base=1e5)
q = torch.randn(1, 2, 4, 16, dtype=torch.float64)       # [batch, heads, events, head_dim]
k = torch.randn(1, 2, 4, 16, dtype=torch.float64)


def scores(positions):
    q_rot, k_rot = rope(q, k, positions)                # positions [batch, events], real-valued
    return q_rot @ k_rot.transpose(-1, -2)              # [batch, heads, events, events]


at_epoch = scores(times)
from_first = scores(times - times[:, :1])               # the same timeline, shifted to start at 0
a_year_later = scores(times + 24 * 365.25)
print("scores, head 0 (hours since 1970):\n", at_epoch[0, 0].numpy().round(4))
print("max |difference| when the timeline is shifted to 0:", (at_epoch - from_first).abs().max().item())
print("max |difference| when it is shifted a year later:", (at_epoch - a_year_later).abs().max().item())
assert torch.allclose(at_epoch, from_first, atol=1e-6) and torch.allclose(at_epoch, a_year_later, atol=1e-6)

# only the time difference matters: the same q, k pair 30 minutes apart scores the same at any moment
pair = torch.tensor([[0.0, 0.5], [1000.0, 1000.5]], dtype=torch.float64)
q2, k2 = q[:, :, :2].expand(2, -1, -1, -1), k[:, :, :2].expand(2, -1, -1, -1)
q_rot, k_rot = rope(q2, k2, pair)
s = q_rot @ k_rot.transpose(-1, -2)
print("score(0 h, 0.5 h) =", s[0, 0, 0, 1].item(), "  score(1000 h, 1000.5 h) =", s[1, 0, 0, 1].item())
