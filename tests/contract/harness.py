"""The module contract of ../shared/ARCHITECTURE.md as reusable checks: each domain lists its cases, this file
checks them. A case names a module (or a function) and how to build inputs; every check below applies to every
case unless the case says, by name and with a reason, that a check has nothing to test (e.g. no gradient for
integer tokens).

Checks:
- ``compile``: ``torch.compile(fullgraph=True)`` captures the forward with zero graph breaks
  (``torch._dynamo.explain``) and the compiled output equals eager. The ``aot_eager`` backend is used (it traces
  exactly what inductor would see, in a fraction of the time); ``benchmarks/bench_compile.py`` runs inductor.
- ``dtypes``: ``.half()``, ``.bfloat16()``, ``.double()`` and ``.to(dtype)`` set the output dtype; the output is
  the float32 output rounded (finite, within the case's tolerance), never a different bucket or an inf.
- ``grad``: ``gradcheck`` in float64 with respect to the real-valued inputs and the parameters; ``gradgradcheck``
  where the case asks for it.
- ``meta``: built under ``torch.device("meta")``, ``to_empty(device="cpu")`` then ``reset_parameters()`` gives the
  same parameters as ``__init__`` under the same seed and the same outputs (derived buffers recomputed).
- ``copies``: ``copy.deepcopy``, ``pickle``, ``torch.save``/``torch.load`` of the whole module and a
  ``state_dict`` round trip give identical outputs at two sizes, interleaved; an in-place edit of the original's
  parameters leaves the copies unchanged.
- ``threads``: two threads running one module at once, at different sizes, get what sequential calls get.
"""

from __future__ import annotations

import copy
import io
import pickle
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

CHECKS = ("compile", "dtypes", "grad", "meta", "copies", "threads")
LOW_DTYPES = (torch.float16, torch.bfloat16)


@dataclass
class Case:
    """One module (``make``) or function (``fn``) under contract.

    Args:
        name: the test id.
        make: () -> the module, built with torch's current RNG (the meta check re-seeds around it).
        fn: for a functional path instead of a module: ``fn(*inputs)``.
        inputs: ``(size, dtype) -> tuple of positional inputs``, deterministic (same size, same values: seed a
            generator inside): ``size`` in {1, 2} selects a smaller/larger input (for the copy and thread checks),
            ``dtype`` the floating dtype that inputs following the module take (q/k, features); inputs that keep
            their own dtype whatever the module's (float64 times, int64 tokens) ignore it, except that gradcheck
            asks for float64.
        grad_inputs: indices of inputs that are real-valued and differentiable (gradcheck wrt them, float64).
        gradgrad: also run gradgradcheck.
        low_tol: max |low-precision output - float32 output| for half/bfloat16 (relative to 1 + |float32|).
        skip: check name -> reason it does not apply; a skipped check must say why.
    """

    name: str
    inputs: Callable[[int, torch.dtype | None], tuple]
    make: Callable[[], nn.Module] | None = None
    fn: Callable[..., Any] | None = None
    grad_inputs: Sequence[int] = ()
    gradgrad: bool = False
    low_tol: float = 1e-2
    skip: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name

    def call(self, target: Any, args: tuple) -> Any:
        return target(*args)


def _tensors(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in _tensors(out[k])]
    raise TypeError(f"cannot compare an output of type {type(out).__name__}")


def assert_same(a: Any, b: Any, *, exact: bool = True, what: str = "") -> None:
    ta, tb = _tensors(a), _tensors(b)
    assert len(ta) == len(tb), what
    for x, y in zip(ta, tb):
        assert x.shape == y.shape and x.dtype == y.dtype, f"{what}: {x.shape}/{x.dtype} vs {y.shape}/{y.dtype}"
        if exact:
            torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True, msg=what or None)
        else:
            torch.testing.assert_close(x, y, msg=what or None)


