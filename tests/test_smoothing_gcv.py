"""The O(n) GCV smoothing spline (odeinfer.smooth.gcv) against two independent references: the dense
influence matrix of the natural cubic smoothing spline (the criterion itself) and scipy's
``make_smoothing_spline`` with its own GCV choice (the spline the callers used before)."""

import numpy as np
import pytest
from scipy.interpolate import make_smoothing_spline

from odeinfer.smooth.gcv import SmoothingSpline, _bands, _gcv, gcv_lambda, smoothed_value


def _dense_gcv(x, y, lam):
    """n RSS / (n - tr A)^2 with A = (I + lam Q R^-1 Q')^-1 built densely (Green & Silverman 1994, sec. 2.3)."""
    n = x.size
    h = np.diff(x)
    Q = np.zeros((n, n - 2))
    R = np.zeros((n - 2, n - 2))
    for c in range(n - 2):
        Q[c, c], Q[c + 1, c], Q[c + 2, c] = 1 / h[c], -1 / h[c] - 1 / h[c + 1], 1 / h[c + 1]
        R[c, c] = (h[c] + h[c + 1]) / 3
        if c + 1 < n - 2:
            R[c, c + 1] = R[c + 1, c] = h[c + 1] / 6
    A = np.linalg.inv(np.eye(n) + lam * Q @ np.linalg.solve(R, Q.T))
    g = A @ y
    return n * np.sum((y - g) ** 2) / (n - np.trace(A)) ** 2, g


def _series(n, seed):
    """n times on [0, 10], each jittered by up to 0.3 of the spacing; a smooth signal plus noise of sd 0.3."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0.0, 10.0, n) + rng.uniform(-0.3, 0.3, n) * 10.0 / (n - 1)
    return x, np.sin(x) + 0.1 * x ** 2 + rng.normal(0.0, 0.3, n)


@pytest.mark.parametrize("n", [5, 6, 9, 40, 150])
@pytest.mark.parametrize("lam", [1e-4, 0.05, 3.0, 200.0])
def test_criterion_equals_the_dense_influence_matrix(n, lam):
    x, y = _series(n, n)
    m = n - 2
    qq, r, qty, work = np.empty((3, m)), np.empty((2, m)), np.empty(m), np.empty((7, m))
    _bands(x, y, qq, r, qty)
    ref, g = _dense_gcv(x, y, lam)
    assert _gcv(lam, x, qq, r, qty, work) == pytest.approx(ref, rel=1e-8)
    # scipy's spline at the same penalty is the same smoother (the penalty has the same scale)
    np.testing.assert_allclose(make_smoothing_spline(x, y, lam=lam)(x), g, rtol=1e-8, atol=1e-9 * np.ptp(y))


@pytest.mark.parametrize("n,seed", [(5, 1), (8, 2), (21, 3), (60, 4), (200, 5), (401, 6)])
def test_the_spline_is_scipys_gcv_spline(n, seed, monkeypatch):
    """Both minimise the same criterion (to rounding); scipy's bounded Brent search over (0, n) holds the
    minimum on these series, so ours reaches scipy's criterion or lower (1e-12 relative: rounding) and the
    penalties agree to the resolution of scipy's search on a flat minimum (absolute tolerance 1e-5; 1e-3
    here), the splines far below the noise (sd 0.3): within 1e-3 of it at and between the data and one
    spacing before the first time (where the callers evaluate it)."""
    import scipy.interpolate._bsplines as bsplines

    found = []

    def recording(*args, **kwargs):
        est = minimize_scalar(*args, **kwargs)
        found.append(est.x)
        return est

    minimize_scalar = bsplines.minimize_scalar
    monkeypatch.setattr(bsplines, "minimize_scalar", recording)
    x, y = _series(n, seed)
    theirs = make_smoothing_spline(x, y)
    lam = gcv_lambda(x, y)
    assert len(found) == 1 and abs(lam - found[0]) <= 1e-3
    m = n - 2
    qq, r, qty, work = np.empty((3, m)), np.empty((2, m)), np.empty(m), np.empty((7, m))
    _bands(x, y, qq, r, qty)
    assert _gcv(lam, x, qq, r, qty, work) <= _gcv(found[0], x, qq, r, qty, work) * (1 + 1e-12)
    ours = SmoothingSpline(x, y)
    grid = np.linspace(x[0] - (x[1] - x[0]), x[-1], 4 * n)
    np.testing.assert_allclose(ours(grid), theirs(grid), rtol=0, atol=1e-3 * 0.3)
    np.testing.assert_allclose(ours(grid, nu=1), theirs.derivative()(grid), rtol=0, atol=1e-2 * 0.3)


def test_the_penalty_does_not_depend_on_the_time_unit():
    """The same noisy sine (n = 60, sd 0.3) with its times in units 1e-2 to 1e5 times larger: the roughness
    penalty scales as time ** 3 (the smoother itself is unchanged), so the penalty divided by the unit cubed
    and the smoothed values are the same; the smoothed RMS error is well below the noise's 0.3 (scipy's
    search, bounded by (0, n) in the data's unit, gave 0.27-0.34 at the extreme units: no smoothing)."""
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 2 * np.pi, 60)
    y = np.sin(t) + rng.normal(0.0, 0.3, t.size)
    base = SmoothingSpline(t, y)
    assert np.sqrt(np.mean((base(t) - np.sin(t)) ** 2)) < 0.2
    for unit in (1e-2, 10.0, 1e3, 1e5):
        s = SmoothingSpline(t * unit, y)
        assert s.lam / unit ** 3 == pytest.approx(base.lam, rel=1e-4)
        np.testing.assert_allclose(s(t * unit), base(t), rtol=0, atol=1e-6)
        np.testing.assert_allclose(s(t * unit, nu=1) * unit, base(t, nu=1), rtol=0, atol=1e-5)


