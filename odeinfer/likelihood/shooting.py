"""Multiple shooting for the likelihood fit of a :class:`~odeinfer.likelihood.FitProblem`
(``oi.Embedding(segments=m).fit(problem)``), after H. G. Bock (1983), as the least-squares path
of :class:`~odeinfer.estimators.Embedding` does it for observed states.

Each experiment is cut at ``m - 1`` of its measurement times (spread evenly over the distinct
ones, never at a dose time). The states at the cuts become extra unknowns ``s_j`` (linear
scale, unbounded) and every segment runs from its own ``s_j``. Continuity is a penalty: the
gap ``x(tau_{j+1}^-; s_j) - s_{j+1}`` of each state is a Gaussian pseudo-measurement of 0 with
sd ``scale_i / w`` (``scale_i``: the observables' noise sds mapped to the state, the median of
``sigma / |dh/dx_i|`` over the measurements at the start, i.e. the noise sd of a directly
observed state; for a state no observable depends on, the mean of the others', as the
least-squares path does; ``w``: the
continuity weight), raised tenfold, up to three times, until the largest gap is below
``1e-6 (1 + max |s|)``, or, with ``polish`` (the default), below ``1e-3 (1 + max |s|)``: single
shooting then finishes from there (measured on the two-condition chain of
tests/test_likelihood_shooting.py: 97 iterations in all instead of 298, the same optimum; on
Lorenz 33 instead of 35). This is written as a
FitProblem of its own (:func:`segmented_problem`: each segment an experiment with ``t0 =
tau_j``, initial states ``s_j``, its doses and inputs, the original's pre-equilibration on the
first; each gap an observable ``state__cont = state - state__next``), so its NLL, exact gradient
and Fisher information are :class:`~odeinfer.likelihood.Objective`'s. The cut states start at the
measurements where an observable is the state itself, else at the model simulated at the start.
With ``polish`` (default), single shooting finishes from the result, so the optimum and the
covariance are single shooting's.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from odeinfer.errors import InputError, SolverError
from odeinfer.likelihood.objective import Objective, _Run

__all__ = ["MultipleShooting", "segmented_problem", "make_objective"]

_CONT, _NEXT, _SD = "__cont", "__next", "__csd"
_GAP_TOL = 1e-6         # the continuation's target without polish
_GAP_TOL_POLISH = 1e-3  # with polish: single shooting takes over from here
_RAISES = 3


def make_objective(problem, solver=None, shooting=None, gradient=None):
    """``Objective(problem, solver, gradient)``, or :class:`MultipleShooting` for ``shooting = (segments,
    continuity_weight, polish)`` with more than one segment (forward sensitivities: ``gradient`` None)."""
    if shooting is None or shooting[0] == 1:
        return Objective(problem, solver=solver, gradient=gradient)
    segments, weight, polish = shooting
    return MultipleShooting(problem, solver, segments=segments, continuity_weight=weight, polish=polish)


def _cuts(plan, m):
    """The ``m - 1`` cut times of one experiment (measurement times, not dose times)."""
    from odeinfer.data import Data
    from odeinfer.estimators._shooting import segment_nodes

    doses = {d.time for d in plan.doses}
    T = np.array([t for t in np.unique(plan.t_rows) if t not in doses])
    if T.size == 0:
        raise InputError(f"segments: experiment {plan.name!r} has no measurement time to cut at; use segments=1")
    return segment_nodes(Data(T, np.ones(T.size), "x", t0=min(plan.t0, T[0])), m, plan.name)[1:]


def segmented_problem(problem, segments):
    """``(FitProblem, cuts per experiment, node parameter names per experiment (cuts, states))``:
    the multiple-shooting problem of the module docstring."""
    from odeinfer.data import Condition, Data, Experiments
    from odeinfer.likelihood import FitProblem, Param
    from odeinfer.model.observables import Normal, Observable
    from odeinfer.model.trace import symbols_for

    from odeinfer.likelihood.problem import refuse_steady_state

    refuse_steady_state(problem, "multiple shooting (segments > 1)")
    m = problem.model
    states = m.states
    cont, nxt, sds = ([f"{s}{k}" for s in states] for k in (_CONT, _NEXT, _SD))
    taken = set(m.states) | set(m.full_params) | set(m.observable_names) | set(problem.names)
    clash = [k for k in cont + nxt + sds if k in taken]
    if clash:
        raise InputError(f"segments: the problem already uses the names {clash}, which multiple shooting adds; rename "
                         "them or use segments=1")
    gaps = tuple(Observable(c, x - n, Normal(sigma=1.0), sd) for c, x, n, sd in
                 zip(cont, symbols_for(states), symbols_for(nxt), symbols_for(sds)))
    model = replace(m, observables=m.observables + gaps, obs_params=m.obs_params + tuple(nxt) + tuple(sds))
    columns = list(m.observable_names) + cont
    datas, conds, cuts_all, nodes_all = [], {}, [], []
    params = dict(problem.params)
    params.update({sd: Param(1.0, estimate=False) for sd in sds})
    for e, plan in enumerate(problem.plans):
        cond = problem.experiments.condition(plan.name)
        cuts = _cuts(plan, segments)
        names = [[f"ms{e}_{j}_{s}" for s in states] for j in range(1, segments)]
        for row in names:
            for k in row:
                if k in taken:
                    raise InputError(f"segments: the problem already uses the name {k!r}, which multiple shooting adds")
                params[k] = Param()
        cuts_all.append(cuts)
        nodes_all.append(names)
        bounds = np.concatenate([[-np.inf], cuts, [np.inf]])
        for j in range(segments):
            a, b = bounds[j], bounds[j + 1]
            sel = np.flatnonzero((plan.t_rows >= a) & (plan.t_rows < b))
            sel = sel[np.argsort(plan.t_rows[sel], kind="stable")]
            y = np.full((sel.size, len(columns)), np.nan)
            y[np.arange(sel.size), plan.obs_rows[sel]] = plan.y_rows[sel]
            t = plan.t_rows[sel]
            over = dict(cond.params)
            if j + 1 < segments:  # the gap at the next cut, measured as 0
                t = np.append(t, b)
                y = np.vstack([y, np.r_[np.full(len(m.observable_names), np.nan), np.zeros(len(states))]])
                over.update({k: v for k, v in zip(nxt, names[j])})
            else:
                over.update({k: 0.0 for k in nxt})
            name = f"{plan.name}__segment{j}"
            used = np.flatnonzero(~np.all(np.isnan(y), axis=0))  # Data takes measured columns only
            datas.append(Data(t, y[:, used], [columns[k] for k in used], t0=min(t[0], plan.t0 if j == 0 else a),
                              name=name, replicates=True))
            doses = tuple(d for d in cond.doses if (d.time < b if j == 0 else a < d.time < b))
            conds[name] = Condition(params=over, x0=cond.x0 if j == 0 else dict(zip(states, names[j - 1])),
                                    t0=cond.t0 if j == 0 else float(a), doses=doses,
                                    preequilibrate=cond.preequilibrate if j == 0 else None)
    aug = FitProblem(model, Experiments(datas, conditions=conds), params, x0=problem.x0_default)
    return aug, cuts_all, nodes_all


class MultipleShooting(Objective):
    """Single shooting's objective (``__call__``, for the covariance, profiles and bootstrap) with
    a multiple-shooting :meth:`local` fit (module docstring).

    Parameters
    ----------
    problem : FitProblem
    solver : Dopri5, Rodas or Auto, optional
    segments : int
        Segments per experiment (>= 2).
    continuity_weight : float
        The first stage's weight ``w`` of the gaps.
    polish : bool
        Finish with single shooting.
    """

    def __init__(self, problem, solver=None, *, segments, continuity_weight=1.0, polish=True):
        from odeinfer.likelihood.problem import refuse_events

        refuse_events(problem, "multiple shooting")
        super().__init__(problem, solver=solver)
        self.segments, self.weight, self.polish = int(segments), float(continuity_weight), bool(polish)
        self.inner_problem, self.cuts, self.node_names = segmented_problem(problem, self.segments)
        self.inner = Objective(self.inner_problem, solver=self.solver)
        est = self.inner_problem.estimated
        self._orig = np.array([est.index(k) for k in problem.estimated], np.int64)
        self._nodes = [np.array([[est.index(k) for k in row] for row in names], np.int64) for names in self.node_names]
        self._sd = np.array([self.inner_problem.names.index(f"{s}{_SD}") for s in problem.model.states], np.int64)
        self.last = {}

    # --- start -----------------------------------------------------------------------------------
    def _start(self, u0):
        """``(w0, scale)``: the inner unknowns at the start and the per-state scale of the gaps."""
        m = self.problem.model
        n, n_p, n_q = m.n_states, m.n_params, len(m.obs_params)
        theta = self.natural(u0)
        w = np.zeros(self.inner.n)
        w[self._orig] = u0
        direct = {}  # observable index -> the state it measures directly
        for k, o in enumerate(m.observables):
            if o.expr in m.state_symbols:
                direct[k] = m.state_symbols.index(o.expr)
        equiv = [[] for _ in range(n)]  # the observables' sds mapped to each state through dh/dx
        top = np.zeros(n)
        for plan, cuts, idx in zip(self.problem.plans, self.cuts, self._nodes):
            times = np.unique(np.concatenate([cuts, plan.t_rows]))
            synth = replace(plan, t_rows=times, obs_rows=np.zeros(times.size, np.int64), y_rows=np.ones(times.size))
            run = _Run(self, synth)
            v, J = run.mapping(theta)
            res = run.states(v, J)
            if isinstance(res, str):
                raise SolverError(f"multiple shooting: simulating the start to set the states at the cuts failed: "
                                  f"{res}")
            X_all = res[0]
            X = X_all[np.searchsorted(times, cuts)]
            p, q = v[:n_p], v[n_p:n_p + n_q]
            for k, o in enumerate(m.observables):
                rows = plan.obs_rows == k
                if not rows.any():
                    continue
                tr = plan.t_rows[rows]
                Xr = X_all[np.searchsorted(times, tr)]
                h, hx, _, _ = self.obsf.h(k, tr, Xr, p, q)
                sd = self.obsf.sigma(k, tr, Xr, p, q, h)[0]
                if o.noise.scale != "lin":  # a relative sd: on the natural scale about sd |h| (ln 10 for log10)
                    sd = sd * np.abs(h) * (1.0 if o.noise.scale == "log" else math.log(10.0))
                with np.errstate(divide="ignore", invalid="ignore"):
                    e = sd[:, None] / np.abs(hx)
                for i in range(n):
                    equiv[i].extend(e[np.isfinite(e[:, i]) & (e[:, i] > 0), i].tolist())
                if k in direct:  # a state measured directly starts at its measurement at the cut
                    for j, c in enumerate(cuts):
                        at = plan.t_rows[rows] == c
                        if at.any():
                            X[j, direct[k]] = float(np.mean(plan.y_rows[rows][at]))
            w[idx] = X
            top = np.maximum(top, np.abs(X_all).max(axis=0))
        seen = [float(np.median(e)) for e in equiv if e]
        rest = float(np.mean(seen)) if seen else None  # a state no observable depends on: as the LS path does
        scale = np.array([float(np.median(e)) if e else (rest or (top[i] if top[i] > 0 else 1.0))
                          for i, e in enumerate(equiv)])
        return w, scale

    def gap(self, w):
        """The largest continuity gap at ``w`` relative to ``1 + max |s|``."""
        out = 0.0
        for t, which, h in self.inner.predictions(w).values():
            sel = np.array([str(k).endswith(_CONT) for k in which], bool)
            if sel.any():
                out = max(out, float(np.max(np.abs(h[sel]))))
        s = np.concatenate([w[i].ravel() for i in self._nodes]) if self._nodes else np.zeros(1)
        return out / (1.0 + float(np.max(np.abs(s), initial=0.0)))

    # --- the local fit -----------------------------------------------------------------------------
    def local(self, u0, max_iter):
        """A local fit from ``u0`` (estimation scale): multiple shooting with penalty continuation,
        then (``polish``) single shooting; returns a :class:`~odeinfer.estimators._trust.TrustResult`
        in the problem's parameters."""
        from odeinfer.estimators._likelihood_fit import TOLERANCES
        from odeinfer.estimators._trust import TrustResult, trust_region

        inner = self.inner

        def fun(x, obj=inner):
            ev = obj(x)
            return (ev.nll, ev.grad, ev.curvature) if ev.ok else ev.failure

        w, scale = self._start(np.asarray(u0, float))
        n_iter, gap, r = 0, math.inf, None
        for stage in range(_RAISES + 1):
            inner.theta[self._sd] = scale / (self.weight * 10.0 ** stage)
            r = trust_region(fun, w, inner.lower, inner.upper, max_iter=max_iter, **TOLERANCES)
            n_iter += r.n_iter
            if not math.isfinite(r.f):
                break
            w = r.x
            gap = self.gap(w)
            if gap < (_GAP_TOL_POLISH if self.polish else _GAP_TOL):
                break
        self.last = {"continuity_max": gap, "multiple_shooting_iterations": n_iter,
                     "multiple_shooting_status": r.status}
        u = np.clip(w[self._orig], self.lower, self.upper)
        if self.polish:
            out = trust_region(lambda x: fun(x, self), u, self.lower, self.upper, max_iter=max_iter, **TOLERANCES)
            out.n_iter += n_iter
            return out
        ev = self(u)
        return TrustResult(u, ev.nll, ev.grad, ev.fim, r.status if ev.ok else "failed",
                           r.message if ev.ok else ev.failure, n_iter, n_iter + 1, 0)
