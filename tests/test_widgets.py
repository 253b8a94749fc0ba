"""odeinfer.widgets: callback logic of Explorer, RegionPanel and FitPanel, tested without a browser."""

import sys

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import odeinfer as oi
from odeinfer.errors import InputError

pytest.importorskip("ipywidgets")


@pytest.fixture(scope="module")
def lv():
    z = oi.zoo.get("lotka_volterra")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=z.sigma, rng=3)
    oc = oi.OrthogonalConditions().fit(z.model, data)
    gm = oi.GradientMatching().fit(z.model, data)
    return z, data, oc, gm


def _scipy_lv(p, x0, t):
    """Reference trajectory: scipy DOP853 at rtol 1e-12 (independent of odeinfer's solver)."""
    a, b, c, d = p

    def f(_, y):
        return [a * y[0] - b * y[0] * y[1], d * y[0] * y[1] - c * y[1]]

    return solve_ivp(f, (t[0], t[-1]), x0, t_eval=t, method="DOP853", rtol=1e-12, atol=1e-12).y.T


# ---- Explorer -----------------------------------------------------------------------------

def test_explorer_starts_at_the_estimate_and_matches_scipy(lv):
    z, data, oc, _ = lv
    ex = oi.widgets.Explorer(z.model, data, start=oc)
    assert ex.names == ["alpha", "beta", "gamma", "delta", "x0[prey]", "x0[predator]"]
    v = ex.values()
    assert [v[p] for p in z.model.params] == list(oc.values)
    assert [v["x0[prey]"], v["x0[predator]"]] == list(data.y[0])   # OC does not estimate x0: first data row
    y, status = ex.last
    assert status == 0
    ref = _scipy_lv(oc.values, data.y[0], ex.sim.t)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    for i, s in enumerate(z.model.states):       # the drawn lines are the trajectory
        np.testing.assert_array_equal(ex.lines[s].get_ydata(), y[:, i])


def test_explorer_update_moves_lines_and_image(lv):
    z, data, oc, _ = lv
    ex = oi.widgets.Explorer(z.model, data, start=oc)
    before = ex.image.value
    assert before[:8] == b"\x89PNG\r\n\x1a\n"
    y, status = ex.set_values(alpha=0.6, **{"x0[prey]": 30.0})
    assert status == 0 and ex.sliders["alpha"].value == 0.6
    p = [0.6, *oc.values[1:]]
    ref = _scipy_lv(p, [30.0, data.y[0, 1]], ex.sim.t)
    np.testing.assert_allclose(ex.lines["prey"].get_ydata(), ref[:, 0], rtol=1e-4, atol=1e-4)
    assert ex.image.value != before and ex.image.value[:4] == b"\x89PNG"
    # moving a slider is the same callback
    ex.sliders["gamma"].value = 0.9
    ref = _scipy_lv([0.6, oc.values[1], 0.9, oc.values[3]], [30.0, data.y[0, 1]], ex.sim.t)
    np.testing.assert_allclose(ex.lines["predator"].get_ydata(), ref[:, 1], rtol=1e-4, atol=1e-4)
    assert "solver: ok" in ex.status.value


def test_explorer_compute_does_not_touch_state(lv):
    z, data, oc, _ = lv
    ex = oi.widgets.Explorer(z.model, data, start=oc)
    v = ex.values()
    y1, _ = ex.compute({"alpha": 0.7})
    y2, _ = ex.compute({"alpha": 0.7})
    np.testing.assert_array_equal(y1, y2)       # copies, not the solver's reused buffer
    assert ex.values() == v


def test_explorer_reports_solver_failure():
    # dx/dt = k x^2, x(0) = 1 blows up at t = 1/k: the solver must stop and say so, not crash.
    m = oi.Model.from_equations({"x": "k*x**2"}, params=["k"], name="blowup")
    data = oi.Data([0.0, 0.5, 1.5, 2.0], [[1.0], [2.0], [np.nan], [np.nan]], ["x"])
    ex = oi.widgets.Explorer(m, data, start={"k": 0.1})
    assert ex.last[1] == 0
    y, status = ex.set_values(k=1.0)
    assert status != 0 and np.isnan(y[-1, 0])
    assert "solver failed" in ex.status.value


