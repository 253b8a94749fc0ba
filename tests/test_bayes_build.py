"""build_model: the Stan lynx-hare case study exactly (log density vs a hand-written scipy.stats
computation), names/coords/dims, priors from an estimate, and every bad-input message."""

import numpy as np
import pytest

pm = pytest.importorskip("pymc")
import scipy.stats as st  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

import odeinfer as oi  # noqa: E402
from odeinfer.bayes.build import lynx_hare_stan  # noqa: E402
from odeinfer.errors import DataError, InputError  # noqa: E402
from odeinfer.results import Estimate  # noqa: E402

POINT = {"alpha": 0.55, "beta": 0.028, "gamma": 0.8, "delta": 0.024, "x0[hare]": 33.9, "x0[lynx]": 5.9,
         "sigma[hare]": 0.25, "sigma[lynx]": 0.3}


@pytest.fixture(scope="module")
def stan():
    lv, data, priors = lynx_hare_stan()
    m = oi.bayes.build_model(lv, data, priors=priors, likelihood="lognormal",
                             solver=oi.Dopri5(rtol=1e-10, atol=1e-12, max_steps=20_000))
    return lv, data, m


def _logp_at(m, point, jacobian=False):
    for k, v in point.items():
        m.set_initval(m[k], v)
    f = m.compile_logp(jacobian=jacobian, mode="FAST_COMPILE")
    return float(f(m.initial_point()))


def test_stan_lynx_hare_logp_matches_scipy(stan):
    """Stan case study (Carpenter 2018) written by hand with scipy.stats: truncated normals at 0,
    log-normal z0 and sigma priors, the 1900 row LogNormal(log z0, sigma) and 1901-1920 rows
    LogNormal(log z(t), sigma) with z from solve_ivp (DOP853, rtol 1e-12)."""
    lv, data, m = stan
    p = POINT
    a, b, g, d = (p[k] for k in ("alpha", "beta", "gamma", "delta"))
    z = solve_ivp(lambda t, z: [(a - b * z[1]) * z[0], (-g + d * z[0]) * z[1]], (0, 20),
                  [p["x0[hare]"], p["x0[lynx]"]], t_eval=data.t, rtol=1e-12, atol=1e-12, method="DOP853").y.T
    sig = np.array([p["sigma[hare]"], p["sigma[lynx]"]])
    lp = sum(st.truncnorm.logpdf(p[k], -mu / s, np.inf, loc=mu, scale=s)
             for k, mu, s in [("alpha", 1, .5), ("gamma", 1, .5), ("beta", .05, .05), ("delta", .05, .05)])
    lp += sum(st.lognorm.logpdf(p[k], s=1, scale=10) for k in ("x0[hare]", "x0[lynx]"))
    lp += sum(st.lognorm.logpdf(p[k], s=1, scale=np.exp(-1)) for k in ("sigma[hare]", "sigma[lynx]"))
    y = np.asarray(data.y)
    lp += st.lognorm.logpdf(y[0], s=sig, scale=[p["x0[hare]"], p["x0[lynx]"]]).sum()  # the 1900 row
    lp += st.lognorm.logpdf(y[1:], s=sig, scale=z[1:]).sum()
    np.testing.assert_allclose(_logp_at(m, p), lp, rtol=1e-9)


def test_observed_columns_in_model_order_are_a_basic_slice(stan):
    """All states observed in the model's order: the likelihood takes y_hat's columns as a basic slice,
    so the gradient graph has no advanced indexing (slow to compile in NUMBA mode); the same data with
    its columns in another order keeps the indexing and gives the same log density."""
    import pytensor
    from pytensor.graph.traversal import applys_between
    from pytensor.tensor.subtensor import (AdvancedIncSubtensor, AdvancedIncSubtensor1, AdvancedSubtensor,
                                           AdvancedSubtensor1)

    lv, data, m = stan
    advanced = (AdvancedSubtensor, AdvancedSubtensor1, AdvancedIncSubtensor, AdvancedIncSubtensor1)

    def n_advanced(model):
        logp = model.logp()
        outs = [logp, *pytensor.grad(logp, model.value_vars)]
        return sum(isinstance(a.op, advanced) for a in applys_between(model.value_vars, outs))

    swapped = oi.Data(data.t, np.asarray(data.y)[:, ::-1], states=list(data.states)[::-1], t0=data.t0)
    _, _, priors = lynx_hare_stan()
    m2 = oi.bayes.build_model(lv, swapped, priors=priors, likelihood="lognormal",
                              solver=oi.Dopri5(rtol=1e-10, atol=1e-12, max_steps=20_000))
    assert n_advanced(m) == 0 and n_advanced(m2) > 0
    np.testing.assert_allclose(_logp_at(m2, POINT), _logp_at(m, POINT), rtol=1e-13)


