"""RotaryEmbedding / apply_rotary / convert_rope_layout vs HF transformers, rotary-embedding-torch, timm and float64."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.core import (
    RotaryEmbedding,
    apply_rotary,
    convert_rope_layout,
    packed_positions,
    rope_frequencies,
)

transformers = pytest.importorskip("transformers")
from support.rope import randn, reference_rotate
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

# -- HF transformers (layout "half") -----------------------------------------------------------------------------

HF_CASES = [
    ({"rope_type": "default"}, 10000.0, 64),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}, 500000.0, 128),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}, 10000.0, 64),
    ({"rope_type": "linear", "factor": 2.0}, 10000.0, 32),
]


@pytest.mark.parametrize("scaling,base,head_dim", HF_CASES)
def test_cos_sin_match_hf(scaling, base, head_dim):
    config = LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                         max_position_embeddings=8192, rope_parameters=dict(scaling, rope_theta=base))
    hf = LlamaRotaryEmbedding(config)
    position_ids = torch.stack([torch.arange(300), torch.arange(1500, 1800)])  # a batch with a KV-cache offset
    cos_hf, sin_hf = hf(torch.zeros(1, dtype=torch.float32), position_ids)
    rope = RotaryEmbedding(head_dim, base=base, scaling=scaling)
    cos, sin = rope.cos_sin(position_ids)
    assert cos.shape == cos_hf.shape and cos.dtype == torch.float32
    # HF forms the angle in float32: |error| <= p * inv_freq * 2^-24 ~ 1e-4 at p = 1800; ours is exact
    torch.testing.assert_close(cos, cos_hf, rtol=0, atol=3e-4)
    torch.testing.assert_close(sin, sin_hf, rtol=0, atol=3e-4)
    inv, factor = rope_frequencies(head_dim, base=base, scaling=scaling)
    angles = position_ids.double()[..., None] * inv
    torch.testing.assert_close(cos.double(), torch.cat([angles.cos(), angles.cos()], -1) * factor, rtol=0, atol=5e-7)


@pytest.mark.parametrize("scaling,base,head_dim", HF_CASES)
def test_rotation_matches_hf_apply_rotary_pos_emb(scaling, base, head_dim):
    rope = RotaryEmbedding(head_dim, base=base, scaling=scaling)
    q, k = randn(2, 8, 40, head_dim, seed=1), randn(2, 2, 40, head_dim, seed=2)  # GQA: 8 q heads, 2 kv heads
    position_ids = torch.stack([torch.arange(40), torch.arange(77, 117)])
    cos, sin = rope.cos_sin(position_ids)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)  # HF's formula on our cos/sin: the rotation itself
    q_ours, k_ours = rope(q, k, position_ids)
    torch.testing.assert_close(q_ours, q_hf, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(k_ours, k_hf, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(apply_rotary(q, cos[:, None], sin[:, None]), q_hf, rtol=1e-6, atol=1e-6)


def test_flash_attn_layout_and_partial_rotary_match_hf():
    """x [batch, seq, heads, dim] with seq_dim=1; GPT-NeoX-style partial rotary (first 16 of 64 channels)."""
    rope = RotaryEmbedding(64, rotary_dim=16)
    q = randn(2, 30, 4, 64, seed=3)
    positions = torch.arange(30)
    out = rope.rotate(q, positions, seq_dim=1)
    cos, sin = rope.cos_sin(positions)
    q_rot, _ = apply_rotary_pos_emb(q[..., :16], q[..., :16], cos, sin, unsqueeze_dim=1)
    torch.testing.assert_close(out[..., :16], q_rot, rtol=1e-6, atol=1e-6)
    assert torch.equal(out[..., 16:], q[..., 16:])
    torch.testing.assert_close(rope.rotate(q.transpose(1, 2), positions).transpose(1, 2), out, rtol=0, atol=0)


# -- rotary-embedding-torch (layout "interleaved", axial, xPos) -----------------------------------------------------


def test_interleaved_matches_rotary_embedding_torch():
    ret = pytest.importorskip("rotary_embedding_torch")
    theirs = ret.RotaryEmbedding(dim=32)
    ours = RotaryEmbedding(48, rotary_dim=32, layout="interleaved")
    q = randn(2, 3, 100, 48, seed=4)
    torch.testing.assert_close(ours.rotate(q, torch.arange(100)), theirs.rotate_queries_or_keys(q),
                               rtol=0, atol=2e-5)
    q_seq_first = q.transpose(1, 2)  # [batch, seq, heads, dim]
    torch.testing.assert_close(ours.rotate(q_seq_first, torch.arange(100), seq_dim=-3),
                               theirs.rotate_queries_or_keys(q_seq_first, seq_dim=-3), rtol=0, atol=2e-5)


def test_xpos_matches_rotary_embedding_torch():
    """rotary-embedding-torch centres the xPos scale on each call's seq_len // 2; the same centre given as
    xpos_center reproduces its q and k exactly, and any other centre gives the same scores (only n_q - n_k
    reaches q . k)."""
    ret = pytest.importorskip("rotary_embedding_torch")
    theirs = ret.RotaryEmbedding(dim=32, use_xpos=True)
    q, k = randn(1, 2, 64, 32, seed=5), randn(1, 2, 64, 32, seed=6)
    q_t, k_t = theirs.rotate_queries_and_keys(q, k)
    same_centre = RotaryEmbedding(32, layout="interleaved", xpos=True, xpos_center=32)
    q_o, k_o = same_centre(q, k, torch.arange(64))
    torch.testing.assert_close(q_o, q_t, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(k_o, k_t, rtol=1e-5, atol=2e-5)
    default = RotaryEmbedding(32, layout="interleaved", xpos=True)  # centred at 0: other q, k, the same scores
    q_d, k_d = default(q, k, torch.arange(64))
    assert not torch.allclose(q_d, q_t, atol=1e-3)
    torch.testing.assert_close(q_d @ k_d.transpose(-1, -2), q_t @ k_t.transpose(-1, -2), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="forward"):
        default.rotate(q, torch.arange(64))


def test_xpos_under_a_kv_cache_equals_one_full_call():
    """Keys rotated at prefill, later queries one step at a time: the scores (and the softmax) must be those of a
    single call over the whole sequence. Centred on each call's length (rotary-embedding-torch#27) they are not."""
    n0, n, dim = 32, 64, 16
    q, k = randn(1, n, dim, seed=30, dtype=torch.float64), randn(1, n, dim, seed=31, dtype=torch.float64)
    rope = RotaryEmbedding(dim, layout="interleaved", xpos=True, xpos_center=100.0)
    q_full, k_full = rope(q, k, torch.arange(n))
    _, k_cache = rope(q[:, :n0], k[:, :n0], torch.arange(n0))  # prefill
    q_steps, k_steps = zip(*(rope(q[:, i:i + 1], k[:, i:i + 1], torch.tensor([i])) for i in range(n0, n)))
    keys = torch.cat([k_cache, *k_steps], 1)
    cached = q_steps[-1] @ keys.transpose(-1, -2)  # the last decode step's query against the cache
    full = q_full[:, -1:] @ k_full.transpose(-1, -2)
    torch.testing.assert_close(cached, full, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cached.softmax(-1), full.softmax(-1), rtol=1e-12, atol=1e-12)

    ret = pytest.importorskip("rotary_embedding_torch")  # the per-call centre of the peer: off under a cache
    theirs = ret.RotaryEmbedding(dim=dim, use_xpos=True, cache_if_possible=False)
    _, k_pre = theirs.rotate_queries_and_keys(q[:, :n0].float(), k[:, :n0].float())  # centre n0 // 2
    q_all, k_all = theirs.rotate_queries_and_keys(q.float(), k.float())  # centre n // 2
    peer_cached = q_all[:, -1:] @ torch.cat([k_pre, k_all[:, n0:]], 1).transpose(-1, -2)
    peer_full = q_all[:, -1:] @ k_all.transpose(-1, -2)
    assert ((peer_cached - peer_full).abs() / peer_full.abs().clamp(min=1e-3)).max() > 1e-2


