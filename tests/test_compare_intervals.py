"""oi.compare_intervals: frequentist intervals next to posterior equal-tailed and HDI intervals.

Known answers: posterior "draws" placed at the quantiles (i + 0.5)/n of a normal or an
exponential distribution, so the equal-tailed interval is the distribution's quantiles
(normal: mu +- 1.959964 s; Exp(1): [-ln 0.975, -ln 0.025] = [0.025318, 3.688879]) and the
95% HDI of Exp(1) is [0, -ln 0.05] = [0, 2.995732]. The Mahalanobis distance is checked
against draws whitened to an exact sample mean mu and covariance L L' (so a point
mu + L u is at distance |u|) and against an explicit 2x2 inverse.
"""

import arviz as az
import numpy as np
import pytest
from scipy.stats import norm

import odeinfer as oi
from odeinfer.diagnostics.intervals import COLUMNS
from odeinfer.errors import InputError

LV = oi.zoo.get("lotka_volterra")


@pytest.fixture(scope="module")
def fits():
    data, _ = oi.simulate(LV.model, LV.params, LV.x0, LV.t, noise=LV.sigma, rng=1)
    return [oi.OrthogonalConditions().fit(LV.model, data), oi.GradientMatching().fit(LV.model, data)]


def _est(values, cov, names=("alpha", "beta", "gamma", "delta"), estimator="Synthetic", model=None):
    return oi.Estimate(estimator, model or LV.model, tuple(names), np.asarray(values, float),
                       None if cov is None else np.asarray(cov, float), "converged")


def _chains(x, c=4):
    x = np.asarray(x)
    perm = np.random.default_rng(0).permutation(len(x))
    return x[perm].reshape((c, -1) + x.shape[1:])


def _quantile_draws(dist, n=40000):
    return dist.ppf((np.arange(n) + 0.5) / n)


def test_equal_tailed_and_hdi_of_a_known_normal():
    mu, s = 0.55, 0.07
    post = {"alpha": _chains(_quantile_draws(norm(mu, s)))}
    df = oi.compare_intervals(_est([0.5, 0.02, 0.8, 0.02], np.diag([0.01, 1e-5, 0.01, 1e-5])),
                              az.from_dict(posterior=post))
    et = df[(df.param == "alpha") & (df.method == "equal-tailed")].iloc[0]
    hdi = df[(df.param == "alpha") & (df.method == "hdi")].iloc[0]
    z = 1.959963984540054
    assert et.lower == pytest.approx(mu - z * s, abs=1e-3 * s)  # draw spacing at the 2.5% quantile:
    assert et.upper == pytest.approx(mu + z * s, abs=1e-3 * s)  # 1/(n f(q)) = 4e-4 s
    assert hdi.lower == pytest.approx(mu - z * s, abs=3e-3 * s)  # symmetric: HDI = ET
    assert hdi.upper == pytest.approx(mu + z * s, abs=3e-3 * s)
    assert et.estimate == pytest.approx(mu, abs=1e-9) and et.width == pytest.approx(2 * z * s, rel=1e-3)
    # parameters without posterior draws get only the frequentist rows
    assert set(df[df.param == "beta"].source) == {"Synthetic"}


def test_hdi_differs_from_equal_tailed_for_a_skewed_posterior():
    post = {"alpha": _chains(_quantile_draws(__import__("scipy.stats").stats.expon()))}
    df = oi.compare_intervals(_est([1.0, 0.02, 0.8, 0.02], np.diag([0.01] * 4)), az.from_dict(posterior=post))
    et = df[(df.param == "alpha") & (df.method == "equal-tailed")].iloc[0]
    hdi = df[(df.param == "alpha") & (df.method == "hdi")].iloc[0]
    assert (et.lower, et.upper) == pytest.approx((-np.log(0.975), -np.log(0.025)), abs=2e-3)
    assert (hdi.lower, hdi.upper) == pytest.approx((0.0, -np.log(0.05)), abs=2e-3)


