"""Measurements at the steady state (``t = inf``, PEtab's steady-state measurements): the likelihood
of a FitProblem whose data hold them, and the PEtab import of ``time = inf``.

References, all outside odeinfer: closed-form steady states (production and degradation
``x' = k1 - k2 x``: ``x_ss = k1 / k2``; a two-state cascade; an isomerisation ``A <-> B`` whose
steady state ``A_ss = total kb / (kf + kb)`` keeps the total the trajectory reached, doses and a
timed inflow included) and closed-form trajectories for the finite times; the NLL from
scipy.stats; gradients in closed form and against central finite differences; the Fisher
information in closed form (``sum_r Dh_r Dh_r^T / sigma^2`` for normal noise with a known sd).
Tolerances (fixed before the runs): ``rtol=1e-8`` on NLLs and closed-form gradients with the
tight Rodas below; ``rtol=1e-5`` against central differences.
"""

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import odeinfer as oi
from likelihood_reference import fd_grad
from odeinfer.errors import DataError, InputError, SolverError

RTOL = 1e-8


def tight():
    return oi.Rodas(rtol=1e-10, atol=1e-12)


@oi.model(states=["x"], params=["k1", "k2"])
def prod_deg(t, y, p):
    return {"x": p.k1 - p.k2 * y.x}


@oi.model(states=["x", "y"], params=["k1", "k2", "k3", "k4"])
def cascade(t, y, p):
    return {"x": p.k1 - p.k2 * y.x, "y": p.k3 * y.x - p.k4 * y.y}


@oi.model(states=["A", "B"], params=["kf", "kb"])
def iso(t, y, p):
    return {"A": -p.kf * y.A + p.kb * y.B, "B": p.kf * y.A - p.kb * y.B}


# -- production and degradation -----------------------------------------------------------------
T_FIN = np.array([0.5, 1.5])
Y_FIN = np.array([0.75, 1.5])
Y_SS = np.array([1.9, 2.15, 2.05])
SD = 0.1


def _prod_deg_problem(finite):
    m = prod_deg.observe({"xo": "x"}, noise=oi.Normal(sigma=SD))
    t = np.r_[T_FIN, [np.inf] * Y_SS.size] if finite else np.full(Y_SS.size, np.inf)
    y = np.r_[Y_FIN, Y_SS] if finite else Y_SS
    d = oi.Data(t, y, "xo", t0=0.0, replicates=True, steady_state=True, name="e")
    params = {"k1": oi.Param(2.0, 1e-3, 1e3, scale="log"), "k2": oi.Param(1.0, 0.01, 10.0)}
    return oi.FitProblem(m, d, params, x0={"x": 0.0})


@pytest.mark.parametrize("finite", [False, True], ids=["inf-only", "mixed"])
def test_production_degradation_matches_the_closed_form(finite):
    prob = _prod_deg_problem(finite)
    obj = oi.Objective(prob, solver=tight())
    k1, k2 = 2.0, 1.0
    assert prob.estimated == ("k1", "k2")
    u = np.array([math.log(k1), k2])
    ev = obj(u)
    assert ev.ok, ev.failure
    # x(t) = k1/k2 (1 - e^{-k2 t}) from x0 = 0; x_ss = k1/k2. Derivatives on the estimation scale
    # (log k1, k2): dh/dlog k1 = k1 dh/dk1
    t = T_FIN if finite else np.empty(0)
    e = np.exp(-k2 * t)
    h = np.r_[k1 / k2 * (1 - e), np.full(Y_SS.size, k1 / k2)]
    dh = np.column_stack([np.r_[k1 / k2 * (1 - e), np.full(Y_SS.size, k1 / k2)],
                          np.r_[-k1 / k2**2 * (1 - e) + k1 / k2 * t * e, np.full(Y_SS.size, -k1 / k2**2)]])
    y = np.r_[Y_FIN, Y_SS] if finite else Y_SS
    assert ev.nll == pytest.approx(-np.sum(stats.norm.logpdf(y, h, SD)), rel=RTOL)
    np.testing.assert_allclose(ev.grad, dh.T @ ((h - y) / SD**2), rtol=RTOL)
    np.testing.assert_allclose(ev.fim, dh.T @ dh / SD**2, rtol=RTOL)
    np.testing.assert_allclose(ev.grad, fd_grad(obj, u), rtol=1e-5)
    adj = oi.Objective(prob, solver=tight(), gradient=oi.Adjoint())(u)  # back through the steady state
    assert adj.ok and adj.fim is None and adj.nll == pytest.approx(ev.nll, rel=RTOL)
    np.testing.assert_allclose(adj.grad, dh.T @ ((h - y) / SD**2), rtol=RTOL)
    t_rows, _, pred = obj.predictions(u)["e"]
    np.testing.assert_allclose(pred[np.isinf(t_rows)], k1 / k2, rtol=RTOL)


def test_observable_of_two_states_with_an_estimated_noise_parameter():
    # x_ss = k1/k2, y_ss = k3 k1 / (k2 k4); observed: x + y, log-normal with an estimated sd; and x
    # alone at finite times (x(t) = k1/k2 + (x0 - k1/k2) e^{-k2 t})
    m = cascade.observe({"tot": "x + y", "xo": "x"},
                        noise={"tot": oi.Normal(sigma="sd", scale="log"), "xo": oi.Normal(sigma=SD)}, params=["sd"])
    t = np.array([0.4, 1.0, np.inf, np.inf])
    y = np.array([[np.nan, 0.9], [np.nan, 1.3], [4.6, np.nan], [5.3, 2.1]])
    d = oi.Data(t, y, ["tot", "xo"], t0=0.0, replicates=True, steady_state=True, name="e")
    vals = dict(k1=2.0, k2=1.0, k3=1.5, k4=0.5, sd=0.2)
    prob = oi.FitProblem(m, d, {k: oi.Param(v, 1e-3, 1e3) for k, v in vals.items()}, x0={"x": 0.5, "y": 0.0})
    obj = oi.Objective(prob, solver=tight())
    u = np.array([vals[n] for n in prob.estimated])
    ev = obj(u)
    assert ev.ok, ev.failure
    xs = 2.0 / 1.0
    tot = xs + 1.5 * 2.0 / (1.0 * 0.5)
    x_fin = xs + (0.5 - xs) * np.exp(-1.0 * np.array([0.4, 1.0]))
    ref = -np.sum(stats.norm.logpdf(np.log([4.6, 5.3]), np.log(tot), 0.2)) + np.sum(np.log([4.6, 5.3]))
    ref -= np.sum(stats.norm.logpdf([0.9, 1.3, 2.1], np.r_[x_fin, xs], SD))
    assert ev.nll == pytest.approx(ref, rel=RTOL)
    np.testing.assert_allclose(ev.grad, fd_grad(obj, u), rtol=1e-5, atol=1e-7)
    adj = oi.Objective(prob, solver=tight(), gradient=oi.Adjoint())(u)
    np.testing.assert_allclose(adj.grad, fd_grad(obj, u), rtol=1e-5, atol=1e-7)