def test_xpos_scale_outside_the_dtype_range_is_refused_by_name():
    """xPos at position 1e5 centred at 0: scales zeta^(1e5/512) underflow float32 (inf / NaN before the fix)."""
    rope = RotaryEmbedding(8, layout="interleaved", xpos=True)
    q = randn(1, 2, 8, seed=32)
    far = torch.tensor([1e5, 1e5 + 1], dtype=torch.float64)
    with pytest.raises(ValueError, match="xpos_center"):
        rope(q, q, far)
    centred = RotaryEmbedding(8, layout="interleaved", xpos=True, xpos_center=1e5)
    q_r, k_r = centred(q, q, far)
    assert torch.isfinite(q_r).all() and torch.isfinite(k_r).all()
    with pytest.raises(ValueError, match="float16"):  # float16's range is much narrower
        centred(q.half(), q.half(), far + 5000)
    assert torch.isfinite(torch.cat(centred(q.double(), q.double(), far + 5000))).all()


def grid_positions(h, w):
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    return torch.stack([rows, cols], -1).reshape(h * w, 2)


def test_axial_matches_rotary_embedding_torch_get_axial_freqs():
    ret = pytest.importorskip("rotary_embedding_torch")
    h, w, per_axis = 6, 5, 16
    theirs = ret.RotaryEmbedding(dim=per_axis, freqs_for="lang")
    freqs = theirs.get_axial_freqs(h, w)  # [h, w, 2 * per_axis]
    x = randn(2, 3, h, w, 40, seed=7)
    expected = ret.apply_rotary_emb(freqs, x).reshape(2, 3, h * w, 40)
    ours = RotaryEmbedding(40, rotary_dim=2 * per_axis, layout="interleaved", n_axes=2)
    out = ours.rotate(x.reshape(2, 3, h * w, 40), grid_positions(h, w))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)
    # offsets are positions: the shifted grid is the plain grid turned further (their cache ignores offsets)
    shifted = ours.rotate(x.reshape(2, 3, h * w, 40), grid_positions(h, w) + torch.tensor([3, 7]))
    fresh = ret.RotaryEmbedding(dim=per_axis, freqs_for="lang", cache_if_possible=False)
    expected_shift = ret.apply_rotary_emb(fresh.get_axial_freqs(h, w, offsets=(3, 7)), x).reshape(2, 3, h * w, 40)
    torch.testing.assert_close(shifted, expected_shift, rtol=0, atol=1e-5)
    # (with its cache on, rotary-embedding-torch returns the unshifted grid here: the known bug; we keep no cache)
    assert not torch.allclose(shifted, out)


