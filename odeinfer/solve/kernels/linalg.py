"""Linear algebra for the stiff solver: dense LU with partial pivoting, and (second part, from
``LU_SPARSE_MIN`` states on) a sparse LU planned from the Jacobian's pattern.

Appended to every generated model module; see ``kernels/__init__.py``.
LAPACK convention (``getrf``/``getrs``): ``piv[c] = r`` means rows ``c`` and
``r`` were swapped at elimination step ``c``; ``L`` (unit diagonal) and ``U``
overwrite the matrix, except that the diagonal holds the reciprocals of ``U``'s (the
solves multiply by them: a division's latency is about four times a product's). The
substitutions subtract the most recently solved entry last, so that a row's sum does not wait
for the row before it. Together: a solve of 8 unknowns in 75-83 ns instead of 112-127 ns.
"""
import math

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def lu_factor(a, piv):
    """Factor ``a`` in place as ``P a = L U``.

    Parameters
    ----------
    a : (n, n) float64
        Overwritten by ``L`` (strictly lower part), ``U`` (strictly upper part) and the
        reciprocals of ``U``'s diagonal (on the diagonal).
    piv : (n,) int64
        Out: pivot rows.

    Returns
    -------
    int
        ``ST_SUCCESS``, or ``ST_SINGULAR`` when a pivot or its reciprocal is zero or not finite.
    """
    n = a.shape[0]
    for c in range(n):
        r = c
        amax = abs(a[c, c])
        for i in range(c + 1, n):
            v = abs(a[i, c])
            if v > amax:
                amax = v
                r = i
        piv[c] = r
        if not (amax > 0.0) or not math.isfinite(amax):
            return ST_SINGULAR
        if r != c:
            for j in range(n):
                tmp = a[c, j]
                a[c, j] = a[r, j]
                a[r, j] = tmp
        inv = 1.0 / a[c, c]
        if not math.isfinite(inv):
            return ST_SINGULAR
        a[c, c] = inv
        for i in range(c + 1, n):
            lic = a[i, c] * inv
            a[i, c] = lic
            if lic != 0.0:
                for j in range(c + 1, n):
                    a[i, j] -= lic * a[c, j]
    return ST_SUCCESS


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def lu_solve(lu, piv, b):
    """Solve ``a x = b`` in place from :func:`lu_factor` output.

    Parameters
    ----------
    lu : (n, n) float64
    piv : (n,) int64
    b : (n,) float64
        Right-hand side, overwritten by the solution.
    """
    n = lu.shape[0]
    for c in range(n):
        r = piv[c]
        if r != c:
            tmp = b[c]
            b[c] = b[r]
            b[r] = tmp
    for i in range(1, n):
        acc = b[i]
        for j in range(i):
            acc -= lu[i, j] * b[j]
        b[i] = acc
    for i in range(n - 1, -1, -1):
        acc = b[i]
        for j in range(n - 1, i, -1):
            acc -= lu[i, j] * b[j]
        b[i] = acc * lu[i, i]


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def lu_solve_rows(lu, piv, b, off, k):
    """Solve ``a X = B`` in place for ``k`` right-hand sides, ``B`` the ``(n, k)`` row-major block
    ``b[off : off + n*k]`` (a block of sensitivities, see ``common.py``), from :func:`lu_factor`
    output. Each column sees the operations of :func:`lu_solve` in the same order (the same bits),
    but the inner loops run along the contiguous rows, and zero entries of ``lu`` are skipped."""
    n = lu.shape[0]
    for c in range(n):
        r = piv[c]
        if r != c:
            for j in range(k):
                tmp = b[off + c * k + j]
                b[off + c * k + j] = b[off + r * k + j]
                b[off + r * k + j] = tmp
    for i in range(1, n):
        row = off + i * k
        for l in range(i):
            a = lu[i, l]
            if a != 0.0:
                src = off + l * k
                for j in range(k):
                    b[row + j] -= a * b[src + j]
    for i in range(n - 1, -1, -1):
        row = off + i * k
        for l in range(n - 1, i, -1):
            a = lu[i, l]
            if a != 0.0:
                src = off + l * k
                for j in range(k):
                    b[row + j] -= a * b[src + j]
        d = lu[i, i]
        for j in range(k):
            b[row + j] = b[row + j] * d


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def lu_solve_transposed(lu, piv, b):
    """Solve ``a^T x = b`` in place from :func:`lu_factor` output: ``P a = L U`` gives ``a^T = U^T L^T P``, so
    ``U^T w = b`` (forward), ``L^T v = w`` (backward, unit diagonal), then ``x = P^T v`` (the row swaps undone
    in reverse order)."""
    n = lu.shape[0]
    for i in range(n):
        acc = b[i]
        for j in range(i):
            acc -= lu[j, i] * b[j]
        b[i] = acc * lu[i, i]
    for i in range(n - 2, -1, -1):
        acc = b[i]
        for j in range(n - 1, i, -1):
            acc -= lu[j, i] * b[j]
        b[i] = acc
    for c in range(n - 1, -1, -1):
        r = piv[c]
        if r != c:
            tmp = b[c]
            b[c] = b[r]
            b[r] = tmp


