"""Trajectory fits without ``start=``: the start comes from the matching estimators
(OrthogonalConditions, then GradientMatching), else from a multistart inside the bounds
(Embedding, AdjointDDE) or the documented 1.0 default (Simultaneous), and
``provenance["start"]`` says which.

The reference of each case is an independent fit of the same data from a hand-given start
(the model's true values, or the start the other tests use): both must reach the same optimum,
to a tenth of a standard error (the delay model, whose periodic history has several optima: at
least as low a cost, and the true values within a few standard errors).
"""

import math

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import InputError
from odeinfer.estimators._auto_start import FALLBACK_STARTS

LV = oi.zoo.get("lotka_volterra")
LV_START = {"alpha": 0.5, "beta": 0.03, "gamma": 0.7, "delta": 0.02}
LV_BOUNDS = {"alpha": (0.1, 2.0), "beta": (0.005, 0.1), "gamma": (0.1, 2.0), "delta": (0.005, 0.1)}


def _case(name):
    if name == "lotka_volterra":
        data, _ = oi.simulate(LV.model, LV.params, LV.x0, LV.t, noise=1.0, rng=1)
        return LV.model, data, LV_START
    if name == "alpha_pinene":
        z = oi.zoo.alpha_pinene()
        data, _ = oi.simulate(z.model, z.params, z.x0, z.t[::4], noise=0.5, rng=2)
        return z.model, data, z.params
    z = oi.zoo.get("fitzhugh_nagumo")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t[1::4], noise=0.05, rng=1)
    return z.model, data, {"a": 0.3, "b": 0.3, "c": 2.5}


def _same_optimum(auto, hand):
    assert auto.converged and hand.converged
    assert auto.names == hand.names
    se = hand.bse.to_numpy()
    assert np.all(np.isfinite(se)) and np.all(se > 0)
    np.testing.assert_array_less(np.abs(auto.values - hand.values), 0.1 * se)
    assert math.isclose(auto.cost, hand.cost, rel_tol=1e-6)


@pytest.mark.parametrize("name, source", [("lotka_volterra", "OrthogonalConditions"),
                                          ("alpha_pinene", "OrthogonalConditions"),
                                          ("fitzhugh_nagumo", "OrthogonalConditions")])
def test_no_start_reaches_the_hand_started_optimum(name, source):
    model, data, start = _case(name)
    hand = oi.Embedding().fit(model, data, start=start)
    auto = oi.Embedding().fit(model, data)
    _same_optimum(auto, hand)
    assert hand.provenance["start"]["source"] == "user"
    info = auto.provenance["start"]
    assert info["source"] == source
    assert info["tried"][-1] == {"estimator": source, "outcome": "used"}
    assert set(info["values"]) == set(model.params)
    back = oi.Estimate.from_json(auto.to_json(), model=model)
    assert back.provenance["start"]["source"] == source
    assert back.provenance["start"]["values"] == pytest.approx(info["values"])


def test_nonlinear_parameter_seeded_and_recorded():
    """FitzHugh-Nagumo's c enters nonlinearly: OC needs a seed for it (1.0 without bounds, the
    geometric midpoint of positive bounds)."""
    model, data, _ = _case("fitzhugh_nagumo")
    assert oi.Embedding().fit(model, data).provenance["start"]["seeds"] == {"c": 1.0}
    est = oi.Embedding(bounds={"c": (0.5, 8.0)}).fit(model, data)
    assert est.provenance["start"]["seeds"] == {"c": pytest.approx(2.0)}


def test_user_start_wins_and_x0_start_is_kept():
    model, data, _ = _case("lotka_volterra")
    est = oi.Embedding(max_iter=1).fit(model, data, start=LV_START)
    assert est.provenance["start"] == {"source": "user"}
    oc = oi.OrthogonalConditions().fit(model, data)
    est = oi.Embedding(max_iter=1).fit(model, data, start=oc)
    assert est.provenance["start"] == {"source": "user", "estimate": "OrthogonalConditions"}
    # a start of the initial states only: the parameters come from OC, the initial states from the user
    est = oi.Embedding(max_iter=1).fit(model, data, start={"x0[prey]": 30.0})
    assert est.provenance["start"]["source"] == "OrthogonalConditions"
    assert set(est.provenance["start"]["values"]) == set(model.params)
    assert est.provenance["start"]["x0_from_user"] == ["x0[prey]"]


