"""Time2Vec (Kazemi et al., 2019, arXiv 1907.05321): a linear term and learned-frequency sines.

``t2v(t)[0] = w_0 . t + b_0`` and ``t2v(t)[i] = sin(w_i . t + b_i)`` for ``i >= 1``: the linear term first, as in
the paper and mTAN. The frequencies are parameters, so this is the one place in omnipos that calls ``torch.sin``
itself: the core's sinusoids are fixed-frequency, sin/cos-paired and not differentiable in the frequency.
Feed times relative to a nearby origin (``origin="first"``): a learned frequency times a time since 1970 loses
float32 precision before the sine sees it.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core import can_inspect_values, check_positive_int, narrow_to, renamed_argument
from .timelines import check_mask, check_module_device, check_times, encode_valid

__all__ = ["Time2Vec"]


class Time2Vec(nn.Module):
    """Time2Vec with ``dim`` channels: ``[linear | sin ... sin]``.

    Args:
        dim: output channels (>= 1; channel 0 is the linear term, the rest are sines). ``out_features`` (its
            former name) is accepted too.
        in_features: time features per event. With 1 (the default) ``forward`` takes times ``[..., L]`` with no
            feature axis; with more it takes ``[..., L, in_features]``.

    Shape:
        ``forward(times, mask=None)``: ``[..., L]`` (or ``[..., L, in_features]``) -> ``[..., L, dim]``;
        padded slots (mask False) exactly 0. Times must be sorted only when ``in_features == 1``.

    Precision: computed in the parameters' dtype, or float32 for float16 / bfloat16 parameters (cast at the end),
    so a ``.half()`` module gives the float32 result rounded (a linear term beyond float16's 65504 is refused: the cast
    would make it inf). With one input feature each output is
    ``t * w + b`` evaluated element by element, so an event's vector does not depend on its batch (a matrix
    product's rounding can). Times beyond the compute dtype's range (float32: 3.4e38) are refused.
    """

    def __init__(self, dim: int | None = None, in_features: int = 1, *, out_features: int | None = None) -> None:
        super().__init__()
        self.dim = check_positive_int(renamed_argument(dim, out_features, "dim", "out_features"), "dim (out_features)")
        self.in_features = check_positive_int(in_features, "in_features")
        # built without touching the RNG: reset_parameters() is the one initialisation (meta-device friendly)
        device = torch.get_default_device()
        self.linear = nn.utils.skip_init(nn.Linear, self.in_features, 1, device=device)
        self.periodic = (nn.utils.skip_init(nn.Linear, self.in_features, self.dim - 1, device=device)
                         if self.dim > 1 else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.Linear``'s initialisation of the linear term, then of the sines' frequencies and phases."""
        self.linear.reset_parameters()
        if self.periodic is not None:
            self.periodic.reset_parameters()

    @property
    def out_features(self) -> int:
        """Alias of :attr:`dim`."""
        return self.dim

    def forward(self, times: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.in_features == 1:
            times, mask = check_times(times, mask)
            check_module_device(self.linear.weight.device, times)
            return encode_valid(times, mask, lambda t: self.encode_events(t.unsqueeze(-1)))
        if not isinstance(times, torch.Tensor) or times.ndim < 2 or times.shape[-1] != self.in_features:
            raise ValueError(f"times must be [..., L, in_features={self.in_features}], got "
                             f"{tuple(getattr(times, 'shape', ()))}")
        mask = check_mask(mask, times.shape[:-1], times.device)
        check_module_device(self.linear.weight.device, times)
        features, _ = check_times(times, None if mask is None else mask.unsqueeze(-1).expand_as(times),
                                  check_sorted=False)
        return encode_valid(features, mask, self.encode_events)

    def encode_events(self, t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Real events only, no mask or checks: ``[N, in_features]`` -> ``[N, dim]`` in ``dtype`` (default: the
        parameters' dtype)."""
        dtype = self.linear.weight.dtype if dtype is None else dtype
        work = torch.float32 if self.linear.weight.dtype in (torch.float16, torch.bfloat16) else \
            self.linear.weight.dtype
        if can_inspect_values(t) and t.numel() and t.is_floating_point() and \
                bool(t.abs().max() > torch.finfo(work).max):
            raise ValueError(f"times reach {t.abs().max().item():.3g}, beyond what Time2Vec computes in ({work}); "
                             f"give times relative to a nearby origin (origin='first') or in a larger unit")
        t = t.to(work)
        parts = [self._affine(self.linear, t, work)]
        if self.periodic is not None:
            parts.append(torch.sin(self._affine(self.periodic, t, work)))
        out = torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]
        return narrow_to(out, dtype, "Time2Vec's linear term",
                         "give times relative to a nearby origin (origin='first') or in a larger unit, or use bfloat16")

    def _affine(self, layer: nn.Linear, t: torch.Tensor, work: torch.dtype) -> torch.Tensor:
        weight, bias = layer.weight.to(work), layer.bias.to(work)
        if self.in_features == 1:  # t * w + b, one rounding per operation: the same bits in any batch
            return t * weight[:, 0] + bias
        return nn.functional.linear(t, weight, bias)

    def extra_repr(self) -> str:
        return f"dim=out_features={self.dim}, in_features={self.in_features}"
