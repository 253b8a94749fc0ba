"""Batched model evaluations for equation-error (gradient-matching) estimators.

Appended to every generated model module (see ``odeinfer/solve/kernels/__init__.py``):
``model_f``, ``model_jac_p``, ``N_STATES`` and ``N_PARAMS`` are globals there. The kernels the
estimators call, ``gm_residuals`` and ``gm_normal_eq``, take the model through the handle
(``_gm_*(mh, ...)``), so the shared module has them too (``ptr_gm_residuals``,
``ptr_gm_normal_eq`` in ``pointer.py``): a new model's first fit needs no per-model compile.
Used by :mod:`odeinfer.estimators.newton` (Syafiie, Subiantoro, Andasari & Tadeo,
Newton-Raphson / gradient descent on ``E = f(t_d, x_d, a) - x'_d``).

Row layout: ``t`` (R,), ``X`` (R, n) states at which ``f`` is evaluated, ``D`` (R, n)
derivative estimates; the residual of row ``i``, equation ``k`` is
``E[i, k] = f_k(t[i], X[i], p) - D[i, k]``. A row is skipped when ``X[i]`` has a
non-finite entry; an equation ``(i, k)`` is skipped when ``D[i, k]`` is non-finite or
its weight ``w[k]`` is 0 (missing data, equation subsampling).
"""
import math

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy")
def eval_f_batch(t, Y, p, F):
    """``F[i] = f(t[i], Y[i], p)``; F (R, n)."""
    y = np.empty(N_STATES)
    f = np.empty(N_STATES)
    for i in range(t.shape[0]):
        for k in range(N_STATES):
            y[k] = Y[i, k]
        model_f(t[i], y, p, f)
        for k in range(N_STATES):
            F[i, k] = f[k]


@njit(cache=True, error_model="numpy")
def eval_jac_p_batch(t, Y, p, J):
    """``J[i] = df/dp (t[i], Y[i], p)``; J (R, n, m)."""
    y = np.empty(N_STATES)
    jp = np.empty((N_STATES, N_PARAMS))
    for i in range(t.shape[0]):
        for k in range(N_STATES):
            y[k] = Y[i, k]
        model_jac_p(t[i], y, p, jp)
        for k in range(N_STATES):
            for a in range(N_PARAMS):
                J[i, k, a] = jp[k, a]


@njit(cache=True, error_model="numpy")
def gm_residuals(t, X, D, p, E):
    """``E[i, k] = f_k(t[i], X[i], p) - D[i, k]`` (NaN where the row is skipped)."""
    _gm_residuals(MODEL_HANDLE, t, X, D, p, E)


@njit(cache=True, error_model="numpy", inline="always")
def _gm_residuals(mh, t, X, D, p, E):
    n = mh[0]
    y = np.empty(n)
    f = np.empty(n)
    for i in range(t.shape[0]):
        ok = True
        for k in range(n):
            y[k] = X[i, k]
            if not math.isfinite(y[k]):
                ok = False
        if not ok:
            for k in range(n):
                E[i, k] = np.nan
            continue
        mh_f(mh, t[i], y, p, f)
        for k in range(n):
            E[i, k] = f[k] - D[i, k]


@njit(cache=True, error_model="numpy")
def gm_normal_eq(t, X, D, p, w, want_meat, jtj, jte, meat, acc):
    """Accumulate (add to) the normal equations of the rows ``t, X, D`` at parameters ``p``.

    ``jtj`` (m, m) += sum w J_r J_r^T (upper triangle only), ``jte`` (m,) += sum w J_r E_r,
    ``meat`` (m, m) += sum w^2 E_r^2 J_r J_r^T (upper triangle; only if ``want_meat``),
    ``acc[0]`` += sum w E_r^2, ``acc[1]`` += number of equations used,
    ``acc[2]`` += number of equations whose residual or Jacobian is not finite.
    """
    _gm_normal_eq(MODEL_HANDLE, t, X, D, p, w, want_meat, jtj, jte, meat, acc)


@njit(cache=True, error_model="numpy", inline="always")
def _gm_normal_eq(mh, t, X, D, p, w, want_meat, jtj, jte, meat, acc):
    n = mh[0]
    m = mh[1]
    y = np.empty(n)
    f = np.empty(n)
    jp = np.empty((n, m))
    for i in range(t.shape[0]):
        ok = True
        for k in range(n):
            y[k] = X[i, k]
            if not math.isfinite(y[k]):
                ok = False
        if not ok:
            continue
        mh_f(mh, t[i], y, p, f)
        mh_jac_p(mh, t[i], y, p, jp)
        for k in range(n):
            wk = w[k]
            d = D[i, k]
            if wk == 0.0 or not math.isfinite(d):
                continue
            e = f[k] - d
            acc[1] += 1.0
            if not math.isfinite(e):
                acc[2] += 1.0
            acc[0] += wk * e * e
            for a in range(m):
                ja = jp[k, a]
                if ja == 0.0:
                    continue
                jte[a] += wk * ja * e
                for b in range(a, m):
                    jtj[a, b] += wk * ja * jp[k, b]
                if want_meat:
                    s = wk * wk * e * e * ja
                    for b in range(a, m):
                        meat[a, b] += s * jp[k, b]
