"""A compiled ``eigh`` for many small real symmetric matrices at once: ``LANES`` matrices of one size side by side
in SIMD lanes (numba; the optional extra ``omnipos[fast]``).

The algorithm is EISPACK's, as in JAMA: Householder tridiagonalisation with the transformations accumulated
(``tred2``), then the implicit QL method with Wilkinson-type shifts on the tridiagonal matrix, the rotations applied
to the accumulated vectors (``tql2``). What is new is the layout: a block of ``LANES`` matrices is stored with the
matrix index innermost (``V[column, row, lane]``, 1-D and contiguous), so every inner loop runs over the lanes
with the same operations and LLVM turns it into AVX-512 / AVX2 vector instructions; the divisions and square
roots of the QL sweeps, which bound a one-matrix-at-a-time solver by their latency, then run for 8 matrices per
instruction. (numba's ``error_model="numpy"``, no ``fastmath``: IEEE arithmetic, no reassociation.)

Control flow is the same for every lane: each lane keeps its own QL state (current eigenvalue ``l``, split point
``m``, shift, sweep count), a sweep runs over the union of the lanes' index ranges, and a lane outside its range,
or already finished, takes the step's results through a select that leaves its numbers untouched. So a matrix's
result is the same bits whichever matrices share its block, in whatever position (the tests check it), and is
the same as the one-matrix algorithm would give.

A lane that meets something the algorithm is not written for (a non-finite entry, no convergence in
``MAX_SWEEPS`` sweeps for one eigenvalue, a rotation whose norm underflows) is flagged in ``failed``; the caller
solves those matrices with LAPACK instead. Each matrix is first scaled by a power of two (exact) so that its
largest entry is in ``[1, 2)``; its eigenvalues are scaled back.

Outputs: eigenvalues ascending, eigenvectors as columns (orthonormal to ~1e-15); within an eigenspace of a
repeated eigenvalue the basis is whatever the algorithm produced (as with LAPACK).
"""

from __future__ import annotations

import math

import numba  # noqa: F401 - the kernels need it: without numba this module does not import (callers catch it)
import numpy as np

from ..core import compiled

__all__ = ["LANES", "MAX_SWEEPS", "compiled", "lane_eigh"]

#: Matrices solved side by side (4 AVX-512 vectors of float64). LLVM vectorises a lane loop only from 24
#: iterations on (shorter ones stay scalar); more lanes waste more steps on lanes that wait for the slowest one.
LANES = 32
#: QL sweeps allowed for one eigenvalue before the matrix is handed back as failed (EISPACK: 30).
MAX_SWEEPS = 30

_L = np.uint64(LANES)
_EPS = 2.0 ** -52
_TINY = 2.0 ** -960  # p^2 + e^2 below this: the rotation's norm lost precision to underflow

# rows of the lane-state array `st` (offsets in elements; uint64 so that no index needs a negative-index wrap,
# which keeps LLVM's vectoriser able to prove the lane loops' accesses independent)
_ROWS = 20
(_P, _C, _S, _C2, _C3, _S2, _ON, _H, _F, _TST, _DL1, _EL1, _LO, _M, _ACT, _BAD, _SC, _G, _HH, _IT) = (
    np.uint64(r * LANES) for r in range(_ROWS))


@compiled
def _load(a, start, lanes, n, V, st, expo):
    """Copy matrices ``start .. start + lanes - 1`` into the lanes, scaled by powers of two; empty lanes get 0."""
    for w in range(LANES):
        wu = np.uint64(w)
        big = 0.0
        nan = False
        if w < lanes:
            for i in range(n):
                for j in range(n):
                    x = abs(a[start + w, i, j])
                    if x > big:
                        big = x
                    elif not x <= big:
                        nan = True
        bad = nan or not math.isfinite(big)
        ex = 0
        if big > 0.0 and not bad:
            ex = math.frexp(big)[1] - 1
        expo[w] = ex
        st[_BAD + wu] = 1.0 if bad else 0.0
        factor = 0.0 if bad or w >= lanes else math.ldexp(1.0, -ex)
        for i in range(n):
            for j in range(n):
                x = a[start + w, i, j] * factor if w < lanes and not bad else 0.0
                V[np.uint64(j * n + i) * _L + wu] = x


