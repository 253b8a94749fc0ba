"""Shared helpers of the plots: figure creation, argument checks, initial states."""

from __future__ import annotations

import numpy as np

from odeinfer.errors import InputError

__all__ = ["new_figure", "axes_figure", "check_level", "check_alpha", "single_data", "initial_state", "COLORS"]

#: Colours of the estimators, in order (matplotlib's tab10 without the posterior's grey).
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
POSTERIOR_COLOR = "#555555"


def new_figure(nrows=1, ncols=1, *, width=6.4, height=None, sharex=False, squeeze=False):
    """A new :class:`matplotlib.figure.Figure` (no pyplot state) and its axes array (nrows, ncols)."""
    from matplotlib.figure import Figure

    height = 2.6 * nrows + 0.6 if height is None else height
    _show_in_ipython()
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=sharex, squeeze=squeeze)
    return fig, axes


def _show_in_ipython():
    """Let Jupyter display our pyplot-free figures as PNG (pyplot's inline backend would
    register this only once pyplot is imported)."""
    import sys

    if "IPython" not in sys.modules:
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return
    from matplotlib.figure import Figure

    formatter = shell.display_formatter.formatters["image/png"]
    if Figure not in formatter.type_printers:
        import base64

        from odeinfer.plots.export import to_png_base64

        formatter.for_type(Figure, lambda fig: base64.b64decode(to_png_base64(fig)))


def axes_figure(ax, argument="ax"):
    """The figure of a user-given axes, or a typed error."""
    from matplotlib.axes import Axes

    if not isinstance(ax, Axes):
        raise InputError(f"{argument}: expected a matplotlib Axes (e.g. fig.add_subplot()), got {type(ax).__name__}")
    return ax.figure


def check_alpha(alpha, argument="alpha"):
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise InputError(f"{argument}: expected a number in (0, 1) (1 - the interval level), got {alpha!r}")
    return float(alpha)


def check_level(level, argument="level"):
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise InputError(f"{argument}: expected a probability in (0, 1) such as 0.95, got {level!r}")
    return float(level)


def single_data(data, argument="data"):
    """A :class:`~odeinfer.Data` (an Experiments of one experiment is unwrapped)."""
    from odeinfer.data import Data, Experiments

    if isinstance(data, Experiments):
        if len(data) != 1:
            raise InputError(f"{argument}: plots show one experiment at a time; got Experiments with {len(data)} "
                             "experiments; pass data[name] (and x0 of that experiment)")
        data = data[0]
    if not isinstance(data, Data):
        raise InputError(f"{argument}: expected an odeinfer Data (e.g. oi.Data.from_frame(...)), "
                         f"got {type(data).__name__}")
    return data


def data_t0(data):
    return float(data.t0) if data.t0 is not None else float(data.t[0])


def initial_state(est, data, x0=None):
    """``x0`` to pass to ``est.predict``: None when the estimate holds every initial state,
    the user's ``x0``, else the first observation when ``data`` observes every state at ``t0``.
    """
    model = est.model
    if x0 is not None:
        return x0
    have = set(est.names) | set(est.fixed)
    if all(f"x0[{s}]" in have for s in model.states):
        return None
    t0 = data_t0(data)
    if data.t[0] == t0 and all(s in data.states for s in model.states):
        row = {s: float(data.y[0, data.states.index(s)]) for s in model.states}
        if all(np.isfinite(v) for v in row.values()):
            return row
    missing = [s for s in model.states if f"x0[{s}]" not in have]
    raise InputError(
        f"x0: the {est.estimator} estimate does not contain the initial state of {missing} and the data do not "
        f"observe every state at t0={t0:g}; pass x0={{state: value}} (e.g. the smoothed data at t0)"
    )
