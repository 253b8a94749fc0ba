"""An exported report opened in headless Chromium: no console errors, every table rendered,
every image decoded, a screenshot kept; markup in names shows as text and runs nothing.

Needs Debian's ``chromium`` (``apt-get install -y chromium``) and, for the console checks,
Playwright for Python (``pip install playwright``; its bundled browsers are NOT used, so
``playwright install`` is not needed). Without Playwright the test falls back to
``chromium --headless --dump-dom`` with a check script injected into a test copy.
Screenshots go to ``$ODEINFER_TEST_ARTIFACTS`` if set, else the pytest tmp dir.
"""

import os
import re
import subprocess

import numpy as np
import pytest
import sympy as sp

import odeinfer as oi
from odeinfer.model import Model

from _browser import CHROMIUM, artifacts as _artifacts

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not found: install it with "
                                                           "`apt-get install -y chromium` (Debian package)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
EVIL = "<script>window.__pwned=1;alert(1)</script>"


@pytest.fixture(scope="module")
def report_path(tmp_path_factory):
    import arviz as az
    from matplotlib.figure import Figure

    z = oi.zoo.get("lotka_volterra")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=z.sigma, rng=1, name="simulated")
    oc = oi.OrthogonalConditions().fit(z.model, data)
    gm = oi.GradientMatching().fit(z.model, data)
    rng = np.random.default_rng(0)
    idata = az.from_dict(posterior={p: rng.normal(v, 0.05 * v, (2, 300)) for p, v in z.params.items()},
                         sample_stats={"diverging": np.zeros((2, 300), bool)})
    fig = Figure(figsize=(4, 3))
    fig.add_subplot().plot([0, 1, 2], [0, 1, 0])
    fig.set_label("a user figure")
    path = tmp_path_factory.mktemp("report") / "lv.html"
    return oi.report.export_html([oc, gm, data, idata, fig, "Notes."], path, title="Browser check")


@pytest.fixture(scope="module")
def evil_path(tmp_path_factory):
    x, k = sp.symbols("x k", real=True)
    model = Model(name=EVIL, states=("<img src=x onerror=window.__pwned=2>",), params=("k",), exprs=(-k * x,))
    est = oi.Estimate(EVIL, model, ("k", f"x0[{model.states[0]}]"), [0.5, 1.0], np.eye(2) * 0.01, "converged",
                      message=EVIL, warnings=(EVIL,))
    path = tmp_path_factory.mktemp("evil") / "evil.html"
    oi.report.export_html([est, model, EVIL], path, title=EVIL, plots=False)
    # Test copy without the Content-Security-Policy, so that this checks the escaping alone.
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"<meta http-equiv='Content-Security-Policy'[^>]*>", "", text)
    assert "Content-Security-Policy" not in text
    copy = path.with_name("evil-nocsp.html")
    copy.write_text(text, encoding="utf-8")
    return copy


def _playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    return sync_playwright


def _open(url, fn):
    sync_playwright = _playwright()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS[1:])
        try:
            page = browser.new_page()
            events = {"console": [], "pageerror": [], "dialog": [], "request": []}
            page.on("console", lambda m: events["console"].append((m.type, m.text)))
            page.on("pageerror", lambda e: events["pageerror"].append(str(e)))
            page.on("dialog", lambda d: (events["dialog"].append(d.message), d.dismiss()))
            page.on("request", lambda r: events["request"].append(r.url))
            page.goto(url, wait_until="load")
            return fn(page, events)
        finally:
            browser.close()


_CHECK_JS = """() => {
  const imgs = Array.from(document.images);
  const tables = Array.from(document.querySelectorAll('table'));
  return {
    n_img: imgs.length,
    img_ok: imgs.filter(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0).length,
    n_table: tables.length,
    table_ok: tables.filter(t => t.getBoundingClientRect().height > 0 && t.rows.length > 0).length,
    n_script: document.scripts.length,
    sections: Array.from(document.querySelectorAll('section')).map(s => s.id),
  };
}"""


def _count_source(text):
    return text.count("<table"), len(re.findall(r"<img ", text))


@pytest.mark.skipif(_playwright() is None, reason="playwright for Python not installed (pip install playwright)")
def test_report_in_chromium_playwright(report_path, tmp_path):
    text = report_path.read_text(encoding="utf-8")
    n_table, n_img = _count_source(text)
    shot = os.path.join(_artifacts(tmp_path), "report.png")

    def check(page, events):
        info = page.evaluate(_CHECK_JS)
        page.screenshot(path=shot, full_page=True)
        return info, events

    info, events = _open(report_path.as_uri(), check)
    assert [c for c in events["console"] if c[0] in ("error", "warning")] == []
    assert events["pageerror"] == []
    assert [u for u in events["request"] if not u.startswith(("file:", "data:"))] == []   # no network
    assert info["n_table"] == n_table and info["table_ok"] == n_table and n_table >= 5
    assert info["n_img"] == n_img and info["img_ok"] == n_img and n_img >= 1
    assert info["n_script"] == 0
    assert {"model", "data", "estimates", "comparison", "posterior", "diagnostics", "plots"} <= set(info["sections"])
    assert os.path.getsize(shot) > 10_000


@pytest.mark.skipif(_playwright() is None, reason="playwright for Python not installed (pip install playwright)")
def test_markup_in_names_shows_as_text_and_runs_nothing(evil_path, tmp_path):
    def check(page, events):
        page.screenshot(path=os.path.join(_artifacts(tmp_path), "evil.png"), full_page=True)
        return page.evaluate("() => [window.__pwned === undefined, document.scripts.length, "
                             "document.body.innerText, document.title]"), events

    (clean, n_script, body, title), events = _open(evil_path.as_uri(), check)
    assert clean and n_script == 0 and events["dialog"] == [] and events["pageerror"] == []
    assert EVIL in body and "<img src=x onerror=window.__pwned=2>" in body
    assert title == EVIL


def _dump_dom(path, tmp_path, extra_flags=()):
    out = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}",
                          "--virtual-time-budget=5000", *extra_flags, "--dump-dom", path.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_report_in_chromium_cli(report_path, tmp_path):
    """Without Playwright: --dump-dom of a test copy with an injected check script (CSP removed
    from the copy only), and --screenshot."""
    text = report_path.read_text(encoding="utf-8")
    n_table, n_img = _count_source(text)
    probe = ("<script>window.addEventListener('load', () => { const r = (" + _CHECK_JS + ")();"
             "document.body.setAttribute('data-probe', JSON.stringify(r)); });</script>")
    copy = tmp_path / "probe.html"
    copy.write_text(re.sub(r"<meta http-equiv='Content-Security-Policy'[^>]*>", "", text)
                    .replace("</body>", probe + "</body>"), encoding="utf-8")
    dom = _dump_dom(copy, tmp_path)
    m = re.search(r'data-probe="([^"]*)"', dom)
    assert m, dom[:500]
    import html
    import json

    info = json.loads(html.unescape(m.group(1)))
    assert info["n_table"] == n_table and info["table_ok"] == n_table
    assert info["n_img"] == n_img and info["img_ok"] == n_img
    shot = os.path.join(_artifacts(tmp_path), "report-cli.png")
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1200,2400",
                    f"--screenshot={shot}", report_path.as_uri()], capture_output=True, timeout=120)
    assert os.path.getsize(shot) > 10_000


def test_markup_in_names_cli(evil_path, tmp_path):
    dom = _dump_dom(evil_path, tmp_path)
    assert "<script" not in dom.replace("&lt;script", "")
    assert "&lt;script&gt;window.__pwned=1;alert(1)&lt;/script&gt;" in dom
