"""Eigensolvers behind the spectral encodings (:func:`omnipos.graph.laplacian_pe`,
:func:`omnipos.graph.magnetic_laplacian_pe`): batched dense ``eigh`` for many small graphs, and the lowest
eigenpairs of one large sparse graph in bounded memory.

Large graphs (more nodes than ``dense_max_nodes``), :func:`graph_eigenpairs`:

1. The graph is split into connected components (its Laplacian is block diagonal over them, so its spectrum is
   the union of theirs). A component's null space is known exactly where there is one (``sqrt(degree)`` for the
   normalised Laplacian, ones for ``D - A``) and is deflated, never computed; when there are at least as many
   such components as eigenpairs wanted (a graph of many pieces), the answer is the null space and nothing is
   solved at all.
2. Components of at most ``dense_max_nodes`` nodes are solved together by batched dense ``eigh`` (chunks of
   bounded memory); larger ones by one sparse solver each (``solver=``):

   - ``"shift-invert"``: Lanczos (ARPACK) on ``(L + sigma I)^-1`` with a sparse LU of ``L + sigma I``
     (``sigma = 1e-6 * bound``; SuperLU with the minimum-degree ordering of ``A + A^T``, no pivoting: the matrix
     is Hermitian positive definite). Converges in a few dozen solves whatever the spectral gap.
   - ``"lobpcg"``: block LOBPCG (SciPy) with a smoothed-aggregation AMG preconditioner (pyamg, the ``[graph]``
     extra; without it ``"lobpcg"`` raises ImportError) of ``L + 1e-5 I`` whose near-null space is the known
     null vector. The block starts ``count + 2`` wide and doubles until the eigenvalue at the cut ends inside it,
     so every copy of a repeated eigenvalue is found.
   - ``"lanczos"``: implicitly restarted Lanczos (ARPACK, single precision) on ``bound * I - L`` restricted to
     the complement of the null vector, largest algebraic: a few hundred matrix-vector products on graphs with a
     large spectral gap (hubs, expanders: Barabasi-Albert), where the factor fills in and AMG coarsens badly; a
     few thousand at 1e6 nodes, where the lowest eigenvalues crowd against the bulk (Barabasi-Albert, 100k
     nodes: the 9 lowest within 0.0016 of each other).

   Single-vector Krylov solvers (Lanczos, shift-invert) find one vector per distinct eigenvalue: in exact
   arithmetic they never see a second copy of a repeated one. Repeated eigenvalues come from symmetry, so
   ``"auto"`` looks for it first (:func:`symmetry_probe`: colour refinement, about one sort of the nodes a
   round) and picks per component:

   - a large spectral gap (the second Ritz value of a 30-step Lanczos probe at least :data:`GAP_PROBE` times
     ``bound``; the probe stops at the 10th step where the value is already below): Lanczos where the graph has
     no symmetry beyond twins, at any size; then, if the eigenvalues found show a repeated one or reach an
     eigenvalue of twin nodes, the block solver from its vectors. A
     symmetric graph (a hypercube) goes to the block solver, preconditioned by the LU where its reverse
     Cuthill-McKee envelope is at most :data:`FILL_BUDGET` entries, else AMG.
   - a small gap and an envelope of at most :data:`FILL_BUDGET` (meshes, geometric graphs, rings with chords):
     shift-invert; on a symmetric graph (a grid) block shift-invert, block Lanczos on the same inverse whose
     block grows past the largest multiplicity found (measured on 2-D grids of 1k nodes: ~1.3x single-vector
     shift-invert). (The envelope is computed only where a full triangle, ``n (n + 1) / 2``, exceeds the budget.)
   - a small gap and a larger envelope: LOBPCG + AMG (Lanczos without pyamg).

   Every solver starts from fixed vectors (a seeded generator), so results are the same run to run (pyamg's own
   random draws, for its spectral-radius estimates, come from a fixed seed: ``_pyamg_random_state``), and ends
   with a float64 Rayleigh-Ritz step on ``L`` (orthonormal vectors, eigenvalues as Rayleigh quotients).
   Accuracy reached (residual ``||L v - lambda v||``; eigenvalues are good to about its square, vectors to about
   residual / gap): shift-invert ~1e-12 (ARPACK at tolerance 1e-12), LOBPCG ~1e-8, Lanczos ~1e-5 (it runs in
   single precision, as PyG's LapPE does: twice as fast, and float32 is the output's precision); measured
   against dense float64 ``eigh`` in the tests. A residual above ``1e-4 * bound`` warns (RuntimeWarning).
   The whole solve runs inside :func:`omnipos.graph.small_eigh.one_thread` (most of it is small NumPy, SciPy and
   torch ops between the sparse products, which torch's OpenMP team only slowed down; the Lanczos, shift-invert
   and block shift-invert solvers' own dense products go through torch's MKL, which that limits, or NumPy without
   BLAS, not through NumPy's OpenBLAS, whose threads cannot be limited per calling thread and spin after each
   threaded call; LOBPCG, SciPy's, still uses NumPy's), and counts its steps on
   ``progress=`` (probes, factorisations, operator products and solves, LOBPCG iterations).
3. The components' eigenpairs are merged (the lowest ``count`` overall; the eigenspace at the cut is completed
   where the solvers found all of it) and given the canonical basis of :func:`omnipos.graph.canonical_basis`,
   computed per component and merged in pivot order, which equals the canonical basis of the whole graph.

Layout (one module per solver kind; this package's ``__init__`` re-exports the names other modules use):

- :mod:`.choice`: ``"auto"``'s choice by spectrum and :func:`sparse_eigenpairs`, one component's solve.
- :mod:`.dense`: batched dense ``eigh`` (:func:`batched_eigh`, :func:`solve_dense_groups`), a small component's
  every eigenpair.
- :mod:`.kernels`: what the sparse solvers share: progress steps, start vectors, products without NumPy's BLAS,
  the CSR product, deflation, Rayleigh-Ritz, eigenvalue clusters.
- :mod:`.arpack`: ARPACK on an operator; :mod:`.shift_invert`: ``"shift-invert"`` and :func:`rcm_envelope`;
  :mod:`.lanczos`: ``"lanczos"`` and the spectral-gap probe.
- :mod:`.lobpcg`: block LOBPCG with a growing block; :mod:`.block_krylov`: block shift-invert;
  :mod:`.multigrid`: the block solvers' preconditioners (LU, pyamg's AMG: the only module importing pyamg).
- :mod:`.device_krylov`: :func:`device_eigenpairs`, one large connected graph on its own device (CUDA):
  thick-restart block Lanczos on ``bound * I - L`` in float64 with torch sparse products (laplacian_pe's path for
  a large graph on CUDA; graphs of several components, and those it declines, stay on the CPU path).
- :mod:`.probe`: :func:`symmetry_probe`; :mod:`.components`: :func:`graph_eigenpairs`, a whole graph's
  components solved and merged in the canonical basis.
"""

from .choice import FILL_BUDGET, GAP_PROBE, SOLVERS, check_solver, sparse_eigenpairs
from .components import graph_eigenpairs
from .dense import batched_eigh, solve_dense_groups
from .device_krylov import device_eigenpairs
from .probe import SYMMETRY_ROUNDS, Symmetry, symmetry_probe
from .shift_invert import rcm_envelope

__all__ = ["FILL_BUDGET", "GAP_PROBE", "SOLVERS", "SYMMETRY_ROUNDS", "Symmetry", "batched_eigh", "check_solver",
           "device_eigenpairs", "graph_eigenpairs", "rcm_envelope", "solve_dense_groups", "sparse_eigenpairs",
           "symmetry_probe"]