def test_explorer_bad_input(lv):
    z, data, oc, _ = lv
    with pytest.raises(InputError, match=r"x0: no initial value for state 'predator'"):
        oi.widgets.Explorer(z.model, data.select(["prey"]), start=oc)
    with pytest.raises(InputError, match=r"x0: expected a dict or an array of shape \(2,\)"):
        oi.widgets.Explorer(z.model, data, start=oc, x0=[1.0])
    with pytest.raises(InputError, match=r"x0: unknown states \['wolf'\]"):
        oi.widgets.Explorer(z.model, data, start=oc, x0={"wolf": 1.0})
    with pytest.raises(InputError, match=r"start: unknown names \['omega'\]"):
        oi.widgets.Explorer(z.model, data, start={"omega": 1.0})
    with pytest.raises(InputError, match="start: expected an Estimate or a dict"):
        oi.widgets.Explorer(z.model, data, start=[1, 2, 3, 4])
    with pytest.raises(InputError, match=r"ranges\['alpha'\]: expected min < max"):
        oi.widgets.Explorer(z.model, data, start=oc, ranges={"alpha": (1.0, 0.5)})
    with pytest.raises(InputError, match=r"ranges: unknown names \['zeta'\]"):
        oi.widgets.Explorer(z.model, data, start=oc, ranges={"zeta": (0, 1)})
    with pytest.raises(InputError, match="model: expected an odeinfer Model"):
        oi.widgets.Explorer("lv", data)
    with pytest.raises(InputError, match="data: got Experiments with 2 experiments"):
        oi.widgets.Explorer(z.model, oi.Experiments([data, data], names=["a", "b"]), start=oc)
    other = oi.Model.from_equations({"x": "-k*x"}, params=["k"])
    with pytest.raises(InputError, match="start: the estimate is of model 'lotka_volterra'"):
        oi.widgets.Explorer(other, oi.Data([0.0, 1.0], [[1.0], [0.5]], ["x"]), start=oc)
    ex = oi.widgets.Explorer(z.model, data, start=oc)
    with pytest.raises(InputError, match=r"unknown names \['x0\[wolf\]'\]"):
        ex.set_values(**{"x0[wolf]": 1.0})


# ---- RegionPanel -----------------------------------------------------------------------------

def _idata(z, seed=0):
    import arviz as az

    rng = np.random.default_rng(seed)
    post = {p: rng.normal(v, 0.05 * v, (2, 200)) for p, v in z.params.items()}
    return az.from_dict(posterior=post)


def test_region_panel_choices_drive_table(lv):
    pytest.importorskip("odeinfer.diagnostics")
    z, data, oc, gm = lv
    panel = oi.widgets.RegionPanel([oc, gm], _idata(z))
    assert panel.names[:4] == ["alpha", "beta", "gamma", "delta"]
    assert list(panel.checkboxes) == ["OrthogonalConditions", "GradientMatching"]
    assert "alpha" in panel.table.value and "gamma" not in panel.table.value
    panel.y.value = "gamma"
    assert "gamma" in panel.table.value and "beta" not in panel.table.value
    panel.checkboxes["GradientMatching"].value = False
    assert panel.selected() == [oc] and "GradientMatching" not in panel.table.value
    panel.level.value = 0.8
    # the table's Wald bounds follow the level: estimate +- z_{0.9} se (z from scipy, independent)
    from scipy.stats import norm

    lo = oc.values[0] - norm.ppf(0.9) * oc.bse.iloc[0]
    assert f"{lo:.4g}" in panel.table.value


def test_region_panel_draws_with_plots(lv):
    pytest.importorskip("odeinfer.plots")
    z, _, oc, gm = lv
    panel = oi.widgets.RegionPanel([oc, gm], _idata(z), pair=("alpha", "gamma"))
    assert panel.message.value == "" and panel.image.value[:4] == b"\x89PNG"


def test_region_panel_messages(lv, monkeypatch):
    z, _, oc, gm = lv
    panel = oi.widgets.RegionPanel([oc, gm])
    panel.y.value = "alpha"
    assert "choose two different quantities" in panel.message.value
    panel.y.value = "beta"
    for c in panel.checkboxes.values():
        c.value = False
    assert "tick at least one estimator" in panel.message.value
    monkeypatch.setitem(sys.modules, "odeinfer.plots", None)
    panel.checkboxes["GradientMatching"].value = True
    assert "plot unavailable: ModuleNotFoundError" in panel.message.value and panel.image.value == b""


def test_region_panel_bad_input(lv):
    z, data, oc, _ = lv
    m = oi.Model.from_equations({"x": "-k*x", "y": "k*x - c*y"}, params=["k", "c"], name="chain")
    other = oi.Estimate("OrthogonalConditions", m, ("k", "c"), [1.0, 0.5], np.eye(2) * 0.01, "converged")
    with pytest.raises(InputError, match="estimates of different models cannot be compared"):
        oi.widgets.RegionPanel([oc, other])
    with pytest.raises(InputError, match="pair: expected two different names"):
        oi.widgets.RegionPanel([oc], pair=("alpha", "alpha"))
    with pytest.raises(InputError, match=r"level: expected a number in \[0.5, 0.99\]"):
        oi.widgets.RegionPanel([oc], level=0.999)
    with pytest.raises(InputError, match="got no estimates and no idata"):
        oi.widgets.RegionPanel([])
    with pytest.raises(InputError, match="every item must be an odeinfer Estimate"):
        oi.widgets.RegionPanel([oc, "gm"])
    with pytest.raises(InputError, match="idata: expected an arviz.InferenceData"):
        oi.widgets.RegionPanel([oc], idata={"alpha": [1, 2]})