# -- the steady state is reached from the end of the trajectory -----------------------------------
def test_the_steady_state_keeps_what_the_trajectory_reached():
    # A <-> B conserves A + B: the steady state depends on where the run to it starts. A dose of amt
    # into A at t = 1 raises the total from tot to tot + amt, so A_ss = (tot + amt) kb / (kf + kb),
    # with or without a finite measurement after the dose
    m = iso.observe({"Ao": "A"}, noise=oi.Normal(sigma=SD))
    kf, kb, tot, amt = 2.0, 1.0, 3.0, 1.5
    cond = oi.Condition(doses=[oi.Dose(1.0, "A", "amt")])
    params = {"kf": oi.Param(kf, 0.01, 100.0), "kb": oi.Param(kb, 0.01, 100.0), "tot": oi.Param(tot, 0.0, 10.0),
              "amt": oi.Param(amt, 0.0, 10.0)}
    a_ss = (tot + amt) * kb / (kf + kb)
    for t, y in (([np.inf], [2.1]), ([2.0, np.inf], [2.4, 2.1])):
        d = oi.Data(t, y, "Ao", t0=0.0, steady_state=True, name="e")
        prob = oi.FitProblem(m, oi.Experiments([d], conditions={"e": cond}), params, x0={"A": "tot", "B": 0.0})
        obj = oi.Objective(prob, solver=tight())
        u = np.array([{"kf": kf, "kb": kb, "tot": tot, "amt": amt}[n] for n in prob.estimated])
        ev = obj(u)
        assert ev.ok, ev.failure
        h = [a_ss]
        if len(t) == 2:  # A(t) = a_ss + (A(1+) - a_ss) e^{-(kf + kb)(t - 1)}, A(1+) = A(1) + amt
            a_inf0 = tot * kb / (kf + kb)
            a1 = a_inf0 + (tot - a_inf0) * math.exp(-(kf + kb)) + amt
            h = [a_ss + (a1 - a_ss) * math.exp(-(kf + kb) * 1.0), a_ss]
        assert ev.nll == pytest.approx(-np.sum(stats.norm.logpdf(y, h, SD)), rel=RTOL)
        np.testing.assert_allclose(ev.grad, fd_grad(obj, u), rtol=1e-5, atol=1e-7)
        assert obj.steady.route == "newton"  # on [J_x; C], C = (1, 1) / sqrt(2)
        adj = oi.Objective(prob, solver=tight(), gradient=oi.Adjoint())  # C^T mu carries the total back
        ev_adj = adj(u)
        assert ev_adj.ok and adj.steady.route == "newton", ev_adj.failure
        assert ev_adj.nll == pytest.approx(ev.nll, rel=RTOL)
        np.testing.assert_allclose(ev_adj.grad, ev.grad, rtol=1e-7, atol=1e-10)


def test_the_run_to_steady_state_starts_at_the_end_of_the_trajectory_in_time_too():
    # an inflow u into A until t = T (a fixed switch time) raises the total by u T; measured at t = 5 > T
    # and at steady state: A_ss = (tot + u T) kb / (kf + kb). A run to steady state restarted at t = 0
    # would add the inflow twice
    @oi.model(states=["A", "B"], params=["kf", "kb", "u", "T_off"])
    def fed(t, y, p):
        return {"A": -p.kf * y.A + p.kb * y.B + oi.math.where(t <= p.T_off, p.u, 0.0), "B": p.kf * y.A - p.kb * y.B}

    m = fed.observe({"tot": "A + B", "Ao": "A"}, noise=oi.Normal(sigma=SD))
    d = oi.Data([5.0, np.inf], [[3.9, np.nan], [np.nan, 1.2]], ["tot", "Ao"], t0=0.0, steady_state=True, name="e")
    params = {"kf": oi.Param(2.0, 0.01, 100.0), "kb": oi.Param(1.0, 0.01, 100.0), "u": oi.Param(0.5, 0.0, 10.0),
              "T_off": 2.0}
    prob = oi.FitProblem(m, d, params, x0={"A": 3.0, "B": 0.0})
    obj = oi.Objective(prob, solver=tight())
    assert prob.estimated == ("kf", "kb", "u")
    u = np.array([2.0, 1.0, 0.5])
    ev = obj(u)
    assert ev.ok, ev.failure
    total = 3.0 + 0.5 * 2.0
    ref = -stats.norm.logpdf(3.9, total, SD) - stats.norm.logpdf(1.2, total * 1.0 / 3.0, SD)
    assert ev.nll == pytest.approx(ref, rel=RTOL)
    np.testing.assert_allclose(ev.grad, fd_grad(obj, u), rtol=1e-5, atol=1e-7)


def test_after_a_pre_equilibration_the_simulation_condition_sets_the_steady_state():
    # pre-equilibrated with k1 = a_pre (x = a_pre / k2), then k1 = a: x(t) = a/k2 + (a_pre - a)/k2 e^{-k2 t}
    # and the steady state a / k2
    m = prod_deg.observe({"xo": "x"}, noise=oi.Normal(sigma=SD))
    cond = oi.Condition(params={"k1": "a"}, preequilibrate=oi.Condition(params={"k1": "a_pre"}))
    d = oi.Data([1.0, np.inf], [2.6, 1.1], "xo", t0=0.0, steady_state=True, name="e")
    params = {"k2": oi.Param(2.0, 0.01, 10.0), "a": oi.Param(2.0, 0.0, 10.0), "a_pre": oi.Param(6.0, 0.0, 10.0)}
    prob = oi.FitProblem(m, oi.Experiments([d], conditions={"e": cond}), params, x0={"x": 0.0})
    obj = oi.Objective(prob, solver=tight())
    u = np.array([{"k2": 2.0, "a": 2.0, "a_pre": 6.0}[n] for n in prob.estimated])
    ev = obj(u)
    assert ev.ok, ev.failure
    h = [1.0 + 2.0 * math.exp(-2.0), 1.0]
    assert ev.nll == pytest.approx(-np.sum(stats.norm.logpdf([2.6, 1.1], h, SD)), rel=RTOL)
    np.testing.assert_allclose(ev.grad, fd_grad(obj, u), rtol=1e-5, atol=1e-7)


