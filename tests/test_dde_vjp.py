"""Vector-Jacobian products of a DDE solution by the continuous adjoint (point sources).

References (independent of the adjoint):
* the forward sensitivities of the DDE solver (method of steps, Dormand-Prince, rtol 1e-10 or
  1e-12; themselves checked against central finite differences in test_dde_solver.py),
  contracted with ``g``: ``sum_r g_r^T S(t_r)``;
* central finite differences of ``L = sum_r g_r . x(t_r)`` (solves at rtol 1e-12);
* the analytic value when only ``g_0`` at ``t0`` is nonzero: ``x(t0) = X0(0)``, so the VJP is
  ``g_0 . dX0/dphi(0)`` (affine history ``a u + b``: ``d/da = 0``, ``d/db = 1``).
"""

import numpy as np
import pytest

import odeinfer as oi
from odeinfer import math as om
from odeinfer import zoo
from odeinfer.bayes.dde_problem import DDEProblem
from odeinfer.errors import InputError
from odeinfer.model import History
from odeinfer.solve.dde_adjoint import dde_vjp
from representative import split

SMALL = ["delay_exponential_decay", "logistic_delay"]


def _sens_vjp(model, params, history, t, g, t0=None, rtol=1e-10, atol=1e-12):
    sol = oi.solve(oi.Problem(model, t, history=history, t0=t0), params,
                   solver=oi.MethodOfSteps(oi.Dopri5(rtol=rtol, atol=atol)), gradient=oi.Forward())
    return np.einsum("ti,tij->j", g, sol.sens)


def _rel(v, ref):
    """Largest deviation relative to the largest reference component."""
    return float(np.max(np.abs(np.asarray(v) - ref)) / np.max(np.abs(ref)))


def _zoo_case(name):
    """(VJP, sensitivity reference, names expected, sum g . y at the outputs) on a zoo model."""
    e = zoo.get(name)
    g = np.random.default_rng(1).normal(size=(e.t.size, e.model.n_states))
    v = dde_vjp(e.model, e.params_array(), e.history, e.t, g, t0=e.t0)
    ref = _sens_vjp(e.model, e.params_array(), e.history, e.t, g, t0=e.t0)
    y = oi.solve(oi.Problem(e.model, e.t, history=e.history, t0=e.t0), e.params_array(),
                 solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-10, atol=1e-12))).y
    return v, ref, tuple(e.model.params) + e.history.param_names(e.model.states), float(np.sum(g * y))


@pytest.mark.parametrize("name", SMALL)
def test_vjp_matches_the_sensitivity_vjp(name):
    v, ref, names, loss = _zoo_case(name)
    assert v.names == names and _rel(v.grad, ref) <= 1e-6
    assert v.loss == pytest.approx(loss, rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in zoo.available("dde") if n not in SMALL])
def test_vjp_matches_the_sensitivity_vjp_on_the_whole_dde_zoo(name):
    """Measured (nsub=2, rtol 1e-10): max relative deviation 2e-7 (hiv) .. 1e-8 on the other models."""
    v, ref, names, loss = _zoo_case(name)
    assert v.names == names and _rel(v.grad, ref) <= 1e-6
    assert v.loss == pytest.approx(loss, rel=1e-12)


