"""The trajectory fit's own quick checks (issue 16, "no silent nonsense"): a "converged" Embedding
fit whose trajectory misses the data, or whose parameter ran away along a flat direction of the
objective toward a limit of the model, says so in ``warnings`` (and ``extras``).

The case is logistic growth x' = r x (1 - x/K), x(0) = 1 (the SBC model, tests/sbc_cases.py). As
K -> infinity the model becomes exponential growth, and dx/dK -> 0: a least-squares fit drawn that
way stops where the gradient vanishes, "converged". References: scipy's least_squares on the exact
logistic solution (tests/test_auto_start.py), the exact solution's derivative by central differences.
"""

import math
import warnings

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import BiasWarning
from odeinfer.estimators._trajectory_check import RUNAWAY_CHI2, RUNAWAY_FACTOR, runaway_check
from odeinfer.estimators.base import IdentifiabilityWarning
from sbc_cases import X0, logistic, logistic_exact, simulate_logistic

FIXES = ("start=", "bounds", "priors")


@pytest.fixture(scope="module")
def sbc_data():
    """Replicate 0 of the SBC's logistic data (16 points on [0.75, 12]; they saturate near K)."""
    return simulate_logistic(np.random.default_rng(0))[0][0]


def _fit(data, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = oi.Embedding().fit(logistic, data, x0={"x": X0}, **kw)
    return est, caught


def _reference(data):
    from scipy.optimize import least_squares

    y = data.y[:, 0]
    return least_squares(lambda p: logistic_exact(data.t, p[0], p[1], X0) - y, [0.8, 10.0], xtol=1e-14, ftol=1e-14,
                         gtol=1e-14).x


def test_fit_started_at_the_matching_miss_reaches_the_optimum_or_says_it_ran_away(sbc_data):
    """The start OrthogonalConditions gives from the seed K = 1.0 (K ~ -2.5e4, its own trajectory check
    misses): the fit from there must reach scipy's optimum, or warn, naming K, with the diagnostic and the fix."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        oc = oi.OrthogonalConditions().fit(logistic, sbc_data, start={"K": 1.0}, x0={"x": X0})
    assert oc.extras["trajectory_check"]["rms_ratio"] > oc.extras["trajectory_check"]["threshold"]
    est, caught = _fit(sbc_data, start=oc)
    ref = _reference(sbc_data)
    if np.all(np.abs(est.values - ref) < 1e-3 * est.bse.to_numpy()):
        assert "runaway" not in est.extras
        return
    runaway = [str(w.message) for w in caught if issubclass(w.category, IdentifiabilityWarning)
               and "ran away" in str(w.message)]
    assert len(runaway) == 1 and runaway[0] in est.warnings
    msg = runaway[0]
    assert "'K'" in msg and "chi-square" in msg and all(f in msg for f in FIXES)
    info = est.extras["runaway"]["K"]
    assert info["growth"] >= RUNAWAY_FACTOR and info["chi2_doubling"] < RUNAWAY_CHI2
    assert info["start"] == pytest.approx(oc.values[oc.names.index("K")])
    # the record survives the JSON round trip, so a saved estimate is still refused as a seed
    from odeinfer.estimators._trajectory_check import unusable_reason

    back = oi.Estimate.from_json(est.to_json(), model=logistic)
    assert back.extras["runaway"] == est.extras["runaway"] and "ran away" in unusable_reason(back)
    # and the misfit: the trajectory at K ~ 1e9 is exponential growth, far from saturating data
    miss = [str(w.message) for w in caught if issubclass(w.category, BiasWarning)]
    assert len(miss) == 1 and "misses the data" in miss[0] and miss[0] in est.warnings
    assert est.extras["fit_check"]["rms_ratio"] > est.extras["fit_check"]["threshold"]


def test_runaway_diagnostic_matches_central_differences(sbc_data):
    """``chi2_doubling`` = sum_i (K dx(t_i)/dK / sigma)^2 with sigma the noise measured from the data
    (odeinfer's difference-based noise_variance, the quantity the check documents): K dx/dK from the
    exact solution by central differences in log K (step 1e-2, truncation ~1e-4). Tolerance 10%: the
    fit's forward sensitivity of a derivative ~1e-7 carries the solver's absolute error, and a factor
    of sigma_fit / sigma_data (~7 here) would show as ~50x."""
    from odeinfer.estimators._noise_cov import noise_variance

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = oi.Embedding().fit(logistic, sbc_data, x0={"x": X0}, start={"r": 0.0676, "K": -24566.75})
    if "runaway" not in est.extras:
        pytest.skip("the fit did not run away from this start")
    r, K = est.values
    h = 1e-2
    dx = (logistic_exact(sbc_data.t, r, K * math.exp(h), X0) - logistic_exact(sbc_data.t, r, K * math.exp(-h), X0)) / (
        2 * h)
    sig2 = max(noise_variance(sbc_data.t, sbc_data.y[:, 0]), (1e-3 * np.std(sbc_data.y[:, 0])) ** 2)
    assert est.extras["runaway"]["K"]["chi2_doubling"] == pytest.approx(float(dx @ dx) / sig2, rel=0.1)


def test_exponential_data_do_not_identify_k_and_the_fit_says_so():
    """Noise-free exponential growth x = exp(0.8 t) on [0.25, 2.5] is the logistic model's K -> infinity
    limit: no finite K fits as well, so the least-squares infimum is not attained and the fit can only run
    away. It must warn, naming K, with the fix."""
    t = np.linspace(0.25, 2.5, 16)
    data = oi.Data(t, np.exp(0.8 * t)[:, None], ["x"], t0=0.0)
    est, caught = _fit(data, start={"r": 0.8, "K": 10.0})
    assert set(est.extras.get("runaway", {})) == {"K"}
    msg = next(m for m in est.warnings if "ran away" in m)
    assert "'K'" in msg and all(f in msg for f in FIXES)
    assert any(issubclass(w.category, IdentifiabilityWarning) and "ran away" in str(w.message) for w in caught)


@pytest.mark.parametrize("start", [None, {"r": 0.8, "K": 10.0}])
def test_good_fits_pass_both_checks(sbc_data, start):
    est, caught = _fit(sbc_data, start=start)
    np.testing.assert_allclose(est.values, _reference(sbc_data), rtol=1e-5)
    assert est.extras["fit_check"]["checked"] and est.extras["fit_check"]["rms_ratio"] < 3
    assert "runaway" not in est.extras
    assert not any(issubclass(w.category, (BiasWarning, IdentifiabilityWarning)) for w in caught)


def test_lotka_volterra_fit_passes_both_checks():
    z = oi.zoo.get("lotka_volterra")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=1.0, rng=1)
    est = oi.Embedding().fit(z.model, data, start={"alpha": 0.5, "beta": 0.03, "gamma": 0.7, "delta": 0.02})
    assert est.extras["fit_check"]["rms_ratio"] < est.extras["fit_check"]["threshold"]
    assert "runaway" not in est.extras and not est.warnings


def test_runaway_check_rules():
    """Unit rules: growth below the factor, a shrinking parameter, a zero start, or a sensitive
    parameter are not flagged; unmeasurable rows (NaN noise) are left out."""
    sd = np.array([1.0, 1.0, np.nan])
    flat = np.array([[1e-3], [1e-3], [5.0]])
    assert runaway_check(["K"], np.array([1.0]), np.array([RUNAWAY_FACTOR * 2]), flat, sd, "E")[0] == {"K": {
        "start": 1.0, "value": RUNAWAY_FACTOR * 2, "growth": RUNAWAY_FACTOR * 2, "chi2_doubling": pytest.approx(2e-6)}}
    assert runaway_check(["K"], np.array([1.0]), np.array([RUNAWAY_FACTOR * 0.5]), flat, sd, "E") == ({}, None)
    assert runaway_check(["K"], np.array([1e6]), np.array([1.0]), flat, sd, "E") == ({}, None)
    assert runaway_check(["K"], np.array([0.0]), np.array([1e9]), flat, sd, "E") == ({}, None)
    steep = np.array([[2.0], [0.0], [0.0]])
    assert runaway_check(["K"], np.array([1.0]), np.array([1e9]), steep, sd, "E") == ({}, None)


# ---- what uses the checks: the pipeline's choice of start and of the sampler's seed ----------------------

def test_pipeline_does_not_start_from_a_matching_miss(sbc_data):
    """odeinfer.pipeline.run without start: a matching estimate that misses the data (if one converges;
    OrthogonalConditions without seeds is skipped here, K entering nonlinearly) is not used as Embedding's
    start (a note says why), and Embedding's own start search reaches scipy's optimum."""
    from odeinfer.pipeline import run

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run(logistic, sbc_data, x0={"x": X0}, bayes=None, progress=lambda msg: None)
    oc = res.matching
    if oc is not None and oc.extras["trajectory_check"]["rms_ratio"] > oc.extras["trajectory_check"]["threshold"]:
        assert any(n.startswith("OrthogonalConditions: not used to start what follows: its trajectory misses the data")
                   for n in res.notes)
    fit = res.fit
    assert fit.estimator == "Embedding" and fit.converged and "runaway" not in fit.extras
    np.testing.assert_array_less(np.abs(fit.values - _reference(sbc_data)), 1e-3 * fit.bse.to_numpy())


def test_pipeline_seeds_nuts_only_from_a_usable_estimate(sbc_data):
    """The pipeline started at the matching miss (K ~ -2.5e4): Embedding runs away from there and says so;
    its estimate is not used to seed NUTS (a note says why): the chains start from the given priors and
    sample (before: seeded at K ~ 1e9, PyMC stopped with "Bad initial energy")."""
    from odeinfer.pipeline import run
    from odeinfer.spec import BayesSpec
    from sbc_cases import PRIOR_LOGISTIC, _dists

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run(logistic, sbc_data, estimators=("Embedding",), x0={"x": X0}, start={"r": 0.0676, "K": -24566.75},
                  priors=_dists(PRIOR_LOGISTIC), bayes=BayesSpec(draws=20, tune=20, chains=1),
                  progress=lambda msg: None)
    assert "runaway" in res.fit.extras
    assert any(n.startswith("Embedding: not used to start what follows: ['K'] ran away") for n in res.notes)
    assert any(n.startswith("NUTS:") and "PyMC's default start" in n for n in res.notes)
    assert res.idata is not None and res.idata.posterior.attrs["odeinfer_seeded_mass_matrix"] == 0
    assert np.all(np.isfinite(res.idata.posterior["K"].values))


def test_a_fit_that_misses_still_seeds_nuts():
    """SIR with log noise on the boarding-school influenza data (notebook 09's reference fit, beta 1.776,
    gamma 0.602): the trajectory misses the data by more than the threshold (BiasWarning: the model does not
    describe these data fully), but the optimum is the mode of the same likelihood, so it still seeds NUTS;
    only the pipeline's choice of a start from a matching estimate uses the miss."""
    from odeinfer.estimators._trajectory_check import unusable_reason

    zoo = oi.zoo.get("sir")
    data = oi.datasets.influenza_boarding_school().select(["in_bed"]).rename({"in_bed": "I"})
    model = zoo.model.with_observation(observed=["I"], noise="log")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = oi.Embedding(estimate_x0=False, log_params=True).fit(model, data, start={"beta": 1.5, "gamma": 0.4},
                                                                   x0=zoo.x0)
    assert abs(fit.params["beta"] - 1.776) < 0.01 and abs(fit.params["gamma"] - 0.602) < 0.01
    assert fit.extras["fit_check"]["rms_ratio"] > fit.extras["fit_check"]["threshold"]
    assert any(issubclass(w.category, BiasWarning) and "misses the data" in str(w.message) for w in caught)
    assert "runaway" not in fit.extras
    assert unusable_reason(fit) is None
    assert "misses the data" in unusable_reason(fit, trajectory=True)
