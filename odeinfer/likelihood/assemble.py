"""The likelihood's assembly over the measurements of one experiment, in one numba kernel: the noise
models' terms (:func:`odeinfer.likelihood.noise.terms`), the chain rule from the observables'
partial derivatives to the estimated parameters, and the sums into the gradient and the Fisher
information (see :class:`odeinfer.likelihood.Objective`).

Per measurement ``r`` (state rows ``idx[r]`` of the trajectory), with ``e`` the estimated
parameters: ``Dh = dh/dx dX/de + dh/dp dp/de + dh/dq dq/de``, ``Ds = ds/dx dX/de + ds/dp dp/de +
ds/dq dq/de + ds/dh Dh``; the gradient adds ``dnll/dh Dh + dnll/ds Ds`` and the Fisher information
``fisher_h Dh Dh^T + fisher_sigma Ds Ds^T``.

The fits' curvature (:attr:`odeinfer.likelihood.objective.Evaluation.curvature`) differs from the Fisher
information in the sd's term only: there ``fisher_sigma`` is the expected value of ``d^2 nll / d sigma^2``
along ``d ln sigma`` (2 / sigma^2 for the normal, 1 / sigma^2 for the Laplace), the curvature takes its
observed value at the current residual, ``(1 - sigma dnll/dsigma) fisher_sigma`` (normal: ``e^2`` times
it, ``e`` the standardised residual; Laplace: ``|d| / sigma`` times it): the NLL's exact second derivative
in ``ln sigma``. The two agree on average at a fitted sd, but where the sd is far from the residuals (a
start with the sd 100 times too large, say), the expected value makes the NLL look as curved in ``ln
sigma`` as at the optimum and the steps in it stay small while the model's parameters move on a surface
flattened by the large sd (Elowitz_Nature2000: starts that end on the flat region where the model's
output is constant). The kernel adds the difference, ``C += -sigma dnll/dsigma fisher_sigma Ds Ds^T``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from odeinfer.likelihood.noise import terms

__all__ = ["assemble", "assemble_adjoint", "OK", "BAD_SIGMA"]

#: status codes of :func:`assemble`
OK, BAD_SIGMA = 0, 1


@njit(cache=True, error_model="numpy", fastmath=False)
def assemble(starts, idx, dX, H, HX, HP, dp, HQ, dq, S, SX, SP, SQ, SH, zy, jac, dist, scale, grad, g, F, C, out):
    """Add one experiment's measurements to ``g`` (n_est,), ``F`` (n_est, n_est) and the curvature's
    difference from the Fisher information ``C`` (n_est, n_est; see the module docstring) (with ``grad``).

    ``starts`` (n_groups + 1,): the rows of each group of measurements (one observable, one noise
    model: codes ``dist[j]``, ``scale[j]``); ``H``, ``S`` (n,): predictions and noise sds; ``HX``
    (n, n_states), ``HP`` (n, n_p), ``HQ`` (n, n_q): partial derivatives of ``h``; ``SX``, ``SP``,
    ``SQ``, ``SH`` (n, 1): those of the sd (``SX`` at fixed ``h``); ``dX`` (n_times, n_states, n_est):
    the states' sensitivities; ``dp``, ``dq``: the parameters' Jacobians. Returns a status: :data:`OK`
    (``out[0]`` the sum of the NLL terms) or :data:`BAD_SIGMA` (``out[0]`` the index of the first group,
    in order, whose sd is not positive somewhere; nothing added).
    """
    if _bad_sigma(starts, S, out):
        return BAD_SIGMA
    n_groups = starts.shape[0] - 1
    ne = g.shape[0]
    n_s, n_p, n_q = HX.shape[1], HP.shape[1], HQ.shape[1]
    Dh = np.empty(ne)
    Ds = np.empty(ne)
    nll = 0.0
    for j in range(n_groups):
        for r in range(starts[j], starts[j + 1]):
            t_nll, dh, ds, fh, fs = terms(zy[r], jac[r], H[r], S[r], dist[j], scale[j])
            nll += t_nll
            if not grad:
                continue
            i = idx[r]
            for e in range(ne):
                acc = 0.0
                for s in range(n_s):
                    acc += HX[r, s] * dX[i, s, e]
                for k in range(n_p):
                    acc += HP[r, k] * dp[k, e]
                for k in range(n_q):
                    acc += HQ[r, k] * dq[k, e]
                Dh[e] = acc
                acc = 0.0
                for s in range(n_s):
                    acc += SX[r, s] * dX[i, s, e]
                for k in range(n_p):
                    acc += SP[r, k] * dp[k, e]
                for k in range(n_q):
                    acc += SQ[r, k] * dq[k, e]
                Ds[e] = acc + SH[r, 0] * Dh[e]
            for a in range(ne):
                g[a] += dh * Dh[a] + ds * Ds[a]
                wh = Dh[a] * fh
                ws = Ds[a] * fs
                for b in range(ne):
                    F[a, b] += wh * Dh[b] + ws * Ds[b]
            cw = -S[r] * ds * fs
            if cw != 0.0:
                for a in range(ne):
                    if Ds[a] != 0.0:
                        wa = cw * Ds[a]
                        for b in range(ne):
                            C[a, b] += wa * Ds[b]
    out[0] = nll
    return OK


@njit(cache=True, error_model="numpy", fastmath=False)
def assemble_adjoint(starts, idx, H, HX, HP, HQ, S, SX, SP, SQ, SH, zy, jac, dist, scale, Xbar, pbar, qbar, out):
    """The adjoint's start: add the partial derivatives of one experiment's NLL terms with respect to the states at
    the output times to ``Xbar`` (n_times, n_states), to the right-hand side's parameters to ``pbar`` (n_p,) and to
    the observable parameters to ``qbar`` (n_q,): per measurement, ``w = dnll/dh + dnll/ds ds/dh`` times ``dh/d.``
    plus ``dnll/ds`` times ``ds/d.`` (as :func:`assemble` with the identity in place of the sensitivities).
    Arguments and status as :func:`assemble`."""
    if _bad_sigma(starts, S, out):
        return BAD_SIGMA
    n_s, n_p, n_q = HX.shape[1], HP.shape[1], HQ.shape[1]
    nll = 0.0
    for j in range(starts.shape[0] - 1):
        for r in range(starts[j], starts[j + 1]):
            t_nll, dh, ds, _, _ = terms(zy[r], jac[r], H[r], S[r], dist[j], scale[j])
            nll += t_nll
            w = dh + ds * SH[r, 0]
            i = idx[r]
            for k in range(n_s):
                Xbar[i, k] += w * HX[r, k] + ds * SX[r, k]
            for k in range(n_p):
                pbar[k] += w * HP[r, k] + ds * SP[r, k]
            for k in range(n_q):
                qbar[k] += w * HQ[r, k] + ds * SQ[r, k]
    out[0] = nll
    return OK


@njit(cache=True, error_model="numpy", fastmath=False)
def _bad_sigma(starts, S, out):
    """Whether a group's sd is not positive somewhere (``out[0]``: the first such group, in order)."""
    for j in range(starts.shape[0] - 1):
        for r in range(starts[j], starts[j + 1]):
            if not S[r] > 0:
                out[0] = j
                return True
    return False
