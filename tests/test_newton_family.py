"""NewtonRaphson, GradientDescent, StochasticNewton, StochasticGradient (seed 000).

Reference values come from the spec ``specs/seed-000-stochastic-newton-gradient.md``
(its Appendix A numerical checks), from the paper's explicit Jacobians (eqs. 47, 56, 61)
coded independently here in numpy, from the paper's formulas (12), (31), and from the
closed-form noise bias of spec §5.3. See ``tests/reference/seed000_tables.md``.
"""

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import BiasWarning, DataError, InputError
from odeinfer.estimators._coverage import PANEL_RECORDED, PROFILE_RECORDED, _panel_range
from odeinfer.estimators._noise_cov import noise_variance, stencil_weights
from odeinfer.estimators.base import IdentifiabilityWarning
from odeinfer.estimators.finite_difference import DerivativeScheme, second_order_difference
from odeinfer.estimators.newton import GradientDescent, NewtonRaphson, StochasticGradient, StochasticNewton

LORENZ_STARTS = [[15, 1, -10], [0, 10, -10], [30, -10, 10], [-3, 1, 0], [0, 0, 0]]          # Table 4
POP_STARTS = [[0.1, 0.1, 1.2, 1.3, 0.2], [1, -1, 2, 0, 1], [-10, -10, 2, -3, 1], [0, 0, 0, 0, 0],
              [100, -100, -100, 20, -30]]                                                     # Table 1
AI_STARTS = [[1, 2, 1, 2], [10, 0, 3, 0.1], [0, 0, -10, 0], [-1, 1, -10, 9], [-10, 11, 12, 13]]  # Table 8


def _sim(z, t=None, noise=None, rng=None):
    return oi.simulate(z.model, z.params, z.x0, z.t if t is None else t, noise=noise, rng=rng).data


def _lorenz_ols(t, X):
    """Spec Appendix A snippet: forward-difference OLS with the paper's Jacobian (56)."""
    dt = np.diff(t)[:, None]
    D = (X[1:] - X[:-1]) / dt
    x = X[:-1]
    N = len(x)
    J = np.zeros((3 * N, 3))
    c = np.zeros(3 * N)
    J[0::3, 0] = x[:, 1] - x[:, 0]
    J[1::3, 1] = x[:, 0]
    J[2::3, 2] = -x[:, 2]
    c[1::3] = -x[:, 0] * x[:, 2] - x[:, 1]
    c[2::3] = x[:, 0] * x[:, 1]
    return np.linalg.lstsq(J, D.reshape(-1) - c, rcond=None)[0], J, D.reshape(-1) - c


@pytest.fixture(scope="module")
def lorenz():
    return oi.zoo.lorenz()


@pytest.fixture(scope="module")
def lorenz_noisy(lorenz):
    return _sim(lorenz, noise=lorenz.sigma, rng=11)


# --- derivatives --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lorenz", "activator_inhibitor", "population"])
def test_kernel_jacobian_matches_central_differences(name):
    z = oi.zoo.get(name)
    mod = z.model.compile().module
    rng = np.random.default_rng(0)
    Y = rng.uniform(0.2, 2.0, size=(7, z.model.n_states))
    t = np.linspace(0, 1, 7)
    p = z.params_array() * rng.uniform(0.8, 1.2, z.model.n_params)
    J = np.empty((7, z.model.n_states, z.model.n_params))
    mod.eval_jac_p_batch(t, Y, p, J)
    F1, F2 = np.empty_like(Y), np.empty_like(Y)
    for j in range(z.model.n_params):
        h = 1e-6 * max(1.0, abs(p[j]))
        e = np.zeros_like(p)
        e[j] = h
        mod.eval_f_batch(t, Y, p + e, F1)
        mod.eval_f_batch(t, Y, p - e, F2)
        np.testing.assert_allclose(J[:, :, j], (F1 - F2) / (2 * h), rtol=1e-6, atol=1e-7)
    f = z.model.lambdify("f")
    mod.eval_f_batch(t, Y, p, F1)
    np.testing.assert_allclose(F1, np.array([f(ti, yi, p) for ti, yi in zip(t, Y)]), rtol=1e-12)


def test_activator_inhibitor_jacobian_matches_paper_eq61():
    z = oi.zoo.activator_inhibitor()
    mod = z.model.compile().module
    rng = np.random.default_rng(1)
    Y = rng.uniform(0.1, 2.0, size=(5, 2))
    a = np.array([1.3, 2.2, 0.7, 0.4])
    J = np.empty((5, 2, 4))
    mod.eval_jac_p_batch(np.zeros(5), Y, a, J)
    x1, x2 = Y[:, 0], Y[:, 1]
    den = 1 + x1**2 + a[1] * x2
    np.testing.assert_allclose(J[:, 0, 0], x1**2 / den, rtol=1e-12)
    np.testing.assert_allclose(J[:, 0, 1], -x2 * (1 + a[0] * x1**2) / den**2, rtol=1e-12)
    np.testing.assert_allclose(J[:, 1, 2], a[3] * x1 - x2, rtol=1e-12)
    np.testing.assert_allclose(J[:, 1, 3], a[2] * x1, rtol=1e-12)


def test_second_order_formula_is_paper_eq12_on_irregular_grid():
    rng = np.random.default_rng(2)
    t = np.cumsum(rng.uniform(0.05, 0.3, 12))
    y = np.exp(np.sin(t))[:, None]
    d = second_order_difference(t, y)[:, 0]
    ti, t1, t2 = t[:-2], t[1:-1], t[2:]
    xi, x1, x2 = y[:-2, 0], y[1:-1, 0], y[2:, 0]
    num = (x1 - xi) * ((t2 - ti) ** 2 - (t1 - ti) ** 2) - (x2 - x1) * (t1 - ti) ** 2      # eq. (12) as printed
    den = (t1 - ti) * ((t2 - ti) ** 2 - (t1 - ti) ** 2) - (t2 - t1) * (t1 - ti) ** 2
    np.testing.assert_allclose(d, num / den, rtol=1e-10)
    tu = np.arange(5) * 0.1                                                                  # spec §1.2, uniform grid
    yu = (tu**2)[:, None]
    np.testing.assert_allclose(second_order_difference(tu, yu)[:, 0], 2 * tu[:-2], atol=1e-12)


