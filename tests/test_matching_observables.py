"""Matching estimators on models with observables (issue 14, item 5): an observable that is an
invertible function of one state is smoothed on its noise scale and mapped back to the state.

References: the same data expressed on the states directly, fitted by the same estimator through its
existing state paths (additive noise, ``noise="log"``). The maps below commute with the smoothing:

* ``log(a)`` with linear noise is ``a`` with log noise: both fit the spline to the same numbers ``z``
  (the state data are ``exp(z)``, whose log gives ``z`` back to rounding);
* ``2.5*b + 1`` and ``scale*b`` (known scale) with linear noise are affine: the B-spline space holds
  the constants, and GCV (``n RSS / (n - df)^2``) scales by ``1/2.5^2`` for every number of knots,
  so the same spline is chosen and the proxy of ``(y - 1)/2.5`` is the proxy of ``y`` mapped;
* ``a`` with log10 noise is ``a`` with log noise: ``log10 y = log y / ln 10`` (a scale factor).

So the estimates are identical up to floating point (rtol 1e-8, far above the ~1e-15 rounding of the
maps and far below any statistical difference). The Newton family's nonlinear path has an
independent reference: scipy's smoothing spline of ``z``, rows mapped by hand, least squares by numpy.
"""

import warnings

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import DataError
from odeinfer.estimators.base import EstimationError

T = np.linspace(0, 10, 81)[1:]
TRUTH = {"k1": 0.6, "k2": 0.25}
RTOL = 1e-8


@pytest.fixture(scope="module")
def chain():
    m = oi.Model.from_equations({"a": "-k1*a", "b": "k1*a - k2*b"}, params=["k1", "k2"], name="chain")
    sim, _ = oi.simulate(m, TRUTH, {"a": 5.0, "b": 0.5}, T, t0=0.0)
    X = np.asarray(sim.y)
    rng = np.random.default_rng(1)
    za = np.log(X[:, 0]) + 0.05 * rng.standard_normal(T.size)   # log(a) + normal noise
    yb = 2.5 * X[:, 1] + 1 + 0.1 * rng.standard_normal(T.size)  # 2.5 b + 1 + normal noise
    return m, X, za, yb


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # coverage notes and trajectory checks are not under test here
        return fn(*a, **k)


def _same(e1, e2):
    """The model parameters of ``e1`` (a model with observables) equal those of ``e2`` (states)."""
    k = len(e2.names)
    assert e1.names[:k] == e2.names
    np.testing.assert_allclose(e1.values[:k], e2.values, rtol=RTOL)
    np.testing.assert_allclose(e1.cov[:k, :k], e2.cov, rtol=1e-6)
    assert e1.status == e2.status


@pytest.mark.parametrize("make", [lambda: oi.OrthogonalConditions(L=6), lambda: oi.GradientMatching()],
                         ids=["OC", "GM"])
def test_log_and_affine_observables_equal_the_state_fit(chain, make):
    m, X, za, yb = chain
    mo = m.observe({"la": "log(a)", "sb": "2.5*b + 1"}, noise=oi.Normal(sigma="sd"), params=["sd"])
    dobs = oi.Data(T, np.column_stack([za, yb]), ["la", "sb"], t0=0.0)
    ref_model = m.with_observation(noise="log", observed=["a"])  # a: log noise; b: additive
    dstate = oi.Data(T, np.column_stack([np.exp(za), (yb - 1) / 2.5]), ["a", "b"], t0=0.0)
    est = make()
    e1 = _quiet(est.fit, mo, dobs)
    e2 = _quiet(est.fit, ref_model, dstate)
    _same(e1, e2)
    # the estimate reports the user's model; the noise sd per observable on its noise scale
    assert e1.model.observable_names == ("la", "sb")
    assert e1.sigma["la"] == pytest.approx(e2.sigma["a"], rel=RTOL)
    assert e1.sigma["sb"] == pytest.approx(2.5 * e2.sigma["b"], rel=RTOL)
    # the shared noise sd "sd" is reported as a start (no standard error): the pooled residual sd
    assert e1.names[-1] == "sd" and np.isnan(e1.bse["sd"])
    assert e1.params["sd"] == pytest.approx(np.sqrt((e1.sigma["la"] ** 2 + e1.sigma["sb"] ** 2) / 2), rel=1e-12)
    # the trajectory check compares on the noise scale: the same ratio for log(a); b's residuals scale by 2.5
    # and so does its noise
    c1, c2 = e1.extras["trajectory_check"], e2.extras["trajectory_check"]
    assert c1["rms_ratio"] == pytest.approx(c2["rms_ratio"], rel=1e-6)


