"""Put omnipos' RoPE into a transformers model: ``patch_rotary(model)``, ``unpatch_rotary(model)``.

``patch_rotary`` replaces each rotary-embedding module of a transformers language or vision-language model (the
module that turns ``position_ids`` into what the attention layers rotate q and k by) with a :class:`RotaryPatch`
that computes the same thing from :meth:`omnipos.core.RotaryEmbedding.from_config` (float64 phases, cast at the end),
in place. The family's own attention code and apply function keep running unchanged, so the replacement returns
exactly what the stock module returns: the same form (cat-form ``cos, sin`` ``[B, L, R]``; GLM-style
repeat-interleaved; Llama 4's complex ``freqs_cis``; transformers 4.57 Qwen2/2.5-VL's un-mixed ``[3, B, L, R]``
that ``apply_multimodal_rotary_pos_emb`` mixes), the same shapes and the same dtype. Before swapping, each stock
module is run once at short positions and the replacement must reproduce its output (within float32 rounding), or
the model is refused by name: nothing is patched half-way.

Module structures handled (transformers 5.x and 4.x): ``model.model.rotary_emb`` (VLMs:
``model.model.language_model.rotary_emb``), called with ``layer_type`` where the model mixes attention kinds (5.x
Gemma 3, Olmo 3, ...); 4.57 Gemma 3's ``rotary_emb_local`` (the sliding layers' RoPE); 4.57 Olmo 3's
``rotary_embs`` dict by layer type; per-layer rotary modules. Vision towers' rotary modules are left alone.
M-RoPE models take transformers' own ids (``get_rope_index``: ``[3, B, L]``) unchanged.

``scaling=`` replaces the config's RoPE scaling (try YaRN x4 on a model without editing it): a flat dict (as a
config writes ``rope_scaling``) applies to every layer type; a dict nested by layer type to those it names. theta,
the partial rotary factor, the M-RoPE section and the lengths not given come from the config.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from omnipos.core import (
    RopeScaling,
    RotaryEmbedding,
    require,
    rope_arguments_from_config,
)

__all__ = ["KERNELS", "SUPPORTED_FAMILIES", "RotaryPatch", "patch_rotary", "unpatch_rotary"]

#: The model types tested here with tiny models (logits and greedy generation equal to the stock model's), with
#: transformers 5.24 and, where it has the family, 4.57. Any other family whose rotary module omnipos reproduces
#: (the conformance table: tests/core/rope_conformance.py) is patched too: the check at patch time decides.
SUPPORTED_FAMILIES = (
    "llama", "llama4_text", "llama4", "qwen2", "qwen3", "gemma3_text", "gemma3", "phi3", "phimoe", "deepseek_v3",
    "mistral", "ministral", "olmo", "olmo3", "gpt_neox", "smollm3", "hunyuan_v1_dense", "qwen2_vl", "qwen2_5_vl",
    "qwen3_vl", "granite_swa", "beam",
)
#: ``"transformers"``: the family's own apply function rotates q/k by omnipos' cos/sin; ``"auto"``: that, today.
#: (omnipos rotating q/k itself would mean replacing the modeling module's apply function, a process-global side
#: effect on every model of the family; it waits for the fused path of the GPU work.)
KERNELS = ("auto", "transformers")

_SKIP_WORDS = ("Vision", "Visual", "Audio", "Image", "Patch", "Speech", "Encoder", "Depth")
_FORMS = ("cat", "repeat", "half", "complex", "mrope_split")
_CALLS = ("positions", "layer_type", "table")
_PROBE_LENGTH = 12
_PROBE_OFFSET = 5
_TOLERANCE = 2e-5  # transformers' float32 angles at positions < 20 against omnipos' float64 ones


def _transformers() -> Any:
    return require("transformers", "transformers", "omnipos.integrations.transformers")


class RotaryPatch(nn.Module):
    """What :func:`patch_rotary` puts where a transformers rotary module was: the same call
    (``forward(x, position_ids[, layer_type])``), the same output, computed by omnipos.

    Args:
        ropes: ``{layer_type or "default": RotaryEmbedding}``.
        form: the stock module's output form: ``"cat"`` (``cos, sin [B, L, R]`` as ``cat(f, f)``),
            ``"repeat"`` (``repeat_interleave``), ``"half"`` (``[B, L, R/2]``), ``"complex"`` (``freqs_cis``
            ``[B, L, R/2]`` complex: Llama 4), ``"mrope_split"`` (4.57 Qwen2/2.5-VL: ``[3, B, L, R]``, each axis's
            1-D RoPE over every slot).
        out_dtype: None to return ``x``'s dtype (as transformers' rotary modules do), else that dtype.
        original: the stock module, kept for :func:`unpatch_rotary` (moves with the model).
        call: how the model calls it: ``"positions"`` (``(x, position_ids)``), ``"layer_type"``
            (``(x, position_ids, layer_type)``: 5.x models that mix attention kinds) or ``"table"``
            (``(x, seq_len=n)`` -> ``[n, R]`` rows for positions ``0..n-1``, indexed by the apply function:
            4.57 Phi-3.5-MoE).
    """

    def __init__(self, ropes: dict[str, RotaryEmbedding], form: str, out_dtype: torch.dtype | None,
                 original: nn.Module, call: str = "positions") -> None:
        super().__init__()
        if form not in _FORMS:
            raise ValueError(f"form must be one of {_FORMS}, got {form!r}")
        if call not in _CALLS:
            raise ValueError(f"call must be one of {_CALLS}, got {call!r}")
        self.ropes = nn.ModuleDict(ropes)
        self.form = form
        self.out_dtype = out_dtype
        self.call = call
        self.original = original

    def __getattr__(self, name: str) -> Any:
        """What the model reads off its rotary module besides calling it (``rotary_emb.config``, ``.layer_types``,
        ``.mrope_section``, ...) comes from the stock module."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "original":
                raise
            return getattr(super().__getattr__("original"), name)

    def extra_repr(self) -> str:
        return f"form={self.form!r}, call={self.call!r}, original={type(self.original).__name__}"

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor | None = None, layer_type: str | None = None, *,
                seq_len: Any = None) -> Any:
        key = layer_type if self.call == "layer_type" else "default"
        if key not in self.ropes:
            raise ValueError(f"layer_type must be one of {sorted(self.ropes)}, got {layer_type!r}")
        if self.call == "table":
            if seq_len is None:
                raise ValueError("this model calls its rotary module with seq_len=: pass seq_len")
            position_ids = torch.arange(int(seq_len), device=x.device)
        elif position_ids is None:
            raise ValueError("position_ids is required")
        return _output(self.ropes[key], self.form, position_ids, self.out_dtype or x.dtype)


