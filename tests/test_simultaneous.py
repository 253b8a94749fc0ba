"""Bock's simultaneous method (Osborne 2008, ANZIAM J. 50, C107, section 2.2): ``oi.Simultaneous``.

Independent reference: single-shooting nonlinear least squares, scipy ``least_squares``
(3-point finite-difference Jacobian) over ``solve_ivp(DOP853, rtol=1e-11, atol=1e-12)``
with the initial states estimated -- the exact-ODE maximum-likelihood optimum. Osborne
(section 3-4): the trapezoid-collocation optimum differs from it by O(dt^2); compressed
Hermite-Simpson by O(dt^4). Covariance oracle: ``sigma^2 (J^T J)^{-1}`` with ``J`` the
central finite-difference Jacobian of the reference residuals at the reference optimum.
"""

import json

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import least_squares

import odeinfer as oi
from odeinfer.data import Data, Experiments
from odeinfer.errors import DataError, InputError
from odeinfer.estimators import IdentifiabilityWarning
from odeinfer.estimators.simultaneous import Simultaneous


# --- the independent reference ----------------------------------------------------------------
def _rhs(model):
    f = model.lambdify("f")
    return lambda t, y, p: f(t, y, p)


def _shoot(model, p, x0, t, t0):
    sol = solve_ivp(_rhs(model), (t0, t[-1]), x0, t_eval=t, args=(p,), method="DOP853", rtol=1e-11, atol=1e-12)
    assert sol.success, sol.message
    return sol.y.T


def _reference(model, datasets, w0, *, x0_fixed=None, log=False):
    """NLS over (params, free x0 per experiment); returns the optimum, (J^T J)^-1 and the residuals.

    ``x0_fixed``: {state index: value} held fixed in every experiment.
    """
    m, n = model.n_params, model.n_states
    x0_fixed = x0_fixed or {}
    free0 = [k for k in range(n) if k not in x0_fixed]
    nf = len(free0)

    def resid(w):
        p = w[:m]
        out = []
        for e, d in enumerate(datasets):
            x0 = np.empty(n)
            x0[free0] = w[m + e * nf:m + (e + 1) * nf]
            for k, v in x0_fixed.items():
                x0[k] = v
            X = _shoot(model, p, x0, d.t, d.t0)
            cols = [model.states.index(s) for s in d.states]
            x = X[:, cols]
            r = (np.log(d.y) - np.log(x)) if log else (d.y - x)
            out.append(r[d.mask])
        return np.concatenate(out)

    res = least_squares(resid, w0, jac="3-point", method="lm", xtol=1e-14, ftol=1e-14, gtol=1e-14, x_scale="jac")
    w = res.x
    J = np.empty((res.fun.size, w.size))
    for j in range(w.size):
        h = 1e-5 * max(abs(w[j]), 1e-3)
        wp, wm = w.copy(), w.copy()
        wp[j] += h
        wm[j] -= h
        J[:, j] = (resid(wp) - resid(wm)) / (2 * h)
    return w, np.linalg.inv(J.T @ J), res.fun


# --- fixtures ---------------------------------------------------------------------------------
LV_SIGMA = 1.0
FHN_SIGMA = 0.3


@pytest.fixture(scope="module")
def lv():
    z = oi.zoo.get("lotka_volterra")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=LV_SIGMA, rng=11)
    w0 = np.r_[z.params_array() * 1.05, z.x0_array() * 0.97]
    w, cov1, r = _reference(z.model, [data], w0)
    return z, data, w, cov1


@pytest.fixture(scope="module")
def fhn():
    z = oi.zoo.get("fitzhugh_nagumo")
    t = z.t[:201:4]  # dt = 0.2 on [0, 10], 51 points
    data, _ = oi.simulate(z.model, z.params, z.x0, t, noise=FHN_SIGMA, rng=5)
    w0 = np.r_[z.params_array() * 1.05, z.x0_array() * 0.95]
    w, cov1, r = _reference(z.model, [data], w0)
    return z, data, w, cov1


def _fit(z, data, **kw):
    start = kw.pop("start", z.params_array() * 1.1)
    return Simultaneous(**kw).fit(z.model, data, start=start)