@pytest.mark.parametrize("n", [5, 8, 60])
def test_the_spline_equals_scipys_at_the_same_penalty(n):
    """Values and first derivatives from the Reinsch solution equal scipy's spline at the same penalty: at
    the data, between them and outside them (the end pieces' cubics); replicate times enter as their means."""
    x, y = _series(n, 10 + n)
    lam = gcv_lambda(x, y)
    spline = make_smoothing_spline(x, y, lam=lam)
    at = np.array([x[0] - 0.7, x[0], 0.5 * (x[0] + x[1]), x[n // 2] + 0.01, x[-1], x[-1] + 0.4, *x])
    ours = SmoothingSpline(x, y)
    assert ours.lam == lam
    np.testing.assert_allclose(ours(at), spline(at), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours(at, nu=1), spline.derivative()(at), rtol=1e-9, atol=1e-11)
    fixed = make_smoothing_spline(x, y, lam=0.3).derivative()
    np.testing.assert_allclose(SmoothingSpline(x, y, lam=0.3)(at, nu=1), fixed(at), rtol=1e-9, atol=1e-11)
    assert smoothed_value(x, y, x[0]) == pytest.approx(float(spline(x[0])), rel=1e-10, abs=1e-12)
    t2 = np.repeat(x, 2)
    y2 = np.repeat(y, 2) + np.tile([-0.1, 0.1], n)  # replicate pairs whose means are y
    assert smoothed_value(t2, y2, x[0]) == pytest.approx(float(spline(x[0])), rel=1e-10, abs=1e-12)


def test_bad_series_are_refused():
    from odeinfer.errors import DataError, InputError

    with pytest.raises(DataError, match="at least 5 distinct times"):
        gcv_lambda([0, 1, 2, 3], [1, 2, 3, 4])
    with pytest.raises(DataError, match=r"strictly increasing.*got t of shape \(5,\)"):
        gcv_lambda([0, 1, 1, 3, 4], [1, 2, 3, 4, 5])
    with pytest.raises(DataError, match="at least 5 distinct times"):  # replicates: 4 distinct times
        SmoothingSpline([0, 1, 1, 2, 3], [1, 2, 3, 4, 5])
    with pytest.raises(DataError, match="must be finite, got non-finite values in y"):
        gcv_lambda(np.arange(6.0), [1, 2, np.nan, 4, 5, 6])
    with pytest.raises(DataError, match="non-finite values in t"):
        SmoothingSpline([0, 1, 2, np.inf, 4, 5], np.arange(6.0))
    with pytest.raises(InputError, match="nu: expected 0"):
        SmoothingSpline(*_series(8, 1))(0.5, nu=2)
