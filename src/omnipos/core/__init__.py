"""The shared core: sinusoids, frequency bands, rotary embeddings, learned embeddings and ragged batching.

Knows no domain."""

from .batching import (
    check_lengths,
    lengths_to_mask,
    mask_to_lengths,
    pack,
    packed_positions,
    pad_packed,
    pad_ragged,
    unpad,
)
from .frequencies import RopeScaling, frequency_bands, rope_frequencies
from .learned import LearnedPositionalEmbedding
from .relative import (
    RelativePositionBias,
    alibi_bias,
    alibi_score_mod,
    alibi_slopes,
    relative_bias_score_mod,
    t5_relative_bucket,
)
from .rotary import RotaryEmbedding, apply_rotary, convert_rope_layout
from .sinusoid import SinusoidalEncoding, add_positional, sinusoidal

__all__ = [
    "frequency_bands",
    "rope_frequencies",
    "RopeScaling",
    "RotaryEmbedding",
    "apply_rotary",
    "convert_rope_layout",
    "alibi_slopes",
    "alibi_bias",
    "t5_relative_bucket",
    "RelativePositionBias",
    "alibi_score_mod",
    "relative_bias_score_mod",
    "sinusoidal",
    "SinusoidalEncoding",
    "add_positional",
    "LearnedPositionalEmbedding",
    "pad_ragged",
    "pad_packed",
    "check_lengths",
    "unpad",
    "pack",
    "packed_positions",
    "lengths_to_mask",
    "mask_to_lengths",
]
