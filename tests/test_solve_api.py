"""The Python boundary of the solvers: validation messages, Solution, the bound solver (oi.bind),
status codes, and the kernel contract with a hand-written model module."""

import types

import numpy as np
import pytest
from numba import njit

import odeinfer as oi
from odeinfer import math as om
from odeinfer.errors import DataError, InputError, StiffnessError
from odeinfer.model.cache import build_module
from odeinfer.solve import Solution, Solver, Status, status_message


@oi.model(states=["prey", "pred"], params=["alpha", "beta", "gamma", "delta"])
def lotka_volterra(t, y, p):
    return {"prey": p.alpha * y.prey - p.beta * y.prey * y.pred,
            "pred": p.delta * y.prey * y.pred - p.gamma * y.pred}


P = {"alpha": 0.55, "beta": 0.028, "gamma": 0.80, "delta": 0.024}
P_ARR = np.array([0.55, 0.028, 0.80, 0.024])
X0 = np.array([33.96, 5.93])
T = np.arange(21.0)
PROB = oi.Problem(lotka_volterra, T, x0=X0)
SOLVERS = {"dopri5": oi.Dopri5(), "rodas": oi.Rodas()}


# --- status codes --------------------------------------------------------------------


def test_status_enum_matches_the_kernel_constants():
    module = lotka_volterra.compile().module
    for status in Status:
        assert getattr(module, f"ST_{status.name}") == status.value


def test_status_messages_name_the_fix():
    assert "max_steps=7" in status_message(Status.MAX_STEPS, t_reached=3.0, max_steps=7)
    assert "solver=oi.Rodas()" in status_message(Status.STIFF, t_reached=3.0)
    assert "solver=oi.Rodas()" in status_message(Status.MAX_STEPS, t_reached=3.0, max_steps=7)
    assert "blows up" in status_message(Status.STEP_TOO_SMALL, t_reached=1.0)
    assert status_message(99) == "unknown solver status 99"


# --- Solution ----------------------------------------------------------------------------


def test_solution_fields_are_immutable_and_read_only():
    sol = oi.solve(PROB, P, gradient=oi.Forward())
    assert isinstance(sol, Solution) and sol.success and sol.status == 0
    assert sol.y.shape == (21, 2) and sol.sens.shape == (21, 2, 6) and sol.t.shape == (21,)
    assert sol.t_reached == 20.0 and sol.n_steps > 0 and sol.n_rhs > 6 * sol.n_steps - 6
    assert sol.method == "dopri5" and sol.message == "the solver reached the last output time"
    for arr in (sol.t, sol.y, sol.sens):
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 1.0
    with pytest.raises(AttributeError):
        sol.status = 3
    assert sol.sens_names == ("alpha", "beta", "gamma", "delta", "prey(t0)", "pred(t0)")
    assert "status=SUCCESS" in repr(sol) and "sens=shape (21, 2, 6)" in repr(sol)


def test_solution_to_frame():
    sol = oi.solve(PROB, P, gradient=oi.Forward())
    df = sol.to_frame()
    assert list(df.columns) == ["prey", "pred"] and df.index.name == "t"
    np.testing.assert_array_equal(df.to_numpy(), sol.y)
    wide = sol.to_frame(sens=True)
    assert wide.shape == (21, 2 + 12)
    np.testing.assert_array_equal(wide["dpred/dprey(t0)"], sol.sens[:, 1, 4])
    np.testing.assert_array_equal(wide["dprey/dbeta"], sol.sens[:, 0, 1])
    plain = oi.solve(PROB, P)
    assert plain.sens is None
    with pytest.raises(InputError, match=r"no sensitivities; solve with gradient=oi\.Forward\(\)"):
        plain.to_frame(sens=True)


def test_mapping_and_array_inputs_agree_and_compiled_model_is_accepted():
    a = oi.solve(oi.Problem(lotka_volterra, T, x0={"pred": X0[1], "prey": X0[0]}), P)
    b = oi.solve(oi.Problem(lotka_volterra.compile(), T), P_ARR, x0=X0)
    c = oi.solve(oi.Problem(lotka_volterra, T), P, x0={"pred": X0[1], "prey": X0[0]})
    np.testing.assert_array_equal(a.y, b.y)
    np.testing.assert_array_equal(c.y, b.y)


