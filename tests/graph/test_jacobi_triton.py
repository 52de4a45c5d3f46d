"""The batched Jacobi eigensolver (omnipos.graph.jacobi_triton): its Triton kernel under Triton's interpreter against
numpy.linalg.eigh on real drug molecules' Laplacians and on matrices with repeated eigenvalues, laplacian_pe through
it against the CPU path, the CUDA path's Python on fake CUDA tensors (no host tensor, no sync), the kernel through
Triton's whole CUDA pipeline to a cubin, bad input; on a GPU (gpu), LapPE on CUDA over 10,000 molecule-like graphs
against the CPU."""

import textwrap

import numpy as np
import pytest
import torch
from support.host_work import KernelWatch
from support.molecules import drug_bonds
from support.triton_interpreter import interpreter_or_skip, run_interpreted

from omnipos.graph import jacobi_triton as jt
from omnipos.graph import laplacian_pe

# The checks shared by the interpreted scripts: eigenvalues against numpy.linalg.eigh, each eigenspace's projector,
# the canonical basis of omnipos.graph.sign from either solver's vectors, orthonormality, the padding left zero.
CHECKS = textwrap.dedent('''
    import numpy as np
    import torch
    from omnipos.graph import canonical_basis
    from omnipos.graph.jacobi_triton import batched_jacobi_eigh, jacobi_eigh

    def compare(matrices, values, vectors, info, sizes=None, value_tol=1e-12, space_tol=1e-10):
        """Each matrix's eigenpairs against numpy's, eigenspace by eigenspace; returns the worst errors."""
        worst = dict(values=0.0, projectors=0.0, canonical=0.0, orthonormal=0.0)
        assert (info >= 0).all(), info
        for g in range(matrices.shape[0]):
            n = matrices.shape[-1] if sizes is None else int(sizes[g])
            a = matrices[g, :n, :n].double().numpy()
            want_values, want_vectors = np.linalg.eigh(a)
            got_values, got_vectors = values[g, :n].double().numpy(), vectors[g, :n, :n].double().numpy()
            scale = max(1.0, np.abs(want_values).max(initial=0.0))
            worst["values"] = max(worst["values"], np.abs(got_values - want_values).max(initial=0.0) / scale)
            worst["orthonormal"] = max(worst["orthonormal"],
                                       np.abs(got_vectors.T @ got_vectors - np.eye(n)).max(initial=0.0))
            start = 0
            while start < n:  # eigenspaces: numpy's eigenvalues closer than 1e-8 * scale
                end = start + 1
                while end < n and want_values[end] - want_values[end - 1] <= 1e-8 * scale:
                    end += 1
                p = got_vectors[:, start:end] @ got_vectors[:, start:end].T
                q = want_vectors[:, start:end] @ want_vectors[:, start:end].T
                worst["projectors"] = max(worst["projectors"], np.abs(p - q).max())
                start = end
            if n:
                ours = canonical_basis(torch.from_numpy(got_vectors), torch.from_numpy(got_values), scale=scale)
                theirs = canonical_basis(torch.from_numpy(want_vectors), torch.from_numpy(want_values), scale=scale)
                worst["canonical"] = max(worst["canonical"], float((ours - theirs).abs().max()))
            if sizes is not None:  # the padding stays zero
                assert not values[g, n:].any() and not vectors[g, n:].any() and not vectors[g, :, n:].any()
        assert worst["values"] <= value_tol and worst["orthonormal"] <= 1e-13, worst
        assert worst["projectors"] <= space_tol and worst["canonical"] <= space_tol, worst
        return worst

    def laplacians(molecules, normalized):
        """The molecules' Laplacians from their bond lists: I - D^-1/2 A D^-1/2 (bond orders as weights, an
        isolated atom's row that of I) or D - A (unweighted)."""
        out = []
        for _, n, bonds, orders in molecules:
            a = np.zeros((n, n))
            for (i, j), w in zip(bonds, orders):
                a[i, j] = a[j, i] = w if normalized else 1.0
            d = a.sum(1)
            if normalized:
                s = np.where(d > 0, 1 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
                out.append(np.eye(n) - s[:, None] * a * s[None, :])
            else:
                out.append(np.diag(d) - a)
        return out

    def padded(matrices):
        """One [G, N, N] float64 batch of the matrices, zero-padded, and their sizes."""
        size = max(m.shape[0] for m in matrices)
        batch = torch.zeros(len(matrices), size, size, dtype=torch.float64)
        for g, m in enumerate(matrices):
            batch[g, :m.shape[0], :m.shape[0]] = torch.from_numpy(m)
        return batch, torch.tensor([m.shape[0] for m in matrices])
''')


