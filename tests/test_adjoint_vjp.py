"""Adjoint vector-Jacobian products of ODE solutions (odeinfer.solve.adjoint) and the Op's
``gradient=oi.Adjoint()`` path (VJPOp), against independent oracles: the analytic solution of
linear decay, forward sensitivities at tight tolerances, and central finite differences."""

import pickle

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import InputError
from odeinfer.solve import Status


@oi.model(states=["x"], params=["k"])
def decay(t, y, p):
    return {"x": -p.k * y.x}


def _entry(name):
    e = oi.zoo.get(name)
    return e, np.array(list(e.params.values())), np.array(list(e.x0.values())), np.asarray(e.t, float)


def _sens_vjp(model, p, x0, t, g, t0=None):
    """Reference: forward sensitivities at rtol 1e-12 contracted with g."""
    s = oi.solve(oi.Problem(model, t, x0=x0, t0=t0), p, solver=oi.Dopri5(rtol=1e-12, atol=1e-14),
                 gradient=oi.Forward())
    return np.einsum("ik,ikj->j", g, s.sens)


def adjoint_vjp(model, p, x0, t, g, t0=None, **options):
    """The bound adjoint (``oi.bind(..., gradient=oi.Adjoint())``) called once: the gradient as a
    Series indexed by the parameters then ``"<state>(t0)"``; a failed solve fails the test."""
    import pandas as pd

    vjp = oi.bind(oi.Problem(model, t, t0=t0), solver=oi.Dopri5(**options), gradient=oi.Adjoint())
    grad, status = vjp(np.asarray(p, dtype=float), np.asarray(x0, dtype=float), np.array(g, dtype=float))
    assert status == Status.SUCCESS
    return pd.Series(grad.copy(), index=[*model.params, *(f"{s}(t0)" for s in model.states)])


def test_linear_decay_matches_analytic_derivatives():
    """x(t) = x0 exp(-k (t - t0)): d x / d k = -(t - t0) x(t), d x / d x0 = exp(-k (t - t0)).
    Outputs at t0 (a jump at the very end of the backward pass), a repeated time and t0 < t[0]."""
    k, x0, t0 = 0.7, 2.0, -0.5
    t = np.array([-0.5, 0.0, 0.3, 0.3, 1.0, 2.5])
    g = np.array([[1.5], [0.2], [-1.0], [0.4], [2.0], [0.7]])
    grad = adjoint_vjp(decay, [k], [x0], t, g, t0=t0, rtol=1e-10, atol=1e-12)
    e = np.exp(-k * (t - t0))
    np.testing.assert_allclose(grad["k"], np.sum(g[:, 0] * -(t - t0) * x0 * e), rtol=1e-8)
    np.testing.assert_allclose(grad["x(t0)"], np.sum(g[:, 0] * e), rtol=1e-8)


def test_outputs_only_at_t0():
    """No step at all: the gradient is sum(g) for x0 and zero for k."""
    grad = adjoint_vjp(decay, [0.7], [2.0], [1.0, 1.0], [[1.0], [2.0]])
    assert grad["x(t0)"] == 3.0 and grad["k"] == 0.0


@pytest.mark.parametrize("name", ["lotka_volterra", "fitzhugh_nagumo"])
def test_matches_forward_sensitivities(name):
    """Adjoint at rtol 1e-10 vs forward sensitivities at rtol 1e-12: 1e-6 relative (issue 6)."""
    e, p, x0, t = _entry(name)
    g = np.random.default_rng(3).normal(size=(t.size, e.model.n_states))
    ref = _sens_vjp(e.model, p, x0, t, g, e.t0)
    grad = adjoint_vjp(e.model, p, x0, t, g, t0=e.t0, rtol=1e-10, atol=1e-12).to_numpy()
    np.testing.assert_allclose(grad, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())


