"""Bock's simultaneous method on a :class:`~odeinfer.likelihood.FitProblem`: the negative
log-likelihood of observables and noise models under collocation constraints.

Unknowns ``z = [X_1.ravel(), ..., X_E.ravel(), u]``: the states at the grid nodes of every
experiment and the estimated parameters ``u`` on their scales. The problem is

    minimise NLL(X, u)   subject to   collocation(X, p_e(u)) = 0,  X_e[0] = x0_e(u),  jumps at doses,

with ``NLL`` PEtab's negative log-likelihood with all constants (:mod:`odeinfer.likelihood.noise`),
each measurement ``y`` compared with ``h(t, X[node], p_e, q_e)`` at the node of its time, and
``v_e(u) = p | q | x0 | doses | p_pre | x0_pre`` the condition mapping of experiment ``e`` (its
parameter overrides and initial-state expressions, with its exact Jacobian). The grid of an
experiment has every measurement time, ``t0``, every dose time and every input knot as nodes;
at a dose time the node is doubled and the interval of length 0 between the two copies carries the
jump ``x+ - x- - amount(u) e_state = 0`` instead of a collocation rule (a reset, ``Dose(mode="set")``:
``x+_state - amount(u) = 0``; a measurement at that time sees the state before the dose, as in the
single-shooting objective). Between the knots of
inputs the right-hand side's parameters are constant (a linear input runs as ``u + u__rate t``,
see ``FitProblem.solve_model``), so each such piece is one call of the collocation kernel.
Pre-equilibration gives ``x0_e`` as the steady state (:class:`~odeinfer.likelihood.steady.SteadyState`).

The Bock iteration (:func:`odeinfer.estimators._bock.iterate`) takes the Fisher information of
the measurements as the Gauss-Newton Hessian of the NLL (exact derivatives of ``h`` and ``sigma``
from sympy): per measurement ``fh Dh Dh^T + fs Ds Ds^T`` with ``Dh``, ``Ds`` the gradients of the
observable and of its sd in ``(X[node], u)``, which is block diagonal by node in ``X``. Bounds of
the parameters (on their scales) are kept by an active set: a parameter on a bound whose step
would leave it is held there. Besides the step and constraint tolerances, a stalled NLL counts as
converged (Laplace noise has kinks where a residual is zero): when no step decreases the merit
function after a step that changed the NLL by less than 1e-7 (the trust region's ``fatol``), a
last feasibility step restores the constraints (raising the NLL by at most 1e-3).

Covariance: the inverse of the Fisher information reduced to the constraint manifold,
``Z^T F Z`` with ``Z = dz/du`` (``C_x Z_x = -C_u``), on the estimation scale, mapped to natural
units by the delta method. A parameter that ends on a bound with the exact ODE likelihood's gradient
pointing out of the box gets no Wald interval, and the others' covariance holds it there (as the
trajectory fits do: :func:`odeinfer.estimators._likelihood_fit.on_active_bounds`).
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
import scipy.sparse as sps
import scipy.sparse.linalg as spla

from odeinfer.errors import DataError, InputError
from odeinfer.estimators import _bock
from odeinfer.estimators._simultaneous_setup import _user_trajectory, collocation_pattern, make_grid
from odeinfer.likelihood.mapping import ConditionMapping
from odeinfer.likelihood.noise import DIST_CODES, SCALE_CODES, nll_terms, transform_data
from odeinfer.likelihood.objective import apply_doses
from odeinfer.likelihood.observe import ObservableFunctions
from odeinfer.likelihood.parameters import dnatural_dscaled, from_scale, to_scale
from odeinfer.solve import abi

__all__ = ["fit_simultaneous_likelihood", "LikelihoodCollocation", "problem_from_simultaneous"]

_PROFILE_MAX_ITER = 200  # Embedding's default max_iter: the profiles re-optimise by its trust region


def problem_from_simultaneous(model, data, fixed, x0):
    """A :class:`FitProblem` from Simultaneous's ``fit(model, data, fixed=, x0=)`` arguments: every
    parameter estimated on the linear scale and unbounded, except the ``fixed`` ones."""
    from odeinfer.likelihood import FitProblem, Param

    if x0 is not None and not isinstance(x0, dict):
        raise InputError(f"x0: a model with observables takes x0 as a dict {{state: number or 'expression'}}, got "
                         f"{type(x0).__name__}")
    probe = FitProblem(model, data, x0=x0)
    fixed = dict(fixed or {})
    unknown = [k for k in fixed if k not in probe.names]
    if unknown:
        raise InputError(f"fixed: {unknown} are not parameters of the problem {list(probe.names)}")
    params = {n: Param(float(fixed[n]), estimate=False) if n in fixed else Param() for n in probe.names}
    return FitProblem(model, data, params, x0=x0)


class _Exp:
    """One experiment: grid (dose nodes doubled), pieces of constant parameters, jumps, measurements."""

    def __init__(self, prob, plan, est, offset):
        m = prob.model
        n = m.n_states
        self.name, self.plan, self.offset = plan.name, plan, offset
        self.rows = prob.mapper.rows(plan)
        t0 = plan.t0
        if plan.t_rows.size == 0:
            raise DataError(f"data: experiment {plan.name!r} has no measurement; remove it")
        T = float(plan.t_rows.max())
        dose_t = sorted({d.time for d in plan.doses if t0 < d.time <= T})
        knots = sorted({float(k) for inp in plan.inputs.values() for k in inp.t if t0 < k < T})
        nodes = np.unique(np.concatenate([[t0], plan.t_rows, dose_t, knots]))
        grid = make_grid(nodes, n_grid=est.n_grid, dt=est.dt, grid=est.grid, where=f"experiment {plan.name!r}")
        jumps = []
        for tau in dose_t:  # double the node: the interval of length 0 after it is the jump
            i = int(np.searchsorted(grid, tau))
            grid = np.insert(grid, i, tau)
            jumps.append(i)
        self.t = grid
        N = grid.size
        self.jumps = {j: [(m.states.index(d.state), a, d.resets) for a, d in enumerate(plan.doses)
                          if d.time == grid[j]] for j in jumps}
        self.x0_doses = [(m.states.index(d.state), a, d.resets) for a, d in enumerate(plan.doses) if d.time <= t0]
        cuts = {0, N - 1} | {int(np.searchsorted(grid, k)) for k in knots} | set(jumps) | {j + 1 for j in jumps}
        cuts = sorted(cuts)
        self.pieces = [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if a not in self.jumps]
        self.known0 = np.arange(n)
        # measurements grouped by observable, at the node of their time (before a dose there)
        self.groups = []
        for k, o in enumerate(m.observables):
            rows = np.flatnonzero(plan.obs_rows == k)
            if rows.size == 0:
                continue
            y, tr = plan.y_rows[rows], plan.t_rows[rows]
            scale = SCALE_CODES[o.noise.scale]
            if scale and np.any(y <= 0):
                raise DataError(
                    f"data: observable {o.name!r} has noise on the {o.noise.scale} scale but non-positive measurements "
                    f"in experiment {plan.name!r} at t={tr[y <= 0][:5].tolist()}; use a linear-scale noise model for "
                    "it or remove those rows")
            zy, jac_term = transform_data(y, scale)
            node = np.searchsorted(grid, tr)
            self.groups.append((k, node, tr, zy, jac_term, DIST_CODES[o.noise.distribution], scale))
        n_ps = prob.problem.solve_model.n_params
        self.F, self.JY, self.JP = np.empty((N, n)), np.empty((N, n, n)), np.empty((N, n, n_ps))
        self.jtmp = np.empty(max(N - 1, 1) * n * (2 * n + n_ps))


class LikelihoodCollocation:
    """The problem of :func:`odeinfer.estimators._bock.iterate` for a FitProblem (module docstring)."""

    block_hessian = True
    param_scale = 1.0  # the step test on the estimation scale: |du| <= xtol (|u| + 1)
    fatol = 1e-7  # a stalled NLL (Laplace noise's kinks) counts as converged: the trust region's fatol
    nonfinite_start = ("the negative log-likelihood is not finite at the starting point (an observable <= 0 under "
                       "log-scale noise, or a noise sd <= 0?); check the start values or start_states")

    def __init__(self, problem, est):
        from odeinfer.likelihood.problem import refuse_events, refuse_steady_state
        from odeinfer.likelihood.steady import SteadyState
        from odeinfer.solve.shared import TieredKernel

        refuse_steady_state(problem, "the simultaneous (collocation) likelihood")
        refuse_events(problem, "the simultaneous (collocation) likelihood")
        self.problem, self.model = problem, problem.model
        m = self.model
        self.n, self.n_p, self.n_q = m.n_states, m.n_params, len(m.obs_params)
        self.n_ps = problem.solve_model.n_params
        self.q = problem.n_estimated
        self.scales = [problem.params[k].scale for k in problem.estimated]
        self.theta = problem.nominal()
        self.est_index = np.array([problem.names.index(k) for k in problem.estimated], np.int64)
        self.mapper = ConditionMapping(problem)
        self.exps, offset = [], 0
        for plan in problem.plans:
            e = _Exp(self, plan, est, offset)
            self.exps.append(e)
            offset += e.t.size * self.n
        self.theta_off = offset
        self.nz = offset + self.q
        self.n_nodes = offset // self.n
        self.n_data = sum(p.t_rows.size for p in problem.plans)
        from odeinfer.likelihood.objective import _scaled

        lo = np.array([_scaled(problem.params[k].lower, s) for k, s in zip(problem.estimated, self.scales)])
        hi = np.array([_scaled(problem.params[k].upper, s) for k, s in zip(problem.estimated, self.scales)])
        self.bounds = (lo, hi) if np.any(np.isfinite(lo)) or np.any(np.isfinite(hi)) else None
        self.obsf = ObservableFunctions(m)
        self.steady = SteadyState(m) if any(p.preequilibrate for p in problem.plans) else None
        compiled = problem.solve_model.compile()
        self.kernel = TieredKernel(compiled, compiled.module.coll_constraints)
        self._pattern()
        self._cache = None

    # --- layout -------------------------------------------------------------------------------
    def _pattern(self):
        n, q = self.n, self.q
        rows, cols, self.crow_off, r0 = collocation_pattern(self.exps, n, q, self.theta_off)
        self.n_coll = r0
        self.known_rows = r0 + np.arange(n * len(self.exps))
        for k, e in enumerate(self.exps):  # x_e[0] - x0_e(u) = 0: the node and every parameter
            row = r0 + k * n + np.arange(n)
            rows.append(np.repeat(row, 1 + q))
            ct = np.broadcast_to(self.theta_off + np.arange(q)[None, :], (n, q))
            cols.append(np.concatenate([(e.offset + np.arange(n))[:, None], ct], axis=1).ravel())
        self.crows = np.concatenate(rows).astype(np.int64)
        self.ccols = np.concatenate(cols).astype(np.int64)
        self.mc = r0 + n * len(self.exps)
        self.coll_data = (r0 * (2 * n + q))  # cdata: the collocation rows' values, then the initial rows'

    def X(self, z, e):
        return z[e.offset:e.offset + e.t.size * self.n].reshape(e.t.size, self.n)

    def natural(self, u):
        theta = self.theta.copy()
        theta[self.est_index] = from_scale(u, self.scales)
        return theta

    # --- the condition mapping at u (cached) ----------------------------------------------------
    def at(self, u):
        """Per experiment ``(v, dv/du, x0, dx0/du, pieces [(p, dp/du)])``, or a failure text."""
        key = u.tobytes()
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        from odeinfer.likelihood.objective import _input_at

        theta = self.natural(u)
        d = dnatural_dscaled(theta[self.est_index], self.scales)
        out = []
        n_p, n_q, n_s = self.n_p, self.n_q, self.n
        rates = self.problem.rates
        for e in self.exps:
            v, J = self.mapper.at(theta, e.rows)
            Ju = J * d
            o = n_p + n_q
            od = o + n_s
            x, dx = v[o:od].copy(), Ju[o:od].copy()
            if e.plan.preequilibrate:
                op = od + len(e.plan.doses)
                res = self.steady(v[op:op + n_p], v[op + n_p:op + n_p + n_s], Ju[op:op + n_p],
                                  Ju[op + n_p:op + n_p + n_s])
                if isinstance(res, str):
                    out = f"experiment {e.name!r}: {res}"
                    break
                keep = e.plan.keep_x0
                x = np.where(keep, x, res[0])
                dx = np.where(keep[:, None], dx, res[1])
            apply_doses(x, dx, e.x0_doses, v[od:], Ju[od:])
            pieces = []
            for a, _ in e.pieces:
                pj, dpj = np.zeros(self.n_ps), np.zeros((self.n_ps, self.q))
                pj[:n_p], dpj[:n_p] = v[:n_p], Ju[:n_p]
                for k, val, r, rate in (_input_at(k, inp, e.t[a], rates.get(k)) for k, inp in e.plan.inputs.items()):
                    pj[k], dpj[k] = val, 0.0
                    if r is not None:
                        pj[r] = rate
                pieces.append((pj, dpj))
            out.append((v, Ju, x, dx, pieces))
        self._cache = (key, out)
        return out

    # --- the objective ------------------------------------------------------------------------
    def terms(self, z, grad=True):
        """``(NLL, gradient (nz,), Hessian)`` (the Fisher information as Gauss-Newton Hessian) or None."""
        u = z[self.theta_off:]
        at = self.at(u)
        if isinstance(at, str):
            return None
        n, q = self.n, self.q
        nll = 0.0
        if grad:
            g = np.zeros(self.nz)
            blocks = np.zeros((self.n_nodes, n, n))
            xt = np.zeros((self.theta_off, q))
            tt = np.zeros((q, q))
        for e, (v, Ju, *_) in zip(self.exps, at):
            n_p, n_q = self.n_p, self.n_q
            p, dp, qv, dq = v[:n_p], Ju[:n_p], v[n_p:n_p + n_q], Ju[n_p:n_p + n_q]
            X = self.X(z, e)
            for k, node, tr, zy, jac_term, dist, scale in e.groups:
                h, hx, hp, hq = self.obsf.h(k, tr, X[node], p, qv)
                if scale and not np.all(h > 0):
                    return None
                s, sx, sp_, sq, sh = self.obsf.sigma(k, tr, X[node], p, qv, h)
                if not np.all(s > 0):
                    return None
                terms, dh, ds, fh, fs = nll_terms(zy, jac_term, h, s, dist, scale)
                nll += float(terms.sum())
                if not grad:
                    continue
                Dt = hp @ dp + hq @ dq
                St = sp_ @ dp + sq @ dq + sh[:, None] * Dt
                Sx = sx + sh[:, None] * hx
                gnode = e.offset // n + node
                gx = dh[:, None] * hx + ds[:, None] * Sx
                np.add.at(g, (e.offset + node[:, None] * n + np.arange(n)[None, :]), gx)
                g[self.theta_off:] += dh @ Dt + ds @ St
                np.add.at(blocks, gnode, np.einsum("r,ri,rj->rij", fh, hx, hx) + np.einsum("r,ri,rj->rij", fs, Sx, Sx))
                xrows = e.offset + node[:, None] * n + np.arange(n)[None, :]
                np.add.at(xt, xrows, np.einsum("r,ri,rj->rij", fh, hx, Dt) + np.einsum("r,ri,rj->rij", fs, Sx, St))
                tt += (Dt * fh[:, None]).T @ Dt + (St * fs[:, None]).T @ St
        if not math.isfinite(nll):
            return None
        if not grad:
            return nll
        return nll, g, _bock.Hessian(blocks, xt, tt)

    def value(self, z):
        out = self.terms(z, grad=False)
        return np.inf if out is None else out

    # --- start ----------------------------------------------------------------------------------
    def start(self, u0, start_states, smoother=None):
        """``z0``: on every grid the states measured directly by an observable (``h`` = the state)
        at the spline proxy of their measurements (fitted on the noise scale), the others simulated
        at ``u0``, or ``start_states``; then ``u0``."""
        from odeinfer.estimators._simultaneous_setup import _proxy, _start_states_for
        from odeinfer.smooth.splines import SplineSmoother

        at = self.at(u0)
        if isinstance(at, str):
            raise InputError(f"start: {at}")
        m = self.model
        direct = {k: m.state_symbols.index(o.expr) for k, o in enumerate(m.observables) if o.expr in m.state_symbols}
        smoother = smoother or SplineSmoother()
        z = np.empty(self.nz)
        data = list(self.problem.experiments)
        for i, (e, (v, _, x0, _, pieces)) in enumerate(zip(self.exps, at)):
            user = _start_states_for(start_states, data, i)
            X = self.X(z, e)
            if user is not None:
                X[:] = _user_trajectory(user, e.t, self.n, e.name)
                continue
            proxies = {}
            for k, _, tr, zy, _, _, scale in e.groups:
                if k in direct:
                    tu, inv = np.unique(tr, return_inverse=True)
                    vals, _ = _proxy(smoother, tu, np.bincount(inv, zy) / np.bincount(inv), (e.t[0], e.t[-1]),
                                     m.states[direct[k]], e.t)
                    proxies[direct[k]] = vals if scale == 0 else (np.exp(vals) if scale == 1 else 10.0 ** vals)
            try:
                X[:] = self._simulate(e, v, x0, pieces)
            except InputError:
                if len(proxies) < self.n:  # a state neither measured directly nor simulated
                    raise
            for j, vals in proxies.items():
                X[:, j] = vals
        z[self.theta_off:] = u0
        return z

    def _simulate(self, e, v, x0, pieces):
        from odeinfer.solve import Problem, solve

        X = np.empty((e.t.size, self.n))
        X[0] = x0
        od = self.n_p + self.n_q + self.n
        params = {a: pj for (a, _), (pj, _) in zip(e.pieces, pieces)}
        for a in sorted(set(params) | set(e.jumps)):
            if a in e.jumps:
                X[a + 1] = X[a]
                apply_doses(X[a + 1], None, e.jumps[a], v[od:], None)
                continue
            b = next(b for a_, b in e.pieces if a_ == a)
            sol = solve(Problem(self.problem.solve_model, e.t[a + 1:b + 1], t0=e.t[a]), params[a], x0=X[a].copy(),
                        raise_on_failure=False)
            if sol.status != 0 or not np.all(np.isfinite(sol.y)):
                raise InputError(
                    f"start: simulating experiment {e.name!r} at the start parameters failed ({sol.message}); give "
                    "better start values or start_states=(t, Y) / a callable")
            X[a + 1:b + 1] = sol.y
        return X

    # --- results --------------------------------------------------------------------------------
    def reduced_fisher(self, z, ev):
        """The Fisher information on the constraint manifold, in ``u`` (q, q)."""
        nx = self.theta_off
        C = sps.csc_matrix((ev.cdata, (self.crows, self.ccols)), shape=(self.mc, self.nz))
        Zx = -spla.splu(C[:, :nx].tocsc()).solve(C[:, nx:].toarray())
        _, _, H = self.terms(z)
        HZ = np.einsum("kij,kjq->kiq", H.blocks, Zx.reshape(self.n_nodes, self.n, self.q)).reshape(nx, self.q)
        F = Zx.T @ HZ + Zx.T @ H.xt + H.xt.T @ Zx + H.tt
        return 0.5 * (F + F.T)


class Constraints:
    """Constraint values ``c`` and Jacobian values ``cdata`` (pattern of :class:`LikelihoodCollocation`)."""

    def __init__(self, prob, kernel, scheme):
        self.prob, self.kernel, self.scheme = prob, kernel, scheme
        self.c = np.empty(prob.mc)
        self.cdata = np.empty(prob.crows.size)
        self.pidx = np.arange(prob.n_ps, dtype=np.int64)

    def constraints(self, z, want_jac):
        prob = self.prob
        n, q, w, wp = prob.n, prob.q, 2 * prob.n + prob.q, 2 * prob.n + prob.n_ps
        at = prob.at(z[prob.theta_off:])
        if isinstance(at, str):
            return False
        cd = self.cdata[:prob.coll_data].reshape(-1, w)
        ci = self.cdata[prob.coll_data:].reshape(-1, 1 + q)
        eye = np.eye(n)
        od = prob.n_p + prob.n_q + n
        for k, (e, r0, (v, Ju, x0, dx0, pieces)) in enumerate(zip(prob.exps, prob.crow_off, at)):
            X = prob.X(z, e)
            for (a, b), (pj, dpj) in zip(e.pieces, pieces):
                rows = slice(r0 + a * n, r0 + b * n)
                m = (b - a) * n
                jt = e.jtmp[:m * wp]
                st = abi.call(self.kernel, "coll_constraints", scheme=self.scheme, t=e.t[a:b + 1], X=X[a:b + 1],
                              p=pj, pidx=self.pidx, F=e.F[:b - a + 1], JY=e.JY[:b - a + 1], JP=e.JP[:b - a + 1],
                              c=self.c[rows], jdata=jt, want_jac=want_jac)
                if st != 0:
                    return False
                if want_jac:
                    jt = jt.reshape(m, wp)
                    cd[rows, :2 * n] = jt[:, :2 * n]
                    cd[rows, 2 * n:] = jt[:, 2 * n:] @ dpj
            for j, doses in e.jumps.items():
                rows = slice(r0 + j * n, r0 + (j + 1) * n)
                jump, djump, keep = np.zeros(n), np.zeros((n, q)), np.ones(n)
                apply_doses(jump, djump, doses, v[od:], Ju[od:], keep)  # x+ = keep x- + jump
                self.c[rows] = X[j + 1] - keep * X[j] - jump
                if want_jac:
                    cd[rows, :n], cd[rows, n:2 * n], cd[rows, 2 * n:] = -np.diag(keep), eye, -djump
            r = prob.n_coll + k * n
            self.c[r:r + n] = X[0] - x0
            if want_jac:
                ci[k * n:(k + 1) * n, 0] = 1.0
                ci[k * n:(k + 1) * n, 1:] = -dx0
        return bool(np.all(np.isfinite(self.c)))


def _start(problem, start):
    from odeinfer.estimators._likelihood_fit import _check_start, _start_vector

    x = _start_vector(problem, start)
    _check_start(problem, x)
    missing = [k for k, v in zip(problem.estimated, x) if not math.isfinite(v)]
    if missing:
        raise InputError(f"start: no start value for {missing}; pass start={{name: value}} or give the parameters "
                         "values (oi.Param(value, ...))")
    return x


def fit_simultaneous_likelihood(est, problem, start, start_states, t_start):
    """Fit ``problem`` with the settings of Simultaneous ``est``; returns an :class:`~odeinfer.results.Estimate`."""
    from odeinfer.estimators._likelihood_fit import _bound_note, _small_sample_note, on_active_bounds, wald_covariance
    from odeinfer.estimators.base import IdentifiabilityWarning
    from odeinfer.estimators.simultaneous import _SCHEMES
    from odeinfer.likelihood import Objective
    from odeinfer.results import Estimate

    if not problem.estimated:
        raise InputError("parameters: every parameter is fixed; nothing to estimate")
    x = _start(problem, start)
    prob = LikelihoodCollocation(problem, est)
    u0 = to_scale(x, prob.scales)
    z0 = prob.start(u0, start_states, est.smoother)
    scheme = _SCHEMES[est.scheme]
    out = _bock.iterate(prob, prob.kernel, z0, scheme, est.max_iter, est.xtol, est.ctol, evaluator=Constraints)
    z = out.z
    u = z[prob.theta_off:].copy()
    names = problem.estimated
    values = prob.natural(u)[prob.est_index]
    warns = [] if out.status == "converged" else [out.message]
    cov = cov_u = None
    nll = prob.value(z)
    ev = Constraints(prob, prob.kernel, scheme)
    # the observables' predictions (oi.Estimate.predict, plots), the NLL of the exact ODE solution (by the trajectory
    # fits' solver: the likelihood default, rtol 1e-6, leaves NLL errors of about 1e-5) and, with bounds, its
    # gradient, which says whether a parameter on a bound would move beyond it
    from odeinfer.solve.config import default_solver

    obj = Objective(problem, solver=default_solver("fit"))
    shoot = obj(u, grad=prob.bounds is not None) if math.isfinite(nll) else None
    on_bounds = ()
    if math.isfinite(nll) and ev.constraints(z, True):
        held = None
        if prob.bounds is not None and shoot is not None and shoot.ok:
            held = on_active_bounds(u, shoot.grad, *prob.bounds)
            if held.any():
                on_bounds = tuple(n for n, h in zip(names, held) if h)
                note = _bound_note(names, values, held, u, *prob.bounds)
                warnings.warn(note, IdentifiabilityWarning, stacklevel=4)
                warns.append(note)
        cov, cov_u, _ = wald_covariance(prob.reduced_fisher(z, ev), values, prob.scales, warns,
                                     "the Fisher information on the collocation manifold", held)
        small = _small_sample_note(problem, prob.n_data)
        if small:
            warns.append(small)
    fixed = {k: problem.params[k].value for k in problem.names if k not in names}
    extras = {"nll": nll, "loglik": -nll, "scales": dict(zip(names, prob.scales)), "cov_scaled": cov_u, "u": u,
              "nll_ode": shoot.nll if shoot is not None and shoot.ok else math.nan,
              "scheme": est.scheme, "grid": {e.name: e.t.copy() for e in prob.exps},
              "states": {e.name: prob.X(z, e).copy() for e in prob.exps},
              "n_nodes": {e.name: int(e.t.size) for e in prob.exps}, "multiplier_max": out.lam_max, "mu": out.mu,
              "on_bounds": on_bounds}
    prov = {"odeinfer_version": __import__("odeinfer").__version__, "estimator": type(est).__name__,
            "method": "maximum likelihood under collocation constraints: Bock iteration (generalised Gauss-Newton on "
                      "the KKT system, the Fisher information as Hessian), Osborne (2008) ANZIAM J. 50 C107 "
                      "section 2.2",
            "elapsed_s": time.perf_counter() - t_start, "data": list(problem.experiments.names), "start": "user"}
    estimate = Estimate(type(est).__name__, problem.model, names, values, cov, out.status, out.message,
                        int(len(out.history["cost"]) - 1), nll, prob.n_data, fixed, {}, None, out.history, extras,
                        tuple(warns), prov)
    object.__setattr__(estimate, "_objective", obj)
    if math.isfinite(nll):  # conf_int(method="bootstrap"): refits by this estimator of data drawn at the estimate
        from odeinfer.inference.bootstrap import ParametricBootstrap, likelihood_builder

        object.__setattr__(estimate, "_bootstrapper", ParametricBootstrap(estimate, est, likelihood_builder(obj, u)))
    if cov_u is not None and math.isfinite(extras["nll_ode"]):
        # conf_int(method="profile"): likelihood-ratio intervals of the exact (single-shooting) likelihood
        # around the estimate, as a reloaded likelihood fit gets them (Embedding's trust region and max_iter)
        from odeinfer.estimators._likelihood_fit import _attach_profiler

        _attach_profiler(obj, estimate, np.array(u, float), float(extras["nll_ode"]), cov_u, _PROFILE_MAX_ITER)
    return estimate