def test_local_polynomial_exact_for_cubics_on_irregular_grid():
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 2, 30))
    Y = np.column_stack([1 + 2 * t - t**2 + 0.5 * t**3, 3 - t])
    tr, X, D = DerivativeScheme("local_polynomial", window=7, degree=3).rows(t, Y)
    np.testing.assert_allclose(D[:, 0], 2 - 2 * tr + 1.5 * tr**2, atol=1e-9)
    np.testing.assert_allclose(D[:, 1], -1.0, atol=1e-9)
    np.testing.assert_allclose(X, Y[3:-3], atol=1e-9)


# --- the paper's examples -------------------------------------------------------------------------
def test_lorenz_noise_free_forward_difference_matches_spec(lorenz):
    # spec §3.2 / §5.3: noise-free dt = 0.05 gives [9.456, 27.604, 2.834]; dt = 0.1 gives [7.872, 27.401, 2.971]
    est = NewtonRaphson(derivative="forward", damping="none").fit(lorenz.model, _sim(lorenz), start=LORENZ_STARTS[0])
    np.testing.assert_allclose(est.values, [9.456, 27.604, 2.834], atol=1.5e-3)
    d01 = _sim(lorenz, t=np.arange(0, 10.05, 0.1))
    np.testing.assert_allclose(NewtonRaphson(derivative="forward").fit(lorenz.model, d01, start=[1, 1, 1]).values,
                               [7.872, 27.401, 2.971], atol=1.5e-3)


def test_lorenz_nr_one_step_from_every_table4_start_equals_ols(lorenz, lorenz_noisy):
    ols, _, _ = _lorenz_ols(lorenz_noisy.t, lorenz_noisy.y)
    for a0 in LORENZ_STARTS:
        est = NewtonRaphson(derivative="forward", damping="none").fit(lorenz.model, lorenz_noisy, start=a0)
        assert est.status == "converged" and est.n_iter == 1          # spec §2.1: GN exact in one step
        np.testing.assert_allclose(est.values, ols, rtol=1e-10)
        assert est.nobs == 3 * (lorenz_noisy.n_times - 1)              # rows d = 1..N-1, three states


def test_lorenz_gd_reaches_the_nr_solution_from_every_start(lorenz, lorenz_noisy):
    # spec §5.2 item 6: the objective is a convex quadratic; the paper's spread is premature stopping
    ols, _, _ = _lorenz_ols(lorenz_noisy.t, lorenz_noisy.y)
    for a0 in LORENZ_STARTS:
        gd = GradientDescent(derivative="forward", gtol=1e-12).fit(lorenz.model, lorenz_noisy, start=a0)
        assert gd.status == "converged"
        np.testing.assert_allclose(gd.values, ols, rtol=1e-9)
        assert np.all(np.diff(gd.history["cost"]) <= 1e-9 * gd.history["cost"][0])   # eq. (32)


def test_cauchy_step_equals_paper_eq31(lorenz, lorenz_noisy):
    from odeinfer.estimators._newton_core import cauchy_step

    a = np.array([12.0, 20.0, 1.0])
    _, J, rhs = _lorenz_ols(lorenz_noisy.t, lorenz_noisy.y)
    G = J @ a - rhs
    delta = J @ (J.T @ G)
    eta31 = delta @ G / (delta @ delta)
    assert cauchy_step(J.T @ G, J.T @ J) == pytest.approx(eta31, rel=1e-10)
    gd = GradientDescent(derivative="forward", max_iter=1).fit(lorenz.model, lorenz_noisy, start=a)
    np.testing.assert_allclose(gd.values, a - eta31 * (J.T @ G), rtol=1e-9)
    assert gd.status == "max_iter"


def test_population_all_table1_starts_reach_the_ols_of_eq47():
    z = oi.zoo.population()
    d = _sim(z, noise=z.sigma, rng=5)
    X, t = d.y, d.t
    D = np.diff(X, axis=0) / np.diff(t)[:, None]
    x1, x2 = X[:-1, 0], X[:-1, 1]
    J = np.zeros((2 * len(x1), 5))                                   # paper eq. (47)
    J[0::2, 0], J[0::2, 1] = x1, -x1 * x2
    J[1::2, 2], J[1::2, 3], J[1::2, 4] = x2, x1 * x2, -x2**2
    ols = np.linalg.lstsq(J, D.reshape(-1), rcond=None)[0]
    for a0 in POP_STARTS:
        nr = NewtonRaphson(derivative="forward", damping="none").fit(z.model, d, start=a0)
        assert nr.n_iter == 1
        np.testing.assert_allclose(nr.values, ols, rtol=1e-9)
    gd = GradientDescent(derivative="forward", max_iter=50000).fit(z.model, d, start=POP_STARTS[4])
    np.testing.assert_allclose(gd.values, ols, rtol=1e-6)


def test_activator_inhibitor_damped_converges_from_all_five_undamped_fails_from_guess5():
    z = oi.zoo.activator_inhibitor()
    d = _sim(z, noise=z.sigma, rng=0)
    ests = [NewtonRaphson(derivative="forward").fit(z.model, d, start=a0) for a0 in AI_STARTS]
    assert all(e.status == "converged" for e in ests)
    for e in ests[1:]:
        np.testing.assert_allclose(e.values, ests[0].values, rtol=1e-6)
    np.testing.assert_allclose(ests[0].values, z.params_array(), rtol=0.1)      # near the truth [2, 3, 0.1, 0.4]
    undamped = [NewtonRaphson(derivative="forward", damping="none", max_iter=60).fit(z.model, d, start=a0) for a0 in AI_STARTS]
    for e in undamped[:4]:                                   # spec §3.3: guesses 1-4 converge in 5-11 iterations
        assert e.status == "converged" and 5 <= e.n_iter <= 11
        np.testing.assert_allclose(e.values, ests[0].values, rtol=1e-6)
    bad = undamped[4]                                        # spec §3.3: guess 5 diverges or stalls elsewhere
    assert bad.status != "converged" or not np.allclose(bad.values, ests[0].values, rtol=1e-3)