@pytest.mark.parametrize("grid_indexing,temperature", [("ij", 10000.0), ("xy", 100.0)])
def test_axial_matches_timm_rotary_embedding_cat(grid_indexing, temperature):
    """timm's temperature is our base; grid_indexing 'ij' is positions (row, col), 'xy' (col, row) (rope-vit)."""
    timm_layers = pytest.importorskip("timm.layers")
    h, w, dim = 4, 7, 32
    timm_rope = timm_layers.RotaryEmbeddingCat(dim, temperature=temperature, in_pixels=False, feat_shape=[h, w],
                                               grid_indexing=grid_indexing)
    emb = timm_rope.get_embed()
    x = randn(2, 3, h * w, dim, seed=8)
    expected = timm_layers.apply_rot_embed_cat(x, emb)
    positions = grid_positions(h, w)
    if grid_indexing == "xy":
        positions = positions.flip(-1)
    ours = RotaryEmbedding(dim, layout="interleaved", n_axes=2, base=temperature)
    torch.testing.assert_close(ours.rotate(x, positions), expected, rtol=0, atol=1e-5)


# -- float64 definition, real-valued and packed positions ----------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_real_valued_batched_positions_match_float64_definition(layout):
    rope = RotaryEmbedding(64, rotary_dim=48, layout=layout, base=500.0)
    x = randn(3, 2, 20, 64, seed=10, dtype=torch.float64)
    positions = torch.rand(3, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 1e5 - 100
    out = rope.rotate(x, positions)
    inv = rope_frequencies(48, base=500.0)[0].numpy()
    expected = reference_rotate(x.numpy(), positions.numpy()[:, None], inv, layout, 48)
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=1e-9)


def test_float32_large_positions_are_exact():
    """Angles in float64, reduced before float32 sin/cos: accurate where a float32 angle is not (p = 1e6)."""
    rope = RotaryEmbedding(16)
    x = randn(1, 4, 16, seed=11)
    positions = torch.arange(1_000_000, 1_000_004)
    expected = reference_rotate(x.numpy(), positions.numpy(), rope_frequencies(16)[0].numpy(), "half", 16)
    np.testing.assert_allclose(rope.rotate(x, positions).numpy(), expected, rtol=0, atol=2e-6)


def test_packed_per_document_positions():
    rope = RotaryEmbedding(32, layout="interleaved")
    docs = [randn(n, 4, 32, seed=n) for n in (5, 9, 3)]
    cu = torch.tensor([0, 5, 14, 17], dtype=torch.int32)
    packed = rope.rotate(torch.cat(docs), packed_positions(cu), seq_dim=0)
    separate = torch.cat([rope.rotate(d, torch.arange(len(d)), seq_dim=0) for d in docs])
    torch.testing.assert_close(packed, separate, rtol=0, atol=0)


def test_dtypes():
    rope = RotaryEmbedding(32)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = randn(2, 10, 32).to(dtype)
        assert rope.rotate(x, torch.arange(10)).dtype == dtype
    assert rope.cos_sin(torch.arange(4))[0].dtype == torch.float32
    assert rope.cos_sin(torch.arange(4), dtype=torch.float64)[0].dtype == torch.float64
    rope.half()
    assert rope.inv_freq.dtype == torch.float64  # module.half() must not round the frequencies
    assert rope.rotate(randn(10, 32).half(), torch.arange(10)).dtype == torch.float16


def test_bf16_at_long_positions_is_the_rounded_float32_result():
    rope = RotaryEmbedding(128, base=500000.0)
    x = randn(2, 4, 256, 128, seed=12).bfloat16()
    positions = torch.arange(3840, 4096)
    ref = rope.rotate(x.float(), positions)  # float32 rotation of the same bf16 inputs
    out = rope.rotate(x, positions).float()
    # within one bf16 rounding: |out - ref| <= 2^-8 |ref| (a half ulp is 2^-9)
    assert bool(((out - ref).abs() <= ref.abs() * 2.0**-8 + 1e-30).all())
    assert torch.equal(out, ref.bfloat16().float())  # in fact: exactly the correctly rounded float32 result
    # HF's bf16 path (cos/sin cast to bf16, products in bf16) misses the rounded result for a third of them
    cos, sin = rope.cos_sin(positions)
    hf_q, _ = apply_rotary_pos_emb(x, x, cos.bfloat16()[None], sin.bfloat16()[None])
    assert (hf_q == ref.bfloat16()).float().mean() < 0.9


# -- properties ----------------------------------------------------------------------------------------------------