def test_vjp_matches_central_finite_differences():
    """No output time on a breakpoint t0 + n tau (there x(t_r) is not C2 in tau and central
    differences are only first order: with t = linspace(0, 6, 25) FD at h = 1e-5 is off by 1e-5)."""
    e = zoo.get("delay_exponential_decay")
    theta, phi = np.array([-2.0, -2.0, 1.0]), np.array([1.5, 4.0])
    t = np.linspace(0.0, 5.9, 25)
    g = np.random.default_rng(2).normal(size=(t.size, 1))
    v = dde_vjp(e.model, theta, History.affine(1.5, 4.0), t, g)

    def loss(u):
        sol = oi.solve(oi.Problem(e.model, t, history=History.affine(1.5, 4.0)), u[:3], history_params=u[3:],
                       solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-12, atol=1e-14)))
        return float(np.sum(g * sol.y))

    u0 = np.concatenate([theta, phi])
    fd = np.empty(u0.size)
    for j in range(u0.size):
        h = 1e-5 * max(1.0, abs(u0[j]))
        up, um = u0.copy(), u0.copy()
        up[j] += h
        um[j] -= h
        fd[j] = (loss(up) - loss(um)) / (2 * h)
    assert _rel(v.grad, fd) <= 1e-6
    assert v.loss == pytest.approx(loss(u0), rel=1e-9)


def test_output_at_t0_only_gives_the_history_derivative():
    e = zoo.get("delay_exponential_decay")
    g = np.zeros((e.t.size, 1))
    g[0] = 1.7  # t[0] == t0: a jumps at t0 before a(t0) is read
    v = dde_vjp(e.model, e.params_array(), History.affine(1.5, 4.0), e.t, g)
    np.testing.assert_array_equal(v.grad, [0.0, 0.0, 0.0, 0.0, 1.7])
    assert v.loss == pytest.approx(1.7 * 4.0)
    v0 = dde_vjp(e.model, e.params_array(), History.affine(1.5, 4.0), e.t, np.zeros((e.t.size, 1)))
    np.testing.assert_array_equal(v0.grad, np.zeros(5))


@pytest.mark.parametrize("tau, t0, shift", [(1.0, None, 0.0), (0.737, -0.3, 0.0), (3.3, 99.5, 100.0)])
def test_irregular_repeated_times_and_off_grid_delays(tau, t0, shift):
    e = zoo.get("logistic_delay")
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0.0, 10.0, 30))
    t = np.concatenate([[0.0, 0.0], t, [t[-1]]]) + shift  # repeated times, an output at t[0]
    g = rng.normal(size=(t.size, 1))
    g[5] = 0.0
    p = e.params_array()
    p[2] = tau
    # rtol 1e-12: with tau = 3.3 the solution oscillates about 0 and at rtol 1e-10 (nsub 2) the VJP is
    # only within 1.3e-6 (3e-8 at 1e-12)
    v = dde_vjp(e.model, p, e.history, t, g, t0=t0, solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-12, atol=1e-14)))
    ref = _sens_vjp(e.model, p, e.history, t, g, t0=t0, rtol=1e-12, atol=1e-14)
    assert _rel(v.grad, ref) <= 1e-6


def test_nsub_refines():
    e = zoo.get("logistic_delay")
    g = np.random.default_rng(4).normal(size=(e.t.size, 1))
    ref = _sens_vjp(e.model, e.params_array(), e.history, e.t, g, rtol=1e-12, atol=1e-14)
    tight = oi.MethodOfSteps(oi.Dopri5(rtol=1e-12, atol=1e-14))
    err = [np.max(np.abs(dde_vjp(e.model, e.params_array(), e.history, e.t, g, gradient=oi.Adjoint(nsub=k),
                                 solver=tight).grad - ref)) for k in (1, 4)]
    assert err[1] < err[0] / 20  # 4th order: about 4**4 = 256 for smooth problems


@pytest.mark.slow
def test_two_delays():
    @oi.model(states=["x", "y"], params=["a", "b", "c", "tau1", "tau2"], delays=["tau1", "tau2"])
    def two(t, y, p):
        return {"x": -p.a * om.lag(y.x, "tau1") + p.b * y.y,
                "y": -p.c * y.x * om.lag(y.y, "tau2") - 0.3 * y.y}

    hist = History.periodic([0.3, -0.2], [2.0, 1.5], [1.0, 0.5])
    rng = np.random.default_rng(5)
    p = [1.2, 0.8, 0.5, 1.0, 0.7]
    for t in (np.linspace(0.0, 8.0, 33), np.sort(rng.uniform(0.0, 8.0, 25))):
        g = rng.normal(size=(t.size, 2))
        ref = _sens_vjp(two, p, hist, t, g, t0=0.0, rtol=1e-12, atol=1e-14)
        assert _rel(dde_vjp(two, p, hist, t, g, t0=0.0).grad, ref) <= 1e-6


