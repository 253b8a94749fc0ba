"""Data with fitted trajectories and prediction bands; residuals."""

from __future__ import annotations

import warnings

import numpy as np

from odeinfer.errors import InputError, OdeinferWarning, SolverError
from odeinfer.plots._common import (COLORS, POSTERIOR_COLOR, axes_figure, check_alpha, data_t0, initial_state,
                                    new_figure, single_data)

__all__ = ["trajectories", "residuals", "residual_lines"]


def _check_states(estimates, data):
    for e in estimates:
        if e._objective is not None:
            raise InputError("estimates: a likelihood fit (a model with observables) is drawn by "
                             "oi.plots.observables(fit), per experiment with its data")
        unknown = [s for s in data.states if s not in e.model.states]
        if unknown:
            raise InputError(f"data: states {unknown} are not states of model {e.model.name!r} "
                             f"(states: {list(e.model.states)}); rename the data columns with data.rename()")


def _time_grid(data, t):
    t0 = data_t0(data)
    if t is None:
        return np.linspace(t0, float(data.t[-1]), 200)
    t = np.asarray(t, dtype=float).ravel()
    if t.size < 2 or not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0) or t[0] < t0:
        raise InputError(f"t: expected at least 2 finite, strictly increasing times >= t0={t0:g}, got {t!r}")
    return t


def trajectories(data, *estimates, idata=None, t=None, alpha=0.05, ax=None, x0=None, history=None, var_name=None):
    """Observations with each estimate's fitted trajectory, its confidence band and the
    posterior predictive band.

    Parameters
    ----------
    data : Data
        Observations (one experiment); one panel per observed state.
    *estimates : Estimate
        Estimates of one model. Each is drawn with ``est.predict(t)``: its trajectory and
        the pointwise ``1 - alpha`` delta-method band.
    idata : arviz.InferenceData, optional
        When it has ``posterior_predictive[var_name]`` (dims ``(chain, draw, time,
        state)`` at ``data.t``), its ``1 - alpha`` equal-tailed band and median are drawn.
    t : array-like (n_times,), optional
        Times of the fitted trajectories; default 200 points from ``t0`` to the last observation.
    alpha : float, default 0.05
    ax : matplotlib Axes, optional
        Draw every state on this axes (markers and line styles tell the states apart);
        default: a new figure with one panel per observed state.
    x0 : dict, optional
        Initial state for estimates that did not estimate it; default: the first
        observation when every state is observed at ``t0``.
    history : History, numbers or callable, optional
        Delay models: the history used in the fit (see :meth:`odeinfer.Estimate.predict`).
    var_name : str, optional
        Posterior predictive variable; default ``"y_obs"`` (written by
        :func:`odeinfer.bayes.sample`) if present, else ``"y"``.

    Returns
    -------
    matplotlib.figure.Figure
        Per panel: one line for the data (markers only), one per estimate, one for the
        posterior predictive median; one filled band per estimate with a covariance and
        one for the posterior predictive. An estimate whose trajectory cannot be solved
        (e.g. it blows up) is left out with an :class:`~odeinfer.errors.OdeinferWarning`.
    """
    from odeinfer.diagnostics.intervals import as_estimates, source_labels

    data = single_data(data)
    estimates = as_estimates(list(estimates), "estimates")
    _check_states(estimates, data)
    alpha = check_alpha(alpha)
    tt = _time_grid(data, t)
    t0 = data_t0(data)
    if ax is None:
        fig, axes = new_figure(data.n_observed, 1, sharex=True)
        panels = {s: axes[i, 0] for i, s in enumerate(data.states)}
    else:
        fig = axes_figure(ax)
        panels = {s: ax for s in data.states}
    single = ax is not None
    markers = "osD^v<>px*"
    styles = ("-", "--", "-.", ":")
    for k, s in enumerate(data.states):
        a = panels[s]
        suffix = f" ({s})" if single else ""
        y = data.y[:, k]
        a.plot(data.t, y, linestyle="none", marker=markers[k % len(markers)] if single else "o", ms=4,
               color="black", label=f"data{suffix}")
        if not single:
            a.set_ylabel(s)
    labels = source_labels(estimates)
    for j, (e, lab) in enumerate(zip(estimates, labels)):
        try:
            pred = _predict(e, tt, data, x0, history, t0, alpha)
        except SolverError as exc:
            warnings.warn(f"{lab}: the trajectory could not be solved ({exc}); it is not drawn",
                          OdeinferWarning, stacklevel=2)
            continue
        color = COLORS[j % len(COLORS)]
        for k, s in enumerate(data.states):
            a = panels[s]
            i = pred.states.index(s)
            ls = styles[k % len(styles)] if single else "-"
            a.plot(pred.t, pred.y[:, i], color=color, linestyle=ls, lw=1.6,
                   label=f"{lab}{f' ({s})' if single else ''}")
            if np.isfinite(pred.se[:, i]).any():
                a.fill_between(pred.t, pred.lower[:, i], pred.upper[:, i], color=color, alpha=0.18, lw=0)
    if idata is not None and getattr(idata, "posterior_predictive", None) is not None:
        from odeinfer.diagnostics.ppc import predictive_draws

        rep = predictive_draws(idata, data, var_name)
        lo, med, hi = np.quantile(rep, [alpha / 2, 0.5, 1 - alpha / 2], axis=0)
        for k, s in enumerate(data.states):
            a = panels[s]
            a.fill_between(data.t, lo[:, k], hi[:, k], color=POSTERIOR_COLOR, alpha=0.15, lw=0)
            a.plot(data.t, med[:, k], color=POSTERIOR_COLOR, linestyle=":", lw=1.4,
                   label=f"posterior predictive{f' ({s})' if single else ''}")
    bottom = panels[data.states[-1]]
    bottom.set_xlabel("t")
    seen = set()
    for a in panels.values():
        if id(a) not in seen:
            seen.add(id(a))
            a.legend(fontsize="small", loc="best")
    title = f"{estimates[0].model.name}: data and fits" if estimates else "data"
    if data.name:
        title += f" ({data.name})"
    if single:
        panels[data.states[0]].set_title(title)
    else:
        fig.suptitle(title)
    return fig


