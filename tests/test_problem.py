"""The solve API: oi.Problem, oi.solve, oi.bind, the solver and gradient values and oi.Solution.

References are closed forms: x' = -k x gives x0 exp(-k t); x' = -k x(t - tau) with the affine
history a (s - t0) + b gives, on [t0, t0 + tau], b - k (a (t^2 / 2 - tau t) + b t).
"""

import dataclasses
import pickle

import numpy as np
import pytest

import odeinfer as oi
from odeinfer import math as om
from odeinfer.errors import DataError, InputError
from odeinfer.model import History
from odeinfer.solve import DDESolver, Solver, Status, VJP


@oi.model(states=["x"], params=["k"])
def decay(t, y, p):
    return {"x": -p.k * y.x}


@oi.model(states=["x"], params=["k", "tau"], delays=["tau"])
def lagged(t, y, p):
    return {"x": -p.k * om.lag(y.x, "tau")}


@oi.model(states=["prey", "pred"], params=["alpha", "beta", "gamma", "delta"])
def lotka_volterra(t, y, p):
    return {"prey": p.alpha * y.prey - p.beta * y.prey * y.pred,
            "pred": p.delta * y.prey * y.pred - p.gamma * y.pred}


LV_P = np.array([0.55, 0.028, 0.80, 0.024])
LV_X0 = np.array([33.96, 5.93])
LV_T = np.arange(21.0)
T = np.array([0.0, 0.5, 1.0, 2.0, 4.0])
TIGHT = oi.Dopri5(rtol=1e-10, atol=1e-12)


def _lagged_exact(t, k, tau, a, b):
    """x and d x / d(k, tau, a, b) on [0, tau] for history a s + b (t0 = 0)."""
    x = b - k * (a * (t ** 2 / 2 - tau * t) + b * t)
    return x, np.stack([-(a * (t ** 2 / 2 - tau * t) + b * t), k * a * t, -k * (t ** 2 / 2 - tau * t), 1 - k * t], -1)


# --- Problem, solve, bind on an ODE and a delay model ---------------------------------------------------


def test_ode_solution_and_sensitivities_match_the_closed_form():
    k, x0 = 0.7, 2.0
    sol = oi.solve(oi.Problem(decay, T, x0=[x0]), {"k": k}, solver=TIGHT, gradient=oi.Forward())
    e = np.exp(-k * T)
    assert isinstance(sol, oi.Solution) and sol.success and sol.method == "dopri5" and sol.t0 == 0.0
    np.testing.assert_allclose(sol.y[:, 0], x0 * e, rtol=1e-9)
    np.testing.assert_allclose(sol.sens[:, 0, 0], -T * x0 * e, rtol=1e-8, atol=1e-12)  # d x / d k
    np.testing.assert_allclose(sol.sens[:, 0, 1], e, rtol=1e-8)  # d x / d x0
    assert sol.sens_names == ("k", "x(t0)") and sol.history is None and sol.history_params == ()


