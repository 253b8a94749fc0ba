"""sample(): seeding (initial points, mass matrix mapped through PyMC's transforms), the
InferenceData groups, the diagonal fallback, interruption, and nutpie when installed."""

import contextlib
import re

import numpy as np
import pytest

pm = pytest.importorskip("pymc")
from scipy.optimize import least_squares  # noqa: E402

import odeinfer as oi  # noqa: E402
from odeinfer.bayes.sample import SamplingInterruptedWarning  # noqa: E402
from odeinfer.bayes.seed import SeedingWarning, seed_from_estimate  # noqa: E402
from odeinfer.errors import InputError  # noqa: E402
from odeinfer.results import Estimate  # noqa: E402


def gn_estimate(model, data, params, x0):
    """Independent frequentist estimate: scipy least_squares over the solver (Jacobian from the
    sensitivities), cov = s^2 (J^T J)^-1, sigma = RMS residual per state."""
    m, n = model.n_params, model.n_states
    solver = oi.bind(oi.Problem(model, data.t, t0=data.t0), solver=oi.Dopri5(rtol=1e-10, atol=1e-12),
                     gradient=oi.Forward())
    cols = [model.states.index(s) for s in data.states]
    y = np.asarray(data.y)

    def fun(v):
        return (solver(np.ascontiguousarray(v[:m]), np.ascontiguousarray(v[m:]))[0][:, cols] - y).ravel()

    def jac(v):
        return solver(np.ascontiguousarray(v[:m]), np.ascontiguousarray(v[m:]))[1][:, cols, :].reshape(-1, m + n)

    r = least_squares(fun, np.concatenate([params, x0]), jac=jac, x_scale="jac")
    res, J = fun(r.x), jac(r.x)
    cov = res @ res / (res.size - r.x.size) * np.linalg.inv(J.T @ J)
    names = list(model.params) + [f"x0[{s}]" for s in model.states]
    sigma = {s: float(np.sqrt(np.mean(res.reshape(y.shape)[:, j] ** 2))) for j, s in enumerate(data.states)}
    return Estimate("LeastSquares", model, names, r.x, cov, "converged", nobs=res.size, sigma=sigma)


@pytest.fixture(scope="module")
def lv():
    entry = oi.zoo.get("lotka_volterra")
    p = np.array(list(entry.params.values()))
    x0 = np.array(list(entry.x0.values()))
    data = oi.simulate(entry.model, p, x0, entry.t, noise=entry.sigma, rng=1).data
    return entry.model, data, gn_estimate(entry.model, data, p, x0)


def test_seed_maps_covariance_through_log_transform(lv):
    """Priors from the estimate are log-normal (log transform), so the unconstrained covariance
    must be diag(1/x) C diag(1/x) (delta method); the noise scales get Var(log sigma) = 1/(2n)."""
    model, data, est = lv
    m = oi.bayes.build_model(model, data, init=est)
    seed = seed_from_estimate(m, est, {"prey": 21, "predator": 21})
    assert seed.rv_names[:6] == tuple(est.names)
    x = np.asarray(est.values)
    np.testing.assert_allclose(seed.mean[:6], np.log(x), rtol=1e-12)
    np.testing.assert_allclose(seed.cov[:6, :6], est.cov / np.outer(x, x), rtol=1e-10)
    np.testing.assert_allclose(np.diag(seed.cov)[6:], 1 / 42, rtol=1e-12)
    np.testing.assert_allclose(seed.mean[6:], np.log([est.sigma["prey"], est.sigma["predator"]]), rtol=1e-12)
    pts = seed.points(3, np.random.default_rng(0), jitter=0.1)
    assert len(pts) == 3 and all(abs(p["alpha"] / est.values[0] - 1) < 0.05 for p in pts)


