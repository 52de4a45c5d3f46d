"""timm integration: run a timm ViT at any image size, per-image sizes, padded and masked.

Everything timm-specific in omnipos lives here.

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
methods below come first), and the configuration and cache live in one registered submodule,
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

import weakref
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..core import (
    apply_rotary,
    can_inspect_values,
    check_choice,
    check_positive_int,
    renamed_argument,
    require,
)
from .grid import check_grid, check_size_pair, patch_grid
from .masks import (
    check_image_sizes,
    patch_padding_mask,
    pixel_padding_mask,
    prefix_attention_mask,
)
from .resample import MODES, resample_pos_embed, source_grid
from .sincos import CONVENTIONS, sincos_2d

__all__ = ["ENCODINGS", "SUPPORTED_MODELS", "PositionAdapter", "adapt_vit", "resize_state_dict"]

ENCODINGS = ("learned", "sincos", "rope")
#: timm model classes adapt_vit accepts (exactly these classes; subclasses elsewhere are refused by name)
SUPPORTED_MODELS = ("VisionTransformer", "VisionTransformerDistilled", "Eva", "NaFlexVit")
_CLASS_PATHS = {
    "VisionTransformer": "timm.models.vision_transformer",
    "VisionTransformerDistilled": "timm.models.deit",
    "Eva": "timm.models.eva",
    "NaFlexVit": "timm.models.naflexvit",
}


def _import_timm():
    return require("timm", "vision", "omnipos.vision.timm")


def _timm_class(name: str) -> type:
    _import_timm()
    import importlib

    return getattr(importlib.import_module(_CLASS_PATHS[name]), name)


# ------------------------------------------------------------------------------------------------------------------
# checkpoints

#: names of the learned table, per convention: timm, HF ViT / DeiT / DINOv2 (``*.embeddings.position_embeddings``)
_TABLE_KEYS = ("pos_embed", "position_embeddings")
#: prefix-token parameters (timm, HF) in the order their rows sit at the start of the table
_PREFIX_KEYS = (("cls_token",), ("dist_token", "distillation_token"), ("reg_token", "register_tokens"))
_PATCH_WEIGHT_KEYS = ("patch_embed.proj.weight", "patch_embeddings.projection.weight")


def _table_key(state_dict: Mapping[str, Any], key: str | None) -> str:
    if key is not None:
        if key not in state_dict:
            raise ValueError(f"state_dict has no {key!r} entry (keys start {list(state_dict)[:5]})")
        return key
    found = [k for k in state_dict if k.rsplit(".", 1)[-1] in _TABLE_KEYS]
    if not found:
        raise ValueError(f"state_dict has no position table (a key ending in 'pos_embed' or 'position_embeddings'; "
                         f"keys start {list(state_dict)[:5]}); pass key=")
    top = min(k.count(".") for k in found)
    found = [k for k in found if k.count(".") == top]  # timm's attn_pool / rope tables sit deeper than the model's
    if len(found) > 1:
        raise ValueError(f"state_dict has several position tables {found}; pass key= to choose one")
    return found[0]


def _prefix_candidates(state_dict: Mapping[str, Any], stem: str) -> list[int]:
    """Row counts the table's prefix could have: 0, then class, + distillation, + registers (those present)."""
    counts, total = [0], 0
    for names in _PREFIX_KEYS:
        for name in names:
            token = state_dict.get(stem + name)
            if isinstance(token, torch.Tensor) and token.ndim >= 2:
                total += int(token.shape[-2])
                counts.append(total)
                break
    return list(dict.fromkeys(counts))


def _infer_prefix(state_dict: Mapping[str, Any], stem: str, num_tokens: int, old_grid: Any) -> int:
    """Prefix rows of a checkpoint's table: whichever (exactly one) of the prefix-token counts leaves a grid."""
    tried = _prefix_candidates(state_dict, stem)
    fits = []
    for count in tried:
        try:
            source_grid(num_tokens - count, old_grid)
        except ValueError:
            continue
        fits.append(count)
    if not fits and old_grid is None:
        raise ValueError(
            f"the position table has {num_tokens} rows: none of {[num_tokens - c for c in tried]} patch tokens (after "
            f"{tried} prefix rows) form a square grid; pass old_grid=(H, W) (and num_prefix_tokens)")
    if len(fits) != 1:
        raise ValueError(
            f"cannot tell how many of the position table's {num_tokens} rows are prefix tokens (tried {tried}"
            f"{'' if old_grid is None else f' with old_grid {tuple(old_grid)}'}); pass num_prefix_tokens")
    return fits[0]


def _checkpoint_patch(state_dict: Mapping[str, Any], stem: str, patch_size: Any) -> tuple[int, int]:
    if patch_size is not None:
        return check_size_pair(patch_size, "patch_size")
    for name in _PATCH_WEIGHT_KEYS:
        weight = state_dict.get(stem + name)
        if isinstance(weight, torch.Tensor) and weight.ndim == 4:
            return int(weight.shape[-2]), int(weight.shape[-1])
    raise ValueError("img_size= needs the patch size: the state_dict has no patch projection weight "
                     f"({', '.join(stem + n for n in _PATCH_WEIGHT_KEYS)}); pass patch_size= or grid=")


