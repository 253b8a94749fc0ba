"""Orthogonal conditions for models with delays (Brunel, Clairon & d'Alché-Buc 2014, §6.2;
spec seed-001 §1.8 and §4.4): lagged states from the same spline proxy, no history function.

Independent references: central finite differences (Jacobian in every parameter including the
delays; ``D_k`` in the proxy coefficients); the paper's weak form after its change of variable
``u = t - tau``, integrated by adaptive ``scipy.integrate.quad``; noise-free data from
``oi.solve`` at rtol 1e-11 (true parameters known); a Monte Carlo variance; the paper's
Table 6.2 and Wood's (2010) ABC posterior means for the real blowfly series.
"""

import dataclasses

import numpy as np
import pytest
from scipy.integrate import quad

import odeinfer as oi
from odeinfer import math as om
from odeinfer.estimators._conditions import DelayConditions, dde_trajectory_sse
from odeinfer.estimators._quadrature import node_model
from odeinfer.estimators.base import EstimationError
from odeinfer.estimators.orthogonal import OrthogonalConditions
from odeinfer.smooth import SplineSmoother, TestFunctions
from odeinfer.smooth.splines import uniform_knots

BLOWFLY = oi.zoo.get("nicholson_blowflies")
TRUE = np.array([7.81, 381.8, 0.154, 14.8])  # P, N0, delta, tau (the zoo entry's values)


@oi.model(states=["x", "z"], params=["a", "b", "c", "tau1", "tau2"], delays=["tau1", "tau2"], name="two_delays")
def TWO_DELAYS(t, y, p):
    return {"x": -p.a * y.x + p.b * om.lag(y.z, "tau1") * om.exp(-om.lag(y.x, "tau2")),
            "z": p.c * om.lag(y.x, "tau1") - y.z * om.lag(y.z, "tau2") + om.sin(t)}


def _two_delay_conditions(L=5):
    t = np.linspace(0.0, 10.0, 121)
    Y = np.column_stack([1 + 0.5 * np.sin(t) + 0.1 * t, np.cos(0.7 * t) + 0.05 * t])
    pr = SplineSmoother(n_basis=14).fit(oi.Data(t, Y, ("x", "z")))
    c = DelayConditions(node_model(TWO_DELAYS), pr, TestFunctions("sine", L, (3.0, 10.0)), grid_delays=(1.3, 2.1))
    return c, pr, np.array([0.7, 0.4, 1.1, 1.3, 2.1])


def _fd_jac(fun, p, idx, h=1e-6):
    cols = []
    for j in idx:
        e = np.zeros_like(p)
        e[j] = h * max(1.0, abs(p[j]))
        cols.append((fun(p + e) - fun(p - e)) / (2 * e[j]))
    return np.column_stack(cols)


def _simulated(t_end=260.0, step=1.0):
    t = np.arange(55.0, t_end + step / 2, step)
    sol = oi.solve(oi.Problem(BLOWFLY.model, t, history=BLOWFLY.history, t0=BLOWFLY.t0), BLOWFLY.params,
                   solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-11, atol=1e-9)))
    return t, np.asarray(sol.y)[:, 0]


def _bf1_first180():
    raw = oi.datasets.blowflies("bf1")
    return oi.Data(raw.t[:180], raw.y[:180], "N", name="blowfly_nicholson_bf1_first180")


# derivatives ---------------------------------------------------------------------------------

def test_jacobian_in_every_parameter_and_both_delays_vs_central_differences():
    """The delay columns use the proxy's derivative at ``t - tau`` (chain rule); the quadrature
    nodes are fixed, so they must match central differences of the discrete conditions."""
    c, _, p = _two_delay_conditions()
    J = c.jacobian(p)
    Jfd = _fd_jac(c.residual, p, range(5), h=1e-6)
    np.testing.assert_allclose(J, Jfd, rtol=1e-6, atol=1e-8 * np.abs(J).max())
    assert np.all(np.abs(J[:, 3:]).max(axis=0) > 1e-2 * np.abs(J).max())  # both delays matter


