"""Numba kernels for the GCV scan of regression B-splines: banded normal equations in O(n k^2).

A B-spline design matrix has at most ``k + 1`` nonzeros per row (``k`` the degree), so
``P'P`` is banded with half-bandwidth ``k``. For each candidate knot vector we accumulate
``P'P`` (lower band storage) and ``P'y`` directly from the de Boor–Cox values at the data,
factor by banded Cholesky and compute the residual sum of squares by a second pass: no
dense ``n x K`` matrix, no BLAS call (many tiny BLAS calls thrash on a shared machine).
Status codes instead of exceptions (house rule 3): ``rss_banded`` returns ``-1.0`` when
``P'P`` is not positive definite (the caller falls back to the dense pseudo-inverse path).

States observed at the same times share the design matrix: the scan kernels take ``Y`` of
shape (m, n) and accumulate and factor ``P'P`` once per candidate for all ``m`` states (the
RSS of each state is bit-for-bit the single-state one); the final fit (:func:`fit_final_all`)
returns, for every state with its own knots, the coefficients, the (constrained)
``(P'P)^-1``, the residuals and the robust sandwich in one call. Cubic splines take
unrolled paths (same floating-point operations in the same order as the generic loops).
Call trees are kept shallow (numba re-optimises every callee inside each caller, so deep
helper chains multiply the first-compile time).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from odeinfer.smooth._bsplines import _basis, _basis3, _span

__all__ = ["rss_banded", "rss_scan_uniform", "rss_banded_multi", "rss_scan_uniform_multi", "fit_final_all"]


@njit(cache=True)
def _chol_banded(A, k, K):
    """In-place banded Cholesky (lower band storage ``A[d, j] = M[j + d, j]``); False if not PD."""
    for j in range(K):
        s = A[0, j]
        for m in range(max(0, j - k), j):
            v = A[j - m, m]
            s -= v * v
        if not s > 0.0:
            return False
        djj = np.sqrt(s)
        A[0, j] = djj
        for i in range(j + 1, min(K, j + k + 1)):
            s = A[i - j, j]
            for m in range(max(0, i - k), j):
                s -= A[i - m, m] * A[j - m, m]
            A[i - j, j] = s / djj
    return True


@njit(cache=True)
def _solve_banded(A, k, K, b):
    """Solve ``L L' x = b`` in place with the banded Cholesky factor ``A``."""
    for i in range(K):
        s = b[i]
        for m in range(max(0, i - k), i):
            s -= A[i - m, m] * b[m]
        b[i] = s / A[0, i]
    for i in range(K - 1, -1, -1):
        s = b[i]
        for m in range(i + 1, min(K, i + k + 1)):
            s -= A[m - i, i] * b[m]
        b[i] = s / A[0, i]


@njit(cache=True)
def _rows_general(knots, k, K, t, vals, spans, N, left, right):
    """Span index and the ``k + 1`` nonzero basis values of every ``t[q]`` (de Boor-Cox)."""
    for q in range(t.size):
        i = _span(knots, k, K, t[q])
        _basis(knots, k, i, t[q], N, left, right)
        spans[q] = i
        for r in range(k + 1):
            vals[q, r] = N[r]


@njit(cache=True)
def _fill_uniform_knots(a, b, k, K, knots):
    """The clamped uniform knot vector of ``K`` functions on ``[a, b]`` into ``knots[:K + k + 1]``."""
    n_int = K - k - 1
    for j in range(k + 1):
        knots[j] = a
        knots[K + j] = b
    for j in range(n_int):
        knots[k + 1 + j] = a + (b - a) * (j + 1) / (n_int + 1)


@njit(cache=True)
def _rows_uniform(a, b, k, K, t, knots, vals, spans, N, left, right):
    """``_rows_general`` for the clamped uniform knots ``knots`` of ``K`` functions on ``[a, b]``:
    spans found arithmetically; cubic interior spans by the closed-form uniform polynomials, the
    ``k`` spans at each clamped end by de Boor-Cox."""
    n_int = K - k - 1
    h = (b - a) / (n_int + 1)
    for q in range(t.size):
        x = t[q]
        s = (x - a) / h
        j = int(s) if s > 0 else 0
        if j > n_int:
            j = n_int
        i = j + k  # knots[i] <= x < knots[i + 1] (up to rounding at knots: both sides give the same values)
        if k == 3 and j >= 2 and j <= n_int - 2:
            u = s - j
            u2 = u * u
            u3 = u2 * u
            m = 1.0 - u
            N[0] = m * m * m / 6.0
            N[1] = (3.0 * u3 - 6.0 * u2 + 4.0) / 6.0
            N[2] = (-3.0 * u3 + 3.0 * u2 + 3.0 * u + 1.0) / 6.0
            N[3] = u3 / 6.0
        else:
            if x >= knots[K]:
                i = _span(knots, k, K, x)
            else:  # from the arithmetic guess to the span of the binary search (same index)
                while i > k and knots[i] > x:
                    i -= 1
                while i < K - 1 and knots[i + 1] <= x:
                    i += 1
            if k == 3:
                _basis3(knots, i, x, N)
            else:
                _basis(knots, k, i, x, N, left, right)
        spans[q] = i
        for r in range(k + 1):
            vals[q, r] = N[r]


