"""Parametric bootstrap confidence intervals: refit data simulated at an estimate.

For an estimate ``theta_hat`` with fitted noise sds ``sigma_hat``, replicate ``b`` draws a
dataset ``y*_b`` from the fitted model -- the trajectory at ``theta_hat`` (estimated initial
states included) at the observed times and states, plus Gaussian noise of sd ``sigma_hat`` per
state (on the log scale, ``y = x exp(sigma e)``, for a model with log noise) -- and refits it
with the same estimator, starting at ``theta_hat``. Replicate ``b`` is seeded by the ``b``-th
child of ``numpy.random.SeedSequence(seed)``, so the sample does not depend on where or in which
order the refits run (this process, local processes, a Dask cluster).

Intervals from the refits ``theta*_b`` (only refits with status ``"converged"`` are used; failed
and unconverged refits are counted and reported):

- ``"percentile"``: the ``alpha/2`` and ``1 - alpha/2`` quantiles of ``theta*``;
- ``"studentized"`` (bootstrap-t): ``theta_hat - q_{1-alpha/2}(t*) se_hat``,
  ``theta_hat - q_{alpha/2}(t*) se_hat`` with ``t*_b = (theta*_b - theta_hat) / se*_b``, using the
  refits' own standard errors; exact for a linear Gaussian model with estimated noise (``t*``
  then follows Student's t).

Quantiles are numpy's default (linear interpolation). Monte Carlo error of a quantile grows as
``1 / sqrt(n_boot)``; ``n_boot >= 1000`` is advised for 95% intervals.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import fields, replace

import numpy as np

from odeinfer.errors import InputError, OdeinferWarning
from odeinfer.estimators._coverage import CoverageWarning, bootstrap_coverage_note

__all__ = ["ParametricBootstrap", "BootstrapWarning", "KINDS", "attach_trajectory_bootstrap",
           "attach_matching_bootstrap", "attach_newton_bootstrap", "attach_dde_bootstrap", "trajectory_builder",
           "likelihood_builder"]

#: Interval kinds of :meth:`ParametricBootstrap.conf_int`.
KINDS = ("percentile", "studentized")


class BootstrapWarning(OdeinferWarning):
    """Some bootstrap refits failed or did not converge: they are left out of the intervals
    (counted in the frame's ``attrs``)."""


class ParametricBootstrap:
    """Parametric bootstrap of one fitted estimate (attached to it as ``_bootstrapper``).

    Parameters
    ----------
    estimate : Estimate
        Its names, values and standard errors.
    estimator : Estimator
        The configuration that produced the estimate; refits use it with one start (the
        estimate), in their worker (``n_jobs=1``, no executor).
    build : callable
        ``build() -> (simulate, data, fit_kwargs)``, called once, on first use, in this process:
        ``simulate(data, rng)`` (top level, picklable) returns the positional arguments of
        ``estimator.fit`` for one simulated dataset; ``fit_kwargs`` are its other keywords.
        :func:`trajectory_builder` and :func:`likelihood_builder` make it.
    """

    def __init__(self, estimate, estimator, build):
        own = {f.name for f in fields(estimator)}
        self._est = replace(estimator, **{k: v for k, v in (("starts", 1), ("n_jobs", 1), ("executor", None))
                                          if k in own})
        self._build = build
        self.names = tuple(estimate.names)
        self.values = np.array(estimate.values, float)
        d = np.full(len(self.names), np.nan) if estimate.cov is None else np.diag(np.asarray(estimate.cov, float))
        self.se = np.sqrt(np.where(d >= 0, d, np.nan))  # estimate.bse's values, without pandas (not loaded yet)
        self._samples = {}

    def __reduce__(self):
        # an unpickled estimate has no bootstrap (as it has no profiler): its data are not kept
        return (_none, ())

    def _payload(self):
        simulate, data, fit_kwargs = self._build()
        fit_kwargs = dict(fit_kwargs)
        start = fit_kwargs.pop("start", dict(zip(self.names, self.values.tolist())))
        return (simulate, data, self._est, start, fit_kwargs)

    def sample(self, n_boot, seed, *, executor=None, progress=False):
        """The refits of replicates ``0 .. n_boot-1`` (cached per ``(n_boot, seed)``).

        Returns
        -------
        dict
            ``values``, ``bse`` (ndarray (n_boot, k), NaN where a refit failed), ``status`` (list
            of str: ``"converged"``, ``"max_iter"``, ``"failed"``), ``error`` (list of str or None).
        """
        from odeinfer.inference.executor import map_chunks, n_slots, split

        key = (int(n_boot), int(seed))
        if key in self._samples:
            return self._samples[key]
        payload = self._payload()
        tasks = list(enumerate(np.random.SeedSequence(int(seed)).spawn(int(n_boot))))
        chunks = split(tasks, n_slots(executor) if executor is not None else 1,
                       chunk_size=None if executor is not None else 1)
        outs = map_chunks(refit_chunk, payload, chunks, executor=executor, progress=progress, desc="bootstrap")
        rows = sorted((r for out in outs for r in out), key=lambda r: r[0])
        k = len(self.names)
        res = {"values": np.array([r[1] if r[1] is not None else np.full(k, np.nan) for r in rows], float),
               "bse": np.array([r[2] if r[2] is not None else np.full(k, np.nan) for r in rows], float),
               "status": [r[3] for r in rows], "error": [r[4] for r in rows],
               "cov": [r[5] for r in rows]}
        self._samples[key] = res
        return res

    def conf_int(self, alpha=0.05, *, kind="percentile", n_boot=1000, seed=0, executor=None, progress=False):
        """Bootstrap intervals (DataFrame ``lower``, ``upper``; counts in ``attrs``)."""
        import pandas as pd

        s = self.sample(n_boot, seed, executor=executor, progress=progress)
        ok = np.array([st == "converged" for st in s["status"]])
        n_failed = sum(st == "failed" for st in s["status"])
        n_unconverged = int(len(ok) - ok.sum() - n_failed)
        theta = s["values"][ok]
        lo_q, hi_q = alpha / 2, 1 - alpha / 2
        lower, upper, used = [], [], []
        for j in range(len(self.names)):
            if kind == "percentile":
                x = theta[:, j][np.isfinite(theta[:, j])]
                used.append(x.size)
                lo, hi = (np.quantile(x, [lo_q, hi_q]) if x.size else (math.nan, math.nan))
            else:
                tstar = (theta[:, j] - self.values[j]) / s["bse"][ok, j]
                x = tstar[np.isfinite(tstar)]
                used.append(x.size)
                if x.size and math.isfinite(self.se[j]):
                    q_lo, q_hi = np.quantile(x, [lo_q, hi_q])
                    lo, hi = self.values[j] - q_hi * self.se[j], self.values[j] - q_lo * self.se[j]
                else:
                    lo, hi = math.nan, math.nan
            lower.append(float(lo))
            upper.append(float(hi))
        frame = pd.DataFrame({"lower": lower, "upper": upper}, index=list(self.names))
        note = bootstrap_coverage_note(type(self._est).__name__, kind, default=_has_defaults(self._est))
        if note is not None:
            warnings.warn(note, CoverageWarning, stacklevel=3)
        frame.attrs.update(method="bootstrap", kind=kind, alpha=float(alpha), n_boot=int(n_boot), seed=int(seed),
                           n_failed=int(n_failed), n_unconverged=n_unconverged,
                           n_used=dict(zip(self.names, (int(u) for u in used))))
        if n_failed or n_unconverged:
            first = next((e for e in s["error"] if e), None)
            warnings.warn(
                f"bootstrap: {n_failed} of {n_boot} refits failed and {n_unconverged} did not converge; they are left "
                f"out of the intervals (counts in the frame's attrs)" + (f"; first error: {first}" if first else "") +
                ". Many failures make the interval unreliable: check the estimate, or raise the estimator's max_iter",
                BootstrapWarning, stacklevel=3)
        return frame


def _has_defaults(estimator):
    """Whether ``estimator`` (a dataclass) has the configuration of ``type(estimator)()``, apart from the fields
    a bootstrap refit sets (one start, in its own worker)."""
    fresh = type(estimator)()
    for f in fields(estimator):
        if f.name in ("starts", "n_jobs", "executor"):
            continue
        try:
            if not bool(getattr(estimator, f.name) == getattr(fresh, f.name)):
                return False
        except Exception:  # a value without a plain equality (an array, a smoother object)
            return False
    return True


def attach_trajectory_bootstrap(estimator, estimate, model, experiments, single, fit_kwargs, exp_names, *,
                                solver=None, x0_from_estimate=False, x0_values=None, sigma=None):
    """Give ``estimate`` its ``_bootstrapper`` for a trajectory fit (see :func:`trajectory_builder`)."""
    build = trajectory_builder(model, experiments, single, fit_kwargs, estimate, exp_names, solver=solver,
                               x0_from_estimate=x0_from_estimate, x0_values=x0_values, sigma=sigma)
    object.__setattr__(estimate, "_bootstrapper", ParametricBootstrap(estimate, estimator, build))


def attach_matching_bootstrap(estimator, estimate, model, experiments, single, fit_kwargs, x0_known):
    """Give a matching estimate (``oi.OrthogonalConditions``, ``oi.GradientMatching``) its ``_bootstrapper``.

    These estimators do not estimate initial states: the simulated trajectories start at the
    ``x0`` given to ``fit`` (``x0_known``, a dict), else at the smoothing proxy's value at each
    experiment's ``t0`` (``estimate.extras["proxy"]``). Delay models (which need a history) get none.
    """
    if model.delays:
        return
    given = dict(x0_known or {})
    proxies = estimate.extras.get("proxy") or ()
    x0_values = []
    for d, proxy in zip(experiments, proxies):
        at_t0 = dict(zip(proxy.states, np.asarray(proxy(np.array([float(d.t0)])), float)[0]))
        x0_values.append({s: float(given[s]) if s in given else float(at_t0[s]) for s in model.states})
    attach_trajectory_bootstrap(estimator, estimate, model, experiments, single, fit_kwargs, (),
                                x0_values=x0_values)


def attach_newton_bootstrap(estimator, estimate, problem, single, fit_kwargs):
    """Give a Newton-family estimate (``oi.NewtonRaphson``, ``oi.GradientDescent``, ``oi.StochasticNewton``,
    ``oi.StochasticGradient``; in-memory data, no observables) its ``_bootstrapper``.

    These estimators neither estimate nor take initial states and noise sds: the simulated trajectories
    start at each state's smoothing spline (GCV) at the experiment's ``t0``, and the noise sd of each
    state is the data's own (:func:`~odeinfer.estimators._noise_cov.noise_variance`, averaged over
    experiments). A state observed at fewer than 5 times in some experiment leaves the estimate without a
    bootstrap.
    """
    experiments = problem.experiments
    if any(np.unique(np.asarray(d.t)[np.asarray(d.mask)[:, j] & np.isfinite(d.y[:, j])]).size < 5
           for d in experiments for j in range(len(d.states))):
        return

    def build():  # on first use
        from odeinfer.estimators._noise_cov import noise_variance
        from odeinfer.smooth.gcv import smoothed_value

        x0_values, var = [], {}
        for d in experiments:
            x0 = {}
            for j, s in enumerate(d.states):
                ok = np.asarray(d.mask)[:, j] & np.isfinite(d.y[:, j])
                t, y = np.asarray(d.t, float)[ok], np.asarray(d.y, float)[ok, j]
                x0[s] = smoothed_value(t, y, d.t0)
                var.setdefault(s, []).append(noise_variance(t, y))
            x0_values.append(x0)
        sigma = {s: math.sqrt(float(np.mean(v))) for s, v in var.items()}
        return trajectory_builder(problem.model, experiments, single, fit_kwargs, estimate, (), x0_values=x0_values,
                                  sigma=sigma)()

    object.__setattr__(estimate, "_bootstrapper", ParametricBootstrap(estimate, estimator, build))


def attach_dde_bootstrap(estimator, estimate, setup, data, fit_kwargs):
    """Give an ``oi.AdjointDDE`` estimate (``mode="lm"``, observed states) its ``_bootstrapper``.

    Simulates the fitted delay trajectory (the estimate's parameters and history parameters, solved by
    the fit's own solver ``setup.solver()`` at the observation times) plus Gaussian noise with the
    estimate's sd per state (on the log scale for a model with log noise), with the same observed
    states and missing values; refits get ``fit_kwargs`` (the same history family, ``fixed`` and
    ``t0``) and start at the estimate.
    """
    def build():  # on first use
        p, phi = setup.split(np.array(estimate.values, float))
        y, _, status = setup.solver()(p, phi)
        if status != 0:
            raise InputError("method: the bootstrap simulates from the estimate, but the delay model's solve failed "
                             f"there (status {status}); use method='wald' or 'profile'")
        model = setup.model
        t = np.asarray(data.t, float)
        y_hat = np.asarray(y, float)[np.searchsorted(setup.t_obs, t)][:, [model.states.index(s) for s in data.states]]
        sd = np.array([estimate.sigma[s] for s in data.states], float)
        template = (t, y_hat, np.asarray(data.mask), data.states, data.t0, data.name, data.replicates, sd)
        return (simulate_trajectory, (model, [template], model.observation.noise == "log", True, [data.name], None),
                dict(fit_kwargs))

    object.__setattr__(estimate, "_bootstrapper", ParametricBootstrap(estimate, estimator, build))


def trajectory_builder(model, experiments, single, fit_kwargs, estimate, exp_names, *, solver=None,
                       x0_from_estimate=False, x0_values=None, sigma=None):
    """``build`` of a trajectory fit (``oi.Embedding`` without observables, ``oi.Simultaneous``).

    Simulates the fitted trajectory (estimated or given initial states, per experiment) at the
    observed times plus Gaussian noise with the fitted sd per state, on the log scale for a
    model with log noise; the same observed states and missing values. ``fit_kwargs`` are the
    refits' keywords (``fixed``, ``x0`` as given); with ``x0_from_estimate`` the refits get the
    estimate's initial states as ``x0`` (one dict, or a list per experiment) and its parameters
    as ``start`` (for estimators whose ``start`` takes parameters only). ``x0_values`` (a dict
    per experiment) gives initial states the estimate does not hold, ``sigma`` (a dict per state)
    noise sds it does not hold. ``solver`` solves the fitted trajectory (default
    ``oi.Auto(rtol=1e-8, atol=1e-10)``).
    """
    known = {**dict(estimate.fixed), **dict(zip(estimate.names, estimate.values))}
    sigma = dict(estimate.sigma) if sigma is None else dict(sigma)

    def initial_state(s, e):
        if x0_values is not None and s in x0_values[e]:
            return x0_values[e][s]
        keys = ([f"x0[{s}]@{exp_names[e]}"] if e < len(exp_names) else []) + [f"x0[{s}]"]
        for key in keys:
            if key in known:
                return float(known[key])
        raise InputError(f"method: the bootstrap simulates from the estimate, but the initial state {s!r} of "
                         f"experiment {e} is neither estimated nor given; refit with estimate_x0=True or pass x0=")

    def build():
        params = np.array([known[n] for n in model.params], float)
        templates = []
        for e, d in enumerate(experiments):
            x0 = [initial_state(s, e) for s in model.states]
            t, y_hat = _trajectory(model, d, params, x0, solver)
            cols = [model.states.index(s) for s in d.states]
            sd = np.array([sigma.get(s, math.nan) for s in d.states], float)
            bad = [s for s, v, m in zip(d.states, sd, np.asarray(d.mask).any(axis=0)) if m and not v > 0]
            if bad:
                raise InputError(f"method: the bootstrap needs the estimated noise sd of every observed state, but "
                                 f"{bad} have none in this estimate (sigma={sigma}); refit with sigma='pooled' or "
                                 "'per_state', or use method='wald' or 'profile'")
            templates.append((t, y_hat[:, cols], np.asarray(d.mask), d.states, d.t0, d.name, d.replicates, sd))
        data = (model, templates, model.observation.noise == "log", bool(single), list(experiments.names),
                experiments.conditions or None)
        kwargs = dict(fit_kwargs)
        if x0_from_estimate:
            x0s = [{s: initial_state(s, e) for s in model.states} for e in range(len(experiments))]
            kwargs["x0"] = x0s[0] if single else x0s
            kwargs["start"] = {n: float(v) for n, v in zip(estimate.names, estimate.values) if n in model.params}
        return simulate_trajectory, data, kwargs

    return build


def _trajectory(model, d, params, x0, solver):
    """Observation times of ``d`` and the states at them, ``(n_times, n_states)``."""
    from odeinfer.solve import Problem, solve
    from odeinfer.solve.config import as_solver

    t = np.asarray(d.t, float)
    tu, inverse = np.unique(t, return_inverse=True)
    sol = solve(Problem(model, tu, x0=x0, t0=d.t0), params, solver=as_solver(solver, delays=False, role="fit"))
    return t, np.asarray(sol.y, float)[inverse]


def simulate_trajectory(data, rng):
    """``(model, Data or Experiments)``: one bootstrap dataset from the fitted observations."""
    from odeinfer.data import Data, Experiments

    model, templates, log, single, names, conditions = data
    datas = []
    for t, y_hat, mask, states, t0, name, replicates, sd in templates:
        e = rng.standard_normal(y_hat.shape) * sd  # every cell drawn: the stream does not depend on the mask
        y = y_hat * np.exp(e) if log else y_hat + e
        datas.append(Data(t, np.where(mask, y, np.nan), states, t0=t0, name=name, replicates=replicates))
    return model, (datas[0] if single else Experiments(datas, names=names, conditions=conditions))


def likelihood_builder(objective, u_hat):
    """``build`` of a maximum-likelihood fit (a model with observables, a FitProblem).

    Simulates every measurement from its noise model at the estimate (normal or Laplace, on the
    lin, log or log10 scale, with the sd the noise model gives there); the same experiments,
    conditions, times and observables.
    """
    def build():
        from odeinfer.solve import auto_scope

        with auto_scope():  # a fresh solve at the estimate (oi.Auto starts on Dormand-Prince), whatever ran before
            rows = [(h, sd, dist, scale) for h, sd, dist, scale in objective.noise_model_at(u_hat)]
        return simulate_measurements, (objective.problem, rows), {}

    return build


def simulate_measurements(data, rng):
    """``(FitProblem,)`` with every measurement drawn from its noise model."""
    from scipy.special import ndtri

    problem, rows = data
    values = []
    for h, sd, dist, scale in rows:
        u = rng.random(h.size)  # one uniform per measurement, whatever the noise model
        e = np.where(dist == 0, ndtri(u), -np.sign(u - 0.5) * np.log1p(-2.0 * np.abs(u - 0.5)))
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(scale == 0, h, np.where(scale == 1, np.log(h), np.log10(h))) + sd * e
        values.append(np.where(scale == 0, z, np.where(scale == 1, np.exp(z), 10.0 ** z)))
    return (problem.with_measurements(values),)


def refit_chunk(payload, chunk):
    """Worker: ``[(b, values, bse, status, error, cov), ...]`` for ``chunk = [(b, SeedSequence), ...]``."""
    simulate, data, est, start, fit_kwargs = payload
    out = []
    for b, seed in chunk:
        rng = np.random.default_rng(seed)
        try:
            args = simulate(data, rng)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # per-refit warnings are summarised by the caller
                fit = est.fit(*args, start=start, **fit_kwargs)
            cov = None if fit.cov is None else np.array(fit.cov, float)
            out.append((b, np.array(fit.values, float), fit.bse.to_numpy(), fit.status, None, cov))
        except Exception as exc:  # counted and reported, never fatal
            out.append((b, None, None, "failed", f"{type(exc).__name__}: {exc}"[:300], None))
    return out


def _none():
    return None