def test_error_shrinks_with_the_tolerance():
    """The backward pass runs on the forward steps: its error follows rtol (default 1e-6 gives
    about 1e-5 relative on Lotka-Volterra, 1e-8 about 1e-7)."""
    e, p, x0, t = _entry("lotka_volterra")
    g = np.random.default_rng(1).normal(size=(t.size, 2))
    ref = _sens_vjp(e.model, p, x0, t, g, e.t0)
    errs = [np.abs(adjoint_vjp(e.model, p, x0, t, g, t0=e.t0, rtol=r, atol=r * 1e-2).to_numpy() - ref).max()
            / np.abs(ref).max() for r in (1e-6, 1e-8)]
    assert errs[0] < 1e-4 and errs[1] < 1e-6 and errs[1] < errs[0] / 20


def test_central_finite_differences():
    """d/d(theta, x0) of sum_i g_i . x(t_i) vs central differences of the solution (rtol 1e-12)."""
    e, p, x0, t = _entry("population")
    g = np.random.default_rng(5).normal(size=(t.size, e.model.n_states))
    v = np.concatenate([p, x0])

    def f(v):
        y = oi.solve(oi.Problem(e.model, t, x0=v[p.size:], t0=e.t0), v[:p.size],
                     solver=oi.Dopri5(rtol=1e-12, atol=1e-14)).y
        return np.sum(g * y)

    fd = np.empty_like(v)
    for j in range(v.size):
        h = 1e-5 * max(abs(v[j]), 1e-3)
        vp, vm = v.copy(), v.copy()
        vp[j] += h
        vm[j] -= h
        fd[j] = (f(vp) - f(vm)) / (2 * h)
    grad = adjoint_vjp(e.model, p, x0, t, g, t0=e.t0, rtol=1e-10, atol=1e-12).to_numpy()
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())


def test_fast_path_status_and_pickle():
    t = np.linspace(0, 2, 5)
    vjp = oi.bind(oi.Problem(decay, t), gradient=oi.Adjoint())
    g = np.ones((5, 1))
    grad, status = vjp(np.array([0.5]), np.array([1.0]), g)
    assert status == 0 and np.isfinite(grad).all()
    _, status = vjp(np.array([0.5, 1.0]), np.array([1.0]), g)
    assert status == oi.solve.Status.BAD_INPUT
    _, status = vjp(np.array([0.5]), np.array([1.0]), np.ones((4, 1)))  # g: (n_times, n_states) = (5, 1)
    assert status == oi.solve.Status.BAD_INPUT
    _, status = vjp(np.array([0.5]), np.array([1.0]), np.ones((5, 2)))
    assert status == oi.solve.Status.BAD_INPUT
    clone = pickle.loads(pickle.dumps(vjp))
    np.testing.assert_array_equal(clone(np.array([0.5]), np.array([1.0]), g)[0], vjp(np.array([0.5]),
                                  np.array([1.0]), g)[0])


def test_bad_input():
    """The adjoint is a bound solver only (its call does not validate: a g of the wrong shape is a
    BAD_INPUT status, tested above); its options and the problem validate before any work."""
    t = np.linspace(0, 1, 4)
    prob = oi.Problem(decay, t)
    with pytest.raises(InputError, match=r"Adjoint\(nsub=\.\.\.\): expected a positive integer, got 0"):
        oi.bind(prob, gradient=oi.Adjoint(nsub=0))
    with pytest.raises(InputError, match=r"gradient: solve\(\) returns states and forward sensitivities; .*"
                                         r"oi\.bind\(problem, gradient=oi\.Adjoint\(\)\)"):
        oi.solve(oi.Problem(decay, t, x0=[1.0]), [0.5], gradient=oi.Adjoint())
    with pytest.raises(InputError, match=r"gradient: oi\.Adjoint\(\) needs an adaptive solver of one method.*"
                                         r"got Auto\("):
        oi.bind(prob, solver=oi.Auto(), gradient=oi.Adjoint())
    with pytest.raises(InputError, match=r"gradient: oi\.Adjoint\(\) needs an adaptive solver.*fixed_step=0\.1"):
        oi.bind(prob, solver=oi.Dopri5(fixed_step=0.1), gradient=oi.Adjoint())
    with pytest.raises(InputError, match=r"params: \['kk'\] is not a parameter of the model"):
        oi.solve(oi.Problem(decay, t, x0=[1.0]), {"kk": 0.5})


