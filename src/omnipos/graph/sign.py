"""Sign handling for eigenvector encodings: an eigenvector ``v`` and ``-v`` are equally valid.

- :func:`canonical_sign`: a deterministic choice. In each column the entry of largest absolute value is made
  positive; entries within ``tol`` of that largest magnitude tie, and the tie goes to the lowest node index.
  Where the eigenvalue is distinct this makes the output the same run to run and CPU vs GPU. It is *ambiguous*
  (depends on node order, so not permutation-equivariant) when the tied entries have opposite signs, e.g. the
  antisymmetric eigenvectors of a cycle or a path, which have ``+a`` and ``-a`` as their largest entries.
- :func:`random_sign`: an independent random sign per graph and column (PyG's behaviour, one graph at a time).
- :func:`random_sign_flip`: the training-time augmentation (Dwivedi et al. 2020), per graph of a batch.
"""

from __future__ import annotations

import torch

from ..core import check_integer_tensor

__all__ = ["SIGNS", "canonical_sign", "random_sign", "random_sign_flip"]

SIGNS = ("canonical", "random", "none")
#: Entries whose magnitude is within this of a column's largest magnitude tie (unit-norm float64 columns; the
#: float64 eigensolver error is ~1e-14, CPU vs GPU differences ~1e-13).
CANONICAL_TOL = 1e-8


def canonical_sign(vectors: torch.Tensor, *, tol: float = CANONICAL_TOL) -> torch.Tensor:
    """Signs ``[..., k]`` (+1/-1) making the largest-magnitude entry of each column of ``vectors [..., n, k]``
    positive (ties within ``tol``: the lowest index wins). All-zero columns get +1."""
    magnitude = vectors.abs()
    largest = magnitude.amax(dim=-2, keepdim=True)
    candidate = magnitude >= largest - tol
    first = candidate.to(torch.uint8).argmax(dim=-2, keepdim=True)  # argmax returns the first maximum
    sign = torch.sign(vectors.gather(-2, first)).squeeze(-2)
    return torch.where(sign == 0, torch.ones_like(sign), sign)


def random_sign(shape: tuple[int, ...], *, device: torch.device | str | None = None,
                dtype: torch.dtype = torch.float64, generator: torch.Generator | None = None) -> torch.Tensor:
    """Independent +1/-1 of ``shape`` (drawn on the generator's device, then moved to ``device``)."""
    gen_device = generator.device if generator is not None else "cpu"
    bits = torch.randint(0, 2, shape, generator=generator, device=gen_device)
    return (2 * bits - 1).to(device=device, dtype=dtype)


def random_sign_flip(pe: torch.Tensor, batch: torch.Tensor | None = None, *,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """Multiply each column of ``pe [N, k]`` by a random sign, drawn independently for every graph of ``batch``.

    Args:
        pe: node encodings ``[N, k]`` (e.g. Laplacian eigenvectors).
        batch: ``[N]`` graph id of each node (PyG's batch vector); ``None`` means one graph.
        generator: a ``torch.Generator`` for reproducible flips.

    Returns:
        ``[N, k]``, same dtype and device; a new tensor.
    """
    if not isinstance(pe, torch.Tensor) or pe.ndim != 2:
        raise ValueError(f"pe must be a [N, k] tensor, got {getattr(pe, 'shape', type(pe).__name__)}")
    if batch is None:
        return pe * random_sign((1, pe.shape[1]), device=pe.device, dtype=pe.dtype, generator=generator)
    if not isinstance(batch, torch.Tensor) or batch.shape != pe.shape[:1]:
        raise ValueError(f"batch must be a [N] = [{pe.shape[0]}] tensor, got {getattr(batch, 'shape', batch)}")
    check_integer_tensor(batch, "batch", "integer graph ids")
    num_graphs = int(batch.max()) + 1 if batch.numel() else 0
    signs = random_sign((num_graphs, pe.shape[1]), device=pe.device, dtype=pe.dtype, generator=generator)
    return pe * signs[batch.to(pe.device).long()]
