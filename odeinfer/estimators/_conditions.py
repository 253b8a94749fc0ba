"""Orthogonal conditions of one experiment: residuals, exact Jacobians and the D_k matrices.

Spec seed-001 §1.7 and §3.4 (stacked d-dimensional form). Row order: equation ``i`` major,
test function ``l`` minor (``(i, l)``), the boundary function of ``OC,0`` being the last
``l``; then one ``OC,1`` row per equation.

:class:`DelayConditions` is the same for a model with constant delays (spec §1.8): the lagged
states come from the same proxy, differentiable in the delays; :func:`dde_window` and
:func:`dde_trajectory_sse` are its window rule and ``L``-selection score.

Speed: the quadrature nodes, the weighted test functions and the proxy's B-spline bases at
the nodes depend only on the knots and the test functions; they are built once and cached
across instances (keyed on every input they depend on, LRU of 32). All ``D_k`` come from
one numba kernel that visits only the ``k + 1`` nonzero B-splines of each node.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numba import njit

from odeinfer.estimators._log_proxy import is_mapped_fit
from odeinfer.estimators._quadrature import gauss_grid
from odeinfer.estimators.base import EstimationError
from odeinfer.smooth import TestFunctions, boundary_function

__all__ = ["Conditions", "DelayConditions", "dde_window", "dde_trajectory_sse"]


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
        P, Pall = st.P, st.Pall
        for k, (Pk, f) in enumerate(zip(st.P, self.proxy.fits)):
            X[:, k] = Pk @ f.coef
        mapped = [k for k, f in enumerate(self.proxy.fits) if is_mapped_fit(f)]
        if mapped:  # x = phi(P c): the coefficients act through dx/dc = phi'(P c) P (see _log_proxy)
            P = list(P)
            for k in mapped:
                X[:, k], dx = self.proxy.fits[k].mapped(X[:, k])
                P[k] = dx[:, None] * P[k]
            Pall = np.hstack(P)
        g = _Grid(st.T, X, P, Pall, st.offs, st.wPh, st.wdPh, st.w1, st.wd1)
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
        P = [(f.inner if is_mapped_fit(f) else f).basis(T) for f in self.proxy.fits]  # B-splines (cached)
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


class DelayConditions:
    """Conditions of a model with constant delays, the lagged states taken from the same proxy.

    Spec seed-001 §1.8 (DDE weak form, blowfly): for test functions ``phi_l`` vanishing at the
    ends of the window ``[a, b]``,

        e_(i,l) = int_a^b f_i(t, x(t), x(t - tau_1), ..., p) phi_l(t) dt + int_a^b x_i(t) phi_l'(t) dt,

    with ``x`` the proxy everywhere, also at ``t - tau_k`` (the paper writes the lagged
    integral after the change of variable ``u = t - tau``, the same number). No history
    function is needed, but ``[a - tau_k, b - tau_k]`` must lie in the proxy's domain.

    The conditions are differentiable in every delay: ``d/dtau_k`` of the integrand is the
    explicit derivative minus ``sum_l df_i/dY[l, k] x_l'(t - tau_k)`` (the proxy's derivative;
    cubic splines are C^2). The quadrature nodes are fixed at construction (split at the
    proxy knots, the test-function breakpoints and the knots shifted by ``grid_delays``), so
    the discrete conditions are smooth in ``tau`` as well.

    Parameters
    ----------
    nm : DelayNodeModel
    proxy : SplineProxy
    tests : TestFunctions
        Their window ``[a, b]`` is the integration range.
    grid_delays : sequence of float
        Delays whose shifted knots split the quadrature (the fixed values, or the start).
    n_gauss : int, default 8
    """

    def __init__(self, nm, proxy, tests: TestFunctions, *, grid_delays=(), n_gauss=8):
        self.nm, self.proxy, self.tests = nm, proxy, tests
        self.d = nm.n
        self.T0, self.T1 = proxy.domain
        a, b = tests.window
        self.span = (a, b)
        self.Lc = tests.n
        self.n_rows = self.d * self.Lc
        self.slope = None
        self.h_max = min((b - a) / (2 * tests.n), (self.T1 - self.T0) / 20)
        knots = proxy.knots_all
        br = [knots, tests.breakpoints] + [knots + float(tau) for tau in grid_delays]
        T, w = gauss_grid(np.concatenate(br), a, b, self.h_max, n_gauss)
        Ph, dPh = tests(T, 0), tests(T, 1)
        keep = (Ph != 0).any(axis=1) | (dPh != 0).any(axis=1)
        T, w, Ph, dPh = T[keep], w[keep], Ph[keep], dPh[keep]
        self.T = T
        self.X = proxy(T)
        self.P = [f.basis(T) for f in proxy.fits]
        self.Pall = np.hstack(self.P)
        self.offs = np.cumsum([0] + [Pk.shape[1] for Pk in self.P])
        self.wPh, self.wdPh = w[:, None] * Ph, w[:, None] * dPh
        self._zero = np.zeros_like(self.wdPh)
        self._lags = {}

    def delays(self, p):
        return np.asarray(p, float)[list(self.nm.delay_index)]

    def _lagged(self, p):
        """``(XL, dXL)``, each (Q, d, n_delays): proxy values and derivatives at ``T - tau_k``."""
        taus = self.delays(p)
        key = taus.tobytes()
        hit = self._lags.get(key)
        if hit is not None:
            return hit
        lo = self.span[0] - taus.max()
        hi = self.span[1] - taus.min()
        tol = 1e-9 * (self.T1 - self.T0)
        if lo < self.T0 - tol or not np.all(taus > 0):
            raise EstimationError(
                f"window: the lagged proxy x(t - tau) is needed on [a - tau, b - tau] = [{lo:g}, {hi:g}] for delays "
                f"{taus.tolist()}, which leaves the proxy's domain [{self.T0:g}, {self.T1:g}] (or a delay is <= 0); "
                f"start the window at a >= t0 + tau = {self.T0 + taus.max():g} (window=(a, b)), or bound the delay")
        nd = taus.size
        XL = np.empty((self.T.size, self.d, nd))
        dXL = np.empty_like(XL)
        for k, tau in enumerate(taus):
            s = self.T - tau
            XL[:, :, k] = self.proxy(s)
            dXL[:, :, k] = self.proxy(s, 1)
        if len(self._lags) > 64:
            self._lags.clear()
        self._lags[key] = (XL, dXL)
        return XL, dXL

    def residual(self, p):
        """Stacked conditions ``e`` (d * L,) at the full parameter vector ``p``."""
        XL, _ = self._lagged(p)
        F = self.nm.f(self.T, self.X, XL, p)
        return (self.wPh.T @ F + self.wdPh.T @ self.X).T.ravel()

    def jacobian(self, p):
        """``d e / d p`` (d * L, n_params), delays included through the proxy's derivative."""
        XL, dXL = self._lagged(p)
        Jp = self.nm.jac_p(self.T, self.X, XL, p)
        Jl = self.nm.jac_ylag(self.T, self.X, XL, p)
        for k, j in enumerate(self.nm.delay_index):
            Jp[:, :, j] -= np.einsum("qil,ql->qi", Jl[:, :, :, k], dXL[:, :, k])
        d, m, Q = self.d, self.nm.m, self.T.size
        return (self.wPh.T @ Jp.reshape(Q, d * m)).reshape(self.Lc, d, m).transpose(1, 0, 2).reshape(d * self.Lc, m)

    def D_all(self, p):
        """``[D_1 .. D_d]`` side by side, ``D_k = d e / d c_k`` (n_rows, K_tot): the current and
        the lagged proxy both depend on the coefficients (spec §3.4, DDE term)."""
        XL, _ = self._lagged(p)
        Jy = self.nm.jac_y(self.T, self.X, XL, p)
        Jl = self.nm.jac_ylag(self.T, self.X, XL, p)
        out = np.empty((self.offs[-1], self.d * self.Lc))
        _d_all(self.wPh, self.wdPh, Jy, self.Pall, self.offs, out)
        part = np.empty_like(out)
        for k, tau in enumerate(self.delays(p)):
            PL = np.hstack([f.basis(self.T - tau) for f in self.proxy.fits])
            _d_all(self.wPh, self._zero, np.ascontiguousarray(Jl[:, :, :, k]), PL, self.offs, part)
            out += part
        return out.T, self.offs

    def D(self, p):
        D, offs = self.D_all(p)
        return [D[:, offs[k]:offs[k + 1]] for k in range(self.d)]

    coef_cov = Conditions.coef_cov

    def Ve(self, p):
        """Plug-in covariance of the conditions: ``sum_k D_k V(c_k) D_k'`` (spec §3.4)."""
        D, _ = self.D_all(p)
        return D @ self.coef_cov @ D.T