@given(
    layout=st.sampled_from(["half", "interleaved"]),
    half_dim=st.integers(1, 16),
    partial=st.booleans(),
    m=st.floats(-5000, 5000, allow_nan=False),
    n=st.floats(-5000, 5000, allow_nan=False),
    shift=st.floats(-1e4, 1e4, allow_nan=False),
    seed=st.integers(0, 2**16),
)
def test_score_depends_only_on_offset(layout, half_dim, partial, m, n, shift, seed):
    dim = 2 * half_dim
    rotary_dim = 2 * max(1, half_dim // 2) if partial else dim
    rope = RotaryEmbedding(dim, layout=layout, rotary_dim=rotary_dim)
    q, k = randn(1, dim, seed=seed, dtype=torch.float64), randn(1, dim, seed=seed + 1, dtype=torch.float64)
    at = rope.rotate(q, torch.tensor([m], dtype=torch.float64)) @ rope.rotate(k, torch.tensor([n],
                                                                                          dtype=torch.float64)).T
    moved = rope.rotate(q, torch.tensor([m + shift], dtype=torch.float64)) @ rope.rotate(
        k, torch.tensor([n + shift], dtype=torch.float64)).T
    assert torch.allclose(at, moved, rtol=1e-9, atol=1e-9)


def _attention(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1) @ v


def test_rotation_invariance_on_a_circular_sequence():
    """The seeds: "when tested on circular sequences, RoPE-based attention exhibits near-perfect rotation
    invariance, a property that additive encodings lack". Rolling a circular sequence by s keeps every
    offset i - j only modulo n, so the claim holds exactly when every frequency is a harmonic of the circle
    (theta_i = 2 pi k_i / n): then rolled input gives rolled output. With RoPE's geometric ladder the
    wrapped pairs see offsets off by n, and the claim is only approximate; additive sinusoids fail outright."""
    n, dim, shift = 16, 8, 5
    x = randn(n, dim, seed=15, dtype=torch.float64)
    wq, wk = randn(dim, dim, seed=16, dtype=torch.float64), randn(dim, dim, seed=17, dtype=torch.float64)
    positions = torch.arange(n, dtype=torch.float64)

    def rope_attention(x, cos, sin):
        q, k = apply_rotary(x @ wq, cos, sin), apply_rotary(x @ wk, cos, sin)
        return _attention(q, k, x)

    harmonics = 2 * math.pi * torch.tensor([1.0, 2.0, 3.0, 5.0], dtype=torch.float64) / n
    angles = positions[:, None] * harmonics
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    out = rope_attention(x, cos, sin)
    rolled = rope_attention(torch.roll(x, shift, 0), cos, sin)
    torch.testing.assert_close(rolled, torch.roll(out, shift, 0), rtol=1e-10, atol=1e-10)

    rope = RotaryEmbedding(dim)
    cos, sin = rope.cos_sin(positions, dtype=torch.float64)
    geometric = (rope_attention(torch.roll(x, shift, 0), cos, sin) - torch.roll(rope_attention(x, cos, sin),
                                                                                shift, 0)).abs().max()
    from omnipos.core import sinusoidal

    pe = sinusoidal(positions, dim, dtype=torch.float64)

    def additive(x):
        return _attention((x + pe) @ wq, (x + pe) @ wk, x)

    additive_err = (additive(torch.roll(x, shift, 0)) - torch.roll(additive(x), shift, 0)).abs().max()
    assert geometric > 1e-3  # not invariant: the seeds' "near-perfect" needs harmonic frequencies
    assert additive_err > 1e-3


# -- dynamic scaling, caching, compile, autograd ------------------------------------------------------------------


def test_dynamic_module_is_stateless_and_matches_hf_per_call():
    scaling = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 64}
    rope = RotaryEmbedding(32, scaling=scaling)
    x = randn(1, 2, 40, 32, seed=18)
    short = torch.arange(40)
    before = rope.rotate(x, short)
    long = rope.rotate(x, short + 200)  # max position 239 > 64: the base grows for this call only
    after = rope.rotate(x, short)
    assert torch.equal(before, after)
    torch.testing.assert_close(before, RotaryEmbedding(32).rotate(x, short), rtol=0, atol=0)
    inv = rope_frequencies(32, scaling=scaling, seq_len=240)[0].numpy()
    np.testing.assert_allclose(long.numpy(), reference_rotate(x.numpy(), (short + 200).numpy(), inv, "half", 32),
                               rtol=0, atol=2e-6)


def test_no_stale_values_across_offsets_lengths_devices():
    rope = RotaryEmbedding(16, layout="interleaved")
    x = randn(1, 50, 16, seed=19)
    a = rope.rotate(x[:, :10], torch.arange(10))
    rope.rotate(x, torch.arange(50))
    b = rope.rotate(x[:, :10], torch.arange(10) + 40)
    c = rope.rotate(x[:, :10], torch.arange(10))
    assert torch.equal(a, c) and not torch.allclose(a, b)
    np.testing.assert_allclose(b.numpy(), reference_rotate(x[:, :10].numpy(), np.arange(40, 50),
                                                           rope_frequencies(16)[0].numpy(), "interleaved", 16),
                               rtol=0, atol=2e-6)


