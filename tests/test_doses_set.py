"""Doses that set a state (``oi.Dose(time, state, value, mode="set")``): a reset at a fixed time.

Reference: production-degradation ``x' = k - d x`` has the closed form
``x(t) = k/d + (x_s - k/d) exp(-d (t - t_s))`` from the last reset ``(t_s, x_s)`` (``x_s`` the
initial value before any reset); the NLL of Gaussian noise is written out from it by hand and its
gradient is the central difference of that closed-form NLL (step 1e-6, independent of the
objective's sensitivities). Tolerances (fixed beforehand): the solver runs at rtol 1e-11, so the
NLL and observables agree to rtol 1e-8 and the gradient to rtol 1e-6 (central differences of a
closed form: error ~1e-10 relative).
"""

import json
import math

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import DataError, ResultFileError

SD = 0.1
T = np.array([0.5, 1.0, 2.0, 3.0, 4.5, 5.0, 6.0, 8.0])  # 2 and 5 are reset times: the value before
Y = np.array([1.7, 1.55, 1.4, 0.9, 1.2, 1.25, 2.3, 2.0])
X0 = 2.0


@oi.model(states=["x"], params=["k", "d"])
def prod_deg(t, y, p):
    return {"x": p.k - p.d * y.x}


def closed_x(t, k, d, resets, x0=X0):
    """The closed form from ``x0`` at 0 with the resets ``[(t_s, x_s)]`` (sorted; a measurement at t_s
    sees the state before the reset)."""
    ts, xs = 0.0, x0
    out = np.empty(len(t))
    for j, tj in enumerate(t):
        for tr, xr in resets:
            if ts < tr < tj:
                ts, xs = tr, xr
        out[j] = k / d + (xs - k / d) * math.exp(-d * (tj - ts))
    return out


def closed_nll(k, d, c, y=Y):
    h = closed_x(T, k, d, [(2.0, 0.5), (5.0, c * k / d)])
    return float(np.sum(0.5 * math.log(2 * math.pi * SD**2) + 0.5 * ((y - h) / SD) ** 2))


def reset_problem():
    """Resets to a number (x = 0.5 at t = 2) and to an expression of parameters (x = c k / d at t = 5)."""
    m = prod_deg.observe({"o": "x"}, noise=oi.Normal(SD))
    doses = [oi.Dose(2.0, "x", 0.5, mode="set"), oi.Dose(5.0, "x", "c * k / d", mode="set")]
    exps = oi.Experiments([oi.Data(T, Y, "o", name="e")], conditions={"e": oi.Condition(doses=doses)})
    params = {"k": oi.Param(0.8, 1e-3, 1e3, "log10"), "d": oi.Param(0.5, 1e-3, 1e3, "log"), "c": oi.Param(1.5, 0, 5)}
    return oi.FitProblem(m, exps, params, x0={"x": X0})


U = np.array([math.log10(0.8), math.log(0.5), 1.5])


def natural(u):
    return 10 ** u[0], math.exp(u[1]), u[2]


def tight(prob):
    return oi.Objective(prob, solver=oi.Dopri5(rtol=1e-11, atol=1e-13))


def test_a_reset_matches_the_closed_form_with_its_gradient():
    prob = reset_problem()
    obj = tight(prob)
    _, _, h = obj.predictions(U)["e"]
    np.testing.assert_allclose(h, closed_x(T, *natural(U)[:2], [(2.0, 0.5), (5.0, 1.5 * 0.8 / 0.5)]), rtol=1e-8)
    ev = obj(U)
    assert ev.nll == pytest.approx(closed_nll(*natural(U)), rel=1e-8)
    eps = 1e-6
    fd = [(closed_nll(*natural(U + e)) - closed_nll(*natural(U - e))) / (2 * eps) for e in np.eye(3) * eps]
    np.testing.assert_allclose(ev.grad, fd, rtol=1e-6)
    # after the reset to a number, x no longer depends on x(2-): between 2 and 5 the gradient of x in c is 0,
    # after 5 it is k/d e^{-d (t-5)} (d x_s / dc of the reset's value)
    assert np.all(np.isfinite(ev.fim)) and np.allclose(ev.fim, ev.fim.T, atol=1e-12)


