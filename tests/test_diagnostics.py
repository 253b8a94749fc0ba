"""oi.diagnostics.check (MCMC diagnostics) and oi.diagnostics.ppc (posterior predictive checks).

InferenceData are built with arviz.from_dict from draws whose properties are known by
construction: iid normal chains (R-hat ~ 1, ESS ~ number of draws), chains with shifted
means (R-hat >> 1.01), AR(1) chains with rho = 0.99 (ESS ~ n (1 - rho) / (1 + rho)),
random-walk energies (E-BFMI ~ 0), explicit divergence and tree-depth flags.
"""

import arviz as az
import numpy as np
import pytest

import odeinfer as oi
from odeinfer.diagnostics import DiagnosticsReport, check, ppc
from odeinfer.diagnostics._names import draws, parameter_names
from odeinfer.errors import InputError

C, D = 4, 500


def _idata(rng=0, shift=None, sample_stats=None, posterior=None):
    r = np.random.default_rng(rng)
    post = {"alpha": r.normal(size=(C, D)), "beta": r.normal(2.0, 0.1, size=(C, D)),
            "x0": r.normal(size=(C, D, 2)), "sigma": np.abs(r.normal(size=(C, D, 2))) + 0.1}
    if shift is not None:
        post["alpha"] = post["alpha"] + np.array(shift)[:, None]
    post.update(posterior or {})
    ss = {"diverging": np.zeros((C, D), bool), "energy": r.normal(size=(C, D)),
          "tree_depth": np.full((C, D), 3), "reached_max_treedepth": np.zeros((C, D), bool)}
    if sample_stats is not None:
        ss = sample_stats(ss, r)
    return az.from_dict(posterior=post, sample_stats=ss, dims={"x0": ["state"], "sigma": ["state"]},
                        coords={"state": ["prey", "pred"]})


def test_good_idata_passes_every_check():
    rep = check(_idata())
    assert isinstance(rep, DiagnosticsReport)
    assert rep.passed, repr(rep)
    assert [c.name for c in rep.checks] == ["r_hat", "ess_bulk", "ess_tail", "divergences", "bfmi", "tree_depth"]
    assert all(c.passed for c in rep.checks)
    t = rep.table
    assert list(t.index) == ["alpha", "beta", "x0[prey]", "x0[pred]", "sigma[prey]", "sigma[pred]"]
    # iid draws: ESS close to the number of draws (2000), mean/sd of beta ~ N(2, 0.1)
    assert (t["ess_bulk"] > 1500).all()
    assert t.loc["beta", "mean"] == pytest.approx(2.0, abs=0.01)
    assert t.loc["beta", "sd"] == pytest.approx(0.1, rel=0.05)
    assert t["ok"].all()


def test_chains_with_different_means_fail_rhat_and_name_the_parameter():
    rep = check(_idata(shift=[0.0, 0.0, 0.0, 3.0]))
    assert not rep.passed
    c = rep["r_hat"]
    assert c.passed is False and c.value > 1.1 and "alpha" in c.advice
    assert not rep.table.loc["alpha", "ok"] and rep.table.loc["beta", "ok"]
    assert "r_hat" in rep.failed


def test_divergences_fail_with_count_and_advice():
    def ss(s, r):
        s["diverging"][1, :7] = True
        return s
    rep = check(_idata(sample_stats=ss))
    c = rep["divergences"]
    assert c.passed is False and c.value == 7 and "target_accept" in c.advice
    assert not rep.passed
    assert check(_idata(sample_stats=ss), max_divergences=7)["divergences"].passed


def test_autocorrelated_chains_fail_ess():
    r = np.random.default_rng(3)
    x = np.zeros((C, D))
    for i in range(1, D):  # AR(1), rho = 0.99: ESS ~ 2000 * 0.01 / 1.99 ~ 10
        x[:, i] = 0.99 * x[:, i - 1] + r.normal(size=C)
    rep = check(_idata(posterior={"alpha": x}))
    assert rep["ess_bulk"].passed is False and rep["ess_bulk"].value < 100
    assert rep["ess_tail"].passed is False
    assert "alpha" in rep["ess_bulk"].advice and "beta" not in rep["ess_bulk"].advice


