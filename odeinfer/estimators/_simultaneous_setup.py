"""Set-up of :class:`odeinfer.estimators.Simultaneous`: grids, unknown layout, residual map, starting values.

The unknown vector is ``z = [X_1.ravel(), ..., X_E.ravel(), theta_free]`` with ``X_e`` the
(N_e, n) node values of experiment ``e``. Each observation is a residual
``r = w_k (y - x[node, k])`` (additive noise) or ``w_k (log y - log x[node, k])`` (log noise),
``w_k = 1 / sigma_k``; it touches exactly one entry of ``z``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from odeinfer.errors import DataError, InputError
from odeinfer.estimators.base import _values_by_name
from odeinfer.smooth.splines import SplineSmoother

__all__ = ["build", "SimProblem", "make_grid", "collocation_pattern"]

_DEFAULT_START = 1.0
#: Grid nodes per experiment when neither n_grid, dt nor grid is given (at least).
DEFAULT_NODES = 201


# --- grids ---------------------------------------------------------------------------------
def make_grid(nodes, *, n_grid=None, dt=None, grid=None, where="data"):
    """Grid containing every time of ``nodes`` (sorted, distinct: t0 and the observation times).

    Returns the grid (M,) with ``nodes`` among its points.
    """
    nodes = np.asarray(nodes, float)
    span = nodes[-1] - nodes[0]
    if grid is not None:
        g = np.asarray(grid, float)
        tol = 1e-9 * max(span, 1.0)
        g = g[(g >= nodes[0] - tol) & (g <= nodes[-1] + tol)]
        pos = np.searchsorted(g, nodes - tol)
        pos = np.minimum(pos, max(g.size - 1, 0))
        ok = (g.size > 0) & (np.abs(g[pos] - nodes) <= tol) if g.size else np.zeros(nodes.size, bool)
        if not np.all(ok):
            miss = nodes[~ok]
            raise InputError(
                f"grid: {where} needs every observation time and t0 as a grid node, but {miss.size} of them are "
                f"missing from the grid (first: {miss[:3].tolist()}); the grid is coarser than the data. Add them "
                "to grid, or use n_grid=... / dt=..., which refine the observation times")
        g = g.copy()
        g[pos] = nodes  # snap to the exact observation times
        return g
    gaps = np.diff(nodes)
    if dt is not None:
        parts = np.maximum(1, np.ceil(gaps / dt - 1e-9)).astype(int)
    else:
        target = max(nodes.size, DEFAULT_NODES) if n_grid is None else int(n_grid)
        if target < nodes.size:
            raise InputError(
                f"n_grid: {where} has {nodes.size} distinct observation times (with t0), each of which is a grid "
                f"node, but n_grid={n_grid}; the grid would be coarser than the data. Use n_grid >= {nodes.size}")
        h = span / (target - 1)
        parts = np.maximum(1, np.rint(gaps / h)).astype(int)
    pieces = [np.linspace(a, b, k + 1)[:-1] for a, b, k in zip(nodes[:-1], nodes[1:], parts)]
    return np.concatenate(pieces + [nodes[-1:]])


# --- the problem ---------------------------------------------------------------------------
@dataclass
class ExpBlock:
    """One experiment's slice of the problem."""

    name: str
    t: np.ndarray            # grid (N,)
    offset: int              # first index of X in z
    est0: np.ndarray         # indices of estimated initial states
    known0: np.ndarray       # indices of fixed initial states
    known0_values: np.ndarray
    n_rows: int              # data rows (for the residual table)


