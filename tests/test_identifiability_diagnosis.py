"""The diagnostics say when a posterior's direction is undetermined by the data (issue 15, the
Bayesian stage of PEtab problems): ``oi.bayes.sample(problem, init=fit)`` records the rank of the
Fisher information at the fit and ``oi.diagnostics.check`` turns it into an identifiability check.

Reference: a model whose observable depends on two parameters only through their sum
(y = a + c + b t), so by construction the Fisher information has rank 2 of 3 and its null space is
a - c (the data say nothing about a and c separately).
"""

import numpy as np
import pytest

import odeinfer as oi

from test_map_fit import ramp

SUM = ramp.observe({"y": "a + c + x"}, noise=oi.Normal(sigma="sd"), params=["a", "c", "sd"])


@pytest.fixture(scope="module")
def unidentified():
    t = np.linspace(0.0, 2.0, 9)
    y = 1.0 + 0.5 * t + 0.3 * np.random.default_rng(5).standard_normal(t.size)
    params = {"a": oi.Param(0.5, -3.0, 3.0), "c": oi.Param(0.5, -3.0, 3.0), "b": oi.Param(0.5, -5.0, 5.0),
              "sd": oi.Param(0.3, estimate=False)}
    problem = oi.FitProblem(SUM, oi.Experiments([oi.Data(t, y, "y", name="e")]), params, x0={"x": 0.0})
    with pytest.warns(oi.estimators.base.IdentifiabilityWarning, match="rank 2 < 3"):
        fit = oi.Embedding().fit(problem, start={"a": 0.5, "c": 0.5, "b": 0.5})
    return problem, fit


def test_sampling_from_a_rank_deficient_fit_is_diagnosed(unidentified):
    problem, fit = unidentified
    assert fit.extras["fisher_rank"] == 2
    idata = oi.bayes.sample(problem, init=fit, draws=60, tune=60, chains=2, cores=1, rng=0)
    attrs = idata.posterior.attrs
    assert (attrs["odeinfer_fisher_rank"], attrs["odeinfer_n_estimated"]) == (2, 3)
    assert set(attrs["odeinfer_unidentified"].split(",")) == {"a", "c"}
    report = oi.diagnostics.check(idata)
    c = report["identifiability"]
    assert c.passed is False and (c.value, c.threshold) == (2, 3)
    assert "the data do not determine a, c" in c.advice or "the data do not determine c, a" in c.advice
    assert not report.passed and "identifiability" in report.failed


def test_unidentified_parameters_with_priors_of_their_own_pass(unidentified):
    import pymc as pm

    problem, fit = unidentified
    priors = {n: (lambda var: pm.Normal(var, 0.5, 0.2)) for n in ("a", "c")}
    idata = oi.bayes.sample(problem, init=fit, draws=30, tune=30, chains=1, cores=1, rng=0, priors=priors)
    c = oi.diagnostics.check(idata)["identifiability"]
    assert c.passed is True and "have priors of their own" in c.advice


def test_check_reads_the_recorded_rank_and_points_the_tree_depth_advice_at_it():
    import arviz as az

    rng = np.random.default_rng(0)
    post = {"k": rng.standard_normal((2, 50))}
    stats = {"reached_max_treedepth": np.ones((2, 50), bool), "diverging": np.zeros((2, 50), bool)}
    idata = az.from_dict(posterior=post, sample_stats=stats)
    plain = oi.diagnostics.check(idata)
    assert "identifiability" not in [c.name for c in plain.checks]  # nothing recorded: no such check
    assert "Likely cause" not in plain["tree_depth"].advice
    idata.posterior.attrs.update(odeinfer_fisher_rank=8, odeinfer_n_estimated=9, odeinfer_unidentified="k_exp_hetero",
                                 odeinfer_unidentified_with_prior="")
    report = oi.diagnostics.check(idata)
    assert report["identifiability"].passed is False
    assert "rank 8 < 9: the data do not determine k_exp_hetero" in report["identifiability"].advice
    assert report["tree_depth"].advice.startswith("100.0% of draws hit the maximum tree depth")
    assert "Likely cause: the data do not determine k_exp_hetero (see identifiability)" in report["tree_depth"].advice
    idata.posterior.attrs.update(odeinfer_fisher_rank=9, odeinfer_unidentified="")
    assert oi.diagnostics.check(idata)["identifiability"].passed is True


def _stuck_chains():
    """A synthetic non-identifiable posterior: ``a`` is flat within its bounds (-3, 3) and each chain
    has explored one half of it only (chain 0 below 0, chain 1 above), ``b`` is identified and mixed."""
    import arviz as az

    rng = np.random.default_rng(1)
    a = np.stack([rng.uniform(-3.0, 0.0, 200), rng.uniform(0.0, 3.0, 200)])
    b = 0.5 + 0.1 * rng.standard_normal((2, 200))
    return az.from_dict(posterior={"a": a, "b": b}, sample_stats={"diverging": np.zeros((2, 200), bool)})


def test_mixing_advice_points_at_the_unidentified_parameters():
    idata = _stuck_chains()
    plain = oi.diagnostics.check(idata)
    assert plain["r_hat"].passed is False and "Chains disagree for a:" in plain["r_hat"].advice
    assert "identifiability" not in plain["r_hat"].advice  # nothing recorded: no cause claimed
    idata.posterior.attrs.update(odeinfer_fisher_rank=1, odeinfer_n_estimated=2, odeinfer_unidentified="a",
                                 odeinfer_unidentified_with_prior="")
    report = oi.diagnostics.check(idata)
    assert report["r_hat"].passed is False and report["identifiability"].passed is False
    for name in ("r_hat", "ess_bulk"):
        advice = report[name].advice
        assert "Likely cause: the data do not determine a (see identifiability)" in advice, advice
        assert "multiple modes" not in advice  # the flat direction is no multimodality
    # identified parameters with a prior of their own: no cause claimed
    idata.posterior.attrs.update(odeinfer_unidentified="", odeinfer_unidentified_with_prior="a")
    assert "Likely cause" not in oi.diagnostics.check(idata)["r_hat"].advice


def test_well_mixed_unidentified_posterior_is_diagnosed_without_claiming_bad_mixing():
    """Boehm's posterior sampled well (r_hat 1.004, bulk ESS > 1000) still has k_imp_homo flat up to its
    bound: the identifiability check fails and says what the marginal means, not that mixing failed."""
    import arviz as az

    rng = np.random.default_rng(2)
    a = rng.uniform(1.0, 3.0, (2, 400))  # flat from where the data cut it (1) to the upper bound (3)
    idata = az.from_dict(posterior={"a": a, "b": 0.5 + 0.1 * rng.standard_normal((2, 400))},
                         sample_stats={"diverging": np.zeros((2, 400), bool)})
    idata.posterior.attrs.update(odeinfer_fisher_rank=1, odeinfer_n_estimated=2, odeinfer_unidentified="a",
                                 odeinfer_unidentified_with_prior="")
    report = oi.diagnostics.check(idata)
    assert [c.name for c in report.checks if c.passed is False] == ["identifiability"]
    advice = report["identifiability"].advice
    assert "the data do not determine a" in advice
    assert "interval ends at the bounds report the bounds, not the data" in advice
    assert "must cross" not in advice and "uniform within the bounds" not in advice