@njit(cache=True)
def _gram(k, K, vals, spans, A):
    """Lower band of ``P'P`` into ``A[:, :K]`` (zeroed first; cubic case unrolled, same sums)."""
    for d in range(k + 1):
        for j in range(K):
            A[d, j] = 0.0
    if k == 3:
        for q in range(spans.size):
            i = np.uint64(spans[q] - 3)  # unsigned index: no negative-index wraparound code
            i1 = i + np.uint64(1)
            i2 = i + np.uint64(2)
            i3 = i + np.uint64(3)
            v0 = vals[q, 0]
            v1 = vals[q, 1]
            v2 = vals[q, 2]
            v3 = vals[q, 3]
            A[0, i] += v0 * v0
            A[1, i] += v1 * v0
            A[0, i1] += v1 * v1
            A[2, i] += v2 * v0
            A[1, i1] += v2 * v1
            A[0, i2] += v2 * v2
            A[3, i] += v3 * v0
            A[2, i1] += v3 * v1
            A[1, i2] += v3 * v2
            A[0, i3] += v3 * v3
        return
    for q in range(spans.size):
        i = spans[q]
        for r in range(k + 1):
            v = vals[q, r]
            for c in range(r + 1):
                A[r - c, i - k + c] += v * vals[q, c]


@njit(cache=True)
def _rhs(k, K, vals, spans, y, out):
    """``P'y`` into ``out[:K]``."""
    for j in range(K):
        out[j] = 0.0
    if k == 3:
        # runs of equal span accumulate in registers (the same additions in the same order as
        # ``out[i] += ...`` point by point, without a store-to-load chain through memory)
        n = spans.size
        q = 0
        while q < n:
            i = spans[q]
            i0 = np.uint64(i - 3)  # unsigned index: no negative-index wraparound code
            i1 = i0 + np.uint64(1)
            i2 = i0 + np.uint64(2)
            i3 = i0 + np.uint64(3)
            a0 = out[i0]
            a1 = out[i1]
            a2 = out[i2]
            a3 = out[i3]
            while q < n and spans[q] == i:
                yq = y[q]
                a0 += vals[q, 0] * yq
                a1 += vals[q, 1] * yq
                a2 += vals[q, 2] * yq
                a3 += vals[q, 3] * yq
                q += 1
            out[i0] = a0
            out[i1] = a1
            out[i2] = a2
            out[i3] = a3
        return
    for q in range(spans.size):
        i = spans[q]
        yq = y[q]
        for r in range(k + 1):
            out[i - k + r] += vals[q, r] * yq


@njit(cache=True)
def _con_direction(A, k, K, knots, t_con, N, left, right, g, av):
    """``av`` = basis row at ``t_con``, ``g = (P'P)^-1 av`` (``A``: banded factor); returns ``av'g``."""
    for j in range(K):
        g[j] = 0.0
    i = _span(knots, k, K, t_con)
    _basis(knots, k, i, t_con, N, left, right)
    for r in range(k + 1):
        g[i - k + r] = N[r]
    for j in range(K):
        av[j] = g[j]
    _solve_banded(A, k, K, g)
    s = 0.0
    for j in range(K):
        s += av[j] * g[j]
    return s


@njit(cache=True)
def _rss(k, vals, spans, y, coef):
    rss = 0.0
    if k == 3:
        for q in range(y.size):
            i = np.uint64(spans[q] - 3)
            f = vals[q, 0] * coef[i]
            f += vals[q, 1] * coef[i + np.uint64(1)]
            f += vals[q, 2] * coef[i + np.uint64(2)]
            f += vals[q, 3] * coef[i + np.uint64(3)]
            e = y[q] - f
            rss += e * e
        return rss
    for q in range(y.size):
        i = spans[q]
        f = 0.0
        for r in range(k + 1):
            f += vals[q, r] * coef[i - k + r]
        e = y[q] - f
        rss += e * e
    return rss


