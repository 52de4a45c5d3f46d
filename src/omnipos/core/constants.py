"""Modules whose constants (frequencies, periods, bucket boundaries, ...) follow devices but keep their precision.

A positional module derives constants from its configuration: RoPE's inverse frequencies, a timeline encoder's
periods, the boundaries of gap buckets. Stored as ordinary buffers they would be rounded by ``module.half()``
(periods of 10 years in seconds become inf in float16; bucket boundaries shift, so a gap lands in another bucket)
and left as uninitialised memory by ``to_empty()`` after meta-device construction. :class:`ConstantBuffers` keeps
them as non-persistent buffers that

- move with the module (``.to(device)``, ``.cuda()``), but keep their own dtype (float64 as a rule) through
  ``.half()`` / ``.bfloat16()`` / ``.double()`` / ``.to(dtype)``, which set the dtype of parameters and outputs only;
- are recomputed from the configuration when the module leaves the meta device (``to_empty``), so
  ``module.to_empty(device=...); module.reset_parameters()`` gives a working module;
- are not saved in ``state_dict`` (they are derived) and survive ``copy.deepcopy``, pickling and ``torch.save``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["ConstantBuffers"]


class ConstantBuffers(nn.Module):
    """Base class: implement :meth:`compute_constants` and call :meth:`register_constants` in ``__init__`` once the
    configuration is set.

    Example::

        class Periods(ConstantBuffers):
            def __init__(self, hours):
                super().__init__()
                self.hours = tuple(hours)
                self.register_constants()

            def compute_constants(self, device):
                return {"periods": torch.tensor(self.hours, dtype=torch.float64, device=device)}
    """

    _constant_names: tuple[str, ...] = ()

    def compute_constants(self, device: torch.device | None) -> dict[str, torch.Tensor]:
        """The constants of this configuration, built on ``device`` (None: the current default device)."""
        raise NotImplementedError

    def register_constants(self) -> None:
        """Compute the constants and register each as a non-persistent buffer (call it from ``__init__``)."""
        constants = self.compute_constants(None)
        self._constant_names = tuple(constants)
        for name, value in constants.items():
            self.register_buffer(name, value, persistent=False)

    def _apply(self, fn: Any, recurse: bool = True) -> ConstantBuffers:
        before = {name: getattr(self, name) for name in self._constant_names}
        super()._apply(fn, recurse)
        if not before:
            return self
        moved = {name: getattr(self, name) for name in before}
        if any(old.is_meta and not moved[name].is_meta for name, old in before.items()):
            device = next(t.device for t in moved.values() if not t.is_meta)
            fresh = self.compute_constants(device)
            for name in before:
                setattr(self, name, fresh[name])
            return self
        for name, old in before.items():  # keep the dtype, follow the device
            setattr(self, name, old.to(moved[name].device))
        return self
