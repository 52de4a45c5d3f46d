"""What the 1e6-node Barabasi-Albert LapPE (issue 25's last missed row, < 60 s) would take on this machine: its
two halves measured apart, and the alternatives to each measured on the same graph in the same process.

The solve (``laplacian_pe(k=8)`` -> single-precision ARPACK on ``bound * I - L``, 2,300-2,500 products) splits
into sparse products and ARPACK's own work (re-orthogonalising each new vector against a 1e6 x 27 float32
basis, restarts). Measured here:

(p) one product ``L @ x`` (float32, 7e6 stored entries with the diagonal): SciPy's CSR kernel (what omnipos
    calls), a compiled row-parallel CSR product on 1 and 2 threads (numba; the same bits as SciPy's), torch's CSR
    product, and SciPy's kernel on the graph renumbered by degree; and one compiled step of Lanczos without
    re-orthogonalisation whose product reads only the adjacency pattern (what the plain recurrence of (l) would
    cost, fused);
(o) one classical Gram-Schmidt pass against the 27-vector float32 basis, per vector, for blocks of 1-16 vectors
    (a block Lanczos reads the basis once per block: BLAS-3 instead of BLAS-2);
(a) ``--arpack``: the whole ``laplacian_pe`` call with OpenBLAS on 1 and on 2 threads (each in its own process,
    the variable set before NumPy loads), products timed inside, ARPACK's own work = the rest;
(l) ``--plain``: the solver step alone, ARPACK as omnipos runs it (single precision, 9 vectors, basis of 27,
    tolerance 1e-5, on ``2 I - L - 2 u u^T``) against Lanczos without re-orthogonalisation (``_plain_lanczos.py``,
    double precision, two passes), each with its residuals ``||L v - lambda v||`` after a float64 Rayleigh-Ritz;
(b) ``--blocks``: products a block Lanczos needs (blocks of 1, 4, 8, 16; full re-orthogonalisation, no
    restarts: the intrinsic count) for the same 8 eigenpairs to residual 1e-5; a float64 prototype that keeps its
    whole basis, so run it at 20k-100k nodes (``--nodes 20000``: ~1.5 minutes).

    python benchmarks/probe_lanczos_1e6.py [--nodes 1000000] [--arpack] [--plain] [--blocks]

Writes ``benchmarks/results/lanczos_1e6.json`` (other sizes: ``lanczos_<nodes>.json``). Needs numba (``omnipos[fast]``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy is imported; (a) sets its own per process

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import RESULTS, time_call  # noqa: E402
from bench_graph import large_graph  # noqa: E402

SHAPE = "Barabasi-Albert m=3"


def spectral_pieces(n: int) -> tuple[sp.csr_matrix, sp.csr_matrix, np.ndarray, np.ndarray]:
    """The graph's normalised Laplacian ``L = I - S A S`` (float64 CSR, its diagonal stored), ``S A S`` itself
    (``S = D^-1/2``: the adjacency's pattern), the degrees and ``L``'s unit null vector ``sqrt(d) / ||sqrt(d)||``."""
    edges, n = large_graph(SHAPE, n)
    edges = edges.numpy()
    adjacency = sp.csr_matrix((np.ones(edges.shape[1]), (edges[0], edges[1])), shape=(n, n))
    degree = np.asarray(adjacency.sum(1)).ravel()
    scale = sp.diags(1.0 / np.sqrt(degree))
    scaled = (scale @ adjacency @ scale).tocsr()
    null = np.sqrt(degree) / np.linalg.norm(np.sqrt(degree))
    return (sp.identity(n) - scaled).tocsr(), scaled, degree, null


def row_parallel_product():
    import numba

    @numba.njit(parallel=True, nogil=True, cache=False)
    def product(indptr, indices, data, x, out):
        for row in numba.prange(out.shape[0]):
            total = data.dtype.type(0)
            for j in range(indptr[row], indptr[row + 1]):
                total += data[j] * x[indices[j]]
            out[row] = total

    return numba, product


def fused_plain_step():
    """One step of Lanczos without re-orthogonalisation on ``I + S A S - 2 u u^T`` (the shifted normalised
    Laplacian, ``S = D^-1/2``), compiled: the product from the adjacency pattern alone (no stored values; unsigned
    indices, so numba emits no negative-index wrap-around per gather) fused with the recurrence; three passes over
    the rows. Returns ``(alpha, beta, u . q_next)``."""
    import numba

    @numba.njit(nogil=True, error_model="numpy", cache=False)
    def step(indptr, indices, scale, null, q, scaled_q, previous, w, beta, null_weight):
        alpha = 0.0
        for i in range(q.size):
            total = 0.0
            for j in range(indptr[i], indptr[i + 1]):
                total += scaled_q[indices[j]]
            value = q[i] + scale[i] * total - null_weight * null[i] - beta * previous[i]
            w[i] = value
            alpha += q[i] * value
        norm2 = 0.0
        for i in range(q.size):
            value = w[i] - alpha * q[i]
            w[i] = value
            norm2 += value * value
        beta = np.sqrt(norm2)
        along = 0.0
        for i in range(q.size):
            previous[i] = q[i]
            q[i] = w[i] / beta
            scaled_q[i] = scale[i] * q[i]
            along += null[i] * q[i]
        return alpha, beta, along

    return step


def products(n: int) -> list[dict]:
    from scipy.sparse._sparsetools import csr_matvec

    lap, scaled, degree, null = spectral_pieces(n)
    lap = lap.astype(np.float32)
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    out = np.empty(n, np.float32)

    def scipy_kernel(matrix, vector):
        out.fill(0)
        csr_matvec(n, n, matrix.indptr, matrix.indices, matrix.data, vector, out)
        return out

    rows = [{"part": "product", "variant": "SciPy CSR kernel (omnipos)",
             "ms": 1e3 * time_call(lambda: scipy_kernel(lap, x), warmup=2, repeats=15)}]
    reference = scipy_kernel(lap, x).copy()
    pattern_ptr, pattern_idx = scaled.indptr.astype(np.uint64), scaled.indices.astype(np.uint32)
    scale = 1.0 / np.sqrt(degree)
    q = x.astype(np.float64) / np.linalg.norm(x)
    scaled_q, previous, w = scale * q, np.zeros(n), np.empty(n)
    step = fused_plain_step()  # (before the row-parallel kernel: numba's idle threads spin for a while after it)
    # checked first against the same step in NumPy (from q, with no previous vector): (I + S A S - 2 u u^T) q
    pattern = scaled.copy()
    pattern.data[:] = 1.0
    image = q + scale * (pattern @ (scale * q)) - 2.0 * null * (null @ q)
    alpha = q @ image
    expected_beta = np.linalg.norm(image - alpha * q)
    got_alpha, got_beta, _ = step(pattern_ptr, pattern_idx, scale, null, q.copy(), scaled_q.copy(), np.zeros(n),
                                  w, 0.0, 2.0 * (null @ q))
    assert abs(got_alpha - alpha) < 1e-10 and abs(got_beta - expected_beta) < 1e-10, "the fused step must be a step"
    rows.append({"part": "plain Lanczos step", "variant": "compiled, pattern-only product fused with the recurrence "
                 "(float64 vectors)", "ms": 1e3 * time_call(lambda: step(pattern_ptr, pattern_idx, scale, null, q,
                                                                          scaled_q, previous, w, 0.3, 0.0),
                                                              warmup=2, repeats=21)})
    numba, parallel = row_parallel_product()
    for threads in (1, 2):
        numba.set_num_threads(threads)
        parallel(lap.indptr, lap.indices, lap.data, x, out)
        assert np.array_equal(out, reference), "the row-parallel product must give SciPy's bits"
        rows.append({"part": "product", "variant": f"compiled row-parallel, {threads} thread(s)",
                     "ms": 1e3 * time_call(lambda: parallel(lap.indptr, lap.indices, lap.data, x, out),
                                           warmup=2, repeats=15)})
    csr = torch.sparse_csr_tensor(torch.from_numpy(lap.indptr.astype(np.int64)),
                                  torch.from_numpy(lap.indices.astype(np.int64)), torch.from_numpy(lap.data), (n, n))
    xt = torch.from_numpy(x)
    with_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows.append({"part": "product", "variant": "torch CSR, 1 thread",
                 "ms": 1e3 * time_call(lambda: csr @ xt, warmup=2, repeats=15)})
    torch.set_num_threads(with_threads)
    order = np.argsort(-degree, kind="stable")
    renumbered = lap[order][:, order].tocsr()
    xr = x[order].copy()
    rows.append({"part": "product", "variant": "SciPy CSR kernel, nodes by degree",
                 "ms": 1e3 * time_call(lambda: scipy_kernel(renumbered, xr), warmup=2, repeats=15)})
    return rows


def orthogonalisation(n: int, basis: int = 27) -> list[dict]:
    rng = np.random.default_rng(0)
    v = np.asfortranarray(rng.standard_normal((n, basis)).astype(np.float32))
    rows = []
    for block in (1, 4, 8, 16):
        w = np.asfortranarray(rng.standard_normal((n, block)).astype(np.float32))
        seconds = time_call(lambda: w - v @ (v.T @ w), warmup=1, repeats=7)
        rows.append({"part": "orthogonalisation pass", "variant": f"block of {block}", "ms": 1e3 * seconds,
                     "ms_per_vector": 1e3 * seconds / block})
    return rows


def arpack_child(n: int) -> None:
    """(a), in a child process: the whole call, its products timed inside."""
    import omnipos.graph.eigensolvers.lanczos as lanczos
    from omnipos.graph import laplacian_pe

    spent = {"products": 0, "seconds": 0.0}
    make_product = lanczos.fast_matvec  # the one function the Lanczos path takes its product from

    def timed(matrix, reuse=False):
        product = make_product(matrix, reuse)

        def call(x):
            started = time.perf_counter()
            result = product(x)
            spent["seconds"] += time.perf_counter() - started
            spent["products"] += 1
            return result

        return call

    lanczos.fast_matvec = timed
    edges, n = large_graph(SHAPE, n)
    torch.set_num_threads(1)
    wall, cpu = time.perf_counter(), time.process_time()
    laplacian_pe(edges, n, 8)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "products": spent["products"],
                      "product_s": spent["seconds"], "arpack_own_s": wall - spent["seconds"]}))


def arpack(n: int) -> list[dict]:
    rows = []
    for threads in ("1", "2"):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=threads)
        done = subprocess.run([sys.executable, __file__, "--nodes", str(n), "--child"], env=env,
                              capture_output=True, text=True, check=True)
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append({"part": "laplacian_pe k=8", "variant": f"OpenBLAS {threads} thread(s)", **measured})
    return rows


def solvers(n: int) -> list[dict]:
    """(l): ARPACK as omnipos runs it vs the plain recurrence, on the same operator, solver step alone."""
    from _plain_lanczos import plain_lanczos
    from scipy.sparse.linalg import LinearOperator, eigsh

    lap, _, _, null = spectral_pieces(n)
    width, bound = 9, 2.0
    rows = []

    def shifted(dtype):
        matrix = (bound * sp.identity(n, format="csr") - lap).tocsr().astype(dtype)
        u = null.astype(dtype)
        counted = {"products": 0}

        def matvec(x):
            counted["products"] += 1
            return matrix @ x - dtype.type(bound) * u * np.vdot(u, x)

        return matvec, counted

    def residual(vectors):
        basis, _ = np.linalg.qr(vectors - np.outer(null, null @ vectors))
        values, small = np.linalg.eigh(basis.T @ (lap @ basis))
        ritz = basis @ small
        return float(np.linalg.norm(lap @ ritz - ritz * values, axis=0).max()), values

    matvec, counted = shifted(np.dtype(np.float32))
    operator = LinearOperator((n, n), matvec=matvec, dtype=np.float32)
    start = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    began = time.perf_counter()
    _, vectors = eigsh(operator, k=width, which="LA", v0=start, tol=1e-5, ncv=3 * width)
    seconds = time.perf_counter() - began
    worst, arpack_values = residual(vectors.astype(np.float64))
    rows.append({"part": "solver alone", "variant": "ARPACK, single precision (omnipos)", "s": seconds,
                 "products": counted["products"], "residual": worst})
    matvec, counted = shifted(np.dtype(np.float64))
    began = time.perf_counter()
    vectors = plain_lanczos(matvec, np.random.default_rng(0).standard_normal(n), width, tol=1e-5,
                            operator_dtype=np.dtype(np.float64), max_steps=10_000)
    seconds = time.perf_counter() - began
    worst, plain_values = residual(vectors)
    rows.append({"part": "solver alone", "variant": "plain Lanczos, double precision, two passes", "s": seconds,
                 "products": counted["products"], "residual": worst,
                 "eigenvalues_vs_arpack": float(np.abs(plain_values - arpack_values).max())})
    return rows


def block_products(n: int, block: int, wanted: int = 8, tol: float = 1e-5, limit: int = 6000) -> int | None:
    """(b): products until the ``wanted`` largest eigenpairs of ``S = D^-1/2 A D^-1/2`` below the trivial one
    (``L``'s lowest non-trivial) have residuals ``<= tol``, block Lanczos with a whole, re-orthogonalised basis
    (checked every ~40 products); None past ``limit``."""
    _, scaled, _, null = spectral_pieces(n)

    def apply(x):
        return scaled @ x - np.outer(null, null @ x)

    start = np.random.default_rng(0).standard_normal((n, block))
    basis = [np.linalg.qr(start - np.outer(null, null @ start))[0]]
    images: list[np.ndarray] = []
    projected = np.zeros((0, 0))
    products = 0
    while products < limit:
        image = apply(basis[-1])
        products += block
        images.append(image)
        every = np.hstack(basis)
        column = every.T @ image
        m = every.shape[1]
        grown = np.zeros((m, m))
        grown[:m - block, :m - block] = projected
        grown[:, m - block:] = column
        grown[m - block:, :] = column.T
        projected = grown
        if (m // block) % max(1, 40 // block) == 0:
            values, small = np.linalg.eigh(projected)
            top = small[:, -wanted:]
            residual = np.hstack(images) @ top - every @ (top * values[-wanted:])
            if np.linalg.norm(residual, axis=0).max() < tol:
                return products
        for _ in range(2):  # classical Gram-Schmidt, twice
            image = image - every @ (every.T @ image)
        basis.append(np.linalg.qr(image)[0])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--arpack", action="store_true", help="(a): two whole solves, ~3 minutes at 1e6 nodes")
    parser.add_argument("--plain", action="store_true", help="(l): ARPACK vs plain Lanczos, ~4 minutes at 1e6 nodes")
    parser.add_argument("--blocks", action="store_true", help="(b): block Lanczos product counts (use ~20k nodes)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        arpack_child(args.nodes)
        return
    rows = products(args.nodes) + orthogonalisation(args.nodes)
    if args.arpack:
        rows += arpack(args.nodes)
    if args.plain:
        rows += solvers(args.nodes)
    if args.blocks:
        rows += [{"part": "block Lanczos, no restarts", "variant": f"block of {block}",
                  "products": block_products(args.nodes, block)} for block in (1, 4, 8, 16)]
    for row in rows:
        print("  ".join(f"{key}={value:.3g}" if isinstance(value, float) else f"{key}={value}"
                        for key, value in row.items()))
    out = RESULTS / ("lanczos_1e6.json" if args.nodes == 1_000_000 else f"lanczos_{args.nodes}.json")
    out.write_text(json.dumps({"benchmark": "lanczos_1e6", "nodes": args.nodes, "shape": SHAPE,
                               "torch": torch.__version__, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
