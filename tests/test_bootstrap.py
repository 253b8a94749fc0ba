"""Estimate.conf_int(method="bootstrap"): parametric bootstrap intervals (odeinfer.inference.bootstrap).

The reference is closed form: x' = a, x(0) = x0 observed with Gaussian noise at n times is the
linear regression y = x0 + a t. Its least-squares fit, the pooled sd (RSS / (n - 2)) and the
standard errors come from numpy's lstsq here, independently of odeinfer. A parametric bootstrap
refit is then exactly a regression on y* = X beta_hat + sigma_hat e, so
a* ~ N(a_hat, se_a^2) (percentile interval -> a_hat +- z se_a) and
t* = (a* - a_hat) / se*_a ~ Student t(n - 2) (studentized interval -> the exact t interval
a_hat +- t_{n-2} se_a). Tolerances are the Monte Carlo standard errors of sample quantiles at
the n_boot used, sqrt(p (1 - p) / n_boot) / density(quantile).
"""

import math
import re
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import odeinfer as oi
from odeinfer.errors import InputError
from odeinfer.inference.bootstrap import BootstrapWarning

LINE = oi.Model.from_equations({"x": "a"}, params=["a"], name="line")
T = np.linspace(0.0, 2.0, 20)
N_BOOT = 400
ALPHA = 0.05


@pytest.fixture(scope="module")
def fit():
    data, _ = oi.simulate(LINE, {"a": 1.0}, {"x": 0.5}, T, noise=0.3, rng=4)
    est = oi.Embedding().fit(LINE, data, start={"a": 0.5})
    return data, est


@pytest.fixture(scope="module")
def regression(fit):
    data, _ = fit
    y = data.y[:, 0]
    X = np.column_stack([T, np.ones_like(T)])
    beta, rss, *_ = np.linalg.lstsq(X, y, rcond=None)
    n, k = X.shape
    sigma = math.sqrt(float(rss[0]) / (n - k))
    se = sigma * np.sqrt(np.diag(np.linalg.inv(X.T @ X)))
    return beta, se, n - k


def _quantile_se(p, density, n):
    return math.sqrt(p * (1 - p) / n) / density


def test_the_fit_is_the_linear_regression(fit, regression):
    _, est = fit
    beta, se, _ = regression
    np.testing.assert_allclose(est.values, beta, rtol=1e-7)
    np.testing.assert_allclose(est.bse.to_numpy(), se, rtol=1e-6)


def test_percentile_interval_matches_the_exact_bootstrap_distribution(fit, regression):
    _, est = fit
    beta, se, _ = regression
    with warnings.catch_warnings():
        warnings.simplefilter("error", oi.CoverageWarning)  # Embedding's percentile kind covered in the panel
        ci = est.conf_int(method="bootstrap", n_boot=N_BOOT, seed=11)
    z = stats.norm.ppf(1 - ALPHA / 2)
    tol = 4 * _quantile_se(ALPHA / 2, stats.norm.pdf(z), N_BOOT)  # in standard errors
    for j, name in enumerate(est.names):
        assert abs(ci.loc[name, "lower"] - (beta[j] - z * se[j])) < tol * se[j], name
        assert abs(ci.loc[name, "upper"] - (beta[j] + z * se[j])) < tol * se[j], name
    assert ci.attrs["n_boot"] == N_BOOT and ci.attrs["n_failed"] == 0 and ci.attrs["n_unconverged"] == 0
    assert ci.attrs["n_used"] == {"a": N_BOOT, "x0[x]": N_BOOT}
    # the whole sample: mean a_hat and sd se_a, within 4 Monte Carlo standard errors
    theta = est._bootstrapper.sample(N_BOOT, 11)["values"]
    assert np.all(np.abs(theta.mean(axis=0) - beta) < 4 * se / math.sqrt(N_BOOT))
    assert np.all(np.abs(theta.std(axis=0, ddof=1) / se - 1) < 4 / math.sqrt(2 * (N_BOOT - 1)))