class _Bound(nn.Module):
    """``case.call(module, args)`` as a module's forward, so ``functional_call`` swaps the parameters of a case whose
    call is not ``module(*args)`` (another method, keyword arguments)."""

    def __init__(self, case: Case, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.case = case

    def forward(self, *args: Any) -> Any:
        return self.case.call(self.module, args)


def _target(case: Case) -> Any:
    return case.make() if case.make is not None else case.fn


def run(case: Case, check: str) -> None:
    """Run one named check on one case (the entry point of every domain's contract test)."""
    if check in case.skip:
        reason = case.skip[check]
        assert isinstance(reason, str) and len(reason) > 10, f"{case}: skipping {check!r} needs a reason"
        return
    {"compile": check_compile, "dtypes": check_dtypes, "grad": check_grad, "meta": check_meta,
     "copies": check_copies, "threads": check_threads}[check](case)


# ------------------------------------------------------------------------------------------------------------------


def check_compile(case: Case) -> None:
    import torch._dynamo

    target = _target(case)
    args = case.inputs(2, torch.float32)
    eager = case.call(target, args)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(lambda *a: case.call(target, a))(*args)
    assert explanation.graph_break_count == 0, (
        f"{case}: {explanation.graph_break_count} graph break(s): "
        + "; ".join(str(b.reason) for b in explanation.break_reasons[:5]))
    compiled = torch.compile(lambda *a: case.call(target, a), fullgraph=True, backend="aot_eager", dynamic=False)
    assert_same(compiled(*args), eager, exact=False, what=f"{case}: compiled vs eager")


def check_dtypes(case: Case) -> None:
    assert case.make is not None, f"{case}: the dtype check is for modules"
    reference_module = case.make()
    reference = _tensors(case.call(reference_module, case.inputs(1, torch.float32)))
    conversions = {
        torch.float16: lambda m: m.half(),
        torch.bfloat16: lambda m: m.bfloat16(),
        torch.float64: lambda m: m.double(),
    }
    for dtype, convert in conversions.items():
        for how in ("method", "to"):
            module = copy.deepcopy(reference_module)
            module = convert(module) if how == "method" else module.to(dtype)
            outs = _tensors(case.call(module, case.inputs(1, dtype)))
            for out, ref in zip(outs, reference):
                if not ref.is_floating_point():
                    continue
                assert out.dtype == dtype, f"{case}: .{how} {dtype} gave output dtype {out.dtype}"
                assert torch.isfinite(out).all() == torch.isfinite(ref).all(), f"{case}: {dtype} overflowed"
                tol = case.low_tol if dtype in LOW_DTYPES else 1e-5
                rel = (out.double() - ref.double()).abs() / (1 + ref.double().abs())
                err = rel.max().item() if out.numel() else 0
                assert err <= tol, f"{case}: {dtype} output differs from float32 by {err:.3g} (> {tol})"


def check_grad(case: Case) -> None:
    target = _target(case)
    if isinstance(target, nn.Module):
        target = target.double()
    args = list(case.inputs(1, torch.float64))
    for i in case.grad_inputs:
        assert args[i].dtype == torch.float64, f"{case}: input {i} must be float64 for gradcheck"
        args[i] = args[i].detach().clone().requires_grad_()
    params = [p for p in target.parameters() if p.requires_grad] if isinstance(target, nn.Module) else []
    assert case.grad_inputs or params, f"{case}: nothing to differentiate; skip 'grad' with a reason instead"

    def as_function(*flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        call_args = list(args)
        for j, i in enumerate(case.grad_inputs):
            call_args[i] = flat[j]
        if params:
            names = [n for n, p in target.named_parameters() if p.requires_grad]
            values = {f"module.{n}": v for n, v in zip(names, flat[len(case.grad_inputs):])}
            out = torch.func.functional_call(_Bound(case, target), values, tuple(call_args))  # through case.call
        else:
            out = case.call(target, tuple(call_args))
        return tuple(t for t in _tensors(out) if t.is_floating_point())

    flat_inputs = tuple(args[i] for i in case.grad_inputs) + tuple(p.detach().clone().requires_grad_() for p in params)
    assert torch.autograd.gradcheck(as_function, flat_inputs, eps=1e-6, atol=1e-5, rtol=1e-4), str(case)
    if case.gradgrad:
        assert torch.autograd.gradgradcheck(as_function, flat_inputs, eps=1e-6, atol=1e-5, rtol=1e-4), str(case)


def check_meta(case: Case) -> None:
    assert case.make is not None, f"{case}: the meta check is for modules"
    torch.manual_seed(1234)
    fresh = case.make()
    with torch.device("meta"):
        meta = case.make()
    for name, tensor in [*meta.named_parameters(), *meta.named_buffers()]:
        assert tensor.is_meta, f"{case}: {name} was not created on the meta device"
    meta.to_empty(device="cpu")
    assert hasattr(meta, "reset_parameters") or not list(meta.parameters()), \
        f"{case}: a module with parameters needs reset_parameters()"
    if hasattr(meta, "reset_parameters"):
        torch.manual_seed(1234)
        meta.reset_parameters()
    for (name, a), (_, b) in zip(fresh.named_parameters(), meta.named_parameters()):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=f"{case}: reset_parameters() differs from __init__ "
                                                                f"for {name}")
    for (name, a), (_, b) in zip(fresh.named_buffers(), meta.named_buffers()):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=f"{case}: buffer {name} not rebuilt after to_empty")
    args = case.inputs(1, torch.float32)
    assert_same(case.call(meta, args), case.call(fresh, args), what=f"{case}: meta-initialised vs fresh")


def _roundtrips(module: nn.Module, make: Callable[[], nn.Module]) -> dict[str, nn.Module]:
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    fresh = make()
    fresh.load_state_dict(module.state_dict())
    return {"deepcopy": copy.deepcopy(module), "pickle": pickle.loads(pickle.dumps(module)),
            "torch.save": loaded, "state_dict": fresh}


def check_copies(case: Case) -> None:
    assert case.make is not None, f"{case}: the copy check is for modules"
    torch.manual_seed(7)
    original = case.make()
    with torch.no_grad():  # make the parameters distinctive: a copy that re-initialises would show it
        for p in original.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    small, large = case.inputs(1, torch.float32), case.inputs(2, torch.float32)
    expected = {1: case.call(original, small), 2: case.call(original, large)}
    copies = _roundtrips(original, case.make)
    for how, clone in copies.items():
        for size, args in ((2, large), (1, small), (2, large)):  # interleaved sizes: no state left behind
            assert_same(case.call(clone, args), expected[size], what=f"{case}: {how} at size {size}")
    with torch.no_grad():
        for p in original.parameters():
            p.mul_(-3.0).add_(1.0)
    for how, clone in copies.items():
        assert_same(case.call(clone, small), expected[1], what=f"{case}: {how} follows the original's edits")


def check_threads(case: Case) -> None:
    target = _target(case)
    small, large = case.inputs(1, torch.float32), case.inputs(2, torch.float32)
    expected = {1: case.call(target, small), 2: case.call(target, large)}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def work(size: int, args: tuple) -> None:
        try:
            barrier.wait()
            for _ in range(20):
                assert_same(case.call(target, args), expected[size], what=f"{case}: thread at size {size}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(1, small)), threading.Thread(target=work, args=(2, large))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
