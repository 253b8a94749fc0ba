"""Rodas4 (oi.Rodas()): coefficients, stiff problems, sensitivities through
the exact augmented Jacobian, failures.

Independent references, computed in the tests: the Rosenbrock order conditions
of Hairer & Wanner, Solving ODE II, Table IV.7.1; scipy's Radau at rtol 1e-10
(Robertson, Van der Pol); scipy's DOP853 at rtol = atol = 1e-12; the matrix
exponential; complex-step and central-difference derivatives of scipy solves.
"""

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.linalg import expm

import odeinfer as oi
from odeinfer import math as om
from odeinfer.errors import SolverError
from odeinfer.solve import Status


@oi.model(states=["prey", "pred"], params=["alpha", "beta", "gamma", "delta"])
def lotka_volterra(t, y, p):
    return {"prey": p.alpha * y.prey - p.beta * y.prey * y.pred,
            "pred": p.delta * y.prey * y.pred - p.gamma * y.pred}


def lv_rhs(t, y, p):
    return [p[0] * y[0] - p[1] * y[0] * y[1], p[3] * y[0] * y[1] - p[2] * y[1]]


@oi.model(states=["u", "v"], params=["a", "b", "c", "w"])
def forced(t, y, p):
    """Nonlinear and non-autonomous: exercises f_t, d(J_y)/dt and d(J_p)/dt."""
    return {"u": -p.a * y.u + p.b * om.sin(p.w * t) * y.v,
            "v": -p.c * y.u * y.v + om.cos(t)}


def forced_rhs(t, y, p):
    return [-p[0] * y[0] + p[1] * np.sin(p[3] * t) * y[1], -p[2] * y[0] * y[1] + np.cos(t)]


@oi.model(states=["y1", "y2", "y3"], params=["k1", "k2", "k3"])
def robertson(t, y, p):
    return {"y1": -p.k1 * y.y1 + p.k3 * y.y2 * y.y3,
            "y2": p.k1 * y.y1 - p.k2 * y.y2 ** 2 - p.k3 * y.y2 * y.y3,
            "y3": p.k2 * y.y2 ** 2}


def robertson_rhs(t, y, p):
    return [-p[0] * y[0] + p[2] * y[1] * y[2],
            p[0] * y[0] - p[1] * y[1] ** 2 - p[2] * y[1] * y[2],
            p[1] * y[1] ** 2]


ROBERTSON_P = np.array([0.04, 3e7, 1e4])


@oi.model(states=["x1", "x2"], params=["mu"])
def van_der_pol(t, y, p):
    # 1.0 * y.x2: the tracer (as of this writing) rejects a bare state as a derivative
    return {"x1": 1.0 * y.x2, "x2": p.mu * (1 - y.x1 ** 2) * y.x2 - y.x1}


def dop853(rhs, p, x0, t):
    sol = solve_ivp(rhs, (t[0], t[-1]), x0, method="DOP853", t_eval=t, args=(p,), rtol=1e-12, atol=1e-12)
    assert sol.success
    return sol.y.T


def complex_step_sens(rhs, p, x0, t, h=1e-20):
    """d y / d (p, x0): DOP853 on the complex rhs with p + i h e_j; Im(y) / h."""
    n, m = len(x0), len(p)
    out = np.empty((len(t), n, m + n))
    for j in range(m + n):
        pc, xc = p.astype(complex), x0.astype(complex)
        if j < m:
            pc[j] += 1j * h
        else:
            xc[j - m] += 1j * h
        sol = solve_ivp(rhs, (t[0], t[-1]), xc, method="DOP853", t_eval=t, args=(pc,), rtol=1e-12, atol=1e-12)
        out[:, :, j] = sol.y.imag.T / h
    return out


def assert_columns_close(actual, expected, rel):
    for j in range(expected.shape[2]):
        scale = np.max(np.abs(expected[:, :, j]))
        err = np.max(np.abs(actual[:, :, j] - expected[:, :, j]))
        assert err <= rel * scale, f"column {j}: max error {err:.3e} > {rel:g} * {scale:.3e}"


