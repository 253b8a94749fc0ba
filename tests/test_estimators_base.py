"""The shared estimator contract (odeinfer/estimators/base.py): input validation every estimator
goes through, and what every Estimate is built with.

Independent references: the data given to the estimators (its non-positive values, its
magnitude), the bounds the user passed, and the true noise sd of simulated data.
"""

import math
import warnings

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import DataError, InputError
from odeinfer.estimators.base import (
    EstimationError,
    OverflowWarning,
    make_estimate,
    prepare,
)

LV = oi.zoo.get("lotka_volterra")
LV_START = {"alpha": 0.5, "beta": 0.03, "gamma": 0.7, "delta": 0.02}
LOG_LV = LV.model.with_observation(noise="log")


@pytest.fixture(scope="module")
def lv_data():
    data, _ = oi.simulate(LV.model, LV.params, LV.x0, LV.t, noise=1.0, rng=1)
    return data


ALL = {
    "OrthogonalConditions": lambda m, d, **kw: oi.OrthogonalConditions().fit(m, d, **kw),
    "GradientMatching": lambda m, d, **kw: oi.GradientMatching().fit(m, d, **kw),
    "NewtonRaphson": lambda m, d, **kw: oi.NewtonRaphson().fit(m, d, start=LV_START, **kw),
    "GradientDescent": lambda m, d, **kw: oi.GradientDescent().fit(m, d, start=LV_START, **kw),
    "StochasticNewton": lambda m, d, **kw: oi.StochasticNewton().fit(m, d, start=LV_START, **kw),
    "StochasticGradient": lambda m, d, **kw: oi.StochasticGradient().fit(m, d, start=LV_START, **kw),
    "Embedding": lambda m, d, **kw: oi.Embedding().fit(m, d, start=LV_START, **kw),
    "Simultaneous": lambda m, d, **kw: oi.Simultaneous().fit(m, d, start=LV_START, **kw),
}


# --- item 9: non-positive data under log noise, one DataError for every estimator ------------------
def test_non_positive_data_under_log_noise_refused_alike_by_every_estimator(lv_data):
    y = np.array(lv_data.y)
    y[3, 1] = -2.5
    y[7, 1] = 0.0
    neg = oi.Data(lv_data.t, y, lv_data.states, t0=lv_data.t0, name="counts")
    messages = set()
    for fit in ALL.values():
        with pytest.raises(DataError, match=r"data: state 'predator' of experiment 'counts' has 2 observations <= 0, "
                                            r"but the model's noise is 'log' .*the smallest is -2\.5\).*NaN.*"
                                            r"with_observation\(noise='additive'\)") as exc:
            fit(LOG_LV, neg)
        messages.add(str(exc.value))
    assert len(messages) == 1, messages  # the same error, whatever the estimator


def test_non_positive_data_refused_by_adjoint_dde():
    z = oi.zoo.get("delay_exponential_decay")
    y = np.exp(-np.asarray(z.t))[:, None]
    y[2, 0] = -1.0
    neg = oi.Data(z.t, y, ["x"], t0=z.t0)
    with pytest.raises(DataError, match=r"state 'x' .* has 1 observations <= 0, but the model's noise is 'log' "
                                        r".*the smallest is -1\)"):
        oi.AdjointDDE().fit(z.model.with_observation(noise="log"), neg, history=z.history, start=z.params)


def test_newton_family_refuses_log_noise_and_names_the_alternatives(lv_data):
    for name in ("NewtonRaphson", "GradientDescent", "StochasticNewton", "StochasticGradient"):
        with pytest.raises(EstimationError, match=rf"model: 'lotka_volterra' declares noise='log', but {name} "
                                                  r"differences the raw observations.*oi\.OrthogonalConditions.*"
                                                  r"oi\.Embedding.*with_observation\(noise='additive'\)"):
            ALL[name](LOG_LV, lv_data)


# --- item 11: non-finite fixed values, data that overflow ------------------------------------------
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_fixed_refused_by_every_estimator(lv_data, bad):
    for fit in ALL.values():
        with pytest.raises(InputError, match=r"fixed\['beta'\]: expected a finite number, got (nan|inf|-inf); "
                                             r"give a finite value, or leave 'beta' free"):
            fit(LV.model, lv_data, fixed={"beta": bad})