def test_failed_matching_estimate_falls_back_to_gradient_matching(monkeypatch):
    model, data, start = _case("lotka_volterra")
    hand = oi.Embedding().fit(model, data, start=start)
    real = oi.OrthogonalConditions.fit

    def nan_fit(self, *args, **kwargs):
        est = real(self, *args, **kwargs)
        return oi.Estimate(est.estimator, est.model, est.names, np.full(len(est.names), np.nan), None, "failed")

    monkeypatch.setattr(oi.OrthogonalConditions, "fit", nan_fit)
    auto = oi.Embedding().fit(model, data)
    _same_optimum(auto, hand)
    info = auto.provenance["start"]
    assert info["source"] == "GradientMatching"
    assert info["tried"][0]["estimator"] == "OrthogonalConditions"
    assert "failed" in info["tried"][0]["outcome"]


def test_partially_observed_falls_back_to_multistart():
    model, data, _ = _case("lotka_volterra")
    m = model.with_observation(observed=["prey"])
    prey = data.select(["prey"])
    x0 = {"x0[predator]": 5.0}
    fixed = {"beta": LV.params["beta"]}  # prey alone leaves the predator's scale free: fix beta
    hand = oi.Embedding(bounds=LV_BOUNDS).fit(m, prey, start={**LV.params, **x0}, fixed=fixed)
    auto = oi.Embedding(bounds=LV_BOUNDS).fit(m, prey, start=x0, fixed=fixed)
    _same_optimum(auto, hand)
    info = auto.provenance["start"]
    assert info["source"] == "multistart"
    assert info["starts"] == FALLBACK_STARTS > 1
    assert [t["estimator"] for t in info["tried"]] == ["OrthogonalConditions", "GradientMatching"]
    assert all("never observed" in t["outcome"] for t in info["tried"])
    assert len(auto.extras["starts"]["start"]) == info["starts"]


def test_no_start_no_matching_no_bounds_is_a_clear_error():
    model, data, _ = _case("lotka_volterra")
    m = model.with_observation(observed=["prey"])
    with pytest.raises(InputError, match=r"start: no starting value for \['alpha', 'beta', 'gamma', 'delta'\].*"
                                         r"OrthogonalConditions: .*never observed.*finite bounds for "
                                         r"\['alpha', 'beta', 'gamma', 'delta'\].*Pass start="):
        oi.Embedding().fit(m, data.select(["prey"]), start={"x0[predator]": 5.0})


def test_partial_parameter_start_is_still_refused():
    model, data, _ = _case("lotka_volterra")
    with pytest.raises(InputError, match=r"start: no starting value for \['delta'\]"):
        oi.Embedding().fit(model, data, start={"alpha": 0.5, "beta": 0.03, "gamma": 0.7})


def test_user_multistart_recorded():
    model, data, _ = _case("lotka_volterra")
    est = oi.Embedding(starts=2, bounds=LV_BOUNDS, max_iter=2).fit(model, data)
    assert est.provenance["start"] == {"source": "multistart", "starts": 2, "user_start": False}


# --- Simultaneous (Bock): no multistart machinery, so the last resort stays its 1.0 default ------------
def test_simultaneous_without_start_uses_oc_and_reaches_the_same_optimum():
    model, data, start = _case("lotka_volterra")
    fit = oi.Simultaneous(dt=0.25, sigma=1.0)
    hand = fit.fit(model, data, start=start)
    auto = fit.fit(model, data)
    _same_optimum(auto, hand)
    assert hand.provenance["start"] == {"source": "user"}
    assert auto.provenance["start"]["source"] == "OrthogonalConditions"


def test_simultaneous_partially_observed_falls_back_to_its_default_and_says_so():
    z = oi.zoo.get("sir")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, t0=0.0, noise=5.0, rng=1)
    est = oi.Simultaneous(dt=0.05, sigma=5.0, estimate_x0=("S", "I"), max_iter=1).fit(
        z.model, data, x0={"S": 760.0, "I": 2.0, "R": 0.0})
    info = est.provenance["start"]
    assert info["source"] == "default"
    assert info["values"] == {"beta": 1.0, "gamma": 1.0}
    assert all("never observed" in t["outcome"] for t in info["tried"])


