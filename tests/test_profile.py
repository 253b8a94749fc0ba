"""odeinfer.inference.profile.ProfileLikelihood on problems with closed-form profiles."""

import math
import warnings

import numpy as np
import pytest
from scipy.stats import chi2

from odeinfer.estimators import IdentifiabilityWarning
from odeinfer.inference import ProfileLikelihood, ProfileWarning, sample_starts


def _linear(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(30, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, 0.3, 30)
    u_hat, *_ = np.linalg.lstsq(X, y, rcond=None)
    r = y - X @ u_hat
    s = math.sqrt(r @ r / 27)
    Xw, yw = X / s, y / s

    def reopt(u, i):
        keep = [j for j in range(3) if j != i]
        b, *_ = np.linalg.lstsq(Xw[:, keep], yw - Xw[:, i] * u[i], rcond=None)
        out = u.copy()
        out[keep] = b
        res = yw - Xw @ out
        return 0.5 * res @ res, out

    cov = np.linalg.inv(Xw.T @ Xw)
    res = yw - Xw @ u_hat
    prof = ProfileLikelihood(["a", "b", "c"], u_hat, 0.5 * res @ res, np.sqrt(np.diag(cov)), np.full(3, -np.inf),
                             np.full(3, np.inf), reopt, lambda i, v: v)
    return prof, u_hat, np.sqrt(np.diag(cov))


def test_linear_model_profile_equals_wald():
    """For linear least squares D(v) = (v - u_hat)^2 / se^2 exactly, so the chi2(1) profile
    interval is u_hat +- z se."""
    prof, u_hat, se = _linear()
    ci = prof.conf_int(0.05)
    z = math.sqrt(chi2.ppf(0.95, 1))
    np.testing.assert_allclose(ci["lower"].to_numpy(), u_hat - z * se, rtol=1e-7)
    np.testing.assert_allclose(ci["upper"].to_numpy(), u_hat + z * se, rtol=1e-7)
    ci90 = prof.conf_int(0.10)
    assert np.all(ci90["upper"] < ci["upper"])


def test_asymmetric_profile_analytic_and_warned():
    """C(v) = 0.5 (exp(v) - 1)^2 / s^2 with minimum at 0: D(v) = thr at v = log(1 +- s sqrt(thr))."""
    s = 0.4  # half-widths 1.53 and 0.58
    reopt = lambda u, i: (0.5 * (math.exp(u[0]) - 1) ** 2 / s ** 2, u.copy())  # noqa: E731
    prof = ProfileLikelihood(["v"], np.zeros(1), 0.0, np.array([s]), np.full(1, -np.inf), np.full(1, np.inf), reopt,
                             lambda i, v: v)
    thr = chi2.ppf(0.95, 1)
    with pytest.warns(ProfileWarning, match=r"'v' is strongly asymmetric"):
        ci = prof.conf_int(0.05)
    assert ci.loc["v", "lower"] == pytest.approx(math.log(1 - s * math.sqrt(thr)), rel=1e-6)
    assert ci.loc["v", "upper"] == pytest.approx(math.log(1 + s * math.sqrt(thr)), rel=1e-6)


@pytest.mark.parametrize("wald_se, ratio", [(3.0, 1 / 3), (0.5, 2.0), (1.2, None)])
def test_a_profile_much_wider_or_narrower_than_its_wald_interval_is_warned(wald_se, ratio):
    """C(v) = 0.5 v^2 (standard error 1): the profile interval is +-z whatever se is given; a Wald se of 3 or
    0.5 makes the profile 1/3 or 2 times the Wald interval's width (warned), 1.2 gives 0.83 (within 1.5)."""
    reopt = lambda u, i: (0.5 * u[0] ** 2, u.copy())  # noqa: E731
    prof = ProfileLikelihood(["v"], np.zeros(1), 0.0, np.array([wald_se]), np.full(1, -np.inf), np.full(1, np.inf),
                             reopt, lambda i, v: v)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ci = prof.conf_int(0.05)
    z = math.sqrt(chi2.ppf(0.95, 1))
    assert ci.loc["v", "upper"] == pytest.approx(z, rel=1e-6) and ci.loc["v", "lower"] == pytest.approx(-z, rel=1e-6)
    texts = [str(w.message) for w in seen if issubclass(w.category, ProfileWarning)]
    if ratio is None:
        assert texts == []
    else:
        why = "it covers less than it claims" if ratio > 1 else "the curvature behind it"
        assert len(texts) == 1 and texts[0].startswith(f"profile interval of 'v' is {ratio:.3g} times as wide as its "
                                                       "Wald interval") and why in texts[0]


def test_flat_profile_gives_infinite_bounds_with_warning():
    reopt = lambda u, i: (1.0 + 1e-6 * math.tanh(u[0]), u.copy())  # noqa: E731
    prof = ProfileLikelihood(["k"], np.zeros(1), 1.0, np.array([np.nan]), np.full(1, -np.inf), np.full(1, np.inf),
                             reopt, lambda i, v: v)
    with pytest.warns(IdentifiabilityWarning, match=r"profile of 'k' is flat"):
        ci = prof.conf_int()
    assert ci.loc["k", "lower"] == -np.inf and ci.loc["k", "upper"] == np.inf


def test_bound_reached_before_threshold_is_infinite_on_that_side():
    reopt = lambda u, i: (0.5 * u[0] ** 2, u.copy())  # noqa: E731  se = 1
    prof = ProfileLikelihood(["p"], np.zeros(1), 0.0, np.ones(1), np.array([-1.0]), np.array([np.inf]), reopt,
                             lambda i, v: math.exp(v))
    with pytest.warns(IdentifiabilityWarning, match=r"lower side"):
        ci = prof.conf_int()
    assert ci.loc["p", "lower"] == -np.inf
    assert ci.loc["p", "upper"] == pytest.approx(math.exp(math.sqrt(chi2.ppf(0.95, 1))), rel=1e-6)


def test_reoptimisation_failures_are_reported():
    reopt = lambda u, i: None  # noqa: E731
    prof = ProfileLikelihood(["q"], np.zeros(1), 0.0, np.ones(1), np.full(1, -np.inf), np.full(1, np.inf), reopt,
                             lambda i, v: v)
    with pytest.warns(ProfileWarning, match=r"re-optimisation failed"):
        ci = prof.conf_int()
    assert np.isinf(ci.loc["q"]).all()


def test_sample_starts_inside_box_and_validated():
    lo, hi = np.array([0.0, -1.0]), np.array([1.0, 3.0])
    for sampler in ("sobol", "lhs"):
        x = sample_starts(lo, hi, 7, sampler=sampler, rng=1)
        assert x.shape == (7, 2) and np.all((x >= lo) & (x <= hi))
    from odeinfer.errors import InputError

    with pytest.raises(InputError, match=r"bounds: multi-start needs finite bounds"):
        sample_starts(np.array([0.0]), np.array([np.inf]), 3)
    with pytest.raises(InputError, match=r"sampler: expected 'sobol' or 'lhs'"):
        sample_starts(lo, hi, 3, sampler="grid")


def test_profile_region_of_a_linear_model_is_the_wald_ellipse():
    """x' = a + c t (x = x0 + a t + c t^2 / 2, linear in (a, c, x0)): the joint profile deviance of
    (a, c), re-optimising x0 at each node, is exactly the quadratic form of the Wald covariance,
    D = d^T cov_(a,c)^-1 d (the noise sd held at its estimate)."""
    import odeinfer as oi

    m = oi.Model.from_equations({"x": "a + c*t"}, params=["a", "c"])
    t = np.linspace(0.0, 4.0, 15)
    rng = np.random.default_rng(7)
    y = 1.0 + 0.5 * t - 0.2 * t**2 / 2 + rng.normal(0, 0.1, t.size)
    est = oi.Embedding().fit(m, oi.Data(t, y, "x"), start={"a": 0.0, "c": 0.0})
    a, c, D = est._profiler.region("a", "c", n=7, span=2.0)
    inv = np.linalg.inv(np.asarray(est.cov)[:2, :2])
    A, C = np.meshgrid(a - est.values[0], c - est.values[1])
    Q = inv[0, 0] * A**2 + 2 * inv[0, 1] * A * C + inv[1, 1] * C**2
    np.testing.assert_allclose(D, Q, rtol=1e-4, atol=1e-6)
    assert D[3, 3] == pytest.approx(0.0, abs=1e-9)            # the estimate is the centre node
    assert est._profiler.region("a", "c", n=7, span=2.0)[2] is D  # cached
    fig = oi.plots.regions(est, pair=("a", "c"), profile=True)
    labels = [ln.get_label() for ln in fig.axes[0].lines]
    assert any("profile" in lab for lab in labels) and any("Wald" in lab for lab in labels)


def test_a_profiler_without_a_remote_builder_refuses_an_executor():
    from concurrent.futures import ThreadPoolExecutor

    from odeinfer.errors import InputError

    prof, _, _ = _linear()
    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(InputError, match=r"executor: this estimate's profiles can only run in this process .*"
                                             r"drop executor="):
            prof.conf_int(executor=pool)
