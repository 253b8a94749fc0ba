"""oi.Auto: Dormand-Prince until the problem turns out stiff, then Rodas; and the solver's own
failure message in the trajectory estimators' statuses.

References: scipy's Radau (rtol 1e-10, atol 1e-14) for Robertson's chemical kinetics; the
conservation law y1 + y2 + y3 = 1 (so the parameter sensitivities sum to 0 over the states);
plain Dopri5 on the same bound problem (bitwise) for non-stiff ones; the closed-form solution of
a linear fast-slow chain fitted by scipy least_squares.
"""

import pickle

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import least_squares

import odeinfer as oi
from odeinfer import math as om
from odeinfer.errors import InputError, StiffnessError
from odeinfer.solve import AutoSolver, Status
from odeinfer.solve.config import DEFAULT_SOLVERS, as_solver, default_solver


@oi.model(states=["y1", "y2", "y3"], params=["k1", "k2", "k3"])
def robertson(t, y, p):
    return {"y1": -p.k1 * y.y1 + p.k3 * y.y2 * y.y3,
            "y2": p.k1 * y.y1 - p.k2 * y.y2 ** 2 - p.k3 * y.y2 * y.y3,
            "y3": p.k2 * y.y2 ** 2}


def robertson_rhs(t, y, p):
    return [-p[0] * y[0] + p[2] * y[1] * y[2], p[0] * y[0] - p[1] * y[1] ** 2 - p[2] * y[1] * y[2], p[1] * y[1] ** 2]


@oi.model(states=["prey", "pred"], params=["alpha", "beta", "gamma", "delta"])
def lotka_volterra(t, y, p):
    return {"prey": p.alpha * y.prey - p.beta * y.prey * y.pred,
            "pred": p.delta * y.prey * y.pred - p.gamma * y.pred}


@oi.model(states=["x"], params=["k", "tau"], delays=["tau"])
def lagged(t, y, p):
    return {"x": -p.k * om.lag(y.x, "tau")}


P = np.array([0.04, 3e7, 1e4])
X0 = np.array([1.0, 0.0, 0.0])
T = np.array([0.0, 0.4, 4.0, 40.0, 400.0, 4e3])
LV_P, LV_X0 = np.array([0.55, 0.028, 0.84, 0.026]), np.array([33.0, 6.0])


def radau(t):
    return solve_ivp(robertson_rhs, (t[0], t[-1]), X0, method="Radau", t_eval=t, args=(P,), rtol=1e-10,
                     atol=1e-14).y.T


def assert_close_to_radau(y, t):
    ref = radau(t)
    np.testing.assert_allclose(y[:, 0], ref[:, 0], rtol=1e-6)
    np.testing.assert_allclose(y[:, 1], ref[:, 1], rtol=1e-5, atol=1e-12)  # y2 peaks at 3.6e-5
    np.testing.assert_allclose(y[:, 2], ref[:, 2], rtol=1e-5, atol=1e-10)


def test_dopri5_fails_with_stiff_on_robertson():
    b = oi.bind(oi.Problem(robertson, T, x0=X0), solver=oi.Dopri5(rtol=1e-8, atol=1e-12), gradient=oi.Forward())
    assert b(P, X0.copy())[2] == Status.STIFF


def test_robertson_switches_to_rodas_and_matches_radau():
    b = oi.bind(oi.Problem(robertson, T, x0=X0), solver=oi.Auto(rtol=1e-8, atol=1e-12), gradient=oi.Forward())
    assert isinstance(b, AutoSolver) and b.method_used == "dopri5" and not b.stiff and b.implicit is None
    y, S, status = b(P, X0.copy())
    assert status == Status.SUCCESS and b.stiff and b.method_used == b.method == "rodas"
    assert b.switch_reason.startswith("dopri5: the problem became stiff at t=") and b.switch_reason.endswith("times)")
    assert_close_to_radau(y, T)
    np.testing.assert_allclose(S[:, :, :3].sum(axis=1), 0.0, atol=1e-9)  # d(y1 + y2 + y3)/dk = 0
    # later calls go straight to Rodas: the Dopri5 solver is not called again
    steps = b.explicit.info.copy()
    y2, _, status2 = b(P, X0.copy())
    assert status2 == 0 and np.array_equal(b.explicit.info, steps) and b.info is b.implicit.info
    assert b.info[5] > 0  # LU decompositions: Rodas answered
    assert_close_to_radau(y2, T)