def test_D_and_Ve_include_the_lagged_proxy_vs_central_differences():
    c, pr, p = _two_delay_conditions()
    D = c.D(p)
    for k, fit in enumerate(pr.fits):
        def e_of(coef, k=k):
            fits = list(pr.fits)
            fits[k] = dataclasses.replace(fits[k], coef=coef)
            c2 = DelayConditions(c.nm, dataclasses.replace(pr, fits=tuple(fits)), c.tests, grid_delays=(1.3, 2.1))
            return c2.residual(p)
        Dfd = _fd_jac(e_of, fit.coef.copy(), range(fit.n_basis), h=1e-5)
        np.testing.assert_allclose(D[k], Dfd, rtol=1e-6, atol=1e-8 * np.abs(D[k]).max())
    Ve = sum(Dk @ f.cov @ Dk.T for Dk, f in zip(D, pr.fits))
    np.testing.assert_allclose(c.Ve(p), Ve, rtol=1e-12, atol=1e-12 * np.abs(Ve).max())


def test_blowfly_conditions_equal_the_papers_weak_form_by_adaptive_quadrature():
    """Paper §6.2: int_a^b N phi' + P int_{a-tau}^{b-tau} N e^{-N/N0} phi(u + tau) du
    - delta int_a^b N phi = e_l, each integral by scipy ``quad`` (split at the knots)."""
    t, y = _simulated(200.0)
    pr = SplineSmoother(n_basis=40).fit(oi.Data(t, y + 50 * np.sin(t), "N"))
    tau, (a, b) = 14.8, (55.0 + 14.8, 200.0)
    tests = TestFunctions("sine", 4, (a, b))
    c = DelayConditions(node_model(BLOWFLY.model), pr, tests, grid_delays=(tau,))
    P, N0, delta = 6.0, 420.0, 0.13
    e = c.residual(np.array([P, N0, delta, tau]))
    N = lambda u: float(pr([u])[0, 0])  # noqa: E731
    knots = pr.knots_all
    for l in range(4):
        ph = lambda s, nu=0: float(tests([s], nu)[0, l])  # noqa: E731
        pts = knots[(knots > a) & (knots < b)]
        lag_pts = knots[(knots > a - tau) & (knots < b - tau)]
        i1 = quad(lambda s: N(s) * ph(s, 1), a, b, points=pts, limit=400, epsabs=1e-10)[0]
        i2 = quad(lambda u: N(u) * np.exp(-N(u) / N0) * ph(u + tau), a - tau, b - tau, points=lag_pts, limit=400,
                  epsabs=1e-10)[0]
        i3 = quad(lambda s: N(s) * ph(s), a, b, points=pts, limit=400, epsabs=1e-10)[0]
        ref = i1 + P * i2 - delta * i3
        assert e[l] == pytest.approx(ref, rel=1e-7, abs=1e-7 * abs(i1)), (l, e[l], ref)


# estimation ----------------------------------------------------------------------------------

def test_recovers_blowfly_parameters_from_noise_free_dde_solution():
    """Data from oi.solve (rtol 1e-11) with the zoo history; tau fixed at its true value."""
    t, y = _simulated()
    est = OrthogonalConditions(L=11, smoother=SplineSmoother(n_basis=120)).fit(
        BLOWFLY.model, oi.Data(t, y, "N"), fixed={"tau": 14.8}, start={"N0": 500.0})
    assert est.converged
    np.testing.assert_allclose(est.values, TRUE[:3], rtol=1e-3)
    assert est.extras["window"] == [(55.0 + 14.8, 260.0)]  # default: a = t0 + tau, b = T1 (spec §1.8)


def test_estimates_the_delay_through_the_proxy():
    """tau free, no start: grid over (0, a - t0] with (P, delta) profiled, then the bounded
    variable-projection search with the exact delay derivative."""
    t, y = _simulated()
    est = OrthogonalConditions(L=11, smoother=SplineSmoother(n_basis=120), window=(90.0, 260.0)).fit(
        BLOWFLY.model, oi.Data(t, y, "N"), start={"N0": 500.0})
    assert est.converged and est.names == ("P", "N0", "delta", "tau")
    np.testing.assert_allclose(est.values, TRUE, rtol=1e-3)
    assert np.all(np.isfinite(est.bse))