def dde_window(window, prob, proxy):
    """Test-function window ``(a, b)`` of the DDE conditions for one experiment.

    Default (spec §1.8 [choice]): ``a = T0 + max(tau)``, ``b = T1`` with ``[T0, T1]`` the proxy
    domain, so that ``x(t - tau)`` is defined on the whole window (the paper's blowfly window
    starts at day 40 + 14.8). A delay that is estimated has no value yet: the window must
    then be given, and the delay is bounded to ``(0, a - T0]``.
    """
    model = prob.model
    T0, T1 = proxy.domain
    fixed = {d: prob.fixed[d] for d in model.delays if d in prob.fixed}
    free = [d for d in model.delays if d not in prob.fixed]
    if window is None:
        if free:
            raise EstimationError(
                f"window: the delay(s) {free} are estimated, so the start of the test-function window cannot follow "
                f"them; pass window=(a, b) with {T0:g} < a < b <= {T1:g}: the lagged proxy x(t - tau) then exists "
                "for every tau in (0, a - t0], the range the delay is searched in")
        a, b = T0 + max(fixed.values()), T1
    else:
        a, b = float(window[0]), float(window[1])
    tol = 1e-12 * (T1 - T0)
    if b > T1 + tol or a < T0 - tol:
        raise EstimationError(f"window: the test functions' support [{a:g}, {b:g}] leaves the data range "
                              f"[{T0:g}, {T1:g}] where the proxy is defined; choose a window inside it")
    short = {d: v for d, v in fixed.items() if a - v < T0 - 1e-9 * (T1 - T0)}
    if short or (free and a <= T0 + tol):
        raise EstimationError(
            f"window: starts at a = {a:g}, but the conditions need the lagged proxy x(t - tau) on [a - tau, b - tau] "
            f"and the data start at t0 = {T0:g}" + (f" (fixed delays {short})" if short else "")
            + f"; choose a >= t0 + tau{' = %g' % (T0 + max(short.values())) if short else ' (a > t0)'}")
    if a >= b:
        raise EstimationError(f"window: the delays leave no room for test functions: a = {a:g} >= b = {b:g}; "
                              "the data span must exceed the delay")
    return a, b


