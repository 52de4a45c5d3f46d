"""omnipos inside diffusers' image and video transformers: :func:`patch_rotary` swaps a model's RoPE for one computed
by omnipos' core, in place; :func:`unpatch_rotary` puts the original objects back.

What is swapped (diffusers 0.42), and what the swap returns: exactly what the original returned (same shapes,
dtypes, devices and channel layout: interleaved pairs), with the angles formed in float64 by
:class:`~omnipos.core.RotaryEmbedding` (see :mod:`omnipos.core.rope_diffusion` for each model's RoPE):

- ``FluxTransformer2DModel``: ``model.pos_embed`` (``FluxPosEmbed``) -> :class:`FluxRotaryEmbedding`;
  ``forward(ids [seq, 3]) -> (cos, sin)`` float32 ``[seq, sum(axes_dims_rope)]``.
- ``HunyuanVideoTransformer3DModel``: ``model.rope`` (``HunyuanVideoRotaryPosEmbed``) ->
  :class:`HunyuanVideoRotaryEmbedding`; ``forward(hidden_states [B, C, T, H, W])`` -> float32 ``[seq, head_dim]``.
- ``WanTransformer3DModel``: ``model.rope`` (``WanRotaryPosEmbed``) -> :class:`WanRotaryEmbedding`;
  ``[1, seq, 1, head_dim]`` of the dtype the original's tables had (they follow ``model.to(dtype)``; diffusers
  keeps ``rope_max_seq_len`` rows of them, the swap has no such limit).
- ``LTXVideoTransformer3DModel``: ``model.rope`` (``LTXVideoRotaryPosEmbed``) -> :class:`LTXVideoRotaryEmbedding`;
  same arguments (``num_frames, height, width, rope_interpolation_scale, video_coords``), float32 ``[B, seq,
  inner_dim]`` with the ``inner_dim % 6`` pass-through channels (cos 1, sin 0) first.
- CogVideoX: the transformer does not compute its RoPE, it takes ``image_rotary_emb`` from the pipeline, whose
  ``_prepare_rotary_positional_embeddings(height, width, num_frames, device)`` calls diffusers'
  ``get_3d_rotary_pos_embed``. So a CogVideoX *pipeline* is patched (``CogVideoXPipeline``,
  ``CogVideoXImageToVideoPipeline``, ``CogVideoXVideoToVideoPipeline``, ``CogVideoXFunControlPipeline``): that
  method is replaced on this pipeline object only (an instance attribute, :class:`CogVideoXRotaryEmbeddings`;
  nothing module-level is touched, so other pipelines in the process keep diffusers' function). Passing the bare
  ``CogVideoXTransformer3DModel`` is refused with this explanation.

Any other diffusers pipeline is accepted too: its ``pipe.transformer`` is patched (or refused by name).

Precision: Flux builds its angles in float64 from float32 ids; HunyuanVideo, CogVideoX and LTX-Video in float32,
so the swapped model is the more exact one. At LTX-Video's theta = 10000 the stock angles reach ``theta * pi / 2``
~ 15708 rad and carry float32 rounding of ~1e-3 rad; the swapped cos/sin differ from the stock ones by that much
(and equal the float64 formula to ~1e-7).

``scaling=`` (the research workflow: try a longer video or a larger image without editing the model's code): an HF
``rope_scaling`` dict or :class:`~omnipos.core.RopeScaling` applied to every axis's ladder (``{"rope_type":
"linear", "factor": 2}`` divides every coordinate by 2; ``{"rope_type": "ntk_alpha", "alpha": 4}`` raises each
axis's base NTK-style; ``"yarn"`` / ``"llama3"`` with their fields). Length-dependent types (``"dynamic"``,
``"longrope"``) are refused by the core (an axial grid has no one length). LTX-Video refuses ``scaling=``: its
frequencies follow the ``linspace`` rule over coordinates in [-1, 1], and the model scales its positions through the
pipeline's ``rope_interpolation_scale``.

``kernel=``: ``"auto"`` (default) or ``"eager"``, which are the same here: diffusers' attention processors rotate q
and k themselves with the cos/sin the swapped module returns (omnipos replaces the producer of cos/sin, not the
rotation), so a fused kernel has nothing to fuse into; another value is a ValueError.

Needs the optional extra ``omnipos[diffusers]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from omnipos.core import (
    RopeScaling,
    RotaryEmbedding,
    check_choice,
    cogvideox_positions,
    cogvideox_rope_arguments,
    grid_positions,
    require,
    rope_arguments_from_diffusers,
)

require("diffusers", "diffusers", "omnipos.integrations.diffusers")

__all__ = [
    "KERNELS",
    "SUPPORTED_MODELS",
    "SUPPORTED_PIPELINES",
    "CogVideoXRotaryEmbeddings",
    "FluxRotaryEmbedding",
    "HunyuanVideoRotaryEmbedding",
    "LTXVideoRotaryEmbedding",
    "WanRotaryEmbedding",
    "patch_rotary",
    "unpatch_rotary",
]

KERNELS = ("auto", "eager")

_HALF = (torch.float16, torch.bfloat16)


class _RotarySwap(nn.Module):
    """A diffusers position module's stand-in: the omnipos :class:`~omnipos.core.RotaryEmbedding` that computes it
    (``self.rope``) and the original module (``self.original``, a submodule so that it follows ``model.to()``; it is
    what :func:`unpatch_rotary` puts back). Neither has persistent state: the model's ``state_dict`` is unchanged."""

    def __init__(self, original: nn.Module, rope: RotaryEmbedding) -> None:
        super().__init__()
        self.original = original
        self.rope = rope

    def _cos_sin(self, positions: torch.Tensor, device: torch.device,
                 dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        work = torch.float64 if dtype == torch.float64 else torch.float32
        cos, sin = self.rope.cos_sin(positions, dtype=work)
        return cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype)

    def _grid(self, frames: int, height: int, width: int) -> torch.Tensor:
        return grid_positions(frames, height, width, device=self.rope.inv_freq.device)


