"""Cubic regression B-splines with GCV knot choice: the nonparametric proxy of the matching estimators.

One least-squares regression spline per observed state (Brunel, Clairon & d'Alché-Buc 2014,
JASA 109:173-185, §3 and §5.1; corrected spec ``seed-001`` §1.2):

* uniform knots on the proxy domain, the number of basis functions ``K`` chosen by
  ``GCV(K) = n RSS_K / (n - tr H_K)^2`` (``tr H_K = K``, minus the number of equality
  constraints), optionally inflated by ``undersmooth``;
* or user knots, including breakpoints repeated ``degree`` times (the proxy is then only
  C^0 there: its derivative may jump, as at a known change point);
* an optional equality constraint ``x(t0) = x0`` (least squares with a linear constraint);
* the coefficient covariance, homoscedastic ``sigma^2 (P'P)^-1`` with
  ``sigma^2 = RSS / (n - K)`` or the heteroscedasticity-robust sandwich.

Theory gap (documented, not hidden): the asymptotic normality of the matching estimators
needs *undersmoothing* (``sqrt(n) K^-s -> 0`` and ``K^4 / n -> 0``, spec §1.2), while GCV
targets the curve's mean squared error (``K ~ n^(1/(2s+1))``), for which ``sqrt(n) K^-s``
diverges slowly. ``undersmooth > 1`` multiplies the GCV number of interior knots; it
reduces the proxy bias at the price of variance, and no data-driven rule for the factor
is known. The paper itself uses GCV. On alpha-pinene the dominant bias of the orthogonal
conditions is not the proxy's approximation error but an errors-in-variables effect (the
noisy proxy enters the regressors ``<x_hat, phi>``), which undersmoothing does not remove
(``tests/reference/oc_tables.md``).

Speed: the GCV scan never forms the ``n x K`` design matrix: ``P'P`` is banded (``degree``
off-diagonals) and is accumulated, factored and solved in O(n k^2) per candidate by numba
kernels (:mod:`odeinfer.smooth._banded`), once per candidate for all states observed at the
same times; the final fits (coefficients, ``(P'P)^-1``, residuals, robust sandwich) of all
states are one kernel call, and B-splines are evaluated by numba (:mod:`odeinfer.smooth._bsplines`),
not by scipy ``BSpline`` objects. ``fit`` limits BLAS to one thread (many small products).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from odeinfer.errors import DataError, InputError
from odeinfer.smooth._blas import single_threaded_blas
from odeinfer.smooth._banded import fit_final_all, rss_banded_multi, rss_scan_uniform_multi
from odeinfer.smooth._bsplines import basis_dense

__all__ = ["SplineFit", "SplineProxy", "SplineSmoother", "basis_matrix", "uniform_knots"]


def uniform_knots(a, b, n_basis, degree=3, breakpoints=()):
    """Clamped knot vector on ``[a, b]`` with uniform interior knots and repeated breakpoints.

    Parameters
    ----------
    a, b : float
        Domain ends, ``a < b``.
    n_basis : int
        Number of basis functions of the uniform part (``>= degree + 1``); each breakpoint
        adds ``degree`` more.
    degree : int, default 3
    breakpoints : sequence of float
        Points in ``(a, b)`` repeated ``degree`` times (C^0 joins); uniform knots closer than
        a quarter spacing to a breakpoint are dropped.

    Returns
    -------
    ndarray (n_basis + degree * len(breakpoints) + degree + 1 - dropped,)
    """
    n_int = n_basis - degree - 1
    inner = np.linspace(a, b, n_int + 2)[1:-1] if n_int > 0 else np.empty(0)
    bps = np.asarray(sorted(float(x) for x in breakpoints))
    if bps.size:
        h = (b - a) / (n_int + 1)
        keep = np.all(np.abs(inner[:, None] - bps[None, :]) > 0.25 * h, axis=1) if inner.size else []
        inner = np.sort(np.concatenate([inner[keep] if inner.size else inner, np.repeat(bps, degree)]))
    return np.concatenate([np.full(degree + 1, float(a)), inner, np.full(degree + 1, float(b))])


def basis_matrix(knots, degree, t, nu=0):
    """Values (or ``nu``-th derivatives) of every B-spline of ``knots`` at ``t``: shape (len(t), K).

    Right-continuous at interior knots; at the right end the left limit is used; ``t`` outside
    ``[knots[0], knots[-1]]`` is clipped (numba kernel :func:`odeinfer.smooth._bsplines.basis_dense`;
    equal to scipy's ``BSpline`` to rounding).
    """
    knots = np.array(knots, dtype=float)  # writable copies: one compiled signature of the kernel
    K = knots.size - degree - 1
    t = np.array(t, dtype=float, ndmin=1).ravel()
    out = np.empty((t.size, K))
    basis_dense(knots, int(degree), t, int(nu), out)
    return out


@functools.lru_cache(maxsize=256)
def _uniform_knots_cached(a, b, n_basis, degree, breakpoints):
    return _frozen(uniform_knots(a, b, n_basis, degree, breakpoints))


def _frozen(a):
    a = np.array(a, dtype=float, copy=True)
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class SplineFit:
    """Least-squares regression spline of one state.

    Attributes
    ----------
    state : str
    knots : ndarray (K + degree + 1,)
    degree : int
    coef : ndarray (K,)
    cov : ndarray (K, K)
        Coefficient covariance used downstream (``covariance`` option of the smoother).
    cov_homoscedastic, cov_robust : ndarray (K, K)
        ``sigma^2 (P'P)^-1`` (constrained-LS form with a constraint) and the HC0 sandwich.
    sigma : float
        ``sqrt(RSS / (n - K + n_constraints))``.
    t, y : ndarray (n,)
        The observations used (missing values removed).
    residuals : ndarray (n,)
    gcv : mapping int -> float
        GCV score per candidate number of basis functions (empty for user knots).
    n_basis_gcv : int or None
        GCV minimiser (before ``undersmooth``).
    constraint : tuple or None
        ``(t0, x0)`` if the fit was constrained to ``x(t0) = x0``.
    """

    state: str
    knots: np.ndarray
    degree: int
    coef: np.ndarray
    cov: np.ndarray
    cov_homoscedastic: np.ndarray
    cov_robust: np.ndarray
    sigma: float
    t: np.ndarray
    y: np.ndarray
    residuals: np.ndarray
    gcv: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    n_basis_gcv: int | None = None
    constraint: tuple | None = None

    @property
    def n_basis(self) -> int:
        return self.coef.size

    @property
    def nobs(self) -> int:
        return self.t.size

    def basis(self, t, nu=0):
        """B-spline values (``nu``-th derivative) at ``t``, shape (len(t), K)."""
        return basis_matrix(self.knots, self.degree, t, nu)

    def __call__(self, t, nu=0):
        """The proxy (or its ``nu``-th derivative) at ``t``, shape (len(t),)."""
        return self.basis(t, nu) @ self.coef


def _gram_inverse(P):
    """((P'P)^-1 or its pseudo-inverse, rank)."""
    PtP = P.T @ P
    try:
        c = cho_factor(PtP)
        return cho_solve(c, np.eye(PtP.shape[0])), PtP.shape[0]
    except np.linalg.LinAlgError:
        return np.linalg.pinv(PtP), int(np.linalg.matrix_rank(P))


def _ls(P, y, a=None, x0=None):
    """(coef, G, A, rank): LS solution, (P'P)^+ (constrained form), the map coef = A y + const."""
    G, rank = _gram_inverse(P)
    if a is None:
        A = G @ P.T
        return A @ y, G, A, rank
    Ga = G @ a
    s = float(a @ Ga)
    Gc = G - np.outer(Ga, Ga) / s
    A = Gc @ P.T
    coef = A @ y + Ga * (x0 / s)
    return coef, Gc, A, rank


def _dense_fit(knots, degree, t, y, cons):
    """(coef, G, residuals, robust covariance) by the dense (pseudo-inverse) path."""
    P = basis_matrix(knots, degree, t)
    a_vec = None if cons is None else basis_matrix(knots, degree, [cons[0]])[0]
    coef, G, A, _ = _ls(P, y, a_vec, None if cons is None else cons[1])
    r = y - P @ coef
    return coef, G, r, (A * r**2) @ A.T


@dataclass(frozen=True)
class SplineSmoother:
    """Configuration of the regression-spline proxy (validated at construction).

    Parameters
    ----------
    degree : int, default 3
        Spline degree (3: cubic, as in the paper).
    n_basis : int or None, default None
        Number of basis functions for every state; None: chosen by GCV per state.
    knots : array-like or None
        Full (clamped) knot vector used for every state, overriding ``n_basis``; repeat an
        interior knot ``degree`` times for a C^0 join at a known change point.
    breakpoints : tuple of float, default ()
        Known discontinuities of the derivative (e.g. ``T_r``), added ``degree`` times to the
        uniform knots.
    gcv_range : (int, int) or None
        Candidate numbers of uniform basis functions; default ``(degree + 1, min(n // 3, 40))``.
    undersmooth : float, default 1.0
        Factor (>= 1) on the GCV number of interior knots (see the module notes on the gap
        between GCV and the theory).
    covariance : {"homoscedastic", "robust"}, default "homoscedastic"
        Which coefficient covariance is passed on to the estimators.
    """

    degree: int = 3
    n_basis: int | None = None
    knots: tuple | None = None
    breakpoints: tuple = ()
    gcv_range: tuple | None = None
    undersmooth: float = 1.0
    covariance: str = "homoscedastic"

    def __post_init__(self):
        if not isinstance(self.degree, (int, np.integer)) or not 1 <= self.degree <= 5:
            raise InputError(f"degree: expected an int in 1..5, got {self.degree!r}; use 3 for cubic splines")
        if self.n_basis is not None and (not isinstance(self.n_basis, (int, np.integer))
                                         or self.n_basis < self.degree + 1):
            raise InputError(f"n_basis: expected None (GCV) or an int >= degree + 1 = {self.degree + 1}, "
                             f"got {self.n_basis!r}")
        if self.knots is not None:
            k = np.asarray(self.knots, float)
            if k.ndim != 1 or k.size < 2 * (self.degree + 1) or np.any(np.diff(k) < 0) or not np.all(np.isfinite(k)):
                raise InputError(f"knots: expected a sorted finite clamped knot vector with at least "
                                 f"{2 * (self.degree + 1)} entries, got {self.knots!r}")
            object.__setattr__(self, "knots", tuple(k.tolist()))
        object.__setattr__(self, "breakpoints", tuple(float(b) for b in self.breakpoints))
        if self.gcv_range is not None:
            lo, hi = self.gcv_range
            if not (self.degree + 1 <= lo <= hi):
                raise InputError(f"gcv_range: expected (lo, hi) with {self.degree + 1} <= lo <= hi, got {self.gcv_range!r}")
        if not (isinstance(self.undersmooth, (int, float)) and self.undersmooth >= 1.0):
            raise InputError(f"undersmooth: expected a number >= 1 (factor on the GCV knot count), "
                             f"got {self.undersmooth!r}")
        if self.covariance not in ("homoscedastic", "robust"):
            raise InputError(f"covariance: expected 'homoscedastic' or 'robust', got {self.covariance!r}")

    # ------------------------------------------------------------------------------------
    def fit_state(self, t, y, *, state="x", domain=None, x0=None, t0=None) -> SplineFit:
        """Fit one state.

        Parameters
        ----------
        t, y : array-like (n,)
            Observations (NaN in ``y`` are dropped).
        state : str
            Name used in messages.
        domain : (float, float), optional
            Proxy domain; default ``(min(t0, t[0]), t[-1])``.
        x0, t0 : float, optional
            Constrain ``x(t0) = x0``.
        """
        t = np.asarray(t, float)
        y = np.asarray(y, float)
        ok = np.isfinite(y)
        t, y = t[ok], y[ok]
        if t.size == 0:
            raise DataError(f"data: state {state!r} has no observed value; a spline proxy needs observations")
        lo_t = t[0] if t0 is None else min(float(t0), t[0])
        a, b = (lo_t, t[-1]) if domain is None else (float(domain[0]), float(domain[1]))
        cons_t = None if x0 is None else float(a if t0 is None else t0)
        return self._fit_group(t, y[None, :], (state,), a, b, cons_t, None if x0 is None else [float(x0)])[0]

    def _fit_group(self, t, Y, states, a, b, cons_t, x0s) -> list:
        """Fit the states ``states`` observed at the same times ``t`` (n,), values ``Y`` (m, n), all
        finite, on the domain ``[a, b]``; constrained to ``x_j(cons_t) = x0s[j]`` unless ``cons_t``
        is None. The GCV scan and the final fit share ``P'P`` across the states."""
        n, m, deg = t.size, len(states), int(self.degree)
        if n == 0:
            raise DataError(f"data: state {states[0]!r} has no observed value; a spline proxy needs observations")
        if not a < b:
            raise DataError(f"data: state {states[0]!r} spans no time interval ([{a}, {b}]); need distinct times")
        has = cons_t is not None
        n_cons = int(has)
        tc = float(cons_t) if has else 0.0
        xcon = np.array(x0s, float) if has else np.zeros(m)
        Y = np.ascontiguousarray(Y, dtype=float)
        gcvs, k_gcvs = [{} for _ in range(m)], [None] * m
        if self.knots is not None:
            Ks = [None] * m
        else:
            nb = deg * len(self.breakpoints)
            if self.n_basis is not None:
                Ks = [int(self.n_basis)] * m
            else:
                lo, hi = self.gcv_range or (deg + 1, max(deg + 1, min(n // 3, 40)))
                hi = min(hi, n - nb - 1 + n_cons)
                if hi < lo:
                    raise DataError(
                        f"data: state {states[0]!r} has {n} observations, fewer than the {lo + nb - n_cons + 1} "
                        f"needed for the smallest spline ({lo + nb} coefficients); add observations, lower "
                        "`degree` or drop breakpoints")
                # banded normal equations, O(n k^2) per candidate (numba, no BLAS, no n x K matrix),
                # P'P accumulated and factored once per candidate for all m states
                if self.breakpoints:
                    kns = [uniform_knots(a, b, K, deg, self.breakpoints) for K in range(lo, hi + 1)]
                    rss_all = np.column_stack([rss_banded_multi(kn, deg, t, Y, has, tc, xcon) for kn in kns])
                    sizes = np.array([kn.size - deg - 1 for kn in kns], float)
                else:
                    rss_all = rss_scan_uniform_multi(float(a), float(b), deg, int(lo), int(hi), t, Y, has, tc, xcon)
                    sizes = np.arange(lo, hi + 1, dtype=float)
                cand = list(range(lo, hi + 1))
                Ks = []
                fast = bool((n - (sizes - n_cons) > 0).all())
                if fast:
                    score = n * rss_all / (n - (sizes - n_cons)) ** 2
                    good = (rss_all >= 0).all(axis=1)
                    first = score.argmin(axis=1)
                for j in range(m):
                    if fast and good[j]:
                        gcv = dict(zip(cand, score[j].tolist()))
                        k_gcv = cand[first[j]]  # the first minimiser, as min() over the dict
                    else:
                        gcv = self._gcv_loop(t, Y[j], a, b, cand, rss_all[j], sizes, n_cons,
                                             (tc, xcon[j]) if has else None)
                        k_gcv = min(gcv, key=gcv.get)
                    n_int = k_gcv - deg - 1
                    Ks.append(k_gcv if self.undersmooth == 1.0 else int(
                        deg + 1 + math.ceil(max(n_int, 1) * self.undersmooth)))
                    gcvs[j], k_gcvs[j] = gcv, k_gcv
        knots_list = [np.asarray(self.knots, float) if K_u is None else
                      _uniform_knots_cached(a, b, K_u, deg, self.breakpoints) for K_u in Ks]
        for j, kn in enumerate(knots_list):
            if n - (kn.size - deg - 1) + n_cons < 1:
                raise DataError(
                    f"data: state {states[j]!r} has {n} observations but the spline has {kn.size - deg - 1} "
                    f"coefficients{' (1 fixed by x0)' if n_cons else ''}; need more observations than free "
                    "coefficients. Use fewer knots (n_basis / knots), a lower degree, or more data")
        sizes_k = np.array([kn.size - deg - 1 for kn in knots_list], np.int64)
        koffs = np.zeros(m + 1, np.int64)
        koffs[1:] = np.cumsum(sizes_k + deg + 1)
        coffs = np.zeros(m + 1, np.int64)
        coffs[1:] = np.cumsum(sizes_k)
        goffs = np.zeros(m + 1, np.int64)
        goffs[1:] = np.cumsum(sizes_k**2)
        coef, G, cov_r = np.empty(coffs[-1]), np.empty(goffs[-1]), np.empty(goffs[-1])
        resid, status = np.empty((m, n)), np.empty(m, np.int64)
        uniform = self.knots is None and not self.breakpoints
        fit_final_all(np.concatenate(knots_list), koffs, deg, t, Y, has, tc, xcon, uniform, coffs, goffs, coef, G,
                      resid, cov_r, status)
        for arr in (coef, G, cov_r, resid):
            arr.flags.writeable = False
        fits = [None] * m
        t_frozen = _frozen(t)
        for j in range(m):
            knots, K = knots_list[j], int(sizes_k[j])
            if status[j] == 0:
                c, Gj, r = coef[coffs[j]:coffs[j + 1]], G[goffs[j]:goffs[j + 1]].reshape(K, K), resid[j]
                cr = cov_r[goffs[j]:goffs[j + 1]].reshape(K, K)
            else:  # P'P singular: dense pseudo-inverse
                c, Gj, r, cr = (_frozen(x) for x in _dense_fit(knots, deg, t, Y[j], (tc, xcon[j]) if has else None))
            sigma2 = float(r @ r) / (n - K + n_cons)
            cov_h = sigma2 * Gj
            cov_h.flags.writeable = False
            fits[j] = SplineFit(states[j], knots if not knots.flags.writeable else _frozen(knots), deg, c,
                                cov_h if self.covariance == "homoscedastic" else cr, cov_h, cr, math.sqrt(sigma2),
                                t_frozen, _frozen(Y[j]), r, MappingProxyType(gcvs[j]), k_gcvs[j],
                                (tc, float(xcon[j])) if has else None)
        return fits

    def _gcv_loop(self, t, y, a, b, cand, rss_all, sizes, n_cons, cons):
        """GCV scores with the dense pseudo-inverse path where ``P'P`` is singular."""
        n, gcv = t.size, {}
        for K, rss, rank in zip(cand, rss_all, sizes):
            rank = int(rank)
            if rss < 0:  # P'P singular (empty knot spans): dense pseudo-inverse path
                kn = uniform_knots(a, b, K, self.degree, self.breakpoints)
                P = basis_matrix(kn, self.degree, t)
                av = None if cons is None else basis_matrix(kn, self.degree, [cons[0]])[0]
                coef, _, _, rank = _ls(P, y, av, None if cons is None else cons[1])
                rss = float(np.sum((y - P @ coef) ** 2))
            tr = rank - n_cons
            if n - tr > 0:
                gcv[K] = n * rss / (n - tr) ** 2
        return gcv

    def fit(self, data, *, states=None, x0=None) -> "SplineProxy":
        """Fit every observed state of ``data``.

        Parameters
        ----------
        data : odeinfer.Data
        states : sequence of str, optional
            States to fit (default: those of ``data``); each must be a column of ``data``.
        x0 : dict, optional
            ``{state: value}``: constrain ``x(data.t0) = value`` for these states.

        Returns
        -------
        SplineProxy
        """
        with single_threaded_blas():
            return self._fit(data, states=states, x0=x0)

    def _fit(self, data, *, states, x0):
        from odeinfer.data import Data

        if not isinstance(data, Data):
            raise DataError(f"data: expected an oi.Data, got {type(data).__name__}; pass one experiment at a time")
        states = tuple(data.states) if states is None else tuple(states)
        x0 = dict(x0 or {})
        missing = [s for s in states if s not in data.states]
        if missing:
            raise DataError(f"states: {missing} are not columns of the data (columns: {list(data.states)})")
        t_obs = data.t[data.mask.any(axis=1)] if data.mask.any() else data.t
        a, b = min(float(data.t0), float(t_obs[0])), float(t_obs[-1])
        t_all = np.asarray(data.t, float)
        cols = [data.states.index(s) for s in states]
        Yall = np.where(data.mask[:, cols], data.y[:, cols], np.nan).T  # (m, n)
        ok = np.isfinite(Yall)
        # states observed at the same times (and equally constrained) share the design matrix
        groups = {}
        for j, s in enumerate(states):
            groups.setdefault((ok[j].tobytes(), x0.get(s) is not None), []).append(j)
        fits = [None] * len(states)
        for (_, constrained), idx in groups.items():
            okj = ok[idx[0]]
            t = t_all[okj]
            if t.size == 0:
                raise DataError(f"data: state {states[idx[0]]!r} has no observed value; a spline proxy needs "
                                "observations")
            out = self._fit_group(t, Yall[idx][:, okj], tuple(states[j] for j in idx), a, b,
                                  float(data.t0) if constrained else None,
                                  [x0[states[j]] for j in idx] if constrained else None)
            for j, f in zip(idx, out):
                fits[j] = f
        return SplineProxy(states, tuple(fits), (a, b), float(data.t0), self)


@dataclass(frozen=True, eq=False)
class SplineProxy:
    """The regression-spline proxy of one dataset: one :class:`SplineFit` per state.

    Attributes
    ----------
    states : tuple of str
    fits : tuple of SplineFit
    domain : (float, float)
        Proxy domain ``[T0, T1]``.
    t0 : float
        The data's initial time.
    smoother : SplineSmoother
    """

    states: tuple
    fits: tuple
    domain: tuple
    t0: float
    smoother: SplineSmoother

    def __call__(self, t, nu=0):
        """Proxy values (``nu``-th derivative) at ``t``: shape (len(t), n_states)."""
        return np.column_stack([f(t, nu) for f in self.fits])

    def __getitem__(self, state) -> SplineFit:
        return self.fits[self.states.index(state)]

    @property
    def sigma(self) -> dict:
        """Residual standard deviation per state."""
        return {s: f.sigma for s, f in zip(self.states, self.fits)}

    @property
    def knots_all(self) -> np.ndarray:
        """Sorted distinct knots of all states (quadrature breakpoints)."""
        return np.unique(np.concatenate([f.knots for f in self.fits]))

    def gcv_table(self):
        """GCV curves as a DataFrame (rows: number of basis functions, columns: states)."""
        import pandas as pd

        return pd.DataFrame({s: pd.Series(dict(f.gcv), dtype=float) for s, f in zip(self.states, self.fits)})

    def __repr__(self):
        ks = ", ".join(f"{s}: K={f.n_basis}" for s, f in zip(self.states, self.fits))
        return f"SplineProxy([{self.domain[0]:g}, {self.domain[1]:g}], {ks})"