# --- first-difference bias (spec §5.3) -------------------------------------------------------------
def test_forward_difference_bias_grows_as_dt_shrinks_and_spline_is_far_less_biased(lorenz):
    s2 = 2.0
    a1 = {}
    for dt in (0.05, 0.02, 0.01):
        t = np.arange(0, 10 + dt / 2, dt)
        truth = oi.simulate(lorenz.model, lorenz.params, lorenz.x0, t).truth.y
        q1 = np.mean((truth[:-1, 1] - truth[:-1, 0]) ** 2)
        predicted = (10 * q1 + s2 / dt) / (q1 + 2 * s2)               # spec §5.3 closed form (no truncation)
        vals = [NewtonRaphson(derivative="forward").fit(lorenz.model, _sim(lorenz, t, np.sqrt(2), rng=s), start=[1, 1, 1]).values[0]
                for s in range(3)]
        a1[dt] = np.mean(vals)
        if dt <= 0.02:
            assert a1[dt] == pytest.approx(predicted, rel=0.06)
    assert a1[0.05] < a1[0.02] < a1[0.01]
    assert a1[0.01] > 17                                             # spec table: 19.505 (mean of 20)
    d = _sim(lorenz, np.arange(0, 10.005, 0.01), np.sqrt(2), rng=0)
    sp = NewtonRaphson(derivative="spline").fit(lorenz.model, d, start=[1, 1, 1]).values[0]
    assert abs(sp - 10) < 0.15 * abs(a1[0.01] - 10)


# --- stochastic versions ----------------------------------------------------------------------------
def test_snr_with_all_equations_is_nr_and_subsets_use_the_pseudo_inverse(lorenz, lorenz_noisy):
    nr = NewtonRaphson(derivative="forward", damping="none").fit(lorenz.model, lorenz_noisy, start=[15, 1, -10])
    full = StochasticNewton(derivative="forward").fit(lorenz.model, lorenz_noisy, start=[15, 1, -10], rng=0)
    np.testing.assert_allclose(full.values, nr.values, rtol=1e-12)
    for r in (1, 2):
        s = StochasticNewton(derivative="forward", n_equations=r).fit(lorenz.model, lorenz_noisy, start=[15, 1, -10], rng=r)
        assert s.status == "converged"
        np.testing.assert_allclose(s.values, nr.values, rtol=1e-8)
        g = StochasticGradient(derivative="forward", n_equations=r).fit(lorenz.model, lorenz_noisy, start=[15, 1, -10], rng=r)
        np.testing.assert_allclose(g.values, nr.values, rtol=1e-6)


def test_minibatch_snr_and_sgd_approach_the_full_data_solution(lorenz):
    t = np.arange(0, 40, 0.01)
    d = _sim(lorenz, t, 0.05, rng=3)
    nr = NewtonRaphson(derivative="forward").fit(lorenz.model, d, start=[1, 1, 1])
    se = nr.bse.to_numpy()

    def dist(cls, epochs):
        e = cls(derivative="forward", batch_size=400, max_epochs=epochs).fit(lorenz.model, d, start=[1, 1, 1], rng=1)
        return e, np.abs(e.values - nr.values) / se

    # Measured in units of NR's (calibrated) standard errors: minibatch SNR ends within about 1.2 s.e.
    # after 10 epochs; SGD's step-size noise floor stays several s.e. away (9 s.e. for a2 here).
    snr5, d_snr5 = dist(StochasticNewton, 5)
    _, d_snr10 = dist(StochasticNewton, 10)
    sgd5, d_sgd5 = dist(StochasticGradient, 5)
    _, d_sgd10 = dist(StochasticGradient, 10)
    assert np.all(d_snr10 < 2) and d_snr10.max() < d_snr5.max()
    assert np.all(d_sgd10 < 12) and d_sgd10.max() < d_sgd5.max()
    assert snr5.n_iter == sgd5.n_iter == 5 * 10                     # 3999 rows: 9 full batches + 399 >= 400 / 2
    assert len(snr5.history["cost"]) == 5 and len(snr5.history["batch_cost"]) == snr5.n_iter


# --- covariance, identifiability, inputs ---------------------------------------------------------------
def test_delta_method_covariance_equals_refit_derivatives(lorenz, lorenz_noisy):
    """Oracle: central differences of the independent numpy OLS (spec Appendix A) w.r.t. every sample,
    ``Cov = sum_ij s_j^2 (d theta / d y_ij)(...)^T`` with the same noise variances (Lorenz is linear
    in the parameters, so Gauss-Newton's bread is exact and the two must agree to rounding)."""
    est = NewtonRaphson(derivative="forward").fit(lorenz.model, lorenz_noisy, start=[1, 1, 1])
    t, Y = lorenz_noisy.t, np.array(lorenz_noisy.y)
    s2 = np.array([noise_variance(t, Y[:, k]) for k in range(3)])
    G = np.zeros((3,) + Y.shape)
    for i in range(Y.shape[0]):
        for j in range(3):
            Yp, Ym = Y.copy(), Y.copy()
            Yp[i, j] += 1e-6
            Ym[i, j] -= 1e-6
            G[:, i, j] = (_lorenz_ols(t, Yp)[0] - _lorenz_ols(t, Ym)[0]) / 2e-6
    np.testing.assert_allclose(est.cov, np.einsum("aij,bij,j->ab", G, G, s2), rtol=1e-5)
    assert "delta method" in est.extras["cov_type"]
    _, J, rhs = _lorenz_ols(t, Y)
    np.testing.assert_allclose(np.asarray(est.residuals).reshape(-1), J @ est.values - rhs, rtol=1e-8, atol=1e-8)


def test_noise_variance_is_exact_on_lines_and_consistent():
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 10, 4000))
    assert noise_variance(t, 2.0 - 0.3 * t) == pytest.approx(0.0, abs=1e-20)     # pseudo-residuals vanish
    y = np.sin(t) + rng.normal(0, 0.1, t.size)
    assert noise_variance(t, y) == pytest.approx(0.01, rel=0.06)                 # 3 s.e. of a variance, n = 4000
    assert np.isnan(noise_variance(t[:2], y[:2]))


@pytest.mark.parametrize("scheme", [DerivativeScheme("forward"), DerivativeScheme("second_order"),
                                    DerivativeScheme("local_polynomial", window=7, degree=3),
                                    DerivativeScheme("local_polynomial", evaluate_at="measured")])
