"""Exact gradients of the likelihood through jumps of the right-hand side whose times are
functions of the parameters alone (a step switched on at an estimated time ``tau``).

The objective splits the integration at each switch time and adds the jump of the state
sensitivities there, ``dx/dtheta(t+) = dx/dtheta(t-) + (f(t-) - f(t+)) dtau/dtheta``.
References: closed forms of x' = -x + k [switch on] (x(0) = xi),

    x(t) = xi e^{-t} + sum over switches s of +-k (1 - e^{-(t - s)}) [t > s],

and their derivatives, written out here (central differences are poor across a jump).
Tolerances: 1e-7 relative (the solver runs at rtol 1e-10).
"""

import numpy as np
import pytest
from scipy import stats

import odeinfer as oi
from odeinfer.errors import InputError
from odeinfer.solve.abi import Info

T = np.array([0.5, 1.0, 1.7, 2.5, 3.2, 4.0, 5.5])
Y = np.array([1.55, 1.2, 1.5, 1.9, 1.6, 1.3, 0.6])
SD = 0.1
TIGHT = oi.Rodas(rtol=1e-10, atol=1e-12)
RTOL = 1e-7


@oi.model(states=["x"], params=["k", "tau"])
def step_on(t, y, p):
    return {"x": -y.x + oi.math.where(t >= p.tau, p.k, 0.0)}


@oi.model(states=["x"], params=["k", "tau", "d"])
def pulse(t, y, p):
    # on at tau (a where), off at tau + d (a Heaviside whose argument falls through zero)
    return {"x": -y.x + p.k * oi.math.where(t >= p.tau, 1.0, 0.0) * oi.math.heaviside(p.tau + p.d - t)}


def _step(t, s):
    """The response to a unit step switched on at s, and its derivative in s."""
    on = t > s
    e = np.exp(-(t - np.where(on, s, t)))
    return np.where(on, 1.0 - e, 0.0), np.where(on, -e, 0.0)


def _nll_grad(h, dh):
    """PEtab's normal NLL of Y (scipy.stats) and its gradient, given h and dh/dtheta (n_times, n)."""
    nll = -np.sum(stats.norm.logpdf(Y, h, SD))
    return nll, ((h - Y) / SD**2) @ dh


def _problem(model, params):
    m = model.observe({"obs": "x"}, noise=oi.Normal(sigma=SD))
    return oi.FitProblem(m, oi.Data(T, Y, "obs"), params, x0={"x": "xi"})


def assert_nll_and_gradient(ev, nll, grad):
    assert ev.ok, ev.failure
    assert ev.nll == pytest.approx(nll, rel=RTOL)
    np.testing.assert_allclose(ev.grad, grad, rtol=RTOL, atol=RTOL * np.max(np.abs(grad)))


def _step_on_reference(k, tau, xi):
    s, ds = _step(T, tau)
    e = np.exp(-T)
    h = xi * e + k * s
    return _nll_grad(h, np.column_stack([s, k * ds, e]))


def test_a_step_switched_on_at_an_estimated_time_has_the_exact_gradient():
    assert step_on.switching_params == ("tau",)
    prob = _problem(step_on, {"k": oi.Param(0.8), "tau": oi.Param(1.3), "xi": oi.Param(2.0)})
    assert prob.estimated == ("k", "tau", "xi")
    obj = oi.Objective(prob, solver=TIGHT)
    points = [np.array([0.8, 1.3, 2.0]), np.array([1.1, 2.9, 1.5])]
    first = [obj(u) for u in points]
    for u, ev in zip(points, first):
        assert_nll_and_gradient(ev, *_step_on_reference(*u))
    again = obj(points[0])  # the segments cut for the second point do not leak into the first
    assert again.nll == first[0].nll and np.array_equal(again.grad, first[0].grad)
    adj = oi.Objective(prob, solver=TIGHT, gradient=oi.Adjoint())  # the switch time's jump in the reverse pass
    for u in points:
        assert_nll_and_gradient(adj(u), *_step_on_reference(*u))


@pytest.mark.parametrize("tau", [-0.7, 6.5])
def test_a_switch_time_outside_the_data_moves_nothing(tau):
    # before t0 = 0 the step is on from the start, x = xi e^{-t} + k (1 - e^{-t}); after the last
    # measurement it never acts, x = xi e^{-t}: either way d nll / d tau = 0
    prob = _problem(step_on, {"k": oi.Param(0.8), "tau": oi.Param(tau), "xi": oi.Param(2.0)})
    ev = oi.Objective(prob, solver=TIGHT)(np.array([0.8, tau, 2.0]))
    s = (1.0 - np.exp(-T)) if tau < 0 else np.zeros_like(T)
    e = np.exp(-T)
    nll, grad = _nll_grad(2.0 * e + 0.8 * s, np.column_stack([s, np.zeros_like(T), e]))
    assert_nll_and_gradient(ev, nll, grad)
    assert ev.grad[1] == 0.0


