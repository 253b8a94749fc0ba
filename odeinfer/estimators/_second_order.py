"""Second-order (errors-in-variables) correction of the orthogonal-conditions closed form.

When every free parameter enters ``f`` affinely and ``f`` is affine in the states (alpha-pinene
and other linear systems), the conditions are bilinear in ``(c, theta)``, ``c`` the proxy's
spline coefficients: ``e(c, theta) = J(c) theta + b(c)`` with ``J`` and ``b`` affine in ``c``, so
``D(theta) = de/dc = D_0 + sum_j theta_j G_j`` with constant ``G_j = dJ[:, j]/dc``. The closed
form ``theta_hat = -(J'J)^-1 J'b`` is then a rational function of ``c``; with ``c_hat = c* + delta``
(``delta ~ N(0, V(c))``) and ``M = (J'J)^-1 J'``, ``P = I - J M``, its expansion to second order is

    theta_hat - theta* = -M D delta + q(delta),
    q_i(delta) = delta' Q_i delta,  Q_i = sym( sum_j [(J'J)^-1]_ij B_j ),
    B_j = -G_j' P D + sum_k (J'G_k)[j, :]' (M D)[k, :]

(differentiate the normal equations ``J(c)' e(c, theta) = 0`` twice). The first-order term is the
usual ``V = M V_e M'`` (spec §3.4). The second-order term is the errors-in-variables bias of the
noisy regressors ``<x_hat, phi>``: its mean ``E q_i = tr(Q_i V(c))`` is subtracted from the
estimate, and for Gaussian ``delta`` (odd moments vanish) it adds
``Cov(q_i, q_l) = 2 tr(Q_i V Q_l V)`` to the covariance. Every derivative is exact (``G_j`` from
``D`` at unit parameter vectors: ``D`` is affine in ``theta``).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import block_diag

__all__ = ["second_order"]


def _stack(conds, p):
    D = block_diag(*[c.D_all(p)[0] for c in conds])
    return D


def second_order(conds, full, free_index):
    """``(bias, V2)`` of the closed-form OC estimate at full parameter vector ``full``.

    Parameters
    ----------
    conds : list of Conditions
        One per experiment (identity weighting, no boundary condition quadratic in theta).
    full : ndarray
        Full parameter vector at the estimate.
    free_index : sequence of int
        Positions of the free parameters in ``full``.

    Returns
    -------
    bias : ndarray (p,)
        ``E q``: subtract from the estimate.
    V2 : ndarray (p, p)
        ``Cov q``: add to ``M V_e M'``.
    """
    fi = list(free_index)
    J = np.vstack([c.jacobian(full) for c in conds])[:, fi]
    V = block_diag(*[c.coef_cov for c in conds])
    D = _stack(conds, full)
    p0 = np.asarray(full, float).copy()
    p0[fi] = 0.0
    D0 = _stack(conds, p0)
    G = []
    for j in fi:
        pj = p0.copy()
        pj[j] = 1.0
        G.append(_stack(conds, pj) - D0)
    Ai = np.linalg.inv(J.T @ J)
    M = Ai @ J.T
    MD = M @ D
    PD = D - J @ MD
    JG = np.stack([J.T @ g for g in G])  # (k, j, K): row j of J'G_k
    B = [-(g.T @ PD) + np.einsum("kc,kd->cd", JG[:, j, :], MD) for j, g in enumerate(G)]
    Q = [sum(Ai[i, j] * B[j] for j in range(len(B))) for i in range(len(B))]
    Q = [(q + q.T) / 2 for q in Q]
    bias = np.array([np.sum(q * V) for q in Q])
    QV = [q @ V for q in Q]
    V2 = np.array([[2.0 * np.sum(a * b.T) for b in QV] for a in QV])
    return bias, (V2 + V2.T) / 2