# --- AdjointDDE: the matching estimators need a delay start or window, so a delay model falls back -------
def test_adjoint_dde_without_start_falls_back_to_multistart_and_says_so():
    import warnings

    from odeinfer.model import History

    from dde_reference import reference_solution

    e = oi.zoo.get("logistic_delay")
    clean = reference_solution(e)
    y = clean + 0.1 * np.std(clean, axis=0, ddof=1) * np.random.default_rng(3).standard_normal(clean.shape)
    data = oi.Data(e.t, y, list(e.model.states))
    h0 = History.periodic(-0.25, 6.0, 2.6)
    dde = oi.AdjointDDE(bounds={"theta0": (0.2, 5.0), "theta1": (0.2, 5.0)}, n_grid=6, n_refine=1)  # cheap scan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", oi.IdentifiabilityWarning)
        hand = dde.fit(e.model, data, history=h0, start={"theta0": 1.0, "theta1": 1.0, "tau": 0.5})
        auto = dde.fit(e.model, data, history=h0)
    assert hand.provenance["start"] == {"source": "user"}
    info = auto.provenance["start"]
    assert info["source"] == "multistart" and info["starts"] == FALLBACK_STARTS
    assert [t["estimator"] for t in info["tried"]] == ["OrthogonalConditions", "GradientMatching"]
    assert "window" in info["tried"][0]["outcome"] and "lagged states" in info["tried"][1]["outcome"]
    assert len(auto.extras["auto_starts"]["cost"]) == FALLBACK_STARTS
    # the periodic history has several optima (omega): the multistart must do at least as well as the hand
    # start, and recover the model's true values (DDE-Find sec. 6) within a few standard errors
    assert auto.converged and auto.cost <= hand.cost * (1 + 1e-6)
    for name in ("theta0", "theta1", "tau"):
        assert abs(auto.params[name] - e.params[name]) < 4 * auto.bse[name], name


def test_adjoint_dde_without_start_or_bounds_is_a_clear_error():
    from odeinfer.model import History

    e = oi.zoo.get("logistic_delay")
    data = oi.Data(e.t, np.ones((e.t.size, 1)), list(e.model.states))
    with pytest.raises(InputError, match=r"start: no starting value for \['theta0', 'theta1'\].*window.*"
                                         r"finite bounds for \['theta0', 'theta1'\]"):
        oi.AdjointDDE().fit(e.model, data, history=History.periodic(-0.25, 6.0, 2.6))


# ---- logistic growth (issue 16, "no silent nonsense") --------------------------------------------------
# Seeded at K = 1.0 (far below the data, which saturate near K ~ 10), OrthogonalConditions and
# GradientMatching "converged" to K ~ -2.5e4 (their own trajectory check flags it); Embedding started
# there ran to K ~ 1e9 (the exponential-growth asymptote, where dx/dK -> 0), status converged, no
# warning, on 6 of 6 replicates of the SBC data (tests/sbc_cases.py).

def _logistic_reference(data):
    """Independent least-squares optimum: scipy's least_squares on the exact logistic solution
    (x(0) = 1 known), started at the SBC's prior medians r = 0.8, K = 10, tolerances 1e-14."""
    from scipy.optimize import least_squares

    from sbc_cases import X0, logistic_exact

    y = data.y[:, 0]
    ref = least_squares(lambda p: logistic_exact(data.t, p[0], p[1], X0) - y, [0.8, 10.0], xtol=1e-14,
                        ftol=1e-14, gtol=1e-14)
    assert ref.success
    return ref.x, float(ref.fun @ ref.fun)


@pytest.mark.parametrize("seed", range(6))
def test_logistic_without_start_reaches_the_least_squares_optimum(seed):
    """The SBC's logistic data (16 points on [0.75, 12], parameters from the priors): the fit without
    start= must reach scipy's optimum (to 1e-3 of a standard error, the solver's rtol 1e-8 is far
    below that) with no BiasWarning; the start search records the trajectory check it used."""
    import warnings

    from sbc_cases import X0, logistic, simulate_logistic

    (data, _, truth), _ = simulate_logistic(np.random.default_rng(seed))
    (r_ref, k_ref), rss_ref = _logistic_reference(data)
    assert 0.5 * truth["K"] < k_ref < 2 * truth["K"]  # the data identify K: the reference is near the truth
    with warnings.catch_warnings():
        warnings.simplefilter("error", oi.errors.BiasWarning)
        est = oi.Embedding().fit(logistic, data, x0={"x": X0})
    assert est.converged
    se = est.bse.to_numpy()
    assert np.all(np.isfinite(se)) and np.all(se > 0)
    np.testing.assert_array_less(np.abs(est.values - [r_ref, k_ref]), 1e-3 * se)
    assert math.isclose(est.extras["rss"]["x"], rss_ref, rel_tol=1e-6)
    info = est.provenance["start"]
    assert info["source"] in ("OrthogonalConditions", "GradientMatching")
    assert not any("trajectory" in w for w in est.warnings)
