"""Reading a model's RoPE from its configuration, as transformers writes it, without importing transformers.

A config is read by duck typing: a transformers ``PretrainedConfig`` (attributes) or the ``config.json`` dict
(keys), v4 (``rope_scaling`` beside ``rope_theta`` / ``partial_rotary_factor``) or v5 (``rope_parameters`` holding
``rope_theta``, possibly nested by layer type). A vision-language model's ``text_config`` is used when the top level
carries no attention heads. What transformers reads from the config rather than from the rope dict is filled in as
its rope code does: ``max_position_embeddings`` (dynamic NTK's trained length; longrope / yarn's factor when the
dict has none), ``original_max_position_embeddings`` (the config attribute wins for llama3 / yarn / longrope, as
for Phi-3), the head dim (``head_dim`` or ``hidden_size // num_attention_heads``) and, for the M-RoPE families,
their default ``mrope_section`` and interleaving.

Configs as transformers 4 wrote them give, per layer type, what transformers 4.57 builds: Gemma 3 / 3n's
``rope_local_base_freq`` is the sliding layers' theta, unscaled (``rope_theta`` + ``rope_scaling``: the full
layers'); Olmo 3's flat ``rope_scaling`` beside ``layer_types`` scales the full-attention layers only (sliding: the
default RoPE). Hunyuan's ``"dynamic"`` with ``alpha`` is read as ``"ntk_alpha"`` (base * alpha^(d/(d-2)) at every
length), as transformers 5.x runs it; transformers 4.57 recomputes past ``max_position_embeddings`` with plain
dynamic NTK from ``rope_theta`` (alpha dropped): for that behaviour past the trained length use
``scaling={"rope_type": "dynamic", "factor": ..., "max_position_embeddings": ...}``. A model (``nn.Module`` with a
``.config``) is read through its config.

Which layers use RoPE at all (:func:`rope_layers`) comes from the NoPE keys: ``no_rope_layers`` (SmolLM3, Llama 4,
Mistral Large 3: 1 = RoPE, 0 = NoPE), ``no_rope_layer_interval`` (every n-th layer NoPE), a nested rope dict whose
entry for a layer type is ``None``, and the families whose global (full-attention) layers skip RoPE (Cohere2,
EXAONE 4 hybrids, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .checks import check_positive_int
from .rope_scaling import RopeScaling, canonical_rope_type, select_layer_type

__all__ = ["rope_arguments_from_config", "rope_layers", "deinterleaved_channel_order"]

# model_type -> (default mrope_section, interleaved): the families whose rotary class takes M-RoPE ids and falls back
# to a section of its own when the rope dict has none (transformers 5.24's Qwen2-VL / Qwen2.5-VL / Qwen3-VL,
# GLM-4.1V / GLM-Image: contiguous; Cosmos3-Edge / hy_v4_vl: Qwen3-VL's interleaved rule).
_MROPE_MODELS: dict[str, tuple[tuple[int, int, int], bool]] = {
    "qwen2_vl": ((16, 24, 24), False), "qwen2_vl_text": ((16, 24, 24), False),
    "qwen2_5_vl": ((16, 24, 24), False), "qwen2_5_vl_text": ((16, 24, 24), False),
    "qwen3_vl": ((24, 20, 20), True), "qwen3_vl_text": ((24, 20, 20), True),
    "qwen3_vl_moe": ((24, 20, 20), True), "qwen3_vl_moe_text": ((24, 20, 20), True),
    "glm4v": ((8, 12, 12), False), "glm4v_text": ((8, 12, 12), False),
    "glm_image": ((8, 12, 12), False), "glm_image_text": ((8, 12, 12), False),
    "cosmos3_edge": ((24, 20, 20), True), "cosmos3_edge_text": ((24, 20, 20), True),
    "hy_v4_vl": ((24, 20, 20), True), "hy_v4_vl_text": ((24, 20, 20), True),
}

# Families that rotate interleaved channel pairs (2i, 2i + 1) of q and k (GPT-J style), whatever layout their rotary
# class returns cos/sin in (found by transformers 5.24's apply_rotary_pos_emb of each family; the conformance test
# checks every one): GLM / GLM-4 / GLM-4.1V / GLM-OCR, Cohere, BLT, ERNIE 4.5, Helium, Moonshine, PE audio/video, ...
_INTERLEAVED_MODELS = frozenset({
    "glm", "glm4", "glm4v", "glm4v_text", "glm_ocr", "glm_ocr_text", "cohere", "cohere2", "cohere2_moe",
    "blt", "blt_global_transformer", "blt_local_decoder", "blt_local_encoder", "blt_patcher",
    "ernie4_5", "ernie4_5_moe", "helium", "moonshine", "moonshine_streaming", "openai_privacy_filter",
    "hy_v4_vl", "hy_v4_vl_text", "pe_audio", "pe_audio_encoder", "pe_video", "pe_video_encoder", "pe_audio_video",
    "pe_audio_video_encoder",
    # Llama 4, DeepSeek-V2: complex freqs_cis times view_as_complex(q.reshape(..., -1, 2))
    "llama4", "llama4_text", "deepseek_v2",
})

# Keys some families keep in their rope dict that are no RoPE parameter (read by the attention, not the rotary
# embedding): Ministral 3 / Mistral 4's position-dependent query scaling.
_ATTENTION_KEYS = ("llama_4_scaling_beta",)

# Families whose full-attention (global) layers use no RoPE: Cohere2, Flint and AFMoE rotate only sliding layers.
_SLIDING_ROPE_ONLY = frozenset({"cohere2", "flint", "afmoe"})
# EXAONE 4 style: when the config has a sliding window, only sliding layers rotate; without one, every layer does.
_SLIDING_ROPE_WHEN_HYBRID = frozenset({"exaone4", "exaone4_5", "exaone_moe", "kolibri1"})
# Configs as transformers 4 wrote them, per layer type: Olmo 3's flat rope_scaling beside layer_types scales the
# full-attention layers only; its sliding layers use the default RoPE at the same theta (4.57's
# ``rotary_embs["sliding_attention"] = Olmo3RotaryEmbedding(config, rope_type="default")``; 5.24 converts such a
# config to per-layer-type rope_parameters alike). Gemma 3 / 3n's ``rope_local_base_freq`` is read apart (below).
_SLIDING_DEFAULT_ROPE = frozenset({"olmo3"})
_SLIDING = "sliding_attention"
#: The most decoder layers a config may declare (rope_layers builds one flag per layer).
MAX_LAYERS = 1_000_000


def _get(config: Any, name: str) -> Any:
    """``config[name]`` for a dict (config.json), ``config.name`` for an object; None when absent."""
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)


def _has(config: Any, name: str) -> bool:
    return name in config if isinstance(config, Mapping) else hasattr(config, name)


def _text_config(config: Any) -> Any:
    """The config that describes the language model's attention: ``text_config`` for a VLM whose top level
    carries no attention heads, else ``config`` itself. A model (a ``torch.nn.Module`` holding ``.config``, as every
    transformers ``PreTrainedModel`` does) is read through its ``config``."""
    if isinstance(config, torch.nn.Module):
        inner = getattr(config, "config", None)
        if inner is None or isinstance(inner, torch.nn.Module):
            raise TypeError(f"config must be a transformers config or its config.json dict, got the module "
                            f"{type(config).__name__}, which holds no .config: pass the model's config")
        config = inner
    if config is None or isinstance(config, (str, bytes, int, float)):
        raise TypeError(f"config must be a transformers config or its config.json dict, got {type(config).__name__}")
    text = _get(config, "text_config")
    if text is not None and _get(config, "num_attention_heads") is None and _get(config, "head_dim") is None:
        return text
    return config


def _layer_config(config: Any, layer_type: str | None) -> Any:
    """Gemma 4 style heterogeneous configs: the per-layer-type config (its own head_dim), as transformers' rope code
    reads it (``config.per_layer_config[layer_type]``); else ``config``."""
    if layer_type is None or isinstance(config, Mapping) or not hasattr(type(config), "per_layer_config") and \
            "per_layer_config" not in getattr(config, "__dict__", {}):
        return config
    try:
        return config.per_layer_config[layer_type]
    except (KeyError, ValueError, TypeError, IndexError, AttributeError):
        return config


def _head_dim(config: Any) -> int:
    head_dim = _get(config, "head_dim")
    if head_dim is None:
        hidden, heads = _get(config, "hidden_size"), _get(config, "num_attention_heads")
        if hidden is None or heads is None:
            raise ValueError("config has neither head_dim nor hidden_size and num_attention_heads: cannot tell the "
                             "head dim of its attention")
        head_dim = check_positive_int(hidden, "config.hidden_size") // check_positive_int(
            heads, "config.num_attention_heads")
    return check_positive_int(head_dim, "config.head_dim")


def _layer_types(config: Any) -> list[str] | None:
    types = _get(config, "layer_types")
    return list(types) if types is not None else None


def _rope_dict(config: Any, layer_type: str | None) -> dict[str, Any]:
    """A fresh flat rope dict for ``layer_type`` (the config's own dicts are never edited)."""
    raw = _get(config, "rope_parameters")
    if raw is None:
        raw = _get(config, "rope_scaling")
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise TypeError(f"config.rope_parameters / rope_scaling must be a dict, got {type(raw).__name__}")
    layer_types = _layer_types(config)
    flat_for_layer = layer_type is not None and layer_types is not None and layer_type in layer_types
    try:
        chosen = select_layer_type(raw, None if flat_for_layer else layer_type)
    except ValueError:
        if not flat_for_layer:
            raise
        chosen = select_layer_type(raw, layer_type)  # nested after all: the entry for this layer type
    return dict(chosen)


def _integral(value: Any) -> Any:
    """A length written as a float (1024.0 in some config.json files; transformers runs it) as the int it is; others
    unchanged (a fractional length is refused by :class:`~omnipos.core.RopeScaling`, naming it)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _is_nested(raw: Mapping, layer_types: list[str] | None) -> bool:
    """True for a rope dict keyed by layer type (transformers 5), False for a flat one (v4, or v5 shared)."""
    if any(k in raw for k in ("rope_type", "type", "rope_theta")):
        return False
    return any(isinstance(v, Mapping) or v is None for v in raw.values()) and (
        layer_types is None or any(t in raw for t in layer_types) or _SLIDING in raw or "full_attention" in raw)


def _v4_layer_params(text: Any, layer_type: str | None) -> dict[str, Any] | None:
    """The rope dict of a layer type that a transformers 4 config (flat ``rope_scaling``) describes apart from its
    flat dict, as 4.57's models build it; None when the flat dict holds for that layer type.

    Gemma 3 / 3n: ``rope_local_base_freq`` is the sliding layers' theta, unscaled (4.57's ``rotary_emb_local``);
    Olmo 3: the sliding layers use the default RoPE at ``rope_theta`` (4.57's ``rotary_embs``)."""
    if layer_type != _SLIDING:
        return None
    raw = _get(text, "rope_parameters")
    if raw is None:
        raw = _get(text, "rope_scaling")
    if isinstance(raw, Mapping) and _is_nested(raw, _layer_types(text)):
        return None  # transformers 5: the dict names each layer type's parameters itself
    local = _get(text, "rope_local_base_freq")
    if local is not None:
        return {"rope_type": "default", "rope_theta": local}
    if _get(text, "model_type") in _SLIDING_DEFAULT_ROPE:
        theta = raw.get("rope_theta") if isinstance(raw, Mapping) else None
        theta = _get(text, "rope_theta") if theta is None else theta
        return {"rope_type": "default", **({} if theta is None else {"rope_theta": theta})}
    return None


def rope_arguments_from_config(config: Any, *, layer_type: str | None = None) -> dict[str, Any]:
    """The :class:`~omnipos.core.RotaryEmbedding` arguments a model config describes: ``dim`` (the head dim),
    ``scaling`` (a :class:`~omnipos.core.RopeScaling` holding theta, partial rotary factor, the scaling, the lengths
    and the M-RoPE section / interleaving) and ``layout``.

    Args:
        config: a transformers config (v4 or v5; a VLM's top-level config or its ``text_config``), its
            ``config.json`` dict, or a model holding one (``model.config`` is read).
        layer_type: for a config whose rope parameters are nested by layer type (``{"full_attention": {...},
            "sliding_attention": {...}}``), the layer type to build; required then. Also accepted for a flat
            dict when it is one of ``config.layer_types``: every layer type shares the dict, except in configs
            as transformers 4 wrote them where the sliding layers have a RoPE of their own (Gemma 3's
            ``rope_local_base_freq``, Olmo 3's default RoPE; see the module docstring).

    Raises:
        TypeError / ValueError: not a config, no head dim, a nested dict without ``layer_type``, a layer type
        without RoPE (its entry is None), or a rope dict :class:`~omnipos.core.RopeScaling` refuses.
    """
    text = _text_config(config)
    head_dim = _head_dim(_layer_config(text, layer_type))
    v4_params = _v4_layer_params(text, layer_type)
    params = _rope_dict(text, layer_type) if v4_params is None else v4_params
    for key in ("original_max_position_embeddings", "max_position_embeddings"):
        if key in params:
            params[key] = _integral(params[key])
    kind = canonical_rope_type(params.get("rope_type", params.get("type", "default")))
    if "rope_theta" not in params:
        theta = _get(text, "rope_theta")
        if theta is None:
            theta = _get(text, "default_theta")
        if theta is not None:
            params["rope_theta"] = theta
    if "partial_rotary_factor" not in params:
        partial = _get(text, "partial_rotary_factor")
        if partial is None:
            partial = _get(text, "rotary_pct")  # GPT-NeoX's v4 name
        if partial is not None and partial != 1.0:
            params["partial_rotary_factor"] = partial
    for key in _ATTENTION_KEYS:
        params.pop(key, None)
    max_positions = _integral(_get(text, "max_position_embeddings"))
    if max_positions is not None:
        params.setdefault("max_position_embeddings", max_positions)
    if kind in ("llama3", "yarn", "longrope"):
        original = _integral(_get(text, "original_max_position_embeddings")) \
            if _has(text, "original_max_position_embeddings") else None
        if original is not None and layer_type is None:  # transformers: the config attribute wins (Phi-3)
            params["original_max_position_embeddings"] = original
        elif max_positions is not None:
            params.setdefault("original_max_position_embeddings", max_positions)
    model_type = _get(text, "model_type")
    if model_type in _MROPE_MODELS:
        section, interleaved = _MROPE_MODELS[model_type]
        params.setdefault("mrope_section", list(section))
        params["mrope_interleaved"] = interleaved  # the rotary class interleaves (or not) whatever the dict says
    if canonical_rope_type(params.get("type")) == canonical_rope_type(params.get("rope_type")):
        params.pop("type", None)
    layout = "interleaved" if model_type in _INTERLEAVED_MODELS or bool(_get(text, "rope_interleave")) else "half"
    return {"dim": head_dim, "scaling": RopeScaling.from_dict(params), "layout": layout}


def rope_layers(config: Any) -> tuple[bool, ...]:
    """Which decoder layers use RoPE (True) and which none (False, NoPE), read from the config.

    Rules (transformers 5.24's attention classes): ``no_rope_layers`` (per layer, 1 = RoPE: SmolLM3, Llama 4,
    Mistral Large 3); else ``no_rope_layer_interval`` n (every n-th layer NoPE); Cohere2 / Flint / AFMoE rotate
    only their ``"sliding_attention"`` layers (Cohere2-MoE also its forced dense prefix); EXAONE 4 style models only
    their sliding layers when the config has a ``sliding_window``; a rope dict nested by layer type whose entry for
    a layer's type is None: NoPE; else every layer. A VLM's ``text_config`` is read when the top level has no
    layers.

    Returns:
        ``tuple[bool]`` of length ``num_hidden_layers``.
    """
    text = _text_config(config)
    n_layers = _get(text, "num_hidden_layers")
    if n_layers is None:
        raise ValueError("config has no num_hidden_layers: cannot tell which layers use RoPE")
    n_layers = check_positive_int(n_layers, "config.num_hidden_layers")
    if n_layers > MAX_LAYERS:
        raise ValueError(f"config.num_hidden_layers must be at most {MAX_LAYERS:,} (one flag per layer is built), "
                         f"got {n_layers:,}")
    layer_types = _layer_types(text)
    if layer_types is not None and len(layer_types) != n_layers:
        raise ValueError(f"config.layer_types has {len(layer_types)} entries, num_hidden_layers={n_layers}")
    flags = _get(text, "no_rope_layers")
    if flags is not None:
        if isinstance(flags, (str, bytes)) or not isinstance(flags, Sequence) or len(flags) != n_layers:
            raise ValueError(f"config.no_rope_layers must hold one 0/1 per layer ({n_layers}), got {flags!r}")
        if any(f not in (0, 1) for f in flags):
            raise ValueError(f"config.no_rope_layers must hold 0 (NoPE) or 1 (RoPE) per layer, got {list(flags)}")
        return tuple(bool(f) for f in flags)
    interval = _get(text, "no_rope_layer_interval")
    if interval is not None:
        interval = check_positive_int(interval, "config.no_rope_layer_interval")
        return tuple((i + 1) % interval != 0 for i in range(n_layers))
    model_type = _get(text, "model_type")
    sliding = None if layer_types is None else tuple(t == "sliding_attention" for t in layer_types)
    if model_type in _SLIDING_ROPE_ONLY and sliding is not None:
        return sliding
    if model_type == "cohere2_moe" and sliding is not None:
        dense = _get(text, "mlp_layer_types") or ()
        force = _get(text, "prefix_dense_sliding_window_pattern") == 1
        return tuple(s or (force and i < len(dense) and dense[i] == "dense") for i, s in enumerate(sliding))
    if model_type in _SLIDING_ROPE_WHEN_HYBRID and sliding is not None and _get(text, "sliding_window") is not None:
        return sliding
    raw = _get(text, "rope_parameters")
    if isinstance(raw, Mapping) and layer_types is not None and any(t in raw for t in layer_types):
        return tuple(raw.get(t) is not None for t in layer_types)
    return (True,) * n_layers


def deinterleaved_channel_order(dim: int, rotary_dim: int | None = None) -> torch.Tensor:
    """The channel permutation from an interleaved-layout rotation to DeepSeek-V3's output order.

    transformers' DeepSeek-V3 with ``rope_interleave=True`` (``apply_rotary_pos_emb_interleave``) rotates the pairs
    ``(2i, 2i + 1)`` of q and k, as ``RotaryEmbedding(..., layout="interleaved")`` does, but returns the channels
    de-interleaved: ``[x0, x2, x4, ..., x1, x3, ...]``. So ``hf_q == omnipos_q[..., order]`` with
    ``order = deinterleaved_channel_order(dim)``; q and k are permuted alike, so the attention scores are equal.
    Channels past ``rotary_dim`` (default ``dim``) keep their place.

    Returns:
        ``LongTensor[dim]``.
    """
    dim = check_positive_int(dim, "dim")
    rotary_dim = dim if rotary_dim is None else check_positive_int(rotary_dim, "rotary_dim")
    if rotary_dim % 2 or rotary_dim > dim:
        raise ValueError(f"rotary_dim must be even and <= dim={dim}, got {rotary_dim}")
    return torch.cat((torch.arange(0, rotary_dim, 2), torch.arange(1, rotary_dim, 2), torch.arange(rotary_dim, dim)))
