"""Covariance of the equation-error estimators by the delta method through the observations.

The rows of :mod:`odeinfer.estimators.finite_difference` are linear in the samples: the state
``x_r = sum_i a_ri y_i`` and the derivative ``d_r = sum_i c_ri y_i`` (the stencil). The
estimating equation ``S(theta, y) = sum_r J_r^T e_r = 0`` with ``e_r = f(t_r, x_r, theta) - d_r``
then gives, to first order in the measurement noise ``eps`` (independent, variance
``sigma_j^2`` per state),

    theta_hat - theta ~ -B^-1 sum_i G_i eps_i,   G_i = sum_r [(J_r^T F_r + H_r) a_ri - J_r^T c_ri],

with ``B = sum_r J_r^T J_r`` (Gauss-Newton), ``F_r = df/dx (t_r, x_r)`` and
``H_r[:, j] = sum_k e_rk d^2 f_k / dtheta dx_j`` (the regressors' effect on ``J_r``), so

    Cov(theta_hat) = B^-1 M B^-1,   M = sum_i G_i diag(sigma^2) G_i^T = sum_j sigma_j^2 Q_j,
    Q_j = sum_{i: y_ij observed} G_i[:, j] G_i[:, j]^T.

Unlike the residual sandwich (HC0), this accounts for the correlation a stencil puts between
neighbouring rows (the ``1/dt`` parts of neighbouring forward differences cancel in the sum)
and, to first order, for the noise in the regressors ``x_r`` (errors-in-variables). It ignores
the bias of the differences (spec §5.3). ``sigma_j^2`` is estimated from the data alone by a
difference-based estimator (:func:`noise_variance`, after Gasser, Sroka & Jennen-Steinmetz 1986).

One pass, O(chunk) memory (:class:`ObservationMeat`): ``G_i`` only receives contributions from
the rows whose stencil window (``w`` samples) contains ``i``, so consecutive chunks of samples are
processed with a carry of the last ``w - 1`` samples and their partial ``G_i``; ``Q_j`` and the
noise-variance sums (whose local cubic pseudo-residuals carry the last 4 finite samples per
state) are accumulated in the same pass and combined at the end. The per-row model terms are a
numba kernel, ``nc_obs_accumulate`` (``odeinfer/solve/kernels/noise_cov.py``), part of every model's
generated module and of the shared one, so it calls the exact model derivatives and a new model's
first fit does not wait for a per-model compile.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from odeinfer.solve import abi

__all__ = ["noise_variance", "stencil_weights", "quotient_noise", "observation_meat", "ObservationMeat"]

_HALF_WIDTH = 2  # local cubic pseudo-residuals (see noise_variance)

# --- noise variance ---------------------------------------------------------------------------
@njit(cache=True, error_model="numpy")
def _pseudo_residual_sums(t, y, s, out):
    """``out[0] += sum_c r_c^2 / (1 + ||w_c||^2)``, ``out[1] += count`` over centres ``s .. N-s-1``.

    ``r_c = y_c - sum_l w_cl y_l``: the Lagrange polynomial through the ``s`` samples on each side.
    """
    N = t.shape[0]
    tau = np.empty(2 * s)
    for c in range(s, N - s):
        tc = t[c]
        for m in range(s):
            tau[m] = t[c - s + m] - tc
            tau[s + m] = t[c + 1 + m] - tc
        r = y[c]
        ww = 0.0
        for m in range(2 * s):
            num = 1.0
            den = 1.0
            for l in range(2 * s):
                if l != m:
                    num *= -tau[l]
                    den *= tau[m] - tau[l]
            wm = num / den
            r -= wm * y[c - s + m if m < s else c + 1 + m - s]
            ww += wm * wm
        out[0] += r * r / (1.0 + ww)
        out[1] += 1.0


def noise_variance(t, y, half_width: int = _HALF_WIDTH) -> float:
    """Difference-based estimate of the noise variance of one sampled series (no model needed).

    Each finite sample is compared with the Lagrange polynomial through its ``half_width``
    finite neighbours on each side (degree ``2 half_width - 1``): ``r_i = y_i - sum_l w_il y_l``,
    ``sigma^2 = mean(r_i^2 / (1 + ||w_i||^2))``. ``half_width=1`` is the estimator of Gasser,
    Sroka & Jennen-Steinmetz (1986, Biometrika 73, 625-633); the default cubic version's signal
    bias is of order ``h^4`` times the fourth derivative instead of ``h^2`` times the second (it
    matters on fast dynamics such as Lorenz at dt = 0.05). NaN with fewer than
    ``2 half_width + 1`` finite samples.

    Replicate measurements (equal times, ``Data(..., replicates=True)``) measure the noise directly:
    the estimate is then their pooled within-time variance ``sum (y_ij - mean_i)^2 / (N - K)`` (N finite
    samples at K distinct times), which needs no smoothness of the signal.
    """
    y = np.asarray(y, float)
    ok = np.isfinite(y)
    t = np.asarray(t, float)
    if np.any(np.diff(t[ok]) == 0):
        times, index = np.unique(t[ok], return_inverse=True)
        counts = np.bincount(index)
        means = np.bincount(index, weights=y[ok]) / counts
        dof = int(ok.sum()) - times.size
        return float(np.sum((y[ok] - means[index]) ** 2) / dof)
    out = np.zeros(2)
    _pseudo_residual_sums(np.ascontiguousarray(np.asarray(t, float)[ok]), np.ascontiguousarray(y[ok]),
                          int(half_width), out)
    return float(out[0] / out[1]) if out[1] > 0 else float("nan")


@njit(cache=True, error_model="numpy")
def _noise_push(t, Y, s, ct, cy, cn, out):
    """Noise-variance sums of the next samples, per state over its finite samples.

    ``ct``, ``cy`` (n, 2s): the last ``cn[j]`` finite samples of state ``j`` seen before (updated);
    ``out`` (n, 2): sums and counts of :func:`_pseudo_residual_sums`.
    """
    for j in range(Y.shape[1]):
        m = cn[j]
        tf = np.empty(m + t.shape[0])
        yf = np.empty(m + t.shape[0])
        tf[:m] = ct[j, :m]
        yf[:m] = cy[j, :m]
        for i in range(t.shape[0]):
            if math.isfinite(Y[i, j]):
                tf[m] = t[i]
                yf[m] = Y[i, j]
                m += 1
        _pseudo_residual_sums(tf[:m], yf[:m], s, out[j])
        keep = min(m, 2 * s)
        ct[j, :keep] = tf[m - keep:m]
        cy[j, :keep] = yf[m - keep:m]
        cn[j] = keep


# --- stencils ---------------------------------------------------------------------------------
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
        R, w = max(N - 2 * h, 0), 2 * h + 1
        tw = t[np.arange(R)[:, None] + np.arange(w)] - t[h:h + R, None]
        scale = np.maximum(tw[:, -1], -tw[:, 0])
        V = (tw / scale[:, None])[:, :, None] ** np.arange(int(scheme.degree) + 1)  # (R, w, degree + 1)
        P = np.linalg.solve(np.einsum("rwa,rwb->rab", V, V), V.transpose(0, 2, 1))  # LS coefficients
        a, c = P[:, 0].copy(), P[:, 1] / scale[:, None]
        if scheme.evaluate_at == "measured":
            a[:] = 0.0
            a[:, h] = 1.0
        return np.arange(R), a, c
    return None


def quotient_noise(scheme, t, Y):
    """How much of a stencil's derivative estimates is measurement noise, from the data alone.

    Per state ``j``: ``sigma_j`` (:func:`noise_variance`, local cubic pseudo-residuals), the noise sd
    of the quotients ``sigma_j sqrt(mean_r sum_l c_rl^2)`` (``sqrt(2) sigma / dt`` for the forward
    difference) and their spread (sample sd of ``d_r`` over the rows). A ratio noise / spread near 1
    means the quotients are mostly noise. Returns three arrays (n_states,) (NaN where undefined), or
    None for the spline scheme (no stencil).
    """
    if scheme.name == "spline":
        return None
    t = np.asarray(t, float)
    Y = np.asarray(Y, float)
    n = Y.shape[1]
    sigma, noise, spread = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    if t.size < scheme.min_samples() + 2:  # fewer than three quotients: nothing to measure
        return sigma, noise, spread
    start, _, c = stencil_weights(scheme, t)
    idx = start[:, None] + np.arange(c.shape[1])
    for j in range(n):
        win = Y[idx, j]
        d = np.sum(c * win, axis=1)
        ok = np.isfinite(d)
        if ok.sum() < 3:
            continue
        sigma[j] = math.sqrt(noise_variance(t, Y[:, j]))
        noise[j] = sigma[j] * math.sqrt(float(np.mean(np.sum(c[ok] ** 2, axis=1))))
        spread[j] = float(np.std(d[ok], ddof=1))
    return sigma, noise, spread


# --- accumulation -----------------------------------------------------------------------------
@njit(cache=True, error_model="numpy")
def _add_q(G, Y, Q):
    """``Q[j] += sum_i G[i, :, j] G[i, :, j]^T`` over the samples with finite ``Y[i, j]``."""
    k = G.shape[1]
    for i in range(G.shape[0]):
        for j in range(G.shape[2]):
            if not np.isfinite(Y[i, j]):
                continue
            for m in range(k):
                g = G[i, m, j]
                if g == 0.0:
                    continue
                for l in range(k):
                    Q[j, m, l] += g * G[i, l, j]


class ObservationMeat:
    """One pass over consecutive chunks of one series: ``M = sum_i G_i diag(sigma^2) G_i^T``.

    Parameters
    ----------
    model : Model
    free : ndarray of int (k,)
        Indices of the free parameters.
    p : ndarray (n_params,)
        All parameters at the estimate.
    scheme : DerivativeScheme
        A difference stencil (not the spline).

    Notes
    -----
    Call :meth:`push` with the samples in time order, chunk by chunk (any sizes), then
    :meth:`finish`. Memory: the chunk plus ``w - 1`` carried samples (``w`` = stencil width).
    The result does not depend on the chunking beyond rounding.
    """

    def __init__(self, model, free, p, scheme):
        from odeinfer.solve.shared import TieredKernel

        compiled = model.compile()
        self.kernel = TieredKernel(compiled, compiled.module.nc_obs_accumulate, full_handle=True)
        self.free = np.ascontiguousarray(free, dtype=np.int64)
        self.p = np.ascontiguousarray(p, dtype=float)
        self.scheme = scheme
        lo, hi = scheme.halo
        self.carry_len = lo + hi  # w - 1
        n, k = model.n_states, self.free.size
        self.n = n
        self.t = np.empty(0)
        self.y = np.empty((0, n))
        self.G = np.zeros((self.carry_len, k, n))  # partial G of the carried samples (zero beyond them)
        self.Q = np.zeros((n, k, k))
        self.nv = np.zeros((n, 2))
        self.nv_t = np.zeros((n, 2 * _HALF_WIDTH))
        self.nv_y = np.zeros((n, 2 * _HALF_WIDTH))
        self.nv_n = np.zeros(n, dtype=np.int64)

    def push(self, t, y):
        """Add the next samples ``t`` (m,), ``y`` (m, n) (NaN = missing); returns their new rows ``(t_r, X, D)``."""
        t = np.ascontiguousarray(t, dtype=float)
        y = np.ascontiguousarray(y, dtype=float)
        _noise_push(t, y, _HALF_WIDTH, self.nv_t, self.nv_y, self.nv_n, self.nv)
        tb = np.concatenate([self.t, t])
        yb = np.concatenate([self.y, y])
        rows = self.scheme.rows(tb, yb)
        if rows[0].size:
            _, a, c = stencil_weights(self.scheme, tb)
            self.G = abi.call(self.kernel, "nc_obs_accumulate", t=rows[0], X=rows[1], D=rows[2], p=self.p,
                              free=self.free, a=a, c=c, Y=yb, carry=self.G, Q=self.Q)
        keep = min(tb.size, self.carry_len)
        self.t, self.y = tb[tb.size - keep:], yb[tb.size - keep:]
        return rows

    def finish(self):
        """``(M (k, k), sigma2 (n,))``: the meat and the noise variance per state (NaN if too few samples)."""
        _add_q(self.G[:self.t.size], self.y, self.Q)  # the last samples: no later row reaches them
        self.t, self.y = self.t[:0], self.y[:0]
        self.G[:] = 0.0
        with np.errstate(invalid="ignore", divide="ignore"):
            sigma2 = np.where(self.nv[:, 1] > 0, self.nv[:, 0] / np.maximum(self.nv[:, 1], 1.0), np.nan)
        M = np.einsum("j,jml->ml", np.nan_to_num(sigma2), self.Q)
        return 0.5 * (M + M.T), sigma2


def observation_meat(model, free, p, scheme, t, Y):
    """``sum_i G_i diag(sigma^2) G_i^T`` over the samples of one in-memory series (free parameters only).

    Parameters
    ----------
    model : Model
    free : ndarray of int (k,)
    p : ndarray (n_params,)
        All parameters at the estimate.
    scheme : DerivativeScheme
    t : ndarray (N,), Y : ndarray (N, n)
        The series (NaN = missing).

    Returns
    -------
    M : ndarray (k, k)
    sigma2 : ndarray (n,)
        Noise variance per state (:func:`noise_variance`).
    """
    acc = ObservationMeat(model, free, p, scheme)
    acc.push(t, Y)
    return acc.finish()
