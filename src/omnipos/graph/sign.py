"""Sign and basis handling for eigenvector encodings: an eigenvector ``v`` and ``-v`` (for complex vectors, any
``e^{i phi} v``) are equally valid, and where an eigenvalue repeats, so is any orthonormal basis of its eigenspace.

- :func:`canonical_basis`: a deterministic basis of each eigenspace that depends only on the eigenspace (its
  projector), not on the basis an eigensolver happened to return. This is what makes ``laplacian_pe`` give the
  same numbers for a graph alone, in any batch, run to run and on either solver path. Definition below.
- :func:`canonical_sign`: the special case of a simple eigenvalue, for real vectors: the entry of largest absolute
  value is made positive; entries within ``tol`` of that largest magnitude tie, and the tie goes to the lowest
  node index.
- :func:`random_sign`: an independent random sign per graph and column (PyG's behaviour, one graph at a time).
- :func:`random_sign_flip`: the training-time augmentation (Dwivedi et al. 2020), per graph of a batch.

**The canonical basis.** Eigenvalues closer than ``value_tol * max(1, max |lambda|)`` to their neighbour form one
cluster (an eigenspace; ascending order). For a cluster with projector ``P = V V^H`` the basis is built by pivoted
Cholesky of ``P``: pick the node ``i`` with the largest ``P_ii`` (entries with ``sqrt(P_ii)`` within ``tol`` of the
largest tie, and the lowest node index wins), take ``u = P e_i / sqrt(P_ii)``, deflate ``P <- P - u u^H`` and
repeat. The first vector of a cluster is thus the projection of the unit vector of its "most central" node, and it
is real and positive at that node (``u_i = sqrt(P_ii)``); the vectors are orthonormal and span the eigenspace.
For a simple eigenvalue this is ``v * conj(v_i) / |v_i|`` with ``i`` the largest-magnitude entry: the sign rule of
:func:`canonical_sign` for real vectors, and "largest-magnitude entry real positive" for complex ones. A graph with
several connected components gets, for a repeated eigenvalue shared by components, vectors that each live on one
component (the projector is block diagonal, so each pivot's ``P e_i`` stays inside its component).

The rules, step by step, with their tolerances, are in :mod:`omnipos.graph.canonical_spec` (R1-R6), which both
backends follow; :func:`canonical_basis` is the one entry point and chooses the backend: float64 and complex128
vectors on the CPU are handed, where numba is installed (``omnipos[fast]``), to the compiled
:mod:`omnipos.graph.canonical_kernel` (graph by graph; on 10,000 molecules ~10 ms instead of ~0.1 s of tensor ops;
one 1,024-node graph ~0.2 ms instead of ~1 ms); other dtypes and devices, tensors that need gradients and
numba-free installs run the tensor program below.

Where the definition is ambiguous it depends on node order (not permutation-equivariant): tied pivots (e.g. a
cycle, where every node looks the same) and eigenvalue gaps right at ``value_tol``. Two solvers that return the
same eigenspace to ~1e-10 give the same canonical vectors to about that accuracy, away from such ties.
"""

from __future__ import annotations

from typing import Any

import torch

from ..core import check_finite, check_integer_tensor
from .canonical_spec import CANONICAL_TOL, EIGENVALUE_TOL, NOISE_TOL, starts_cluster, ties_largest
from .small_eigh import compiled_kernels_enabled

__all__ = ["SIGNS", "CANONICAL_TOL", "EIGENVALUE_TOL", "NOISE_TOL", "canonical_basis", "canonical_sign",
           "eigenvalue_clusters", "random_sign", "random_sign_flip", "round_noise"]

SIGNS = ("canonical", "random", "none")


def round_noise(values: torch.Tensor, tol: float = NOISE_TOL) -> torch.Tensor:
    """``values`` with entries (real and imaginary parts separately) of magnitude below ``tol`` set to 0."""
    if values.is_complex():
        return torch.complex(round_noise(values.real, tol), round_noise(values.imag, tol))
    return torch.where(values.abs() < tol, torch.zeros((), dtype=values.dtype, device=values.device), values)


def _is_compiling() -> bool:
    return bool(torch.compiler.is_compiling())


