"""Dormand-Prince 5(4) (oi.Dopri5()): accuracy, order, sensitivities, failures.

Reference values are computed in the tests from independent sources, named
next to each comparison: the matrix exponential (scipy.linalg.expm, and Van
Loan's block-matrix formula for its parameter derivative), scipy's DOP853 at
rtol = atol = 1e-12, closed-form solutions, central finite differences and
complex-step derivatives of scipy solves.
"""

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.linalg import expm

import odeinfer as oi
from odeinfer import math as om
from odeinfer.errors import SolverError, StiffnessError
from odeinfer.solve import Status


@oi.model(states=["prey", "pred"], params=["alpha", "beta", "gamma", "delta"])
def lotka_volterra(t, y, p):
    return {"prey": p.alpha * y.prey - p.beta * y.prey * y.pred,
            "pred": p.delta * y.prey * y.pred - p.gamma * y.pred}


def lv_rhs(t, y, p):
    return [p[0] * y[0] - p[1] * y[0] * y[1], p[3] * y[0] * y[1] - p[2] * y[1]]


LV_P = np.array([1.5, 1.0, 3.0, 1.0])
LV_X0 = np.array([10.0, 5.0])


@oi.model(states=["u", "v"], params=["a", "b", "c", "w"])
def forced(t, y, p):
    """Nonlinear and non-autonomous; a parameter sits inside the time dependence."""
    return {"u": -p.a * y.u + p.b * om.sin(p.w * t) * y.v,
            "v": -p.c * y.u * y.v + om.cos(t)}


def forced_rhs(t, y, p):
    return [-p[0] * y[0] + p[1] * np.sin(p[3] * t) * y[1], -p[2] * y[0] * y[1] + np.cos(t)]


FORCED_P = np.array([0.7, 1.3, 0.9, 2.0])
FORCED_X0 = np.array([1.0, 0.5])


@oi.model(states=["x1", "x2", "x3"], params=["k1", "k2", "k3", "k4", "k5", "k6"])
def linear3(t, y, p):
    return {"x1": -p.k1 * y.x1 + p.k2 * y.x2,
            "x2": -p.k3 * y.x2 + p.k4 * y.x3,
            "x3": p.k5 * y.x1 - p.k6 * y.x3}


LIN_P = np.array([0.8, 1.2, 0.5, 2.0, 0.3, 1.1])
LIN_X0 = np.array([1.0, -0.5, 2.0])


def linear3_matrix(p):
    return np.array([[-p[0], p[1], 0.0], [0.0, -p[2], p[3]], [p[4], 0.0, -p[5]]])


def linear3_dmatrix(j):
    """dA/dp_j for linear3_matrix."""
    where = [(0, 0, -1.0), (0, 1, 1.0), (1, 1, -1.0), (1, 2, 1.0), (2, 0, 1.0), (2, 2, -1.0)][j]
    e = np.zeros((3, 3))
    e[where[0], where[1]] = where[2]
    return e


def reference_solve(rhs, p, x0, t, t0=None):
    """scipy DOP853 at rtol = atol = 1e-12 (independent 8th-order code)."""
    t0 = t[0] if t0 is None else t0
    sol = solve_ivp(rhs, (t0, t[-1]), x0, method="DOP853", t_eval=t, args=(p,), rtol=1e-12, atol=1e-12)
    assert sol.success
    return sol.y.T


def complex_step_sens(rhs, p, x0, t, h=1e-20):
    """d y / d (p, x0) by complex step: solve_ivp DOP853 on the complex rhs with
    p + i h e_j (or x0 + i h e_j); derivative = Im(y) / h (no cancellation)."""
    n, m = len(x0), len(p)
    out = np.empty((len(t), n, m + n))
    for j in range(m + n):
        pc = p.astype(complex)
        xc = x0.astype(complex)
        if j < m:
            pc[j] += 1j * h
        else:
            xc[j - m] += 1j * h
        sol = solve_ivp(rhs, (t[0], t[-1]), xc, method="DOP853", t_eval=t, args=(pc,), rtol=1e-12, atol=1e-12)
        assert sol.success
        out[:, :, j] = sol.y.imag.T / h
    return out