def test_x0_per_call_overrides_the_problem_and_t0_shifts_time():
    prob = oi.Problem(decay, [1.0, 2.0], t0=0.5, x0=[3.0])
    assert prob.t0 == 0.5 and prob.x0.tolist() == [3.0] and not prob.delays
    a = oi.solve(prob, [0.4], solver=TIGHT)
    b = oi.solve(prob, [0.4], x0={"x": 1.5}, solver=TIGHT)
    np.testing.assert_allclose(a.y[:, 0], 3.0 * np.exp(-0.4 * (np.array([1.0, 2.0]) - 0.5)), rtol=1e-9)
    np.testing.assert_allclose(b.y[:, 0], 1.5 * np.exp(-0.4 * (np.array([1.0, 2.0]) - 0.5)), rtol=1e-9)
    with pytest.raises(ValueError, match="read-only"):
        prob.x0[0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        prob.t[0] = 1.0


def test_delay_solution_and_sensitivities_match_the_closed_form():
    k, tau, a, b = 0.8, 1.0, 0.3, 2.0
    t = np.array([0.0, 0.25, 0.5, 1.0])
    prob = oi.Problem(lagged, t, history=History.affine(a, b))
    assert prob.delays and prob.states == ("x",) and prob.params == ("k", "tau")
    sol = oi.solve(prob, {"k": k, "tau": tau}, solver=oi.MethodOfSteps(TIGHT), gradient=oi.Forward())
    x, dx = _lagged_exact(t, k, tau, a, b)
    assert sol.success and sol.method == "dde-dopri5" and sol.t0 == 0.0
    np.testing.assert_allclose(sol.y[:, 0], x, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sol.sens[:, 0, :], dx, rtol=1e-8, atol=1e-10)
    assert sol.sens_names == ("k", "tau", "a[x]", "b[x]") and sol.history_params == ("a[x]", "b[x]")
    assert sol.history.kind == "affine" and sol.history.values.tolist() == [a, b]
    # other history values per call, and the default solver for a delay model (MethodOfSteps(Dopri5()))
    other = oi.solve(prob, [k, tau], history_params=[0.0, 1.0])
    np.testing.assert_allclose(other.y[:, 0], _lagged_exact(t, k, tau, 0.0, 1.0)[0], rtol=1e-6)
    assert other.history.values.tolist() == [0.0, 1.0] and other.sens is None


def test_bind_returns_the_prebuilt_solver_of_each_kind():
    from odeinfer.solve.dde_adjoint import DDEVJP

    assert isinstance(oi.bind(oi.Problem(decay, T)), Solver)
    assert isinstance(oi.bind(oi.Problem(lagged, T, history=1.0)), DDESolver)
    # the delay adjoint: x = b (1 - k t) on [0, tau] (constant history b), so for L = sum_i x(t_i):
    # dL/dk = -b sum t_i, dL/dtau = 0, dL/db = sum (1 - k t_i)
    t = np.array([0.0, 0.5, 1.0])
    dvjp = oi.bind(oi.Problem(lagged, t, history=2.0), gradient=oi.Adjoint())
    assert isinstance(dvjp, DDEVJP)
    grad, status = dvjp(np.array([0.5, 1.0]), np.array([2.0]), np.ones((3, 1)))
    assert status == Status.SUCCESS
    np.testing.assert_allclose(grad, [-2.0 * t.sum(), 0.0, np.sum(1 - 0.5 * t)], rtol=1e-7, atol=1e-9)
    vjp = oi.bind(oi.Problem(decay, T), gradient=oi.Adjoint())
    assert isinstance(vjp, VJP)
    # d/dk and d/dx0 of sum_i x(t_i) = sum_i x0 exp(-k t_i)
    grad, status = vjp(np.array([0.7]), np.array([2.0]), np.ones((T.size, 1)))
    e = np.exp(-0.7 * T)
    assert status == Status.SUCCESS
    np.testing.assert_allclose(grad, [np.sum(-T * 2.0 * e), np.sum(e)], rtol=1e-4)


@pytest.mark.parametrize("solver, gradient", [
    (oi.Dopri5(), None), (oi.Dopri5(), oi.Forward()), (oi.Dopri5(rtol=1e-9), oi.Forward(error_control=False)),
    (oi.Dopri5(fixed_step=0.25), oi.Forward()), (oi.Rodas(), oi.Forward()), (oi.Rodas(rtol=1e-8), None),
    (oi.Dopri5(), oi.Forward(exclude=["beta"])),
])
def test_solve_equals_the_bound_solver_bitwise(solver, gradient):
    sol = oi.solve(oi.Problem(lotka_volterra, LV_T, x0=LV_X0), LV_P, solver=solver, gradient=gradient)
    bound = oi.bind(oi.Problem(lotka_volterra, LV_T), solver=solver, gradient=gradient)
    y, sens, status = bound(LV_P, LV_X0)
    assert status == sol.status == Status.SUCCESS
    np.testing.assert_array_equal(y, sol.y)
    if gradient is None:
        assert sens is None and sol.sens is None
    else:
        np.testing.assert_array_equal(sens, sol.sens)
    assert (sol.t_reached, sol.n_steps, sol.n_rejected, sol.n_rhs) == tuple(bound.info[:4])


@pytest.mark.parametrize("gradient", [None, oi.Forward()])
def test_delay_solve_equals_the_bound_solver_bitwise(gradient):
    hist = History.periodic(0.2, 2.0, 1.0)
    t = np.linspace(0.0, 5.0, 11)
    sol = oi.solve(oi.Problem(lagged, t, history=hist), [0.9, 0.7], gradient=gradient)
    y, sens, status = oi.bind(oi.Problem(lagged, t, history=hist), gradient=gradient)(np.array([0.9, 0.7]),
                                                                                       hist.values)
    assert status == sol.status == Status.SUCCESS
    np.testing.assert_array_equal(y, sol.y)
    if gradient is not None:
        np.testing.assert_array_equal(sens, sol.sens)


def _read_only(*values):
    a = np.array(values, dtype=float)
    a.flags.writeable = False
    return a


def _kernel_versions(bound):
    from odeinfer.solve.shared import shared_module

    tiers = bound._tiers
    kernel = getattr(shared_module(), "ptr_" + tiers.kernel.__name__) if tiers.tier == "shared" else tiers.kernel
    return len(kernel.overloads)


def test_bound_solvers_take_read_only_inputs_without_compiling_the_kernel_again():
    """A read-only array (``problem.x0``, ``history.values``) is another argument type to numba: the bound
    solvers pass a writable copy, so the kernel is not compiled a second time for it (10-30 s)."""
    bound = oi.bind(oi.Problem(decay, T, x0=[2.0]))
    y = bound(np.array([0.7]), np.array([2.0]))[0].copy()
    versions = _kernel_versions(bound)
    np.testing.assert_array_equal(bound(_read_only(0.7), _read_only(2.0))[0], y)
    np.testing.assert_array_equal(bound(np.array([0.7]), np.array([2]))[0], y)  # integers: converted too
    assert _kernel_versions(bound) == versions
    hist = History.periodic(0.2, 2.0, 1.0)
    bound = oi.bind(oi.Problem(lagged, np.linspace(0.0, 5.0, 11), history=hist))
    y = bound(np.array([0.9, 0.7]), np.array(hist.values))[0].copy()
    versions = _kernel_versions(bound)
    np.testing.assert_array_equal(bound(_read_only(0.9, 0.7), hist.values)[0], y)
    assert not hist.values.flags.writeable and _kernel_versions(bound) == versions


def test_solve_reuses_the_bound_solver_of_the_problem():
    prob = oi.Problem(decay, T, x0=[2.0])
    bound = oi.bind(prob)
    assert oi.bind(prob) is bound  # the same object for the same (solver, gradient)...
    assert oi.bind(prob, solver=oi.Dopri5(rtol=1e-6, atol=1e-8)) is bound  # ...compared by value
    assert oi.bind(prob, solver=TIGHT) is not bound
    for k in (0.7, 0.3):
        sol = oi.solve(prob, [k])
        assert oi.bind(prob) is bound
        np.testing.assert_array_equal(bound.z[:, :1], sol.y)  # solve ran in the bound solver's buffer
        assert bound.info[1] == sol.n_steps
    # the Solution is a copy: the next solve does not change it
    first = oi.solve(prob, [0.7])
    oi.solve(prob, [0.3])
    np.testing.assert_allclose(first.y[:, 0], 2.0 * np.exp(-0.7 * T), rtol=1e-5)


def test_solve_is_the_package_and_the_function():
    prob = oi.solve.Problem(decay, T, x0=[2.0])
    assert oi.solve.Problem is oi.Problem and oi.solve.bind is oi.bind and oi.solve.Solution is oi.Solution
    a, b = oi.solve(prob, [0.7]), oi.solve.solve(prob, [0.7])
    np.testing.assert_array_equal(a.y, b.y)
    np.testing.assert_allclose(a.y[:, 0], 2.0 * np.exp(-0.7 * T), rtol=1e-5)


def test_pickled_solver_and_vjp_give_the_same_numbers():
    for solver in (oi.Dopri5(rtol=1e-9), oi.Rodas()):
        s = oi.bind(oi.Problem(lotka_volterra, LV_T), solver=solver, gradient=oi.Forward(exclude=("gamma",)))
        c = pickle.loads(pickle.dumps(s))
        assert c is not s and (c.solver, c.gradient, c.t0, c.sens_exclude) == (s.solver, s.gradient, s.t0, ("gamma",))
        y, sens, status = (a.copy() if hasattr(a, "copy") else a for a in s(LV_P, LV_X0))
        cy, csens, cstatus = c(LV_P, LV_X0)
        assert status == cstatus == Status.SUCCESS
        np.testing.assert_array_equal(cy, y)
        np.testing.assert_array_equal(csens, sens)
    vjp = oi.bind(oi.Problem(decay, T), solver=TIGHT, gradient=oi.Adjoint(nsub=2))
    clone = pickle.loads(pickle.dumps(vjp))
    assert (clone.solver, clone.gradient, clone.nsub) == (TIGHT, oi.Adjoint(nsub=2), 2)
    g = np.ones((T.size, 1))
    want, status = vjp(np.array([0.7]), np.array([2.0]), g)
    want = want.copy()
    got, cstatus = clone(np.array([0.7]), np.array([2.0]), g)
    assert status == cstatus == Status.SUCCESS
    np.testing.assert_array_equal(got, want)
    e = np.exp(-0.7 * T)
    np.testing.assert_allclose(got, [np.sum(-T * 2.0 * e), np.sum(e)], rtol=1e-8)


def test_solution_sens_names_and_frame():
    ode = oi.solve(oi.Problem(lotka_volterra, LV_T[:3], x0=LV_X0), LV_P, gradient=oi.Forward())
    assert ode.sens_names == ("alpha", "beta", "gamma", "delta", "prey(t0)", "pred(t0)")
    assert ode.to_frame(sens=True).columns[-1] == "dpred/dpred(t0)"
    dde = oi.solve(oi.Problem(lagged, [0.0, 1.0], history=History.periodic(0.1, 1.0, 2.0)), [0.5, 0.5],
                   gradient=oi.Forward())
    assert dde.sens_names == ("k", "tau", "A[x]", "omega[x]", "b[x]")
    assert dde.sens.shape == (2, 1, 5)
    # plain numbers as the history: the constant family, whose value history_params may change
    prob = oi.Problem(lagged, [0.0, 0.5, 1.0], history=2.0)
    assert prob.history.kind == "constant"
    plain = oi.solve(prob, [0.5, 1.0], gradient=oi.Forward(), solver=oi.MethodOfSteps(TIGHT))
    assert plain.sens_names == ("k", "tau", "b[x]")
    x, dx = _lagged_exact(prob.t, 0.5, 1.0, 0.0, 2.0)
    np.testing.assert_allclose(plain.y[:, 0], x, rtol=1e-10)
    np.testing.assert_allclose(plain.sens[:, 0, [0, 2]], dx[:, [0, 3]], rtol=1e-8, atol=1e-10)
    other = oi.solve(prob, [0.5, 1.0], history_params=[3.0])
    np.testing.assert_allclose(other.y[:, 0], _lagged_exact(prob.t, 0.5, 1.0, 0.0, 3.0)[0], rtol=1e-6)


def test_problem_pickles_without_its_bound_solvers():
    """A Problem travels to worker processes (its cache of bound solvers and their lock stay behind)."""
    prob = oi.Problem(decay, T, x0=[2.0], t0=-1.0)
    oi.solve(prob, [0.7])
    copy = pickle.loads(pickle.dumps(prob))
    assert (copy.t0, copy.x0.tolist(), copy.t.tolist()) == (-1.0, [2.0], T.tolist())
    np.testing.assert_allclose(oi.solve(copy, [0.7]).y[:, 0], 2.0 * np.exp(-0.7 * (T + 1.0)), rtol=1e-5)
    dde = pickle.loads(pickle.dumps(oi.Problem(lagged, T, history=History.affine(0.3, 2.0))))
    assert dde.history.kind == "affine" and dde.history.values.tolist() == [0.3, 2.0]


def test_problem_and_solution_repr():
    prob = oi.Problem(decay, T, x0=[2.0])
    assert repr(prob) == "Problem(model='decay', t=[0 .. 4] (5 times), t0=0, x0=[2.0])"
    assert "history=" in repr(oi.Problem(lagged, T, history=1.0))
    assert repr(oi.solve(prob, [0.7])).startswith("Solution(method='dopri5', status=SUCCESS")


# --- the values: frozen, hashable, replace validates ---------------------------------------------------


def test_solver_and_gradient_values_are_frozen_and_hashable():
    values = [oi.Dopri5(), oi.Rodas(), oi.MethodOfSteps(), oi.Forward(), oi.Adjoint(), oi.Dopri5(fixed_step=0.1),
              oi.Forward(exclude=["k"])]
    assert len({*values, *values}) == len(values)
    assert oi.Dopri5(rtol=1e-8) == oi.Dopri5(rtol=1e-8) and hash(oi.Dopri5(rtol=1e-8)) == hash(oi.Dopri5(rtol=1e-8))
    assert oi.Dopri5() != oi.Rodas()  # same options, another method
    assert oi.MethodOfSteps() == oi.MethodOfSteps(oi.Dopri5())
    assert oi.Forward(exclude=["k"]).exclude == ("k",) and oi.Forward(exclude="k") == oi.Forward(exclude=("k",))
    assert oi.Dopri5(max_steps=np.int64(7)).max_steps == 7 and type(oi.Dopri5(max_steps=np.int64(7)).max_steps) is int
    for value, field in ((oi.Dopri5(), "rtol"), (oi.Rodas(), "max_steps"), (oi.MethodOfSteps(), "inner"),
                         (oi.Forward(), "exclude"), (oi.Adjoint(), "nsub")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, 1)


def test_replace_returns_a_validated_copy():
    d = oi.Dopri5(rtol=1e-8)
    assert d.replace(atol=1e-12) == oi.Dopri5(rtol=1e-8, atol=1e-12) and d.atol == 1e-8
    assert oi.Rodas().replace(max_steps=5) == oi.Rodas(max_steps=5)
    mos = oi.MethodOfSteps(d).replace(rtol=1e-9)
    assert mos == oi.MethodOfSteps(oi.Dopri5(rtol=1e-9)) and (mos.rtol, mos.atol, mos.max_steps) == (1e-9, 1e-8, 100000)
    with pytest.raises(InputError, match=r"Dopri5\(rtol=\.\.\.\): expected a number in \(0, 1\), got -1"):
        d.replace(rtol=-1)
    with pytest.raises(InputError, match=r"Rodas\(max_steps=\.\.\.\): expected a positive integer, got 0"):
        oi.Rodas().replace(max_steps=0)
    with pytest.raises(InputError, match=r"Dopri5\(first_step=\.\.\.\)"):
        oi.MethodOfSteps().replace(first_step=-1.0)


def test_default_solvers_per_role():
    from odeinfer.solve.config import DEFAULT_SOLVERS, default_solver

    assert {"solve", "fit", "sample", "view"} <= set(DEFAULT_SOLVERS)
    assert default_solver("solve") == oi.Dopri5() and default_solver("solve", delays=True) == oi.MethodOfSteps()
    assert oi.bind(oi.Problem(decay, T), role="fit").solver == DEFAULT_SOLVERS["fit"]
    assert oi.bind(oi.Problem(lagged, T, history=1.0), role="sample").solver == oi.MethodOfSteps(
        DEFAULT_SOLVERS["sample"])


# --- bad input: every check of config.py and problem.py ----------------------------------------------


@pytest.mark.parametrize("make, match", [
    # tolerances
    (lambda: oi.Dopri5(rtol=True), r"Dopri5\(rtol=\.\.\.\): expected a positive number, got True"),
    (lambda: oi.Rodas(atol="small"), r"Rodas\(atol=\.\.\.\): expected a positive number, got str"),
    (lambda: oi.Dopri5(rtol=None), r"Dopri5\(rtol=\.\.\.\): expected a positive number, got NoneType"),
    (lambda: oi.Dopri5(rtol=0.0), r"Dopri5\(rtol=\.\.\.\): expected a number in \(0, 1\), got 0\.0; typical values "
                                  r"are rtol=1e-6 \.\. 1e-10"),
    (lambda: oi.Dopri5(rtol=1.0), r"Dopri5\(rtol=\.\.\.\): expected a number in \(0, 1\), got 1\.0"),
    (lambda: oi.Dopri5(rtol=-1), r"Dopri5\(rtol=\.\.\.\): expected a number in \(0, 1\), got -1; "),
    (lambda: oi.Dopri5(rtol=float("nan")), r"Dopri5\(rtol=\.\.\.\): expected a number in \(0, 1\), got nan"),
    (lambda: oi.Rodas(atol=-1.0), r"Rodas\(atol=\.\.\.\): expected a number in \(0, inf\), got -1\.0"),
    (lambda: oi.Dopri5(atol=float("inf")), r"Dopri5\(atol=\.\.\.\): expected a number in \(0, inf\), got inf"),
    (lambda: oi.Dopri5(rtol=1e-15), r"Dopri5\(rtol=\.\.\.\): 1e-15 is below 100 \* machine epsilon \(2\.2e-14\): "
                                    r"the solver cannot reach it; use rtol >= 1e-13"),
    # steps
    (lambda: oi.Dopri5(max_steps=0), r"Dopri5\(max_steps=\.\.\.\): expected a positive integer, got 0; the "
                                     r"default is 100000"),
    (lambda: oi.Dopri5(max_steps=-5), r"expected a positive integer, got -5"),
    (lambda: oi.Dopri5(max_steps=10.5), r"Dopri5\(max_steps=\.\.\.\): expected a positive integer, got 10\.5"),
    (lambda: oi.Rodas(max_steps=True), r"Rodas\(max_steps=\.\.\.\): expected a positive integer, got True"),
    (lambda: oi.Dopri5(max_steps="100"), r"Dopri5\(max_steps=\.\.\.\): expected a positive integer, got '100'"),
    (lambda: oi.Dopri5(first_step="a"), r"Dopri5\(first_step=\.\.\.\): expected a positive number or None, got str"),
    (lambda: oi.Dopri5(first_step=-0.1), r"Dopri5\(first_step=\.\.\.\): expected a positive finite number or None "
                                         r"\(None: chosen automatically\), got -0\.1"),
    (lambda: oi.Rodas(first_step=0.0), r"Rodas\(first_step=\.\.\.\): .*got 0\.0"),
    (lambda: oi.Dopri5(first_step=float("inf")), r"Dopri5\(first_step=\.\.\.\): .*got inf"),
    (lambda: oi.Dopri5(first_step=True), r"Dopri5\(first_step=\.\.\.\): .*got True"),
    # fixed step
    (lambda: oi.Dopri5(fixed_step=0.0), r"Dopri5\(fixed_step=\.\.\.\): expected a positive finite number or None, "
                                        r"got 0\.0"),
    (lambda: oi.Dopri5(fixed_step=-0.1), r"Dopri5\(fixed_step=\.\.\.\): .*got -0\.1"),
    (lambda: oi.Dopri5(fixed_step=float("inf")), r"Dopri5\(fixed_step=\.\.\.\): .*got inf"),
    (lambda: oi.Dopri5(fixed_step=True), r"Dopri5\(fixed_step=\.\.\.\): .*got True"),
    (lambda: oi.Dopri5(fixed_step="0.1"), r"Dopri5\(fixed_step=\.\.\.\): .*got '0\.1'"),
    (lambda: oi.Dopri5(fixed_step=np.float64(-1.0)),
     r"Dopri5\(fixed_step=\.\.\.\): .*got (np\.float64\()?-1\.0"),
    # method of steps
    (lambda: oi.MethodOfSteps(oi.Rodas()), r"MethodOfSteps\(inner=\.\.\.\): expected a Dopri5\(\.\.\.\) value, got "
                                           r"Rodas \(a stiff delay solver is not available; .*Dopri5\(max_steps"),
    (lambda: oi.MethodOfSteps("dopri5"), r"MethodOfSteps\(inner=\.\.\.\): expected a Dopri5\(\.\.\.\) value, got str$"),
    (lambda: oi.MethodOfSteps(oi.MethodOfSteps()), r"expected a Dopri5\(\.\.\.\) value, got MethodOfSteps$"),
    # the delay kernel is adaptive only: a fixed step would be ignored
    (lambda: oi.MethodOfSteps(oi.Dopri5(fixed_step=0.1)),
     r"MethodOfSteps\(inner=\.\.\.\): the delay solver has no fixed-step mode, got Dopri5\(.*fixed_step=0\.1\); "
     r"leave fixed_step=None"),
    (lambda: oi.MethodOfSteps().replace(fixed_step=0.1), r"the delay solver has no fixed-step mode"),
    # gradients
    (lambda: oi.Forward(error_control=1), r"Forward\(error_control=\.\.\.\): expected True or False, got 1"),
    (lambda: oi.Forward(error_control="yes"), r"Forward\(error_control=\.\.\.\): expected True or False, got 'yes'"),
    (lambda: oi.Forward(exclude=3), r"Forward\(exclude=\.\.\.\): expected a list of parameter names, got 3"),
    (lambda: oi.Forward(exclude=["k", 2]), r"Forward\(exclude=\.\.\.\): expected parameter names \(str\), got 2"),
    (lambda: oi.Adjoint(nsub=0), r"Adjoint\(nsub=\.\.\.\): expected a positive integer, got 0"),
    (lambda: oi.Adjoint(nsub=1.5), r"Adjoint\(nsub=\.\.\.\): expected a positive integer, got 1\.5"),
    (lambda: oi.Adjoint(nsub=True), r"Adjoint\(nsub=\.\.\.\): expected a positive integer, got True"),
])
def test_values_validate_at_construction(make, match):
    with pytest.raises(InputError, match=match):
        make()


def test_good_values_are_normalised():
    d = oi.Dopri5(rtol=np.float32(1e-5), atol=1, first_step=np.float64(0.01), fixed_step=np.float64(0.5))
    assert (d.rtol, d.atol, d.first_step, d.fixed_step) == (pytest.approx(1e-5), 1.0, 0.01, 0.5)
    assert all(type(v) is float for v in (d.rtol, d.atol, d.first_step, d.fixed_step))
    assert oi.Forward(error_control=np.bool_(False)).error_control is False and oi.Forward(exclude=None).exclude == ()
    assert oi.Adjoint(nsub=np.int32(3)).nsub == 3


ODE = oi.Problem(decay, T, x0=[2.0])
DDE = oi.Problem(lagged, T, history=1.0)


@pytest.mark.parametrize("call, match", [
    # solver= and gradient= (as_solver, as_gradient)
    (lambda: oi.solve(ODE, [1.0], solver="dopri5"),
     r"solver: expected a solver value such as oi\.Dopri5\(\), got the string 'dopri5'; pass solver=oi\.Dopri5\(\)"),
    (lambda: oi.bind(ODE, solver="RODAS"), r"solver: .*got the string 'RODAS'; pass solver=oi\.Rodas\(\)"),
    (lambda: oi.solve(ODE, [1.0], solver="rk45"),
     r"solver: expected a solver value such as oi\.Dopri5\(\) or oi\.Rodas\(\), got the string 'rk45'"),
    (lambda: oi.solve(ODE, [1.0], solver=oi.Forward()),
     r"solver: expected oi\.Dopri5\(\.\.\.\), oi\.Rodas\(\.\.\.\), oi\.Auto\(\.\.\.\) or oi\.MethodOfSteps\(\.\.\.\), "
     r"got Forward"),
    (lambda: oi.solve(DDE, [1.0, 1.0], solver=oi.Dopri5(rtol=1e-8)),
     r"solver: the model has delays, so it needs a method of steps, got Dopri5\(rtol=1e-08, .*\); pass "
     r"solver=oi\.MethodOfSteps\(Dopri5\(rtol=1e-08"),
    # no stiff delay solver: the fix names the Dopri5 with the same options, not MethodOfSteps(Rodas(...))
    (lambda: oi.bind(DDE, solver=oi.Rodas(rtol=1e-7)),
     r"solver: the model has delays, so it needs a method of steps, got Rodas\(rtol=1e-07, .*\); pass "
     r"solver=oi\.MethodOfSteps\(Dopri5\(rtol=1e-07, atol=1e-08, max_steps=100000, first_step=None, "
     r"fixed_step=None\)\) \(no stiff delay solver"),
    (lambda: oi.solve(ODE, [1.0], solver=oi.MethodOfSteps()),
     r"solver: the model has no delays, got MethodOfSteps\(.*\); pass solver=Dopri5\("),
    (lambda: oi.solve(ODE, [1.0], gradient=True), r"gradient: expected oi\.Forward\(\) or oi\.Adjoint\(\), got True; "
                                                  r"pass gradient=oi\.Forward\(\)"),
    (lambda: oi.bind(ODE, gradient="adjoint"),
     r"gradient: expected None, oi\.Forward\(\.\.\.\) or oi\.Adjoint\(\.\.\.\), got 'adjoint'"),
    (lambda: oi.bind(ODE, role="fitting"), r"role: expected one of \['solve', 'fit', 'sample', 'view'.*\], got "
                                           r"'fitting'; or pass solver=\.\.\. explicitly"),
    # bind: the gradient the solver or the problem cannot give
    (lambda: oi.bind(ODE, solver=oi.Auto(), gradient=oi.Adjoint()),
     r"gradient: oi\.Adjoint\(\) needs an adaptive solver of one method, oi\.Dopri5\(\.\.\.\) or \(stiff models\) "
     r"oi\.Rodas\(\.\.\.\).*got Auto\(.*\); pass solver=oi\.Dopri5\(\.\.\.\) or solver=oi\.Rodas\(\.\.\.\), or "
     r"gradient=oi\.Forward\(\)"),
    (lambda: oi.bind(ODE, solver=oi.Dopri5(fixed_step=0.1), gradient=oi.Adjoint()),
     r"gradient: oi\.Adjoint\(\) needs an adaptive solver of one method.*fixed_step=0\.1"),
    (lambda: oi.solve(DDE, [1.0, 1.0], gradient=oi.Forward(exclude=["k"])),
     r"gradient: Forward\(exclude=\.\.\.\) is not available for delay models; pass gradient=oi\.Forward\(\)"),
    # solve
    (lambda: oi.solve(ODE, [1.0], gradient=oi.Adjoint()),
     r"gradient: solve\(\) returns states and forward sensitivities; for adjoint vector-Jacobian products use "
     r"oi\.bind\(problem, gradient=oi\.Adjoint\(\)\)\(params, x0, g\)"),
    (lambda: oi.solve(ODE, [1.0], raise_on_failure="no"), r"raise_on_failure: expected True or False, got 'no'"),
    (lambda: oi.solve(ODE, [1.0], history_params=[1.0]),
     r"history_params: 'decay' has no delays; pass x0=\.\.\. instead"),
    (lambda: oi.solve(oi.Problem(decay, T), [1.0]),
     r"x0: the problem has no initial state; pass x0=\.\.\. here or to oi\.Problem\(\.\.\.\)"),
    (lambda: oi.solve(ODE, {"kk": 1.0}), r"params: \['kk'\] is not a parameter of the model \(did you mean 'k'\?\)"),
    (lambda: oi.solve(ODE, [1.0], x0=[1.0, 2.0]), r"x0: expected 1 values in the order \['x'\]"),
    (lambda: oi.solve(DDE, [1.0, 1.0], x0=[1.0]),
     r"x0: 'lagged' has delays; its initial condition is the problem's history \(pass history_params=\.\.\."),
    (lambda: oi.solve(DDE, [1.0, 0.0]), r"params: the delay 'tau' must be > 0, got (np\.float64\()?0\.0"),
    (lambda: oi.solve(DDE, [1.0, -1.0]), r"params: the delay 'tau' must be > 0, got (np\.float64\()?-1\.0"),
    (lambda: oi.solve(DDE, [1.0, 1.0], history_params=[2.0, 3.0]),
     r"history_params: expected 1 values \(constant history\), got 2"),
    (lambda: oi.solve(DDE, [1.0, 1.0], history_params=["a"]), r"history_params: expected 1 numbers, got \['a'\]"),
    (lambda: oi.solve(DDE, [1.0, 1.0], history_params=[np.nan]), r"history_params: values must be finite"),
    (lambda: oi.solve(oi.Problem(lagged, T, history=History.from_data(np.linspace(-2, 0, 5), np.ones(5))),
                      [1.0, 1.0], history_params=[2.0]),
     r"history_params: given, but the history is a data-driven history \(no parameters\)"),
    (lambda: oi.solve("problem", [1.0]), r"problem: expected an oi\.Problem\(model, t, x0=\.\.\. or history=\.\.\.\), "
                                         r"got str"),
    (lambda: oi.bind(decay), r"problem: expected an oi\.Problem\(model, t, x0=\.\.\. or history=\.\.\.\), got Model"),
    # Problem
    (lambda: oi.Problem(lambda t, y, p: y, T), r"model: expected an odeinfer Model \(from @oi\.model or "
                                               r"Model\.from_equations\) or its CompiledModel, got function"),
    (lambda: oi.Problem(decay, T, x0=[1.0, 2.0]), r"x0: expected 1 values in the order \['x'\], got an array of "
                                                  r"shape \(2,\)"),
    (lambda: oi.Problem(decay, T, x0={"y": 1.0}), r"x0: \['y'\] is not a state of the model"),
    (lambda: oi.Problem(decay, T, history=1.0), r"history: 'decay' has no delays; pass x0=\.\.\. for its initial "
                                                r"state instead"),
    (lambda: oi.Problem(lagged, T, x0=[1.0]), r"x0: 'lagged' has delays \['tau'\], so its initial condition is a "
                                              r"history, not x0; pass history=\.\.\. \(y\(t0\) is the history's value"),
    (lambda: oi.Problem(lagged, T), r"history: 'lagged' has delays \['tau'\]; pass history=\.\.\. \(a History, "
                                    r"constant numbers"),
    (lambda: oi.Problem(lagged, T, history=[1.0, 2.0]), r"history: has 2 state\(s\) but model 'lagged' has 1"),
    (lambda: oi.Problem(lagged, T, history=object()), r"history: expected a History .* got object"),
    (lambda: oi.Problem(lagged, T, history=lambda s: 1.0),
     r"history: a function needs the delays to know its window; pass History\.from_function\(fn, start, end\)"),
])
def test_bad_arguments_are_named_with_the_fix(call, match):
    with pytest.raises(InputError, match=match):
        call()


@pytest.mark.parametrize("model, kwargs, match", [
    (decay, {"t": [0.0, 2.0, 1.0]}, r"t: output times must be sorted"),
    (decay, {"t": [], "x0": [1.0]}, r"t: expected a non-empty 1-D array of output times"),
    (decay, {"t": [0.0, 1.0], "t0": 0.5}, r"t: the first output time t\[0\]=0\.0 is before t0=0\.5"),
    (decay, {"t": [0.0, 1.0], "t0": "zero"}, r"t0: expected a number, got str"),
    (lagged, {"t": [0.5, 2.0], "t0": 1.0, "history": 1.0},
     r"t: the output time 0\.5 is before t0=1\.0; times before t0 lie in the history window"),
    (lagged, {"t": [0.0, np.nan], "history": 1.0}, r"t: output times must be finite"),
])
def test_bad_times_are_data_errors(model, kwargs, match):
    with pytest.raises(DataError, match=match):
        oi.Problem(model, **kwargs)


def test_data_driven_history_must_cover_the_window():
    s = np.linspace(-0.5, 0.0, 6)
    prob = oi.Problem(lagged, T, history=History.from_data(s, np.ones(6)))
    with pytest.raises(DataError, match=r"history: the data-driven history covers \[-0\.5, 0\], but with max\(tau\) "
                                        r"= 1 the solve needs \[-1, 0\]"):
        oi.solve(prob, [1.0, 1.0])
    # x = 1 - t on [0, 0.5], then x = 0.5 - (t - 0.5) + (t - 0.5)^2 / 2
    np.testing.assert_allclose(oi.solve(prob, [1.0, 0.5]).y[:3, 0], [1.0, 0.5, 0.125], atol=1e-7)


def test_sensitivity_refusals_come_from_bind():
    """A parameter that moves a jump of the right-hand side: no forward sensitivities or adjoint unless
    it is excluded (forward) - the states alone are fine."""
    @oi.model(states=["x"], params=["k", "T_on"])
    def switched(t, y, p):
        return {"x": -p.k * y.x * om.heaviside(t - p.T_on)}

    prob = oi.Problem(switched, [0.0, 1.0, 2.0], x0=[1.0])
    sol = oi.solve(prob, [0.5, 1.0], solver=TIGHT)
    np.testing.assert_allclose(sol.y[:, 0], [1.0, 1.0, np.exp(-0.5)], rtol=1e-8)
    for gradient in (oi.Forward(), oi.Adjoint()):
        with pytest.raises(InputError, match=r"parameters \['T_on'\] move a jump"):
            oi.bind(prob, gradient=gradient)
    with pytest.raises(InputError, match=r"'T_of' is not a parameter of the model \(did you mean 'T_on'\?\)"):
        oi.bind(prob, gradient=oi.Forward(exclude=["T_of"]))
    ok = oi.solve(prob, [0.5, 1.0], solver=TIGHT, gradient=oi.Forward(exclude=["T_on"]))
    assert np.isnan(ok.sens[:, 0, 1]).all()
    np.testing.assert_allclose(ok.sens[:, 0, 0], [0.0, 0.0, -np.exp(-0.5)], atol=1e-8)  # d x / d k = -(t - 1) x