# --- the method ---------------------------------------------------------------------


def test_rodas4_coefficients_satisfy_the_order_conditions():
    """Convert the transformed coefficients (a_ij, c_ij, gamma; Hairer's rodas.f) back
    to alpha, Gamma, b (HW II eq. IV.7.17-18) and check Table IV.7.1: order 4 for
    the solution, order 3 for the embedded one; nodes and gamma_i match c_i, d_i."""
    mod = lotka_volterra.compile().module
    g = {name[4:]: getattr(mod, name) for name in dir(mod) if name.startswith("_RO_")}
    gam = g["GAMMA"]
    a = np.zeros((6, 6))
    c = np.zeros((6, 6))
    a[1, 0] = g["A21"]
    a[2, :2] = g["A31"], g["A32"]
    a[3, :3] = g["A41"], g["A42"], g["A43"]
    a[4, :4] = g["A51"], g["A52"], g["A53"], g["A54"]
    a[5, :5] = g["A51"], g["A52"], g["A53"], g["A54"], 1.0  # stage 6 starts from the embedded solution
    for i in range(1, 6):
        for j in range(i):
            c[i, j] = g[f"C{i + 1}{j + 1}"]
    big_gamma = np.linalg.inv(np.eye(6) / gam - c)  # C = diag(1/gamma) - Gamma^-1
    alpha = a @ big_gamma  # a = alpha Gamma^-1
    m = np.array([g["A51"], g["A52"], g["A53"], g["A54"], 1.0, 1.0])  # y1 = y0 + sum m_i u_i
    m_hat = np.array([g["A51"], g["A52"], g["A53"], g["A54"], 1.0, 0.0])
    np.testing.assert_allclose(alpha.sum(1), [0, g["C2"], g["C3"], g["C4"], 1, 1], atol=1e-13)
    np.testing.assert_allclose(big_gamma.sum(1), [g["D1"], g["D2"], g["D3"], g["D4"], 0, 0], atol=1e-13)

    beta = alpha + big_gamma - np.diag(np.diag(big_gamma))  # beta_ij = alpha_ij + gamma_ij, j < i
    bp, al = beta.sum(1), alpha.sum(1)

    def residuals(b):
        return np.array([
            b.sum() - 1,
            b @ bp - (0.5 - gam),
            b @ al ** 2 - 1 / 3,
            b @ beta @ bp - (1 / 6 - gam + gam ** 2),
            b @ al ** 3 - 1 / 4,
            (b * al) @ alpha @ bp - (1 / 8 - gam / 3),
            b @ beta @ al ** 2 - (1 / 12 - gam / 3),
            b @ beta @ beta @ bp - (1 / 24 - gam / 2 + 1.5 * gam ** 2 - gam ** 3),
        ])

    np.testing.assert_allclose(residuals(m @ big_gamma), 0.0, atol=1e-12)
    embedded = residuals(m_hat @ big_gamma)
    np.testing.assert_allclose(embedded[:4], 0.0, atol=1e-12)
    assert np.max(np.abs(embedded[4:])) > 1e-3  # order exactly 3: the error estimate is real


# --- accuracy -------------------------------------------------------------------------


