"""The module contract (tests/contract/harness.py) for every public vision module and the main functional paths:
RotaryEmbedding2D (axial and RoPE-Mixed, grid and packed), PositionAdapter (learned and sincos tables), an adapted
timm ViT with each of the three encodings, sincos_2d, per-image resampling and M-RoPE ids."""

from dataclasses import dataclass, field

import pytest
import torch
from contract.harness import CHECKS, Case, run

from omnipos.vision import (
    RotaryEmbedding2D,
    mrope_position_ids,
    packed_patch_coords,
    resample_pos_embed,
    resample_pos_embed_per_image,
    sincos_2d,
    sincos_2d_from_coords,
)
from omnipos.vision.timm import PositionAdapter, adapt_vit

NOT_A_MODULE = "a function: no module to convert, build on the meta device or copy"
INTEGER_INPUTS = "integer grids / token types only: nothing real-valued to differentiate"
GRIDS = {1: (2, 3), 2: (3, 4)}


@dataclass
class Call(Case):
    """A case whose call is ``getattr(target, method)(*args, **kwargs)`` (a method other than forward, or
    keyword arguments)."""

    method: str | None = None
    kwargs: dict = field(default_factory=dict)

    def call(self, target, args):
        fn = getattr(target, self.method) if self.method else target
        return fn(*args, **self.kwargs)


def qk(size, dtype, heads=2, dim=8, prefix=1):
    g = torch.Generator().manual_seed(size)
    h, w = GRIDS[size]
    shape = (1, heads, prefix + h * w, dim)
    return (torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype), GRIDS[size])


def packed_qk(size, dtype, heads=2, dim=8):
    g = torch.Generator().manual_seed(size)
    coords, cu = packed_patch_coords([GRIDS[1], GRIDS[size]], num_prefix_tokens=1)
    shape = (coords.shape[0], heads, dim)
    return torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype), coords, cu


def table(size, dtype):
    g = torch.Generator().manual_seed(0)  # the same table at both sizes: the grids differ
    return torch.randn(1, 1 + 4 * 4, 8, generator=g).to(dtype)


def images(size, dtype):
    g = torch.Generator().manual_seed(size)
    return (torch.randn(1, 3, *((12, 16) if size == 1 else (20, 8)), generator=g).to(dtype),)


def tiny_vit(encoding):
    from timm.models.vision_transformer import VisionTransformer

    def make():
        model = VisionTransformer(img_size=16, patch_size=4, embed_dim=8, depth=1, num_heads=2, mlp_ratio=1.0,
                                  num_classes=3, reg_tokens=1)
        return adapt_vit(model.eval(), encoding=encoding)

    return make


TIMM_INIT = ("timm's VisionTransformer initialises itself (submodules in __init__, then init_weights) and has no "
             "reset_parameters; the adapter adds no parameters (its RoPE constants: RotaryEmbedding2D's case)")

