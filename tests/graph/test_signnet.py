"""SignNet: invariance to per-graph sign flips (a property over random batches), permutation equivariance,
padding ignored, and the module contract (torch.compile without graph breaks, dtypes, meta init +
reset_parameters, deepcopy / pickle / torch.save, gradcheck, two threads); bad input."""

import copy
import io
import pickle
import threading

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from omnipos.graph import SignNet, laplacian_pe


def inputs(sizes, k, seed, dtype=torch.float64):
    """(pe, eigenvalues, mask, batch) shaped like laplacian_pe's output for graphs of these sizes."""
    generator = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes, dtype=torch.long))
    mask = torch.arange(k) < (torch.tensor(sizes) - 1).clamp_min(0).unsqueeze(1)
    pe = torch.randn(n, k, generator=generator, dtype=dtype) * mask[batch]
    eigenvalues = torch.rand(len(sizes), k, generator=generator, dtype=dtype) * 2 * mask
    return pe, eigenvalues, mask, batch


@given(st.lists(st.integers(1, 9), min_size=1, max_size=4), st.integers(1, 5), st.integers(0, 2**31),
       st.booleans(), st.booleans())
def test_invariant_to_per_graph_sign_flips(sizes, k, seed, use_eigenvalues, graph_context):
    torch.manual_seed(seed % 1000)
    model = SignNet(k, 6, hidden=8, use_eigenvalues=use_eigenvalues, graph_context=graph_context).double()
    pe, eigenvalues, mask, batch = inputs(sizes, k, seed)
    signs = torch.randint(0, 2, (len(sizes), k), generator=torch.Generator().manual_seed(seed)) * 2 - 1
    out = model(pe, eigenvalues, mask, batch)
    flipped = model(pe * signs[batch], eigenvalues, mask, batch)
    torch.testing.assert_close(flipped, out, rtol=1e-12, atol=1e-12)
    assert out.shape == (sum(sizes), 6) and out.dtype == torch.float64


def test_sign_flips_do_change_a_plain_mlp_and_laplacian_pe_input():
    """The property above is not vacuous: the same features without phi(v) + phi(-v) change under a flip."""
    edges = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3]])
    pe, eigenvalues, mask = laplacian_pe(edges, 5, 3, return_eigenvalues=True)
    model = SignNet(3, 4)
    out = model(pe, eigenvalues, mask)
    torch.testing.assert_close(model(-pe, eigenvalues, mask), out)
    h = model.phi[0](torch.stack([pe, eigenvalues.expand_as(pe)], -1))
    assert not torch.allclose(h, model.phi[0](torch.stack([-pe, eigenvalues.expand_as(pe)], -1)))


def test_permutation_equivariant_and_padding_ignored():
    model = SignNet(4, 5).double()
    pe, eigenvalues, mask, batch = inputs([3, 6, 2], 4, 0)
    out = model(pe, eigenvalues, mask, batch)
    perm = torch.randperm(pe.shape[0], generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(pe[perm], eigenvalues, mask, batch[perm]), out[perm])
    padded_nan = torch.where(mask[batch], pe, torch.nan)
    values_nan = torch.where(mask, eigenvalues, torch.nan)
    torch.testing.assert_close(model(padded_nan, values_nan, mask, batch), out)  # GraphGPS pads with NaN
    one = model(pe[:3], eigenvalues[:1], mask[:1])  # batch=None: one graph
    torch.testing.assert_close(one, out[:3])


def test_torch_compile_fullgraph_no_graph_breaks():
    model = SignNet(3, 4)
    args = inputs([4, 2, 5], 3, 2, dtype=torch.float32)
    explanation = torch._dynamo.explain(model)(*args)
    assert explanation.graph_break_count == 0
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(*args), model(*args))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_dtype_follows_the_module(dtype):
    model = SignNet(3, 4)
    args = inputs([4, 5], 3, 3, dtype=torch.float32)
    reference = model(*args)
    converted = copy.deepcopy(model).to(dtype)
    out = converted(*args)
    assert out.dtype == dtype
    tolerance = {torch.float16: 2e-2, torch.bfloat16: 1e-1, torch.float64: 1e-6}[dtype]
    torch.testing.assert_close(out.float(), reference, atol=tolerance, rtol=tolerance)
    assert copy.deepcopy(model).half()(*args).dtype == torch.float16
    assert copy.deepcopy(model).double()(*args).dtype == torch.float64


