"""Posterior predictive checks for trajectories: :func:`ppc`.

Coverage of the observations by pointwise predictive intervals, and a posterior predictive
p-value (Gelman, Meng & Stern 1996, Statistica Sinica 6, 733-807) of the standardised
discrepancy ``T(y) = sum_i ((y_i - m_i) / s_i)^2`` with ``m, s`` the predictive mean and
standard deviation at each observation: ``p = P(T(y_rep) >= T(y_obs))`` over the draws.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import numpy as np

from odeinfer._lazy import pandas as pd
from odeinfer.errors import InputError

__all__ = ["PPCResult", "ppc", "predictive_draws"]


@dataclass(frozen=True, eq=False)
class PPCResult:
    """Outcome of :func:`ppc` (immutable).

    Attributes
    ----------
    table : pandas.DataFrame
        One row per observed state and a final row ``"all"``: ``n_obs``, ``coverage``
        (fraction of observations inside the ``1 - alpha`` predictive interval),
        ``nominal`` (``1 - alpha``), ``p_value`` (posterior predictive p-value of the
        discrepancy). A new copy on each access.
    alpha : float
    var_name : str
    """

    _table: object = field(repr=False)
    alpha: float = 0.05
    var_name: str = "y"

    @property
    def table(self):
        return self._table.copy(deep=True)

    @property
    def p_value(self) -> float:
        return float(self._table.loc["all", "p_value"])

    @property
    def coverage(self) -> float:
        return float(self._table.loc["all", "coverage"])

    def __repr__(self):
        return (f"PPCResult(var_name={self.var_name!r}, alpha={self.alpha:g}, coverage={self.coverage:.3f}, "
                f"p_value={self.p_value:.3f})\n{self._table.to_string(float_format=lambda v: f'{v:.3g}')}")

    def _repr_html_(self):
        return (f"<div class='odeinfer-ppc'><p><b>Posterior predictive check</b> of "
                f"<code>{html.escape(self.var_name)}</code>: {100 * (1 - self.alpha):g}% predictive intervals"
                f"</p>{self._table.to_html(float_format=lambda v: f'{v:.3g}', escape=True)}</div>")


def _single_data(data):
    from odeinfer.data import Data, Experiments

    if isinstance(data, Experiments):
        if len(data) != 1:
            raise InputError(f"data: ppc checks one experiment at a time; got Experiments with {len(data)} "
                             "experiments; pass data[name] and the matching predictive draws")
        data = data[0]
    if not isinstance(data, Data):
        raise InputError(f"data: expected an odeinfer Data, got {type(data).__name__}")
    return data


def predictive_draws(idata, data, var_name=None):
    """Posterior predictive draws aligned with ``data``: ndarray (n_samples, n_times, n_observed).

    ``idata.posterior_predictive[var_name]`` must have dims ``(chain, draw, time, state)``
    (named ``time``/``state``, or the last two dims in that order); states are matched
    to ``data.states`` by the ``state`` coordinate labels, else by position.
    """
    data = _single_data(data)
    pp = getattr(idata, "posterior_predictive", None)
    if pp is None:
        raise InputError("idata: no 'posterior_predictive' group; sample it with oi.bayes.sample(...) "
                         "(posterior predictive trajectories are included) or pymc.sample_posterior_predictive")
    var_name = default_var_name(pp) if var_name is None else var_name
    if var_name not in pp.data_vars:
        raise InputError(f"var_name: {var_name!r} is not in idata.posterior_predictive (variables: "
                         f"{sorted(pp.data_vars)}); pass var_name= the variable with dims (chain, draw, time, state)")
    da = pp[var_name]
    extra = [d for d in da.dims if d not in ("chain", "draw")]
    if len(extra) != 2:
        raise InputError(f"idata.posterior_predictive[{var_name!r}]: expected dims (chain, draw, time, state), "
                         f"got {da.dims}")
    tdim = "time" if "time" in extra else extra[0]
    sdim = "state" if "state" in extra else [d for d in extra if d != tdim][0]
    da = da.transpose("chain", "draw", tdim, sdim)
    if da.sizes[tdim] != data.n_times:
        raise InputError(f"idata.posterior_predictive[{var_name!r}]: {da.sizes[tdim]} times, but data has "
                         f"{data.n_times}; pass the data the posterior was sampled from")
    labels = [str(v) for v in da[sdim].values] if sdim in da.coords else []
    if all(s in labels for s in data.states):
        da = da.isel({sdim: [labels.index(s) for s in data.states]})
    elif da.sizes[sdim] != data.n_observed:
        raise InputError(f"idata.posterior_predictive[{var_name!r}]: state labels {labels} do not include the "
                         f"data's states {list(data.states)}")
    arr = np.asarray(da.values, dtype=float)
    return arr.reshape(-1, arr.shape[2], arr.shape[3])


def default_var_name(pp):
    """``"y_obs"`` (what :func:`odeinfer.bayes.sample` writes) if present, else ``"y"``."""
    return "y_obs" if "y_obs" in pp.data_vars else "y"


def ppc(idata, data, *, var_name=None, alpha=0.05) -> PPCResult:
    """Posterior predictive check of observed trajectories.

    Parameters
    ----------
    idata : arviz.InferenceData
        With ``posterior_predictive[var_name]`` of dims ``(chain, draw, time, state)``
        at the observation times of ``data`` (the observation model's draws, noise
        included).
    data : Data
        The observations (missing values are skipped).
    var_name : str, optional
        Default ``"y_obs"`` (written by :func:`odeinfer.bayes.sample`) if present, else ``"y"``.
    alpha : float, default 0.05
        Pointwise predictive intervals are the ``alpha/2`` and ``1 - alpha/2`` quantiles.

    Returns
    -------
    PPCResult
        Coverage near ``1 - alpha`` and a p-value away from 0 and 1 indicate that the
        model reproduces the data; coverage far below nominal or ``p < 0.05`` point to
        misfit (wrong dynamics or underestimated noise).
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise InputError(f"alpha: expected a number in (0, 1), got {alpha!r}")
    data = _single_data(data)
    if var_name is None and getattr(idata, "posterior_predictive", None) is not None:
        var_name = default_var_name(idata.posterior_predictive)
    rep = predictive_draws(idata, data, var_name)  # (S, T, K)
    y = np.asarray(data.y, dtype=float)
    obs = np.isfinite(y)
    lo, hi = np.quantile(rep, [alpha / 2, 1 - alpha / 2], axis=0)
    inside = (y >= lo) & (y <= hi)
    m = rep.mean(axis=0)
    s = rep.std(axis=0, ddof=1)
    s = np.where(s > 0, s, np.nan)
    d_obs = np.where(obs, ((y - m) / s) ** 2, 0.0)
    d_rep = np.where(obs[None], ((rep - m[None]) / s[None]) ** 2, 0.0)
    rows = {}
    for k, state in enumerate(list(data.states) + ["all"]):
        cols = slice(None) if state == "all" else slice(k, k + 1)
        o = obs[:, cols]
        n = int(o.sum())
        t_obs = np.nansum(d_obs[:, cols])
        t_rep = np.nansum(d_rep[:, :, cols], axis=(1, 2))
        rows[state] = {"n_obs": n, "coverage": float(inside[:, cols][o].mean()) if n else np.nan,
                       "nominal": 1 - alpha, "p_value": float(np.mean(t_rep >= t_obs)) if n else np.nan}
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "state"
    return PPCResult(table, float(alpha), str(var_name))