# --- input validation ---------------------------------------------------------------------


@pytest.mark.parametrize("params, match", [
    ({**P, "alpah": 1.0}, r"params: \['alpah'\] is not a parameter of the model \(did you mean 'alpha'\?\)"),
    ({"alpha": 1.0, "beta": 1.0, "gamma": 1.0}, r"params: missing value for parameter \['delta'\]"),
    ([1.0, 2.0, 3.0], r"params: expected 4 values in the order \['alpha', 'beta', 'gamma', 'delta'\], "
                      r"got an array of shape \(3,\)"),
    ([[1.0, 2.0, 3.0, 4.0]], r"got an array of shape \(1, 4\)"),
    ([1.0, np.nan, 3.0, 4.0], r"params: values must be finite; \['beta'\] is inf or NaN"),
    (["a", "b", "c", "d"], r"params: expected 4 numbers .* or a mapping name -> number"),
])
def test_bad_params_are_rejected_with_a_clear_message(params, match):
    with pytest.raises(InputError, match=match):
        oi.solve(PROB, params)


def test_bad_initial_state_is_rejected():
    with pytest.raises(InputError, match=r"x0: \['prye'\] is not a state of the model \(did you mean 'prey'\?\)"):
        oi.Problem(lotka_volterra, T, x0={"prye": 1.0, "pred": 2.0})
    with pytest.raises(InputError, match=r"x0: \['prye'\] is not a state of the model \(did you mean 'prey'\?\)"):
        oi.solve(PROB, P, x0={"prye": 1.0, "pred": 2.0})
    with pytest.raises(InputError, match=r"x0: values must be finite; \['pred'\] is inf or NaN"):
        oi.Problem(lotka_volterra, T, x0=[1.0, np.inf])
    with pytest.raises(InputError, match=r"x0: values must be finite; \['pred'\] is inf or NaN"):
        oi.solve(PROB, P, x0=[1.0, np.inf])


@pytest.mark.parametrize("t, t0, match", [
    ([], None, r"t: expected a non-empty 1-D array of output times, got shape \(0,\)"),
    ([[0.0, 1.0]], None, r"got shape \(1, 2\)"),
    ([0.0, np.nan, 2.0], None, r"t: output times must be finite; inf or NaN at index 1"),
    ([0.0, 2.0, 1.0], None, r"t: output times must be sorted \(non-decreasing\); t\[1\]=2\.0 > t\[2\]=1\.0"),
    ([0.0, 1.0], 0.5, r"t: the first output time t\[0\]=0\.0 is before t0=0\.5; .*choose t0 <= t\[0\]"),
    ([0.0, 1.0], np.inf, r"t0: expected a finite number, got inf"),
    ("abc", None, r"t: expected a 1-D array of output times, got str"),
])
def test_bad_times_are_rejected(t, t0, match):
    with pytest.raises(DataError, match=match):
        oi.Problem(lotka_volterra, t, x0=X0, t0=t0)