def central_difference_sens(rhs, p, x0, t, rel=1e-5):
    """Central differences of DOP853 solves (rtol 1e-12); the step 1e-5 * |value|
    balances truncation (~1e-8 relative here) against solver noise."""
    n, m = len(x0), len(p)
    out = np.empty((len(t), n, m + n))
    for j in range(m + n):
        dp, dx = np.zeros(m), np.zeros(n)
        if j < m:
            dp[j] = step = rel * abs(p[j])
        else:
            dx[j - m] = step = rel * max(abs(x0[j - m]), 1.0)
        hi = reference_solve(rhs, p + dp, x0 + dx, t)
        lo = reference_solve(rhs, p - dp, x0 - dx, t)
        out[:, :, j] = (hi - lo) / (2 * step)
    return out


def assert_columns_close(actual, expected, rel):
    """Every sensitivity column within ``rel`` of the expected column's scale."""
    for j in range(expected.shape[2]):
        scale = np.max(np.abs(expected[:, :, j]))
        err = np.max(np.abs(actual[:, :, j] - expected[:, :, j]))
        assert err <= rel * scale, f"column {j}: max error {err:.3e} > {rel:g} * {scale:.3e}"


# --- accuracy ------------------------------------------------------------------


def test_linear_system_matches_matrix_exponential():
    t = np.linspace(0.0, 5.0, 11)
    sol = oi.solve(oi.Problem(linear3, t, x0=LIN_X0), LIN_P, solver=oi.Dopri5(rtol=1e-10, atol=1e-12))
    a = linear3_matrix(LIN_P)
    expected = np.array([expm(a * ti) @ LIN_X0 for ti in t])  # exact solution
    np.testing.assert_allclose(sol.y, expected, rtol=1e-8, atol=1e-10)
    assert sol.success and sol.status == Status.SUCCESS