def test_a_steady_state_that_is_not_reached_fails_the_evaluation_with_why():
    @oi.model(states=["x", "y"], params=["w"])
    def osc(t, y, p):
        return {"x": p.w * y.y, "y": -p.w * y.x}

    m = osc.observe({"xo": "x"}, noise=oi.Normal(sigma=SD))
    d = oi.Data([1.0, np.inf], [0.5, 1.0], "xo", t0=0.0, steady_state=True, name="e")
    prob = oi.FitProblem(m, d, {"w": oi.Param(1.0)}, x0={"x": 1.0, "y": 0.0})
    obj = oi.Objective(prob)
    ev = obj(np.array([1.0]))
    assert not ev.ok
    assert ev.failure.startswith("experiment 'e': the run to steady state (measurements at t = inf) did not reach a "
                                 "steady state"), ev.failure
    assert "the solver stopped at t=" in ev.failure and "times the tolerance" in ev.failure, ev.failure
    with pytest.raises(SolverError, match=r"the run to steady state \(measurements at t = inf\) did not reach"):
        obj.predictions(np.array([1.0]))
    # a run that ends its stages without a steady state (here: cut to the first stage, t in [1, 2], where
    # x' = 2 - x from x(1) = 2 (1 - e^-1) is still far from x_ss = 2) says how far it got
    prob = _prod_deg_problem(True)
    obj = oi.Objective(prob, solver=tight())
    stages, plain = obj.steady._solvers, obj.steady._plain_solvers
    obj.steady._solvers = lambda held, t0=0.0, k=1: stages(held, t0, k)[:1]
    obj.steady._plain_solvers = lambda t0: plain(t0)[:1]  # the Newton route's run of the states alone
    ev = obj(np.array([math.log(2.0), 1.0]))
    assert ev.failure.startswith("experiment 'e': the run to steady state (measurements at t = inf) did not reach a "
                                 "steady state by t="), ev.failure
    assert ev.failure.endswith("may oscillate or grow under this condition: check its parameters"), ev.failure
    # the same from a run of the states alone (the value, the adjoint)
    u = np.array([math.log(2.0), 1.0])
    adj = oi.Objective(prob, solver=tight(), gradient=oi.Adjoint())
    adj.steady._plain_solvers = lambda t0: plain(t0)[:1]
    assert adj.value(u).ok  # the Newton route cut short: the recorded run reaches it
    adj.steady._vjps[0.0] = adj.steady._vjps[0.0][:1]
    adj.steady._recent.clear()
    for ev in (adj.value(u), adj(u)):
        assert ev.failure.startswith("experiment 'e': the run to steady state (measurements at t = inf) did not "
                                     "reach a steady state by t="), ev.failure


def test_a_slow_mode_the_states_barely_show_is_waited_for_or_refused(monkeypatch):
    """``y' = -eps y`` from y0 = 1e-3, measured at t = inf: y_ss = 0 and d y_ss / d eps = 0 (the closed form's
    t -> inf limit of d y(T) / d eps = -T y0 exp(-eps T)). With eps = 1e-7, |dy/dt| = 1e-10 passes the states' test
    at once (atol 1e-10), but the sensitivity still changes (d/dT = -y0 (1 - eps T) exp(-eps T), about -1e-3). The
    states-only run's probe (directional sensitivities along random directions) waits for it as the full forward
    sensitivities do: the adjoint's gradient is the forward one's, and both the limit's. With the probe blinded (zero
    directions), the adjoint's own check refuses the gradient and names the fix. With eps = 1e-8 the sensitivity
    is -45 at T = 1e9 and reaches its limit only long after the stages' end at 1e10; its rate there passed the test
    relative to it, and the sensitivity's change over the last stage refuses it now. By default J_x = -eps is not
    singular: Newton's method goes on to the limit itself; the integration route is tested with it switched off."""
    import odeinfer.likelihood.steady as steady

    @oi.model(states=["y"], params=["eps"])
    def slow(t, y, p):
        return {"y": -p.eps * y.y}

    m = slow.observe({"yo": "y"}, noise=oi.Normal(sigma=SD))
    d = oi.Data([np.inf], [0.05], "yo", t0=0.0, steady_state=True, name="e")
    prob = oi.FitProblem(m, d, {"eps": oi.Param(1e-8, 1e-10, 1.0, "log10")}, x0={"y": 1e-3})
    nll0 = -stats.norm.logpdf(0.05, 0.0, SD)
    for u in ([-8.0], [-7.0]):
        for gradient in (oi.Forward(), oi.Adjoint()):
            obj = oi.Objective(prob, solver=tight(), gradient=gradient)
            ev = obj(np.array(u))
            assert ev.ok and obj.steady.route == "newton", ev.failure
            assert ev.nll == pytest.approx(nll0, rel=1e-14)
            assert abs(ev.grad[0]) < 1e-12
    monkeypatch.setattr(steady, "_COND_MAX", 0.0)
    u = np.array([-7.0])
    fwd = oi.Objective(prob, solver=tight())(u)
    adj = oi.Objective(prob, solver=tight(), gradient=oi.Adjoint())(u)
    assert fwd.ok and adj.ok, (fwd.failure, adj.failure)
    for ev in (fwd, adj):
        assert ev.nll == pytest.approx(nll0, rel=1e-14)
        assert abs(ev.grad[0]) < 1e-12
    for gradient in (oi.Forward(), oi.Adjoint()):
        ev = oi.Objective(prob, solver=tight(), gradient=gradient)(np.array([-8.0]))
        assert not ev.ok
        assert "did not reach a steady state by t=1e+10: its states or their sensitivities still move" in ev.failure
    monkeypatch.setattr(steady, "probe_directions", lambda n: np.zeros((n, steady._PROBES)))
    ev = oi.Objective(prob, solver=tight(), gradient=oi.Adjoint())(u)
    assert not ev.ok
    assert "the gradient through it still changes there" in ev.failure, ev.failure
    assert ev.failure.endswith("use gradient=oi.Forward(), whose steady state waits for the sensitivities too")