# ---- sparse LU for large models -------------------------------------------------------------------------------
#
# A reaction network's Jacobian is sparse (Chen_MSB2009: 500 states, 4,400 nonzeros), and the dense LU above
# costs n^3 / 3 operations whatever the zeros. From ``LU_SPARSE_MIN`` states on, the stiff solver plans the
# factorization once per solve from the Jacobian's pattern: a minimum-degree order of the symmetrised pattern
# (the elimination graph's node of fewest neighbours first; its neighbours become a clique, the fill) gives
# the pivot order and, per pivot, the neighbours its column of L and row of U can hold. The factors stay in
# the dense ``(n, n)`` array (only the planned entries are touched, so the Jacobian and its callers do not
# change). The pivots are the diagonal in the planned order, each checked against its column (threshold
# ``_LU_PIVOT_TOL``). A state whose pivot fails the check is *delayed*: planned again after all the others, with
# the other delayed states, in a trailing block that the dense LU with row exchanges factors (the Schur
# complement left by the sparse pivots). A matrix entry outside the planned pattern (a Jacobian entry that was
# zero when the plan was made) makes :func:`plu_factor` plan again, so no entry is ever left out; with more
# than ``n / 4`` delayed states, or factors fuller than ``_LU_MAX_FILL``, the dense LU does it all.
#
# ``plan`` (int64, ``lu_plan_len(n)``): [mode (1: the last factorization is planned, 0: dense), planned (1/0),
# nnz, k (delayed states), order (n), ptr (n + 1), idx (capacity), delayed flags (n), two scratch vectors (n
# each)]; pivot ``c < n - k`` is state ``order[c]`` and its neighbours are ``idx[ptr[c]:ptr[c + 1]]``; the
# trailing block is ``order[n - k:]``, its row exchanges in ``piv[:k]`` (local positions). ``pattern`` (bool,
# ``(3, n, n)``): [0] the nonzeros seen, [1] the entries the plan handles, [2] scratch.

