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
from odeinfer.solve import Status
from odeinfer.solve.dde import DDESolver


def _load_reference():
    import dde_reference  # tests/ is on sys.path (conftest.py)

    return dde_reference


ref = _load_reference()
DDE_NAMES = zoo.available("dde")
TIGHT = oi.MethodOfSteps(oi.Dopri5(rtol=1e-10, atol=1e-12))


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
    sol = oi.solve(oi.Problem(lagged_decay, t, history=1.0), {"a": 1.0, "tau": 1.0}, solver=TIGHT)
    exact = np.array([_exact_lagged_decay(v) for v in t])
    np.testing.assert_allclose(sol.y[:, 0], exact, rtol=0, atol=1e-10)
    # the steps land on the breakpoints, so the error is at the tolerance level with few steps
    assert sol.success and sol.n_steps < 400


def test_dense_output_between_breakpoints_is_accurate_at_default_tolerance():
    t = np.linspace(0.0, 5.0, 501)
    sol = oi.solve(oi.Problem(lagged_decay, t, history=1.0), {"a": 1.0, "tau": 1.0})
    exact = np.array([_exact_lagged_decay(v) for v in t])
    assert np.max(np.abs(sol.y[:, 0] - exact)) < 1e-5  # global error within 10 rtol


@pytest.mark.parametrize("name", DDE_NAMES)
def test_states_match_scipy_method_of_steps(name):
    entry = zoo.get(name)
    sol = oi.solve(oi.Problem(entry.model, entry.t, history=entry.history, t0=entry.t0), entry.params_array(),
                   solver=TIGHT)
    want = ref.reference_solution(entry)
    scale = np.max(np.abs(want), axis=0) + 1e-300
    err = np.max(np.abs(sol.y - want) / scale)
    assert err < 1e-8, f"{name}: max scaled error {err:.2e}"


def test_two_delays_match_scipy_method_of_steps():
    p = {"a": 0.8, "b": 1.0, "c": 0.6, "tau1": 0.7, "tau2": 1.1}
    hist = History.periodic([0.3, -0.2], [2.0, 1.0], [1.0, 0.5])
    t = np.linspace(0.0, 8.0, 41)
    sol = oi.solve(oi.Problem(two_delays, t, history=hist), p, solver=TIGHT)

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
    solver = oi.bind(oi.Problem(model, t, history=hist, t0=t0),
                     solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-12, atol=1e-14)))
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
    sol = oi.solve(oi.Problem(entry.model, t, history=entry.history, t0=entry.t0), p, solver=TIGHT,
                   gradient=oi.Forward())
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
    sol = oi.solve(oi.Problem(entry.model, t, history=entry.history, t0=0.0), p, solver=TIGHT, gradient=oi.Forward())
    fd = _fd_sens(entry.model, p, phi, entry.history, t, 0.0)
    j = entry.model.params.index("tau")
    np.testing.assert_allclose(sol.sens[:, 0, j], fd[:, 0, j], rtol=0, atol=1e-6 * np.max(np.abs(fd[:, 0, j])))
    # with a = 0 (a constant history) the sensitivity changes: the term is not zero here
    flat = oi.solve(oi.Problem(entry.model, t, history=History.affine(0.0, 4.0), t0=0.0), p, solver=TIGHT,
                    gradient=oi.Forward())
    assert np.max(np.abs(flat.sens[:, 0, j] - sol.sens[:, 0, j])) > 0.1


def test_two_delay_sensitivities_match_finite_differences():
    p = np.array([0.8, 1.0, 0.6, 0.7, 1.1])
    hist = History.affine([0.4, -0.3], [1.0, 0.5])
    t = _midpoints(np.linspace(0.0, 6.0, 31))
    sol = oi.solve(oi.Problem(two_delays, t, history=hist, t0=0.0), p, solver=TIGHT, gradient=oi.Forward())
    fd = _fd_sens(two_delays, p, hist.values, hist, t, 0.0)
    scale = np.max(np.abs(fd), axis=0) + 1e-8
    assert np.max(np.abs(sol.sens - fd) / scale) < 2e-5