@njit(cache=True)
def _rss_states(A, k, K, vals, spans, Y, has_con, xcon, g, av, s, out, col, coef):
    """RSS of every row of ``Y`` into ``out[:, col]``: ``A`` holds the banded Cholesky factor of
    ``P'P``; with a constraint, ``av`` is the basis row at its time, ``g = (P'P)^-1 av``, ``s = av'g``.
    (Callees are leaves: shallow call trees compile much faster in numba.)"""
    for m in range(Y.shape[0]):
        _rhs(k, K, vals, spans, Y[m], coef)
        _solve_banded(A, k, K, coef)
        if has_con:
            ac = 0.0
            for j in range(K):
                ac += av[j] * coef[j]
            lam = (ac - xcon[m]) / s
            for j in range(K):
                coef[j] -= lam * g[j]
        out[m, col] = _rss(k, vals, spans, Y[m], coef)


@njit(cache=True)
def rss_banded_multi(knots, k, t, Y, has_con, t_con, xcon):
    """Residual sums of squares of the least-squares splines of every row of ``Y``.

    Parameters
    ----------
    knots : float64 (K + k + 1,)
    k : int
        Degree.
    t : float64 (n,)
    Y : float64 (m, n)
        Observations of ``m`` states at the same times ``t``.
    has_con : bool
    t_con : float
    xcon : float64 (m,)
        Constraints ``x_m(t_con) = xcon[m]``, used when ``has_con``.

    Returns
    -------
    float64 (m,)
        RSS per state, or -1.0 where ``P'P`` is not positive definite.
    """
    K = knots.size - k - 1
    m = Y.shape[0]
    out = np.empty((m, 1))
    A = np.zeros((k + 1, K))
    N = np.empty(k + 1)
    left = np.empty(k + 1)
    right = np.empty(k + 1)
    n = t.size
    spans = np.empty(n, np.int64)
    vals = np.empty((n, k + 1))
    coef = np.empty(K)
    g = np.empty(K)
    av = np.empty(K)
    _rows_general(knots, k, K, t, vals, spans, N, left, right)
    _gram(k, K, vals, spans, A)
    if not _chol_banded(A, k, K):
        out[:, 0] = -1.0
    else:
        s = _con_direction(A, k, K, knots, t_con, N, left, right, g, av) if has_con else 1.0
        _rss_states(A, k, K, vals, spans, Y, has_con, xcon, g, av, s, out, 0, coef)
    return out[:, 0]


@njit(cache=True)
def rss_scan_uniform_multi(a, b, k, K_lo, K_hi, t, Y, has_con, t_con, xcon):
    """``rss_banded_multi`` for every clamped uniform knot vector on ``[a, b]`` with ``K_lo..K_hi``
    functions: one accumulation and factorisation of ``P'P`` per candidate for all states.

    Returns float64 (m, K_hi - K_lo + 1): RSS per state and candidate (-1.0 where ``P'P`` is singular).
    """
    m = Y.shape[0]
    out = np.empty((m, K_hi - K_lo + 1))
    n = t.size
    A = np.zeros((k + 1, K_hi))
    vals = np.empty((n, k + 1))
    spans = np.empty(n, np.int64)
    N = np.empty(k + 1)
    left = np.empty(k + 1)
    right = np.empty(k + 1)
    kbuf = np.empty(K_hi + k + 1)
    coef = np.empty(K_hi)
    g = np.empty(K_hi)
    av = np.empty(K_hi)
    for K in range(K_lo, K_hi + 1):
        knots = kbuf[:K + k + 1]
        _fill_uniform_knots(a, b, k, K, knots)
        _rows_uniform(a, b, k, K, t, knots, vals, spans, N, left, right)
        _gram(k, K, vals, spans, A)
        if not _chol_banded(A, k, K):
            out[:, K - K_lo] = -1.0
            continue
        s = _con_direction(A, k, K, knots, t_con, N, left, right, g, av) if has_con else 1.0
        _rss_states(A, k, K, vals, spans, Y, has_con, xcon, g, av, s, out, K - K_lo, coef)
    return out


@njit(cache=True)
def rss_banded(knots, k, t, y, has_con, t_con, x_con):
    """Residual sum of squares of the least-squares spline (optionally with ``x(t_con) = x_con``).

    Single-state form of :func:`rss_banded_multi`: ``knots`` (K + k + 1,), degree ``k``,
    ``t, y`` (n,). Returns the RSS, or -1.0 if ``P'P`` is not positive definite.
    """
    xc = np.empty(1)
    xc[0] = x_con
    return rss_banded_multi(knots, k, t, y.reshape(1, y.size), has_con, t_con, xc)[0]


@njit(cache=True)
def rss_scan_uniform(a, b, k, K_lo, K_hi, t, y, has_con, t_con, x_con):
    """Single-state form of :func:`rss_scan_uniform_multi`: float64 (K_hi - K_lo + 1,)."""
    xc = np.empty(1)
    xc[0] = x_con
    return rss_scan_uniform_multi(a, b, k, K_lo, K_hi, t, y.reshape(1, y.size), has_con, t_con, xc)[0]