def _stiffness_case():
    """A linear 3-state step at Dormand-Prince's stability limit for eigenvalue -9e4, where the
    states' stage difference ``z1 - zs`` holds the stiff mode at 1e-9 of the slow ones (as on
    Smith_BMCSystBiol2013 with sensitivities; see ``rk_stiffness``). Reference: the eigenvalues
    built in (-9e4, -8, -1), so ``h rho = 3.307`` exactly."""
    rng = np.random.default_rng(3)
    V = np.eye(3) + 0.3 * rng.standard_normal((3, 3))
    J = V @ np.diag([-9e4, -8.0, -1.0]) @ np.linalg.inv(V)
    h = 3.307 / 9e4
    zs = np.array([1.0, 2.0, 3.0])
    z1 = zs + V @ np.array([1e-9, 1.0, 0.3])
    k6 = np.zeros(3)
    k7 = J @ (z1 - zs)  # linear model: f(z1) - f(zs)
    return J, h, z1, zs, k6, k7


def test_stiffness_test_with_sensitivities_finds_a_mode_the_states_barely_show():
    from odeinfer.solve.kernels.rk import rk_stiffness
    J, h, z1, zs, k6, k7 = _stiffness_case()
    v = np.zeros(6)
    # states alone (nc == n): Hairer's secant sees the slow modes, far below the 3.25 threshold
    hl, iasti, nonsti, stiff = rk_stiffness(3, 3, h, z1, zs, k6, k7, J, v, 0.0, 0, 0)
    assert hl < 0.01 and iasti == 0 and nonsti == 1 and not stiff
    # sensitivities controlling the step (nc > n): the power iteration reaches h rho = 3.307
    iasti = nonsti = 0
    for i in range(15):
        hl, iasti, nonsti, stiff = rk_stiffness(3, 6, h, z1, zs, k6, k7, J, v, 0.0, iasti, nonsti)
        assert abs(hl - 3.307) < 1e-6 and stiff == (i == 14)


def test_solve_with_auto_reports_the_method_used():
    t = np.concatenate([[0.0], np.logspace(-5, 5, 11)])
    sol = oi.solve(oi.Problem(robertson, t, x0=X0), P, solver=oi.Auto(rtol=1e-8, atol=1e-12))
    assert sol.success and sol.method == "rodas"
    assert_close_to_radau(sol.y, t)
    with pytest.raises(StiffnessError, match=r"status STIFF .*use solver=oi\.Rodas\(\) \(or solver=oi\.Auto\(\)"):
        oi.solve(oi.Problem(robertson, t, x0=X0), P, solver=oi.Dopri5(rtol=1e-8, atol=1e-12))


def test_max_steps_switches_only_when_the_step_is_stability_limited():
    # Robertson: 500 steps end before Hairer's test (first run after 1000 steps) fires
    plain = oi.bind(oi.Problem(robertson, T, x0=X0), solver=oi.Dopri5(max_steps=500))
    assert plain(P, X0.copy())[2] == Status.MAX_STEPS
    b = oi.bind(oi.Problem(robertson, T, x0=X0), solver=oi.Auto(max_steps=500))
    y, _, status = b(P, X0.copy())
    assert status == 0 and b.method_used == "rodas"
    assert b.switch_reason.startswith("dopri5: the solver took max_steps=500")
    np.testing.assert_allclose(y[:, 0], radau(T)[:, 0], rtol=1e-4)
    # Lotka-Volterra is not stiff: max_steps is just too small, and Auto stays on Dopri5
    lv = oi.bind(oi.Problem(lotka_volterra, np.linspace(0.0, 20.0, 5), x0=LV_X0), solver=oi.Auto(max_steps=10))
    assert lv(LV_P, LV_X0.copy())[2] == Status.MAX_STEPS
    assert lv.method_used == "dopri5" and not lv.stiff and lv.implicit is None