@compiled
def _tred2(n, V, d, e, st, nl):
    """Householder reduction of the lanes' matrices to tridiagonal form ``(d, e)``, the orthogonal transformation
    accumulated in ``V`` (JAMA's ``tred2``; ``V[(col * n + row) * LANES + lane]``). A zero column (``scale == 0``)
    is the same arithmetic with divisors of 1, which leaves it as EISPACK's branch does."""
    nu = np.uint64(n)
    last = nu - np.uint64(1)
    for j in range(n):
        ju = np.uint64(j)
        for w in range(nl):
            d[ju * _L + w] = V[(ju * nu + last) * _L + w]
    for i in range(n - 1, 0, -1):
        iu = np.uint64(i)
        for w in range(nl):
            st[_SC + w] = 0.0
            st[_H + w] = 0.0
        for k in range(i):
            ku = np.uint64(k) * _L
            for w in range(nl):
                st[_SC + w] += abs(d[ku + w])
        for w in range(nl):
            sc = st[_SC + w]
            st[_HH + w] = sc if sc != 0.0 else 1.0
        for k in range(i):
            ku = np.uint64(k) * _L
            for w in range(nl):
                x = d[ku + w] / st[_HH + w]
                d[ku + w] = x
                st[_H + w] += x * x
        below = (iu - np.uint64(1)) * _L
        for w in range(nl):
            f = d[below + w]
            g = math.sqrt(st[_H + w])
            g = -g if f > 0 else g
            e[iu * _L + w] = st[_SC + w] * g
            st[_H + w] = st[_H + w] - f * g
            d[below + w] = f - g
        for j in range(i):
            ju = np.uint64(j) * _L
            for w in range(nl):
                e[ju + w] = 0.0
        for j in range(i):
            ju = np.uint64(j)
            col = ju * nu
            for w in range(nl):
                f = d[ju * _L + w]
                V[(iu * nu + ju) * _L + w] = f
                st[_F + w] = f
                st[_G + w] = e[ju * _L + w] + V[(col + ju) * _L + w] * f
            for k in range(j + 1, i):
                ku = np.uint64(k)
                for w in range(nl):
                    x = V[(col + ku) * _L + w]
                    st[_G + w] += x * d[ku * _L + w]
                    e[ku * _L + w] += x * st[_F + w]
            for w in range(nl):
                e[ju * _L + w] = st[_G + w]
        for w in range(nl):
            st[_F + w] = 0.0
            h = st[_H + w]
            st[_HH + w] = h if h != 0.0 else 1.0
        for j in range(i):
            ju = np.uint64(j) * _L
            for w in range(nl):
                x = e[ju + w] / st[_HH + w]
                e[ju + w] = x
                st[_F + w] += x * d[ju + w]
        for w in range(nl):
            st[_HH + w] = st[_F + w] / (st[_HH + w] + st[_HH + w])
        for j in range(i):
            ju = np.uint64(j) * _L
            for w in range(nl):
                e[ju + w] -= st[_HH + w] * d[ju + w]
        for j in range(i):
            ju = np.uint64(j)
            col = ju * nu
            for w in range(nl):
                st[_F + w] = d[ju * _L + w]
                st[_G + w] = e[ju * _L + w]
            for k in range(j, i):
                ku = np.uint64(k)
                for w in range(nl):
                    V[(col + ku) * _L + w] -= st[_F + w] * e[ku * _L + w] + st[_G + w] * d[ku * _L + w]
            for w in range(nl):
                d[ju * _L + w] = V[(col + iu - np.uint64(1)) * _L + w]
                V[(col + iu) * _L + w] = 0.0
        for w in range(nl):
            d[iu * _L + w] = st[_H + w]
    # accumulate the transformations
    for i in range(n - 1):
        iu = np.uint64(i)
        nxt = (iu + np.uint64(1)) * nu
        for w in range(nl):
            V[(iu * nu + last) * _L + w] = V[(iu * nu + iu) * _L + w]
            V[(iu * nu + iu) * _L + w] = 1.0
            h = d[(iu + np.uint64(1)) * _L + w]
            st[_HH + w] = h if h != 0.0 else 1.0
        for k in range(i + 1):
            ku = np.uint64(k)
            for w in range(nl):
                d[ku * _L + w] = V[(nxt + ku) * _L + w] / st[_HH + w]
        for j in range(i + 1):
            col = np.uint64(j) * nu
            for w in range(nl):
                st[_G + w] = 0.0
            for k in range(i + 1):
                ku = np.uint64(k)
                for w in range(nl):
                    st[_G + w] += V[(nxt + ku) * _L + w] * V[(col + ku) * _L + w]
            for k in range(i + 1):
                ku = np.uint64(k)
                for w in range(nl):
                    V[(col + ku) * _L + w] -= st[_G + w] * d[ku * _L + w]
        for k in range(i + 1):
            ku = np.uint64(k)
            for w in range(nl):
                V[(nxt + ku) * _L + w] = 0.0
    for j in range(n):
        ju = np.uint64(j)
        for w in range(nl):
            d[ju * _L + w] = V[(ju * nu + last) * _L + w]
            V[(ju * nu + last) * _L + w] = 0.0
    for w in range(nl):
        V[(last * nu + last) * _L + w] = 1.0
        e[w] = 0.0


