"""QK-norm + RoPE: the eager path against transformers (Qwen3, Gemma 3) and a float64 formula; the fused Triton op
against the eager path under Triton's interpreter (forward, gradients, opcheck, compile); the CUDA path (gpu)."""

import math
import textwrap

import pytest
import torch
from support.cuda_graphs import captured
from support.host_work import KernelWatch
from support.triton_interpreter import interpreter_or_skip, run_interpreted

from omnipos.core import QK_NORM_VARIANTS, QKNormRope, RotaryEmbedding, qk_norm_rope


def _float64_reference(q, k, q_weight, k_weight, rope, positions, *, eps, offset, seq_dim=-2):
    """rms(x) * (w + offset), then the rotation, all in float64 from the formula (positions * inv_freq)."""
    outs = []
    inv_freq = rope.inv_freq.double()
    for x, w in ((q, q_weight), (k, k_weight)):
        x = x.double()
        n = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (w.double() + offset)
        seq_axis = seq_dim % x.ndim
        angles = positions.double().unsqueeze(-1) * inv_freq  # [*P, seq, R/2]
        shape = (*positions.shape[:-1], *([1] * (seq_axis - positions.ndim + 1)), positions.shape[-1],
                 *([1] * (x.ndim - 2 - seq_axis)), -1)
        cos, sin = angles.cos().reshape(shape), angles.sin().reshape(shape)
        r = rope.rotary_dim
        if rope.layout == "half":
            x1, x2 = n[..., : r // 2], n[..., r // 2: r]
            rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)
        else:
            x1, x2 = n[..., 0:r:2], n[..., 1:r:2]
            rotated = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).flatten(-2)
        outs.append(torch.cat((rotated, n[..., r:]), -1))
    return outs