def test_quick_start_matching_then_likelihood_fit(chain):
    """The quick start on observables: a matching estimate starts the likelihood fit (noise sd included),
    which reaches the optimum a fit started at the truth reaches (rtol 1e-5: two trust-region runs
    stopping at 1e-7 in the NLL)."""
    m, X, za, yb = chain
    mo = m.observe({"la": "log(a)", "sb": "scale*b + 1"}, noise={"la": oi.Normal(sigma="sd_a"),
                                                               "sb": oi.Normal(sigma="sd_b")},
                   params=["scale", "sd_a", "sd_b"])
    dobs = oi.Data(T, np.column_stack([za, yb]), ["la", "sb"], t0=0.0)
    oc = _quiet(oi.OrthogonalConditions(L=6).fit, mo, dobs, fixed={"scale": 2.5})
    assert oc.names == ("k1", "k2", "sd_a", "sd_b")
    assert oc.params["sd_a"] == pytest.approx(oc.sigma["la"]) and oc.params["sd_b"] == pytest.approx(oc.sigma["sb"])
    x0 = {"a": 5.0, "b": 0.5}
    fit = oi.Embedding().fit(mo, dobs, start=oc, fixed={"scale": 2.5}, x0=x0)
    ref = oi.Embedding().fit(mo, dobs, start={**TRUTH, "sd_a": 0.05, "sd_b": 0.1}, fixed={"scale": 2.5}, x0=x0)
    assert fit.converged and ref.converged
    np.testing.assert_allclose(fit.values, ref.values, rtol=1e-5)


def test_log10_noise_and_known_scale(chain):
    m, X, za, yb = chain
    mo = m.observe({"ya": "a", "sb": "scale*b"}, noise={"ya": oi.Normal(sigma=0.05, scale="log10"),
                                                         "sb": oi.Normal(sigma="sd")}, params=["scale", "sd"])
    y_a = np.exp(za)
    dobs = oi.Data(T, np.column_stack([y_a, 2.0 * (yb - 1) / 2.5]), ["ya", "sb"], t0=0.0)
    ref_model = m.with_observation(noise="log", observed=["a"])
    dstate = oi.Data(T, np.column_stack([y_a, (yb - 1) / 2.5]), ["a", "b"], t0=0.0)
    for est in (oi.OrthogonalConditions(L=6), oi.GradientMatching()):
        e1 = _quiet(est.fit, mo, dobs, fixed={"scale": 2.0})
        e2 = _quiet(est.fit, ref_model, dstate)
        _same(e1, e2)
        assert e1.fixed["scale"] == 2.0
        assert e1.sigma["ya"] == pytest.approx(e2.sigma["a"] / np.log(10.0), rel=RTOL)


@pytest.mark.parametrize("derivative", ["auto", "forward", "local_polynomial"])
def test_newton_affine_observables_equal_the_state_fit(chain, derivative):
    m, X, za, yb = chain
    rng = np.random.default_rng(2)
    ya = X[:, 0] + 0.05 * rng.standard_normal(T.size)
    mo = m.observe({"ya": "a", "sb": "2.5*b + 1"}, noise=oi.Normal(sigma="sd"), params=["sd"])
    dobs = oi.Data(T, np.column_stack([ya, yb]), ["ya", "sb"], t0=0.0)
    dstate = oi.Data(T, np.column_stack([ya, (yb - 1) / 2.5]), ["a", "b"], t0=0.0)
    est = oi.NewtonRaphson(derivative=derivative)
    e1 = _quiet(est.fit, mo, dobs, start=[1.0, 1.0])
    e2 = _quiet(est.fit, m, dstate, start=[1.0, 1.0])
    _same(e1, e2)
    assert e1.extras["cov_type"] == e2.extras["cov_type"]