def test_bad_input():
    e = zoo.get("delay_exponential_decay")
    args = (e.model, e.params_array(), e.history, e.t)
    with pytest.raises(InputError, match=r"g: expected shape \(101, 1\) .* got shape \(101,\)"):
        dde_vjp(*args, np.zeros(101))
    with pytest.raises(InputError, match=r"g: expected shape \(101, 1\) .* got shape \(100, 1\)"):
        dde_vjp(*args, np.zeros((100, 1)))
    g = np.zeros((101, 1))
    g[7, 0] = np.nan
    with pytest.raises(InputError, match=r"g: must be finite, got nan at g\[7, 0\]"):
        dde_vjp(*args, g)
    with pytest.raises(InputError, match="g: expected a float array"):
        dde_vjp(*args, "zeros")
    with pytest.raises(InputError, match=r"Adjoint\(nsub=\.\.\.\): expected a positive integer, got 0"):
        dde_vjp(*args, np.zeros((101, 1)), gradient=oi.Adjoint(nsub=0))
    with pytest.raises(InputError, match=r"gradient: expected oi\.Adjoint\(nsub=\.\.\.\), got Forward"):
        dde_vjp(*args, np.zeros((101, 1)), gradient=oi.Forward())
    with pytest.raises(InputError, match=r"solver: the model has delays, so it needs a method of steps"):
        dde_vjp(*args, np.zeros((101, 1)), solver=oi.Dopri5())
    with pytest.raises(InputError, match="the delay 'tau' must be > 0"):
        dde_vjp(e.model, [-2.0, -2.0, 0.0], e.history, e.t, np.zeros((101, 1)))


# DDEProblem (the Bayes Op's forward problem) --------------------------------------------------

def _problem(history=None, rtol=1e-10):
    e = zoo.get("logistic_delay")
    return e, DDEProblem(e.model, e.t, e.history if history is None else history, e.t0,
                         solver=oi.MethodOfSteps(oi.Dopri5(rtol=rtol, atol=1e-12)))


def test_problem_vjps_match_the_sensitivities():
    e, pr = _problem()
    theta, phi = e.params_array(), e.history_params_array()
    g = np.random.default_rng(6).normal(size=(pr.n_times, pr.n_states))
    _, S, status = pr.python_solve(theta, phi, sens=True)
    assert status == 0
    ref = np.einsum("ti,tij->j", g, S)
    g_theta, g_phi, status = pr.python_vjp(theta, phi, g)
    assert status == 0 and g_theta.shape == (3,) and g_phi.shape == (3,)
    assert _rel(np.concatenate([g_theta, g_phi]), ref) <= 1e-6
    vjp = pr.numba_vjp()
    a, b = vjp(theta, phi, g)
    np.testing.assert_allclose(np.concatenate([a, b]), np.concatenate([g_theta, g_phi]), rtol=1e-13, atol=0)
    # failures: NaN, never an exception
    for bad_theta, bad_g in [([2.0, 1.5, -1.0], g), (theta, g[:-1]), (theta, np.full_like(g, np.inf))]:
        a, b = vjp(np.array(bad_theta), phi, bad_g)
        assert a.shape == (3,) and b.shape == (3,) and np.all(np.isnan(a)) and np.all(np.isnan(b))