def test_stencil_weights_reproduce_the_rows(scheme):
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.uniform(0.05, 0.2, 40))
    Y = rng.normal(size=(40, 2))
    _, X, D = scheme.rows(t, Y)
    start, a, c = stencil_weights(scheme, t)
    idx = start[:, None] + np.arange(a.shape[1])
    np.testing.assert_allclose(np.einsum("rw,rwk->rk", a, Y[idx]), X, atol=1e-10)
    np.testing.assert_allclose(np.einsum("rw,rwk->rk", c, Y[idx]), D, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("derivative", ["forward", "local_polynomial"])
def test_standard_errors_match_the_monte_carlo_spread(derivative, monkeypatch):
    """200 replicates, linear decay chain, 400 samples: mean bse / MC sd within 0.85..1.15 (the MC sd
    has a 5 % standard error). The residual sandwich (HC0) overstated it several times over here.

    Each fit's trajectory check (a warning only: it does not enter the estimate or its bse) is left
    out: its GCV smoothing splines of the start took 99 % of every fit here (0.3 s of CPU per fit, 130 s
    over the two cases). The check of the Newton family's estimates is tests/test_trajectory_check.py's."""
    import odeinfer.estimators.newton as newton

    monkeypatch.setattr(newton, "record_trajectory_check", lambda *args, **kwargs: None)
    z = oi.zoo.linear_decay()
    t = np.linspace(0, 10, 401)[1:]
    vals, ses = [], []
    for r in range(200):
        e = NewtonRaphson(derivative=derivative).fit(z.model, _sim(z, t=t, noise=0.002, rng=r), start=z.params)
        vals.append(e.values)
        ses.append(e.bse.to_numpy())
    ratio = np.mean(ses, 0) / np.std(vals, 0, ddof=1)
    assert np.all((ratio > 0.85) & (ratio < 1.15)), ratio


def test_spline_covariance_is_the_residual_sandwich(lorenz, lorenz_noisy):
    """Spline derivatives (a global smoother) keep HC0: check its explicit formula with the paper's
    Jacobian (56) coded here, at the spline's rows."""
    est = NewtonRaphson(derivative="spline").fit(lorenz.model, lorenz_noisy, start=[1, 1, 1])
    _, x, D = DerivativeScheme("spline").rows(lorenz_noisy.t, np.array(lorenz_noisy.y))
    N = len(x)
    J, c = np.zeros((3 * N, 3)), np.zeros(3 * N)
    J[0::3, 0], J[1::3, 1], J[2::3, 2] = x[:, 1] - x[:, 0], x[:, 0], -x[:, 2]
    c[1::3], c[2::3] = -x[:, 0] * x[:, 2] - x[:, 1], x[:, 0] * x[:, 1]
    e = J @ est.values + c - D.reshape(-1)
    Bi = np.linalg.inv(J.T @ J)
    np.testing.assert_allclose(est.cov, Bi @ (J.T * e**2) @ J @ Bi, rtol=1e-8)
    assert est.cost == pytest.approx(0.5 * e @ e, rel=1e-10)
    assert "HC0" in est.extras["cov_type"]


@pytest.mark.parametrize("scheme", ["forward", "local_polynomial"])
def test_stream_delta_method_with_missing_values_equals_in_memory(lorenz, lorenz_noisy, scheme):
    """Missing samples around chunk boundaries (chunks shorter than the stencil, a chunk of NaN only):
    the streamed covariance and noise variances equal the in-memory ones; the noise variances equal
    :func:`noise_variance` of each whole column (oracle: the in-memory function on the full series)."""
    t, y = lorenz_noisy.t, np.array(lorenz_noisy.y)
    y[[5, 6, 17, 18, 19, 40], [0, 1, 2, 2, 2, 1]] = np.nan
    y[60:63, 0] = np.nan
    est = NewtonRaphson(derivative=scheme)
    ref = est.fit(lorenz.model, oi.Data(t, y, lorenz_noisy.states), start=[1, 1, 1])
    chunks = _chunks(t, y, [4, 2, 1, 11, 2, 40, 3, 3])
    s = est.fit_stream(lorenz.model, chunks, start=[1, 1, 1])
    np.testing.assert_allclose(s.values, ref.values, rtol=1e-10)
    np.testing.assert_allclose(s.cov, ref.cov, rtol=1e-8)
    s2 = [noise_variance(t, y[:, k]) for k in range(3)]
    np.testing.assert_allclose(s.extras["noise_variance"][0], s2, rtol=1e-12)
    np.testing.assert_allclose(ref.extras["noise_variance"][0], s2, rtol=1e-12)
    assert "delta method" in s.extras["cov_type"] and s.nobs == ref.nobs


def test_stochastic_stream_covariance_equals_in_memory(lorenz, lorenz_noisy):
    est = StochasticNewton(derivative="second_order", max_epochs=5)
    ref = est.fit(lorenz.model, lorenz_noisy, start=[1, 1, 1], rng=0)
    s = est.fit_stream(lorenz.model, (lorenz_noisy.t, lorenz_noisy.y), start=[1, 1, 1], chunk_size=33, rng=0)
    np.testing.assert_allclose(s.values, ref.values, rtol=1e-9)
    np.testing.assert_allclose(s.cov, ref.cov, rtol=1e-8)
    assert "delta method" in s.extras["cov_type"]


def test_full_data_steps_reuse_the_epoch_check_without_changing_the_path(lorenz, lorenz_noisy, monkeypatch):
    """With batch_size=None and every equation per step, each epoch's full-data check at the new point is the
    next step's normal equations: reused, the fit is bitwise the one that sums them twice, with one kernel pass
    per epoch fewer. The reference is the same fit with the reuse switched off."""
    from odeinfer.estimators import _newton_core as core

    calls = []
    evaluate = core.Accumulator.evaluate

    def counted(self, *args, **kwargs):
        calls.append(1)
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(core.Accumulator, "evaluate", counted)
    monkeypatch.setattr(core, "stochastic_gradient_rows", lambda *a, python, **k: python())  # the Python loop
    stochastic = core.stochastic
    fits = {}
    for reuse in (True, False):
        monkeypatch.setattr(core, "stochastic", lambda *a, **k: stochastic(*a, **{**k, "full_batches": reuse and
                                                                                  k["full_batches"]}))
        calls.clear()
        est = StochasticGradient(derivative="second_order", max_epochs=40)
        fits[reuse] = (est.fit(lorenz.model, lorenz_noisy, start=[1, 1, 1], rng=0), len(calls))
    (a, n_reuse), (b, n_plain) = fits[True], fits[False]
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.cov, b.cov)
    assert a.extras["epochs"] == b.extras["epochs"] > 1
    assert n_plain - n_reuse == a.extras["epochs"] - 1   # every epoch after the first starts from its check


