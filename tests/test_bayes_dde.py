"""DDE likelihoods in the Bayesian stage: the Op over the DDE solver (values vs oi.solve and the
independent scipy method of steps, gradient vs central finite differences, NUMBA mode, NaN on bad
delays), build_model with delays and history parameters (log density vs a hand-written
scipy.stats computation, names), a short seeded NUTS run that recovers tau, and bad input."""


import numpy as np
import pytest

pytensor = pytest.importorskip("pytensor")
pm = pytest.importorskip("pymc")
import pytensor.tensor as pt  # noqa: E402
import scipy.stats as st  # noqa: E402

import odeinfer as oi  # noqa: E402
from odeinfer.bayes.dde_problem import DDEProblem, dde_op  # noqa: E402
from odeinfer.errors import DataError, InputError  # noqa: E402
from odeinfer.model import History  # noqa: E402
from odeinfer.results import Estimate  # noqa: E402


def _load_reference():
    import dde_reference  # tests/ is on sys.path (conftest.py)

    return dde_reference


ref = _load_reference()
TIGHT = dict(solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-11, atol=1e-12, max_steps=20_000)))


def _logdensity_fn(entry, y_obs, sigma, mode, **options):
    """Gaussian log density of y_obs through the DDE Op (+ a smooth prior term) and its gradient."""
    op = dde_op(entry.model, entry.t, entry.history, entry.t0, **options)
    theta, phi = pt.dvector("theta"), pt.dvector("phi")
    y, _ = op(theta, phi)
    logp = -0.5 * pt.sum(((y - y_obs) / sigma) ** 2) + pt.sum(pt.log(theta ** 2 + 1.0)) - 0.1 * pt.sum(phi ** 2)
    return pytensor.function([theta, phi], [logp, *pytensor.grad(logp, [theta, phi])], mode=mode)


def _central_fd(f, v, m, h_rel=1e-5):
    g = np.empty_like(v)
    for j in range(v.size):
        h = h_rel * max(abs(v[j]), 1e-3)
        vp, vm = v.copy(), v.copy()
        vp[j] += h
        vm[j] -= h
        g[j] = (f(vp[:m], vp[m:])[0] - f(vm[:m], vm[m:])[0]) / (2 * h)
    return g


def _noisy(entry, sigma_rel=0.3, rng=0):
    truth = ref.reference_solution(entry)
    return truth + sigma_rel * np.std(truth) * np.random.default_rng(rng).standard_normal(truth.shape)


@pytest.mark.parametrize("name", ["logistic_delay", "delay_exponential_decay"])
def test_gradient_matches_central_differences(name):
    """d logp / d (theta incl. tau, history parameters) through the Op's vector-Jacobian product
    (forward sensitivities of the DDE solver) vs central finite differences of the same log
    density (the oracle), to 1e-6 relative; at a point away from the truth."""
    entry = oi.zoo.get(name)
    p, phi = entry.params_array(), entry.history_params_array()
    f = _logdensity_fn(entry, _noisy(entry), 0.5, "FAST_COMPILE", **TIGHT)
    pv, hv = p * 1.03, phi * 0.97
    _, g_p, g_h = f(pv, hv)
    g = np.concatenate([g_p, g_h])
    g_fd = _central_fd(f, np.concatenate([pv, hv]), p.size)
    np.testing.assert_allclose(g, g_fd, rtol=1e-6, atol=1e-6 * np.abs(g_fd).max())
    assert abs(g[entry.model.params.index("tau")]) > 1e-3 * np.abs(g).max()  # the delay's gradient is in play