def _positions(rope: RotaryEmbedding, position_ids: torch.Tensor) -> torch.Tensor:
    """transformers' ids -> omnipos positions: ``[B, L]``; M-RoPE ``[3, B, L]`` (or ``[B, L]``: text) ->
    ``[B, L, 3]``."""
    if rope.position_axes != 3:
        return position_ids
    if position_ids.ndim == 2:
        return position_ids[..., None].expand(*position_ids.shape, 3)
    return position_ids.permute(1, 2, 0)


def _output(rope: RotaryEmbedding, form: str, position_ids: torch.Tensor, dtype: torch.dtype) -> Any:
    if form == "mrope_split":  # [3, B, L, R]: axis a's ids on every slot (transformers 4.57 Qwen2/2.5-VL)
        ids = position_ids if position_ids.ndim == 3 else position_ids[None].expand(3, *position_ids.shape)
        pairs = [rope.cos_sin(ids[a][..., None].expand(*ids[a].shape, 3)) for a in range(ids.shape[0])]
        return (torch.stack([c for c, _ in pairs]).to(dtype), torch.stack([s for _, s in pairs]).to(dtype))
    cos, sin = rope.cos_sin(_positions(rope, position_ids))  # cat form (the rope is built with layout="half")
    if form == "cat":
        return cos.to(dtype), sin.to(dtype)
    half = cos.shape[-1] // 2
    cos, sin = cos[..., :half], sin[..., :half]
    if form == "half":
        return cos.to(dtype), sin.to(dtype)
    if form == "repeat":
        return cos.repeat_interleave(2, -1).to(dtype), sin.repeat_interleave(2, -1).to(dtype)
    freqs_cis = torch.complex(cos, sin)  # complex64, as Llama 4's module returns it
    return freqs_cis.to(dtype) if dtype.is_complex else freqs_cis