def test_the_steady_state_by_newton_and_the_implicit_function_theorem_matches_the_closed_form(monkeypatch):
    """The cascade's J_x is not singular: Newton's route gives x_ss = k1/k2, y_ss = k3 k1 / (k2 k4), their derivatives
    in closed form, and d x_ss / d x0 = 0 exactly (the integration route's is exp(-k T), small but not zero). The
    isomerisation conserves A + B (J_x singular): its steady state A_ss = (A0 + B0) kb / (kf + kb) moves with the
    start, in closed form by both routes (the integration route switched on by a zero condition limit)."""
    import odeinfer.likelihood.steady as steady

    k1, k2, k3, k4 = 2.0, 0.5, 3.0, 0.25
    ss = steady.SteadyState(cascade)
    xs, dxs = ss(np.array([k1, k2, k3, k4]), np.array([0.3, 0.1]), np.eye(4), np.zeros((2, 4)))
    assert ss.route == "newton"
    np.testing.assert_allclose(xs, [k1 / k2, k3 * k1 / (k2 * k4)], rtol=1e-12)
    closed = np.array([[1 / k2, -k1 / k2**2, 0.0, 0.0],
                       [k3 / (k2 * k4), -k3 * k1 / (k2**2 * k4), k1 / (k2 * k4), -k3 * k1 / (k2 * k4**2)]])
    np.testing.assert_allclose(dxs, closed, rtol=1e-12, atol=1e-13)  # atol: rounding of the zero entries
    _, dx0 = ss(np.array([k1, k2, k3, k4]), np.array([0.3, 0.1]), np.zeros((4, 2)), np.eye(2))
    assert np.all(dx0 == 0.0)
    kf, kb, tot = 2.0, 0.5, 1.5
    p, x0 = np.array([kf, kb]), np.array([1.0, 0.5])
    dA = np.array([-tot * kb / (kf + kb) ** 2, tot * kf / (kf + kb) ** 2])  # d A_ss / d(kf, kb); B_ss = tot - A_ss
    for route, rtol in (("newton", 1e-12), ("integration", 1e-6)):
        if route == "integration":
            monkeypatch.setattr(steady, "_COND_MAX", 0.0)
        ss = steady.SteadyState(iso)
        xs, d = ss(p, x0, np.hstack([np.eye(2), np.zeros((2, 2))]), np.hstack([np.zeros((2, 2)), np.eye(2)]))
        assert ss.route == route
        np.testing.assert_allclose(xs, [tot * kb / (kf + kb), tot * kf / (kf + kb)], rtol=rtol)
        np.testing.assert_allclose(d[:, :2], [dA, -dA], rtol=rtol)
        np.testing.assert_allclose(d[:, 2:], [[kb / (kf + kb)] * 2, [kf / (kf + kb)] * 2], rtol=rtol)


@oi.model(states=["A", "B"], params=["k1", "k2", "V1", "V2"])
def two_compartments(t, y, p):  # transport between compartments of volumes V1, V2 (concentrations, as SBML writes it)
    flux = p.k1 * p.V1 * y.A - p.k2 * p.V2 * y.B
    return {"A": -flux / p.V1, "B": flux / p.V2}


@oi.model(states=["x", "z"], params=["a", "b", "q"])
def follower(t, y, p):
    return {"x": p.a - p.b * y.x, "z": p.q * (y.x - y.z)}


def test_a_conservation_law_weighted_by_estimated_volumes_moves_with_them():
    """V1 A + V2 B is conserved: A_ss = T k2 / (V1 (k1 + k2)), B_ss = T k1 / (V2 (k1 + k2)) with T = V1 A0 + V2 B0; the
    Newton route's sensitivities to the rates, the volumes (through the law's weights) and the start against those of
    the closed form, differentiated by sympy; the adjoint's vector-Jacobian product against them."""
    import sympy

    import odeinfer.likelihood.steady as steady

    k1, k2, V1, V2, A0, B0 = sympy.symbols("k1 k2 V1 V2 A0 B0", positive=True)
    T = V1 * A0 + V2 * B0
    closed = sympy.Matrix([T * k2 / (V1 * (k1 + k2)), T * k1 / (V2 * (k1 + k2))])
    at = {k1: 0.7, k2: 1.9, V1: 1.4, V2: 0.45, A0: 2.0, B0: 0.3}
    ref = np.array(closed.subs(at), float).ravel()
    dref = np.array(closed.jacobian([k1, k2, V1, V2, A0, B0]).subs(at), float)
    p, x0 = np.array([at[k1], at[k2], at[V1], at[V2]]), np.array([at[A0], at[B0]])
    C = steady.conservation_laws(two_compartments, p)
    np.testing.assert_allclose(np.abs(C), [[V / np.hypot(at[V1], at[V2]) for V in (at[V1], at[V2])]], rtol=1e-12)
    assert not np.any(steady.ConservationLaws(two_compartments).at(p)[1](ref - x0)[1])  # the law persists along all
    ss = steady.SteadyState(two_compartments)
    xs, d = ss(p, x0, np.hstack([np.eye(4), np.zeros((4, 2))]), np.hstack([np.zeros((2, 4)), np.eye(2)]))
    assert ss.route == "newton"
    np.testing.assert_allclose(xs, ref, rtol=1e-12)
    np.testing.assert_allclose(d, dref, rtol=1e-10, atol=1e-12)
    xbar = np.array([0.3, -1.1])
    ss = steady.SteadyState(two_compartments)
    np.testing.assert_allclose(ss.states(p, x0), ref, rtol=1e-12)
    pbar, x0bar = ss.vjp(p, x0, xbar, np.eye(4))
    assert ss.route == "newton"
    np.testing.assert_allclose(np.r_[pbar, x0bar], xbar @ dref, rtol=1e-10, atol=1e-12)