# each case builds the options inside pytest.raises: solver and gradient values validate at construction
@pytest.mark.parametrize("options, error, match", [
    (lambda: {"solver": "rk45"}, InputError,
     r"solver: expected a solver value such as oi\.Dopri5\(\) or oi\.Rodas\(\), got the string 'rk45'"),
    (lambda: {"solver": "rodas"}, InputError, r"got the string 'rodas'; pass solver=oi\.Rodas\(\)"),
    (lambda: {"solver": oi.Dopri5(rtol=0.0)}, InputError,
     r"Dopri5\(rtol=\.\.\.\): expected a number in \(0, 1\), got 0\.0"),
    (lambda: {"solver": oi.Dopri5(rtol=1e-17)}, InputError,
     r"Dopri5\(rtol=\.\.\.\): 1e-17 is below 100 \* machine epsilon"),
    (lambda: {"solver": oi.Dopri5(atol=-1.0)}, InputError,
     r"Dopri5\(atol=\.\.\.\): expected a number in \(0, inf\), got -1\.0"),
    (lambda: {"solver": oi.Dopri5(atol="small")}, InputError,
     r"Dopri5\(atol=\.\.\.\): expected a positive number, got str"),
    (lambda: {"solver": oi.Dopri5(max_steps=0)}, InputError,
     r"Dopri5\(max_steps=\.\.\.\): expected a positive integer, got 0"),
    (lambda: {"solver": oi.Rodas(max_steps=10.5)}, InputError,
     r"Rodas\(max_steps=\.\.\.\): expected a positive integer, got 10\.5"),
    (lambda: {"solver": oi.Dopri5(first_step=-0.1)}, InputError,
     r"Dopri5\(first_step=\.\.\.\): expected a positive finite number or None .*got -0\.1"),
    (lambda: {"solver": oi.Dopri5(fixed_step=0.0)}, InputError,
     r"Dopri5\(fixed_step=\.\.\.\): expected a positive finite number or None, got 0\.0"),
    (lambda: {"solver": oi.Rodas(fixed_step=0.1)}, TypeError, r"fixed_step"),  # only Dopri5 has a fixed-step mode
    (lambda: {"gradient": "yes"}, InputError,
     r"gradient: expected None, oi\.Forward\(\.\.\.\) or oi\.Adjoint\(\.\.\.\), got 'yes'"),
    (lambda: {"gradient": True}, InputError, r"gradient: expected oi\.Forward\(\) or oi\.Adjoint\(\), got True"),
    (lambda: {"gradient": oi.Forward(error_control=1)}, InputError,
     r"Forward\(error_control=\.\.\.\): expected True or False, got 1"),
    (lambda: {"raise_on_failure": "yes"}, InputError, r"raise_on_failure: expected True or False, got 'yes'"),
])
def test_bad_options_are_rejected(options, error, match):
    with pytest.raises(error, match=match):
        oi.solve(PROB, P, **options())


def test_model_argument_must_be_a_model():
    with pytest.raises(InputError, match=r"model: expected an odeinfer Model .* got function"):
        oi.Problem(lambda t, y, p: y, T, x0=X0)


def test_sensitivities_refused_for_parameters_that_move_a_jump():
    @oi.model(states=["x"], params=["k", "threshold"])
    def switch(t, y, p):
        return {"x": om.where(y.x > p.threshold, -p.k * y.x, 0.0)}

    prob = oi.Problem(switch, [0.0, 1.0], x0=[1.0])
    sol = oi.solve(prob, [1.0, 0.2])  # states alone are fine (no switch before t=1)
    assert sol.y[1, 0] == pytest.approx(np.exp(-1.0), rel=1e-6)
    with pytest.raises(InputError, match=r"gradient: parameters \['threshold'\] move a jump"):
        oi.solve(prob, [1.0, 0.2], gradient=oi.Forward())


def test_failure_without_raising_returns_status_and_nan():
    sol = oi.solve(PROB, P, solver=oi.Dopri5(max_steps=3), raise_on_failure=False)
    assert sol.status == Status.MAX_STEPS and not sol.success
    assert "max_steps=3" in sol.message
    last_good = np.searchsorted(T, sol.t_reached, side="right")
    assert np.isfinite(sol.y[:last_good]).all() and np.isnan(sol.y[last_good:]).all()
    with pytest.raises(StiffnessError, match=r"status MAX_STEPS"):
        oi.solve(PROB, P, solver=oi.Dopri5(max_steps=3))


# --- oi.bind -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["dopri5", "rodas"])
def test_bound_solver_matches_solve_and_reuses_its_buffers(method):
    solver = oi.bind(oi.Problem(lotka_volterra, T), solver=SOLVERS[method], gradient=oi.Forward())
    assert isinstance(solver, Solver)
    y, sens, status = solver(P_ARR, X0)
    ref = oi.solve(PROB, P, solver=SOLVERS[method], gradient=oi.Forward())
    assert status == 0
    np.testing.assert_array_equal(y, ref.y)
    np.testing.assert_array_equal(sens, ref.sens)
    first = y.copy()
    y2, sens2, _ = solver(P_ARR * 1.01, X0)
    assert y2 is y and sens2 is sens  # documented: the next call overwrites the buffers
    assert not np.array_equal(y, first)
    assert solver.info[0] == 20.0 and solver.info[1] > 0  # t_reached, n_steps


