"""odeinfer.report: standalone HTML export (sections, escaping, no network, atomic writes, errors)."""

import os
import re
import sys

import numpy as np
import pytest
import sympy as sp

import odeinfer as oi
from odeinfer import _io
from odeinfer.errors import InputError
from odeinfer.model import Model

from _browser import lv_fits

EVIL = "<script>window.__pwned=1</script>"


@pytest.fixture(scope="module")
def lv():
    return lv_fits()


def _idata(z, shift=0.0, chains=2, draws=300, seed=0):
    import arviz as az

    rng = np.random.default_rng(seed)
    post = {p: rng.normal(v, 0.05 * abs(v), (chains, draws)) + shift * np.arange(chains)[:, None] * abs(v)
            for p, v in z.params.items()}
    post["x0"] = rng.normal(list(z.x0.values()), 1.0, (chains, draws, len(z.x0)))
    return az.from_dict(posterior=post, dims={"x0": ["state"]}, coords={"state": list(z.model.states)},
                        sample_stats={"diverging": np.zeros((chains, draws), bool)})


def _figure(label="a figure"):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3, 2))
    fig.add_subplot().plot([0, 1, 2], [1, 0, 1])
    fig.set_label(label)
    return fig


def _evil_model():
    # Model() itself does not validate names (the decorator and from_equations do), so a display
    # test can put markup in every name a report shows.
    x, k = sp.symbols("x k", real=True)
    return Model(name=EVIL, states=("<img src=x onerror=alert(1)>",), params=("k",), exprs=(-k * x,))


def test_full_report_has_every_section_and_is_standalone(lv, tmp_path):
    z, data, oc, gm = lv
    idata = _idata(z)
    path = oi.report.export_html([oc, gm, data, idata, _figure(), "Some notes.", oc.cov_params()],
                                 tmp_path / "r.html", title="LV report")
    text = path.read_text(encoding="utf-8")
    for sec in ("notes", "model", "data", "estimates", "comparison", "posterior", "diagnostics", "tables", "plots"):
        assert f"<section id='{sec}'>" in text, sec
    # model equations as text, every estimate's table, both estimator names
    assert "dprey/dt = " in text and "dpredator/dt = " in text
    assert "OrthogonalConditions estimate of" in text and "GradientMatching estimate of" in text
    # standalone: no scripts, no external references; images inline
    assert "<script" not in text.lower()
    assert not re.search(r"(?:src|href)\s*=\s*['\"](?!data:)", text)
    assert "http://" not in text and "https://" not in text and "<link" not in text and "@import" not in text
    assert "Content-Security-Policy" in text
    srcs = re.findall(r"<img [^>]*src='([^']*)'", text)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    # nothing else left in the directory (the temporary file was renamed)
    assert sorted(os.listdir(tmp_path)) == ["r.html"]


def test_estimate_table_values_are_the_estimates(lv):
    _, _, oc, _ = lv
    text = oi.report.render_html([oc], plots=False)
    for v in oc.values:
        assert f"{v:.5g}" in text
    assert "converged" in text


def test_data_summary_numbers(lv):
    _, data, _, _ = lv
    text = oi.report.render_html([data], plots=False)
    # independent of the report code: numpy on the raw observations
    for j in range(data.n_observed):
        col = data.y[:, j]
        for v in (np.nanmin(col), np.nanmean(col), np.nanmax(col)):
            assert f"{v:.5g}" in text
    assert f"{data.n_times} times" in text


def test_every_user_text_is_escaped(lv, tmp_path):
    _, data, oc, _ = lv
    model = _evil_model()
    est = oi.Estimate(EVIL, model, ("k", f"x0[{model.states[0]}]"), [0.5, 1.0], np.eye(2) * 0.01, "converged",
                      message=EVIL, warnings=(EVIL,), fixed={EVIL: 1.0}, sigma={model.states[0]: 0.1})
    import pandas as pd

    frame = pd.DataFrame({EVIL: [1.0]}, index=[EVIL])
    frame.attrs["title"] = EVIL
    path = oi.report.export_html([est, model, frame, _figure(EVIL), EVIL], tmp_path / "evil.html", title=EVIL,
                                 subtitle=EVIL, plots=False)
    text = path.read_text(encoding="utf-8")
    assert "<script" not in text.lower()
    assert "<img src=x" not in text
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text


def test_unsupported_item_type_is_a_type_error():
    with pytest.raises(TypeError, match=r"items\[1\]: a report item of type builtins.dict is not supported; "
                                        r"supported types are odeinfer.Model, .*odeinfer.Estimate"):
        oi.report.render_html(["fine", {"a": 1}])
    with pytest.raises(TypeError, match="numpy.ndarray is not supported"):
        oi.report.render_html(np.zeros(3))


