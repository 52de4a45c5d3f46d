"""A ConvTran-style classifier of multivariate series: conv embedding, tAPE, attention with eRPE, global pooling.

The layout of ConvTran (Foumani et al., 2023; Navidfoumani/ConvTran ``Models/model.py``): a temporal conv over
each channel (kernel 7 here, 8 in ConvTran), a conv across the channels, then one transformer layer whose input
carries tAPE (absolute positions scaled to the series length) and whose attention weights carry eRPE (a learned
scalar per offset and head, added after the softmax). The data are synthetic: two bursts in different channels
whose order (or coincidence) is the class, so the model has to know where things happen. A few seconds on a CPU.
"""

import torch
from torch import nn

from omnipos.timeseries import ERPE, TAPE, erpe_attention

CHANNELS, LENGTH, CLASSES = 3, 48, 3


def make_series(count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """[count, CHANNELS, LENGTH] noisy series and their classes: a burst in channel 0 and one in channel 1,
    first-then-second (class 0), second-then-first (class 1) or at the same time (class 2)."""
    labels = torch.randint(0, CLASSES, (count,), generator=generator)
    x = 0.3 * torch.randn(count, CHANNELS, LENGTH, generator=generator)
    steps = torch.arange(LENGTH)
    early = torch.randint(4, 18, (count,), generator=generator)
    late = early + torch.randint(14, 26, (count,), generator=generator)
    first = torch.where(labels == 1, late, early)
    second = torch.where(labels == 0, late, early)
    burst = lambda at: torch.exp(-0.5 * ((steps - at[:, None]) / 1.5) ** 2)  # noqa: E731
    x[:, 0] += burst(first)
    x[:, 1] += burst(second)
    return x, labels


class ConvTranStyle(nn.Module):
    def __init__(self, channels: int, length: int, classes: int, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.temporal = nn.Sequential(nn.Conv2d(1, 4 * dim, (1, 7), padding="same"), nn.BatchNorm2d(4 * dim),
                                      nn.GELU())
        self.spatial = nn.Sequential(nn.Conv2d(4 * dim, dim, (channels, 1)), nn.BatchNorm2d(dim), nn.GELU())
        self.tape = TAPE(dim, length)                       # tAPE: sinusoid with frequencies scaled by dim / length
        self.heads, self.dim = heads, dim
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.erpe = ERPE(length, heads)                     # eRPE: added to the attention weights (paper)
        self.attention_norm = nn.LayerNorm(dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.feed_forward = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Dropout(0.1),
                                          nn.Linear(2 * dim, dim))
        self.classify = nn.Linear(dim, classes)

    def forward(self, series: torch.Tensor) -> torch.Tensor:  # [B, C, L] -> [B, classes]
        h = self.spatial(self.temporal(series.unsqueeze(1))).squeeze(2).transpose(1, 2)   # [B, L, dim]
        batch, length, _ = h.shape
        q, k, v = self.qkv(self.tape(h)).reshape(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attended = erpe_attention(q, k, v, self.erpe, scale=self.dim ** -0.5)           # ConvTran's scale
        h = self.norm1(h + self.attention_norm(attended.transpose(1, 2).reshape(batch, length, -1)))
        h = self.norm2(h + self.feed_forward(h))
        return self.classify(h.mean(1))


def main() -> None:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    train_x, train_y = make_series(512, generator)
    test_x, test_y = make_series(256, generator)
    model = ConvTranStyle(CHANNELS, LENGTH, CLASSES)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(4):
        model.train()
        for batch in torch.randperm(len(train_x)).split(32):
            loss = nn.functional.cross_entropy(model(train_x[batch]), train_y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(test_x).argmax(-1) == test_y).float().mean().item()
        bias = model.erpe.bias(LENGTH)                      # [heads, L, L], learned
        near = model.erpe.table[LENGTH - 4:LENGTH + 3, 0]   # offsets i - j = -3 .. 3 of head 0
    print(f"test accuracy {accuracy:.1%} on {CLASSES} classes (chance {1 / CLASSES:.0%}) after {epoch + 1} epochs")
    print(f"learned eRPE bias per head: mean |b| {bias.abs().mean():.3f}; offsets -3..3 of head 0: "
          f"{[round(b, 3) for b in near.tolist()]}")
    assert accuracy > 0.8, "the classifier should separate the three burst orders"


if __name__ == "__main__":
    main()
