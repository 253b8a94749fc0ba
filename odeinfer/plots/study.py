"""Monte Carlo study plots: estimates against the truth, interval coverage."""

from __future__ import annotations

import math

import numpy as np

from odeinfer.plots._common import COLORS, check_alpha, new_figure

__all__ = ["study"]


def study(result, truth=None, *, alpha=0.05):
    """Distribution of each estimator's estimates around the truth, and its Wald coverage.

    Parameters
    ----------
    result : odeinfer.studies.StudyResult
    truth : dict of str to float, optional
        True values by parameter; default: the study's ``truth`` column.
    alpha : float, default 0.05
        Coverage of ``1 - alpha`` Wald intervals.

    Returns
    -------
    matplotlib.figure.Figure
        One row per parameter: left, a box plot of the converged estimates per
        estimator with a horizontal line at the truth; right, coverage per estimator
        with ``+-2`` Monte Carlo standard-error bars and a line at ``1 - alpha``.
    """
    from odeinfer.errors import InputError
    from odeinfer.studies import StudyResult

    if not isinstance(result, StudyResult):
        raise InputError(f"result: expected an odeinfer.studies.StudyResult (from monte_carlo), "
                         f"got {type(result).__name__}")
    alpha = check_alpha(alpha)
    frame = result.frame
    params = list(dict.fromkeys(frame["param"]))
    if truth is not None:
        if not hasattr(truth, "items"):
            raise InputError(f"truth: expected a dict of parameter -> true value, got {type(truth).__name__}")
        unknown = [k for k in truth if k not in params]
        if unknown:
            raise InputError(f"truth: {unknown} are not parameters of the study (parameters: {params})")
        for k, v in truth.items():
            frame.loc[frame["param"] == k, "truth"] = float(v)
    summary = StudyResult(frame).summary(alpha=alpha)
    estimators = list(dict.fromkeys(frame["estimator"]))
    fig, axes = new_figure(len(params), 2, width=9.0, height=0.8 + 2.4 * len(params))
    for row, p in zip(axes, params):
        a, b = row
        sub = frame[frame["param"] == p]
        boxes, labels = [], []
        for est in estimators:
            g = sub[(sub["estimator"] == est) & sub["converged"].astype(bool)]
            v = g["estimate"].to_numpy(dtype=float)
            boxes.append(v[np.isfinite(v)])
            labels.append(est)
        a.boxplot(boxes, tick_labels=labels, showfliers=True)
        tv = sub["truth"].to_numpy(dtype=float)
        tv = tv[np.isfinite(tv)]
        if tv.size:
            a.axhline(float(np.mean(tv)), color="black", linestyle="--", lw=1.0, label="truth")
            a.legend(fontsize="small", loc="best")
        a.set_title(f"{p}: estimates", fontsize="medium", loc="left")
        a.tick_params(axis="x", labelrotation=20, labelsize="small")
        s = summary[summary["param"] == p].set_index("estimator")
        for j, est in enumerate(estimators):
            c = float(s.loc[est, "coverage"]) if est in s.index else math.nan
            e = float(s.loc[est, "coverage_mcse"]) if est in s.index else math.nan
            if np.isfinite(c):
                b.errorbar([j], [c], yerr=[[2 * e if np.isfinite(e) else 0.0]] * 2, marker="o",
                           color=COLORS[j % len(COLORS)], capsize=3)
        b.axhline(1 - alpha, color="black", linestyle="--", lw=1.0)
        b.set_xticks(range(len(estimators)), estimators, rotation=20, fontsize="small")
        b.set_xlim(-0.5, len(estimators) - 0.5)
        b.set_ylim(0, 1.05)
        b.set_title(f"{p}: coverage of {100 * (1 - alpha):g}% intervals", fontsize="medium", loc="left")
    fig.suptitle(f"Monte Carlo study ({result.n_rep} replications)")
    return fig