def _check_kernel(kernel: Any) -> str:
    if not isinstance(kernel, str) or kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    return kernel


def _rotary_modules(model: nn.Module) -> list[tuple[nn.Module, str, str, nn.Module]]:
    """(parent, attribute, dotted name, module) of each text rotary module of the model."""
    found = []
    for parent_name, parent in model.named_modules():
        if isinstance(parent, (RotaryPatch, RotaryEmbedding)):
            continue
        for attribute, child in parent.named_children():
            name = type(child).__name__
            if isinstance(child, (RotaryPatch, RotaryEmbedding)) or not name.endswith("RotaryEmbedding") or \
                    any(word in name for word in _SKIP_WORDS):
                continue
            found.append((parent, attribute, f"{parent_name}.{attribute}" if parent_name else attribute, child))
    return found


def _layer_type_of(dotted: str, parent: nn.Module, attribute: str) -> str | None:
    """The layer type a 4.x rotary module serves, from where it sits: ``rotary_emb_local`` (Gemma 3) the sliding
    layers, ``rotary_embs[<type>]`` (Olmo 3) its key; None for the others."""
    if attribute.endswith("_local"):
        return "sliding_attention"
    if isinstance(parent, nn.ModuleDict):
        return attribute
    return None


def _module_config(module: nn.Module, text: Any) -> Any:
    """The config a rotary module was built from (transformers' rotary classes keep it: GraniteSWA builds one per
    theta, 4.57 Gemma 3's local module a copy with the local theta); else the model's text config."""
    config = getattr(module, "config", None)
    return text if config is None or isinstance(config, nn.Module) else config


def _rotated_layer_types(module: nn.Module, config: Any) -> list[str]:
    """The layer types a module called with ``layer_type`` serves: its own ``layer_types`` when it lists them, else
    the config's, less those whose rope entry is None (NoPE: the model does not call the module for them)."""
    kinds = getattr(module, "layer_types", None)
    if not isinstance(kinds, (list, tuple)):
        kinds = getattr(config, "layer_types", None) or ()
    raw = getattr(config, "rope_parameters", None)
    return [t for t in dict.fromkeys(kinds) if not (isinstance(raw, Mapping) and t in raw and raw[t] is None)]


def _call_style(module: nn.Module) -> str:
    """How the model calls this rotary module (see :class:`RotaryPatch`), read from its forward's signature."""
    try:
        parameters = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return "positions"
    if "layer_type" in parameters:
        return "layer_type"
    if "seq_len" in parameters and "position_ids" not in parameters:
        return "table"
    return "positions"


def _scaling_for(scaling: Any, layer_type: str | None) -> Mapping[str, Any] | None:
    """The user's scaling dict for this layer type: a flat dict for every type; a nested one its entry (None: the
    config's own)."""
    if isinstance(scaling, RopeScaling):
        return {k: v for k, v in dataclasses.asdict(scaling).items() if v is not None}
    if not isinstance(scaling, Mapping):
        raise TypeError(f"scaling must be a dict (as a config's rope_scaling) or a RopeScaling, got "
                        f"{type(scaling).__name__}")
    if any(k in scaling for k in ("rope_type", "type")):
        return scaling
    if layer_type is not None and layer_type in scaling:
        return scaling[layer_type]
    if layer_type is None:
        raise ValueError(f"scaling is nested by layer type ({sorted(scaling)}) but this model's rotary module serves "
                         "every layer: give a flat dict")
    return None


