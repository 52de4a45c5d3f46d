"""The module contract (tests/contract/harness.py) for every public DNA module and the main functional paths:
compile without graph breaks, output dtype following the module, gradients, meta-device init, copies, threads."""

import pytest
import torch
from contract.harness import CHECKS, Case, run
from torch import nn

from omnipos.dna import (
    RCPS,
    RCEquivariant,
    RCPSAddNorm,
    RCPSEmbedding,
    RCPSLMHead,
    RCSymmetricEncoding,
    encode,
    flip_within_lengths,
    kmer_tokens,
    one_hot,
    rc_symmetric_encoding,
    relative_basis,
    reverse_complement,
)

NOT_A_MODULE = "a function: no module to convert, build on the meta device or copy"
INTEGER_INPUTS = "integer tokens / lengths: nothing real-valued to differentiate"
LETTERS = "ACGTNRYacgtn"


def reads(size, seed=0):
    """A padded batch of reads of different lengths (uint8 tokens, their mask); deterministic per size."""
    g = torch.Generator().manual_seed(seed + size)
    lengths = torch.randint(3, 6 * size + 4, (2 + size,), generator=g)
    seqs = ["".join(LETTERS[i] for i in torch.randint(0, len(LETTERS), (int(n),), generator=g)) for n in lengths]
    return encode(seqs)


def centred_positions(size, dtype=torch.float64):
    g = torch.Generator().manual_seed(size)
    return (torch.randint(-40, 41, (2, 4 * size), generator=g) / 2).to(dtype)


class ConvPool(nn.Module):
    """A strand-unaware conv over one-hot bases, mean-pooled over the real positions: [B, L, 4] -> [B, 3]."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 3, 3, padding=1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.conv(x.transpose(1, 2)).transpose(1, 2) * mask.unsqueeze(-1).to(x.dtype)
        return h.sum(1) / mask.sum(1, keepdim=True).to(x.dtype)


class PerPosition(nn.Module):
    """A per-position linear map of one-hot bases with 4 output channels: [B, L, 4] -> [B, L, 4]."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


class KwCase(Case):
    """A case whose call passes keyword arguments after the positional inputs."""

    def __init__(self, *args, kwargs=None, **kw) -> None:
        super().__init__(*args, **kw)
        self.kwargs = kwargs or {}

    def call(self, target, args):
        return target(*args, **self.kwargs)


def one_hot_reads(size, dtype):
    tokens, mask = reads(size)
    return one_hot(tokens, dtype=dtype or torch.float32), mask


class RCPSConv(nn.Module):
    """A strand-unaware conv along the sequence for RCPS: [B, L, C] -> [B, L, C]."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, 3, padding=1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.conv(h.transpose(1, 2)).transpose(1, 2)


class RCPSModel(nn.Module):
    """RCPSEmbedding -> RCPS(conv) -> RCPSAddNorm(LayerNorm) -> tied RCPSLMHead over a padded batch of reads."""

    def __init__(self, variant: str = "split") -> None:
        super().__init__()
        inner = 3 if variant == "split" else 6
        self.embed = RCPSEmbedding(32, 6, "iupac", variant=variant)
        self.mix = RCPS(RCPSConv(inner), variant=variant)
        self.norm = RCPSAddNorm(nn.LayerNorm(inner), variant=variant)
        self.head = RCPSLMHead(6, 32, "iupac", variant=variant, tied_to=self.embed)

    def reset_parameters(self) -> None:
        for module in (self.embed, self.mix, self.norm, self.head):
            module.reset_parameters()
        self.head.tie_weights(self.embed)  # to_empty() separates tied parameters, as for any PyTorch model

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        return self.head(self.norm(self.mix(h, mask), h, mask=mask), mask)


def hidden_reads(size, dtype):
    """A padded batch's mask and random hidden states [B, L, 6] (deterministic per size)."""
    _, mask = reads(size)
    g = torch.Generator().manual_seed(size)
    return torch.randn(*mask.shape, 6, generator=g, dtype=torch.float64).to(dtype or torch.float32), mask