def _rel_err(est, w):
    return np.max(np.abs(est.values - w) / np.abs(w))


# --- core: equivalence with single shooting (Osborne section 3) ------------------------------
def test_lv_trapezoid_matches_single_shooting_within_dt2(lv):
    """Trapezoid optimum -> single-shooting optimum at O(dt^2): error ratio ~4 per halving of dt,
    and the Richardson extrapolation (4 w_{h/2} - w_h) / 3 lands on the reference."""
    z, data, w, cov1 = lv
    errs, vals = [], []
    for dt in (0.5, 0.25, 0.125):
        est = _fit(z, data, dt=dt, sigma=LV_SIGMA)
        assert est.status == "converged", est.message
        assert est.names == ("alpha", "beta", "gamma", "delta", "x0[prey]", "x0[predator]")
        errs.append(_rel_err(est, w))
        vals.append(est.values)
    r1, r2 = errs[0] / errs[1], errs[1] / errs[2]
    assert 3.3 < r1 < 4.7 and 3.5 < r2 < 4.5, (errs, r1, r2)
    se = LV_SIGMA * np.sqrt(np.diag(cov1))
    assert np.max(np.abs(vals[2] - w) / se) < 0.1  # dt = 1/8: within a tenth of a standard error
    rich = (4 * vals[2] - vals[1]) / 3
    assert np.max(np.abs(rich - w) / np.abs(w)) < 0.05 * errs[2]


def test_fhn_trapezoid_matches_single_shooting_within_dt2(fhn):
    z, data, w, _ = fhn
    errs = []
    for dt in (0.1, 0.05, 0.025):
        est = _fit(z, data, dt=dt, sigma=FHN_SIGMA)
        assert est.status == "converged", est.message
        errs.append(_rel_err(est, w))
    r1, r2 = errs[0] / errs[1], errs[1] / errs[2]
    assert 3.3 < r1 < 4.7 and 3.5 < r2 < 4.5, (errs, r1, r2)
    assert errs[2] < 5e-3


@pytest.mark.parametrize("which, dts", [("lv", (0.25, 0.125)), ("fhn", (0.05, 0.025))])
def test_simultaneous_converges_to_the_embedding_optimum(which, dts, request):
    """Osborne section 3 directly between the two estimators: Embedding (single shooting, accurate
    IVP solves) and Bock's trapezoid optimum differ by O(dt^2) -- ratio ~4 per halving of dt."""
    z, data, w, _ = request.getfixturevalue(which)
    emb = oi.Embedding().fit(z.model, data, start=z.params_array() * 1.1)
    assert emb.status == "converged"
    np.testing.assert_allclose(emb.values, w, rtol=1e-5)  # Embedding sits on the reference optimum
    sigma = LV_SIGMA if which == "lv" else FHN_SIGMA
    gaps = [_rel_err(_fit(z, data, dt=dt, sigma=sigma), emb.values) for dt in dts]
    assert 3.3 < gaps[0] / gaps[1] < 4.7, gaps


def test_hermite_simpson_is_fourth_order(lv, fhn):
    """Compressed Hermite-Simpson: error ratio ~16 per halving (stopping before the reference's floor)."""
    for (z, data, w, _), dts, sig in ((lv, (0.5, 0.25), LV_SIGMA), (fhn, (0.1, 0.05), FHN_SIGMA)):
        errs = []
        for dt in dts:
            est = _fit(z, data, dt=dt, scheme="hermite-simpson", sigma=sig)
            assert est.status == "converged", est.message
            errs.append(_rel_err(est, w))
        assert 11 < errs[0] / errs[1] < 22, errs
        trap = _rel_err(_fit(z, data, dt=dts[1], sigma=sig), w)
        assert errs[1] < trap / 20


