import pytest
import torch

from omnipos.core import LearnedPositionalEmbedding


def test_lookup_is_the_table_rows():
    emb = LearnedPositionalEmbedding(10, 6)
    positions = torch.tensor([[0, 3, 9], [1, 1, 2]])
    out = emb(positions)
    assert out.shape == (2, 3, 6)
    assert torch.equal(out[0, 1], emb.weight[3])
    assert torch.equal(emb(4), emb.weight[:4])


def test_default_error_names_max_len_and_position():
    emb = LearnedPositionalEmbedding(8, 4)
    with pytest.raises(ValueError, match=r"position 11 is past max_len=8"):
        emb(torch.tensor([0, 11, 3]))
    with pytest.raises(ValueError, match="max_len=8"):
        emb(9)


def test_clamp_reuses_last_row():
    emb = LearnedPositionalEmbedding(8, 4, beyond="clamp")
    out = emb(torch.tensor([7, 8, 100]))
    assert torch.equal(out[1], emb.weight[7]) and torch.equal(out[2], emb.weight[7])


def test_interpolate_inside_is_lookup_and_beyond_is_linear():
    torch.manual_seed(0)
    emb = LearnedPositionalEmbedding(5, 3, beyond="interpolate")
    assert torch.allclose(emb(torch.tensor([0, 2, 4])), emb.weight[[0, 2, 4]])
    # P = 8 -> scale 4/8: position 3 -> 1.5, halfway between rows 1 and 2; 8 -> row 4.
    out = emb(torch.tensor([0, 3, 8]))
    w = emb.weight.detach().double()
    assert torch.allclose(out.double(), torch.stack([w[0], (w[1] + w[2]) / 2, w[4]]), atol=1e-7)
    fixed = emb(torch.tensor([3]), max_position=8)
    assert torch.allclose(fixed[0], out[1])
    real = emb(torch.tensor([2.5]))
    assert torch.allclose(real[0].double(), (w[2] + w[3]) / 2, atol=1e-7)


def test_bad_input():
    with pytest.raises(ValueError, match="beyond"):
        LearnedPositionalEmbedding(8, 4, beyond="wrap")
    with pytest.raises(ValueError, match="max_len"):
        LearnedPositionalEmbedding(0, 4)
    emb = LearnedPositionalEmbedding(8, 4)
    with pytest.raises(ValueError, match=">= 0"):
        emb(torch.tensor([-1, 2]))
    with pytest.raises(TypeError, match="integers"):
        emb(torch.tensor([1.5]))
    with pytest.raises(TypeError, match="boolean"):
        emb(torch.tensor([True]))
    interp = LearnedPositionalEmbedding(8, 4, beyond="interpolate")
    with pytest.raises(ValueError, match="finite"):
        interp(torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match="max_position"):
        interp(torch.tensor([10]), max_position=9)
    assert "beyond='interpolate'" in repr(interp)


def test_reset_parameters_after_meta_init_reproduces_init():
    torch.manual_seed(5)
    fresh = LearnedPositionalEmbedding(12, 4, init_std=0.5)
    with torch.device("meta"):
        meta = LearnedPositionalEmbedding(12, 4, init_std=0.5)
    meta.to_empty(device="cpu")
    torch.manual_seed(5)
    meta.reset_parameters()
    assert torch.equal(meta.weight, fresh.weight)
    assert 0.3 < float(fresh.weight.std()) < 0.7


def test_interpolation_is_differentiable_in_the_positions():
    emb = LearnedPositionalEmbedding(5, 3, beyond="interpolate").double()
    positions = torch.tensor([0.3, 2.5, 7.25], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p: emb(p), (positions,))
    fixed = torch.tensor([0.3, 2.5], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p: emb(p, max_position=9.0), (fixed,))


def test_max_position_is_refused_where_it_means_nothing():
    with pytest.raises(ValueError, match="max_position"):
        LearnedPositionalEmbedding(8, 4)(torch.tensor([1]), max_position=9)
    with pytest.raises(ValueError, match="max_position"):
        LearnedPositionalEmbedding(8, 4, beyond="interpolate")(torch.tensor([1.0]), max_position=float("inf"))