def _python_and_kernel(monkeypatch, est, *args, **kwargs):
    """The fit with gradient descent's loop in Python (``gradient_descent``, ``stochastic``: the reference)
    and in the kernel ``gm_descent``, and the kernel's return codes in the second fit (so a test sees that the
    kernel ran, not the Python loop twice)."""
    from odeinfer.estimators import _newton_core as core

    fits, codes, descent = [], [], core._descent

    def recorded(*args):
        out = descent(*args)
        codes.append(out[0])
        return out

    for python in (True, False):
        with monkeypatch.context() as m:
            if python:
                m.setattr(core, "gradient_descent_rows", lambda acc, blocks, theta, **k: core.gradient_descent(
                    lambda th, meat=False: acc.evaluate(blocks, th, meat=meat), theta, **k))
                m.setattr(core, "stochastic_gradient_rows", lambda *a, python, **k: python())
            else:
                m.setattr(core, "_descent", recorded)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fits.append(est.fit(*args, **kwargs))
    return fits[0], fits[1], codes


@pytest.mark.parametrize("est, start", [
    (GradientDescent(derivative="forward"), [15, 1, -10]),
    (GradientDescent(derivative="second_order", max_iter=7), [1, 1, 1]),  # ends at max_iter
    (GradientDescent(derivative="forward", xtol=1e-6), [1, 1, 1]),  # ends on the step test
    (StochasticGradient(derivative="second_order"), [1, 1, 1]),
    (StochasticGradient(derivative="forward", max_epochs=9), [1, 1, 1]),  # ends at max_epochs
    (StochasticGradient(derivative="forward", xtol=1e-6), [1, 1, 1]),
], ids=["gd", "gd-max-iter", "gd-xtol", "sgd", "sgd-max-epochs", "sgd-xtol"])
def test_the_descent_kernel_takes_the_python_loops_steps(est, start, lorenz, lorenz_noisy, monkeypatch):
    """Gradient descent and the full-data stochastic gradient run their loop in one kernel call: the same
    status, message, iterations and estimates as the Python loop, the same history to rounding (the kernel
    sums g^T g and g^T B g in its own order)."""
    py, kern, codes = _python_and_kernel(monkeypatch, est, lorenz.model, lorenz_noisy, start=start)
    assert len(codes) == 1  # one kernel call ran the whole loop
    _same_fit(py, kern)


def _same_fit(py, kern):
    assert (py.status, py.message, py.n_iter) == (kern.status, kern.message, kern.n_iter)
    np.testing.assert_allclose(kern.values, py.values, rtol=1e-12, atol=0)
    assert py.history.keys() == kern.history.keys()
    for key in py.history:
        np.testing.assert_allclose(kern.history[key], py.history[key], rtol=1e-10, atol=0, err_msg=key)


@pytest.mark.parametrize("cls", [GradientDescent, StochasticGradient])
def test_a_start_where_the_residual_is_not_finite_fails_on_both_paths(cls, monkeypatch):
    """f = -sqrt(k) x at k = -1 is NaN everywhere: a failure, said so (the stochastic gradient once read the
    NaN point's gradient cosine as 0 and reported "converged"); the kernel hands such a fit to the Python loop."""
    model = oi.Model.from_equations({"x": "-sqrt(k)*x"}, params=["k"], name="sqrt_decay")
    data = oi.simulate(model, {"k": 1.0}, {"x": 5.0}, np.linspace(0.0, 3.0, 40), noise=0.05, rng=1).data
    py, kern, codes = _python_and_kernel(monkeypatch, cls(derivative="forward"), model, data, start=[-1.0])
    from odeinfer.solve.kernels import residuals

    assert codes == [residuals.DESCENT_START]  # the kernel ran and stopped at the start
    _same_fit(py, kern)
    assert kern.status == "failed" and kern.message == "residual not finite at the start values"


def test_rank_deficient_gives_identifiability_warning_and_nan_bse():
    m = oi.Model.from_equations({"x": "-k1*k2*x"}, params=["k1", "k2"])
    d = oi.simulate(m, [1.0, 0.5], [2.0], np.linspace(0, 3, 40)).data
    with pytest.warns(IdentifiabilityWarning, match="rank deficient"):
        est = NewtonRaphson(derivative="forward").fit(m, d, start=[1.0, 1.0])
    assert np.all(np.isnan(est.bse.to_numpy()))
    assert est.values[0] * est.values[1] == pytest.approx(
        NewtonRaphson(derivative="forward").fit(m, d, start=[0.5], fixed={"k1": 1.0}).values[0], rel=1e-6)


def test_fit_does_not_mutate_inputs_and_handles_missing_values(lorenz, lorenz_noisy):
    y = np.array(lorenz_noisy.y)
    y[5, 1] = np.nan
    d = oi.Data(lorenz_noisy.t, y, lorenz_noisy.states)
    start = np.array([15.0, 1.0, -10.0])
    est = NewtonRaphson(derivative="forward").fit(lorenz.model, d, start=start, fixed=None)
    np.testing.assert_array_equal(start, [15.0, 1.0, -10.0])
    assert est.nobs == 3 * (d.n_times - 1) - 4           # row 4 loses x2' ; row 5 loses all three
    assert np.isnan(est.residuals[5]).all() and np.isfinite(est.residuals[6]).all()


def test_fixed_parameter(lorenz, lorenz_noisy):
    est = NewtonRaphson(derivative="forward").fit(lorenz.model, lorenz_noisy, start=[1, 1], fixed={"a3": 8 / 3})
    assert est.names == ("a1", "a2") and est.fixed == {"a3": 8 / 3}
    full = NewtonRaphson(derivative="forward").fit(lorenz.model, lorenz_noisy, start=[1, 1, 1])
    np.testing.assert_allclose(est.values, full.values[:2], rtol=1e-8)   # J^T J is diagonal (spec §3.2)


