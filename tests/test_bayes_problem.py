"""Posterior sampling of a FitProblem (observables, noise models, conditions).

Reference: with a flat prior on the log10 scale and 120 data, the posterior of the kinetic
parameters is close to the normal approximation at the maximum-likelihood estimate (mean = MLE,
covariance = inverse Fisher information). The noise sd's marginal is not centred at its MLE:
with the other k = 4 parameters integrated out (normal approximation) sigma^2 | y is
inverse-gamma((n - k)/2, RSS/2), so E[ln sigma] = (ln(RSS/2) - digamma((n - k)/2)) / 2, which
lies (ln(n/2) - digamma((n - k)/2)) / 2 above the MLE ln sqrt(RSS/n). Tolerances: a quarter of a
posterior sd for the means (the Monte Carlo SE at the ESS reached is about 1/30 sd) and 20% for
the sds.
"""

import math

import numpy as np
import pytest
from scipy.special import digamma

import odeinfer as oi
from odeinfer.errors import InputError
from test_likelihood_fit import problem, two_conditions


@pytest.fixture(scope="module")
def prob_and_fit():
    prob = problem(two_conditions(np.random.default_rng(3)))
    return prob, oi.Embedding().fit(prob)


def test_seeded_posterior_matches_the_normal_approximation(prob_and_fit):
    import arviz as az

    prob, fit = prob_and_fit
    idata = oi.bayes.sample(prob, init=fit, draws=500, tune=300, chains=4, cores=1, rng=1)  # 4 chains: r_hat < 1.01 as Vehtari et al. (2021) use it
    names = [f"log10_{n}" for n in prob.estimated]
    summ = az.summary(idata, var_names=names, round_to="none")
    se = np.sqrt(np.diag(fit.extras["cov_scaled"]))
    assert (summ["r_hat"] < 1.01).all(), summ["r_hat"]
    assert (summ["ess_bulk"] > 400).all(), summ["ess_bulk"]
    expected = np.array(fit.extras["u"], float)
    n, k = fit.nobs, len(prob.estimated) - 1
    expected[list(prob.estimated).index("sd")] += 0.5 * (math.log(n / 2) - digamma((n - k) / 2)) / math.log(10)
    np.testing.assert_array_less(np.abs(summ["mean"].to_numpy() - expected), 0.25 * se)
    np.testing.assert_allclose(summ["sd"].to_numpy(), se, rtol=0.2)
    # natural-unit deterministics are there too
    np.testing.assert_allclose(idata.posterior["k1"].values, 10 ** idata.posterior["log10_k1"].values)
    assert idata.posterior.attrs["odeinfer_seeded_mass_matrix"] == 1
    assert idata.posterior.attrs["odeinfer_failed_evaluations"] == 0


def test_problem_priors_bad_inputs(prob_and_fit):
    prob, fit = prob_and_fit
    with pytest.raises(InputError, match=r"priors: \['zz'\] are not estimated parameters"):
        oi.bayes.build_problem_model(prob, priors={"zz": None})
    free = oi.FitProblem(prob.model, prob.experiments, {**prob.params, "k1": oi.Param(1.0)}, x0={"a": 1.0, "b": 0.0})
    with pytest.raises(InputError, match=r"'k1' has no finite bounds on its lin scale"):
        oi.bayes.build_problem_model(free)
    with pytest.raises(InputError, match="a FitProblem carries its data"):
        oi.bayes.sample(prob, prob.experiments)
    other = oi.Embedding().fit(free, start={"k1": 1.0})
    with pytest.raises(InputError, match="init: it estimates"):
        oi.bayes.sample_problem(prob, init=oi.Estimate(
            "x", prob.model, ("a",), [1.0], None, "converged", extras={"u": [0.0]}))
    assert other.converged


def test_the_posterior_takes_the_adjoint_gradient(prob_and_fit):
    """build_problem_model(..., gradient=oi.Adjoint()): the same log density and gradient as with forward
    sensitivities (both at Rodas rtol 1e-10), at the model's initial point."""
    prob, _ = prob_and_fit
    tight = oi.Rodas(rtol=1e-10, atol=1e-12)
    models = [oi.bayes.build_problem_model(prob, solver=tight, gradient=g) for g in (None, oi.Adjoint())]
    assert models[1].odeinfer_problem[1].adjoint == tight
    point = models[0].initial_point()
    logp = [m.compile_logp()(point) for m in models]
    dlogp = [m.compile_dlogp()(point) for m in models]
    assert logp[1] == pytest.approx(logp[0], rel=1e-9)
    np.testing.assert_allclose(dlogp[1], dlogp[0], rtol=1e-6, atol=1e-6 * np.abs(dlogp[0]).max())
