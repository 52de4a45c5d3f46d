"""timm integration: run a timm ViT at any image size, per-image sizes, padded and masked.

Everything timm-specific in omnipos lives in this package (the only place that imports timm), one concept a file:
``checkpoints`` (:func:`resize_state_dict`), ``adapter`` (:class:`PositionAdapter`: configuration and cache),
``forward`` (the block forward of an adapted model), ``families`` (Eva and NaFlexVit) and ``adapt``
(:func:`adapt_vit` and the ``Adapted<Name>`` classes).

- :func:`resize_state_dict`: what timm's ``checkpoint_filter_fn`` does to ``pos_embed``, without assuming a
  square source grid, for timm and HF ViT key names and DDP ``module.`` prefixes.
- :func:`adapt_vit`: adapts a model in place. Its position table is resampled once per distinct
  ``(grid, dtype, device)`` and cached (timm's ``dynamic_img_size=True`` resamples on every forward); the cache
  is keyed on the table's identity and version counter, so a new or edited table is never served stale.
  ``model(x, image_sizes=...)`` runs a padded batch of different sizes, each image with its own grid's positions
  and the padding masked out of attention and pooling (the distinct grids are read on the host: under
  ``torch.compile`` that call breaks the graph there; a plain ``model(x)`` compiles without breaks).

How a model is adapted, without closures or hooks: its class becomes a subclass of its timm class defined here
(``AdaptedVisionTransformer``, ``AdaptedVisionTransformerDistilled``, ``AdaptedEva``, ``AdaptedNaFlexVit``; the
methods of ``forward`` / ``families`` come first), and the configuration and cache live in one registered submodule,
``model.omnipos_positions`` (a :class:`PositionAdapter`). So an adapted model pickles, ``torch.save``/``torch.load``s
(``weights_only=False``, with omnipos importable), deep-copies (timm's ``ModelEmaV3``), compiles, and two threads
may run it at different sizes: a forward keeps nothing on the model. ``isinstance(model, VisionTransformer)`` still
holds and the state-dict keys are timm's.

Supported: timm ``VisionTransformer`` (every family built on it: ViT, DeiT, DeiT-III, DINOv2 with registers, CLIP,
SigLIP ``map`` pooling, ...) with a plain ``PatchEmbed``, ``VisionTransformerDistilled`` (DeiT distilled: the
distillation token is a prefix token like the class and register tokens), ``Eva`` (EVA02, ``vit_*_rope``, RoPE-Mixed,
DINOv3; timm's own RoPE cached per grid) and ``NaFlexVit``. Other classes (or a CNN ``HybridEmbed`` stem) are refused
by class name.
"""

from __future__ import annotations

from typing import Any

from .adapt import ADAPTABLE, SUPPORTED_MODELS, adapt_vit, adapted_class
from .adapter import ENCODINGS, PositionAdapter
from .checkpoints import resize_state_dict

__all__ = ["ENCODINGS", "SUPPORTED_MODELS", "PositionAdapter", "adapt_vit", "resize_state_dict"]


def __getattr__(name: str) -> Any:
    """``Adapted<Name>`` classes, built on first use: pickle and ``torch.load`` find adapted models' classes here."""
    if name.startswith("Adapted") and name[7:] in ADAPTABLE:
        return adapted_class(name[7:])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