def test_a_step_limit_stops_later_solves_and_copies_inherit_it():
    """``limit_steps(n)``: each later call stops after ``n`` attempted steps (``MAX_STEPS``); ``None`` restores
    ``max_steps``; ``retimed`` copies start with the limit; an Auto solver's Rodas, built at the switch, gets it."""
    t = np.linspace(0.0, 20.0, 5)
    lv = oi.bind(oi.Problem(lotka_volterra, t, x0=LV_X0), solver=oi.Dopri5(), gradient=oi.Forward())
    assert lv(LV_P, LV_X0.copy())[2] == 0
    full = int(lv.info[1])
    assert full > 40
    lv.limit_steps(40)
    assert lv(LV_P, LV_X0.copy())[2] == Status.MAX_STEPS and lv.info[1] == 40
    copy = lv.retimed(np.array(t), 0.0)
    assert copy(LV_P, LV_X0.copy())[2] == Status.MAX_STEPS and copy.info[1] == 40
    lv.limit_steps(10 ** 9)  # above max_steps: max_steps
    assert lv.steps[0] == lv.max_steps == 100_000
    lv.limit_steps(None)
    assert lv(LV_P, LV_X0.copy())[2] == 0 and lv.info[1] == full
    # Auto on Robertson: a lowered limit is no sign of stiffness (max_steps=500 is, with a stability-limited step)
    b = oi.bind(oi.Problem(robertson, T, x0=X0), solver=oi.Auto())
    b.limit_steps(500)
    assert b(P, X0.copy())[2] == Status.MAX_STEPS and b.method_used == "dopri5" and b.info[1] == 500
    b.go_stiff()
    assert b.steps[0] == 500 and b(P, X0.copy())[2] == 0  # Rodas, built at the switch, has the limit
    b.limit_steps(5)
    assert b(P, X0.copy())[2] == Status.MAX_STEPS and b.info[1] == 5


@pytest.mark.parametrize("gradient", [None, oi.Forward(), oi.Forward(exclude=("beta",))])
def test_non_stiff_problem_is_dopri5_bit_for_bit(gradient):
    t = np.linspace(0.0, 15.0, 31)
    opts = {"rtol": 1e-8, "atol": 1e-10, "max_steps": 5000}
    auto = oi.bind(oi.Problem(lotka_volterra, t, x0=LV_X0), solver=oi.Auto(**opts), gradient=gradient)
    ref = oi.bind(oi.Problem(lotka_volterra, t, x0=LV_X0), solver=oi.Dopri5(**opts), gradient=gradient)
    for p in (LV_P, LV_P * 1.1):
        y, S, st = auto(p, LV_X0.copy())
        y_ref, S_ref, st_ref = ref(p, LV_X0.copy())
        assert st == st_ref == 0 and auto.method_used == "dopri5" and not auto.stiff
        assert np.array_equal(y, y_ref) and np.array_equal(auto.info, ref.info)
        if gradient is not None:
            assert np.array_equal(S, S_ref, equal_nan=True)
    sol = oi.solve(oi.Problem(lotka_volterra, t, x0=LV_X0), LV_P, solver=oi.Auto(**opts))
    assert sol.method == "dopri5" and np.array_equal(sol.y, oi.solve(oi.Problem(lotka_volterra, t, x0=LV_X0), LV_P,
                                                                      solver=oi.Dopri5(**opts)).y)


def test_pickled_auto_solver_keeps_its_method():
    b = oi.bind(oi.Problem(robertson, T, x0=X0), solver=oi.Auto(rtol=1e-8, atol=1e-12))
    fresh = pickle.loads(pickle.dumps(b))
    assert fresh.method_used == "dopri5" and not fresh.stiff
    y, _, _ = b(P, X0.copy())
    y = y.copy()
    c = pickle.loads(pickle.dumps(b))
    assert c.stiff and c.method_used == "rodas" and c.switch_reason == b.switch_reason
    y_c, _, st = c(P, X0.copy())
    assert st == 0 and np.array_equal(y_c, y)


def test_auto_value_and_defaults():
    a = oi.Auto(rtol=1e-9, atol=1e-11, max_steps=2000)
    assert a.explicit() == oi.Dopri5(rtol=1e-9, atol=1e-11, max_steps=2000)
    assert a.stiff() == oi.Rodas(rtol=1e-9, atol=1e-11, max_steps=2000)
    assert a.as_dict() == {"method": "auto", "rtol": 1e-9, "atol": 1e-11, "max_steps": 2000, "first_step": None}
    assert oi.solve.Auto is oi.Auto and not a.delays and hash(a) == hash(oi.Auto(rtol=1e-9, atol=1e-11, max_steps=2000))
    assert DEFAULT_SOLVERS["fit"] == oi.Auto(rtol=1e-8, atol=1e-10)
    assert DEFAULT_SOLVERS["solve"] == oi.Dopri5()
    # delay models keep the method of steps around Dopri5 with the fit tolerances
    assert default_solver("fit", delays=True) == oi.MethodOfSteps(oi.Dopri5(rtol=1e-8, atol=1e-10))
    assert isinstance(oi.bind(oi.Problem(lotka_volterra, [0.0, 1.0], x0=LV_X0), role="fit"), AutoSolver)


