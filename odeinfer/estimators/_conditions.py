"""Orthogonal conditions of one experiment: residuals, exact Jacobians and the D_k matrices.

Spec seed-001 §1.7 and §3.4 (stacked d-dimensional form). Row order: equation ``i`` major,
test function ``l`` minor (``(i, l)``), the boundary function of ``OC,0`` being the last
``l``; then one ``OC,1`` row per equation.

Speed: the quadrature nodes, the weighted test functions and the proxy's B-spline bases at
the nodes depend only on the knots and the test functions; they are built once and cached
across instances (keyed on every input they depend on, LRU of 32). All ``D_k`` come from
one numba kernel that visits only the ``k + 1`` nonzero B-splines of each node.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numba import njit

from odeinfer.estimators._quadrature import gauss_grid
from odeinfer.smooth import TestFunctions, boundary_function

__all__ = ["Conditions"]


@njit(cache=True)
def _d_all(wPh, wdPh, Jy, P, offs, out):
    """``D = [D_1 .. D_d]`` transposed: ``out[c, i * Lc + l] = sum_q P[q, c] (wPh[q, l] Jy[q, i, k]
    + [i == k] wdPh[q, l])`` for the columns ``c`` of state ``k`` (``offs[k] <= c < offs[k + 1]``) of
    the stacked basis ``P`` (Q, K_tot); ``out`` (K_tot, d * Lc) is overwritten.

    ``P`` holds B-splines at sorted nodes: in each state's block a row's nonzeros are one run whose
    start does not decrease with ``q``; only that run (``k + 1`` columns) is visited, each by one
    contiguous axpy of length ``d * Lc``."""
    Q, Lc = wPh.shape
    d = Jy.shape[1]
    n = d * Lc
    for c in range(out.shape[0]):
        for j in range(n):
            out[c, j] = 0.0
    T = np.empty(n)
    for k in range(d):
        ptr = offs[k]
        end = offs[k + 1]
        for q in range(Q):
            c = ptr
            while c < end and P[q, c] == 0.0:
                c += 1
            if c == end:
                continue
            ptr = c
            for i in range(d):
                jv = Jy[q, i, k]
                for l in range(Lc):
                    T[i * Lc + l] = jv * wPh[q, l]
            for l in range(Lc):
                T[k * Lc + l] += wdPh[q, l]
            while c < end:
                pv = P[q, c]
                if pv == 0.0:
                    break
                row = out[c]
                for j in range(n):
                    row[j] += pv * T[j]
                c += 1


_STRUCT_CACHE: OrderedDict = OrderedDict()
_STRUCT_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Struct:
    """Quadrature nodes and everything on them that depends only on knots and test functions."""

    T: np.ndarray
    P: list
    Pall: np.ndarray
    offs: np.ndarray
    wPh: np.ndarray
    wdPh: np.ndarray
    w1: np.ndarray | None
    wd1: np.ndarray | None


@dataclass
class _Grid:
    T: np.ndarray
    X: np.ndarray
    P: list
    Pall: np.ndarray  # (Q, K_tot): the P of every state side by side
    offs: np.ndarray  # (d + 1,): column offsets of the states in Pall
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
        st = self._structure(locs)
        X = np.empty((st.T.size, self.d))
        for k, (Pk, f) in enumerate(zip(st.P, self.proxy.fits)):
            X[:, k] = Pk @ f.coef
        g = _Grid(st.T, X, st.P, st.Pall, st.offs, st.wPh, st.wdPh, st.w1, st.wd1)
        if len(self._cache) > 64:
            self._cache.clear()
        self._cache[locs] = g
        return g

    def _structure(self, locs) -> _Struct:
        """Nodes, weighted test functions and proxy bases; cached across instances on every input
        they depend on (knots and degree of each state, test functions, boundary supports,
        quadrature settings, step locations)."""
        key = (tuple((f.knots.tobytes(), f.degree) for f in self.proxy.fits), self.tests, self.left, self.right,
               self.span, self.h_max, self.n_gauss, locs)
        with _STRUCT_LOCK:
            st = _STRUCT_CACHE.get(key)
            if st is not None:
                _STRUCT_CACHE.move_to_end(key)
                return st
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
        if not keep.all():
            T, w, Ph, dPh = T[keep], w[keep], Ph[keep], dPh[keep]
        P = [f.basis(T) for f in self.proxy.fits]
        offs = np.cumsum([0] + [Pk.shape[1] for Pk in P])
        st = _Struct(T, P, np.hstack(P), offs, w[:, None] * Ph, w[:, None] * dPh, w1, wd1)
        for a in (st.T, st.Pall, st.offs, st.wPh, st.wdPh, st.w1, st.wd1, *st.P):
            if a is not None:
                a.flags.writeable = False
        with _STRUCT_LOCK:
            _STRUCT_CACHE[key] = st
            while len(_STRUCT_CACHE) > 32:
                _STRUCT_CACHE.popitem(last=False)
        return st

    # conditions ----------------------------------------------------------------------------
    def residual(self, p):
        """Stacked conditions ``e`` (n_rows,) at full parameter vector ``p``."""
        g = self.grid(p)
        F = self.nm.f(g.T, g.X, p)
        E = (g.wPh.T @ F + g.wdPh.T @ g.X).T + self.const
        if self.slope is None:
            return E.ravel()
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
        Q = g.T.size
        J = (g.wPh.T @ Jp.reshape(Q, d * m)).reshape(self.Lc, d, m).transpose(1, 0, 2).reshape(d * self.Lc, m)
        for s in self.nm.steps:
            tau = s.location(p)
            if not (self.span[0] < tau < self.span[1]):
                continue
            dtau = s.dlocation(p)
            jump = s.jump(tau, self.proxy([tau]), p)[0]  # (d,)
            ph = self._phis([tau], 0)[0]  # (Lc,)
            J -= np.outer(np.outer(jump, ph).ravel(), dtau)
        if self.slope is None:
            return J
        out = [J]
        if self.slope is not None:
            F = self.nm.f(g.T, g.X, p)
            Jy = self.nm.jac_y(g.T, g.X, p)
            H = self.nm.jac_p_dir(g.T, g.X, p, F) + np.einsum("qik,qkj->qij", Jy, Jp) + self.nm.jac_p_t(g.T, g.X, p)
            out.append(np.einsum("q,qij->ij", g.w1, H) + np.einsum("q,qij->ij", g.wd1, Jp))
        return np.vstack(out)

    def D_all(self, p):
        """``[D_1 .. D_d]`` side by side: (n_rows, K_tot), columns of state ``k`` from ``offs[k]``."""
        g = self.grid(p)
        Jy = self.nm.jac_y(g.T, g.X, p)
        d = self.d
        out = np.empty((g.offs[-1], d * self.Lc))
        _d_all(g.wPh, g.wdPh, Jy, g.Pall, g.offs, out)
        D = out.T  # rows (i, l), i major
        if self.slope is not None:
            F = self.nm.f(g.T, g.X, p)
            H = (self.nm.jac_y_dir(g.T, g.X, p, F) + np.einsum("qil,qlk->qik", Jy, Jy)
                 + self.nm.jac_y_t(g.T, g.X, p))
            rows = np.empty((d, g.offs[-1]))
            for k, Pk in enumerate(g.P):
                rows[:, g.offs[k]:g.offs[k + 1]] = ((g.w1[:, None] * H[:, :, k]).T @ Pk
                                                    + (g.wd1[:, None] * Jy[:, :, k]).T @ Pk)
            D = np.vstack([D, rows])
        return D, g.offs

    def D(self, p):
        """``D_k = d e / d c_k`` for every state ``k``: list of (n_rows, K_k)."""
        D, offs = self.D_all(p)
        return [D[:, offs[k]:offs[k + 1]] for k in range(self.d)]

    @property
    def coef_cov(self):
        """Block-diagonal covariance of all the proxy's coefficients: (K_tot, K_tot)."""
        C = self.__dict__.get("_coef_cov")
        if C is None:
            Ks = [f.coef.size for f in self.proxy.fits]
            C = np.zeros((sum(Ks), sum(Ks)))
            o = 0
            for K, f in zip(Ks, self.proxy.fits):
                C[o:o + K, o:o + K] = f.cov
                o += K
            self._coef_cov = C
        return C

    def Ve(self, p):
        """Plug-in covariance of the conditions: ``sum_k D_k V(c_k) D_k'`` (spec §3.4)."""
        D, _ = self.D_all(p)
        return D @ self.coef_cov @ D.T
