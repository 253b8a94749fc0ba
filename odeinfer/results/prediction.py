"""Predicted trajectories with delta-method confidence bands: :class:`Prediction`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from odeinfer._lazy import pandas as pd

__all__ = ["Prediction", "predict"]


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
        ``y -+ z_{1-alpha/2} se``.
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


def predict(estimate, t, *, x0=None, t0=None, alpha=0.05, method="dopri5", rtol=1e-8, atol=1e-10) -> Prediction:
    """Solve the model at ``estimate`` and propagate its covariance (see :meth:`Estimate.predict`)."""
    from odeinfer.errors import InputError
    from odeinfer.solve import solve_ode

    model = estimate.model
    values = dict(zip(estimate.names, estimate.values))
    params = np.array([values.get(n, estimate.fixed.get(n, np.nan)) for n in model.params], dtype=float)
    missing_p = [n for n, v in zip(model.params, params) if not np.isfinite(v)]
    if missing_p:
        raise InputError(f"predict: the estimate has no finite value for parameters {missing_p}")
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
    sol = solve_ode(model, params, y0, t, t0=t0, sensitivities=want_sens, method=method, rtol=rtol, atol=atol,
                    sens_exclude=held if want_sens else ())
    se = np.full(sol.y.shape, np.nan)
    if want_sens:
        cols, rows = [], []
        for i, name in enumerate(estimate.names):
            if name in model.params:
                cols.append(model.params.index(name))
                rows.append(i)
            elif name.startswith("x0[") and name[3:-1] in model.states and name[3:-1] not in given:
                cols.append(model.n_params + model.states.index(name[3:-1]))
                rows.append(i)
        S = sol.sens[:, :, cols]  # (n_times, n_states, k)
        cov = np.asarray(estimate.cov)[np.ix_(rows, rows)]
        var = np.einsum("tsi,ij,tsj->ts", S, cov, S)
        se = np.sqrt(np.where(var >= 0, var, np.nan))
    z = NormalDist().inv_cdf(1 - alpha / 2)
    arrs = [np.array(a) for a in (sol.t, sol.y, se, sol.y - z * se, sol.y + z * se)]
    for a in arrs:
        a.flags.writeable = False
    return Prediction(arrs[0], tuple(model.states), arrs[1], arrs[2], arrs[3], arrs[4], float(alpha))