def test_studentized_interval_matches_the_exact_t_interval(fit, regression):
    _, est = fit
    beta, se, dof = regression
    before = est._bootstrapper.sample(N_BOOT, 11)
    with pytest.warns(oi.CoverageWarning, match=r"Embedding: bootstrap intervals of kind='studentized' under-covered "
                      r"in the coverage panel .* in 4 of 10 settings.*alpha-pinene n = 50, sigma = 8: 0\.65-0\.93 per "
                      r"parameter.*kind='percentile' covered.*Use kind='percentile' or conf_int\(method='profile'\)"):
        ci = est.conf_int(method="bootstrap", kind="studentized", n_boot=N_BOOT, seed=11)
    assert est._bootstrapper.sample(N_BOOT, 11) is before  # the cached refits: no new work
    q = stats.t.ppf(1 - ALPHA / 2, dof)
    tol = 4 * _quantile_se(ALPHA / 2, stats.t.pdf(q, dof), N_BOOT)
    for j, name in enumerate(est.names):
        assert abs(ci.loc[name, "lower"] - (beta[j] - q * se[j])) < tol * se[j], name
        assert abs(ci.loc[name, "upper"] - (beta[j] + q * se[j])) < tol * se[j], name
    assert ci.attrs["kind"] == "studentized"


def test_same_seed_same_bits_on_an_executor_and_another_seed_differs(fit):
    data, _ = fit
    est = oi.Embedding().fit(LINE, data, start={"a": 0.5})  # a fresh estimate: nothing cached
    local = est.conf_int(method="bootstrap", n_boot=24, seed=3)
    est_pool = oi.Embedding().fit(LINE, data, start={"a": 0.5})
    with ThreadPoolExecutor(2) as pool:
        remote = est_pool.conf_int(method="bootstrap", n_boot=24, seed=3, executor=pool)
    np.testing.assert_array_equal(remote.to_numpy(), local.to_numpy())
    np.testing.assert_array_equal(est_pool._bootstrapper.sample(24, 3)["values"],
                                  est._bootstrapper.sample(24, 3)["values"])
    other = est.conf_int(method="bootstrap", n_boot=24, seed=4)
    assert not np.array_equal(other.to_numpy(), local.to_numpy())


def test_unconverged_refits_are_counted_and_reported(fit):
    data, _ = fit
    est = oi.Embedding(max_iter=1).fit(LINE, data, start={"a": 0.5})
    with pytest.warns(BootstrapWarning, match=r"bootstrap: 0 of 10 refits failed and 10 did not converge; they are "
                                              r"left out of the intervals"):
        ci = est.conf_int(method="bootstrap", n_boot=10, seed=0)
    assert ci.attrs["n_unconverged"] == 10 and ci.attrs["n_used"] == {"a": 0, "x0[x]": 0}
    assert ci.isna().all().all()


@pytest.mark.parametrize("kwargs, message", [
    (dict(kind="bca"), r"kind: expected one of \['percentile', 'studentized'\], got 'bca'"),
    (dict(n_boot=5), r"n_boot: expected an int >= 10 .* got 5"),
    (dict(n_boot=100.0), r"n_boot: expected an int >= 10 .* got 100.0"),
    (dict(seed=-1), r"seed: expected a non-negative int .* got -1; pass e.g. seed=2024"),
    (dict(executor="dask"), r"executor: expected a concurrent.futures.Executor or a Dask Client, got str"),
])
def test_bad_bootstrap_arguments(fit, kwargs, message):
    _, est = fit
    with pytest.raises(InputError, match=message):
        est.conf_int(method="bootstrap", **kwargs)


def test_bootstrap_arguments_without_method_bootstrap(fit):
    _, est = fit
    with pytest.raises(InputError, match=r"n_boot: applies to method='bootstrap' only, got n_boot= with "
                                         r"method='wald'; drop it or pass method='bootstrap'"):
        est.conf_int(n_boot=100)


def test_a_shut_down_executor_is_refused(fit):
    _, est = fit
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    with pytest.raises(InputError, match=r"executor: the ThreadPoolExecutor given cannot take work"):
        est.conf_int(method="bootstrap", n_boot=10, seed=99, executor=pool)
    assert (10, 99) not in est._bootstrapper._samples


def test_not_available_after_a_json_round_trip(fit):
    _, est = fit
    back = oi.Estimate.from_json(est.to_json(), model=LINE)
    with pytest.raises(ValueError, match=r"method: 'bootstrap' is not available for this Embedding estimate \("
                                         r"bootstrap intervals need an estimate fitted in this session"):
        back.conf_int(method="bootstrap")


def test_executor_does_not_apply_to_wald_intervals(fit):
    _, est = fit
    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(InputError, match=r"executor: applies to method='profile' or 'bootstrap' only, got "
                                             r"executor= with method='wald' \(computed here, instantly\); drop it"):
            est.conf_int(executor=pool)


