"""JSON form of what a likelihood fit needs after a round trip: the model's observables and noise
models, and the fit problem (experiments' data and conditions, the parameter table, the default
initial states) with its solver settings.

Everything is written as plain numbers, strings and lists, and read back through the validating
constructors (:meth:`Model.observe`, :class:`~odeinfer.Data`, :class:`~odeinfer.Experiments`,
:class:`~odeinfer.Condition`, :class:`~odeinfer.likelihood.FitProblem`, ...): expressions are parsed
by the equation whitelist, never evaluated. Any failure is a :class:`ResultFileError`.
"""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np

from odeinfer.errors import OdeinferError, ResultFileError

__all__ = ["observables_to_dict", "observe_from_dict", "problem_to_dict", "objective_from_dict"]

_NOISE = ("normal", "laplace")
_SOLVERS = ("dopri5", "rodas", "auto")


def observables_to_dict(model) -> dict:
    """``{"obs_params": [...], "observables": [{"name", "expr", "noise"}]}`` of a model with observables."""
    return {"obs_params": list(model.obs_params),
            "observables": [{"name": o.name, "expr": o.text, "noise": o.noise.as_dict()} for o in model.observables]}


def _fail(where, what, exc=None):
    from odeinfer.results.estimate import _short

    why = "" if exc is None else f" ({type(exc).__name__}: {_short(exc)})"
    raise ResultFileError(f"{where}: {what}{why}; write the estimate again with Estimate.to_json") from None


def observe_from_dict(model, stored, where):
    """``model.observe(...)`` rebuilt from :func:`observables_to_dict` (expressions parsed, not evaluated)."""
    import odeinfer as oi

    try:
        obs = stored["observables"]
        exprs, noise = {}, {}
        for o in obs:
            kind = o["noise"]["distribution"]
            if kind not in _NOISE:
                _fail(where, f"the noise of observable {str(o['name'])[:40]!r} is {str(kind)[:20]!r}, not one of {_NOISE}")
            cls = oi.Normal if kind == "normal" else oi.Laplace
            exprs[str(o["name"])] = str(o["expr"])
            noise[str(o["name"])] = cls(sigma=o["noise"]["sigma"], scale=o["noise"]["scale"])
        return model.observe(exprs, noise=noise, params=[str(p) for p in stored["obs_params"]])
    except ResultFileError:
        raise
    except (OdeinferError, KeyError, TypeError, ValueError, AttributeError) as exc:
        _fail(where, "its observables cannot be rebuilt", exc)


# --- the fit problem --------------------------------------------------------------------------
def _value(v):
    from odeinfer.data.conditions import Input

    if isinstance(v, Input):
        return {"input": {"t": list(v.t), "values": list(v.values), "kind": v.kind}}
    return v


def _condition(c):
    if c is None:
        return None
    return {"params": {k: _value(v) for k, v in c.params.items()}, "x0": dict(c.x0), "t0": c.t0,
            "doses": [[d.time, d.state, d.amount] + (["set"] if d.resets else []) for d in c.doses],
            "preequilibrate": _condition(c.preequilibrate)}


def _text(expr):
    from odeinfer.model.equations import format_expr

    return float(expr) if expr.is_Number else format_expr(expr)


def _default_x0(problem):
    """The problem's default initial states, read back from its plans (see the module notes).

    A plan's initial states are the condition's, else the default's (pre-equilibration: its own
    ``x0``, else the default's), so a state the condition leaves alone shows the default. A state
    every condition sets never uses the default: it gets none.
    """
    m = problem.model
    n_p, n_q, n_s = m.n_params, len(m.obs_params), m.n_states
    out = {}
    for name, plan in zip(problem.experiments.names, problem.plans):
        c = problem.experiments.condition(name)
        blocks = [(n_p + n_q, c.x0)]
        if plan.preequilibrate:
            blocks.append((n_p + n_q + n_s + len(plan.doses) + n_p, c.preequilibrate.x0))
        for off, given in blocks:
            for k, s in enumerate(m.states):
                if s not in given and s not in out:
                    out[s] = _text(plan.exprs[off + k])
    return out


def _solver(solver) -> dict:
    return {"method": solver.method, **{f.name: getattr(solver, f.name) for f in fields(solver)}}


def problem_to_dict(objective) -> dict:
    """The fit problem and solver of a likelihood fit's objective, as plain data."""
    problem = objective.problem
    exps = problem.experiments
    return {
        "experiments": [{"name": n, "t": np.asarray(d.t).tolist(), "y": np.asarray(d.y).tolist(),
                         "states": list(d.states), "t0": float(d.t0), "replicates": bool(d.replicates),
                         "steady_state": bool(d.steady_state),
                         "condition": _condition(exps.conditions.get(n))} for n, d in zip(exps.names, exps)],
        "parameters": {n: [p.value, p.lower, p.upper, p.scale, bool(p.estimate)] for n, p in problem.params.items()},
        "x0": _default_x0(problem),
        "solver": _solver(objective.solver),
        "events": [{"trigger": e.trigger, "assign": {k: v if isinstance(v, str) else float(v)
                                                     for k, v in e.assign.items()},
                    "initial_value": bool(e.initial_value), "name": e.name} for e in getattr(problem, "events", ())],
    }