def test_linear_system_sensitivities_match_matrix_exponential():
    t = np.linspace(0.0, 5.0, 11)
    sol = oi.solve(oi.Problem(linear3, t, x0=LIN_X0), LIN_P, solver=oi.Dopri5(rtol=1e-10, atol=1e-12),
                   gradient=oi.Forward())
    a = linear3_matrix(LIN_P)
    for i, ti in enumerate(t):
        # d y / d x0 = expm(A t)
        np.testing.assert_allclose(sol.sens[i, :, 6:], expm(a * ti), rtol=1e-8, atol=1e-10)
        for j in range(6):
            # Van Loan: expm([[A, E], [0, A]] t)[:3, 3:] = d expm(A t) / d p_j for E = dA/dp_j
            block = np.block([[a, linear3_dmatrix(j)], [np.zeros((3, 3)), a]])
            expected = expm(block * ti)[:3, 3:] @ LIN_X0
            np.testing.assert_allclose(sol.sens[i, :, j], expected, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("model, rhs, p, x0", [
    (lotka_volterra, lv_rhs, LV_P, LV_X0),
    (forced, forced_rhs, FORCED_P, FORCED_X0),
])
def test_nonlinear_models_match_dop853(model, rhs, p, x0):
    t = np.linspace(0.0, 10.0, 41)
    sol = oi.solve(oi.Problem(model, t, x0=x0), p, solver=oi.Dopri5(rtol=1e-10, atol=1e-12))
    np.testing.assert_allclose(sol.y, reference_solve(rhs, p, x0, t), rtol=1e-7, atol=1e-9)


def test_default_tolerances_give_about_six_digits():
    t = np.linspace(0.0, 20.0, 21)
    sol = oi.solve(oi.Problem(lotka_volterra, t, x0=LV_X0), LV_P)
    ref = reference_solve(lv_rhs, LV_P, LV_X0, t)
    err = np.max(np.abs(sol.y - ref) / np.max(np.abs(ref), axis=0))
    assert 1e-9 < err < 1e-4  # rtol = 1e-6 locally; global error a modest multiple of it


def test_t0_before_first_output_and_repeated_times():
    t = np.array([1.0, 1.0, 2.5, 4.0, 4.0])
    sol = oi.solve(oi.Problem(forced, t, x0=FORCED_X0, t0=0.0), FORCED_P, solver=oi.Dopri5(rtol=1e-10, atol=1e-12))
    ref = reference_solve(forced_rhs, FORCED_P, FORCED_X0, np.unique(t), t0=0.0)
    np.testing.assert_allclose(sol.y, ref[[0, 0, 1, 2, 2]], rtol=1e-8, atol=1e-10)
    np.testing.assert_array_equal(sol.y[0], sol.y[1])


def test_first_output_at_t0_is_x0_exactly():
    sol = oi.solve(oi.Problem(lotka_volterra, [0.0, 0.5], x0=LV_X0), LV_P, gradient=oi.Forward())
    np.testing.assert_array_equal(sol.y[0], LV_X0)
    np.testing.assert_array_equal(sol.sens[0], np.hstack([np.zeros((2, 4)), np.eye(2)]))


# --- order of convergence (fixed-step mode) --------------------------------------


def test_fixed_step_mode_has_order_five():
    """Error at t = 4 of x' = -x (closed form e^-4) with N = 20 .. 160 constant steps."""
    @oi.model(states=["x"], params=["lam"])
    def decay(t, y, p):
        return {"x": -p.lam * y.x}

    hs, errs = [], []
    for n in (20, 40, 80, 160):
        sol = oi.solve(oi.Problem(decay, [0.0, 4.0], x0=[1.0]), [1.0], solver=oi.Dopri5(fixed_step=4.0 / n))
        assert sol.n_steps == n
        hs.append(4.0 / n)
        errs.append(abs(sol.y[-1, 0] - np.exp(-4.0)))
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    assert 4.8 < slope < 5.3, f"observed order {slope:.2f}"


def test_fixed_step_order_on_nonlinear_model_and_dense_output():
    """Forced model vs DOP853: grid-point errors fall at least like h^5; dense
    output (times between steps) at least like h^4, the order of the interpolant."""
    t_end = 5.0
    t = np.array([0.0, 0.77, 2.9, t_end])
    ref = reference_solve(forced_rhs, FORCED_P, FORCED_X0, t)
    hs, end_err, dense_err = [], [], []
    for n in (40, 80, 160, 320):
        sol = oi.solve(oi.Problem(forced, t, x0=FORCED_X0), FORCED_P, solver=oi.Dopri5(fixed_step=t_end / n))
        hs.append(t_end / n)
        end_err.append(np.max(np.abs(sol.y[-1] - ref[-1])))
        dense_err.append(np.max(np.abs(sol.y[1:3] - ref[1:3])))
    assert np.polyfit(np.log(hs), np.log(end_err), 1)[0] > 4.8
    assert np.polyfit(np.log(hs), np.log(dense_err), 1)[0] > 4.0


# --- sensitivities -----------------------------------------------------------------


@pytest.mark.parametrize("model, rhs, p, x0", [
    (lotka_volterra, lv_rhs, LV_P, LV_X0),
    (forced, forced_rhs, FORCED_P, FORCED_X0),
])
def test_sensitivities_match_complex_step_and_finite_differences(model, rhs, p, x0):
    t = np.linspace(0.0, 6.0, 13)
    sol = oi.solve(oi.Problem(model, t, x0=x0), p, solver=oi.Dopri5(rtol=1e-10, atol=1e-12), gradient=oi.Forward())
    assert sol.sens.shape == (13, 2, 6)
    assert_columns_close(sol.sens, complex_step_sens(rhs, p, x0, t), 1e-6)
    assert_columns_close(sol.sens, central_difference_sens(rhs, p, x0, t), 1e-6)


def test_states_do_not_depend_on_sensitivities_without_sens_error_control():
    t = np.linspace(0.0, 20.0, 21)
    plain = oi.solve(oi.Problem(lotka_volterra, t, x0=LV_X0), LV_P)
    with_sens = oi.solve(oi.Problem(lotka_volterra, t, x0=LV_X0), LV_P, gradient=oi.Forward(error_control=False))
    # error control on y only: the same steps (up to rounding in fused multiply-adds)
    assert with_sens.n_steps == plain.n_steps
    np.testing.assert_allclose(with_sens.y, plain.y, rtol=1e-12)
    controlled = oi.solve(oi.Problem(lotka_volterra, t, x0=LV_X0), LV_P, gradient=oi.Forward())
    assert controlled.n_steps > plain.n_steps


# --- failures --------------------------------------------------------------------


@oi.model(states=["y1", "y2", "y3"], params=["k1", "k2", "k3"])
def robertson(t, y, p):
    return {"y1": -p.k1 * y.y1 + p.k3 * y.y2 * y.y3,
            "y2": p.k1 * y.y1 - p.k2 * y.y2 ** 2 - p.k3 * y.y2 * y.y3,
            "y3": p.k2 * y.y2 ** 2}


@oi.model(states=["x1", "x2"], params=["mu"])
def van_der_pol(t, y, p):
    # 1.0 * y.x2: the tracer (as of this writing) rejects a bare state as a derivative
    return {"x1": 1.0 * y.x2, "x2": p.mu * (1 - y.x1 ** 2) * y.x2 - y.x1}


@pytest.mark.parametrize("model, p, x0, t_end", [
    (robertson, [0.04, 3e7, 1e4], [1.0, 0.0, 0.0], 1e5),
    (van_der_pol, [1000.0], [2.0, 0.0], 3000.0),
])
def test_stiff_problems_stop_with_stiffness_status_instead_of_hanging(model, p, x0, t_end):
    with pytest.raises(StiffnessError, match=r"status STIFF .*solver=oi\.Rodas\(\)") as info:
        oi.solve(oi.Problem(model, np.linspace(0.0, t_end, 5), x0=x0), p, solver=oi.Dopri5(rtol=1e-6))
    assert info.value.status == Status.STIFF
    assert 0.0 < info.value.t_reached < t_end
    sol = oi.solve(oi.Problem(model, np.linspace(0.0, t_end, 5), x0=x0), p, raise_on_failure=False)
    assert sol.status == Status.STIFF and not sol.success
    assert sol.n_steps < 2000  # Hairer's test: first check after 1000 steps, 15 positive checks
    assert np.all(np.isnan(sol.y[-1]))


def test_finite_time_blow_up_reports_t_reached_near_the_singularity():
    @oi.model(states=["y"], params=["c"])
    def square(t, y, p):
        return {"y": p.c * y.y ** 2}  # y = 1 / (1 - t): infinite at t = 1

    with pytest.raises(SolverError, match=r"status STEP_TOO_SMALL at t_reached=1\.0000") as info:
        oi.solve(oi.Problem(square, [0.0, 0.5, 2.0], x0=[1.0]), [1.0])
    assert info.value.status == Status.STEP_TOO_SMALL
    assert abs(info.value.t_reached - 1.0) < 1e-5
    sol = oi.solve(oi.Problem(square, [0.0, 0.5, 2.0], x0=[1.0]), [1.0], raise_on_failure=False)
    np.testing.assert_allclose(sol.y[:2, 0], [1.0, 2.0], rtol=1e-5)
    assert np.isnan(sol.y[2, 0]) and sol.status == Status.STEP_TOO_SMALL


def test_max_steps_stops_the_solver():
    with pytest.raises(StiffnessError, match=r"status MAX_STEPS .*max_steps=10 "):
        oi.solve(oi.Problem(lotka_volterra, np.linspace(0.0, 20.0, 5), x0=LV_X0), LV_P, solver=oi.Dopri5(max_steps=10))
    sol = oi.solve(oi.Problem(lotka_volterra, np.linspace(0.0, 20.0, 5), x0=LV_X0), LV_P,
                   solver=oi.Dopri5(max_steps=10), raise_on_failure=False)
    assert sol.status == Status.MAX_STEPS and sol.n_steps == 10


def test_non_finite_right_hand_side_gives_non_finite_status():
    @oi.model(states=["x"], params=["k"])
    def sqrt_decay(t, y, p):
        return {"x": -p.k * om.sqrt(y.x)}  # x hits 0 at t = 2 sqrt(x0) / k, then sqrt(<0) = NaN

    sol = oi.solve(oi.Problem(sqrt_decay, [0.0, 1.0, 3.0], x0=[1.0]), [1.0], raise_on_failure=False)
    assert sol.status in (Status.NON_FINITE, Status.STEP_TOO_SMALL)
    assert sol.t_reached == pytest.approx(2.0, abs=1e-2)
    assert sol.y[1, 0] == pytest.approx(0.25, rel=1e-5)  # (1 - t/2)^2 at t = 1
    with pytest.raises(SolverError, match=r"status NON_FINITE at t_reached=0\.0: .*inf or NaN") as info:
        oi.solve(oi.Problem(sqrt_decay, [0.0, 1.0], x0=[-1.0]), [1.0])  # f(t0, x0) = NaN
    assert info.value.status == Status.NON_FINITE
