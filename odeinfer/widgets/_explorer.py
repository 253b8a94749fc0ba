"""``Explorer``: sliders for parameters and initial states that re-simulate and redraw the trajectory.

The work is split so that it can be tested and timed without a browser:
:class:`TrajectorySimulator` maps values to arrays with a solver built once
(:func:`odeinfer.bind`), :class:`Explorer` owns the sliders and a matplotlib
figure whose lines it updates in place (``set_data``) and shows as a PNG in an
``ipywidgets.Image`` (no ipympl needed; the image is part of the saved widget state, so
it also shows in exported notebooks).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from odeinfer.errors import InputError
from odeinfer.solve.abi import Info
from odeinfer.widgets._common import check_data, check_model, message_html

__all__ = ["TrajectorySimulator", "Explorer", "start_values"]


def _float(argument, v):
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{argument}: expected a finite number, got {v!r}") from None
    if not np.isfinite(v):
        raise InputError(f"{argument}: expected a finite number, got {v!r}")
    return v


def start_values(model, data, start=None, x0=None):
    """Parameter and initial-state values to start from, as two dicts.

    Parameters (with the observables' parameters, for a model with observables) come from
    ``start`` (an Estimate: its values and fixed values; or a dict by name), default 1.0 for
    any not given. Initial states come from ``x0`` (dict or array), else ``start``'s
    ``"x0[state]"`` entries, else, for a likelihood fit, its problem's initial state of the
    experiment named like ``data`` (or its only one) at the estimate, else the data's first
    row when it is observed at ``t0``.
    """
    from odeinfer.results import Estimate

    if start is None:
        given = {}
    elif isinstance(start, Estimate):
        if start.model.fingerprint != model.fingerprint:
            raise InputError(f"start: the estimate is of model {start.model.name!r}, not of {model.name!r}")
        given = {**{k: v for k, v in start.fixed.items()}, **dict(zip(start.names, start.values))}
    elif isinstance(start, Mapping):
        given = dict(start)
        unknown = [k for k in given if k not in model.full_params and k not in model.states
                   and not (k.startswith("x0[") and k[3:-1] in model.states)]
        if unknown:
            raise InputError(f"start: unknown names {unknown}; expected parameters {list(model.full_params)} "
                             f"and initial states as 'x0[state]' for states {list(model.states)}")
    else:
        raise InputError(f"start: expected an Estimate or a dict of values by name, got {type(start).__name__}")
    params = {p: _float(f"start[{p!r}]", given.get(p, 1.0)) for p in model.full_params}
    init = {}
    if x0 is not None:
        if isinstance(x0, Mapping):
            unknown = [k for k in x0 if k not in model.states]
            if unknown:
                raise InputError(f"x0: unknown states {unknown}; states are {list(model.states)}")
            init = {s: _float(f"x0[{s!r}]", v) for s, v in x0.items()}
        else:
            arr = np.asarray(x0, dtype=float)
            if arr.shape != (model.n_states,):
                raise InputError(f"x0: expected a dict or an array of shape ({model.n_states},) for states "
                                 f"{list(model.states)}, got shape {arr.shape}")
            init = {s: _float(f"x0[{s!r}]", v) for s, v in zip(model.states, arr)}
    first = data.y[0] if data.t[0] == data.t0 else np.full(data.n_observed, np.nan)
    from_fit = _fit_x0(start, data) if isinstance(start, Estimate) else {}
    for s in model.states:
        if s in init:
            continue
        key = f"x0[{s}]"
        if key in given:
            init[s] = _float(f"start[{key!r}]", given[key])
        elif s in from_fit:
            init[s] = _float(f"start[{key!r}]", from_fit[s])
        elif s in data.states and np.isfinite(first[data.states.index(s)]):
            init[s] = float(first[data.states.index(s)])
        else:
            raise InputError(f"x0: no initial value for state {s!r} (not estimated in start, not observed at "
                             f"t0 = {data.t0:g}); pass x0={{{s!r}: value, ...}}")
    return params, {s: init[s] for s in model.states}


def _fit_x0(fit, data):
    """Initial states of a likelihood fit's experiment (named like ``data``, or its only one) at the
    estimate, ``{state: value}``; empty for other estimates and pre-equilibrated experiments."""
    obj = fit._objective
    if obj is None:
        return {}
    plans = {p.name: p for p in obj.problem.plans}
    plan = plans.get(data.name) or (next(iter(plans.values())) if len(plans) == 1 else None)
    if plan is None or plan.preequilibrate:
        return {}
    m = obj.problem.model
    values = {**dict(fit.fixed), **dict(zip(fit.names, fit.values))}
    subs = {sym: values[n] for n, sym in obj.problem.symbols.items() if n in values}
    off = m.n_params + len(m.obs_params)
    out = {}
    for k, s in enumerate(m.states):
        v = plan.exprs[off + k].xreplace(subs)
        if v.is_Number:
            out[s] = float(v)
    return out


class TrajectorySimulator:
    """Re-simulates a model on a fixed time grid; the solver is built once.

    Parameters
    ----------
    model : Model
    t : array-like (n_times,)
        Output times.
    t0 : float
        Time of the initial state.
    solver : Dopri5 or Rodas, optional
        Default ``oi.Dopri5()`` (the ``view`` role's).

    Calling ``sim(params, x0)`` with arrays (n_params,), (n_states,) returns
    ``(y, status)``: a new array (n_times, n_states) (rows after a failure are NaN)
    and the solver's status code (0 = success).
    """

    def __init__(self, model, t, t0, *, solver=None):
        from odeinfer.solve import Problem, bind

        self.model = model
        self.solver = bind(Problem(model, t, t0=t0), solver=solver, role="view")
        self.t = np.array(self.solver.t)
        self._p = np.empty(model.n_params)
        self._x0 = np.empty(model.n_states)

    def __call__(self, params, x0):
        self._p[:] = params
        self._x0[:] = x0
        y, _, status = self.solver(self._p, self._x0)
        return np.array(y), int(status)

    def t_reached(self) -> float:
        return float(self.solver.info[Info.T_REACHED])


def _slider_range(v, se=None):
    if se is not None and np.isfinite(se) and se > 0:
        lo, hi = v - 6 * se, v + 6 * se
        if v > 0:
            lo = max(lo, 0.0)
        lo, hi = min(lo, v - abs(v) * 0.5), max(hi, v + abs(v) * 0.5)
        return (lo, hi) if hi > lo else (v - 1.0, v + 1.0)
    if v > 0:
        return 0.0, 3.0 * v
    if v < 0:
        return 3.0 * v, 0.0
    return -1.0, 1.0


class Explorer:
    """Sliders for every parameter and initial state; moving one re-simulates and redraws.

    Parameters
    ----------
    model : Model
        A model with observables draws its observables (computed from the simulated states at
        the sliders' values, observable parameters included) instead of its states.
    data : Data
        One data set (its columns are states of ``model``, or its observables); plotted as markers.
    start : Estimate or dict, optional
        Initial slider values (see :func:`start_values`); an Estimate's standard
        errors set the slider ranges (value +- 6 se, at least +-50 %).
    x0 : dict or array-like (n_states,), optional
        Initial state, if ``start`` does not give it and it is not observed at ``t0``.
    t : array-like, optional
        Times of the drawn trajectory; default 200 points from ``data.t0`` to the last
        data time.
    ranges : dict, optional
        Slider ranges ``{name: (min, max)}`` (names as in :attr:`names`) overriding the defaults.
    solver : Dopri5 or Rodas, optional
        Default ``oi.Dopri5()`` (the ``view`` role's).
    dpi : int, default 72
        Resolution of the drawn PNG.
    continuous_update : bool, default True
        Redraw while a slider is dragged (set False on slow models).

    Attributes
    ----------
    names : list of str
        Parameter names (the observables' parameters after the model's), then ``"x0[state]"``.
    curves : list of str
        What is drawn: the states, or the observables of a model with observables.
    sliders : dict of str to ipywidgets.FloatSlider
    widget : ipywidgets.VBox
        What a notebook shows (the object itself displays as this widget).
    last : tuple (y, status)
        The last simulated trajectory (states; :meth:`drawn` gives the curves).

    Examples
    --------
    >>> ex = oi.widgets.Explorer(model, data, start=est)   # doctest: +SKIP
    >>> ex                                                   # doctest: +SKIP
    """

    def __init__(self, model, data, start=None, *, x0=None, t=None, ranges=None, solver=None, dpi=72,
                 continuous_update=True):
        check_model(model)
        check_data(data, model)
        if t is None:
            t = np.linspace(data.t0, data.t[-1], 200)
        params, init = start_values(model, data, start, x0)
        self.model, self.data, self.dpi = model, data, dpi
        self.sim = TrajectorySimulator(model, t, data.t0, solver=solver)
        self.names = list(model.full_params) + [f"x0[{s}]" for s in model.states]
        self.curves = list(model.observable_names or model.states)
        if model.observables:
            from odeinfer.likelihood.observe import ObservableFunctions

            self._h = ObservableFunctions(model)
        values = {**params, **{f"x0[{s}]": v for s, v in init.items()}}
        se = {}
        from odeinfer.results import Estimate

        if isinstance(start, Estimate):
            se = dict(zip(start.names, start.bse.to_numpy()))
        ranges = dict(ranges or {})
        unknown = [k for k in ranges if k not in self.names]
        if unknown:
            raise InputError(f"ranges: unknown names {unknown}; expected some of {self.names}")
        self._ranges = {}
        for n in self.names:
            lo, hi = ranges.get(n, _slider_range(values[n], se.get(n)))
            lo, hi = _float(f"ranges[{n!r}][0]", lo), _float(f"ranges[{n!r}][1]", hi)
            if not lo < hi:
                raise InputError(f"ranges[{n!r}]: expected min < max, got ({lo}, {hi})")
            self._ranges[n] = (lo, hi)
        self._values = values
        self._build_figure()
        self.last = self.compute()
        self._draw_lines(*self.last)
        self._build_widgets(continuous_update)

    # logic (no widgets) ----------------------------------------------------------------------
    def values(self) -> dict:
        """Current values by name (parameters, then ``x0[state]``)."""
        return dict(self._values)

    def compute(self, values=None):
        """Simulate at ``values`` (default: current). Returns ``(y, status)``; y is (n_times, n_states)."""
        v = self._values if values is None else {**self._values, **values}
        p = [v[n] for n in self.model.params]
        x = [v[f"x0[{s}]"] for s in self.model.states]
        return self.sim(p, x)

    def drawn(self, y=None):
        """The drawn curves (n_times, n_curves) of states ``y`` (default: the last trajectory): the
        states themselves, or the observables ``h(t, y, p, q)`` at the current values."""
        y = self.last[0] if y is None else y
        if not self.model.observables:
            return y
        v = self._values
        p = np.array([v[n] for n in self.model.params], float)
        q = np.array([v[n] for n in self.model.obs_params], float)
        with np.errstate(all="ignore"):
            return np.column_stack([self._h.h(k, self.sim.t, y, p, q)[0] for k in range(len(self.curves))])

    def set_values(self, **values):
        """Set values by name (``alpha=0.5``; initial states as ``**{"x0[prey]": 30}``), re-simulate and
        redraw, as moving the sliders does. Returns ``(y, status)``."""
        unknown = [k for k in values if k not in self.names]
        if unknown:
            raise InputError(f"unknown names {unknown}; expected some of {self.names}")
        self._values.update({k: _float(k, v) for k, v in values.items()})
        for k, v in values.items():
            s = self.sliders[k]
            if v < s.min or v > s.max:
                s.min, s.max = min(s.min, v), max(s.max, v)
            with self._quiet():
                s.value = v
        return self.update()

    def update(self):
        """Re-simulate at the current values and redraw (the slider callback)."""
        self.last = self.compute()
        self._draw_lines(*self.last)
        self.image.value = self.render_png()
        self.status.value = self._status_text(self.last[1])
        return self.last

    # drawing ------------------------------------------------------------------------------
    def _build_figure(self):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.fig = Figure(figsize=(7.0, 3.6), dpi=self.dpi)
        FigureCanvasAgg(self.fig)
        self.fig.subplots_adjust(left=0.09, right=0.98, bottom=0.13, top=0.97)
        ax = self.ax = self.fig.add_subplot()
        colours = [f"C{i % 10}" for i in range(len(self.curves))]
        self.lines = {}
        for s, c in zip(self.curves, colours):
            observed = s in self.data.states
            if observed:
                j = self.data.states.index(s)
                ax.plot(self.data.t, self.data.y[:, j], "o", color=c, ms=4, alpha=0.8, label=f"{s} (data)")
            # animated lines are left out of the background and blitted on top of it
            (self.lines[s],) = ax.plot([], [], "-" if observed else "--", color=c, lw=1.6, label=s, animated=True)
        ax.set_xlabel("t")
        ax.set_xlim(self.sim.t[0], self.sim.t[-1])
        ax.legend(loc="upper right", fontsize="small", ncols=2)
        obs = self.data.y[np.isfinite(self.data.y)]
        self._data_lim = (float(obs.min()), float(obs.max())) if obs.size else (0.0, 1.0)
        self._background = None

    def _target_ylim(self, y):
        lo, hi = self._data_lim
        fin = y[np.isfinite(y)]
        if fin.size:
            span = max(hi - lo, 1e-12)
            lo = min(lo, max(float(fin.min()), lo - 5 * span))  # keep the data visible when the fit explodes
            hi = max(hi, min(float(fin.max()), hi + 5 * span))
        pad = 0.05 * max(hi - lo, 1e-12)
        return lo - pad, hi + pad

    def _draw_lines(self, y, status):
        """Update the lines in place (``set_data``) and blit them on the cached background; the
        axes are redrawn only when the y-range must change by more than 20 %."""
        t = self.sim.t
        y = self.drawn(y)
        for i, s in enumerate(self.curves):
            self.lines[s].set_data(t, y[:, i])
        lo, hi = self._target_ylim(y)
        cur_lo, cur_hi = self.ax.get_ylim()
        span = cur_hi - cur_lo
        if (self._background is None or lo < cur_lo or hi > cur_hi
                or (cur_hi - cur_lo) - (hi - lo) > 0.2 * span):
            self.ax.set_ylim(lo, hi)
            self.fig.canvas.draw()
            self._background = self.fig.canvas.copy_from_bbox(self.fig.bbox)
        else:
            self.fig.canvas.restore_region(self._background)
        for line in self.lines.values():
            self.ax.draw_artist(line)

    def render_png(self) -> bytes:
        """The current picture (background plus lines) as PNG bytes."""
        import io

        from PIL import Image

        buf = io.BytesIO()
        rgba = np.asarray(self.fig.canvas.buffer_rgba())
        Image.fromarray(rgba).save(buf, format="png", compress_level=1)
        return buf.getvalue()

    def _status_text(self, status):
        if status == 0:
            return message_html("solver: ok")
        from odeinfer.solve.abi import status_message

        return message_html("solver failed: " + status_message(status, t_reached=self.sim.t_reached(),
                                                             max_steps=self.sim.solver.max_steps), "error")

    # widgets ------------------------------------------------------------------------------
    def _build_widgets(self, continuous_update):
        import ipywidgets as w

        self.sliders = {}
        for n in self.names:
            lo, hi = self._ranges[n]
            v = min(max(self._values[n], lo), hi)
            s = w.FloatSlider(value=v, min=lo, max=hi, step=(hi - lo) / 400, description=n,
                              readout_format=".4g", continuous_update=continuous_update,
                              style={"description_width": "initial"}, layout=w.Layout(width="95%"))
            s.observe(self._on_slider, names="value")
            self.sliders[n] = s
        self._silent = False
        self.image = w.Image(value=self.render_png(), format="png")
        self.status = w.HTML(self._status_text(self.last[1]))
        reset = w.Button(description="reset", tooltip="back to the start values")
        self._start = dict(self._values)
        reset.on_click(lambda _: self.set_values(**self._start))
        half = (len(self.names) + 1) // 2
        cols = w.HBox([w.VBox([self.sliders[n] for n in self.names[:half]], layout=w.Layout(width="50%")),
                       w.VBox([self.sliders[n] for n in self.names[half:]], layout=w.Layout(width="50%"))])
        self.widget = w.VBox([self.image, cols, w.HBox([reset, self.status])])

    def _quiet(self):
        explorer = self

        class _Quiet:
            def __enter__(self):
                explorer._silent = True

            def __exit__(self, *exc):
                explorer._silent = False

        return _Quiet()

    def _on_slider(self, change):
        name = change["owner"].description
        self._values[name] = float(change["new"])
        if not self._silent:
            self.update()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self):
        return f"<Explorer of {self.model.name!r}: {', '.join(f'{k}={v:.4g}' for k, v in self._values.items())}>"
