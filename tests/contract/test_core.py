"""The module contract (issue 13) for omnipos.core: every public nn.Module and the main functional paths."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from contract.harness import CHECKS, Case, run

from omnipos.core import (
    LearnedPositionalEmbedding,
    QKNormRope,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalEncoding,
    alibi_bias,
    apply_rotary,
    rope_frequencies,
    sinusoid_of_turns,
    sinusoidal,
    t5_relative_bucket,
)

FUNCTION = "a function: no module to convert, build on the meta device or copy"
INTEGER = "integer inputs (lengths, offsets): nothing real-valued to differentiate"


@dataclass
class MethodCase(Case):
    """A case that calls a named method of the module (``rotate``, ``cos_sin``) instead of ``forward``."""

    method: str = "forward"
    kwargs: dict = field(default_factory=dict)

    def call(self, target, args):
        return getattr(target, self.method)(*args, **self.kwargs)


def _gen(size: int, seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(1000 * seed + size)


def qk(dim: int = 16, *, axes: int | None = None, integer: bool = False, span: float = 40.0, seed: int = 0):
    """q [B, 2, S, dim], k [B, 1, S, dim] (GQA) in ``dtype``; positions [B, S] (or [B, S, axes]) float64 (int64 when
    ``integer``); B = size, S = 2 * size + 1: tiny, so gradcheck stays fast."""

    def inputs(size, dtype):
        g = _gen(size, seed)
        batch, seq = size, 2 * size + 1
        q = torch.randn(batch, 2, seq, dim, generator=g, dtype=torch.float64).to(dtype or torch.float32)
        k = torch.randn(batch, 1, seq, dim, generator=g, dtype=torch.float64).to(dtype or torch.float32)
        shape = (batch, seq) if axes is None else (batch, seq, axes)
        positions = torch.rand(*shape, generator=g, dtype=torch.float64) * span
        return q, k, positions.round().long() if integer else positions

    return inputs


def one(dim: int = 16, **kwargs):
    """x [B, S, 2, dim] (flash-attn layout, rotated with seq_dim=1 by the case) and positions."""
    make_qk = qk(dim, **kwargs)

    def inputs(size, dtype):
        q, _, positions = make_qk(size, dtype)
        return q.transpose(1, 2), positions

    return inputs


def positions_only(shape_of=lambda size: (2, 3 * size), span: float = 100.0, seed: int = 0):
    def inputs(size, dtype):
        return (torch.rand(*shape_of(size), generator=_gen(size, seed), dtype=torch.float64) * span,)

    return inputs


def int_positions(size, dtype):
    return (torch.randint(0, 12, (2, 3 * size), generator=_gen(size)),)


MROPE = (2, 3, 3)  # sums to 8 = dim 16 / 2
MROPE_INTERLEAVED = (4, 2, 2)  # slots 1, 4 take h; 2, 5 take w
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
DYNAMIC = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 8}
LONGROPE = {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 8,
            "short_factor": [1.0, 1.1, 1.2, 1.3, 1.0, 1.5, 2.0, 1.0], "long_factor": [2.0] * 8}
PROPORTIONAL = {"rope_type": "proportional", "partial_rotary_factor": 0.5, "rope_theta": 1000.0}
LONGROPE_MSCALE = dict(LONGROPE, short_mscale=1.2, long_mscale=1.4)  # Phi-3.5-MoE: a length-dependent factor
INV_FREQ = [1.0, 0.5, 0.3, 0.1, 0.05, 0.01, 0.002, 0.0]  # the escape hatch: frequencies no formula gives

ROPE_CONFIGS = {
    "default": dict(dim=16),
    "interleaved-partial": dict(dim=20, rotary_dim=12, layout="interleaved"),
    "yarn": dict(dim=16, scaling=YARN),
    "dynamic": dict(dim=16, scaling=DYNAMIC),
    "longrope": dict(dim=16, scaling=LONGROPE),
    "proportional": dict(dim=16, scaling=PROPORTIONAL),
    "longrope-mscale": dict(dim=16, scaling=LONGROPE_MSCALE),
    "inv_freq-interleaved": dict(dim=16, layout="interleaved", inv_freq=INV_FREQ),
    "xpos": dict(dim=16, layout="interleaved", xpos=True, xpos_center=20.0),
    "axial2": dict(dim=16, layout="interleaved", n_axes=2, rotary_dim=8),
    "axial3-unequal": dict(dim=20, n_axes=3, axes_dims=(4, 8, 8), layout="interleaved"),
    # LTX-Video (diffusers LTXVideoRotaryPosEmbed): linspace ladder, axes per frequency, dim % 6 channels in front
    "ltx-video": dict(dim=16, base=3.0, axes_dims=(4, 4, 4), frequency_rule="linspace", axes_order="interleaved",
                      passthrough="front", layout="interleaved"),
    "mrope": dict(dim=16, mrope_section=MROPE),
    "mrope-interleaved": dict(dim=16, mrope_section=MROPE_INTERLEAVED, mrope_interleaved=True),
}


GRADGRAD = ("default", "xpos", "axial3-unequal", "mrope-interleaved", "longrope")  # the others: same graph


def _axes(config: dict) -> int | None:
    if "mrope_section" in config:
        return 3
    return config.get("n_axes", len(config["axes_dims"]) if "axes_dims" in config else None)


CASES: list[Case] = []
for name, config in ROPE_CONFIGS.items():
    dim = config["dim"]
    axes = _axes(config)
    CASES.append(MethodCase(f"RotaryEmbedding[{name}]", make=lambda c=config: RotaryEmbedding(**c),
                            inputs=qk(dim, axes=axes), grad_inputs=(0, 1, 2), gradgrad=name in GRADGRAD))
    # rotate: one tensor, seq_dim=1
    if name in ("default", "interleaved-partial", "axial3-unequal", "ltx-video", "mrope"):
        CASES.append(MethodCase(f"RotaryEmbedding.rotate[{name}]", make=lambda c=config: RotaryEmbedding(**c),
                                method="rotate", kwargs={"seq_dim": 1}, inputs=one(dim, axes=axes), grad_inputs=(0, 1),
                                gradgrad=True))
CASES += [
    MethodCase("RotaryEmbedding.rotate[integer positions]", make=lambda: RotaryEmbedding(16),
               method="rotate", kwargs={"seq_dim": 1}, inputs=one(16, integer=True), grad_inputs=(0,), gradgrad=True),
    MethodCase("RotaryEmbedding.cos_sin[mrope]", make=lambda: RotaryEmbedding(16, mrope_section=MROPE),
               method="cos_sin", kwargs={"dtype": torch.float64},
               inputs=positions_only(lambda size: (2, 3 * size, 3)), grad_inputs=(0,),
               gradgrad=True,
               skip={"dtypes": "cos_sin's dtype is its dtype= argument (float32 or float64), by design: "
                               "RoPE holds no parameters, and cos/sin are never built below float32"}),
    # QK-norm + RoPE: q, k (GQA) and float64 positions; the norm weights are parameters (gradcheck covers them)
    Case("QKNormRope[qwen3]", make=lambda: QKNormRope(RotaryEmbedding(16), eps=1e-5), inputs=qk(16),
         grad_inputs=(0, 1), gradgrad=True),
    Case("QKNormRope[gemma3, interleaved partial]",
         make=lambda: QKNormRope(RotaryEmbedding(20, rotary_dim=12, layout="interleaved"), variant="gemma3"),
         inputs=qk(20, seed=1), grad_inputs=(0, 1)),
    Case("QKNormRope[olmo2, over all heads]",
         make=lambda: QKNormRope(RotaryEmbedding(16), variant="olmo2", num_heads=2, num_kv_heads=1),
         inputs=qk(16, seed=2), grad_inputs=(0, 1), gradgrad=True),
    Case("SinusoidalEncoding", make=lambda: SinusoidalEncoding(8), inputs=positions_only(),
         grad_inputs=(0,), gradgrad=True),
    Case("SinusoidalEncoding[learnable split]",
         make=lambda: SinusoidalEncoding(8, layout="split", scale=0.5, learnable_scale=True),
         inputs=positions_only(), grad_inputs=(0,), gradgrad=True),
    Case("SinusoidalEncoding[fairseq float64]", make=lambda: SinusoidalEncoding(8, layout="fairseq",
                                                                               dtype=torch.float64),
         inputs=positions_only(span=1e6), grad_inputs=(0,), gradgrad=True),
    Case("LearnedPositionalEmbedding", make=lambda: LearnedPositionalEmbedding(16, 6), inputs=int_positions),
    Case("LearnedPositionalEmbedding[clamp]", make=lambda: LearnedPositionalEmbedding(8, 6, beyond="clamp"),
         inputs=int_positions),
    Case("LearnedPositionalEmbedding[interpolate]",
         make=lambda: LearnedPositionalEmbedding(8, 6, beyond="interpolate"),
         inputs=positions_only(span=20.0), grad_inputs=(0,)),
    Case("RelativePositionBias", make=lambda: RelativePositionBias(4, num_buckets=8, max_distance=16),
         inputs=lambda size, dtype: (3 * size, 5 * size)),
    Case("RelativePositionBias[decoder]",
         make=lambda: RelativePositionBias(2, num_buckets=8, max_distance=16, bidirectional=False),
         inputs=lambda size, dtype: (size, 4 * size)),
    # -- functional paths --------------------------------------------------------------------------------------
    Case("sinusoidal", fn=lambda p: sinusoidal(p, 8, dtype=p.dtype), inputs=positions_only(span=1e4), grad_inputs=(0,),
         gradgrad=True, skip={"dtypes": FUNCTION, "meta": FUNCTION, "copies": FUNCTION}),
    Case("sinusoidal[split float64]", fn=lambda p: sinusoidal(p, 6, layout="split", dtype=torch.float64),
         inputs=positions_only(), grad_inputs=(0,), gradgrad=True,
         skip={"dtypes": FUNCTION, "meta": FUNCTION, "copies": FUNCTION}),
    Case("sinusoid_of_turns", fn=lambda t: sinusoid_of_turns(t.unsqueeze(-1) * torch.tensor([1.0, 0.1]),
                                                             layout="split", dtype=t.dtype),
         inputs=positions_only(span=3.0), grad_inputs=(0,), gradgrad=True,
         skip={"dtypes": FUNCTION, "meta": FUNCTION, "copies": FUNCTION}),
    Case("apply_rotary", fn=lambda x, cos, sin: apply_rotary(x, cos, sin),
         inputs=lambda size, dtype: (
             torch.randn(2, 3 * size, 8, generator=_gen(size), dtype=torch.float64).to(dtype or torch.float32),
             torch.randn(3 * size, 6, generator=_gen(size, 1), dtype=torch.float64),
             torch.randn(3 * size, 6, generator=_gen(size, 2), dtype=torch.float64)),
         grad_inputs=(0, 1, 2), gradgrad=True, skip={"dtypes": FUNCTION, "meta": FUNCTION, "copies": FUNCTION}),
    Case("apply_rotary[interleaved]", fn=lambda x, cos, sin: apply_rotary(x, cos, sin, layout="interleaved"),
         inputs=lambda size, dtype: (
             torch.randn(3 * size, 8, generator=_gen(size), dtype=torch.float64).to(dtype or torch.float32),
             torch.randn(3 * size, 8, generator=_gen(size, 1), dtype=torch.float64),
             torch.randn(3 * size, 8, generator=_gen(size, 2), dtype=torch.float64)),
         grad_inputs=(0, 1, 2), gradgrad=True, skip={"dtypes": FUNCTION, "meta": FUNCTION, "copies": FUNCTION}),
    Case("alibi_bias", fn=lambda q_len, k_len: alibi_bias(6, q_len, k_len),
         inputs=lambda size, dtype: (2 * size, 3 * size),
         skip={"grad": INTEGER, "dtypes": FUNCTION, "meta": FUNCTION, "copies": FUNCTION}),
    Case("t5_relative_bucket", fn=lambda rel: t5_relative_bucket(rel, num_buckets=16, max_distance=40),
         inputs=lambda size, dtype: (torch.randint(-100, 100, (3 * size, 4), generator=_gen(size)),),
         skip={"grad": INTEGER, "dtypes": FUNCTION, "meta": FUNCTION, "copies": FUNCTION}),
    Case("rope_frequencies[dynamic, tensor seq_len]",
         fn=lambda seq_len: rope_frequencies(16, scaling=DYNAMIC, seq_len=seq_len)[0],
         inputs=lambda size, dtype: (torch.tensor(10.0 * size + 0.5, dtype=torch.float64),), grad_inputs=(0,),
         gradgrad=True, skip={"dtypes": FUNCTION, "meta": FUNCTION, "copies": FUNCTION}),
]


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_contract(case, check):
    run(case, check)
