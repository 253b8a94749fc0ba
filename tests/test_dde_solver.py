"""DDE solver (method of steps, Dormand-Prince 5(4), dense output, breakpoints, sensitivities).

References: the analytic solution of x' = -x(t - 1) with constant history; an
independent scipy DOP853 method of steps at rtol 1e-12 (tests/dde_reference.py,
hand-written right-hand sides) on every DDE zoo model; central finite differences
of the solution map for the sensitivities.
"""

import math

import numpy as np
import pytest

import odeinfer as oi
from odeinfer import math as om
from odeinfer import zoo
from odeinfer.errors import DataError, InputError, SolverError
from odeinfer.model import History
from odeinfer.solve import Status, make_dde_solver, solve_dde, solve_ode


def _load_reference():
    import dde_reference  # tests/ is on sys.path (conftest.py)

    return dde_reference


ref = _load_reference()
DDE_NAMES = zoo.available("dde")
TIGHT = dict(rtol=1e-10, atol=1e-12)


@oi.model(states=["x"], params=["a", "tau"], delays=["tau"])
def lagged_decay(t, y, p):
    return {"x": -p.a * om.lag(y.x, "tau")}


@oi.model(states=["x", "v"], params=["a", "b", "c", "tau1", "tau2"], delays=["tau1", "tau2"])
def two_delays(t, y, p):
    return {"x": y.v - p.a * om.lag(y.x, "tau1"),
            "v": -p.b * y.x - p.c * om.lag(y.v, "tau2") * om.lag(y.x, "tau1")}


def _exact_lagged_decay(t):
    """x' = -x(t - 1), x = 1 on [-1, 0]: x(t) = sum_{j=0}^{floor(t)+1} (-1)^j (t - j + 1)^j / j!."""
    return sum((-1) ** j * (t - j + 1) ** j / math.factorial(j) for j in range(int(math.floor(t)) + 2))


def test_matches_the_analytic_piecewise_polynomial_solution():
    t = np.linspace(0.0, 6.0, 61)
    sol = solve_dde(lagged_decay, {"a": 1.0, "tau": 1.0}, 1.0, t, **TIGHT)
    exact = np.array([_exact_lagged_decay(v) for v in t])
    np.testing.assert_allclose(sol.y[:, 0], exact, rtol=0, atol=1e-10)
    # the steps land on the breakpoints, so the error is at the tolerance level with few steps
    assert sol.success and sol.n_steps < 400


def test_dense_output_between_breakpoints_is_accurate_at_default_tolerance():
    t = np.linspace(0.0, 5.0, 501)
    sol = solve_dde(lagged_decay, {"a": 1.0, "tau": 1.0}, 1.0, t)
    exact = np.array([_exact_lagged_decay(v) for v in t])
    assert np.max(np.abs(sol.y[:, 0] - exact)) < 1e-5  # global error within 10 rtol


@pytest.mark.parametrize("name", DDE_NAMES)
def test_states_match_scipy_method_of_steps(name):
    entry = zoo.get(name)
    sol = solve_dde(entry.model, entry.params_array(), entry.history, entry.t, t0=entry.t0, **TIGHT)
    want = ref.reference_solution(entry)
    scale = np.max(np.abs(want), axis=0) + 1e-300
    err = np.max(np.abs(sol.y - want) / scale)
    assert err < 1e-8, f"{name}: max scaled error {err:.2e}"


def test_two_delays_match_scipy_method_of_steps():
    p = {"a": 0.8, "b": 1.0, "c": 0.6, "tau1": 0.7, "tau2": 1.1}
    hist = History.periodic([0.3, -0.2], [2.0, 1.0], [1.0, 0.5])
    t = np.linspace(0.0, 8.0, 41)
    sol = solve_dde(two_delays, p, hist, t, **TIGHT)

    def rhs(tt, x, lags):
        return np.array([x[1] - p["a"] * lags[0][0], -p["b"] * x[0] - p["c"] * lags[1][1] * lags[0][0]])

    def h(s):
        return np.array([0.3 * np.sin(2.0 * s) + 1.0, -0.2 * np.sin(s) + 0.5])

    want = ref.method_of_steps(rhs, h, [p["tau1"], p["tau2"]], 0.0, 8.0)(t)
    np.testing.assert_allclose(sol.y, want, rtol=0, atol=1e-8 * np.max(np.abs(want)))


def _midpoints(t):
    """Output times between the grid points: central differences in tau have an O(h) error at an output
    time that is exactly a breakpoint t0 + k tau (d2 y / d tau2 jumps there); the states at the
    breakpoints are checked against scipy above."""
    t = np.asarray(t)
    return 0.5 * (t[1:] + t[:-1])


