"""Negative log-likelihood terms of the noise models (PEtab's definition, all constants kept),
vectorised over measurements, with their derivatives in the prediction and in sigma.

See :mod:`odeinfer.model.observables` for the formulas. Codes: distribution 0 normal, 1 Laplace;
scale 0 lin, 1 log, 2 log10.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["DIST_CODES", "SCALE_CODES", "transform_data", "nll_terms", "terms"]

DIST_CODES = {"normal": 0, "laplace": 1}
SCALE_CODES = {"lin": 0, "log": 1, "log10": 2}
_LN10 = math.log(10.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def transform_data(y, scale):
    """``(z_y, J)``: the data on the noise scale and the change-of-variables term per point."""
    y = np.asarray(y, float)
    if scale == 0:
        return y.copy(), np.zeros_like(y)
    if scale == 1:
        return np.log(y), np.log(y)
    return np.log10(y), np.log(y * _LN10)


def nll_terms(zy, jac, h, sigma, dist, scale):
    """Per-measurement NLL and its partial derivatives.

    Parameters
    ----------
    zy, jac : ndarray (n,)
        From :func:`transform_data`.
    h, sigma : ndarray (n,)
        Predictions (natural scale) and sds (noise scale); ``h > 0`` on log scales, ``sigma > 0``.
    dist, scale : int
        Codes (see module docstring).

    Returns
    -------
    nll, dnll_dh, dnll_ds, fisher_h, fisher_sigma : ndarray (n,)
        The expected information of one measurement is ``fisher_h * dh dh^T + fisher_sigma *
        dsigma dsigma^T`` (``dh``, ``dsigma``: gradients of ``h`` and ``sigma``).
    """
    h = np.asarray(h, float)
    n = h.size
    zy, jac = np.asarray(zy, float), np.asarray(jac, float)
    sigma = np.broadcast_to(np.asarray(sigma, float), (n,))
    out = np.empty((5, n))
    _terms_into(zy, jac, h, sigma, int(dist), int(scale), out)
    return out[0], out[1], out[2], out[3], out[4]


@njit(cache=True, error_model="numpy", fastmath=False)
def terms(zy, jac, h, sigma, dist, scale):
    """One measurement: ``(nll, dnll_dh, dnll_dsigma, fisher_h, fisher_sigma)`` (see :func:`nll_terms`)."""
    if scale == 0:
        zh, dz = h, 1.0
    elif scale == 1:
        zh, dz = math.log(h), 1.0 / h
    else:
        zh, dz = math.log10(h), 1.0 / (h * _LN10)
    d = zy - zh
    inv = 1.0 / sigma
    if dist == 0:
        e = d * inv
        nll = _HALF_LOG_2PI + math.log(sigma) + 0.5 * e * e + jac
        dnll_dh = -e * inv * dz
        dnll_ds = inv * (1.0 - e * e)
        fs = 2.0 * inv * inv
    else:
        a = abs(d)
        sign = 1.0 if d > 0 else (-1.0 if d < 0 else (0.0 if d == 0 else d))
        nll = math.log(2.0 * sigma) + a * inv + jac
        dnll_dh = -sign * inv * dz
        dnll_ds = inv * (1.0 - a * inv)
        fs = inv * inv
    fh = (inv * dz) ** 2
    return nll, dnll_dh, dnll_ds, fh, fs


@njit(cache=True, error_model="numpy", fastmath=False)
def _terms_into(zy, jac, h, sigma, dist, scale, out):
    for r in range(h.shape[0]):
        out[0, r], out[1, r], out[2, r], out[3, r], out[4, r] = terms(zy[r], jac[r], h[r], sigma[r], dist, scale)
