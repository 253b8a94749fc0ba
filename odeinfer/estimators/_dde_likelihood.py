"""Maximum likelihood for delay models with observables (:class:`~odeinfer.estimators.AdjointDDE`
with a model from :meth:`Model.observe`): the PEtab negative log-likelihood of the noise models,
with all constants, as ``oi.Embedding`` reports it for ODE models.

The unknowns are :class:`~odeinfer.estimators._dde_setup.DDESetup`'s (the free model parameters,
delays included, then the free history parameters), then the free observable parameters (scales,
offsets, noise sds), all on the linear scale within their bounds. The DDE solver's forward
sensitivities (parameters, delays, history parameters) carry the exact derivatives of the
observables and their sds (sympy) to the gradient and the Fisher information of the NLL
(:mod:`odeinfer.likelihood.noise`), which a bound-constrained trust region (fides' algorithm) minimises.
With one free delay, the delay scan of the least-squares path (``tau_grid``) runs on the NLL:
at each grid value the other unknowns are fitted with the delay held (``grid_iter`` iterations),
and the ``n_refine`` best local minima of that profile are refined by full fits, next to the fit
from the start; the lowest NLL wins. Covariance: the inverse Fisher information.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from odeinfer.errors import DataError, InputError
from odeinfer.likelihood.noise import DIST_CODES, SCALE_CODES, nll_terms, transform_data
from odeinfer.likelihood.observe import ObservableFunctions

__all__ = ["fit_dde_likelihood", "DelayLikelihood"]


class DelayLikelihood:
    """``(nll, grad, fim)`` of a delay model with observables at the unknowns ``w``, or a failure text.

    Parameters
    ----------
    est : AdjointDDE
    model : Model
        With delays and observables.
    data : Data
        Columns: observable names.
    history, start, fixed, t0
        As in :meth:`AdjointDDE.fit`; ``start`` and ``fixed`` may name observable parameters.
    """

    def __init__(self, est, model, data, history, start, fixed, t0):
        from odeinfer.data import Data, as_experiments
        from odeinfer.estimators._dde_setup import DDESetup, _as_dict
        from odeinfer.results import Estimate

        if not isinstance(data, Data):
            exps = as_experiments(data) if data is not None and not isinstance(data, (str, bytes)) else None
            if exps is None or len(exps) != 1:
                raise DataError("data: AdjointDDE fits one experiment (oi.Data with the observables as columns)")
            data = exps[0]
        from odeinfer.data.experiments import refuse_steady_state

        refuse_steady_state(data, "AdjointDDE")
        if history is None:
            raise InputError("history: a model with observables needs history=... (a History family such as "
                             "oi.History.constant(...), or known values); the default starts from the first "
                             "measurements of the states, which observables do not give")
        obs = model.observable_names
        unknown = [s for s in data.states if s not in obs]
        if unknown:
            raise DataError(f"data: columns {unknown} are not observables of model {model.name!r} (observables: "
                            f"{list(obs)}); rename the columns or add observables")
        q_names = model.obs_params
        if isinstance(start, Estimate):
            start = dict(zip(start.names, np.asarray(start.values, float).tolist()))
        for arg, v in (("start", start), ("fixed", fixed)):
            if v is not None and not isinstance(v, Mapping):
                raise InputError(f"{arg}: a model with observables takes {arg} as a dict {{name: value}}"
                                 f"{' or an Estimate' if arg == 'start' else ''}, got {type(v).__name__}")
        start_d = _as_dict("start", start, ())
        fixed_d = _as_dict("fixed", fixed, ())
        q_start = {k: start_d.pop(k) for k in list(start_d) if k in q_names}
        q_fixed = {k: fixed_d.pop(k) for k in list(fixed_d) if k in q_names}
        q_bounds = {n: (a, b) for n, a, b in est.bounds or () if n in q_names}
        rest = tuple(b for b in est.bounds or () if b[0] not in q_names) or None
        # the states' part: DDESetup on the model without observables, at the data's times
        base = replace(model, observables=(), obs_params=())
        t = np.unique(np.asarray(data.t, float))
        states_data = Data(t, np.ones((t.size, base.n_states)), list(base.states), t0=data.t0)
        self.S = S = DDESetup(SimpleNamespace(bounds=rest, solver=est.solver), base, states_data, history, start_d,
                              fixed_d or None, t0)
        self.model, self.data = model, data
        self.q_free = tuple(n for n in q_names if n not in q_fixed)
        missing = [n for n in self.q_free if n not in q_start]
        if missing:
            raise InputError(f"start: no start value for the observable parameters {missing}; pass start={{name: "
                             "value}}")
        self.names = S.names + self.q_free
        self.k, self.kp = len(self.names), S.k
        self.q_base = np.array([q_fixed.get(n, q_start.get(n, np.nan)) for n in q_names])
        self.q_index = np.array([q_names.index(n) for n in self.q_free], np.int64)
        lo = [q_bounds.get(n, (-math.inf, math.inf))[0] for n in self.q_free]
        hi = [q_bounds.get(n, (-math.inf, math.inf))[1] for n in self.q_free]
        self.lower, self.upper = np.r_[S.lo, lo], np.r_[S.hi, hi]
        self.w0 = np.r_[S.u0, [q_start[n] for n in self.q_free]]
        self.fixed = {**S.fixed, **q_fixed}
        # measurements grouped by observable, at the solver's output times
        self.obsf = ObservableFunctions(model)
        self.groups, self.n_data = [], 0
        for c, name in enumerate(data.states):
            rows = np.flatnonzero(data.mask[:, c])
            k = obs.index(name)
            o = model.observables[k]
            y, tr = data.y[rows, c], data.t[rows]
            scale = SCALE_CODES[o.noise.scale]
            if scale and np.any(y <= 0):
                raise DataError(f"data: observable {name!r} has noise on the {o.noise.scale} scale but non-positive "
                                f"measurements at t={tr[y <= 0][:5].tolist()}; use a linear-scale noise model or "
                                "remove those rows")
            zy, jac = transform_data(y, scale)
            self.groups.append((k, np.searchsorted(S.t_obs, tr), tr, zy, jac, DIST_CODES[o.noise.distribution], scale))
            self.n_data += rows.size
        if self.n_data <= self.k:
            raise DataError(f"data: {self.n_data} measurements for {self.k} unknowns; need more measurements")
        n_p = base.n_params
        # d(p, q)/dw: the free model parameters and the free observable parameters
        self.dp = np.zeros((n_p, self.k))
        self.dp[S.free_p_index, np.arange(S.n_free_p)] = 1.0
        self.dq = np.zeros((len(q_names), self.k))
        self.dq[self.q_index, self.kp + np.arange(len(self.q_free))] = 1.0
        self.n_eval = 0

    def split(self, w):
        p, phi = self.S.split(w[:self.kp])
        q = self.q_base.copy()
        q[self.q_index] = w[self.kp:]
        return p, phi, q

    def __call__(self, w, solver=None):
        """``(nll, grad, fim)`` or a failure text."""
        from odeinfer.likelihood.objective import _chain

        self.n_eval += 1
        S = self.S
        p, phi, q = self.split(np.asarray(w, float))
        solver = S.solver() if solver is None else solver
        y, sens, status = solver(p, phi)
        if status != 0:
            return "the DDE solve failed (status %d)" % status
        dX = np.zeros(sens.shape[:2] + (self.k,))
        dX[:, :, :self.kp] = sens[:, :, S.cols()]
        nll, g, F = 0.0, np.zeros(self.k), np.zeros((self.k, self.k))
        for k, idx, tr, zy, jac, dist, scale in self.groups:
            h, hx, hp, hq = self.obsf.h(k, tr, y[idx], p, q)
            if scale and not np.all(h > 0):
                return f"observable {self.model.observable_names[k]!r} is <= 0 but its noise is on a log scale"
            s, sx, sp_, sq, sh = self.obsf.sigma(k, tr, y[idx], p, q, h)
            if not np.all(s > 0):
                return f"the noise sd of {self.model.observable_names[k]!r} is not positive"
            terms, dh, ds, fh, fs = nll_terms(zy, jac, h, s, dist, scale)
            nll += float(terms.sum())
            Dh = _chain(hx, dX[idx], hp, self.dp, hq, self.dq)
            Ds = _chain(sx, dX[idx], sp_, self.dp, sq, self.dq) + sh[:, None] * Dh
            g += dh @ Dh + ds @ Ds
            F += (Dh * fh[:, None]).T @ Dh + (Ds * fs[:, None]).T @ Ds
        if not math.isfinite(nll):
            return "the negative log-likelihood is not finite"
        return nll, g, F


def _fit(L, w0, free=None, max_iter=200, solver=None):
    """Trust region on the unknowns ``free`` (bool mask; default all) from ``w0``."""
    from odeinfer.estimators._likelihood_fit import TOLERANCES
    from odeinfer.estimators._trust import trust_region

    free = np.ones(L.k, bool) if free is None else free
    full = np.array(w0, float)

    def fun(x):
        full[free] = x
        out = L(full, solver)
        return out if isinstance(out, str) else (out[0], out[1][free], out[2][np.ix_(free, free)])

    r = trust_region(fun, full[free], L.lower[free], L.upper[free], max_iter=max_iter, **TOLERANCES)
    w = np.array(w0, float)
    w[free] = r.x
    return r, w


def fit_dde_likelihood(est, model, data, history, start, fixed, t0, t_start):
    """AdjointDDE's fit of a delay model with observables (module docstring)."""
    from odeinfer.estimators._dde_lm import _candidates, delay_grid
    from odeinfer.estimators._likelihood_fit import wald_covariance
    from odeinfer.results import Estimate

    L = DelayLikelihood(est, model, data, history, start, fixed, t0)
    S = L.S
    col, grid = delay_grid(est, S)
    w0 = L.w0.copy()
    missing = [L.names[j] for j in range(L.k) if not math.isfinite(w0[j]) and j != col]
    if missing:
        raise InputError(f"start: no starting value for {missing}; pass start={{name: value}}"
                         + (" (the delay may be left out: the tau grid scan then chooses it)"
                            if col is not None else ""))
    runs, extras = [], {}
    if col is None or math.isfinite(w0[col]):
        runs.append(("start",) + _fit(L, w0, max_iter=est.max_iter))
    if col is not None:
        coarse = S.solver(est.solver.replace(rtol=max(est.solver.rtol, 1e-6), atol=max(est.solver.atol, 1e-8)))
        others = np.ones(L.k, bool)
        others[col] = False
        costs, points = [], []
        for v in grid:
            w = w0.copy()
            w[col] = v
            r, w = _fit(L, w, others, max_iter=est.grid_iter, solver=coarse)
            costs.append(r.f if math.isfinite(r.f) else math.inf)
            points.append(w)
        extras["tau_profile"] = {"name": L.names[col], "tau": np.asarray(grid).tolist(), "nll": costs}
        for i in _candidates(np.asarray(costs), est.n_refine):
            runs.append((f"grid tau={grid[i]:.6g}",) + _fit(L, points[i], max_iter=est.max_iter))
    ok = [r for r in runs if math.isfinite(r[1].f)]
    extras["starts"] = {"origin": [r[0] for r in runs], "nll": [float(r[1].f) for r in runs],
                        "status": [r[1].status for r in runs]}
    names = L.names
    warns = []
    if not ok:
        best = runs[0]
        values, cov, cov_u, nll, status = best[2], None, None, math.nan, "failed"
    else:
        best = min(ok, key=lambda r: r[1].f)
        values, status = best[2], best[1].status
        out = L(values)
        nll = out[0] if not isinstance(out, str) else math.nan
        cov = cov_u = None
        if not isinstance(out, str):
            cov, cov_u, _ = wald_covariance(out[2], values, ["lin"] * L.k, warns)
    r = best[1]
    extras.update({"nll": nll, "loglik": -nll, "scales": dict.fromkeys(names, "lin"), "cov_scaled": cov_u,
                   "u": np.array(values, float), "chosen_start": best[0], "n_evaluations": L.n_eval})
    prov = {"odeinfer_version": __import__("odeinfer").__version__, "estimator": type(est).__name__,
            "method": "maximum likelihood of the observables' noise models, trust region (as fides) with the Fisher "
                      "information from the DDE solver's forward sensitivities",
            "solver": repr(est.solver), "elapsed_s": time.perf_counter() - t_start}
    if status != "converged":
        warns.append(r.message)
    return Estimate(type(est).__name__, model, names, values, cov, status, r.message, int(r.n_iter), nll, L.n_data,
                    L.fixed, {}, None, {}, extras, tuple(warns), prov)
