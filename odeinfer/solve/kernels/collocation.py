"""Numba kernels of :class:`odeinfer.estimators.Simultaneous`: collocation residuals and Jacobian blocks.

A kernel file like the solvers' (``kernels/__init__.py``): appended to every model's generated
module (``coll_constraints``, the model inlined) and to the shared module (``ptr_coll_constraints``
in ``pointer.py``, the model through C callbacks), so a new model's first Simultaneous fit does
not wait for a per-model compile. The model comes as the handle ``mh`` (``mh_f``, ``mh_jac_y``,
``mh_jac_p``). Names carry the ``coll_`` / ``_coll_`` prefix.

Grid of one experiment: ``t`` (N,), states ``X`` (N, n). Interval ``j`` (0 <= j < N-1),
``h = t[j+1] - t[j]``, has ``n`` constraint equations

* trapezoid (Osborne 2008, eq. 5):
  ``c_j = x_{j+1} - x_j - h/2 (f_j + f_{j+1})``;
* Hermite-Simpson (compressed form):
  ``x_m = (x_j + x_{j+1})/2 + h/8 (f_j - f_{j+1})``, ``f_m = f(t_j + h/2, x_m)``,
  ``c_j = x_{j+1} - x_j - h/6 (f_j + 4 f_m + f_{j+1})``.

Both keep the two-block structure ``c_j = c_jj(x_j) + c_j(j+1)(x_{j+1})`` (plus the parameter
block), so the Jacobian has, per interval and equation row ``i``, the entries
``A[i, :]`` (d/dx_j, n), ``B[i, :]`` (d/dx_{j+1}, n), ``P[i, :]`` (d/dtheta_free, q) stored
consecutively: ``jdata[(j * n + i) * (2n + q) + ...]``. The sparsity pattern (rows, columns)
is built once in Python in the same order.
"""
import math

import numpy as np
from numba import njit

COLL_OK = 0
COLL_NONFINITE = 1


@njit(cache=True, error_model="numpy", fastmath=False)
def _coll_eval_nodes(mh, t, X, p, pidx, F, JY, JP, want_jac):
    """``F[j] = f(t_j, x_j)``; if ``want_jac``: ``JY[j] = df/dy``, ``JP[j] = df/dtheta[:, pidx]``.

    Returns ``COLL_NONFINITE`` if a value is not finite, else ``COLL_OK``.
    """
    n = mh[0]
    q = pidx.shape[0]
    y = np.empty(n)
    f = np.empty(n)
    jy = np.empty((n, n))
    jp = np.empty((n, mh[1]))
    status = COLL_OK
    for j in range(t.shape[0]):
        for k in range(n):
            y[k] = X[j, k]
        mh_f(mh, t[j], y, p, f)
        for k in range(n):
            F[j, k] = f[k]
            if not math.isfinite(f[k]):
                status = COLL_NONFINITE
        if want_jac:
            mh_jac_y(mh, t[j], y, p, jy)
            mh_jac_p(mh, t[j], y, p, jp)
            for k in range(n):
                for l in range(n):
                    JY[j, k, l] = jy[k, l]
                for a in range(q):
                    JP[j, k, a] = jp[k, pidx[a]]
    return status


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def _coll_trapezoid(t, X, F, JY, JP, c, jdata, want_jac):
    """Trapezoidal constraints ``c`` ((N-1) n,) and Jacobian values ``jdata`` from node values."""
    n = X.shape[1]
    q = JP.shape[2]
    w = 2 * n + q
    for j in range(t.shape[0] - 1):
        h = t[j + 1] - t[j]
        hh = 0.5 * h
        for i in range(n):
            row = j * n + i
            c[row] = X[j + 1, i] - X[j, i] - hh * (F[j, i] + F[j + 1, i])
            if want_jac:
                base = row * w
                for l in range(n):
                    jdata[base + l] = -hh * JY[j, i, l]
                    jdata[base + n + l] = -hh * JY[j + 1, i, l]
                jdata[base + i] -= 1.0
                jdata[base + n + i] += 1.0
                for a in range(q):
                    jdata[base + 2 * n + a] = -hh * (JP[j, i, a] + JP[j + 1, i, a])
    return COLL_OK