def test_cap_covariance_keeps_correlations_and_definiteness():
    from odeinfer.bayes.seed import cap_covariance

    cov = np.array([[400.0, 12.0, -3.0], [12.0, 1.0, 0.2], [-3.0, 0.2, 2.0]])
    out, capped = cap_covariance(cov, np.array([np.pi ** 2 / 3, np.nan, 4.0]))
    assert capped.tolist() == [True, False, False]
    np.testing.assert_allclose(np.diag(out), [np.pi ** 2 / 3, 1.0, 2.0], rtol=1e-14)
    corr = lambda c: c / np.sqrt(np.outer(np.diag(c), np.diag(c)))  # noqa: E731
    np.testing.assert_allclose(corr(out), corr(cov), rtol=1e-13)
    assert np.all(np.linalg.eigvalsh(out) > 0)


def test_seed_variance_is_capped_at_the_priors_on_the_unconstrained_scale(lv):
    """An estimate whose covariance is far wider than the prior (alpha's variance 30 times the prior's
    on the unconstrained scale, the others' unchanged): the seed's
    variance of alpha's log-odds is the uniform prior's, pi^2 / 3 (the logit of a uniform variable is
    standard logistic); the correlations stay the estimate's. References: pi^2 / 3, and pi^2 / 8 for
    Var(log |Z|) (half-normal priors, log transform), in closed form (checked against Monte Carlo in
    ``test_prior_variances_in_closed_form_match_monte_carlo``)."""
    import warnings

    from odeinfer.bayes.seed import checked_points

    model, data, est = lv
    priors = {"alpha": pm.Uniform.dist(0.3, 1.0), "beta": pm.HalfNormal.dist(1.0), "gamma": pm.HalfNormal.dist(1.0),
              "delta": pm.HalfNormal.dist(1.0)}
    m = oi.bayes.build_model(model, data, init=est, priors=priors)
    # the estimate's own covariance within the prior: nothing capped, the seed is J C J^T as before
    plain = seed_from_estimate(m, est)
    assert plain.capped == () and np.array_equal(plain.cov, plain.cov_estimate)
    scale = np.ones(len(est.names))
    scale[0] = np.sqrt(30 * (np.pi ** 2 / 3) / plain.cov[0, 0])
    wide = Estimate(est.estimator, model, est.names, est.values, np.asarray(est.cov) * np.outer(scale, scale),
                    "converged", sigma=est.sigma)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeedingWarning)
        seed = seed_from_estimate(m, wide)
    np.testing.assert_allclose(seed.prior_var[:4], np.pi ** 2 / np.array([3, 8, 8, 8]), rtol=1e-14)
    assert seed.capped == ("alpha",)
    a, b, x = 0.3, 1.0, est.values[0]
    j = (b - a) / ((x - a) * (b - x))  # d logit((x - a) / (b - a)) / dx
    assert seed.cov_estimate[0, 0] == pytest.approx(j ** 2 * scale[0] ** 2 * est.cov[0, 0], rel=1e-10)
    assert seed.cov[0, 0] == pytest.approx(seed.prior_var[0], rel=1e-14)
    np.testing.assert_array_equal(seed.cov[1:, 1:], seed.cov_estimate[1:, 1:])
    corr = lambda c: c / np.sqrt(np.outer(np.diag(c), np.diag(c)))  # noqa: E731
    np.testing.assert_allclose(corr(seed.cov), corr(seed.cov_estimate), rtol=1e-12)
    np.linalg.cholesky(seed.cov)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeedingWarning)
        assert len(checked_points(seed, 4, np.random.default_rng(0), 0.1)) == 4


def _hierarchical_prior_variances():
    """``_prior_variances`` of s ~ HalfNormal(1), x ~ N(0, s), t ~ TruncatedNormal(0, 1, lower=0)."""
    from odeinfer.bayes import seed as seed_mod

    with pm.Model() as h:
        s = pm.HalfNormal("s", 1.0)
        pm.Normal("x", 0.0, s), pm.TruncatedNormal("t", 0.0, 1.0, lower=0.0)
    vv = [h.rvs_to_values[r] for r in h.free_RVs]
    ip = h.initial_point()
    return seed_mod._prior_variances(h, h.free_RVs, vv, [ip[v.name] for v in vv], [1, 1, 1])