def test_plugin_covariance_vs_monte_carlo_with_the_lagged_term():
    """Spec §3.4 with the DDE term in D: 100 noisy replications (sd 100) of the simulated series,
    undersmoothed proxy (80 basis functions, so that the residual sd estimates the noise sd):
    the mean plug-in standard error is within 25% of the Monte Carlo sd (relative s.e. of an
    sd from 100 reps: ~7%). With the GCV proxy the plug-in is ~1.4x conservative, because the
    proxy bias inflates sigma_hat (tests/reference/oc_tables.md)."""
    t, y0 = _simulated()
    rng = np.random.default_rng(7)
    oc = OrthogonalConditions(L=11, smoother=SplineSmoother(n_basis=80))
    vals, ses = [], []
    for _ in range(100):
        est = oc.fit(BLOWFLY.model, oi.Data(t, y0 + rng.normal(0, 100.0, y0.shape), "N"), fixed={"tau": 14.8},
                     start={"N0": 500.0})
        vals.append(est.values)
        ses.append(est.bse.to_numpy())
    vals = np.array(vals)
    ratio = np.mean(ses, axis=0) / vals.std(axis=0, ddof=1)
    assert np.all((ratio > 0.8) & (ratio < 1.25)), ratio
    assert np.all(np.abs(vals.mean(axis=0) / TRUE[:3] - 1) < 0.05), vals.mean(axis=0)


def test_trajectory_sse_started_from_the_proxy_history():
    """The L-selection SSE: the true parameters reproduce noise-free data far better than a
    perturbed set (both solved from the proxy as initial function on [a - tau, a])."""
    t, y = _simulated()
    data = oi.Data(t, y, "N")
    est = OrthogonalConditions(L=6, smoother=SplineSmoother(n_basis=120)).fit(
        BLOWFLY.model, data, fixed={"tau": 14.8}, start={"N0": 500.0})
    from odeinfer.estimators.base import prepare

    prob = prepare(BLOWFLY.model, data, fixed={"tau": 14.8})
    win = est.extras["window"]
    good = dde_trajectory_sse(BLOWFLY.model, prob, est.extras["proxy"], TRUE, win)
    bad = dde_trajectory_sse(BLOWFLY.model, prob, est.extras["proxy"], TRUE * [1.1, 1, 1, 1], win)
    assert good < 1e-3 * np.sum(y**2) / y.size * (t >= win[0][0]).sum()
    assert bad > 100 * good


TABLE_6_2 = {  # paper, seed 001 Table 6.2: L -> ((P, N0, delta), their 95% intervals)
    11: ((7.81, 381.8, 0.154), ((5.80, 9.81), (303.62, 459.94), (0.10, 0.20))),
    9: ((7.52, 385.9, 0.153), ((5.64, 9.40), (306.59, 465.38), (0.11, 0.19))),
    12: ((7.91, 377.7, 0.154), ((5.0416, 10.77), (289.36, 465.98), (0.10, 0.20))),
}


def _table_6_2_fits():
    data = _bf1_first180()
    assert data.t[0] == 40.0 and data.t[-1] == 220.0 and data.t.size == 180
    sm = SplineSmoother(knots=tuple(uniform_knots(40.0, 220.0, 44, 3)))
    fit = {L: OrthogonalConditions(L=L, smoother=sm).fit(BLOWFLY.model, data, fixed={"tau": 14.8},
                                                          start={"N0": 500.0}) for L in TABLE_6_2}
    return data, sm, fit


def test_table_6_2_blowfly_set_up():
    """Seed 001 Table 6.2 set-up (bf1, first 180 rows = days 40-220, tau = 14.8 fixed, sine tests,
    proxy with 42 uniform knots on [40, 220] read as 42 distinct knots incl. the ends = 44 cubic
    B-splines, window [40 + tau, 220], N0 started at 500, L scanned 3..15 by trajectory SSE): the
    scan covers 3..15 on that window, a single-L fit equals its scan entry, and L = 2 (2 conditions
    for 3 parameters) is refused. Whether the paper's numbers are reproduced is the next test."""
    data, sm, fit = _table_6_2_fits()
    est = OrthogonalConditions(L_range=(3, 15), smoother=sm).fit(BLOWFLY.model, data, fixed={"tau": 14.8},
                                                                 start={"N0": 500.0})
    assert sorted(est.extras["L_scan"]) == list(range(3, 16))
    assert est.extras["window"] == [(40.0 + 14.8, 220.0)]
    for L, e in fit.items():
        assert e.converged
        np.testing.assert_allclose(e.values, list(est.extras["L_scan"][L]["params"].values()), rtol=1e-8)
    with pytest.raises(EstimationError, match="L: 2 test functions give 2 conditions for 3 free parameters"):
        OrthogonalConditions(L=2, smoother=sm).fit(BLOWFLY.model, data, fixed={"tau": 14.8}, start={"N0": 500.0})