@pytest.mark.parametrize("make, match", [
    (lambda: as_solver(oi.Auto(rtol=1e-7), delays=True),
     r"solver: the model has delays, so it needs a method of steps, got Auto\(rtol=1e-07, .*\); pass "
     r"solver=oi\.MethodOfSteps\(Dopri5\(rtol=1e-07, atol=1e-08, max_steps=100000, first_step=None, "
     r"fixed_step=None\)\) \(no stiff delay solver is available\)"),
    (lambda: oi.solve(oi.Problem(lagged, [0.0, 1.0], history=1.0), [1.0, 0.5], solver=oi.Auto()),
     r"solver: the model has delays, so it needs a method of steps, got Auto\("),
    (lambda: oi.MethodOfSteps(oi.Auto()), r"MethodOfSteps\(inner=\.\.\.\): expected a Dopri5\(\.\.\.\) value, got Auto "
                                          r"\(a stiff delay solver is not available"),
    (lambda: oi.bind(oi.Problem(lotka_volterra, [0.0, 1.0]), solver=oi.Auto(), gradient=oi.Adjoint()),
     r"gradient: oi\.Adjoint\(\) needs an adaptive solver of one method, .*got Auto\(.*\); pass "
     r"solver=oi\.Dopri5\(\.\.\.\) or solver=oi\.Rodas\(\.\.\.\), or gradient=oi\.Forward\(\)"),
    (lambda: as_solver(oi.Auto(), delays=False, role="sample"),
     r"solver: the Bayesian likelihood runs one compiled solver kernel, so it cannot switch methods as Auto\(.*\) "
     r"does; pass solver=oi\.Dopri5\(.*\) or, for a stiff model, solver=oi\.Rodas\(.*\)$"),
    (lambda: oi.solve(oi.Problem(lotka_volterra, [0.0, 1.0], x0=LV_X0), LV_P, solver="auto"),
     r"solver: expected a solver value such as oi\.Auto\(\), got the string 'auto'; pass solver=oi\.Auto\(\)"),
    (lambda: oi.Auto(rtol=2.0), r"Auto\(rtol=\.\.\.\): expected a number in \(0, 1\), got 2\.0"),
    (lambda: oi.Auto(max_steps=0), r"Auto\(max_steps=\.\.\.\): expected a positive integer, got 0"),
])
def test_bad_input(make, match):
    with pytest.raises(InputError, match=match):
        make()


# --- the trajectory estimators: the default switches, Dopri5 says why it failed ----------------------------------


@oi.model(states=["a", "b"], params=["k1", "k2"])
def fast_slow(t, y, p):
    """a -> b -> 0 with k1 >> k2: stiff once a has decayed (the step is limited by 3.3 / k1)."""
    return {"a": -p.k1 * y.a, "b": p.k1 * y.a - p.k2 * y.b}


K1, K2 = 1e4, 0.3


def fast_slow_b(t, k2, k1=K1):
    c = k1 / (k1 - k2)  # a(0) = b(0) = 1
    return np.exp(-k2 * t) * (1.0 + c) - c * np.exp(-k1 * t)


@pytest.fixture(scope="module")
def stiff_data():
    t = np.linspace(0.5, 20.0, 25)
    y = fast_slow_b(t, K2) + np.random.default_rng(0).normal(0.0, 0.01, t.size)
    return fast_slow.with_observation(observed=["b"]), oi.Data(t, y, "b", t0=0.0, name="a")


def _fit(solver, model, data, **kw):
    cfg = {} if solver is None else {"solver": solver}
    return oi.Embedding(estimate_x0=False, **cfg, **kw).fit(model, data, start={"k2": 0.5}, fixed={"k1": K1},
                                                            x0={"a": 1.0, "b": 1.0})


