"""Maximum-likelihood fit of a :class:`~odeinfer.likelihood.FitProblem` (models with
observables, noise models, conditions): a bound-constrained trust-region reflective method (fides' algorithm) on the
parameters' estimation scales with the exact gradient and the Fisher information, from one or
many starts.

The reported objective is the negative log-likelihood with all constants (PEtab's), so it
compares across tools. The covariance is the inverse Fisher information on the estimation scale
(``extras["cov_scaled"]``), mapped to natural units by the delta method (``cov``).

With priors (``Embedding().fit(..., priors=...)``, :func:`resolve_priors`) the fit is a maximum a
posteriori (MAP) estimate: it minimises ``nll(u) + prior_nll(u)``, the negative log-likelihood plus
the priors' negative log densities on the estimation scale (PEtab's objective priors, no Jacobian
of the scale change), i.e. the negative log-posterior up to its normalising constant. The
estimate then keeps the two parts apart: ``fit.nll`` (``extras["nll"]``) is the negative
log-likelihood at the MAP point, ``extras["prior_nll"]`` the priors' term there and
``extras["objective"]`` their sum, the value minimised (``extras["objective_kind"]`` says which
objective it is); the covariance adds the priors' curvature to the Fisher information (a Laplace
approximation of the posterior), and the profiles are of the negative log-posterior.
"""

from __future__ import annotations

import functools
import math
import time
import warnings

import numpy as np

from odeinfer.errors import InputError
from odeinfer.estimators._trust import trust_region
from odeinfer.inference.multistart import NEAR_BEST, MultistartWarning, best_reached_once
from odeinfer.likelihood.parameters import dnatural_dscaled, to_scale

__all__ = ["fit_likelihood", "likelihood_solver", "make_objective", "problem_from_embedding", "resolve_priors",
           "TOLERANCES"]

#: Stopping rules of the trust region on a negative log-likelihood (its units are log-likelihood
#: units, so absolute tolerances are meaningful): an accepted step that changes the NLL by less
#: than 1e-7, or a gradient norm (per unit of the estimation scale) below 1e-5, is far below any
#: statistical resolution (a likelihood-ratio interval moves the NLL by 1.92).
TOLERANCES = {"fatol": 1e-7, "frtol": 0.0, "gatol": 1e-5, "xtol": 1e-10}

#: The best start's continuation (:func:`polish`): a small step or NLL change no longer ends it
#: (the changes it allows are at the NLL's rounding); the gradient test and the budget do.
POLISH_TOLERANCES = {**TOLERANCES, "fatol": 1e-12, "xtol": 1e-14}


def problem_from_embedding(est, model, data, start, fixed, x0):
    """A :class:`FitProblem` from Embedding's arguments (bounds, log_params, fixed, x0)."""
    from odeinfer.likelihood import FitProblem, Param

    probe = FitProblem(model, data, x0=x0 if isinstance(x0, dict) else None)
    fixed = dict(fixed or {})
    unknown = [k for k in fixed if k not in probe.names]
    if unknown:
        raise InputError(f"fixed: {unknown} are not parameters of the problem {list(probe.names)}")
    lp = est.log_params
    params = {}
    for n in probe.names:
        lo, hi = est.bounds_of(n)
        scale = "log" if (lp is True or (not isinstance(lp, bool) and n in lp)) else "lin"
        if n in fixed:
            params[n] = Param(float(fixed[n]), estimate=False)
        else:
            if scale == "log":
                lo = max(lo, 0.0)
            params[n] = Param(math.nan, lo, hi, scale)
    return FitProblem(model, data, params, x0=x0 if isinstance(x0, dict) else None)