@pytest.fixture(scope="module")
def interpreted():
    """Runs a script after CHECKS under Triton's interpreter (skips where that cannot run: probed once)."""
    interpreter_or_skip()

    def run(script):
        done = run_interpreted(CHECKS + textwrap.dedent(script))
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    return run


def test_kernel_matches_numpy_on_drug_molecules(interpreted):
    """Five drugs of 10-15 atoms (metformin hydrochloride: two components, a repeated 0; caffeine, aspirin,
    ibuprofen: rings), their normalised Laplacians (bond orders as weights) padded to one [5, 15, 15] batch with
    their sizes: eigenvalues to 1e-12 of numpy's, eigenspaces and canonical bases to 1e-10, 4-8 sweeps each.
    (Under the interpreter a matrix of 10-15 rows takes ~0.3 s of CPU; every drug, up to the 64-row bucket, is
    in the slow test and the gpu test.)"""
    names = ("metformin hydrochloride", "caffeine", "aspirin", "ibuprofen", "paracetamol")
    small = [m for m in drug_bonds() if m[0] in names]
    assert len(small) == 5
    out = interpreted(f'''
        matrices, sizes = padded(laplacians({small}, True))
        values, vectors, info = batched_jacobi_eigh(matrices, sizes, return_info=True)
        worst = compare(matrices, values, vectors, info, sizes)
        assert ((info >= 4) & (info <= 8)).all(), info
        print("worst", worst)
    ''')
    assert "worst" in out


@pytest.mark.slow
def test_kernel_matches_numpy_on_every_drug_molecule(interpreted):
    """All twenty drugs (10-41 atoms: the 64-row bucket), normalised and combinatorial Laplacians, one padded batch
    (~1-2 min under the interpreter)."""
    molecules = drug_bonds()
    interpreted(f'''
        matrices, sizes = padded(laplacians({molecules}, True) + laplacians({molecules}, False))
        values, vectors, info = batched_jacobi_eigh(matrices, sizes, return_info=True)
        compare(matrices, values, vectors, info, sizes)
        assert (info <= 10).all(), info
    ''')


