"""Numba kernels for the GCV scan of regression B-splines: banded normal equations in O(n k^2).

A B-spline design matrix has at most ``k + 1`` nonzeros per row (``k`` the degree), so
``P'P`` is banded with half-bandwidth ``k``. For each candidate knot vector we accumulate
``P'P`` (lower band storage) and ``P'y`` directly from the de Boor–Cox values at the data,
factor by banded Cholesky and compute the residual sum of squares by a second pass: no
dense ``n x K`` matrix, no BLAS call (many tiny BLAS calls thrash on a shared machine).
Status codes instead of exceptions (house rule 3): ``rss_banded`` returns ``-1.0`` when
``P'P`` is not positive definite (the caller falls back to the dense pseudo-inverse path).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["rss_banded"]


@njit(cache=True)
def _span(knots, k, K, x):
    """Index ``i`` in ``[k, K-1]`` with ``knots[i] <= x < knots[i+1]`` (left limit at the right end)."""
    if x >= knots[K]:
        i = K - 1
        while i > k and knots[i] >= knots[K]:
            i -= 1
        return i
    lo, hi = k, K
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if knots[mid] <= x:
            lo = mid
        else:
            hi = mid
    return lo


@njit(cache=True)
def _basis(knots, k, i, x, N, left, right):
    """The ``k + 1`` nonzero B-splines of degree ``k`` at ``x`` in span ``i`` (functions i-k..i)."""
    N[0] = 1.0
    for j in range(1, k + 1):
        left[j] = x - knots[i + 1 - j]
        right[j] = knots[i + j] - x
        saved = 0.0
        for r in range(j):
            den = right[r + 1] + left[j - r]
            tmp = N[r] / den if den != 0.0 else 0.0
            N[r] = saved + right[r + 1] * tmp
            saved = left[j - r] * tmp
        N[j] = saved


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
def _constrained_rss(A, k, K, coef, knots, has_con, t_con, x_con, N, left, right, y, vals, spans):
    """Apply the equality constraint ``x(t_con) = x_con`` to the LS coefficients (in place; ``A``
    holds the banded Cholesky factor of ``P'P``) and return the residual sum of squares."""
    if has_con:
        g = np.zeros(K)
        i = _span(knots, k, K, t_con)
        _basis(knots, k, i, t_con, N, left, right)
        for a in range(k + 1):
            g[i - k + a] = N[a]
        av = g.copy()
        _solve_banded(A, k, K, g)  # G a
        s = 0.0
        ac = 0.0
        for j in range(K):
            s += av[j] * g[j]
            ac += av[j] * coef[j]
        lam = (ac - x_con) / s
        for j in range(K):
            coef[j] -= lam * g[j]
    rss = 0.0
    for q in range(y.size):
        i = spans[q]
        f = 0.0
        for a in range(k + 1):
            f += vals[q, a] * coef[i - k + a]
        r = y[q] - f
        rss += r * r
    return rss


@njit(cache=True)
def rss_banded(knots, k, t, y, has_con, t_con, x_con):
    """Residual sum of squares of the least-squares spline (optionally with ``x(t_con) = x_con``).

    Parameters
    ----------
    knots : float64 (K + k + 1,)
    k : int
        Degree.
    t, y : float64 (n,)
    has_con : bool
    t_con, x_con : float
        The equality constraint, used when ``has_con``.

    Returns
    -------
    float
        RSS, or -1.0 if ``P'P`` is not positive definite.
    """
    K = knots.size - k - 1
    A = np.zeros((k + 1, K))
    b = np.zeros(K)
    N = np.empty(k + 1)
    left = np.empty(k + 1)
    right = np.empty(k + 1)
    n = t.size
    spans = np.empty(n, np.int64)
    vals = np.empty((n, k + 1))
    for q in range(n):
        i = _span(knots, k, K, t[q])
        _basis(knots, k, i, t[q], N, left, right)
        spans[q] = i
        for a in range(k + 1):
            vals[q, a] = N[a]
            ca = i - k + a
            b[ca] += N[a] * y[q]
            for c in range(a + 1):
                A[a - c, i - k + c] += N[a] * N[c]
    if not _chol_banded(A, k, K):
        return -1.0
    coef = b.copy()
    _solve_banded(A, k, K, coef)
    return _constrained_rss(A, k, K, coef, knots, has_con, t_con, x_con, N, left, right, y, vals, spans)


@njit(cache=True)
def _rss_uniform(a, b, k, K, t, y, has_con, t_con, x_con, A, bvec, vals, spans, N, left, right, knots):
    """``rss_banded`` for the clamped uniform knot vector with ``K`` functions; buffers preallocated.

    Spans are found arithmetically and, for cubic splines, interior spans use the closed-form
    uniform B-spline polynomials (no divisions); the ``k`` spans at each clamped end use de Boor-Cox.
    """
    n_int = K - k - 1
    h = (b - a) / (n_int + 1)
    for j in range(k + 1):
        knots[j] = a
        knots[K + j] = b
    for j in range(n_int):
        knots[k + 1 + j] = a + (b - a) * (j + 1) / (n_int + 1)
    for d in range(k + 1):
        for j in range(K):
            A[d, j] = 0.0
    for j in range(K):
        bvec[j] = 0.0
    n = t.size
    for q in range(n):
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
            i = _span(knots, k, K, x)
            _basis(knots, k, i, x, N, left, right)
        spans[q] = i
        yq = y[q]
        for r in range(k + 1):
            v = N[r]
            vals[q, r] = v
            bvec[i - k + r] += v * yq
            for c in range(r + 1):
                A[r - c, i - k + c] += v * N[c]
    if not _chol_banded(A, k, K):
        return -1.0
    coef = bvec[:K].copy()
    _solve_banded(A, k, K, coef)
    return _constrained_rss(A, k, K, coef, knots, has_con, t_con, x_con, N, left, right, y, vals, spans)


@njit(cache=True)
def rss_scan_uniform(a, b, k, K_lo, K_hi, t, y, has_con, t_con, x_con):
    """``rss_banded`` for every clamped uniform knot vector on ``[a, b]`` with ``K_lo..K_hi`` functions.

    Returns float64 (K_hi - K_lo + 1,): RSS per candidate (-1.0 where ``P'P`` is singular).
    """
    out = np.empty(K_hi - K_lo + 1)
    n = t.size
    A = np.zeros((k + 1, K_hi))
    bvec = np.zeros(K_hi)
    vals = np.empty((n, k + 1))
    spans = np.empty(n, np.int64)
    N = np.empty(k + 1)
    left = np.empty(k + 1)
    right = np.empty(k + 1)
    for K in range(K_lo, K_hi + 1):
        knots = np.empty(K + k + 1)
        out[K - K_lo] = _rss_uniform(a, b, k, K, t, y, has_con, t_con, x_con, A[:, :K].copy(), bvec, vals,
                                     spans, N, left, right, knots)
    return out
