"""``export_notebook_html(..., offline=True)``: an executed notebook with ipywidgets, opened in
headless Chromium with every request routed through the test; the widgets are drawn by the
inlined widget manager and nothing leaves the page.

Needs Debian's ``chromium``, Playwright for Python, nbclient + ipykernel, and the vendored
widget manager (shipped in the wheel; a source checkout runs ``python tools/vendor_widget_manager.py``).
Screenshots go to ``$ODEINFER_TEST_ARTIFACTS`` if set, else the pytest tmp dir.
"""

import os
import shutil
import warnings

import pytest

import odeinfer as oi
from odeinfer.errors import InputError, OdeinferWarning
from odeinfer.report import _notebook

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbconvert")

CHROMIUM = os.environ.get("ODEINFER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
HOSTILE = "</script><script>window.__pwned=1</script>"


def _playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    return sync_playwright


def _notebook_file(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Widgets offline"),
                nbformat.v4.new_code_cell(
                    "import ipywidgets as w\n"
                    f"s = w.FloatSlider(value=0.4, min=0, max=1, description={HOSTILE!r})\n"
                    "b = w.Button(description='reset')\n"
                    "w.VBox([s, b, w.Label('solver: ok')])")]
    src = tmp_path / "nb.ipynb"
    nbformat.write(nb, src)
    return src


@pytest.mark.skipif(CHROMIUM is None or _playwright() is None,
                    reason="needs headless Chromium (`apt-get install -y chromium`) and Playwright for Python")
@pytest.mark.skipif(_notebook.widget_manager_source() is None,
                    reason="widget manager not vendored: run `python tools/vendor_widget_manager.py` (needs npm)")
def test_offline_notebook_renders_widgets_without_network(tmp_path):
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    out = oi.report.export_notebook_html(_notebook_file(tmp_path), tmp_path / "nb.html", execute=True,
                                         timeout=120, offline=True)
    text = out.read_text(encoding="utf-8")
    assert "application/vnd.jupyter.widget-state+json" in text
    assert "https://" not in text.split("<script>")[0].split("<style")[0]  # nothing fetched from the head
    url = out.as_uri()
    shots = os.environ.get("ODEINFER_TEST_ARTIFACTS") or str(tmp_path)
    os.makedirs(shots, exist_ok=True)
    with _playwright()() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            context = browser.new_context(viewport={"width": 1000, "height": 700})
            requests = []

            def route(r):
                requests.append(r.request.url)
                r.continue_() if r.request.url == url else r.abort()

            context.route("**/*", route)
            page = context.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url, wait_until="load")
            page.wait_for_selector(".widget-slider", timeout=15_000)
            info = page.evaluate("""() => ({
                slider: document.querySelectorAll('.widget-slider').length,
                button: Array.from(document.querySelectorAll('button')).filter(b => b.textContent === 'reset').length,
                label: Array.from(document.querySelectorAll('.widget-label')).map(l => l.textContent),
                pwned: window.__pwned !== undefined})""")
            page.screenshot(path=os.path.join(shots, "notebook-offline.png"), full_page=True)
        finally:
            browser.close()
    assert requests == [url]  # no request left the page
    assert errors == []
    assert info["slider"] == 1 and info["button"] == 1 and not info["pwned"]
    assert "solver: ok" in info["label"] and HOSTILE in info["label"]  # the description is text


def test_offline_without_the_widget_manager_is_refused_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setattr(_notebook, "widget_manager_source", lambda: None)
    src = tmp_path / "a.ipynb"
    src.write_text("{}")  # never read: the check comes first
    with pytest.raises(InputError, match=r"offline: True needs the vendored Jupyter widget manager .*"
                                         r"tools/vendor_widget_manager.py.*offline=False"):
        oi.report.export_notebook_html(src, tmp_path / "a.html", execute=True, offline=True)
    assert not (tmp_path / "a.html").exists()


def test_bad_offline_argument(tmp_path):
    with pytest.raises(InputError, match=r"offline: expected True .*, False .* or None .*, got 'yes'"):
        oi.report.export_notebook_html(tmp_path / "a.ipynb", tmp_path / "a.html", offline="yes")


def test_unwritable_output_is_refused_before_running(tmp_path):
    src = _notebook_file(tmp_path)
    with pytest.raises(InputError, match=r"out: the directory .*nope.* does not exist"):
        oi.report.export_notebook_html(src, tmp_path / "nope" / "a.html", execute=True, offline=None)


def test_not_vendored_falls_back_to_the_cdn_page_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(_notebook, "widget_manager_source", lambda: None)
    src = _notebook_file(tmp_path)
    with pytest.warns(OdeinferWarning, match="widget manager is not vendored.*tools/vendor_widget_manager.py"):
        out = oi.report.export_notebook_html(src, tmp_path / "a.html")
    assert "require.min.js" in out.read_text(encoding="utf-8")  # nbconvert's page, scripts from a CDN


def test_inlined_manager_cannot_close_its_script(monkeypatch, tmp_path):
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / "html-manager-embed.js").write_text("var a = '</SCRIPT><!--';")

    class Files:
        def joinpath(self, name):
            return tmp_path / name

    monkeypatch.setattr(_notebook.resources, "files", lambda pkg: Files())
    text = _notebook.widget_manager_source()
    assert "</script" not in text.lower() and "<!--" not in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert text == "var a = '<\\/SCRIPT><\\!--';"