def test_bound_solver_reports_bad_sizes_as_a_status():
    solver = oi.bind(oi.Problem(lotka_volterra, T))
    _, _, status = solver(np.array([1.0, 2.0]), X0)
    assert status == Status.BAD_INPUT
    y, sens, status = solver(P_ARR, X0)
    assert status == Status.SUCCESS and sens is None and y.shape == (21, 2)


def test_solver_kernel_can_be_called_from_njit_code():
    solver = oi.bind(oi.Problem(lotka_volterra, T), gradient=oi.Forward())
    kernel = solver.kernel
    module = solver.compiled.module

    @njit
    def final_prey_many(p_rows, x0, t, z_out, work, info):
        out = np.empty(p_rows.shape[0])
        for r in range(p_rows.shape[0]):
            status = kernel(0.0, t, x0, p_rows[r], True, 1e-6, 1e-8, 0.0, 100000, z_out, work, info)
            out[r] = z_out[t.shape[0] - 1, 0] if status == 0 else np.nan
        return out

    rows = np.array([P_ARR, P_ARR * 1.02])
    z = np.empty((21, 14))
    got = final_prey_many(rows, X0, T, z, np.empty(module.dopri5_work_size(True)), np.empty(module.INFO_SIZE))
    for r in range(2):  # equal up to rounding (LLVM may optimise the kernel into the caller)
        assert got[r] == pytest.approx(solver(rows[r], X0)[0][-1, 0], rel=1e-13)


# --- the kernel contract, with a hand-written model module -------------------------------


HAND_LV = """
N_STATES = 2
N_PARAMS = 4

@njit(cache=True, error_model="numpy")
def model_f(t, y, p, out):
    out[0] = p[0] * y[0] - p[1] * y[0] * y[1]
    out[1] = p[3] * y[0] * y[1] - p[2] * y[1]

@njit(cache=True, error_model="numpy")
def model_jac_y(t, y, p, out):
    out[0, 0] = p[0] - p[1] * y[1]
    out[0, 1] = -p[1] * y[0]
    out[1, 0] = p[3] * y[1]
    out[1, 1] = p[3] * y[0] - p[2]

@njit(cache=True, error_model="numpy")
def model_jac_p(t, y, p, out):
    out[0, 0] = y[0]
    out[0, 1] = -y[0] * y[1]
    out[0, 2] = 0.0
    out[0, 3] = 0.0
    out[1, 0] = 0.0
    out[1, 1] = 0.0
    out[1, 2] = -y[1]
    out[1, 3] = y[0] * y[1]

@njit(cache=True, error_model="numpy")
def model_f_t(t, y, p, out):
    out[0] = 0.0
    out[1] = 0.0

@njit(cache=True, error_model="numpy")
def model_jac_y_dir(t, y, p, v, out):
    out[0, 0] = -p[1] * v[1]
    out[0, 1] = -p[1] * v[0]
    out[1, 0] = p[3] * v[1]
    out[1, 1] = p[3] * v[0]

@njit(cache=True, error_model="numpy")
def model_jac_p_dir(t, y, p, v, out):
    out[0, 0] = v[0]
    out[0, 1] = -(v[0] * y[1] + v[1] * y[0])
    out[0, 2] = 0.0
    out[0, 3] = 0.0
    out[1, 0] = 0.0
    out[1, 1] = 0.0
    out[1, 2] = -v[1]
    out[1, 3] = v[0] * y[1] + v[1] * y[0]

@njit(cache=True, error_model="numpy")
def model_jac_y_t(t, y, p, out):
    for i in range(2):
        for j in range(2):
            out[i, j] = 0.0

@njit(cache=True, error_model="numpy")
def model_jac_p_t(t, y, p, out):
    for i in range(2):
        for j in range(4):
            out[i, j] = 0.0
"""