def test_embedding_with_dopri5_says_the_problem_is_stiff(stiff_data):
    est = _fit(oi.Dopri5(), *stiff_data)
    assert est.status == "failed"
    assert est.message.startswith("the residual could not be computed at the start: experiment 'a': the problem "
                                  "became stiff at t=")
    assert est.message.endswith("use solver=oi.Rodas() (or solver=oi.Auto(), which switches to it when "
                                "Dormand-Prince finds the problem stiff)")
    ms = _fit(oi.Dopri5(), *stiff_data, segments=2)
    assert ms.status == "failed" and "experiment 'a', segment 1 of 2: the problem became stiff at t=" in ms.message


def test_embedding_default_solver_fits_the_stiff_model(stiff_data):
    model, data = stiff_data
    est = _fit(None, model, data)
    ref = least_squares(lambda k: fast_slow_b(data.t, k[0]) - data.y[:, 0], [0.5], xtol=1e-14, ftol=1e-14,
                        gtol=1e-14).x[0]
    assert est.converged and est.provenance["solver"]["method"] == "auto"
    assert est.provenance["solver"]["methods_used"] == ["rodas"]  # the experiment's solver switched
    assert est.params["k2"] == pytest.approx(ref, rel=1e-6)


def test_lm_start_failure_without_a_reason_keeps_the_old_message():
    from odeinfer.estimators._lm import levenberg_marquardt

    res = levenberg_marquardt(lambda u: None, np.zeros(1), -np.ones(1), np.ones(1))
    assert res.status == "failed" and res.message == "the residual could not be computed at the start (solver failure)"
    res = levenberg_marquardt(lambda u: None, np.zeros(1), -np.ones(1), np.ones(1), why=lambda: "because")
    assert res.message == "the residual could not be computed at the start: because"


# --- one local fit, one switch: a fit's path does not depend on the fits run before it -------------------------
# Each local fit (a start of a multistart, a profile re-optimisation, the final phase of a fit) runs in its own
# auto_scope(): every oi.Auto solver starts it on Dormand-Prince and, once it switched, stays on Rodas until the
# scope ends. Reference: the same fit run alone, from fresh solvers (bitwise).

K1_SOFT = 1.0  # fast_slow with k1 = 1: not stiff, so a start near it stays on Dormand-Prince when run alone
T_SOFT = np.linspace(0.5, 20.0, 25)
Y_SOFT = fast_slow_b(T_SOFT, K2, K1_SOFT) + np.random.default_rng(0).normal(0.0, 0.01, T_SOFT.size)
U_STIFF, U_SOFT = np.log10([1e4, 0.5]), np.log10([2.0, 0.5])  # (k1, k2) on the log10 scale


def soft_problem():
    m = fast_slow.observe({"bo": "b"}, noise=oi.Normal(0.01))
    params = {"k1": oi.Param(1.0, 1e-2, 1e5, "log10"), "k2": oi.Param(0.3, 1e-3, 10, "log10")}
    return oi.FitProblem(m, oi.Data(T_SOFT, Y_SOFT, "bo", t0=0.0), params, x0={"a": 1.0, "b": 1.0})


def _segment_solvers(obj):
    return [s.solver for r in obj.runs for s in r.segments]


def test_auto_scope_gives_each_scope_its_own_switch():
    from odeinfer.solve import auto_scope

    t = np.linspace(0.0, 20.0, 5)
    b = oi.bind(oi.Problem(fast_slow, t), solver=oi.Auto())
    ref = oi.bind(oi.Problem(fast_slow, t), solver=oi.Dopri5())
    x0, stiff, soft = np.ones(2), np.array([K1, K2]), np.array([K1_SOFT, K2])
    y_ref = ref(soft, x0.copy())[0].copy()
    with auto_scope():
        assert b(stiff, x0.copy())[2] == 0 and b.stiff and b.method_used == "rodas"
        assert b(soft, x0.copy())[2] == 0 and b.method_used == "rodas"  # within the scope: Rodas for good
    with auto_scope():  # a new scope starts on Dormand-Prince: Dopri5's result, bit for bit
        y, _, st = b(soft, x0.copy())
        assert st == 0 and not b.stiff and b.method_used == "dopri5" and b.switch_reason is None
        assert np.array_equal(y, y_ref)
        b(stiff, x0.copy())
        assert b.stiff
    # outside any scope a switch made inside one is forgotten too; one made outside lasts (the documented default)
    assert np.array_equal(b(soft, x0.copy())[0], y_ref) and not b.stiff
    b(stiff, x0.copy())
    with auto_scope():
        pass  # an inner scope that does not call the solver leaves the outer switch alone
    assert b(soft, x0.copy())[2] == 0 and b.stiff and b.method_used == "rodas"
    b.reset()
    assert not b.stiff and b.method_used == "dopri5" and b.switch_reason is None
    assert np.array_equal(b(soft, x0.copy())[0], y_ref)


