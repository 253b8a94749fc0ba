"""Batched model evaluations for equation-error (gradient-matching) estimators.

Appended to every generated model module (see ``odeinfer/solve/kernels/__init__.py``):
``model_f``, ``model_jac_p``, ``N_STATES`` and ``N_PARAMS`` are globals there. The kernels the
estimators call, ``gm_residuals`` and ``gm_normal_eq``, take the model through the handle
(``_gm_*(mh, ...)``), so the shared module has them too (``ptr_gm_residuals``,
``ptr_gm_normal_eq`` in ``pointer.py``): a new model's first fit needs no per-model compile.
Used by :mod:`odeinfer.estimators.newton` (Syafiie, Subiantoro, Andasari & Tadeo,
Newton-Raphson / gradient descent on ``E = f(t_d, x_d, a) - x'_d``); ``gm_descent`` runs the
gradient-descent loop itself (thousands of steps of a few microseconds each: in Python, the loop
around the kernel took 20 times the kernel's own time).

Row layout: ``t`` (R,), ``X`` (R, n) states at which ``f`` is evaluated, ``D`` (R, n)
derivative estimates; the residual of row ``i``, equation ``k`` is
``E[i, k] = f_k(t[i], X[i], p) - D[i, k]``. A row is skipped when ``X[i]`` has a
non-finite entry; an equation ``(i, k)`` is skipped when ``D[i, k]`` is non-finite or
its weight ``w[k]`` is 0 (missing data, equation subsampling).
"""
import math

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy", fastmath=False)
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


@njit(cache=True, error_model="numpy", fastmath=False)
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


@njit(cache=True, error_model="numpy", fastmath=False)
def gm_residuals(t, X, D, p, E):
    """``E[i, k] = f_k(t[i], X[i], p) - D[i, k]`` (NaN where the row is skipped)."""
    _gm_residuals(MODEL_HANDLE, t, X, D, p, E)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
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


@njit(cache=True, error_model="numpy", fastmath=False)
def gm_normal_eq(t, X, D, p, w, want_meat, jtj, jte, meat, acc):
    """Accumulate (add to) the normal equations of the rows ``t, X, D`` at parameters ``p``.

    ``jtj`` (m, m) += sum w J_r J_r^T (upper triangle only), ``jte`` (m,) += sum w J_r E_r,
    ``meat`` (m, m) += sum w^2 E_r^2 J_r J_r^T (upper triangle; only if ``want_meat``),
    ``acc[0]`` += sum w E_r^2, ``acc[1]`` += number of equations used,
    ``acc[2]`` += number of equations whose residual or Jacobian is not finite.
    """
    _gm_normal_eq(MODEL_HANDLE, t, X, D, p, w, want_meat, jtj, jte, meat, acc)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
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


#: ``gm_descent``'s end: the test that stopped it (odeinfer.estimators._newton_core maps them to words)
DESCENT_GTOL = 0  # the gradient cosine at the current point is <= gtol
DESCENT_ZERO = 1  # the Cauchy step is zero (g^T B g <= 0)
DESCENT_XTOL = 2  # the accepted step is <= xtol relative to the point
DESCENT_STALLED = 3  # no decrease along the gradient within max_backtrack halvings, the last trial step <= xtol
DESCENT_NO_DECREASE = 4  # the same, with a longer last trial step
DESCENT_MAX_ITER = 5
DESCENT_START = 6  # the normal equations are not finite at the start
DESCENT_DIVERGED = 7  # max_backtrack = 0: a step left the finite numbers
DESCENT_NOT_FINITE = 8  # max_backtrack = 0: the normal equations are not finite at the point reached


