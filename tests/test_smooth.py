"""Regression-spline proxies and test functions (odeinfer.smooth).

Reference values are analytic (polynomials are reproduced exactly by cubic splines, closed-form
integrals of sines and polynomials) or come from independent numpy computations
(``np.polyfit``, an explicit constrained least-squares system, finite differences).
"""

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import DataError, InputError
from odeinfer.smooth import SplineSmoother, TestFunctions, basis_matrix, boundary_function, uniform_knots


def _cubic(t):
    return 1.0 - 2.0 * t + 0.5 * t**2 - 0.05 * t**3


def _data(t, y, states=("x",), t0=None):
    return oi.Data(t, np.asarray(y).reshape(len(t), -1), states, t0=t0)


def test_cubic_polynomial_reproduced_exactly_with_derivative():
    t = np.linspace(0, 10, 40)
    fit = SplineSmoother(n_basis=9).fit(_data(t, _cubic(t)))["x"]
    tt = np.linspace(0, 10, 101)
    np.testing.assert_allclose(fit(tt), _cubic(tt), atol=1e-10)
    np.testing.assert_allclose(fit(tt, 1), -2.0 + tt - 0.15 * tt**2, atol=1e-9)  # analytic derivative


def test_gcv_score_matches_independent_polyfit():
    rng = np.random.default_rng(0)
    t = np.linspace(0, 1, 60)
    y = np.sin(3 * t) + rng.normal(0, 0.1, t.size)
    fit = SplineSmoother(gcv_range=(4, 12)).fit(_data(t, y))["x"]
    # K = 4 (no interior knot) is the space of cubic polynomials: RSS from np.polyfit
    rss = np.sum((y - np.polyval(np.polyfit(t, y, 3), t)) ** 2)
    assert fit.gcv[4] == pytest.approx(t.size * rss / (t.size - 4) ** 2, rel=1e-9)
    assert set(fit.gcv) == set(range(4, 13))
    assert fit.n_basis_gcv == min(fit.gcv, key=fit.gcv.get) == fit.n_basis


def test_gcv_recovers_a_smooth_curve_better_than_extremes():
    rng = np.random.default_rng(1)
    t = np.linspace(0, 10, 200)
    truth = np.sin(t) * np.exp(-0.1 * t)
    fit = SplineSmoother().fit(_data(t, truth + rng.normal(0, 0.2, t.size)))["x"]
    err = np.sqrt(np.mean((fit(t) - truth) ** 2))
    assert err < 0.2 / 3  # far below the noise level
    assert 6 <= fit.n_basis <= 30


def test_undersmooth_multiplies_interior_knots():
    rng = np.random.default_rng(2)
    t = np.linspace(0, 10, 300)
    d = _data(t, np.sin(t) + rng.normal(0, 0.2, t.size))
    base = SplineSmoother().fit(d)["x"]
    under = SplineSmoother(undersmooth=2.0).fit(d)["x"]
    assert under.n_basis_gcv == base.n_basis_gcv
    assert under.n_basis - 4 == int(np.ceil(2.0 * (base.n_basis - 4)))


def test_homoscedastic_covariance_matches_monte_carlo():
    t = np.linspace(0, 5, 50)
    sm = SplineSmoother(n_basis=7)
    rng = np.random.default_rng(3)
    coefs, covs = [], []
    for _ in range(400):
        f = sm.fit(_data(t, _cubic(t) + rng.normal(0, 0.3, t.size)))["x"]
        coefs.append(f.coef)
        covs.append(f.cov)
    mc = np.var(coefs, axis=0, ddof=1)
    plug = np.diag(np.mean(covs, axis=0))
    # 400 reps: relative s.e. of a variance ~ sqrt(2/399) = 7%; allow 4 s.e.
    np.testing.assert_allclose(plug, mc, rtol=0.3)
    P = basis_matrix(f.knots, 3, t)
    np.testing.assert_allclose(f.cov_homoscedastic, f.sigma**2 * np.linalg.inv(P.T @ P), rtol=1e-8)


def test_robust_sandwich_formula():
    rng = np.random.default_rng(4)
    t = np.linspace(0, 5, 60)
    y = _cubic(t) + rng.normal(0, 0.1 + 0.1 * t, t.size)
    f = SplineSmoother(n_basis=6, covariance="robust").fit(_data(t, y))["x"]
    P = basis_matrix(f.knots, 3, t)
    A = np.linalg.solve(P.T @ P, P.T)
    r = y - P @ A @ y
    np.testing.assert_allclose(f.cov, A @ np.diag(r**2) @ A.T, rtol=1e-8)
    np.testing.assert_allclose(f.cov, f.cov_robust)