@pytest.mark.parametrize("name", ["logistic_delay", "delay_exponential_decay"])
def test_values_match_solve_and_reference(name):
    """Op output = oi.solve with the same options (same kernel: to 1e-12), and both agree with the
    independent scipy DOP853 method of steps (tests/dde_reference.py, rtol 1e-12) to 1e-8."""
    entry = oi.zoo.get(name)
    p, phi = entry.params_array(), entry.history_params_array()
    problem = DDEProblem(entry.model, entry.t, entry.history, entry.t0, **TIGHT)
    y, s, status = problem.python_solve(p, phi)
    sol = oi.solve(oi.Problem(entry.model, entry.t, history=entry.history, t0=entry.t0), p,
                   solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-11, atol=1e-12)), gradient=oi.Forward(error_control=False))
    assert status == 0
    np.testing.assert_allclose(y, sol.y, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(s, sol.sens, rtol=1e-12, atol=1e-14)
    truth = ref.reference_solution(entry)
    np.testing.assert_allclose(y, truth, rtol=1e-8, atol=1e-9 * np.abs(truth).max())


def test_numba_mode_matches_python_and_bad_delays_give_nan():
    """The NUMBA-mode graph (numba dispatch calling the DDE kernel) equals the Python perform (same
    kernel) to 1e-12; a delay <= 0 gives NaN value and gradient in both modes, no exception."""
    entry = oi.zoo.get("logistic_delay")
    p, phi = entry.params_array(), entry.history_params_array()
    y_obs = _noisy(entry)
    outs = []
    for mode in ("FAST_COMPILE", "NUMBA"):
        f = _logdensity_fn(entry, y_obs, 0.5, mode, solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-8, atol=1e-10,
                                                                                      max_steps=20_000)))
        outs.append(np.concatenate([np.atleast_1d(v) for v in f(p * 1.02, phi)]))
        bad = p.copy()
        bad[entry.model.params.index("tau")] = -0.5
        assert all(np.isnan(v).all() for v in f(bad, phi))
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-12)


def test_data_driven_history_window_limits_the_delay():
    """With a data-driven history over [-1.5, 0], tau = 1 solves; tau = 2 would read the spline
    outside its data: NaN (the sampler rejects it). The known history's value at t0 is x0."""
    entry = oi.zoo.get("delay_exponential_decay")
    s = np.linspace(-1.5, 0.0, 16)
    hist = History.from_data(s, 1.5 * s + 4.0)  # the zoo's affine history, sampled
    problem = DDEProblem(entry.model, entry.t, hist, 0.0, **TIGHT)
    assert problem.n_init == 0
    y, _, status = problem.python_solve(entry.params_array(), np.zeros(0))
    assert status == 0
    np.testing.assert_allclose(y, ref.reference_solution(entry), rtol=1e-8, atol=1e-8)
    p2 = entry.params_array()
    p2[2] = 2.0
    assert np.isnan(problem.python_solve(p2, np.zeros(0))[0]).all()


# ---- build_model ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def logistic_data():
    entry = oi.zoo.get("logistic_delay")
    t = entry.t[::4]
    truth = ref.reference_solution(entry, t)
    y = truth + 0.1 * np.random.default_rng(5).standard_normal(truth.shape)
    return entry, oi.Data(t, y, ["x"], t0=0.0)


def _priors():
    return {"theta0": pm.LogNormal.dist(np.log(2.0), 0.5), "theta1": pm.LogNormal.dist(np.log(1.5), 0.5),
            "tau": pm.LogNormal.dist(0.0, 0.5), "b[x]": pm.Normal.dist(2.0, 1.0),
            "sigma": pm.HalfNormal.dist(0.5)}


def test_build_logp_matches_scipy_and_names(logistic_data):
    """Periodic history with A, omega fixed and b free: free variables, deterministics and dims;
    the log density equals a hand-written scipy.stats sum with the trajectory from the independent
    scipy method of steps (rtol 1e-12)."""
    entry, data = logistic_data
    m = oi.bayes.build_model(entry.model, data, priors=_priors(), history=entry.history,
                             fixed={"A[x]": -0.5, "omega[x]": 3.0}, **TIGHT)
    assert [v.name for v in m.free_RVs] == ["theta0", "theta1", "tau", "b[x]", "sigma[x]"]
    assert m.named_vars_to_dims["history_params"] == ("history_param",)
    assert list(m.coords["history_param"]) == ["A[x]", "omega[x]", "b[x]"]
    point = {"theta0": 1.9, "theta1": 1.45, "tau": 1.1, "b[x]": 2.2, "sigma[x]": 0.12}
    for k, v in point.items():
        m.set_initval(m[k], v)
    logp = float(m.compile_logp(jacobian=False, mode="FAST_COMPILE")(m.initial_point()))
    e2 = oi.zoo.get("logistic_delay")
    hist = History.periodic(-0.5, 3.0, 2.2)
    entry2 = type(e2)(name=e2.name, model=e2.model, params={"theta0": 1.9, "theta1": 1.45, "tau": 1.1},
                      history=hist, t0=0.0, t=np.asarray(data.t), source="test")
    z = ref.reference_solution(entry2)
    lp = (st.lognorm.logpdf(1.9, s=0.5, scale=2.0) + st.lognorm.logpdf(1.45, s=0.5, scale=1.5)
          + st.lognorm.logpdf(1.1, s=0.5, scale=1.0) + st.norm.logpdf(2.2, 2.0, 1.0)
          + st.halfnorm.logpdf(0.12, scale=0.5) + st.norm.logpdf(np.asarray(data.y), z, 0.12).sum())
    np.testing.assert_allclose(logp, lp, rtol=1e-9)
    b_value = m.rvs_to_values[m["b[x]"]]
    x0 = pytensor.function([b_value], m.replace_rvs_by_values([m["x0"]])[0], mode="FAST_COMPILE")
    assert float(x0(2.2)[0]) == pytest.approx(2.2)  # y(t0) = A sin(0) + b


