"""Shared machinery of the matching estimators (gradient matching, orthogonal conditions).

* composite Gauss-Legendre quadrature split at every knot, window end and discontinuity
  of the vector field in ``t`` (spec seed-001 §1.4);
* the model's exact derivatives (sympy) evaluated at all quadrature nodes at once (for a model
  with delays also in the lagged states, :class:`DelayNodeModel`);
* detection of parameters that enter linearly (closed forms, variable projection) and of
  sharp steps ``heaviside(g(t, p))`` with ``g`` affine in ``t`` (their location and jump,
  for the exact derivative of an integral with respect to a switching parameter:
  ``d/dp int f phi dt = int (df/dp)_a.e. phi dt - [f](t*) phi(t*) dt*/dp``, spec §1.5);
* a whitened least-squares solver (closed form, variable projection, Levenberg-Marquardt).

Node evaluation uses numpy functions generated from the same sympy expressions as the
numba kernels (exact, vectorised over nodes); a numba loop taking the kernels as
arguments would be recompiled in every process (numba cannot disk-cache it).
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import sympy as sp
from numba import njit

from odeinfer.estimators.base import EstimationError
from odeinfer.model.codegen import safe_symbols
from odeinfer.smooth._blas import single_threaded_blas

__all__ = ["single_threaded_blas", "gauss_grid", "NodeModel", "DelayNodeModel", "node_model", "Step", "Solved",
           "solve_whitened", "whitener"]


@functools.lru_cache(maxsize=16)
def _leggauss(n):
    x, w = np.polynomial.legendre.leggauss(int(n))
    x.flags.writeable = False
    w.flags.writeable = False
    return x, w


def gauss_grid(breakpoints, a, b, h_max, n_gauss=8):
    """Composite Gauss-Legendre nodes and weights on ``[a, b]`` split at ``breakpoints``.

    Pieces longer than ``h_max`` are cut into equal parts. Returns ``(t, w)``, each (Q,).
    """
    br = np.asarray(breakpoints, float).ravel()
    br = np.unique(np.concatenate([[a, b], br[(br > a) & (br < b)]]))
    xg, wg = _leggauss(int(n_gauss))
    return _gauss_nodes(br, float(h_max), xg, wg)


@njit(cache=True)
def _gauss_nodes(br, h_max, xg, wg):
    """Nodes and weights of ``gauss_grid`` on the sorted pieces ``br`` (as ``np.linspace`` edges)."""
    npc = br.size - 1
    counts = np.empty(npc, np.int64)
    total = 0
    for p in range(npc):
        m = int(math.ceil((br[p + 1] - br[p]) / h_max - 1e-12))
        counts[p] = m if m > 1 else 1
        total += counts[p]
    ng = xg.size
    T = np.empty(total * ng)
    W = np.empty(total * ng)
    idx = 0
    for p in range(npc):
        lo = br[p]
        hi = br[p + 1]
        m = counts[p]
        step = (hi - lo) / m
        for e in range(m):
            e0 = e * step + lo
            e1 = hi if e + 1 == m else (e + 1) * step + lo
            half = (e1 - e0) / 2
            mid = (e1 + e0) / 2
            for g in range(ng):
                T[idx] = mid + half * xg[g]
                W[idx] = half * wg[g]
                idx += 1
    return T, W


@dataclass(frozen=True, eq=False)
class Step:
    """A sharp step ``heaviside(g)`` of the vector field, ``g`` affine in ``t``.

    ``location(p)`` is where it switches, ``dlocation(p)`` its gradient (n_params,),
    ``jump(t, X, p)`` the jump of ``f`` (forward in time) there, shape (len(t), n_states).
    """

    location: object
    dlocation: object
    jump: object
    params: tuple  # names of the params the location depends on


class NodeModel:
    """Exact vector field and derivatives of a model, vectorised over nodes.

    All methods take ``T`` (Q,), ``X`` (Q, n_states), ``p`` (n_params,).
    """

    def __init__(self, model):
        self.model = model
        self.n, self.m = model.n_states, model.n_params
        d = model.derivatives
        # plain symbol names (codegen.safe_symbols): a state named like a numpy function (``exp``)
        # must not shadow it inside the lambdified code
        self._rename = safe_symbols(model.state_symbols, model.param_symbols)
        r = self._rename
        self._args = (model.t_symbol, tuple(r[s] for s in model.state_symbols), tuple(r[s] for s in model.param_symbols))
        self._f = self._make(list(d.f))
        self._jy = self._make(list(d.jac_y))
        self._jp = self._make(list(d.jac_p))
        self._ft = self._make(list(d.f_t))
        self._jyt = self._make(list(d.jac_y_t))
        self._lock = threading.Lock()

    def _make(self, exprs):
        return sp.lambdify(self._args, [sp.sympify(e).xreplace(self._rename) for e in exprs], modules="numpy", cse=True)

    def _eval(self, fn, T, X, p, shape):
        vals = fn(T, tuple(X.T), tuple(p))
        out = np.empty((T.size, len(vals)))
        for k, v in enumerate(vals):
            out[:, k] = v
        return out.reshape((T.size,) + shape)

    def f(self, T, X, p):
        return self._eval(self._f, T, X, p, (self.n,))

    def jac_y(self, T, X, p):
        return self._eval(self._jy, T, X, p, (self.n, self.n))

    def jac_p(self, T, X, p):
        return self._eval(self._jp, T, X, p, (self.n, self.m))

    def f_t(self, T, X, p):
        return self._eval(self._ft, T, X, p, (self.n,))

    def jac_y_t(self, T, X, p):
        return self._eval(self._jyt, T, X, p, (self.n, self.n))

    @cached_property
    def _d2(self):
        d = self.model.derivatives
        n, m = self.n, self.m
        yy = [d.d2_yy[i][k][l] for i in range(n) for k in range(n) for l in range(n)]
        py = [d.d2_py[i][j][l] for i in range(n) for j in range(m) for l in range(n)]
        from odeinfer.model.derivatives import differentiate

        pt = [differentiate(d.jac_p[i, j], self.model.t_symbol) for i in range(n) for j in range(m)]
        return self._make(yy), self._make(py), self._make(pt)

    def jac_y_dir(self, T, X, p, V):
        """``sum_l d2 f_i / dy_k dy_l V_l``: (Q, n, n)."""
        h = self._eval(self._d2[0], T, X, p, (self.n, self.n, self.n))
        return np.einsum("qikl,ql->qik", h, V)

    def jac_p_dir(self, T, X, p, V):
        """``sum_l d2 f_i / dp_j dy_l V_l``: (Q, n, m)."""
        h = self._eval(self._d2[1], T, X, p, (self.n, self.m, self.n))
        return np.einsum("qijl,ql->qij", h, V)

    def jac_p_t(self, T, X, p):
        return self._eval(self._d2[2], T, X, p, (self.n, self.m))

    def d2_py(self, T, X, p):
        """``d2 f_i / dp_j dy_l``: (Q, n, m, n)."""
        return self._eval(self._d2[1], T, X, p, (self.n, self.m, self.n))

    # structure ---------------------------------------------------------------------
    @cached_property
    def steps(self) -> tuple:
        """The sharp steps ``Heaviside(g)`` of the vector field with ``g`` affine in ``t``."""
        t = self.model.t_symbol
        nodes = set()
        for e in self.model.exprs:
            nodes |= {nd for nd in sp.preorder_traversal(e) if isinstance(nd, sp.Heaviside)}
        out = []
        for nd in sorted(nodes, key=sp.default_sort_key):
            g = sp.expand(nd.args[0])
            g1 = sp.diff(g, t)
            if not g1.is_number or g1 == 0 or g.free_symbols & set(self.model.state_symbols):
                raise EstimationError(
                    f"model: the step {nd} is not of the form heaviside(a*t + b(p)); matching estimators "
                    "split the quadrature at sharp steps and need their location. Use a smooth step "
                    "(om.heaviside(x, width=...)) instead")
            loc = sp.simplify(-(g - g1 * t) / g1)
            sign = 1 if g1 > 0 else -1
            jumps = [sign * (e.xreplace({nd: sp.Integer(1)}) - e.xreplace({nd: sp.Integer(0)}))
                     for e in self.model.exprs]
            ps = self.model.param_symbols
            rps = [self._rename[s] for s in ps]
            loc_fn = sp.lambdify((rps,), loc.xreplace(self._rename), modules="numpy")
            dloc_fn = sp.lambdify((rps,), [sp.diff(loc, s).xreplace(self._rename) for s in ps], modules="numpy")
            jump_fn = self._make(jumps)
            names = tuple(n for n, s in zip(self.model.params, ps) if s in loc.free_symbols)
            out.append(Step(lambda p, f=loc_fn: float(f(tuple(p))),
                            lambda p, f=dloc_fn: np.asarray(f(tuple(p)), float),
                            lambda T, X, p, f=jump_fn: self._eval(f, np.atleast_1d(T), np.atleast_2d(X), p,
                                                                  (self.n,)),
                            names))
        return tuple(out)

    def piecewise_params(self) -> set:
        """Parameters in ``Piecewise``/``where`` conditions (unsupported when free)."""
        return set(self._piecewise_params)

    @cached_property
    def _piecewise_params(self) -> frozenset:
        found = set()
        for e in self.model.exprs:
            for nd in sp.preorder_traversal(e):
                if isinstance(nd, sp.Piecewise):
                    for _, cond in nd.args:
                        found |= {n for n, s in zip(self.model.params, self.model.param_symbols)
                                  if s in cond.free_symbols}
        return frozenset(found)

    def linear_params(self, free, fixed) -> tuple:
        """Free params in which ``f`` is affine given the other free params (largest such set).

        Switching parameters are never linear. Cached per (free, fixed).
        """
        key = (tuple(free), tuple(sorted((k, float(v)) for k, v in dict(fixed).items())))
        cache = self.__dict__.setdefault("_linear_cache", {})
        if key not in cache:
            cache[key] = self._linear_params(free, fixed)
        return cache[key]

    def _linear_params(self, free, fixed) -> tuple:
        return _affine_params(self.model, self.model.derivatives.jac_p, free, fixed,
                              set(self.model.switching_params))


class DelayNodeModel:
    """Exact vector field ``f(t, x, Y, p)`` of a model with delays, vectorised over nodes.

    ``Y[i, k] = x_i(t - tau_k)``. All methods take ``T`` (Q,), ``X`` (Q, n_states), ``XL``
    (Q, n_states, n_delays) and ``p`` (n_params,). ``jac_p`` is the explicit dependence only
    (lags held fixed); the chain-rule term of a delay through ``x(t - tau)`` is added by the caller.
    Sharp steps and ``where`` branches are refused (not supported together with delays).
    """

    steps = ()

    def __init__(self, model):
        if model.switching_params:
            raise EstimationError(
                f"model: {model.name!r} has delays and a sharp step or where() branch (in "
                f"{list(model.switching_params)}); orthogonal conditions support delays only with smooth "
                "right-hand sides. Use a smooth step (om.heaviside(x, width=...))")
        self.model = model
        self.n, self.m, self.nd = model.n_states, model.n_params, model.n_delays
        self.delay_index = tuple(model.delay_indices)
        d = model.delay_derivatives
        n, nd = self.n, self.nd
        self._rename = r = safe_symbols(model.state_symbols, model.param_symbols, model.lag_symbols)
        lag_flat = tuple(r[model.lag_symbols[i, k]] for i in range(n) for k in range(nd))
        self._args = (model.t_symbol, tuple(r[s] for s in model.state_symbols), lag_flat,
                      tuple(r[s] for s in model.param_symbols))
        self._f = self._make(list(d.f))
        self._jy = self._make(list(d.jac_y))
        self._jl = self._make([d.jac_ylag[k][i, l] for i in range(n) for l in range(n) for k in range(nd)])
        self._jp = self._make(list(d.jac_p))

    def _make(self, exprs):
        return sp.lambdify(self._args, [sp.sympify(e).xreplace(self._rename) for e in exprs], modules="numpy", cse=True)

    def _eval(self, fn, T, X, XL, p, shape):
        Q = T.size
        vals = fn(T, tuple(X.T), tuple(XL.reshape(Q, -1).T), tuple(p))
        out = np.empty((Q, len(vals)))
        for k, v in enumerate(vals):
            out[:, k] = v
        return out.reshape((Q,) + shape)

    def f(self, T, X, XL, p):
        return self._eval(self._f, T, X, XL, p, (self.n,))

    def jac_y(self, T, X, XL, p):
        """``df_i / dx_l`` (lags held fixed): (Q, n, n)."""
        return self._eval(self._jy, T, X, XL, p, (self.n, self.n))

    def jac_ylag(self, T, X, XL, p):
        """``df_i / dY[l, k]``: (Q, n, n, n_delays)."""
        return self._eval(self._jl, T, X, XL, p, (self.n, self.n, self.nd))

    def jac_p(self, T, X, XL, p):
        """Explicit ``df_i / dp_j`` (lags held fixed): (Q, n, m)."""
        return self._eval(self._jp, T, X, XL, p, (self.n, self.m))

    def piecewise_params(self) -> set:
        return set()

    def linear_params(self, free, fixed) -> tuple:
        """Free params in which ``f`` is affine given the others; delays never are. Cached."""
        key = (tuple(free), tuple(sorted((k, float(v)) for k, v in dict(fixed).items())))
        cache = self.__dict__.setdefault("_linear_cache", {})
        if key not in cache:
            cache[key] = _affine_params(self.model, self.model.delay_derivatives.jac_p, free, fixed,
                                        set(self.model.delays))
        return cache[key]


def _affine_params(model, jp, free, fixed, exclude) -> tuple:
    """Largest subset of ``free`` (minus ``exclude``) in which the field with Jacobian ``jp`` is affine."""
    n_states = model.n_states
    ps = dict(zip(model.params, model.param_symbols))
    subs = {ps[k]: v for k, v in fixed.items()}
    cols = {name: [jp[i, model.params.index(name)].xreplace(subs) for i in range(n_states)]
            for name in free}
    cand = [n for n in free if n not in exclude]
    dep = {n: set().union(*(c.free_symbols for c in cols[n])) for n in cand}

    def ok(sub):
        syms = {ps[n] for n in sub}
        return all(not (dep[n] & syms) for n in sub)

    if len(cand) <= 12:
        from itertools import combinations

        for size in range(len(cand), -1, -1):
            hits = [sub for sub in combinations(cand, size) if ok(sub)]
            if hits:
                A = list(hits[0])
                break
    else:  # greedy: drop the most entangled parameter until affine
        A = list(cand)
        while not ok(A):
            A.remove(max(A, key=lambda n: len(dep[n] & {ps[m] for m in A})))
    return tuple(A)


_CACHE: dict = {}
_CACHE_LOCK = threading.Lock()


def node_model(model):
    """The (cached) :class:`NodeModel` of ``model`` (:class:`DelayNodeModel` for a model with delays)."""
    with _CACHE_LOCK:
        hit = _CACHE.get(model.fingerprint)
        if hit is None or hit.model is not model:
            hit = _CACHE[model.fingerprint] = (DelayNodeModel if model.delays else NodeModel)(model)
        return hit


def whitener(W, rcond=1e-10, ridge=0.0):
    """``S`` with ``S'S = W^+`` restricted to the well-conditioned range: rows r <= N.

    ``W`` here is the covariance to invert (e.g. V_e): eigenvalues below ``rcond * max`` are
    dropped (pseudo-inverse); returns (S, n_dropped).
    """
    W = (W + W.T) / 2
    if ridge:
        W = W + ridge * np.trace(W) / W.shape[0] * np.eye(W.shape[0])
    lam, U = np.linalg.eigh(W)
    keep = lam > rcond * max(lam.max(), 0.0)
    return (U[:, keep] / np.sqrt(lam[keep])).T, int((~keep).sum())


@dataclass
class Solved:
    theta: np.ndarray
    cost: float
    n_iter: int
    status: str
    message: str
    history: list
    sv: np.ndarray | None = None  # closed form: singular values of the whitened Jacobian S J


def solve_whitened(resid, jac, x0, lin_idx, nonlin_idx, S, *, max_nfev=200, xtol=1e-10, ftol=1e-12, bounds=None):
    """Minimise ``|S e(theta)|^2``.

    ``resid(theta)`` -> (N,), ``jac(theta)`` -> (N, p). Parameters ``lin_idx`` enter ``e`` affinely
    (``e`` = e0(nonlin) + J_lin(nonlin) theta_lin): closed form if ``nonlin_idx`` is empty,
    variable projection (Kaufman's Jacobian) otherwise; the full set is polished by a
    trust-region least-squares run when nothing is linear. ``bounds``: optional ``(lo, hi)``,
    each (p,), on the parameters fitted by the trust-region run (linear ones are profiled freely).
    """
    p = x0.size
    if bounds is None:
        lo_b = hi_b = None
    else:
        lo_b, hi_b = (np.broadcast_to(np.asarray(b, float), (p,)) for b in bounds)
    lin_idx = np.asarray(lin_idx, int)
    nonlin_idx = np.asarray(nonlin_idx, int)
    history = []
    last = {}  # singular values of the last profiled G

    guard = nonlin_idx.size > 0  # trial points of a nonlinear search may leave the field's domain

    def profile(th_nl):
        th = np.zeros(p)
        th[nonlin_idx] = th_nl
        if guard:
            with np.errstate(all="ignore"):
                e0 = S @ resid(th)
                G = (S @ jac(th))[:, lin_idx]
            if not (np.isfinite(e0).all() and np.isfinite(G).all()):
                th[lin_idx] = np.nan  # a NaN residual makes the trust region shrink
                return th, np.full(e0.shape, np.nan), G
        else:
            e0 = S @ resid(th)
            G = (S @ jac(th))[:, lin_idx]
        sol, _, _, last["sv"] = np.linalg.lstsq(G, -e0, rcond=None)
        th[lin_idx] = sol
        return th, e0 + G @ sol, G

    if nonlin_idx.size == 0:
        th, r, _ = profile(np.empty(0))
        c = float(r @ r)
        return Solved(th, c, 1, "converged", "closed form (linear in the parameters)", [c], last["sv"])
    from scipy.optimize import least_squares  # on use: importing scipy.optimize costs about a second

    if lin_idx.size:
        def fun(th_nl):
            th, r, _ = profile(th_nl)
            history.append(float(r @ r))
            return r

        def fjac(th_nl):
            th, r, G = profile(th_nl)
            Jb = (S @ jac(th))[:, nonlin_idx]
            Q, _ = np.linalg.qr(G)
            return Jb - Q @ (Q.T @ Jb)

        bd = (-np.inf, np.inf) if lo_b is None else (lo_b[nonlin_idx], hi_b[nonlin_idx])
        res = least_squares(fun, x0[nonlin_idx], jac=fjac, method="trf", max_nfev=max_nfev, xtol=xtol, ftol=ftol,
                            bounds=bd)
        th, r, _ = profile(res.x)
    else:
        def fun(th):
            r = S @ resid(th)
            history.append(float(r @ r))
            return r

        res = least_squares(fun, x0, jac=lambda th: S @ jac(th), method="trf", max_nfev=max_nfev,
                            xtol=xtol, ftol=ftol, bounds=(-np.inf, np.inf) if lo_b is None else (lo_b, hi_b))
        th = res.x
        r = res.fun
    status = "converged" if res.status > 0 else ("max_iter" if res.status == 0 else "failed")
    return Solved(th, float(r @ r), int(res.nfev), status, str(res.message), history)