def test_likelihood_start_after_a_switching_start_is_the_start_alone():
    from odeinfer.estimators._likelihood_fit import _one, likelihood_solver, make_objective

    solver = likelihood_solver(oi.Embedding())
    keys = ("u", "nll", "status", "n_iter", "n_eval")
    alone = make_objective(soft_problem(), solver)
    ref = _one(alone, 0, U_SOFT, 200)
    assert ref["status"] == "converged" and {s.method_used for s in _segment_solvers(alone)} == {"dopri5"}
    obj = make_objective(soft_problem(), solver)
    first = _one(obj, 0, U_STIFF, 200)
    assert first["status"] != "failed" and all(s.stiff for s in _segment_solvers(obj))  # start A switched
    after = _one(obj, 1, U_SOFT, 200)
    for k in keys:
        assert np.array_equal(after[k], ref[k]), k


def test_likelihood_multistart_does_not_depend_on_the_other_starts_or_processes():
    prob = soft_problem()
    single = oi.Embedding().fit(prob, start=10.0 ** U_SOFT)
    both = oi.Embedding(starts=2).fit(prob, start=10.0 ** np.array([U_STIFF, U_SOFT]))
    assert both.extras["starts"]["start"] == [0, 1]
    row = {k: v[1] for k, v in both.extras["starts"].items()}
    assert row["nll"] == single.extras["starts"]["nll"][0] and row["n_iter"] == single.extras["starts"]["n_iter"][0]
    assert [row[n] for n in single.names] == [single.extras["starts"][n][0] for n in single.names]
    if row["nll"] <= both.extras["starts"]["nll"][0]:  # the soft start is the best: the estimate (continued from it,
        # _likelihood_fit.polish) is the single start's, bit for bit
        assert both.values.tolist() == single.values.tolist() and both.nll == single.nll
        assert np.array_equal(both.cov, single.cov)
    two = oi.Embedding(starts=2, n_jobs=2).fit(prob, start=10.0 ** np.array([U_STIFF, U_SOFT]))
    for k in ("nll", "n_iter", "status", *both.names):
        assert two.extras["starts"][k] == both.extras["starts"][k], k
    assert two.values.tolist() == both.values.tolist() and two.nll == both.nll and np.array_equal(two.cov, both.cov)


def test_profile_does_not_depend_on_earlier_solves_of_the_objective():
    fresh = oi.Embedding().fit(soft_problem(), start=10.0 ** U_SOFT)
    used = oi.Embedding().fit(soft_problem(), start=10.0 ** U_SOFT)
    used._objective(U_STIFF)  # switches every solver of the estimate's objective
    assert all(s.stiff for s in _segment_solvers(used._objective))
    a, b = fresh.conf_int(method="profile"), used.conf_int(method="profile")
    assert np.array_equal(a.to_numpy(), b.to_numpy())


def test_trajectory_start_after_a_switching_start_is_the_start_alone():
    from odeinfer.estimators._embedding_setup import build_setup
    from odeinfer.estimators._phases import _start_chunk_local

    model, data = fast_slow.with_observation(observed=["b"]), oi.Data(T_SOFT, Y_SOFT, "b", t0=0.0, name="a")
    est = oi.Embedding(estimate_x0=False, log_params=True, bounds={"k1": (1e-2, 1e5), "k2": (1e-3, 10.0)})
    args = (model, data, {"k1": 2.0, "k2": 0.5}, None, {"a": 1.0, "b": 1.0})
    u_stiff, u_soft = np.log([1e4, 0.5]), np.log([2.0, 0.5])
    S = build_setup(est, *args)
    ref = _start_chunk_local(est, S, 0, u_soft)[0]
    assert ref["status"] != "failed" and {g.solver.method_used for g in S.sp.segs} == {"dopri5"}
    S = build_setup(est, *args)
    first = _start_chunk_local(est, S, 0, u_stiff)[0]
    assert first["status"] != "failed" and all(g.solver.stiff for g in S.sp.segs)
    after = _start_chunk_local(est, S, 1, u_soft)[0]
    for k in ("u", "cost", "status", "n_iter"):
        assert np.array_equal(after[k], ref[k]), k