def test_a_law_that_holds_only_at_a_parameters_value_is_used_while_that_parameter_is_held():
    """With q = 0 (a condition's knock-out), z' = q (x - z) keeps z at its start: a law at that value only. Held, the
    Newton route takes it (z_ss = z0, d z_ss / d z0 = 1, x_ss = a / b). When q moves, the Newton route has no column
    for it (the law breaks as q leaves 0: any q > 0 takes z to x, z_ss jumps) and the integration route runs instead,
    which finds no limit of d z / d q and says so."""
    import odeinfer.likelihood.steady as steady

    p, x0 = np.array([2.0, 0.5, 0.0]), np.array([1.0, 0.7])
    C = steady.conservation_laws(follower, p)
    np.testing.assert_allclose(np.abs(C), [[0.0, 1.0]], atol=1e-15)
    np.testing.assert_array_equal(steady.ConservationLaws(follower).at(p)[1](np.ones(2))[1], [False, False, True])
    ss = steady.SteadyState(follower)
    held = np.diag([1.0, 1.0, 0.0])
    xs, d = ss(p, x0, np.hstack([held, np.zeros((3, 2))]), np.hstack([np.zeros((2, 3)), np.eye(2)]))
    assert ss.route == "newton"
    np.testing.assert_allclose(xs, [4.0, 0.7], rtol=1e-12)
    np.testing.assert_allclose(d, [[2.0, -8.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]], atol=1e-12)
    # d z / d q = (x_ss - z0) T grows without end: the integration route refuses it (its rates alone passed it)
    res = ss(p, x0, np.eye(3), np.zeros((2, 3)))
    assert ss.route == "integration"
    assert isinstance(res, str) and "did not reach a steady state by t=1e+10" in res, res
    assert "furthest the derivative of 'z' along q;" in res, res
    assert res.endswith("a parameter may break a conservation law of the model, or the model may oscillate or grow "
                        "under this condition: check its parameters"), res
    ss = steady.SteadyState(follower)
    ss.states(p, x0)
    assert ss.route == "newton"
    res = ss.vjp(p, x0, np.array([1.0, 1.0]), np.eye(3))
    assert ss.route == "integration"
    assert isinstance(res, str) and "did not reach a steady state by t=1e+10" in res, res
    assert "furthest the sensitivities of the state 'z';" in res, res


def test_the_integration_route_tests_only_the_sensitivities_a_call_uses(monkeypatch):
    """The follower at q = 0 with the Newton route switched off: d z / d q grows as t, but a caller that holds q
    (PEtab's Raimundez_PCB2020: an inhibitor's level 0 under the pre-condition, not estimated) does not use it. The
    forward route tests the columns its dp, dx0 move; the states-only run and its adjoint the entries ``moving``
    names. Both reach the closed form's derivatives (the q column 0); asked for q as well, both refuse."""
    import odeinfer.likelihood.steady as steady

    monkeypatch.setattr(steady, "_COND_MAX", 0.0)
    p, x0 = np.array([2.0, 0.5, 0.0]), np.array([1.0, 0.7])
    dref = np.array([[2.0, -8.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]])  # x_ss = a / b, z_ss = z0
    ss = steady.SteadyState(follower)
    dx0 = np.hstack([np.zeros((2, 3)), np.eye(2)])
    xs, d = ss(p, x0, np.hstack([np.diag([1.0, 1.0, 0.0]), np.zeros((3, 2))]), dx0)
    assert ss.route == "integration"
    np.testing.assert_allclose(xs, [4.0, 0.7], rtol=1e-8)
    np.testing.assert_allclose(d, dref, rtol=1e-6, atol=1e-8)
    assert isinstance(ss(p, x0, np.hstack([np.eye(3), np.zeros((3, 2))]), dx0), str)
    xbar = np.array([0.3, -1.1])
    moving = np.array([True, True, False, True, True])
    ss = steady.SteadyState(follower)
    np.testing.assert_allclose(ss.states(p, x0, moving=moving), [4.0, 0.7], rtol=1e-8)
    pbar, x0bar = ss.vjp(p, x0, xbar, np.diag([1.0, 1.0, 0.0]), moving=moving)
    assert ss.route == "integration"
    np.testing.assert_allclose(np.r_[pbar, x0bar], xbar @ dref, rtol=1e-6, atol=1e-8)
    assert isinstance(ss.vjp(p, x0, xbar, np.eye(3)), str)


@oi.model(states=["a", "c", "s"], params=["k1", "k2", "kon", "L", "koff", "kdeg"])
def ligand(t, y, p):
    bind = p.kon * p.L * y.a - p.koff * y.c
    return {"a": p.k1 - p.k2 * y.a - bind, "c": bind - p.kdeg * y.c, "s": p.kdeg * y.c}


def test_states_that_stay_zero_are_left_out_of_the_newton_route():
    """Without the ligand (L = 0, held), the complex c and the sink s it feeds stay at their start 0: s has a zero
    column in J_x (an eigenvalue 0 that is no conservation law), which made the Newton route refuse (PEtab's
    Raimundez_PCB2020). Left out, the rest is a = k1 / k2 with its derivatives from the closed form (sympy), forward
    and adjoint; c and s stay 0 with derivative 0 along everything that moves. When L moves, d s / d L grows as t:
    neither route gives it, and the integration route says so."""
    import sympy

    import odeinfer.likelihood.steady as steady

    k1, k2 = sympy.symbols("k1 k2", positive=True)
    at = {k1: 0.8, k2: 0.3}
    p = np.array([0.8, 0.3, 2.0, 0.0, 0.4, 0.7])
    x0 = np.array([0.5, 0.0, 0.0])
    dref = np.zeros((3, 9))
    dref[0, :2] = np.array(sympy.Matrix([k1 / k2]).jacobian([k1, k2]).subs(at), float)
    moving = np.array([True, True, True, False, True, True, True, False, False])
    dp, dx0 = np.eye(9)[:6] * moving, np.eye(9)[6:] * moving
    ss = steady.SteadyState(ligand)
    assert ss._zeros(p, x0, moving) == (1, 2)
    xs, d = ss(p, x0, dp, dx0)
    assert ss.route == "newton"
    np.testing.assert_allclose(xs, [0.8 / 0.3, 0.0, 0.0], rtol=1e-12)
    np.testing.assert_allclose(d, dref, rtol=1e-10, atol=1e-12)
    xbar = np.array([0.3, -1.1, 2.0])
    ss = steady.SteadyState(ligand)
    np.testing.assert_allclose(ss.states(p, x0, moving=moving), [0.8 / 0.3, 0.0, 0.0], rtol=1e-12)
    pbar, x0bar = ss.vjp(p, x0, xbar, dp[:, :6], moving=moving)
    assert ss.route == "newton"
    np.testing.assert_allclose(np.r_[pbar, x0bar], xbar @ dref, rtol=1e-10, atol=1e-12)
    ss = steady.SteadyState(ligand)
    assert ss._zeros(p, x0, np.ones(9, bool)) == ()
    res = ss(p, x0, np.eye(9)[:6], dx0)
    assert ss.route == "integration"
    assert isinstance(res, str) and "did not reach a steady state by t=1e+10" in res, res