def test_two_switches_on_one_parameter_and_a_sum_of_parameters():
    # on at tau, off at tau + d: tau moves both jumps, d the second; tau on the log scale
    prob = _problem(pulse, {"k": oi.Param(0.9), "tau": oi.Param(0.8, lower=0.0, upper=10.0, scale="log"), "d": oi.Param(2.1),
                            "xi": oi.Param(1.7)})
    obj = oi.Objective(prob, solver=TIGHT)
    k, tau, d, xi = 0.9, 0.8, 2.1, 1.7
    s1, ds1 = _step(T, tau)
    s2, ds2 = _step(T, tau + d)
    e = np.exp(-T)
    h = xi * e + k * (s1 - s2)
    dh = np.column_stack([s1 - s2, k * (ds1 - ds2) * tau, -k * ds2, e])  # d/d log(tau) = tau d/d tau
    ev = obj(np.array([k, np.log(tau), d, xi]))
    assert_nll_and_gradient(ev, *_nll_grad(h, dh))


def test_switches_shared_by_experiments_with_their_own_switch_times():
    # one tau per experiment (as PEtab's Beer_MolBioSystems2014 has): each run cuts at its own
    m = step_on.observe({"obs": "x"}, noise=oi.Normal(sigma=SD))
    conds = {"a": oi.Condition(params={"tau": "tau_a"}), "b": oi.Condition(params={"tau": "tau_b"})}
    exps = oi.Experiments([oi.Data(T, Y, "obs", name="a"), oi.Data(T, Y, "obs", name="b")], conditions=conds)
    prob = oi.FitProblem(m, exps, {"k": oi.Param(0.8), "tau_a": oi.Param(1.3), "tau_b": oi.Param(3.6),
                                   "xi": oi.Param(2.0)}, x0={"x": "xi"})
    assert prob.estimated == ("k", "tau_a", "tau_b", "xi")
    ev = oi.Objective(prob, solver=TIGHT)(np.array([0.8, 1.3, 3.6, 2.0]))
    na, ga = _step_on_reference(0.8, 1.3, 2.0)
    nb, gb = _step_on_reference(0.8, 3.6, 2.0)
    assert_nll_and_gradient(ev, na + nb, [ga[0] + gb[0], ga[1], gb[1], ga[2] + gb[2]])


def test_a_switch_that_depends_on_the_states_is_located():
    """x' = -x + k [x < c] from xi > c: production k < c starts when x falls below c, at t1 = log(xi / c), then
    x = k + (c - k) e^{-(t - t1)}. The objective locates t1 and adds the sensitivities' jump (f(t1-) - f(t1+))
    dt1/dtheta (the solvers alone refuse it: its time depends on the states). Gradient by central differences of
    the closed form (smooth in the parameters: no measurement at t1; step 1e-6, relative 1e-6)."""
    @oi.model(states=["x"], params=["k", "c"])
    def capped(t, y, p):
        return {"x": -y.x + oi.math.where(y.x < p.c, p.k, 0.0)}

    def nll(k, c, xi):
        t1 = np.log(xi / c)
        return -np.sum(stats.norm.logpdf(Y, np.where(T < t1, xi * np.exp(-T), k + (c - k) * np.exp(-(T - t1))), SD))

    prob = _problem(capped, {"k": oi.Param(0.8), "c": oi.Param(1.0), "xi": oi.Param(2.0)})
    ev = oi.Objective(prob, solver=TIGHT)(np.array([0.8, 1.0, 2.0]))
    assert ev.ok, ev.failure
    assert ev.nll == pytest.approx(nll(0.8, 1.0, 2.0), rel=RTOL)
    u, h = np.array([0.8, 1.0, 2.0]), 1e-6
    fd = [(nll(*(u + h * e)) - nll(*(u - h * e))) / (2 * h) for e in np.eye(3)]
    np.testing.assert_allclose(ev.grad, fd, rtol=1e-6)
    with pytest.raises(InputError, match=r"gradient: parameters \['c'\] move a jump of the right-hand side"):
        oi.bind(oi.Problem(capped, T), gradient=oi.Forward())


def test_a_switch_not_linear_in_time_is_still_refused():
    @oi.model(states=["x"], params=["k", "tau"])
    def late(t, y, p):
        return {"x": -y.x + oi.math.where(t * t >= p.tau, p.k, 0.0)}

    prob = _problem(late, {"k": oi.Param(0.8), "tau": oi.Param(1.3), "xi": oi.Param(2.0)})
    with pytest.raises(InputError, match=r"gradient: parameters \['tau'\] move a jump of the right-hand side"):
        oi.Objective(prob, solver=TIGHT)