def test_kernel_on_repeated_eigenvalues_and_edge_cases(interpreted):
    """Random orthogonal Q diag(lambda) Q^T with eigenvalues of multiplicity up to 5 (and two 1e-9 apart), the
    complete graph's and the cycle's Laplacians, diagonal and zero matrices, entries of 1e-200 and 1e+200 (the
    power-of-two scaling), float32 input, a non-symmetric input (its lower triangle read, as torch.linalg.eigh),
    no sizes; a matrix's bits do not depend on its batch companions or position; a non-finite entry or a size
    outside 0..N gives NaN eigenpairs and info -2 (what CUDA returns, where it is not checked on the host); a
    matrix flagged as not converged is solved again by small_eigh with torch.linalg.eigh."""
    interpreted('''
        g = torch.Generator().manual_seed(7)
        def rotated(spectrum):
            q, _ = torch.linalg.qr(torch.randn(len(spectrum), len(spectrum), generator=g, dtype=torch.float64))
            return q @ torch.diag(torch.tensor(spectrum, dtype=torch.float64)) @ q.T
        complete = 5 * torch.eye(6, dtype=torch.float64) - torch.ones(6, 6, dtype=torch.float64)
        cycle = 2 * torch.eye(7, dtype=torch.float64)
        for i in range(7):
            cycle[i, (i + 1) % 7] = cycle[(i + 1) % 7, i] = -1.0
        cases = [rotated([1.0] * 5 + [2.0, 3.0, 3.0]), rotated([-1.0, -1.0, 0.5, 0.5, 0.5, 4.0]),
                 rotated([0.25, 0.25 + 1e-9, 0.75, 0.75, 1.5]), complete, cycle,
                 torch.diag(torch.tensor([3.0, -1.0, 2.0, 2.0], dtype=torch.float64)),
                 torch.zeros(3, 3, dtype=torch.float64), rotated([1.0, 2.0, 2.0, 5.0]) * 1e-200,
                 rotated([1.0, 2.0, 2.0, 5.0]) * 1e200, torch.zeros(1, 1, dtype=torch.float64) + 4.0]
        matrices, sizes = padded([c.numpy() for c in cases])
        values, vectors, info = batched_jacobi_eigh(matrices, sizes, return_info=True)
        compare(matrices[:6], values[:6], vectors[:6], info[:6], sizes[:6])
        for i in (7, 8):  # relative to the matrix's scale
            top = matrices[i].abs().max()
            ref = torch.linalg.eigvalsh(matrices[i, :4, :4] / top)
            assert torch.allclose(values[i, :4] / top, ref, rtol=0, atol=1e-14), values[i]
            assert (info[i] > 0) & (values[i, 4:] == 0).all()
        assert info[5] == 0 and values[5, :4].tolist() == [-1.0, 2.0, 2.0, 3.0]  # diagonal: no sweep
        assert info[6] == 0 and not values[6].any() and torch.equal(vectors[6, :3, :3], torch.eye(3).double())
        assert info[9] == 0 and values[9, 0] == 4.0 and vectors[9, 0, 0] == 1.0
        # alone, in another batch, at another position: the same bits (one program per matrix)
        alone = batched_jacobi_eigh(matrices[1:2], sizes[1:2])
        moved = batched_jacobi_eigh(matrices[[4, 9, 0]], sizes[[4, 9, 0]])
        assert torch.equal(alone[0][0], values[1]) and torch.equal(alone[1][0], vectors[1])
        assert torch.equal(moved[0], values[[4, 9, 0]]) and torch.equal(moved[1], vectors[[4, 9, 0]])
        # float32 in, float32 out (float64 inside)
        values32, vectors32 = batched_jacobi_eigh(matrices[[1, 4]].float(), sizes[[1, 4]])
        assert values32.dtype == vectors32.dtype == torch.float32
        for got, i in zip(values32, (1, 4)):
            n = int(sizes[i])
            ref = np.linalg.eigvalsh(matrices[i, :n, :n].float().double().numpy())
            assert np.abs(got[:n].double().numpy() - ref).max() < 1e-6
        # only the lower triangle is read
        upper = matrices[1:2].clone()
        upper[:, 0, 1:] = 1e3
        assert torch.equal(batched_jacobi_eigh(upper, sizes[1:2])[0][0], values[1])
        # unchecked (as on CUDA): flagged, NaN, the other matrices untouched
        broken = matrices[[1, 2, 3]].clone()
        broken[1, 2, 1] = float("nan")
        v, w, flags = jacobi_eigh(broken, torch.tensor([int(sizes[1]), int(sizes[2]), 99]))
        assert flags.tolist()[1:] == [-2, -2] and flags[0] > 0
        n = int(sizes[2])
        assert v[1, :n].isnan().all() and w[1, :n, :n].isnan().all() and v[2].isnan().all() and w[2].isnan().all()
        assert torch.equal(v[0], values[1]) and torch.equal(w[0], vectors[1])
        # no sizes: every matrix N x N
        full = rotated([0.5, 0.5, 1.0, 3.0, 3.0]).unsqueeze(0)
        v, w, flags = batched_jacobi_eigh(full, return_info=True)
        compare(full, v, w, flags)
        # small_eigh (the CUDA path's dispatch) solves the matrices the kernel flags again with torch.linalg.eigh:
        # here one sweep allowed, so the rotated matrix is flagged (-1) and the diagonal one is not
        from omnipos.graph import jacobi_triton, small_eigh
        small_eigh.JACOBI_DEVICE_TYPES = ("cpu",)
        kernel = jacobi_triton.jacobi_eigh
        jacobi_triton.jacobi_eigh = lambda m, sizes=None: kernel(m, sizes, max_sweeps=1)
        stack = torch.stack([cases[1], torch.diag(torch.arange(6.0, dtype=torch.float64))])
        assert kernel(stack, max_sweeps=1)[2].tolist() == [-1, 0]
        v, w = small_eigh.small_eigh(stack)
        lapack = torch.linalg.eigh(stack[:1])
        assert torch.equal(v[:1], lapack[0]) and torch.equal(w[:1], lapack[1])
        assert v[1].tolist() == list(range(6)) and torch.equal(w[1], torch.eye(6, dtype=torch.float64))
        print("ok")
    ''')