LU_SPARSE_MIN = 24  # states from which the stiff solver plans a sparse LU
_LU_MAX_FILL = 0.25  # a plan whose factors would hold more than this share of the n x n entries is dropped
_LU_PIVOT_TOL = 0.1  # a planned pivot below this share of its column's largest entry is delayed


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def lu_plan_capacity(n):
    """Room for the planned neighbours (``idx``) of an ``n x n`` matrix."""
    return int(_LU_MAX_FILL * n * n)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def lu_plan_len(n):
    """Length of the ``plan`` array for ``n`` states: 0 below ``LU_SPARSE_MIN`` (the dense LU only)."""
    if n < LU_SPARSE_MIN:
        return 0
    return 5 + 5 * n + lu_plan_capacity(n)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _lu_offsets(n):
    """Offsets in ``plan`` of order, ptr, idx, the delayed flags and the two scratch vectors."""
    o_idx = 5 + 2 * n
    o_flag = o_idx + lu_plan_capacity(n)
    return 4, 4 + n, o_idx, o_flag, o_flag + n, o_flag + 2 * n


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def lu_plan(pattern, plan):
    """Plan the sparse LU of matrices whose nonzeros lie in ``pattern[0]``, the delayed states (flags in
    ``plan``) last; see the section's comment. Writes ``pattern[1]``. Returns whether a plan was made
    (``plan[1]``)."""
    n = pattern.shape[1]
    cap = lu_plan_capacity(n)
    o_order, o_ptr, o_idx, o_flag, o_deg, o_nb = _lu_offsets(n)
    seen = pattern[0]
    handled = pattern[1]
    adj = pattern[2]
    plan[1] = 0
    k = 0
    for i in range(n):
        k += plan[o_flag + i]
    if 4 * k > n:
        return False
    for i in range(n):
        d = 0
        for j in range(n):
            adj[i, j] = i != j and (seen[i, j] or seen[j, i])
            handled[i, j] = False
            if adj[i, j]:
                d += 1
        plan[o_deg + i] = d
    plan[o_ptr] = 0
    nnz = 0
    for c in range(n - k):
        v = -1
        best = n + 1
        for i in range(n):
            if plan[o_flag + i] == 0 and plan[o_deg + i] >= 0 and plan[o_deg + i] < best:
                best = plan[o_deg + i]
                v = i
        plan[o_order + c] = v
        plan[o_deg + v] = -1  # eliminated
        d = 0
        for j in range(n):
            if adj[v, j] and plan[o_deg + j] >= 0:
                plan[o_nb + d] = j
                d += 1
        if nnz + d > cap:
            return False
        handled[v, v] = True
        for q in range(d):
            x = plan[o_nb + q]
            plan[o_idx + nnz + q] = x
            handled[v, x] = True
            handled[x, v] = True
            adj[x, v] = False
            plan[o_deg + x] -= 1
            for r in range(d):
                y = plan[o_nb + r]
                if x != y and not adj[x, y]:
                    adj[x, y] = True
                    plan[o_deg + x] += 1
        nnz += d
        plan[o_ptr + c + 1] = nnz
    c = n - k
    for i in range(n):  # the trailing block: every entry among the delayed states
        if plan[o_flag + i] != 0:
            plan[o_order + c] = i
            c += 1
            for j in range(n):
                if plan[o_flag + j] != 0:
                    handled[i, j] = True
    plan[2] = nnz
    plan[3] = k
    plan[1] = 1
    return True


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def lu_factor_planned(a, piv, plan):
    """Factor ``a`` in place along ``plan`` (the diagonal holds U's reciprocals, as in :func:`lu_factor`; the
    trailing block's row exchanges go to ``piv``). Returns ``ST_SUCCESS``; ``ST_SINGULAR`` (the trailing block
    is singular); or ``-1 - v`` when state ``v``'s planned pivot fails the threshold test (``a`` is then spoilt:
    the caller delays ``v``, plans again and factors a new copy)."""
    n = a.shape[0]
    k = plan[3]
    o_order, o_ptr, o_idx = _lu_offsets(n)[:3]
    for c in range(n - k):
        v = plan[o_order + c]
        s = o_idx + plan[o_ptr + c]
        e = o_idx + plan[o_ptr + c + 1]
        d = a[v, v]
        cmax = 0.0
        for q in range(s, e):
            cmax = max(cmax, abs(a[plan[q], v]))
        if not (abs(d) > 0.0 and math.isfinite(d) and math.isfinite(cmax)) or abs(d) < _LU_PIVOT_TOL * cmax:
            return -1 - v
        inv = 1.0 / d
        if not math.isfinite(inv):
            return -1 - v
        a[v, v] = inv
        for q in range(s, e):
            i = plan[q]
            lic = a[i, v] * inv
            a[i, v] = lic
            if lic != 0.0:
                for r in range(s, e):
                    j = plan[r]
                    a[i, j] -= lic * a[v, j]
    t = o_order + n - k  # the trailing block, as lu_factor on the rows and columns order[n - k:]
    for c in range(k):
        vc = plan[t + c]
        r = c
        amax = abs(a[vc, vc])
        for i in range(c + 1, k):
            x = abs(a[plan[t + i], vc])
            if x > amax:
                amax = x
                r = i
        piv[c] = r
        if not (amax > 0.0) or not math.isfinite(amax):
            return ST_SINGULAR
        if r != c:
            vr = plan[t + r]
            for j in range(k):
                vj = plan[t + j]
                tmp = a[vc, vj]
                a[vc, vj] = a[vr, vj]
                a[vr, vj] = tmp
        inv = 1.0 / a[vc, vc]
        if not math.isfinite(inv):
            return ST_SINGULAR
        a[vc, vc] = inv
        for i in range(c + 1, k):
            vi = plan[t + i]
            lic = a[vi, vc] * inv
            a[vi, vc] = lic
            if lic != 0.0:
                for j in range(c + 1, k):
                    vj = plan[t + j]
                    a[vi, vj] -= lic * a[vc, vj]
    return ST_SUCCESS


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def _splu_solve_rows(lu, piv, plan, b, off, k):
    """``a X = B`` (``k`` columns, row-major from ``off``; ``k = 1`` for one vector) after
    :func:`lu_factor_planned`: L of the sparse pivots, the trailing block's row exchanges, L and U, then U of
    the sparse pivots."""
    n = lu.shape[0]
    nt = plan[3]
    o_order, o_ptr, o_idx = _lu_offsets(n)[:3]
    ns = n - nt
    t = o_order + ns
    for c in range(ns):
        v = plan[o_order + c]
        src = off + v * k
        for q in range(o_idx + plan[o_ptr + c], o_idx + plan[o_ptr + c + 1]):
            i = plan[q]
            a = lu[i, v]
            if a != 0.0:
                row = off + i * k
                for j in range(k):
                    b[row + j] -= a * b[src + j]
    for c in range(nt):
        r = piv[c]
        if r != c:
            rc = off + plan[t + c] * k
            rr = off + plan[t + r] * k
            for j in range(k):
                tmp = b[rc + j]
                b[rc + j] = b[rr + j]
                b[rr + j] = tmp
    for i in range(1, nt):
        vi = plan[t + i]
        row = off + vi * k
        for l in range(i):
            a = lu[vi, plan[t + l]]
            if a != 0.0:
                src = off + plan[t + l] * k
                for j in range(k):
                    b[row + j] -= a * b[src + j]
    for i in range(nt - 1, -1, -1):
        vi = plan[t + i]
        row = off + vi * k
        for l in range(nt - 1, i, -1):
            a = lu[vi, plan[t + l]]
            if a != 0.0:
                src = off + plan[t + l] * k
                for j in range(k):
                    b[row + j] -= a * b[src + j]
        d = lu[vi, vi]
        for j in range(k):
            b[row + j] = b[row + j] * d
    for c in range(ns - 1, -1, -1):
        v = plan[o_order + c]
        row = off + v * k
        for q in range(o_idx + plan[o_ptr + c], o_idx + plan[o_ptr + c + 1]):
            l = plan[q]
            a = lu[v, l]
            if a != 0.0:
                src = off + l * k
                for j in range(k):
                    b[row + j] -= a * b[src + j]
        d = lu[v, v]
        for j in range(k):
            b[row + j] = b[row + j] * d


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def _splu_solve_transposed(lu, piv, plan, b):
    """``a^T x = b`` after :func:`lu_factor_planned`: ``a = [L11 0; L21 I] [U11 U12; 0 S]``, ``S = P^T L22
    U22`` the trailing block, so U11^T forward (its columns update the trailing entries too), ``S^T``, then
    L11^T backward."""
    n = lu.shape[0]
    nt = plan[3]
    o_order, o_ptr, o_idx = _lu_offsets(n)[:3]
    ns = n - nt
    t = o_order + ns
    for c in range(ns):
        v = plan[o_order + c]
        w = b[v] * lu[v, v]
        b[v] = w
        if w != 0.0:
            for q in range(o_idx + plan[o_ptr + c], o_idx + plan[o_ptr + c + 1]):
                j = plan[q]
                b[j] -= lu[v, j] * w
    for i in range(nt):
        vi = plan[t + i]
        acc = b[vi]
        for j in range(i):
            acc -= lu[plan[t + j], vi] * b[plan[t + j]]
        b[vi] = acc * lu[vi, vi]
    for i in range(nt - 2, -1, -1):
        vi = plan[t + i]
        acc = b[vi]
        for j in range(nt - 1, i, -1):
            acc -= lu[plan[t + j], vi] * b[plan[t + j]]
        b[vi] = acc
    for c in range(nt - 1, -1, -1):
        r = piv[c]
        if r != c:
            vc = plan[t + c]
            vr = plan[t + r]
            tmp = b[vc]
            b[vc] = b[vr]
            b[vr] = tmp
    for c in range(ns - 1, -1, -1):
        v = plan[o_order + c]
        acc = b[v]
        for q in range(o_idx + plan[o_ptr + c], o_idx + plan[o_ptr + c + 1]):
            acc -= lu[plan[q], v] * b[plan[q]]
        b[v] = acc


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False, inline="always")
def _shifted(jy, fac, lu):
    """``lu = fac I - jy``."""
    n = jy.shape[0]
    for i in range(n):
        for j in range(n):
            lu[i, j] = -jy[i, j]
        lu[i, i] += fac


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def _shifted_planned(jy, fac, lu, plan):
    """``lu = fac I - jy`` on the entries ``plan`` handles (the only ones its factorization and solves read):
    per sparse pivot its diagonal, row and column, then the trailing block."""
    n = jy.shape[0]
    if plan[1] == 0:
        return
    k = plan[3]
    o_order, o_ptr, o_idx = _lu_offsets(n)[:3]
    for c in range(n - k):
        v = plan[o_order + c]
        lu[v, v] = fac - jy[v, v]
        for q in range(o_idx + plan[o_ptr + c], o_idx + plan[o_ptr + c + 1]):
            j = plan[q]
            lu[v, j] = -jy[v, j]
            lu[j, v] = -jy[j, v]
    t = o_order + n - k
    for a in range(k):
        i = plan[t + a]
        for b in range(k):
            j = plan[t + b]
            lu[i, j] = -jy[i, j]
        lu[i, i] += fac


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def plu_factor(jy, fac, lu, piv, plan, pattern):
    """``lu`` = the factors of the stiff solver's matrix ``fac I - jy``: along ``plan`` when one is made (planning
    again first when ``jy`` has a nonzero the plan does not handle, and after delaying a state whose pivot fails),
    else :func:`lu_factor`'s (``plan[0]`` says which). Returns :func:`lu_factor`'s status."""
    n = jy.shape[0]
    if plan.shape[0] > 0 and plan[1] != 0:
        o_flag = _lu_offsets(n)[3]
        handled = pattern[1]
        outside = False
        for i in range(n):  # any nonzero the plan leaves out? (branch-free: nonzero and not handled, True > False)
            for j in range(n):
                outside |= (jy[i, j] != 0.0) > handled[i, j]
        if outside:
            seen = pattern[0]
            for i in range(n):
                for j in range(n):
                    if jy[i, j] != 0.0 and not handled[i, j]:
                        seen[i, j] = True
            lu_plan(pattern, plan)
        _shifted_planned(jy, fac, lu, plan)
        while plan[1] != 0:
            st = lu_factor_planned(lu, piv, plan)
            if st == ST_SUCCESS:
                plan[0] = 1
                return ST_SUCCESS
            if st > 0:
                break
            plan[o_flag - 1 - st] = 1  # delay that state
            lu_plan(pattern, plan)
            _shifted_planned(jy, fac, lu, plan)
        plan[0] = 0
    _shifted(jy, fac, lu)
    return lu_factor(lu, piv)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False, inline="always")
def plu_solve(lu, piv, plan, b):
    """:func:`lu_solve` after :func:`plu_factor`."""
    if plan.shape[0] > 0 and plan[0] == 1:
        _splu_solve_rows(lu, piv, plan, b, 0, 1)
    else:
        lu_solve(lu, piv, b)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False, inline="always")
def plu_solve_rows(lu, piv, plan, b, off, k):
    """:func:`lu_solve_rows` after :func:`plu_factor`."""
    if plan.shape[0] > 0 and plan[0] == 1:
        _splu_solve_rows(lu, piv, plan, b, off, k)
    else:
        lu_solve_rows(lu, piv, b, off, k)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False, inline="always")
def plu_solve_transposed(lu, piv, plan, b):
    """:func:`lu_solve_transposed` after :func:`plu_factor`."""
    if plan.shape[0] > 0 and plan[0] == 1:
        _splu_solve_transposed(lu, piv, plan, b)
    else:
        lu_solve_transposed(lu, piv, b)