def test_equality_constraint_x0_and_its_covariance():
    rng = np.random.default_rng(5)
    t = np.linspace(0.5, 10, 30)
    y = _cubic(t) + rng.normal(0, 0.2, t.size)
    fit = SplineSmoother(n_basis=4).fit(_data(t, y, t0=0.0), x0={"x": 1.0})["x"]
    assert fit(np.array([0.0]))[0] == pytest.approx(1.0, abs=1e-12)
    # independent: cubic through (0, 1): y - 1 = b t + c t^2 + d t^3 by unconstrained LS
    X = np.column_stack([t, t**2, t**3])
    b, *_ = np.linalg.lstsq(X, y - 1.0, rcond=None)
    tt = np.linspace(0, 10, 11)
    np.testing.assert_allclose(fit(tt), 1.0 + np.column_stack([tt, tt**2, tt**3]) @ b, atol=1e-9)
    a = fit.basis([0.0])[0]
    assert a @ fit.cov @ a == pytest.approx(0.0, abs=1e-12)  # x(t0) is known exactly
    # sigma^2 = RSS / (n - K + 1)
    assert fit.sigma**2 == pytest.approx(np.sum(fit.residuals**2) / (t.size - 3), rel=1e-10)
    # prediction variance of the constrained fit = sigma^2 X (X'X)^-1 X' (independent form)
    Xt = np.column_stack([tt, tt**2, tt**3])
    V = fit.sigma**2 * Xt @ np.linalg.inv(X.T @ X) @ Xt.T
    B = fit.basis(tt)
    np.testing.assert_allclose(B @ fit.cov @ B.T, V, rtol=1e-7, atol=1e-12)


def test_repeated_knot_gives_a_kink():
    t = np.linspace(0, 10, 101)
    y = np.where(t < 5, 0.1 * t, 0.5 - 0.3 * (t - 5))  # kink at 5: slope 0.1 -> -0.3
    fit = SplineSmoother(n_basis=4, breakpoints=(5.0,)).fit(_data(t, y))["x"]
    np.testing.assert_allclose(fit(t), y, atol=1e-10)
    assert fit(np.array([5.0 - 1e-9]), 1)[0] == pytest.approx(0.1, abs=1e-6)
    assert fit(np.array([5.0 + 1e-9]), 1)[0] == pytest.approx(-0.3, abs=1e-6)
    assert np.sum(fit.knots == 5.0) == 3


def test_user_knots():
    t = np.linspace(0, 10, 50)
    knots = uniform_knots(0, 10, 8)
    fit = SplineSmoother(knots=tuple(knots)).fit(_data(t, _cubic(t)))["x"]
    np.testing.assert_array_equal(fit.knots, knots)
    assert fit.gcv == {}


def test_missing_values_are_dropped():
    rng = np.random.default_rng(6)
    t = np.linspace(0, 10, 40)
    y = np.column_stack([np.sin(t), np.cos(t)]) + rng.normal(0, 0.1, (40, 2))
    y_nan = y.copy()
    y_nan[[3, 10, 20], 0] = np.nan
    d = oi.Data(t, y_nan, ("a", "b"))
    pr = SplineSmoother(n_basis=8).fit(d)
    keep = ~np.isnan(y_nan[:, 0])
    ref = SplineSmoother(n_basis=8).fit_state(t[keep], y[keep, 0], domain=(0, 10))
    np.testing.assert_allclose(pr["a"].coef, ref.coef, rtol=1e-10)
    assert pr["a"].nobs == 37 and pr["b"].nobs == 40
    assert pr(np.array([1.0, 2.0])).shape == (2, 2)


def test_fewer_observations_than_coefficients_raises():
    t = np.linspace(0, 1, 5)
    with pytest.raises(DataError, match=r"state 'x' has 5 observations but the spline has 8 coefficients"):
        SplineSmoother(n_basis=8).fit(_data(t, t))
    with pytest.raises(DataError, match=r"has 3 observations, fewer than"):
        SplineSmoother().fit(_data(t[:3], t[:3]))


@pytest.mark.parametrize("kwargs, match", [
    ({"undersmooth": 0.5}, "undersmooth: expected a number >= 1"),
    ({"covariance": "hc3"}, "covariance: expected 'homoscedastic' or 'robust'"),
    ({"n_basis": 2}, r"n_basis: expected None \(GCV\) or an int >= degree \+ 1"),
    ({"knots": (0, 1, 2)}, "knots: expected a sorted finite clamped knot vector"),
    ({"degree": 0}, "degree: expected an int in 1..5"),
    ({"gcv_range": (2, 10)}, "gcv_range: expected"),
])
def test_smoother_config_validation(kwargs, match):
    with pytest.raises(InputError, match=match):
        SplineSmoother(**kwargs)


