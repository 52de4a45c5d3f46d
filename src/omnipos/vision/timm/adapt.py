"""``adapt_vit``: a timm ViT adapted in place (its class becomes ``Adapted<Name>``, a subclass of its timm class
with the methods of ``forward`` / ``families`` first), and those classes."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...core import check_choice, require
from ..grid import check_size_pair, patch_grid
from ..resample import MODES, resample_pos_embed
from .adapter import ENCODINGS, PositionAdapter
from .families import EvaMethods, NaFlexEmbedsMethods, NaFlexVitMethods
from .forward import VisionTransformerMethods, prefix_tokens

__all__ = ["ADAPTABLE", "SUPPORTED_MODELS", "adapt_vit", "adapted_class"]

#: the package whose ``__getattr__`` serves the ``Adapted<Name>`` classes (their ``__module__``, for pickle)
PACKAGE = __name__.rpartition(".")[0]
#: timm model classes adapt_vit accepts (exactly these classes; subclasses elsewhere are refused by name)
SUPPORTED_MODELS = ("VisionTransformer", "VisionTransformerDistilled", "Eva", "NaFlexVit")
_CLASS_PATHS = {
    "VisionTransformer": "timm.models.vision_transformer",
    "VisionTransformerDistilled": "timm.models.deit",
    "Eva": "timm.models.eva",
    "NaFlexVit": "timm.models.naflexvit",
}


def import_timm():
    return require("timm", "vision", "omnipos.vision.timm")


def timm_class(name: str) -> type:
    import_timm()
    import importlib

    return getattr(importlib.import_module(_CLASS_PATHS[name]), name)


_METHODS = {
    "VisionTransformer": VisionTransformerMethods,
    "VisionTransformerDistilled": VisionTransformerMethods,
    "Eva": EvaMethods,
    "NaFlexVit": NaFlexVitMethods,
}
_ADAPTED: dict[str, type] = {}


def adapted_class(name: str) -> type:
    """``Adapted<name>``: the timm class ``name`` with omnipos' methods first (built once, on first use)."""
    if name in _ADAPTED:
        return _ADAPTED[name]
    if name == "NaFlexEmbeds":
        from timm.models.naflexvit import NaFlexEmbeds

        base, methods = NaFlexEmbeds, NaFlexEmbedsMethods
    else:
        base, methods = timm_class(name), _METHODS[name]
    qualname = "Adapted" + name
    cls = type(qualname, (methods, base), {"__module__": PACKAGE, "__qualname__": qualname,
                                             "__doc__": f"A timm ``{name}`` adapted by :func:`adapt_vit`."})
    _ADAPTED[name] = cls
    return cls
#: names of the timm classes that have an ``Adapted<Name>`` class
ADAPTABLE = (*_METHODS, "NaFlexEmbeds")



# ------------------------------------------------------------------------------------------------------------------
# adapt_vit


def _supported_name(model: Any) -> str:
    """The name of ``model``'s timm class, or a TypeError naming its class."""
    import_timm()
    cls = type(model)
    base = cls.__mro__[2] if cls.__module__ == PACKAGE else cls  # an adapted model's timm class
    for name in SUPPORTED_MODELS:
        if base is timm_class(name):
            return name
    raise TypeError(f"adapt_vit supports the timm classes {', '.join(SUPPORTED_MODELS)}; got "
                    f"{cls.__module__}.{cls.__qualname__}")


def _check_rope_model(model: nn.Module, rope: nn.Module | None, ref_grid: Any) -> nn.Module:
    """The RotaryEmbedding2D for encoding='rope', after checking the blocks are timm Block + Attention."""
    from timm.layers.attention import Attention
    from timm.models.vision_transformer import Block

    from ..rope2d import RotaryEmbedding2D

    kinds = sorted({f"{type(b).__name__}/{type(getattr(b, 'attn', None)).__name__}" for b in model.blocks})
    if not all(type(b) is Block and type(getattr(b, "attn", None)) is Attention for b in model.blocks):
        raise ValueError(f"encoding='rope' rotates q and k inside timm's Block + Attention; this model's blocks are "
                         f"{kinds}")
    if not isinstance(model.patch_drop, nn.Identity):
        raise ValueError("encoding='rope' with patch dropout (patch_drop_rate > 0) is not supported: the kept "
                         "tokens' positions would have to follow them")
    head_dim = model.blocks[0].attn.head_dim
    if rope is None:
        return RotaryEmbedding2D(head_dim, ref_grid=ref_grid)
    if not isinstance(rope, RotaryEmbedding2D) or rope.mixed:
        raise TypeError("rope must be an axial omnipos.vision.RotaryEmbedding2D (one module for all blocks; "
                        f"RoPE-Mixed learns per-block frequencies), got {rope!r}")
    if rope.dim != head_dim:
        raise ValueError(f"rope has dim (head_dim)={rope.dim}, the model's attention heads have {head_dim}")
    if ref_grid is not None:
        raise ValueError("pass ref_grid to the RotaryEmbedding2D you give as rope=, not to adapt_vit")
    return rope