@compiled
def _advance(w, n, d, e, st):
    """Lane ``w`` after its eigenvalue ``l`` converged (or at the start): finish every ``l`` that needs no sweep,
    then find the split point ``m`` of the next one (JAMA's ``tql2``: ``tst1`` grows once per ``l``)."""
    wu = np.uint64(w)
    L = LANES
    l = int(st[_LO + wu])
    m = l
    tst = st[_TST + wu]
    f = st[_F + wu]
    while l < n:
        t = abs(d[l * L + w]) + abs(e[l * L + w])
        if t > tst:
            tst = t
        m = l
        while m < n - 1 and abs(e[m * L + w]) > _EPS * tst:
            m += 1
        if m > l:
            break
        d[l * L + w] = d[l * L + w] + f
        e[l * L + w] = 0.0
        l += 1
    st[_LO + wu] = l
    st[_M + wu] = m
    st[_TST + wu] = tst
    st[_IT + wu] = 0.0
    st[_ACT + wu] = 1.0 if l < n and st[_BAD + wu] == 0.0 else 0.0


@compiled
def _tql2(n, V, d, e, st, nl):
    """Implicit QL on the tridiagonal ``(d, e)`` of every lane, rotations applied to ``V`` (JAMA's ``tql2``), each
    lane at its own eigenvalue ``l``; a sweep runs over the union of the lanes' ranges ``l .. m`` and a lane outside
    its range takes no step (selects keep its numbers)."""
    nu = np.uint64(n)
    L = LANES
    for i in range(1, n):
        iu = np.uint64(i)
        for w in range(nl):
            e[(iu - np.uint64(1)) * _L + w] = e[iu * _L + w]
    for w in range(nl):
        e[(nu - np.uint64(1)) * _L + w] = 0.0
        st[_F + w] = 0.0
        st[_TST + w] = 0.0
        st[_LO + w] = 0.0
    for w in range(LANES):
        _advance(w, n, d, e, st)
    while True:
        lo = n
        hi = 0
        for w in range(LANES):
            wu = np.uint64(w)
            if st[_ACT + wu] != 0.0:
                lo = min(lo, int(st[_LO + wu]))
                hi = max(hi, int(st[_M + wu]))
        if hi == 0:
            break
        # the shift, lane by lane (each at its own l)
        for w in range(LANES):
            wu = np.uint64(w)
            st[_H + wu] = 0.0
            if st[_ACT + wu] != 0.0:
                l = int(st[_LO + wu])
                g = d[l * L + w]
                el = e[l * L + w]
                p = (d[(l + 1) * L + w] - g) / (2.0 * el)
                r = math.sqrt(p * p + 1.0)
                r = -r if p < 0 else r
                d[l * L + w] = el / (p + r)
                d[(l + 1) * L + w] = el * (p + r)
                st[_DL1 + wu] = d[(l + 1) * L + w]
                h = g - d[l * L + w]
                st[_H + wu] = h
                st[_F + wu] += h
                st[_EL1 + wu] = e[(l + 1) * L + w]
            st[_C + wu] = 1.0
            st[_C2 + wu] = 1.0
            st[_C3 + wu] = 1.0
            st[_S + wu] = 0.0
            st[_S2 + wu] = 0.0
        for i in range(lo + 2, n):
            iu = np.uint64(i)
            fi = float(i)
            for w in range(nl):
                shifted = (st[_ACT + w] != 0.0) & (fi >= st[_LO + w] + 2.0)
                x = d[iu * _L + w]
                d[iu * _L + w] = x - st[_H + w] if shifted else x
        top = np.uint64(hi) * _L
        for w in range(nl):
            st[_P + w] = d[top + w]
        # the sweep, i = hi - 1 down to lo
        for i in range(hi - 1, lo - 1, -1):
            iu = np.uint64(i)
            here = iu * _L
            up = here + _L
            fi = float(i)
            for w in range(nl):
                mw = st[_M + w]
                before = fi >= mw  # the lane's sweep has not started: keep its initial state
                on = (st[_ACT + w] != 0.0) & (fi < mw) & (fi >= st[_LO + w])
                ei = e[here + w]
                di = d[here + w]
                p0 = st[_P + w]
                c0 = st[_C + w]
                s0 = st[_S + w]
                g = c0 * ei
                h = c0 * p0
                t = p0 * p0 + ei * ei
                r = math.sqrt(t)
                e1 = s0 * r
                s = ei / r
                c = p0 / r
                pn = c * di - s * g
                d1 = h + s * (c * g + s * di)
                st[_BAD + w] = 1.0 if on & (t < _TINY) else st[_BAD + w]
                st[_ON + w] = 1.0 if on else 0.0
                e[up + w] = e1 if on else e[up + w]
                d[up + w] = d1 if on else d[up + w]
                st[_P + w] = pn if on else (di if before else p0)
                st[_C3 + w] = st[_C2 + w] if on else (1.0 if before else st[_C3 + w])
                st[_C2 + w] = c0 if on else (1.0 if before else st[_C2 + w])
                st[_S2 + w] = s0 if on else (0.0 if before else st[_S2 + w])
                st[_C + w] = c if on else (1.0 if before else c0)
                st[_S + w] = s if on else (0.0 if before else s0)
            left = iu * nu
            right = left + nu
            for k in range(n):
                ku = np.uint64(k)
                a = (left + ku) * _L
                b = (right + ku) * _L
                for w in range(nl):
                    x = V[a + w]
                    y = V[b + w]
                    on = st[_ON + w] != 0.0
                    c = st[_C + w]
                    s = st[_S + w]
                    V[b + w] = s * x + c * y if on else y
                    V[a + w] = c * x - s * y if on else x
        # end of the sweep, lane by lane: converged lanes move on to their next eigenvalue
        for w in range(LANES):
            wu = np.uint64(w)
            if st[_ACT + wu] == 0.0:
                continue
            l = int(st[_LO + wu])
            s = st[_S + wu]
            p = -s * st[_S2 + wu] * st[_C3 + wu] * st[_EL1 + wu] * e[l * L + w] / st[_DL1 + wu]
            e[l * L + w] = s * p
            d[l * L + w] = st[_C + wu] * p
            st[_IT + wu] += 1.0
            if st[_BAD + wu] != 0.0:
                st[_ACT + wu] = 0.0
            elif not abs(e[l * L + w]) > _EPS * st[_TST + wu]:
                d[l * L + w] = d[l * L + w] + st[_F + wu]
                e[l * L + w] = 0.0
                st[_LO + wu] = l + 1
                _advance(w, n, d, e, st)
            elif st[_IT + wu] >= MAX_SWEEPS:
                st[_BAD + wu] = 1.0
                st[_ACT + wu] = 0.0