def test_jump_in_the_right_hand_side_is_refused():
    """Like forward sensitivities, the adjoint would miss the jump term of a moving switch."""
    e = oi.zoo.get("riccati")
    with pytest.raises(InputError, match="move a jump"):
        oi.bind(oi.Problem(e.model, e.t, t0=e.t0), gradient=oi.Adjoint())


def test_failed_forward_solve_returns_a_failure_status():
    @oi.model(states=["x"], params=["a"])
    def blowup(t, y, p):
        return {"x": p.a * y.x ** 2}

    vjp = oi.bind(oi.Problem(blowup, [0.0, 2.0]), solver=oi.Dopri5(max_steps=500), gradient=oi.Adjoint())
    _, status = vjp(np.array([1.0]), np.array([1.0]), np.array([[0.0], [1.0]]))
    assert status in (Status.STEP_TOO_SMALL, Status.MAX_STEPS, Status.NON_FINITE)


# --- the Op ----------------------------------------------------------------------------------

pytensor = pytest.importorskip("pytensor")


@pytest.mark.parametrize("mode", ["FAST_COMPILE", "NUMBA"])
def test_op_adjoint_gradient_equals_sensitivity_gradient(mode):
    """d logp / d(theta, x0) through VJPOp vs through the forward sensitivities (tight tolerances:
    both are the exact gradient up to ~1e-8), in Python and in PyTensor's NUMBA mode."""
    import pytensor.tensor as pt

    from odeinfer.bayes import ode_op

    e, p, x0, t = _entry("lotka_volterra")
    y_obs = np.random.default_rng(0).normal(20.0, 5.0, size=(t.size, 2))
    out = {}
    for grad, gradient in (("sensitivities", oi.Forward()), ("adjoint", oi.Adjoint())):
        op = ode_op(e.model, t, e.t0, gradient=gradient, solver=oi.Dopri5(rtol=1e-10, atol=1e-12))
        th, xx = pt.dvector("theta"), pt.dvector("x0")
        y, _ = op(th, xx)
        logp = -0.5 * pt.sum((y - y_obs) ** 2)
        f = pytensor.function([th, xx], [logp, *pytensor.grad(logp, [th, xx])], mode=mode)
        out[grad] = f(p * 1.02, x0)
    assert out["adjoint"][0] == pytest.approx(out["sensitivities"][0], rel=1e-12)
    for a, b in zip(out["adjoint"][1:], out["sensitivities"][1:]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7 * np.abs(b).max())


def test_vjp_op_nan_on_failure_and_bad_options():
    from odeinfer.bayes.op import ODEOp, ODEProblem, VJPOp

    e, p, x0, t = _entry("lotka_volterra")
    prob = ODEProblem(e.model, t, e.t0, solver=oi.Dopri5(max_steps=5))
    g_theta, g_x0, status = prob.python_vjp(p, x0, np.ones((t.size, 2)))
    assert status != 0 and np.isnan(g_theta).all() and np.isnan(g_x0).all()
    g_theta, _, status = prob.python_vjp(p, x0 * np.nan, np.ones((t.size, 2)))
    assert status == oi.solve.Status.NON_FINITE and np.isnan(g_theta).all()
    assert str(VJPOp(prob)) == "VJPOp(lotka_volterra)"
    with pytest.raises(InputError, match=r"gradient: expected oi\.Forward\(\) or oi\.Adjoint\(\), got 'fd'"):
        ODEOp(prob, gradient="fd")
    with pytest.raises(InputError, match=r"oi\.Adjoint\(\) runs on the Dormand-Prince steps.*solver=Rodas\("):
        ODEOp(ODEProblem(e.model, t, e.t0, solver=oi.Rodas()), gradient=oi.Adjoint())