def test_covariance_matches_reference_gauss_newton(lv, fhn):
    """Reduced Gauss-Newton covariance vs sigma^2 (J^T J)^-1 of single shooting (FD Jacobian oracle)."""
    for (z, data, w, cov1), sig in ((lv, LV_SIGMA), (fhn, FHN_SIGMA)):
        est = _fit(z, data, dt=0.05 if z.name == "lotka_volterra" else 0.0125, scheme="hermite-simpson", sigma=sig)
        ref = sig ** 2 * cov1
        se_ref = np.sqrt(np.diag(ref))
        np.testing.assert_allclose(est.bse.to_numpy(), se_ref, rtol=2e-3)
        corr = est.cov / np.outer(est.bse, est.bse)
        np.testing.assert_allclose(corr, ref / np.outer(se_ref, se_ref), atol=2e-3)


def test_history_shows_fast_linear_bock_convergence(lv):
    """Paper section 5: the Bock iteration converges like Gauss-Newton (fast linear rate with small
    residual noise); the merit decreases monotonically and full steps are taken near the optimum."""
    z, data, w, _ = lv
    est = _fit(z, data, dt=0.25, sigma=LV_SIGMA)
    h = est.history
    for key in ("cost", "constraint", "merit", "step", "step_norm", "mu", "multiplier"):
        assert h[key].shape == (est.n_iter + 1,)
    same_mu = np.diff(h["mu"]) == 0
    assert np.all(np.diff(h["merit"])[same_mu] <= 1e-12 * h["merit"][0])
    sn = h["step_norm"]
    assert np.all(sn[-3:-1] / sn[-4:-2] < 0.1)  # at least a 10x contraction per iteration at the end
    assert h["constraint"][-1] < 1e-9


def test_log_noise_against_reference():
    z = oi.zoo.get("lotka_volterra")
    model = z.model.with_observation(noise="log")
    data, _ = oi.simulate(model, z.params, z.x0, z.t, noise=0.1, rng=2)
    w0 = np.r_[z.params_array() * 1.05, z.x0_array() * 0.97]
    w, cov1, _ = _reference(model, [data], w0, log=True)
    est = Simultaneous(dt=0.1, scheme="hermite-simpson", sigma=0.1).fit(model, data, start=z.params_array() * 1.1)
    assert est.status == "converged"
    assert _rel_err(est, w) < 1e-4
    np.testing.assert_allclose(est.bse.to_numpy(), 0.1 * np.sqrt(np.diag(cov1)), rtol=5e-3)
    assert set(est.sigma) == {"prey", "predator"}


def test_two_experiments_share_parameters():
    z = oi.zoo.get("lotka_volterra")
    d1, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=LV_SIGMA, rng=3, name="a")
    d2, _ = oi.simulate(z.model, z.params, {"prey": 20.0, "predator": 10.0}, z.t[:15], noise=LV_SIGMA, rng=4,
                        name="b")
    w0 = np.r_[z.params_array(), z.x0_array(), 20.0, 10.0]
    w, cov1, _ = _reference(z.model, [d1, d2], w0)
    est = Simultaneous(dt=0.125, scheme="hermite-simpson", sigma=LV_SIGMA).fit(
        z.model, Experiments([d1, d2]), start=z.params_array() * 1.1)
    assert est.names[4:] == ("x0[prey]@a", "x0[predator]@a", "x0[prey]@b", "x0[predator]@b")
    assert _rel_err(est, w) < 1e-4
    np.testing.assert_allclose(est.bse.to_numpy(), LV_SIGMA * np.sqrt(np.diag(cov1)), rtol=5e-3)
    assert set(est.extras["grid"]) == {"a", "b"}
    assert est.extras["grid"]["b"][-1] == pytest.approx(14.0)


def test_estimated_sigma_per_state(lv):
    """sigma=None: per-state sigma from the residuals (true 1.0 for both states)."""
    z, data, w, _ = lv
    est = _fit(z, data, dt=0.125)
    assert est.status == "converged"
    for s in ("prey", "predator"):
        assert 0.6 < est.sigma[s] < 1.5
    assert est.history["pass"][-1] >= 2
    # with the estimated sigmas the estimate stays within a fraction of a standard error
    known = _fit(z, data, dt=0.125, sigma=LV_SIGMA)
    assert np.all(np.abs(est.values - known.values) < 0.5 * known.bse.to_numpy())