@oi.model(states=["x"], params=["k", "tau"])
def fast(t, y, p):
    return {"x": -1.0e4 * (y.x - oi.math.where(t >= p.tau, p.k, 0.0))}


def test_segments_cut_anew_start_on_rodas_once_the_run_was_found_stiff():
    # x' = -L (x - k [t >= tau]), L = 1e4: stiff, so oi.Auto switches to Rodas; moving tau cuts new
    # segments, which start on Rodas (in the same auto scope) without trying Dormand-Prince first. Closed form: x = xi e^{-L t} +
    # k (1 - e^{-L (t - tau)}) [t > tau]
    lam = 1.0e4
    prob = _problem(fast, {"k": oi.Param(0.8), "tau": oi.Param(1.3), "xi": oi.Param(2.0)})
    obj = oi.Objective(prob, solver=oi.Auto(rtol=1e-10, atol=1e-12, max_steps=50_000))
    obj(np.array([0.8, 1.3, 2.0]))
    assert any(s.solver.stiff for s in obj.runs[0].segments)  # found stiff on a segment
    ev = obj(np.array([0.8, 2.2, 2.0]))
    segs = obj.runs[0].segments
    assert len(segs) == 2 and all(s.solver.stiff for s in segs)
    assert all(s.solver.explicit.info[Info.N_STEPS] == 0 for s in segs)  # no Dormand-Prince attempt first
    h = 2.0 * np.exp(-lam * T) + 0.8 * np.where(T > 2.2, 1.0 - np.exp(-lam * (T - np.minimum(T, 2.2))), 0.0)
    assert ev.ok and ev.nll == pytest.approx(-np.sum(stats.norm.logpdf(Y, h, SD)), rel=RTOL)


def test_predictions_and_their_gradients_through_a_switch():
    # observe_at runs its own segments (other times): h = xi e^{-t} + k s(t - tau) and its gradient
    prob = _problem(step_on, {"k": oi.Param(0.8), "tau": oi.Param(1.3), "xi": oi.Param(2.0)})
    obj = oi.Objective(prob, solver=TIGHT)
    t = np.array([0.2, 1.0, 1.3, 1.31, 2.0, 4.5])
    h, dh = obj.observe_at(np.array([0.8, 1.3, 2.0]), prob.plans[0].name, t)
    s, ds = _step(t, 1.3)
    e = np.exp(-t)
    np.testing.assert_allclose(h[:, 0], 2.0 * e + 0.8 * s, rtol=RTOL)
    ref = np.column_stack([s, 0.8 * ds, e])
    np.testing.assert_allclose(dh[:, 0], ref, rtol=RTOL, atol=RTOL * np.max(np.abs(ref)))


def test_a_switch_time_estimated_in_the_pre_equilibration_is_refused_when_the_objective_is_built():
    # the pre-equilibration integrates to a steady state without cutting at switches: a switch time it
    # does not hold fixed is refused up front (the main run's estimated tau alone is fine)
    m = step_on.observe({"obs": "x"}, noise=oi.Normal(sigma=SD))
    params = {"k": oi.Param(0.8), "tau": oi.Param(1.3)}
    held = oi.Condition(preequilibrate=oi.Condition(params={"tau": 0.0}))
    prob = oi.FitProblem(m, oi.Experiments([oi.Data(T, Y, "obs", name="e")], conditions={"e": held}), params,
                         x0={"x": 0.0})
    ev = oi.Objective(prob, solver=TIGHT)(np.array([0.8, 1.3]))
    # pre-equilibrated with the step on from t = 0: x_ss = k; then off until tau: x = k e^{-t} + k s(t - tau)
    s, ds = _step(T, 1.3)
    e = np.exp(-T)
    assert_nll_and_gradient(ev, *_nll_grad(0.8 * e + 0.8 * s, np.column_stack([e + s, 0.8 * ds])))
    free = oi.Condition(preequilibrate=oi.Condition())
    prob = oi.FitProblem(m, oi.Experiments([oi.Data(T, Y, "obs", name="e")], conditions={"e": free}), params,
                         x0={"x": 0.0})
    with pytest.raises(InputError, match=r"gradient: parameters \['tau'\] move a jump of the right-hand side"):
        oi.Objective(prob, solver=TIGHT)