def test_prior_variances_in_closed_form_match_monte_carlo(monkeypatch):
    """The variance of each unconstrained coordinate under the common priors, against 400,000 numpy
    draws mapped by the transform by hand (independent of PyMC): within 5 Monte Carlo standard errors
    of a sample variance, sqrt((m4 - s^4) / N). No prior draws are made for them (``pm.draw`` is
    never called); a hierarchical and a truncated prior still get theirs from draws."""
    from odeinfer.bayes import seed as seed_mod

    rng, N = np.random.default_rng(5), 400_000
    with pm.Model() as m:
        pm.Uniform("u", -3.0, 2.0), pm.LogNormal("ln", 0.0, 1.5), pm.HalfNormal("hn", 2.0, shape=3)
        pm.Normal("n", 1.0, 4.0), pm.Exponential("e", 2.0), pm.Gamma("g", 2.0, 1.0), pm.Beta("b", 2.0, 3.0)
        pm.HalfCauchy("hc", 1.0), pm.Normal("nv", 0.0, np.array([1.0, 2.0, 3.0]))
    u = rng.uniform(-3, 2, N)
    refs = [np.log((u + 3) / (2 - u)), np.log(rng.lognormal(0, 1.5, N))] + \
        [np.log(np.abs(rng.normal(0, 2, N)))] * 3 + [rng.normal(1, 4, N), np.log(rng.exponential(0.5, N)),
                                                     np.log(rng.gamma(2.0, 1.0, N))]
    bb = rng.beta(2, 3, N)
    refs += [np.log(bb / (1 - bb)), np.log(np.abs(rng.standard_cauchy(N)))] + [rng.normal(0, s, N) for s in (1, 2, 3)]
    rvs = m.free_RVs
    vv = [m.rvs_to_values[r] for r in rvs]
    ip = m.initial_point()
    monkeypatch.setattr(pm, "draw", lambda *a, **k: pytest.fail("closed-form priors must not be drawn"))
    got = seed_mod._prior_variances(m, rvs, vv, [ip[v.name] for v in vv], [int(np.size(ip[v.name])) for v in vv])
    for g, x in zip(got, refs):
        c = x - x.mean()
        se = np.sqrt((np.mean(c ** 4) - np.var(x) ** 2) / N)
        assert abs(g - np.var(x)) < 5 * se, (g, np.var(x), se)
    monkeypatch.undo()
    got = _hierarchical_prior_variances()
    assert got[0] == pytest.approx(np.pi ** 2 / 8, rel=1e-14) and np.all(np.isfinite(got[1:])), got


def test_non_pd_covariance_warns_and_falls_back(lv):
    model, data, est = lv
    cov = np.array(est.cov)
    cov[0, 1] = cov[1, 0] = 10 * np.sqrt(cov[0, 0] * cov[1, 1])  # correlation 10: indefinite
    bad = Estimate(est.estimator, model, est.names, est.values, cov, "converged", sigma=est.sigma)
    m = oi.bayes.build_model(model, data, init=est)
    with pytest.warns(SeedingWarning, match="not positive definite .* falling back to PyMC's diagonal"):
        seed = seed_from_estimate(m, bad)
    assert seed.cov is None
    no_cov = Estimate(est.estimator, model, est.names, est.values, None, "converged")
    with pytest.warns(SeedingWarning, match="the estimate has no covariance"):
        assert seed_from_estimate(m, no_cov).cov is None