def test_infinite_start_refused_nan_start_means_none(lv_data):
    with pytest.raises(InputError, match=r"start\['alpha'\]: expected a finite number \(or NaN for none\), got inf"):
        prepare(LV.model, lv_data, start={**LV_START, "alpha": math.inf})
    prob = prepare(LV.model, lv_data, start={**LV_START, "alpha": math.nan})
    assert math.isnan(prob.start[0]) and prob.start[1] == LV_START["beta"]
    with pytest.raises(InputError, match=r"x0\['prey'\]: expected a finite number \(or NaN for none\), got -inf"):
        prepare(LV.model, lv_data, x0={"prey": -math.inf, "predator": 1.0})


def test_data_scaled_to_overflow_refused_by_every_estimator(lv_data):
    big = oi.Data(lv_data.t, np.asarray(lv_data.y) * 1e300, lv_data.states, t0=lv_data.t0, name="scaled")
    for fit in ALL.values():
        with pytest.raises(DataError, match=r"data: state '(prey|predator)' of experiment 'scaled' reaches "
                                            r"\|y\| = .*e\+30[0-9]; .*overflow float64.*numerical overflow\)\. "
                                            r"Rescale the data"):
            fit(LV.model, big)
    # 1e140 still fits: the check leaves room (sums of squares of these stay finite)
    mid = oi.Data(lv_data.t, np.asarray(lv_data.y) * 1e140, lv_data.states, t0=lv_data.t0)
    prepare(LV.model, mid)


def test_overflowed_estimate_is_not_reported_converged(lv_data):
    """An estimator whose objective or covariance overflowed (infinite) gets status "failed" and an
    OverflowWarning that says so, not "converged" with NaN standard errors."""
    prob = prepare(LV.model, lv_data)
    est = oi.OrthogonalConditions()
    cov = np.eye(4)
    cov[1, 1] = np.inf
    with pytest.warns(OverflowWarning, match=r"OrthogonalConditions: .* not finite \(numerical overflow\); rescale"):
        e = make_estimate(est, prob, prob.free, [0.5, 0.03, 0.7, 0.02], cov, "converged", t_start=0.0, cost=1.0)
    assert e.status == "failed" and "overflow" in e.message and any("overflow" in w for w in e.warnings)
    with pytest.warns(OverflowWarning):
        e = make_estimate(est, prob, prob.free, [0.5, 0.03, 0.7, 0.02], np.eye(4), "converged", t_start=0.0,
                          cost=math.inf)
    assert e.status == "failed"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nan_cov = np.full((4, 4), np.nan)  # an identifiability failure is not an overflow
        e = make_estimate(est, prob, prob.free, [0.5, 0.03, 0.7, 0.02], nan_cov, "converged", t_start=0.0, cost=1.0)
    assert e.status == "converged"


# --- clipping to bounds --------------------------------------------------------------------------
def test_embedding_estimate_on_a_log_bound_stays_inside_it():
    """k2 = -0.05 in truth, bounded below by 1e-5 and estimated on the log scale: the optimum is the
    bound, and exp(log(1e-5)) = 9.999999999999997e-06 < 1e-5 must not leak into the estimate."""
    z = oi.zoo.linear_decay()
    assert math.exp(math.log(1e-5)) < 1e-5  # the rounding this guards against
    data, _ = oi.simulate(z.model, {"k1": 0.5, "k2": -0.05}, z.x0, z.t, noise=0.001, rng=4)
    est = oi.Embedding(log_params=True, bounds={"k2": (1e-5, 10.0)}).fit(z.model, data, start={"k1": 0.4, "k2": 0.1})
    k2 = est.params["k2"]
    assert k2 >= 1e-5
    assert k2 == pytest.approx(1e-5, rel=1e-6)  # on the bound indeed


def test_make_estimate_clips_every_bounded_quantity(lv_data):
    prob = prepare(LV.model, lv_data, start=LV_START)
    est = oi.Embedding(bounds={"alpha": (0.1, 0.4), "x0[prey]": (0.0, 50.0)})
    names = (*prob.free, "x0[prey]@a", "x0[predator]@a")
    e = make_estimate(est, prob, names, [0.5 + 1e-16, 0.03, 0.7, 0.02, -1e-17, 3.0], None, "converged",
                      t_start=0.0)
    assert e.values[0] == 0.4 and e.values[4] == 0.0
    np.testing.assert_array_equal(e.values[[1, 2, 3, 5]], [0.03, 0.7, 0.02, 3.0])