@njit(cache=True, error_model="numpy", fastmath=False)
def gm_descent(t, X, D, base, free, w, theta, max_iter, xtol, gtol, max_backtrack, hist, info):
    """Steepest descent with the exact Cauchy step on ``0.5 sum w E^2`` (Syafiie et al., eqs. 30-31), from
    ``theta`` (the free parameters ``p[free]`` of ``p = base``): each iteration steps by ``-eta g`` with
    ``eta = g^T g / g^T B g`` (``B = J^T J``, ``g = J^T E`` over the free parameters), halving ``eta`` up to
    ``max_backtrack`` times until the cost does not grow (relative slack 1e-13); it stops when the gradient
    cosine ``max_j |g_j| / (sqrt(B_jj) ||E||)`` at the current point is <= ``gtol`` or a step is
    <= ``xtol (max |theta| + xtol)``.

    With ``max_backtrack = 0``, the stochastic gradient's full-data epochs: every Cauchy step is taken, the
    tests come after each step (the gradient's first), and the step test needs every ``B_jj > 0`` at the
    point the step left and measures the change of ``theta``.

    ``theta`` (k,) is overwritten with the last accepted point; ``hist`` (max_iter + 1, 3) receives per
    accepted point its cost, step (max |delta|) and gradient cosine, the start first; ``info[0]`` the
    iterations, ``info[1]`` the rows of ``hist`` written, ``info[2]`` the equations the start's sums used.
    Returns a ``DESCENT_*`` code."""
    return _gm_descent(MODEL_HANDLE, t, X, D, base, free, w, theta, max_iter, xtol, gtol, max_backtrack, hist, info)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _descent_eval(mh, t, X, D, p, free, w, jtj, jte, meat, acc, B, g):
    """The normal equations at ``p`` over the free parameters: ``B`` (k, k), ``g`` (k,); returns
    ``(cost, finite)``."""
    m = jtj.shape[0]
    for a in range(m):
        jte[a] = 0.0
        for b in range(m):
            jtj[a, b] = 0.0
    acc[0] = 0.0
    acc[1] = 0.0
    acc[2] = 0.0
    _gm_normal_eq(mh, t, X, D, p, w, False, jtj, jte, meat, acc)
    k = free.shape[0]
    finite = acc[2] == 0.0
    for i in range(k):
        g[i] = jte[free[i]]
        if not math.isfinite(g[i]):
            finite = False
        for j in range(k):
            a, b = free[i], free[j]
            B[i, j] = jtj[a, b] if a <= b else jtj[b, a]
    cost = 0.5 * acc[0]
    if not math.isfinite(cost):
        finite = False
    return cost, finite


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _descent_cosine(B, g, cost):
    if cost <= 0.0:
        return 0.0
    top = -1.0
    for j in range(g.shape[0]):
        if B[j, j] > 0.0:
            r = abs(g[j]) / math.sqrt(B[j, j])
            if r > top:
                top = r
    return 0.0 if top < 0.0 else top / math.sqrt(2.0 * cost)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _descent_small(delta, theta, xtol):
    dmax = 0.0
    tmax = 0.0
    for j in range(delta.shape[0]):
        dmax = max(dmax, abs(delta[j]))
        tmax = max(tmax, abs(theta[j]))
    return dmax <= xtol * (tmax + xtol)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _gm_descent(mh, t, X, D, base, free, w, theta, max_iter, xtol, gtol, max_backtrack, hist, info):
    m = base.shape[0]
    k = free.shape[0]
    every = max_backtrack == 0  # the stochastic gradient's full-data steps
    jtj = np.zeros((m, m))
    jte = np.zeros(m)
    meat = np.zeros((1, 1))
    acc = np.zeros(3)
    B = np.empty((k, k))
    g = np.empty(k)
    Bt = np.empty((k, k))
    gt = np.empty(k)
    p = base.copy()
    trial = np.empty(k)
    delta = np.empty(k)
    for j in range(k):
        p[free[j]] = theta[j]
    cost, finite = _descent_eval(mh, t, X, D, p, free, w, jtj, jte, meat, acc, B, g)
    cosine = _descent_cosine(B, g, cost)
    hist[0, 0] = cost
    hist[0, 1] = 0.0
    hist[0, 2] = cosine
    info[0] = 0
    info[1] = 1
    info[2] = int(acc[1])
    if not finite:
        return DESCENT_START
    for it in range(1, max_iter + 1):
        if not every and cosine <= gtol:
            info[0] = it - 1
            return DESCENT_GTOL
        gg = 0.0
        gbg = 0.0
        for i in range(k):
            gg += g[i] * g[i]
            bi = 0.0
            for j in range(k):
                bi += B[i, j] * g[j]
            gbg += g[i] * bi
        eta = gg / gbg if gbg > 0.0 else 0.0
        if eta == 0.0 and not every:
            info[0] = it - 1
            return DESCENT_ZERO
        ok = every
        for _ in range(max_backtrack):
            for j in range(k):
                delta[j] = -eta * g[j]
                trial[j] = theta[j] + delta[j]
                p[free[j]] = trial[j]
            c_new, f_new = _descent_eval(mh, t, X, D, p, free, w, jtj, jte, meat, acc, Bt, gt)
            if f_new and c_new <= cost * (1.0 + 1e-13):
                ok = True
                break
            eta *= 0.5
        if not ok:
            info[0] = it - 1
            return DESCENT_STALLED if _descent_small(delta, theta, xtol) else DESCENT_NO_DECREASE
        touched = True
        if every:
            finite_step = True
            for j in range(k):
                touched = touched and B[j, j] > 0.0
                trial[j] = theta[j] + (-eta * g[j])
                delta[j] = trial[j] - theta[j]  # the change of theta, as the epoch's test measures it
                finite_step = finite_step and math.isfinite(trial[j])
                p[free[j]] = trial[j]
            if not finite_step:
                for j in range(k):
                    theta[j] = trial[j]
                info[0] = it
                return DESCENT_DIVERGED
            c_new, f_new = _descent_eval(mh, t, X, D, p, free, w, jtj, jte, meat, acc, Bt, gt)
        step = 0.0
        for j in range(k):
            theta[j] = trial[j]
            g[j] = gt[j]
            step = max(step, abs(delta[j]))
            for i in range(k):
                B[i, j] = Bt[i, j]
        cost = c_new
        cosine = _descent_cosine(B, g, cost)
        hist[it, 0] = cost
        hist[it, 1] = step
        hist[it, 2] = cosine
        info[0] = it
        info[1] = it + 1
        if every:
            if not f_new:
                return DESCENT_NOT_FINITE
            if cosine <= gtol:
                return DESCENT_GTOL
            if touched and _descent_small(delta, theta, xtol):
                return DESCENT_XTOL
        elif _descent_small(delta, theta, xtol):
            return DESCENT_XTOL
    info[0] = max_iter
    return DESCENT_MAX_ITER
