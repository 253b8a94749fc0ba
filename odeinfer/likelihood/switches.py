"""Jumps of the right-hand side at times that are functions of the parameters alone.

A condition of a ``Piecewise`` (``where``) or the argument of a ``Heaviside`` / ``sign`` of the
right-hand side is a *time switch* when it compares ``g(t, p) = lhs - rhs`` with zero, ``g``
affine in ``t`` (``dg/dt`` free of ``t``, not zero) and free of the states: it flips at
``tau(p) = -g(0, p) / (dg/dt)``. Between switch times the right-hand side is smooth, so the
:class:`~odeinfer.likelihood.Objective` integrates up to each switch time, adds the jump of the
state sensitivities there,

    dx/dtheta(tau+) = dx/dtheta(tau-) + (f(tau-, x) - f(tau+, x)) dtau/dtheta,

and starts again just after it. Conditions on the states, or not affine in ``t``, are not time
switches: the solvers refuse sensitivities through them as before.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from odeinfer.model.trace import T_SYMBOL

__all__ = ["TimeSwitches"]

_ULPS = 64  # how far (in units in the last place) a side of a switch is searched for


def _arguments(model):
    """``g`` for every comparison ``g = lhs - rhs`` against 0 that switches the right-hand side (the
    nodes :attr:`Model.switching_params` looks at)."""
    out = []
    for e in model.exprs:
        for node in sp.preorder_traversal(e):
            if isinstance(node, (sp.Heaviside, sp.sign)):
                out.append(node.args[0])
            elif isinstance(node, sp.Piecewise):
                for _, cond in node.args:
                    if isinstance(cond, sp.logic.boolalg.Boolean) and cond not in (sp.true, sp.false):
                        rels = [cond] if isinstance(cond, sp.core.relational.Relational) else sorted(
                            cond.atoms(sp.core.relational.Relational), key=str)
                        out += [r.lhs - r.rhs for r in rels]
    return out


class TimeSwitches:
    """The time switches of a model's right-hand side (see the module's notes).

    Parameters
    ----------
    model : Model
        The model the solver integrates.
    n_params : int
        The first ``n_params`` parameters are the ones the switch times may depend on (the others,
        e.g. the rates of linear inputs, vary in time: a comparison with them is no time switch).

    Attributes
    ----------
    times : list of sympy expressions
        ``tau_i(p)``, one per distinct switch time.
    symbols : list of frozenset
        The parameter symbols each switch time depends on.
    handled : frozenset of str
        The switching parameters (``model.switching_params``) that occur in time switches only:
        their sensitivities are exact once the objective adds the jumps.
    """

    def __init__(self, model, n_params):
        t = T_SYMBOL
        states = set(model.state_symbols)
        psyms = list(model.param_symbols)
        allowed = set(psyms[:n_params])
        times, gs, unhandled = [], [], set()
        for g in _arguments(model):
            free = g.free_symbols
            a = sp.diff(g, t)
            ok = (t in free and not free & states and free <= allowed | {t} and t not in a.free_symbols
                  and a != 0)
            if not ok:
                unhandled |= free
                continue
            tau = sp.cancel(-g.subs(t, 0) / a)
            if tau not in times:
                times.append(tau)
                gs.append(g)
        self.times = times
        self.symbols = [frozenset(tau.free_symbols) for tau in times]
        self.handled = frozenset(q for q, s in zip(model.params, psyms)
                                 if q in model.switching_params and s not in unhandled)
        args = [sp.Symbol(f"_p{k}", real=True) for k in range(n_params)]
        rename = dict(zip(psyms[:n_params], args))
        ts = sp.Symbol("_t", real=True)
        self._tau = sp.lambdify([args], [tau.xreplace(rename) for tau in times], modules="numpy")
        jac = sp.Matrix(times).jacobian(psyms[:n_params]) if times else sp.zeros(0, n_params)
        self._dtau = sp.lambdify([args], jac.xreplace(rename), modules="numpy")
        self._side = [sp.lambdify([ts, args], g.xreplace(rename).xreplace({t: ts}), modules="numpy") for g in gs]
        self.n = len(times)

    def __bool__(self):
        return bool(self.n)

    def at(self, p, which):
        """The switches ``which`` (indices) at the parameters ``p``: per switch, ``(tau, t_lo, t_hi,
        dtau/dp)`` with ``t_lo < t_hi`` the floats next to ``tau`` on either side of the jump (the
        comparison evaluated there as the compiled right-hand side evaluates it)."""
        if not len(which):
            return []
        taus = np.atleast_1d(np.asarray(self._tau(p), float))
        dtau = np.asarray(self._dtau(p), float).reshape(self.n, -1)
        out = []
        for i in which:
            tau = float(taus[i])
            if not np.isfinite(tau):
                continue
            lo, hi = self._bracket(i, tau, p)
            out.append((tau, lo, hi, dtau[i]))
        return out

    def _bracket(self, i, tau, p):
        side = self._side[i]
        far = 1e-6 * max(1.0, abs(tau))
        before, after = np.sign(side(tau - far, p)), np.sign(side(tau + far, p))
        hi = tau
        for _ in range(_ULPS):
            if np.sign(side(hi, p)) == after:
                break
            hi = np.nextafter(hi, np.inf)
        lo = np.nextafter(hi, -np.inf)
        for _ in range(_ULPS):
            if np.sign(side(lo, p)) == before:
                break
            lo = np.nextafter(lo, -np.inf)
        return float(lo), float(hi)
