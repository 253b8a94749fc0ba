"""oi.simulate: noise-free truth from the solver, noise with the requested scale, bad input."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import odeinfer as oi
from odeinfer.errors import DataError

LV = oi.Model.from_equations({"prey": "alpha*prey - beta*prey*pred", "pred": "delta*prey*pred - gamma*pred"},
                             params=["alpha", "beta", "gamma", "delta"], name="lv")
P = [0.55, 0.028, 0.80, 0.024]
X0 = [33.96, 5.93]


def lv_ref(t):
    """Reference: scipy DOP853 at rtol 1e-12 on a hand-written right-hand side."""
    a, b, g, d = P
    sol = solve_ivp(lambda _t, y: [a * y[0] - b * y[0] * y[1], d * y[0] * y[1] - g * y[1]], (t[0], t[-1]), X0,
                    t_eval=t, method="DOP853", rtol=1e-12, atol=1e-12)
    return sol.y.T


def test_noise_free_simulation_is_the_solution():
    t = np.linspace(0, 20, 41)
    sim = oi.simulate(LV, P, X0, t)
    np.testing.assert_allclose(sim.truth.y, lv_ref(t), rtol=1e-7)
    np.testing.assert_array_equal(sim.data.y, sim.truth.y)
    assert sim.data.states == ("prey", "pred") and sim.params == dict(zip(LV.params, P))
    data, truth = sim  # unpacks
    assert data is sim.data and truth is sim.truth


def test_additive_noise_has_the_requested_sd_and_is_reproducible():
    t = np.linspace(0, 20, 4001)
    data, truth = oi.simulate(LV, P, X0, t, noise={"prey": 2.0, "pred": 0.5}, rng=42)
    resid = data.y - truth.y
    # 4001 draws: the sample sd is within 5% of the true sd with overwhelming probability (sd of s/sigma ~ 1.1%)
    np.testing.assert_allclose(resid.std(axis=0), [2.0, 0.5], rtol=0.05)
    assert abs(resid.mean(axis=0) / np.array([2.0, 0.5]) * np.sqrt(t.size)).max() < 4.5
    again, _ = oi.simulate(LV, P, X0, t, noise={"prey": 2.0, "pred": 0.5}, rng=42)
    np.testing.assert_array_equal(again.y, data.y)


def test_log_noise_and_partial_observation():
    m = LV.with_observation(observed=["pred"], noise="log")
    t = np.linspace(0, 20, 4001)
    data, truth = oi.simulate(m, P, X0, t, noise=0.25, rng=3)
    assert data.states == ("pred",) and data.y.shape == (t.size, 1) and truth.y.shape == (t.size, 2)
    logres = np.log(data.y[:, 0]) - np.log(truth.y[:, 1])
    assert logres.std() == pytest.approx(0.25, rel=0.05)


def test_t0_before_first_observation():
    t = np.array([1.0, 2.0, 5.0])
    sim = oi.simulate(LV, P, X0, t, t0=0.0)
    full = lv_ref(np.array([0.0, 1.0, 2.0, 5.0]))[1:]
    np.testing.assert_allclose(sim.truth.y, full, rtol=1e-7)
    assert sim.data.t0 == 0.0


@pytest.mark.parametrize("noise, match", [
    (-1.0, r"noise\['prey'\]: the noise standard deviation must be a positive"),
    (0.0, r"must be a positive finite number, got 0.0; pass noise=None"),
    ({"prey": 1.0}, r"missing \['pred'\]"),
    ({"prey": 1.0, "pred": 1.0, "x": 1.0}, r"unknown \['x'\]"),
    ([1.0, 2.0, 3.0], r"shape \(2,\).*got shape \(3,\)"),
    ({"prey": "a", "pred": 1.0}, r"expected a positive number, got 'a'"),
])
def test_bad_noise(noise, match):
    with pytest.raises(DataError, match=match):
        oi.simulate(LV, P, X0, [0.0, 1.0], noise=noise, rng=0)


def test_model_must_be_a_model():
    with pytest.raises(TypeError, match="model: expected an odeinfer Model"):
        oi.simulate(lambda t, y, p: y, P, X0, [0.0, 1.0])
