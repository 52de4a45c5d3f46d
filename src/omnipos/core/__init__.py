"""The shared core: sinusoids, frequency bands, rotary embeddings, relative biases, learned embeddings, batching.

Knows no domain. This package's namespace is the API the domains build on: every name a domain uses is
exported here (the domains never import a core submodule or a private name).
"""

from .batching import (
    check_lengths,
    check_pad_value,
    lengths_to_mask,
    mask_to_lengths,
    pack,
    packed_positions,
    pad_packed,
    pad_ragged,
    true_positions,
    unpad,
)
from .buffers import new_buffer
from .checks import (
    allocation_guard,
    as_position_tensor,
    can_inspect_values,
    check_choice,
    check_even_dim,
    check_finite,
    check_float_dtype,
    check_integer_tensor,
    check_positive_int,
    narrow_to,
    renamed_argument,
    to_device,
)
from .compiled_kernels import collector_paused, compiled, compiled_kernels_enabled
from .constants import ConstantBuffers
from .frequencies import frequency_bands, geometric_frequencies
from .learned import LearnedPositionalEmbedding
from .optional import require
from .phase import cos_sin_of_angles, cos_sin_of_turns
from .progress import ProgressCallback, ProgressReporter, progress_reporter
from .qk_norm import QK_NORM_VARIANTS, QKNormRope, qk_norm_rope
from .relative import (
    RelativePositionBias,
    alibi_bias,
    alibi_score_mod,
    alibi_slopes,
    relative_bias_score_mod,
    t5_relative_bucket,
)
from .rope_config import deinterleaved_channel_order, rope_arguments_from_config, rope_layers
from .rope_diffusion import (
    DIFFUSERS_ROPE_CLASSES,
    cogvideox_positions,
    cogvideox_rope_arguments,
    grid_positions,
    ltx_video_positions,
    rope_arguments_from_diffusers,
)
from .rope_functional import apply_rotary, rope_cos_sin
from .rope_kernels import ROPE_LAYOUTS
from .rope_layout import convert_rope_layout
from .rope_scaling import RopeScaling, rope_frequencies
from .rotary import RotaryEmbedding
from .rows import put_rows, take_rows
from .sinusoid import LAYOUTS as SINUSOID_LAYOUTS
from .sinusoid import (
    SinusoidalEncoding,
    add_positional,
    centered_sincos_into,
    layout_frequencies,
    sinusoid_of_turns,
    sinusoidal,
)

__all__ = [
    # frequencies
    "frequency_bands",
    "geometric_frequencies",
    "rope_frequencies",
    "RopeScaling",
    # sinusoids
    "SINUSOID_LAYOUTS",
    "layout_frequencies",
    "sinusoidal",
    "sinusoid_of_turns",
    "centered_sincos_into",
    "cos_sin_of_turns",
    "cos_sin_of_angles",
    "SinusoidalEncoding",
    "add_positional",
    # rotary
    "ROPE_LAYOUTS",
    "RotaryEmbedding",
    "apply_rotary",
    "convert_rope_layout",
    "rope_cos_sin",
    "qk_norm_rope",
    "QKNormRope",
    "QK_NORM_VARIANTS",
    "rope_arguments_from_config",
    "rope_layers",
    "deinterleaved_channel_order",
    "DIFFUSERS_ROPE_CLASSES",
    "rope_arguments_from_diffusers",
    "cogvideox_rope_arguments",
    "grid_positions",
    "ltx_video_positions",
    "cogvideox_positions",
    # relative biases
    "alibi_slopes",
    "alibi_bias",
    "t5_relative_bucket",
    "RelativePositionBias",
    "alibi_score_mod",
    "relative_bias_score_mod",
    # learned
    "LearnedPositionalEmbedding",
    # batching
    "pad_ragged",
    "pad_packed",
    "check_lengths",
    "check_pad_value",
    "unpad",
    "pack",
    "packed_positions",
    "lengths_to_mask",
    "mask_to_lengths",
    "true_positions",
    "new_buffer",
    "put_rows",
    "take_rows",
    # checks shared by every domain
    "allocation_guard",
    "as_position_tensor",
    "can_inspect_values",
    "check_choice",
    "check_even_dim",
    "check_finite",
    "check_float_dtype",
    "check_integer_tensor",
    "narrow_to",
    "collector_paused",
    "compiled",
    "compiled_kernels_enabled",
    "check_positive_int",
    "renamed_argument",
    "require",
    "to_device",
    # modules whose derived constants keep their precision
    "ConstantBuffers",
    # progress reporting for long-running functions
    "ProgressCallback",
    "ProgressReporter",
    "progress_reporter",
]