def test_a_pre_condition_that_holds_a_law_breaking_parameter_gives_the_gradient(monkeypatch):
    """The follower pre-equilibrated with q = 0 (the condition's knock-out), then run with q estimated: the
    pre-equilibration's q is held, so its growing d z / d q is never used; the evaluation goes through on the
    integration route (the Newton route switched off) with forward and adjoint gradients equal to central finite
    differences."""
    import odeinfer.likelihood.steady as steady

    monkeypatch.setattr(steady, "_COND_MAX", 0.0)
    m = follower.observe({"xo": "x", "zo": "z"}, noise=oi.Normal(sigma=SD))
    t = np.array([0.5, 2.0])
    d = oi.Data(t, np.array([[3.9, 1.6], [4.1, 3.2]]), ["xo", "zo"], t0=0.0)
    cond = oi.Condition(preequilibrate=oi.Condition(params={"q": 0.0}))
    prob = oi.FitProblem(m, oi.Experiments([d], names=["e"], conditions={"e": cond}),
                         {"a": oi.Param(2.0), "b": oi.Param(0.5), "q": oi.Param(1.0)}, x0={"x": 1.0, "z": 0.7})
    u = np.array([2.0, 0.5, 1.0])
    evs = []
    for gradient in (oi.Forward(), oi.Adjoint()):
        obj = oi.Objective(prob, solver=tight(), gradient=gradient)
        ev = obj(u)
        assert ev.ok and obj.steady.route == "integration", ev.failure
        np.testing.assert_allclose(ev.grad, fd_grad(obj, u), rtol=1e-5, atol=1e-7)
        evs.append(ev)
    assert evs[1].nll == pytest.approx(evs[0].nll, rel=1e-8)


# -- what is refused -------------------------------------------------------------------------------
def test_data_at_inf_needs_steady_state_true_and_a_start():
    with pytest.raises(DataError, match=r"`t` must be finite; received inf at index 1\. .*need "
                                        r"Data\(\.\.\., steady_state=True\)"):
        oi.Data([0.0, np.inf], [1.0, 2.0], "x")
    with pytest.raises(DataError, match=r"`t` must be finite or inf; received -inf at index 0"):
        oi.Data([-np.inf, 1.0], [1.0, 2.0], "x", steady_state=True)
    with pytest.raises(DataError, match=r"`t0` is needed: every time in `t` is inf"):
        oi.Data([np.inf], [1.0], "x", steady_state=True)
    with pytest.raises(DataError, match=r"`t` has duplicated times inf; .*replicates=True"):
        oi.Data([0.0, np.inf, np.inf], [1.0, 2.0, 3.0], "x", steady_state=True)
    with pytest.raises(DataError, match=r"`steady_state` must be True or False; received 'yes'"):
        oi.Data([0.0], [1.0], "x", steady_state="yes")
    d = oi.Data([0.0, np.inf], [1.0, 2.0], "x", steady_state=True, name="d")
    import pickle

    for same in (pickle.loads(pickle.dumps(d)), d.rename({"x": "z"}), d.select("x"),
                 oi.Experiments([d], names=["other"])[0]):
        assert same.steady_state and np.isinf(same.t[-1])


def test_an_input_with_a_steady_state_measurement_is_refused():
    m = prod_deg.observe({"xo": "x"}, noise=oi.Normal(sigma=SD))
    d = oi.Data([1.0, np.inf], [1.0, 2.0], "xo", t0=0.0, steady_state=True, name="e")
    cond = oi.Condition(params={"k1": oi.Input([0.0, 2.0], [1.0, 3.0], kind="step")})
    with pytest.raises(InputError, match=r"conditions\['e'\]\.params: \['k1'\] are driven by an Input, but experiment "
                                         r"'e' has measurements at the steady state"):
        oi.FitProblem(m, oi.Experiments([d], conditions={"e": cond}), {"k2": oi.Param(1.0)}, x0={"x": 0.0})


@pytest.mark.parametrize("formula, noise", [("x * t", oi.Normal(sigma=SD)), ("x", oi.Normal(sigma="0.1 + 0.01 * t"))],
                         ids=["observable", "noise"])
def test_an_observable_of_time_measured_at_the_steady_state_is_refused(formula, noise):
    m = prod_deg.observe({"xo": formula, "x2": "x"}, noise={"xo": noise, "x2": oi.Normal(sigma=SD)})
    d = oi.Data([1.0, np.inf], [[1.0, 1.0], [2.0, np.nan]], ["xo", "x2"], t0=0.0, steady_state=True, name="e")
    with pytest.raises(InputError, match=r"data: experiment 'e' has measurements of \['xo'\] at the steady state "
                                         r"\(t = inf\), but their formula or noise model depends on t"):
        oi.FitProblem(m, d, {"k1": oi.Param(1.0), "k2": oi.Param(1.0)}, x0={"x": 0.0})
    # the same observable measured at finite times only is fine
    d = oi.Data([1.0, np.inf], [[1.0, 1.0], [np.nan, 2.0]], ["xo", "x2"], t0=0.0, steady_state=True, name="e")
    oi.FitProblem(m, d, {"k1": oi.Param(1.0), "k2": oi.Param(1.0)}, x0={"x": 0.0})