def test_piecewise_and_callable_histories():
    fn = lambda s: np.array([1.0 + 0.5 * np.cos(s)])  # noqa: E731
    t = np.linspace(0.0, 4.0, 21)
    p = {"a": 1.2, "tau": 0.8}
    # a function of time is sampled over the window [t0 - tau, t0]
    from_fn = oi.solve(oi.Problem(lagged_decay, t, history=History.from_function(fn, -0.8, 0.0)), p, solver=TIGHT)
    periodic_equiv = ref.method_of_steps(lambda tt, x, lags: np.array([-1.2 * lags[0][0]]), fn, [0.8], 0.0, 4.0)(t)
    np.testing.assert_allclose(from_fn.y, periodic_equiv, atol=1e-8)
    s = np.linspace(-1.0, 0.0, 41)
    from_data = oi.solve(oi.Problem(lagged_decay, t, history=History.from_data(s, [fn(v)[0] for v in s])), p,
                         solver=TIGHT)
    np.testing.assert_allclose(from_data.y, periodic_equiv, atol=1e-5)
    assert from_data.sens is None and from_data.history_params == ()


def test_fast_path_equals_solve_and_grows_its_buffer():
    entry = zoo.get("logistic_delay")
    p, phi = entry.params_array(), entry.history_params_array()
    prob = oi.Problem(entry.model, entry.t, history=entry.history)
    sol = oi.solve(prob, p, gradient=oi.Forward())
    bound = oi.bind(oi.Problem(entry.model, entry.t, history=entry.history), gradient=oi.Forward())
    y, sens, status = bound(p, phi)
    assert status == Status.SUCCESS
    np.testing.assert_array_equal(y, sol.y)
    np.testing.assert_array_equal(sens, sol.sens)
    # the dense-output store starts small and grows until the solve fits (bind's initial capacity is larger)
    solver = DDESolver(entry.model.compile(), prob.t, prob.t0, prob.history, oi.MethodOfSteps(), oi.Forward(),
                       buffer_steps=2)
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


@pytest.mark.parametrize("history", [zoo.get("logistic_delay").history,
                                     History.from_function(lambda s: [2.0 + 0.5 * np.sin(3.0 * s)], -3.0, 0.0,
                                                           n_points=31)])
def test_the_history_values_reach_the_kernel_as_the_estimators_arrays_do(history, monkeypatch):
    """numba compiles the delay kernel once per argument types, and a read-only array is another type:
    a solve without ``history_params`` used to pass the history's read-only values (a second
    compilation of the kernel, 60-90 s, after estimators or the PyTensor Op had passed writable ones)."""
    from numba import typeof

    entry = zoo.get("logistic_delay")
    bound = oi.bind(oi.Problem(entry.model, entry.t, history=history))
    passed = []
    run = bound._run
    monkeypatch.setattr(bound, "_run", lambda p, phi, buf: passed.append(phi) or run(p, phi, buf))
    y_default = bound(entry.params_array())[0].copy()
    assert typeof(passed[0]) == typeof(np.array(history.values))  # writable, C-contiguous float64
    assert np.array_equal(passed[0], history.values)
    if history.n_params:
        assert np.array_equal(bound(entry.params_array(), np.array(history.values))[0], y_default)


def test_sens_names_and_frame():
    entry = zoo.get("logistic_delay")
    sol = oi.solve(oi.Problem(entry.model, entry.t[:5], history=entry.history), entry.params_array(),
                   gradient=oi.Forward())
    assert sol.sens_names == ("theta0", "theta1", "tau", "A[x]", "omega[x]", "b[x]")
    df = sol.to_frame(sens=True)
    assert list(df.columns)[:2] == ["x", "dx/dtheta0"]
    with pytest.raises(InputError, match="no sensitivities"):
        oi.solve(oi.Problem(entry.model, entry.t[:5], history=entry.history),
                 entry.params_array()).to_frame(sens=True)


def test_history_params_override_the_family_values():
    entry = zoo.get("logistic_delay")
    a = oi.solve(oi.Problem(entry.model, entry.t, history=History.periodic(-0.3, 2.0, 1.5)), entry.params_array())
    b = oi.solve(oi.Problem(entry.model, entry.t, history=entry.history), entry.params_array(),
                 history_params=[-0.3, 2.0, 1.5])
    np.testing.assert_array_equal(a.y, b.y)


# bad input ---------------------------------------------------------------------------------


def test_rejects_a_history_or_a_method_of_steps_for_a_model_without_delays():
    @oi.model(states=["x"], params=["k"])
    def ode(t, y, p):
        return {"x": -p.k * y.x}

    with pytest.raises(InputError, match="history: 'ode' has no delays; pass x0=... for its initial state instead"):
        oi.Problem(ode, [0.0, 1.0], history=1.0)
    with pytest.raises(InputError, match=r"solver: the model has no delays, got MethodOfSteps\(.*\); "
                                         r"pass solver=Dopri5\(rtol=1e-06"):
        oi.solve(oi.Problem(ode, [0.0, 1.0], x0=[1.0]), [1.0], solver=oi.MethodOfSteps())