@pytest.mark.parametrize("cls", [oi.NewtonRaphson, oi.StochasticNewton])
def test_newton_log_observable_against_scipy_spline_rows(chain, cls):
    """Independent reference: scipy's smoothing spline of z = log-scale data, the rows mapped by x = exp(s),
    x' = exp(s) s', then the linear least squares of the equation error by numpy. The penalty is the GCV
    minimum odeinfer finds (``gcv_lambda``; its criterion and search are tested in test_smoothing_gcv.py):
    for z, scipy's own search stops at its bound lam = n = 80, short of the minimum (about 1.1e5)."""
    from scipy.interpolate import make_smoothing_spline

    from odeinfer.smooth.gcv import gcv_lambda

    m, X, za, yb = chain
    rng = np.random.default_rng(3)
    yb_lin = X[:, 1] + 0.02 * rng.standard_normal(T.size)
    mo = m.observe({"la": "log(a)", "yb": "b"}, noise=oi.Normal(sigma="sd"), params=["sd"])
    dobs = oi.Data(T, np.column_stack([za, yb_lin]), ["la", "yb"], t0=0.0)
    sa = make_smoothing_spline(T, za, lam=gcv_lambda(T, za))
    sb = make_smoothing_spline(T, yb_lin, lam=gcv_lambda(T, yb_lin))
    xa, da = np.exp(sa(T)), np.exp(sa(T)) * sa.derivative()(T)
    xb, db = sb(T), sb.derivative()(T)
    A = np.vstack([np.column_stack([-xa, np.zeros_like(xa)]), np.column_stack([xa, -xb])])
    ref, *_ = np.linalg.lstsq(A, np.concatenate([da, db]), rcond=None)
    kw = {"rng": 0} if cls is oi.StochasticNewton else {}
    e = _quiet(cls().fit, mo, dobs, start=[1.0, 1.0], **kw)
    np.testing.assert_allclose(e.values, ref, rtol=1e-6)
    assert e.model.observable_names == ("la", "yb")


# --- bad input ------------------------------------------------------------------------------
def _data(names, cols):
    return oi.Data(T, np.column_stack(cols), names, t0=0.0)


