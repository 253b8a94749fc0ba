"""``export_html(..., interactive=True)``: the embedded data and the viewer, opened in headless
Chromium with every request routed through the test (any request other than the report file
itself fails the test); the plot elements are counted and the pair drop-down is switched.

Needs Debian's ``chromium`` and Playwright for Python (its bundled browsers are not used).
Screenshots go to ``$ODEINFER_TEST_ARTIFACTS`` if set, else the pytest tmp dir.
"""

import json
import os
import re

import numpy as np
import pytest
import sympy as sp

import odeinfer as oi
from odeinfer.errors import InputError
from odeinfer.model import Model
from odeinfer.report._interactive import json_for_script, viewer_source

from _browser import CHROMIUM, FLAGS, artifacts as _artifacts, lv_fits, playwright as _playwright

HOSTILE = "</script><script>window.__pwned=1</script><!--"


browser_test = pytest.mark.skipif(
    CHROMIUM is None or _playwright() is None,
    reason="needs headless Chromium (`apt-get install -y chromium`) and Playwright for Python (`pip install playwright`)")


@pytest.fixture(scope="module")
def lv():
    import arviz as az

    z, data, oc, gm = lv_fits()
    rng = np.random.default_rng(0)
    idata = az.from_dict(posterior={p: rng.normal(v, 0.05 * v, (2, 300)) for p, v in z.params.items()})
    return z, data, oc, gm, idata


@pytest.fixture(scope="module")
def report(lv, tmp_path_factory):
    z, data, oc, gm, idata = lv
    path = tmp_path_factory.mktemp("interactive") / "lv.html"
    oi.report.export_html([oc, gm, data, idata], path, title="Interactive check", interactive=True)
    return path


def _embedded(text):
    m = re.search(r"<script type='application/json' id='oi-data'>(.*?)</script>", text, re.S)
    assert m
    return json.loads(m.group(1))


def _open(path, fn):
    """Open ``path`` with every request intercepted: the file itself is served, anything else
    is aborted and recorded."""
    url = path.as_uri()
    with _playwright()() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            context = browser.new_context(viewport={"width": 1200, "height": 900})
            events = {"console": [], "pageerror": [], "requests": [], "blocked": []}

            def route(r):
                events["requests"].append(r.request.url)
                if r.request.url == url:
                    r.continue_()
                else:
                    events["blocked"].append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            page = context.new_page()
            page.on("console", lambda m: events["console"].append((m.type, m.text)))
            page.on("pageerror", lambda e: events["pageerror"].append(str(e)))
            page.goto(url, wait_until="load")
            page.wait_for_selector("#oi-explorer[data-ready='1']", timeout=10_000)
            return fn(page, events)
        finally:
            browser.close()


_COUNT = """() => {
  const q = s => document.querySelectorAll('#oi-explorer ' + s).length;
  return {ellipse: q('path.oi-ellipse'), estimate: q('circle.oi-estimate'), draw: q('circle.oi-draw'),
          hdr: q('path.oi-hdr'), mean: q('rect.oi-posterior-mean'), fit: q('path.oi-fit'), band: q('path.oi-band'), data: q('circle.oi-data'),
          interval: q('path.oi-interval'), svg: q('svg'),
          points: Array.from(document.querySelectorAll('#oi-explorer circle.oi-draw'))
                       .slice(0, 20).map(c => c.getAttribute('cx') + ',' + c.getAttribute('cy')).join(' '),
          ellipse_d: Array.from(document.querySelectorAll('#oi-explorer path.oi-ellipse')).map(p => p.getAttribute('d'))};
}"""