def test_profile_intervals_on_an_executor_equal_the_local_ones(fit):
    """Each side of each profile is one task on the executor; every walk starts at the estimate."""
    data, est = fit
    fresh = oi.Embedding().fit(LINE, data, start={"a": 0.5})
    local = est.conf_int(method="profile")
    with ThreadPoolExecutor(2) as pool:
        remote = fresh.conf_int(method="profile", executor=pool)
    np.testing.assert_array_equal(remote.to_numpy(), local.to_numpy())
    assert fresh._profiler.traces == est._profiler.traces
    # linear model: the profile interval is the Wald interval (the same normal quantile)
    np.testing.assert_allclose(remote.to_numpy(), est.conf_int().to_numpy(), rtol=1e-6)


# --- maximum-likelihood fits (a model with observables) -------------------------------------------
OBS = LINE.observe({"y": "x"}, noise=oi.Normal(sigma="sd"), params=["sd"])


@pytest.fixture(scope="module")
def ml_fit():
    rng = np.random.default_rng(4)
    y = 0.5 + 1.0 * T + 0.3 * rng.standard_normal(T.size)
    params = {"a": oi.Param(0.5, -10, 10), "x0p": oi.Param(0.0, -10, 10), "sd": oi.Param(0.5, 1e-3, 10, "log10")}
    est = oi.Embedding().fit(oi.FitProblem(OBS, oi.Data(T, y, "y"), params, x0={"x": "x0p"}))
    return y, est


def test_percentile_interval_of_a_likelihood_fit_matches_the_exact_bootstrap_distribution(ml_fit):
    """The ML fit is the regression with sd_ML = sqrt(RSS / n); a refit of y* = X beta_hat + sd_ML e gives
    a* ~ N(a_hat, sd_ML^2 c_a) and sd* = sd_ML sqrt(W / n) with W ~ chi2(n - 2)."""
    y, est = ml_fit
    n_boot = 200
    X = np.column_stack([T, np.ones_like(T)])
    beta, rss, *_ = np.linalg.lstsq(X, y, rcond=None)
    n = T.size
    sd_ml = math.sqrt(float(rss[0]) / n)
    se = sd_ml * np.sqrt(np.diag(np.linalg.inv(X.T @ X)))
    np.testing.assert_allclose(est.params[["a", "x0p", "sd"]].to_numpy(), [beta[0], beta[1], sd_ml], rtol=1e-5)
    ci = est.conf_int(method="bootstrap", n_boot=n_boot, seed=2)
    assert ci.attrs["n_failed"] == 0 and ci.attrs["n_unconverged"] == 0
    z = stats.norm.ppf(1 - ALPHA / 2)
    tol = 4 * _quantile_se(ALPHA / 2, stats.norm.pdf(z), n_boot)
    for name, b, s in (("a", beta[0], se[0]), ("x0p", beta[1], se[1])):
        assert abs(ci.loc[name, "lower"] - (b - z * s)) < tol * s, name
        assert abs(ci.loc[name, "upper"] - (b + z * s)) < tol * s, name
    for p, col in ((ALPHA / 2, "lower"), (1 - ALPHA / 2, "upper")):
        w = stats.chi2.ppf(p, n - 2)
        expected = sd_ml * math.sqrt(w / n)
        tol_sd = 4 * _quantile_se(p, stats.chi2.pdf(w, n - 2), n_boot) * sd_ml / (2 * math.sqrt(w * n))
        assert abs(ci.loc["sd", col] - expected) < tol_sd, (col, ci.loc["sd", col], expected)


@pytest.mark.parametrize("dist, scale", [(0, 0), (1, 1), (0, 2), (1, 0)])
def test_measurements_are_drawn_from_their_noise_model(dist, scale):
    """Normal / Laplace noise on the lin, log and log10 scales: the residuals on the noise scale pass a
    Kolmogorov-Smirnov test against the noise model (4000 draws, level 0.001)."""
    from types import SimpleNamespace

    from odeinfer.inference.bootstrap import simulate_measurements

    m = 4000
    h, sd = np.full(m, 2.5), np.full(m, 0.2)
    problem = SimpleNamespace(with_measurements=lambda values: values)
    (values,) = simulate_measurements((problem, [(h, sd, np.full(m, dist), np.full(m, scale))]),
                                      np.random.default_rng(5))
    to_scale = {0: lambda v: v, 1: np.log, 2: np.log10}[scale]
    resid = (to_scale(values[0]) - to_scale(h)) / sd
    ref = stats.norm if dist == 0 else stats.laplace
    assert stats.kstest(resid, ref.cdf).pvalue > 1e-3
    wrong = stats.laplace if dist == 0 else stats.norm
    assert stats.kstest(resid, wrong.cdf).pvalue < 1e-3  # the test can tell the two apart at this size