def _fd_sens(model, p, phi, hist, t, t0, rel=1e-5):
    solver = make_dde_solver(model, t, hist, t0=t0, rtol=1e-12, atol=1e-14)
    theta = np.concatenate([p, phi])
    m = p.size
    cols = []
    for j in range(theta.size):
        h = rel * max(abs(theta[j]), 1e-1)
        ys = []
        for sgn in (1, -1):
            th = theta.copy()
            th[j] += sgn * h
            y, _, status = solver(np.ascontiguousarray(th[:m]), np.ascontiguousarray(th[m:]))
            assert status == 0
            ys.append(y.copy())
        cols.append((ys[0] - ys[1]) / (2 * h))
    return np.stack(cols, axis=2)


@pytest.mark.parametrize("name", DDE_NAMES)
def test_sensitivities_match_central_finite_differences(name):
    entry = zoo.get(name)
    p, phi = entry.params_array(), entry.history_params_array()
    t = _midpoints(entry.t)
    sol = solve_dde(entry.model, p, entry.history, t, t0=entry.t0, sensitivities=True, **TIGHT)
    fd = _fd_sens(entry.model, p, phi, entry.history, t, entry.t0)
    assert sol.sens.shape == fd.shape == (t.size, entry.model.n_states, p.size + phi.size)
    # per (state, column), with a floor relative to the state's largest sensitivity (FD noise on exact zeros)
    col = np.max(np.abs(fd), axis=0)
    scale = col + 1e-6 * np.max(col, axis=1, keepdims=True) + 1e-12
    err = np.abs(sol.sens - fd) / scale
    worst = np.unravel_index(np.argmax(err), err.shape)
    assert err.max() < 2e-5, f"{name}: column {sol.sens_names[worst[2]]}, error {err.max():.2e}"


def test_delay_sensitivity_includes_the_history_derivative_term():
    """d x / d tau with an affine history: without the history term dX0/du = a the value would be off
    by exactly the effect of that term; FD decides (spec seed-002 sec. 1.4)."""
    entry = zoo.get("delay_exponential_decay")
    p, phi = entry.params_array(), entry.history_params_array()
    t = _midpoints(entry.t)
    sol = solve_dde(entry.model, p, entry.history, t, t0=0.0, sensitivities=True, **TIGHT)
    fd = _fd_sens(entry.model, p, phi, entry.history, t, 0.0)
    j = entry.model.params.index("tau")
    np.testing.assert_allclose(sol.sens[:, 0, j], fd[:, 0, j], rtol=0, atol=1e-6 * np.max(np.abs(fd[:, 0, j])))
    # with a = 0 (a constant history) the sensitivity changes: the term is not zero here
    flat = solve_dde(entry.model, p, History.affine(0.0, 4.0), t, t0=0.0, sensitivities=True, **TIGHT)
    assert np.max(np.abs(flat.sens[:, 0, j] - sol.sens[:, 0, j])) > 0.1


def test_two_delay_sensitivities_match_finite_differences():
    p = np.array([0.8, 1.0, 0.6, 0.7, 1.1])
    hist = History.affine([0.4, -0.3], [1.0, 0.5])
    t = _midpoints(np.linspace(0.0, 6.0, 31))
    sol = solve_dde(two_delays, p, hist, t, t0=0.0, sensitivities=True, **TIGHT)
    fd = _fd_sens(two_delays, p, hist.values, hist, t, 0.0)
    scale = np.max(np.abs(fd), axis=0) + 1e-8
    assert np.max(np.abs(sol.sens - fd) / scale) < 2e-5


def test_piecewise_and_callable_histories():
    fn = lambda s: np.array([1.0 + 0.5 * np.cos(s)])  # noqa: E731
    t = np.linspace(0.0, 4.0, 21)
    p = {"a": 1.2, "tau": 0.8}
    from_fn = solve_dde(lagged_decay, p, fn, t, **TIGHT)
    periodic_equiv = ref.method_of_steps(lambda tt, x, lags: np.array([-1.2 * lags[0][0]]), fn, [0.8], 0.0, 4.0)(t)
    np.testing.assert_allclose(from_fn.y, periodic_equiv, atol=1e-8)
    s = np.linspace(-1.0, 0.0, 41)
    from_data = solve_dde(lagged_decay, p, History.from_data(s, [fn(v)[0] for v in s]), t, **TIGHT)
    np.testing.assert_allclose(from_data.y, periodic_equiv, atol=1e-5)
    assert from_data.sens is None and from_data.history_params == ()