def _ops(pm_model):
    from odeinfer.bayes.op import ODEOp

    try:  # newer PyTensor (its old location warns that it will go)
        from pytensor.graph.traversal import ancestors
    except ImportError:
        from pytensor.graph.basic import ancestors

    y = pm_model["y_hat"]
    return [v.owner.op for v in ancestors([y]) if v.owner and isinstance(v.owner.op, ODEOp)]


def test_build_model_gradient_option():
    """gradient=oi.Adjoint() gives the same log density gradient as oi.Forward(); None picks the
    adjoint only from ADJOINT_FROM Op inputs; a bad value is named."""
    pm = pytest.importorskip("pymc")
    from odeinfer.bayes.build import ADJOINT_FROM

    e, p, x0, t = _entry("lotka_volterra")
    data = oi.simulate(e.model, p, x0, t, t0=e.t0, noise=1.0, rng=1).data
    priors = {name: pm.HalfNormal.dist(2.0) for name in e.model.params}
    priors.update({"x0": pm.HalfNormal.dist(50.0), "sigma": pm.HalfNormal.dist(2.0)})
    grads = {}
    sens = oi.Forward(error_control=False)
    for g, gradient in (("sensitivities", sens), ("adjoint", oi.Adjoint()), ("auto", None)):
        m = oi.bayes.build_model(e.model, data, priors=priors, gradient=gradient,
                                 solver=oi.Dopri5(rtol=1e-10, atol=1e-12))
        assert [op.gradient for op in _ops(m)] == [sens if gradient is None else gradient]
        point = m.initial_point()
        grads[g] = m.compile_dlogp()(point)
    assert e.model.n_params + e.model.n_states < ADJOINT_FROM
    np.testing.assert_allclose(grads["adjoint"], grads["sensitivities"], rtol=1e-6,
                               atol=1e-7 * np.abs(grads["sensitivities"]).max())
    with pytest.raises(InputError, match=r"gradient: expected None, oi\.Forward\(\.\.\.\) or oi\.Adjoint\(\.\.\.\), "
                                         r"got 'exact'"):
        oi.bayes.build_model(e.model, data, priors=priors, gradient="exact")
    with pytest.raises(InputError, match=r"gradient: oi\.Adjoint\(\) runs on the Dormand-Prince steps.*solver=Rodas\(.*"
                                         r"use solver=oi\.Dopri5\(\.\.\.\)"):
        oi.bayes.build_model(e.model, data, priors=priors, gradient=oi.Adjoint(), solver=oi.Rodas())


def test_auto_gradient_choice():
    """None: the adjoint for dopri5 ODE problems with >= ADJOINT_FROM inputs, else forward
    sensitivities on the states' steps (rodas, few inputs, delay models); a given value is kept."""
    from odeinfer.bayes.build import ADJOINT_FROM, _op_gradient
    from odeinfer.bayes.dde_problem import DDEProblem
    from odeinfer.bayes.op import ODEProblem

    n = (ADJOINT_FROM + 1) // 2  # a chain x_i' = k_i (x_{i-1} - x_i): n params + n initial states
    chain = oi.Model.from_equations({f"x{i}": f"k{i}*({'x' + str(i - 1) if i else '1'} - x{i})" for i in range(n)},
                                    params=[f"k{i}" for i in range(n)], name="chain")
    t = np.linspace(0, 1, 5)
    assert 2 * n >= ADJOINT_FROM
    sens = oi.Forward(error_control=False)
    assert _op_gradient(None, ODEProblem(chain, t)) == oi.Adjoint()
    assert _op_gradient(None, ODEProblem(chain, t, solver=oi.Rodas())) == sens
    assert _op_gradient(None, ODEProblem(oi.zoo.get("lotka_volterra").model, t)) == sens
    e = oi.zoo.get("hiv")
    assert _op_gradient(None, DDEProblem(e.model, e.t, e.history, e.t0)) == sens
    assert _op_gradient(oi.Forward(), ODEProblem(chain, t)) == oi.Forward()


