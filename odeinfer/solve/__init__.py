"""ODE solvers: explicit Dormand-Prince 5(4) and stiff Rodas4, with forward sensitivities;
DDE solver (method of steps with Dormand-Prince 5(4)): :func:`solve_dde`, :func:`make_dde_solver`.

:func:`solve_ode` is the validated, user-facing call; :func:`make_solver` returns a
:class:`Solver` that calls the numba kernel directly with preallocated buffers
(for estimators and benchmarks). :func:`solve_vjp` / :func:`make_vjp` give vector-Jacobian
products ``sum_i g_i^T dx(t_i)/d(params, x0)`` by the continuous adjoint (for many
parameters). The kernels themselves live in :mod:`odeinfer.solve.kernels` and are compiled into each model's generated module,
so numba code there can call ``dopri5_solve`` / ``rodas_solve`` directly.
"""

from odeinfer.solve.adjoint import VJP, make_vjp, solve_vjp
from odeinfer.solve.api import Solution, Solver, make_solver, solve_ode
from odeinfer.solve.dde import DDESolution, DDESolver, make_dde_solver, solve_dde
from odeinfer.solve.status import Status, status_message

__all__ = ["solve_ode", "make_solver", "Solver", "Solution", "Status", "status_message",
           "solve_dde", "make_dde_solver", "DDESolver", "DDESolution", "solve_vjp", "make_vjp", "VJP"]