def make_objective(problem, solver=None, priors=None, shooting=None, gradient=None):
    """The objective a fit minimises: the :class:`~odeinfer.Objective` of ``problem`` with its
    ``gradient`` (by multiple shooting for ``shooting = (segments, continuity_weight, polish)``, see
    :func:`odeinfer.likelihood.shooting.make_objective`), plus the negative log densities of
    ``priors`` (``{estimated parameter: Prior}``) when given."""
    if priors:
        if shooting is not None:
            raise InputError("priors: a MAP fit runs by single shooting; use Embedding(segments=1) with priors")
        from odeinfer.petab.priors import PriorObjective

        return PriorObjective(problem, priors, solver=solver, gradient=gradient)
    from odeinfer.likelihood.shooting import make_objective as likelihood_objective

    return likelihood_objective(problem, solver, shooting, gradient)


def resolve_priors(model, problem, priors):
    """``{name: Prior}`` of a MAP fit, or None for a maximum-likelihood fit.

    ``priors``: None or False (maximum likelihood); True (the objective priors of the parameter
    table of ``model``, a :class:`~odeinfer.petab.PetabProblem`); or a dict ``{estimated
    parameter: odeinfer.petab.priors.Prior}`` whose priors are on the parameters' estimation
    scales (``Prior(..., scale=problem.params[name].scale)``). Checked before any work.
    """
    from odeinfer.petab.priors import Prior
    from odeinfer.petab.tables import PetabProblem

    if priors is None or priors is False:
        return None
    if priors is True:
        if not isinstance(model, PetabProblem):
            raise InputError(f"priors: priors=True takes the objective priors of a PEtab problem's parameter table, "
                             f"but the model is a {type(model).__name__}; pass the PetabProblem (oi.petab.load(...)) "
                             "or priors={name: odeinfer.petab.priors.Prior(...)}")
        if not model.objective_priors:
            raise InputError(f"priors: priors=True, but the parameter table of PEtab problem {model.name!r} gives no "
                             "objective priors (columns objectivePriorType / objectivePriorParameters); drop "
                             "priors=True for a maximum-likelihood fit or add the priors to the table")
        return dict(model.objective_priors)
    if not isinstance(priors, dict):
        raise InputError(f"priors: expected None, True or a dict {{parameter: odeinfer.petab.priors.Prior}}, got "
                         f"{type(priors).__name__}")
    out = {}
    for name, prior in priors.items():
        if name not in problem.estimated:
            raise InputError(f"priors: {name!r} is not an estimated parameter of the problem "
                             f"{list(problem.estimated)}; drop it")
        if not isinstance(prior, Prior):
            raise InputError(f"priors[{name!r}]: expected an odeinfer.petab.priors.Prior, got "
                             f"{type(prior).__name__}; e.g. Prior('normal', mean, sd, scale=...)")
        scale = problem.params[name].scale
        if prior.scale != scale:
            raise InputError(f"priors[{name!r}]: the prior is for a parameter on the {prior.scale!r} scale, but {name} "
                             f"is estimated on the {scale!r} scale; build it with Prior(..., scale={scale!r})")
        out[name] = prior
    return out or None


def _start_vector(problem, start):
    """Natural start values of the estimated parameters (NaN where none)."""
    from odeinfer.results import Estimate

    names = problem.estimated
    u = np.array([problem.params[n].value for n in names])
    if start is None:
        return u
    if isinstance(start, Estimate):
        start = dict(zip(start.names, start.values.tolist()))
    if isinstance(start, dict):
        unknown = [k for k in start if k not in problem.names]
        if unknown:
            raise InputError(f"start: {unknown} are not parameters of the problem (estimated: {list(names)})")
        for k, v in start.items():
            if k in names:
                u[names.index(k)] = float(v)
        return u
    arr = np.asarray(start, float).ravel()
    if arr.size != len(names):
        raise InputError(f"start: expected {len(names)} values for {list(names)}, got {arr.size}")
    return arr