def test_a_switch_time_estimated_in_an_experiment_with_steady_state_rows_is_refused():
    # the run to steady state cuts no switch: the time of a jump it may cross must be held fixed
    @oi.model(states=["x"], params=["k", "tau"])
    def step_on(t, y, p):
        return {"x": -y.x + oi.math.where(t >= p.tau, p.k, 0.0)}

    m = step_on.observe({"xo": "x"}, noise=oi.Normal(sigma=SD))
    d = oi.Data([1.0, np.inf], [0.5, 0.9], "xo", t0=0.0, steady_state=True, name="e")
    with pytest.raises(InputError, match=r"experiment 'e' has measurements at the steady state \(t = inf\), but the "
                                         r"run to steady state cannot differentiate .*\['tau'\] move a jump.*fix those "
                                         "parameters in the experiment's condition or drop the rows at t = inf"):
        oi.Objective(oi.FitProblem(m, d, {"k": oi.Param(0.8), "tau": oi.Param(2.0)}, x0={"x": 0.0}))
    # held fixed (switching on at tau = 2, after the last finite time): x_ss = k
    obj = oi.Objective(oi.FitProblem(m, d, {"k": oi.Param(0.8), "tau": 2.0}, x0={"x": 0.0}), solver=tight())
    ev = obj(np.array([0.8]))
    assert ev.nll == pytest.approx(-stats.norm.logpdf(0.5, 0.0, SD) - stats.norm.logpdf(0.9, 0.8, SD), rel=RTOL)
    assert ev.grad[0] == pytest.approx((0.8 - 0.9) / SD**2, rel=RTOL)  # d x_ss / dk = 1; x(1) = 0


def test_methods_without_steady_states_refuse_such_data():
    prob = _prod_deg_problem(True)
    with pytest.raises(InputError, match=r"experiment 'e' has measurements at the steady state \(t = inf\), which "
                                         r"multiple shooting \(segments > 1\) does not support"):
        oi.Embedding(segments=2).fit(prob)
    with pytest.raises(InputError, match=r"experiment 'e' has measurements at the steady state \(t = inf\), which "
                                         "the simultaneous \\(collocation\\) likelihood does not support"):
        oi.Simultaneous().fit(prob)
    d = prob.experiments[0]
    with pytest.raises(DataError, match=r"data: experiment 'e' has measurements at the steady state \(t = inf\), "
                                        "which Embedding cannot use"):
        oi.Embedding().fit(prod_deg, d.rename({"xo": "x"}), start={"k1": 1.0, "k2": 1.0}, x0={"x": 0.0})
    with pytest.raises(DataError, match=r"has measurements at the steady state \(t = inf\), which oi\.bayes"):
        oi.bayes.build_model(prod_deg, d.rename({"xo": "x"}))


# -- PEtab: time = inf -----------------------------------------------------------------------------
def _petab_cascade(tmp_path):
    """A PEtab problem of the cascade X' = k1 - k2 X, Y' = k3 X - k4 Y (SBML written here): conditions c1
    and c2 (k1 = 4); obs_x = X (sd 0.1), obs_sum = X + Y (log-normal, sd estimated); finite and steady-state
    rows, and a pre-equilibration under c1 before c2."""
    libsbml = pytest.importorskip("libsbml")

    def ml(formula):
        return libsbml.writeMathMLToString(libsbml.parseL3Formula(formula)).split("\n", 1)[1]

    def reaction(rid, law, reactant="", product="", modifier=""):
        ref = 'speciesReference species="{}" stoichiometry="1" constant="true"'
        return (f'<reaction id="{rid}" reversible="false">'
                + (f'<listOfReactants><{ref.format(reactant)}/></listOfReactants>' if reactant else "")
                + (f'<listOfProducts><{ref.format(product)}/></listOfProducts>' if product else "")
                + (f'<listOfModifiers><modifierSpeciesReference species="{modifier}"/></listOfModifiers>'
                   if modifier else "")
                + f'<kineticLaw>{ml(law)}</kineticLaw></reaction>')

    species = "".join(f'<species id="{s}" compartment="C" initialConcentration="{v}" hasOnlySubstanceUnits="false" '
                      'boundaryCondition="false" constant="false"/>' for s, v in (("X", 0.5), ("Y", 0.0)))
    params = "".join(f'<parameter id="{k}" value="1" constant="true"/>' for k in ("k1", "k2", "k3", "k4"))
    sbml = ('<?xml version="1.0" encoding="UTF-8"?>\n<sbml xmlns="http://www.sbml.org/sbml/level3/version2/core" '
            'level="3" version="2"><model id="cascade"><listOfCompartments><compartment id="C" spatialDimensions="3" '
            f'size="1" constant="true"/></listOfCompartments><listOfSpecies>{species}</listOfSpecies>'
            f'<listOfParameters>{params}</listOfParameters><listOfReactions>'
            + reaction("pX", "k1 * C", product="X") + reaction("dX", "k2 * X * C", reactant="X")
            + reaction("pY", "k3 * X * C", product="Y", modifier="X") + reaction("dY", "k4 * Y * C", reactant="Y")
            + '</listOfReactions></model></sbml>\n')
    folder = tmp_path / "cascade"
    folder.mkdir()
    (folder / "model.xml").write_text(sbml)
    (folder / "conditions.tsv").write_text("conditionId\tk1\nc1\t\nc2\t4\n")
    (folder / "observables.tsv").write_text(
        "observableId\tobservableFormula\tnoiseFormula\tobservableTransformation\n"
        "obs_x\tX\t0.1\tlin\nobs_sum\tX + Y\tnoiseParameter1_obs_sum\tlog\n")
    rows = [("obs_x", "", "c1", 1.0, 1.4), ("obs_x", "", "c1", math.inf, 2.1), ("obs_sum", "", "c1", math.inf, 7.5),
            ("obs_sum", "", "c1", math.inf, 8.6), ("obs_x", "c1", "c2", 0.5, 2.9), ("obs_x", "c1", "c2", math.inf, 3.8)]
    (folder / "measurements.tsv").write_text(
        "observableId\tpreequilibrationConditionId\tsimulationConditionId\ttime\tmeasurement\tnoiseParameters\n"
        + "".join(f"{o}\t{p}\t{s}\t{t}\t{y}\t{'sd' if o == 'obs_sum' else ''}\n" for o, p, s, t, y in rows))
    (folder / "parameters.tsv").write_text(
        "parameterId\tparameterScale\tlowerBound\tupperBound\tnominalValue\testimate\n"
        "k1\tlog10\t0.01\t100\t2\t1\nk2\tlin\t0.01\t10\t1\t1\nk3\tlin\t0.01\t10\t1.5\t1\n"
        "k4\tlin\t0.01\t10\t0.5\t1\nsd\tlog10\t0.001\t10\t0.2\t1\n")
    (folder / "cascade.yaml").write_text(
        "format_version: 1\nparameter_file: parameters.tsv\nproblems:\n- condition_files: [conditions.tsv]\n"
        "  measurement_files: [measurements.tsv]\n  observable_files: [observables.tsv]\n  sbml_files: [model.xml]\n")
    return folder / "cascade.yaml", rows


