"""oi.analyze: the standard analysis in one call (matching estimate, trajectory fit, profile
intervals, seeded posterior, diagnostics, Wald vs profile vs posterior-credible table), shown in
Jupyter as a summary with tabs and exported with export_html.

One tiny run (Lotka-Volterra, 1 chain x 30 draws) serves the tests; the credible bounds are
checked against quantiles computed here from the raw draws.
"""

import re
import warnings

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import InputError

LV = oi.zoo.get("lotka_volterra")
DRAWS = 30


@pytest.fixture(scope="module")
def data():
    return oi.simulate(LV.model, LV.params, LV.x0, LV.t, noise=1.0, rng=1).data


@pytest.fixture(scope="module")
def analysis(data):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = oi.analyze(LV.model, data, draws=DRAWS, tune=DRAWS, chains=1, progress=None, rng=3)
    res.caught = caught
    return res


def test_result_fields(analysis, data):
    assert analysis.model is LV.model and analysis.data is data
    assert analysis.matching.estimator == "OrthogonalConditions"
    fit = analysis.fit
    assert fit.estimator == "Embedding" and fit.converged
    assert fit.provenance["start"] == {"source": "user", "estimate": "OrthogonalConditions"}  # handed on by run
    post = analysis.idata.posterior
    assert post.sizes["chain"] == 1 and post.sizes["draw"] == DRAWS
    assert analysis.diagnostics is not None
    assert analysis.settings["draws"] == DRAWS and analysis.settings["alpha"] == 0.05
    assert [n.split(":")[0] for n in analysis.notes][:2] == ["OrthogonalConditions", "Embedding"]


def test_interval_table_columns_and_values(analysis):
    tab = analysis.intervals
    assert list(tab.columns) == ["estimate", "se", "wald_lower", "wald_upper", "profile_lower", "profile_upper",
                                 "posterior_mean", "credible_lower", "credible_upper"]
    fit = analysis.fit
    assert list(tab.index) == list(fit.names)
    np.testing.assert_allclose(tab["estimate"], fit.values)
    # Wald: estimate -+ 1.959964 se, computed here
    np.testing.assert_allclose(tab["wald_lower"], fit.values - 1.959963984540054 * fit.bse.to_numpy(), rtol=1e-9)
    assert np.all(tab["profile_lower"] < tab["estimate"]) and np.all(tab["estimate"] < tab["profile_upper"])
    # credible: equal-tailed 95% from the raw draws
    for name in LV.model.params:
        x = np.asarray(analysis.idata.posterior[name]).ravel()
        lo, hi = np.quantile(x, [0.025, 0.975])
        assert tab.loc[name, "credible_lower"] == pytest.approx(lo)
        assert tab.loc[name, "credible_upper"] == pytest.approx(hi)
        assert tab.loc[name, "posterior_mean"] == pytest.approx(x.mean())


def test_repr_html_has_tabs_and_nothing_remote(analysis):
    page = analysis._repr_html_()
    labels = re.findall(r"<label for='([^']+)'[^>]*>([^<]+)</label>", page)
    assert [t for _, t in labels] == ["Summary", "Estimates", "Intervals", "Posterior", "Diagnostics"]
    for ident, _ in labels:  # every label switches a radio input of the same id
        assert f"<input type='radio' id='{ident}'" in page
    assert page.count("class='oi-panel'") == 5
    assert "<script" not in page.lower() and not re.search(r"(src|href)=['\"]?https?:", page)
    assert "credible_lower" in page and "Embedding" in page and "user (OrthogonalConditions)" in page
    assert analysis._repr_html_() != page  # unique ids per display (two outputs in one notebook do not clash)


def test_export_html(analysis, tmp_path):
    path = analysis.export_html(tmp_path / "analysis.html")
    text = path.read_text()
    assert "Wald vs profile vs posterior" in text and "credible_lower" in text
    with pytest.raises(InputError, match=r"path: the directory .*missing.* does not exist"):
        analysis.export_html(tmp_path / "missing" / "analysis.html")
    with pytest.raises(InputError, match=r"is a directory"):
        analysis.export_html(tmp_path)


def test_export_path_checked_before_any_work(monkeypatch, data, tmp_path):
    import odeinfer.pipeline as pl

    monkeypatch.setattr(pl, "run", lambda *a, **k: pytest.fail("the analysis ran before the path was checked"))
    with pytest.raises(InputError, match=r"out: the directory .*missing.* does not exist"):
        oi.analyze(LV.model, data, out=tmp_path / "missing" / "a.html", progress=None)


def test_no_arviz_future_warning(analysis):
    assert not [w for w in analysis.caught if issubclass(w.category, FutureWarning) and "arviz" in w.filename]


@pytest.mark.parametrize("kwargs, match", [
    ({"draws": 0}, r"draws: expected a positive integer, got 0"),
    ({"chains": 1.5}, r"chains: expected a positive integer, got 1.5"),
    ({"alpha": 1.5}, r"alpha: expected a number in \(0, 1\)"),
    ({"fast": "yes"}, r"fast: expected True or False, got 'yes'"),
])
def test_bad_settings_refused_before_work(monkeypatch, data, kwargs, match):
    import odeinfer.pipeline as pl

    monkeypatch.setattr(pl, "run", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(InputError, match=match):
        oi.analyze(LV.model, data, progress=None, **kwargs)


def test_fast_preset():
    from odeinfer.pipeline import sampling_settings

    assert sampling_settings(fast=True) == {"draws": 100, "tune": 100, "chains": 2}
    assert sampling_settings(fast=False) == {"draws": 1000, "tune": 500, "chains": 2}
    assert sampling_settings(fast=True, draws=7) == {"draws": 7, "tune": 100, "chains": 2}


def test_interval_table_without_profile_or_posterior(data):
    """An estimate without a profiler (after a JSON round trip) and no posterior: NaN columns, and one
    note for all quantities that lack a profile interval."""
    from odeinfer.pipeline import _interval_table

    fit = oi.Embedding().fit(LV.model, data, start=LV.params)
    back = oi.Estimate.from_json(fit.to_json(), model=LV.model)
    tab = _interval_table(back, None, 0.1, True)
    assert tab[["profile_lower", "profile_upper", "posterior_mean", "credible_lower", "credible_upper"]].isna().all(
        axis=None)
    np.testing.assert_allclose(tab["wald_upper"], back.values + 1.6448536269514722 * back.bse.to_numpy(), rtol=1e-9)
    (note,) = tab.attrs["notes"]
    assert note.startswith(f"profile interval of {list(back.names)}: not available")
    assert tab.attrs["title"] == "Embedding: Wald vs profile vs posterior 90% intervals"
