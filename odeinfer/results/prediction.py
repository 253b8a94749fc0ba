"""Predicted trajectories with delta-method confidence bands: :class:`Prediction`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from odeinfer._lazy import pandas as pd

__all__ = ["Prediction", "predict", "predict_observables"]


@dataclass(frozen=True, eq=False)
class Prediction:
    """The model's solution at the estimate, with pointwise confidence bands.

    Attributes
    ----------
    t : ndarray (n_times,)
    states : tuple of str
    y : ndarray (n_times, n_states)
        Solution at the point estimate.
    se : ndarray (n_times, n_states)
        Delta-method standard error of each state, ``sqrt(diag(S cov S^T))`` with
        ``S`` the sensitivities with respect to the estimated quantities (NaN
        where the estimate has no covariance or a switching parameter is free).
    lower, upper : ndarray (n_times, n_states)
        On the model's noise scale: ``y -+ z_{1-alpha/2} se`` (additive noise); for the observed
        states of a model with ``noise="log"`` the band of ``log y`` mapped back,
        ``y exp(-+ z se / y)`` (log-normal: positive, asymmetric; NaN where ``y <= 0``).
    alpha : float
    """

    t: np.ndarray
    states: tuple
    y: np.ndarray
    se: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    alpha: float

    def to_frame(self):
        """Long DataFrame: t, state, y, se, lower, upper."""
        n, k = self.y.shape
        return pd.DataFrame({
            "t": np.repeat(self.t, k), "state": np.tile(np.array(self.states, dtype=object), n),
            "y": self.y.ravel(), "se": self.se.ravel(), "lower": self.lower.ravel(), "upper": self.upper.ravel(),
        })


def predict(estimate, t, *, x0=None, t0=None, history=None, alpha=0.05, solver=None) -> Prediction:
    """Solve the model at ``estimate`` and propagate its covariance (see :meth:`Estimate.predict`)."""
    from odeinfer.errors import InputError
    from odeinfer.solve.config import as_solver

    model = estimate.model
    values = dict(zip(estimate.names, estimate.values))
    params = np.array([values.get(n, estimate.fixed.get(n, np.nan)) for n in model.params], dtype=float)
    missing_p = [n for n, v in zip(model.params, params) if not np.isfinite(v)]
    if missing_p:
        raise InputError(f"predict: the estimate has no finite value for parameters {missing_p}")
    solver = as_solver(solver, delays=bool(model.delays), role="fit")
    if model.delays:
        return _predict_dde(estimate, t, params, values, history, t0, alpha, solver)
    if history is not None:
        raise InputError(f"history: only delay models take a history; {model.name!r} has no delays (pass x0=)")
    if x0 is None:
        given = {}
    elif isinstance(x0, Mapping):
        unknown = [k for k in x0 if k not in model.states]
        if unknown:
            raise InputError(f"x0: {unknown} are not states of the model (states: {list(model.states)})")
        given = {k: float(v) for k, v in x0.items()}
    else:
        arr = np.asarray(x0, dtype=float).ravel()
        if arr.size != model.n_states:
            raise InputError(f"x0: expected {model.n_states} values (for {list(model.states)}), got {arr.size}")
        given = dict(zip(model.states, arr.tolist()))
    y0 = []
    for s in model.states:
        key = f"x0[{s}]"
        if s in given:
            y0.append(given[s])
        elif key in values:
            y0.append(values[key])
        elif key in estimate.fixed:
            y0.append(float(estimate.fixed[key]))
        else:
            raise InputError(
                f"predict: the initial state of {s!r} is neither estimated nor given; pass x0={{state: value}} "
                "(e.g. the spline proxy's value at t0, or the known initial state)"
            )
    y0 = np.array(y0)
    free_switch = [n for n in model.switching_params if n in values]
    want_sens = estimate.cov is not None and not free_switch
    held = [n for n in model.switching_params if n not in values]  # fixed jump times: no band for them anyway
    from odeinfer.solve import Forward, Problem, solve

    sol = solve(Problem(model, t, x0=y0, t0=t0), params, solver=solver,
                gradient=Forward(exclude=held) if want_sens else None)
    se = np.full(sol.y.shape, np.nan)
    if want_sens:
        names = list(model.params) + [f"x0[{s}]" for s in model.states if s not in given]
        cols = list(range(model.n_params)) + [model.n_params + model.states.index(s)
                                              for s in model.states if s not in given]
        se = _delta_se(estimate, np.asarray(sol.sens)[:, :, cols], names)
    return _prediction(model, sol.t, sol.y, se, alpha)


def predict_observables(estimate, t, *, experiment=None, alpha=0.05) -> Prediction:
    """The observables of one experiment of a likelihood fit, with delta-method bands on each
    observable's noise scale (see :meth:`Estimate.predict`). Parameters that ended on a bound
    (``extras["on_bounds"]``) are held there, as in the other parameters' Wald intervals."""
    from odeinfer.errors import InputError

    obj = estimate._objective
    names = [p.name for p in obj.problem.plans]
    if experiment is None:
        if len(names) > 1:
            raise InputError(f"experiment: the fit has {len(names)} experiments {names}; say which to predict")
        experiment = names[0]
    t = np.asarray(t, dtype=float)
    if t.ndim != 1 or t.size == 0 or np.any(np.diff(t) < 0) or not np.all(np.isfinite(t)):
        raise InputError("t: expected a non-empty sorted 1-D array of finite times")
    u = np.asarray(estimate.extras["u"], float)
    h, dh = obj.observe_at(u, experiment, t)
    cov = estimate.extras.get("cov_scaled")
    held = [estimate.names.index(n) for n in estimate.extras.get("on_bounds", ())]
    if cov is not None and held:
        cov = np.array(cov, float)
        cov[held, :], cov[:, held] = 0.0, 0.0
    if cov is None:
        se = np.full(h.shape, np.nan)
    else:
        var = np.einsum("toi,ij,toj->to", dh, np.asarray(cov, float), dh)
        se = np.sqrt(np.where(var >= 0, var, np.nan))
    z = NormalDist().inv_cdf(1 - alpha / 2)
    lower, upper = h - z * se, h + z * se
    for k, o in enumerate(obj.problem.model.observables):
        if o.noise.scale != "lin":  # the band of log h mapped back: h exp(-+ z se / h)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                half = np.exp(z * se[:, k] / h[:, k])
                pos = h[:, k] > 0
                lower[:, k] = np.where(pos, h[:, k] / half, np.nan)
                upper[:, k] = np.where(pos, h[:, k] * half, np.nan)
    arrs = [np.array(a) for a in (t, h, se, lower, upper)]
    for a in arrs:
        a.flags.writeable = False
    return Prediction(arrs[0], obj.problem.model.observable_names, arrs[1], arrs[2], arrs[3], arrs[4], float(alpha))


