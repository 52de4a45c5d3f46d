"""DNA: alphabet, reverse complement, k-mers, centered RC-symmetric encodings, Enformer's basis, FASTA/FASTQ reads.

Tokens are ``torch.uint8`` unless a ``token_dtype=`` asks otherwise; every function takes any integer dtype.
Imports ``omnipos.core`` only. dnaio (extra ``[dna]``) is imported lazily by ``omnipos.dna.dnaio``; the
pure-Python parser (``omnipos.dna.fastx``) is the reference that states the FASTA/FASTQ rules both follow.
"""

from .alphabet import (
    IUPAC_COMPLEMENT,
    PAD,
    SOFT_MASK,
    TOKENS,
    complement_tokens,
    decode,
    encode,
    one_hot,
    soft_mask,
    vocab_size,
)
from .dataset import FastxDataset, collate_reads
from .enformer import relative_basis
from .equivariant import RCEquivariant
from .kmers import kmer_tokens
from .positional import RCSymmetricEncoding, centered_positions, rc_symmetric_encoding
from .rcps import (
    RCPS,
    RCPSAddNorm,
    RCPSEmbedding,
    RCPSLMHead,
    complement_map,
    reverse_complement_hidden,
    reverse_complement_logits,
)
from .reads import ReadBatch, ReadOptions, read_fastx
from .reverse_complement import flip_within_lengths, reverse_complement

__all__ = [
    "TOKENS",
    "PAD",
    "SOFT_MASK",
    "IUPAC_COMPLEMENT",
    "vocab_size",
    "encode",
    "decode",
    "one_hot",
    "soft_mask",
    "complement_tokens",
    "reverse_complement",
    "flip_within_lengths",
    "kmer_tokens",
    "centered_positions",
    "rc_symmetric_encoding",
    "RCSymmetricEncoding",
    "relative_basis",
    "RCEquivariant",
    "RCPSEmbedding",
    "RCPS",
    "RCPSAddNorm",
    "RCPSLMHead",
    "complement_map",
    "reverse_complement_hidden",
    "reverse_complement_logits",
    "ReadBatch",
    "ReadOptions",
    "read_fastx",
    "FastxDataset",
    "collate_reads",
]
