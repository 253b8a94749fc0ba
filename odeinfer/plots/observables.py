"""Data and fitted observables of a likelihood fit, per experiment (condition), with bands."""

from __future__ import annotations

import numpy as np

from odeinfer.errors import InputError
from odeinfer.plots._common import COLORS, check_alpha, new_figure

__all__ = ["observables"]


def observables(fit, *, experiments=None, t=None, alpha=0.05, log_scale=None):
    """One panel per observable: every experiment's measurements and fitted observable with its
    pointwise ``1 - alpha`` delta-method band (on the observable's noise scale).

    Parameters
    ----------
    fit : Estimate
        A likelihood fit (a model with observables or a FitProblem, fitted by :class:`~odeinfer.Embedding`).
    experiments : list of str, optional
        Which experiments (default all); one colour each.
    t : array-like, optional
        Times of the fitted curves; default 200 points from each experiment's start to its last
        measurement.
    alpha : float, default 0.05
    log_scale : bool, optional
        Log y axes; default: for observables with log or log10 noise.

    Returns
    -------
    matplotlib.figure.Figure
    """
    obj = getattr(fit, "_objective", None)
    if obj is None:
        raise InputError("fit: expected a likelihood fit (an Estimate from oi.Embedding().fit of a model with "
                         "observables or a FitProblem, in this session); for state trajectories use "
                         "oi.plots.trajectories(data, fit)")
    alpha = check_alpha(alpha)
    plans = {p.name: p for p in obj.problem.plans}
    names = list(plans) if experiments is None else list(experiments)
    unknown = [n for n in names if n not in plans]
    if unknown:
        raise InputError(f"experiments: {unknown} are not experiments of the fit {list(plans)}")
    model = obj.problem.model
    n_o = len(model.observables)
    fig, axes = new_figure(n_o, 1, sharex=True)
    for j, name in enumerate(names):
        plan = plans[name]
        color = COLORS[j % len(COLORS)]
        t_end = plan.t_last
        tt = np.linspace(plan.t0, t_end, 200) if t is None else np.asarray(t, float)
        pred = fit.predict(tt, experiment=name, alpha=alpha)
        for k, o in enumerate(model.observables):
            a = axes[k, 0]
            rows = plan.obs_rows == k
            if rows.any():
                a.plot(plan.t_rows[rows], plan.y_rows[rows], linestyle="none", marker="o", ms=4, color=color,
                       alpha=0.8, label=f"{name}: data")
            a.plot(pred.t, pred.y[:, k], color=color, lw=1.6, label=f"{name}: fit")
            if np.isfinite(pred.se[:, k]).any():
                a.fill_between(pred.t, pred.lower[:, k], pred.upper[:, k], color=color, alpha=0.18, lw=0)
    for k, o in enumerate(model.observables):
        a = axes[k, 0]
        a.set_ylabel(o.name)
        if (o.noise.scale != "lin") if log_scale is None else log_scale:
            a.set_yscale("log")
        a.legend(fontsize="small", loc="best")
    axes[-1, 0].set_xlabel("t")
    fig.suptitle(f"{model.name}: data and fitted observables ({int(round(100 * (1 - alpha)))}% bands)")
    return fig
