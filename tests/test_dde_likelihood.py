"""AdjointDDE on delay models with observables and noise models (maximum likelihood).

References: the method-of-steps solution of scipy's DOP853 at rtol 1e-12 (tests/dde_reference.py)
for the NLL, written out from PEtab's definition; AdjointDDE's least-squares fit of the same
data observed as the state (for Gaussian noise with one sd the maximum-likelihood parameters are
the least-squares ones and sd_ML = sqrt(RSS / n)); central finite differences of the NLL.
(Embedding cannot be the reference here: it fits ODE models only.)
"""

import math

import numpy as np
import pytest

import odeinfer as oi
from dde_reference import logistic, method_of_steps
from odeinfer.errors import DataError, EquationParseError, InputError

Z = oi.zoo.get("logistic_delay")
HIST = oi.History.periodic(-0.5, 3.0, 2.0)
FIXED_HIST = {"A[x]": -0.5, "omega[x]": 3.0, "b[x]": 2.0}


def reference_x(theta0, theta1, tau, t, A=-0.5, omega=3.0, b=2.0):
    p = {"theta0": theta0, "theta1": theta1}
    ev = method_of_steps(lambda s, x, lags: logistic(s, x, lags, p), lambda s: np.array([A * np.sin(omega * s) + b]),
                         [tau], 0.0, float(t[-1]))
    return ev(t)[:, 0]


def scaled_data():
    rng = np.random.default_rng(0)
    x = reference_x(2.0, 1.5, 1.0, Z.t)
    y = 1.5 * x + 0.3 + 0.05 * rng.standard_normal(Z.t.size)
    m = Z.model.observe({"obs": "s*x + off"}, noise=oi.Normal(sigma="sd"), params=["s", "off", "sd"])
    return m, oi.Data(Z.t, y, "obs")


START = {"theta0": 1.5, "theta1": 1.2, "tau": 0.7, "s": 1.0, "off": 0.0, "sd": 0.1}


def test_scaled_offset_observable_nll_matches_the_reference_solution():
    m, d = scaled_data()
    fit = oi.AdjointDDE().fit(m, d, history=HIST, start=START, fixed=FIXED_HIST)
    assert fit.converged, fit.message
    assert list(fit.names) == ["theta0", "theta1", "tau", "s", "off", "sd"]
    v = fit.params
    x = reference_x(v["theta0"], v["theta1"], v["tau"], Z.t)
    r = (d.y[:, 0] - (v["s"] * x + v["off"])) / v["sd"]
    n = Z.t.size
    nll_ref = 0.5 * float(r @ r) + n * math.log(v["sd"]) + 0.5 * n * math.log(2 * math.pi)
    assert fit.nll == pytest.approx(nll_ref, abs=1e-6)
    assert fit.extras["loglik"] == pytest.approx(-nll_ref, abs=1e-6)
    # at the optimum of sd, sd^2 = RSS / n
    assert v["sd"] ** 2 == pytest.approx(float(((d.y[:, 0] - (v["s"] * x + v["off"])) ** 2).mean()), rel=1e-4)
    assert np.all(np.isfinite(fit.bse.to_numpy()))


def test_gradient_matches_central_differences_with_delay_history_and_noise_parameters():
    from odeinfer.estimators._dde_likelihood import DelayLikelihood

    m, d = scaled_data()
    m = Z.model.observe({"obs": "s*x + off"}, noise=oi.Normal(sigma="sd0 + sd1*obs", scale="log"),
                        params=["s", "off", "sd0", "sd1"])
    start = {**START, "sd0": 0.02, "sd1": 0.03, "A[x]": -0.4, "omega[x]": 2.8, "b[x]": 2.1}
    del start["sd"]
    L = DelayLikelihood(oi.AdjointDDE(solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-11, atol=1e-13))), m, d, HIST,
                        start, None, None)
    assert set(L.names) == {"theta0", "theta1", "tau", "A[x]", "omega[x]", "b[x]", "s", "off", "sd0", "sd1"}
    w = L.w0.copy()
    nll, g, F = L(w)
    fd = np.empty(w.size)
    for i in range(w.size):
        e = np.zeros(w.size)
        e[i] = 1e-6 * max(1.0, abs(w[i]))
        fd[i] = (L(w + e)[0] - L(w - e)[0]) / (2 * e[i])
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(F, F.T, atol=1e-10)


def test_an_observed_state_gives_the_least_squares_parameters():
    rng = np.random.default_rng(4)
    x = reference_x(2.0, 1.5, 1.0, Z.t)
    y = x + 0.05 * rng.standard_normal(Z.t.size)
    ls = oi.AdjointDDE().fit(Z.model, oi.Data(Z.t, y, "x"), history=HIST,
                             start={k: START[k] for k in ("theta0", "theta1", "tau")}, fixed=FIXED_HIST)
    m = Z.model.observe({"xo": "x"}, noise=oi.Normal(sigma="sd"), params=["sd"])
    ml = oi.AdjointDDE().fit(m, oi.Data(Z.t, y, "xo"), history=HIST,
                             start={k: START[k] for k in ("theta0", "theta1", "tau", "sd")}, fixed=FIXED_HIST)
    assert ls.converged and ml.converged, (ls.message, ml.message)
    # both stop by their own rules: the trust region when a step changes the NLL by < 1e-7, which
    # leaves up to sqrt(2e-7 / lambda_min) along the flattest direction of the Fisher information
    lam = np.linalg.eigvalsh(np.linalg.inv(ml.extras["cov_scaled"]))[0]
    np.testing.assert_allclose(ml.values[:3], ls.values, atol=math.sqrt(2e-7 / lam))
    v = ml.params
    rss = float(((y - reference_x(v["theta0"], v["theta1"], v["tau"], Z.t)) ** 2).sum())
    assert v["sd"] == pytest.approx(math.sqrt(rss / Z.t.size), rel=1e-4)
    # the inverse Fisher information is least squares' sigma^2 (J^T J)^-1 with the ML sd (RSS / n)
    # instead of RSS / (n - k); the sd is orthogonal to the mean parameters under normal noise
    n, k = Z.t.size, 3
    np.testing.assert_allclose(ml.bse.to_numpy()[:3], ls.bse.to_numpy() * math.sqrt((n - k) / n), rtol=1e-3)


def test_delay_likelihood_bad_inputs():
    m, d = scaled_data()
    with pytest.raises(InputError, match="history: a model with observables needs history="):
        oi.AdjointDDE().fit(m, d, start=START)
    with pytest.raises(InputError, match="mode='paper': a model with observables is fitted by maximum likelihood"):
        oi.AdjointDDE(mode="paper").fit(m, d, history=HIST, start=START)
    with pytest.raises(InputError, match=r"start: no start value for the observable parameters \['sd'\]"):
        oi.AdjointDDE().fit(m, d, history=HIST, start={k: v for k, v in START.items() if k != "sd"})
    with pytest.raises(DataError, match=r"data: columns \['x'\] are not observables"):
        oi.AdjointDDE().fit(m, oi.Data(Z.t, d.y[:, 0], "x"), history=HIST, start=START)
    with pytest.raises(InputError, match=r"start: a model with observables takes start as a dict"):
        oi.AdjointDDE().fit(m, d, history=HIST, start=[1.0, 2.0])
    with pytest.raises(InputError, match="delay models are not supported by FitProblem"):
        oi.FitProblem(m, d, x0={"x": 1.0})
    with pytest.raises(EquationParseError, match=r"lag\(x, tau\)"):  # observables use the current states
        Z.model.observe({"o": "lag(x, tau)"}, noise=oi.Normal(0.1))