def test_bad_arguments():
    with pytest.raises(InputError, match="items: the report is empty"):
        oi.report.render_html([])
    with pytest.raises(InputError, match=r"alpha: expected a float in \(0, 1\)"):
        oi.report.render_html(["x"], alpha=1.5)
    with pytest.raises(InputError, match="title: expected a str"):
        oi.report.render_html(["x"], title=3)
    with pytest.raises(InputError, match="plots: expected True"):
        oi.report.render_html(["x"], plots="yes")
    with pytest.raises(InputError, match="overwrite: expected True or False"):
        oi.report.export_html(["x"], "r.html", overwrite="no")


def test_missing_directory_is_a_clear_error_and_writes_nothing(tmp_path):
    target = tmp_path / "nope" / "r.html"
    with pytest.raises(InputError, match=r"path: the directory .*nope.* does not exist; create it first"):
        oi.report.export_html(["x"], target)
    assert not (tmp_path / "nope").exists() and os.listdir(tmp_path) == []


def test_path_is_a_directory_or_exists_without_overwrite(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        oi.report.export_html(["x"], tmp_path)
    target = tmp_path / "r.html"
    target.write_text("old")
    with pytest.raises(InputError, match="already exists; pass overwrite=True"):
        oi.report.export_html(["x"], target, overwrite=False)
    assert target.read_text() == "old"
    oi.report.export_html(["new text"], target)
    assert "new text" in target.read_text()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_real(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(InputError, match="no permission to write in the directory"):
            oi.report.export_html(["x"], ro / "r.html")
        assert os.listdir(ro) == []
    finally:
        ro.chmod(0o755)


def test_no_write_permission_is_a_clear_error(tmp_path, monkeypatch):
    # Simulated (the test may run as root, whom chmod does not stop): creating the temporary file fails.
    def deny(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_io.tempfile, "mkstemp", deny)
    with pytest.raises(InputError, match=r"path: no permission to write in the directory .*choose a writable"):
        oi.report.export_html(["x"], tmp_path / "r.html")
    assert os.listdir(tmp_path) == []


def test_failure_while_writing_leaves_nothing_half_written(tmp_path, monkeypatch):
    target = tmp_path / "r.html"
    target.write_text("previous report")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_io.os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space left"):
        oi.report.export_html(["x"], target)
    assert os.listdir(tmp_path) == ["r.html"] and target.read_text() == "previous report"

    def denied_replace(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_io.os, "replace", denied_replace)
    with pytest.raises(InputError, match="no permission to write"):
        oi.report.export_html(["x"], target)
    assert os.listdir(tmp_path) == ["r.html"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_overwriting_keeps_the_files_permission_bits(tmp_path):
    target = tmp_path / "r.html"
    target.write_text("private")
    target.chmod(0o600)
    oi.report.export_html(["new text"], target)
    assert "new text" in target.read_text() and (target.stat().st_mode & 0o777) == 0o600
    target.chmod(0o640)
    oi.report.export_html(["again"], target)
    assert (target.stat().st_mode & 0o777) == 0o640


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_a_new_file_gets_the_mode_the_umask_allows(tmp_path):
    old = os.umask(0o077)
    try:
        path = oi.report.export_html(["x"], tmp_path / "new.html")
    finally:
        os.umask(old)
    assert (path.stat().st_mode & 0o777) == 0o600  # 0o666 less the umask, as open(path, "w") gives


def test_a_missing_directory_is_refused_before_the_report_is_built(tmp_path, monkeypatch):
    def build(*args, **kwargs):
        raise AssertionError("the report was built before the output path was checked")

    monkeypatch.setattr(oi.report, "build_html", build)
    with pytest.raises(InputError, match="does not exist"):
        oi.report.export_html(["x"], tmp_path / "nope" / "r.html")


def test_posterior_summary_lists_each_initial_state_once():
    """oi.bayes.build_model samples unknown initial states as scalars 'x0[s]' and also keeps the
    vector 'x0' (dim state) as a deterministic: arviz labels both 'x0[s]'; the report shows each once."""
    import arviz as az

    r = np.random.default_rng(0)
    x0 = {"x0[hare]": r.normal(30, 1, (2, 200)), "x0[lynx]": r.normal(4, 0.2, (2, 200))}
    post = {"alpha": r.normal(0.5, 0.01, (2, 200)), **x0, "x0": np.stack(list(x0.values()), axis=-1)}
    idata = az.from_dict(posterior=post, dims={"x0": ["state"]}, coords={"state": ["hare", "lynx"]})
    html = oi.report.render_html([idata], plots=False)
    posterior, diagnostics = html[html.index("<h2>Posterior</h2>"):].split("<h2>Diagnostics</h2>")
    for part in (posterior, diagnostics):  # the summary table and the table of the checks
        assert re.findall(r"<th>([^<]*)</th>\s*<td>", part) == ["alpha", "x0[hare]", "x0[lynx]"]


def test_missing_plots_module_degrades_to_a_clear_block(lv, monkeypatch):
    _, data, oc, _ = lv
    monkeypatch.setitem(sys.modules, "odeinfer.plots", None)   # import now raises ImportError
    text = oi.report.render_html([oc, data])
    assert "plots unavailable: odeinfer.plots cannot be imported (ModuleNotFoundError" in text
    assert "<section id='estimates'>" in text      # the rest of the report is still there


def test_failing_plot_degrades_to_a_clear_block(lv, monkeypatch):
    plots = pytest.importorskip("odeinfer.plots")
    _, data, oc, _ = lv

    def broken(*args, **kwargs):
        raise RuntimeError("no <ink>")

    monkeypatch.setattr(plots, "forest", broken)
    text = oi.report.render_html([oc, data])
    assert "plot &#x27;intervals&#x27; unavailable: RuntimeError: no &lt;ink&gt;" in text


def test_auto_plots_are_inline_images(lv):
    pytest.importorskip("odeinfer.plots")
    z, data, oc, gm = lv
    text = oi.report.render_html([oc, gm, data, _idata(z)])
    # trajectories, one residual plot per estimate, forest, regions
    assert text.count("<img ") == 5, re.findall(r"unavailable: [^<]*", text)


def test_missing_diagnostics_module_degrades(lv, monkeypatch):
    z, _, oc, _ = lv
    monkeypatch.setitem(sys.modules, "odeinfer.diagnostics", None)
    text = oi.report.render_html([oc, _idata(z)], plots=False)
    assert "interval comparison unavailable: odeinfer.diagnostics.compare_intervals cannot be imported" in text
    assert "odeinfer.diagnostics.check cannot be imported" in text and "max r_hat" in text


def test_fallback_checks_fail_on_chains_that_disagree(lv):
    # Two chains centred 20 sd apart cannot mix: R-hat is far above 1.01 whatever the estimator.
    from odeinfer.report._items import idata_checks

    z = lv[0]
    bad = idata_checks(_idata(z, shift=1.0))
    good = idata_checks(_idata(z, shift=0.0, draws=1000))
    assert re.search(r"max r_hat</td><td>[^<]*</td><td>[^<]*</td><td><span class='badge fail'>", bad)
    assert re.search(r"max r_hat</td><td>[^<]*</td><td>[^<]*</td><td><span class='badge pass'>", good)
    assert re.search(r"divergences</td><td>0</td>", good)


def test_diagnostics_report_item(lv):
    diagnostics = pytest.importorskip("odeinfer.diagnostics")
    z = lv[0]
    rep = diagnostics.check(_idata(z))
    text = oi.report.render_html([rep], plots=False)
    assert "<section id='diagnostics'>" in text and "Sampler diagnostics" in text


def test_interval_comparison_section(lv):
    pytest.importorskip("odeinfer.diagnostics")
    z, _, oc, gm = lv
    text = oi.report.render_html([oc, gm, _idata(z)], plots=False)
    sec = text.split("<section id='comparison'>")[1].split("</section>")[0]
    assert "<table" in sec and "posterior" in sec and "OrthogonalConditions" in sec


# ---- export_notebook_html -----------------------------------------------------------------------

def test_export_notebook_missing_file(tmp_path):
    pytest.importorskip("nbconvert")
    with pytest.raises(InputError, match="nb_path: the notebook .* does not exist"):
        oi.report.export_notebook_html(tmp_path / "none.ipynb", tmp_path / "out.html")


def test_export_notebook_checks_its_output_before_running(tmp_path):
    pytest.importorskip("nbconvert")
    nb = tmp_path / "a.ipynb"
    nb.write_text("{}")  # not even a notebook: the output path is checked first
    with pytest.raises(InputError, match=r"out: the directory .*nope.* does not exist"):
        oi.report.export_notebook_html(nb, tmp_path / "nope" / "a.html", execute=True)


def test_export_notebook_not_a_notebook(tmp_path):
    pytest.importorskip("nbconvert")
    bad = tmp_path / "bad.ipynb"
    bad.write_text("not json")
    with pytest.raises(InputError, match="is not a readable notebook"):
        oi.report.export_notebook_html(bad, tmp_path / "out.html")


def test_export_notebook_keeps_widget_state(tmp_path):
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import odeinfer as oi\n"
        "m = oi.Model.from_equations({'x': '-k*x'}, params=['k'], name='decay')\n"
        "data, _ = oi.simulate(m, [0.5], [1.0], [0.0, 1.0, 2.0, 3.0], noise=0.01, rng=1)\n"
        "ex = oi.widgets.Explorer(m, data, start={'k': 0.4})\n"
        "ex")]
    src = tmp_path / "nb.ipynb"
    nbformat.write(nb, src)
    out = oi.report.export_notebook_html(src, tmp_path / "nb.html", execute=True, timeout=300)
    text = out.read_text(encoding="utf-8")
    assert "application/vnd.jupyter.widget-state+json" in text
    assert "FloatSliderModel" in text and "ImageModel" in text
    assert sorted(os.listdir(tmp_path)) == ["nb.html", "nb.ipynb"]
