"""The per-row model terms of the Newton family's delta-method covariance
(:mod:`odeinfer.estimators._noise_cov`): ``nc_obs_accumulate``.

A kernel file (``kernels/__init__.py``): in every model's module (the model inlined) and in the
shared module (``ptr_nc_obs_accumulate``, the model through C callbacks, including the directional
second derivative ``jac_p_dir``: the handle with Rodas's callbacks).
"""
import math

import numpy as np
from numba import njit

@njit(cache=True, error_model="numpy")
def nc_obs_accumulate(t, X, D, p, free, a, c, Y, carry, Q):
    """Add the rows' terms to ``G`` and ``Q``; returns the partial ``G`` of the last ``w - 1`` samples.

    Rows ``r = 0..R-1`` (time ``t[r]``, state ``X[r]``, derivative ``D[r]``) cover the samples
    ``r .. r + w - 1`` of a buffer ``Y`` (R + w - 1, n): ``G[r + l] += (J_r^T F_r + H_r) a[r, l] - J_r^T c[r, l]``
    with ``J_r = df/dp[:, free]`` restricted to the used equations (finite ``D[r, q]``; rows with a
    non-finite state are skipped, as in the fit) and ``H_r[m, j] = sum_q e_rq d2f_q/dp_m dx_j``.
    ``carry`` (w - 1, k, n) holds the partial ``G`` of the first ``w - 1`` samples (from earlier rows).
    Row ``r`` is the last to reach sample ``r``, which is then complete:
    ``Q[j] += G[r, :, j] G[r, :, j]^T`` where ``Y[r, j]`` is finite. Only ``w`` samples of ``G`` are
    held (a ring buffer).
    """
    return _nc_obs_accumulate(MODEL_HANDLE, t, X, D, p, free, a, c, Y, carry, Q)


@njit(cache=True, error_model="numpy", inline="always")
def _nc_obs_accumulate(mh, t, X, D, p, free, a, c, Y, carry, Q):
    n = mh[0]
    m_all = mh[1]
    k = free.shape[0]
    w = a.shape[1]
    R = t.shape[0]
    y = np.empty(n)
    f = np.empty(n)
    e = np.empty(n)
    unit = np.zeros(n)
    used = np.empty(n, dtype=np.bool_)
    jp = np.empty((n, m_all))
    jy = np.empty((n, n))
    d2 = np.empty((n, m_all))
    JF = np.empty((k, n))
    Jt = np.empty((k, n))
    ring = np.zeros((w, k, n))
    for i in range(w - 1):
        ring[i] = carry[i]
    for r in range(R):
        ok = True
        for j in range(n):
            y[j] = X[r, j]
            if not math.isfinite(y[j]):
                ok = False
        if ok:
            mh_f(mh, t[r], y, p, f)
            mh_jac_p(mh, t[r], y, p, jp)
            mh_jac_y(mh, t[r], y, p, jy)
            for q in range(n):
                used[q] = math.isfinite(D[r, q])
                e[q] = f[q] - D[r, q] if used[q] else 0.0
            for j in range(n):
                unit[j] = 1.0
                mh_jac_p_dir(mh, t[r], y, p, unit, d2)
                unit[j] = 0.0
                for m in range(k):
                    pm = free[m]
                    s = 0.0
                    for q in range(n):
                        if used[q]:
                            s += jp[q, pm] * jy[q, j] + e[q] * d2[q, pm]
                    JF[m, j] = s
                    Jt[m, j] = jp[j, pm] if used[j] else 0.0
            for l in range(w):
                al = a[r, l]
                cl = c[r, l]
                g = ring[(r + l) % w]
                for m in range(k):
                    for j in range(n):
                        g[m, j] += JF[m, j] * al - Jt[m, j] * cl
        g = ring[r % w]
        for j in range(n):
            if math.isfinite(Y[r, j]):
                for m in range(k):
                    gm = g[m, j]
                    if gm != 0.0:
                        for l in range(k):
                            Q[j, m, l] += gm * g[l, j]
        g[:, :] = 0.0
    out = np.empty((w - 1, k, n))
    for i in range(w - 1):
        out[i] = ring[(R + i) % w]
    return out
