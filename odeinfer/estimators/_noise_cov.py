"""Covariance of the equation-error estimators by the delta method through the observations.

The rows of :mod:`odeinfer.estimators.finite_difference` are linear in the samples: the state
``x_r = sum_i a_ri y_i`` and the derivative ``d_r = sum_i c_ri y_i`` (the stencil). The
estimating equation ``S(theta, y) = sum_r J_r^T e_r = 0`` with ``e_r = f(t_r, x_r, theta) - d_r``
then gives, to first order in the measurement noise ``eps`` (independent, variance
``sigma_j^2`` per state),

    theta_hat - theta ~ -B^-1 sum_i G_i eps_i,   G_i = sum_r [(J_r^T F_r + H_r) a_ri - J_r^T c_ri],

with ``B = sum_r J_r^T J_r`` (Gauss-Newton), ``F_r = df/dx (t_r, x_r)`` and
``H_r[:, j] = sum_k e_rk d^2 f_k / dtheta dx_j`` (the regressors' effect on ``J_r``), so

    Cov(theta_hat) = B^-1 (sum_i G_i diag(sigma^2) G_i^T) B^-1.

Unlike the residual sandwich (HC0), this accounts for the correlation a stencil puts between
neighbouring rows (the ``1/dt`` parts of neighbouring forward differences cancel in the sum)
and, to first order, for the noise in the regressors ``x_r`` (errors-in-variables). It ignores
the bias of the differences (spec §5.3). ``sigma_j^2`` is estimated from the data alone by a
difference-based estimator (:func:`noise_variance`, after Gasser, Sroka & Jennen-Steinmetz 1986).
"""

from __future__ import annotations

import numpy as np

__all__ = ["noise_variance", "stencil_weights", "observation_meat"]


def noise_variance(t, y, half_width: int = 2) -> float:
    """Difference-based estimate of the noise variance of one sampled series (no model needed).

    Each finite sample is compared with the Lagrange polynomial through its ``half_width``
    finite neighbours on each side (degree ``2 half_width - 1``): ``r_i = y_i - sum_l w_il y_l``,
    ``sigma^2 = mean(r_i^2 / (1 + ||w_i||^2))``. ``half_width=1`` is the estimator of Gasser,
    Sroka & Jennen-Steinmetz (1986, Biometrika 73, 625-633); the default cubic version's signal
    bias is of order ``h^4`` times the fourth derivative instead of ``h^2`` times the second (it
    matters on fast dynamics such as Lorenz at dt = 0.05). NaN with fewer than
    ``2 half_width + 1`` finite samples.
    """
    ok = np.isfinite(y)
    t, y = np.asarray(t, float)[ok], np.asarray(y, float)[ok]
    s = int(half_width)
    N = t.size
    if N < 2 * s + 1:
        return float("nan")
    centre = np.arange(s, N - s)
    nb = centre[:, None] + np.r_[-s:0, 1:s + 1][None, :]  # (R, 2s) neighbour indices
    tau = t[nb] - t[centre][:, None]
    w = np.ones(tau.shape)
    for m in range(2 * s):
        for l in range(2 * s):
            if l != m:
                w[:, m] *= -tau[:, l] / (tau[:, m] - tau[:, l])
    r = y[centre] - np.sum(w * y[nb], axis=1)
    return float(np.mean(r * r / (1.0 + np.sum(w * w, axis=1))))


def stencil_weights(scheme, t):
    """Per row ``r``: the samples ``start[r] + 0..w-1`` and the weights of ``x_r`` (a) and ``d_r`` (c).

    Returns ``(start (R,), a (R, w), c (R, w))``, or None for the spline scheme (a global smoother).
    """
    t = np.asarray(t, float)
    N = t.size
    if scheme.name == "forward":
        h = np.diff(t)
        a = np.zeros((N - 1, 2))
        a[:, 0] = 1.0
        return np.arange(N - 1), a, np.column_stack([-1.0 / h, 1.0 / h])
    if scheme.name == "second_order":
        h1, h2 = t[1:-1] - t[:-2], t[2:] - t[1:-1]
        c = np.column_stack([-(2.0 * h1 + h2) / (h1 * (h1 + h2)), (h1 + h2) / (h1 * h2), -h1 / (h2 * (h1 + h2))])
        a = np.zeros((N - 2, 3))
        a[:, 0] = 1.0
        return np.arange(N - 2), a, c
    if scheme.name == "local_polynomial":
        h = scheme.window // 2
        R, w = N - 2 * h, 2 * h + 1
        a, c = np.zeros((R, w)), np.zeros((R, w))
        powers = np.arange(int(scheme.degree) + 1)
        for r in range(R):
            tw = t[r:r + w] - t[r + h]
            scale = max(tw[-1], -tw[0])
            P = np.linalg.pinv((tw / scale)[:, None] ** powers)  # (degree + 1, w): LS coefficients
            a[r], c[r] = P[0], P[1] / scale
        if scheme.evaluate_at == "measured":
            a[:] = 0.0
            a[:, h] = 1.0
        return np.arange(R), a, c
    return None


def observation_meat(module, free, p, scheme, t, Y, X, D, sigma2):
    """``sum_i G_i diag(sigma^2) G_i^T`` over the samples of one series (free parameters only).

    Parameters
    ----------
    module : generated model module (``model_jac_y``, ``eval_jac_p_batch``)
    free : ndarray of int (k,)
    p : ndarray (n_params,)
        All parameters at the estimate.
    scheme : DerivativeScheme
    t : ndarray (N,), Y : ndarray (N, n)
        The series (NaN = missing).
    X, D : ndarray (R, n)
        Its rows, as used in the fit.
    sigma2 : ndarray (n,)
        Noise variance per state.
    """
    start, a, c = stencil_weights(scheme, t)
    R, n = X.shape
    used = np.isfinite(D) & np.all(np.isfinite(X), axis=1)[:, None]  # equations the fit used
    Xs = np.where(np.isfinite(X), X, 0.0)
    tr = _row_times(scheme, t, R)
    J = np.empty((R, n, p.size))
    module.eval_jac_p_batch(tr, Xs, p, J)
    J = J[:, :, free] * used[:, :, None]
    E = np.empty((R, n))
    module.gm_residuals(tr, Xs, D, p, E)
    E = np.where(used, E, 0.0)
    F = np.empty((R, n, n))
    d2 = np.empty((n, p.size))
    E2 = np.zeros((R, free.size, n))  # sum_k e_rk d2f_k / dtheta dx_j: the x-dependence of J_r
    unit = np.zeros(n)
    for r in range(R):
        module.model_jac_y(tr[r], Xs[r], p, F[r])
        for j in range(n):
            unit[:] = 0.0
            unit[j] = 1.0
            module.model_jac_p_dir(tr[r], Xs[r], p, unit, d2)
            E2[r, :, j] = E[r] @ d2[:, free]
    JF = np.einsum("rkm,rkj->rmj", J, F) + E2  # d(J_r^T e_r)/dx_r, (R, k, n)
    Jt = J.transpose(0, 2, 1)
    G = np.zeros((t.size, free.size, n))
    for w in range(a.shape[1]):
        np.add.at(G, start + w, JF * a[:, w, None, None] - Jt * c[:, w, None, None])
    s2 = np.where(np.isfinite(Y), np.nan_to_num(sigma2)[None, :], 0.0)
    return np.einsum("imj,ilj,ij->ml", G, G, s2)


def _row_times(scheme, t, R):
    lo = scheme.window // 2 if scheme.name == "local_polynomial" else 0
    return np.ascontiguousarray(t[lo:lo + R])