def test_torch_compile_fullgraph():
    rope = RotaryEmbedding(16, rotary_dim=8, layout="interleaved")
    q, k = randn(1, 2, 6, 16, seed=21), randn(1, 2, 6, 16, seed=22)
    positions = torch.arange(6)
    compiled = torch.compile(rope, fullgraph=True, backend="aot_eager")
    for got, want in zip(compiled(q, k, positions), rope(q, k, positions)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    scaled = RotaryEmbedding(16, scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4})
    fn = torch.compile(scaled.rotate, fullgraph=True, backend="eager")
    torch.testing.assert_close(fn(q, positions.double()), scaled.rotate(q, positions.double()), rtol=1e-6, atol=1e-6)


def test_repr():
    text = repr(RotaryEmbedding(64, rotary_dim=32, layout="interleaved", scaling={"rope_type": "linear",
                                                                                  "factor": 2.0}))
    assert "dim=64" in text and "rotary_dim=32" in text and "'interleaved'" in text and "'linear'" in text


# -- bad input -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,exc,words", [
    ({"dim": 63}, ValueError, "dim must be even"),
    ({"dim": 64, "rotary_dim": 33}, ValueError, "rotary_dim must be even"),
    ({"dim": 64, "rotary_dim": 128}, ValueError, "rotary_dim=128 is larger"),
    ({"dim": 64, "layout": "neox"}, ValueError, "layout"),
    ({"dim": 64, "scaling": {"rope_type": "su"}}, ValueError, "rope_type"),
    ({"dim": 64, "scaling": {"rope_type": "yarn", "factor": 4.0}}, ValueError, "original_max_position_embeddings"),
    ({"dim": 64, "n_axes": 3}, ValueError, "multiple of 2 * n_axes"),
    ({"dim": 64, "base": "1e4"}, TypeError, "base must be a number"),
    ({"dim": 64, "base": 0.5}, ValueError, "base must be a finite number > 1"),
    ({"dim": 64, "base": float("inf")}, ValueError, "base must be a finite number > 1"),
    ({"dim": 64, "n_axes": 2, "xpos": True}, ValueError, "n_axes"),
])
def test_bad_construction(kwargs, exc, words):
    with pytest.raises(exc, match=None) as info:
        RotaryEmbedding(**kwargs)
    assert words in str(info.value)


def test_bad_calls():
    rope = RotaryEmbedding(32)
    q = randn(2, 4, 10, 32)
    with pytest.raises(ValueError, match="q .* and k .* must have the same"):
        rope(q, randn(2, 4, 11, 32), torch.arange(10))
    with pytest.raises(ValueError, match="k has head dim 16"):
        rope(q, randn(2, 4, 10, 16), torch.arange(10))
    with pytest.raises(ValueError, match="positions .* do not fit"):
        rope.rotate(q, torch.arange(11))
    with pytest.raises(ValueError, match="positions .* do not fit"):
        rope.rotate(q, torch.zeros(2, 4, 3, 10, dtype=torch.long))
    with pytest.raises(ValueError, match="axis 0 has 3"):
        rope.rotate(q, torch.zeros(3, 10, dtype=torch.long))
    with pytest.raises(ValueError, match="positions must be finite"):
        rope.rotate(q, torch.tensor([0.0] * 9 + [float("nan")]))
    with pytest.raises(ValueError, match="positions must be finite"):
        rope.cos_sin(torch.tensor([float("inf")]))
    with pytest.raises(TypeError, match="positions must be integers or float32/float64"):
        rope.rotate(q, torch.arange(10).bfloat16())
    with pytest.raises(TypeError, match="positions must be real-valued"):
        rope.rotate(q, torch.arange(10) * 1j)
    with pytest.raises(ValueError, match="seq_dim"):
        rope.rotate(q, torch.arange(10), seq_dim=-1)
    with pytest.raises(TypeError, match="x must be a floating tensor"):
        rope.rotate(torch.ones(10, 32, dtype=torch.long), torch.arange(10))
    with pytest.raises(ValueError, match=r"need RotaryEmbedding\(\.\.\., n_axes=\.\.\.\)"):
        rope.rotate(q, torch.zeros(10, 2))
    with pytest.raises(ValueError, match=r"n_axes=2"):
        RotaryEmbedding(32, n_axes=2).rotate(q, torch.zeros(10, 3))
    with pytest.raises(ValueError, match="rotary dim"):
        apply_rotary(q, torch.ones(10, 31), torch.ones(10, 31))
    with pytest.raises(ValueError, match="do not broadcast"):
        apply_rotary(q, torch.ones(7, 32), torch.ones(7, 32))
    with pytest.raises(ValueError, match="n_heads"):
        convert_rope_layout(torch.ones(30, 4), 4, to="half")
    with pytest.raises(ValueError, match="to must be one of"):
        convert_rope_layout(torch.ones(32, 4), 4, to="neox")


# -- M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) ------------------------------------------------------------------------


def _qwen_rotary(family, head_dim, theta, section, interleaved):
    """transformers' own rotary class for a small config (no weights)."""
    if family == "qwen2_vl":
        from transformers.models.qwen2_vl.configuration_qwen2_vl import (
            Qwen2VLTextConfig as Config,
        )
        from transformers.models.qwen2_vl.modeling_qwen2_vl import (
            Qwen2VLRotaryEmbedding as Rotary,
        )
    elif family == "qwen2_5_vl":
        from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import (
            Qwen2_5_VLTextConfig as Config,
        )
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
            Qwen2_5_VLRotaryEmbedding as Rotary,
        )
    else:
        from transformers.models.qwen3_vl.configuration_qwen3_vl import (
            Qwen3VLTextConfig as Config,
        )
        from transformers.models.qwen3_vl.modeling_qwen3_vl import (
            Qwen3VLTextRotaryEmbedding as Rotary,
        )
    params = {"rope_type": "default", "mrope_section": list(section), "rope_theta": theta}
    if interleaved:
        params["mrope_interleaved"] = True
    config = Config(hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim, rope_parameters=params)
    return Rotary(config), config