def test_partial_observation_sir_and_unidentifiable_x0():
    """SIR observing I only: start S, R from x0 (simulated at the start parameters). R(0) never
    enters the dynamics, so estimating it gives an IdentifiabilityWarning and NaN bse; holding it
    fixed gives finite standard errors."""
    z = oi.zoo.get("sir")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, t0=0.0, noise=5.0, rng=1)
    x0 = {"S": 760.0, "I": 2.0, "R": 0.0}
    est = Simultaneous(dt=0.05, scheme="hermite-simpson", sigma=5.0, estimate_x0=("S", "I")).fit(
        z.model, data, start=[1.5, 0.4], x0=x0)
    assert est.status == "converged", est.message
    assert est.names == ("beta", "gamma", "x0[S]", "x0[I]")
    assert est.fixed["x0[R]"] == 0.0
    assert np.all(np.isfinite(est.bse))
    w, cov1, _ = _reference(z.model, [data], np.r_[1.5, 0.4, 760.0, 2.0], x0_fixed={2: 0.0})
    assert _rel_err(est, w) < 1e-4
    np.testing.assert_allclose(est.bse.to_numpy(), 5.0 * np.sqrt(np.diag(cov1)), rtol=5e-3)
    with pytest.warns(IdentifiabilityWarning, match=r"x0\[R\]"):
        bad = Simultaneous(dt=0.05, sigma=5.0).fit(z.model, data, start=[1.5, 0.4], x0=x0)
    assert np.isnan(bad.bse["x0[R]"])
    assert any("not identifiable" in m for m in bad.warnings)


def test_fixed_parameter_and_known_x0(lv):
    z, data, w, _ = lv
    est = Simultaneous(dt=0.25, sigma=LV_SIGMA, estimate_x0=False).fit(
        z.model, data, start=[0.5, 0.03, 0.8], fixed={"delta": 0.024}, x0=z.x0)
    assert est.status == "converged"
    assert est.names == ("alpha", "beta", "gamma")
    assert est.fixed["delta"] == 0.024 and est.fixed["x0[prey]"] == z.x0["prey"]
    X = est.extras["states"][data.name]
    np.testing.assert_allclose(X[0], z.x0_array(), rtol=0, atol=1e-12)


def test_estimate_json_round_trip_and_provenance(lv):
    z, data, w, _ = lv
    est = _fit(z, data, sigma=LV_SIGMA)
    assert est.extras["n_nodes"][data.name] >= 201  # default grid: at least 201 nodes
    assert "Osborne" in est.provenance["method"]
    d = json.loads(est.to_json())
    assert d["estimator"] == "Simultaneous" and len(d["history"]["cost"]) == est.n_iter + 1
    assert est.residuals.shape == (data.n_times, 2)


def test_start_states_trajectory_and_start_estimate(lv):
    z, data, w, _ = lv
    sol = oi.solve(oi.Problem(z.model, np.linspace(-1, 21, 200), x0=z.x0_array(), t0=-1.0), z.params_array() * 1.1)
    est = Simultaneous(dt=0.25, sigma=LV_SIGMA).fit(z.model, data, start=z.params_array() * 1.1,
                                                    start_states=(sol.t, sol.y))
    ref = _fit(z, data, dt=0.25, sigma=LV_SIGMA)
    np.testing.assert_allclose(est.values, ref.values, rtol=1e-7)
    again = Simultaneous(dt=0.25, sigma=LV_SIGMA).fit(z.model, data, start=ref)  # Estimate as start (+ x0)
    np.testing.assert_allclose(again.values, ref.values, rtol=1e-7)


# --- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, match", [
    ({"scheme": "euler"}, "scheme: expected one of"),
    ({"n_grid": 100, "dt": 0.1}, "give at most one of n_grid, dt, grid"),
    ({"n_grid": 1}, "n_grid: expected an int >= 2"),
    ({"dt": -0.1}, "dt: expected a positive number"),
    ({"grid": [0.0, 2.0, 1.0]}, "grid: expected a strictly increasing"),
    ({"estimate_x0": "prey"}, "estimate_x0: expected True, False or a tuple"),
    ({"sigma": -1.0}, "sigma: expected None"),
    ({"sigma": {"prey": 0.0}}, "sigma: expected None"),
    ({"max_iter": 0}, "max_iter: expected an int >= 1"),
    ({"xtol": 2.0}, "xtol: expected a number in"),
    ({"smoother": "gcv"}, "smoother: expected an oi.smooth.SplineSmoother"),
])
def test_bad_config(kw, match):
    with pytest.raises(InputError, match=match):
        Simultaneous(**kw)