def test_petab_steady_state_measurements_match_the_closed_form(tmp_path):
    yaml_path, rows = _petab_cascade(tmp_path)
    pp = oi.petab.load(yaml_path)
    d = pp.experiments["c1"]
    assert d.steady_state and d.mask[np.isinf(d.t)].sum() == 3  # three measurements at t = inf

    def predicted(k1, k2, k3, k4, pre, t):
        if not pre:  # from the SBML initial state X = 0.5
            xs = k1 / k2
            return xs + (0.5 - xs) * math.exp(-k2 * t), k3 * xs / k4
        xs1, xs2 = k1 / k2, 4.0 / k2  # from c1's steady state under c2's k1 = 4
        return xs2 + (xs1 - xs2) * math.exp(-k2 * t), None

    def nll(k1, k2, k3, k4, sd):
        out = 0.0
        for o, pre, _, t, y in rows:
            x, ys = predicted(k1, k2, k3, k4, pre, t)
            if o == "obs_x":
                out -= stats.norm.logpdf(y, x, 0.1)
            else:
                out -= stats.norm.logpdf(math.log(y), math.log(x + ys), sd) - math.log(y)
        return out

    ev = pp.objective(tight())(pp.u_nominal)
    assert ev.ok, ev.failure
    assert ev.nll == pytest.approx(nll(2.0, 1.0, 1.5, 0.5, 0.2), rel=RTOL)
    u = pp.u_nominal + np.array([0.1, -0.2, 0.3, 0.1, -0.1])
    obj = pp.objective(tight())
    assert pp.problem.estimated == ("k1", "k2", "k3", "k4", "sd")  # k1 and sd on the log10 scale
    theta = dict(k1=10.0 ** u[0], k2=u[1], k3=u[2], k4=u[3], sd=10.0 ** u[4])
    ev = obj(u)
    assert ev.nll == pytest.approx(nll(**theta), rel=RTOL)
    np.testing.assert_allclose(ev.grad, fd_grad(obj, u), rtol=1e-5, atol=1e-7)


def test_a_fit_with_steady_state_rows_plots_and_reloads():
    # the maximum-likelihood fit of the mixed production-degradation data; its plot draws the trajectory
    # over [t0, the last finite time], the steady-state rows being no point of it; its JSON brings the
    # rows at t = inf back (the rebuilt objective has the fit's value)
    prob = _prod_deg_problem(True)
    fit = oi.Embedding().fit(prob, start={"k1": 2.0, "k2": 1.0})
    assert fit.converged
    obj = oi.Objective(prob, solver=tight())
    ev = obj(np.array([math.log(fit.params["k1"]), fit.params["k2"]]))
    assert np.max(np.abs(ev.grad)) < 1e-4  # a stationary point of the (closed-form-checked) likelihood
    assert prob.plans[0].t_last == 1.5
    fig = oi.plots.observables(fit)
    (ax,) = fig.axes
    data, line = ax.get_lines()
    assert line.get_xdata()[0] == 0.0 and line.get_xdata()[-1] == 1.5
    np.testing.assert_array_equal(data.get_xdata(), np.r_[T_FIN, [np.inf] * Y_SS.size])
    back = oi.Estimate.from_json(fit.to_json())
    d = back._objective.problem.experiments[0]
    assert d.steady_state and np.isinf(d.t).sum() == Y_SS.size
    assert back._objective(np.asarray(back.extras["u"], float)).nll == pytest.approx(fit.cost, rel=1e-10)


@pytest.mark.parametrize("name", ["Brannmark_JBC2010", "Zheng_PNAS2012"])
def test_conservation_laws_span_the_sbml_stoichiometrys_left_null_space(name):
    """The laws found from the right-hand side's terms at the pre-equilibration's parameters against the left null
    space of the SBML file's stoichiometric matrix (read with libsbml, solved exactly by sympy): Brannmark's three
    (the receptor's five forms, IRS's two, X's two), Zheng's none. Zheng's simulation condition sets its dilution
    (the one reaction that removes and adds histones) to 0: there the total of its 15 states is a law too."""
    import libsbml
    import sympy

    from odeinfer.likelihood.steady import conservation_laws

    folder = Path(__file__).parent / "data" / "petab" / name
    sbml = libsbml.readSBMLFromFile(str(folder / f"model_{name}.xml")).getModel()
    pp = oi.petab.load(folder / f"{name}.yaml")
    states = list(pp.problem.model.states)
    N = sympy.zeros(len(states), sbml.getNumReactions())
    for j, r in enumerate(sbml.getListOfReactions()):
        for refs, sign in ((r.getListOfReactants(), -1), (r.getListOfProducts(), 1)):
            for ref in refs:
                N[states.index(ref.getSpecies()), j] += sign * sympy.nsimplify(ref.getStoichiometry())
    ref = np.array([[float(v) for v in vec] for vec in N.T.nullspace()]).reshape(-1, len(states))
    obj = pp.objective()
    run = obj.runs[0]
    v = run.mapping(obj.natural(pp.u_nominal))[0]
    op = run.n_p + run.n_q + run.n_s + run.n_d  # where the pre-equilibration's parameters start
    C = conservation_laws(pp.problem.model, v[op:op + run.n_p])
    assert C.shape == ref.shape == ({"Brannmark_JBC2010": 3, "Zheng_PNAS2012": 0}[name], len(states))
    np.testing.assert_allclose(C @ C.T, np.eye(len(C)), atol=1e-12)
    np.testing.assert_allclose(ref - ref @ C.T @ C, 0.0, atol=1e-12)  # every law of the file's in C's span
    if name == "Zheng_PNAS2012":
        p = v[:run.n_p]
        assert p[pp.problem.model.params.index("dilution")] == 0.0
        np.testing.assert_allclose(np.abs(conservation_laws(pp.problem.model, p)), 15 ** -0.5, rtol=1e-12)