def test_wald_rows_and_overlap_by_hand():
    # Wald: 0.5 +- 1.96 * 0.1 = [0.304, 0.696]; posterior ET of N(0.6, 0.05): [0.502, 0.698]
    mu, s = 0.6, 0.05
    post = {"alpha": _chains(_quantile_draws(norm(mu, s)))}
    df = oi.compare_intervals(_est([0.5, 0.02, 0.8, 0.02], np.diag([0.01, 1e-6, 0.01, 1e-6])),
                              az.from_dict(posterior=post))
    assert tuple(df.columns) == COLUMNS
    w = df[(df.param == "alpha") & (df.source == "Synthetic")].iloc[0]
    z = 1.959963984540054
    lo, hi = 0.5 - z * 0.1, 0.5 + z * 0.1
    assert (w.lower, w.upper, w.width) == pytest.approx((lo, hi, 2 * z * 0.1))
    plo, phi = mu - z * s, mu + z * s
    assert w.overlap == pytest.approx((min(hi, phi) - max(lo, plo)) / (hi - lo), abs=1e-3)
    # one shared name: Mahalanobis = |0.5 - 0.6| / 0.05 = 2
    assert w.mahalanobis == pytest.approx(2.0, rel=1e-3)


def test_mahalanobis_over_shared_names():
    r = np.random.default_rng(5)
    Z = r.normal(size=(4000, 2))
    Z -= Z.mean(axis=0)
    Z = Z @ np.linalg.inv(np.linalg.cholesky(np.cov(Z, rowvar=False))).T  # sample cov exactly I
    mu = np.array([0.55, 0.028])
    L = np.array([[0.05, 0.0], [0.002, 0.001]])
    X = mu + Z @ L.T
    u = np.array([1.5, -2.0])  # |u| = 2.5
    point = mu + L @ u
    idata = az.from_dict(posterior={"alpha": _chains(X[:, 0]), "beta": _chains(X[:, 1])})
    est = _est([point[0], point[1], 0.8, 0.02], np.diag([1e-3, 1e-6, 1e-3, 1e-6]))
    df = oi.compare_intervals(est, idata)
    assert df.attrs["mahalanobis"]["Synthetic"] == pytest.approx(2.5, rel=1e-9)
    # explicit 2x2 inverse on numpy's sample moments
    S = np.cov(X, rowvar=False)
    a, b, d = S[0, 0], S[0, 1], S[1, 1]
    rr = point - X.mean(axis=0)
    d2 = (d * rr[0] ** 2 - 2 * b * rr[0] * rr[1] + a * rr[1] ** 2) / (a * d - b * b)
    np.testing.assert_allclose(df[df.source == "Synthetic"].mahalanobis, np.sqrt(d2), rtol=1e-9)


def test_real_estimates_against_posterior_around_one_of_them(fits):
    oc, gm = fits
    r = np.random.default_rng(0)
    D = r.multivariate_normal(oc.values, oc.cov, size=(4, 1000))
    post = {n: D[..., i] for i, n in enumerate(oc.names)}
    df = oi.compare_intervals(fits, az.from_dict(posterior=post), alpha=0.1)
    assert list(dict.fromkeys(df.param)) == list(LV.model.params)
    assert list(df[df.param == "alpha"].source) == ["OrthogonalConditions", "GradientMatching",
                                                    "posterior", "posterior"]
    # The posterior is N(oc, cov_oc): OC's Wald interval ~ the posterior ET interval, distance ~ 0
    ocw = df[df.source == "OrthogonalConditions"].set_index("param")
    post_et = df[df.method == "equal-tailed"].set_index("param")
    np.testing.assert_allclose(ocw.width, post_et.width, rtol=0.1)
    assert (ocw.overlap > 0.85).all()
    assert ocw.mahalanobis.iloc[0] < 0.2  # sqrt(chi2_4 / 4000 draws) scale
    assert df[df.source == "GradientMatching"].mahalanobis.iloc[0] > 1.0


