"""RoPE inverse frequencies under every scaling in use: HF transformers' ``rope_scaling`` / ``rope_parameters``.

One dispatch table from ``rope_type`` to a small pure function ``(dim, base, scaling, seq_len, device) ->
(inv_freq float64 [dim // 2], attention_factor)``, as in HF's ``modeling_rope_utils.py``, without a config object
and without state kept between calls.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .checks import check_choice, check_even_dim, check_positive_int
from .frequencies import frequency_bands

__all__ = [
    "ROPE_TYPES",
    "ROPE_FREQUENCY_FUNCTIONS",
    "RopeScaling",
    "as_rope_scaling",
    "rope_frequencies",
    "yarn_correction_range",
]

# ---------------------------------------------------------------------------------------------------------------

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")

# Keys of HF's rope dicts that never change inv_freq once the rotary ``dim`` is given: ``partial_rotary_factor``
# is already folded into ``dim`` (rotary dim = head_dim * partial_rotary_factor) and ``rope_theta`` is checked
# against ``base``.
_PASSIVE_KEYS = ("rope_theta", "partial_rotary_factor")


def _number(value: Any, name: str, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0):
        raise ValueError(f"{name} must be a finite number{' > 0' if positive else ''}, got {value}")
    return value


@dataclass(frozen=True)
class RopeScaling:
    """Typed form of an HF ``rope_scaling`` dict (same names, same meaning, same defaults).

    ``RopeScaling.from_dict(config.rope_scaling)`` reads a dict exactly as it appears in a model config
    (``"type"`` is accepted for ``"rope_type"``, as in old configs); unknown keys (typos) and keys missing for the
    ``rope_type`` raise naming the field. Known fields that the chosen ``rope_type`` does not use (say
    ``beta_fast`` with ``"linear"``) are ignored, as HF does, since real configs carry such extras.

    Fields by ``rope_type``:
        - ``"default"``: none.
        - ``"linear"``: ``factor`` (positions divided by it).
        - ``"dynamic"``: ``factor`` and the trained length ``max_position_embeddings`` (or
          ``original_max_position_embeddings``); the base grows only for sequences longer than that.
        - ``"yarn"``: ``factor``, ``original_max_position_embeddings``; optional ``attention_factor``,
          ``beta_fast`` (32), ``beta_slow`` (1), ``mscale``, ``mscale_all_dim``, ``truncate`` (True).
        - ``"llama3"``: ``factor``, ``low_freq_factor``, ``high_freq_factor``, ``original_max_position_embeddings``.
        - ``"longrope"``: ``short_factor``, ``long_factor`` (``dim // 2`` numbers each),
          ``original_max_position_embeddings``; ``factor`` or ``max_position_embeddings`` (then
          ``factor = max_position_embeddings / original_max_position_embeddings``, as Phi-3 does);
          optional ``attention_factor``.
    """

    rope_type: str = "default"
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    max_position_embeddings: int | None = None
    attention_factor: float | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        check_choice(self.rope_type, "scaling rope_type", ROPE_TYPES)
        kind = self.rope_type
        for name in ("original_max_position_embeddings", "max_position_embeddings"):
            value = getattr(self, name)
            if value is not None:
                check_positive_int(value, f"scaling['{name}']")
        for name in ("factor", "attention_factor", "beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor"):
            value = getattr(self, name)
            if value is not None:
                _number(value, f"scaling['{name}']")
        for name in ("mscale", "mscale_all_dim"):
            value = getattr(self, name)
            if value is not None:
                _number(value, f"scaling['{name}']", positive=False)
        for name in ("short_factor", "long_factor"):
            value = getattr(self, name)
            if value is not None:
                if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                    raise TypeError(f"scaling['{name}'] must be a list of numbers, got {type(value).__name__}")
                numbers = tuple(_number(v, f"scaling['{name}'][{i}]") for i, v in enumerate(value))
                object.__setattr__(self, name, numbers)

        def need(*names: str) -> None:
            for name in names:
                if getattr(self, name) is None:
                    raise ValueError(f"scaling for rope_type={kind!r} needs the key {name!r}")

        if kind in ("linear", "dynamic", "llama3"):
            need("factor")
        if kind == "dynamic" and self.max_position_embeddings is None and self.original_max_position_embeddings is None:
            raise ValueError(
                "scaling for rope_type='dynamic' needs the key 'max_position_embeddings' (the trained length; "
                "'original_max_position_embeddings' is accepted too)"
            )
        if kind in ("yarn", "llama3", "longrope"):
            need("original_max_position_embeddings")
        if kind == "llama3":
            need("low_freq_factor", "high_freq_factor")
            if not self.high_freq_factor > self.low_freq_factor:
                raise ValueError(
                    f"scaling['high_freq_factor'] must be > scaling['low_freq_factor'], got "
                    f"{self.high_freq_factor} and {self.low_freq_factor}"
                )
        if kind == "longrope":
            need("short_factor", "long_factor")
        if kind in ("yarn", "longrope") and self.factor is None and self.max_position_embeddings is None:
            raise ValueError(
                f"scaling for rope_type={kind!r} needs the key 'factor' (or 'max_position_embeddings', from which "
                "factor = max_position_embeddings / original_max_position_embeddings)"
            )

    @classmethod
    def from_dict(cls, scaling: Mapping[str, Any]) -> RopeScaling:
        """Read an HF ``rope_scaling`` / ``rope_parameters`` dict; see the class docstring for the keys."""
        if not isinstance(scaling, Mapping):
            raise TypeError(f"scaling must be a dict or RopeScaling, got {type(scaling).__name__}")
        values = dict(scaling)
        kind = values.pop("rope_type", None)
        legacy = values.pop("type", None)
        if kind is None:
            kind = legacy if legacy is not None else "default"
        elif legacy is not None and legacy != kind:
            raise ValueError(f"scaling has rope_type={kind!r} but type={legacy!r}; give one")
        for key in _PASSIVE_KEYS:
            values.pop(key, None)
        fields = {f.name for f in dataclasses.fields(cls)} - {"rope_type"}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise ValueError(
                f"scaling has unknown key(s) {unknown} for rope_type={kind!r}; known keys: {sorted(fields)}"
            )
        if values.get("truncate") is None:
            values.pop("truncate", None)
        return cls(rope_type=kind, **values)

    @property
    def resolved_factor(self) -> float:
        """``factor``, or ``max_position_embeddings / original_max_position_embeddings`` when it is absent."""
        if self.factor is not None:
            return float(self.factor)
        if self.max_position_embeddings is not None and self.original_max_position_embeddings is not None:
            return self.max_position_embeddings / self.original_max_position_embeddings
        return 1.0


def as_rope_scaling(scaling: RopeScaling | Mapping[str, Any] | None, *, base: float | None = None) -> RopeScaling:
    """``None`` / dict / :class:`RopeScaling` -> :class:`RopeScaling`; a dict's ``rope_theta`` must equal ``base``."""
    if scaling is None:
        return RopeScaling()
    if isinstance(scaling, RopeScaling):
        return scaling
    if isinstance(scaling, Mapping) and base is not None and scaling.get("rope_theta") is not None:
        if not math.isclose(float(scaling["rope_theta"]), float(base), rel_tol=1e-12):
            raise ValueError(
                f"scaling['rope_theta']={scaling['rope_theta']} disagrees with base={base}; pass base=rope_theta"
            )
    return RopeScaling.from_dict(scaling)


SeqLen = int | float | torch.Tensor | None


def _exponents(dim: int, device: Any) -> torch.Tensor:
    return torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim


def _default_rope(dim: int, base: float, s: RopeScaling, seq_len: SeqLen, device: Any) -> tuple[torch.Tensor, float]:
    return frequency_bands(dim, base=base, device=device), 1.0


def _linear_rope(dim: int, base: float, s: RopeScaling, seq_len: SeqLen, device: Any) -> tuple[torch.Tensor, float]:
    return frequency_bands(dim, base=base, device=device) / float(s.factor), 1.0


def _dynamic_rope(dim: int, base: float, s: RopeScaling, seq_len: SeqLen, device: Any) -> tuple[torch.Tensor, float]:
    """NTK-aware: ``base' = base * (f L / Lmax - (f - 1)) ** (d / (d - 2))`` once ``L > Lmax``, else ``base``.

    A pure function of ``seq_len`` (HF kept the grown base as state: HF#25306). A tensor ``seq_len`` stays a
    tensor (no host sync, traceable)."""
    if dim <= 2:
        raise ValueError(f"rope_type='dynamic' needs dim > 2 (its exponent divides by dim - 2), got {dim}")
    trained = s.max_position_embeddings or s.original_max_position_embeddings
    factor = float(s.factor)
    if seq_len is None:
        return frequency_bands(dim, base=base, device=device), 1.0
    if isinstance(seq_len, torch.Tensor):
        length = seq_len.to(torch.float64).clamp(min=trained)
        growth = (factor * length / trained - (factor - 1.0)) ** (dim / (dim - 2))
        new_base = base * growth.to(device=device) if device is not None else base * growth
        return torch.pow(new_base.unsqueeze(-1), -_exponents(dim, new_base.device)), 1.0
    length = max(float(seq_len), float(trained))
    new_base = base * (factor * length / trained - (factor - 1.0)) ** (dim / (dim - 2))
    return frequency_bands(dim, base=new_base, device=device), 1.0


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_correction_range(dim: int, base: float, original_max: int, beta_fast: float = 32.0,
                          beta_slow: float = 1.0, truncate: bool = True) -> tuple[float, float]:
    """YaRN's ``(low, high)`` frequency-index bounds: ``r(beta) = d ln(L0 / (2 pi beta)) / (2 ln base)``,
    ``low = floor(r(beta_fast))``, ``high = ceil(r(beta_slow))`` (unrounded when ``truncate=False``),
    clipped to ``[0, dim - 1]``."""

    def r(beta: float) -> float:
        return dim * math.log(original_max / (beta * 2 * math.pi)) / (2 * math.log(base))

    low, high = r(beta_fast), r(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def _yarn_rope(dim: int, base: float, s: RopeScaling, seq_len: SeqLen, device: Any) -> tuple[torch.Tensor, float]:
    factor = s.resolved_factor
    attention_factor = s.attention_factor
    if attention_factor is None:
        if s.mscale and s.mscale_all_dim:
            attention_factor = _yarn_mscale(factor, s.mscale) / _yarn_mscale(factor, s.mscale_all_dim)
        else:
            attention_factor = _yarn_mscale(factor)
    low, high = yarn_correction_range(
        dim, base, s.original_max_position_embeddings, s.beta_fast or 32.0, s.beta_slow or 1.0, s.truncate
    )
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    extrapolation = frequency_bands(dim, base=base, device=device)
    ramp = ((torch.arange(dim // 2, dtype=torch.float64, device=device) - low) / (high - low)).clamp(0, 1)
    # ramp 0 (high frequencies, index < low) keeps the frequency; ramp 1 (index > high) divides it by the factor
    inv_freq = extrapolation * (1 - ramp) + (extrapolation / factor) * ramp
    return inv_freq, float(attention_factor)


def _llama3_rope(dim: int, base: float, s: RopeScaling, seq_len: SeqLen, device: Any) -> tuple[torch.Tensor, float]:
    inv_freq = frequency_bands(dim, base=base, device=device)
    factor, low, high = float(s.factor), float(s.low_freq_factor), float(s.high_freq_factor)
    trained = s.original_max_position_embeddings
    wavelength = 2 * math.pi / inv_freq
    smooth = (trained / wavelength - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = torch.where(wavelength > trained / low, inv_freq / factor, inv_freq)
    medium = (wavelength >= trained / high) & (wavelength <= trained / low)
    return torch.where(medium, smoothed, out), 1.0


def _longrope_rope(dim: int, base: float, s: RopeScaling, seq_len: SeqLen, device: Any) -> tuple[torch.Tensor, float]:
    for name in ("short_factor", "long_factor"):
        if len(getattr(s, name)) != dim // 2:
            raise ValueError(f"scaling['{name}'] must have dim // 2 = {dim // 2} numbers, got {len(getattr(s, name))}")
    factor = s.resolved_factor
    trained = s.original_max_position_embeddings
    attention_factor = s.attention_factor
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(trained))
    bands = frequency_bands(dim, base=base, device=device)
    short = bands / torch.tensor(s.short_factor, dtype=torch.float64, device=bands.device)
    long = bands / torch.tensor(s.long_factor, dtype=torch.float64, device=bands.device)
    if seq_len is None:
        return short, float(attention_factor)
    if isinstance(seq_len, torch.Tensor):  # traceable: no host sync on the choice
        return torch.where((seq_len > trained).to(bands.device).unsqueeze(-1), long, short), float(attention_factor)
    return (long if seq_len > trained else short), float(attention_factor)


#: ``rope_type`` -> ``f(dim, base, scaling, seq_len, device) -> (inv_freq float64 [dim // 2], attention_factor)``.
ROPE_FREQUENCY_FUNCTIONS: dict[str, Callable[..., tuple[torch.Tensor, float]]] = {
    "default": _default_rope,
    "linear": _linear_rope,
    "dynamic": _dynamic_rope,
    "yarn": _yarn_rope,
    "llama3": _llama3_rope,
    "longrope": _longrope_rope,
}


def rope_frequencies(
    dim: int,
    *,
    base: float = 10000.0,
    scaling: RopeScaling | Mapping[str, Any] | None = None,
    seq_len: SeqLen = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, float]:
    """RoPE inverse frequencies and attention factor, for every scaling in use (HF ``rope_type``).

    ``inv_freq_i = base ** (-2i / dim)`` before scaling; the scalings are HF transformers'
    ``ROPE_INIT_FUNCTIONS`` (``modeling_rope_utils.py``), computed in float64 and without a config object.

    Args:
        dim: the rotary dimension (``head_dim * partial_rotary_factor``); even, > 0.
        base: ``rope_theta``.
        scaling: ``None``, an HF ``rope_scaling`` dict exactly as in a model config, or :class:`RopeScaling`.
            A dict's ``rope_theta`` must equal ``base``; its ``partial_rotary_factor`` is already in ``dim``.
        seq_len: the length being encoded, ``max(position) + 1``, for the two length-dependent types:
            ``"dynamic"`` (base grows past the trained length) and ``"longrope"`` (long factors past
            ``original_max_position_embeddings``, short factors otherwise and when ``None``). An int, or a
            0-d tensor (the result is then computed without leaving the device). Ignored by the other types.
            Nothing is remembered between calls.
        device: where to build the frequencies.

    Returns:
        ``(inv_freq, attention_factor)``: float64 ``Tensor[dim // 2]`` and the float multiplying cos and sin
        (1.0 except for yarn and longrope).

    Raises:
        ValueError / TypeError: odd ``dim``, bad ``base``, unknown ``rope_type``, unknown or missing keys.
    """
    dim = check_even_dim(dim)
    base = _number(base, "base")
    if not base > 1.0:
        raise ValueError(f"base must be a number > 1, got {base!r}")
    s = as_rope_scaling(scaling, base=base)
    return ROPE_FREQUENCY_FUNCTIONS[s.rope_type](dim, base, s, seq_len, device)