def test_laplacian_pe_through_the_kernel_equals_the_cpu_path(interpreted):
    """laplacian_pe with the Jacobi kernel in place of LAPACK (the CUDA path's solver, here on CPU tensors under
    the interpreter) gives the CPU path's encodings: a batch of small drugs (their canonical bases: the repeated 0
    of metformin hydrochloride, ring symmetries) and symmetric graphs (a 6-cycle, a star, K4)."""
    small = [m for m in drug_bonds() if m[0] in ("aspirin", "metformin hydrochloride", "paracetamol")]
    edges, offset, counts = [], 0, []
    for _, n, bonds, _ in small:
        edges += [(i + offset, j + offset) for i, j in bonds]
        offset, counts = offset + n, counts + [n]
    for extra in ([(i, (i + 1) % 6) for i in range(6)], [(0, i) for i in range(1, 6)],
                  [(i, j) for i in range(4) for j in range(i + 1, 4)]):
        n = 1 + max(max(pair) for pair in extra)
        edges += [(i + offset, j + offset) for i, j in extra]
        offset, counts = offset + n, counts + [n]
    out = interpreted(f'''
        from omnipos.graph import laplacian_pe, small_eigh
        edges = torch.tensor({edges}).T
        edge_index = torch.cat([edges, edges.flip(0)], 1)
        batch = torch.repeat_interleave(torch.arange({len(counts)}), torch.tensor({counts}))
        results = []
        for devices in (("cuda",), ("cuda", "cpu")):
            small_eigh.JACOBI_DEVICE_TYPES = devices
            calls = []
            original = small_eigh.jacobi_kernel
            small_eigh.jacobi_kernel = lambda m: calls.append(m.shape) or original(m)
            results.append([laplacian_pe(edge_index, {offset}, 5, batch=batch, normalization=norm,
                                         return_eigenvalues=True) for norm in ("sym", None)])
            small_eigh.jacobi_kernel = original
            picked = [original(torch.zeros(2, n, n, dtype=torch.float64)) is not None for n in
                      sorted({{shape[-1] for shape in calls}})]
            assert picked and all(picked) == (devices == ("cuda", "cpu")), (devices, picked)
        worst = 0.0
        for lapack, jacobi in zip(*results):
            for a, b in zip(lapack, jacobi):
                if a.dtype == torch.bool:
                    assert torch.equal(a, b)
                else:
                    worst = max(worst, float((a - b).abs().max()))
        assert worst <= 1e-6, worst
        print("worst", worst)
    ''')
    assert "worst" in out


def test_bad_input_is_refused_naming_the_argument():
    good = torch.eye(3, dtype=torch.float64).expand(2, 3, 3)
    cases = [
        (good.numpy(), None, TypeError, "matrices must be a"),
        (good.long(), None, TypeError, "float32 or float64"),
        (good.to(torch.complex128), None, TypeError, "float32 or float64"),
        (good.half(), None, TypeError, "float32 or float64"),
        (torch.zeros(2, 3, 4, dtype=torch.float64), None, ValueError, "square"),
        (torch.zeros(3, 3, dtype=torch.float64), None, ValueError, r"\[G, n, n\]"),
        (torch.zeros(1, 65, 65, dtype=torch.float64), None, ValueError, "at most 64 rows"),
        (good.clone().requires_grad_(), None, ValueError, "requires grad"),
        (good, [3, 3], TypeError, "sizes must be a"),
        (good, torch.tensor([3.0, 3.0]), TypeError, "sizes must be an int32 or int64"),
        (good, torch.tensor([3, 3, 3]), ValueError, r"sizes must have shape \[G\] = \[2\]"),
        (good, torch.tensor([3, 4]), ValueError, r"sizes must be in 0..3 \(the matrices' size\), got 4 at index 1"),
        (good, torch.tensor([-1, 3]), ValueError, r"sizes must be in 0..3 \(the matrices' size\), got -1 at index 0"),
    ]
    for matrices, sizes, error, message in cases:
        with pytest.raises(error, match=message):
            jt.batched_jacobi_eigh(matrices, sizes)
    broken = good.clone()
    broken[1, 2, 0] = float("inf")
    with pytest.raises(ValueError, match=r"matrices must be finite; found inf at index \(1, 2, 0\)"):
        jt.batched_jacobi_eigh(broken)
    # the part not read may hold anything: the upper triangle, and the padding beyond sizes
    broken = good.clone()
    broken[1, 0, 2] = float("nan")
    broken[0, 2, 1] = float("nan")
    values, _ = jt.batched_jacobi_eigh(broken, torch.tensor([2, 3]))
    assert values.tolist() == [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]