def test_grid_coarser_than_data(lv):
    z, data, _, _ = lv
    with pytest.raises(InputError, match="n_grid: .* coarser than the data"):
        Simultaneous(n_grid=10).fit(z.model, data)
    with pytest.raises(InputError, match="grid: .* missing from the grid .* coarser than the data"):
        Simultaneous(grid=tuple(np.arange(0.0, 20.5, 2.0))).fit(z.model, data)
    # a grid that contains every observation time is accepted
    est = Simultaneous(grid=tuple(np.arange(0.0, 20.01, 0.25)), sigma=LV_SIGMA).fit(z.model, data,
                                                                                   start=z.params_array())
    assert est.extras["n_nodes"][data.name] == 81


def test_start_outside_the_data(lv):
    z, data, _, _ = lv
    t = np.linspace(5.0, 20.0, 50)
    with pytest.raises(InputError, match="start_states: the trajectory covers .* outside the data"):
        Simultaneous().fit(z.model, data, start_states=(t, np.ones((50, 2))))
    with pytest.raises(InputError, match=r"start_states: expected t \(k,\)"):
        Simultaneous().fit(z.model, data, start_states=(t, np.ones((50, 3))))


def test_no_observations():
    """An experiment without observations is refused by Data itself; too few observations for the
    unknowns (here 5 values for 4 parameters + 2 initial states) are refused by the fit."""
    z = oi.zoo.get("lotka_volterra")
    with pytest.raises(DataError, match="no observed"):
        Data(np.arange(5.0), np.full((5, 2), np.nan), ["prey", "predator"], name="empty")
    few = Data(np.arange(5.0), [30.0, 25.0, 20.0, 18.0, np.nan], ["prey"], name="few")
    with pytest.raises(DataError, match="4 observed values for 6 unknowns"):
        Simultaneous().fit(z.model, few, x0={"predator": 5.0})


def test_unobserved_state_needs_a_start():
    z = oi.zoo.get("sir")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, t0=0.0, noise=5.0, rng=1)
    with pytest.raises(InputError, match=r"x0: state\(s\) \['S', 'R'\] are never observed"):
        Simultaneous().fit(z.model, data, start=[1.5, 0.4])
    with pytest.raises(InputError, match=r"x0: initial states \['R'\] are held fixed"):
        Simultaneous(estimate_x0=("S", "I")).fit(z.model, data, start=[1.5, 0.4], x0={"S": 760.0, "I": 2.0})


def test_log_noise_needs_positive_data():
    z = oi.zoo.get("lotka_volterra")
    model = z.model.with_observation(noise="log")
    d = Data(np.arange(5.0), [[1.0, 2.0], [1.0, -1.0], [2.0, 2.0], [3.0, 1.0], [2.0, 2.0]], ["prey", "predator"])
    with pytest.raises(DataError, match="observations <= 0"):
        Simultaneous().fit(model, d)


def test_max_iter_keeps_best_point(lv):
    z, data, w, _ = lv
    est = _fit(z, data, dt=0.25, sigma=LV_SIGMA, max_iter=2, start=z.params_array() * 1.3)
    assert est.status == "max_iter"
    assert "max_iter=2" in est.message and est.message in est.warnings
    assert np.all(np.isfinite(est.values))
    h = est.history
    assert h["merit"].size == 3


def test_line_search_failure_is_reported(lv, monkeypatch):
    """With no backtracking allowed, a rejected full step must end in status 'failed' with the
    line-search message, the best point kept and no exception (the reporting path)."""
    from odeinfer.estimators import _bock

    z, data, _, _ = lv
    monkeypatch.setattr(_bock, "_MAX_BACKTRACK", 1)
    monkeypatch.setattr(_bock, "_ARMIJO", 0.999999)  # demand the full predicted decrease: far from the optimum it fails
    est = _fit(z, data, dt=0.25, sigma=LV_SIGMA, start=z.params_array() * 1.5)
    assert est.status == "failed"
    assert "line search failed" in est.message
    assert np.all(np.isfinite(est.values))


