"""The waterfall plot of a multistart fit: every start's final objective, best first."""

from __future__ import annotations

import math

import numpy as np

from odeinfer.errors import InputError
from odeinfer.plots._common import COLORS, axes_figure, new_figure

__all__ = ["waterfall"]


def _finite_number(value, argument):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not math.isfinite(value):
        raise InputError(f"{argument}: expected a finite number, got {value!r}")
    return float(value)


def waterfall(fit, *, reference=None, within=0.1, ax=None):
    """Every start's final objective of a multistart likelihood fit, sorted, best first (the "waterfall"
    of multistart optimisation). A plateau of starts at the best value says that optimum was reached
    repeatedly; each step is another local optimum; a best value reached by one start alone is a warning
    that a better one may exist.

    The y axis is the objective minus the best, on a symmetric log scale (linear within ``within`` of the
    best, shaded). Converged starts are filled, starts that stopped otherwise (iteration budget, ...)
    are open; starts without a finite objective (failed) are counted in the title.

    Parameters
    ----------
    fit : Estimate
        A fit from several starts (``oi.Embedding(starts=n).fit(...)`` of a likelihood problem): its
        ``extras["starts"]`` table is read (the negative log-posterior of a MAP fit, else the NLL).
    reference : float, optional
        An objective value to mark, e.g. the NLL at a problem's published parameters
        (:meth:`PetabProblem.nll_nominal <odeinfer.petab.PetabProblem.nll_nominal>`).
    within : float, default 0.1
        Starts within this of the best count as reaching it.
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    starts = (getattr(fit, "extras", None) or {}).get("starts")
    if not isinstance(starts, dict) or "nll" not in starts:
        raise InputError("fit: expected a multistart likelihood fit (oi.Embedding(starts=n).fit(...) of a model with "
                         f"observables or a FitProblem), whose extras hold the table of its starts; got "
                         f"{type(fit).__name__} without one")
    within = _finite_number(within, "within")
    if within <= 0:
        raise InputError(f"within: expected a positive number, got {within!r}")
    reference = None if reference is None else _finite_number(reference, "reference")
    key = "objective" if "objective" in starts else "nll"
    f = np.asarray(starts[key], dtype=float)
    ok = np.isfinite(f)
    if not ok.any():
        raise InputError(f"fit: none of its {f.size} starts has a finite objective; nothing to plot")
    converged = np.array([s == "converged" for s in starts["status"]], dtype=bool)
    order = np.argsort(f[ok], kind="stable")
    d = f[ok][order] - f[ok][order[0]]
    rank = np.arange(1, d.size + 1)
    conv = converged[ok][order]
    if ax is None:
        fig, axes = new_figure(1, 1, height=3.4)
        ax = axes[0, 0]
    else:
        fig = axes_figure(ax)
    color = COLORS[0]
    ax.axhspan(0.0, within, color=color, alpha=0.12, lw=0)
    ax.plot(rank, d, color=color, lw=0.8, alpha=0.6)
    ax.plot(rank[conv], d[conv], "o", ms=4, color=color, label="converged")
    ax.plot(rank[~conv], d[~conv], "o", ms=4, mfc="none", color=color, label="stopped otherwise")
    if reference is not None:
        ax.axhline(reference - f[ok][order[0]], color=COLORS[3], lw=1.2, ls="--",
                   label=f"reference {reference:.6g}")
    ax.set_yscale("symlog", linthresh=within)
    below = 0.0 if reference is None else min(0.0, reference - f[ok][order[0]])
    ax.set_ylim(bottom=below - 0.5 * within)
    ax.set_xlabel("start, sorted by its final objective")
    ax.set_ylabel(("negative log-posterior" if key == "objective" else "NLL") + " - best")
    ax.legend(fontsize="small", loc="upper left")
    n_within = int(np.sum(d <= within))
    failed = int(f.size - ok.sum())
    ax.set_title(f"best {f[ok][order[0]]:.6g}: {n_within} of {f.size} starts within {within:g}"
                 + (f"; {failed} failed" if failed else ""), fontsize="medium")
    return fig