# --- streaming ---------------------------------------------------------------------------------------
def _chunks(t, y, sizes):
    out, s = [], 0
    for k in sizes:
        out.append((t[s:s + k], y[s:s + k]))
        s += k
    out.append((t[s:], y[s:]))
    return out


@pytest.mark.parametrize("scheme", ["forward", "second_order", "local_polynomial"])
def test_stream_equals_in_memory_across_chunk_boundaries(lorenz, lorenz_noisy, scheme, tmp_path):
    est = NewtonRaphson(derivative=scheme)
    ref = est.fit(lorenz.model, lorenz_noisy, start=[1, 1, 1])
    t, y = lorenz_noisy.t, lorenz_noisy.y
    chunks = _chunks(t, y, [1, 2, 7, 13, 50, 3])
    s1 = est.fit_stream(lorenz.model, chunks, start=[1, 1, 1])
    s2 = est.fit_stream(lorenz.model, lambda: iter(chunks), start=[1, 1, 1])
    path = tmp_path / "series.npy"
    np.save(path, np.column_stack([t, y]))
    s3 = est.fit_stream(lorenz.model, np.load(path, mmap_mode="r"), start=[1, 1, 1], chunk_size=17)
    s4 = est.fit_stream(lorenz.model, (t, y[:, ::-1]), start=[1, 1, 1], states=["x3", "x2", "x1"], chunk_size=40)
    for s in (s1, s2, s3, s4):
        np.testing.assert_allclose(s.values, ref.values, rtol=1e-10)
        np.testing.assert_allclose(s.cov, ref.cov, rtol=1e-8)  # the same delta-method covariance
        assert s.nobs == ref.nobs and s.residuals is None and s.extras["cov_type"] == ref.extras["cov_type"]


def test_stream_errors(lorenz, lorenz_noisy):
    t, y = lorenz_noisy.t, lorenz_noisy.y
    with pytest.raises(InputError, match="one-shot iterator"):
        NewtonRaphson(derivative="forward").fit_stream(lorenz.model, iter(_chunks(t, y, [50])), start=[1, 1, 1])
    with pytest.raises(InputError, match="batch_size: 5000 is larger than the data"):
        StochasticNewton(derivative="forward", batch_size=5000).fit_stream(lorenz.model, (t, y), start=[1, 1, 1])
    with pytest.raises(InputError, match="larger than the streamed data"):
        StochasticNewton(derivative="forward", batch_size=5000, max_epochs=1).fit_stream(lorenz.model, iter(_chunks(t, y, [50])),
                                                                   start=[1, 1, 1])
    bad = [(t[:10], y[:10]), (t[10:20], y[10:20, :2])]
    with pytest.raises(DataError, match=r"chunk 1: y_chunk has shape \(10, 2\), expected \(10, 3\)"):
        NewtonRaphson(derivative="forward").fit_stream(lorenz.model, bad, start=[1, 1, 1])
    with pytest.raises(DataError, match="chunk 1: times must increase"):
        NewtonRaphson(derivative="forward").fit_stream(lorenz.model, [(t[:10], y[:10]), (t[5:15], y[5:15])], start=[1, 1, 1])
    with pytest.raises(InputError, match="cannot be streamed"):
        NewtonRaphson(derivative="spline").fit_stream(lorenz.model, (t, y), start=[1, 1, 1])
    with pytest.raises(DataError, match="must name every model state"):
        NewtonRaphson(derivative="forward").fit_stream(lorenz.model, (t, y), states=["x1", "x2"])
    with pytest.raises(InputError, match="max_epochs: a one-shot iterator allows one pass, got max_epochs=2"):
        StochasticGradient(derivative="forward", batch_size=10, max_epochs=2).fit_stream(lorenz.model,
                                                                                         iter(_chunks(t, y, [50])))


def test_one_shot_stochastic_stream_reports_unchecked_convergence(lorenz, lorenz_noisy):
    t, y = lorenz_noisy.t, lorenz_noisy.y
    est = StochasticNewton(derivative="forward", batch_size=50, max_epochs=1).fit_stream(lorenz.model, iter(_chunks(t, y, [60, 60])),
                                                                  start=[1, 1, 1], rng=0)
    assert est.status == "max_iter" and "not checked" in est.message and est.cov is None
    assert any("one-shot iterator gives no pass" in w for w in est.warnings)
    default = StochasticNewton(derivative="forward", batch_size=50).fit_stream(  # max_epochs=None: one pass
        lorenz.model, iter(_chunks(t, y, [60, 60])), start=[1, 1, 1], rng=0)
    np.testing.assert_array_equal(default.values, est.values)
    assert np.all(np.abs(est.values - [10, 28, 8 / 3]) < [3, 2, 0.5])


# --- bad configuration --------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, match", [
    ({"derivative": "central"}, "derivative: expected one of"),
    ({"window": 4}, "window: expected an odd int"),
    ({"degree": 7}, "degree: expected an int in 1..4"),
    ({"derivative": "forward", "evaluate_at": "smoothed"}, "evaluate_at='smoothed' needs a smoothing derivative"),
    ({"evaluate_at": "middle"}, "evaluate_at: expected one of"),
    ({"spline_lam": -1.0}, "spline_lam: expected None"),
    ({"max_iter": 0}, "max_iter: expected a positive int"),
    ({"xtol": 2.0}, r"xtol: expected a number in \[0, 1\)"),
    ({"damping": "trust"}, "damping: expected 'lm'"),
    ({"lambda0": 0.0}, "lambda0: expected a positive number"),
])
def test_newton_config_errors(kwargs, match):
    with pytest.raises(InputError, match=match):
        NewtonRaphson(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    ({"n_equations": 0}, "n_equations: expected a positive int"),
    ({"batch_size": 2.5}, "batch_size: expected a positive int"),
    ({"max_epochs": -1}, "max_epochs: expected a positive int"),
    ({"step_decay": "fast"}, "step_decay: expected 'auto', 'none'"),
])
def test_stochastic_config_errors(kwargs, match):
    with pytest.raises(InputError, match=match):
        StochasticGradient(**kwargs)