def resize_state_dict(
    state_dict: Mapping[str, Any],
    *args: Any,
    grid: Any = None,
    img_size: Any = None,
    patch_size: Any = None,
    old_grid: Any = None,
    num_prefix_tokens: int | None = None,
    mode: str = "bicubic",
    antialias: bool = True,
    key: str | None = None,
    new_grid: Any = None,
) -> dict[str, Any]:
    """A ViT checkpoint with its position table resampled to a new grid (a new dict; the input is untouched).

    Args:
        state_dict: a timm checkpoint (``{"pos_embed": [1, N, D], "cls_token": ..., ...}``), the same under DDP's
            ``module.`` prefix, or an HF ViT / DeiT / DINOv2 one (``...embeddings.position_embeddings``,
            ``...embeddings.cls_token``, ``distillation_token``, ``register_tokens``).
        grid: ``(H, W)`` patch grid of the model it will be loaded into (``new_grid=`` is accepted too).
        img_size: ``(height, width)`` in pixels instead of ``grid``: the grid is ``ceil(img_size / patch)``, the
            patch read from the checkpoint's patch projection weight (or ``patch_size=``). Exactly one of ``grid``
            and ``img_size``, by name: ``resize_state_dict(sd, 320)`` is refused (image size or grid?).
        old_grid: the checkpoint's grid; required when its patch-token count is not a perfect square.
        num_prefix_tokens: rows of the table that belong to class / distillation / register tokens. None infers it
            from the prefix-token entries present (or 0 for ``no_embed_class`` checkpoints), refusing when several
            readings fit.
        mode, antialias: as in :func:`omnipos.vision.resample_pos_embed` (timm's defaults; HF ViT resizes with
            ``antialias=False``).
        key: the table's key (default: the one key ending in ``pos_embed`` / ``position_embeddings`` nearest the top).
    """
    if args:
        raise TypeError(f"resize_state_dict(state_dict, {args[0]!r}) is ambiguous (image size or grid?): pass "
                        "grid=(H, W) in patches or img_size=(height, width) in pixels, by name")
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}")
    grid = renamed_argument(grid, new_grid, "grid", "new_grid", default=None) if new_grid is not None else grid
    if (grid is None) == (img_size is None):
        raise TypeError("pass exactly one of grid=(H, W) (patches) and img_size=(height, width) (pixels)")
    key = _table_key(state_dict, key)
    stem = key[: len(key) - len(key.rsplit(".", 1)[-1])]
    table = state_dict[key]
    if not isinstance(table, torch.Tensor) or table.ndim != 3:
        raise ValueError(f"state_dict[{key!r}] must be a [1, N, D] tensor, got {getattr(table, 'shape', table)}")
    if img_size is not None:
        grid = patch_grid(check_size_pair(img_size, "img_size"), _checkpoint_patch(state_dict, stem, patch_size))
    if num_prefix_tokens is None:
        num_prefix_tokens = _infer_prefix(state_dict, stem, table.shape[1], old_grid)
    out = dict(state_dict)
    out[key] = resample_pos_embed(table, grid, old_grid=old_grid, num_prefix_tokens=num_prefix_tokens, mode=mode,
                                  antialias=antialias)
    return out


# ------------------------------------------------------------------------------------------------------------------
# the adapter module: configuration and cache


def _weights_key(tensors: list[torch.Tensor]) -> tuple | None:
    """What identifies the current values of ``tensors``: identity, storage, shape and version counter (bumped by
    every in-place edit, ``.data`` writes included). None when a tensor has no version counter (inference tensor)."""
    try:
        return tuple((id(t), t._version, t.data_ptr(), tuple(t.shape), t.dtype, t.device) for t in tensors)
    except RuntimeError:
        return None


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same bits, compared as wide integers when their layout allows (about twice as
    fast as ``torch.equal`` on floats; bitwise, so a NaN table matches its snapshot)."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if a.is_contiguous() and b.is_contiguous() and a.numel():
        nbytes = a.numel() * a.element_size()
        for wide in (torch.int64, torch.int32, torch.int16):
            size = wide.itemsize
            if nbytes % size == 0 and (a.storage_offset() * a.element_size()) % size == 0 \
                    and (b.storage_offset() * b.element_size()) % size == 0:
                bits_a, bits_b = (t.reshape(-1).view(torch.uint8).view(wide) for t in (a, b))
                return torch.equal(bits_a, bits_b)
    return torch.equal(a, b)


def place_on_canvas(tables: list[torch.Tensor], grids: list[tuple[int, int]], inverse: torch.Tensor,
                    canvas: tuple[int, int]) -> torch.Tensor:
    """Put each image's row-major ``[..., h*w, C]`` table in the top-left of a ``canvas`` grid, in one gather.

    ``tables[g]`` belongs to ``grids[g]``; ``inverse [B]`` names each image's grid. Returns ``[..., B, H*W, C]``
    (the tables' leading axes first), zeros outside each image."""
    height, width = canvas
    device = tables[0].device
    sizes = torch.tensor([h * w for h, w in grids], device=device)
    starts = sizes.cumsum(0) - sizes
    hs = torch.tensor([h for h, _ in grids], device=device).view(-1, 1, 1)
    ws = torch.tensor([w for _, w in grids], device=device).view(-1, 1, 1)
    rows = torch.arange(height, device=device).view(1, -1, 1)
    cols = torch.arange(width, device=device).view(1, 1, -1)
    pad = int(sizes.sum())
    index = torch.where((rows < hs) & (cols < ws), starts.view(-1, 1, 1) + rows * ws + cols, pad)
    index = index.reshape(len(grids), height * width)[inverse.to(device)]  # [B, H*W]
    bank = torch.cat([*tables, tables[0].new_zeros(*tables[0].shape[:-2], 1, tables[0].shape[-1])], dim=-2)
    return bank[..., index, :]


