"""A dispatch mode that records every aten op and reports a host (CPU) tensor among its inputs or outputs, or an op
that synchronises with the host: what a CUDA graph capture refuses. Run a CUDA path's Python on meta tensors under it
to show the path is capture-safe without a GPU (tests/core/test_rope_capture.py explains the method)."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten
SYNC_OPS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.is_nonzero.default, aten.equal.default,
            aten.item.default, aten._assert_async.default, aten._unique2.default,
            aten.masked_select.default, aten.repeat_interleave.Tensor}


class NoHostWork(TorchDispatchMode):
    """Records every aten op; a CPU tensor among its inputs or outputs, or a syncing op, is a violation."""

    def __init__(self):
        super().__init__()
        self.ops, self.violations = [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SYNC_OPS or "_local_scalar_dense" in str(func):
            self.violations.append(f"sync: {func}")
        out = func(*args, **kwargs)
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        devices = {t.device.type for t in inputs + outputs}
        if "cpu" in devices:
            self.violations.append(f"host tensor: {func} on {sorted(devices)}")
        self.ops.append(str(func))
        return out


class KernelWatch(TorchDispatchMode):
    """For fake CUDA tensors (``FakeTensorMode``): records the CPU tensors an op returns, the syncing ops, and the
    kernels launched (higher-order ops, such as a ``triton_op``'s launch, and ops of the ``omnipos`` namespace)."""

    supports_higher_order_operators = True

    def __init__(self):
        super().__init__()
        self.cpu, self.syncs, self.kernels = [], [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(func, torch._ops.HigherOrderOperator) or getattr(func, "namespace", None) == "omnipos":
            self.kernels.append(func.name())
        if func in SYNC_OPS:
            self.syncs.append(func)
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                self.cpu.append(func)
        return out