def _make_dynamic(patch_embed: nn.Module) -> None:
    from timm.layers import Format

    patch_embed.strict_img_size = False
    patch_embed.dynamic_img_pad = True
    patch_embed.flatten = False
    patch_embed.output_fmt = Format.NHWC


def _adapt_naflex(model: nn.Module, img_size: Any, dynamic: bool, encoding: str, mode: str, antialias: bool,
                  rope: Any, ref_grid: Any) -> nn.Module:
    if encoding != "learned" or rope is not None or ref_grid is not None:
        raise ValueError("a NaFlexVit keeps its own position encoding: adapt it with encoding='learned' only")
    if not dynamic or img_size is not None:
        raise ValueError("a NaFlexVit takes any size already; adapt it with the defaults (dynamic=True, no img_size)")
    embeds = model.embeds
    if embeds.pos_embed_type == "learned" and embeds.pos_embed is not None:
        grid = tuple(embeds.pos_embed.shape[1:3])
    else:
        grid = (1, 1)
    adapter = PositionAdapter(dim=model.embed_dim, source_grid=grid, table_prefix=0, mode=mode, antialias=antialias,
                              num_prefix_tokens=model.num_prefix_tokens)
    model.omnipos_positions = adapter
    embeds.dynamic_img_pad = True  # any size: padded up to whole patches, as adapted ViTs are
    embeds.__class__ = adapted_class("NaFlexEmbeds")
    object.__setattr__(embeds, "omnipos_positions", adapter)  # shared, not registered twice
    model.__class__ = adapted_class("NaFlexVit")
    return model


