"""A fit problem: a model with observables, experiments with their conditions, and the table of
parameters (scales, bounds, fixed values). :class:`FitProblem` validates every name and number
once and lays each experiment out as a plan the :class:`~odeinfer.likelihood.Objective` runs."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import sympy as sp

from odeinfer.data.conditions import Condition, Input
from odeinfer.errors import DataError, InputError
from odeinfer.likelihood.events import check_events
from odeinfer.likelihood.parameters import Param
from odeinfer.model.trace import T_SYMBOL, symbols_for

__all__ = ["FitProblem"]

_IDENT = re.compile(r"[A-Za-z_]\w*")


def _names_in(text):
    from odeinfer.model.equations import CONSTANTS, FUNCTIONS

    if not isinstance(text, str):
        return []
    return [w for w in _IDENT.findall(text) if w not in FUNCTIONS and w not in CONSTANTS and w != "t"]


@dataclass
class Plan:
    """One experiment, laid out for the objective (see :class:`FitProblem`)."""

    name: str
    t0: float
    t_rows: np.ndarray       # (n_rows,) measurement times
    obs_rows: np.ndarray     # (n_rows,) observable index
    y_rows: np.ndarray       # (n_rows,) measured values
    exprs: tuple             # sympy, the mapped vector v(theta): p | q | x0 | doses | p_pre | x0_pre
    keep_x0: np.ndarray      # (n_states,) bool: initial states set by the condition after pre-equilibration
    doses: tuple             # Dose values (time, state, amount index)
    inputs: dict             # model-parameter index -> Input
    preequilibrate: bool

    @property
    def t_last(self) -> float:
        """The last finite measurement time (``t0`` without any): where a plot of the trajectory ends
        (rows at ``t = inf`` are at the steady state)."""
        finite = self.t_rows[np.isfinite(self.t_rows)]
        return float(finite.max()) if finite.size else self.t0


class FitProblem:
    """What is fitted: a model with observables, experiments and their conditions, parameters.

    Parameters
    ----------
    model : Model
        With observables (:meth:`Model.observe`).
    data : Data or Experiments
        Columns are observable names. ``Experiments(..., conditions=...)`` carries each
        experiment's :class:`~odeinfer.Condition`.
    parameters : dict, optional
        ``{name: oi.Param(...) | number}`` for every parameter of the problem (a number: held
        fixed at that value). The problem's parameters are the model's (right-hand side and
        observables) not overridden in every experiment, plus the names used by the
        conditions' expressions. Default: all estimated on the linear scale, unbounded, with no
        nominal value (then a fit needs ``start=``).
    x0 : dict, optional
        Default initial states ``{state: number | "expression"}`` of every experiment (a
        condition's ``x0`` overrides them).
    events : list of Event, optional
        Events whose triggers depend on the states (:class:`~odeinfer.Event`), in every experiment;
        not with pre-equilibration or measurements at ``t = inf``.

    Attributes
    ----------
    names : tuple of str
        Every parameter of the problem, in order.
    params : dict of str to Param
    estimated : tuple of str
        The estimated ones, in order (the optimiser's coordinates, on their scales).
    plans : list of Plan
    """

    def __init__(self, model, data, parameters=None, *, x0=None, events=None):
        from odeinfer.data import Data, Experiments
        from odeinfer.model import Model

        if not isinstance(model, Model):
            raise InputError(f"model: expected an odeinfer Model, got {type(model).__name__}")
        if not model.observables:
            raise InputError(
                f"model: {model.name!r} has no observables; declare what is measured with "
                "model.observe({'name': 'expression'}, noise=oi.Normal(sigma=...)), e.g. "
                f"model.observe({{{model.states[0]!r}: {model.states[0]!r}}}, noise=oi.Normal(sigma='sd'), params=['sd'])")
        if model.delays:
            raise InputError("model: delay models are not supported by FitProblem yet; use AdjointDDE")
        if isinstance(data, Data):
            data = Experiments([data])
        if not isinstance(data, Experiments):
            raise InputError(f"data: expected Data or Experiments, got {type(data).__name__}")
        self.model, self.experiments = model, data
        x0 = _check_x0("x0", x0 or {}, model)
        self.x0_default = x0  # the default initial states of every experiment (as given)
        conds = [data.condition(n) for n in data.names]
        for n, c in zip(data.names, conds):
            self._check_condition(n, c)
        # --- the problem's parameters -------------------------------------------------------
        full = model.full_params
        needed = []
        for c in conds:
            pre = {} if c.preequilibrate is None else {p: 0 for p in full if p not in c.preequilibrate.params
                                                      and p in model.params}
            for name in full:
                if (name not in c.params or name in pre) and name not in needed:
                    needed.append(name)
        texts = [v for c in conds for v in _texts(c)] + [v for v in x0.values() if isinstance(v, str)]
        for text in texts:
            for w in _names_in(text):
                if w not in needed:
                    needed.append(w)
        if parameters is None:
            params = {n: Param() for n in needed}
        else:
            params = _check_parameters(parameters, needed)
        self.params = params
        self.names = tuple(params)
        self.estimated = tuple(n for n, p in params.items() if p.estimate)
        self.symbols = dict(zip(self.names, symbols_for(self.names)))
        self.plans = [self._plan(n, d, c, x0) for n, d, c in zip(data.names, data, conds)]
        self.solve_model, self.rates = _with_linear_inputs(model, conds)
        self.events = check_events(events, model)
        if self.events:
            self._check_events(data)

    def with_measurements(self, values):
        """A copy of this problem measuring ``values`` instead of the data (the same experiments,
        conditions, times, observables and parameters): ``values[e]`` has one value per row of
        ``plans[e]`` (the data's observed cells, row by row). Used by the parametric bootstrap."""
        import copy
        from dataclasses import replace

        from odeinfer.data import Data, Experiments

        out = copy.copy(self)
        out.plans = [replace(p, y_rows=np.array(v, float)) for p, v in zip(self.plans, values)]
        datas = []
        for d, v in zip(self.experiments, values):
            a, k = np.nonzero(np.asarray(d.mask))
            y = np.full(np.shape(d.y), np.nan)
            y[a, k] = v
            datas.append(Data(d.t, y, d.states, t0=d.t0, name=d.name, replicates=d.replicates,
                              steady_state=d.steady_state))
        out.experiments = Experiments(datas, names=list(self.experiments.names),
                                      conditions=self.experiments.conditions or None)
        return out

    # ------------------------------------------------------------------------------------------
    def _check_events(self, data):
        """Events with what they are not supported with yet: pre-equilibration, steady-state measurements,
        a trigger on a parameter that an Input drives."""
        for plan, d in zip(self.plans, data):
            what = ("pre-equilibration" if plan.preequilibrate else
                    "measurements at t = inf (steady state)" if np.isinf(plan.t_rows).any() else None)
            if what:
                raise InputError(f"events: experiment {plan.name!r} has {what}, which does not run events yet; drop "
                                 "the events or that part of the experiment")
        from odeinfer.likelihood.events import parse_event

        driven = {self.model.params[k] for plan in self.plans for k in plan.inputs}
        for k, e in enumerate(self.events):
            g, h = parse_event(e, k, self.model)
            used = {str(s) for s in g.free_symbols.union(*(v.free_symbols for v in h.values()))} & driven
            if used:
                raise InputError(f"events[{k}]: uses {sorted(used)}, which an Input drives; an event may use the "
                                 "states and constant parameters")

    def _check_condition(self, name, c):
        m = self.model
        where = f"conditions[{name!r}]"
        for cond, label in ((c, where), (c.preequilibrate, f"{where}.preequilibrate")):
            if cond is None:
                continue
            unknown = [k for k in cond.params if k not in m.full_params]
            if unknown:
                raise InputError(
                    f"{label}.params: {unknown} are not parameters of model {m.name!r} (its parameters: "
                    f"{list(m.full_params)}); a condition overrides existing parameters, e.g. "
                    f"params={{{m.full_params[0]!r}: 1.0}}")
            bad = [k for k, v in cond.params.items() if isinstance(v, Input) and k in m.obs_params]
            if bad:
                raise InputError(f"{label}.params: {bad} are observable parameters; an Input drives a parameter of "
                                 "the right-hand side")
            _check_x0(f"{label}.x0", cond.x0, m)
        for d in c.doses:
            if d.state not in m.states:
                raise InputError(f"{where}.doses: {d.state!r} is not a state of model {m.name!r} (states: "
                                 f"{list(m.states)}); dose a state")

    def _plan(self, name, data, cond, x0_default):
        m = self.model
        obs = m.observable_names
        unknown = [s for s in data.states if s not in obs]
        if unknown:
            raise DataError(
                f"data: experiment {name!r} has columns {unknown} that are not observables of model {m.name!r} "
                f"(observables: {list(obs)}); rename the columns or add observables")
        t = np.asarray(data.t, float)
        t0 = 0.0 if cond.t0 is None else float(cond.t0)
        if t.size and t.min() < t0:
            raise DataError(
                f"data: experiment {name!r} has measurements at t={float(t.min())!r}, before its start t0={t0!r}; set "
                "the start with oi.Condition(t0=...) (it is never taken from the data)")
        a, k = np.nonzero(np.asarray(data.mask))
        obs_rows = np.array([obs.index(data.states[j]) for j in k], np.int64)
        y_rows = np.asarray(data.y)[a, k].astype(float)
        t_rows = t[a]
        timed = sorted({obs[k] for k in set(obs_rows[np.isinf(t_rows)].tolist())
                        if m.observables[k].expr.has(T_SYMBOL) or m.observables[k].sigma_expr.has(T_SYMBOL)})
        if timed:
            raise InputError(
                f"data: experiment {name!r} has measurements of {timed} at the steady state (t = inf), but their "
                "formula or noise model depends on t, which would be evaluated at t = inf; measure them at finite "
                "times, or write observables of the steady state without t")
        for dose in cond.doses:
            if not (t0 <= dose.time <= (t.max() if t.size else t0)):
                raise InputError(
                    f"conditions[{name!r}].doses: a dose at t={dose.time!r} lies outside experiment {name!r}'s "
                    f"time range [{t0!r}, {t.max() if t.size else t0!r}]; move it inside or drop it")
        # --- the mapped vector v = p | q | x0 | doses | p_pre | x0_pre ----------------------------
        S = self.symbols
        parse = self._parser(name)

        def value(where, v, default_name):
            if isinstance(v, Input):
                return sp.Float(v.values[0])
            if v is None:
                return S[default_name]
            return sp.Float(v) if not isinstance(v, str) else parse(where, v)

        exprs = [value(f"params[{p!r}]", cond.params.get(p), p) for p in m.params]
        exprs += [value(f"params[{q!r}]", cond.params.get(q), q) for q in m.obs_params]
        x0 = {**x0_default, **cond.x0}
        missing = [s for s in m.states if s not in x0 and cond.preequilibrate is None]
        if missing:
            raise InputError(
                f"x0: no initial value for the states {missing} in experiment {name!r}; give FitProblem(..., "
                "x0={state: value or 'expression'}) or the condition's x0, or pre-equilibrate")
        exprs += [value(f"x0[{s!r}]", x0.get(s, 0.0), s) for s in m.states]
        exprs += [value("doses", d.amount, None) for d in cond.doses]
        pre = cond.preequilibrate
        keep = np.array([s in cond.x0 for s in m.states]) if pre is not None else np.ones(m.n_states, bool)
        if pre is not None:
            exprs += [value(f"preequilibrate.params[{p!r}]", pre.params.get(p), p) for p in m.params]
            x0p = {**x0_default, **pre.x0}
            missing = [s for s in m.states if s not in x0p]
            if missing:
                raise InputError(f"x0: no initial value for the states {missing} of experiment {name!r}'s "
                                 "pre-equilibration; give them in FitProblem(x0=...) or its x0")
            exprs += [value(f"preequilibrate.x0[{s!r}]", x0p[s], s) for s in m.states]
        inputs = {m.params.index(k): v for k, v in cond.params.items() if isinstance(v, Input)}
        if inputs and np.any(np.isinf(t)):
            raise InputError(
                f"conditions[{name!r}].params: {[m.params[k] for k in inputs]} are driven by an Input, but experiment "
                f"{name!r} has measurements at the steady state (t = inf), which needs constant parameters; give "
                "them constant values or drop the rows at t = inf")
        return Plan(name, t0, t_rows, obs_rows, y_rows, tuple(exprs), keep, cond.doses, inputs, pre is not None)

    def _parser(self, experiment):
        from odeinfer.model.equations import parse_expression

        def parse(where, text):
            e = parse_expression(text, self.symbols, f"conditions[{experiment!r}].{where}")
            if e.has(sp.Symbol("t", real=True)):
                raise InputError(f"conditions[{experiment!r}].{where}: {text!r} depends on t; use oi.Input for "
                                 "inputs that vary in time")
            return e
        return parse

    # ------------------------------------------------------------------------------------------
    @property
    def n_estimated(self) -> int:
        return len(self.estimated)

    def nominal(self, names=None) -> np.ndarray:
        """Nominal values (natural units) of ``names`` (default: every parameter)."""
        return np.array([self.params[n].value for n in (names or self.names)])

    def __repr__(self):
        return (f"FitProblem(model={self.model.name!r}, experiments={list(self.experiments.names)}, "
                f"estimated={list(self.estimated)})")


def refuse_steady_state(problem, who):
    """Raise :class:`~odeinfer.errors.InputError` when an experiment of ``problem`` has measurements at
    the steady state (``t = inf``), which only the :class:`~odeinfer.Objective` evaluates (``who``: the
    method that cannot, for the message)."""
    for plan in problem.plans:
        if np.any(np.isinf(plan.t_rows)):
            raise InputError(
                f"problem: experiment {plan.name!r} has measurements at the steady state (t = inf), which {who} "
                "does not support; fit the problem with the single-shooting likelihood (oi.Objective, the "
                "default) or drop those rows")


def refuse_events(problem, who):
    """Raise :class:`~odeinfer.errors.InputError` when ``problem`` has events (:class:`~odeinfer.Event`), which
    only the :class:`~odeinfer.Objective` runs (``who``: the method that cannot, for the message)."""
    if getattr(problem, "events", ()):
        raise InputError(f"problem: it has {len(problem.events)} event(s) (oi.Event), which {who} does not run; fit "
                         "it with the single-shooting likelihood (oi.Objective, Embedding's default)")


def _with_linear_inputs(model, conds):
    """The model the solver runs: each parameter ``u`` driven by a linear :class:`Input` somewhere
    becomes ``u + u__rate * t`` (a new parameter ``u__rate`` appended), so that every segment
    between two knots has constant parameters. Returns ``(model, {u index: u__rate index})``."""
    from dataclasses import replace

    linear = [p for p in model.params if any(isinstance(c.params.get(p), Input) and c.params[p].kind == "linear"
                                             for c in conds)]
    if not linear:
        return model, {}
    syms = dict(zip(model.params, symbols_for(model.params)))
    rates = [f"{p}__rate" for p in linear]
    clash = [r for r in rates if r in model.params or r in model.states]
    if clash:
        raise InputError(f"inputs: the model already has names {clash}; rename them (linear inputs add them)")
    sub = {syms[p]: syms[p] + r * T_SYMBOL for p, r in zip(linear, symbols_for(rates))}
    used = set().union(*(o.expr.free_symbols | o.sigma_expr.free_symbols for o in model.observables))
    bad = [p for p in model.params if syms[p] in used and any(isinstance(c.params.get(p), Input) for c in conds)]
    if bad:
        raise InputError(f"inputs: the observables use {bad}, which an Input drives; observe the input through a "
                         "state instead")
    solve = replace(model, name=f"{model.name}_inputs", params=model.params + tuple(rates),
                    exprs=tuple(e.xreplace(sub) for e in model.exprs), observables=(), obs_params=())
    n = model.n_params
    return solve, {model.params.index(p): n + j for j, p in enumerate(linear)}


def _texts(c):
    out = [v for v in c.params.values() if isinstance(v, str)] + [v for v in c.x0.values() if isinstance(v, str)]
    out += [d.amount for d in c.doses if isinstance(d.amount, str)]
    if c.preequilibrate is not None:
        out += _texts(c.preequilibrate)
    return out


def _check_x0(arg, x0, model):
    if not isinstance(x0, Mapping):
        raise InputError(f"{arg}: expected a dict {{state: number or 'expression'}}, got {type(x0).__name__}")
    unknown = [s for s in x0 if s not in model.states]
    if unknown:
        raise InputError(f"{arg}: {unknown} are not states of model {model.name!r} (states: {list(model.states)})")
    out = {}
    for s, v in x0.items():
        if isinstance(v, str):
            out[s] = v
        elif isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v):
            out[s] = float(v)
        else:
            raise InputError(f"{arg}[{s!r}]: expected a finite number or an expression string, got {v!r}")
    return out


def _check_parameters(parameters, needed):
    if not isinstance(parameters, Mapping):
        raise InputError(f"parameters: expected a dict {{name: oi.Param(...) or number}}, got "
                         f"{type(parameters).__name__}")
    missing = [n for n in needed if n not in parameters]
    if missing:
        raise InputError(f"parameters: no entry for {missing}, which the model or the conditions use; add "
                         f"{{{missing[0]!r}: oi.Param(value, lower, upper, scale)}} (or a number to hold it fixed)")
    unknown = [n for n in parameters if n not in needed]
    if unknown:
        raise InputError(f"parameters: {unknown} are used neither by the model nor by the conditions (the problem's "
                         f"parameters: {needed}); remove them")
    out = {}
    for n in needed:
        v = parameters[n]
        if isinstance(v, Param):
            out[n] = v
        elif isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            out[n] = Param(float(v), estimate=False)
        else:
            raise InputError(f"parameters[{n!r}]: expected oi.Param(...) or a number, got {type(v).__name__}")
    return out
