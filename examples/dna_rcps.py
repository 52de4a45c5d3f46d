"""A small Caduceus-style RCPS model on real reads: every layer shares its weights between the two strands, so the
model is exactly reverse-complement equivariant, and this checks it on the reads of a FASTQ file.

Reads a FASTQ (the path on the command line; by default dnaio's test reads when present here, else a few generated
reads), trains a masked-token model for a few steps, then checks that the logits of each read's reverse
complement are the reverse complement of its logits, bit for bit, padding included.

    python examples/dna_rcps.py [reads.fastq]
"""

import random
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

from omnipos.dna import (
    PAD,
    RCPS,
    RCPSAddNorm,
    RCPSEmbedding,
    RCPSLMHead,
    read_fastx,
    reverse_complement,
    reverse_complement_logits,
    vocab_size,
)

PEER_READS = [Path("/work/shared/peer-data/dnaio") / name for name in ("small.fastq", "paired.1.fastq",
                                                                        "interleaved.fastq")]


class Conv(nn.Module):
    """A plain conv along the sequence, [B, L, C] -> [B, L, C]: it knows nothing about strands."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, 5, padding=2)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(h.transpose(1, 2)).transpose(1, 2))


class Attention(nn.Module):
    """Self-attention over the real positions of each read."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(channels, 2, batch_first=True)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.attention(h, h, h, key_padding_mask=~mask, need_weights=False)[0]


class RCPSModel(nn.Module):
    """Embedding (both strands on the channel axis) -> conv -> attention, pre-norm residual -> tied LM head."""

    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        vocab, half = vocab_size(), dim // 2  # the paper's split variant: each layer sees one strand's half
        self.embed = RCPSEmbedding(vocab, dim, "iupac")
        self.norm1 = RCPSAddNorm(nn.LayerNorm(half))
        self.conv = RCPS(Conv(half))
        self.norm2 = RCPSAddNorm(nn.LayerNorm(half))
        self.attend = RCPS(Attention(half), pass_mask=True)
        self.norm3 = RCPSAddNorm(nn.LayerNorm(half))
        self.head = RCPSLMHead(dim, vocab, "iupac", tied_to=self.embed)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        x, residual = self.norm1(h, prenorm=True, mask=mask)
        x, residual = self.norm2(self.conv(x, mask), residual, prenorm=True, mask=mask)
        x = self.norm3(self.attend(x, mask), residual, mask=mask)
        return self.head(x, mask)                                 # [B, L, vocab]


def fastq_paths() -> list[Path]:
    if len(sys.argv) > 1:
        return [Path(p) for p in sys.argv[1:]]
    found = [p for p in PEER_READS if p.exists()]
    if found:
        return found
    rng = random.Random(0)
    path = Path(tempfile.mkdtemp()) / "reads.fastq"
    with open(path, "w") as handle:
        for i in range(12):
            seq = "".join(rng.choice("ACGTN") for _ in range(rng.randint(20, 40)))
            handle.write(f"@read{i}\n{seq}\n+\n{'I' * len(seq)}\n")
    return [path]


def main() -> None:
    torch.manual_seed(0)
    batches = [batch for path in fastq_paths() for batch in read_fastx(path, batch_size=64)]
    model = RCPSModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(20):                                        # masked-token training, a few steps
        batch = batches[step % len(batches)]
        tokens = batch.tokens.long()
        hidden = (torch.rand(tokens.shape) < 0.15) & batch.mask
        logits = model(torch.where(hidden, torch.full_like(tokens, PAD), tokens), batch.mask)
        loss = nn.functional.cross_entropy(logits[hidden], tokens[hidden]) if hidden.any() else logits.sum() * 0
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    model = model.double().eval()
    reads = 0
    with torch.no_grad():
        for batch in batches:
            tokens, mask = batch.tokens.long(), batch.mask
            logits = model(tokens, mask)
            rc_logits = model(reverse_complement(tokens, mask), mask)   # pads stay at the end of each row
            # the RC read's logits: positions reversed within each read, token ids complemented; bit for bit
            assert torch.equal(rc_logits, reverse_complement_logits(logits, model.head.complement, mask))
            reads += len(batch)
    print(f"{reads} reads from {len(batches)} batch(es); last loss {loss.item():.3f}; "
          f"{sum(p.numel() for p in model.parameters())} parameters (head tied to the embedding)")
    print("RCPS model is exactly RC-equivariant on every read (float64, padding included)")


if __name__ == "__main__":
    main()