def adapt_vit(
    model: nn.Module,
    *,
    img_size: Any = None,
    dynamic: bool = True,
    encoding: str = "learned",
    mode: str = "bicubic",
    antialias: bool = True,
    convention: str = "mae",
    ref_grid: Any = None,
    rope: nn.Module | None = None,
) -> nn.Module:
    """Adapt a timm ViT in place to new image sizes; returns the same model (its class becomes ``Adapted<Name>``).

    After adaptation:

    - ``model(x)`` accepts any ``x [B, C, height, width]`` (``dynamic=True``); sizes that are not multiples of the
      patch (or smaller than one patch) are padded bottom / right with zeros, as timm's ``dynamic_img_pad``. Same
      logits as timm's own ``dynamic_img_size=True`` model with the same weights, but the resampled table (and an
      Eva's RoPE) is cached per grid.
    - ``model(x, image_sizes=sizes)`` with ``sizes [B, 2]`` (height, width) runs a padded batch of different
      images: pixels outside each image are zeroed, each image gets its own grid's positions, padded patches are
      masked out of attention (and of ``avg``/``max``/``map`` pooling). An image's logits are those it gets alone.
      ``model.forward_features(x, image_sizes=sizes)`` gives the padded features.
    - ``dynamic=False, img_size=s``: a fixed new size; ``pos_embed`` is resampled once into the parameter
      (non-square safe), like timm's ``set_input_size``.

    Args:
        model: a timm ``VisionTransformer``, ``VisionTransformerDistilled``, ``Eva`` or ``NaFlexVit``
            (``timm.create_model(...)``). Other classes are refused by name.
        img_size: int or (height, width): the size to prepare (dynamic) or to fix (``dynamic=False``).
        dynamic: accept any size per call (True) or only ``img_size`` (False).
        encoding: ``"learned"`` resamples the model's table; ``"sincos"`` replaces it with a fixed 2-D sincos
            table (``convention``, ``ref_grid`` as in :func:`omnipos.vision.sincos_2d`; ``pos_embed`` is removed);
            ``"rope"`` removes it and rotates q and k of the patch tokens in every block by 2-D RoPE (prefix tokens
            are not rotated, as in EVA): ``rope`` (a :class:`omnipos.vision.RotaryEmbedding2D`, axial) or by default
            ``RotaryEmbedding2D(head_dim, ref_grid=ref_grid)``; timm ``Block`` + ``Attention`` only, and the
            state-dict keys do not change. An ``Eva`` keeps its own RoPE (and table, if any): ``"learned"`` only.
        mode, antialias: interpolation of the learned table (timm's defaults; ``antialias=False`` is HF's).

    Raises:
        TypeError: not one of the supported timm classes (named). ValueError: bad sizes or options, a model
        without a learned table asked for ``"learned"``, a CNN (``HybridEmbed``) stem, a model already adapted.
    """
    name = _supported_name(model)
    if hasattr(model, "omnipos_positions"):
        raise ValueError("model is already adapted by omnipos.vision.adapt_vit")
    check_choice(encoding, "encoding", ENCODINGS)
    check_choice(mode, "mode", MODES)
    if not isinstance(dynamic, bool):
        raise TypeError(f"dynamic must be a bool, got {dynamic!r}")
    if rope is not None and encoding != "rope":
        raise ValueError(f"rope= is for encoding='rope', got encoding={encoding!r}")
    if name == "NaFlexVit":
        return _adapt_naflex(model, img_size, dynamic, encoding, mode, antialias, rope, ref_grid)
    from timm.layers import PatchEmbed

    patch_embed = model.patch_embed
    if type(patch_embed) is not PatchEmbed:
        raise ValueError(f"adapt_vit needs timm's PatchEmbed; this model's patch_embed is "
                         f"{type(patch_embed).__name__} (a CNN stem's stride is not one patch)")
    if name == "VisionTransformerDistilled" and model.reg_token is not None:
        raise ValueError("a VisionTransformerDistilled with reg_tokens: timm's own forward leaves the register "
                         "tokens out, so there is no reference to follow")
    if name == "Eva" and (encoding != "learned" or rope is not None):
        raise ValueError("an Eva model keeps its own RoPE (and table): adapt it with encoding='learned'")
    patch = tuple(patch_embed.patch_size)
    source = tuple(patch_embed.grid_size)
    prefix_count = sum(t.shape[1] for t in prefix_tokens(model))
    if prefix_count != model.num_prefix_tokens:
        raise ValueError(f"model.num_prefix_tokens={model.num_prefix_tokens} but it has {prefix_count} prefix-token "
                         "parameters (cls / dist / reg)")
    table_prefix = 0 if model.no_embed_class else model.num_prefix_tokens
    if encoding == "learned":
        if model.pos_embed is None and name != "Eva":
            raise ValueError("model has no learned pos_embed (built with pos_embed='none'); use encoding='sincos'")
        if model.pos_embed is not None and model.pos_embed.shape[1] != table_prefix + source[0] * source[1]:
            raise ValueError(f"model.pos_embed has {model.pos_embed.shape[1]} rows, expected {table_prefix} prefix + "
                             f"{source[0]} x {source[1]} patches")
    elif encoding == "sincos" and model.embed_dim % 4:
        raise ValueError(f"encoding='sincos' needs embed_dim divisible by 4, got {model.embed_dim}")
    if encoding == "rope":
        rope = _check_rope_model(model, rope, ref_grid)
    target = None if img_size is None else patch_grid(check_size_pair(img_size, "img_size"), patch)
    if not dynamic and img_size is None:
        raise ValueError("dynamic=False fixes one image size: pass img_size")

    adapter = PositionAdapter(
        dim=model.embed_dim, source_grid=source, table_prefix=table_prefix, encoding=encoding, mode=mode,
        antialias=antialias, convention=convention, ref_grid=ref_grid, rope=rope,
        num_prefix_tokens=model.num_prefix_tokens,
    )
    if encoding != "learned":
        model.pos_embed = None
    if name == "Eva" and model.rope is not None and getattr(model.rope, "_use_cached_embed", False):
        model.rope._use_cached_embed = False  # built for one grid: let get_embed(shape=...) build any grid
    if not dynamic:
        height, width = check_size_pair(img_size, "img_size")
        if encoding == "learned" and model.pos_embed is not None and target != source:
            with torch.no_grad():
                table = resample_pos_embed(model.pos_embed, target, old_grid=source, num_prefix_tokens=table_prefix,
                                           mode=mode, antialias=antialias)
            model.pos_embed = nn.Parameter(table, requires_grad=model.pos_embed.requires_grad)
            adapter.source_grid = target
        patch_embed.img_size = (height, width)
        patch_embed.grid_size = target
        patch_embed.num_patches = target[0] * target[1]
        patch_embed.dynamic_img_pad = bool(height % patch[0] or width % patch[1])
    else:
        _make_dynamic(patch_embed)
        model.dynamic_img_size = True
    model.omnipos_positions = adapter
    model.__class__ = adapted_class(name)
    if dynamic and target is not None and model.pos_embed is not None:  # warm the cache for the announced size
        with torch.no_grad():
            adapter.tables(model.pos_embed, target, dtype=model.pos_embed.dtype, device=model.pos_embed.device)
    return model