def test_cpu_fallback_is_lapack_with_zero_padding():
    """Outside the interpreter the CPU path is torch.linalg.eigh, the padding of each matrix zero."""
    g = torch.Generator().manual_seed(1)
    a = torch.randn(5, 6, 6, generator=g, dtype=torch.float64)
    a = a + a.mT
    sizes = torch.tensor([6, 2, 0, 4, 6])
    values, vectors, info = jt.batched_jacobi_eigh(a, sizes, return_info=True)
    assert info.dtype == torch.int32 and not info.any()
    for i, n in enumerate(sizes.tolist()):
        want = torch.linalg.eigh(a[i, :n, :n])
        assert torch.equal(values[i, :n], want[0]) and torch.equal(vectors[i, :n, :n], want[1])
        assert not values[i, n:].any() and not vectors[i, n:].any() and not vectors[i, :, n:].any()
    full = jt.batched_jacobi_eigh(a.float())
    assert all(torch.equal(x, y) for x, y in zip(full, torch.linalg.eigh(a.float())))
    empty = jt.batched_jacobi_eigh(torch.zeros(0, 4, 4))
    assert empty[0].shape == (0, 4) and empty[1].shape == (0, 4, 4)


def test_cuda_path_creates_no_cpu_tensor_and_never_syncs():
    """batched_jacobi_eigh on fake CUDA tensors (no GPU needed): the checks, the allocations and the launch create
    no CPU tensor and read nothing back to the host, and launch exactly one kernel (the triton_op's)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    if not jt.HAS_TRITON or jt.INTERPRETED:
        pytest.skip("needs triton, outside its interpreter (the op is then a triton_op)")

    with FakeTensorMode(allow_non_fake_inputs=True):
        matrices = torch.randn(100, 37, 37, device="cuda", dtype=torch.float64)
        sizes = torch.full((100,), 33, device="cuda")
        for args in ((matrices, sizes), (matrices, None), (matrices[:, :8, :8].float(), None)):
            with KernelWatch() as public:
                values, vectors, info = jt.batched_jacobi_eigh(*args, return_info=True)
            with KernelWatch() as body:  # the op's body, as torch.compile and a capture run it
                jt._jacobi_body(*args, jt.MAX_SWEEPS, jt.TOLERANCE)
            for watch in (public, body):
                assert not watch.cpu and not watch.syncs, (watch.cpu, watch.syncs)
            assert public.kernels == ["omnipos::jacobi_eigh"], public.kernels
            assert body.kernels == ["triton_kernel_wrapper_mutation"], body.kernels
            n = args[0].shape[-1]
            assert values.shape == (100, n) and vectors.shape == (100, n, n) and info.shape == (100,)
            assert values.device.type == "cuda" and values.dtype == args[0].dtype and info.dtype == torch.int32


@pytest.mark.parametrize("block,has_sizes", [(8, False), (64, True)])
def test_kernel_compiles_for_sm90_without_a_gpu(block, has_sizes):
    """The kernel through Triton's whole CUDA pipeline (to a cubin for sm_90): what the interpreter cannot see
    (types, layouts, the gathers and the transpose as compiled) fails here, not on the device."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {"a_ptr": "*fp64", "sizes_ptr": "*i64", "values_ptr": "*fp64", "vectors_ptr": "*fp64",
                 "info_ptr": "*i32", "N": "i32", "a_sg": "i64", "a_sr": "i64", "a_sc": "i64", "tolerance": "fp64",
                 "HAS_SIZES": "constexpr", "BLOCK": "constexpr", "MAX_SWEEPS": "constexpr"}
    assert list(signature) == list(jt._jacobi_kernel.arg_names)
    constexprs = {"HAS_SIZES": has_sizes, "BLOCK": block, "MAX_SWEEPS": jt.MAX_SWEEPS}
    try:
        compiled = triton.compile(ASTSource(fn=jt._jacobi_kernel, signature=signature, constexprs=constexprs),
                                  target=GPUTarget("cuda", 90, 32), options={"num_warps": jt._warps(block)})
    except RuntimeError as exc:  # the toolchain (ptxas) missing from this installation, not the kernel
        if "ptxas" in str(exc).lower() and "not found" in str(exc).lower():
            pytest.skip(f"no CUDA toolchain in this Triton: {exc}")
        raise
    assert compiled.asm.get("cubin"), "no cubin produced"