class PositionAdapter(nn.Module):
    """The positional part of an adapted ViT: configuration, the patch table of any grid, and its cache.

    ``encoding="learned"`` resamples the model's ``pos_embed`` (trained on ``source_grid``); ``"sincos"`` uses a
    fixed 2-D sincos table; ``"rope"`` rotates q and k by ``rope`` (a :class:`~omnipos.vision.RotaryEmbedding2D`).
    For an ``Eva`` model the adapter also caches the model's own RoPE embedding per grid.

    Tables are cached by ``(grid, dtype, device)`` whenever autograd will not record them (``torch.no_grad`` /
    ``inference_mode``, or frozen weights) and not while ``torch.compile`` traces; with gradients flowing into the
    table each forward builds its own differentiable one. A cache entry is keyed on the weights it was built from
    (identity, storage and ``_version``), so replacing, reloading or editing ``pos_embed`` in place (``.data`` too)
    rebuilds it; an edit through ``.data`` (invisible to version counters) is caught by comparing the table with a
    snapshot taken at build time (one pass over the table per forward, far cheaper than a resample; set
    ``verify=False`` to trust identity and version counters alone, if nothing writes the table through ``.data``).
    The cache is not pickled or deep-copied (a copy starts empty).
    """

    def __init__(
        self,
        *,
        dim: int | None = None,
        source_grid: tuple[int, int],
        table_prefix: int,
        encoding: str = "learned",
        mode: str = "bicubic",
        antialias: bool = True,
        convention: str = "mae",
        ref_grid: Any = None,
        rope: nn.Module | None = None,
        num_prefix_tokens: int = 0,
        verify: bool = True,
        embed_dim: int | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(verify, bool):
            raise TypeError(f"verify must be a bool, got {verify!r}")
        self.verify = verify
        self.dim = check_positive_int(renamed_argument(dim, embed_dim, "dim", "embed_dim"), "dim (embed_dim)")
        self.source_grid = check_grid(source_grid, "source_grid")
        self.table_prefix = check_positive_int(table_prefix, "table_prefix", minimum=0)
        self.encoding = check_choice(encoding, "encoding", ENCODINGS)
        self.mode = check_choice(mode, "mode", MODES)
        self.antialias = bool(antialias)
        self.convention = check_choice(convention, "convention", CONVENTIONS)
        self.ref_grid = None if ref_grid is None else check_grid(ref_grid, "ref_grid")
        self.num_prefix_tokens = check_positive_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
        self.rope = rope
        self._cache: dict[tuple, tuple] = {}
        self.hits = 0
        self.builds = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = {}  # weak references and tensors keyed by the original's ids: never carried over
        return state

    def cache_info(self) -> dict[str, int]:
        return {"hits": self.hits, "builds": self.builds, "size": len(self._cache)}

    def clear_cache(self) -> None:
        self._cache = {}

    @property
    def embed_dim(self) -> int:
        """Alias of :attr:`dim` (timm's name for the token width)."""
        return self.dim

    def cached(self, kind: str, key: tuple, weights: list[torch.Tensor], build: Any) -> Any:
        """``build()``, or its cached result for ``(kind, key)`` built from the current values of ``weights``.

        An entry is found by the weights' identity, storage and version counter, and used only if the weights still
        equal the snapshot taken when it was built: an edit through ``.data`` (which no version counter sees) is
        caught by that comparison (one pass over the table, far cheaper than resampling it)."""
        records = torch.is_grad_enabled() and any(w.requires_grad for w in weights)
        if records or not can_inspect_values(*weights):  # recording autograd, compiling, or meta weights: no cache
            return build()
        version = _weights_key(weights)
        if version is None:
            return build()
        full_key = (kind, key, torch.is_inference_mode_enabled(), version)
        cache = self._cache
        entry = cache.get(full_key)
        if entry is not None and all(ref() is w and (not self.verify or _same_bits(w, snap))
                                     for ref, snap, w in zip(entry[0], entry[1], weights)):
            self.hits += 1
            return entry[2]
        value = build()
        self.builds += 1
        # each kind (the table, an Eva's RoPE, ...) is built from its own weights: a build drops the entries of its
        # kind made from older weights and leaves the other kinds alone (they check their own weights when read)
        others = {k: v for k, v in cache.items() if k[0] != kind}
        kept = {k: v for k, v in cache.items() if k[0] == kind and k[3] == version and k != full_key}
        snapshots = next((v[1] for v in kept.values()), None)
        if snapshots is None or not all(_same_bits(w, snap) for snap, w in zip(snapshots, weights)):
            kept = {}  # edited through .data: every entry of this version is stale
            snapshots = [w.detach().clone() for w in weights]
        kept[full_key] = ([weakref.ref(w) for w in weights], snapshots, value)
        self._cache = {**others, **kept}  # one assignment: a concurrent reader sees the old or the new dict
        return value

    def tables(self, pos_embed: torch.Tensor | None, grid: tuple[int, int], *, dtype: torch.dtype,
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(prefix rows ``[1, P, D]``, patch rows ``[1, H*W, D]``) of ``grid``, from the cache when that is safe."""
        if pos_embed is not None:
            dtype, device = pos_embed.dtype, pos_embed.device

        def build() -> tuple[torch.Tensor, torch.Tensor]:
            if self.encoding == "sincos":
                table = sincos_2d(grid, self.dim, convention=self.convention, ref_grid=self.ref_grid,
                                  dtype=dtype, device=device).unsqueeze(0)
                return table[:, :0], table
            table = resample_pos_embed(pos_embed, grid, old_grid=self.source_grid,
                                       num_prefix_tokens=self.table_prefix, mode=self.mode, antialias=self.antialias)
            return table[:, : self.table_prefix], table[:, self.table_prefix:]

        return self.cached("table", (grid, dtype, device), [] if pos_embed is None else [pos_embed], build)

    def patch_positions(self, pos_embed: torch.Tensor | None, grid: tuple[int, int], grids: torch.Tensor | None, *,
                        dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(prefix rows ``[1, P, D]``, patch rows ``[1 or B, H*W, D]``): the grid's table, or with per-image
        ``grids [B, 2]`` each image's own table in the top-left of the ``grid`` canvas (zeros elsewhere)."""
        if grids is None:
            return self.tables(pos_embed, grid, dtype=dtype, device=device)
        distinct, inverse = torch.unique(grids, dim=0, return_inverse=True)
        distinct = [tuple(g) for g in distinct.tolist()]
        parts = [self.tables(pos_embed, g, dtype=dtype, device=device) for g in distinct]
        return parts[0][0], place_on_canvas([p[1][0] for p in parts], distinct, inverse, grid)

    def rope_cos_sin(self, grid: tuple[int, int], grids: torch.Tensor | None,
                     device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """2-D RoPE ``(cos, sin)`` of the patch tokens: ``[N, head_dim]`` for one grid (cached; they depend on nothing
        but the grid), ``[B, 1, N, head_dim]`` with per-image ``grids`` when positions depend on the grid
        (``ref_grid``): each image's own positions on the canvas."""
        rope = self.rope

        def build(g: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
            cos, sin = rope.cos_sin(g)
            return cos.to(device), sin.to(device)

        if grids is None or rope.ref_grid is None:
            return self.cached("rope", (grid, device), [], lambda: build(grid))
        distinct, inverse = torch.unique(grids, dim=0, return_inverse=True)
        distinct = [tuple(g) for g in distinct.tolist()]
        parts = [self.cached("rope", (g, device), [], lambda g=g: build(g)) for g in distinct]
        cos = place_on_canvas([p[0] for p in parts], distinct, inverse, grid)
        sin = place_on_canvas([p[1] for p in parts], distinct, inverse, grid)
        return cos.unsqueeze(1), sin.unsqueeze(1)

    def extra_repr(self) -> str:
        text = f"encoding={self.encoding!r}, dim={self.dim}, source_grid={self.source_grid}"
        if self.encoding == "rope":
            return text
        if self.encoding == "learned":
            text += f", table_prefix={self.table_prefix}, mode={self.mode!r}, antialias={self.antialias}"
        else:
            text += f", convention={self.convention!r}, ref_grid={self.ref_grid}"
        return text


# ------------------------------------------------------------------------------------------------------------------
# the forward of an adapted model (shared by the VisionTransformer and Eva families)


def _prefix_tokens(model: nn.Module) -> list[torch.Tensor]:
    """The model's prefix-token parameters in the order timm puts them: class, distillation, registers."""
    names = ("cls_token", "dist_token", "reg_token")
    return [t for t in (getattr(model, n, None) for n in names) if t is not None]


def _check_images(model: nn.Module, x: Any) -> tuple[int, int]:
    if not isinstance(x, torch.Tensor) or x.ndim != 4:
        raise ValueError(f"x must be an image batch [B, C, height, width], got {getattr(x, 'shape', x)}")
    patch = tuple(model.patch_embed.patch_size)
    if model.dynamic_img_size:  # padded up to whole patches, even an image smaller than one patch
        return patch_grid(tuple(x.shape[-2:]), patch, pad=True)
    expected = tuple(model.patch_embed.img_size)
    if tuple(x.shape[-2:]) != expected:
        raise ValueError(f"x is {tuple(x.shape[-2:])} but the model was adapted to the fixed size {expected} "
                         "(dynamic=False); adapt it with dynamic=True for any size")
    return tuple(model.patch_embed.grid_size)


def _add_positions(model: nn.Module, x: torch.Tensor, grids: torch.Tensor | None = None) -> torch.Tensor:
    """timm's ``_pos_embed`` for an adapted model: ``[B, H, W, C]`` (or ``[B, N, C]`` at the static grid) patch
    tokens -> ``[B, prefix + H*W, C]`` with the prefix tokens first and positions added (none for RoPE).

    ``grids [B, 2]``: each image's own grid inside the padded ``(H, W)`` (top-left); its table is that grid's, so
    an image gets the same positions in a mixed batch as alone."""
    adapter: PositionAdapter = model.omnipos_positions
    if x.ndim == 4:
        batch, height, width, channels = x.shape
        x = x.reshape(batch, height * width, channels)
    else:
        batch, channels = x.shape[0], x.shape[-1]
        height, width = model.patch_embed.grid_size
    prefix = _prefix_tokens(model)
    if adapter.encoding == "rope" or (adapter.encoding == "learned" and model.pos_embed is None):  # Eva, RoPE only
        return model.pos_drop(torch.cat([*(t.expand(batch, -1, -1) for t in prefix), x], dim=1) if prefix else x)
    pos_embed = model.pos_embed if adapter.encoding == "learned" else None
    table_dtype = pos_embed.dtype if pos_embed is not None else x.dtype
    prefix_pe, patch_pe = adapter.patch_positions(pos_embed, (height, width), grids, dtype=table_dtype,
                                                  device=x.device)
    if not prefix:
        return model.pos_drop(x + patch_pe)
    prefix = torch.cat(prefix, dim=1) if len(prefix) > 1 else prefix[0]
    if prefix_pe.shape[1]:
        prefix = prefix + prefix_pe
    if torch.is_grad_enabled() or torch.compiler.is_compiling():
        return model.pos_drop(torch.cat([prefix.expand(batch, -1, -1), x + patch_pe], dim=1))
    # one pass over the tokens: the sum is written straight into the output (no autograd, so out= is fine)
    out = x.new_empty(batch, prefix.shape[1] + x.shape[1], channels, dtype=torch.promote_types(x.dtype, patch_pe.dtype))
    out[:, : prefix.shape[1]] = prefix
    torch.add(x, patch_pe, out=out[:, prefix.shape[1]:])
    return model.pos_drop(out)


def _padded_batch(model: nn.Module, x: torch.Tensor, image_sizes: Any) -> tuple[torch.Tensor, torch.Tensor,
                                                                                 torch.Tensor, torch.Tensor]:
    """(x with its padding zeroed, per-image grids ``[B, 2]``, patch mask ``[B, N]``, key mask ``[B, 1, 1, P+N]``)."""
    if not model.dynamic_img_size:
        raise ValueError("image_sizes needs a model adapted with dynamic=True")
    patch = tuple(model.patch_embed.patch_size)
    sizes = check_image_sizes(image_sizes).to(x.device)
    if sizes.shape[0] != x.shape[0]:
        raise ValueError(f"image_sizes has {sizes.shape[0]} rows but the batch has {x.shape[0]} images")
    if bool((sizes > torch.tensor(x.shape[-2:], device=x.device)).any()):
        row = int((sizes > torch.tensor(x.shape[-2:], device=x.device)).any(dim=1).nonzero()[0, 0])
        raise ValueError(f"image_sizes[{row}] = {tuple(sizes[row].tolist())} exceeds the batch's padded size "
                         f"{tuple(x.shape[-2:])}")
    grid = patch_grid(tuple(x.shape[-2:]), patch)
    x = torch.where(pixel_padding_mask(sizes, x.shape[-2:]), x, x.new_zeros(()))  # padding content cannot leak
    patch_mask = patch_padding_mask(sizes, patch, grid)
    grids = -(-sizes // torch.tensor(patch, device=sizes.device))
    return x, grids, patch_mask, prefix_attention_mask(patch_mask, model.num_prefix_tokens)


def _rope_attention(attn: nn.Module, x: torch.Tensor, rope: tuple, attn_mask: torch.Tensor | None,
                    is_causal: bool) -> torch.Tensor:
    """timm ``Attention.forward`` with q and k of the patch tokens rotated after ``q_norm`` / ``k_norm``."""
    cos, sin, prefix, layout = rope
    batch, tokens, _ = x.shape
    gate = attn.gate(x).sigmoid() if getattr(attn, "gate", None) is not None else None
    attn_dim = getattr(attn, "attn_dim", attn.num_heads * attn.head_dim)
    qkv = attn.qkv(x).reshape(batch, tokens, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    q, k = attn.q_norm(q), attn.k_norm(k)
    q = torch.cat([q[..., :prefix, :], apply_rotary(q[..., prefix:, :], cos, sin, layout=layout)], dim=-2)
    k = torch.cat([k[..., :prefix, :], apply_rotary(k[..., prefix:, :], cos, sin, layout=layout)], dim=-2)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                         dropout_p=attn.attn_drop.p if attn.training else 0.0)
    out = out.transpose(1, 2).reshape(batch, tokens, attn_dim)
    out = getattr(attn, "norm", nn.Identity())(out)
    if gate is not None:
        out = out * gate
    return attn.proj_drop(attn.proj(out))


def _rope_block(block: nn.Module, x: torch.Tensor, rope: tuple, attn_mask: torch.Tensor | None,
                is_causal: bool) -> torch.Tensor:
    """timm ``Block.forward`` with :func:`_rope_attention`."""
    x = x + block.drop_path1(block.ls1(_rope_attention(block.attn, block.norm1(x), rope, attn_mask, is_causal)))
    return x + block.drop_path2(block.ls2(block.mlp(block.norm2(x))))


def _vit_blocks(model: nn.Module, x: torch.Tensor, attn_mask: torch.Tensor | None, is_causal: bool,
                rope: tuple | None, take: Any = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The blocks of a VisionTransformer (with 2-D RoPE when ``rope``); intermediates after the ``take`` indices."""
    from torch.utils.checkpoint import checkpoint

    checkpointing = model.grad_checkpointing and torch.is_grad_enabled() and not torch.jit.is_scripting()
    intermediates = []
    if rope is None and take is None and attn_mask is None and not is_causal and not checkpointing:
        return model.blocks(x), intermediates
    for i, block in enumerate(model.blocks):
        if rope is None:
            call, args = (lambda b, y, m, c: b(y, attn_mask=m, is_causal=c)), (block, x, attn_mask, is_causal)
        else:
            call, args = (lambda b, y, m, c: _rope_block(b, y, rope, m, c)), (block, x, attn_mask, is_causal)
        x = checkpoint(call, *args, use_reentrant=False) if checkpointing else call(*args)
        if take is not None and i in take:
            intermediates.append(x)
    return x, intermediates


def _vit_features(model: nn.Module, x: Any, attn_mask: torch.Tensor | None, is_causal: bool, image_sizes: Any,
                  take: Any = None) -> tuple[torch.Tensor, torch.Tensor | None, list[torch.Tensor]]:
    """(features ``[B, P + N, C]`` before the final norm, key mask ``[B, P + N]`` or None, intermediates)."""
    grid = _check_images(model, x)
    grids, keys = None, None
    if image_sizes is not None:
        if attn_mask is not None or is_causal:
            raise ValueError("pass either image_sizes (omnipos builds the padding mask) or attn_mask / is_causal")
        x, grids, _, attn_mask = _padded_batch(model, x, image_sizes)
        keys = attn_mask[:, 0, 0, :]
    adapter: PositionAdapter = model.omnipos_positions
    x = _add_positions(model, model.patch_embed(x), grids)
    x = model.norm_pre(model.patch_drop(x))
    rope = None
    if adapter.encoding == "rope":
        cos, sin = adapter.rope_cos_sin(grid, grids, x.device)
        rope = (cos, sin, model.num_prefix_tokens, adapter.rope.layout)
    x, intermediates = _vit_blocks(model, x, attn_mask, is_causal, rope, take)
    return x, keys, intermediates


def _masked_head(model: nn.Module, x: torch.Tensor, keys: torch.Tensor, *, pre_logits: bool = False,
                 attn_pool_sees_prefix: bool | None = None) -> torch.Tensor:
    """timm's ``forward_head`` for a padded batch: pooling that reads patch tokens skips the padded ones."""
    pool = model.global_pool
    attn_pool = getattr(model, "attn_pool", None)
    if attn_pool is None and pool in ("token", ""):
        return model.forward_head(x, pre_logits=pre_logits)  # reads only the prefix tokens, or keeps every token
    prefix = model.num_prefix_tokens
    if attn_pool is not None:
        from timm.layers import AttentionPoolLatent

        if type(attn_pool) is not AttentionPoolLatent:
            raise ValueError(f"image_sizes= cannot mask the {type(attn_pool).__name__} pool; pool the features of "
                             "forward_features(x, image_sizes=...) yourself with patch_padding_mask")
        sees_prefix = model.pool_include_prefix if attn_pool_sees_prefix is None else attn_pool_sees_prefix
        tokens, mask = (x, keys) if sees_prefix else (x[:, prefix:], keys[:, prefix:])
        bias = torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill(~mask, float("-inf"))
        x = attn_pool(tokens, attn_mask=bias[:, None, None, :])
    elif pool in ("avg", "max", "avgmax"):
        include = getattr(model, "pool_include_prefix", False)
        tokens, mask = (x, keys) if include else (x[:, prefix:], keys[:, prefix:])
        weights = mask.to(tokens.dtype).unsqueeze(-1)
        mean = (tokens * weights).sum(dim=1) / weights.sum(dim=1)
        peak = tokens.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)
        x = {"avg": mean, "max": peak, "avgmax": None}[pool]
        if x is None:
            x = 0.5 * (peak + mean)
    else:
        raise ValueError(f"image_sizes= supports global_pool 'token', 'avg', 'max', 'avgmax', '' or 'map' "
                         f"(got {pool!r}); pool the features yourself with patch_padding_mask")
    x = model.head_drop(model.fc_norm(x))
    return x if pre_logits else model.head(x)


class _AdaptedVisionTransformerMethods:
    """What an adapted timm ``VisionTransformer`` (or ``VisionTransformerDistilled``) does differently."""

    def _pos_embed(self, x: torch.Tensor) -> torch.Tensor:
        return _add_positions(self, x)

    def forward_features(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False, *,
                         image_sizes: Any = None) -> torch.Tensor:
        """timm's ``forward_features``; ``image_sizes [B, 2]`` runs a padded batch of mixed sizes (padded patch
        tokens are masked out of attention; their features are meaningless: mask them with
        :func:`~omnipos.vision.patch_padding_mask`)."""
        return self.norm(_vit_features(self, x, attn_mask, is_causal, image_sizes)[0])

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False, *,
                image_sizes: Any = None) -> torch.Tensor:
        features, keys, _ = _vit_features(self, x, attn_mask, is_causal, image_sizes)
        features = self.norm(features)
        return self.forward_head(features) if keys is None else _masked_head(self, features, keys)

    def forward_intermediates(self, x: torch.Tensor, indices: Any = None, return_prefix_tokens: bool = False,
                              norm: bool = False, stop_early: bool = False, output_fmt: str = "NCHW",
                              intermediates_only: bool = False, output_dict: bool = False,
                              attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> Any:
        if self.omnipos_positions.encoding != "rope":  # timm's, through the adapted _pos_embed
            return super().forward_intermediates(
                x, indices, return_prefix_tokens=return_prefix_tokens, norm=norm, stop_early=stop_early,
                output_fmt=output_fmt, intermediates_only=intermediates_only, output_dict=output_dict,
                attn_mask=attn_mask, is_causal=is_causal)
        from timm.models._features import feature_take_indices

        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        take, _ = feature_take_indices(len(self.blocks), indices)
        height, width = _check_images(self, x)
        final, _, intermediates = _vit_features(self, x, attn_mask, is_causal, None, take=set(take))
        intermediates = [self.norm(y) if norm else y for y in intermediates]
        prefix_tokens = None
        if self.num_prefix_tokens:
            prefix_tokens = [y[:, : self.num_prefix_tokens] for y in intermediates]
            intermediates = [y[:, self.num_prefix_tokens:] for y in intermediates]
        if output_fmt == "NCHW":
            intermediates = [y.reshape(y.shape[0], height, width, -1).permute(0, 3, 1, 2).contiguous()
                             for y in intermediates]
        if output_dict:
            result = {"image_intermediates": intermediates}
            if prefix_tokens is not None and return_prefix_tokens:
                result["image_intermediates_prefix"] = prefix_tokens
            if not intermediates_only:
                result["image_features"] = self.norm(final)
            return result
        if return_prefix_tokens and prefix_tokens is not None:
            intermediates = list(zip(intermediates, prefix_tokens))
        return intermediates if intermediates_only else (self.norm(final), intermediates)


# ------------------------------------------------------------------------------------------------------------------
# Eva (EVA02, vit_*_rope, RoPE-Mixed, DINOv3): timm's own RoPE, cached per grid


def _eva_rope(model: nn.Module, grid: tuple[int, int], grids: torch.Tensor | None) -> torch.Tensor | None:
    """timm's RoPE embedding of the patch tokens: ``get_embed(grid)`` (cached), or with per-image ``grids`` each
    image's own on the canvas (``[B, 1, N, 2 * head_dim]``, RoPE-Mixed ``[depth, B, heads, N, 2 * head_dim]``)."""
    rope = model.rope
    if rope is None:
        return None
    adapter: PositionAdapter = model.omnipos_positions
    weights = [*rope.parameters()]
    augmenting = rope.training and getattr(rope, "aug_active", False)

    def embed(g: tuple[int, int]) -> torch.Tensor:
        if augmenting:
            return rope.get_embed(shape=list(g))
        return adapter.cached("eva_rope", (g,), weights, lambda: rope.get_embed(shape=list(g)))

    if grids is None:
        return embed(grid)
    distinct, inverse = torch.unique(grids, dim=0, return_inverse=True)
    distinct = [tuple(g) for g in distinct.tolist()]
    canvas = place_on_canvas([embed(g) for g in distinct], distinct, inverse, grid)
    return canvas.transpose(1, 2) if model.rope_mixed else canvas.unsqueeze(1)


class _AdaptedEvaMethods:
    """What an adapted timm ``Eva`` does differently: cached tables and RoPE, per-image sizes."""

    def _pos_embed(self, x: torch.Tensor, grids: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
        from timm.layers import apply_keep_indices_nlc

        height, width = (x.shape[1], x.shape[2]) if x.ndim == 4 else tuple(self.patch_embed.grid_size)
        x = _add_positions(self, x, grids)
        rot = _eva_rope(self, (height, width), grids)
        if self.patch_drop is not None:
            x, keep = self.patch_drop(x)
            if rot is not None and keep is not None:
                rot = apply_keep_indices_nlc(x, rot, keep)
                rot = rot.transpose(0, 1) if self.rope_mixed else rot.unsqueeze(1)
        return x, rot

    def _omnipos_features(self, x: Any, attn_mask: torch.Tensor | None, is_causal: bool,
                          image_sizes: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        _check_images(self, x)
        grids, keys = None, None
        if image_sizes is not None:
            if attn_mask is not None or is_causal:
                raise ValueError("pass either image_sizes (omnipos builds the padding mask) or attn_mask / is_causal")
            if self.patch_drop is not None and self.training:
                raise ValueError("image_sizes= with patch dropout in training: the dropped tokens would not be "
                                 "the padded ones; call model.eval() or drop patches yourself")
            x, grids, _, attn_mask = _padded_batch(self, x, image_sizes)
            keys = attn_mask[:, 0, 0, :]
        x, rot = self._pos_embed(self.patch_embed(x), grids)
        x = self.norm_pre(x)
        for i, block in enumerate(self.blocks):
            x = block(x, rope=rot[i] if self.rope_mixed and rot is not None else rot, attn_mask=attn_mask,
                      is_causal=is_causal)
        return self.norm(x), keys

    def forward_features(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False, *,
                         image_sizes: Any = None) -> torch.Tensor:
        """timm's ``forward_features``; ``image_sizes [B, 2]`` runs a padded batch of mixed sizes."""
        if image_sizes is None and self.grad_checkpointing:
            return super().forward_features(x, attn_mask=attn_mask, is_causal=is_causal)
        return self._omnipos_features(x, attn_mask, is_causal, image_sizes)[0]

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False, *,
                image_sizes: Any = None) -> torch.Tensor:
        if image_sizes is None:
            return self.forward_head(self.forward_features(x, attn_mask=attn_mask, is_causal=is_causal))
        features, keys = self._omnipos_features(x, attn_mask, is_causal, image_sizes)
        return _masked_head(self, features, keys, attn_pool_sees_prefix=True)


# ------------------------------------------------------------------------------------------------------------------
# NaFlexVit: cached standard-path tables; image_sizes through its own per-sample (NaFlex) path


class _AdaptedNaFlexVitMethods:
    """What an adapted timm ``NaFlexVit`` does differently.

    Its NaFlex input (patches + ``patch_coord`` + ``patch_valid``) is already per-sample; its image path resamples
    the table on every forward. Adapted, the image path's learned table is cached per grid, and
    ``model(x, image_sizes=...)`` packs each image's patches (row-major over its own grid) into NaFlex input, so
    every image gets its own grid's positions and the padding is masked, as timm's NaFlex loader would give."""

    def _omnipos_naflex_input(self, x: Any, image_sizes: Any) -> dict[str, torch.Tensor]:
        from timm.layers import to_2tuple
        from timm.models.naflexvit import batch_patchify

        if not isinstance(x, torch.Tensor) or x.ndim != 4:
            raise ValueError(f"x must be an image batch [B, C, height, width], got {getattr(x, 'shape', x)}")
        if not self.embeds.is_linear:
            raise ValueError("image_sizes= feeds NaFlex patches, which needs a NaFlexVit with a linear patch "
                             "embedding (the default); this one has a conv stem")
        patch = to_2tuple(self.embeds.patch_size)
        sizes = check_image_sizes(image_sizes).to(x.device)
        if sizes.shape[0] != x.shape[0]:
            raise ValueError(f"image_sizes has {sizes.shape[0]} rows but the batch has {x.shape[0]} images")
        if bool((sizes > torch.tensor(x.shape[-2:], device=x.device)).any()):
            raise ValueError(f"image_sizes exceed the batch's padded size {tuple(x.shape[-2:])}")
        height, width = patch_grid(tuple(x.shape[-2:]), patch)
        x = torch.where(pixel_padding_mask(sizes, x.shape[-2:]), x, x.new_zeros(()))
        patches, _ = batch_patchify(x, patch, pad=True, channels_last=self.embeds.channels_last)  # [B, H*W, P*P*C]
        grids = -(-sizes // torch.tensor(patch, device=sizes.device))
        slot = torch.arange(height * width, device=x.device)
        own_w = grids[:, 1:]
        row, col = slot // own_w, slot % own_w  # slot j of image b is patch (j // w_b, j % w_b) of its own grid
        valid = slot < grids[:, :1] * own_w
        source = torch.where(valid, row * width + col, 0)
        packed = patches.gather(1, source.unsqueeze(-1).expand(-1, -1, patches.shape[-1]))
        coords = torch.stack([torch.where(valid, row, 0), torch.where(valid, col, 0)], dim=-1)
        return {"patches": packed * valid.unsqueeze(-1), "patch_coord": coords, "patch_valid": valid}

    def forward(self, x: Any, patch_coord: torch.Tensor | None = None, patch_valid: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None, *, image_sizes: Any = None) -> torch.Tensor:
        if image_sizes is None:
            return super().forward(x, patch_coord=patch_coord, patch_valid=patch_valid, attn_mask=attn_mask)
        if patch_coord is not None or patch_valid is not None or attn_mask is not None or isinstance(x, dict):
            raise ValueError("pass either image_sizes (omnipos builds the NaFlex input) or NaFlex patch_coord / "
                             "patch_valid / attn_mask")
        return super().forward(self._omnipos_naflex_input(x, image_sizes))

    def forward_features(self, patches: Any, patch_coord: torch.Tensor | None = None,
                         patch_valid: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None, *,
                         image_sizes: Any = None) -> Any:
        """timm's ``forward_features``; with ``image_sizes`` (``patches`` then a padded image batch) the NaFlex
        output dict of each image's packed patches (``{"patches": [B, P + N, C], "patch_valid": [B, N]}``)."""
        if image_sizes is None:
            return super().forward_features(patches, patch_coord=patch_coord, patch_valid=patch_valid,
                                            attn_mask=attn_mask)
        inputs = self._omnipos_naflex_input(patches, image_sizes)
        return super().forward_features(inputs["patches"], patch_coord=inputs["patch_coord"],
                                        patch_valid=inputs["patch_valid"])


class _AdaptedNaFlexEmbedsMethods:
    """timm ``NaFlexEmbeds`` with the image path's learned table cached per grid (``omnipos_positions`` of the
    model holds the cache; the embeds module reaches it through ``omnipos_positions`` registered on it too)."""

    def _apply_learned_pos_embed(self, x: torch.Tensor, grid_size: list[int]) -> None:
        adapter: PositionAdapter = self.omnipos_positions
        grid = (int(grid_size[0]), int(grid_size[1]))

        def build() -> torch.Tensor:
            from timm.models.naflexvit import NaFlexEmbeds

            out = torch.zeros(1, grid[0] * grid[1], x.shape[-1], dtype=x.dtype, device=x.device)
            NaFlexEmbeds._apply_learned_pos_embed(self, out, grid_size=list(grid))
            return out

        x.add_(adapter.cached("naflex_table", (grid, x.dtype, x.device), [self.pos_embed], build))


# ------------------------------------------------------------------------------------------------------------------
# classes of adapted models: module-level names, so pickle and torch.load find them

_METHODS = {
    "VisionTransformer": _AdaptedVisionTransformerMethods,
    "VisionTransformerDistilled": _AdaptedVisionTransformerMethods,
    "Eva": _AdaptedEvaMethods,
    "NaFlexVit": _AdaptedNaFlexVitMethods,
}
_ADAPTED: dict[str, type] = {}


def _adapted_class(name: str) -> type:
    """``Adapted<name>``: the timm class ``name`` with omnipos' methods first (built once, on first use)."""
    if name in _ADAPTED:
        return _ADAPTED[name]
    if name == "NaFlexEmbeds":
        from timm.models.naflexvit import NaFlexEmbeds

        base, methods = NaFlexEmbeds, _AdaptedNaFlexEmbedsMethods
    else:
        base, methods = _timm_class(name), _METHODS[name]
    qualname = "Adapted" + name
    cls = type(qualname, (methods, base), {"__module__": __name__, "__qualname__": qualname,
                                             "__doc__": f"A timm ``{name}`` adapted by :func:`adapt_vit`."})
    _ADAPTED[name] = cls
    return cls


def __getattr__(name: str) -> Any:
    if name.startswith("Adapted") and (name[7:] in _METHODS or name[7:] == "NaFlexEmbeds"):
        return _adapted_class(name[7:])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ------------------------------------------------------------------------------------------------------------------
# adapt_vit


def _supported_name(model: Any) -> str:
    """The name of ``model``'s timm class, or a TypeError naming its class."""
    _import_timm()
    cls = type(model)
    base = cls.__mro__[2] if cls.__module__ == __name__ else cls  # an adapted model's timm class
    for name in SUPPORTED_MODELS:
        if base is _timm_class(name):
            return name
    raise TypeError(f"adapt_vit supports the timm classes {', '.join(SUPPORTED_MODELS)}; got "
                    f"{cls.__module__}.{cls.__qualname__}")


def _check_rope_model(model: nn.Module, rope: nn.Module | None, ref_grid: Any) -> nn.Module:
    """The RotaryEmbedding2D for encoding='rope', after checking the blocks are timm Block + Attention."""
    from timm.layers.attention import Attention
    from timm.models.vision_transformer import Block

    from .rope2d import RotaryEmbedding2D

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
    embeds.__class__ = _adapted_class("NaFlexEmbeds")
    object.__setattr__(embeds, "omnipos_positions", adapter)  # shared, not registered twice
    model.__class__ = _adapted_class("NaFlexVit")
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
    prefix_tokens = sum(t.shape[1] for t in _prefix_tokens(model))
    if prefix_tokens != model.num_prefix_tokens:
        raise ValueError(f"model.num_prefix_tokens={model.num_prefix_tokens} but it has {prefix_tokens} prefix-token "
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
    model.__class__ = _adapted_class(name)
    if dynamic and target is not None and model.pos_embed is not None:  # warm the cache for the announced size
        with torch.no_grad():
            adapter.tables(model.pos_embed, target, dtype=model.pos_embed.dtype, device=model.pos_embed.device)
    return model