def test_profile_on_a_shut_down_executor_is_refused(fit):
    data, _ = fit
    est = oi.Embedding().fit(LINE, data, start={"a": 0.5})
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    with pytest.raises(InputError, match=r"executor: the ThreadPoolExecutor given cannot take work"):
        est.conf_int(method="profile", executor=pool)
    assert est._profiler.traces == {}  # no walk started


# --- several experiments, log-scale noise: still linear regressions -------------------------------
GROWTH = oi.Model.from_equations({"x": "a*x"}, params=["a"], name="growth").with_observation(noise="log")


def _two_lines():
    """x' = a in two experiments (own x0 each): y = a t + x0_A [A] + x0_B [B] + e."""
    rng = np.random.default_rng(8)
    datas = [oi.Data(T, x0 + 1.0 * T + 0.3 * rng.standard_normal(T.size), "x", name=name)
             for name, x0 in (("A", 0.5), ("B", -1.0))]
    X = np.zeros((2 * T.size, 3))
    X[:, 0] = np.concatenate([T, T])
    X[:T.size, 1] = X[T.size:, 2] = 1.0
    return LINE, oi.Experiments(datas), np.concatenate([d.y[:, 0] for d in datas]), X, ["a", "x0[x]@A", "x0[x]@B"]


def _log_growth():
    """x' = a x with log noise: log y = log x0 + a t + e."""
    y = np.exp(np.log(2.0) + 0.4 * T + 0.1 * np.random.default_rng(9).standard_normal(T.size))
    return GROWTH, oi.Data(T, y, "x"), np.log(y), np.column_stack([T, np.ones_like(T)]), ["a"]  # x0 = exp(.)


@pytest.mark.parametrize("case", [_two_lines, _log_growth])
def test_percentile_interval_of_the_slope_with_experiments_and_log_noise(case):
    model, data, z, X, linear = case()
    est = oi.Embedding().fit(model, data, start={"a": 0.5})
    beta, rss, *_ = np.linalg.lstsq(X, z, rcond=None)
    sigma = math.sqrt(float(rss[0]) / (X.shape[0] - X.shape[1]))
    se = sigma * np.sqrt(np.diag(np.linalg.inv(X.T @ X)))
    np.testing.assert_allclose(est.params[linear].to_numpy(), beta[:len(linear)], rtol=1e-6)
    n_boot = 200
    ci = est.conf_int(method="bootstrap", n_boot=n_boot, seed=21)
    assert ci.attrs["n_failed"] == 0 and ci.attrs["n_unconverged"] == 0
    zq = stats.norm.ppf(1 - ALPHA / 2)
    tol = 4 * _quantile_se(ALPHA / 2, stats.norm.pdf(zq), n_boot)
    for j, name in enumerate(linear):
        assert abs(ci.loc[name, "lower"] - (beta[j] - zq * se[j])) < tol * se[j], name
        assert abs(ci.loc[name, "upper"] - (beta[j] + zq * se[j])) < tol * se[j], name


def test_simultaneous_estimates_bootstrap_too(fit, regression):
    """Bock's simultaneous method on the same regression: refits get the estimate's initial states as x0."""
    data, _ = fit
    beta, se, _ = regression
    est = oi.Simultaneous().fit(LINE, data, start={"a": 0.5})
    np.testing.assert_allclose(est.values, beta, rtol=1e-6)
    n_boot = 200
    ci = est.conf_int(method="bootstrap", n_boot=n_boot, seed=5)
    assert ci.attrs["n_failed"] == 0 and ci.attrs["n_unconverged"] == 0
    z = stats.norm.ppf(1 - ALPHA / 2)
    tol = 4 * _quantile_se(ALPHA / 2, stats.norm.pdf(z), n_boot)
    for j, name in enumerate(est.names):
        assert abs(ci.loc[name, "lower"] - (beta[j] - z * se[j])) < tol * se[j], name
        assert abs(ci.loc[name, "upper"] - (beta[j] + z * se[j])) < tol * se[j], name


# --- matching estimators: the bootstrap spread against the sampling spread from the truth ----------
DECAY = oi.Model.from_equations({"x": "-k*x"}, params=["k"], name="decay")
T_DECAY = np.linspace(0.0, 4.0, 41)


