"""RotaryEmbedding / apply_rotary / convert_rope_layout vs HF transformers, rotary-embedding-torch, timm and float64."""


import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.core import RotaryEmbedding, convert_rope_layout

transformers = pytest.importorskip("transformers")


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_axial_half_layout_is_the_interleaved_model_after_conversion():
    """Slot j pairs (j, j + R/2) in "half": the same frequencies, so permuting channels maps one onto the other."""
    x = randn(5, 12, 24, seed=9, dtype=torch.float64)
    pos = torch.rand(12, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 50
    half = RotaryEmbedding(24, n_axes=3).rotate(x, pos)
    perm = torch.cat([torch.arange(0, 24, 2), torch.arange(1, 24, 2)])  # interleaved channel order -> half
    inter = RotaryEmbedding(24, layout="interleaved", n_axes=3).rotate(x[..., torch.argsort(perm)], pos)
    torch.testing.assert_close(half, inter[..., perm], rtol=1e-12, atol=1e-12)


@given(layout=st.sampled_from(["half", "interleaved"]), heads=st.integers(1, 4), half_dim=st.integers(1, 8),
       seed=st.integers(0, 2**16))
def test_layout_conversion_leaves_scores_unchanged(layout, heads, half_dim, seed):
    head_dim, d_in, seq = 2 * half_dim, 10, 7
    other = "interleaved" if layout == "half" else "half"
    wq, wk = randn(heads * head_dim, d_in, seed=seed, dtype=torch.float64), randn(heads * head_dim, d_in,
                                                                                 seed=seed + 1, dtype=torch.float64)
    x = randn(seq, d_in, seed=seed + 2, dtype=torch.float64)

    def scores(wq, wk, lay):
        rope = RotaryEmbedding(head_dim, layout=lay)
        q = (x @ wq.T).reshape(seq, heads, head_dim).transpose(0, 1)
        k = (x @ wk.T).reshape(seq, heads, head_dim).transpose(0, 1)
        q, k = rope(q, k, torch.arange(seq))
        return q @ k.transpose(-1, -2)

    converted = scores(convert_rope_layout(wq, heads, to=other), convert_rope_layout(wk, heads, to=other), other)
    torch.testing.assert_close(converted, scores(wq, wk, layout), rtol=1e-10, atol=1e-10)
    back = convert_rope_layout(convert_rope_layout(wq, heads, to=other), heads, to=layout)
    assert torch.equal(back, wq)


def test_convert_rope_layout_matches_hf_permute_and_partial():
    n_heads, head_dim, d_in = 4, 8, 6
    w = randn(n_heads * head_dim, d_in, seed=13)
    # convert_llama_weights_to_hf.py: permute(w) = w.view(n, hd // 2, 2, in).transpose(1, 2).reshape(...)
    hf = w.view(n_heads, head_dim // 2, 2, d_in).transpose(1, 2).reshape(n_heads * head_dim, d_in)
    assert torch.equal(convert_rope_layout(w, n_heads, to="half"), hf)
    bias = randn(n_heads * head_dim, seed=14)
    assert torch.equal(convert_rope_layout(bias, n_heads, to="half"), hf[:, :1].squeeze(1) * 0 + bias.view(
        n_heads, head_dim // 2, 2).transpose(1, 2).reshape(-1))
    part = convert_rope_layout(w, n_heads, to="half", rotary_dim=4).view(n_heads, head_dim, d_in)
    assert torch.equal(part[:, 4:], w.view(n_heads, head_dim, d_in)[:, 4:])
    assert torch.equal(part[:, :4], w.view(n_heads, head_dim, d_in)[:, :4].view(n_heads, 2, 2, d_in)
                       .transpose(1, 2).reshape(n_heads, 4, d_in))