def _load_value(v):
    from odeinfer.data.conditions import Input

    if isinstance(v, dict):
        i = v["input"]
        return Input([float(x) for x in i["t"]], [float(x) for x in i["values"]], str(i["kind"]))
    if isinstance(v, (int, float, str)) and not isinstance(v, bool):
        return v
    raise TypeError(f"a condition value must be a number, a string or an input table, got {type(v).__name__}")


def _load_condition(c):
    from odeinfer.data.conditions import Condition

    if c is None:
        return None
    return Condition(params={str(k): _load_value(v) for k, v in dict(c["params"]).items()},
                     x0={str(k): _load_value(v) for k, v in dict(c["x0"]).items()},
                     t0=None if c["t0"] is None else float(c["t0"]),
                     doses=[_load_dose(*d) for d in c["doses"]],
                     preequilibrate=_load_condition(c["preequilibrate"]))


def _load_dose(t, s, a, mode="add"):
    """A Dose from ``[time, state, amount]`` (a bolus) or ``[time, state, amount, mode]``."""
    from odeinfer.data.conditions import Dose

    return Dose(float(t), str(s), _load_value(a), str(mode))


def _load_solver(s):
    from odeinfer.solve.config import Auto, Dopri5, Rodas

    method = s["method"]
    if method not in _SOLVERS:
        raise ValueError(f"unknown solver method {str(method)[:20]!r} (expected one of {_SOLVERS})")
    cls = {"dopri5": Dopri5, "rodas": Rodas, "auto": Auto}[method]
    known = {f.name for f in fields(cls)}
    kw = {k: v for k, v in s.items() if k in known}
    bad = [k for k, v in kw.items() if not (v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)))]
    if bad:
        raise TypeError(f"solver options {bad} must be numbers or null")
    return cls(**kw)


def objective_from_dict(model, stored, where):
    """The :class:`~odeinfer.likelihood.Objective` of :func:`problem_to_dict`, rebuilt for ``model``."""
    from odeinfer.data import Data, Experiments
    from odeinfer.likelihood import FitProblem, Objective, Param

    try:
        datas, names, conds = [], [], {}
        for e in stored["experiments"]:
            y = np.array(e["y"], dtype=float)
            datas.append(Data(np.array(e["t"], dtype=float), y, [str(s) for s in e["states"]], t0=float(e["t0"]),
                              name=str(e["name"]), replicates=bool(e["replicates"]),
                              steady_state=bool(e.get("steady_state", False))))
            names.append(str(e["name"]))
            c = _load_condition(e["condition"])
            if c is not None:
                conds[names[-1]] = c
        params = {}
        for n, (value, lower, upper, scale, estimate) in dict(stored["parameters"]).items():
            if not isinstance(estimate, bool):
                raise TypeError(f"parameters[{str(n)[:40]!r}]: 'estimate' must be true or false")
            params[str(n)] = Param(_number(value), _number(lower), _number(upper), str(scale), estimate)
        x0 = {str(k): _load_value(v) for k, v in dict(stored["x0"]).items()}
        events = [_load_event(e) for e in stored.get("events", [])]
        problem = FitProblem(model, Experiments(datas, names=names, conditions=conds or None), params, x0=x0,
                             events=events)
        return Objective(problem, solver=_load_solver(dict(stored["solver"])))
    except (OdeinferError, KeyError, TypeError, ValueError, AttributeError) as exc:
        _fail(where, "its fit problem (experiments, conditions, parameters) cannot be rebuilt", exc)


def _load_event(e):
    from odeinfer.likelihood.events import Event

    e = dict(e)
    if not isinstance(e["initial_value"], bool):
        raise TypeError("events: 'initial_value' must be true or false")
    return Event(str(e["trigger"]), {str(k): _load_value(v) for k, v in dict(e["assign"]).items()},
                 e["initial_value"], str(e.get("name", "")))


def _number(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"expected a number, got {type(v).__name__}")
    return float(v)


def attach(estimate, objective, max_iter):
    """Give a reloaded likelihood estimate its objective (``predict`` of observables) and, with a
    covariance on the estimation scale, its profiler (``conf_int(method="profile")``)."""
    from odeinfer.estimators._likelihood_fit import _attach_profiler

    object.__setattr__(estimate, "_objective", objective)
    u, cov_u = estimate.extras.get("u"), estimate.extras.get("cov_scaled")
    if u is None or cov_u is None or not math.isfinite(estimate.cost):
        return
    u, cov_u = np.asarray(u, float), np.asarray(cov_u, float)
    k = len(estimate.names)
    if u.shape == (k,) and cov_u.shape == (k, k):
        _attach_profiler(objective, estimate, u, float(estimate.cost), cov_u, max_iter)
