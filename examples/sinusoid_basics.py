"""Sinusoidal encodings of real-valued positions: the table, the relative-offset property, a module with a scale."""

import torch

from omnipos.core import SinusoidalEncoding, add_positional, sinusoidal

pe = sinusoidal(torch.arange(3), 4)
print("d=4 table:\n", pe)

# PE(i) . PE(j) depends only on i - j.
table = sinusoidal(torch.arange(100), 64, dtype=torch.float64)
gram = table @ table.T
print("PE(3).PE(7) =", gram[3, 7].item(), " PE(53).PE(57) =", gram[53, 57].item())

# Irregular, real-valued positions (say, event times in hours) and a learnable output scale.
times = torch.tensor([[0.0, 0.5, 3.25, 26.0]])
encoder = SinusoidalEncoding(32, scale=32 ** -0.5, learnable_scale=True)
tokens = torch.randn(1, 4, 32)
print(add_positional(tokens, encoder(times)).shape)
