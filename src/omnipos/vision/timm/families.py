"""The per-family pieces: Eva (EVA02, ``vit_*_rope``, RoPE-Mixed, DINOv3; timm's own RoPE cached per grid) and
NaFlexVit (cached image-path tables; ``image_sizes`` through its own per-sample NaFlex path)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..grid import patch_grid
from ..masks import check_image_sizes, pixel_padding_mask
from .adapter import PositionAdapter, place_on_canvas
from .forward import add_positions, check_images, masked_head, padded_batch


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


class EvaMethods:
    """What an adapted timm ``Eva`` does differently: cached tables and RoPE, per-image sizes."""

    def _pos_embed(self, x: torch.Tensor, grids: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
        from timm.layers import apply_keep_indices_nlc

        height, width = (x.shape[1], x.shape[2]) if x.ndim == 4 else tuple(self.patch_embed.grid_size)
        x = add_positions(self, x, grids)
        rot = _eva_rope(self, (height, width), grids)
        if self.patch_drop is not None:
            x, keep = self.patch_drop(x)
            if rot is not None and keep is not None:
                rot = apply_keep_indices_nlc(x, rot, keep)
                rot = rot.transpose(0, 1) if self.rope_mixed else rot.unsqueeze(1)
        return x, rot

    def _omnipos_features(self, x: Any, attn_mask: torch.Tensor | None, is_causal: bool,
                          image_sizes: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        check_images(self, x)
        grids, keys = None, None
        if image_sizes is not None:
            if attn_mask is not None or is_causal:
                raise ValueError("pass either image_sizes (omnipos builds the padding mask) or attn_mask / is_causal")
            if self.patch_drop is not None and self.training:
                raise ValueError("image_sizes= with patch dropout in training: the dropped tokens would not be "
                                 "the padded ones; call model.eval() or drop patches yourself")
            x, grids, _, attn_mask = padded_batch(self, x, image_sizes)
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
        return masked_head(self, features, keys, attn_pool_sees_prefix=True)



# ------------------------------------------------------------------------------------------------------------------
# NaFlexVit: cached standard-path tables; image_sizes through its own per-sample (NaFlex) path


class NaFlexVitMethods:
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


class NaFlexEmbedsMethods:
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
