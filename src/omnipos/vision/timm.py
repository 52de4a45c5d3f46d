"""timm integration: run a timm ``VisionTransformer`` at any image size, per-image sizes, padded and masked.

Everything timm-specific in omnipos lives here.

- :func:`resize_state_dict`: what timm's ``checkpoint_filter_fn`` does to ``pos_embed``, without assuming a
  square source grid.
- :func:`adapt_vit`: adapts a model in place. Its position table is resampled once per distinct
  ``(grid, dtype, device)`` and cached (timm's ``dynamic_img_size=True`` resamples on every forward); the cache
  is dropped when the weights change. ``model(x, image_sizes=...)`` runs a padded batch of different sizes,
  each image with its own grid's positions and the padding masked out of attention and pooling.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..core import check_choice, check_positive_int, renamed_argument
from .grid import check_grid, check_size_pair, patch_grid
from .masks import check_image_sizes, patch_padding_mask, pixel_padding_mask, prefix_attention_mask
from .resample import MODES, resample_pos_embed, source_grid
from .sincos import CONVENTIONS, grid_coords, sincos_2d

__all__ = ["ENCODINGS", "PositionAdapter", "adapt_vit", "resize_state_dict"]

ENCODINGS = ("learned", "sincos", "rope")


def _vision_transformer_class():
    try:
        from timm.models.vision_transformer import VisionTransformer
    except ImportError as exc:  # pragma: no cover - timm is a dependency
        raise ImportError('omnipos.vision.timm needs timm: pip install "omnipos[vision]"') from exc
    return VisionTransformer


def _infer_prefix(state_dict: Mapping[str, Any], num_tokens: int, old_grid: Any) -> int:
    """Prefix rows of a checkpoint's pos_embed: the class / register / distillation tokens it has, or 0 for a
    ``no_embed_class`` checkpoint; whichever (exactly one) fits the grid."""
    prefix = 0
    for key in ("cls_token", "dist_token", "reg_token"):
        if key in state_dict:
            prefix += int(state_dict[key].shape[1])
    candidates = []
    for count in dict.fromkeys((prefix, 0)):
        try:
            source_grid(num_tokens - count, old_grid)
        except ValueError:
            continue
        candidates.append(count)
    if not candidates and old_grid is None:
        raise ValueError(
            f"pos_embed has {num_tokens} rows: neither {num_tokens - prefix} nor {num_tokens} patch tokens form a "
            "square grid; pass old_grid=(H, W) (and num_prefix_tokens if it is not "
            f"{prefix} or 0)"
        )
    if len(candidates) != 1:
        raise ValueError(
            f"cannot tell how many of pos_embed's {num_tokens} rows are prefix tokens (tried {prefix} and 0"
            f"{'' if old_grid is None else f' with old_grid {tuple(old_grid)}'}); pass num_prefix_tokens"
        )
    return candidates[0]


def resize_state_dict(
    state_dict: Mapping[str, Any],
    new_grid: Any,
    *,
    old_grid: Any = None,
    num_prefix_tokens: int | None = None,
    mode: str = "bicubic",
    antialias: bool = True,
    key: str = "pos_embed",
) -> dict[str, Any]:
    """A timm ViT checkpoint with its position table resampled to ``new_grid`` (a new dict; input untouched).

    Args:
        state_dict: the checkpoint (``{"pos_embed": [1, N, D], "cls_token": ..., ...}``).
        new_grid: ``(H, W)`` patch grid of the model it will be loaded into.
        old_grid: the checkpoint's grid; required when its patch-token count is not a perfect square.
        num_prefix_tokens: rows of ``pos_embed`` that belong to class / register tokens. None infers it from
            ``cls_token`` / ``reg_token`` / ``dist_token`` (or 0 for ``no_embed_class`` checkpoints), refusing
            when both readings fit.
        mode, antialias: as in :func:`omnipos.vision.resample_pos_embed` (timm's defaults).
        key: the position table's key.
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}")
    if key not in state_dict:
        raise ValueError(f"state_dict has no {key!r} entry (keys start {list(state_dict)[:5]})")
    pos_embed = state_dict[key]
    if not isinstance(pos_embed, torch.Tensor) or pos_embed.ndim != 3:
        shape = getattr(pos_embed, "shape", pos_embed)
        raise ValueError(f"state_dict[{key!r}] must be a [1, N, D] tensor, got {shape}")
    if num_prefix_tokens is None:
        num_prefix_tokens = _infer_prefix(state_dict, pos_embed.shape[1], old_grid)
    out = dict(state_dict)
    out[key] = resample_pos_embed(pos_embed, new_grid, old_grid=old_grid, num_prefix_tokens=num_prefix_tokens,
                                  mode=mode, antialias=antialias)
    return out