def test_linear_system_matches_matrix_exponential():
    @oi.model(states=["x1", "x2"], params=["a", "b"])
    def rotation_decay(t, y, p):
        return {"x1": -p.a * y.x1 + p.b * y.x2, "x2": -p.b * y.x1 - p.a * y.x2}

    t = np.linspace(0.0, 4.0, 9)
    sol = oi.solve(oi.Problem(rotation_decay, t, x0=[1.0, 0.0]), [0.3, 2.0], solver=oi.Rodas(rtol=1e-10, atol=1e-12),
                   gradient=oi.Forward())
    a = np.array([[-0.3, 2.0], [-2.0, -0.3]])
    for i, ti in enumerate(t):
        np.testing.assert_allclose(sol.y[i], expm(a * ti) @ [1.0, 0.0], rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(sol.sens[i, :, 2:], expm(a * ti), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("model, rhs, p, x0", [
    (lotka_volterra, lv_rhs, np.array([1.5, 1.0, 3.0, 1.0]), np.array([10.0, 5.0])),
    (forced, forced_rhs, np.array([0.7, 1.3, 0.9, 2.0]), np.array([1.0, 0.5])),
])
def test_nonlinear_models_and_sensitivities_match_references(model, rhs, p, x0):
    t = np.linspace(0.0, 6.0, 25)
    sol = oi.solve(oi.Problem(model, t, x0=x0), p, solver=oi.Rodas(rtol=1e-10, atol=1e-12), gradient=oi.Forward())
    np.testing.assert_allclose(sol.y, dop853(rhs, p, x0, t), rtol=1e-7, atol=1e-9)
    assert_columns_close(sol.sens, complex_step_sens(rhs, p, x0, t), 1e-6)
    fd = np.empty_like(sol.sens)
    for j in range(6):
        dp, dx = np.zeros(4), np.zeros(2)
        if j < 4:
            dp[j] = step = 1e-5 * abs(p[j])
        else:
            dx[j - 4] = step = 1e-5 * abs(x0[j - 4])
        fd[:, :, j] = (dop853(rhs, p + dp, x0 + dx, t) - dop853(rhs, p - dp, x0 - dx, t)) / (2 * step)
    assert_columns_close(sol.sens, fd, 1e-6)


def test_robertson_matches_radau_and_conserves_mass():
    t = np.concatenate([[0.0], np.logspace(-5, 5, 21)])
    sol = oi.solve(oi.Problem(robertson, t, x0=[1.0, 0.0, 0.0]), ROBERTSON_P, solver=oi.Rodas(rtol=1e-6, atol=1e-10))
    ref = solve_ivp(robertson_rhs, (0.0, 1e5), [1.0, 0.0, 0.0], method="Radau", t_eval=t, args=(ROBERTSON_P,),
                    rtol=1e-10, atol=1e-14).y.T
    np.testing.assert_allclose(sol.y[:, 0], ref[:, 0], rtol=1e-5)
    np.testing.assert_allclose(sol.y[:, 1], ref[:, 1], rtol=1e-4, atol=1e-12)  # y2 peaks at 3.6e-5
    np.testing.assert_allclose(sol.y[:, 2], ref[:, 2], rtol=1e-4, atol=1e-10)
    # Rosenbrock stages are linear in f and J, so the linear invariant y1 + y2 + y3 holds to rounding
    np.testing.assert_allclose(sol.y.sum(axis=1), 1.0, atol=1e-12)
    assert sol.n_steps < 500


def test_robertson_sensitivities_match_finite_differences_of_radau():
    t = np.array([0.0, 0.4, 40.0, 4e3, 4e5])
    x0 = np.array([1.0, 0.0, 0.0])
    sol = oi.solve(oi.Problem(robertson, t, x0=x0), ROBERTSON_P, solver=oi.Rodas(rtol=1e-8, atol=1e-14),
                   gradient=oi.Forward())
    conserved = sol.sens.sum(axis=1)  # d(y1 + y2 + y3) = 0 for parameters, 1 for each x0
    np.testing.assert_allclose(conserved[:, :3], 0.0, atol=1e-10)
    np.testing.assert_allclose(conserved[:, 3:], 1.0, atol=1e-10)

    def radau(p):
        return solve_ivp(robertson_rhs, (0.0, t[-1]), x0, method="Radau", t_eval=t, args=(p,),
                         rtol=1e-12, atol=1e-16).y.T

    for j in range(3):  # d y / d k_j, relative steps 1e-4: truncation ~1e-8
        dp = np.zeros(3)
        dp[j] = 1e-4 * ROBERTSON_P[j]
        fd = (radau(ROBERTSON_P + dp) - radau(ROBERTSON_P - dp)) / (2 * dp[j])
        for i in range(3):  # each state on its own scale (y2 is 1e5 times smaller)
            scale = np.max(np.abs(fd[:, i]))
            assert np.max(np.abs(sol.sens[:, i, j] - fd[:, i])) <= 1e-4 * scale, (i, j)


def test_van_der_pol_stiff_matches_radau():
    t = np.linspace(0.0, 3000.0, 31)
    sol = oi.solve(oi.Problem(van_der_pol, t, x0=[2.0, 0.0]), [1000.0], solver=oi.Rodas(rtol=1e-6, atol=1e-8))
    ref = solve_ivp(lambda _, y: [y[1], 1000.0 * (1 - y[0] ** 2) * y[1] - y[0]], (0.0, 3000.0), [2.0, 0.0],
                    method="Radau", t_eval=t, rtol=1e-10, atol=1e-12).y.T
    # x1 = O(1) and x2 = O(1e-3) on the slow manifold; outputs avoid the fast jumps
    assert np.max(np.abs(sol.y[:, 0] - ref[:, 0])) < 5e-5
    assert np.max(np.abs(sol.y[:, 1] - ref[:, 1])) < 2e-6
    assert sol.n_steps < 5000


def test_dense_output_between_steps_is_accurate():
    """Many output times inside each step: the order-3 continuous extension."""
    t = np.linspace(0.0, 6.0, 601)
    p, x0 = np.array([0.7, 1.3, 0.9, 2.0]), np.array([1.0, 0.5])
    sol = oi.solve(oi.Problem(forced, t, x0=x0), p, solver=oi.Rodas(rtol=1e-6, atol=1e-8))
    assert sol.n_steps < 300  # so most of the 601 outputs are interpolated
    # interpolated values as accurate as the step ends: a few times rtol
    assert np.max(np.abs(sol.y - dop853(forced_rhs, p, x0, t))) < 1e-5


# --- failures ---------------------------------------------------------------------------


def test_blow_up_and_max_steps_are_reported():
    @oi.model(states=["y"], params=["c"])
    def square(t, y, p):
        return {"y": p.c * y.y ** 2}

    with pytest.raises(SolverError, match=r"solve \(method 'rodas'\) failed with status STEP_TOO_SMALL") as info:
        oi.solve(oi.Problem(square, [0.0, 2.0], x0=[1.0]), [1.0], solver=oi.Rodas())
    assert abs(info.value.t_reached - 1.0) < 1e-5
    sol = oi.solve(oi.Problem(robertson, [0.0, 1e5], x0=[1.0, 0.0, 0.0]), ROBERTSON_P, solver=oi.Rodas(max_steps=5),
                   raise_on_failure=False)
    assert sol.status == Status.MAX_STEPS and np.isnan(sol.y[-1]).all()
    with pytest.raises(SolverError, match="status MAX_STEPS"):
        oi.solve(oi.Problem(robertson, [0.0, 1e5], x0=[1.0, 0.0, 0.0]), ROBERTSON_P, solver=oi.Rodas(max_steps=5))


def test_singular_iteration_matrix_is_reported():
    @oi.model(states=["x"], params=["k"])
    def sqrt_decay(t, y, p):
        return {"x": -p.k * om.sqrt(y.x)}  # df/dx = -k / (2 sqrt x): infinite when x reaches 0 at t = 2

    sol = oi.solve(oi.Problem(sqrt_decay, [0.0, 1.0, 3.0], x0=[1.0]), [1.0], solver=oi.Rodas(), raise_on_failure=False)
    assert sol.status == Status.SINGULAR
    assert sol.t_reached == pytest.approx(2.0, abs=1e-2)
    assert sol.y[1, 0] == pytest.approx(0.25, rel=1e-5)  # (1 - t/2)^2 at t = 1
    with pytest.raises(SolverError, match=r"status SINGULAR .*I/\(h\*gamma\) - df/dy stayed singular"):
        oi.solve(oi.Problem(sqrt_decay, [0.0, 3.0], x0=[1.0]), [1.0], solver=oi.Rodas())