# ---- FitPanel ---------------------------------------------------------------------------------

def test_parse_options():
    from odeinfer.widgets import parse_options

    assert parse_options("") == {}
    assert parse_options("max_iter=50, damping='none', lam=None, L=(3, 9)") == {
        "max_iter": 50, "damping": "none", "lam": None, "L": (3, 9)}
    with pytest.raises(InputError, match="options: cannot parse"):
        parse_options("max_iter=")
    with pytest.raises(InputError, match="has values without a name"):
        parse_options("50")
    with pytest.raises(InputError, match="the value of 'x' .* is not a literal"):
        parse_options("x=__import__('os').system('true')")
    with pytest.raises(InputError, match="options: expected text"):
        parse_options(3)


def test_fit_panel_runs_ticked_estimators(lv):
    z, data, oc, gm = lv
    panel = oi.widgets.FitPanel(z.model, data, estimators=["OrthogonalConditions", "GradientMatching", "NewtonRaphson"],
                                selected=["OrthogonalConditions", "GradientMatching"])
    table = panel.run()
    assert list(table.index) == ["OrthogonalConditions", "GradientMatching"]
    assert panel.progress.value == panel.progress.max == 2 and "done: 2 of 2 converged" in panel.status.value
    # the panel reports what the estimators return when called directly
    np.testing.assert_allclose(table.loc["OrthogonalConditions", list(z.model.params)].to_numpy(float), oc.values)
    np.testing.assert_allclose(table.loc["GradientMatching", "se(alpha)"], gm.bse.iloc[0])
    assert "<table" in panel.results.value


def test_fit_panel_errors_become_rows(lv):
    z, data, _, _ = lv
    panel = oi.widgets.FitPanel(z.model, data, estimators=["OrthogonalConditions", "NewtonRaphson"],
                                selected=["OrthogonalConditions", "NewtonRaphson"])
    panel.options["NewtonRaphson"].value = "no_such_option=1"
    table = panel.run()
    assert table.loc["NewtonRaphson", "status"] == "error"
    assert "no_such_option" in table.loc["NewtonRaphson", "message"]
    assert table.loc["OrthogonalConditions", "status"] == "converged"
    panel.options["NewtonRaphson"].value = "damping='sideways'"
    table = panel.run()
    assert "damping: expected 'lm'" in table.loc["NewtonRaphson", "message"]
    panel.checkboxes["OrthogonalConditions"].value = False
    panel.checkboxes["NewtonRaphson"].value = False
    assert panel.run().empty and "tick at least one estimator" in panel.status.value


def test_fit_panel_bad_input(lv):
    z, data, _, _ = lv
    with pytest.raises(InputError, match="estimators\\[0\\]: unknown estimator 'Magic'"):
        oi.widgets.FitPanel(z.model, data, estimators=["Magic"])
    with pytest.raises(InputError, match="estimators\\[0\\]: expected an estimator name or instance"):
        oi.widgets.FitPanel(z.model, data, estimators=[3])
    with pytest.raises(InputError, match="estimators: the list is empty"):
        oi.widgets.FitPanel(z.model, data, estimators=[])
    with pytest.raises(InputError, match=r"selected: \['Magic'\] are not offered"):
        oi.widgets.FitPanel(z.model, data, estimators=["GradientMatching"], selected=["Magic"])


def test_region_panel_profile_switch_draws_profile_regions():
    m = oi.Model.from_equations({"x": "a + c*t"}, params=["a", "c"])
    t = np.linspace(0.0, 4.0, 15)
    y = 1.0 + 0.5 * t - 0.1 * t**2 + np.random.default_rng(7).normal(0, 0.1, t.size)
    est = oi.Embedding().fit(m, oi.Data(t, y, "x"), start={"a": 0.0, "c": 0.0})
    panel = oi.widgets.RegionPanel([est], pair=("a", "c"))
    assert panel.profile.value is False and panel.message.value == ""
    assert ("a", "c", 15, 3.0) not in {k[1:] for k in est._profiler._cache if k[0] == "region"}
    panel.profile.value = True  # the observer redraws
    assert panel.message.value == ""
    assert any(k[0] == "region" and k[1:3] == ("a", "c") for k in est._profiler._cache)
