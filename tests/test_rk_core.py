"""One Runge-Kutta core for the ODE and the DDE kernels (kernels/rk.py).

The method of steps (``dde.py``) and the ODE Dormand-Prince kernel (``dopri.py``) share the
tableau, stages, error norm, step-size controller, dense output and initial step. Reference: the
ODE solver itself. A delay model whose delay term has no effect (its coefficient is 0 and the
delay lies beyond the horizon, so no breakpoint is tracked) must then give the ODE solver's bits,
step for step; any difference in the arithmetic or its order between the two kernels shows.

The two models are written so that their generated right-hand sides run the same floating-point
operations: ``c * lag(x, tau)`` in the delay model and ``c * 2.0`` in the ODE (2.0 is the
constant history of ``x``, so ``df/dc`` is 2.0 in both and the sensitivities agree too). A term
``c * x`` instead would let the code generator factor ``x`` out of the ODE's first equation
(``x * (a - b*y + c)``), a different rounding than the delay model's ``a*x - b*x*y + c*lag``:
that compares the generated model code, not the solvers.
"""

import numpy as np
import pytest

import odeinfer as oi
from odeinfer import math as om


@oi.model(states=["x", "y"], params=["a", "b", "c", "tau"], delays=["tau"])
def _delayed(t, y, p):
    return {"x": p.a * y.x - p.b * y.x * y.y + p.c * om.lag(y.x, "tau"), "y": p.b * y.x * y.y - y.y}


@oi.model(states=["x", "y"], params=["a", "b", "c", "tau"])
def _plain(t, y, p):
    return {"x": p.a * y.x - p.b * y.x * y.y + p.c * 2.0, "y": p.b * y.x * y.y - y.y}


T = np.linspace(0.0, 10.0, 11)
P = [1.0, 0.5, 0.0, 100.0]  # c = 0; tau beyond the horizon: no breakpoint, steps not capped


@pytest.mark.parametrize("gradient", [None, oi.Forward(), oi.Forward(error_control=False)],
                         ids=["states", "forward", "forward-states-error"])
def test_dde_solver_without_an_active_delay_gives_the_ode_solvers_bits(gradient):
    kw = {} if gradient is None else {"gradient": gradient}
    dde = oi.solve(oi.Problem(_delayed, T, history=[2.0, 1.0]), P, **kw)
    ode = oi.solve(oi.Problem(_plain, T, x0=[2.0, 1.0]), P, **kw)
    assert dde.success and ode.success
    assert (dde.n_steps, dde.n_rejected) == (ode.n_steps, ode.n_rejected)
    assert dde.n_steps > 20  # a real adaptive run, not one step
    assert np.array_equal(dde.y, ode.y)  # not merely close: the same arithmetic in the same order
    if gradient is not None:
        # columns a, b, c, tau, then d/d(history constant) = d/d(x0): the same quantities here
        # (c = 0 removes the lag terms exactly; df/dc = 2.0 in both models)
        assert np.array_equal(dde.sens, ode.sens)


def test_dde_solver_without_an_active_delay_rejects_steps_like_the_ode_solver():
    # a loose tolerance and a large first step force rejected steps: the controller's reject
    # branch and the retry must match too
    t = np.linspace(0.0, 20.0, 5)
    p = [1.5, 0.9, 0.0, 1e3]
    solver = oi.Dopri5(rtol=1e-3, atol=1e-6, first_step=5.0)
    dde = oi.solve(oi.Problem(_delayed, t, history=[3.0, 0.5]), p, solver=oi.MethodOfSteps(solver))
    ode = oi.solve(oi.Problem(_plain, t, x0=[3.0, 0.5]), p, solver=solver)
    assert dde.success and ode.success and ode.n_rejected > 0
    assert (dde.n_steps, dde.n_rejected) == (ode.n_steps, ode.n_rejected)
    assert np.array_equal(dde.y, ode.y)