def _inputs(qs, ks, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(qs, generator=g, dtype=torch.float64) * 3
    k = torch.randn(ks, generator=g, dtype=torch.float64) * 3
    qw = torch.rand(qs[-1], generator=g, dtype=torch.float64) + 0.5
    kw = torch.rand(qs[-1], generator=g, dtype=torch.float64) + 0.5
    return q.to(dtype), k.to(dtype), qw.float(), kw.float()


FORMULA_CASES = [
    # (rope kwargs, q shape, k shape, seq_dim)
    (dict(dim=32), (2, 4, 20, 32), (2, 2, 20, 32), -2),
    (dict(dim=24, layout="interleaved", rotary_dim=16), (2, 9, 3, 24), (2, 9, 1, 24), 1),
    (dict(dim=64, rotary_dim=32, base=1e6), (1, 2, 7, 64), (1, 1, 7, 64), -2),
]


PER_HEAD_VARIANTS = sorted(v for v in QK_NORM_VARIANTS if v != "olmo2")


@pytest.mark.parametrize("variant", PER_HEAD_VARIANTS)
@pytest.mark.parametrize("kwargs,qs,ks,seq_dim", FORMULA_CASES)
def test_eager_matches_float64_formula(kwargs, qs, ks, seq_dim, variant):
    rope = RotaryEmbedding(**kwargs)
    q, k, qw, kw = _inputs(qs, ks)
    seq = qs[seq_dim]
    positions = torch.arange(seq).unsqueeze(0) + torch.tensor([[0], [3000]])[: qs[0]]  # [batch, seq], offsets
    got = qk_norm_rope(q, k, qw, kw, rope, positions, eps=1e-6, variant=variant, seq_dim=seq_dim)
    want = _float64_reference(q, k, qw, kw, rope, positions, eps=1e-6, offset=QK_NORM_VARIANTS[variant],
                              seq_dim=seq_dim)
    for a, b in zip(got, want):
        assert a.dtype == torch.float32 and a.shape == b.shape
        assert ((a.double() - b) / (1 + b.abs())).abs().max().item() < 2e-6
    # float64 inputs run in float64
    got = qk_norm_rope(q.double(), k.double(), qw, kw, rope, positions, variant=variant, seq_dim=seq_dim)
    want = _float64_reference(q, k, qw, kw, rope, positions, eps=1e-6, offset=QK_NORM_VARIANTS[variant],
                              seq_dim=seq_dim)
    for a, b in zip(got, want):
        assert a.dtype == torch.float64
        assert (a - b).abs().max().item() < 1e-12


def _hf_qwen3(q, k, qw, kw, positions, head_dim, eps):
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import (
        Qwen3RMSNorm,
        Qwen3RotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = Qwen3Config(head_dim=head_dim, hidden_size=head_dim * q.shape[1], num_attention_heads=q.shape[1],
                         num_key_value_heads=k.shape[1], rms_norm_eps=eps,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    q_norm, k_norm = Qwen3RMSNorm(head_dim, eps=eps).to(q.dtype), Qwen3RMSNorm(head_dim, eps=eps).to(q.dtype)
    with torch.no_grad():
        q_norm.weight.copy_(qw)
        k_norm.weight.copy_(kw)
    cos, sin = Qwen3RotaryEmbedding(config)(q, positions)
    return apply_rotary_pos_emb(q_norm(q), k_norm(k), cos, sin)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_transformers_qwen3(dtype):
    """Qwen3Attention: q_norm / k_norm (Qwen3RMSNorm on head_dim) on [batch, heads, seq, head_dim], then
    apply_rotary_pos_emb with Qwen3RotaryEmbedding's cos/sin; GQA (8 q heads, 2 kv heads)."""
    pytest.importorskip("transformers")
    head_dim, eps = 64, 1e-6
    q, k, qw, kw = _inputs((2, 8, 33, head_dim), (2, 2, 33, head_dim), dtype, seed=3)
    positions = torch.arange(33).unsqueeze(0).expand(2, -1) + torch.tensor([[0], [17]])
    ours = QKNormRope(RotaryEmbedding(head_dim, base=1e6), eps=eps).to(dtype)
    with torch.no_grad():
        ours.q_weight.copy_(qw)
        ours.k_weight.copy_(kw)
    got = ours(q, k, positions)
    with torch.no_grad():
        hf = _hf_qwen3(q, k, qw.to(dtype), kw.to(dtype), positions, head_dim, eps)
    rope = RotaryEmbedding(head_dim, base=1e6)
    exact = _float64_reference(q, k, qw.to(dtype), kw.to(dtype), rope, positions, eps=eps, offset=0.0)
    _close_to_transformers_and_nearer_float64(got, hf, exact, dtype)


def _close_to_transformers_and_nearer_float64(got, hf, exact, dtype):
    """Each of omnipos' outputs within 1e-5 (float32) or 4 bf16 ulps of transformers' (relative to 1 + |hf|); in
    bf16 also closer to the float64 reference on average (transformers rounds to bf16 two or three times: after
    the norm, its weight and the rotation; omnipos once)."""
    for a, b, x in zip(got, hf, exact):
        assert a.dtype == b.dtype == dtype and a.shape == b.shape
        diff = ((a.double() - b.double()).abs() / (1 + b.double().abs())).max().item()
        if dtype == torch.float32:
            assert diff < 1e-5, diff
        else:
            assert diff < 4 * 2.0**-8, diff
            ours_err = (a.double() - x).abs().mean().item()
            hf_err = (b.double() - x).abs().mean().item()
            assert ours_err <= hf_err, (ours_err, hf_err)


def test_from_config_matches_a_qwen3_attention_layer():
    """QKNormRope.from_config(Qwen3Config) with the weights of a Qwen3Attention's q_norm / k_norm: the layer's
    q_norm(q), k_norm(k) and apply_rotary_pos_emb with its config's rotary embedding."""
    pytest.importorskip("transformers")
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import (
        Qwen3Attention,
        Qwen3RotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = Qwen3Config(head_dim=32, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                         rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    attention = Qwen3Attention(config, layer_idx=0)
    with torch.no_grad():
        attention.q_norm.weight.uniform_(0.5, 1.5)
        attention.k_norm.weight.uniform_(0.5, 1.5)
    module = QKNormRope.from_config(config)
    assert (module.eps, module.variant, module.rope.dim) == (1e-5, "qwen3", 32)
    module.load_state_dict({"q_weight": attention.q_norm.weight, "k_weight": attention.k_norm.weight})
    q, k, _, _ = _inputs((2, 4, 9, 32), (2, 2, 9, 32), seed=7)
    positions = torch.arange(9).expand(2, 9)
    with torch.no_grad():
        cos, sin = Qwen3RotaryEmbedding(config)(q, positions)
        want = apply_rotary_pos_emb(attention.q_norm(q), attention.k_norm(k), cos, sin)
        got = module(q, k, positions)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="llama"):
        QKNormRope.from_config({"model_type": "llama", "rms_norm_eps": 1e-6})


def test_matches_transformers_gemma3_norm():
    """Gemma 3: Gemma3RMSNorm (1 + weight, in float32) on each head, then the rotation."""
    pytest.importorskip("transformers")
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    head_dim, eps = 32, 1e-6
    q, k, qw, kw = _inputs((1, 4, 12, head_dim), (1, 1, 12, head_dim), seed=5)
    qw, kw = qw - 1.0, kw - 1.0  # Gemma weights live around 0
    rope = RotaryEmbedding(head_dim)
    q_norm, k_norm = Gemma3RMSNorm(head_dim, eps=eps), Gemma3RMSNorm(head_dim, eps=eps)
    with torch.no_grad():
        q_norm.weight.copy_(qw)
        k_norm.weight.copy_(kw)
        cos, sin = rope.cos_sin(torch.arange(12))
        hf = apply_rotary_pos_emb(q_norm(q), k_norm(k), cos[None], sin[None])
    module = QKNormRope(rope, eps=eps, variant="gemma3")
    assert module.q_weight.abs().max() == 0  # Gemma initialises to zero: 1 + weight = 1
    with torch.no_grad():
        module.q_weight.copy_(qw)
        module.k_weight.copy_(kw)
    for a, b in zip(module(q, k), hf):
        torch.testing.assert_close(a, b, rtol=2e-6, atol=2e-6)


def _olmo2_float64_reference(q, k, q_weight, k_weight, rope, positions, *, eps, seq_dim=-2):
    """OLMo 2 from the formula in float64: the heads of each token moved next to the channels and flattened with
    them ([..., seq, H * D], the projection before its split), rms over those H * D channels times the [H * D]
    weight, split back, then each head rotated (the rotation: _float64_reference applied to values of unit rms per
    head, whose own norm is then the identity, scaled back)."""
    outs = []
    for x, w in ((q, q_weight), (k, k_weight)):
        x = x.double()
        seq_axis = seq_dim % x.ndim
        before = seq_axis == x.ndim - 2
        y = x.movedim(seq_axis - 1, -2) if before else x  # [..., seq, heads..., D]
        s = seq_axis - 1 if before else seq_axis
        flat = y.reshape(*y.shape[:s + 1], -1)
        n = (flat / torch.sqrt(flat.pow(2).mean(-1, keepdim=True) + eps) * w.double()).reshape(y.shape)
        outs.append(n.movedim(-2, seq_axis - 1) if before else n)
    rotated = []
    for n in outs:
        rms = torch.sqrt(n.pow(2).mean(-1, keepdim=True))
        r, _ = _float64_reference(n / rms, n / rms, torch.ones(n.shape[-1]), torch.ones(n.shape[-1]), rope,
                                  positions, eps=0.0, offset=0.0, seq_dim=seq_dim)
        rotated.append(r * rms)
    return rotated


OLMO2_CASES = [
    # (rope kwargs, q shape, k shape, seq_dim): heads before the sequence (transformers' layout) and after it
    ({"dim": 32}, (2, 4, 20, 32), (2, 2, 20, 32), -2),
    ({"dim": 24, "layout": "interleaved", "rotary_dim": 16}, (2, 9, 3, 24), (2, 9, 1, 24), 1),
    ({"dim": 16, "base": 5e5}, (7, 3, 16), (7, 1, 16), 0),
]


def _olmo2_inputs(qs, ks, seq_dim, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    seq_axis = seq_dim % len(qs)
    heads = [x[seq_axis - 1] if seq_axis == len(x) - 2 and seq_axis >= 1 else math.prod(x[seq_axis + 1:-1])
             for x in (qs, ks)]
    q = (torch.randn(qs, generator=g, dtype=torch.float64) * 3).to(dtype)
    k = (torch.randn(ks, generator=g, dtype=torch.float64) * 3).to(dtype)
    qw = torch.rand(heads[0] * qs[-1], generator=g, dtype=torch.float64).float() + 0.5
    kw = torch.rand(heads[1] * qs[-1], generator=g, dtype=torch.float64).float() + 0.5
    return q, k, qw, kw


@pytest.mark.parametrize("kwargs,qs,ks,seq_dim", OLMO2_CASES)
def test_olmo2_eager_matches_float64_formula(kwargs, qs, ks, seq_dim):
    """variant='olmo2': one rms per token over all its heads ([H * D] weight), then each head rotated."""
    rope = RotaryEmbedding(**kwargs)
    q, k, qw, kw = _olmo2_inputs(qs, ks, seq_dim)
    positions = torch.arange(qs[seq_dim]) + 11
    got = qk_norm_rope(q, k, qw, kw, rope, positions, eps=1e-6, variant="olmo2", seq_dim=seq_dim)
    want = _olmo2_float64_reference(q, k, qw, kw, rope, positions, eps=1e-6, seq_dim=seq_dim)
    for a, b in zip(got, want):
        assert a.dtype == torch.float32 and a.shape == b.shape
        assert ((a.double() - b) / (1 + b.abs())).abs().max().item() < 2e-6
    # per head it is not: the per-head norm of the same inputs differs (the test could tell them apart)
    per_head = qk_norm_rope(q, k, torch.ones(qs[-1]), torch.ones(qs[-1]), rope, positions, seq_dim=seq_dim)
    assert (per_head[0] - got[0]).abs().max() > 1e-2
    got = qk_norm_rope(q.double(), k.double(), qw, kw, rope, positions, eps=1e-6, variant="olmo2", seq_dim=seq_dim)
    for a, b in zip(got, want):
        assert a.dtype == torch.float64 and (a - b).abs().max().item() < 1e-12


def _hf_olmo2(q_proj, k_proj, qw, kw, positions, head_dim, heads, kv_heads, eps):
    """transformers' Olmo2Attention composition on projections [batch, seq, H * D]: q_norm / k_norm (Olmo2RMSNorm
    over H * D), view into heads, transpose to [batch, heads, seq, D], apply_rotary_pos_emb."""
    from transformers import Olmo2Config
    from transformers.models.olmo2.modeling_olmo2 import (
        Olmo2RMSNorm,
        Olmo2RotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = Olmo2Config(hidden_size=head_dim * heads, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         rms_norm_eps=eps, rope_parameters={"rope_type": "default", "rope_theta": 5e5})
    q_norm, k_norm = Olmo2RMSNorm(heads * head_dim, eps=eps), Olmo2RMSNorm(kv_heads * head_dim, eps=eps)
    with torch.no_grad():
        q_norm.weight.copy_(qw)
        k_norm.weight.copy_(kw)
    q_norm, k_norm = q_norm.to(q_proj.dtype), k_norm.to(q_proj.dtype)
    b, s = q_proj.shape[:2]
    qs = q_norm(q_proj).view(b, s, -1, head_dim).transpose(1, 2)
    ks = k_norm(k_proj).view(b, s, -1, head_dim).transpose(1, 2)
    cos, sin = Olmo2RotaryEmbedding(config)(qs, positions)
    return apply_rotary_pos_emb(qs, ks, cos, sin)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_transformers_olmo2(dtype):
    """Olmo2Attention: q_norm over the whole projection (num_heads * head_dim), then the split into heads and the
    rotation; GQA (8 q heads, 2 kv heads). omnipos takes the split q ([batch, heads, seq, D], a transposed view as
    transformers makes it) and the same [H * D] weights."""
    pytest.importorskip("transformers")
    head_dim, heads, kv_heads, eps, seq = 32, 8, 2, 1e-6, 21
    g = torch.Generator().manual_seed(9)
    q_proj = (torch.randn(2, seq, heads * head_dim, generator=g) * 3).to(dtype)
    k_proj = (torch.randn(2, seq, kv_heads * head_dim, generator=g) * 3).to(dtype)
    qw = torch.rand(heads * head_dim, generator=g) + 0.5
    kw = torch.rand(kv_heads * head_dim, generator=g) + 0.5
    positions = torch.arange(seq).unsqueeze(0).expand(2, -1) + torch.tensor([[0], [100]])
    ours = QKNormRope(RotaryEmbedding(head_dim, base=5e5), eps=eps, variant="olmo2", num_heads=heads,
                      num_kv_heads=kv_heads).to(dtype)
    with torch.no_grad():
        ours.q_weight.copy_(qw)
        ours.k_weight.copy_(kw)
    q = q_proj.view(2, seq, heads, head_dim).transpose(1, 2)
    k = k_proj.view(2, seq, kv_heads, head_dim).transpose(1, 2)
    got = ours(q, k, positions)
    # the other layout, [batch, seq, heads, D] with seq_dim=-3, the same numbers
    other = ours(q.transpose(1, 2), k.transpose(1, 2), positions, seq_dim=-3)
    for a, b in zip(got, other):
        torch.testing.assert_close(a.transpose(1, 2), b, rtol=0, atol=0)
    with torch.no_grad():
        hf = _hf_olmo2(q_proj, k_proj, qw.to(dtype), kw.to(dtype), positions, head_dim, heads, kv_heads, eps)
    exact = _olmo2_float64_reference(q, k, qw.to(dtype), kw.to(dtype), RotaryEmbedding(head_dim, base=5e5),
                                     positions, eps=eps)
    _close_to_transformers_and_nearer_float64(got, hf, exact, dtype)


def test_from_config_matches_olmo2_and_olmo3_attention_layers():
    """QKNormRope.from_config(Olmo2Config / Olmo3Config) loaded with an attention layer's q_norm / k_norm weights
    ([H * D], [Hkv * D]): the layer's q_norm(q_proj(h)), k_norm(k_proj(h)), split into heads, rotated by its
    config's rotary embedding; OLMo 3 per layer type (rope scaling on the full-attention layers only)."""
    pytest.importorskip("transformers")
    from transformers import Olmo2Config, Olmo3Config
    from transformers.models.olmo2.modeling_olmo2 import (
        Olmo2Attention,
        Olmo2RotaryEmbedding,
        apply_rotary_pos_emb,
    )
    from transformers.models.olmo3.modeling_olmo3 import (
        Olmo3Attention,
        Olmo3RotaryEmbedding,
    )

    common = {"hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
              "max_position_embeddings": 256}
    olmo2 = Olmo2Config(**common, rope_parameters={"rope_type": "default", "rope_theta": 5e5})
    olmo3 = Olmo3Config(**common, num_hidden_layers=4, rope_theta=5e5,
                        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})
    cases = [(olmo2, Olmo2Attention(olmo2, layer_idx=0), None,
              lambda x, p, _: Olmo2RotaryEmbedding(olmo2)(x, p))]
    for i in (0, 3):  # a sliding-window layer and a full-attention layer
        layer_type = olmo3.layer_types[i]
        cases.append((olmo3, Olmo3Attention(olmo3, layer_idx=i), layer_type,
                      lambda x, p, t: Olmo3RotaryEmbedding(olmo3)(x, p, t)))
    assert {c[2] for c in cases[1:]} == {"sliding_attention", "full_attention"}
    g = torch.Generator().manual_seed(8)
    hidden = torch.randn(2, 9, 128, generator=g)
    positions = torch.arange(9).expand(2, 9) + 40
    for config, attention, layer_type, cos_sin in cases:
        with torch.no_grad():
            attention.q_norm.weight.uniform_(0.5, 1.5)
            attention.k_norm.weight.uniform_(0.5, 1.5)
        module = QKNormRope.from_config(config, layer_type=layer_type)
        assert (module.eps, module.variant, module.rope.dim) == (1e-5, "olmo2", 32)
        assert (module.num_heads, module.num_kv_heads, module.q_weight.shape, module.k_weight.shape) == \
            (4, 2, (128,), (64,))
        assert module.rope.scaling.rope_type == ("yarn" if layer_type == "full_attention" else "default")
        module.load_state_dict({"q_weight": attention.q_norm.weight, "k_weight": attention.k_norm.weight})
        with torch.no_grad():
            q_proj, k_proj = attention.q_proj(hidden), attention.k_proj(hidden)
            qs = attention.q_norm(q_proj).view(2, 9, -1, 32).transpose(1, 2)
            ks = attention.k_norm(k_proj).view(2, 9, -1, 32).transpose(1, 2)
            cos, sin = cos_sin(qs, positions, layer_type)
            want = apply_rotary_pos_emb(qs, ks, cos, sin)
            got = module(q_proj.view(2, 9, -1, 32).transpose(1, 2), k_proj.view(2, 9, -1, 32).transpose(1, 2),
                         positions)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_olmo2_module_gradients_and_bad_shapes():
    module = QKNormRope(16, variant="olmo2", num_heads=3, num_kv_heads=1).double()
    assert module.q_weight.shape == (48,) and module.k_weight.shape == (16,) and module.q_weight.min() == 1
    assert "num_heads=3, num_kv_heads=1" in repr(module)
    q, k, _, _ = _inputs((2, 3, 5, 16), (2, 1, 5, 16), torch.float64)
    with torch.no_grad():
        module.q_weight.uniform_(0.5, 1.5)
    q.requires_grad_()
    k.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b, w: qk_norm_rope(a, b, w, module.k_weight, module.rope,
                                                                 variant="olmo2"), (q, k, module.q_weight))
    with pytest.raises(ValueError, match=r"q_weight has shape \(16,\); expected \(48,\)"):
        qk_norm_rope(q, k, torch.ones(16), torch.ones(16), module.rope, variant="olmo2")
    with pytest.raises(ValueError, match=r"k_weight has shape \(48,\); expected \(16,\)"):
        qk_norm_rope(q, k, torch.ones(48), torch.ones(48), module.rope, variant="olmo2")
    with pytest.raises(ValueError, match=r"q_weight has shape \(48,\); expected \(16,\)"):
        qk_norm_rope(q, k, torch.ones(48), torch.ones(16), module.rope, variant="qwen3")
    with pytest.raises(ValueError, match="q_weight.*expected \\(96,\\)"):  # [B, S, H, D]: 6 heads of 16
        qk_norm_rope(torch.randn(1, 5, 6, 16), torch.randn(1, 5, 2, 16), torch.ones(16), torch.ones(32),
                     module.rope, variant="olmo2", seq_dim=1)
    with pytest.raises(ValueError, match="num_heads"):
        QKNormRope(16, variant="olmo2")
    with pytest.raises(ValueError, match="num_kv_heads"):
        QKNormRope(16, variant="olmo2", num_heads=2, num_kv_heads=0)
    with pytest.raises(ValueError, match="olmo2' only"):
        QKNormRope(16, num_heads=2, num_kv_heads=2)
    # positions that differ between the heads of a token (heads before the sequence) still work (eagerly)
    positions = torch.arange(15).reshape(1, 3, 5)
    got = qk_norm_rope(q.detach()[:1], q.detach()[:1], module.q_weight.detach(), module.q_weight.detach(),
                       module.rope, positions, variant="olmo2")
    n = qk_norm_rope(q.detach()[:1], q.detach()[:1], module.q_weight.detach(), module.q_weight.detach(),
                     RotaryEmbedding(16, base=1e300), torch.zeros(5), variant="olmo2")[0]
    torch.testing.assert_close(got[0], module.rope(n, n, positions)[0])
    # positions with a size-1 heads axis ([batch, 1, seq]) are those of every head: the same as [batch, seq]
    w = module.q_weight.detach()
    a = qk_norm_rope(q.detach(), q.detach(), w, w, module.rope, torch.arange(10).view(2, 1, 5), variant="olmo2")
    b = qk_norm_rope(q.detach(), q.detach(), w, w, module.rope, torch.arange(10).view(2, 5), variant="olmo2")
    assert a[0].shape == q.shape and torch.equal(a[0], b[0])


def test_module_defaults_and_gradients():
    module = QKNormRope(16)
    assert module.head_dim == 16 and module.q_weight.tolist() == [1.0] * 16
    assert "variant='qwen3'" in repr(module)
    q, k, _, _ = _inputs((2, 3, 5, 16), (2, 1, 5, 16), torch.float64)
    q.requires_grad_()
    k.requires_grad_()
    module = module.double()
    assert torch.autograd.gradcheck(lambda a, b: module(a, b), (q, k))
    out = module(q, k)
    (out[0].sum() + out[1].pow(2).sum()).backward()
    assert module.q_weight.grad is not None and module.k_weight.grad is not None


def test_xpos_and_mrope_ropes_compose():
    """Every RoPE variant works (the eager path): xPos scales q and k; M-RoPE takes [..., seq, 3] positions."""
    q, k, qw, kw = _inputs((1, 2, 6, 16), (1, 2, 6, 16))
    for rope, positions in ((RotaryEmbedding(16, layout="interleaved", xpos=True), torch.arange(6)),
                            (RotaryEmbedding(16, mrope_section=(2, 3, 3)),
                             torch.randint(0, 9, (1, 6, 3), generator=torch.Generator().manual_seed(0)))):
        got = qk_norm_rope(q, k, qw, kw, rope, positions)
        n = [x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w for x, w in ((q, qw), (k, kw))]
        want = rope(n[0], n[1], positions)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_bad_inputs_name_the_argument():
    rope = RotaryEmbedding(16)
    q, k, qw, kw = _inputs((1, 2, 5, 16), (1, 1, 5, 16))
    bad = [
        (dict(q_weight=torch.ones(8)), ValueError, "q_weight"),
        (dict(k_weight=torch.ones(2, 16)), ValueError, "k_weight"),
        (dict(q_weight=torch.ones(16, dtype=torch.long)), TypeError, "q_weight"),
        (dict(k_weight=[1.0] * 16), TypeError, "k_weight"),
        (dict(k=k.double()), TypeError, "same dtype"),
        (dict(q=q.long()), TypeError, "q must be a floating"),
        (dict(k=torch.randn(1, 1, 5, 8)), ValueError, "k has head dim"),
        (dict(k=torch.randn(1, 1, 6, 16)), ValueError, "sequence length"),
        (dict(eps=float("nan")), ValueError, "eps"),
        (dict(eps=float("inf")), ValueError, "eps"),
        (dict(eps=0.0), ValueError, "eps"),
        (dict(eps=True), TypeError, "eps"),
        (dict(eps="1e-6"), TypeError, "eps"),
        (dict(variant="olmo2"), ValueError, r"q_weight has shape \(16,\); expected \(32,\) = \(2 heads"),
        (dict(variant="llama"), ValueError, "variant"),
        (dict(rope=torch.nn.Identity()), TypeError, "rope"),
        (dict(positions=torch.tensor([0.0, 1, 2, float("nan"), 4])), ValueError, "positions"),
        (dict(positions=torch.arange(4)), ValueError, "positions"),
        (dict(positions=torch.arange(5).bfloat16()), TypeError, "positions"),
        (dict(q_weight=torch.ones(16, device="meta")), ValueError, "q_weight"),
    ]
    for change, error, words in bad:
        args = dict(q=q, k=k, q_weight=qw, k_weight=kw, rope=rope, positions=torch.arange(5))
        eps = change.pop("eps", 1e-6)
        variant = change.pop("variant", "qwen3")
        args.update(change)
        with pytest.raises(error, match=words):
            qk_norm_rope(**args, eps=eps, variant=variant)
    with pytest.raises(ValueError, match="num_heads"):
        QKNormRope(16, variant="olmo2")
    with pytest.raises(TypeError, match="rope"):
        QKNormRope("16")
    with pytest.raises(ValueError, match="eps"):
        QKNormRope(16, eps=-1.0)


def test_cpu_takes_the_eager_path(monkeypatch):
    """On the CPU the kernel is never launched (it would need Triton's interpreter): the eager composition runs."""
    from omnipos.core import qk_norm as qk_norm_module

    monkeypatch.setattr(qk_norm_module, "_fused", lambda *a, **k: pytest.fail("kernel on the CPU"))
    q, k, qw, kw = _inputs((1, 2, 5, 16), (1, 1, 5, 16))
    qk_norm_rope(q, k, qw, kw, RotaryEmbedding(16))
    assert not qk_norm_module._kernel_applies(q, k, RotaryEmbedding(16))


# -- the Triton op, through the interpreter on the CPU (and for real on CUDA) ------------------------------------

CASES = textwrap.dedent('''
    import torch
    from omnipos.core import RotaryEmbedding
    from omnipos.core import qk_norm as qn

    def cases():
        g = torch.Generator().manual_seed(0)
        yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
        return [
            # (rope kwargs, q shape, k shape, seq_dim, positions, variant)
            (dict(dim=32), (2, 4, 20, 32), (2, 2, 20, 32), -2, torch.arange(20), "qwen3"),
            (dict(dim=32, layout="interleaved"), (2, 4, 20, 32), (2, 4, 20, 32), -2,
             torch.stack([torch.arange(20), torch.arange(20) + 1000]), "gemma3"),
            (dict(dim=48, rotary_dim=16), (2, 20, 4, 48), (2, 20, 1, 48), 1, torch.arange(20) + 5, "qwen3"),
            (dict(dim=24, layout="interleaved", rotary_dim=12, scaling=yarn), (3, 9, 2, 24), (3, 9, 2, 24), 1,
             torch.rand(3, 9, generator=g, dtype=torch.float64) * 300, "gemma3"),
            (dict(dim=32, mrope_section=(4, 6, 6)), (2, 4, 10, 32), (2, 2, 10, 32), -2,
             torch.randint(0, 300, (3, 2, 10), generator=g).permute(1, 2, 0), "qwen3"),
            (dict(dim=16), (17, 3, 16), (17, 1, 16), 0, torch.arange(17), "qwen3"),
            # OLMo 2: one rms over all heads of a token; heads before the sequence (GQA) and after it
            (dict(dim=32), (2, 4, 20, 32), (2, 2, 20, 32), -2,
             torch.stack([torch.arange(20), torch.arange(20) + 1000]), "olmo2"),
            (dict(dim=24, layout="interleaved", rotary_dim=12, scaling=yarn), (3, 9, 2, 24), (3, 9, 1, 24), 1,
             torch.rand(3, 9, generator=g, dtype=torch.float64) * 300, "olmo2"),
            (dict(dim=32, mrope_section=(4, 6, 6)), (2, 3, 10, 32), (2, 1, 10, 32), -2,
             torch.randint(0, 300, (3, 2, 10), generator=g).permute(1, 2, 0), "olmo2"),
        ]

    def weights(q, k, seq_dim, variant, g, device):
        """[D] per head, [H * D] for OLMo 2 (its heads: qn._num_heads)."""
        seq_axis = seq_dim % q.ndim
        heads = [qn._num_heads(x, seq_axis) if variant == "olmo2" else 1 for x in (q, k)]
        return [(torch.rand(h * q.shape[-1], generator=g) + 0.5).to(device) for h in heads]

    def check(device, dtype, tol, grad_tol):
        g = torch.Generator().manual_seed(1)
        worst = 0.0
        for kwargs, qs, ks, seq_dim, pos, variant in cases():
            rope = RotaryEmbedding(**kwargs).to(device)
            q = (torch.randn(qs, generator=g) * 2).to(device=device, dtype=dtype)
            k = (torch.randn(ks, generator=g) * 2).to(device=device, dtype=dtype)
            qw, kw = weights(q, k, seq_dim, variant, g, device)
            pos = pos.to(device)
            whole = variant == "olmo2"
            positions, seq_axis, eps, offset = qn._prepare(q, k, qw, kw, rope, pos, seq_dim, 1e-6, variant)
            got = qn._fused(q, k, qw, kw, rope, positions, seq_axis, eps, offset, whole)
            want = qn._eager(q, k, qw, kw, rope, positions, seq_dim, eps, offset, whole)
            for a, b in zip(got, want):
                assert a.dtype == b.dtype == dtype and a.shape == b.shape, (a.shape, b.shape)
                err = ((a.float() - b.float()).abs() / (1 + b.float().abs())).max().item()
                worst = max(worst, err)
                assert err <= tol, (kwargs, err)
            if dtype != torch.float32:
                continue
            # gradients for q, k and both weights: the kernel's backward against autograd through the eager path
            leaves = [t.clone().requires_grad_() for t in (q, k, qw, kw)]
            grads = [torch.randn(t.shape, generator=g).to(device) for t in got]
            fused = torch.autograd.grad(qn._fused(*leaves, rope, positions, seq_axis, eps, offset, whole), leaves,
                                        grads)
            eager = torch.autograd.grad(qn._eager(*leaves, rope, positions, seq_dim, eps, offset, whole), leaves,
                                        grads)
            if whole and device == "cpu":  # and against float64 autograd through the eager composition
                leaves64 = [t.detach().double().requires_grad_() for t in leaves]
                exact = torch.autograd.grad(qn._eager(*leaves64, rope, positions, seq_dim, eps, offset, whole),
                                            leaves64, [g_.double() for g_ in grads])
                for name, a, b in zip(("q", "k", "q_weight", "k_weight"), fused, exact):
                    err = ((a.double() - b).abs() / (1 + b.abs())).max().item()
                    assert err <= grad_tol, (kwargs, name, "float64", err)
            for name, a, b in zip(("q", "k", "q_weight", "k_weight"), fused, eager):
                err = ((a - b).abs() / (1 + b.abs())).max().item()
                assert err <= grad_tol, (kwargs, name, err)
        return worst

    def op_check(device):
        """torch.library.opcheck on the registered op (schema, fake tensors, autograd registration, AOT dispatch)."""
        from omnipos.core import qk_norm_triton as qt
        g = torch.Generator().manual_seed(2)
        # interleaved + partial + yarn; M-RoPE + GQA; OLMo 2 interleaved + partial + yarn, heads after the sequence
        for kwargs, qs, ks, seq_dim, pos, variant in cases()[3:5] + cases()[7:8]:
            rope = RotaryEmbedding(**kwargs).to(device)
            q = torch.randn(qs, generator=g).to(device).requires_grad_()
            k = torch.randn(ks, generator=g).to(device).requires_grad_()
            qw, kw = (w.requires_grad_() for w in weights(q, k, seq_dim, variant, g, device))
            positions, seq_axis, eps, offset = qn._prepare(q, k, qw, kw, rope, pos.to(device), seq_dim, 1e-6,
                                                           variant)
            slot_axis = getattr(rope, "slot_axis", None)
            multi = slot_axis is not None
            slot_axis = (torch.zeros(rope.rotary_dim // 2, dtype=torch.int32, device=device) if slot_axis is None
                         else slot_axis.to(device=device, dtype=torch.int32))
            turns = (rope.inv_freq.double() / (2 * torch.pi)).to(device)
            args = (q, k, qw, kw, positions, turns, slot_axis, seq_axis, rope.rotary_dim,
                    rope.layout == "interleaved", float(rope.attention_factor), eps, offset, multi, variant == "olmo2")
            torch.library.opcheck(torch.ops.omnipos.qk_norm_rope.default, args)
        return True

    def double_backward(device):
        """create_graph=True through the kernel: first and second derivatives equal the eager path's."""
        g = torch.Generator().manual_seed(4)
        for kwargs, qs, ks, seq_dim, pos, variant in cases()[:2] + cases()[4:5] + cases()[6:7]:
            rope = RotaryEmbedding(**kwargs).to(device)
            q = torch.randn(qs, generator=g).to(device)
            k = torch.randn(ks, generator=g).to(device)
            qw, kw = weights(q, k, seq_dim, variant, g, device)
            whole = variant == "olmo2"
            positions, seq_axis, eps, offset = qn._prepare(q, k, qw, kw, rope, pos.to(device), seq_dim, 1e-6,
                                                           variant)
            results = []
            for path in ("fused", "eager"):
                leaves = [t.clone().requires_grad_() for t in (q, k, qw, kw)]
                if path == "fused":
                    out = qn._fused(*leaves, rope, positions, seq_axis, eps, offset, whole)
                else:
                    out = qn._eager(*leaves, rope, positions, seq_dim, eps, offset, whole)
                loss = out[0].pow(2).sum() + (out[1] * out[1].detach().sin()).sum()
                first = torch.autograd.grad(loss, leaves, create_graph=True)
                second = torch.autograd.grad(sum((d * t.detach().cos()).sum() for d, t in zip(first, leaves)),
                                             leaves)
                results.append(first + second)
            for a, b in zip(*results):
                err = ((a - b).abs() / (1 + b.abs())).max().item()
                assert err < 5e-5, (kwargs, err)
        return True

    def compiles_without_recompiles(device, whole=False):
        """fullgraph=True, dynamic=True across 3 lengths: one graph, no graph break, no recompile (whole: OLMo 2's
        norm over all 4 / 2 heads of a token, weights [4 * 32] and [2 * 32])."""
        import torch._dynamo
        from torch._dynamo.testing import CompileCounter
        torch._dynamo.reset()
        rope = RotaryEmbedding(32).to(device)
        qw = torch.linspace(0.5, 1.5, 128 if whole else 32, device=device)
        kw = torch.linspace(1.5, 0.5, 64 if whole else 32, device=device)

        def block(q, k, positions):
            qn_, kn_ = qn._fused(q, k, qw, kw, rope, positions, 2, 1e-6, 0.0, whole)
            return torch.nn.functional.scaled_dot_product_attention(qn_, kn_.repeat_interleave(2, 1), kn_.repeat_interleave(2, 1))

        counter = CompileCounter()
        compiled = torch.compile(block, fullgraph=True, dynamic=True, backend=counter)
        g = torch.Generator().manual_seed(3)
        for seq in (5, 9, 17):
            q = torch.randn(1, 4, seq, 32, generator=g).to(device)
            k = torch.randn(1, 2, seq, 32, generator=g).to(device)
            pos = torch.arange(seq, device=device)
            torch.testing.assert_close(compiled(q, k, pos), block(q, k, pos))
        assert counter.frame_count == 1, counter.frame_count
        return True
''')


def test_kernel_matches_eager_in_triton_interpreter():
    """Forward (float32, bfloat16) and the gradients of q, k and both weights, opcheck, double backward, and
    compile with dynamic shapes, all through the kernel run by Triton's interpreter on the CPU (one subprocess)."""
    interpreter_or_skip()
    result = run_interpreted(CASES + "\nprint(check('cpu', torch.float32, 2e-6, 2e-5), check('cpu', torch.bfloat16, 1e-2, 0),"
                          " op_check('cpu'), double_backward('cpu'), compiles_without_recompiles('cpu'),"
                          " compiles_without_recompiles('cpu', whole=True))\n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-4:] == ["True", "True", "True", "True"], result.stdout


def test_triton_module_imports_without_triton_use():
    """The kernel module imports where triton does (it only defines and registers), and says so."""
    from omnipos.core import qk_norm_triton

    assert qk_norm_triton.HAS_TRITON == (pytest.importorskip("triton") is not None)
    assert math.isclose(qk_norm_triton._next_power_of_2(33), 64)


def _namespace() -> dict:
    namespace: dict = {}
    exec(CASES, namespace)
    return namespace


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-6), (torch.bfloat16, 1e-2), (torch.float16, 2e-3)])
def test_kernel_matches_eager_on_cuda(dtype, tol):
    pytest.importorskip("triton")
    assert _namespace()["check"]("cuda", dtype, tol, 2e-5) <= tol


@pytest.mark.gpu
def test_opcheck_and_compile_on_cuda():
    pytest.importorskip("triton")
    namespace = _namespace()
    assert namespace["op_check"]("cuda")
    assert namespace["double_backward"]("cuda")
    assert namespace["compiles_without_recompiles"]("cuda")
    assert namespace["compiles_without_recompiles"]("cuda", whole=True)


@pytest.mark.gpu
def test_public_call_takes_the_kernel_on_cuda(monkeypatch):
    from omnipos.core import qk_norm as qk_norm_module
    from omnipos.core import qk_norm_triton

    if not qk_norm_triton.HAS_TRITON:
        pytest.skip("triton not importable")
    calls = []
    original = qk_norm_triton.fused_qk_norm_rope
    monkeypatch.setattr(qk_norm_triton, "fused_qk_norm_rope", lambda *a, **k: calls.append(1) or original(*a, **k))
    module = QKNormRope(RotaryEmbedding(128, base=1e6)).cuda()
    q = torch.randn(2, 8, 64, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 2, 64, 128, device="cuda", dtype=torch.bfloat16)
    got = module(q, k, torch.arange(64, device="cuda"))
    assert calls
    want = qk_norm_module._eager(q, k, module.q_weight, module.k_weight, module.rope,
                                 torch.arange(64, device="cuda"), -2, module.eps, 0.0)
    for a, b in zip(got, want):
        assert ((a.float() - b.float()).abs() / (1 + b.float().abs())).max().item() <= 1e-2


@pytest.mark.gpu
def test_cuda_graph_capture_replays_like_eager():
    """Captured in a CUDA graph (static buffers), replayed on new q, k and positions: equals the eager
    composition on those inputs."""
    from omnipos.core import qk_norm as qk_norm_module

    module = QKNormRope(RotaryEmbedding(128, base=1e6)).cuda()
    with torch.no_grad():
        module.q_weight.uniform_(0.5, 1.5)
        module.k_weight.uniform_(0.5, 1.5)
    q = torch.randn(4, 16, 32, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(4, 4, 32, 128, device="cuda", dtype=torch.bfloat16)
    positions = torch.arange(32, device="cuda").expand(4, -1).contiguous()
    graph, (q_out, k_out) = captured(lambda: module(q, k, positions))  # warm-up compiles the kernel first
    for step in range(3):
        q.copy_(torch.randn_like(q))
        k.copy_(torch.randn_like(k))
        positions.copy_(torch.arange(32, device="cuda") + 1000 * step + torch.arange(4, device="cuda")[:, None])
        graph.replay()
        torch.cuda.synchronize()
        want = qk_norm_module._eager(q, k, module.q_weight, module.k_weight, module.rope, positions, -2,
                                     module.eps, 0.0)
        for a, b in zip((q_out, k_out), want):
            assert ((a.float() - b.float()).abs() / (1 + b.float().abs())).max().item() <= 1e-2


@pytest.mark.parametrize("variant", ["qwen3", "olmo2"])
def test_cuda_path_creates_no_cpu_tensor_and_never_syncs(monkeypatch, variant):
    """The CUDA path's Python, run on fake CUDA tensors (no GPU needed) as during a CUDA-graph capture: the public
    call and the op's forward and backward bodies create no CPU tensor, read nothing back to the host, and launch
    exactly one kernel each way (per head and OLMo 2's norm over all heads, its weights [H * D])."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from omnipos.core import qk_norm_triton

    if not qk_norm_triton.HAS_TRITON or qk_norm_triton.INTERPRETED:
        pytest.skip("needs triton, outside its interpreter (the ops are then triton_ops)")

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    launched = []
    original = qk_norm_triton.fused_qk_norm_rope
    monkeypatch.setattr(qk_norm_triton, "fused_qk_norm_rope",
                        lambda *a, **kw: launched.append(kw["whole"]) or original(*a, **kw))
    with FakeTensorMode(allow_non_fake_inputs=True):
        heads = {"num_heads": 4, "num_kv_heads": 2} if variant == "olmo2" else {}
        module = QKNormRope(RotaryEmbedding(32, mrope_section=(4, 6, 6)).to("cuda"), device="cuda", variant=variant,
                            **heads)
        q = torch.randn(2, 4, 10, 32, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(2, 2, 10, 32, device="cuda", dtype=torch.bfloat16)
        positions = torch.zeros(2, 10, 3, dtype=torch.float64, device="cuda")  # real-valued: checked when eager
        with KernelWatch() as public:
            out = module(q, k, positions)
        assert [t.shape for t in out] == [q.shape, k.shape] and out[0].device.type == "cuda"
        turns = module.rope.inv_freq.double() / (2 * math.pi)
        slot_axis = module.rope.slot_axis.to(torch.int32)
        options = (positions, turns, slot_axis, 2, 32, False, 1.0, 1e-6, 0.0, True, variant == "olmo2")
        with KernelWatch() as bodies:
            q_out, k_out = qk_norm_triton._forward_body(q, k, module.q_weight, module.k_weight, *options)
            grads = qk_norm_triton._backward_body(q_out, k_out, q, k, module.q_weight, module.k_weight, *options)
    assert not public.cpu and not public.syncs, (public.cpu, public.syncs)
    assert not bodies.cpu and not bodies.syncs, (bodies.cpu, bodies.syncs)
    assert bodies.kernels == ["triton_kernel_wrapper_mutation"] * 2
    assert launched == [variant == "olmo2"]  # the public call took the kernel, OLMo 2 in its whole-token mode
    sizes = [(128,), (64,)] if variant == "olmo2" else [(32,), (32,)]
    assert [g.shape for g in grads] == [q.shape, k.shape, *sizes]


@pytest.mark.parametrize("direction,interleaved,rest,whole", [
    ("forward", False, 0, False), ("backward", True, 16, False),  # per head
    ("forward", True, 16, True), ("backward", False, 0, True),  # OLMo 2: the norm over all heads of a token
])
def test_kernels_compile_for_sm90_without_a_gpu(direction, interleaved, rest, whole):
    """The kernels go through Triton's whole CUDA pipeline (to a cubin for sm_90) on a machine without a GPU: what
    the interpreter cannot see (types, layouts, the constexpr branches as compiled) fails here, not on the device."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from omnipos.core import qk_norm_triton

    kernel = {"forward": qk_norm_triton._qk_norm_rope_fwd_kernel,
              "backward": qk_norm_triton._qk_norm_rope_bwd_kernel}[direction]
    constexprs = {"D": 64 + rest, "HALF": 32, "REST": rest, "ROT": 64, "BLOCK_S": 16, "BLOCK_HALF": 32,
                  "BLOCK_REST": max(rest, 1), "INTERLEAVED": interleaved, "WHOLE": whole}
    pointers = {"qw_ptr": "fp32", "kw_ptr": "fp32", "qpos_ptr": "i64", "kpos_ptr": "i64", "inv_ptr": "fp64",
                "axis_ptr": "i32", "part_ptr": "fp32"}
    signature = {}
    for name in kernel.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = "*" + pointers.get(name, "bf16")
        elif name in ("attention_factor", "eps", "offset"):
            signature[name] = "fp32"
        else:
            signature[name] = "i64" if name.endswith(("_sb", "_ss", "_sh", "_sa")) else "i32"
    try:
        compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constexprs),
                                  target=GPUTarget("cuda", 90, 32))
    except RuntimeError as exc:  # the toolchain (ptxas) missing from this installation, not the kernel
        if "ptxas" in str(exc).lower() and "not found" in str(exc).lower():
            pytest.skip(f"no CUDA toolchain in this Triton: {exc}")
        raise
    assert compiled.asm.get("cubin"), "no cubin produced"
