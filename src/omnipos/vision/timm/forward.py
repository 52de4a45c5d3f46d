"""The forward of an adapted model, shared by the VisionTransformer and Eva families: positions added from the
adapter, padded batches of mixed sizes masked, 2-D RoPE inside timm's blocks, masked pooling."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...core import apply_rotary
from ..grid import patch_grid
from ..masks import check_image_sizes, patch_padding_mask, pixel_padding_mask, prefix_attention_mask
from .adapter import PositionAdapter


def prefix_tokens(model: nn.Module) -> list[torch.Tensor]:
    """The model's prefix-token parameters in the order timm puts them: class, distillation, registers."""
    names = ("cls_token", "dist_token", "reg_token")
    return [t for t in (getattr(model, n, None) for n in names) if t is not None]


def check_images(model: nn.Module, x: Any) -> tuple[int, int]:
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


def add_positions(model: nn.Module, x: torch.Tensor, grids: torch.Tensor | None = None) -> torch.Tensor:
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
    prefix = prefix_tokens(model)
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


def padded_batch(model: nn.Module, x: torch.Tensor, image_sizes: Any) -> tuple[torch.Tensor, torch.Tensor,
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


def vit_features(model: nn.Module, x: Any, attn_mask: torch.Tensor | None, is_causal: bool, image_sizes: Any,
                  take: Any = None) -> tuple[torch.Tensor, torch.Tensor | None, list[torch.Tensor]]:
    """(features ``[B, P + N, C]`` before the final norm, key mask ``[B, P + N]`` or None, intermediates)."""
    grid = check_images(model, x)
    grids, keys = None, None
    if image_sizes is not None:
        if attn_mask is not None or is_causal:
            raise ValueError("pass either image_sizes (omnipos builds the padding mask) or attn_mask / is_causal")
        x, grids, _, attn_mask = padded_batch(model, x, image_sizes)
        keys = attn_mask[:, 0, 0, :]
    adapter: PositionAdapter = model.omnipos_positions
    x = add_positions(model, model.patch_embed(x), grids)
    x = model.norm_pre(model.patch_drop(x))
    rope = None
    if adapter.encoding == "rope":
        cos, sin = adapter.rope_cos_sin(grid, grids, x.device)
        rope = (cos, sin, model.num_prefix_tokens, adapter.rope.layout)
    x, intermediates = _vit_blocks(model, x, attn_mask, is_causal, rope, take)
    return x, keys, intermediates


def masked_head(model: nn.Module, x: torch.Tensor, keys: torch.Tensor, *, pre_logits: bool = False,
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


class VisionTransformerMethods:
    """What an adapted timm ``VisionTransformer`` (or ``VisionTransformerDistilled``) does differently."""

    def _pos_embed(self, x: torch.Tensor) -> torch.Tensor:
        return add_positions(self, x)

    def forward_features(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False, *,
                         image_sizes: Any = None) -> torch.Tensor:
        """timm's ``forward_features``; ``image_sizes [B, 2]`` runs a padded batch of mixed sizes (padded patch
        tokens are masked out of attention; their features are meaningless: mask them with
        :func:`~omnipos.vision.patch_padding_mask`)."""
        return self.norm(vit_features(self, x, attn_mask, is_causal, image_sizes)[0])

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False, *,
                image_sizes: Any = None) -> torch.Tensor:
        features, keys, _ = vit_features(self, x, attn_mask, is_causal, image_sizes)
        features = self.norm(features)
        return self.forward_head(features) if keys is None else masked_head(self, features, keys)

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
        height, width = check_images(self, x)
        final, _, intermediates = vit_features(self, x, attn_mask, is_causal, None, take=set(take))
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