def _check_vectors(vectors: Any, name: str = "vectors", check_values: bool = True) -> torch.Tensor:
    if not isinstance(vectors, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(vectors).__name__}")
    if not (vectors.is_floating_point() or vectors.is_complex()):
        raise TypeError(f"{name} must be a floating or complex tensor, got dtype {vectors.dtype}")
    if vectors.ndim < 2:
        raise ValueError(f"{name} must have shape [..., n, k] (eigenvectors as columns), got {tuple(vectors.shape)}")
    if check_values and vectors.device.type != "meta" and not _is_compiling():
        check_finite(torch.view_as_real(vectors) if vectors.is_complex() else vectors, name)
    return vectors


def canonical_sign(vectors: torch.Tensor, *, tol: float = CANONICAL_TOL) -> torch.Tensor:
    """Signs ``[..., k]`` (+1/-1) making the largest-magnitude entry of each column of real ``vectors [..., n, k]``
    positive (ties within ``tol``: the lowest index wins). All-zero columns get +1.

    Raises ``ValueError`` for fewer than 2 dimensions or non-finite entries, ``TypeError`` for non-tensors and
    integer / complex dtypes (for complex vectors use :func:`canonical_basis`, which fixes a phase).
    """
    vectors = _check_vectors(vectors)
    if vectors.is_complex():
        raise TypeError("canonical_sign needs real vectors; for complex ones canonical_basis fixes a phase")
    if not vectors.shape[-2]:
        return torch.ones(vectors.shape[:-2] + vectors.shape[-1:], dtype=vectors.dtype, device=vectors.device)
    magnitude = vectors.abs()
    candidate = ties_largest(magnitude, magnitude.amax(dim=-2, keepdim=True), tol)  # canonical_spec R3
    first = candidate.to(torch.uint8).argmax(dim=-2, keepdim=True)  # argmax returns the first maximum
    sign = torch.sign(vectors.gather(-2, first)).squeeze(-2)
    return torch.where(sign == 0, torch.ones_like(sign), sign)


def eigenvalue_clusters(values: torch.Tensor, value_tol: float = EIGENVALUE_TOL, *,
                        scale: float | torch.Tensor | None = None) -> torch.Tensor:
    """Cluster index ``[..., M]`` (0, 0, 1, 2, 2, ...) of ascending ``values [..., M]``: a new cluster starts where
    the gap to the previous value exceeds ``value_tol * scale``; ``scale`` defaults to ``max(1, max |lambda|)``
    per leading index (the spectral encodings pass their spectrum's bound, the same on every solver path)."""
    if values.shape[-1] == 0:
        return torch.zeros_like(values, dtype=torch.long)
    if scale is None:
        scale = values.abs().amax(dim=-1, keepdim=True).clamp_min(1.0)
    elif isinstance(scale, torch.Tensor):
        scale = scale.to(values.dtype).reshape(scale.shape + (1,) * (values.ndim - scale.ndim))
    starts = torch.ones_like(values, dtype=torch.long)
    starts[..., 1:] = starts_cluster(values.diff(dim=-1), value_tol, scale).long()  # R1
    return starts.cumsum(-1) - 1


