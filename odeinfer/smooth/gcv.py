"""The cubic smoothing spline with its penalty chosen by generalised cross-validation (GCV), in O(n).

``scipy.interpolate.make_smoothing_spline(x, y)`` minimises the GCV criterion over the penalty
``lam`` in ``(0, n)`` with scipy's bounded scalar minimiser, and evaluates the criterion in Python
loops: about 0.25 s per series at n = 200-400, which was 98% of a Newton-family fit (its trajectory
check smooths each state's first observation, and ``derivative="spline"`` smooths every state).
:func:`gcv_lambda` minimises the same criterion, evaluated by a numba kernel in Reinsch's form
(Green & Silverman, *Nonparametric Regression and Generalized Linear Models*, 1994, sec. 2.3 and 3.2):
with ``h_i = x_{i+1} - x_i``, the tridiagonal ``Q`` (n x (n-2)) and ``R`` ((n-2) x (n-2)) of the
natural cubic spline, and ``gamma`` solving ``(R + lam Q'Q) gamma = Q'y``, the residuals are
``y - g = lam Q gamma`` and
``n - tr(A) = lam tr((R + lam Q'Q)^-1 Q'Q)``, so

    GCV(lam) = n |y - g|^2 / (n - tr A)^2 = n |Q gamma|^2 / tr((R + lam Q'Q)^-1 Q'Q)^2,

the trace from the five central bands of the inverse (Hutchinson & de Hoog, Numer. Math. 47, 1985,
from the banded LDL' factors). :class:`SmoothingSpline` evaluates the spline and its derivative from the
same solution (no spline object of scipy's is built: its construction loops in Python too).

The search differs from scipy's, whose bounds ``(0, n)`` are in the data's own time unit: they often
stop it short of the criterion's minimum (11 of 15 simulated alpha-pinene series, n = 50-400 on
(0, 100]), and with times in small units (spacing 1e-2) or large ones (spacing 1e3 and more) its spline
did not smooth at all. :func:`_search` searches in units of the mean spacing; where scipy's bounds hold
the minimum, it finds scipy's penalty (to scipy's search resolution).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["SmoothingSpline", "gcv_lambda", "smoothed_value"]


@njit(cache=True, fastmath=False, error_model="numpy")
def _bands(x, y, qq, r, qty):
    """``Q'Q`` (bands 0, 1, 2 in ``qq[0..2]``), ``R`` (bands 0, 1) and ``Q'y`` of the natural cubic spline."""
    m = x.size - 2
    for c in range(m):
        h0 = x[c + 1] - x[c]
        h1 = x[c + 2] - x[c + 1]
        q0, q2 = 1.0 / h0, 1.0 / h1
        q1 = -q0 - q2
        qq[0, c] = q0 * q0 + q1 * q1 + q2 * q2
        qq[1, c] = 0.0
        qq[2, c] = 0.0
        if c + 1 < m:
            p0 = 1.0 / h1
            p2 = 1.0 / (x[c + 3] - x[c + 2])
            qq[1, c] = q1 * p0 + q2 * (-p0 - p2)
        if c + 2 < m:
            qq[2, c] = q2 / (x[c + 3] - x[c + 2])
        r[0, c] = (h0 + h1) / 3.0
        r[1, c] = h1 / 6.0 if c + 1 < m else 0.0
        qty[c] = q0 * y[c] + q1 * y[c + 1] + q2 * y[c + 2]


@njit(cache=True, fastmath=False, error_model="numpy")
def _gcv(lam, x, qq, r, qty, work):
    """GCV criterion at ``lam > 0`` (module notes); ``inf`` when the system is not positive definite.
    ``work``: (7, n - 2) scratch."""
    m = qty.size
    n = m + 2
    d, l1, l2, g, s0, s1, s2 = work[0], work[1], work[2], work[3], work[4], work[5], work[6]
    for i in range(m):  # LDL' of the pentadiagonal R + lam Q'Q
        a = r[0, i] + lam * qq[0, i]
        b = r[1, i] + lam * qq[1, i]
        if i >= 1:
            a -= d[i - 1] * l1[i - 1] * l1[i - 1]
            b -= d[i - 1] * l1[i - 1] * l2[i - 1]
        if i >= 2:
            a -= d[i - 2] * l2[i - 2] * l2[i - 2]
        if not a > 0.0:
            return np.inf
        d[i] = a
        l1[i] = b / a
        l2[i] = lam * qq[2, i] / a
    for i in range(m):  # forward substitution
        z = qty[i]
        if i >= 1:
            z -= l1[i - 1] * g[i - 1]
        if i >= 2:
            z -= l2[i - 2] * g[i - 2]
        g[i] = z
    for i in range(m - 1, -1, -1):  # D^-1, then back substitution; the inverse's bands on the way
        gi = g[i] / d[i]
        a1 = l1[i] if i + 1 < m else 0.0
        a2 = l2[i] if i + 2 < m else 0.0
        if i + 1 < m:
            gi -= a1 * g[i + 1]
        if i + 2 < m:
            gi -= a2 * g[i + 2]
        g[i] = gi
        t2 = 0.0
        t1 = 0.0
        if i + 2 < m:
            t2 = -a1 * s1[i + 1] - a2 * s0[i + 2]
        if i + 1 < m:
            t1 = -a1 * s0[i + 1] - a2 * s1[i + 1]
        s2[i] = t2
        s1[i] = t1
        s0[i] = 1.0 / d[i] - a1 * t1 - a2 * t2
    trace = 0.0
    for i in range(m):
        trace += s0[i] * qq[0, i] + 2.0 * (s1[i] * qq[1, i] + s2[i] * qq[2, i])
    qg2 = 0.0  # |Q gamma|^2 = |y - g|^2 / lam^2
    for i in range(n):  # (Q gamma)_i from the columns i, i-1, i-2
        v = 0.0
        if i < m:
            v += g[i] / (x[i + 1] - x[i])
        if 1 <= i <= m:
            v += g[i - 1] * (-1.0 / (x[i] - x[i - 1]) - 1.0 / (x[i + 1] - x[i]))
        if 2 <= i:
            v += g[i - 2] / (x[i] - x[i - 1])
        qg2 += v * v
    if not trace > 0.0:
        return np.inf
    return n * qg2 / (trace * trace)


def _search(x, qq, r, qty, work):
    """The GCV penalty, searched in the units of the data's mean spacing ``hbar``: the penalty of time
    unit ``t`` is ``hbar ** 3`` times the penalty of ``t / hbar`` (the roughness integral of ``g''``
    scales as time ** -3), so the search below gives the same smoother in any time unit. A grid of
    ``log10`` penalties 0.25 apart from ``1e-6 hbar^3`` (kernel width 0.03 spacings: interpolation) to
    ``n^4 hbar^3`` (width n spacings: the straight line), then scipy's bounded Brent search in ``log10``
    between the best point's neighbours (to 1e-7 relative). The lowest value on the grid wins when the
    criterion has more than one local minimum."""
    from scipy.optimize import minimize_scalar

    from odeinfer.errors import SolverError

    n = x.size
    shift = 3.0 * np.log10((x[-1] - x[0]) / (n - 1))
    grid = np.arange(-6.0, 4.0 * np.log10(n) + 0.25, 0.25) + shift
    # about 60 points, each O(n): calls of the compiled criterion (a loop kernel of its own would be one more
    # compile on a new machine, for well under a millisecond per search)
    values = np.array([_gcv(10.0 ** u, x, qq, r, qty, work) for u in grid])
    if not np.any(np.isfinite(values)):
        raise SolverError(f"smoothing spline: the GCV criterion is not finite at any penalty from 1e-6 to n^4 "
                          f"in units of the mean spacing cubed ({10.0 ** shift:.3g}); check the data for "
                          "non-finite or constant values")
    k = int(np.nanargmin(np.where(np.isfinite(values), values, np.nan)))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
    est = minimize_scalar(lambda u: _gcv(10.0 ** u, x, qq, r, qty, work), bounds=(lo, hi), method="bounded",
                          options={"xatol": 4e-8})
    u = float(est.x) if est.success and est.fun <= values[k] else grid[k]
    return 10.0 ** u


def _solve(x, y, lam=None):
    """``(lam, gamma)``: the GCV penalty (:func:`_search`) unless ``lam`` is given, and the interior second
    derivatives ``gamma`` at it."""
    from odeinfer.errors import DataError, SolverError

    n = x.size
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise DataError("smoothing spline: t and y must be finite, got non-finite values in "
                        f"{'t' if not np.all(np.isfinite(x)) else 'y'}; drop missing values first")
    if x.ndim != 1 or y.shape != x.shape or n < 5 or not np.all(np.diff(x) > 0):
        raise DataError(f"smoothing spline: t must be strictly increasing with at least 5 distinct times and y of "
                        f"its shape, got t of shape {x.shape} and y of shape {y.shape}; drop missing values and "
                        "sort the times first")
    m = n - 2
    qq, r, qty, work = np.empty((3, m)), np.empty((2, m)), np.empty(m), np.empty((7, m))
    _bands(x, y, qq, r, qty)
    if lam is None:
        lam = _search(x, qq, r, qty, work)
    if not np.isfinite(_gcv(lam, x, qq, r, qty, work)) and lam > 0:
        raise SolverError(f"smoothing spline: the penalty {lam!r} gives no positive definite system")
    return lam, work[3].copy()


def gcv_lambda(x, y) -> float:
    """The penalty ``lam`` of the GCV cubic smoothing spline of ``y`` over strictly increasing ``x`` (at least
    5 points, unit weights), in the units of ``x`` (``make_smoothing_spline(x, y, lam=lam)`` is that spline)."""
    return _solve(np.ascontiguousarray(x, dtype=float), np.ascontiguousarray(y, dtype=float))[0]


class SmoothingSpline:
    """The natural cubic smoothing spline of ``y`` over ``t`` at penalty ``lam`` (None: by GCV, :func:`gcv_lambda`;
    the spline ``make_smoothing_spline(t, y)`` gives, where its search works), held as Reinsch's
    solution: the knots ``x``, fitted values ``g`` and second derivatives ``gamma`` (zero at the ends).
    Replicate measurements (equal times) enter as their mean. Calling it evaluates the spline (``nu = 0``) or
    its first derivative (``nu = 1``) at any times: on the piece that holds each (Green & Silverman eq. 2.5);
    outside the data, the end piece's cubic, as scipy's spline extrapolates."""

    def __init__(self, t, y, lam=None):
        x = np.asarray(t, dtype=float)
        y = np.asarray(y, dtype=float)
        if x.size and np.any(np.diff(x) == 0):
            x, index = np.unique(x, return_inverse=True)
            y = np.bincount(index, weights=y) / np.bincount(index)
        x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
        self.lam, interior = _solve(x, y, lam)
        self.x = x
        self.gamma = np.concatenate(([0.0], interior, [0.0]))
        h = np.diff(x)
        d = np.diff(self.gamma) / h  # (Q gamma)_k = d_k - d_{k-1}, with d_{-1} = d_{n-1} = 0 (natural ends)
        self.g = y - self.lam * (np.concatenate((d, [0.0])) - np.concatenate(([0.0], d)))

    def __call__(self, at, nu=0):
        from odeinfer.errors import InputError

        x, g, gamma = self.x, self.g, self.gamma
        at = np.asarray(at, dtype=float)
        i = np.clip(np.searchsorted(x, at, side="right") - 1, 0, x.size - 2)
        h = x[i + 1] - x[i]
        a, b = at - x[i], x[i + 1] - at
        if nu == 0:
            curvature = (1.0 + a / h) * gamma[i + 1] + (1.0 + b / h) * gamma[i]
            return (a * g[i + 1] + b * g[i]) / h - a * b * curvature / 6.0
        if nu == 1:
            slope = (3.0 * a * a / h - h) * gamma[i + 1] - (3.0 * b * b / h - h) * gamma[i]
            return (g[i + 1] - g[i]) / h + slope / 6.0
        raise InputError(f"nu: expected 0 (the spline) or 1 (its derivative), got {nu!r}")


def smoothed_value(t, y, at) -> float:
    """The GCV smoothing spline of ``y`` over nondecreasing ``t`` at ``at`` (:class:`SmoothingSpline`)."""
    return float(SmoothingSpline(t, y)(float(at)))
