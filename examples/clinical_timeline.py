"""A tiny transformer on a synthetic clinical cohort: EventBatch + TimelineEncoder, trained for a few steps.

The task: tell shift workers from day workers. Only *when* events happen (time of day, day of week) separates
them, so the periodic part of the time encoding carries the signal. The batch keeps times relative to each
patient's first event (the default origin) and the clock of that event: the encoder reads the time of day on the
clock. Runs in seconds on a CPU.
"""

import torch
from torch import nn

from omnipos.app.synthetic import synthetic_cohort
from omnipos.timeseries import EventBatch, TimelineEncoder

torch.manual_seed(0)
events, labels = synthetic_cohort(100, seed=0)        # MEDS-style rows: subject_id, time, code, numeric_value
batch = EventBatch.from_frame(events)  # sorted by (subject, time); hours from each first event + batch.clock
y = torch.tensor(labels.loc[batch.subjects].to_numpy(), dtype=torch.float32)
print(batch)


class TinyTimelineModel(nn.Module):
    def __init__(self, vocab_size: int, dim: int = 32):
        super().__init__()
        self.codes = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.value = nn.Linear(1, dim)
        self.time = TimelineEncoder(dim, components=("absolute", "periodic", "gap"), combine="sum",
                                    min_period="1h", max_period="3650d")
        layer = nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 1)

    def forward(self, b: EventBatch) -> torch.Tensor:
        values = torch.nan_to_num(b.values, nan=0.0).unsqueeze(-1) / 100.0
        x = self.codes(b.codes) + self.value(values) + self.time(b)  # the batch brings mask, clock and unit
        h = self.encoder(x, src_key_padding_mask=~b.mask)
        pooled = (h * b.mask.unsqueeze(-1)).sum(1) / b.mask.sum(1, keepdim=True).clamp_min(1)
        return self.head(pooled).squeeze(-1)


model = TinyTimelineModel(len(batch.vocab))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(25):
    logits = model(batch)
    loss = nn.functional.binary_cross_entropy_with_logits(logits, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 5 == 0 or step == 24:
        accuracy = ((logits > 0) == y.bool()).float().mean()
        print(f"step {step:2d}  loss {loss.item():.3f}  train accuracy {accuracy:.2f}")