@pytest.mark.parametrize("est", [oi.OrthogonalConditions(L=6), oi.GradientMatching(), oi.NewtonRaphson(),
                                 oi.StochasticGradient()], ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("obs, noise, params, match", [
    ({"r": "a/(a + b)", "yb": "b"}, oi.Normal(sigma=0.1), (), r"'r' \(depends on 2 states \['a', 'b'\]\)"),
    ({"s": "a + b", "yb": "b"}, oi.Normal(sigma=0.1), (), r"'s' \(depends on 2 states"),
    ({"sa": "scale*a", "yb": "b"}, oi.Normal(sigma=0.1), ("scale",), r"'sa' \(uses the parameters \['scale'\], which "
                                                                       r"are not fixed"),
    ({"sa": "a**2", "yb": "b"}, oi.Normal(sigma=0.1), (), r"'sa' \('a\*\*2': 2 inverses reproduce"),
    ({"sa": "a*t", "yb": "b"}, oi.Normal(sigma=0.1), (), r"'sa' \(depends on t\)"),
    ({"sa": "a", "yb": "b"}, oi.Laplace(sigma=0.1), (), r"'sa' \(laplace noise"),
    ({"sa": "a", "yb": "b"}, {"sa": oi.Normal(sigma="0.1 + 0.1*sa"), "yb": oi.Normal(sigma=0.1)}, (), r"'sa' \(its noise sd '0.1 \+ 0.1\*sa' depends on "
                                                                 r"the observable's value"),
    ({"sa": "a", "yb": "b"}, {"sa": oi.Normal(sigma="0.1 + 0.1*b"), "yb": oi.Normal(sigma=0.1)}, (),
     r"'sa' \(its noise sd '0.1 \+ 0.1\*b' depends on \['b'\] \(not homoscedastic\)\)"),
    ({"sa": "a", "yb": "b"}, {"sa": oi.Normal(sigma="0.1*(1 + t)"), "yb": oi.Normal(sigma=0.1)}, (),
     r"'sa' \(its noise sd '0.1\*\(1 \+ t\)' depends on \['t'\]"),
    ({"sa": "1/(1 + (a - 3)**2)", "yb": "b"}, oi.Normal(sigma=0.1), (), r"'sa' \('1/\(\(a - 3\)\*\*2 \+ 1\)': 2 "
                                                                        r"inverses reproduce"),
    ({"sa": "a + sin(a)", "yb": "b"}, oi.Normal(sigma=0.1), (), r"'sa' \(sympy finds no inverse of 'a \+ sin\(a\)' "
                                                                r"on the lin noise scale\)"),
])
def test_refused_observables_are_named(chain, est, obs, noise, params, match):
    m, X, za, yb = chain
    mo = m.observe(obs, noise=noise, params=params)
    d = _data(list(obs), [np.linspace(0.1, 0.9, T.size), X[:, 1]])
    with pytest.raises(EstimationError, match=match) as info:
        est.fit(mo, d, start=[1.0, 1.0]) if not isinstance(est, (oi.OrthogonalConditions, oi.GradientMatching)) \
            else est.fit(mo, d)
    assert "oi.Embedding()" in str(info.value)


def test_observable_not_strictly_monotone_on_the_data_is_refused(chain):
    m, X, za, yb = chain
    mo = m.observe({"ca": "a**3", "yb": "b"}, noise=oi.Normal(sigma=0.1))
    d = _data(["ca", "yb"], [np.linspace(0.0, 1.0, T.size), X[:, 1]])  # a = 0 reached: d(a^3)/da = 0 there
    with pytest.raises(EstimationError, match=r"'ca' \('a\*\*3' is not strictly monotone in 'a' over the range "
                                              r"\[0, 1\] of the states it measures\)"):
        oi.GradientMatching().fit(mo, d)


def test_refused_setups(chain):
    m, X, za, yb = chain
    oc = oi.OrthogonalConditions(L=6)
    # a state measured by no observable
    mo = m.observe({"ya": "a"}, noise=oi.Normal(sigma=0.1))
    with pytest.raises(EstimationError, match=r"no observable of model 'chain' measures \['b'\].*oi.Embedding"):
        oc.fit(mo, _data(["ya"], [X[:, 0]]))
    # a state measured twice
    mo = m.observe({"ya": "a", "la": "log(a)", "yb": "b"}, noise=oi.Normal(sigma=0.1))
    with pytest.raises(EstimationError, match=r"state 'a' is measured by several observables \['ya', 'la'\]"):
        oc.fit(mo, _data(["ya", "la", "yb"], [X[:, 0], np.log(X[:, 0]), X[:, 1]]))
    # experiment conditions
    mo = m.observe({"ya": "a", "yb": "b"}, noise=oi.Normal(sigma=0.1))
    exps = oi.Experiments([_data(["ya", "yb"], [X[:, 0], X[:, 1]])], names=["e1"],
                          conditions={"e1": oi.Condition(params={"k1": 0.5})})
    with pytest.raises(EstimationError, match=r"experiment 'e1' has a condition .*oi.Embedding"):
        oc.fit(mo, exps)
    # columns that are not observables
    with pytest.raises(DataError, match=r"columns \['a'\] that are not observables"):
        oc.fit(mo, _data(["a", "yb"], [X[:, 0], X[:, 1]]))
    # log-scale noise with non-positive data: the rows are named
    mo = m.observe({"ya": "a", "yb": "b"}, noise={"ya": oi.Normal(sigma=0.1, scale="log"), "yb": oi.Normal(sigma=0.1)})
    ya = X[:, 0].copy()
    ya[[3, 7]] = [0.0, -1.0]
    with pytest.raises(DataError, match=r"observable 'ya' of experiment .* has 2 measurements <= 0 \(rows 3, 7\)"):
        oi.GradientMatching().fit(mo, _data(["ya", "yb"], [ya, X[:, 1]]))
    # the Newton family's difference stencils on a nonlinear map
    mo = m.observe({"la": "log(a)", "yb": "b"}, noise=oi.Normal(sigma=0.1))
    with pytest.raises(EstimationError, match=r"derivative: 'forward' differences the samples, but the observables "
                                              r"\[\"'la' = log\(a\) \(lin noise\)\"\]"):
        oi.NewtonRaphson(derivative="forward").fit(mo, _data(["la", "yb"], [za, X[:, 1]]), start=[1.0, 1.0])
    with pytest.raises(EstimationError, match=r"fit_stream reads state columns"):
        oi.NewtonRaphson().fit_stream(mo, (T, np.column_stack([za, X[:, 1]])), start=[1.0, 1.0])