def test_doses_at_one_time_apply_in_the_order_given_and_a_reset_at_t0_replaces_x0():
    m = prod_deg.observe({"o": "x"}, noise=oi.Normal(SD))
    k, d = 0.8, 0.5
    cases = {"add_then_set": ([oi.Dose(2.0, "x", 1.0), oi.Dose(2.0, "x", 0.5, mode="set")], 0.5),
             "set_then_add": ([oi.Dose(2.0, "x", 0.5, mode="set"), oi.Dose(2.0, "x", 1.0)], 1.5)}
    for name, (doses, after) in cases.items():
        exps = oi.Experiments([oi.Data(T, Y, "o", name="e")], conditions={"e": oi.Condition(doses=doses)})
        prob = oi.FitProblem(m, exps, {"k": oi.Param(k), "d": oi.Param(d)}, x0={"x": X0})
        _, _, h = tight(prob).predictions(np.array([k, d]))["e"]
        np.testing.assert_allclose(h, closed_x(T, k, d, [(2.0, after)]), rtol=1e-8, err_msg=name)
    # a reset at t0 sets the initial state (here to the estimated c): x0 = 2 is replaced
    exps = oi.Experiments([oi.Data(T, Y, "o", name="e")],
                          conditions={"e": oi.Condition(doses=[oi.Dose(0.0, "x", "c", mode="set")])})
    prob = oi.FitProblem(m, exps, {"k": oi.Param(k, estimate=False), "d": oi.Param(d, estimate=False),
                                   "c": oi.Param(1.5, 0, 5)}, x0={"x": X0})
    obj = tight(prob)
    ev = obj(np.array([1.5]))
    h = closed_x(T, k, d, [], x0=1.5)
    assert ev.nll == pytest.approx(float(np.sum(0.5 * math.log(2 * math.pi * SD**2) + 0.5 * ((Y - h) / SD) ** 2)),
                                   rel=1e-8)
    # d NLL / dc = -sum r_j e^{-d t_j} / sd^2 (x = k/d + (c - k/d) e^{-d t})
    assert ev.grad[0] == pytest.approx(float(-np.sum((Y - h) * np.exp(-d * T)) / SD**2), rel=1e-8)


def test_multiple_shooting_and_simultaneous_reach_single_shootings_optimum_with_resets():
    """With resets inside the time span: multiple shooting (segments cut at measurement times, never at a reset)
    and Bock's simultaneous method (the reset node doubled) end at single shooting's optimum (NLL to 1e-6;
    the simultaneous fit at n_grid 401 to 1e-3, its discretisation error)."""
    prob = reset_problem()
    rng = np.random.default_rng(5)
    sim = closed_x(T, 0.9, 0.6, [(2.0, 0.5), (5.0, 1.2 * 0.9 / 0.6)]) + SD * rng.standard_normal(T.size)
    prob = prob.with_measurements([sim])
    single = oi.Embedding().fit(prob)
    multi = oi.Embedding(segments=3).fit(prob)
    simul = oi.Simultaneous(n_grid=401).fit(prob)
    assert single.converged and multi.converged and simul.converged, (single.message, multi.message, simul.message)
    assert multi.nll == pytest.approx(single.nll, abs=1e-6)
    assert simul.extras["nll_ode"] == pytest.approx(single.nll, abs=1e-3)
    # the reference: the closed-form NLL at single shooting's optimum
    assert single.nll == pytest.approx(closed_nll(*natural(single.extras["u"]), y=sim), rel=1e-6)