def _predict_dde(estimate, t, params, values, history, t0, alpha, solver):
    """Delay models: solve with ``history`` (its family parameters taken from the estimate)."""
    from odeinfer.errors import InputError
    from odeinfer.model import History
    from odeinfer.solve import Forward, Problem, solve
    from odeinfer.solve.dde import history_for

    model = estimate.model
    if history is None:
        raise InputError(
            f"history: {model.name!r} is a delay model; pass the history on [t0 - max(tau), t0] used in the fit "
            "(an oi.History family -- its parameters are taken from the estimate where estimated --, "
            "oi.History.from_data(...), numbers or a function of time)")
    hp = None
    if isinstance(history, History):
        hnames = history.param_names(model.states)
        if hnames:
            hp = np.array([values.get(n, v) for n, v in zip(hnames, history.values)], dtype=float)
    want_sens = estimate.cov is not None
    problem = Problem(model, t, history=history_for(history, model, params, t, t0), t0=t0)
    sol = solve(problem, params, history_params=hp, solver=solver, gradient=Forward() if want_sens else None)
    se = np.full(np.shape(sol.y), np.nan)
    if want_sens:
        se = _delta_se(estimate, np.asarray(sol.sens), list(sol.sens_names))
    return _prediction(model, sol.t, sol.y, se, alpha)


def _delta_se(estimate, sens, sens_names):
    """``sqrt(diag(S cov S^T))`` over the estimated quantities that have a sensitivity column."""
    rows, cols = [], []
    for i, name in enumerate(estimate.names):
        if name in sens_names:
            rows.append(i)
            cols.append(sens_names.index(name))
    S = sens[:, :, cols]  # (n_times, n_states, k)
    cov = np.asarray(estimate.cov)[np.ix_(rows, rows)]
    var = np.einsum("tsi,ij,tsj->ts", S, cov, S)
    return np.sqrt(np.where(var >= 0, var, np.nan))


def _band(model, y, se, z):
    """``(lower, upper)`` on the noise scale: additive, or exp of the log-scale band ``log y -+ z se / y``
    (delta method: ``se(log y) = se / y``) for the observed states of a log-noise model."""
    lower, upper = y - z * se, y + z * se
    if model.observation.noise == "log":
        cols = [model.states.index(s) for s in model.observed]
        yl = y[:, cols]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            half = np.exp(z * se[:, cols] / yl)
            pos = yl > 0
            lower[:, cols] = np.where(pos, yl / half, np.nan)
            upper[:, cols] = np.where(pos, yl * half, np.nan)
    return lower, upper


def _prediction(model, t, y, se, alpha):
    z = NormalDist().inv_cdf(1 - alpha / 2)
    y = np.asarray(y, dtype=float)
    se = np.asarray(se, dtype=float)
    arrs = [np.array(a) for a in (t, y, se, *_band(model, y, se, z))]
    for a in arrs:
        a.flags.writeable = False
    return Prediction(arrs[0], tuple(model.states), arrs[1], arrs[2], arrs[3], arrs[4], float(alpha))
