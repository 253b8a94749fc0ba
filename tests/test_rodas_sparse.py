"""Rodas on a model large enough for the planned sparse LU (``LU_SPARSE_MIN`` states or more, see
``odeinfer/solve/kernels/linalg.py``): states, forward sensitivities and the discrete adjoint against independent
references. The model: a stiff 30-species decay chain (rates over four decades), a binding reaction between two
species (its Jacobian entries vanish at the start, where one of them is absent) and a transfer whose rate grows
as t^2 (its entries are zero at t0 = 0, at the plan's probe too: the factorization plans again once it turns on).

References: scipy's Radau at rtol 1e-12 (states), central differences of it (sensitivities), Rodas's forward
sensitivities at rtol 1e-12 (the adjoint, as in ``test_adjoint_vjp.py``)."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import odeinfer as oi
from odeinfer import zoo
from odeinfer.solve import Status

N = 30
RATES = 10.0 ** np.linspace(-1.0, 3.0, N - 1)  # x_i -> x_{i+1} at a * RATES[i]
BIND = (1, 2, 25)  # x1 + x2 -> x25 at rate b
MOVE = (3, 28)  # x3 -> x28 at rate g t^2
P = np.array([0.8, 2.0, 0.5])  # a, b, g
X0 = np.zeros(N)
X0[0], X0[2] = 1.0, 0.5
T = np.array([0.01, 0.1, 0.5, 1.0, 2.0, 3.5, 5.0])


def _equations():
    eq = {}
    for i in range(N):
        terms = []
        if i > 0:
            terms.append(f"a*{float(RATES[i - 1])!r}*x{i - 1}")
        if i < N - 1:
            terms.append(f"-a*{float(RATES[i])!r}*x{i}")
        eq[f"x{i}"] = " + ".join(terms).replace("+ -", "- ")
    s, u, c = BIND
    eq[f"x{s}"] += f" - b*x{s}*x{u}"
    eq[f"x{u}"] += f" - b*x{s}*x{u}"
    eq[f"x{c}"] += f" + b*x{s}*x{u}"
    src, dst = MOVE
    eq[f"x{src}"] += f" - g*t**2*x{src}"
    eq[f"x{dst}"] += f" + g*t**2*x{src}"
    return eq


network = oi.Model.from_equations(_equations(), params=["a", "b", "g"])


def rhs(t, x, p):
    a, b, g = p
    flow = a * RATES * x[:-1]
    dx = np.zeros(N)
    dx[:-1] -= flow
    dx[1:] += flow
    s, u, c = BIND
    r = b * x[s] * x[u]
    dx[s] -= r
    dx[u] -= r
    dx[c] += r
    src, dst = MOVE
    dx[src] -= g * t * t * x[src]
    dx[dst] += g * t * t * x[src]
    return dx


def radau(p, x0=X0):
    return solve_ivp(rhs, (0.0, T[-1]), x0, method="Radau", t_eval=T, args=(p,), rtol=1e-12, atol=1e-14).y.T


def test_the_network_is_planned_sparse():
    """The model's Jacobian pattern gets a plan (so the solves below run the sparse LU) with little fill."""
    module = zoo.get("lotka_volterra").model.compile().module  # the LU kernels are model-independent
    jac = network.lambdify("jac_y")
    pattern = np.zeros((3, N, N), dtype=np.bool_)
    pattern[0] = np.eye(N, dtype=bool)
    for t, x in ((0.0, X0), (1.0, np.abs(X0) + 1.0)):
        pattern[0] |= np.asarray(jac(t, x, P), dtype=float) != 0.0
    plan = np.zeros(module.lu_plan_len(N), dtype=np.int64)
    assert module.lu_plan(pattern, plan) and plan[1] == 1
    assert plan[2] < 3 * N  # the factors' off-diagonal entries: a few per state


def test_states_and_sensitivities_match_radau():
    sol = oi.solve(oi.Problem(network, T, x0=X0, t0=0.0), P, solver=oi.Rodas(rtol=1e-10, atol=1e-13),
                   gradient=oi.Forward())
    assert sol.status == Status.SUCCESS
    ref = radau(P)
    np.testing.assert_allclose(sol.y, ref, rtol=1e-7, atol=1e-11)
    for j in range(3):  # d x / d p_j: central differences, relative step 1e-4 (truncation about 1e-8)
        dp = np.zeros(3)
        dp[j] = 1e-4 * P[j]
        fd = (radau(P + dp) - radau(P - dp)) / (2 * dp[j])
        np.testing.assert_allclose(sol.sens[:, :, j], fd, rtol=0, atol=1e-6 * np.abs(fd).max())
    for i in (0, 2):  # d x / d x0_i
        dx = np.zeros(N)
        dx[i] = 1e-4
        fd = (radau(P, X0 + dx) - radau(P, X0 - dx)) / 2e-4
        np.testing.assert_allclose(sol.sens[:, :, 3 + i], fd, rtol=0, atol=1e-6 * np.abs(fd).max())


@pytest.mark.parametrize("seed", [0, 1])
def test_the_discrete_adjoint_matches_forward_sensitivities(seed):
    g = np.random.default_rng(seed).normal(size=(T.size, N))
    s = oi.solve(oi.Problem(network, T, x0=X0, t0=0.0), P, solver=oi.Rodas(rtol=1e-12, atol=1e-14),
                 gradient=oi.Forward())
    ref = np.einsum("ik,ikj->j", g, s.sens)
    vjp = oi.bind(oi.Problem(network, T, t0=0.0), solver=oi.Rodas(rtol=1e-10, atol=1e-13), gradient=oi.Adjoint())
    grad, status = vjp(P.copy(), X0.copy(), g)
    assert status == Status.SUCCESS
    np.testing.assert_allclose(grad, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())
