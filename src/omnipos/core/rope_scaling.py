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
    "canonical_rope_type",
    "resolve_base",
    "select_layer_type",
    "rope_frequencies",
    "yarn_correction_range",
]

# ---------------------------------------------------------------------------------------------------------------

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope", "proportional", "ntk_alpha")

# Old spellings of a rope_type: Qwen2-VL's first configs said {"type": "mrope", "mrope_section": [...]}, which
# transformers reads as "default" (the sections live in mrope_section); transformers 5 keeps that "type" and adds
# "rope_type": "default" beside it, so the two agree in meaning.
_ROPE_TYPE_ALIASES = {"mrope": "default"}

# Where max_position_embeddings lives on a model config and not in its rope dict (transformers v5).
_FROM_CONFIG_HINT = ("; it lives on the model config (config.max_position_embeddings), not in its rope dict: add it "
                     "to the dict, or build with RotaryEmbedding.from_config(config), which reads it from there")

# Keys that say what a rope dict is (a flat dict has at least one of them; a dict nested by layer type has none).
_ROPE_KEYS = ("rope_type", "type", "rope_theta")


def _number(value: Any, name: str, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0):
        raise ValueError(f"{name} must be a finite number{' > 0' if positive else ''}, got {value}")
    return value


@dataclass(frozen=True)
class RopeScaling:
    """Typed form of an HF ``rope_scaling`` dict / transformers v5 ``rope_parameters`` (same names, same meaning,
    same defaults).

    ``RopeScaling.from_dict(config.rope_parameters)`` reads a dict exactly as it appears in a model config
    (``"type"`` is accepted for ``"rope_type"``, as in old configs, and Qwen2-VL's old ``"mrope"`` for
    ``"default"``); unknown keys (typos) and keys missing for the ``rope_type`` raise naming the field. Known
    fields that the chosen ``rope_type`` does not use (say ``beta_fast`` with ``"linear"``) are ignored, as HF
    does, since real configs carry such extras.

    Fields of every type: ``rope_theta`` (the base, v5 keeps it here; ``None``: not given),
    ``partial_rotary_factor`` (the rotated fraction of the head dim; :class:`~omnipos.core.RotaryEmbedding` derives
    ``rotary_dim`` from it), ``mrope_section`` / ``mrope_interleaved`` (multimodal RoPE, Qwen2/2.5/3-VL; read by
    :class:`~omnipos.core.RotaryEmbedding`).

    Fields by ``rope_type``:
        - ``"default"``: none.
        - ``"proportional"``: ``partial_rotary_factor`` (default 1), optional ``factor``; see
          :func:`rope_frequencies` (Gemma 4).
        - ``"linear"``: ``factor`` (positions divided by it).
        - ``"dynamic"``: ``factor`` and the trained length ``max_position_embeddings`` (or
          ``original_max_position_embeddings``); the base grows only for sequences longer than that.
        - ``"yarn"``: ``factor``, ``original_max_position_embeddings``; optional ``attention_factor``,
          ``beta_fast`` (32), ``beta_slow`` (1), ``mscale``, ``mscale_all_dim``, ``truncate`` (True).
        - ``"llama3"``: ``factor``, ``low_freq_factor``, ``high_freq_factor`` (>= ``low_freq_factor``; equal, as in
          Llama 4 Scout, is an empty ramp: wavelengths past ``original_max_position_embeddings / low_freq_factor``
          divided by ``factor``, the others kept, as transformers runs it), ``original_max_position_embeddings``.
        - ``"longrope"``: ``short_factor``, ``long_factor`` (``dim // 2`` numbers each),
          ``original_max_position_embeddings``; ``factor`` or ``max_position_embeddings`` (then
          ``factor = max_position_embeddings / original_max_position_embeddings``, as Phi-3 does);
          optional ``attention_factor``; optional ``short_mscale`` / ``long_mscale`` (Phi-3.5-MoE: they replace
          the attention factor, ``long_mscale`` past ``original_max_position_embeddings``, else ``short_mscale``).
        - ``"ntk_alpha"``: ``alpha``; the base becomes ``base * alpha ** (dim / (dim - 2))`` at every length
          (Hunyuan's configs write it as ``"dynamic"`` with ``alpha``, which is read as this type, as transformers
          does).
    """

    rope_type: str = "default"
    rope_theta: float | None = None
    partial_rotary_factor: float | None = None
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
    short_mscale: float | None = None
    long_mscale: float | None = None
    alpha: float | None = None
    mrope_section: tuple[int, ...] | None = None
    mrope_interleaved: bool | None = None

    def __post_init__(self) -> None:
        check_choice(self.rope_type, "scaling rope_type", ROPE_TYPES)
        kind = self.rope_type
        if self.rope_theta is not None:
            theta = _number(self.rope_theta, "scaling['rope_theta']")
            if not theta > 1.0:
                raise ValueError(f"scaling['rope_theta'] must be > 1, got {theta}")
            object.__setattr__(self, "rope_theta", theta)
        if self.partial_rotary_factor is not None:
            factor = _number(self.partial_rotary_factor, "scaling['partial_rotary_factor']")
            if not factor <= 1.0:
                raise ValueError(f"scaling['partial_rotary_factor'] must be in (0, 1], got {factor}")
            object.__setattr__(self, "partial_rotary_factor", factor)
        if self.mrope_section is not None:
            section = self.mrope_section
            if isinstance(section, (str, bytes)) or not hasattr(section, "__iter__"):
                raise TypeError(f"scaling['mrope_section'] must be a list of ints, got {type(section).__name__}")
            object.__setattr__(self, "mrope_section", tuple(
                check_positive_int(v, f"scaling['mrope_section'][{i}]") for i, v in enumerate(section)))
        if self.mrope_interleaved is not None and not isinstance(self.mrope_interleaved, (bool, np.bool_)):
            raise TypeError(f"scaling['mrope_interleaved'] must be a bool, got {self.mrope_interleaved!r}")
        for name in ("original_max_position_embeddings", "max_position_embeddings"):
            value = getattr(self, name)
            if isinstance(value, float) and value.is_integer():  # 1024.0 in some config.json files: transformers runs it
                value = int(value)
                object.__setattr__(self, name, value)
            if value is not None:
                check_positive_int(value, f"scaling['{name}']")
        for name in ("factor", "attention_factor", "beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor",
                     "short_mscale", "long_mscale", "alpha"):
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
                "'original_max_position_embeddings' is accepted too)" + _FROM_CONFIG_HINT
            )
        if kind == "ntk_alpha":
            need("alpha")
        if kind in ("yarn", "llama3", "longrope"):
            need("original_max_position_embeddings")
        if kind == "longrope" and self.original_max_position_embeddings < 2:
            raise ValueError(
                "scaling['original_max_position_embeddings'] must be >= 2 for rope_type='longrope' (its attention "
                f"factor divides by log(original_max_position_embeddings)), got {self.original_max_position_embeddings}"
            )
        if kind == "llama3":
            need("low_freq_factor", "high_freq_factor")
            if self.high_freq_factor < self.low_freq_factor:  # equal: an empty ramp (Llama 4), as transformers runs
                raise ValueError(
                    f"scaling['high_freq_factor'] must be >= scaling['low_freq_factor'], got "
                    f"{self.high_freq_factor} and {self.low_freq_factor}"
                )
        if kind == "longrope" and (self.short_mscale is None) != (self.long_mscale is None):
            raise ValueError("scaling for rope_type='longrope' needs both 'short_mscale' and 'long_mscale' or neither "
                             f"(got short_mscale={self.short_mscale}, long_mscale={self.long_mscale})")
        if kind == "longrope":
            need("short_factor", "long_factor")
        if kind in ("yarn", "longrope") and self.factor is None and self.max_position_embeddings is None:
            raise ValueError(
                f"scaling for rope_type={kind!r} needs the key 'factor' (or 'max_position_embeddings', from which "
                "factor = max_position_embeddings / original_max_position_embeddings)" + _FROM_CONFIG_HINT
            )

    @classmethod
    def from_dict(cls, scaling: Mapping[str, Any], *, layer_type: str | None = None) -> RopeScaling:
        """Read an HF ``rope_scaling`` / ``rope_parameters`` dict; see the class docstring for the keys.

        ``layer_type`` picks one entry of a dict nested by layer type (transformers v5:
        ``{"full_attention": {...}, "sliding_attention": {...}}``); a nested dict without it is a ValueError.
        """
        values = dict(select_layer_type(scaling, layer_type))  # a copy: the caller's dict is never edited
        kind = canonical_rope_type(values.pop("rope_type", None))
        legacy = canonical_rope_type(values.pop("type", None))
        if kind is None:
            kind = legacy if legacy is not None else "default"
        elif legacy is not None and legacy != kind:
            raise ValueError(f"scaling has rope_type={kind!r} but type={legacy!r}, which mean different things; "
                             "give one")
        if kind == "dynamic" and values.get("alpha"):  # Hunyuan: a fixed alpha makes "dynamic" static
            kind = "ntk_alpha"
        unknown = sorted(set(values) - _FIELDS)
        if unknown:
            raise ValueError(
                f"scaling has unknown key(s) {unknown} for rope_type={kind!r}; known keys: {sorted(_FIELDS)}"
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


_FIELDS = frozenset(f.name for f in dataclasses.fields(RopeScaling)) - {"rope_type"}


def canonical_rope_type(kind: Any) -> Any:
    """A rope type under its current name (``"mrope"`` -> ``"default"``); anything else as given."""
    return _ROPE_TYPE_ALIASES.get(kind, kind) if isinstance(kind, str) else kind


def select_layer_type(scaling: Mapping[str, Any], layer_type: str | None) -> Mapping[str, Any]:
    """The rope dict for ``layer_type`` of a dict nested by layer type (transformers v5's per-layer-type
    ``rope_parameters``: ``{"full_attention": {...}, "sliding_attention": {...}}``), or ``scaling`` itself when it is
    flat and ``layer_type`` is None.

    Nested means: no rope key (``rope_type``, ``type``, ``rope_theta``) at the top and every value a dict (or None,
    a layer type without RoPE). Raises ValueError naming ``layer_type`` when it is missing for a nested dict, given
    for a flat one, or not among the layer types.
    """
    if not isinstance(scaling, Mapping):
        raise TypeError(f"scaling must be a dict or RopeScaling, got {type(scaling).__name__}")
    nested = bool(scaling) and not any(key in scaling for key in _ROPE_KEYS) and all(
        value is None or isinstance(value, Mapping) for value in scaling.values())
    if layer_type is not None and not isinstance(layer_type, str):
        raise TypeError(f"layer_type must be a str (a key of the nested rope dict), got {type(layer_type).__name__}")
    if not nested:
        if layer_type is not None:
            raise ValueError(
                f"layer_type={layer_type!r} was given but scaling is not nested by layer type (it has the keys "
                f"{sorted(scaling)}); pass layer_type only with a dict like {{'full_attention': {{...}}, ...}}"
            )
        return scaling
    if layer_type is None:
        raise ValueError(
            f"scaling is nested by layer type (keys {sorted(scaling)}): pass layer_type= one of them, e.g. "
            f"layer_type={next(iter(scaling))!r}"
        )
    if layer_type not in scaling:
        raise ValueError(f"layer_type={layer_type!r} is not a layer type of scaling; expected one of {sorted(scaling)}")
    chosen = scaling[layer_type]
    if chosen is None:
        raise ValueError(f"scaling[{layer_type!r}] is None: layers of type {layer_type!r} use no RoPE")
    return chosen


def as_rope_scaling(scaling: RopeScaling | Mapping[str, Any] | None, *, base: float | None = None,
                    layer_type: str | None = None) -> RopeScaling:
    """``None`` / dict / :class:`RopeScaling` -> :class:`RopeScaling` (``layer_type`` picks a nested entry).

    A ``rope_theta`` in the dict must agree with an explicit ``base`` (``None``: no base given)."""
    if scaling is None:
        result = RopeScaling()
    elif isinstance(scaling, RopeScaling):
        result = scaling
    else:
        result = RopeScaling.from_dict(scaling, layer_type=layer_type)
    if layer_type is not None and not isinstance(scaling, Mapping):
        raise ValueError(f"layer_type={layer_type!r} needs scaling to be a rope dict nested by layer type, got "
                         f"{type(scaling).__name__}")
    resolve_base(base, result)
    return result


def resolve_base(base: Any, scaling: RopeScaling, default: float = 10000.0) -> float:
    """The frequency base: ``base`` when given, else the dict's ``rope_theta``, else ``default`` (10000).

    An explicit ``base`` that disagrees with ``rope_theta`` is a ValueError: which one was meant?"""
    theta = scaling.rope_theta
    if base is None:
        return float(theta) if theta is not None else float(default)
    if isinstance(base, bool) or not isinstance(base, (int, float, np.integer, np.floating)):
        raise TypeError(f"base must be a number, got {type(base).__name__} ({base!r})")
    base = float(base)
    if not math.isfinite(base) or not base > 1.0:
        raise ValueError(f"base must be a finite number > 1, got {base!r}")
    if theta is not None and not math.isclose(theta, base, rel_tol=1e-12):
        raise ValueError(f"scaling['rope_theta']={theta} disagrees with base={base}; pass base=rope_theta or neither")
    return base


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
    # low == high (Llama 4): the ramp is empty, nothing is smoothed (the where below never picks `smoothed`)
    smooth = (trained / wavelength - low) / (high - low) if high > low else torch.zeros_like(inv_freq)
    smoothed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = torch.where(wavelength > trained / low, inv_freq / factor, inv_freq)
    medium = (wavelength >= trained / high) & (wavelength <= trained / low) & (high > low)
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
    short_factor = long_factor = float(attention_factor)
    if s.short_mscale is not None:  # Phi-3.5-MoE: the mscales replace the attention factor
        short_factor, long_factor = float(s.short_mscale), float(s.long_mscale)
    if seq_len is None:
        return short, short_factor
    if isinstance(seq_len, torch.Tensor):  # traceable: no host sync on the choice
        is_long = (seq_len > trained).to(bands.device)
        factor = short_factor if short_factor == long_factor else torch.where(
            is_long, torch.tensor(long_factor, dtype=torch.float64, device=bands.device), short_factor)
        return torch.where(is_long.unsqueeze(-1), long, short), factor
    return (long, long_factor) if seq_len > trained else (short, short_factor)


def _proportional_rope(dim: int, base: float, s: RopeScaling, seq_len: SeqLen,
                       device: Any) -> tuple[torch.Tensor, float]:
    """transformers' ``"proportional"`` (Gemma 4's full-attention layers): ``dim`` is the whole head dim; only the
    first ``n = int(partial_rotary_factor * dim // 2)`` frequency slots turn, at ``base ** (-2i / dim)`` (the
    exponent over the whole head dim, unlike partial rotary), the other ``dim // 2 - n`` slots get frequency 0
    (cos 1, sin 0: those channels pass through); all divided by ``factor`` (default 1)."""
    rotated = int((s.partial_rotary_factor if s.partial_rotary_factor is not None else 1.0) * dim // 2)
    inv_freq = frequency_bands(dim, base=base, device=device)
    inv_freq = torch.cat((inv_freq[:rotated], inv_freq.new_zeros(dim // 2 - rotated)))
    return inv_freq / (float(s.factor) if s.factor is not None else 1.0), 1.0


def _ntk_alpha_rope(dim: int, base: float, s: RopeScaling, seq_len: SeqLen, device: Any) -> tuple[torch.Tensor, float]:
    """Hunyuan's NTK with a fixed ``alpha``: ``base' = base * alpha ** (dim / (dim - 2))`` at every length."""
    if dim <= 2:
        raise ValueError(f"rope_type='ntk_alpha' needs dim > 2 (its exponent divides by dim - 2), got {dim}")
    return frequency_bands(dim, base=base * float(s.alpha) ** (dim / (dim - 2)), device=device), 1.0


#: ``rope_type`` -> ``f(dim, base, scaling, seq_len, device) -> (inv_freq float64 [dim // 2], attention_factor)``.
ROPE_FREQUENCY_FUNCTIONS: dict[str, Callable[..., tuple[torch.Tensor, float]]] = {
    "default": _default_rope,
    "linear": _linear_rope,
    "dynamic": _dynamic_rope,
    "yarn": _yarn_rope,
    "llama3": _llama3_rope,
    "longrope": _longrope_rope,
    "proportional": _proportional_rope,
    "ntk_alpha": _ntk_alpha_rope,
}


def rope_frequencies(
    dim: int,
    *,
    base: float | None = None,
    scaling: RopeScaling | Mapping[str, Any] | None = None,
    seq_len: SeqLen = None,
    device: torch.device | str | None = None,
    layer_type: str | None = None,
) -> tuple[torch.Tensor, float]:
    """RoPE inverse frequencies and attention factor, for every scaling in use (HF ``rope_type``).

    ``inv_freq_i = base ** (-2i / dim)`` before scaling; the scalings are HF transformers'
    ``ROPE_INIT_FUNCTIONS`` (``modeling_rope_utils.py``), computed in float64 and without a config object.

    Args:
        dim: the rotary dimension (``head_dim * partial_rotary_factor``; a dict's ``partial_rotary_factor`` is
            taken to be in ``dim`` already), even, > 0. For ``"proportional"`` the whole head dim (its
            ``partial_rotary_factor`` says how many slots turn; the rest get frequency 0).
        base: ``rope_theta``. ``None`` (the default): the dict's ``rope_theta``, else 10000. A base that disagrees
            with the dict's ``rope_theta`` is a ValueError.
        scaling: ``None``, an HF ``rope_scaling`` / v5 ``rope_parameters`` dict exactly as in a model config, or
            :class:`RopeScaling`. ``mrope_section`` / ``mrope_interleaved`` are accepted (M-RoPE uses the plain
            ladder; :class:`~omnipos.core.RotaryEmbedding` reads them).
        seq_len: the length being encoded, ``max(position) + 1``, for the two length-dependent types:
            ``"dynamic"`` (base grows past the trained length) and ``"longrope"`` (long factors past
            ``original_max_position_embeddings``, short factors otherwise and when ``None``). An int, or a
            0-d tensor (the result is then computed without leaving the device). Ignored by the other types.
            Nothing is remembered between calls.
        device: where to build the frequencies.
        layer_type: for a ``rope_parameters`` dict nested by layer type (``{"full_attention": {...},
            "sliding_attention": {...}}``), the entry to use; required for such a dict, refused for a flat one.

    Returns:
        ``(inv_freq, attention_factor)``: float64 ``Tensor[dim // 2]`` and the float multiplying cos and sin
        (1.0 except for yarn and longrope; a 0-d float64 tensor for a tensor ``seq_len`` when longrope's
        ``short_mscale`` and ``long_mscale`` differ).

    Raises:
        ValueError / TypeError: odd ``dim``, bad ``base``, unknown ``rope_type``, unknown or missing keys, a nested
        dict without ``layer_type``.
    """
    dim = check_even_dim(dim)
    s = as_rope_scaling(scaling, base=base, layer_type=layer_type)
    return ROPE_FREQUENCY_FUNCTIONS[s.rope_type](dim, resolve_base(base, s), s, seq_len, device)
