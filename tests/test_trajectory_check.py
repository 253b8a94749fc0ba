"""The trajectory check of the matching estimators (issue 16: "no silent nonsense").

OrthogonalConditions, GradientMatching and the Newton family integrate the model once at their
estimate (from the known x0 or the smoothed first observation) and say in ``Estimate.warnings``
when the RMS misfit is far above the noise level measured from the data.
"""

import warnings

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import BiasWarning
from odeinfer.estimators._trajectory_check import FLOOR, trajectory_check
from odeinfer.estimators.base import prepare


@pytest.fixture(scope="module")
def pinene_400():
    """Issue 16's case: simulated alpha-pinene, n = 400 on (0, 100], sigma = 3, seed 7."""
    z = oi.zoo.alpha_pinene()
    t = np.linspace(0.0, 100.0, 401)[1:]
    return z, oi.simulate(z.model, z.params, z.x0, t, t0=0.0, noise=3.0, rng=7).data


def test_the_truth_misfits_by_about_the_noise(pinene_400):
    """At the true parameters the standardised misfit is noise: RMS about 1 (chi-square: the RMS of
    2000 unit normals is 1 +- 0.016; the smoothed start and the estimated noise level add a little)."""
    z, data = pinene_400
    prob = prepare(z.model, data)
    info, msg = trajectory_check(prob, z.params_array(), "Test")
    assert msg is None and info["checked"] and info["n"] == 2000
    assert 0.9 < info["rms_ratio"] < 1.3
    assert info["threshold"] == FLOOR and info["start"] == "the smoothed first observation"
    # a 36x rate constant (issue 16) is far from any trajectory through these data
    bad = z.params_array() * np.array([1, 1, 36, 5, 1])
    info, msg = trajectory_check(prob, bad, "Test")
    assert info["rms_ratio"] > FLOOR and "misses the data" in msg


def test_forward_newton_on_pinene_is_flagged_and_good_fits_are_not(pinene_400):
    z, data = pinene_400
    with pytest.warns(BiasWarning, match=r"NewtonRaphson: the trajectory integrated at the estimate from the "
                                         r"smoothed first observation misses the data: RMS misfit [0-9.]+ noise "
                                         r"standard deviations .*threshold 3.*oi.Embedding"):
        fwd = oi.NewtonRaphson(derivative="forward").fit(z.model, data)
    assert any("misses the data" in w for w in fwd.warnings)
    assert fwd.extras["trajectory_check"]["rms_ratio"] > FLOOR
    with warnings.catch_warnings():
        warnings.simplefilter("error", BiasWarning)
        good = [oi.NewtonRaphson().fit(z.model, data), oi.OrthogonalConditions().fit(z.model, data),
                oi.GradientMatching().fit(z.model, data)]
    for e in good:
        tc = e.extras["trajectory_check"]
        assert tc["checked"] and tc["rms_ratio"] <= tc["threshold"], e.estimator
        assert not any("misses the data" in w for w in e.warnings)


def test_known_x0_is_the_start(pinene_400):
    z, data = pinene_400
    est = oi.OrthogonalConditions().fit(z.model, data, x0=z.x0)
    assert est.extras["trajectory_check"]["start"] == "the known x0"


def test_the_smoothed_start_is_computed_once_per_data(pinene_400, monkeypatch):
    """The GCV smoothing spline of the start is a function of the data alone: a second check of the
    same data (a refit, a profile, a multistart) reuses it, and
    gives the same bits as a fresh computation; other data compute their own."""
    from odeinfer.estimators import _trajectory_check as tc
    from odeinfer.smooth import gcv

    z, data = pinene_400
    prob = prepare(z.model, data)
    tc._smoothed_at.cache_clear()
    fresh, _ = trajectory_check(prob, z.params_array(), "Test")
    calls = []
    real = gcv._solve  # the GCV search of each smoothed value
    monkeypatch.setattr(gcv, "_solve", lambda *a, **k: calls.append(1) or real(*a, **k))
    again, _ = trajectory_check(prob, z.params_array() * 1.01, "Test")
    assert calls == []  # every state's start came from the first check
    assert trajectory_check(prob, z.params_array(), "Test")[0] == fresh
    shifted = oi.Data(data.t, data.y + 0.5, data.states, t0=data.t0)
    trajectory_check(prepare(z.model, shifted), z.params_array(), "Test")
    assert len(calls) == z.model.n_states  # new data: each state's spline is computed


def test_replicate_measurements_are_checked():
    """Data with replicate measurements (two independent noisy series at the same times,
    ``replicates=True``): the matching estimators' check starts from the smoothing spline of the
    replicate means and measures the noise as the pooled within-time variance (it used to raise: a
    smoothing spline needs distinct times). At the truth the misfit is noise (RMS about 1)."""
    from odeinfer.estimators._noise_cov import noise_variance

    z = oi.zoo.alpha_pinene()
    t = np.linspace(0.0, 100.0, 51)[1:]
    runs = [oi.simulate(z.model, z.params, z.x0, t, t0=0.0, noise=3.0, rng=seed).data for seed in (1, 2)]
    order = np.argsort(np.concatenate([t, t]), kind="stable")
    y = np.concatenate([runs[0].y, runs[1].y])[order]
    data = oi.Data(np.concatenate([t, t])[order], y, states=runs[0].states, t0=0.0, replicates=True)
    # pairs: the pooled within-time variance is sum((y1 - y2)^2 / 2) / K (independent of the code's formula)
    pairs = (runs[0].y[:, 0] - runs[1].y[:, 0]) ** 2 / 2
    assert noise_variance(data.t, data.y[:, 0]) == pytest.approx(pairs.mean(), rel=1e-12)
    info, msg = trajectory_check(prepare(z.model, data), z.params_array(), "Test")
    assert msg is None and info["n"] == 500 and 0.8 < info["rms_ratio"] < 1.3
    est = oi.OrthogonalConditions().fit(z.model, data)
    assert est.extras["trajectory_check"]["checked"]