class PositionAdapter(nn.Module):
    """The positional part of an adapted ViT: builds (and caches) the patch table for any grid.

    ``encoding="learned"`` resamples the model's ``pos_embed`` (trained on ``source_grid``); ``"sincos"`` uses a
    fixed 2-D sincos table. Tables are cached by ``(grid, dtype, device)`` whenever autograd will not record
    them (``torch.no_grad`` / ``inference_mode``, or a frozen ``pos_embed``); with gradients flowing into
    ``pos_embed`` each forward builds its own differentiable table. The cache is dropped as soon as the
    ``pos_embed`` parameter is replaced or modified (its identity, storage and ``_version`` are the key).
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
        embed_dim: int | None = None,
    ) -> None:
        super().__init__()
        self.dim = check_positive_int(renamed_argument(dim, embed_dim, "dim", "embed_dim"), "dim (embed_dim)")
        self.source_grid = source_grid
        self.table_prefix = table_prefix
        self.encoding = check_choice(encoding, "encoding", ENCODINGS)
        self.mode = check_choice(mode, "mode", MODES)
        self.antialias = bool(antialias)
        self.convention = check_choice(convention, "convention", CONVENTIONS)
        self.ref_grid = None if ref_grid is None else check_grid(ref_grid, "ref_grid")
        self._cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self._weights_key: tuple | None = None
        self.hits = 0
        self.builds = 0
        self.rope = rope
        self.num_prefix_tokens = 0
        self._rope_now: tuple[torch.Tensor, torch.Tensor] | None = None  # cos/sin of the forward in progress

    def cache_info(self) -> dict[str, int]:
        return {"hits": self.hits, "builds": self.builds, "size": len(self._cache)}

    def clear_cache(self) -> None:
        self._cache.clear()

    @property
    def embed_dim(self) -> int:
        """Alias of :attr:`dim` (timm's name for the token width)."""
        return self.dim

    def _build(self, pos_embed: torch.Tensor | None, grid: tuple[int, int], dtype: torch.dtype,
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(prefix rows ``[1, P, D]``, patch rows ``[1, H*W, D]``) for ``grid``."""
        self.builds += 1
        if self.encoding == "sincos":
            table = sincos_2d(grid, self.dim, convention=self.convention, ref_grid=self.ref_grid,
                              dtype=dtype, device=device).unsqueeze(0)
            return table[:, :0], table
        table = resample_pos_embed(pos_embed, grid, old_grid=self.source_grid, num_prefix_tokens=self.table_prefix,
                                   mode=self.mode, antialias=self.antialias)
        return table[:, : self.table_prefix], table[:, self.table_prefix:]

    def tables(self, pos_embed: torch.Tensor | None, grid: tuple[int, int], *, dtype: torch.dtype,
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(prefix rows, patch rows) of ``grid``, from the cache when that is safe."""
        records = pos_embed is not None and pos_embed.requires_grad and torch.is_grad_enabled()
        if records:
            return self._build(pos_embed, grid, dtype, device)
        if pos_embed is not None:
            weights = (id(pos_embed), pos_embed._version, pos_embed.data_ptr(), tuple(pos_embed.shape))
            dtype, device = pos_embed.dtype, pos_embed.device
        else:
            weights = None
        if weights != self._weights_key:
            self._cache.clear()
            self._weights_key = weights
        key = (grid, dtype, device, torch.is_inference_mode_enabled())
        entry = self._cache.get(key)
        if entry is None:
            entry = self._cache[key] = self._build(pos_embed, grid, dtype, device)
        else:
            self.hits += 1
        return entry

    def rope_cos_sin(self, grid: tuple[int, int], grids: torch.Tensor | None,
                     device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """2-D RoPE ``(cos, sin)`` for the patch tokens of this forward: ``[N, head_dim]`` for one grid (cached;
        they depend on nothing but the grid), ``[B, 1, N, head_dim]`` with per-image ``grids`` (each image's own
        positions, which differ from the batch grid's only with a ``ref_grid``)."""
        rope = self.rope
        if grids is None or rope.ref_grid is None:
            key = ("rope", grid, device)
            entry = self._cache.get(key)
            if entry is None:
                self.builds += 1
                entry = self._cache[key] = rope.cos_sin(grid)
                entry = self._cache[key] = (entry[0].to(device), entry[1].to(device))
            else:
                self.hits += 1
            return entry
        # per image: positions i * ref_h / h_b, j * ref_w / w_b on the batch's (H, W) canvas
        scale = torch.tensor(rope.ref_grid, dtype=torch.float64, device=grids.device) / grids.to(torch.float64)
        coords = grid_coords(grid, device=grids.device).unsqueeze(0) * scale.unsqueeze(1)  # [B, N, 2] (y, x)
        if rope.indexing == "xy":
            coords = coords.flip(-1)
        cos, sin = rope.rope.cos_sin(coords.to(rope.rope.inv_freq.device))
        return cos.unsqueeze(1).to(device), sin.unsqueeze(1).to(device)

    def extra_repr(self) -> str:
        text = f"encoding={self.encoding!r}, dim={self.dim}, source_grid={self.source_grid}"
        if self.encoding == "rope":
            return text
        if self.encoding == "learned":
            text += f", table_prefix={self.table_prefix}, mode={self.mode!r}, antialias={self.antialias}"
        else:
            text += f", convention={self.convention!r}, ref_grid={self.ref_grid}"
        return text


def _embed_positions(model: nn.Module, x: torch.Tensor, grids: torch.Tensor | None = None) -> torch.Tensor:
    """Replacement for ``VisionTransformer._pos_embed``: ``[B, H, W, C]`` (or ``[B, N, C]`` at the static grid)
    patch tokens -> ``[B, prefix + H*W, C]`` with positions added and prefix tokens put first.

    ``grids`` ``[B, 2]``: each image's own grid inside the padded ``(H, W)`` (top-left); its table is that
    grid's, so an image gets the same positions in a mixed batch as alone.
    """
    adapter: PositionAdapter = model.omnipos_positions
    if x.ndim == 4:
        batch, height, width, channels = x.shape
        x = x.reshape(batch, height * width, channels)
    else:
        batch, channels = x.shape[0], x.shape[-1]
        height, width = model.patch_embed.grid_size
    if adapter.encoding == "rope":  # positions enter in attention (the q/k hooks); here only the prefix tokens
        adapter._rope_now = adapter.rope_cos_sin((height, width), grids, x.device)
        prefix = [token.expand(batch, -1, -1) for token in (model.cls_token, model.reg_token) if token is not None]
        return model.pos_drop(torch.cat([*prefix, x], dim=1) if prefix else x)
    pos_embed = model.pos_embed if adapter.encoding == "learned" else None
    table_dtype = pos_embed.dtype if pos_embed is not None else x.dtype
    if grids is None or bool((grids == torch.tensor([height, width], device=grids.device)).all()):
        prefix_pe, patch_pe = adapter.tables(pos_embed, (height, width), dtype=table_dtype, device=x.device)
    else:
        canvas = None
        for grid in torch.unique(grids, dim=0).tolist():
            prefix_pe, table = adapter.tables(pos_embed, tuple(grid), dtype=table_dtype, device=x.device)
            if canvas is None:
                canvas = table.new_zeros(batch, height, width, channels)
            rows = (grids == torch.tensor(grid, device=grids.device)).all(dim=1).nonzero().flatten().to(x.device)
            canvas[rows, : grid[0], : grid[1]] = table.reshape(grid[0], grid[1], channels)
        patch_pe = canvas.reshape(batch, height * width, channels)
    prefix = [token for token in (model.cls_token, model.reg_token) if token is not None]
    if not prefix:
        return model.pos_drop(x + patch_pe)
    prefix = torch.cat(prefix, dim=1) if len(prefix) > 1 else prefix[0]
    if prefix_pe.shape[1]:
        prefix = prefix + prefix_pe
    if torch.is_grad_enabled():
        x = torch.cat([prefix.expand(batch, -1, -1), x + patch_pe], dim=1)
    else:  # one pass over the tokens: the sum is written straight into the output (no autograd for out=)
        out = x.new_empty(batch, prefix.shape[1] + x.shape[1], channels,
                          dtype=torch.promote_types(x.dtype, patch_pe.dtype))
        out[:, : prefix.shape[1]] = prefix
        torch.add(x, patch_pe, out=out[:, prefix.shape[1]:])
        x = out
    return model.pos_drop(x)


def _check_rope_model(model: nn.Module, rope: nn.Module | None, ref_grid: Any) -> nn.Module:
    """The RotaryEmbedding2D for encoding='rope', after checking the blocks are timm Attention it can hook."""
    from timm.layers.attention import Attention

    from .rope2d import RotaryEmbedding2D

    attentions = [getattr(block, "attn", None) for block in model.blocks]
    if not all(type(attn) is Attention for attn in attentions):
        kinds = sorted({type(attn).__name__ for attn in attentions})
        raise ValueError(f"encoding='rope' hooks timm's Attention (q_norm / k_norm); this model's blocks use {kinds}")
    head_dim = attentions[0].head_dim
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


def _rope_hook(adapter: PositionAdapter):
    """Forward hook for an attention's ``q_norm`` / ``k_norm`` (applied to q, k ``[B, heads, N, head_dim]`` just
    before attention in timm's ``Attention``): rotates the patch tokens by this forward's 2-D RoPE."""
    from ..core import apply_rotary

    def hook(module: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
        if adapter._rope_now is None:
            raise RuntimeError("2-D RoPE: the attention ran before the model's _pos_embed set this forward's grid")
        cos, sin = adapter._rope_now
        prefix = adapter.num_prefix_tokens
        rotated = apply_rotary(out[..., prefix:, :], cos, sin, layout=adapter.rope.layout)
        return torch.cat([out[..., :prefix, :], rotated], dim=-2) if prefix else rotated

    return hook


def _masked_forward(model: nn.Module, x: torch.Tensor, image_sizes: Any) -> torch.Tensor:
    """timm's forward_features + forward_head for a padded batch with per-image sizes."""
    patch = model.patch_embed.patch_size
    sizes = check_image_sizes(image_sizes, patch).to(x.device)
    if sizes.shape[0] != x.shape[0]:
        raise ValueError(f"image_sizes has {sizes.shape[0]} rows but the batch has {x.shape[0]} images")
    if bool((sizes > torch.tensor(x.shape[-2:], device=x.device)).any()):
        raise ValueError(f"image_sizes exceed the batch's padded size {tuple(x.shape[-2:])}")
    grid = patch_grid(tuple(x.shape[-2:]), patch)
    x = torch.where(pixel_padding_mask(sizes, x.shape[-2:]), x, x.new_zeros(()))  # padding content cannot leak
    patch_mask = patch_padding_mask(sizes, patch, grid)
    attn_mask = prefix_attention_mask(patch_mask, model.num_prefix_tokens)
    grids = -(-sizes // torch.tensor(patch, device=sizes.device))
    x = model.patch_embed(x)
    x = _embed_positions(model, x, grids)
    x = model.patch_drop(x)
    x = model.norm_pre(x)
    for block in model.blocks:
        x = block(x, attn_mask=attn_mask)
    x = model.norm(x)
    pool = model.global_pool
    if model.attn_pool is not None or pool not in ("token", "avg", ""):
        raise ValueError(f"image_sizes= supports global_pool 'token', 'avg' or '' (got {pool!r}); "
                         "pool the features yourself with patch_padding_mask")
    if pool == "token":
        x = x[:, 0]
    elif pool == "avg":
        keep = attn_mask[:, 0, 0, :] if model.pool_include_prefix else patch_mask
        tokens = x if model.pool_include_prefix else x[:, model.num_prefix_tokens:]
        weights = keep.to(tokens.dtype).unsqueeze(-1)
        x = (tokens * weights).sum(dim=1) / weights.sum(dim=1)
    x = model.fc_norm(x)
    x = model.head_drop(x)
    return model.head(x)


def _adapted_forward(self: nn.Module, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                     is_causal: bool = False, *, image_sizes: Any = None) -> torch.Tensor:
    """``forward`` of an adapted model: timm's, plus ``image_sizes`` for padded batches of mixed sizes."""
    if not isinstance(x, torch.Tensor) or x.ndim != 4:
        raise ValueError(f"x must be an image batch [B, C, height, width], got {getattr(x, 'shape', x)}")
    patch_grid(tuple(x.shape[-2:]), self.patch_embed.patch_size)  # clear error for a patch larger than x
    if image_sizes is None:
        return type(self).forward(self, x, attn_mask=attn_mask, is_causal=is_causal)
    if attn_mask is not None or is_causal:
        raise ValueError("pass either image_sizes (omnipos builds the padding mask) or attn_mask / is_causal")
    if not self.dynamic_img_size:
        raise ValueError("image_sizes needs a model adapted with dynamic=True")
    return _masked_forward(self, x, image_sizes)


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
    """Adapt a timm ``VisionTransformer`` in place to new image sizes; returns the same model.

    After adaptation:

    - ``model(x)`` accepts any ``x [B, C, height, width]`` (``dynamic=True``); sizes that are not multiples of the
      patch are padded bottom / right with zeros, as timm's ``dynamic_img_pad``. Same logits as timm's own
      ``dynamic_img_size=True`` model with the same weights, but the resampled table is cached per grid.
    - ``model(x, image_sizes=sizes)`` with ``sizes [B, 2]`` (height, width) runs a padded batch of different
      images: pixels outside each image are zeroed, each image gets its own grid's positions, padded patches are
      masked out of attention (and of ``avg`` pooling). An image's logits are those it gets alone.
    - ``dynamic=False, img_size=s``: a fixed new size; ``pos_embed`` is resampled once into the parameter
      (non-square safe), like timm's ``set_input_size``.

    Args:
        model: a timm ``VisionTransformer`` (``timm.create_model("vit_...", pretrained=...)``).
        img_size: int or (height, width): the size to prepare (dynamic) or to fix (``dynamic=False``).
        dynamic: accept any size per call (True) or only ``img_size`` (False).
        encoding: ``"learned"`` resamples the model's table; ``"sincos"`` replaces it with a fixed 2-D sincos
            table (``convention``, ``ref_grid`` as in :func:`omnipos.vision.sincos_2d`; ``pos_embed`` is removed);
            ``"rope"`` removes it and rotates q and k of the patch tokens in every block by 2-D RoPE (prefix tokens
            are not rotated, as in EVA): ``rope`` (a :class:`omnipos.vision.RotaryEmbedding2D`, axial) or by default
            ``RotaryEmbedding2D(head_dim, ref_grid=ref_grid)``. It hooks each block's ``attn.q_norm`` /
            ``attn.k_norm`` (timm ``Attention``), so state-dict keys do not change; a forward sets the grid the
            hooks read, so one adapted model must not run two forwards at once from different threads.
        mode, antialias: interpolation of the learned table (timm's defaults; ``antialias=False`` is HF's).

    Raises:
        TypeError: not a timm VisionTransformer. ValueError: bad sizes or options, a model without a learned
        table asked for ``"learned"``, a patch larger than ``img_size``.
    """
    vit_class = _vision_transformer_class()
    if not isinstance(model, vit_class):
        raise TypeError(f"model must be a timm VisionTransformer, got {type(model).__name__}")
    if hasattr(model, "omnipos_positions"):
        raise ValueError("model is already adapted by omnipos.vision.adapt_vit")
    check_choice(encoding, "encoding", ENCODINGS)
    if not isinstance(dynamic, bool):
        raise TypeError(f"dynamic must be a bool, got {dynamic!r}")
    patch_embed = model.patch_embed
    patch = tuple(patch_embed.patch_size)
    source = tuple(patch_embed.grid_size)
    table_prefix = 0 if model.no_embed_class else model.num_prefix_tokens
    if encoding == "learned":
        if model.pos_embed is None:
            raise ValueError("model has no learned pos_embed (built with pos_embed='none'); use encoding='sincos'")
        if model.pos_embed.shape[1] != table_prefix + source[0] * source[1]:
            raise ValueError(f"model.pos_embed has {model.pos_embed.shape[1]} rows, expected {table_prefix} prefix + "
                             f"{source[0]} x {source[1]} patches")
    elif encoding == "sincos" and model.embed_dim % 4:
        raise ValueError(f"encoding='sincos' needs embed_dim divisible by 4, got {model.embed_dim}")
    if rope is not None and encoding != "rope":
        raise ValueError(f"rope= is for encoding='rope', got encoding={encoding!r}")
    if encoding == "rope":
        rope = _check_rope_model(model, rope, ref_grid)
    target = None if img_size is None else patch_grid(check_size_pair(img_size, "img_size"), patch)
    if not dynamic and img_size is None:
        raise ValueError("dynamic=False fixes one image size: pass img_size")

    model.omnipos_positions = PositionAdapter(
        dim=model.embed_dim, source_grid=source, table_prefix=table_prefix, encoding=encoding, mode=mode,
        antialias=antialias, convention=convention, ref_grid=ref_grid, rope=rope,
    )
    if encoding != "learned":
        model.pos_embed = None
    if encoding == "rope":
        model.omnipos_positions.num_prefix_tokens = model.num_prefix_tokens
        hook = _rope_hook(model.omnipos_positions)
        for block in model.blocks:
            block.attn.q_norm.register_forward_hook(hook)
            block.attn.k_norm.register_forward_hook(hook)
    if not dynamic:
        height, width = check_size_pair(img_size, "img_size")
        if encoding == "learned" and target != source:
            with torch.no_grad():
                table = resample_pos_embed(model.pos_embed, target, old_grid=source, num_prefix_tokens=table_prefix,
                                           mode=mode, antialias=antialias)
            model.pos_embed = nn.Parameter(table, requires_grad=model.pos_embed.requires_grad)
            model.omnipos_positions.source_grid = target
        patch_embed.img_size = (height, width)
        patch_embed.grid_size = target
        patch_embed.num_patches = target[0] * target[1]
        patch_embed.dynamic_img_pad = bool(height % patch[0] or width % patch[1])
    else:
        from timm.layers import Format

        patch_embed.strict_img_size = False
        patch_embed.dynamic_img_pad = True
        patch_embed.flatten = False
        patch_embed.output_fmt = Format.NHWC
        model.dynamic_img_size = True

    model._pos_embed = types.MethodType(_embed_positions, model)
    model.forward = types.MethodType(_adapted_forward, model)
    if dynamic and target is not None:  # warm the cache for the announced size
        weight = model.pos_embed if model.pos_embed is not None else patch_embed.proj.weight
        with torch.no_grad():
            model.omnipos_positions.tables(model.pos_embed, target, dtype=weight.dtype, device=weight.device)
    return model
