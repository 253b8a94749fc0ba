"""Two-step gradient matching (Varah 1982; Brunel 2008).

References: true parameters of noise-free data, and the delta-method covariance against
finite differences of the estimator itself with respect to the spline coefficients (an
independent computation of d theta / d c by refitting).
"""

import dataclasses

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import InputError
from odeinfer.estimators.base import EstimationError
from odeinfer.estimators.gradient_matching import GradientMatching
from odeinfer.smooth import SplineSmoother

PINENE = oi.zoo.alpha_pinene()
T = np.linspace(0, 100, 401)[1:]


def _exact(z, t):
    return np.asarray(oi.solve(oi.Problem(z.model, t, x0=z.x0, t0=z.t0), z.params,
                               solver=oi.Dopri5(rtol=1e-11, atol=1e-12)).y)


def _data(z, t, sigma, seed):
    y = _exact(z, t)
    if sigma:
        y = y + np.random.default_rng(seed).normal(0, sigma, y.shape)
    return oi.Data(t, y, z.model.states, t0=z.t0)


def test_noise_free_alpha_pinene_recovers_theta():
    est = GradientMatching(smoother=SplineSmoother(n_basis=30)).fit(PINENE.model, _data(PINENE, T, 0, 0))
    np.testing.assert_allclose(est.values, PINENE.params_array(), rtol=5e-3)
    assert est.n_iter == 1  # closed form: linear in theta


def test_delta_method_covariance_vs_finite_difference_refits():
    data = _data(PINENE, T, 3.0, 1)
    gm = GradientMatching(smoother=SplineSmoother(n_basis=9))
    est = gm.fit(PINENE.model, data)
    proxy = est.extras["proxy"][0]
    V = np.zeros((5, 5))
    for k, fit in enumerate(proxy.fits):
        cols = []
        for m in range(fit.n_basis):
            vals = []
            for h in (1e-4, -1e-4):
                fits = list(proxy.fits)
                fits[k] = dataclasses.replace(fit, coef=fit.coef + h * np.eye(fit.n_basis)[m])
                vals.append(gm.fit(PINENE.model, data, proxy=dataclasses.replace(proxy, fits=tuple(fits))).values)
            cols.append((vals[0] - vals[1]) / 2e-4)
        G = np.column_stack(cols)
        V += G @ fit.cov @ G.T
    np.testing.assert_allclose(est.cov, V, rtol=1e-5, atol=1e-12)


def test_nonlinear_model_needs_start_and_fits():
    z = oi.zoo.get("fitzhugh_nagumo")
    data = _data(z, z.t[1:], 0.05, 2)
    with pytest.raises(EstimationError, match=r"start: no starting value for \['c'\]"):
        GradientMatching().fit(z.model, data)
    est = GradientMatching().fit(z.model, data, start={"c": 2.5})
    np.testing.assert_allclose(est.values, z.params_array(), rtol=0.1, atol=0.03)
    assert est.extras["linear_params"] == ("a", "b")


def test_free_switching_parameter_refused():
    z = oi.zoo.riccati()
    with pytest.raises(EstimationError, match=r"fixed: \['T_r'\] move a sharp step.*oi.OrthogonalConditions"):
        GradientMatching().fit(z.model, _data(z, np.linspace(0, 14, 201)[1:], 0.2, 0))


def test_known_change_point_fit_close_to_truth():
    z = oi.zoo.riccati()
    data = _data(z, np.linspace(0, 14, 201)[1:], 0.2, 3)
    est = GradientMatching(smoother=SplineSmoother(breakpoints=(5.0,))).fit(z.model, data, fixed={"T_r": 5.0})
    zs = (est.values - z.params_array()[:3]) / est.bse.to_numpy()
    assert np.all(np.abs(zs) < 4), zs


def test_unobserved_state_and_config_errors():
    y = _exact(PINENE, T)[:, 1:]
    data = oi.Data(T, y, PINENE.model.states[1:], t0=0.0)
    with pytest.raises(EstimationError, match=r"\['alpha_pinene'\] are never observed"):
        GradientMatching().fit(PINENE.model, data)
    with pytest.raises(InputError, match=r"weight_width: expected a fraction of the data span in \(0, 0.5\]"):
        GradientMatching(weight_width=0.7)
    with pytest.raises(InputError, match="smoother: expected an odeinfer.smooth.SplineSmoother"):
        GradientMatching(smoother="gcv")


def test_inputs_not_mutated():
    data = _data(PINENE, T, 3.0, 4)
    y0 = data.y.copy()
    x0 = dict(PINENE.x0)
    est = GradientMatching().fit(PINENE.model, data, x0=x0)
    assert x0 == dict(PINENE.x0) and np.array_equal(data.y, y0)
    assert est.extras["proxy"][0]([0.0])[0] == pytest.approx(PINENE.x0_array(), abs=1e-9)  # constrained proxy


# --- log-normal noise: the proxy on the log scale -------------------------------------------------
LV = oi.zoo.get("lotka_volterra")
LOG_LV = LV.model.with_observation(noise="log")


def _log_lv_data(sd, seed):
    t = np.linspace(0, 20, 201)
    y = _exact(LV, t) * np.exp(np.random.default_rng(seed).normal(0, sd, (t.size, 2)))
    return oi.Data(t, y, LV.model.states, t0=LV.t0)


def test_log_noise_delta_method_covariance_vs_finite_difference_refits():
    """noise="log": the proxy is exp(spline of log y); the delta-method covariance through the
    log-scale coefficients against refits with perturbed coefficients."""
    from odeinfer.estimators._log_proxy import LogSplineFit

    data = _log_lv_data(0.1, 2)
    gm = GradientMatching(smoother=SplineSmoother(n_basis=12))
    est = gm.fit(LOG_LV, data)
    proxy = est.extras["proxy"][0]
    assert all(isinstance(f, LogSplineFit) for f in proxy.fits)
    V = np.zeros((4, 4))
    for k, fit in enumerate(proxy.fits):
        cols = []
        for m in range(fit.n_basis):
            vals = []
            for h in (1e-5, -1e-5):
                fits = list(proxy.fits)
                fits[k] = LogSplineFit(dataclasses.replace(fit.log, coef=fit.coef + h * np.eye(fit.n_basis)[m]))
                vals.append(gm.fit(LOG_LV, data, proxy=dataclasses.replace(proxy, fits=tuple(fits))).values)
            cols.append((vals[0] - vals[1]) / 2e-5)
        G = np.column_stack(cols)
        V += G @ fit.cov @ G.T
    np.testing.assert_allclose(est.cov, V, rtol=1e-4, atol=1e-12)


def test_log_noise_sigma_on_the_log_scale():
    data = _log_lv_data(np.array([0.05, 0.1]), 5)
    est = GradientMatching().fit(LOG_LV, data)
    assert est.converged
    assert 0.035 < est.sigma["prey"] < 0.07 and 0.07 < est.sigma["predator"] < 0.14
    assert GradientMatching().fit(LV.model, data).sigma["prey"] > 0.5  # additive: counts
    np.testing.assert_allclose(est.values, LV.params_array(), rtol=0.15)