@pytest.mark.parametrize("estimator", [oi.GradientMatching(), oi.OrthogonalConditions()],
                         ids=["GradientMatching", "OrthogonalConditions"])
def test_matching_estimators_bootstrap_spread_matches_the_sampling_spread(estimator):
    """The sd of 200 refits of data simulated at one estimate against the sd of the estimator over 200
    datasets simulated from the truth (k = 0.7, x0 = 2, sd 0.05): equal within 4 standard errors of the
    log ratio of two sample sds, sqrt(1 / (2 * 199) + 1 / (2 * 199))."""
    n = 200
    truth = [estimator.fit(DECAY, oi.simulate(DECAY, {"k": 0.7}, {"x": 2.0}, T_DECAY, noise=0.05, rng=100 + i).data)
             .params["k"] for i in range(n)]
    data = oi.simulate(DECAY, {"k": 0.7}, {"x": 2.0}, T_DECAY, noise=0.05, rng=3).data
    est = estimator.fit(DECAY, data)
    with pytest.warns(oi.CoverageWarning, match=rf"{type(estimator).__name__}: bootstrap intervals of "
                      r"kind='percentile' under-covered.*alpha-pinene n = 200, sigma = 3.*oi\.Embedding\(\)\.fit"):
        ci = est.conf_int(method="bootstrap", n_boot=n, seed=4)
    assert ci.attrs["n_failed"] == 0 and ci.attrs["n_unconverged"] == 0
    boot = est._bootstrapper.sample(n, 4)["values"][:, 0]
    ratio = np.std(boot, ddof=1) / np.std(truth, ddof=1)
    assert abs(math.log(ratio)) < 4 * math.sqrt(2 / (2 * (n - 1))), ratio
    assert ci.loc["k", "lower"] < est.params["k"] < ci.loc["k", "upper"]


def test_matching_bootstrap_starts_at_the_given_initial_state():
    data = oi.simulate(DECAY, {"k": 0.7}, {"x": 2.0}, T_DECAY, noise=0.05, rng=3).data
    est = oi.GradientMatching().fit(DECAY, data, x0={"x": 2.0})
    _, (_, templates, *_), _ = est._bootstrapper._build()
    t, y_hat = templates[0][0], templates[0][1]
    np.testing.assert_allclose(y_hat[:, 0], 2.0 * np.exp(-est.params["k"] * t), rtol=1e-6)  # closed form


def test_an_estimator_that_cannot_refit_says_which_can():
    """A stream fit keeps no data to simulate from: no bootstrap, and the message names those that have one."""
    data = oi.simulate(DECAY, {"k": 0.7}, {"x": 2.0}, T_DECAY, noise=0.05, rng=3).data
    est = oi.NewtonRaphson().fit_stream(DECAY, (data.t, data.y), start={"k": 0.5})
    with pytest.raises(ValueError, match=r"method: 'bootstrap' is not available for this NewtonRaphson estimate \("
                                         r"bootstrap intervals need .* oi.Embedding, oi.Simultaneous, "
                                         r"oi.OrthogonalConditions, oi.GradientMatching or the Newton family, on "
                                         r"in-memory data of an ODE model, or oi.AdjointDDE in its default mode\); "
                                         r"available: \['wald'\]"):
        est.conf_int(method="bootstrap")


@pytest.mark.parametrize("estimator", [oi.NewtonRaphson(derivative="local_polynomial"),
                                       oi.StochasticNewton(derivative="local_polynomial")], ids=["NewtonRaphson", "SNR"])
def test_newton_family_bootstrap_spread_matches_the_sampling_spread(estimator):
    """As for the matching estimators: the sd of 100 refits of data simulated at one estimate (start:
    the smoothed state at t0; noise: the data's own sd) against the sd of the estimator over 100
    datasets simulated from the truth, within 4 standard errors of the log ratio of two sample sds,
    4 sqrt(1 / 99) = 0.40."""
    n = 100
    kw = {"rng": 5} if isinstance(estimator, oi.StochasticNewton) else {}
    truth = [estimator.fit(DECAY, oi.simulate(DECAY, {"k": 0.7}, {"x": 2.0}, T_DECAY, noise=0.05, rng=100 + i).data,
                           start={"k": 0.5}, **kw).params["k"] for i in range(n)]
    data = oi.simulate(DECAY, {"k": 0.7}, {"x": 2.0}, T_DECAY, noise=0.05, rng=3).data
    est = estimator.fit(DECAY, data, start={"k": 0.5}, **kw)
    ci = est.conf_int(method="bootstrap", n_boot=n, seed=4)
    assert ci.attrs["n_failed"] == 0 and ci.attrs["n_unconverged"] == 0
    boot = est._bootstrapper.sample(n, 4)["values"][:, 0]
    ratio = np.std(boot, ddof=1) / np.std(truth, ddof=1)
    assert abs(math.log(ratio)) < 4 * math.sqrt(2 / (2 * (n - 1))), ratio


