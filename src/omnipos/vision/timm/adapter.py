"""The adapter module of an adapted ViT: its configuration, the patch table of any grid, and the cache."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn

from ...core import can_inspect_values, check_choice, check_positive_int, renamed_argument
from ..grid import check_grid
from ..resample import MODES, resample_pos_embed
from ..sincos import CONVENTIONS, sincos_2d

__all__ = ["ENCODINGS", "PositionAdapter", "place_on_canvas"]

ENCODINGS = ("learned", "sincos", "rope")


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