def _start_rows(problem, start):
    """Natural start values, one row per start: ``start`` as a 2-D array (several complete starts)
    or as :func:`_start_vector` reads it (one row, NaN where none)."""
    names = problem.estimated
    if isinstance(start, (np.ndarray, list, tuple)) and len(start) and not isinstance(start[0], (dict, str)) \
            and np.ndim(start[0]) == 1:
        try:
            arr = np.asarray(start, float)
        except (TypeError, ValueError):
            raise InputError(f"start: a list of starts must be rows of {len(names)} numbers each (one per parameter "
                             f"{list(names)}); got rows of unequal lengths or non-numbers") from None
        if arr.ndim != 2 or arr.shape[1] != len(names):
            raise InputError(f"start: expected rows of {len(names)} values for {list(names)}, got an array of shape "
                             f"{arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise InputError("start: every row of a start matrix needs a finite value for each estimated parameter "
                             f"{list(names)}; fill the missing values or pass one start with NaN and starts > 1")
        return arr
    return _start_vector(problem, start)[None, :]


def _check_start(problem, x, row=None):
    at = "" if row is None else f"[{row}]"
    for n, v in zip(problem.estimated, x):
        p = problem.params[n]
        if not math.isfinite(v):
            continue
        if p.scale != "lin" and v <= 0:
            raise InputError(f"start{at}[{n!r}]: {n} is estimated on the {p.scale} scale, so its start must be > 0, got "
                             f"{v!r}; give a positive start or scale='lin'")
        if not p.lower <= v <= p.upper:
            raise InputError(f"start{at}[{n!r}]: {float(v)!r} lies outside its bounds [{p.lower!r}, {p.upper!r}]; "
                             "move it inside")


def _box(obj, u_user):
    lo, hi = obj.lower.copy(), obj.upper.copy()
    for k in range(lo.size):
        if math.isfinite(lo[k]) and math.isfinite(hi[k]):
            continue
        c = u_user[k]
        if not math.isfinite(c):
            raise InputError(f"bounds: multi-start needs finite bounds or a start for {obj.problem.estimated[k]!r}; "
                             "give oi.Param(value, lower, upper) or start=")
        w = 1.0 if obj.scales[k] != "lin" else max(abs(c), 1.0)
        lo[k] = max(lo[k], c - w)
        hi[k] = min(hi[k], c + w)
    return lo, hi


def likelihood_solver(est):
    """The solver of ``est``'s likelihood fits: its own if the user chose one, else the
    ``likelihood`` role's default (looser than the ``fit`` role's trajectory default, from the
    accuracy the objective needs; see :data:`odeinfer.solve.config.DEFAULT_SOLVERS`). An
    estimator left at its default holds the ``fit`` role's solver value itself (not a copy)."""
    from odeinfer.solve.config import DEFAULT_SOLVERS

    return DEFAULT_SOLVERS["likelihood"] if est.solver is DEFAULT_SOLVERS["fit"] else est.solver


def _local(obj, u0, max_iter):
    local = getattr(obj, "local", None)  # multiple shooting (odeinfer.likelihood.shooting) fits its own way
    if local is not None:
        return local(u0, max_iter)
    return _minimise(obj, u0, obj.lower, obj.upper, max_iter)


def _by_adjoint(obj):
    """Whether ``obj`` takes its gradient from the adjoint (no Fisher information: BFGS curvature)."""
    return getattr(obj, "adjoint", None) is not None


def trial_step_limit(most):
    """The step limit of a trial point's forward-sensitivity solves when the successful evaluations of the local fit
    so far have taken at most ``most`` steps per solve: ten times that, and at least 2000.

    A solve that reaches it is checked by a solve of the states alone (:meth:`Objective.limit_steps
    <odeinfer.likelihood.objective.Objective.limit_steps>`): a trajectory that blows up in finite time fails there
    in a few hundred steps, where the sensitivities' error control takes 10^5 steps (0.5 s per such trial point on
    PEtab's Crauste_CellSystems2017, against 5 ms for an evaluation at an accepted point); a solve that just needs
    more steps runs on to ``max_steps``, so the fit's path does not change."""
    return max(2000, 10 * int(most))