CASES = [
    Call("RotaryEmbedding2D-axial", make=lambda: RotaryEmbedding2D(8, ref_grid=(4, 4)),
         inputs=qk, grad_inputs=(0, 1), gradgrad=True, kwargs={"num_prefix_tokens": 1}),
    Call("RotaryEmbedding2D-axial-half-xy", make=lambda: RotaryEmbedding2D(8, indexing="xy", layout="half", base=100.0),
         inputs=lambda size, dtype: qk(size, dtype)[::2], grad_inputs=(0,), gradgrad=True, method="rotate",
         kwargs={"num_prefix_tokens": 1}),
    Case("RotaryEmbedding2D-mixed", make=lambda: RotaryEmbedding2D(8, mixed=True, num_heads=2),
         inputs=lambda size, dtype: qk(size, dtype, prefix=0), grad_inputs=(0, 1), gradgrad=True),
    Call("RotaryEmbedding2D-packed", make=lambda: RotaryEmbedding2D(8, ref_grid=(4, 4)), inputs=packed_qk,
         grad_inputs=(0, 1), gradgrad=True, method="forward_packed", kwargs={"num_prefix_tokens": 1}),
    Call("RotaryEmbedding2D-mixed-packed", make=lambda: RotaryEmbedding2D(8, mixed=True, num_heads=2),
         inputs=packed_qk, grad_inputs=(0, 1), gradgrad=True, method="forward_packed",
         kwargs={"num_prefix_tokens": 1}),
    Call("PositionAdapter-learned",
         make=lambda: PositionAdapter(dim=8, source_grid=(4, 4), table_prefix=1, encoding="learned"),
         inputs=lambda size, dtype: (table(size, dtype), GRIDS[size]), grad_inputs=(0,), method="tables",
         kwargs={"dtype": torch.float32, "device": torch.device("cpu")}),
    Call("PositionAdapter-sincos",
         make=lambda: PositionAdapter(dim=8, source_grid=(4, 4), table_prefix=0, encoding="sincos", ref_grid=(4, 4)),
         inputs=lambda size, dtype: (None, GRIDS[size]), method="tables",
         kwargs={"dtype": torch.float32, "device": torch.device("cpu")},
         skip={"grad": "a fixed sincos table of an integer grid: nothing to differentiate",
               "dtypes": "no parameters: the table's dtype is the dtype= argument (the model passes its tokens')"}),
    Case("adapted-ViT-learned", make=tiny_vit("learned"), inputs=images, grad_inputs=(0,), low_tol=2e-2,
         skip={"meta": TIMM_INIT}),
    Case("adapted-ViT-sincos", make=tiny_vit("sincos"), inputs=images, grad_inputs=(0,), low_tol=2e-2,
         skip={"meta": TIMM_INIT}),
    Case("adapted-ViT-rope", make=tiny_vit("rope"), inputs=images, grad_inputs=(0,), low_tol=2e-2,
         skip={"meta": TIMM_INIT}),
    Case("sincos_2d", fn=lambda grid, dim: sincos_2d(grid, dim, num_prefix_tokens=1),
         inputs=lambda size, dtype: (GRIDS[size], 8),
         skip={"grad": INTEGER_INPUTS, "dtypes": NOT_A_MODULE, "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
    Case("sincos_2d_from_coords", fn=lambda coords: sincos_2d_from_coords(coords, 8, dtype=coords.dtype),
         inputs=lambda size, dtype: (torch.rand(3 * size, 2, generator=torch.Generator().manual_seed(size),
                                                dtype=torch.float64) * 20,),
         grad_inputs=(0,), gradgrad=True,
         skip={"dtypes": NOT_A_MODULE, "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
    Case("resample_pos_embed", fn=lambda t, grid: resample_pos_embed(t, grid, num_prefix_tokens=1),
         inputs=lambda size, dtype: (table(size, torch.float64), GRIDS[size]), grad_inputs=(0,),
         skip={"dtypes": NOT_A_MODULE, "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
    Case("resample_pos_embed_per_image",
         fn=lambda t, grids: resample_pos_embed_per_image(t, grids, max_length=13, old_grid=(4, 4),
                                                          num_prefix_tokens=1),
         inputs=lambda size, dtype: (table(size, torch.float64)[0], [GRIDS[1], GRIDS[size], (1, 1), GRIDS[1]]),
         grad_inputs=(0,), skip={"dtypes": NOT_A_MODULE, "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
    Case("mrope_position_ids",
         fn=lambda types, grids: mrope_position_ids(types, grids),
         inputs=lambda size, dtype: (torch.tensor([[0] + [1] * (2 * size) + [0]] * size), [[1, 2, 4 * size]] * size),
         skip={"compile": "data-dependent shapes: which tokens are image tokens is read from the ids (a host sync, "
                          "as in every implementation); the function is vectorised, not traced",
               "grad": INTEGER_INPUTS, "dtypes": NOT_A_MODULE, "meta": NOT_A_MODULE, "copies": NOT_A_MODULE}),
]


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_contract(case, check):
    run(case, check)


# -- compiled training at many image sizes (issue 24) ----------------------------------------------------------------

def _capturing_backend(ops):
    """A torch.compile backend that runs AOTAutograd (the forward and backward graphs inductor would get) and records
    every op of both graphs; inductor itself is left out to keep the test fast (benchmarks/bench_vision.py
    --compiled-training runs it)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def capture(graph, example_inputs):
        ops.update(str(node.target) for node in graph.graph.nodes if node.op == "call_function")
        return make_boxed_func(graph.forward)

    return aot_autograd(fw_compiler=capture, bw_compiler=capture)


@pytest.mark.parametrize("dynamic", [None, True], ids=["default", "dynamic"])
def test_adapted_vit_trains_compiled_at_many_sizes(dynamic):
    # torch.compile(adapt_vit(model)), cross-entropy + backward at several sizes, fp32 then bf16 autocast: the
    # resample's backward was aten._upsample_bicubic2d_aa_backward, which inductor fails to compile (isIntList()
    # INTERNAL ASSERT) once the sizes are dynamic. Gradients equal eager's.
    import copy

    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = adapt_vit(VisionTransformer(img_size=64, patch_size=16, embed_dim=32, depth=1, num_heads=2,
                                        num_classes=5))
    eager = copy.deepcopy(model)
    ops: set[str] = set()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=_capturing_backend(ops), dynamic=dynamic)
    labels = torch.tensor([1, 3])
    for bf16 in (False, True):
        for size in [(160, 96), (224, 224), (192, 256), (48, 80)]:
            x = torch.randn(2, 3, *size)
            for net, fn in ((model, compiled), (eager, eager)):
                net.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    torch.nn.functional.cross_entropy(fn(x), labels).backward()
            tol = dict(rtol=2e-2, atol=2e-3) if bf16 else dict(rtol=1e-4, atol=1e-6)
            torch.testing.assert_close(model.pos_embed.grad, eager.pos_embed.grad, **tol)
            torch.testing.assert_close(model.head.weight.grad, eager.head.weight.grad, **tol)
    assert any("upsample" in op for op in ops), sorted(ops)  # the forward is still F.interpolate (timm's numbers)
    assert not [op for op in ops if "upsample" in op and "backward" in op], sorted(ops)