def dde_trajectory_sse(model, prob, proxies, params_full, windows, n_history=201):
    """Trajectory SSE of a DDE candidate (the ``L`` selection rule, spec §1.6, for delays).

    As in the paper's Fig. 6.3, the initial function is the proxy on ``[a - max(tau), a]`` and
    the solution (``odeinfer.solve``) starts at the window start ``a``; the SSE is summed
    over the observations at ``t >= a``, on the noise scale (log for log noise).
    """
    from odeinfer.model.history import History
    from odeinfer.solve import Problem, solve

    log = model.observation.noise == "log"
    taus = params_full[list(model.delay_indices)]
    sse = 0.0
    for d, pr, (a, _) in zip(prob.experiments, proxies, windows):
        cols = [model.states.index(s) for s in d.states]
        sel = d.t >= a
        if not sel.any():
            continue
        s = np.linspace(a - taus.max(), a, n_history)
        try:
            problem = Problem(model, d.t[sel], history=History.from_data(s, pr(s)), t0=a)
            sol = solve(problem, params_full, raise_on_failure=False)
        except Exception:
            return math.inf
        if sol.status != 0:
            return math.inf
        fit = np.asarray(sol.y)[:, cols]
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.log(d.y[sel]) - np.log(fit) if log else d.y[sel] - fit
        r = np.where(d.mask[sel], r, 0.0)
        if not np.all(np.isfinite(r)):
            return math.inf
        sse += float(np.sum(r**2))
    return sse