def test_fit_input_errors(lorenz, lorenz_noisy):
    with pytest.raises(InputError, match="n_equations: 4 exceeds the model's 3 state equations"):
        StochasticNewton(derivative="forward", n_equations=4).fit(lorenz.model, lorenz_noisy)
    with pytest.raises(InputError, match="batch_size: 1000 is larger than the data"):
        StochasticGradient(derivative="forward", batch_size=1000).fit(lorenz.model, lorenz_noisy)
    short = oi.Data([0.0, 1.0], [[1.0, 2.0, 3.0], [1.5, 2.5, 3.5]], ["x1", "x2", "x3"])
    with pytest.raises(DataError, match="needs at least 3"):
        NewtonRaphson(derivative="second_order").fit(lorenz.model, short)
    with pytest.raises(InputError, match="chunk_size: expected a positive int"):
        NewtonRaphson(derivative="forward").fit_stream(lorenz.model, (lorenz_noisy.t, lorenz_noisy.y), chunk_size=0)


# --- reduced (default suite): the Table 4 replicate mean at 40 replicates --------------------------------
def test_lorenz_replicates_mean_matches_spec_table_reduced(lorenz):
    """Seed 000 Table 4 (spec §3.2 Monte Carlo, 20 replicates: mean [9.745, 27.588, 2.890], sd [0.293,
    0.179, 0.055]), reduced to 40 replicates (seeds 1000-1039; about 1 s warm). The slow test's rule at
    this count, fixed before the run: |mean - spec mean| < 3.5 combined MC s.e. of the two means."""
    vals = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdentifiabilityWarning)
        for s in range(40):
            vals.append(NewtonRaphson(derivative="forward").fit(  # the spec's (the paper's) differences
                lorenz.model, _sim(lorenz, noise=np.sqrt(2), rng=1000 + s), start=[1, 1, 1]).values)
    vals = np.array(vals)
    spec_sd = np.array([0.293, 0.179, 0.055])
    mc_se = np.sqrt(spec_sd**2 / 20 + vals.std(0, ddof=1) ** 2 / len(vals))
    assert np.all(np.abs(vals.mean(0) - [9.745, 27.588, 2.890]) < 3.5 * mc_se), (vals.mean(0), mc_se)


# --- slow: Monte Carlo reproduction of the spec's Lorenz numbers ------------------------------------------
@pytest.mark.slow
def test_lorenz_replicates_match_spec_table(lorenz):
    # spec §3.2: dt = 0.05, T = 10, sigma = sqrt(2), 20 replicates: mean [9.745, 27.588, 2.890], sd [0.293, 0.179, 0.055]
    vals, bse = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdentifiabilityWarning)
        for s in range(200):
            e = NewtonRaphson(derivative="forward").fit(lorenz.model, _sim(lorenz, noise=np.sqrt(2), rng=1000 + s), start=[1, 1, 1])
            vals.append(e.values)
            bse.append(e.bse.to_numpy())
    vals = np.array(vals)
    spec_sd = np.array([0.293, 0.179, 0.055])
    mc_se = np.sqrt(spec_sd**2 / 20 + vals.std(0, ddof=1) ** 2 / len(vals))
    assert np.all(np.abs(vals.mean(0) - [9.745, 27.588, 2.890]) < 3.5 * mc_se)
    # a2, a3 spreads agree with the spec's; a1's does not (0.49 here vs 0.293 there, robust sd 0.47
    # too): an open discrepancy recorded in tests/reference/seed000_tables.md, not asserted away.
    np.testing.assert_allclose(vals.std(0, ddof=1)[1:], spec_sd[1:], rtol=0.35)
    # delta-method standard errors (stencil correlation + errors-in-variables) track the spread; the
    # residual sandwich (HC0) overstated it 1.25x / 2.4x / 2.6x. Recorded in seed000_tables.md.
    np.testing.assert_allclose(np.mean(bse, 0), vals.std(0, ddof=1), rtol=0.2)


# --- no silent nonsense (issue 16) -------------------------------------------------------------------
@pytest.fixture(scope="module")
def pinene_400():
    """Issue 16's case: simulated alpha-pinene, n = 400 on (0, 100], sigma = 3, seed 7."""
    z = oi.zoo.alpha_pinene()
    t = np.linspace(0.0, 100.0, 401)[1:]
    return z, oi.simulate(z.model, z.params, z.x0, t, t0=0.0, noise=3.0, rng=7).data


@pytest.mark.parametrize("cls", [NewtonRaphson, GradientDescent, StochasticNewton, StochasticGradient])
def test_default_derivative_is_auto(cls):
    assert cls().derivative == "auto"


def test_pinene_default_is_consistent_and_forward_warns_with_the_diagnostic(pinene_400):
    """With first differences NewtonRaphson returned theta3 = 0.75 against 0.0205 (36x) and theta4 = 1.45
    against 0.275, converged and silent. The default (spline) must land near the truth: within 25 % of
    it (the failure is a multiple-fold error; the smoothing bias of a spline at 3 % noise is a few per
    cent); the paper's option must say, with the measured numbers, that its quotients are noise."""
    z, data = pinene_400
    truth = z.params_array()
    with warnings.catch_warnings():
        warnings.simplefilter("error", BiasWarning)  # no false alarm on the consistent default
        est = NewtonRaphson().fit(z.model, data)
    assert est.extras["derivative"] == "spline" and est.converged
    rel = est.values[2:4] / truth[2:4] - 1.0
    assert np.all(np.abs(rel) < 0.25), rel
    with pytest.warns(BiasWarning, match=r"derivative='forward': the difference quotients are mostly measurement "
                                         r"noise.*sigma = [0-9.]+.*sqrt\(2\) sigma / dt = [0-9.]+ against a quotient "
                                         r"spread \(sd\) of [0-9.]+: ratio [0-9.]+ > 0.707.*derivative='spline'"):
        fwd = NewtonRaphson(derivative="forward").fit(z.model, data)
    assert any("mostly measurement noise" in w for w in fwd.warnings)
    assert fwd.values[2] > 10 * truth[2]  # the bias the warning is about (issue 16: 36x)


