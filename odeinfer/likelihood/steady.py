"""Steady states of a model under constant parameters, with their sensitivities, by long-time
integration with a convergence check: the pre-equilibration of an experiment, and the state its
measurements at ``t = inf`` see (from the end of its finite-time trajectory).

The model and its forward sensitivities are integrated with the stiff solver and read at the
times ``t0 + 10^k`` (``k = 0 .. 10``, one stage each; ``t0`` matters only to a model whose right-hand
side depends on ``t``); the first time at which both ``|dx/dt|`` and the time
derivative of the sensitivities ``|J_x S + J_p|`` are below ``atol + rtol |.|`` gives the steady
state and its sensitivities ``d x_ss / d(p, x0)``. Integrating (rather than solving ``f = 0``
by Newton and the implicit function theorem) keeps models with conservation laws (singular
``J_x``) right: their steady state depends on the initial state, and the integrated
sensitivities carry that dependence.
"""

from __future__ import annotations

import numpy as np

from odeinfer.model.trace import T_SYMBOL
from odeinfer.solve import Forward, Problem, Rodas, bind
from odeinfer.solve.abi import status_message

__all__ = ["SteadyState"]

_STAGES = np.r_[0.0, 10.0 ** np.arange(0, 11)]
_RECENT = 16  # steady states remembered: one per distinct pre-equilibration of an evaluation


class SteadyState:
    """``steady(p, x0, dp, dx0) -> (x_ss, dx_ss)`` (gradients chained through ``dp``, ``dx0``,
    which are ``(n_params, n)`` and ``(n_states, n)``) or a message when it does not converge
    (``what=`` names the steady state in it; ``t0=``: the start time).

    Parameters
    ----------
    model : Model
    rtol, atol : float
        The convergence test on the states; the sensitivities use ``100 rtol``, ``100 atol``.
    solver : Rodas, optional
        Default ``oi.Rodas(rtol=1e-10, atol=1e-12, max_steps=20_000)`` (per stage).
    """

    def __init__(self, model, *, rtol=1e-8, atol=1e-10, solver=None):
        self.model, self.rtol, self.atol = model, rtol, atol
        self.solver = solver or Rodas(rtol=1e-10, atol=1e-12, max_steps=20_000)
        self._switching = [model.params.index(q) for q in model.switching_params]
        self._timed = any(T_SYMBOL in e.free_symbols for e in model.exprs)  # the start time matters
        self._bound = {}
        self._recent = {}  # (p, x0, held) -> the integration's result, the last _RECENT keys

    def _solvers(self, held, t0=0.0):
        """The stages' solvers from ``t0`` without sensitivities for the parameters ``held`` (indices):
        those that move a jump of the right-hand side are fine while the caller holds them fixed."""
        key = (held, t0)
        if key not in self._bound:
            gradient = Forward(exclude=tuple(self.model.params[k] for k in held))
            stages = _STAGES + t0
            self._bound[key] = [bind(Problem(self.model, [b], t0=a), solver=self.solver, gradient=gradient)
                                for a, b in zip(stages[:-1], stages[1:])]
        return self._bound[key]

    def prepare(self, held):
        """Bind the stages' solvers for the switching parameters ``held`` (indices) fixed: raises
        :class:`~odeinfer.errors.InputError` (as :func:`odeinfer.bind`) when another parameter moves a
        jump of the right-hand side, which the integrated steady-state sensitivities would miss."""
        self._solvers(tuple(k for k in self._switching if k in held))

    def __call__(self, p, x0, dp, dx0, *, what="pre-equilibration", t0=0.0):
        p = np.ascontiguousarray(p, float)
        x = np.ascontiguousarray(x0, float)
        held = tuple(k for k in self._switching if not np.any(dp[k]))  # their (NaN) columns meet zero rows
        t0 = float(t0) if self._timed else 0.0
        # experiments that pre-equilibrate under the same condition share one integration (PEtab's
        # Brannmark_JBC2010: 8 experiments, one pre-condition): the steady state and d x_ss / d(p, x0)
        # depend on (p, x0) alone, the chaining through (dp, dx0) is per call
        key = (p.tobytes(), x.tobytes(), held, t0)
        res = self._recent.get(key)
        if res is None:
            res = self._integrate(p, x, held, t0)
            if len(self._recent) >= _RECENT:
                self._recent.pop(next(iter(self._recent)))
            self._recent[key] = res
        if isinstance(res, str):
            return f"{what} {res}"
        xs, sens = res
        n_p = p.size
        return xs.copy(), sens[:, :n_p] @ dp + sens[:, n_p:] @ dx0

    def _integrate(self, p, x, held, t0=0.0):
        """``(x_ss, d x_ss / d(p, x0))`` from ``x`` under ``p``, or why not (a message to follow the
        steady state's name)."""
        n_p, n = p.size, x.size
        sens = np.hstack([np.zeros((n, n_p)), np.eye(n)])  # d x / d(p, x0)
        worst = np.inf
        for solver in self._solvers(held, t0):
            y, S, st = solver(p, x)
            if held:
                S = S.copy()
                S[:, :, list(held)] = 0.0
            t = solver.t[0]
            if st != 0:
                return (f"did not reach a steady state: the solver stopped at t={solver.info[0]:.6g} "
                        f"({status_message(st, t_reached=solver.info[0], max_steps=solver.max_steps)}); the smallest "
                        f"|dx/dt| seen was {worst:.3g} times the tolerance")
            x = y[0].copy()
            sens = S[0][:, n_p:] @ sens
            sens[:, :n_p] += S[0][:, :n_p]
            cm = solver.compiled
            err = np.max(np.abs(cm.f(t, x, p)) / (self.atol + self.rtol * np.abs(x)))
            if err <= 1.0:
                dS = cm.jac_y(t, x, p) @ sens
                dS[:, :n_p] += cm.jac_p(t, x, p)
                err = max(err, np.max(np.abs(dS) / (100 * self.atol + 100 * self.rtol * np.abs(sens))))
                if err <= 1.0:
                    return x, sens
            worst = min(worst, err)
        return (f"did not reach a steady state by t={t0 + _STAGES[-1]:.0e}: |dx/dt| is still "
                f"{worst:.3g} times the tolerance (atol={self.atol:g} + rtol={self.rtol:g} |x|); the model may "
                "oscillate or grow under this condition: check its parameters")