def _predict(est, t, data, x0, history, t0, alpha=0.05):
    if est.model.delays:
        return est.predict(t, history=history, t0=t0, alpha=alpha)
    return est.predict(t, x0=initial_state(est, data, x0), t0=t0, alpha=alpha)


def residual_lines(est, data, *, x0=None, history=None) -> dict:
    """The numbers the residual plot draws, per observed state: ``(residuals, guide)``.

    ``residuals`` (n_times,) are ``y - y_hat(t)`` on the model's noise scale (``log y - log y_hat``
    for ``noise="log"``; NaN where not observed or not positive there), ``guide`` is
    ``2 sigma`` from ``est.sigma`` (estimated on the same scale by every estimator), or NaN
    when the estimate has no sigma for that state.

    Parameters
    ----------
    est : Estimate
    data : Data
    x0, history
        As in :func:`residuals`.

    Returns
    -------
    dict of str to (ndarray (n_times,), float)
    """
    from odeinfer.results import Estimate

    if not isinstance(est, Estimate):
        raise InputError(f"est: expected one Estimate, got {type(est).__name__}; for several estimates call "
                         "residuals once per estimate")
    data = single_data(data)
    _check_states([est], data)
    pred = _predict(est, data.t, data, x0, history, data_t0(data))
    log = est.model.observation.noise == "log"
    out = {}
    for k, s in enumerate(data.states):
        y = np.where(data.mask[:, k], data.y[:, k], np.nan)
        yhat = pred.y[:, pred.states.index(s)]
        if log:
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.log(np.where(y > 0, y, np.nan)) - np.log(np.where(yhat > 0, yhat, np.nan))
        else:
            r = y - yhat
        sd = est.sigma.get(s) if est.sigma else None
        guide = 2.0 * float(sd) if sd is not None and np.isfinite(sd) else float("nan")
        out[s] = (r, guide)
    return out


def residuals(est, data, *, x0=None, history=None):
    """Residuals ``y - y_hat(t)`` of one estimate per observed state (log scale for
    models with log-normal noise), against time.

    Parameters
    ----------
    est : Estimate
    data : Data
    x0 : dict, optional
        Initial state when ``est`` did not estimate it (see :func:`trajectories`).
    history : History, numbers or callable, optional
        Delay models: the history used in the fit (see :meth:`odeinfer.Estimate.predict`).

    Returns
    -------
    matplotlib.figure.Figure
        One panel per observed state with the residuals (markers), a zero line and, when
        ``est.sigma`` has the state, dashed lines at ``+-2 sigma`` (the noise sd on the same
        scale as the residuals: :func:`residual_lines` gives the numbers).
    """
    lines = residual_lines(est, data, x0=x0, history=history)
    data = single_data(data)
    log = est.model.observation.noise == "log"
    fig, axes = new_figure(data.n_observed, 1, sharex=True)
    for k, s in enumerate(data.states):
        a = axes[k, 0]
        r, guide = lines[s]
        a.plot(data.t, r, linestyle="none", marker="o", ms=4, color=COLORS[0], label="residual")
        a.axhline(0.0, color="black", lw=0.8)
        if np.isfinite(guide):
            for sign in (-1, 1):
                a.axhline(sign * guide, color="grey", lw=0.8, linestyle="--")
        a.set_ylabel(f"{'log ' if log else ''}residual {s}")
    axes[-1, 0].set_xlabel("t")
    fig.suptitle(f"{est.estimator} residuals ({est.model.name})")
    return fig