def test_seeded_sampling_returns_all_groups(lv):
    model, data, est = lv
    idata = oi.bayes.sample(model, data, init=est, draws=150, tune=150, chains=2, cores=1, rng=4,
                            n_trajectory_times=50)
    for group in ("posterior", "sample_stats", "log_likelihood", "observed_data", "constant_data",
                  "posterior_predictive", "estimate"):
        assert group in idata.groups(), group
    post = idata.posterior
    assert post.attrs["odeinfer_seeded_mass_matrix"] == 1 and post.sizes["draw"] == 150
    assert idata.posterior_predictive["trajectory"].dims == ("chain", "draw", "t_fine", "state")
    assert idata.posterior_predictive["y_obs"].shape == (2, 150, 21, 2)
    assert idata.log_likelihood["y_obs"].shape == (2, 150, 21, 2)
    np.testing.assert_array_equal(idata.constant_data["t"], data.t)
    assert list(idata.estimate["name"].values) == list(est.names)
    assert int(idata.sample_stats["diverging"].sum()) == 0
    # each quantity is listed once by the diagnostics and the report (x0 is sampled as scalars
    # 'x0[prey]', 'x0[predator]' and also kept as the deterministic vector 'x0')
    from odeinfer.diagnostics._names import parameter_names
    from odeinfer.report._items import render_idata

    assert sorted(parameter_names(idata)) == sorted([*est.names, "sigma[predator]", "sigma[prey]"])
    assert sorted(oi.diagnostics.check(idata).table.index) == sorted(parameter_names(idata))
    summary_rows = re.findall(r"<th>([^<]*)</th>\s*<td>", render_idata(idata))
    assert sorted(summary_rows) == sorted(parameter_names(idata))
    # posterior means agree with the least-squares estimate within 3 of its standard errors
    for name, value, se in zip(est.names, est.values, est.bse):
        assert abs(float(post[name].mean()) - value) < 3 * se, name


def test_interrupted_sampling_keeps_draws(lv):
    model, data, est = lv

    def stop(trace, draw):
        if draw.draw_idx >= 60:
            raise KeyboardInterrupt

    m = oi.bayes.build_model(model, data, init=est)
    with pytest.warns(SamplingInterruptedWarning, match=r"kept \d+ of 100 draws"):
        idata = oi.bayes.sample(m, init=est, draws=100, tune=50, chains=1, cores=1, rng=1, callback=stop,
                                posterior_predictive=False)
    assert 0 < idata.posterior.sizes["draw"] < 100
    assert idata.posterior.attrs["odeinfer_interrupted"] == 1


def test_sample_bad_arguments(lv):
    model, data, est = lv
    with pytest.raises(InputError, match="sampler: expected one of"):
        oi.bayes.sample(model, data, init=est, sampler="stan")
    with pytest.raises(InputError, match="draws: expected a positive integer"):
        oi.bayes.sample(model, data, init=est, draws=0)
    with pytest.raises(InputError, match="data: required"):
        oi.bayes.sample(model, init=est)
    m = oi.bayes.build_model(model, data, init=est)
    with pytest.raises(InputError, match="a pymc.Model is already built"):
        oi.bayes.sample(m, data)


def test_nutpie_samples_numba_op(lv):
    nutpie = pytest.importorskip("nutpie", reason="nutpie is an optional dependency")  # noqa: F841
    model, data, est = lv
    idata = oi.bayes.sample(model, data, init=est, draws=200, tune=200, chains=2, rng=2, sampler="nutpie",
                            n_trajectory_times=20)
    for group in ("posterior", "sample_stats", "log_likelihood", "observed_data", "posterior_predictive"):
        assert group in idata.groups(), group
    for name, value, se in zip(est.names, est.values, est.bse):
        assert abs(float(idata.posterior[name].mean()) - value) < 3 * se, name


def test_an_estimate_on_its_priors_bound_seeds_without_warning(lv):
    """A fit clipped onto its bound (= the Uniform prior's edge, where the log-odds transform is
    infinite) still seeds the sampler, from a hair inside; a value beyond the support warns."""
    import warnings

    model, data, est = lv
    priors = {"alpha": pm.Uniform.dist(0.3, est.values[0]), "beta": pm.HalfNormal.dist(1.0),
              "gamma": pm.HalfNormal.dist(1.0), "delta": pm.HalfNormal.dist(1.0)}
    m = oi.bayes.build_model(model, data, init=est, priors=priors)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeedingWarning)
        seed = seed_from_estimate(m, est)
    assert "alpha" in seed.rv_names and np.isfinite(seed.mean).all()
    beyond = Estimate(est.estimator, model, est.names, np.r_[est.values[0] * 1.01, est.values[1:]], est.cov,
                      "converged", sigma=est.sigma)
    with pytest.warns(SeedingWarning, match="outside the support"):
        seed_from_estimate(m, beyond)