def test_random_walk_energy_fails_bfmi():
    def ss(s, r):
        s["energy"] = np.cumsum(r.normal(size=(C, D)), axis=1)  # E-BFMI = var(dE)/var(E) ~ 6/D
        return s
    c = check(_idata(sample_stats=ss))["bfmi"]
    assert c.passed is False and c.value < 0.1


def test_tree_depth_saturation_pymc_and_nutpie_names():
    def pymc(s, r):
        s["reached_max_treedepth"][0, :100] = True
        return s
    c = check(_idata(sample_stats=pymc))["tree_depth"]
    assert c.passed is False and c.value == pytest.approx(100 / (C * D))

    def nutpie(s, r):
        s.pop("reached_max_treedepth")
        s.pop("tree_depth")
        s["depth"] = np.full((C, D), 4)
        s["maxdepth_reached"] = np.zeros((C, D), bool)
        s["maxdepth_reached"][2, :10] = True
        return s
    c = check(_idata(sample_stats=nutpie))["tree_depth"]
    assert c.passed is False and c.value == pytest.approx(10 / (C * D))
    assert check(_idata(sample_stats=nutpie), max_treedepth_fraction=0.01)["tree_depth"].passed


def test_tree_depth_only_with_a_max_treedepth_attribute():
    r = np.random.default_rng(0)
    depth = np.full((C, D), 5)
    depth[0, :20] = 8
    idata = az.from_dict(posterior={"alpha": r.normal(size=(C, D))}, sample_stats={"depth": depth},
                         attrs={"max_treedepth": 8})
    c = check(idata)["tree_depth"]
    assert c.passed is False and c.value == pytest.approx(20 / (C * D))
    no_attr = az.from_dict(posterior={"alpha": r.normal(size=(C, D))}, sample_stats={"depth": depth})
    assert check(no_attr)["tree_depth"].passed is None


def test_missing_sample_stats_are_skipped_with_a_note():
    r = np.random.default_rng(0)
    idata = az.from_dict(posterior={"alpha": r.normal(size=(C, D))})
    rep = check(idata)
    skipped = {c.name: c.advice for c in rep.checks if c.passed is None}
    assert set(skipped) == {"divergences", "bfmi", "tree_depth"}
    assert "Skipped" in skipped["bfmi"]
    assert rep.passed


def test_var_names_and_report_display_escape_html():
    r = np.random.default_rng(0)
    bad = "<script>alert(1)</script>"
    idata = az.from_dict(posterior={bad: r.normal(size=(C, D)), "y_hat": r.normal(size=(C, D, 5))},
                         dims={"y_hat": ["time"]})
    rep = check(idata)
    assert list(rep.table.index) == [bad]  # the trajectory (time dim) is not a parameter
    html = rep._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "PASSED" in repr(rep)
    assert list(check(idata, var_names=["y_hat"]).table.index) == [f"y_hat[{i}]" for i in range(5)]


def test_report_is_frozen():
    rep = check(_idata())
    with pytest.raises(AttributeError):
        rep.n_chains = 3
    t = rep.table
    t.loc["alpha", "r_hat"] = 99.0
    assert rep.table.loc["alpha", "r_hat"] < 1.1


@pytest.mark.parametrize("kwargs, match", [
    ({"rhat_max": 0.99}, "rhat_max"),
    ({"rhat_max": "1.01"}, "rhat_max"),
    ({"ess_min": -1}, "ess_min"),
    ({"bfmi_min": 0}, "bfmi_min"),
    ({"max_divergences": 1.5}, "max_divergences"),
    ({"max_divergences": -1}, "max_divergences"),
    ({"max_treedepth_fraction": -0.1}, "max_treedepth_fraction"),
    ({"var_names": ["nope"]}, r"var_names: \['nope'\] are not posterior variables"),
])
def test_check_bad_arguments(kwargs, match):
    with pytest.raises(InputError, match=match):
        check(_idata(), **kwargs)