def _minimise(obj, x0, lo, hi, max_iter, free=None, full=None, tolerances=TOLERANCES):
    """The trust region on ``obj`` from ``x0``: over every coordinate, or over the ``free`` ones of
    ``full`` (the others held). Its curvature is the evaluation's ``curvature`` (the Fisher information
    with the noise sds' observed information, see :class:`~odeinfer.likelihood.objective.Evaluation`), or
    BFGS updates for an objective whose gradient comes from the adjoint (which gives no Fisher information).
    After the first successful evaluation, trial points' solves are checked at :func:`trial_step_limit` steps."""
    bfgs = _by_adjoint(obj)
    limit = getattr(obj, "limit_steps", None)
    most = [0]  # the most steps per solve in a successful evaluation so far

    def fun(x):
        if free is not None:
            full[free] = x
        ev = obj(x if free is None else full)
        if not ev.ok:
            return ev.failure
        if limit is not None and obj.steps_used > most[0]:
            most[0] = obj.steps_used
            limit(trial_step_limit(most[0]))
        if free is None:
            return (ev.nll, ev.grad) if bfgs else (ev.nll, ev.grad, ev.curvature)
        return (ev.nll, ev.grad[free]) if bfgs else (ev.nll, ev.grad[free], ev.curvature[np.ix_(free, free)])

    try:
        return trust_region(fun, x0, lo, hi, max_iter=max_iter, curvature="bfgs" if bfgs else "given", **tolerances)
    finally:
        if limit is not None:
            limit(None)


def polish(obj, run, max_iter):
    """The best start's fit continued where it stopped on a small step or NLL change (fides' ``FTOL`` /
    ``XTOL``) with :data:`POLISH_TOLERANCES`: in a narrow valley, where the Fisher information's
    eigenvalues span many decades, the trust region's steps shrink until one changes the NLL by less
    than ``fatol`` while the gradient is still large (Crauste_CellSystems2017: 1.1e-3 above the optimum
    with a gradient norm of 433). Only one start is continued, so a multistart pays at most one more
    local fit. ``run`` is :func:`_one`'s record; returns it updated (point, NLL, message, stop,
    iterations, ``result``) with ``polish = {"nll_before", "nll_after", "n_iter", "stop"}``, or
    unchanged when there is nothing to continue (another stop, multiple shooting's own local fit)
    or the continuation does not lower the NLL."""
    from odeinfer.solve import auto_scope

    if run.get("stop") not in ("FTOL", "XTOL") or getattr(obj, "local", None) is not None:
        return run
    with auto_scope():
        r = _minimise(obj, np.asarray(run["u"], float), obj.lower, obj.upper, max_iter, tolerances=POLISH_TOLERANCES)
    if not (r.status != "failed" and r.f < run["nll"]):
        return run
    message = (f"{run['message']}; continued with fatol {POLISH_TOLERANCES['fatol']:g}: NLL {run['nll']:.10g} -> "
               f"{r.f:.10g} in {r.n_iter} more iterations, then {r.message}")
    # a continuation that runs out of iterations leaves a better point than the converged one it started from
    return {**run, "u": r.x, "nll": float(r.f), "message": message, "stop": r.stop,
            "n_iter": run["n_iter"] + int(r.n_iter), "result": r,
            "polish": {"nll_before": run["nll"], "nll_after": float(r.f), "n_iter": int(r.n_iter), "stop": r.stop}}


def _chunk(payload, chunk):
    """Worker: local fits from several starts (top level, picklable)."""
    problem, solver, max_iter, priors, shooting, gradient = payload
    try:
        obj = make_objective(problem, solver, priors, shooting, gradient)
    except Exception as exc:
        return [{"index": i, "status": "failed", "error": f"{type(exc).__name__}: {exc}"} for i, _ in chunk]
    return [_one(obj, i, u0, max_iter) for i, u0 in chunk]