def test_problem_python_vjp_failures_are_nan_with_a_status():
    e, pr = _problem()
    theta, phi = e.params_array(), e.history_params_array()
    g = np.ones((pr.n_times, 1))
    cases = [((2.0, 1.5, -1.0), phi, g, 6), (theta, phi, g[:-1], 6), (theta, phi[:2], g, 6),
             (theta, phi, np.full_like(g, np.nan), 4), ((2.0, np.inf, 1.0), phi, g, 4), (theta, phi, "x", 6)]
    for th, ph, gg, expected in cases:
        a, b, status = pr.python_vjp(np.asarray(th, dtype=float), ph, gg)
        assert status == expected
        assert a.shape == (3,) and b.shape == (3,) and np.all(np.isnan(a)) and np.all(np.isnan(b))


def test_problem_vjp_with_a_data_driven_history():
    e = zoo.get("logistic_delay")
    s = np.linspace(-2.0, 0.0, 41)
    hist = History.from_data(s, 2.0 - 0.5 * np.sin(3.0 * s)[:, None])
    _, pr = _problem(hist)
    theta = e.params_array()
    g = np.random.default_rng(7).normal(size=(pr.n_times, 1))
    _, S, _ = pr.python_solve(theta, np.zeros(0), sens=True)
    g_theta, g_phi, status = pr.python_vjp(theta, np.zeros(0), g)
    assert status == 0 and g_phi.shape == (0,)
    assert _rel(g_theta, np.einsum("ti,tij->j", g, S)) <= 1e-6
    _, _, status = pr.python_vjp(np.array([2.0, 1.5, 2.5]), np.zeros(0), g)  # tau beyond the history window
    assert status == 6


# The NUMBA case compiles three numba wrappers of the shared delay kernels for this problem (forward
# with and without sensitivities, the VJP: about 50 s of CPU on an empty cache): -m slow. Its path stays
# in the default suite through: FAST_COMPILE here (VJPOp's gradient equals the sensitivity gradient);
# tests/test_bayes_dde.py::test_numba_mode_of_a_new_delay_model_runs_the_shared_kernel[vjp] (the numba
# VJP that VJPOp's NUMBA dispatch calls, DDEProblem.numba_vjp, gives the Python VJP's bits) and [solve];
# tests/test_bayes_op.py::test_a_graph_on_the_shared_kernel_is_cached_and_loads_in_another_process[dde]
# (a NUMBA-mode graph with ODEOp and VJPOp on a delay model compiles, runs and is cached).
@pytest.mark.parametrize("mode", split([("FAST_COMPILE",), ("NUMBA",)], default=[("FAST_COMPILE",)]))
def test_dde_op_adjoint_gradient_equals_sensitivity_gradient(mode):
    """The Op on a delay model (delay exponential decay, affine history: theta incl. tau, phi):
    gradient through VJPOp (DDE-Find adjoint, corrected delay term) vs through the forward
    sensitivities, tight tolerances."""
    pytensor = pytest.importorskip("pytensor")
    import pytensor.tensor as pt

    from odeinfer.bayes.op import ODEOp

    e = oi.zoo.get("delay_exponential_decay")
    y_obs = np.random.default_rng(2).normal(1.0, 0.3, size=(e.t.size, e.model.n_states))
    prob = DDEProblem(e.model, e.t, e.history, e.t0, solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-10, atol=1e-12)))
    out = {}
    for grad, gradient in (("sensitivities", oi.Forward()), ("adjoint", oi.Adjoint())):
        th, ph = pt.dvector("theta"), pt.dvector("phi")
        y, _ = ODEOp(prob, gradient=gradient)(th, ph)
        logp = -0.5 * pt.sum((y - y_obs) ** 2)
        f = pytensor.function([th, ph], [logp, *pytensor.grad(logp, [th, ph])], mode=mode)
        out[grad] = f(e.params_array() * 1.05, np.asarray(e.history.values, float))
    assert out["adjoint"][0] == pytest.approx(out["sensitivities"][0], rel=1e-12)
    for a, b in zip(out["adjoint"][1:], out["sensitivities"][1:]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 * np.abs(b).max())