class FluxRotaryEmbedding(_RotarySwap):
    """Stands in for ``FluxPosEmbed``: ``forward(ids [seq, n_axes])`` -> ``(cos, sin)`` float32
    ``[seq, sum(axes_dim)]`` on ids' device. float16/bfloat16 ids (the Flux pipeline's dtype) are read as float32,
    as ``FluxPosEmbed`` does; integer and float64 ids are used exactly."""

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions = ids.float() if ids.dtype in _HALF else ids
        return self._cos_sin(positions, ids.device)


class HunyuanVideoRotaryEmbedding(_RotarySwap):
    """Stands in for ``HunyuanVideoRotaryPosEmbed``: ``forward(hidden_states [B, C, T, H, W])`` -> ``(cos, sin)``
    float32 ``[T' H' W', sum(rope_dim)]`` over the patch grid ``(T // patch_size_t, H // patch_size, W //
    patch_size)``, row-major ``(t, h, w)``."""

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, _, frames, height, width = hidden_states.shape
        o = self.original
        positions = self._grid(frames // o.patch_size_t, height // o.patch_size, width // o.patch_size)
        return self._cos_sin(positions, hidden_states.device)


class WanRotaryEmbedding(_RotarySwap):
    """Stands in for ``WanRotaryPosEmbed``: ``forward(hidden_states [B, C, T, H, W])`` -> ``(cos, sin)``
    ``[1, T' H' W', 1, head_dim]`` over the patch grid, of the dtype and on the device of the original's tables
    (float32 unless the model was cast), for any grid size (diffusers' tables stop at ``max_seq_len``)."""

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, _, frames, height, width = hidden_states.shape
        p_t, p_h, p_w = self.original.patch_size
        table = self.original.freqs_cos
        cos, sin = self._cos_sin(self._grid(frames // p_t, height // p_h, width // p_w), table.device, table.dtype)
        return cos[None, :, None], sin[None, :, None]


class LTXVideoRotaryEmbedding(_RotarySwap):
    """Stands in for ``LTXVideoRotaryPosEmbed`` with the same arguments: ``forward(hidden_states [B, seq, C],
    num_frames, height, width, rope_interpolation_scale=None, video_coords=None)`` -> ``(cos, sin)`` ``[B, seq,
    dim]``, the ``dim % 6`` pass-through channels (cos 1, sin 0) first. Coordinates as diffusers forms them (the
    grid times ``rope_interpolation_scale * patch / base`` per axis, or ``video_coords [B, 3, seq] / base``), then
    ``2 c - 1``, all in float64. float32 output (float64 for float64 ``video_coords``, as diffusers' promotion gives).
    """

    def forward(self, hidden_states: torch.Tensor, num_frames: int | None = None, height: int | None = None,
                width: int | None = None, rope_interpolation_scale: Any = None,
                video_coords: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        o = self.original
        device = self.rope.inv_freq.device
        bases = (o.base_num_frames, o.base_height, o.base_width)
        if video_coords is None:
            grid = self._grid(num_frames, height, width).to(torch.float64)
            if rope_interpolation_scale is not None:
                patches = (o.patch_size_t, o.patch_size, o.patch_size)
                grid = torch.stack([grid[:, a] * torch.as_tensor(rope_interpolation_scale[a], dtype=torch.float64,
                                                                 device=device) * patches[a] / bases[a]
                                    for a in range(3)], -1)
            grid = grid.expand(hidden_states.size(0), -1, -1)
            dtype = torch.float32
        else:
            coords = video_coords.to(device=device, dtype=torch.float64)
            grid = torch.stack([coords[:, a] / bases[a] for a in range(3)], -1)
            dtype = torch.float64 if video_coords.dtype == torch.float64 else torch.float32
        cos, sin = self._cos_sin(grid * 2 - 1, hidden_states.device, dtype)
        kept = self.rope.dim - self.rope.rotary_dim
        if kept:
            cos = torch.cat([torch.ones_like(cos[..., :kept]), cos], -1)
            sin = torch.cat([torch.zeros_like(sin[..., :kept]), sin], -1)
        return cos, sin


class CogVideoXRotaryEmbeddings:
    """Stands in for a CogVideoX pipeline's ``_prepare_rotary_positional_embeddings(height, width, num_frames,
    device)`` on one pipeline object: ``(cos, sin)`` float32 ``[frames * grid_h * grid_w, head_dim]`` on
    ``device``, the grid read from ``pipe.transformer.config`` as diffusers reads it (CogVideoX 1.0, no
    ``patch_size_t``: the latent grid spread over the centred crop of the ``sample_height x sample_width`` grid;
    CogVideoX 1.5: the integer grid of ``ceil(num_frames / patch_size_t)`` frames)."""

    def __init__(self, pipe: Any, rope: RotaryEmbedding, previous: Any) -> None:
        self.pipe = pipe
        self.rope = rope
        self.previous = previous  # the instance attribute it replaced (None: the pipeline class's method)

    def __call__(self, height: int, width: int, num_frames: int,
                 device: torch.device | str | None) -> tuple[torch.Tensor, torch.Tensor]:
        config = self.pipe.transformer.config
        if config.attention_head_dim != self.rope.dim:
            raise ValueError(f"pipe.transformer has attention_head_dim={config.attention_head_dim}, the patched RoPE "
                             f"was built for {self.rope.dim}: unpatch_rotary(pipe) and patch the pipeline again")
        p, p_t = config.patch_size, config.patch_size_t
        grid_h = height // (self.pipe.vae_scale_factor_spatial * p)
        grid_w = width // (self.pipe.vae_scale_factor_spatial * p)
        base_h, base_w = config.sample_height // p, config.sample_width // p
        if p_t is None:  # CogVideoX 1.0
            positions = cogvideox_positions(num_frames, grid_h, grid_w, base_size=(base_h, base_w))
        else:  # CogVideoX 1.5
            positions = cogvideox_positions((num_frames + p_t - 1) // p_t, grid_h, grid_w)
        cos, sin = self.rope.cos_sin(positions)
        return cos.to(device), sin.to(device)

    def __repr__(self) -> str:
        return f"CogVideoXRotaryEmbeddings({self.rope.extra_repr()})"


# -- what can be patched --------------------------------------------------------------------------------------------

#: transformer class -> (attribute holding its position module, that module's class, the stand-in)
SUPPORTED_MODELS: dict[str, tuple[str, str, type[_RotarySwap]]] = {
    "FluxTransformer2DModel": ("pos_embed", "FluxPosEmbed", FluxRotaryEmbedding),
    "HunyuanVideoTransformer3DModel": ("rope", "HunyuanVideoRotaryPosEmbed", HunyuanVideoRotaryEmbedding),
    "WanTransformer3DModel": ("rope", "WanRotaryPosEmbed", WanRotaryEmbedding),
    "LTXVideoTransformer3DModel": ("rope", "LTXVideoRotaryPosEmbed", LTXVideoRotaryEmbedding),
}
#: pipelines whose ``_prepare_rotary_positional_embeddings`` is replaced (their transformer takes its RoPE as input)
SUPPORTED_PIPELINES = ("CogVideoXPipeline", "CogVideoXImageToVideoPipeline", "CogVideoXVideoToVideoPipeline",
                       "CogVideoXFunControlPipeline")
_PIPELINE_METHOD = "_prepare_rotary_positional_embeddings"


def _is_diffusers(obj: Any, names: Any) -> str | None:
    """The name of the first class in obj's MRO that is a diffusers class named in ``names`` (None if none)."""
    for cls in type(obj).__mro__:
        if cls.__name__ in names and cls.__module__.startswith("diffusers."):
            return cls.__name__
    return None


def _supported() -> str:
    return (f"{', '.join(SUPPORTED_MODELS)} (or a diffusers pipeline holding one as pipe.transformer) and the "
            f"CogVideoX pipelines {', '.join(SUPPORTED_PIPELINES)}")


def _refuse(model: Any) -> TypeError:
    cls = type(model)
    name = f"{cls.__module__}.{cls.__qualname__}"
    if cls.__name__ == "CogVideoXTransformer3DModel":
        return TypeError(f"{name} takes its rotary embedding as an input (image_rotary_emb), computed by the "
                         f"pipeline's {_PIPELINE_METHOD}; patch the pipeline instead: patch_rotary(pipe) for one of "
                         f"{', '.join(SUPPORTED_PIPELINES)}")
    hint = " (a torch.compile'd module: patch it before compiling)" if hasattr(model, "_orig_mod") else ""
    return TypeError(f"patch_rotary cannot patch {name}{hint}; it supports {_supported()}")


def _model_entry(model: Any) -> tuple[str, str, type[_RotarySwap]]:
    name = type(model).__name__
    if name not in SUPPORTED_MODELS or not type(model).__module__.startswith("diffusers."):
        raise _refuse(model)
    return SUPPORTED_MODELS[name]


def _pipeline_transformer(pipe: Any) -> Any:
    transformer = getattr(pipe, "transformer", None)
    if transformer is None:
        raise TypeError(f"patch_rotary cannot patch {type(pipe).__name__}: it has no transformer (pipe.transformer); "
                        f"it supports {_supported()}")
    return transformer


def _check_arguments(scaling: Any, kernel: Any) -> None:
    check_choice(kernel, "kernel", KERNELS)
    if scaling is not None and not isinstance(scaling, (Mapping, RopeScaling)):
        raise TypeError(f"scaling must be None, an HF rope_scaling dict or omnipos.core.RopeScaling, got "
                        f"{type(scaling).__name__}")


def _build_rope(module: nn.Module, scaling: Any) -> RotaryEmbedding:
    arguments = rope_arguments_from_diffusers(module)
    if scaling is not None:
        if arguments.get("frequency_rule") == "linspace":
            raise ValueError(f"scaling= does not apply to {type(module).__name__} (LTX-Video): its frequencies follow "
                             "the linspace rule over coordinates in [-1, 1]; scale its positions with the pipeline's "
                             "rope_interpolation_scale instead")
        arguments["scaling"] = scaling
    return RotaryEmbedding(**arguments)


def _patch_pipeline(pipe: Any, scaling: Any) -> Any:
    transformer = getattr(pipe, "transformer", None)
    if _is_diffusers(transformer, ("CogVideoXTransformer3DModel",)) is None:
        raise TypeError(f"{type(pipe).__name__}.transformer must be a CogVideoXTransformer3DModel, got "
                        f"{type(transformer).__name__}")
    config = transformer.config
    if not config.use_rotary_positional_embeddings:
        raise ValueError(f"{type(pipe).__name__}.transformer has use_rotary_positional_embeddings=False (CogVideoX-2b "
                         "uses learned/sincos positions): it has no RoPE to patch")
    current = pipe.__dict__.get(_PIPELINE_METHOD)
    previous = current.previous if isinstance(current, CogVideoXRotaryEmbeddings) else current
    rope = RotaryEmbedding(**cogvideox_rope_arguments(config.attention_head_dim), scaling=scaling)
    setattr(pipe, _PIPELINE_METHOD, CogVideoXRotaryEmbeddings(pipe, rope, previous))
    return pipe


def patch_rotary(model: Any, *, scaling: RopeScaling | Mapping[str, Any] | None = None,
                 kernel: str = "auto") -> Any:
    """Swap the RoPE of a diffusers transformer (or pipeline) for omnipos', in place, and return ``model``.

    Args:
        model: a ``FluxTransformer2DModel``, ``HunyuanVideoTransformer3DModel``, ``WanTransformer3DModel`` or
            ``LTXVideoTransformer3DModel``; a diffusers pipeline holding one as ``pipe.transformer``; or a CogVideoX
            pipeline (see the module docstring for what is replaced in each). Anything else is a TypeError naming
            its class and the supported ones.
        scaling: ``None`` (the model's own RoPE) or an HF ``rope_scaling`` dict / :class:`~omnipos.core.RopeScaling`
            applied to every axis (see the module docstring); refused for LTX-Video.
        kernel: ``"auto"`` or ``"eager"`` (the same here: diffusers' attention processors do the rotation).

    Patching a patched model again rebuilds the swap from the original module (say with another ``scaling``);
    :func:`unpatch_rotary` restores the original objects. The model's ``state_dict`` is unchanged.
    """
    _check_arguments(scaling, kernel)
    if _is_diffusers(model, SUPPORTED_PIPELINES) is not None:
        return _patch_pipeline(model, scaling)
    if _is_diffusers(model, ("DiffusionPipeline",)) is not None:
        patch_rotary(_pipeline_transformer(model), scaling=scaling, kernel=kernel)
        return model
    attribute, module_class, swap_class = _model_entry(model)
    module = getattr(model, attribute)
    if isinstance(module, _RotarySwap):
        module = module.original
    if _is_diffusers(module, (module_class,)) is None:
        raise TypeError(f"{type(model).__name__}.{attribute} must be a diffusers {module_class}, got "
                        f"{type(module).__module__}.{type(module).__qualname__}")
    rope = _build_rope(module, scaling)
    swap = swap_class(module, rope)
    # the swap lives where the model lives (Wan: where its tables are), and follows model.to() from there
    reference = next(module.buffers(), None)
    if reference is None:
        reference = next(model.parameters(), None)
    if reference is not None and not reference.is_meta:
        swap.rope.to(reference.device)
    setattr(model, attribute, swap)
    return model


def unpatch_rotary(model: Any) -> Any:
    """Undo :func:`patch_rotary`: put the original position module (or, for a CogVideoX pipeline, the original
    ``_prepare_rotary_positional_embeddings``) back, the very object it replaced, and return ``model``. A model
    that is not patched is a ValueError."""
    if _is_diffusers(model, SUPPORTED_PIPELINES) is not None:
        current = model.__dict__.get(_PIPELINE_METHOD)
        if not isinstance(current, CogVideoXRotaryEmbeddings):
            raise ValueError(f"this {type(model).__name__} is not patched (no omnipos {_PIPELINE_METHOD})")
        if current.previous is None:
            delattr(model, _PIPELINE_METHOD)
        else:
            setattr(model, _PIPELINE_METHOD, current.previous)
        return model
    if _is_diffusers(model, ("DiffusionPipeline",)) is not None:
        unpatch_rotary(_pipeline_transformer(model))
        return model
    attribute, _, _ = _model_entry(model)
    module = getattr(model, attribute)
    if not isinstance(module, _RotarySwap):
        raise ValueError(f"this {type(model).__name__} is not patched: {attribute} is its own "  # noqa: TRY004
                         f"{type(module).__name__}")
    setattr(model, attribute, module.original)
    return model