def canonical_basis(vectors: torch.Tensor, values: torch.Tensor, count: int | None = None, *,
                    tol: float = CANONICAL_TOL, value_tol: float = EIGENVALUE_TOL,
                    scale: float | torch.Tensor | None = None, clusters: torch.Tensor | None = None,
                    return_pivots: bool = False, check: bool = True, compiled: bool = True,
                    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The canonical basis (module docstring) of the eigenspaces of orthonormal eigenvectors.

    Args:
        vectors: ``[..., n, M]`` real or complex, orthonormal columns, in ascending eigenvalue order.
        values: ``[..., M]`` their (real, ascending) eigenvalues.
        count: return the first ``count`` canonical columns (default ``M``). The eigenspace of column
            ``count - 1`` must be complete within the ``M`` columns given (one that reaches column ``M - 1`` is
            taken as complete).
        tol: pivot tie tolerance (on ``sqrt(P_ii)``).
        value_tol: eigenvalue cluster tolerance, relative to ``scale``.
        scale: ``[...]`` or a float: the eigenvalue scale (default ``max(1, max |lambda|)`` per leading index).
        clusters: ``[..., M]`` non-decreasing eigenspace ids of the columns, instead of clustering ``values``.
        check: refuse non-finite vectors (a host sync; the encodings pass False for their own solver output).
        return_pivots: also return each column's pivot node ``[..., count]`` (int64) and pivot magnitude
            ``sqrt(P_ii)`` at its selection ``[..., count]`` (what a merge of block-diagonal pieces orders by).
        compiled: let the compiled kernel serve the call where it can (CPU float64 / complex128, no gradient,
            numba installed and on); False: the tensor program always (the same pivots; real columns of simple
            eigenvalues bit for bit). One graph's basis in a process that has not loaded numba yet is cheaper
            without it (~0.2 s to load numba against ~1 ms of the tensor program on a 1,024-node graph).

    Returns:
        ``[..., n, count]``, same dtype and device (and the pivots when asked).
    """
    vectors = _check_vectors(vectors, check_values=check)
    if not isinstance(values, torch.Tensor) or values.shape != vectors.shape[:-2] + vectors.shape[-1:]:
        raise ValueError(f"values must be a tensor of shape {tuple(vectors.shape[:-2] + vectors.shape[-1:])}, "
                         f"got {getattr(values, 'shape', type(values).__name__)}")
    if vectors.device.type == "meta" or values.device.type == "meta":
        raise ValueError("canonical_basis picks pivots from the values of vectors; vectors or values is on the meta "
                         "device (shape only)")
    lead, (n, width) = vectors.shape[:-2], vectors.shape[-2:]
    count = width if count is None else int(count)
    if not 0 <= count <= width:
        raise ValueError(f"count must be in 0..{width}, got {count}")
    graphs = 1
    for size in lead:
        graphs *= size
    w = vectors.reshape(graphs, n, width)
    lam = values.reshape(graphs, width).to(torch.float64)
    out = torch.zeros(graphs, n, count, dtype=w.dtype, device=w.device)
    pivot_node = torch.zeros(graphs, count, dtype=torch.long, device=w.device)
    pivot_size = torch.zeros(graphs, count, dtype=torch.float64, device=w.device)
    if clusters is None:
        cluster = eigenvalue_clusters(lam, value_tol,
                                      scale=scale.reshape(-1) if isinstance(scale, torch.Tensor) else scale)
    else:
        cluster = clusters.reshape(graphs, width).to(device=w.device, dtype=torch.long)
        cluster = cluster - cluster[:, :1]
    if not isinstance(compiled, bool):
        raise TypeError(f"compiled must be a bool, got {type(compiled).__name__}")
    kernel = (_compiled() if compiled and w.device.type == "cpu" and w.dtype in _KERNEL_DTYPES
              and not w.requires_grad else None)
    if kernel is not None and count and n and graphs:  # the backend choice (canonical_spec): the compiled kernel
        columns, nodes, sizes = kernel(w.resolve_neg().numpy(), cluster.numpy(), count, tol)
        out, pivot_node, pivot_size = torch.from_numpy(columns), torch.from_numpy(nodes), torch.from_numpy(sizes)
    elif count and n and graphs:  # ... or the tensor program
        # graphs whose first `count` columns are all simple eigenvalues: the sign / phase rule (R4), column by column
        head = cluster[:, :count + 1]
        simple = (head[:, 1:] != head[:, :-1]).all(1)
        fast = simple.nonzero().squeeze(1)
        if fast.numel():
            out[fast], pivot_node[fast], pivot_size[fast] = _simple_columns(w[fast, :, :count], tol)
        slow = (~simple).nonzero().squeeze(1)
        if slow.numel():
            part = torch.zeros(slow.numel(), n, count, dtype=w.dtype, device=w.device)
            part_node = torch.zeros(slow.numel(), count, dtype=torch.long, device=w.device)
            part_size = torch.zeros(slow.numel(), count, dtype=torch.float64, device=w.device)
            _pivoted_cholesky(w[slow], cluster[slow], count, tol, part, part_node, part_size)
            out[slow], pivot_node[slow], pivot_size[slow] = part, part_node, part_size
    out = out.reshape(lead + (n, count))
    if return_pivots:
        return out, pivot_node.reshape(lead + (count,)), pivot_size.reshape(lead + (count,))
    return out


#: The dtypes the compiled kernel takes (on the CPU, without gradients).
_KERNEL_DTYPES = (torch.float64, torch.complex128)


def _compiled() -> Any:
    """:func:`omnipos.graph.canonical_kernel.canonical_columns`, or None where numba is not installed or is
    switched off (``OMNIPOS_DISABLE_NUMBA=1``, :func:`omnipos.graph.small_eigh.compiled_kernels_enabled`)."""
    if not compiled_kernels_enabled():
        return None
    try:
        from .canonical_kernel import canonical_columns
    except ImportError:
        return None
    return canonical_columns


def _simple_columns(v: torch.Tensor, tol: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each column of ``v [G, n, count]`` as an eigenspace of its own (canonical_spec R4): ``v * conj(v_i) / |v_i|``
    with ``i`` the largest-magnitude entry of the column (ties within ``tol``: the lowest index); with the pivot
    nodes and magnitudes ``[G, count]``."""
    magnitude = v.abs()  # R2
    largest = magnitude.amax(dim=-2, keepdim=True)
    # R3 (argmax returns the first maximum: the lowest node among the candidates)
    pivot = ties_largest(magnitude, largest, tol).to(torch.uint8).argmax(dim=-2, keepdim=True)  # [G, 1, count]
    entry = v.gather(-2, pivot)
    size = entry.abs()
    phase = torch.where(size > 0, entry.conj() / size.clamp_min(torch.finfo(size.dtype).tiny), 1.0)  # zero: 1
    return v * phase.to(v.dtype), pivot.squeeze(-2), size.squeeze(-2).to(torch.float64)


def _pivoted_cholesky(w: torch.Tensor, cluster: torch.Tensor, count: int, tol: float, out: torch.Tensor,
                      pivot_node: torch.Tensor, pivot_size: torch.Tensor) -> None:
    """Fill ``out [G, n, count]`` with the canonical columns (canonical_spec R5), all clusters of all graphs at once:
    iteration ``t`` takes the ``t``-th pivot of every cluster that still owes an output column. ``cluster [G,
    M]``: ids from 0, non-decreasing."""
    device = w.device
    # only the clusters that reach into the first `count` columns matter
    clusters = int(cluster[:, count - 1].max()) + 1
    width = int((cluster < clusters).sum(-1).max())
    w, cluster = w[..., :width], cluster[:, :width]
    member = torch.nn.functional.one_hot(cluster.clamp_max(clusters), clusters + 1)[..., :clusters]  # [G, M, K]
    size = member.sum(1)  # [G, K]
    start = torch.where(size > 0, member.argmax(1), width)  # first column of each cluster
    rank = torch.arange(count, device=device) - start.gather(1, cluster[:, :count])
    rounds = int(rank.max()) + 1
    real_dtype = torch.float64 if w.dtype in (torch.float64, torch.complex128) else torch.float32
    columns = torch.arange(count, device=device)
    work = w
    index = None  # graphs still owing columns (None: all)
    for t in range(rounds):
        active = (size > t) & (start + t < count)  # [G', K]
        if t:  # after the first round only graphs with repeated eigenvalues are left: work on those alone
            left = active.any(1).nonzero().squeeze(1)
            if left.numel() < active.shape[0]:
                work, member, size, start, active = (x[left] for x in (work, member, size, start, active))
                index = left if index is None else index[left]
        g = work.shape[0]
        power = work.real.square() + work.imag.square() if work.is_complex() else work.square()
        norms = (power.to(real_dtype) @ member.to(real_dtype)).clamp_min(0).sqrt()  # [G', n, K]: sqrt(P_ii), R2
        largest = norms.amax(dim=1, keepdim=True)
        pivot = ties_largest(norms, largest, tol).to(torch.uint8).argmax(dim=1)  # [G', K], R3: the lowest node
        rows = work.gather(1, pivot.unsqueeze(-1).expand(g, clusters, width))
        rows = rows * member.transpose(1, 2).to(rows.dtype)  # [G', K, M]: the pivot's row, in its cluster
        size_t = norms.gather(1, pivot.unsqueeze(1)).squeeze(1)  # [G', K]
        # a = W[i, :] / s, 0 where s = 0 (and for clusters that owe nothing)
        live = active & (size_t > 0)
        safe = size_t.clamp_min(torch.finfo(size_t.dtype).tiny)
        scale = torch.where(live, 1.0 / safe, 0.0)
        unit = rows * scale.unsqueeze(-1).to(rows.dtype)  # a_hat^H as rows (zero for inactive clusters)
        # a simple eigenvalue beside repeated ones (R4): divided, so that for real vectors its column is the sign
        # rule's v * (v_i / |v_i|) = +-v exactly, as the fast path and the kernel give it (a product by 1 / s is
        # off by an ulp in some entries). Only the pivots' rows [G', K, M]: cheap.
        single = (live & (size == 1)).unsqueeze(-1)
        unit = torch.where(single, rows / safe.unsqueeze(-1).to(rows.dtype), unit)
        vectors = work @ unit.conj().transpose(1, 2)  # [G', n, K]: u = W a_hat = P e_i / sqrt(P_ii)
        if t + 1 < rounds:
            work = work - vectors @ unit
        place = (active.unsqueeze(-1) & ((start + t).unsqueeze(-1) == columns))  # [G', K, count]
        placed = vectors @ place.to(w.dtype)
        chosen_node = (pivot.unsqueeze(-1) * place).sum(1)
        chosen_size = (size_t.unsqueeze(-1).to(torch.float64) * place).sum(1)
        if index is None:
            out.add_(placed)
            pivot_node.add_(chosen_node)
            pivot_size.add_(chosen_size)
        else:
            out.index_add_(0, index, placed)
            pivot_node.index_add_(0, index, chosen_node)
            pivot_size.index_add_(0, index, chosen_size)


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
        pe: node encodings ``[N, k]`` (e.g. Laplacian eigenvectors), floating.
        batch: ``[N]`` graph id of each node (PyG's batch vector, ids >= 0); ``None`` means one graph. Signs are
            drawn for the distinct ids present, in increasing id order (ids need not be contiguous).
        generator: a ``torch.Generator`` for reproducible flips.

    Returns:
        ``[N, k]``, same dtype and device; a new tensor.
    """
    if not isinstance(pe, torch.Tensor):
        raise TypeError(f"pe must be a [N, k] tensor, got {type(pe).__name__}")
    if pe.ndim != 2:
        raise ValueError(f"pe must be a [N, k] tensor, got shape {tuple(pe.shape)}")
    if not (pe.is_floating_point() or pe.is_complex()):
        raise TypeError(f"pe must be a floating tensor, got dtype {pe.dtype}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if pe.device.type != "meta" and not _is_compiling():
        check_finite(torch.view_as_real(pe) if pe.is_complex() else pe, "pe")
    if batch is None:
        return pe * random_sign((1, pe.shape[1]), device=pe.device, dtype=pe.dtype, generator=generator)
    if not isinstance(batch, torch.Tensor):
        raise TypeError(f"batch must be a [N] = [{pe.shape[0]}] integer tensor, got {type(batch).__name__}")
    check_integer_tensor(batch, "batch", "integer graph ids")
    if batch.shape != pe.shape[:1]:
        raise ValueError(f"batch must have shape [N] = [{pe.shape[0]}], got {tuple(batch.shape)}")
    if batch.device.type == "meta" or pe.device.type == "meta":
        raise ValueError("random_sign_flip needs the values of batch (which graph each node is in); pe or batch "
                         "is on the meta device")
    batch = batch.to(pe.device).long()
    if batch.numel() and int(batch.min()) < 0:
        raise ValueError(f"batch must hold graph ids >= 0, found {int(batch.min())}")
    ids, graph = torch.unique(batch, sorted=True, return_inverse=True)
    signs = random_sign((ids.numel(), pe.shape[1]), device=pe.device, dtype=pe.dtype, generator=generator)
    return pe * signs[graph]
