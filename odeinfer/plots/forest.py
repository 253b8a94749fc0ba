"""Forest plot: every estimator's interval next to the posterior's, per parameter."""

from __future__ import annotations

import numpy as np

from odeinfer.plots._common import COLORS, POSTERIOR_COLOR, check_alpha, new_figure

__all__ = ["forest"]


def forest(estimates, idata=None, alpha=0.05, *, methods=("wald",), names=None, table=None):
    """Intervals of every estimator and the posterior, one panel per parameter.

    Parameters
    ----------
    estimates : Estimate or sequence of Estimate
        Estimates of one model.
    idata : arviz.InferenceData, optional
        Adds the posterior's equal-tailed and HDI intervals (marker at the posterior mean).
    alpha : float, default 0.05
    methods : sequence of {"wald", "profile"}, default ("wald",)
    names : sequence of str, optional
        Parameters to show (default: all in the table).
    table : pandas.DataFrame, optional
        A precomputed :func:`~odeinfer.compare_intervals` table (then ``estimates``
        may be None).

    Returns
    -------
    matplotlib.figure.Figure
        One panel per parameter; in each, one line (interval) plus one marker line
        (point) per row of the table with finite bounds.
    """
    from odeinfer.diagnostics.intervals import compare_intervals
    from odeinfer.errors import InputError

    alpha = check_alpha(alpha)
    if table is None:
        table = compare_intervals(estimates, idata, alpha=alpha, methods=methods)
    params = list(dict.fromkeys(table["param"]))
    if names is not None:
        unknown = [n for n in names if n not in params]
        if unknown:
            raise InputError(f"names: {unknown} are not in the comparison (parameters: {params})")
        params = list(names)
    sources = list(dict.fromkeys(s for s in table["source"] if s != "posterior"))
    color = {s: COLORS[i % len(COLORS)] for i, s in enumerate(sources)}
    color["posterior"] = POSTERIOR_COLOR
    fig, axes = new_figure(len(params), 1, width=6.4, height=0.6 + 0.35 * len(params) * max(
        3, len(table) / max(len(params), 1)))
    for a, name in zip(axes[:, 0], params):
        rows = table[table["param"] == name].reset_index(drop=True)
        ticks, labels = [], []
        for i, r in rows.iterrows():
            yv = len(rows) - 1 - i
            ticks.append(yv)
            labels.append(f"{r['source']} ({r['method']})")
            if not (np.isfinite(r["lower"]) and np.isfinite(r["upper"])):
                continue
            ls = "--" if r["method"] == "hdi" else "-"
            a.plot([r["lower"], r["upper"]], [yv, yv], color=color[r["source"]], lw=2.2, linestyle=ls,
                   solid_capstyle="butt")
            a.plot([r["estimate"]], [yv], marker="o" if r["source"] != "posterior" else "s",
                   color=color[r["source"]], linestyle="none")
        a.set_yticks(ticks, labels, fontsize="small")
        a.set_ylim(-0.7, len(rows) - 0.3)
        a.set_title(name, fontsize="medium", loc="left")
    fig.suptitle(f"{100 * (1 - alpha):g}% intervals")
    return fig