def test_fit_rejects_unknown_states():
    t = np.linspace(0, 1, 20)
    with pytest.raises(DataError, match=r"states: \['y'\] are not columns of the data"):
        SplineSmoother().fit(_data(t, t), states=("y",))


# test functions ---------------------------------------------------------------------------
def _integrate(fn, a, b, n=20001):
    t = np.linspace(a, b, n)
    return np.trapezoid(fn(t), t, axis=0) if hasattr(np, "trapezoid") else np.trapz(fn(t), t, axis=0)


def test_sine_tests_orthonormal_vanishing_with_derivative():
    tf = TestFunctions("sine", 5, (2.0, 7.0))
    t = np.linspace(2, 7, 20001)
    Phi = tf(t)
    gram = (Phi * np.gradient(t)[:, None]).T @ Phi
    np.testing.assert_allclose(gram, np.eye(5), atol=1e-3)
    np.testing.assert_allclose(tf([2.0, 7.0]), 0.0, atol=1e-12)
    h = 1e-6
    np.testing.assert_allclose(tf([3.3], 1), (tf([3.3 + h]) - tf([3.3 - h])) / (2 * h), rtol=1e-6)
    assert tf([1.0, 8.0]).sum() == 0.0  # zero outside the window


@pytest.mark.parametrize("orthonormal", [False, True])
def test_bspline_tests_vanish_at_ends(orthonormal):
    tf = TestFunctions("bspline", 6, (0.0, 20.0), orthonormal=orthonormal)
    assert tf(np.linspace(0, 20, 7)).shape == (7, 6)
    np.testing.assert_allclose(tf([0.0, 20.0]), 0.0, atol=1e-12)
    h = 1e-6
    np.testing.assert_allclose(tf([7.3], 1), (tf([7.3 + h]) - tf([7.3 - h])) / (2 * h), rtol=1e-5, atol=1e-9)
    if orthonormal:
        t = np.linspace(0, 20, 40001)
        Phi = tf(t)
        np.testing.assert_allclose((Phi * np.gradient(t)[:, None]).T @ Phi, np.eye(6), atol=1e-3)


def test_boundary_functions_unit_norm_and_ends():
    f = boundary_function(0.0, 2.0, "left", 0, [0.0, 2.0])
    assert f[0] == pytest.approx(np.sqrt(7 / 2)) and f[1] == 0.0
    norm = _integrate(lambda t: boundary_function(0.0, 2.0, "right", 0, t) ** 2, 0, 2)
    assert norm == pytest.approx(1.0, rel=1e-6)


def test_testfunction_validation():
    with pytest.raises(InputError, match="test_functions: expected 'sine' or 'bspline'"):
        TestFunctions("legendre", 3, (0, 1))
    with pytest.raises(InputError, match="window: expected"):
        TestFunctions("sine", 3, (1, 0))


@pytest.mark.parametrize("degree, breakpoints, con", [
    (3, (), None), (3, (), (0.0, 0.3)), (3, (4.0,), None), (3, (4.0,), (2.5, 1.0)), (2, (), None), (1, (), (10.0, -1.0)),
])
def test_banded_gcv_scan_matches_dense_least_squares(degree, breakpoints, con):
    """The numba banded RSS (all candidate K) equals the RSS of an explicit dense system solved by
    ``np.linalg.lstsq`` (constraint by a KKT system), non-uniform times included."""
    from odeinfer.smooth._banded import rss_banded, rss_scan_uniform

    rng = np.random.default_rng(7)
    t = np.sort(rng.uniform(0, 10, 150))
    t[-1] = 10.0
    y = np.sin(t) + rng.normal(0, 0.1, t.size)
    Ks = range(degree + 1, 25)
    ref = []
    for K in Ks:
        kn = uniform_knots(0.0, 10.0, K, degree, breakpoints)
        P = basis_matrix(kn, degree, t)
        if con is None:
            c = np.linalg.lstsq(P, y, rcond=None)[0]
        else:
            a = basis_matrix(kn, degree, [con[0]])[0]
            Kk = P.shape[1]
            kkt = np.block([[P.T @ P, a[:, None]], [a[None, :], np.zeros((1, 1))]])
            c = np.linalg.solve(kkt, np.concatenate([P.T @ y, [con[1]]]))[:Kk]
        ref.append(np.sum((y - P @ c) ** 2))
    has, tc, xc = con is not None, *(con or (0.0, 0.0))
    banded = [rss_banded(uniform_knots(0.0, 10.0, K, degree, breakpoints), degree, t, y, has, tc, xc) for K in Ks]
    np.testing.assert_allclose(banded, ref, rtol=1e-9)
    if not breakpoints:
        scan = rss_scan_uniform(0.0, 10.0, degree, Ks[0], Ks[-1], t, y, has, tc, xc)
        np.testing.assert_allclose(scan, ref, rtol=1e-9)


