"""Numba B-spline evaluation: span search, de Boor-Cox values and derivatives (NURBS Book A2.3).

:func:`basis_dense` evaluates every B-spline of a knot vector (or a derivative) at a set of
points without building scipy objects (equal to scipy's ``BSpline`` up to rounding; tested
against it). The helpers are shared with the banded least-squares kernels of
:mod:`odeinfer.smooth._banded`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["basis_dense"]


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
def _basis3(knots, i, x, N):
    """``_basis`` for ``k = 3`` unrolled (the same operations in the same order)."""
    l1 = x - knots[i]
    r1 = knots[i + 1] - x
    l2 = x - knots[i - 1]
    r2 = knots[i + 2] - x
    l3 = x - knots[i - 2]
    r3 = knots[i + 3] - x
    # j = 1
    den = r1 + l1
    tmp = 1.0 / den if den != 0.0 else 0.0
    n0 = 0.0 + r1 * tmp
    n1 = l1 * tmp
    # j = 2
    den = r1 + l2
    tmp = n0 / den if den != 0.0 else 0.0
    a0 = 0.0 + r1 * tmp
    saved = l2 * tmp
    den = r2 + l1
    tmp = n1 / den if den != 0.0 else 0.0
    a1 = saved + r2 * tmp
    a2 = l1 * tmp
    # j = 3
    den = r1 + l3
    tmp = a0 / den if den != 0.0 else 0.0
    N[0] = 0.0 + r1 * tmp
    saved = l3 * tmp
    den = r2 + l2
    tmp = a1 / den if den != 0.0 else 0.0
    N[1] = saved + r2 * tmp
    saved = l2 * tmp
    den = r3 + l1
    tmp = a2 / den if den != 0.0 else 0.0
    N[2] = saved + r3 * tmp
    N[3] = l1 * tmp


@njit(cache=True)
def _ders(knots, k, i, x, nu, ndu, a, left, right, ders):
    """Values and derivatives up to ``nu`` (<= k) of the ``k + 1`` nonzero B-splines at ``x`` in
    span ``i`` into ``ders[0..nu, 0..k]`` (The NURBS Book, algorithm A2.3)."""
    ndu[0, 0] = 1.0
    for j in range(1, k + 1):
        left[j] = x - knots[i + 1 - j]
        right[j] = knots[i + j] - x
        saved = 0.0
        for r in range(j):
            ndu[j, r] = right[r + 1] + left[j - r]
            temp = ndu[r, j - 1] / ndu[j, r]
            ndu[r, j] = saved + right[r + 1] * temp
            saved = left[j - r] * temp
        ndu[j, j] = saved
    for j in range(k + 1):
        ders[0, j] = ndu[j, k]
    for r in range(k + 1):
        s1 = 0
        s2 = 1
        a[0, 0] = 1.0
        for kk in range(1, nu + 1):
            d = 0.0
            rk = r - kk
            pk = k - kk
            if r >= kk:
                a[s2, 0] = a[s1, 0] / ndu[pk + 1, rk]
                d = a[s2, 0] * ndu[rk, pk]
            j1 = 1 if rk >= -1 else -rk
            j2 = kk - 1 if r - 1 <= pk else k - r
            for j in range(j1, j2 + 1):
                a[s2, j] = (a[s1, j] - a[s1, j - 1]) / ndu[pk + 1, rk + j]
                d += a[s2, j] * ndu[rk + j, pk]
            if r <= pk:
                a[s2, kk] = -a[s1, kk - 1] / ndu[pk + 1, r]
                d += a[s2, kk] * ndu[r, pk]
            ders[kk, r] = d
            tmp = s1
            s1 = s2
            s2 = tmp
    fac = float(k)
    for kk in range(1, nu + 1):
        for j in range(k + 1):
            ders[kk, j] *= fac
        fac *= k - kk


@njit(cache=True)
def basis_dense(knots, k, t, nu, out):
    """Every B-spline of ``knots`` (degree ``k``) or its ``nu``-th derivative at ``t`` into ``out``.

    ``t`` is clipped to ``[knots[0], knots[-1]]``; right-continuous at interior knots, the left
    limit at the right end (as scipy's ``BSpline``). ``out``: float64 (len(t), K), overwritten.
    """
    K = knots.size - k - 1
    for q in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[q, j] = 0.0
    if nu > k:
        return
    N = np.empty(k + 1)
    left = np.empty(k + 1)
    right = np.empty(k + 1)
    ndu = np.empty((k + 1, k + 1))
    a = np.empty((2, k + 1))
    ders = np.empty((nu + 1, k + 1))
    lo = knots[0]
    hi = knots[knots.size - 1]
    for q in range(t.size):
        x = min(max(t[q], lo), hi)
        i = _span(knots, k, K, x)
        if nu == 0:
            _basis(knots, k, i, x, N, left, right)
            for r in range(k + 1):
                out[q, i - k + r] = N[r]
        else:
            _ders(knots, k, i, x, nu, ndu, a, left, right, ders)
            for r in range(k + 1):
                out[q, i - k + r] = ders[nu, r]