def _random_section(half, rng):
    cuts = np.sort(rng.choice(np.arange(1, half), size=2, replace=False))
    return (int(cuts[0]), int(cuts[1] - cuts[0]), int(half - cuts[1]))


MROPE_CASES = [  # (family, head_dim, section, interleaved)
    ("qwen2_vl", 128, (16, 24, 24), False),  # Qwen2-VL's own config
    ("qwen2_vl", 32, "random", False),
    ("qwen2_5_vl", 64, "random", False),
    ("qwen3_vl", 128, (24, 20, 20), True),  # Qwen3-VL's own config
    ("qwen3_vl", 32, (6, 5, 5), True),
    ("qwen3_vl", 48, (10, 7, 7), True),
]


@pytest.mark.parametrize("family,head_dim,section,interleaved", MROPE_CASES)
def test_mrope_cos_sin_match_transformers_qwen_vl(family, head_dim, section, interleaved):
    rng = np.random.default_rng(head_dim)
    if section == "random":
        section = _random_section(head_dim // 2, rng)
    theta = float(rng.choice([1e4, 1e6, 5e6]))
    hf, config = _qwen_rotary(family, head_dim, theta, section, interleaved)
    ids = torch.from_numpy(rng.integers(0, 3000, size=(3, 2, 40)))  # HF lays ids out [3, batch, seq]
    cos_hf, sin_hf = hf(torch.zeros(1, dtype=torch.float32), ids)
    positions = ids.permute(1, 2, 0)  # omnipos: axes last, [batch, seq, 3]
    for rope in (RotaryEmbedding(head_dim, base=theta, mrope_section=section, mrope_interleaved=interleaved),
                 RotaryEmbedding(head_dim, scaling=config.rope_parameters)):  # straight from the v5 config
        cos, sin = rope.cos_sin(positions)
        assert cos.shape == cos_hf.shape == (2, 40, head_dim)
        # HF forms float32 angles (|error| <= p * 2^-24 ~ 2e-4 at p = 3000); ours are exact
        torch.testing.assert_close(cos, cos_hf, rtol=0, atol=5e-4)
        torch.testing.assert_close(sin, sin_hf, rtol=0, atol=5e-4)
    # and exactly the float64 definition: slot j turned by coordinate axis(j) of the position
    axes = np.array(mrope_axes_reference(section, interleaved))
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)
    angles = positions.numpy()[..., axes] * inv
    cos64, _ = rope.cos_sin(positions, dtype=torch.float64)
    np.testing.assert_allclose(cos64.numpy(), np.cos(np.concatenate([angles, angles], -1)), rtol=0, atol=1e-12)


def mrope_axes_reference(section, interleaved):
    """The slot -> axis map as CONVENTIONS words it (independent of omnipos' code)."""
    half = sum(section)
    if not interleaved:
        return [0] * section[0] + [1] * section[1] + [2] * section[2]
    return [1 if j % 3 == 1 and j < 3 * section[1] else 2 if j % 3 == 2 and j < 3 * section[2] else 0
            for j in range(half)]


@pytest.mark.parametrize("interleaved,section", [(False, (4, 6, 6)), (True, (6, 5, 5))])
def test_mrope_rotation_matches_hf_apply_multimodal_rotary_pos_emb(interleaved, section):
    """forward(q, k, positions) with GQA and bf16 vs HF's rotation on HF's cos/sin."""
    from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb

    hf, _ = _qwen_rotary("qwen3_vl" if interleaved else "qwen2_vl", 32, 1e6, section, interleaved)
    ids = torch.randint(0, 500, (3, 2, 24), generator=torch.Generator().manual_seed(3))
    cos_hf, sin_hf = hf(torch.zeros(1, dtype=torch.float64), ids)
    rope = RotaryEmbedding(32, base=1e6, mrope_section=section, mrope_interleaved=interleaved)
    q, k = randn(2, 8, 24, 32, seed=40), randn(2, 2, 24, 32, seed=41)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos_hf.float(), sin_hf.float())
    q_o, k_o = rope(q, k, ids.permute(1, 2, 0))
    torch.testing.assert_close(q_o, q_hf, rtol=0, atol=2e-3)
    torch.testing.assert_close(k_o, k_hf, rtol=0, atol=2e-3)
    q_b, k_b = rope(q.bfloat16(), k.bfloat16(), ids.permute(1, 2, 0))  # bf16: the float32 result, rounded once
    q_f, k_f = rope(q.bfloat16().float(), k.bfloat16().float(), ids.permute(1, 2, 0))
    assert q_b.dtype == torch.bfloat16 and torch.equal(q_b, q_f.bfloat16()) and torch.equal(k_b, k_f.bfloat16())
    torch.testing.assert_close(rope.rotate(q, ids.permute(1, 2, 0)), q_o, rtol=0, atol=0)