def test_priors_from_init_include_delay_and_history(logistic_data):
    """An estimate of the DDE model named as AdjointDDE names it (params, then 'A[x]', 'omega[x]',
    'b[x]') gives every prior; the delay's is log-normal (positive)."""
    entry, data = logistic_data
    names = list(entry.model.params) + ["A[x]", "omega[x]", "b[x]"]
    values = np.r_[entry.params_array(), entry.history_params_array()]
    est = Estimate("AdjointDDE", entry.model, names, values, np.diag((0.05 * values) ** 2), "converged",
                   nobs=data.t.size, sigma={"x": 0.1})
    m = oi.bayes.build_model(entry.model, data, init=est, history=entry.history)
    assert [v.name for v in m.free_RVs] == names + ["sigma[x]"]
    tau = m["tau"]
    assert tau.owner.op.name == "lognormal"
    lp = pm.logp(tau, np.array([-0.1, 1.0])).eval()
    assert np.isneginf(lp[0]) and np.isfinite(lp[1])


def test_sampling_recovers_tau(logistic_data):
    """2 chains x 200 draws (tune 200, NUMBA mode, one process) on simulated logistic-delay data
    (sigma 0.1, 26 points): the 94% equal-tailed interval of tau covers the true tau = 1, no
    divergences; posterior-predictive trajectories come from the DDE solver."""
    entry, data = logistic_data
    m = oi.bayes.build_model(entry.model, data, priors=_priors(), history=entry.history,
                             fixed={"A[x]": -0.5, "omega[x]": 3.0})
    idata = oi.bayes.sample(m, draws=200, tune=200, chains=2, cores=1, rng=3, n_trajectory_times=11)
    tau = idata.posterior["tau"].values.ravel()
    lo, hi = np.quantile(tau, [0.03, 0.97])
    assert lo < 1.0 < hi and hi - lo < 0.2
    assert int(idata.sample_stats["diverging"].sum()) == 0
    traj = idata.posterior_predictive["trajectory"]
    assert traj.shape == (2, 200, 11, 1) and np.isfinite(traj.values).all()
    assert float(traj.values[:, :, 0, 0].std()) > 0  # x(t0) = b varies with the draw


# ---- bad input ---------------------------------------------------------------------------------

def test_prior_for_history_parameter_of_a_known_history(logistic_data):
    entry, data = logistic_data
    with pytest.raises(InputError, match=r"'b\[x\]' is a history parameter, but the history is known"):
        oi.bayes.build_model(entry.model, data, history=[2.0], priors={**_priors()})
    with pytest.raises(InputError, match=r"fixed: 'A\[x\]' is a history parameter, but the history is known"):
        oi.bayes.build_model(entry.model, data, history=[2.0], fixed={"A[x]": 1.0})


def test_delay_prior_must_be_positive(logistic_data):
    entry, data = logistic_data
    priors = {**_priors(), "tau": pm.Normal.dist(1.0, 0.5)}
    with pytest.raises(InputError, match=r"priors\['tau'\]: 'tau' is a delay, so its prior must be on positive"):
        oi.bayes.build_model(entry.model, data, history=History.constant(2.0), priors=priors)