def test_check_bad_idata():
    with pytest.raises(InputError, match="idata: expected an arviz.InferenceData"):
        check({"alpha": [1, 2, 3]})
    with pytest.raises(InputError, match="idata: the posterior has no parameter variables to check"):
        check(az.from_dict(posterior={"traj": np.zeros((2, 10, 3))}, dims={"traj": ["time"]}))
    with pytest.raises(InputError, match="at least 4"):
        check(az.from_dict(posterior={"a": np.zeros((2, 3))}))


# --- names ---------------------------------------------------------------------------------------
def test_names_resolve_scalars_states_experiments_and_literal_names():
    r = np.random.default_rng(1)
    x0 = r.normal(size=(2, 50, 2, 3))
    idata = az.from_dict(posterior={"alpha": r.normal(size=(2, 50)), "x0": x0, "sigma[prey]": r.normal(size=(2, 50))},
                         dims={"x0": ["state", "experiment"]},
                         coords={"state": ["prey", "pred"], "experiment": ["a", "b", "c"]})
    np.testing.assert_array_equal(draws(idata, "x0[pred]@b"), x0[:, :, 1, 1].ravel())
    assert draws(idata, "alpha").shape == (100,)
    assert draws(idata, "sigma[prey]").shape == (100,)
    names = parameter_names(idata)
    assert "x0[prey]@c" in names and len(names) == 1 + 6 + 1
    with pytest.raises(InputError, match=r"'x0\[prey\]' matches no posterior variable; available: .*x0\[prey\]@a"):
        draws(idata, "x0[prey]")
    with pytest.raises(InputError, match="'gamma' matches no posterior variable"):
        draws(idata, "gamma")


def _built_like_build_model(known_prey=False, experiments=None):
    """The posterior of oi.bayes.build_model: unknown initial states sampled as scalars 'x0[s]'
    ('x0[s]@e' per experiment), and the vector 'x0' (dim state; experiment, state) and 'theta'
    (dim param) kept as deterministics that repeat them."""
    r = np.random.default_rng(2)
    states = ["prey", "pred"]
    sfx = [""] if experiments is None else [f"@{e}" for e in experiments]
    post = {"alpha": r.normal(1, 0.1, (C, D)), "sigma[prey]": np.abs(r.normal(size=(C, D))) + 0.1}
    post["theta"] = post["alpha"][..., None]
    vec = []
    for e in sfx:
        if not known_prey:
            post[f"x0[prey]{e}"] = r.normal(10, 1, (C, D))
        post[f"x0[pred]{e}"] = r.normal(5, 1, (C, D))
        vec.append(np.stack([np.full((C, D), 10.0) if known_prey else post[f"x0[prey]{e}"], post[f"x0[pred]{e}"]],
                            axis=-1))
    post["x0"] = vec[0] if experiments is None else np.stack(vec, axis=2)
    dims = {"theta": ["param"], "x0": ["state"] if experiments is None else ["experiment", "state"]}
    coords = {"param": ["alpha"], "state": states, **({} if experiments is None else {"experiment": experiments})}
    return az.from_dict(posterior=post, dims=dims, coords=coords,
                        sample_stats={"diverging": np.zeros((C, D), bool)})


@pytest.mark.parametrize("known_prey, experiments, expected", [
    (False, None, ["alpha", "sigma[prey]", "x0[prey]", "x0[pred]"]),
    (True, None, ["alpha", "sigma[prey]", "x0[pred]"]),  # a known initial state is not a parameter
    (False, ["a", "b"], ["alpha", "sigma[prey]", "x0[prey]@a", "x0[pred]@a", "x0[prey]@b", "x0[pred]@b"]),
])
def test_initial_states_sampled_as_scalars_are_listed_once(known_prey, experiments, expected):
    idata = _built_like_build_model(known_prey, experiments)
    assert sorted(parameter_names(idata)) == sorted(expected)
    assert sorted(check(idata).table.index) == sorted(expected)


