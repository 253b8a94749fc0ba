"""Widgets on models with observables (issue 14, item 7): Explorer draws the observables, FitPanel and
RegionPanel show a likelihood fit's data and fitted observables with bands (oi.plots.observables).

Reference: the closed form of a -> b -> (degradation), b(t) = a0 k1/(k2 - k1) (exp(-k1 t) - exp(-k2 t)),
so the observable ``s * b`` is known without odeinfer's solver (rtol 1e-5 covers the view solver's
default tolerances, 1e-6 relative)."""

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import InputError

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")


@oi.model(states=["a", "b"], params=["k1", "k2"])
def chain(t, y, p):
    return {"a": -p.k1 * y.a, "b": p.k1 * y.a - p.k2 * y.b}


OBS = chain.observe({"signal": "s * b"}, noise=oi.Normal(sigma="sd"), params=["s", "sd"])
T = np.linspace(0.5, 8.0, 30)
X0 = {"a": 1.0, "b": 0.0}
START = {"k1": 1.0, "k2": 0.3, "s": 2.0, "sd": 0.1}


def closed_b(k1, k2, t, a0=1.0):
    return a0 * k1 / (k2 - k1) * (np.exp(-k1 * t) - np.exp(-k2 * t))


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(4)
    y = 3.0 * closed_b(0.9, 0.25, T) + 0.08 * rng.standard_normal(T.size)
    data = oi.Data(T, y, "signal", t0=0.0, name="run1")
    fit = oi.Embedding().fit(OBS, data, start=START, x0=X0)
    assert fit.converged, fit.message
    return data, fit


def test_explorer_draws_observables_from_a_likelihood_fit(setup):
    data, fit = setup
    ex = oi.widgets.Explorer(OBS, data, start=fit)
    assert ex.names == ["k1", "k2", "s", "sd", "x0[a]", "x0[b]"]
    assert ex.curves == ["signal"]
    v = ex.values()
    assert [v["x0[a]"], v["x0[b]"]] == [1.0, 0.0]  # the fit's problem's initial state
    p = fit.params
    ref = p["s"] * closed_b(p["k1"], p["k2"], ex.sim.t)
    np.testing.assert_allclose(ex.lines["signal"].get_ydata(), ref, rtol=1e-5, atol=1e-7)
    ex.set_values(s=2.0, **{"x0[a]": 2.0})  # an observable parameter and an initial state move the curve
    np.testing.assert_allclose(ex.lines["signal"].get_ydata(), 2.0 * closed_b(p["k1"], p["k2"], ex.sim.t, 2.0),
                               rtol=1e-5, atol=1e-7)
    assert ex.image.value[:8] == b"\x89PNG\r\n\x1a\n"


def test_explorer_bad_input_with_observables(setup):
    data, fit = setup
    with pytest.raises(InputError, match=r"data: columns \['b'\] are not observables of model 'chain' "
                                         r"\(observables: \['signal'\]\)"):
        oi.widgets.Explorer(OBS, oi.Data(T, np.ones(T.size), "b"), start=fit)
    with pytest.raises(InputError, match=r"x0: no initial value for state 'a'"):
        oi.widgets.Explorer(OBS, data, start=START)


def test_fit_panel_shows_the_fitted_observables(setup):
    data, fit = setup
    panel = oi.widgets.FitPanel(OBS, data, estimators=["GradientMatching", "Embedding"],
                                selected=["GradientMatching", "Embedding"], start=START, x0=X0)
    table = panel.run()
    # gradient matching cannot use an observable with an unknown scale: an error row that names it
    assert table.loc["GradientMatching", "status"] == "error"
    assert "'signal' (uses the parameters ['s'], which are not fixed" in table.loc["GradientMatching", "message"]
    assert table.loc["Embedding", "status"] == "converged"
    np.testing.assert_allclose(table.loc["Embedding", list(fit.names)].to_numpy(float), fit.values, rtol=1e-8)
    assert panel.shown.options == ("Embedding",) and panel.shown.value == "Embedding"
    assert panel.observables.value[:8] == b"\x89PNG\r\n\x1a\n" and panel.observables_message.value == ""
    # the plot is oi.plots.observables of that fit: drawing it directly gives the same picture
    from odeinfer.widgets._common import observables_png

    assert panel.observables.value == observables_png(panel.estimates["Embedding"], panel.dpi)


def test_fit_panel_without_likelihood_fit_says_so(setup):
    data, _ = setup
    panel = oi.widgets.FitPanel(OBS, data, estimators=["GradientMatching"], start=START)
    panel.run()
    assert panel.shown.options == () and panel.observables.value == b""
    assert "no likelihood fit to draw" in panel.observables_message.value


def test_region_panel_shows_the_first_ticked_likelihood_fit(setup, monkeypatch):
    import sys

    data, fit = setup
    panel = oi.widgets.RegionPanel([fit], pair=("k1", "k2"))
    assert panel.observables.value[:8] == b"\x89PNG\r\n\x1a\n"
    panel.checkboxes["Embedding"].value = False
    assert panel.observables.value == b""
    monkeypatch.setitem(sys.modules, "odeinfer.plots", None)
    panel.checkboxes["Embedding"].value = True
    assert "observables plot unavailable: ModuleNotFoundError" in panel.message.value