class SimProblem:
    """Arrays and bookkeeping of one Simultaneous fit (see the module docstring)."""

    def __init__(self, model, problem, exps, obs, z0, sigma0, warnings_):
        self.model = model
        self.n = model.n_states
        self.free = problem.free
        self.q = len(problem.free)
        self.pidx = problem.free_index
        self.p_full = problem.full_params(np.zeros(self.q))
        self.exps = exps
        self.theta_off = sum(e.t.size * self.n for e in exps)
        self.nz = self.theta_off + self.q
        self.ridx, self.rstate, self.ry, self.rrow = obs
        self.nobs = int(self.ridx.size)
        self.log_noise = model.observation.noise == "log"
        self.z0 = z0
        self.sigma = sigma0
        self.warnings = warnings_
        self.w = np.ones(self.n)
        self.wr = np.ones(self.nobs)
        self._pattern()

    # constraint Jacobian pattern (fixed) ----------------------------------------------
    def _pattern(self):
        rows, cols, self.crow_off, r0 = collocation_pattern(self.exps, self.n, self.q, self.theta_off)
        self.n_coll = r0
        self.known_rows = r0 + np.arange(sum(e.known0.size for e in self.exps))
        self.known_cols = np.concatenate([e.offset + e.known0 for e in self.exps]).astype(np.int64)
        self.known_vals = np.concatenate([e.known0_values for e in self.exps])
        rows.append(self.known_rows)
        cols.append(self.known_cols)
        self.crows = np.concatenate(rows).astype(np.int64)
        self.ccols = np.concatenate(cols).astype(np.int64)
        self.mc = r0 + self.known_rows.size

    # weights and residuals ----------------------------------------------------------------
    def set_weights(self, sigma):
        self.w = np.ones(self.n)
        for k, s in sigma.items():
            self.w[k] = 1.0 / s
        self.wr = self.w[self.rstate]

    def residuals(self, z):
        """Weighted residuals ``r`` (nobs,) and ``dr/dz[ridx]`` (nobs,)."""
        x = z[self.ridx]
        if self.log_noise:
            with np.errstate(divide="ignore", invalid="ignore"):
                r = self.wr * (self.ry - np.log(x))
                d = -self.wr / x
            r[x <= 0] = np.nan
        else:
            r = self.wr * (self.ry - x)
            d = -self.wr
        return r, d

    #: the objective's interface to :func:`odeinfer.estimators._bock.iterate`
    nonfinite_start = ("the residuals are not finite at the starting point (log-scale noise with a non-positive start "
                       "state?)")

    def terms(self, z):
        """``(0.5 ||r||^2, gradient (nz,), diagonal of the Gauss-Newton Hessian (nz,))``, or None where
        a residual is not finite."""
        r, d = self.residuals(z)
        if not np.all(np.isfinite(r)):
            return None
        return 0.5 * float(r @ r), np.bincount(self.ridx, d * r, minlength=self.nz), \
            np.bincount(self.ridx, d * d, minlength=self.nz)

    def value(self, z):
        """``0.5 ||r||^2`` (inf where a residual is not finite)."""
        r, _ = self.residuals(z)
        return 0.5 * float(r @ r) if np.all(np.isfinite(r)) else np.inf

    def raw_residuals(self, z):
        x = z[self.ridx]
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.ry - (np.log(x) if self.log_noise else x)

    def residual_sigma(self, z):
        """Per-state residual sd, ``RSS_k / (n_k (1 - k / nobs))`` (pooled for states with < 3 values)."""
        e = self.raw_residuals(z)
        dof = max(1.0 - (self.q + sum(x.est0.size for x in self.exps)) / max(self.nobs, 1), 0.1)
        pooled = math.sqrt(float(np.nansum(e * e)) / (self.nobs * dof))
        out = {}
        for k in np.unique(self.rstate):
            ek = e[self.rstate == k]
            out[int(k)] = math.sqrt(float(ek @ ek) / (ek.size * dof)) if ek.size >= 3 else pooled
            if not out[int(k)] > 0:
                out[int(k)] = pooled if pooled > 0 else 1.0
        return out

    # views of z ---------------------------------------------------------------------------
    def theta_full(self, z):
        p = self.p_full.copy()
        p[self.pidx] = z[self.theta_off:]
        return p

    def X(self, z, e):
        return z[e.offset:e.offset + e.t.size * self.n].reshape(e.t.size, self.n)

    def names_values(self, z):
        names, values = list(self.free), list(z[self.theta_off:])
        many = len(self.exps) > 1
        for e in self.exps:
            for k in e.est0:
                names.append(f"x0[{self.model.states[k]}]" + (f"@{e.name}" if many else ""))
                values.append(z[e.offset + k])
        return names, np.array(values, float)

    def fixed_x0(self):
        many = len(self.exps) > 1
        return {f"x0[{self.model.states[k]}]" + (f"@{e.name}" if many else ""): float(v)
                for e in self.exps for k, v in zip(e.known0, e.known0_values)}

    def grids(self):
        return {e.name: e.t.copy() for e in self.exps}

    def states_on_grid(self, z):
        return {e.name: self.X(z, e).copy() for e in self.exps}

    def sigma_by_name(self, sigma):
        return {self.model.states[k]: float(s) for k, s in sigma.items()}

    def residual_table(self, z):
        total = sum(e.n_rows for e in self.exps)
        out = np.full((total, self.n), np.nan)
        out[self.rrow, self.rstate] = self.raw_residuals(z)
        return out