def test_side_functions_without_c_give_the_c_path_values(lv):
    """sample() evaluates PyMC's side functions (trace, pointwise log-likelihood, posterior
    predictive) with Python thunks (``side_mode``, nothing compiled): the log-likelihood equals the
    normal log density of the data around the recorded trajectory (scipy, an independent formula)
    and PyTensor's C path on the same draws; the posterior predictive draws are the C path's."""
    from scipy.stats import norm

    from odeinfer.bayes.sample import side_mode

    model, data, est = lv
    m = oi.bayes.build_model(model, data, init=est)
    idata = oi.bayes.sample(m, init=est, draws=10, tune=10, chains=1, cores=1, rng=3, n_trajectory_times=5)
    post = idata.posterior
    y_hat = np.asarray(post["y_hat"])[..., [model.states.index(s) for s in data.states]]
    sigma = np.stack([np.asarray(post[f"sigma[{s}]"]) for s in data.states], axis=-1)[:, :, None, :]
    loglik = np.asarray(idata.log_likelihood["y_obs"])
    np.testing.assert_allclose(loglik, norm.logpdf(np.asarray(data.y), y_hat, sigma), rtol=1e-10, atol=0)
    c_path = pm.compute_log_likelihood(idata, model=m, progressbar=False, extend_inferencedata=False)
    np.testing.assert_allclose(loglik, np.asarray(c_path["y_obs"]), rtol=1e-10, atol=0)
    draws = {}
    for name, context in (("c", contextlib.nullcontext()), ("python", side_mode())):
        with context:
            pp = pm.sample_posterior_predictive(idata, model=m, var_names=["y_obs"], random_seed=11,
                                                progressbar=False, extend_inferencedata=False)
        draws[name] = np.asarray(pp.posterior_predictive["y_obs"])
    np.testing.assert_allclose(draws["python"], draws["c"], rtol=1e-10, atol=0)


# ---- estimates that must not seed NUTS (issue 16, "no silent nonsense") ------------------------------

@pytest.fixture(scope="module")
def logistic_case():
    """The SBC's logistic model and replicate 0 of its data (tests/sbc_cases.py), its fixed priors, and
    the model built with them (x(0) = 1 known)."""
    from sbc_cases import PRIOR_LOGISTIC, X0, _dists, logistic, simulate_logistic

    data = simulate_logistic(np.random.default_rng(0))[0][0]
    m = oi.bayes.build_model(logistic, data, priors=_dists(PRIOR_LOGISTIC), x0=[X0])
    return logistic, data, m


def _sample_small(m, init):
    return oi.bayes.sample(m, init=init, draws=20, tune=20, chains=1, cores=1, rng=1, posterior_predictive=False)


def test_a_runaway_estimate_does_not_seed_and_the_chains_start_from_the_priors(logistic_case):
    """The fit from the matching estimators' miss (K ~ -2.5e4) runs away to K ~ 1e9 and says so; seeded
    there, PyMC stopped with "Bad initial energy". Now: a SeedingWarning naming the reason, the
    priors' start, and draws."""
    model, data, m = logistic_case
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bad = oi.Embedding().fit(model, data, x0={"x": 1.0}, start={"r": 0.0676, "K": -24566.75})
    assert "runaway" in bad.extras
    with pytest.warns(SeedingWarning, match=r"not seeding NUTS from the Embedding estimate: \['K'\] ran away"):
        idata = _sample_small(m, bad)
    post = idata.posterior
    assert post.attrs["odeinfer_seeded_mass_matrix"] == 0 and "ran away" in post.attrs["odeinfer_init_refused"]
    assert np.all(np.isfinite(post["K"].values)) and float(post["K"].max()) < 1e3