def test_profile_not_available_is_marked_and_without_idata(fits):
    df = oi.compare_intervals(fits, methods=("wald", "profile"))
    prof = df[df.method == "profile"]
    assert len(prof) == 8 and prof.lower.isna().all()
    assert prof.note.str.startswith("not available").all()
    assert df[df.method == "wald"].lower.notna().all()
    assert df.overlap.isna().all() and "posterior" not in set(df.source)


def test_profile_intervals_when_the_estimate_provides_them():
    import pandas as pd

    names = ("alpha", "beta", "gamma", "delta")

    class Profile:  # asymmetric intervals, as a profile likelihood gives
        def conf_int(self, alpha):
            return pd.DataFrame({"lower": [0.40, 0.01, 0.7, 0.015], "upper": [0.70, 0.03, 0.9, 0.03]}, index=names)

    e = _est([0.5, 0.02, 0.8, 0.02], np.eye(4) * 1e-4)
    object.__setattr__(e, "_profiler", Profile())
    post = {"alpha": _chains(_quantile_draws(norm(0.6, 0.05)))}  # ET [0.502, 0.698]
    df = oi.compare_intervals(e, az.from_dict(posterior=post), methods=("wald", "profile"))
    row = df[(df.param == "alpha") & (df.method == "profile")].iloc[0]
    assert (row.lower, row.upper, row.width) == pytest.approx((0.40, 0.70, 0.30))
    z = 1.959963984540054
    assert row.overlap == pytest.approx((0.6 + z * 0.05 - (0.6 - z * 0.05)) / 0.30, abs=1e-3)
    assert row.note == ""


def test_profile_that_fails_is_marked_failed():
    class Boom:
        def conf_int(self, alpha):
            raise oi.errors.SolverError("solve failed at t=3")

    e = _est([0.5, 0.02, 0.8, 0.02], np.eye(4) * 1e-4)
    object.__setattr__(e, "_profiler", Boom())  # the profile hook of Estimate.conf_int
    df = oi.compare_intervals(e, methods=("profile", "wald"))
    prof = df[df.method == "profile"]
    assert prof.note.str.startswith("failed: SolverError: solve failed at t=3").all() and prof.lower.isna().all()
    assert df[df.method == "wald"].lower.notna().all()


def test_repeated_estimators_get_numbered_sources(fits):
    df = oi.compare_intervals([fits[0], fits[0]])
    assert list(dict.fromkeys(df.source)) == ["OrthogonalConditions#1", "OrthogonalConditions#2"]


def test_estimate_without_covariance_has_nan_interval_with_note():
    df = oi.compare_intervals(_est([0.5, 0.02, 0.8, 0.02], None))
    assert df.lower.isna().all() and df.note.str.contains("no finite interval").all()


def test_bad_input():
    e = _est([0.5, 0.02, 0.8, 0.02], np.eye(4))
    decay = oi.zoo.get("linear_decay")
    other = _est(np.ones(decay.model.n_params), np.eye(decay.model.n_params), names=decay.model.params,
                 model=decay.model)
    with pytest.raises(InputError, match="estimates: estimates of different models cannot be compared"):
        oi.compare_intervals([e, other])
    with pytest.raises(InputError, match="estimates: every item must be an odeinfer Estimate"):
        oi.compare_intervals([e, "x"])
    with pytest.raises(InputError, match="estimates: expected at least one"):
        oi.compare_intervals([])
    with pytest.raises(InputError, match=r"alpha: expected a number in \(0, 1\)"):
        oi.compare_intervals(e, alpha=5)
    with pytest.raises(InputError, match="methods: expected a non-empty sequence"):
        oi.compare_intervals(e, methods=("bootstrap",))
    with pytest.raises(InputError, match="idata: expected an arviz.InferenceData"):
        oi.compare_intervals(e, idata={"alpha": np.zeros(3)})