def test_forward_differences_on_smooth_data_do_not_warn(lorenz):
    """Noise-free data: the quotients carry no noise, so no difference-bias warning (only truncation
    bias; the trajectory check may still flag the chaotic Lorenz trajectory)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = NewtonRaphson(derivative="forward").fit(lorenz.model, _sim(lorenz), start=[1, 1, 1])
    assert not any("mostly measurement noise" in str(w.message) for w in caught)
    assert not any("mostly measurement noise" in w for w in est.warnings)


def test_forward_stream_warns_from_its_first_chunk(pinene_400):
    z, data = pinene_400
    with pytest.warns(BiasWarning, match=r"in the stream's first chunk, state '.*ratio [0-9.]+ > 0.707"):
        est = NewtonRaphson(derivative="forward").fit_stream(z.model, (data.t, data.y), chunk_size=200)
    assert any("mostly measurement noise" in w for w in est.warnings)


def test_default_stream_uses_the_local_polynomial(lorenz, lorenz_noisy):
    est = NewtonRaphson().fit_stream(lorenz.model, (lorenz_noisy.t, lorenz_noisy.y), start=[1, 1, 1])
    ref = NewtonRaphson(derivative="local_polynomial").fit(lorenz.model, lorenz_noisy, start=[1, 1, 1])
    assert est.extras["derivative"] == "local_polynomial"
    np.testing.assert_allclose(est.values, ref.values, rtol=1e-10)


def test_unknown_derivative_lists_auto():
    with pytest.raises(InputError, match=r"derivative: expected one of \['auto', 'forward'.*got 'central'"):
        NewtonRaphson(derivative="central")


# --- coverage of the Wald intervals (issue 16: "no silent nonsense") --------------------------------
PANEL = Path(__file__).parent / "reference" / "coverage.md"


def test_panel_figures_quoted_by_the_warning_match_the_reference_file():
    """The figures ``newton_coverage_note`` and ``adjoint_dde_coverage_note`` quote are the Wald and profile rows
    of tests/reference/coverage.md
    (``| setting | estimator | method | R | failed | name cov (se); ... | widths | joint (se) | ...``)."""
    rows = {}
    for line in PANEL.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[2] in ("wald", "profile"):
            cov = [float(v) for v in re.findall(r"\S+ ([\d.]+) \(", cells[5])]
            rows[(cells[1], cells[0], cells[2])] = (min(cov), max(cov), float(cells[7].split()[0]), int(cells[3]),
                                                    int(cells[4].split(";")[0]))
    for method, recorded in (("wald", PANEL_RECORDED), ("profile", PROFILE_RECORDED)):
        for name, by_setting in recorded.items():
            for setting, figures in by_setting.items():
                assert rows[(name, setting, method)] == pytest.approx(figures, abs=5e-4), (name, setting, method)


def test_the_intervals_the_warnings_point_to_covered_where_they_say():
    """The warnings send users to Embedding's percentile-bootstrap intervals ("covered in every setting of the panel")
    and its profile intervals, naming the settings where those did not cover: both against the verdict column of
    tests/reference/coverage.md."""
    from odeinfer.estimators._coverage import BOOTSTRAP_RECORDED, embedding_profile_note

    verdicts = {}
    for line in PANEL.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[1] == "Embedding":
            verdicts[(cells[2], cells[0])] = cells[8]
    percentile = [s for (m, s) in verdicts if m == "bootstrap-percentile"]
    assert len(percentile) == 10 and all(verdicts[("bootstrap-percentile", s)] == "met" for s in percentile)
    assert set(percentile) == set(BOOTSTRAP_RECORDED[("Embedding", "percentile")])
    missed = [s for (m, s), v in verdicts.items() if m == "profile" and v != "met"]
    note = embedding_profile_note()
    assert note.startswith(f"its profile intervals covered in {10 - len(missed)} of 10 settings"), note
    assert all(f"{s} (" in note for s in missed), (missed, note)
    assert note.count(", R = ") == len(missed)


@pytest.mark.parametrize("cls", [NewtonRaphson, StochasticGradient])
def test_default_fit_warns_that_its_intervals_undercover(cls, pinene_400):
    """Every estimate with a covariance says its Wald intervals under-cover, with the panel's figures
    for its configuration and the method that covers. StochasticGradient's default budget now converges
    on alpha-pinene (100 Cauchy steps left every panel replicate unconverged)."""
    z, data = pinene_400
    lo, hi, _, reps = _panel_range(cls.__name__)
    with pytest.warns(oi.CoverageWarning, match=rf"{cls.__name__}: the 95% Wald intervals under-cover.*"
                                                rf"this configuration, derivative='spline' \(the default\) covered "
                                                rf"{lo:.2f}-{hi:.2f} per parameter.*oi\.Embedding\(\)\.fit"):
        est = cls().fit(z.model, data, start=dict(z.params))
    assert est.converged and est.cov is not None, est.message
    assert any("under-cover" in w and "profile" in w for w in est.warnings)
    with pytest.warns(oi.CoverageWarning, match=r"derivative='forward' was not run"):
        NewtonRaphson(derivative="forward").fit(z.model, data, start=dict(z.params))


def test_reduced_coverage_confirms_the_newton_warning():
    """10 fresh replicates of the panel's alpha-pinene (n = 200, sigma = 3) setting (seed 1619, started at
    the truth as in the panel; failed fits are misses). Rule fixed before the run: some parameter covers
    less than 0.95 - 3 binomial s.e. at R = 10 (0.743), so the warning is warranted. About 20 s."""
    z = oi.zoo.alpha_pinene()
    R, truth = 10, z.params_array()
    t = np.linspace(0.0, 100.0, 201)[1:]
    y = np.asarray(oi.solve(oi.Problem(z.model, t, x0=z.x0, t0=0.0), z.params,
                            solver=oi.Dopri5(rtol=1e-11, atol=1e-12)).y)
    rng = np.random.default_rng(1619)
    inside = np.zeros((R, truth.size), bool)
    for r in range(R):
        data = oi.Data(t, y + rng.normal(0.0, 3.0, y.shape), z.model.states, t0=0.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                e = NewtonRaphson().fit(z.model, data, start=dict(z.params), fixed=None)
            except oi.errors.OdeinferError:
                continue
        if e.converged and e.cov is not None:
            inside[r] = np.abs(e.values - truth) <= 1.959963984540054 * np.sqrt(np.diag(e.cov))
    cov = inside.mean(0)
    assert cov.min() < 0.95 - 3 * np.sqrt(0.95 * 0.05 / R), cov