@pytest.mark.xfail(strict=True, reason=(
    "Table 6.2 does not reproduce: at L = 11 our (P, N0) = (4.67, 500.7) lie outside the paper's 95% "
    "intervals [5.80, 9.81] and [303.62, 459.94] (delta 0.118 is inside [0.10, 0.20]); P is outside at L = 9 and 12 too, N0 at L = 12. "
    "The paper under-specifies the proxy, and the estimate moves with its reading by more than the paper's "
    "own standard errors (46 basis functions: P = 9.59 at L = 11; GCV: 3.66), so no bound that fails for a "
    "wrong implementation passes for ours; see tests/reference/oc_tables.md"))
def test_table_6_2_blowfly_reproduces_the_paper():
    """Reproduction criterion, fixed from the paper's numbers alone: at L = 9, 11 and 12 each of our
    estimates (P, N0, delta) lies inside the paper's 95% interval for it (half-width 1.96 times the
    paper's standard error, so at most about 2 of the paper's SEs from its estimate).

    The previous check (the paper's estimates and Wood's ABC means inside *our* 95% intervals)
    could not fail for any plausible estimate: our intervals are 2-5 times wider than the paper's
    (L = 11: P [-0.01, 9.35], N0 [104.6, 896.8]). Strict xfail: if a proxy reading ever reproduces
    the table, this test XPASSes, fails, and the record must be updated."""
    _data, _sm, fit = _table_6_2_fits()
    outside = []
    for L, (_paper, ci) in TABLE_6_2.items():
        for name, v, (lo, hi) in zip(("P", "N0", "delta"), fit[L].values, ci):
            if not lo <= v <= hi:
                outside.append((L, name, round(float(v), 4), (lo, hi)))
    assert not outside, outside


# bad input -----------------------------------------------------------------------------------

def _sim_data():
    t, y = _simulated(201.0, 2.0)
    return oi.Data(t, y, "N")


def test_error_window_starts_before_t0_plus_tau():
    with pytest.raises(EstimationError, match=r"lagged proxy x\(t - tau\).*choose a >= t0 \+ tau = 69.8"):
        OrthogonalConditions(L=5, window=(60.0, 200.0)).fit(BLOWFLY.model, _sim_data(), fixed={"tau": 14.8},
                                                            start={"N0": 500.0})


def test_error_free_delay_needs_a_window():
    with pytest.raises(EstimationError, match=r"delay\(s\) \['tau'\] are estimated.*pass window=\(a, b\)"):
        OrthogonalConditions(L=5).fit(BLOWFLY.model, _sim_data(), start={"N0": 500.0})


def test_error_boundary_conditions_with_delays():
    with pytest.raises(EstimationError, match=r"boundary: \['x0'\] is not supported for models with delays"):
        OrthogonalConditions(L=5, boundary=("x0",)).fit(BLOWFLY.model, _sim_data(), fixed={"tau": 14.8},
                                                        x0={"N": 300.0})


def test_error_missing_start_for_a_nonlinear_parameter_other_than_the_delay():
    with pytest.raises(EstimationError, match=r"start: no starting value for \['N0', 'tau'\]"):
        OrthogonalConditions(L=5, window=(80.0, 200.0)).fit(BLOWFLY.model, _sim_data())


def test_error_sharp_step_with_delays():
    @oi.model(states=["x"], params=["a", "s", "tau"], delays=["tau"], name="step_dde")
    def step_dde(t, y, p):
        return {"x": -p.a * om.lag(y.x, "tau") + om.heaviside(t - p.s)}

    with pytest.raises(EstimationError, match="has delays and a sharp step"):
        node_model(step_dde)


def test_gradient_matching_rejects_delay_models():
    with pytest.raises(EstimationError, match=r"gradient matching does not handle lagged states.*OrthogonalCond"):
        oi.GradientMatching().fit(BLOWFLY.model, _sim_data(), fixed={"tau": 14.8})


def test_newton_family_rejects_delay_models():
    with pytest.raises(EstimationError, match=r"NewtonRaphson fits the equation error.*AdjointDDE"):
        oi.NewtonRaphson().fit(BLOWFLY.model, _sim_data(), fixed={"tau": 14.8})
    with pytest.raises(EstimationError, match=r"GradientDescent fits the equation error"):
        oi.GradientDescent().fit_stream(BLOWFLY.model, (_sim_data().t, _sim_data().y), fixed={"tau": 14.8})