def test_simultaneous_constraints_of_resets_match_central_differences():
    """The jump constraint of a reset, ``x+ - value(u) = 0`` (no dependence on ``x-``), and a reset at t0,
    against central differences of the constraints (step 1e-6 relative; tolerances as the bolus test's)."""
    from odeinfer.estimators._simultaneous_likelihood import Constraints, LikelihoodCollocation

    m = prod_deg.observe({"o": "2 * x"}, noise=oi.Normal(SD))  # not the state itself: the start simulates
    doses = [oi.Dose(0.0, "x", "c", mode="set"), oi.Dose(2.0, "x", 1.0), oi.Dose(2.0, "x", 0.5, mode="set"),
             oi.Dose(5.0, "x", "c * k / d", mode="set")]
    exps = oi.Experiments([oi.Data(T, Y, "o", name="e")], conditions={"e": oi.Condition(doses=doses)})
    params = {"k": oi.Param(0.8, 1e-3, 1e3, "log10"), "d": oi.Param(0.5, 1e-3, 1e3, "log"), "c": oi.Param(1.5, 0, 5)}
    prob = oi.FitProblem(m, exps, params, x0={"x": X0})
    lc = LikelihoodCollocation(prob, oi.Simultaneous(n_grid=12))
    z = lc.start(U, None)
    ev = Constraints(lc, lc.kernel, 0)
    assert ev.constraints(z, False)
    X = lc.X(z, lc.exps[0])
    jumps = sorted(lc.exps[0].jumps)
    # the start simulates through the resets: the jump constraints hold there
    assert [(lc.exps[0].t[j], X[j + 1, 0]) for j in jumps] == [(2.0, 0.5), (5.0, pytest.approx(1.5 * 0.8 / 0.5))]
    assert X[0, 0] == 1.5
    rng = np.random.default_rng(4)
    z[:lc.theta_off] *= 1.0 + 0.05 * rng.standard_normal(lc.theta_off)
    z[lc.theta_off:] += 0.05 * rng.standard_normal(U.size)
    assert ev.constraints(z, True)
    J = np.zeros((lc.mc, lc.nz))
    np.add.at(J, (lc.crows, lc.ccols), ev.cdata)
    J_fd = np.empty((lc.mc, lc.nz))
    for i in range(lc.nz):
        e = np.zeros(lc.nz)
        e[i] = 1e-6 * max(1.0, abs(z[i]))
        ev.constraints(z + e, False)
        cp = ev.c.copy()
        ev.constraints(z - e, False)
        J_fd[:, i] = (cp - ev.c) / (2 * e[i])
    np.testing.assert_allclose(J, J_fd, rtol=1e-6, atol=1e-7)


def test_resets_survive_the_problem_json_round_trip():
    from odeinfer.results._problem_json import objective_from_dict, problem_to_dict

    prob = reset_problem()
    obj = tight(prob)
    stored = json.loads(json.dumps(problem_to_dict(obj)))
    assert stored["experiments"][0]["condition"]["doses"] == [[2.0, "x", 0.5, "set"], [5.0, "x", "c * k / d", "set"]]
    back = objective_from_dict(prob.model, stored, "test")
    assert back.problem.experiments.condition("e").doses == prob.experiments.condition("e").doses
    assert back(U).nll == pytest.approx(obj(U).nll, rel=1e-12)
    # a bolus is stored as before ([time, state, amount]) and read back as a bolus
    stored["experiments"][0]["condition"]["doses"][0] = [2.0, "x", 0.5]
    assert objective_from_dict(prob.model, stored, "test").problem.experiments.condition("e").doses[0].mode == "add"
    stored["experiments"][0]["condition"]["doses"][0] = [2.0, "x", 0.5, "toggle"]
    with pytest.raises(ResultFileError, match=r"cannot be rebuilt \(DataError: Dose.mode: expected one of "
                                              r"\['add', 'set'\], got 'toggle'"):
        objective_from_dict(prob.model, stored, "test")


@pytest.mark.parametrize("mode", ["reset", "", None, 1])
def test_an_unknown_dose_mode_is_refused(mode):
    with pytest.raises(DataError, match=r"Dose.mode: expected one of \['add', 'set'\], got .*\"set\" sets the "
                                        r"state to it"):
        oi.Dose(1.0, "x", 0.5, mode=mode)