def test_history_and_x0_misuse(logistic_data):
    entry, data = logistic_data
    lv = oi.zoo.get("linear_decay")
    with pytest.raises(InputError, match="has no delays, so it takes no history"):
        oi.bayes.build_model(lv.model, oi.Data(data.t, np.c_[data.y, data.y], list(lv.model.states)),
                             history=[1.0, 1.0])
    with pytest.raises(InputError, match="x0: model 'logistic_delay' has delays"):
        oi.bayes.build_model(entry.model, data, x0=[2.0], priors=_priors())
    with pytest.raises(InputError, match=r"priors: 'x0\[x\]': model 'logistic_delay' has delays"):
        oi.bayes.build_model(entry.model, data, history=[2.0], priors={"x0[x]": pm.Normal.dist(2, 1)})
    with pytest.raises(InputError, match="a function of time needs a window"):
        oi.bayes.build_model(entry.model, data, history=lambda s: [2.0], priors=_priors())
    with pytest.raises(InputError, match="history: has 2 state"):
        oi.bayes.build_model(entry.model, data, history=History.constant([1.0, 2.0]), priors=_priors())


def test_missing_history_priors_and_bad_fixed_delay(logistic_data):
    entry, data = logistic_data
    priors = {k: v for k, v in _priors().items() if k != "b[x]"}
    with pytest.raises(InputError, match=r"no prior for \['A\[x\]', 'omega\[x\]', 'b\[x\]'\]"):
        oi.bayes.build_model(entry.model, data, history=entry.history, priors=priors)
    with pytest.raises(InputError, match="the delay 'tau' must be > 0"):
        oi.bayes.build_model(entry.model, data, history=[2.0], fixed={"tau": 0.0},
                             priors={k: v for k, v in priors.items() if k != "tau"})
    s = np.linspace(-0.5, 0.0, 6)
    with pytest.raises(DataError, match="needs it from t0 - tau"):
        oi.bayes.build_model(entry.model, data, history=History.from_data(s, 2.0 + 0 * s), fixed={"tau": 1.0},
                             priors={k: v for k, v in priors.items() if k != "tau"})


@pytest.mark.parametrize("what", ["solve", "vjp"])
def test_numba_mode_of_a_new_delay_model_runs_the_shared_kernel(monkeypatch, what):
    """A delay model whose own kernels are not compiled: the NUMBA implementation calls the shared
    (compiled-once-per-machine) ``dde_solve`` / ``dde_adjoint_vjp`` instead of compiling the model's,
    and gives the Python path's values bit for bit (the tiers' equality: tests/test_shared_tier.py)."""
    import os
    import time

    c = 1e-9 * (1 + (time.time_ns() + os.getpid()) % 10**6)  # a model no cache has seen
    model = oi.Model.from_equations({"x": f"r*x*(1 - lag(x, tau)) + {c!r}"}, params=["r", "tau"], delays=["tau"],
                                    name="fresh_logistic_delay")
    monkeypatch.setenv("ODEINFER_TIERED", "shared")
    t = np.linspace(0.0, 8.0, 17)
    problem = DDEProblem(model, t, History.constant([0.5]), 0.0,
                         solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-8, atol=1e-10)))
    p, phi = np.array([1.2, 1.0]), np.array([0.5])  # a constant history's value is its parameter
    if what == "solve":
        y, s = problem.numba_solve(sens=True)(p, phi)
        got = np.concatenate([y.ravel(), s.ravel()])
        y_ref, s_ref, status = problem.python_solve(p, phi, sens=True)
        ref_ = np.concatenate([y_ref.ravel(), s_ref.ravel()])
        names = ("dde_solve",)
    else:
        g = np.linspace(-1.0, 1.0, t.size).reshape(t.size, 1)
        got = np.concatenate(problem.numba_vjp()(p, phi, g))
        g_theta, g_phi, status = problem.python_vjp(p, phi, g)
        ref_ = np.concatenate([g_theta, g_phi])
        names = ("dde_solve", "dde_adjoint_vjp")
    assert status == 0 and np.all(np.isfinite(got))
    module = model.compile().module
    assert not any(getattr(module, name).overloads for name in names), "a model kernel was compiled"
    mismatch = np.flatnonzero(got != ref_)
    assert mismatch.size == 0, f"{mismatch.size} of {got.size} entries differ from the Python path"
