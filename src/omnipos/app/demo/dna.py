"""The DNA section of ``omnipos demo``: a generated FASTQ, read and encoded; the RC symmetry shown as numbers."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import torch

from omnipos.dna import (
    RCEquivariant,
    decode,
    encode,
    flip_within_lengths,
    kmer_tokens,
    one_hot,
    rc_symmetric_encoding,
    read_fastx,
    relative_basis,
    reverse_complement,
)

__all__ = ["demo_section", "write_demo_fastq"]

MOTIF = "GATTACA"


def write_demo_fastq(path: Path, reads: int = 1000, seed: int = 0) -> Path:
    """Random 150-bp reads (a few shorter, some soft-masked, 0.1% N), with the motif planted at position 20."""
    rng = random.Random(seed)
    lines = []
    for i in range(reads):
        length = 150 if i % 10 else rng.randint(60, 149)
        seq = [rng.choice("ACGT") if rng.random() > 0.001 else "N" for _ in range(length)]
        seq[20:20 + len(MOTIF)] = MOTIF
        if i % 7 == 0:
            seq[100:120] = [c.lower() for c in seq[100:120]]
        qual = "".join(chr(33 + rng.randint(2, 40)) for _ in range(length))
        lines.append(f"@demo_read_{i}\n{''.join(seq)}\n+\n{qual}\n")
    path.write_text("".join(lines))
    return path


def _row(values: torch.Tensor) -> str:
    return "[" + ", ".join(f"{v:7.4f}" for v in values.tolist()) + "]"


def demo_section(out_dir: Path | None) -> None:
    print("== dna: reverse-complement-aware encodings of reads ==")
    with tempfile.TemporaryDirectory() as tmp:
        path = write_demo_fastq(Path(tmp) / "demo.fastq")
        batches = list(read_fastx(path, batch_size=256))
    batch = batches[0]
    total = sum(len(b) for b in batches)
    print(f"generated FASTQ: {total} reads in {len(batches)} batches of <= 256; first batch tokens "
          f"{tuple(batch.tokens.shape)}, lengths {int(batch.lengths.min())}..{int(batch.lengths.max())}, "
          f"mean Phred {batch.qualities[batch.mask].float().mean():.1f}")
    print(f"  read 0 starts {decode(batch.tokens[:1, :30])[0]}...  (lowercase = soft-masked, kept as a channel)")

    # RC of a padded batch keeps the pads at the end; twice is the identity.
    rc = reverse_complement(batch.tokens, batch.mask)
    print(f"reverse_complement of the padded batch: pads moved = {int(((rc == 15) != ~batch.mask).sum())}, "
          f"RC twice == identity: {torch.equal(reverse_complement(rc, batch.mask), batch.tokens)}")

    # The encoding of every read equals that of its RC read, position by position (flipped within its length).
    pe = rc_symmetric_encoding(batch.lengths, 16)
    aware = rc_symmetric_encoding(batch.lengths, 16, strand_aware=True)
    flipped = flip_within_lengths(aware, batch.mask)
    print("rc_symmetric_encoding (dim 16), whole batch, even and odd lengths:")
    print(f"  cosines   max |PE(read) - PE(RC read, aligned)|      = "
          f"{(flip_within_lengths(pe, batch.mask) - pe).abs().max():.1e}")
    print(f"  strand-aware sines  max |sin(read) + sin(RC read)|    = "
          f"{(flipped[..., :8] + aware[..., :8]).abs().max():.1e}   (they flip sign)")

    # The seeds' claim: a motif at p and its RC at L - m - p get the same vector (at the motif's centre).
    length, m, p = 150, len(MOTIF), 20
    q = length - m - p
    centre = torch.tensor([p + (m - 1) / 2 - (length - 1) / 2, q + (m - 1) / 2 - (length - 1) / 2],
                          dtype=torch.float64)
    rc_read = reverse_complement(decode(batch.tokens[1:2], batch.mask[1:2])[0])
    print(f"motif {MOTIF} (m={m}) at p={p} of a {length}-bp read; its RC {reverse_complement(MOTIF)} sits at "
          f"L-m-p={q} of the RC read: {rc_read[q:q + m] == reverse_complement(MOTIF)}")
    vectors = rc_symmetric_encoding(centre, 8)
    print(f"  centred coordinates of the two motif centres: {centre[0]:+.1f}, {centre[1]:+.1f}")
    print(f"  PE(motif centre)    = {_row(vectors[0][:4])} ...")
    print(f"  PE(RC motif centre) = {_row(vectors[1][:4])} ...   identical: {torch.equal(vectors[0], vectors[1])}")
    per_position = rc_symmetric_encoding(torch.tensor([length]), 8)[0]
    start_gap = (per_position[p] - per_position[q]).abs().max()
    print(f"  (at the start positions p and L-m-p alone they differ by {start_gap:.3f}: the claim is about motif "
          "centres)")

    tokens, mask = encode([decode(batch.tokens[1:2], batch.mask[1:2])[0], rc_read])
    kmers, kmask = kmer_tokens(tokens, 5, mask=mask, canonical=True)
    same = sorted(kmers[0][kmask[0]].tolist()) == sorted(kmers[1][kmask[1]].tolist())
    plain, pmask = kmer_tokens(tokens, 5, mask=mask)
    shared = len(set(plain[0][pmask[0]].tolist()) & set(plain[1][pmask[1]].tolist()))
    print(f"canonical 5-mers of the read and its RC are the same multiset: {same} "
          f"(plain 5-mers share only {shared} of {int(pmask[0].sum())})")

    torch.manual_seed(0)
    conv = _TinyModel()
    x = one_hot(batch.tokens[:8])
    x_rc = reverse_complement(x, batch.mask[:8])
    wrapped = RCEquivariant(conv, mode="invariant", pass_mask=True)
    plain_gap = (conv(x, mask=batch.mask[:8]) - conv(x_rc, mask=batch.mask[:8])).abs().max().item()
    wrapped_gap = (wrapped(x, batch.mask[:8]) - wrapped(x_rc, batch.mask[:8])).abs().max().item()
    print(f"RCEquivariant: a random conv model scores a read and its RC {plain_gap:.3f} apart; wrapped: "
          f"{wrapped_gap:.1e}")

    basis = relative_basis(1536, 192, symmetric=False)
    legacy = relative_basis(1536, 192, symmetric=False, gamma_normalization="global")
    peaks, legacy_peaks = basis[:, 64:96].max(0).values, legacy[:, 64:96].max(0).values
    print(f"Enformer relative basis (T=1536, 192 features, not symmetric): {tuple(basis.shape)}; gamma block "
          f"column maxima {peaks.min():.3f}..{peaks.max():.3f}: each gamma feature divided by its own maximum, as "
          "in the trained Enformer")
    print(f"  (gamma_normalization='global', the first release's single maximum: column maxima "
          f"{legacy_peaks.min():.3f}..{legacy_peaks.max():.3f}, up to "
          f"{(basis - legacy).abs().max():.2f} off the trained model's basis)")

    if out_dir is not None:
        from ..plotting import plot_heatmap

        picture = plot_heatmap(rc_symmetric_encoding(torch.tensor([150]), 32, strand_aware=True)[0],
                               out_dir / "dna_rc_symmetric_encoding.png",
                               title="Strand-aware RC-symmetric encoding of a 150-bp read: [sin | cos] of p - 74.5")
        print(f"  wrote {picture}")


class _TinyModel(torch.nn.Module):
    """A strand-unaware conv + mean pool, the kind of model RCEquivariant wraps."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 3, 5, padding=2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2) * mask.unsqueeze(-1)
        return h.sum(1) / mask.sum(1, keepdim=True)