def _molecule_like(count, seed=0):
    """Random trees (max degree 4) on 8-40 nodes plus ~n/8 ring closures: ``(edge_index, num_nodes, batch)``."""
    rng = np.random.default_rng(seed)
    parts, sizes, offset = [], [], 0
    for _ in range(count):
        n = int(rng.integers(8, 41))
        degree = np.zeros(n, dtype=int)
        pairs = set()
        for i in range(1, n):
            candidates = np.flatnonzero(degree[:i] < 4)
            j = int(rng.choice(candidates))
            pairs.add((j, i))
            degree[[i, j]] += 1
        for _ in range(n // 8):
            a, b = (int(x) for x in rng.choice(n, 2, replace=False))
            pairs.add((min(a, b), max(a, b)))
        e = np.array(sorted(pairs)).T + offset
        parts.append(np.concatenate([e, e[::-1]], 1))
        sizes.append(n)
        offset += n
    edge_index = torch.from_numpy(np.concatenate(parts, 1)).long()
    return edge_index, offset, torch.repeat_interleave(torch.arange(count), torch.tensor(sizes))


@pytest.mark.gpu
def test_laplacian_pe_on_cuda_over_10k_molecules_equals_the_cpu(monkeypatch):
    """LapPE k=8 of 10,000 molecule-like graphs (8-40 nodes) on CUDA, solved by the Jacobi kernel (counted), equals
    the CPU's (LAPACK / lane kernel) within float32 rounding of the canonical bases; and the kernel alone against
    torch.linalg.eigh on CUDA for random symmetric matrices of every bucket, mixed sizes in one batch."""
    edge_index, num_nodes, batch = _molecule_like(10_000)
    calls = []
    original = jt.jacobi_eigh
    monkeypatch.setattr(jt, "jacobi_eigh", lambda *a, **k: calls.append(a[0].shape) or original(*a, **k))
    cpu = laplacian_pe(edge_index, num_nodes, 8, batch=batch, return_eigenvalues=True)
    assert not calls
    gpu = laplacian_pe(edge_index.cuda(), num_nodes, 8, batch=batch.cuda(), return_eigenvalues=True)
    assert calls and all(shape[-1] <= 40 for shape in calls)
    assert gpu[0].device.type == "cuda"
    torch.testing.assert_close(gpu[0].cpu(), cpu[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(gpu[1].cpu(), cpu[1], atol=1e-6, rtol=0)
    assert torch.equal(gpu[2].cpu(), cpu[2])
    again = laplacian_pe(edge_index.cuda(), num_nodes, 8, batch=batch.cuda())
    assert torch.equal(again, gpu[0])  # deterministic run to run
    g = torch.Generator().manual_seed(3)
    for n in (3, 8, 16, 17, 32, 40, 64):
        a = torch.randn(300, n, n, generator=g, dtype=torch.float64)
        a = (a + a.mT).cuda()
        sizes = torch.randint(0, n + 1, (300,), generator=g).cuda()
        values, vectors, info = jt.batched_jacobi_eigh(a, sizes, return_info=True)
        assert (info >= 0).all()
        for m in sizes.unique().tolist():
            rows = (sizes == m).nonzero().squeeze(1)
            want = torch.linalg.eigvalsh(a[rows, :m, :m])
            torch.testing.assert_close(values[rows, :m], want, atol=1e-12, rtol=0)
            v = vectors[rows, :m, :m]
            residual = a[rows, :m, :m] @ v - v * values[rows, None, :m]
            assert residual.abs().max() < 1e-12