def test_stan_graph_names_transforms_and_dims(stan):
    lv, data, m = stan
    assert [v.name for v in m.free_RVs] == ["alpha", "beta", "gamma", "delta", "x0[hare]", "x0[lynx]",
                                            "sigma[hare]", "sigma[lynx]"]
    assert [rv.name for rv in m.observed_RVs] == ["y_obs"]
    assert m.named_vars_to_dims["y_obs"] == ("time", "observed_state")
    assert m.named_vars_to_dims["y_hat"] == ("time", "state")
    assert list(m.coords["param"]) == ["alpha", "beta", "gamma", "delta"]
    assert list(m.coords["state"]) == ["hare", "lynx"] and len(m.coords["time"]) == 21
    # every truncated prior lives on (0, inf): its unconstrained value is finite only for x > 0
    assert all(m.rvs_to_transforms[m[k]] is not None for k in POINT)
    obs = m.rvs_to_values[m["y_obs"]].data
    np.testing.assert_array_equal(obs, data.y)


def _gn_like_estimate(model, names, values, cov=None):
    cov = np.diag((0.1 * np.abs(values)) ** 2) if cov is None else cov
    return Estimate("Test", model, names, values, cov, "converged")


def test_priors_from_estimate_centre_and_width():
    entry = oi.zoo.get("lotka_volterra")
    est = _gn_like_estimate(entry.model, ["alpha", "beta", "x0[prey]"], np.array([0.5, -0.02, 30.0]))
    pri = oi.bayes.priors_from_estimate(est, inflate=2.0)
    # alpha > 0 -> LogNormal(log 0.5, 2 * 0.05 / 0.5); beta < 0 -> Normal(-0.02, 2 * 0.002)
    x = 0.7
    np.testing.assert_allclose(pm.logp(pri["alpha"], x).eval(),
                               st.lognorm.logpdf(x, s=2 * 0.05 / 0.5, scale=0.5), rtol=1e-10)
    np.testing.assert_allclose(pm.logp(pri["beta"], -0.01).eval(), st.norm.logpdf(-0.01, -0.02, 0.004), rtol=1e-10)
    np.testing.assert_allclose(pm.logp(pri["x0[prey]"], 31.0).eval(),
                               st.lognorm.logpdf(31.0, s=2 * 3.0 / 30.0, scale=30.0), rtol=1e-10)
    normal = oi.bayes.priors_from_estimate(est, inflate=2.0, positive=False)
    np.testing.assert_allclose(pm.logp(normal["alpha"], x).eval(), st.norm.logpdf(x, 0.5, 0.1), rtol=1e-10)
    via_method = est.to_priors(inflate=2.0)
    assert set(via_method) == {"alpha", "beta", "x0[prey]"}
    with pytest.raises(InputError, match="inflate"):
        oi.bayes.priors_from_estimate(est, inflate=-1)
    with pytest.raises(InputError, match=r"positive=True: the estimates of \['beta'\]"):
        oi.bayes.priors_from_estimate(est, positive=True)


def test_build_with_init_fills_missing_priors_and_missing_values_flatten():
    entry = oi.zoo.get("lotka_volterra")
    p = np.array(list(entry.params.values()))
    x0 = np.array(list(entry.x0.values()))
    sim = oi.simulate(entry.model, p, x0, entry.t, noise=0.25, rng=2).data
    y = np.array(sim.y)
    y[3, 1] = np.nan
    data = oi.Data(sim.t, y, sim.states)
    names = list(entry.model.params) + ["x0[prey]", "x0[predator]"]
    est = _gn_like_estimate(entry.model, names, np.concatenate([p, x0]))
    m = oi.bayes.build_model(entry.model, data, init=est, priors={"sigma": pm.HalfNormal.dist(1.0)})
    assert m.named_vars_to_dims["y_obs"] == ("obs",)
    assert len(m.coords["obs"]) == 41 and "3|predator" not in m.coords["obs"]
    # known x0 and sigma remove those variables
    m2 = oi.bayes.build_model(entry.model, data, init=est, x0={"prey": 34.0}, sigma=0.25)
    assert [v.name for v in m2.free_RVs] == ["alpha", "beta", "gamma", "delta", "x0[predator]"]