def test_banded_rss_flags_a_singular_gram_matrix():
    """Knot spans without data make P'P singular: the kernel returns -1 and GCV uses the dense path."""
    from odeinfer.smooth._banded import rss_banded

    t = np.concatenate([np.linspace(0, 1, 20), np.linspace(9, 10, 20)])
    kn = uniform_knots(0.0, 10.0, 20, 3)
    assert rss_banded(kn, 3, t, np.sin(t), False, 0.0, 0.0) == -1.0
    fit = SplineSmoother().fit(_data(t, np.sin(t)))["x"]
    assert np.isfinite(list(fit.gcv.values())).all()


@pytest.mark.parametrize("degree, breakpoints", [(1, ()), (2, ()), (3, ()), (3, (4.0,)), (4, ()), (5, (2.5, 7.0))])
def test_basis_matrix_equals_scipy_bspline(degree, breakpoints):
    """The numba basis (de Boor-Cox, NURBS Book A2.3 derivatives) against scipy's ``BSpline``
    (independent implementation): values and derivatives, at knots, at both ends and clipped
    outside the domain."""
    from scipy.interpolate import BSpline

    kn = uniform_knots(0.0, 10.0, 11, degree, breakpoints)
    K = kn.size - degree - 1
    t = np.concatenate([np.random.default_rng(1).uniform(-1.0, 11.0, 300), kn, [0.0, 10.0]])
    for nu in range(0, (1 if breakpoints else degree) + 1):
        spl = BSpline(kn, np.eye(K), degree, extrapolate=True)
        ref = (spl.derivative(nu) if nu else spl)(np.clip(t, 0.0, 10.0))
        np.testing.assert_allclose(basis_matrix(kn, degree, t, nu), ref, rtol=0, atol=1e-13 * np.abs(ref).max())


def test_states_fitted_together_equal_separate_fits():
    """The grouped fit (one P'P per candidate for all states observed at the same times, missing
    values giving their own groups, x0 constraints per state) equals fitting each state alone."""
    rng = np.random.default_rng(11)
    t = np.linspace(0.2, 10, 120)
    Y = np.column_stack([np.sin(t), np.cos(t), 0.1 * t**2, np.exp(-t)]) + rng.normal(0, 0.1, (t.size, 4))
    Y[[5, 17, 60], 1] = np.nan
    data = oi.Data(t, Y, ("a", "b", "c", "d"), t0=0.0)
    x0 = {"a": 0.0, "b": 1.0, "d": 1.0}
    for sm in (SplineSmoother(), SplineSmoother(covariance="robust"), SplineSmoother(breakpoints=(5.0,)),
               SplineSmoother(undersmooth=2.0)):
        together = sm.fit(data, x0=x0)
        for k, s in enumerate(data.states):
            alone = sm.fit_state(t, Y[:, k], state=s, domain=together.domain, x0=x0.get(s),
                                 t0=0.0 if s in x0 else None)
            f = together[s]
            assert f.n_basis == alone.n_basis and f.n_basis_gcv == alone.n_basis_gcv
            assert dict(f.gcv) == dict(alone.gcv)  # same floating-point operations
            np.testing.assert_allclose(f.coef, alone.coef, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(f.cov, alone.cov, rtol=1e-10, atol=1e-14)


def test_multi_state_scan_matches_single_state_scan_and_fit_outputs_read_only():
    from odeinfer.smooth._banded import rss_scan_uniform, rss_scan_uniform_multi

    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 5, 90))
    Y = np.vstack([np.sin(t), t**2]) + rng.normal(0, 0.05, (2, t.size))
    xc = np.array([0.1, -0.2])
    multi = rss_scan_uniform_multi(0.0, 5.0, 3, 4, 25, t, Y, True, 0.0, xc)
    for j in range(2):
        np.testing.assert_array_equal(multi[j], rss_scan_uniform(0.0, 5.0, 3, 4, 25, t, Y[j], True, 0.0, xc[j]))
    f = SplineSmoother().fit(_data(t, Y[0]))["x"]
    for a in (f.coef, f.cov, f.cov_robust, f.residuals, f.knots, f.t, f.y):
        assert not a.flags.writeable


def test_single_threaded_blas_is_reentrant_and_restores():
    from threadpoolctl import threadpool_info

    from odeinfer.smooth._blas import single_threaded_blas

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads()
    with single_threaded_blas():
        assert all(n == 1 for n in blas_threads())
        with single_threaded_blas():
            assert all(n == 1 for n in blas_threads())
        assert all(n == 1 for n in blas_threads())  # the inner exit does not restore
    assert blas_threads() == before
