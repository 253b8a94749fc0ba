"""Small dense linear algebra for the stiff solver: LU with partial pivoting.

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