def test_embedded_data_are_the_estimates(lv, report):
    z, data, oc, gm, idata = lv
    d = _embedded(report.read_text(encoding="utf-8"))
    assert [s["label"] for s in d["sources"]] == ["OrthogonalConditions", "GradientMatching"]
    for s, e in zip(d["sources"], (oc, gm)):
        assert s["values"] == pytest.approx(dict(zip(e.names, e.values)), rel=1e-5)
    assert len(d["regions"]) == 6  # 4 parameters: 6 pairs
    post = np.asarray(idata.posterior["alpha"]).ravel()
    assert d["posterior"]["summary"]["alpha"]["mean"] == pytest.approx(post.mean(), rel=1e-5)
    assert d["trajectories"][0]["y"][:3] == pytest.approx(data.y[:3, 0], rel=1e-5)
    # An ellipse point satisfies (x - c)' S^-1 (x - c) = chi2_2(0.95) = 5.991 (chi-square table).
    i = [oc.names.index("alpha"), oc.names.index("beta")]
    S = np.asarray(oc.cov)[np.ix_(i, i)]
    xs, ys = d["regions"][0]["ellipses"]["OrthogonalConditions"]
    r = np.array([xs[7], ys[7]]) - np.asarray(oc.values)[i]
    assert r @ np.linalg.solve(S, r) == pytest.approx(5.991, rel=1e-3)


@browser_test
def test_interactive_report_renders_offline_and_switches_pairs(lv, report, tmp_path):
    n_obs = int(np.isfinite(lv[1].y).sum())  # one circle per observation
    shots = _artifacts(tmp_path)

    def check(page, events):
        first = page.evaluate(_COUNT)
        page.screenshot(path=os.path.join(shots, "interactive.png"), full_page=True)
        page.select_option("#oi-pair-y", "gamma")
        second = page.evaluate(_COUNT)
        page.uncheck("input[data-source='GradientMatching']")
        third = page.evaluate(_COUNT)
        page.uncheck("input[data-source='posterior']")
        fourth = page.evaluate(_COUNT)
        page.screenshot(path=os.path.join(shots, "interactive-switched.png"), full_page=True)
        return first, second, third, fourth, events

    first, second, third, fourth, events = _open(report, check)
    assert events["blocked"] == [] and events["requests"] == [report.as_uri()]  # nothing left the page
    assert events["pageerror"] == [] and [c for c in events["console"] if c[0] in ("error", "warning")] == []
    # 2 estimators: 2 ellipses, 2 points; 400 posterior draws; 2 states x 2 estimators fitted lines.
    assert first["ellipse"] == 2 and first["estimate"] == 2 and first["draw"] == 400 and first["hdr"] >= 1
    assert first["mean"] == 1
    assert first["fit"] == 4 and first["data"] == n_obs and first["svg"] == 4
    assert first["interval"] == 4 * (2 + 2)  # per parameter: 2 Wald + posterior equal-tailed and HDI
    # another pair: other points, other ellipses
    assert second["draw"] == 400 and second["points"] != first["points"]
    assert second["ellipse_d"] != first["ellipse_d"]
    assert third["ellipse"] == 1 and third["estimate"] == 1 and third["fit"] == 2
    assert fourth["draw"] == 0 and fourth["hdr"] == 0 and fourth["mean"] == 0
    assert os.path.getsize(os.path.join(shots, "interactive.png")) > 20_000


@browser_test
def test_hostile_model_name_cannot_break_out_of_the_data_block(tmp_path):
    x, k = sp.symbols("x k", real=True)
    model = Model(name=HOSTILE, states=(HOSTILE,), params=("k",), exprs=(-k * x,))
    est = oi.Estimate(HOSTILE, model, ("k", f"x0[{HOSTILE}]"), [0.5, 1.0], np.eye(2) * 0.01, "converged")
    path = tmp_path / "evil.html"
    oi.report.export_html([est, HOSTILE], path, title=HOSTILE, plots=False, interactive=True)
    text = path.read_text(encoding="utf-8")
    assert text.lower().count("</script") == 2  # the data block's and the viewer's own
    assert _embedded(text)["sources"][0]["model"] == HOSTILE

    def check(page, events):
        return page.evaluate("() => [window.__pwned === undefined, document.scripts.length, "
                             "document.querySelector('#oi-explorer').innerText]"), events

    (clean, n_script, shown), events = _open(path, check)
    assert clean and n_script == 2 and events["pageerror"] == [] and events["blocked"] == []
    assert HOSTILE in shown  # the name is drawn as text