def collocation_pattern(exps, n, q, theta_off):
    """``(rows, cols, first row per experiment, number of rows)`` of the collocation equations: per
    experiment, per grid interval ``j`` and equation ``i``, the columns ``x_j`` (n), ``x_{j+1}`` (n)
    and the ``q`` parameters (the order of the kernels' Jacobian values)."""
    rows, cols, offs = [], [], []
    r0 = 0
    for e in exps:
        N = e.t.size
        j = np.repeat(np.arange(N - 1), n)                 # interval of each row
        i = np.tile(np.arange(n), N - 1)                   # equation within the interval
        row = r0 + j * n + i
        l = np.arange(n)
        ca = e.offset + j[:, None] * n + l[None, :]
        cb = ca + n
        ct = np.broadcast_to(theta_off + np.arange(q)[None, :], (row.size, q))
        cols.append(np.concatenate([ca, cb, ct], axis=1).ravel())
        rows.append(np.repeat(row, 2 * n + q))
        offs.append(r0)
        r0 += (N - 1) * n
    return rows, cols, offs, r0


# --- build from user input ------------------------------------------------------------------
def _x0_per_experiment(x0, exps, states):
    if x0 is None:
        return [{} for _ in exps]
    if isinstance(x0, (list, tuple)) and x0 and isinstance(x0[0], Mapping):
        if len(x0) != len(exps):
            raise InputError(f"x0: got {len(x0)} dicts but the data have {len(exps)} experiments; give one per "
                             "experiment or a single dict for all")
        return [_values_by_name("x0", v, states, states) for v in x0]
    one = _values_by_name("x0", x0, states, states)
    return [dict(one) for _ in exps]


def _start_states_for(start_states, exps, i):
    if start_states is None:
        return None
    if isinstance(start_states, Mapping):
        return start_states.get(exps[i].name)
    if isinstance(start_states, list):
        if len(start_states) != len(exps):
            raise InputError(f"start_states: got a list of {len(start_states)} but the data have {len(exps)} "
                             "experiments; give one per experiment")
        return start_states[i]
    return start_states