def test_a_model_with_delays_refuses_x0_and_a_solver_without_a_method_of_steps():
    with pytest.raises(InputError, match="x0: 'lagged_decay' has delays \\['tau'\\], so its initial condition is a "
                                         "history, not x0; pass history="):
        oi.Problem(lagged_decay, [0.0, 1.0], x0=[1.0])
    with pytest.raises(InputError, match="history: 'lagged_decay' has delays \\['tau'\\]; pass history="):
        oi.Problem(lagged_decay, [0.0, 1.0])
    prob = oi.Problem(lagged_decay, [0.0, 1.0], history=1.0)
    with pytest.raises(InputError, match="x0: 'lagged_decay' has delays; its initial condition is the problem's "
                                         "history"):
        oi.solve(prob, [1.0, 1.0], x0=[1.0])
    with pytest.raises(InputError, match=r"solver: the model has delays, so it needs a method of steps, got "
                                         r"Dopri5\(.*\); pass solver=oi\.MethodOfSteps\(Dopri5\("):
        oi.solve(prob, [1.0, 1.0], solver=oi.Dopri5())
    with pytest.raises(InputError, match=r"MethodOfSteps\(inner=\.\.\.\): expected a Dopri5\(\.\.\.\) value, got Rodas "
                                         r"\(a stiff delay solver is not available"):
        oi.MethodOfSteps(oi.Rodas())
    with pytest.raises(InputError, match="history: a function needs the delays to know its window; pass "
                                         r"History\.from_function\(fn, start, end\) instead"):
        oi.Problem(lagged_decay, [0.0, 1.0], history=lambda s: np.ones(1))


@pytest.mark.parametrize("tau", [0.0, -1.0])
def test_rejects_non_positive_delays(tau):
    with pytest.raises(InputError, match="the delay 'tau' must be > 0"):
        oi.solve(oi.Problem(lagged_decay, [0.0, 1.0], history=1.0), {"a": 1.0, "tau": tau})
    solver = oi.bind(oi.Problem(lagged_decay, [0.0, 1.0], history=1.0))
    _, _, status = solver(np.array([1.0, tau]), np.array([1.0]))
    assert status == Status.BAD_INPUT


def test_rejects_history_params_without_a_history_family():
    # plain numbers are the constant family (parameters b[state]): history_params must fit it
    with pytest.raises(InputError, match=r"history_params: expected 1 values \(constant history\), got 2"):
        oi.solve(oi.Problem(lagged_decay, [0.0, 1.0], history=1.0), [1.0, 1.0], history_params=[2.0, 3.0])
    s = np.linspace(-2, 0, 9)
    with pytest.raises(InputError, match="data-driven history \\(no parameters\\)"):
        oi.solve(oi.Problem(lagged_decay, [0.0, 1.0], history=History.from_data(s, np.ones(9))), [1.0, 1.0],
                 history_params=[2.0])


def test_rejects_output_times_before_t0():
    with pytest.raises(DataError, match="is before t0=1.0; times before t0 lie in the history window"):
        oi.solve(oi.Problem(lagged_decay, [0.5, 2.0], history=1.0, t0=1.0), [1.0, 1.0])


def test_rejects_a_data_driven_history_that_misses_the_window():
    s = np.linspace(-0.5, 0.0, 6)
    with pytest.raises(DataError, match="covers \\[-0.5, 0\\], but with max\\(tau\\) = 1 the solve needs \\[-1, 0\\]"):
        oi.solve(oi.Problem(lagged_decay, [0.0, 1.0], history=History.from_data(s, np.ones(6))), [1.0, 1.0])


def test_rejects_a_history_of_the_wrong_size():
    with pytest.raises(InputError, match="history: has 2 state\\(s\\) but model 'lagged_decay' has 1"):
        oi.solve(oi.Problem(lagged_decay, [0.0, 1.0], history=[1.0, 2.0]), [1.0, 1.0])


def test_failure_raises_or_returns_a_status():
    @oi.model(states=["x"], params=["tau"], delays=["tau"])
    def blowup(t, y, p):
        return {"x": y.x ** 2 + om.lag(y.x, "tau")}

    with pytest.raises(SolverError, match=r"solve \(MethodOfSteps\) failed with status"):
        oi.solve(oi.Problem(blowup, [0.0, 5.0], history=1.0), [1.0])
    sol = oi.solve(oi.Problem(blowup, [0.0, 0.5, 5.0], history=1.0), [1.0], raise_on_failure=False)
    assert sol.status != 0 and np.isnan(sol.y[-1, 0]) and sol.t_reached < 5.0