def test_numba_vjp_grows_its_step_record():
    """The NUMBA-mode VJP starts with a 512-row step record and reruns with more rows when the solve
    needs more steps: a 1000+-step solve gives the Python VJP's gradient; running out of max_steps
    gives NaN in both."""
    from odeinfer.bayes.op import ODEProblem

    e, p, x0, _ = _entry("lotka_volterra")
    t = np.linspace(0.0, 300.0, 31)
    g = np.random.default_rng(8).normal(size=(t.size, 2))
    prob = ODEProblem(e.model, t, 0.0, solver=oi.Dopri5(rtol=1e-9, atol=1e-11))
    g_theta, g_x0, status = prob.python_vjp(p, x0, g)
    assert status == 0 and prob._vjp().info[1] > 1000  # attempted steps: the record had to grow
    n_theta, n_x0 = prob.numba_vjp()(p, x0, g)
    np.testing.assert_allclose(np.concatenate([n_theta, n_x0]), np.concatenate([g_theta, g_x0]), rtol=1e-12)
    short = ODEProblem(e.model, t, 0.0, solver=oi.Dopri5(rtol=1e-9, atol=1e-11, max_steps=700))
    assert np.isnan(short.python_vjp(p, x0, g)[0]).all() and np.isnan(short.numba_vjp()(p, x0, g)[0]).all()


# --- Rodas: the discrete adjoint of the Rosenbrock steps (stiff models) ----------------------------------------
def rodas_vjp(model, p, x0, t, g, t0=None, **options):
    vjp = oi.bind(oi.Problem(model, t, t0=t0), solver=oi.Rodas(**options), gradient=oi.Adjoint())
    grad, status = vjp(np.asarray(p, dtype=float), np.asarray(x0, dtype=float), np.array(g, dtype=float))
    assert status == Status.SUCCESS
    return grad.copy(), vjp


robertson = oi.Model.from_equations(
    {"a": "-k1*a + k3*b*c", "b": "k1*a - k3*b*c - k2*b**2", "c": "k2*b**2"}, params=["k1", "k2", "k3"])
forced = oi.Model.from_equations({"x": "-k*x + a*sin(w*t)", "v": "x - c*v"}, params=["k", "a", "w", "c"])


def _rodas_sens_vjp(model, p, x0, t, g, t0=None):
    """Reference: forward sensitivities (the variational equations) with Rodas at rtol 1e-12, contracted with g."""
    s = oi.solve(oi.Problem(model, t, x0=x0, t0=t0), p, solver=oi.Rodas(rtol=1e-12, atol=1e-14),
                 gradient=oi.Forward())
    return np.einsum("ik,ikj->j", g, s.sens)


def test_rodas_adjoint_of_linear_decay_matches_the_analytic_derivatives():
    """As test_linear_decay_matches_analytic_derivatives, on Rodas's steps: outputs at t0, a repeated time."""
    k, x0, t0 = 0.7, 2.0, -0.5
    t = np.array([-0.5, 0.0, 0.3, 0.3, 1.0, 2.5])
    g = np.array([[1.5], [0.2], [-1.0], [0.4], [2.0], [0.7]])
    grad, vjp = rodas_vjp(decay, [k], [x0], t, g, t0=t0, rtol=1e-10, atol=1e-12)
    e = np.exp(-k * (t - t0))
    np.testing.assert_allclose(grad, [np.sum(g[:, 0] * -(t - t0) * x0 * e), np.sum(g[:, 0] * e)], rtol=1e-8)
    np.testing.assert_allclose(vjp.y[:, 0], x0 * e, rtol=1e-9)