@given(section=st.sampled_from([(4, 6, 6), (6, 5, 5), (1, 1, 14), (16, 24, 24)]),
       interleaved=st.booleans(), layout=st.sampled_from(["half", "interleaved"]),
       start=st.integers(-10_000, 1_000_000), seed=st.integers(0, 2**16))
def test_mrope_on_text_is_1d_rope_exactly(section, interleaved, layout, start, seed):
    """A text token carries the same id on t, h and w: M-RoPE then is 1-D RoPE, to the bit."""
    dim = 2 * sum(section)
    if interleaved and mrope_axes_reference(section, True).count(0) != section[0]:
        interleaved = False
    rope = RotaryEmbedding(dim, mrope_section=section, mrope_interleaved=interleaved, layout=layout)
    plain = RotaryEmbedding(dim, layout=layout)
    x = randn(2, 3, 7, dim, seed=seed)
    positions = torch.arange(start, start + 7)
    text = positions[:, None].expand(7, 3)
    assert torch.equal(rope.rotate(x, text), plain.rotate(x, positions))
    assert torch.equal(rope.rotate(x), plain.rotate(x))  # default: a text sequence
    for a, b in zip(rope.cos_sin(text), plain.cos_sin(positions)):
        assert torch.equal(a, b)


def test_mrope_with_partial_rotary_and_rope_parameters():
    """mrope_section counts the slots of the rotary dim; rope_parameters carry theta, sections and the partial
    factor (v5 writes them all in one dict)."""
    params = {"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5, "mrope_section": [2, 3, 3]}
    rope = RotaryEmbedding(32, scaling=params)
    assert (rope.rotary_dim, rope.base, rope.mrope_section) == (16, 5e5, (2, 3, 3))
    positions = torch.randint(0, 100, (5, 3), generator=torch.Generator().manual_seed(4))
    x = randn(5, 32, seed=42, dtype=torch.float64)
    out = rope.rotate(x, positions)
    axes = mrope_axes_reference((2, 3, 3), False)
    angles = positions.double()[:, axes] * rope_frequencies(16, base=5e5)[0]
    expected = reference_rotate(x.numpy(), np.zeros(5), np.zeros(8), "half", 16)  # start from x itself
    c, s = angles.cos().numpy(), angles.sin().numpy()
    x1, x2 = x.numpy()[:, :8], x.numpy()[:, 8:16]
    expected[:, :8], expected[:, 8:16] = x1 * c - x2 * s, x2 * c + x1 * s
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=1e-12)
    assert torch.equal(out[:, 16:], x[:, 16:])


# -- 3-D RoPE with unequal per-axis dims (HunyuanVideo, CogVideoX) -----------------------------------------------


def video_grid(t, h, w):
    grids = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
    return torch.stack(grids, -1).reshape(t * h * w, 3)