def test_build_multiple_experiments_names():
    entry = oi.zoo.get("linear_decay")
    a = oi.Data(entry.t, np.ones((entry.t.size, 2)), ("x1", "x2"), name="a")
    b = oi.Data(entry.t[:5], np.ones((5, 1)), ("x1",), name="b")
    m = oi.bayes.build_model(entry.model, [a, b], priors={"k1": pm.HalfNormal.dist(1), "k2": pm.HalfNormal.dist(1),
                                                          "x0": pm.HalfNormal.dist(2.0)},
                             x0={"b": {"x2": 0.0}})
    names = [v.name for v in m.free_RVs]
    assert names[:5] == ["k1", "k2", "x0[x1]@a", "x0[x2]@a", "x0[x1]@b"]
    assert {"y_obs@a", "y_obs@b"} == {rv.name for rv in m.observed_RVs}
    assert m.named_vars_to_dims["x0"] == ("experiment", "state")


# ---- bad input ------------------------------------------------------------------------------

def test_prior_for_unknown_name():
    lv, data, priors = lynx_hare_stan()
    with pytest.raises(InputError, match=r"'alpah' is not a parameter of the model \(did you mean 'alpha'\?\)"):
        oi.bayes.build_model(lv, data, priors={**priors, "alpah": pm.Normal.dist(0, 1)}, likelihood="lognormal")


def test_prior_for_known_quantity():
    lv, data, priors = lynx_hare_stan()
    with pytest.raises(InputError, match=r"'sigma\[hare\]' is known"):
        oi.bayes.build_model(lv, data, priors={**priors, "sigma[hare]": pm.HalfNormal.dist(1)}, sigma=0.2,
                             likelihood="lognormal")


def test_missing_priors_named():
    lv, data, priors = lynx_hare_stan()
    del priors["beta"]
    with pytest.raises(InputError, match=r"no prior for \['beta'\]"):
        oi.bayes.build_model(lv, data, priors=priors, likelihood="lognormal")


def test_lognormal_with_nonpositive_observations_names_rows():
    lv, data, priors = lynx_hare_stan()
    y = np.array(data.y)
    y[4, 1] = 0.0
    y[7, 0] = -1.0
    bad = oi.Data(data.t, y, data.states, name="bad")
    with pytest.raises(DataError, match=r"positive observations.*rows \[4, 7\]: t=4 \(lynx=0\); t=7 \(hare=-1\)"):
        oi.bayes.build_model(lv, bad, priors=priors, likelihood="lognormal")


def test_init_from_a_different_model():
    lv, data, priors = lynx_hare_stan()
    other = oi.zoo.get("lotka_volterra").model  # same equations, other state names
    est = _gn_like_estimate(other, ["alpha"], np.array([0.5]))
    with pytest.raises(InputError, match="init: the estimate is of model 'lotka_volterra'"):
        oi.bayes.build_model(lv, data, priors=priors, init=est, likelihood="lognormal")


def test_unknown_likelihood_and_bad_prior_value():
    lv, data, priors = lynx_hare_stan()
    with pytest.raises(InputError, match=r"likelihood: .* got 'lognorm' \(did you mean 'lognormal'\?\)"):
        oi.bayes.build_model(lv, data, priors=priors, likelihood="lognorm")
    with pytest.raises(InputError, match=r"priors\['alpha'\]: expected an unnamed PyMC distribution"):
        oi.bayes.build_model(lv, data, priors={**priors, "alpha": 1.0}, likelihood="lognormal")


def test_data_state_not_in_model():
    lv, data, priors = lynx_hare_stan()
    wrong = data.rename({"lynx": "fox"})
    with pytest.raises(DataError, match=r"columns \['fox'\] .* are not states of model"):
        oi.bayes.build_model(lv, wrong, priors=priors, likelihood="lognormal")
