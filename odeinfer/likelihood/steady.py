"""Pre-equilibration: the steady state of a model under constant parameters, with its
sensitivities, by long-time integration with a convergence check.

The model and its forward sensitivities are integrated with the stiff solver and read at the
times ``10^k`` (``k = 0 .. 10``); the first time at which both ``|dx/dt|`` and the time
derivative of the sensitivities ``|J_x S + J_p|`` are below ``atol + rtol |.|`` gives the steady
state and its sensitivities ``d x_ss / d(p, x0)``. Integrating (rather than solving ``f = 0``
by Newton and the implicit function theorem) keeps models with conservation laws (singular
``J_x``) right: their steady state depends on the initial state, and the integrated
sensitivities carry that dependence.
"""

from __future__ import annotations

import numpy as np

from odeinfer.solve import Forward, Problem, Rodas, bind
from odeinfer.solve.status import status_message

__all__ = ["SteadyState"]

_TIMES = 10.0 ** np.arange(0, 11)


class SteadyState:
    """``steady(p, x0, dp, dx0) -> (x_ss, dx_ss)`` (gradients chained through ``dp``, ``dx0``,
    which are ``(n_params, n)`` and ``(n_states, n)``) or a message when it does not converge.

    Parameters
    ----------
    model : Model
    rtol, atol : float
        The convergence test on the states; the sensitivities use ``100 rtol``, ``100 atol``.
    solver : Rodas, optional
        Default ``oi.Rodas(rtol=1e-10, atol=1e-12, max_steps=100_000)``.
    """

    def __init__(self, model, *, rtol=1e-8, atol=1e-10, solver=None):
        self.model, self.rtol, self.atol = model, rtol, atol
        self.solver = solver or Rodas(rtol=1e-10, atol=1e-12, max_steps=100_000)
        self._bound = None

    def _solver(self):
        if self._bound is None:
            self._bound = bind(Problem(self.model, _TIMES, t0=0.0), solver=self.solver, gradient=Forward())
        return self._bound

    def __call__(self, p, x0, dp, dx0):
        solver = self._solver()
        cm = solver.compiled
        n_p = p.size
        y, S, st = solver(np.ascontiguousarray(p, float), np.ascontiguousarray(x0, float))
        if st != 0:
            return "pre-equilibration failed: " + status_message(st, t_reached=solver.info[0],
                                                                 max_steps=solver.max_steps)
        worst = np.inf
        for k in range(_TIMES.size):
            x, Sk = y[k], S[k]
            f = cm.f(_TIMES[k], x, p)
            err = np.max(np.abs(f) / (self.atol + self.rtol * np.abs(x)))
            if err <= 1.0:
                Jx, Jp = cm.jac_y(_TIMES[k], x, p), cm.jac_p(_TIMES[k], x, p)
                dS = Jx @ Sk
                dS[:, :n_p] += Jp
                serr = np.max(np.abs(dS) / (100 * self.atol + 100 * self.rtol * np.abs(Sk)))
                if serr <= 1.0:
                    return x.copy(), Sk[:, :n_p] @ dp + Sk[:, n_p:] @ dx0
                err = serr
            worst = min(worst, err)
        return (f"pre-equilibration did not reach a steady state by t={_TIMES[-1]:.0e}: |dx/dt| is still "
                f"{worst:.3g} times the tolerance (atol={self.atol:g} + rtol={self.rtol:g} |x|); the model may "
                "oscillate or grow under the pre-equilibration condition: check its parameters")