def _build_rope(config: Any, layer_type: str | None, scaling: Any) -> RotaryEmbedding:
    arguments = rope_arguments_from_config(config, layer_type=layer_type)
    if scaling is not None:
        override = _scaling_for(scaling, layer_type)
        if override is not None:
            own = arguments["scaling"]
            keep = {k: getattr(own, k) for k in ("rope_theta", "partial_rotary_factor", "mrope_section",
                                                  "mrope_interleaved", "max_position_embeddings")
                    if getattr(own, k) is not None}
            original = own.original_max_position_embeddings or own.max_position_embeddings
            if original is not None:  # yarn / llama3 / longrope's trained length (ignored by the other types)
                keep["original_max_position_embeddings"] = original
            arguments["scaling"] = RopeScaling.from_dict({**keep, **dict(override)})
    arguments["layout"] = "half"  # cos/sin are built in cat form; the form decides what the module returns
    return RotaryEmbedding(**arguments)


def _probe_ids(rope: RotaryEmbedding, device: torch.device) -> torch.Tensor:
    ids = torch.arange(_PROBE_OFFSET, _PROBE_OFFSET + _PROBE_LENGTH, device=device)[None]
    if rope.position_axes == 3:  # three different axes, so a wrong section or axis order shows
        g = torch.Generator().manual_seed(0)
        return torch.randint(0, 3 * _PROBE_LENGTH, (3, 1, _PROBE_LENGTH), generator=g).to(device)
    return ids


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape or \
                a.is_complex() != b.is_complex():
            return False
        a, b = (torch.view_as_real(t) if t.is_complex() else t for t in (a, b))
        return bool(torch.allclose(a.double(), b.double(), rtol=0, atol=_TOLERANCE))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b) == 2:
        return all(_close(x, y) for x, y in zip(a, b))
    return False


def _dtype_of(out: Any) -> torch.dtype:
    return out.dtype if isinstance(out, torch.Tensor) else out[0].dtype


def _match(module: nn.Module, rope: RotaryEmbedding, layer_type: str | None, call: str, hidden: int,
           device: torch.device) -> tuple[str | None, torch.dtype | None, str]:
    """Run the stock module at short positions; the form omnipos reproduces it in, the output dtype rule, and what
    differed when no form does."""
    ids = _probe_ids(rope, device)
    if call == "table":
        ids = torch.arange(_PROBE_LENGTH, device=device)
    outputs = {}
    with torch.no_grad():
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.zeros(1, _PROBE_LENGTH, hidden, dtype=dtype, device=device)
            try:
                if call == "table":
                    outputs[dtype] = module(x, seq_len=_PROBE_LENGTH)
                else:
                    outputs[dtype] = module(x, ids, layer_type) if call == "layer_type" else module(x, ids)
            except Exception as error:  # noqa: BLE001  (the stock module's own failure, reported by name)
                return None, None, (f"the stock module fails on position ids {tuple(ids.shape)}: "
                                    f"{type(error).__name__}: {error}")
        stock = outputs[torch.float32]
        follows = _dtype_of(outputs[torch.bfloat16]) == torch.bfloat16
        out_dtype = None if follows else _dtype_of(stock)
        seen = []
        for form in _FORMS:
            if form == "mrope_split" and rope.position_axes != 3:
                continue
            try:
                ours = _output(rope, form, ids, out_dtype or torch.float32)
            except (RuntimeError, ValueError):
                continue
            if _close(ours, stock):
                return form, out_dtype, ""
            seen.append(form)
    shape = tuple(stock.shape) if isinstance(stock, torch.Tensor) else [tuple(t.shape) for t in stock]
    return None, None, f"none of the forms {seen} reproduces its output (shape {shape})"


def _refuse(model: nn.Module, why: str) -> ValueError:
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    return ValueError(f"patch_rotary cannot patch {type(model).__name__} (model_type {model_type!r}): {why}. It "
                      f"patches transformers models whose rotary module omnipos reproduces, tested: "
                      f"{', '.join(SUPPORTED_FAMILIES)}")