def hunyuan_video_reference(x, positions, rope_dim_list, theta):
    """diffusers' HunyuanVideoRotaryPosEmbed + apply_rotary_emb (use_real, interleaved pairs), written from its
    source in float64: per axis get_1d_rotary_pos_embed(d_i, grid_i, theta) -> cos/sin repeat_interleave(2),
    concatenated over axes; out = x * cos + stack(-x_odd, x_even) * sin."""
    cos, sin = [], []
    for axis, d in enumerate(rope_dim_list):
        freqs = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64)[: d // 2] / d)
        angles = torch.outer(positions[:, axis].double(), freqs)
        cos.append(angles.cos().repeat_interleave(2, 1))
        sin.append(angles.sin().repeat_interleave(2, 1))
    cos, sin = torch.cat(cos, 1), torch.cat(sin, 1)
    x_real, x_imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
    rotated = torch.stack([-x_imag, x_real], -1).flatten(-2)
    return x * cos + rotated * sin


@pytest.mark.parametrize("rope_dim_list,theta", [((16, 56, 56), 256.0), ((4, 6, 10), 1e4), ((8, 8, 16), 50.0)])
def test_3d_rope_unequal_axes_matches_hunyuan_video_and_the_float64_formula(rope_dim_list, theta):
    dim = sum(rope_dim_list)
    rope = RotaryEmbedding(dim, n_axes=3, axes_dims=rope_dim_list, layout="interleaved", base=theta)
    positions = video_grid(3, 4, 5)
    x = randn(2, 2, 60, dim, seed=43, dtype=torch.float64)
    out = rope.rotate(x, positions)
    torch.testing.assert_close(out, hunyuan_video_reference(x, positions, rope_dim_list, theta), rtol=0, atol=1e-12)
    # the per-axis formula in NumPy: axis a rotates its own block of d_a channels with its own ladder
    expected, start = x.numpy().copy(), 0
    for axis, d in enumerate(rope_dim_list):
        inv = 1.0 / theta ** (np.arange(0, d, 2) / d)
        block = reference_rotate(x.numpy()[..., start:start + d], positions[:, axis].numpy(), inv, "interleaved", d)
        expected[..., start:start + d] = block
        start += d
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=1e-12)
    # "half" is the same model with channels permuted (each slot keeps its frequency and axis)
    half = RotaryEmbedding(dim, n_axes=3, axes_dims=rope_dim_list, base=theta)
    cos_i, _ = rope.cos_sin(positions, dtype=torch.float64)
    cos_h, _ = half.cos_sin(positions, dtype=torch.float64)
    torch.testing.assert_close(cos_i[:, 0::2], cos_h[:, : dim // 2], rtol=0, atol=0)


def test_equal_axes_dims_are_plain_n_axes():
    a = RotaryEmbedding(24, n_axes=3, layout="interleaved")
    b = RotaryEmbedding(24, axes_dims=(8, 8, 8), layout="interleaved")
    x, positions = randn(12, 24, seed=44), video_grid(2, 2, 3)
    assert torch.equal(a.rotate(x, positions), b.rotate(x, positions))
    assert b.n_axes == 3 and "axes_dims" not in repr(b)


# -- rope_parameters (transformers v5) -------------------------------------------------------------------------------


def test_rope_parameters_supply_theta_and_nested_layer_types():
    gemma_like = {"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                     "rope_theta": 1_000_000.0},
                  "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}}
    full = RotaryEmbedding(64, scaling=gemma_like, layer_type="full_attention")
    sliding = RotaryEmbedding(64, scaling=gemma_like, layer_type="sliding_attention")
    assert (full.base, sliding.base) == (1e6, 1e4)
    assert full.rotary_dim == 64  # proportional: the factor says how many slots turn, not how many channels
    torch.testing.assert_close(sliding.inv_freq, rope_frequencies(64, base=1e4)[0], rtol=0, atol=0)
    x = randn(9, 64, seed=45, dtype=torch.float64)
    out = full.rotate(x, torch.arange(9) * 100)
    turned = [*range(8), *range(32, 40)]  # 8 of 32 slots turn, pairs (i, i + 32); the other channels pass through
    still = [c for c in range(64) if c not in turned]
    assert torch.equal(out[:, still], x[:, still]) and not torch.allclose(out[:, turned], x[:, turned])
    assert RotaryEmbedding(64, base=1e6, scaling=gemma_like["full_attention"]).base == 1e6  # agreeing base: fine


@pytest.mark.parametrize("kwargs,words", [
    ({"scaling": {"full_attention": {"rope_theta": 1e4}, "sliding_attention": {"rope_theta": 1e4}}},
     "layer_type"),
    ({"scaling": {"full_attention": {"rope_theta": 1e4}}, "layer_type": "sliding_attention"}, "layer_type"),
    ({"scaling": {"rope_type": "default"}, "layer_type": "full_attention"}, "layer_type"),
    ({"base": 500.0, "scaling": {"rope_type": "default", "rope_theta": 1e4}}, "rope_theta"),
    ({"mrope_section": (16, 24, 24)}, "mrope_section"),  # dim 64: 32 slots, not 64
    ({"mrope_section": (10, 11)}, "mrope_section must have 3 entries"),
    ({"mrope_section": (4, 14, 14), "mrope_interleaved": True}, "3 * section"),
    ({"scaling": {"mrope_section": [8, 12, 12]}, "mrope_section": (16, 8, 8)}, "mrope_section"),
    ({"mrope_section": (8, 12, 12), "n_axes": 3}, "two different models"),
    ({"mrope_interleaved": True}, "needs mrope_section"),
    ({"n_axes": 3, "axes_dims": (16, 24, 26)}, "axes_dims=(16, 24, 26) sums to 66"),
    ({"n_axes": 3, "axes_dims": (15, 24, 25)}, "axes_dims must be even"),
    ({"n_axes": 3, "axes_dims": (32, 32)}, "has 2 entries but n_axes=3"),
    ({"rotary_dim": 32, "scaling": {"partial_rotary_factor": 0.25}}, "partial_rotary_factor"),
    ({"axes_dims": (32, 32), "scaling": {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 8}},
     "length-dependent"),
    ({"mrope_section": (8, 12, 12), "xpos": True}, "xpos is 1-D only"),
    ({"xpos": True, "xpos_center": float("nan")}, "xpos_center"),
])
def test_bad_multimodal_and_rope_parameters_construction(kwargs, words):
    kwargs = {"dim": 64, **kwargs}
    with pytest.raises(ValueError) as info:
        RotaryEmbedding(**kwargs)
    assert words in str(info.value)


def test_bad_mrope_positions():
    rope = RotaryEmbedding(64, mrope_section=(8, 12, 12))
    q = randn(2, 4, 10, 64)
    with pytest.raises(ValueError, match=r"\[\.\.\., seq, 3\].*mrope_section"):
        rope.rotate(q, torch.zeros(2, 10, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[\.\.\., seq, 3\]"):
        rope.rotate(q, torch.arange(10))  # 1-D text ids: give them on the three axes
    with pytest.raises(ValueError, match=r"\[\.\.\., seq, 3\]"):
        rope.cos_sin(torch.zeros(3, 2, 10, dtype=torch.long))  # HF's [3, batch, seq] layout, not permuted
    with pytest.raises(ValueError, match="do not fit"):
        rope.rotate(q, torch.zeros(2, 9, 3, dtype=torch.long))