# --- posterior predictive check ------------------------------------------------------------------
def _ppc_case(offsets, nan=None, S=4000):
    t = np.linspace(0, 10, 21)
    m = np.column_stack([10 + t, 5 + 0.5 * t])
    y = m.copy()
    for (i, k), d in offsets.items():
        y[i, k] += d
    if nan is not None:
        y[nan] = np.nan
    data = oi.Data(t, y, ["prey", "pred"])
    r = np.random.default_rng(0)
    rep = m[None, None] + r.normal(size=(2, S // 2, 21, 2))  # predictive N(m, 1)
    idata = az.from_dict(posterior={"a": r.normal(size=(2, S // 2))}, posterior_predictive={"y": rep},
                         dims={"y": ["time", "state"]}, coords={"time": t, "state": ["prey", "pred"]})
    return idata, data


def test_ppc_coverage_and_p_value_known_answers():
    # 4 observations 5 sd away from the predictive mean: outside the 95% interval (+-1.96).
    idata, data = _ppc_case({(2, 0): 5.0, (7, 0): -5.0, (9, 1): 5.0, (15, 1): 5.0})
    res = ppc(idata, data)
    tab = res.table
    assert tab.loc["prey", "coverage"] == pytest.approx(19 / 21)
    assert tab.loc["all", "coverage"] == pytest.approx(38 / 42)
    assert tab.loc["all", "n_obs"] == 42 and tab.loc["all", "nominal"] == 0.95
    # T_obs = 4 * 25 = 100 against T_rep ~ chi2_42 (mean 42, P(chi2_42 > 100) ~ 1e-6)
    assert res.p_value < 0.01
    # Observations exactly at the predictive mean: T_obs ~ 0, every replicate is larger.
    idata, data = _ppc_case({})
    res = ppc(idata, data)
    assert res.coverage == 1.0 and res.p_value == 1.0
    assert "coverage" in repr(res) and "<table" in res._repr_html_()


def test_ppc_skips_missing_observations_and_matches_states_by_label():
    idata, data = _ppc_case({(2, 0): 5.0}, nan=(slice(0, 3), 1))
    swapped = data.select(["pred", "prey"])  # columns in the other order than the predictive's coords
    res = ppc(idata, swapped)
    assert list(res.table.index) == ["pred", "prey", "all"]
    assert res.table.loc["pred", "n_obs"] == 18 and res.table.loc["prey", "n_obs"] == 21
    assert res.table.loc["prey", "coverage"] == pytest.approx(20 / 21)
    assert res.table.loc["pred", "coverage"] == 1.0


def test_ppc_bad_input():
    idata, data = _ppc_case({})
    with pytest.raises(InputError, match="var_name: 'yy' is not in idata.posterior_predictive"):
        ppc(idata, data, var_name="yy")
    with pytest.raises(InputError, match="no 'posterior_predictive' group"):
        ppc(az.from_dict(posterior={"a": np.zeros((2, 10))}), data)
    with pytest.raises(InputError, match="21 times, but data has 20"):
        ppc(idata, oi.Data(data.t[:20], data.y[:20], data.states))
    with pytest.raises(InputError, match=r"alpha: expected a number in \(0, 1\)"):
        ppc(idata, data, alpha=1.5)
    with pytest.raises(InputError, match="data: expected an odeinfer Data"):
        ppc(idata, np.zeros((21, 2)))


def test_constant_variables_are_not_diagnosed():
    """A known value kept in the posterior (constant draws, R-hat NaN) must not fail the R-hat check."""
    import arviz as az

    rng = np.random.default_rng(0)
    idata = az.from_dict(posterior={"k": rng.normal(size=(4, 500)), "x0": np.full((4, 500), 2.0)})
    rep = check(idata, ess_min=100)
    assert list(rep.table.index) == ["k"] and rep.passed
