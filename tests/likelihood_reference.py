"""A reference optimum of a likelihood problem, independent of the optimisers under test."""

import numpy as np

import odeinfer as oi


def newton_optimum(problem, u, steps=6):
    """``(u, evaluation)``: ``steps`` Newton steps from ``u`` on the single-shooting NLL (exact gradient,
    Fisher information), with the solver at rtol 1e-11, atol 1e-13."""
    exact = oi.Objective(problem, solver=oi.Dopri5(rtol=1e-11, atol=1e-13))
    u = np.array(u, float)
    for _ in range(steps):
        ev = exact(u)
        u = u - np.linalg.solve(ev.fim, ev.grad)
    return u, exact(u)


def fd_grad(obj, u, eps=1e-6):
    """Central differences of an Objective's NLL at ``u`` (the test oracle of its exact gradient)."""
    g = np.empty(u.size)
    for i in range(u.size):
        e = np.zeros(u.size)
        e[i] = eps * max(1.0, abs(u[i]))
        g[i] = (obj(u + e, grad=False).nll - obj(u - e, grad=False).nll) / (2 * e[i])
    return g