@njit(cache=True)
def fit_final_all(knots_flat, koffs, k, t, Y, has_con, t_con, xcon, uniform, coffs, goffs, coef, G, resid,
                  cov_r, status):
    """Least-squares splines of every row of ``Y``, each with its own knots, and the pieces of
    their covariances, in one call.

    Parameters
    ----------
    knots_flat : float64 (sum_j (K_j + k + 1),)
        The knot vectors of the states one after the other; state ``j``'s is
        ``knots_flat[koffs[j]:koffs[j + 1]]``.
    koffs : int64 (m + 1,)
    k : int
    t : float64 (n,)
    Y : float64 (m, n)
    has_con : bool
    t_con : float
    xcon : float64 (m,)
        Constraints ``x_j(t_con) = xcon[j]`` when ``has_con``.
    uniform : bool
        The knot vectors are clamped uniform on ``[knots[0], knots[-1]]`` (closed-form basis in the
        interior spans, equal to de Boor-Cox up to rounding).
    coffs, goffs : int64 (m + 1,)
        Offsets of state ``j`` in ``coef`` (cumulated ``K_j``) and in ``G``, ``cov_r`` (cumulated ``K_j^2``).
    coef : float64 (sum K_j,), out
        Coefficients (constrained when ``has_con``).
    G : float64 (sum K_j^2,), out
        ``(P'P)^-1`` row-major per state, in the constrained form ``G - G a a' G / (a' G a)``.
    resid : float64 (m, n), out
    cov_r : float64 (sum K_j^2,), out
        HC0 sandwich ``G P' diag(r^2) P G`` row-major per state.
    status : int64 (m,), out
        0 on success, 1 if ``P'P`` is not positive definite (that state's outputs undefined).
    """
    n = t.size
    for jj in range(Y.shape[0]):
        knots = knots_flat[koffs[jj]:koffs[jj + 1]]
        y = Y[jj]
        x_con = xcon[jj]
        c0 = coffs[jj]
        g0 = goffs[jj]
        res = resid[jj]
        K = knots.size - k - 1
        A = np.zeros((k + 1, K))
        N = np.empty(k + 1)
        left = np.empty(k + 1)
        right = np.empty(k + 1)
        spans = np.empty(n, np.int64)
        vals = np.empty((n, k + 1))
        g = np.empty(K)
        av = np.empty(K)
        c = np.empty(K)
        if uniform:
            _rows_uniform(knots[0], knots[knots.size - 1], k, K, t, knots, vals, spans, N, left, right)
        else:
            _rows_general(knots, k, K, t, vals, spans, N, left, right)
        _gram(k, K, vals, spans, A)
        if not _chol_banded(A, k, K):
            status[jj] = 1
            continue
        for j in range(K):
            for i in range(K):
                c[i] = 0.0
            c[j] = 1.0
            _solve_banded(A, k, K, c)
            for i in range(K):
                G[g0 + i * K + j] = c[i]
        s = 1.0
        if has_con:
            s = _con_direction(A, k, K, knots, t_con, N, left, right, g, av)
            for i in range(K):
                for j in range(K):
                    G[g0 + i * K + j] -= g[i] * g[j] / s
        _rhs(k, K, vals, spans, y, c)
        _solve_banded(A, k, K, c)
        if has_con:
            ac = 0.0
            for j in range(K):
                ac += av[j] * c[j]
            lam = (ac - x_con) / s
            for j in range(K):
                c[j] -= lam * g[j]
        for j in range(K):
            coef[c0 + j] = c[j]
        B = np.zeros((k + 1, K))  # P' diag(r^2) P, lower band storage
        for q in range(n):
            i0 = spans[q] - k
            f = 0.0
            for r in range(k + 1):
                f += vals[q, r] * c[i0 + r]
            e = y[q] - f
            res[q] = e
            for r in range(k + 1):  # rows of diag(r) P
                vals[q, r] *= e
        _gram(k, K, vals, spans, B)
        GB = np.empty((K, K))
        for i in range(K):  # GB = G B (B symmetric banded, lower band B[l - j, j] = B_lj for l >= j)
            for j in range(K):
                acc = 0.0
                for l in range(max(0, j - k), min(K, j + k + 1)):
                    acc += G[g0 + i * K + l] * (B[l - j, j] if l >= j else B[j - l, l])
                GB[i, j] = acc
        for i in range(K):
            for j in range(i, K):
                acc = 0.0
                for l in range(K):
                    acc += GB[i, l] * G[g0 + l * K + j]
                cov_r[g0 + i * K + j] = acc
                cov_r[g0 + j * K + i] = acc
        status[jj] = 0