def patch_rotary(model: nn.Module, *, scaling: Any = None, kernel: str = "auto") -> nn.Module:
    """Swap every text rotary-embedding module of a transformers model for omnipos', in place; return the model.

    Args:
        model: a transformers ``PreTrainedModel`` (``...ForCausalLM``, the base model, a VLM's
            ``...ForConditionalGeneration``), 4.x or 5.x module structure (see the module docstring).
        scaling: None (the config's RoPE), or a rope scaling dict (``{"rope_type": "yarn", "factor": 4.0,
            "original_max_position_embeddings": 4096}``) or :class:`~omnipos.core.RopeScaling` replacing the
            config's scaling for every layer type (a dict nested by layer type: for those it names); theta, the
            partial rotary factor, the M-RoPE section and the lengths it does not give come from the config.
        kernel: ``"auto"`` or ``"transformers"`` (see :data:`KERNELS`): the family's own apply function rotates
            q/k by omnipos' cos/sin.

    Returns:
        ``model``, patched (:func:`unpatch_rotary` restores the original module objects).

    Raises:
        ImportError: transformers is not installed (names the extra ``omnipos[transformers]``).
        TypeError: ``model`` is not a transformers model.
        ValueError: a model already patched; a model with no text rotary module; a rotary module omnipos does
            not reproduce at short positions (nothing is patched then); an unknown ``kernel``.
    """
    transformers = _transformers()
    _check_kernel(kernel)
    if not isinstance(model, transformers.PreTrainedModel):
        raise TypeError(f"model must be a transformers PreTrainedModel, got {type(model).__name__}")
    if any(isinstance(m, RotaryPatch) for m in model.modules()):
        raise ValueError(f"{type(model).__name__} is patched already: unpatch_rotary(model) first")
    text = model.config.get_text_config()  # a VLM's language model's config (its own top level otherwise)
    hidden = getattr(text, "hidden_size", None) or 8
    found = _rotary_modules(model)
    if not found:
        raise _refuse(model, "it has no text rotary-embedding module (a model without RoPE, or one whose rotary "
                             "code is no module)")
    plans = []
    for parent, attribute, dotted, module in found:
        call = _call_style(module)
        keyed = call == "layer_type"
        config = _module_config(module, text)
        if keyed:
            kinds = _rotated_layer_types(module, config)
            if not kinds:
                raise _refuse(model, f"{dotted} takes a layer_type but the config lists no layer_types")
        else:
            kinds = [_layer_type_of(dotted, parent, attribute)]
        device = next((b.device for b in module.buffers()), torch.device("cpu"))
        ropes, forms = {}, set()
        for layer_type in kinds:
            try:
                own = _build_rope(config, layer_type, None)
            except (TypeError, ValueError) as error:
                raise _refuse(model, f"from_config cannot read its RoPE for {dotted}"
                                     f"{'' if layer_type is None else f' ({layer_type})'}: {error}") from error
            form, out_dtype, why = _match(module, own.to(device), layer_type, call, hidden, device)
            if form is None:
                raise _refuse(model, f"{dotted} ({type(module).__name__}"
                                     f"{'' if layer_type is None else f', {layer_type}'}): {why}")
            forms.add((form, out_dtype))
            ropes[layer_type if keyed else "default"] = own if scaling is None else _build_rope(config, layer_type, scaling)
        if len(forms) != 1:
            raise _refuse(model, f"{dotted} returns different forms per layer type: {sorted(map(str, forms))}")
        form, out_dtype = forms.pop()
        plans.append((parent, attribute, module, ropes, form, out_dtype, call, device))
    for parent, attribute, module, ropes, form, out_dtype, call, device in plans:  # all checked: now swap
        patch = RotaryPatch({k: r.to(device) for k, r in ropes.items()}, form, out_dtype, module, call)
        setattr(parent, attribute, patch)
    return model


def unpatch_rotary(model: nn.Module) -> nn.Module:
    """Put back the rotary modules :func:`patch_rotary` replaced (the same objects); return the model.

    Raises:
        ValueError: the model holds no patched module.
    """
    restored = 0
    for _, parent in list(model.named_modules()):
        for attribute, child in list(parent.named_children()):
            if isinstance(child, RotaryPatch):
                setattr(parent, attribute, child.original)
                restored += 1
    if not restored:
        raise ValueError(f"{type(model).__name__} holds no module patch_rotary replaced: nothing to unpatch")
    return model