def test_each_refit_carries_its_covariance(fit):
    """``sample()["cov"]``: each refit's covariance, used by the coverage panel's studentized joint region.
    For the regression every refit's covariance is s*^2 (X'X)^-1, so its correlation is that of
    (X'X)^-1 (numpy, independent of odeinfer) and its diagonal is the refit's squared bse."""
    _, est = fit
    s = est._bootstrapper.sample(N_BOOT, 11)  # the refits of the interval tests (cached)
    X = np.column_stack([T, np.ones_like(T)])
    inv = np.linalg.inv(X.T @ X)
    rho = inv[0, 1] / math.sqrt(inv[0, 0] * inv[1, 1])
    assert len(s["cov"]) == N_BOOT
    for c, bse in zip(s["cov"][:20], s["bse"][:20]):
        assert c.shape == (2, 2)
        np.testing.assert_allclose(np.sqrt(np.diag(c)), bse, rtol=1e-12)
        assert c[0, 1] / math.sqrt(c[0, 0] * c[1, 1]) == pytest.approx(rho, abs=1e-6)


# --- the panel's bootstrap cells, quoted by the CoverageWarning ----------------------------------------
def test_recorded_bootstrap_cells_are_the_reference_files():
    """``BOOTSTRAP_RECORDED`` holds every bootstrap row of tests/reference/coverage.md, with its figures and verdict
    (``| setting | estimator | bootstrap-kind | R, B = B | failed | name cov (se); ... | widths | joint (se) | verdict
    | code |``), and nothing else."""
    from odeinfer.estimators._coverage import BOOTSTRAP_RECORDED

    rows = {}
    for line in (Path(__file__).parent / "reference" / "coverage.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[2].startswith("bootstrap-"):
            cov = [float(v) for v in re.findall(r"\S+ ([\d.]+) \(", cells[5])]
            reps, boot = map(int, re.fullmatch(r"(\d+), B = (\d+)", cells[3]).groups())
            rows[(cells[1], cells[2].split("-")[1], cells[0])] = (
                min(cov), max(cov), float(cells[7].split()[0]), reps, boot, int(cells[4].split(";")[0]), cells[8])
    recorded = {(e, k, s): v for (e, k), cells in BOOTSTRAP_RECORDED.items() for s, v in cells.items()}
    assert recorded.keys() == rows.keys()
    for key, figures in recorded.items():
        assert figures[:3] == pytest.approx(rows[key][:3], abs=5e-4) and figures[3:] == rows[key][3:], key


def test_the_bootstrap_note_says_when_the_configuration_was_not_run():
    from odeinfer.estimators._coverage import bootstrap_coverage_note
    from odeinfer.inference.bootstrap import _has_defaults

    assert _has_defaults(oi.OrthogonalConditions()) and _has_defaults(oi.Embedding(starts=4, n_jobs=2))
    assert not _has_defaults(oi.OrthogonalConditions(test_functions="bspline"))
    assert not _has_defaults(oi.Embedding(max_iter=5))
    note = bootstrap_coverage_note("OrthogonalConditions", "percentile", default=False)
    # the figures of tests/reference/coverage.md's rows (alpha-pinene (200, 3), R = 500, B = 200)
    assert "this configuration was not run" in note and "0.45-0.69 per parameter, joint 0.73 (R = 500" in note
    assert "kind='studentized' under-covered in its turn at Lotka-Volterra n = 21, log sd 0.25; alpha-pinene n = 50, " \
           "sigma = 3" in note
    assert bootstrap_coverage_note("Embedding", "percentile") is None  # covered in all ten settings
    assert bootstrap_coverage_note("Simultaneous", "profile") is None  # not run: no claim
    assert "in 6 of 7 settings" in bootstrap_coverage_note("GradientDescent", "studentized")
    assert "in 6 of 7 settings" in bootstrap_coverage_note("StochasticNewton", "studentized")
    assert "in 7 of 7 settings" in bootstrap_coverage_note("NewtonRaphson", "percentile")