def _user_trajectory(spec, t, n, name):
    if callable(spec):
        Y = np.asarray(spec(t), dtype=float)
    else:
        try:
            ts, Ys = spec
            ts, Ys = np.asarray(ts, float), np.asarray(Ys, float)
        except (TypeError, ValueError):
            raise InputError(f"start_states: expected a callable g(t) or a tuple (t, Y), got "
                             f"{type(spec).__name__}") from None
        if ts.ndim != 1 or Ys.shape != (ts.size, n) or np.any(np.diff(ts) <= 0):
            raise InputError(f"start_states: expected t (k,) strictly increasing and Y (k, {n}), got shapes "
                             f"{ts.shape} and {Ys.shape}")
        tol = 1e-9 * max(t[-1] - t[0], 1.0)
        if ts[0] > t[0] + tol or ts[-1] < t[-1] - tol:
            raise InputError(f"start_states: the trajectory covers [{ts[0]:g}, {ts[-1]:g}] but experiment {name!r} "
                             f"needs [{t[0]:g}, {t[-1]:g}] (t0 to the last observation); the start lies outside "
                             "the data. Give a trajectory over the whole span")
        Y = np.column_stack([np.interp(t, ts, Ys[:, k]) for k in range(n)])
    if Y.shape != (t.size, n) or not np.all(np.isfinite(Y)):
        raise InputError(f"start_states: expected finite values of shape ({t.size}, {n}) for experiment {name!r}, "
                         f"got shape {Y.shape}" + ("" if Y.shape != (t.size, n) else " with non-finite values"))
    return Y


def _proxy(smoother, t, y, domain, state, grid):
    """Spline proxy of one state on ``grid`` and its residual sd (linear interpolation if too few points)."""
    ok = np.isfinite(y)
    try:
        fit = smoother.fit_state(t, y, state=state, domain=domain)
        return fit(grid), fit.sigma
    except DataError:
        tt, yy = t[ok], y[ok]
        sd = float(np.std(np.diff(yy)) / math.sqrt(2.0)) if yy.size > 2 else float("nan")
        return np.interp(grid, tt, yy), sd


def build(est, problem, x0, start_states):
    """The :class:`SimProblem` of a fit (raises InputError/DataError on bad input)."""
    model = problem.model
    states, n, noise = model.states, model.n_states, model.observation.noise
    data_list = list(problem.experiments)
    if isinstance(est.estimate_x0, bool):
        est0_names = states if est.estimate_x0 else ()
    else:
        unknown = [s for s in est.estimate_x0 if s not in states]
        if unknown:
            raise InputError(f"estimate_x0: {unknown} are not states of the model (states: {list(states)})")
        est0_names = tuple(est.estimate_x0)
    x0s = _x0_per_experiment(x0, data_list, states)
    smoother = est.smoother or SplineSmoother()
    return _build(est, problem, model, states, n, noise, est0_names, x0s, smoother, start_states)