def test_start_points_outside_the_support_fall_back_to_the_priors(logistic_case):
    """An estimate with no recorded checks (made by hand) at the runaway point, with the runaway fit's
    covariance (sd of K ~ 5e16, from the pre-fix fit of SBC replicate 2): the jittered start points land
    on K = 0 or infinity; they are refused (SeedingWarning) instead of reaching PyMC."""
    model, data, m = logistic_case
    cov = np.array([[7.18e-3, -3.985e15], [-3.985e15, 2.279e33]])
    bad = Estimate("Embedding", model, ["r", "K"], np.array([0.214, 7.0e8]), cov, "converged", sigma={"x": 3.74})
    with pytest.warns(SeedingWarning, match="leaves the priors' support for \\['K'\\]"):
        idata = _sample_small(m, bad)
    assert idata.posterior.attrs["odeinfer_seeded_mass_matrix"] == 0
    assert np.all(np.isfinite(idata.posterior["K"].values))


def test_non_finite_estimates_do_not_seed(logistic_case):
    model, data, m = logistic_case
    nan_k = Estimate("Embedding", model, ["r", "K"], np.array([0.8, np.nan]), None, "converged")
    from odeinfer.estimators._trajectory_check import unusable_reason

    assert unusable_reason(nan_k) == "its values of ['K'] are not finite"
    cov = np.array([[1e-3, np.nan], [np.nan, np.nan]])
    nan_cov = Estimate("Embedding", model, ["r", "K"], np.array([0.8, 10.0]), cov, "converged")
    assert "covariance is not finite for ['K']" in unusable_reason(nan_cov)
    assert unusable_reason(nan_cov, covariance=False) is None
    # without priors for every parameter, a refused estimate cannot centre them: a clear error
    with pytest.warns(SeedingWarning, match="not finite"), pytest.raises(InputError, match="init= was not used"):
        oi.bayes.sample(model, data, init=nan_k, x0=[1.0], draws=10, tune=10, chains=1)



def test_drawn_prior_variances_batch_independent_priors_and_keep_hierarchical_ones_joint(monkeypatch):
    """Priors without a closed form: independent ones are drawn as one batch (one ``pm.draw`` call, no
    per-draw loop), a prior with a random parent by joint draws (its marginal, not the conditional on one
    draw of the parent). References: scipy's truncated normal (400,000 draws, log-transformed by hand) and
    the marginal variance 1 of x ~ N(0, s), s ~ HalfNormal(1); within 5 Monte Carlo standard errors of a
    sample variance of PRIOR_DRAWS draws, sqrt((m4 - s^4) / PRIOR_DRAWS)."""
    import scipy.stats as st

    from odeinfer.bayes import seed as seed_mod

    n = seed_mod.PRIOR_DRAWS
    calls = []
    draw = pm.draw

    def counted(*args, **kwargs):
        calls.append(kwargs.get("draws", 1))
        return draw(*args, **kwargs)

    monkeypatch.setattr(pm, "draw", counted)
    with pm.Model() as g:
        pm.TruncatedNormal("a", 1.0, 0.5, lower=0.0), pm.TruncatedNormal("b", 0.05, 0.05, lower=0.0, shape=2)
    vv = [g.rvs_to_values[r] for r in g.free_RVs]
    ip = g.initial_point()
    got = seed_mod._prior_variances(g, g.free_RVs, vv, [ip[v.name] for v in vv], [1, 2])
    assert calls == [1]  # one batched call
    for value, (mu, sd) in zip(got, [(1.0, 0.5), (0.05, 0.05), (0.05, 0.05)]):
        x = np.log(st.truncnorm(-mu / sd, np.inf, loc=mu, scale=sd).rvs(400_000, random_state=3))
        c = x - x.mean()
        se = np.sqrt((np.mean(c ** 4) - np.var(x) ** 2) / n)
        assert abs(value - np.var(x)) < 5 * se, (value, np.var(x), se)
    calls.clear()
    got = _hierarchical_prior_variances()
    assert calls == [n]  # x's parent is random: joint draws
    assert abs(got[1] - 1.0) < 5 * np.sqrt((9.0 - 1.0) / n), got  # E x^2 = E s^2 = 1, E x^4 = 3 E s^4 = 9