@njit(cache=True, error_model="numpy", fastmath=False)
def _coll_hermite_simpson(mh, t, X, F, JY, JP, p, pidx, c, jdata, want_jac):
    """Compressed Hermite-Simpson constraints and Jacobian values (the midpoint is eliminated)."""
    n = mh[0]
    q = pidx.shape[0]
    w = 2 * n + q
    xm = np.empty(n)
    fm = np.empty(n)
    jm = np.empty((n, n))
    jpm_full = np.empty((n, mh[1]))
    da = np.empty((n, n))   # dx_m/dx_j
    db = np.empty((n, n))   # dx_m/dx_{j+1}
    dp = np.empty((n, q))   # dx_m/dtheta
    status = COLL_OK
    for j in range(t.shape[0] - 1):
        h = t[j + 1] - t[j]
        tm = t[j] + 0.5 * h
        for k in range(n):
            xm[k] = 0.5 * (X[j, k] + X[j + 1, k]) + 0.125 * h * (F[j, k] - F[j + 1, k])
        mh_f(mh, tm, xm, p, fm)
        for i in range(n):
            row = j * n + i
            c[row] = X[j + 1, i] - X[j, i] - h / 6.0 * (F[j, i] + 4.0 * fm[i] + F[j + 1, i])
            if not math.isfinite(c[row]):
                status = COLL_NONFINITE
        if not want_jac:
            continue
        mh_jac_y(mh, tm, xm, p, jm)
        mh_jac_p(mh, tm, xm, p, jpm_full)
        for k in range(n):
            for l in range(n):
                da[k, l] = 0.125 * h * JY[j, k, l]
                db[k, l] = -0.125 * h * JY[j + 1, k, l]
            da[k, k] += 0.5
            db[k, k] += 0.5
            for a in range(q):
                dp[k, a] = 0.125 * h * (JP[j, k, a] - JP[j + 1, k, a])
        for i in range(n):
            row = j * n + i
            base = row * w
            for l in range(n):
                sa = 0.0
                sb = 0.0
                for k in range(n):
                    sa += jm[i, k] * da[k, l]
                    sb += jm[i, k] * db[k, l]
                jdata[base + l] = -h / 6.0 * (JY[j, i, l] + 4.0 * sa)
                jdata[base + n + l] = -h / 6.0 * (JY[j + 1, i, l] + 4.0 * sb)
            jdata[base + i] -= 1.0
            jdata[base + n + i] += 1.0
            for a in range(q):
                s = jpm_full[i, pidx[a]]
                for k in range(n):
                    s += jm[i, k] * dp[k, a]
                jdata[base + 2 * n + a] = -h / 6.0 * (JP[j, i, a] + 4.0 * s + JP[j + 1, i, a])
    return status


@njit(cache=True, error_model="numpy", fastmath=False)
def coll_constraints(scheme, t, X, p, pidx, F, JY, JP, c, jdata, want_jac):
    """Constraints of one experiment: ``scheme`` 0 trapezoid, 1 Hermite-Simpson; returns a status.

    ``F`` (N, n), ``JY`` (N, n, n), ``JP`` (N, n, q) are work buffers; ``c`` ((N-1) n,) and
    ``jdata`` ((N-1) n (2n + q),) are outputs (``jdata`` only if ``want_jac``).
    """
    return _coll_constraints(MODEL_HANDLE, scheme, t, X, p, pidx, F, JY, JP, c, jdata, want_jac)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _coll_constraints(mh, scheme, t, X, p, pidx, F, JY, JP, c, jdata, want_jac):
    status = _coll_eval_nodes(mh, t, X, p, pidx, F, JY, JP, want_jac)
    if status != COLL_OK:
        return status
    if scheme == 0:
        _coll_trapezoid(t, X, F, JY, JP, c, jdata, want_jac)
    else:
        status = _coll_hermite_simpson(mh, t, X, F, JY, JP, p, pidx, c, jdata, want_jac)
    for r in range(c.shape[0]):
        if not math.isfinite(c[r]):
            return COLL_NONFINITE
    if want_jac:
        for r in range(jdata.shape[0]):
            if not math.isfinite(jdata[r]):
                return COLL_NONFINITE
    return status