def test_fast_path_equals_solve_dde_and_grows_its_buffer():
    entry = zoo.get("logistic_delay")
    p, phi = entry.params_array(), entry.history_params_array()
    sol = solve_dde(entry.model, p, entry.history, entry.t, sensitivities=True)
    solver = make_dde_solver(entry.model, entry.t, entry.history, sensitivities=True, buffer_steps=2)
    y, sens, status = solver(p, phi)
    assert status == Status.SUCCESS and solver.buf.shape[0] > 2
    np.testing.assert_array_equal(y, sol.y)
    np.testing.assert_array_equal(sens, sol.sens)
    t_start, h, coef = solver.dense_steps()
    assert t_start[0] == 0.0 and np.isclose(t_start[-1] + h[-1], 10.0) and coef.shape[1] == 5
    # breakpoints t = 1, 2, ..., 5 are step ends
    ends = t_start + h
    for bp in (1.0, 2.0, 3.0, 4.0, 5.0):
        assert np.min(np.abs(ends - bp)) < 1e-12


def test_sens_names_and_frame():
    entry = zoo.get("logistic_delay")
    sol = solve_dde(entry.model, entry.params_array(), entry.history, entry.t[:5], sensitivities=True)
    assert sol.sens_names == ("theta0", "theta1", "tau", "A[x]", "omega[x]", "b[x]")
    df = sol.to_frame(sens=True)
    assert list(df.columns)[:2] == ["x", "dx/dtheta0"]
    with pytest.raises(InputError, match="no sensitivities"):
        solve_dde(entry.model, entry.params_array(), entry.history, entry.t[:5]).to_frame(sens=True)


def test_history_params_override_the_family_values():
    entry = zoo.get("logistic_delay")
    a = solve_dde(entry.model, entry.params_array(), History.periodic(-0.3, 2.0, 1.5), entry.t)
    b = solve_dde(entry.model, entry.params_array(), entry.history, entry.t, history_params=[-0.3, 2.0, 1.5])
    np.testing.assert_array_equal(a.y, b.y)


# bad input ---------------------------------------------------------------------------------


def test_rejects_a_model_without_delays():
    @oi.model(states=["x"], params=["k"])
    def ode(t, y, p):
        return {"x": -p.k * y.x}

    with pytest.raises(InputError, match="has no delays; solve it with odeinfer.solve.solve_ode"):
        solve_dde(ode, [1.0], 1.0, [0.0, 1.0])


def test_solve_ode_refuses_a_model_with_delays():
    with pytest.raises(InputError, match="has delays \\['tau'\\]; the ODE solvers cannot integrate it"):
        solve_ode(lagged_decay, [1.0, 1.0], [1.0], [0.0, 1.0])


@pytest.mark.parametrize("tau", [0.0, -1.0])
def test_rejects_non_positive_delays(tau):
    with pytest.raises(InputError, match="the delay 'tau' must be > 0"):
        solve_dde(lagged_decay, {"a": 1.0, "tau": tau}, 1.0, [0.0, 1.0])
    solver = make_dde_solver(lagged_decay, [0.0, 1.0], 1.0)
    _, _, status = solver(np.array([1.0, tau]), np.array([1.0]))
    assert status == Status.BAD_INPUT


def test_rejects_history_params_without_a_history_family():
    with pytest.raises(InputError, match="history_params: given, but the history is plain values"):
        solve_dde(lagged_decay, [1.0, 1.0], 1.0, [0.0, 1.0], history_params=[2.0])
    s = np.linspace(-2, 0, 9)
    with pytest.raises(InputError, match="data-driven history \\(no parameters\\)"):
        solve_dde(lagged_decay, [1.0, 1.0], History.from_data(s, np.ones(9)), [0.0, 1.0], history_params=[2.0])


def test_rejects_output_times_before_t0():
    with pytest.raises(DataError, match="is before t0=1.0; times before t0 lie in the history window"):
        solve_dde(lagged_decay, [1.0, 1.0], 1.0, [0.5, 2.0], t0=1.0)


def test_rejects_a_data_driven_history_that_misses_the_window():
    s = np.linspace(-0.5, 0.0, 6)
    with pytest.raises(DataError, match="covers \\[-0.5, 0\\], but with max\\(tau\\) = 1 the solve needs \\[-1, 0\\]"):
        solve_dde(lagged_decay, [1.0, 1.0], History.from_data(s, np.ones(6)), [0.0, 1.0])


def test_rejects_a_history_of_the_wrong_size():
    with pytest.raises(InputError, match="history: has 2 state\\(s\\) but model 'lagged_decay' has 1"):
        solve_dde(lagged_decay, [1.0, 1.0], [1.0, 2.0], [0.0, 1.0])


def test_failure_raises_or_returns_a_status():
    @oi.model(states=["x"], params=["tau"], delays=["tau"])
    def blowup(t, y, p):
        return {"x": y.x ** 2 + om.lag(y.x, "tau")}

    with pytest.raises(SolverError, match="solve_dde failed with status"):
        solve_dde(blowup, [1.0], 1.0, [0.0, 5.0])
    sol = solve_dde(blowup, [1.0], 1.0, [0.0, 0.5, 5.0], raise_on_failure=False)
    assert sol.status != 0 and np.isnan(sol.y[-1, 0]) and sol.t_reached < 5.0