def _build(est, problem, model, states, n, noise, est0_names, x0s, smoother, start_states):
    data_list = list(problem.experiments)
    theta0 = problem.start.copy()
    theta0[np.isnan(theta0)] = _DEFAULT_START
    p_full = problem.full_params(theta0)
    exps, zs, ridx, rstate, ry, rrow = [], [], [], [], [], []
    sig_acc: dict[int, list] = {}
    warns = []
    offset, row0 = 0, 0
    for i, d in enumerate(data_list):
        name = d.name or f"experiment_{i}"
        given = x0s[i]
        known = [s for s in states if s not in est0_names]
        missing = [s for s in known if s not in given]
        if missing:
            raise InputError(f"x0: initial states {missing} are held fixed (estimate_x0={est.estimate_x0!r}) but "
                             f"have no value for experiment {name!r}; pass x0={{...}} or estimate them")
        has_obs = d.mask.any(axis=1)
        nodes = np.unique(np.concatenate([[d.t0], d.t[has_obs]]))
        grid = make_grid(nodes, n_grid=est.n_grid, dt=est.dt, grid=est.grid, where=f"experiment {name!r}")
        N = grid.size
        domain = (grid[0], grid[-1])
        X = np.full((N, n), np.nan)
        user = _start_states_for(start_states, data_list, i)
        if user is not None:
            X[:] = _user_trajectory(user, grid, n, name)
        for c, s in enumerate(d.states):
            k = states.index(s)
            m = d.mask[:, c]
            if not m.any():
                continue
            y = np.where(m, d.y[:, c], np.nan)
            if noise == "log":  # positive: checked by prepare (check_log_noise_data)
                y = np.log(y)
            node = np.searchsorted(grid, d.t[m])
            ridx.append(offset + node * n + k)
            rstate.append(np.full(node.size, k))
            ry.append(y[m])
            rrow.append(row0 + np.flatnonzero(m))
            if user is None:
                vals, sd = _proxy(smoother, d.t, y, domain, s, grid)
                X[:, k] = np.exp(vals) if noise == "log" else vals
                if math.isfinite(sd) and sd > 0:
                    sig_acc.setdefault(k, []).append((sd, int(m.sum())))
        for s, v in given.items():
            X[0, states.index(s)] = v
        unobs = [s for s in states if np.isnan(X[:, states.index(s)]).any()]
        if unobs:
            X = _simulate_unobserved(model, p_full, X, grid, unobs, given, name)
        est0 = np.array([states.index(s) for s in est0_names], dtype=np.int64)
        known0 = np.array([states.index(s) for s in known], dtype=np.int64)
        known_vals = np.array([given[s] for s in known], float)
        X[0, known0] = known_vals
        exps.append(ExpBlock(name, grid, offset, est0, known0, known_vals, d.n_times))
        zs.append(X.ravel())
        offset += N * n
        row0 += d.n_times
    n_unknown = theta0.size + sum(e.est0.size for e in exps)
    n_obs = sum(a.size for a in ridx)
    if n_obs <= n_unknown:
        raise DataError(f"data: {n_obs} observed values for {n_unknown} unknowns ({theta0.size} parameters + "
                        f"{n_unknown - theta0.size} initial states); the fit needs more observations than "
                        "unknowns. Add data, fix parameters (fixed=...) or initial states (estimate_x0=...)")
    z0 = np.concatenate(zs + [theta0])
    obs = tuple(np.concatenate(a) for a in (ridx, rstate, ry, rrow))
    obs = (obs[0].astype(np.int64), obs[1].astype(np.int64), obs[2], obs[3].astype(np.int64))
    sigma0 = _sigma(est.sigma, states, np.unique(obs[1]), sig_acc, obs)
    return SimProblem(model, problem, exps, obs, z0, sigma0, warns)


def _simulate_unobserved(model, p_full, X, grid, unobs, given, name):
    from odeinfer.solve import Problem, solve

    states = model.states
    lacking = [s for s in unobs if s not in given]
    if lacking:
        raise InputError(
            f"x0: state(s) {lacking} are never observed in experiment {name!r}, so the spline proxy gives no start "
            "for them; pass x0={state: value} (the trajectory is then simulated at the start parameters) or "
            "start_states=(t, Y) / a callable")
    x_init = X[0].copy()
    sol = solve(Problem(model, grid, x0=x_init, t0=grid[0]), p_full, raise_on_failure=False)
    Y = sol.y
    for s in unobs:
        k = states.index(s)
        col = Y[:, k]
        if not np.all(np.isfinite(col)):
            raise InputError(
                f"x0: simulating experiment {name!r} from x0 at the start parameters failed ({sol.message}); give "
                "start_states=(t, Y) for the unobserved states or better start values")
        X[:, k] = col
    return X


def _sigma(sigma, states, observed_k, sig_acc, obs):
    observed_names = [states[k] for k in observed_k]
    if isinstance(sigma, float):
        return {int(k): sigma for k in observed_k}
    if isinstance(sigma, dict):
        unknown = [s for s in sigma if s not in states]
        missing = [s for s in observed_names if s not in sigma]
        if unknown or missing:
            raise InputError(f"sigma: expected a value for every observed state {observed_names}; "
                             f"unknown {unknown}, missing {missing}")
        return {int(k): float(sigma[states[k]]) for k in observed_k}
    out = {}
    for k in observed_k:
        acc = sig_acc.get(int(k))
        if acc:
            out[int(k)] = math.sqrt(sum(s * s * m for s, m in acc) / sum(m for _, m in acc))
        else:
            y = obs[2][obs[1] == k]
            out[int(k)] = float(np.std(y)) if y.size > 1 and np.std(y) > 0 else 1.0
    return out