@compiled
def _store(start, lanes, n, V, d, st, expo, values, vectors, failed, order):
    """Each lane's eigenpairs in ascending order (stable: equal eigenvalues keep the algorithm's order)."""
    L = LANES
    for w in range(lanes):
        for j in range(n):
            order[j] = j
        for j in range(1, n):
            q = order[j]
            x = d[q * L + w]
            i = j - 1
            while i >= 0 and d[order[i] * L + w] > x:
                order[i + 1] = order[i]
                i -= 1
            order[i + 1] = q
        failed[start + w] = st[_BAD + np.uint64(w)] != 0.0
        back = math.ldexp(1.0, expo[w])
        for j in range(n):
            values[start + w, j] = d[order[j] * L + w] * back
        for r in range(n):
            for j in range(n):
                vectors[start + w, r, j] = V[(order[j] * n + r) * L + w]


@compiled
def _lane_eigh(a, values, vectors, failed, nl):
    count, n = a.shape[0], a.shape[1]
    V = np.empty(n * n * LANES)
    d = np.empty(n * LANES)
    e = np.empty(n * LANES)
    st = np.zeros(_ROWS * LANES)
    expo = np.zeros(LANES, np.int64)
    order = np.empty(n, np.int64)
    for start in range(0, count, LANES):
        lanes = min(LANES, count - start)
        _load(a, start, lanes, n, V, st, expo)
        _tred2(n, V, d, e, st, nl)
        _tql2(n, V, d, e, st, nl)
        _store(start, lanes, n, V, d, st, expo, values, vectors, failed, order)


def lane_eigh(matrices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigenpairs of real symmetric ``matrices [G, n, n]`` (float64; only their values are read, as a full
    symmetric matrix): ``(values [G, n] ascending, vectors [G, n, n] as columns, failed [G] bool)``. Rows of a
    failed matrix are unspecified: solve those with LAPACK."""
    a = np.ascontiguousarray(matrices, dtype=np.float64)
    if a.ndim != 3 or a.shape[1] != a.shape[2]:
        raise ValueError(f"matrices must have shape [G, n, n], got {a.shape}")
    count, n = a.shape[0], a.shape[1]
    values = np.empty((count, n))
    vectors = np.empty((count, n, n))
    failed = np.zeros(count, dtype=np.bool_)
    if count and n:
        # (the lane count as a run-time value: a constant trip count gets the lane loops fully unrolled, and
        # LLVM's loop vectoriser then never sees them)
        _lane_eigh(a, values, vectors, failed, np.uint64(LANES))
    return values, vectors, failed