def test_meta_init_then_reset_parameters_gives_the_init_draw():
    torch.manual_seed(5)
    eager = SignNet(4, 6, hidden=12)
    with torch.device("meta"):
        lazy = SignNet(4, 6, hidden=12)
    lazy = lazy.to_empty(device="cpu")
    torch.manual_seed(5)
    lazy.reset_parameters()
    for (name, a), (_, b) in zip(eager.named_parameters(), lazy.named_parameters()):
        assert torch.equal(a, b), name
    args = inputs([3, 4], 4, 0, dtype=torch.float32)
    torch.testing.assert_close(lazy(*args), eager(*args))


def test_deepcopy_pickle_torch_save_round_trips_and_independence(tmp_path):
    model = SignNet(3, 4, hidden=6)
    small, large = inputs([3, 2], 3, 1, dtype=torch.float32), inputs([9, 7, 4], 3, 2, dtype=torch.float32)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    copies = [copy.deepcopy(model), pickle.loads(pickle.dumps(model)), torch.load(buffer, weights_only=False)]
    state = SignNet(3, 4, hidden=6)
    state.load_state_dict(model.state_dict())
    copies.append(state)
    for other in copies:
        for args in (large, small, large):  # interleaved sizes
            assert torch.equal(other(*args), model(*args))
        with torch.no_grad():
            other.rho[-1].bias.add_(1.0)
        assert not torch.equal(other(*small), model(*small))  # the copy is independent
    assert "k=3, dim=4, hidden=6" in repr(model)


def test_gradcheck_float64():
    model = SignNet(2, 3, hidden=4).double()
    pe, eigenvalues, mask, batch = inputs([3, 4], 2, 4)
    pe.requires_grad_(True)
    eigenvalues.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda p, e: model(p, e, mask, batch), (pe, eigenvalues))
    names, params = zip(*[(name, p.detach().clone().requires_grad_(True)) for name, p in model.named_parameters()])

    def through_parameters(*values):
        return torch.func.functional_call(model, dict(zip(names, values)), (pe.detach(), eigenvalues.detach(),
                                                                            mask, batch))

    assert torch.autograd.gradcheck(through_parameters, params)


def test_two_threads_share_one_module():
    model = SignNet(3, 4)
    cases = [inputs([2 + i, 5], 3, i, dtype=torch.float32) for i in range(4)]
    expected = [model(*args) for args in cases]
    results = {}

    def run(i):
        for _ in range(20):
            results[i] = model(*cases[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, out in enumerate(expected):
        assert torch.equal(results[i], out)


@pytest.mark.parametrize(
    "change,error,match",
    [
        (lambda a: {**a, "pe": a["pe"][:, :2]}, ValueError, r"pe must have shape \[\*, k=3\]"),
        (lambda a: {**a, "pe": a["pe"].long()}, TypeError, "pe must be a floating tensor"),
        (lambda a: {**a, "eigenvalues": a["eigenvalues"][:, :1]}, ValueError, "eigenvalues must have shape"),
        (lambda a: {**a, "mask": a["mask"].float()}, TypeError, "mask must be a bool tensor"),
        (lambda a: {**a, "mask": a["mask"][:1]}, ValueError, "mask must have the shape of eigenvalues"),
        (lambda a: {**a, "batch": a["batch"][:-1]}, ValueError, r"batch must have shape \[N\]"),
        (lambda a: {**a, "batch": a["batch"].float()}, TypeError, "batch must be an integer tensor"),
        (lambda a: {**a, "batch": a["batch"] + 5}, ValueError, r"batch\[0\] = 5 is not a row of eigenvalues"),
        (lambda a: {**a, "batch": None}, ValueError, "without batch, eigenvalues must have one row"),
        (lambda a: {**a, "pe": a["pe"].masked_fill(a["mask"][a["batch"]], float("inf"))}, ValueError,
         "finite where mask is True"),
    ],
)
def test_bad_input(change, error, match):
    model = SignNet(3, 4)
    pe, eigenvalues, mask, batch = inputs([4, 3], 3, 0, dtype=torch.float32)
    arguments = change({"pe": pe, "eigenvalues": eigenvalues, "mask": mask, "batch": batch})
    with pytest.raises(error, match=match):
        model(**arguments)


def test_bad_construction():
    with pytest.raises(ValueError, match="k must be >= 1"):
        SignNet(0, 4)
    with pytest.raises(TypeError, match="dim must be an int"):
        SignNet(3, 4.0)
    with pytest.raises(ValueError, match="phi_layers"):
        SignNet(3, 4, phi_layers=0)