def test_a_state_dependent_kink_without_a_jump_has_exact_gradients():
    """x' = a - k max(x - c, 0) from x(0) = 0 (as SBML's piecewise(x - c, x > c, 0), Smith_BMCSystBiol2013's
    Akt activation): the right-hand side is continuous where x crosses c, so the sensitivities do not jump
    and forward sensitivities are exact. Closed form: x = a t up to t1 = c / a, then
    x = c + (a / k)(1 - e^{-k (t - t1)}); the gradient in (a, k) by central differences of that closed form
    (step 1e-6; it is smooth in a and k). Tolerances fixed beforehand: NLL 1e-7 relative, gradient 1e-6
    relative (the objective locates the kink as it does a jump, see tests/test_events.py)."""
    @oi.model(states=["x"], params=["a", "k", "c"])
    def kink(t, y, p):
        return {"x": p.a - p.k * oi.math.where(y.x > p.c, y.x - p.c, 0.0)}

    def closed(a, k, c=1.2):
        t1 = c / a
        return np.where(T <= t1, a * T, c + (a / k) * (1.0 - np.exp(-k * (T - t1))))

    def nll(a, k):
        return -np.sum(stats.norm.logpdf(Y, closed(a, k), SD))

    m = kink.observe({"obs": "x"}, noise=oi.Normal(sigma=SD))
    prob = oi.FitProblem(m, oi.Data(T, Y, "obs"), {"a": oi.Param(1.0), "k": oi.Param(0.8), "c": 1.2}, x0={"x": 0.0})
    ev = oi.Objective(prob, solver=TIGHT)(np.array([1.0, 0.8]))
    assert ev.ok, ev.failure
    assert ev.nll == pytest.approx(nll(1.0, 0.8), rel=RTOL)
    h = 1e-6
    fd = [(nll(1.0 + h, 0.8) - nll(1.0 - h, 0.8)) / (2 * h), (nll(1.0, 0.8 + h) - nll(1.0, 0.8 - h)) / (2 * h)]
    np.testing.assert_allclose(ev.grad, fd, rtol=1e-6)
    # a jump at a state-dependent time (x' = a - k x [x > c]: a - k c on one side, a on the other) is located, with
    # the sensitivities' jump there; closed form x = a t up to t1 = c / a, then a / k + (c - a / k) e^{-k (t - t1)}
    @oi.model(states=["x"], params=["a", "k", "c"])
    def jump(t, y, p):
        return {"x": p.a - p.k * oi.math.where(y.x > p.c, y.x, 0.0)}

    def nll_jump(a, k, c=1.2):
        t1 = c / a
        return -np.sum(stats.norm.logpdf(Y, np.where(T <= t1, a * T, a / k + (c - a / k) * np.exp(-k * (T - t1))), SD))

    prob = oi.FitProblem(jump.observe({"obs": "x"}, noise=oi.Normal(sigma=SD)), oi.Data(T, Y, "obs"),
                         {"a": oi.Param(1.0), "k": oi.Param(0.8), "c": 1.2}, x0={"x": 0.0})
    ev = oi.Objective(prob, solver=TIGHT)(np.array([1.0, 0.8]))
    assert ev.nll == pytest.approx(nll_jump(1.0, 0.8), rel=RTOL)
    fd = [(nll_jump(1.0 + h, 0.8) - nll_jump(1.0 - h, 0.8)) / (2 * h),
          (nll_jump(1.0, 0.8 + h) - nll_jump(1.0, 0.8 - h)) / (2 * h)]
    np.testing.assert_allclose(ev.grad, fd, rtol=1e-6)


def test_a_collapsed_step_names_the_model_s_kinks_at_state_thresholds():
    """A failed solve with a collapsed step (Status.STEP_TOO_SMALL) says where the model has kinks at
    state thresholds (a trajectory that slides along one collapses the step); other failures, and models
    without kinks, do not."""
    from types import SimpleNamespace

    from odeinfer.likelihood.objective import _Run
    from odeinfer.solve._inputs import state_kinks
    from odeinfer.solve.abi import Status

    @oi.model(states=["x", "y"], params=["a", "c"])
    def kinked(t, y, p):
        return {"x": p.a - oi.math.where(y.x > p.c, y.x - p.c, 0.0), "y": oi.math.where(t > 2.0, 1.0, 0.0) - y.y}

    assert state_kinks(kinked) == ["c < x"]  # the time switch of y is no state threshold
    run = SimpleNamespace(_kinks=None, _solve_model=kinked)
    note = _Run._kink_note(run, Status.STEP_TOO_SMALL)
    assert note.startswith("; the right-hand side has kinks where a state crosses a threshold (c < x): ")
    assert _Run._kink_note(run, Status.MAX_STEPS) == ""

    @oi.model(states=["x"], params=["k"])
    def smooth(t, y, p):
        return {"x": p.k - y.x}

    assert _Run._kink_note(SimpleNamespace(_kinks=None, _solve_model=smooth), Status.STEP_TOO_SMALL) == ""