CASES = [
    KwCase("RCSymmetricEncoding(lengths)", make=lambda: RCSymmetricEncoding(8),
           inputs=lambda size, dtype: (reads(size)[1].sum(1),), kwargs={"max_len": 40},
           skip={"grad": INTEGER_INPUTS}),
    Case("RCSymmetricEncoding(positions, strand_aware)", make=lambda: RCSymmetricEncoding(8, strand_aware=True),
         inputs=lambda size, dtype: (centred_positions(size),), grad_inputs=(0,), gradgrad=True),
    Case("RCEquivariant(invariant, pass_mask)", make=lambda: RCEquivariant(ConvPool(), pass_mask=True),
         inputs=one_hot_reads, grad_inputs=(0,)),
    Case("RCEquivariant(equivariant, per_position)",
         make=lambda: RCEquivariant(PerPosition(), mode="equivariant", per_position=True),
         inputs=one_hot_reads, grad_inputs=(0,), gradgrad=True),
    Case("RCPSEmbedding(iupac)", make=lambda: RCPSEmbedding(32, 6, "iupac"),
         inputs=lambda size, dtype: reads(size)[:1]),
    Case("RCPS(conv, mask)", make=lambda: RCPS(RCPSConv(3)), inputs=hidden_reads, grad_inputs=(0,)),
    KwCase("RCPSAddNorm(LayerNorm, prenorm)", make=lambda: RCPSAddNorm(nn.LayerNorm(3)),
           inputs=lambda size, dtype: (hidden_reads(size, dtype)[0], hidden_reads(size, dtype)[0].flip(1)),
           kwargs={"prenorm": True}, grad_inputs=(0, 1), low_tol=3e-2),
    Case("RCPSLMHead(mask)", make=lambda: RCPSLMHead(6, 32, "iupac"), inputs=hidden_reads, grad_inputs=(0,),
         low_tol=3e-2),
    # The average variant end to end (the split variant's layers have their own cases above); bfloat16 (8
    # significant bits) through a LayerNorm of 3 channels and logits of an N(0, 1) tied table differs by ~0.1.
    Case("RCPS model (average, tied head)", make=lambda: RCPSModel("average"), inputs=lambda size, dtype: reads(size),
         low_tol=0.15, skip={"grad": "each layer's gradients are checked in its own case; the model's takes 4 s"}),
    Case("one_hot + reverse_complement", fn=lambda tokens, mask: reverse_complement(one_hot(tokens), mask),
         inputs=lambda size, dtype: reads(size),
         skip={"grad": INTEGER_INPUTS, "dtypes": NOT_A_MODULE, "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
    Case("reverse_complement(tokens, mask)", fn=reverse_complement, inputs=lambda size, dtype: reads(size),
         skip={"grad": INTEGER_INPUTS, "dtypes": NOT_A_MODULE, "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
    Case("reverse_complement(tokens) + kmer_tokens, default masks",
         fn=lambda tokens: kmer_tokens(reverse_complement(tokens), 4),
         inputs=lambda size, dtype: reads(size)[:1],
         skip={"grad": INTEGER_INPUTS, "dtypes": NOT_A_MODULE, "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
    Case("one_hot(soft_mask_channel, fractional) + reverse_complement",
         fn=lambda tokens, mask: reverse_complement(
             one_hot(tokens, ambiguity="fractional", soft_mask_channel=True, dtype=torch.float64), mask),
         inputs=lambda size, dtype: reads(size),
         skip={"grad": INTEGER_INPUTS, "dtypes": NOT_A_MODULE, "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
    Case("flip_within_lengths", fn=flip_within_lengths,
         inputs=lambda size, dtype: (one_hot_reads(size, torch.float64)[0], reads(size)[1]), grad_inputs=(0,),
         skip={"dtypes": NOT_A_MODULE, "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
    Case("rc_symmetric_encoding(positions)",
         fn=lambda c: rc_symmetric_encoding(c, 6, strand_aware=True, dtype=torch.float64),
         inputs=lambda size, dtype: (centred_positions(size),), grad_inputs=(0,), gradgrad=True,
         skip={"dtypes": NOT_A_MODULE, "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
    Case("rc_symmetric_encoding(lengths, max_len)",
         fn=lambda lengths: rc_symmetric_encoding(lengths, 5, max_len=32),
         inputs=lambda size, dtype: (reads(size)[1].sum(1),),
         skip={"grad": INTEGER_INPUTS, "dtypes": NOT_A_MODULE, "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
    Case("kmer_tokens(canonical)", fn=lambda tokens, mask: kmer_tokens(tokens, 3, mask=mask, canonical=True),
         inputs=lambda size, dtype: reads(size),
         skip={"grad": INTEGER_INPUTS, "dtypes": NOT_A_MODULE, "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
    Case("relative_basis", fn=lambda seq_len: relative_basis(seq_len, 12, symmetric=False),
         inputs=lambda size, dtype: (8 * size,),
         skip={"grad": "a function of integer sizes only: nothing to differentiate", "dtypes": NOT_A_MODULE,
               "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
]


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_contract(case, check):
    run(case, check)


def test_rc_symmetric_encoding_module_dtype_is_a_property_following_conversions():
    module = RCSymmetricEncoding(4, dtype=torch.float64)
    assert module.dtype == torch.float64 and "dtype=torch.float64" in repr(module)
    assert module.half().dtype == torch.float16
    assert module(torch.tensor([3])).dtype == torch.float16
    assert "output_dtype_marker" not in module.state_dict()  # derived, nothing to save