def _one(obj, i, u0, max_iter):
    """One local fit: its result and wall ``time`` and CPU ``cpu_time`` (this process's: on a shared
    machine the work, not the queueing). It runs in its own :func:`~odeinfer.solve.api.auto_scope`: the
    objective's oi.Auto solvers start it on Dormand-Prince whatever the fits before it did with them,
    so its result depends on ``u0`` only (not on the order of the starts nor on the processes)."""
    from odeinfer.solve import auto_scope

    t, c = time.perf_counter(), time.process_time()
    try:
        with auto_scope():
            r = _local(obj, np.asarray(u0, float), max_iter)
    except Exception as exc:  # counted, never fatal
        return {"index": i, "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                "time": time.perf_counter() - t, "cpu_time": time.process_time() - c}
    return {"index": i, "u": r.x, "nll": float(r.f), "status": r.status, "message": r.message, "stop": r.stop,
            "n_iter": int(r.n_iter), "n_eval": int(r.n_eval), "error": None, "time": time.perf_counter() - t,
            "cpu_time": time.process_time() - c, "result": r}


def fit_likelihood(est, problem, start, t_start, priors=None):
    """Fit ``problem`` with the settings of Embedding ``est`` (solver, starts, rng, sampler,
    n_jobs, iteration budget); ``priors`` (``{name: Prior}``, from :func:`resolve_priors`) makes it a MAP
    fit. Returns an :class:`~odeinfer.results.Estimate`."""
    from odeinfer.inference.multistart import run_starts, sample_starts

    if not problem.estimated:
        raise InputError("parameters: every parameter is fixed; nothing to estimate")
    solver = likelihood_solver(est)
    shooting = (est.segments, est.continuity_weight, est.polish) if est.segments > 1 else None
    obj = make_objective(problem, solver, priors, shooting, est.gradient)
    X = _start_rows(problem, start)
    for k, x in enumerate(X):
        _check_start(problem, x, None if X.shape[0] == 1 else k)
    x = X[0]
    scales = obj.scales
    U_user = np.array([to_scale(np.where(np.isfinite(x), x, 1.0), scales) for x in X])
    U_user[~np.isfinite(X)] = np.nan
    u_user = U_user[0]
    complete = bool(np.all(np.isfinite(U_user)))
    if est.starts == 1 and not complete:
        missing = [n for n, v in zip(problem.estimated, x) if not math.isfinite(v)]
        raise InputError(f"start: no start value for {missing}; pass start={{name: value}}, give the parameters "
                         "values (oi.Param(value, ...)), or use starts > 1 with finite bounds")
    n_user = X.shape[0] if complete else 0
    if est.starts > n_user:
        lo, hi = _box(obj, u_user)
        pts = sample_starts(lo, hi, est.starts - n_user, sampler=est.sampler, rng=est.rng)
    else:
        pts = np.zeros((0, obj.n))
    U = np.vstack([U_user[:n_user], pts])
    if (est.n_jobs == 1 and est.executor is None) or U.shape[0] == 1:
        runs = [_one(obj, i, u0, est.iterations("likelihood")) for i, u0 in enumerate(U)]
    else:
        runs = run_starts(_chunk, (problem, solver, est.iterations("likelihood"), priors, shooting, est.gradient), U,
                          n_jobs=est.n_jobs, executor=est.executor, progress=est.progress)
    ok = [r for r in runs if math.isfinite(r.get("nll", math.nan))]  # a stalled run keeps its point and status
    table = _table(problem, obj, U, runs)
    if not ok:
        errors = [r.get("error") or r.get("message") for r in runs]
        return _estimate(est, problem, obj, None, "failed", "every start failed: " + str(errors[0]), table, t_start,
                         len(runs), priors)
    best = polish(obj, min(ok, key=lambda r: r["nll"]), est.iterations("likelihood"))
    from odeinfer.solve import auto_scope

    # a fresh evaluation at the optimum: the same whichever process ran which start; after an adjoint fit, by
    # forward sensitivities: the Fisher information of the covariance, and the NLL of solves under their error control
    final = make_objective(problem, solver, priors) if _by_adjoint(obj) else obj
    with auto_scope():
        ev = final(best["u"])
        unresolved = final.unresolved(best["u"]) if ev.ok else None
    status, message = (best["status"] if ev.ok else "failed"), best["message"]
    return _estimate(est, problem, obj, (best["u"], ev, best["n_iter"]), status, message, table, t_start,
                     len(runs), priors, best.get("polish"), unresolved)


def _table(problem, obj, U, runs):
    """The table of starts; for a MAP fit ``nll`` is the likelihood's part of each optimum and
    ``prior_nll`` / ``objective`` the priors' part and the value minimised."""
    prior_nll = getattr(obj, "prior_nll", None)
    tab = {"start": [], "status": [], "nll": [], "n_iter": [], "time_s": [], "error": []}
    if prior_nll is not None:
        tab.update(prior_nll=[], objective=[])
    for n in problem.estimated:
        tab[n] = []
    for r in runs:
        f = r.get("nll", math.nan)  # the value minimised
        tab["start"].append(r["index"])
        tab["status"].append(r.get("status"))
        tab["n_iter"].append(r.get("n_iter", 0))
        tab["time_s"].append(r.get("time", math.nan))
        tab["error"].append(r.get("error") or (r.get("message") if r.get("status") == "failed" else None))
        if prior_nll is None:
            tab["nll"].append(f)
        else:
            prior = prior_nll(r["u"]) if math.isfinite(f) else math.nan
            tab["nll"].append(f - prior)
            tab["prior_nll"].append(prior)
            tab["objective"].append(f)
        vals = obj.natural(r["u"])[obj.est_index] if "u" in r else np.full(obj.n, np.nan)
        for n, v in zip(problem.estimated, vals):
            tab[n].append(float(v))
    return tab


def _estimate(est, problem, obj, best, status, message, table, t_start, n_starts, priors=None, polished=None,
              unresolved=None):
    """The Estimate of a likelihood fit; ``unresolved`` (:meth:`~odeinfer.Objective.unresolved` at the optimum) is
    warned (ResolutionWarning) and kept in its warnings."""
    from odeinfer.errors import ResolutionWarning
    from odeinfer.estimators.base import IdentifiabilityWarning
    from odeinfer.results import Estimate

    names = problem.estimated
    fixed = {n: problem.params[n].value for n in problem.names if n not in names}
    warns = []
    prior_nll, fisher_rank, on_bounds = 0.0, None, ()
    if best is None:
        values, cov, cov_u, f, n_iter, u = np.full(len(names), np.nan), None, None, math.nan, 0, None
    else:
        u, ev, n_iter = best
        values = obj.natural(u)[obj.est_index]
        f = ev.nll if ev.ok else math.nan  # the value minimised (with the priors' term for a MAP fit)
        if priors and ev.ok:
            prior_nll = obj.prior_nll(u)
        cov = cov_u = None
        if ev.ok:
            what = "the Fisher information" + (" plus the priors' curvature" if priors else "")
            held = on_active_bounds(u, ev.grad, obj.lower, obj.upper)
            if held.any():
                on_bounds = tuple(n for n, h in zip(names, held) if h)
                note = _bound_note(names, values, held, u, obj.lower, obj.upper)
                warnings.warn(note, IdentifiabilityWarning, stacklevel=4)
                warns.append(note)
            cov, cov_u, fisher_rank = wald_covariance(ev.fim, values, obj.scales, warns, what, held)
        small = _small_sample_note(problem, obj.n_data)
        if small:
            warns.append(small)
        if unresolved:
            warnings.warn(unresolved, ResolutionWarning, stacklevel=4)
            warns.append(unresolved)
    nll = f - prior_nll
    ranked = table["objective" if priors else "nll"]
    f_ok = [v for v in ranked if math.isfinite(v)]
    extras = {"nll": nll, "loglik": -nll, "objective": f,
              "objective_kind": "negative log-posterior (nll + prior_nll)" if priors else "negative log-likelihood",
              "scales": dict(zip(names, obj.scales)),
              "cov_scaled": cov_u, "u": u, "starts": table, "n_starts": n_starts,
              "n_failed_starts": sum(1 for s in table["status"] if s == "failed"),
              "n_within_0.1_of_best": sum(1 for v in f_ok if v <= min(f_ok) + NEAR_BEST) if f_ok else 0,
              "n_evaluations": obj.n_eval, "fisher_rank": fisher_rank, "on_bounds": on_bounds, "polish": polished,
              **getattr(obj, "last", {})}
    once = best_reached_once(ranked, "negative log-posterior" if priors else "negative log-likelihood")
    if once:
        warnings.warn(once, MultistartWarning, stacklevel=4)
        warns.append(once)
    method = "maximum likelihood"
    if priors:
        extras["prior_nll"] = prior_nll
        extras["priors"] = dict(priors)
        method = f"maximum a posteriori (likelihood times the priors of {sorted(priors)})"
    how = ("BFGS updates of the adjoint's gradient (the NLL and the covariance's Fisher information at the optimum "
           "by forward sensitivities)" if _by_adjoint(obj) else "the Fisher information")
    prov = {"odeinfer_version": __import__("odeinfer").__version__, "estimator": type(est).__name__,
            "method": f"{method}, trust region (Coleman-Li reflective, as fides) with {how}",
            "solver": repr(obj.solver), "elapsed_s": time.perf_counter() - t_start,
            "data": list(problem.experiments.names)}
    out = Estimate(type(est).__name__, problem.model, names, values, cov, status, message, int(n_iter), f,
                   obj.n_data, fixed, {}, None, {}, extras, tuple(warns), prov)
    object.__setattr__(out, "_objective", obj)
    if best is not None and cov_u is not None and math.isfinite(f):
        _attach_profiler(obj, out, np.asarray(u, float), f, cov_u, est.iterations("likelihood"), priors)
    if best is not None and math.isfinite(f):
        from odeinfer.inference.bootstrap import ParametricBootstrap, likelihood_builder

        build = likelihood_builder(obj, np.array(u, float))
        if priors:  # MAP refits keep the priors
            build = functools.partial(_with_priors, build, dict(priors))
        boot = ParametricBootstrap(out, est, build)
        object.__setattr__(out, "_bootstrapper", boot)
    return out


def _with_priors(build, priors):
    simulate, data, kwargs = build()
    return simulate, data, {**kwargs, "priors": priors}


def wald_covariance(fim, values, scales, warns, what="the Fisher information", held=None):
    """``(cov, cov_scaled, rank)``: the inverse Fisher information on the estimation scale and mapped to
    natural units (delta method), and the information's rank; a rank deficiency is warned
    (IdentifiabilityWarning) and noted in ``warns``. The parameters of the mask ``held`` (on an active bound,
    :func:`on_active_bounds`) get NaN rows and columns and the others the inverse of their own block: their
    covariance with those held where the fit left them."""
    from odeinfer.estimators.base import IdentifiabilityWarning

    n = len(values)
    free = np.ones(n, bool) if held is None else ~np.asarray(held, bool)
    cov_u = np.full((n, n), np.nan)
    cov_u[np.ix_(free, free)], rank = _inverse(np.asarray(fim)[np.ix_(free, free)])
    if rank < free.sum():
        held_note = "" if free.all() else " (of the parameters not on a bound)"
        msg = (f"{what}{held_note} has rank {rank} < {free.sum()}: some parameters are not identifiable from these "
               "data (NaN standard errors); fix some of them or add data")
        warnings.warn(msg, IdentifiabilityWarning, stacklevel=5)
        warns.append(msg)
    d = dnatural_dscaled(values, scales)
    return cov_u * np.outer(d, d), cov_u, rank


def on_active_bounds(u, grad, lower, upper, rel=1e-6):
    """Mask of the parameters that ended on a bound of their box (within ``rel`` of its width, on the estimation
    scale) with the objective still decreasing beyond it: a likelihood maximised on a constraint, where the
    quadratic approximation behind Wald intervals does not hold for that parameter."""
    u, g, lo, hi = (np.asarray(a, float) for a in (u, grad, lower, upper))
    tol = rel * np.where(np.isfinite(hi - lo), hi - lo, 1.0)
    return ((u - lo <= tol) & (g > 0)) | ((hi - u <= tol) & (g < 0))


def _bound_note(names, values, held, u, lower, upper):
    """The warning that names the parameters on an active bound."""
    which = [f"{n} = {v:.6g} (its {'lower' if x - lo <= hi - x else 'upper'} bound)"
             for n, v, h, x, lo, hi in zip(names, values, held, u, lower, upper) if h]
    return (f"{' and '.join(which) if len(which) < 3 else ', '.join(which)} ended on a bound with the likelihood "
            "still increasing beyond it: no Wald interval is defined there (NaN), and the other parameters' Wald "
            "intervals hold them at that value; conf_int(method='profile') gives their one-sided intervals; widen "
            "the bounds if they are not physical limits")


def _attach_profiler(obj, estimate, u_hat, nll, cov_u, max_iter, priors=None):
    """``estimate.conf_int(method="profile")``: likelihood-ratio intervals, every other parameter
    re-optimised (noise parameters included) by the same trust region (of ``obj``'s objective:
    ``nll`` is its value at ``u_hat``, the negative log-posterior for a MAP fit)."""
    from odeinfer.inference.profile import ProfileLikelihood

    reoptimise, to_natural = _reoptimiser(obj, max_iter)
    se = np.sqrt(np.where(np.diag(cov_u) >= 0, np.diag(cov_u), np.nan))
    from odeinfer.solve import Adjoint

    gradient = Adjoint() if _by_adjoint(obj) else None
    remote = (_rebuild_reoptimiser, (obj.problem, obj.solver, max_iter, priors, gradient))
    prof = ProfileLikelihood(estimate.names, u_hat, nll, se, obj.lower, obj.upper, reoptimise, to_natural,
                             remote=remote)
    object.__setattr__(estimate, "_profiler", prof)


def _reoptimiser(obj, max_iter):
    """``(reoptimise, to_natural)`` of the profiles of the objective ``obj``."""
    from odeinfer.likelihood.parameters import from_scale

    def reoptimise(u_start, i):
        held = np.zeros(obj.n, bool)
        held[np.atleast_1d(i)] = True
        free = ~held
        full = np.array(u_start, float)
        lo, hi = obj.lower[free], obj.upper[free]
        r = _minimise(obj, np.clip(full[free], lo, hi), lo, hi, max_iter, free, full)
        if r.status == "failed" and not math.isfinite(r.f):
            return None
        full[free] = r.x
        return r.f, full.copy()

    def to_natural(i, v):
        return float(from_scale(np.array([v]), [obj.scales[i]])[0])

    return reoptimise, to_natural


def _rebuild_reoptimiser(payload):
    """Worker: the objective rebuilt from its problem, solver and priors."""
    problem, solver, max_iter, priors, gradient = payload
    return _reoptimiser(make_objective(problem, solver, priors, gradient=gradient), max_iter)


def _small_sample_note(problem, n):
    """A note when noise sds are estimated by maximum likelihood from few data per parameter."""
    import sympy as sp

    syms = set().union(*(o.sigma_expr.free_symbols for o in problem.model.observables))
    noise = [k for k in problem.estimated if sp.Symbol(k, real=True) in syms]
    k = problem.n_estimated
    if not noise or n >= 20 * k:
        return ""
    f = math.sqrt(max(n - k, 1) / n)
    return (f"the noise sds {noise} are maximum-likelihood estimates from {n} data for {k} parameters: they are biased "
            f"low by about a factor {f:.3f} (sqrt((n - k) / n)), so Wald intervals are about {1 / f:.3f} times too "
            "narrow; use profile intervals or more data")


def _inverse(F):
    """Pseudo-inverse of a symmetric PSD matrix with NaN rows/columns for non-identifiable directions."""
    w, V = np.linalg.eigh(F)
    tol = max(w.max(initial=0.0), 0.0) * 1e-10 * F.shape[0]
    keep = w > tol
    rank = int(keep.sum())
    C = (V[:, keep] / w[keep]) @ V[:, keep].T
    if rank < F.shape[0]:
        null = V[:, ~keep]
        bad = np.any(np.abs(null) > 1e-6, axis=1)
        C[bad, :] = np.nan
        C[:, bad] = np.nan
    return C, rank
