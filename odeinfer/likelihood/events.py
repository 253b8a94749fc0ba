"""Events whose trigger depends on the states: when a condition on ``(t, x, p)`` turns true, some
states are set to new values (SBML's events; e.g. a population set to 0 once it falls below a
threshold); and the jumps and kinks of a right-hand side where a condition on the states changes,
located the same way (:func:`state_switches`).

An :class:`Event` belongs to a :class:`~odeinfer.likelihood.FitProblem`. Its trigger ``a < b``
(``<=``, ``>``, ``>=``) is true where ``g(t, x, p) > 0``, with ``g = b - a`` (``a - b`` for
``>``); the event fires when ``g`` crosses zero upwards along the trajectory. The
:class:`~odeinfer.likelihood.Objective` looks for crossings on a grid of each segment (its output
times, :data:`CHECK_POINTS` equally spaced times and times spaced geometrically from its start:
:func:`check_grid`), locates the first one by the Illinois method
on re-solves of the states alone from the grid point before it, and applies the assignments with the
jump conditions of the forward sensitivities at an event time ``tau(theta)`` defined by ``g = 0``.
Between two grid points where ``g <= 0``, a rise above 0 is looked for where ``g`` rises at the first
and falls at the second and its cubic Hermite interpolant (slopes ``dg/dt = g_t + g_x f``) comes near
0: the peak is located by re-solves and, if above 0, brackets the crossing. The jump conditions are

    dtau/dtheta = -(g_x S + g_p dp/dtheta) / (g_x f(tau, x-) + g_t),
    S+ = h_x S- + h_p dp/dtheta + (h_x f(tau, x-) - f(tau, x+)) dtau/dtheta,

with ``x+ = h(tau, x-, p)`` (Fröhlich et al. 2017, "Parameter estimation for dynamical systems with
discrete events and logical operations", Bioinformatics 33(7)); a switch of the right-hand side changes
no state and uses its two branches for ``f(tau, x-)`` and ``f(tau, x+)``. Between located switches the
solver's model holds each switch's branch by a parameter (:func:`held_switches`), so no solve meets a jump
or kink inside a step; a trajectory that slides along a switch makes it fire again and again, and fails
saying so. After firing, an event fires
again only once its trigger has been false (at once if its assignments make it false). A trigger that is
true only between two grid points and whose interpolant does not show it (several turns of ``g``
between two grid points) is not seen. With ``initial_value=False`` (SBML's ``initialValue``) a trigger
that is true at the start fires there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from odeinfer.errors import InputError
from odeinfer.model.trace import T_SYMBOL
from odeinfer.solve.abi import status_message

__all__ = ["Event", "CHECK_POINTS", "CompiledEvents", "StatesOnly", "check_grid", "crossings", "euler_step", "fire",
           "held_switches", "locate", "peak", "state_switches"]

#: Equally spaced times per segment (besides its output times) at which the triggers are checked.
CHECK_POINTS = 200
#: Besides, times spaced geometrically from the segment's start: this many decades of its length below it ...
CHECK_DECADES = 6
#: ... with this many per decade (:func:`check_grid`).
CHECK_PER_DECADE = 10


def check_grid(start, end, times):
    """The times of a segment ``(start, end]`` at which the triggers are checked: its output ``times``,
    :data:`CHECK_POINTS` equally spaced times, and :data:`CHECK_PER_DECADE` per decade spaced geometrically
    from ``start + 10**-CHECK_DECADES * (end - start)`` to ``end``, for the fast changes right after a start, a
    dose or a switch (a trigger that turns false and true again there, Smith_BMCSystBiol2013's at 0.03 and 0.51
    of 960 time units, falls between two equally spaced times)."""
    if not end > start:
        return times
    span = end - start
    geometric = span * np.logspace(-CHECK_DECADES, 0, CHECK_DECADES * CHECK_PER_DECADE + 1)
    return np.union1d(times, np.concatenate([np.linspace(start, end, CHECK_POINTS + 1), start + geometric]))

#: At most this many events fire in one experiment (a trigger that fires again and again at one time
#: would never end).
MAX_FIRINGS = 10_000

_RELATIONS = (sp.StrictLessThan, sp.LessThan, sp.StrictGreaterThan, sp.GreaterThan)


@dataclass(frozen=True)
class Event:
    """When ``trigger`` turns true, set the states of ``assign``.

    Parameters
    ----------
    trigger : str
        One comparison ``a < b``, ``a <= b``, ``a > b`` or ``a >= b`` of expressions in ``t``, the
        states and the right-hand side's parameters (parsed without ``eval``), e.g. ``"U < 1e-8"``.
    assign : dict of str to (str or float)
        ``{state: value}``: the states' new values, expressions of the states before the event, the
        parameters and ``t`` (all evaluated before any is set).
    initial_value : bool, default True
        The trigger's value just before the start: with False, a trigger true at the start fires there.
    name : str, optional
        Shown in messages.
    """

    trigger: str
    assign: dict = field(default_factory=dict)
    initial_value: bool = True
    name: str = ""

    def label(self, k):
        return repr(self.name) if self.name else f"events[{k}] ({self.trigger!r})"


def check_events(events, model):
    """``events`` as a tuple of :class:`Event`, each parsed against ``model`` (its states and the
    right-hand side's parameters); a typed error names the event and what is wrong."""
    if events is None:
        return ()
    if isinstance(events, Event):
        events = [events]
    try:
        events = tuple(events)
    except TypeError:
        raise InputError(f"events: expected a list of oi.Event, got {type(events).__name__}") from None
    for k, e in enumerate(events):
        if not isinstance(e, Event):
            raise InputError(f"events[{k}]: expected an oi.Event, got {type(e).__name__}; e.g. "
                             f"oi.Event('{model.states[0]} < 1e-8', {{'{model.states[0]}': 0}})")
        parse_event(e, k, model)
    return events


def parse_event(e, k, model):
    """``(g, {state index: h})`` of event ``e`` (sympy), with the names of ``model``."""
    from odeinfer.model.equations import parse_expression
    from odeinfer.model.trace import symbols_for

    names = dict(zip(model.states, symbols_for(model.states)))
    names.update(zip(model.params, symbols_for(model.params)))
    where = f"events[{k}]"
    if not isinstance(e.trigger, str):
        raise InputError(f"{where}.trigger: expected a string such as 'x < 1e-8', got {type(e.trigger).__name__}")
    rel = parse_expression(e.trigger, names, f"{where}.trigger")
    if not isinstance(rel, _RELATIONS):
        raise InputError(f"{where}.trigger: expected one comparison a < b, a <= b, a > b or a >= b, got "
                         f"{e.trigger!r}; write e.g. 'x < 1e-8'")
    g = rel.rhs - rel.lhs if isinstance(rel, (sp.StrictLessThan, sp.LessThan)) else rel.lhs - rel.rhs
    if not isinstance(e.initial_value, (bool, np.bool_)):
        raise InputError(f"{where}.initial_value: expected True or False, got {e.initial_value!r}")
    if not hasattr(e.assign, "items") or not e.assign:
        raise InputError(f"{where}.assign: expected a non-empty dict {{state: value}}, got {e.assign!r}")
    h = {}
    for s, v in e.assign.items():
        if s not in model.states:
            raise InputError(f"{where}.assign: {s!r} is not a state of model {model.name!r} (its states: "
                             f"{list(model.states)}); an event sets states")
        if isinstance(v, bool) or not isinstance(v, (str, int, float, np.integer, np.floating)):
            raise InputError(f"{where}.assign[{s!r}]: expected a number or an expression string, got "
                             f"{type(v).__name__}")
        if not isinstance(v, str) and not np.isfinite(v):
            raise InputError(f"{where}.assign[{s!r}]: expected a finite value, got {v!r}")
        h[model.states.index(s)] = (parse_expression(v, names, f"{where}.assign[{s!r}]") if isinstance(v, str)
                                    else sp.Float(float(v)))
    return g, h


def _switch_nodes(model):
    """``{node: (g, value false, value true)}`` for each switch on the states in ``model``'s right-hand side (a
    relational of a ``Piecewise``, a ``Heaviside`` or a ``sign``), its condition true where ``g > 0``, in the
    order of :func:`state_switches` and :func:`held_switches`."""
    states = set(model.state_symbols)
    found = {}
    for e in model.exprs:
        for node in sp.preorder_traversal(e):
            if isinstance(node, (sp.Heaviside, sp.sign)) and node.args[0].free_symbols & states:
                lo, hi = (sp.Integer(0), sp.Integer(1)) if isinstance(node, sp.Heaviside) else (sp.Integer(-1),
                                                                                                sp.Integer(1))
                found.setdefault(node, (node.args[0], lo, hi))
            elif isinstance(node, sp.Piecewise):
                for _, cond in node.args:
                    rels = [cond] if isinstance(cond, _RELATIONS) else sorted(
                        getattr(cond, "atoms", lambda *_: set())(*_RELATIONS), key=str)
                    for rel in rels:
                        if rel.free_symbols & states:
                            g = rel.rhs - rel.lhs if isinstance(rel, (sp.StrictLessThan, sp.LessThan)) \
                                else rel.lhs - rel.rhs
                            found.setdefault(rel, (g, sp.false, sp.true))
    return found


def state_switches(model):
    """The jumps and kinks of ``model``'s right-hand side where a condition on the states changes:
    ``[(g, f_false, f_true, label)]`` with the condition true where ``g > 0`` and the right-hand side's
    expressions with the condition held false and true (a relational of a ``Piecewise``, the argument of
    a ``Heaviside`` or ``sign``)."""
    return [(g, [e.xreplace({node: lo}) for e in model.exprs], [e.xreplace({node: hi}) for e in model.exprs],
             str(node)) for node, (g, lo, hi) in _switch_nodes(model).items()]


def held_switches(model):
    """``model`` with each state switch of its right-hand side (:func:`state_switches`, in that order) held by a
    parameter appended to its parameters, ``held_switch_<j>``: 1.0 for the branch where its condition is true, 0.0
    for the other; ``model`` itself without switches.

    The likelihood sets these parameters from the conditions at each segment's start and flips one where the
    switch is located (as AMICI holds its Heaviside variables), so the solver never meets a jump or kink inside a
    step: a solve with sensitivities whose states cross a threshold slightly before the located time (their
    error differs from the states-only search's) no longer collapses its step at that kink."""
    from dataclasses import replace

    from odeinfer.model.trace import symbols_for

    found = _switch_nodes(model)
    if not found:
        return model
    names = [f"held_switch_{j}" for j in range(len(found))]
    clash = [n for n in names if n in model.params or n in model.states]
    if clash:
        raise InputError(f"model {model.name!r}: names {clash} are taken; the likelihood holds the right-hand "
                         "side's state switches by parameters of these names: rename them")
    held = {}
    for node, sw in zip(found, symbols_for(names)):
        held[node] = (sw if isinstance(node, sp.Heaviside) else 2 * sw - 1 if isinstance(node, sp.sign)
                      else sp.StrictGreaterThan(sw, sp.Rational(1, 2)))
    exprs = tuple(e.xreplace(held) for e in model.exprs)
    return replace(model, name=f"{model.name}_held", params=model.params + tuple(names), exprs=exprs,
                   observables=(), obs_params=())


class _Switch:
    """A state switch of the right-hand side, one direction of it, as an event: it changes no state; its jump is
    that of the right-hand side (:func:`state_switches`)."""

    def __init__(self, label, rising):
        self.name = f"the switch at {label} ({'on' if rising else 'off'})"
        self.initial_value = True

    def label(self, k):
        return self.name


class CompiledEvents:
    """The events of a problem as numeric functions of ``(t, x, p)`` of the solver's model ``solve_model``
    (the problem's model, maybe with input rates appended to its parameters; with ``switches``, holding their
    branches by its last parameters, :func:`held_switches`), and, with ``switches``, the right-hand side's state
    switches as events in both directions (:func:`state_switches`)."""

    def __init__(self, events, model, solve_model, switches=()):
        from odeinfer.model.trace import symbols_for

        xs, ps = list(symbols_for(model.states)), list(symbols_for(solve_model.params))
        args = [T_SYMBOL, *xs, *ps]
        items = [(*parse_event(e, k, model), e, None) for k, e in enumerate(events)]
        for g, f_false, f_true, label in switches:
            items.append((g, {}, _Switch(label, True), (f_false, f_true)))
            items.append((-g, {}, _Switch(label, False), (f_true, f_false)))
        self.events = tuple(it[2] for it in items)
        self.n = len(items)
        self.n_events = len(events)  # then two items (on, off) per state switch
        n_switches = (self.n - self.n_events) // 2
        # with switches, solve_model holds their branches by its last parameters (held_switches)
        self.held_at = len(ps) - n_switches if n_switches else None
        self._g, self._dg, self._h, self._rate, self._jump = [], [], [], [], []
        for g, h, _, sides in items:
            self._jump.append(None if sides is None else sp.lambdify(args, list(sides), modules="numpy"))
            self._g.append(sp.lambdify(args, g, modules="numpy"))
            grad = [sp.diff(g, T_SYMBOL), *(sp.diff(g, x) for x in xs), *(sp.diff(g, p) for p in ps)]
            self._dg.append(sp.lambdify(args, grad, modules="numpy"))
            rate = grad[0] + sum(d * f for d, f in zip(grad[1:1 + len(xs)], solve_model.exprs) if d != 0)
            self._rate.append(sp.lambdify(args, rate, modules="numpy"))
            if not h:  # a switch changes no state
                self._h.append(None)
                continue
            full = [h.get(i, x) for i, x in enumerate(xs)]
            jac = [[sp.diff(v, w) for w in xs + ps] for v in full]
            self._h.append(sp.lambdify(args, [full, jac], modules="numpy"))
        self.n_x, self.n_p = len(xs), len(ps)

    def hold(self, pj, t, x, fired=()):
        """Set the held branches of the state switches, ``pj[held_at + j]`` (:func:`held_switches`; nothing if the
        solver's model does not hold them): from their conditions at ``(t, x)``, and, for the switch items in
        ``fired`` (at their roots, where the condition is about 0), by their direction."""
        at = self.held_at
        if at is None:
            return
        for j in range((self.n - self.n_events) // 2):
            pj[at + j] = 1.0 if self.true_at(self.n_events + 2 * j, t, x, pj) else 0.0
        for k in fired:
            if k >= self.n_events:
                pj[at + (k - self.n_events) // 2] = 1.0 if (k - self.n_events) % 2 == 0 else 0.0

    def g(self, k, t, X, p):
        """The trigger function of event ``k`` at the times ``t`` and states ``X`` (one row per time), as a
        1-D array."""
        t = np.atleast_1d(np.asarray(t, float))
        out = self._g[k](t, *np.atleast_2d(np.asarray(X, float)).T, *p)
        return np.broadcast_to(np.asarray(out, float), t.shape)

    def rate(self, k, t, X, p):
        """``dg/dt`` along the trajectory (``g_t + g_x f``) of event ``k`` at the times ``t`` and states ``X``."""
        t = np.atleast_1d(np.asarray(t, float))
        out = self._rate[k](t, *np.atleast_2d(np.asarray(X, float)).T, *p)
        return np.broadcast_to(np.asarray(out, float), t.shape)

    def hidden(self, k, t, X, G, p, lo, hi):
        """The first ``i`` in ``(lo, hi)`` where the trigger function, <= 0 at the grid points ``t[i - 1]`` and
        ``t[i]``, may rise above 0 between them: it rises at ``t[i - 1]`` and falls at ``t[i]``, and twice the
        bump of its cubic Hermite interpolant (values ``G``, slopes :meth:`rate`) reaches 0. None if none."""
        if hi - lo < 2:
            return None
        D = self.rate(k, t[lo:hi], X[lo:hi], p)
        i = np.flatnonzero((D[:-1] > 0) & (D[1:] < 0)) + 1
        for j in i:
            a, b = lo + j - 1, lo + j
            h = t[b] - t[a]
            g0, g1, m0, m1 = G[a], G[b], D[j - 1] * h, D[j] * h
            # p(s) = (2s^3 - 3s^2 + 1) g0 + (s^3 - 2s^2 + s) m0 + (-2s^3 + 3s^2) g1 + (s^3 - s^2) m1
            c3, c2 = 2 * g0 + m0 - 2 * g1 + m1, -3 * g0 - 2 * m0 + 3 * g1 - m1
            roots = np.roots([3 * c3, 2 * c2, m0])
            s_ = roots[np.isreal(roots)].real
            s_ = s_[(s_ > 0) & (s_ < 1)]
            peak = max((c3 * v ** 3 + c2 * v ** 2 + m0 * v + g0 for v in s_), default=-np.inf)
            if max(g0, g1) + 2 * (peak - max(g0, g1)) > 0:
                return int(b)
        return None

    def true_at(self, k, t, x, p):
        """Is event ``k``'s trigger true at the one point ``(t, x)``?"""
        return bool(self.g(k, t, x, p)[0] > 0)

    def dg(self, k, t, x, p):
        """``(g_t, g_x (n,), g_p (n_p,))`` of event ``k`` at one point."""
        d = np.array(self._dg[k](t, *x, *p), float)
        return d[0], d[1:1 + self.n_x], d[1 + self.n_x:]

    def h(self, k, t, x, p):
        """``(x+, h_x (n, n), h_p (n, n_p))`` of event ``k`` at one point."""
        if self._h[k] is None:
            return np.array(x, float), np.eye(self.n_x), np.zeros((self.n_x, self.n_p))
        full, jac = self._h[k](t, *x, *p)
        jac = np.array(jac, float)
        return np.array(full, float), jac[:, :self.n_x], jac[:, self.n_x:]

    def sides(self, k, t, x, xp, p, compiled):
        """The right-hand side just before and just after event ``k`` at ``t`` (states ``x`` before, ``xp``
        after): the model's at ``x`` and ``xp``, or, for a state switch, its two branches at ``x``."""
        if self._jump[k] is None:
            return compiled.f(t, x, p), compiled.f(t, xp, p)
        before, after = self._jump[k](t, *x, *p)
        return np.array(before, float), np.array(after, float)


# --- the search along a trajectory (used by the Objective's runs) --------------------------------
def crossings(ev, armed, times, y, hidden, plain, pj):
    """``(first, hits, peaks)``: the first grid index where an armed trigger is true (or, with ``hidden``, between
    two grid points where it is false, rises above 0: the peak brackets it, in ``peaks``), and the events true
    there; or a failure text."""
    first, hits, peaks = times.size, [], {}
    for k in range(ev.n):
        G = ev.g(k, times, y[:times.size], pj)
        if armed[k]:
            on, j = 0, np.flatnonzero(G > 0)
        else:  # armed once the trigger is false, then fires when it turns true
            off = np.flatnonzero(G <= 0)
            on = int(off[0]) if off.size else times.size
            j = np.flatnonzero(G[on:] > 0) + on
        end = int(j[0]) if j.size else times.size
        i = ev.hidden(k, times, y, G, pj, on, end) if hidden else None
        top = peak(ev, k, plain, (times[i - 1], y[i - 1]), times[i], pj) if i else None
        if isinstance(top, str):
            return top
        if top is not None:
            end = i
        if end < times.size and end <= first:
            hits = (hits if end == first else []) + [k]
            first = end
            peaks[k] = top
    return first, hits, peaks


def euler_step(compiled, t0, t, x, pj):
    """The state at ``t`` by one Euler step from ``(t0, x)`` where ``t - t0`` is below 1e-12 (relative) of ``t`` (a
    solver's step would be below its rounding unit there), else None."""
    if t - t0 > 1e-12 * max(abs(t), 1.0):
        return None
    return np.asarray(x, float) + (t - t0) * compiled.f(t0, np.ascontiguousarray(x), pj)


class StatesOnly:
    """Solves of the states alone with a segment solver's method and options (the event search needs no
    sensitivities: cheaper, and they pass where the sensitivities' step collapses, at a kink)."""

    def __init__(self, solver):
        self.solver, self.base = solver, None

    def run(self, t0, t, x, pj):
        """``(states at the times t, status)`` from ``(t0, x)``."""
        t = np.array(t, dtype=np.float64)
        t.flags.writeable = False
        if self.base is None:
            self.base = self.solver.states_alone()
        elif hasattr(self.base, "go_stiff"):  # a segment found stiff since: the probes start on Rodas too
            self.solver.share_stiffness(self.base)
        s = self.base.retimed(t, float(t0))
        y, _, st = s(pj, np.ascontiguousarray(x))
        return np.array(y), st

    def at(self, t0, t, x, pj):
        """``(the state at t, status)`` (:func:`euler_step` where the interval is too short for a solver)."""
        x_t = euler_step(self.solver.compiled, t0, t, x, pj)
        if x_t is not None:
            return x_t, 0
        y, st = self.run(t0, [t], x, pj)
        return y[0], st


def _search_failed(ev, k, where, st, solver):
    """Why locating event ``k`` failed: a re-solve's status or a trigger that is not finite."""
    if st == 0:
        return f"locating {ev.events[k].label(k)} {where} failed: its trigger function is not finite there"
    return (f"locating {ev.events[k].label(k)} {where} failed: a re-solve of the states stopped ("
            f"{status_message(st, max_steps=solver.max_steps).split(';')[0]})")


def peak(ev, k, plain, lo, t_hi, pj, max_iter=60):
    """Where event ``k``'s trigger function peaks in ``(t_lo, t_hi)`` (it rises at ``lo = (t_lo, x)`` and
    falls at ``t_hi``), if it is above 0 there; else None (the Illinois method on its rate, by re-solves of the
    states ``plain``); or a failure text."""
    t_lo, x_lo = lo
    a, b = float(t_lo), float(t_hi)
    ra = float(ev.rate(k, a, x_lo, pj)[0])
    yb, st = plain.at(t_lo, b, x_lo, pj)
    rb = float(ev.rate(k, b, yb, pj)[0])
    side, c = 0, 0.5 * (a + b)
    for _ in range(max_iter):
        if st != 0:
            return _search_failed(ev, k, f"in ({t_lo:g}, {t_hi:g})", st, plain.solver)
        if b - a <= 1e-9 * max(abs(a), abs(b), 1.0):
            break
        c = a - ra * (b - a) / (rb - ra) if rb != ra else 0.5 * (a + b)
        if not a < c < b:
            c = 0.5 * (a + b)
        yc, st = plain.at(t_lo, c, x_lo, pj)
        if ev.g(k, c, yc, pj)[0] > 0:
            return c
        rc = float(ev.rate(k, c, yc, pj)[0])
        if rc > 0:
            a, ra = c, rc
            if side == -1:
                rb *= 0.5
            side = -1
        else:
            b, rb = c, rc
            if side == 1:
                ra *= 0.5
            side = 1
    return None


def locate(ev, k, plain, lo, t_hi, pj, max_iter=100):
    """``(tau,)``: where event ``k``'s trigger function turns positive in ``(t_lo, t_hi]`` (it is <= 0 at
    ``lo = (t_lo, x, ...)`` and > 0 at ``t_hi``), by the Illinois method on re-solves of the states ``plain`` from
    ``lo``; or a failure text."""
    t_lo, x_lo = lo[:2]
    a, b = float(t_lo), float(t_hi)
    ga = float(ev.g(k, a, x_lo, pj)[0])
    yb, st = plain.at(t_lo, b, x_lo, pj)
    gb = float(ev.g(k, b, yb, pj)[0])
    if st != 0 or not (np.isfinite(ga) and np.isfinite(gb)):
        return _search_failed(ev, k, f"in ({a:g}, {b:g}]", st, plain.solver)
    side = 0
    for _ in range(max_iter):
        if b - a <= 4 * np.spacing(max(abs(a), abs(b), 1.0)):
            break
        c = b - gb * (b - a) / (gb - ga) if gb != ga else 0.5 * (a + b)
        if not a < c < b:
            c = 0.5 * (a + b)
        yc, st = plain.at(t_lo, c, x_lo, pj)
        gc = float(ev.g(k, c, yc, pj)[0])
        if st != 0 or not np.isfinite(gc):
            return _search_failed(ev, k, f"near t={c:g}", st, plain.solver)
        if gc == 0:
            return (c,)
        if gc > 0:
            b, gb = c, gc
            if side == 1:
                ga *= 0.5
            side = 1
        else:
            a, ga = c, gc
            if side == -1:
                gb *= 0.5
            side = -1
    return (b,)


def fire(ev, k, t, x, S, pj, pdir, dtau, compiled):
    """Event ``k``'s assignments at ``t``: ``(x+, S+)``; with ``dtau`` (the event time's derivative in the
    sensitivity directions) the jump of the sensitivities at a moving event time, without (a fixed time) none."""
    xp, hx, hp = ev.h(k, t, x, pj)
    Sp = hx @ S + hp[:, :pdir.shape[0]] @ pdir
    if dtau is not None:
        before, after = ev.sides(k, t, x, xp, pj, compiled)
        Sp += np.outer(hx @ before - after, dtau)
    return xp, Sp