def test_json_for_script_escapes_markup():
    text = json_for_script({"a": "</script><!--&\u2028"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"a": "</script><!--&\u2028"}
    assert "</script" not in viewer_source().lower()


def test_static_report_has_no_script(lv):
    z, data, oc, gm, idata = lv
    text = oi.report.render_html([oc], plots=False)
    assert "<script" not in text and "script-src" not in text


def test_csp_allows_only_the_viewer(lv):
    import base64
    import hashlib

    z, data, oc, gm, idata = lv
    text = oi.report.render_html([oc], plots=False, interactive=True)
    digest = base64.b64encode(hashlib.sha256(viewer_source().encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in text and "unsafe-inline' ;" not in text


def test_bad_interactive_and_unwritable_path_fail_before_any_work(lv, tmp_path, monkeypatch):
    z, data, oc, gm, idata = lv

    def build(*args, **kwargs):
        raise AssertionError("the report was built before the checks")

    monkeypatch.setattr(oi.report, "build_html", build)
    with pytest.raises(InputError, match=r"interactive: expected True .* or False .*, got 'yes'"):
        oi.report.export_html([oc], tmp_path / "r.html", interactive="yes")
    with pytest.raises(InputError, match=r"path: the directory .*missing.* does not exist; create it first"):
        oi.report.export_html([oc], tmp_path / "missing" / "r.html", interactive=True)
    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    with pytest.raises(InputError, match=r"path: no permission to write in the directory .*ro.*; choose a writable"):
        oi.report.export_html([oc], ro / "r.html", interactive=True)
    assert not (ro / "r.html").exists()


def test_posterior_alone_gets_regions_and_no_trajectories(lv):
    z, data, oc, gm, idata = lv
    from odeinfer.report._interactive import payload

    d = payload([], [data], idata, title="t", alpha=0.05)
    assert d["names"] == list(z.params) and d["sources"] == [] and d["trajectories"] == []
    assert len(d["regions"]) == 6 and all(r["hdr"] and not r["ellipses"] for r in d["regions"])
    assert d["posterior"]["n_draws"] == 600 and len(d["posterior"]["draws"]["alpha"]) == 400
    json_for_script(d)  # no NaN left: JSON without NaN/Infinity


def test_estimate_without_covariance_is_a_point_without_ellipse(lv):
    z, data, oc, gm, idata = lv
    from odeinfer.report._interactive import payload

    bare = oi.Estimate("Bare", oc.model, oc.names, oc.values, None, "converged")
    d = payload([bare], [data], None, title="t", alpha=0.05)
    assert d["posterior"] is None and all(r["ellipses"] == {} for r in d["regions"])
    assert d["sources"][0]["values"]["alpha"] == pytest.approx(oc.values[0], rel=1e-5)
    assert d["intervals"].get("Bare", {}) == {}  # no covariance: no Wald interval


def _likelihood_fit():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_lf", Path(__file__).with_name("test_likelihood_fit.py"))
    lf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lf)
    exps = lf.two_conditions(np.random.default_rng(3))
    return exps, oi.Embedding().fit(lf.problem(exps))


def test_likelihood_fit_gets_observables_per_experiment_and_profile_intervals():
    from odeinfer.report._interactive import payload

    exps, fit = _likelihood_fit()
    d = payload([fit], [], None, title="t", alpha=0.05)
    assert [p["state"] for p in d["trajectories"]] == ["signal (A)", "signal (B)"]
    b = d["trajectories"][1]
    assert b["y"] == pytest.approx(exps["B"].y[:, 0], rel=1e-5)
    assert b["t"] == pytest.approx(exps["B"].t, rel=1e-5)
    assert len(b["fits"]["Embedding"]["y"]) == 200 and "lo" in b["fits"]["Embedding"]
    iv = d["intervals"]["Embedding"]["k1"]
    assert set(iv) == {"wald", "profile"}
    k1 = d["sources"][0]["values"]["k1"]
    assert iv["profile"][0] < k1 < iv["profile"][1]