@pytest.mark.parametrize("method", ["dopri5", pytest.param("rodas", marks=pytest.mark.slow)])
def test_kernels_on_a_hand_written_module_agree_with_the_generated_one(method):
    """The solver kernels depend only on the documented model-kernel contract. (Rodas is ``slow``: the same
    contract, 40-60 s more of compilation on an empty cache.)"""
    module = build_module(HAND_LV, "hand-written Lotka-Volterra")
    stand_in = types.SimpleNamespace(module=module, n_states=2, n_params=4)
    kernel = getattr(stand_in.module, f"{method}_solve_sens")
    size = getattr(stand_in.module, f"{method}_work_size")(True)
    z = np.empty((21, 14))
    info = np.empty(stand_in.module.INFO_SIZE)
    status = kernel(0.0, T, X0, P_ARR, True, 1e-8, 1e-10, 0.0, 100000, z, np.empty(size), info)
    assert status == 0
    ref = oi.solve(PROB, P, solver=SOLVERS[method].replace(rtol=1e-8, atol=1e-10), gradient=oi.Forward())
    np.testing.assert_allclose(z[:, :2], ref.y, rtol=1e-12)
    np.testing.assert_allclose(z[:, 2:].reshape(21, 2, 6), ref.sens, rtol=1e-10, atol=1e-12)


# --- sens_exclude: sensitivities with switching parameters held fixed ---------------------------


def _riccati_scipy(a, c, d, T_r, phi0, t):
    """Independent oracle: scipy DOP853 at rtol 1e-12, integrated in two pieces split at the
    step time T_r (so no step straddles the jump)."""
    from scipy.integrate import solve_ivp

    def f(step):
        return lambda s, y: [a * y[0] ** 2 + c * np.sqrt(s) - d * step]

    t = np.asarray(t)
    out = np.empty(t.size)
    left = t <= T_r
    s1 = solve_ivp(f(0.0), (0.0, T_r), [phi0], method="DOP853", rtol=1e-12, atol=1e-14, dense_output=True)
    out[left] = s1.sol(t[left])[0]
    s2 = solve_ivp(f(1.0), (T_r, t[-1]), [s1.y[0, -1]], method="DOP853", rtol=1e-12, atol=1e-14,
                   dense_output=True)
    out[~left] = s2.sol(t[~left])[0]
    return out