def test_non_finite_start_is_a_status_not_a_crash(fhn):
    z, data, _, _ = fhn
    est = Simultaneous(dt=0.2).fit(z.model, data, start=[0.2, 0.2, 0.0])  # c = 0: f divides by c
    assert est.status == "failed"
    assert "not finite at the starting point" in est.message


def test_bad_fit_arguments(lv):
    z, data, _, _ = lv
    two = Experiments([data, oi.simulate(z.model, z.params, z.x0, z.t, noise=1.0, rng=9, name="b").data])
    with pytest.raises(InputError, match=r"sigma: expected a value for every observed state .* missing \['predator'\]"):
        Simultaneous(sigma={"prey": 1.0}).fit(z.model, data)
    with pytest.raises(InputError, match="x0: got 1 dicts but the data have 2 experiments"):
        Simultaneous().fit(z.model, two, x0=[z.x0])
    with pytest.raises(InputError, match="start_states: got a list of 1 but the data have 2 experiments"):
        Simultaneous().fit(z.model, two, start_states=[lambda t: np.ones((t.size, 2))])
    with pytest.raises(InputError, match="start_states: expected a callable g"):
        Simultaneous().fit(z.model, data, start_states=5)
    with pytest.raises(InputError, match=r"start_states: expected finite values of shape \(\d+, 2\)"):
        Simultaneous().fit(z.model, data, start_states=lambda t: np.ones((t.size, 3)))
    with pytest.raises(InputError, match=r"estimate_x0: \['hare'\] are not states of the model"):
        Simultaneous(estimate_x0=("hare",)).fit(z.model, data)
    with pytest.raises(InputError, match="estimate_x0: expected True, False or a tuple"):
        Simultaneous(estimate_x0=None)


def test_unobserved_start_simulation_failure_is_explained():
    z = oi.zoo.get("sir")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, t0=0.0, noise=5.0, rng=1)
    with pytest.raises(InputError, match="x0: simulating experiment .* failed .* give start_states"):
        Simultaneous().fit(z.model, data, start=[1.5, 1e9], x0={"S": 760.0, "R": 0.0})  # gamma 1e9: stiff


def test_unreachable_xtol_stops_at_round_off_floor(lv):
    """xtol 1e-18, below the resolution of float64 steps: only the round-off floor can stop it.
    (xtol 1e-15 was used before; it is reachable or not depending on the last bits of the
    simulated data, and became reachable when the solver's multiply-add fusion was dropped.)"""
    z, data, _, _ = lv
    est = _fit(z, data, dt=0.125, sigma=LV_SIGMA, xtol=1e-18, max_iter=60)
    assert est.status == "converged"
    assert "round-off floor" in est.message
    assert est.n_iter < 30
    ref = _fit(z, data, dt=0.125, sigma=LV_SIGMA)
    np.testing.assert_allclose(est.values, ref.values, rtol=1e-8)


def test_lorenz_converges_from_poor_starts():
    """Chaotic Lorenz over 10 time units (where single shooting stalls, see the benchmark): starting
    the states at the spline proxy, the Bock iteration reaches one optimum from far parameter
    starts, and that optimum is within 4 standard errors of the truth."""
    z = oi.zoo.get("lorenz")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=z.sigma, rng=2024)
    fits = [Simultaneous(n_grid=2000, sigma=float(z.sigma)).fit(z.model, data, start=s)
            for s in ([1.0, 1.0, 1.0], [20.0, 40.0, 5.0])]
    for est in fits:
        assert est.status == "converged", est.message
    np.testing.assert_allclose(fits[0].values, fits[1].values, rtol=1e-6)
    est = fits[0]
    assert np.all(np.abs(est.values[:3] - z.params_array()) < 4 * est.bse.to_numpy()[:3])
