"""Orthogonal conditions of one experiment: residuals, exact Jacobians and the D_k matrices.

Spec seed-001 §1.7 and §3.4 (stacked d-dimensional form). Row order: equation ``i`` major,
test function ``l`` minor (``(i, l)``), the boundary function of ``OC,0`` being the last
``l``; then one ``OC,1`` row per equation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from odeinfer.estimators._quadrature import gauss_grid
from odeinfer.smooth import TestFunctions, boundary_function

__all__ = ["Conditions"]


@dataclass
class _Grid:
    T: np.ndarray
    X: np.ndarray
    P: list
    wPh: np.ndarray  # (Q, Lc): w * [phi_1..phi_L, phi_0]
    wdPh: np.ndarray
    w1: np.ndarray | None  # (Q,): w * phi_1 (OC,1)
    wd1: np.ndarray | None


class Conditions:
    """Conditions ``e(theta)`` for one experiment, one proxy, one set of test functions.

    Parameters
    ----------
    nm : NodeModel
    proxy : SplineProxy
    tests : TestFunctions
    x0 : ndarray (d,) or None
        Known initial state: adds the ``OC,0`` condition (boundary function at ``t0``).
    end_slope : ndarray (d,) or None
        Known ``x'(T1)``: adds the ``OC,1`` condition.
    boundary_width : float
        Support length of the boundary functions.
    n_gauss : int
    """

    def __init__(self, nm, proxy, tests: TestFunctions, *, x0=None, end_slope=None, boundary_width=1.0,
                 n_gauss=8):
        self.nm, self.proxy, self.tests = nm, proxy, tests
        self.d = nm.n
        self.x0 = None if x0 is None else np.asarray(x0, float)
        self.slope = None if end_slope is None else np.asarray(end_slope, float)
        self.T0, self.T1 = proxy.domain
        self.bw = float(boundary_width)
        self.n_gauss = n_gauss
        a, b = tests.window
        lo, hi = a, b
        self.left = (self.T0, self.T0 + self.bw) if self.x0 is not None else None
        self.right = (self.T1 - self.bw, self.T1) if self.slope is not None else None
        for s in (self.left, self.right):
            if s is not None:
                lo, hi = min(lo, s[0]), max(hi, s[1])
        self.span = (lo, hi)
        self.h_max = min((b - a) / (2 * tests.n), (self.T1 - self.T0) / 20)
        self.Lc = tests.n + (1 if self.x0 is not None else 0)
        self._cache = {}
        const = np.zeros((self.d, self.Lc))
        if self.x0 is not None:
            const[:, -1] = self.x0 * boundary_function(*self.left, "left", 0, [self.T0])[0]
        self.const = const
        self.n_rows = self.d * self.Lc + (self.d if self.slope is not None else 0)

    # grid ------------------------------------------------------------------------------
    def _phis(self, T, nu):
        cols = [self.tests(T, nu)]
        if self.x0 is not None:
            cols.append(boundary_function(*self.left, "left", nu, T)[:, None])
        return np.hstack(cols)

    def grid(self, p) -> _Grid:
        locs = tuple(round(s.location(p), 14) for s in self.nm.steps)
        g = self._cache.get(locs)
        if g is not None:
            return g
        br = [self.proxy.knots_all, self.tests.breakpoints, np.array(locs, float)]
        for s in (self.left, self.right):
            if s is not None:
                br.append(np.array(s))
        T, w = gauss_grid(np.concatenate(br), *self.span, self.h_max, self.n_gauss)
        Ph, dPh = self._phis(T, 0), self._phis(T, 1)
        w1 = wd1 = None
        keep = (Ph != 0).any(axis=1) | (dPh != 0).any(axis=1)
        if self.right is not None:
            f1 = boundary_function(*self.right, "right", 0, T)
            d1 = boundary_function(*self.right, "right", 1, T)
            keep |= (f1 != 0) | (d1 != 0)
            w1, wd1 = (w * f1)[keep], (w * d1)[keep]
        T, w, Ph, dPh = T[keep], w[keep], Ph[keep], dPh[keep]
        P = [f.basis(T) for f in self.proxy.fits]
        X = np.column_stack([Pk @ f.coef for Pk, f in zip(P, self.proxy.fits)])
        g = _Grid(T, X, P, w[:, None] * Ph, w[:, None] * dPh, w1, wd1)
        if len(self._cache) > 64:
            self._cache.clear()
        self._cache[locs] = g
        return g

    # conditions ----------------------------------------------------------------------------
    def residual(self, p):
        """Stacked conditions ``e`` (n_rows,) at full parameter vector ``p``."""
        g = self.grid(p)
        F = self.nm.f(g.T, g.X, p)
        E = (g.wPh.T @ F + g.wdPh.T @ g.X).T + self.const
        out = [E.ravel()]
        if self.slope is not None:
            Jy = self.nm.jac_y(g.T, g.X, p)
            R = np.einsum("qik,qk->qi", Jy, F) + self.nm.f_t(g.T, g.X, p)
            out.append(g.w1 @ R + g.wd1 @ F - self.slope * boundary_function(*self.right, "right", 0, [self.T1])[0])
        return np.concatenate(out)

    def jacobian(self, p):
        """``d e / d p`` (n_rows, n_params), including the jump terms of sharp steps."""
        g = self.grid(p)
        Jp = self.nm.jac_p(g.T, g.X, p)
        d, m = self.d, self.nm.m
        J = np.einsum("ql,qij->ilj", g.wPh, Jp).reshape(d * self.Lc, m)
        for s in self.nm.steps:
            tau = s.location(p)
            if not (self.span[0] < tau < self.span[1]):
                continue
            dtau = s.dlocation(p)
            jump = s.jump(tau, self.proxy([tau]), p)[0]  # (d,)
            ph = self._phis([tau], 0)[0]  # (Lc,)
            J -= np.outer(np.outer(jump, ph).ravel(), dtau)
        out = [J]
        if self.slope is not None:
            F = self.nm.f(g.T, g.X, p)
            Jy = self.nm.jac_y(g.T, g.X, p)
            H = self.nm.jac_p_dir(g.T, g.X, p, F) + np.einsum("qik,qkj->qij", Jy, Jp) + self.nm.jac_p_t(g.T, g.X, p)
            out.append(np.einsum("q,qij->ij", g.w1, H) + np.einsum("q,qij->ij", g.wd1, Jp))
        return np.vstack(out)

    def D(self, p):
        """``D_k = d e / d c_k`` for every state ``k``: list of (n_rows, K_k)."""
        g = self.grid(p)
        Jy = self.nm.jac_y(g.T, g.X, p)
        d = self.d
        if self.slope is not None:
            F = self.nm.f(g.T, g.X, p)
            H = (self.nm.jac_y_dir(g.T, g.X, p, F) + np.einsum("qil,qlk->qik", Jy, Jy)
                 + self.nm.jac_y_t(g.T, g.X, p))
        out = []
        for k, Pk in enumerate(g.P):
            Dk = np.einsum("ql,qi,qm->ilm", g.wPh, Jy[:, :, k], Pk, optimize=True)
            Dk[k] += g.wdPh.T @ Pk
            rows = [Dk.reshape(d * self.Lc, Pk.shape[1])]
            if self.slope is not None:
                rows.append((g.w1[:, None] * H[:, :, k]).T @ Pk + (g.wd1[:, None] * Jy[:, :, k]).T @ Pk)
            out.append(np.vstack(rows))
        return out

    def Ve(self, p):
        """Plug-in covariance of the conditions: ``sum_k D_k V(c_k) D_k'`` (spec §3.4)."""
        return sum(Dk @ f.cov @ Dk.T for Dk, f in zip(self.D(p), self.proxy.fits))