def test_sens_exclude_allows_sensitivities_with_a_fixed_switching_time():
    """riccati (sharp step at T_r): with T_r excluded, d phi / d(a, c, d, phi0) match central
    differences of an independent split-at-T_r scipy solve; the T_r column is NaN."""
    z = oi.zoo.get("riccati")
    t = np.array([1.0, 4.0, 6.0, 10.0, 14.0])
    th = np.array([0.11, 0.09, 2.0, 5.0, -1.0])  # a, c, d, T_r, phi0
    sol = oi.solve(oi.Problem(z.model, t, x0=th[4:], t0=0.0), th[:4], solver=oi.Dopri5(rtol=1e-10, atol=1e-12),
                   gradient=oi.Forward(exclude=["T_r"]))
    assert sol.success and np.isnan(sol.sens[:, 0, 3]).all()
    for j, col in ((0, 0), (1, 1), (2, 2), (4, 4)):
        h = 1e-6 * max(abs(th[j]), 1.0)
        up, dn = th.copy(), th.copy()
        up[j] += h
        dn[j] -= h
        fd = (_riccati_scipy(*up, t) - _riccati_scipy(*dn, t)) / (2 * h)
        np.testing.assert_allclose(sol.sens[:, 0, col], fd, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(sol.y[:, 0], _riccati_scipy(*th, t), rtol=1e-8)


def test_sens_exclude_columns_are_nan_on_every_fast_path_call():
    solver = oi.bind(oi.Problem(lotka_volterra, T), gradient=oi.Forward(exclude=("beta", "delta")))
    full = oi.solve(PROB, P, gradient=oi.Forward())
    assert solver.sens_exclude == ("beta", "delta")
    for _ in range(2):  # the kernel rewrites the buffer on each call
        y, sens, status = solver(P_ARR, X0)
        assert status == 0
        assert np.isnan(sens[:, :, [1, 3]]).all()
        np.testing.assert_array_equal(sens[:, :, [0, 2, 4, 5]], full.sens[:, :, [0, 2, 4, 5]])
    fixed = oi.solve(PROB, P, solver=oi.Dopri5(fixed_step=0.01), gradient=oi.Forward(exclude="beta"))
    assert np.isnan(fixed.sens[:, :, 1]).all() and np.isfinite(fixed.sens[:, :, [0, 2, 3]]).all()
    plain = oi.bind(oi.Problem(lotka_volterra, T), gradient=None)
    assert plain.sensitivities is False and plain.sens_exclude == ()


def test_switching_parameter_not_excluded_is_still_refused_with_a_hint():
    z = oi.zoo.get("riccati")
    with pytest.raises(InputError, match=r"gradient: parameters \['T_r'\] move a jump.*"
                                         r"gradient=oi\.Forward\(exclude=\['T_r'\]\)"):
        oi.bind(oi.Problem(z.model, z.t, t0=0.0), gradient=oi.Forward())
    with pytest.raises(InputError, match=r"gradient: parameters \['T_r'\] move a jump"):
        oi.bind(oi.Problem(z.model, z.t, t0=0.0), gradient=oi.Forward(exclude=["a"]))


def test_sens_exclude_refused_when_the_jump_depends_on_the_states():
    @oi.model(states=["x"], params=["k", "threshold"])
    def switch(t, y, p):
        return {"x": om.where(y.x > p.threshold, -p.k * y.x, 0.0)}

    with pytest.raises(InputError, match=r"gradient: the jump of the right-hand side at .*x.* depends on "
                                         r"the states.*, even with \['threshold'\] excluded"):
        oi.solve(oi.Problem(switch, [0.0, 1.0], x0=[1.0]), [1.0, 0.2], gradient=oi.Forward(exclude=["threshold"]))


def test_sensitivities_refused_for_a_state_dependent_jump_with_a_constant_threshold():
    """x' = -x while x > 0.5, then 0: the jump time moves with x0, so d x / d x0 has a jump term
    that forward sensitivities (and the adjoint) would miss; there is no switching parameter."""
    @oi.model(states=["x"], params=["k"])
    def switch(t, y, p):
        return {"x": om.where(y.x > 0.5, -p.k * y.x, 0.0)}

    prob = oi.Problem(switch, [0.0, 0.5], x0=[1.0])
    sol = oi.solve(prob, [1.0])  # states alone are fine
    assert sol.y[1, 0] == pytest.approx(np.exp(-0.5), rel=1e-6)
    with pytest.raises(InputError, match=r"gradient: the jump of the right-hand side at .*x.* depends on "
                                         r"the states.*gradient=None"):
        oi.solve(prob, [1.0], gradient=oi.Forward())
    with pytest.raises(InputError, match=r"gradient: the jump .* depends on the states"):
        oi.bind(prob, gradient=oi.Adjoint())


@pytest.mark.parametrize("value, match", [
    (["T_x"], r"Forward\(exclude=\.\.\.\): 'T_x' is not a parameter of the model \(did you mean 'T_r'\?\)"),
    (3, r"Forward\(exclude=\.\.\.\): expected a list of parameter names, got 3"),
    ([3], r"Forward\(exclude=\.\.\.\): expected parameter names \(str\), got 3"),
])
def test_sens_exclude_bad_input(value, match):
    z = oi.zoo.get("riccati")
    with pytest.raises(InputError, match=match):
        oi.bind(oi.Problem(z.model, z.t, t0=0.0), gradient=oi.Forward(exclude=value))


def test_solver_pickles_to_a_working_copy():
    """A pickled solver is rebuilt from its options: its y/sens stay views of its own buffer."""
    import pickle

    z = oi.zoo.lotka_volterra()
    s = oi.bind(oi.Problem(z.model, z.t), gradient=oi.Forward())
    s(z.params_array(), z.x0_array())
    c = pickle.loads(pickle.dumps(s))
    y, sens, status = c(z.params_array() * 1.1, z.x0_array())
    ref = oi.solve(oi.Problem(z.model, z.t, x0=z.x0_array()), z.params_array() * 1.1, gradient=oi.Forward())
    assert status == 0
    np.testing.assert_allclose(y, ref.y, rtol=1e-12)
    np.testing.assert_allclose(sens, ref.sens, rtol=1e-12)
    assert (c.t0, c.rtol, c.method, c.sensitivities) == (s.t0, s.rtol, s.method, s.sensitivities)


@pytest.mark.parametrize("solver", [oi.Dopri5(), oi.Auto()])
def test_a_retimed_solver_gives_the_bits_of_a_solver_bound_at_those_times(solver):
    """``retimed`` (the likelihood's re-solves between events) shares the kernel and its tier, not the buffers."""
    m = oi.Model.from_equations({"x": "a*x - b*x*y", "y": "d*x*y - g*y"}, params=["a", "b", "g", "d"])
    p, x0 = np.array([0.55, 0.028, 0.8, 0.024]), np.array([34.0, 5.9])
    pdir, s0 = np.eye(4)[:, :2].copy(), np.zeros((2, 2))
    b = oi.bind(oi.Problem(m, np.linspace(0.0, 20.0, 21)), solver=solver, gradient=oi.Forward(directions=2))
    y_b, _, st = b(p, x0, pdir, s0)
    y_b = y_b.copy()
    t = np.array([3.5, 7.25, 12.0])
    t.flags.writeable = False
    r = b.retimed(t, 2.0)
    y, s, st_r = r(p, x0, pdir, s0)
    fresh = oi.bind(oi.Problem(m, t, t0=2.0), solver=solver, gradient=oi.Forward(directions=2))
    y_f, s_f, st_f = fresh(p, x0, pdir, s0)
    assert st == st_r == st_f == 0 and r.tier == b.tier
    assert np.array_equal(y, y_f) and np.array_equal(s, s_f)
    assert r.z is not b.z and np.array_equal(b(p, x0, pdir, s0)[0], y_b)  # buffers of its own


@oi.model(states=["y"], params=["a", "b"])
def production_degradation(t, y, p):
    return {"y": p.a - p.b * y.y}


@pytest.mark.parametrize("solver, span", [(oi.Dopri5(), 1e3), (oi.Rodas(), 9.0), (oi.Rodas(rtol=1e-10, atol=1e-12), 9.0)],
                         ids=["dopri5", "rodas", "rodas-tight"])
def test_a_solve_that_starts_at_rest_late_in_time_takes_steps_t_can_resolve(solver, span):
    """From the exact steady state (y = a / b = 4, f = 0 in floating point) at t0 = 1e9, Hairer's initial-step
    heuristic gives 1e-6 (no derivative to scale it by), below what t = 1e9 resolves (10 rounding units: 2.2e-6):
    the first step was refused as too small (a steady state's last stage, from 1e9 to 1e10). The first step is at
    least 100 rounding units of t0 now; the solution stays at rest, as in closed form, with and without
    sensitivities. (The stiff solver runs to 10 t0; Dormand-Prince, whose steps stability bounds by about 3.3 / b,
    over 1000.)"""
    for t0 in (1e9, 1e12, -1e12):
        prob = oi.Problem(production_degradation, [t0 + (span * abs(t0) if span < 100 else span)], x0=[4.0], t0=t0)
        for gradient in (None, oi.Forward()):
            sol = oi.solve(prob, [2.0, 0.5], solver=solver, gradient=gradient)
            assert sol.status == Status.SUCCESS
            np.testing.assert_allclose(sol.y[-1], [4.0], rtol=1e-12)
            if gradient is not None:  # d y / d (a, b, y0) = ((1 - e^-bt) / b, -a (1 - e^-bt) / b^2, e^-bt): 2, -8, 0
                np.testing.assert_allclose(sol.sens[-1, 0], [2.0, -8.0, 0.0], rtol=1e-6, atol=1e-6)