@pytest.mark.parametrize("case", ["lotka_volterra", "fitzhugh_nagumo", "robertson", "forced"])
def test_rodas_adjoint_matches_forward_sensitivities(case):
    """Rodas's adjoint at rtol 1e-10 against forward sensitivities at rtol 1e-12: 1e-6 relative. Robertson is stiff
    (rates 0.04, 1e4, 3e7, output times over 6 decades); the forced model's right-hand side depends on t (the f_t
    terms of the Rosenbrock stages)."""
    if case == "robertson":
        model, p, x0, t0 = robertson, np.array([0.04, 3e7, 1e4]), np.array([1.0, 0.0, 0.0]), 0.0
        t = np.geomspace(1e-4, 1e2, 13)
    elif case == "forced":
        model, p, x0, t0 = forced, np.array([0.8, 1.5, 2.0, 0.3]), np.array([1.0, 0.0]), 0.0
        t = np.linspace(0.5, 10.0, 12)
    else:
        e, p, x0, t = _entry(case)
        model, t0 = e.model, e.t0
    g = np.random.default_rng(5).normal(size=(t.size, model.n_states))
    ref = _rodas_sens_vjp(model, p, x0, t, g, t0)
    grad, _ = rodas_vjp(model, p, x0, t, g, t0=t0, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grad, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())


def test_rodas_adjoint_error_follows_the_tolerance():
    """The sweep differentiates the computed solution: its error against the exact gradient is the solution's, so it
    shrinks with rtol (Robertson)."""
    p, x0, t = np.array([0.04, 3e7, 1e4]), np.array([1.0, 0.0, 0.0]), np.geomspace(1e-4, 1e2, 13)
    g = np.random.default_rng(2).normal(size=(t.size, 3))
    ref = _rodas_sens_vjp(robertson, p, x0, t, g)
    errs = [np.abs(rodas_vjp(robertson, p, x0, t, g, rtol=r, atol=r * 1e-4)[0] - ref).max() / np.abs(ref).max()
            for r in (1e-5, 1e-8)]
    assert errs[0] < 1e-2 and errs[1] < 1e-5 and errs[1] < errs[0] / 20


def test_rodas_record_then_sweep_is_the_call_and_the_record_grows():
    """The forward pass and the sweep one at a time give the one call's gradient, bit for bit; the step record
    starts small and grows to the steps taken (Robertson at rtol 1e-10: 2857 steps), up to max_steps."""
    p, x0, t = np.array([0.04, 3e7, 1e4]), np.array([1.0, 0.0, 0.0]), np.geomspace(1e-4, 1e2, 13)
    g = np.random.default_rng(2).normal(size=(t.size, 3))
    vjp = oi.bind(oi.Problem(robertson, t), solver=oi.Rodas(rtol=1e-10, atol=1e-14), gradient=oi.Adjoint())
    assert vjp.rec.shape[0] == 1024
    grad, status = vjp(p, x0, g)
    one = grad.copy()
    assert status == Status.SUCCESS and vjp.rec.shape[0] == 8192 and vjp.info[1] > 1024
    assert vjp.record(p, x0) == Status.SUCCESS
    y = vjp.y.copy()
    grad, status = vjp.sweep(p, g)
    assert status == Status.SUCCESS and np.array_equal(grad, one)
    np.testing.assert_allclose(y, oi.solve(oi.Problem(robertson, t, x0=x0), p,
                                           solver=oi.Rodas(rtol=1e-10, atol=1e-14)).y, rtol=0, atol=0)
    short = oi.bind(oi.Problem(robertson, t), solver=oi.Rodas(rtol=1e-10, atol=1e-14, max_steps=500),
                    gradient=oi.Adjoint())
    assert short(p, x0, g)[1] == Status.MAX_STEPS and short.rec.shape[0] == 500
