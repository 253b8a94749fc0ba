"""Rendering of each supported report item type to an HTML fragment (all user text escaped)."""

from __future__ import annotations

import base64
import io

import numpy as np

from odeinfer.report._html import badge, esc, table_html, unavailable

__all__ = ["classify", "SUPPORTED", "render_model", "render_data", "render_experiments", "render_estimate",
           "render_diagnostics", "render_frame", "render_idata", "render_figure", "render_text",
           "figure_png_base64"]

#: What export_html accepts, by kind (the names are shown in the TypeError for anything else).
SUPPORTED = ("odeinfer.Model", "odeinfer.Data", "odeinfer.Experiments", "odeinfer.Estimate",
             "odeinfer.diagnostics.DiagnosticsReport", "pandas.DataFrame", "arviz.InferenceData",
             "matplotlib.figure.Figure", "str")

#: Convergence thresholds of the fallback checks (Vehtari et al. 2021, Bayesian Analysis 16(2);
#: the defaults of :func:`odeinfer.diagnostics.check`).
RHAT_MAX = 1.01
ESS_MIN = 400


def _diagnostics_report_type():
    try:
        from odeinfer.diagnostics import DiagnosticsReport
    except Exception:  # the module may be absent or broken; such items then cannot exist
        return None
    return DiagnosticsReport


def classify(item) -> str:
    """The kind of a report item: "model", "data", "experiments", "estimate", "diagnostics",
    "frame", "idata", "figure" or "text".

    Raises
    ------
    TypeError
        For any other type, naming it and listing the supported types.
    """
    from odeinfer.data import Data, Experiments
    from odeinfer.model import Model
    from odeinfer.results import Estimate

    if isinstance(item, str):
        return "text"
    if isinstance(item, Model):
        return "model"
    if isinstance(item, Data):
        return "data"
    if isinstance(item, Experiments):
        return "experiments"
    if isinstance(item, Estimate):
        return "estimate"
    diag = _diagnostics_report_type()
    if diag is not None and isinstance(item, diag):
        return "diagnostics"
    mod = type(item).__module__ or ""
    name = type(item).__name__
    if mod.startswith("pandas") and name == "DataFrame":
        return "frame"
    if mod.startswith("arviz") and name == "InferenceData":
        return "idata"
    if mod.startswith("matplotlib") and name == "Figure":
        return "figure"
    raise TypeError(
        f"a report item of type {mod + '.' if mod else ''}{name} is not supported; supported types are "
        + ", ".join(SUPPORTED) + " (convert it, e.g. to a DataFrame or a str, or leave it out)"
    )


def _num(x) -> str:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return esc(x)
    return "NaN" if np.isnan(x) else f"{x:.6g}"


def _kv_table(rows) -> str:
    body = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<table class='kv'><tbody>{body}</tbody></table>"


# model -------------------------------------------------------------------------------------
def render_model(model) -> str:
    """Name, names, observation model and the equations as plain text ``d x/dt = ...``."""
    eqs = "\n".join(f"d{s}/dt = {e}" for s, e in model.equations().items())
    info = _kv_table([
        ("states", esc(", ".join(model.states))),
        ("parameters", esc(", ".join(model.params))),
        ("observed", esc(", ".join(model.observed))),
        ("noise", esc(model.observation.noise)),
    ])
    return (f"<div class='model'><h3>Model <code>{esc(model.name)}</code></h3>"
            f"<pre class='eq'>{esc(eqs)}</pre>{info}</div>")


# data -------------------------------------------------------------------------------------
def _data_summary_frame(data):
    import pandas as pd

    rows = {}
    for j, s in enumerate(data.states):
        col = data.y[:, j]
        ok = col[~np.isnan(col)]
        rows[s] = {"n": ok.size, "missing": col.size - ok.size,
                   "min": ok.min() if ok.size else np.nan, "mean": ok.mean() if ok.size else np.nan,
                   "max": ok.max() if ok.size else np.nan}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    return frame


def render_data(data, heading=True) -> str:
    """Times and a per-state summary table (n, missing, min, mean, max)."""
    label = "Data" if data.name is None else f"Data {data.name}"
    t = data.t
    meta = (f"{data.n_times} times in [{_num(t[0])}, {_num(t[-1])}], t0 = {_num(data.t0)}, "
            f"{data.n_observed} observed state(s), nobs = {data.nobs}")
    head = f"<h3>{esc(label)}</h3>" if heading else ""
    return (f"<div class='data'>{head}<p class='meta'>{esc(meta)}</p>"
            f"{table_html(_data_summary_frame(data))}</div>")


def render_experiments(experiments) -> str:
    parts = [f"<p class='meta'>{experiments.n_experiments} experiment(s)</p>"]
    for name, d in zip(experiments.names, experiments):
        parts.append(f"<h3>Experiment {esc(name)}</h3>" + render_data(d, heading=False))
    return "<div class='experiments'>" + "".join(parts) + "</div>"


# estimates --------------------------------------------------------------------------------
def _status_badge(status):
    return badge(status, {"converged": "pass", "max_iter": "warn"}.get(status, "fail"))


def render_estimate(est, alpha=0.05) -> str:
    """Estimator, status, iterations, cost, the summary table, fixed values, sigma and warnings."""
    rows = [("status", _status_badge(est.status) + (f" {esc(est.message)}" if est.message else "")),
            ("iterations", str(int(est.n_iter))), ("cost", _num(est.cost)), ("nobs", str(int(est.nobs)))]
    if est.fixed:
        rows.append(("fixed", esc(", ".join(f"{k} = {_plain(v)}" for k, v in est.fixed.items()))))
    if est.sigma:
        rows.append(("sigma", esc(", ".join(f"{k} = {_plain(v)}" for k, v in est.sigma.items()))))
    if est.cov is None:
        rows.append(("covariance", badge("not available", "na")))
    warn = "".join(f"<li>{esc(w)}</li>" for w in est.warnings)
    return (f"<div class='estimate'><h3>{esc(est.estimator)} estimate of <code>{esc(est.model.name)}</code></h3>"
            f"{_kv_table(rows)}{table_html(est.summary_frame(alpha))}"
            + (f"<p>Warnings:</p><ul class='warnings'>{warn}</ul>" if warn else "") + "</div>")


def _plain(v):
    try:
        return f"{float(v):.6g}"
    except (TypeError, ValueError):
        return str(v)


# diagnostics --------------------------------------------------------------------------------
def render_diagnostics(report) -> str:
    """A DiagnosticsReport through its own (escaped) ``_repr_html_``."""
    return f"<div class='diagnostics'>{report._repr_html_()}</div>"


def render_frame(frame) -> str:
    title = frame.attrs.get("title") if isinstance(frame.attrs.get("title"), str) else None
    head = f"<h3>{esc(title)}</h3>" if title else ""
    return f"<div class='frame'>{head}{table_html(frame)}</div>"


# posterior ---------------------------------------------------------------------------------
def idata_checks(idata):
    """Pass/fail rows: worst r_hat, smallest bulk ESS, divergent transitions (used when
    :func:`odeinfer.diagnostics.check` is not available)."""
    from odeinfer.bayes import _idata

    post = _idata.posterior(idata)
    n_chains = int(post.sizes.get("chain", 1))
    n_draws = int(post.sizes.get("draw", 0))
    rows = []
    if n_chains >= 2:
        rhat = _idata.rhat(idata)
        worst = max((float(np.nanmax(v.values)) for v in rhat.data_vars.values()), default=np.nan)
        ok = np.isfinite(worst) and worst <= RHAT_MAX
        rows.append(("max r_hat", _num(worst), f"<= {RHAT_MAX}", badge("pass" if ok else "fail", "pass" if ok else "fail")))
    else:
        rows.append(("max r_hat", "n/a", f"<= {RHAT_MAX}", badge("needs 2+ chains", "na")))
    ess = _idata.ess(idata, "bulk")
    low = min((float(np.nanmin(v.values)) for v in ess.data_vars.values()), default=np.nan)
    need = ESS_MIN
    ok = np.isfinite(low) and low >= need
    rows.append(("min ess_bulk", _num(low), f">= {need}", badge("pass" if ok else "fail", "pass" if ok else "fail")))
    div = _idata.sample_stat(idata, "diverging")
    if div is not None:
        n_div = int(div.sum())
        rows.append(("divergences", str(n_div), "0", badge("pass" if n_div == 0 else "fail",
                                                               "pass" if n_div == 0 else "fail")))
    head = "<tr><th>check</th><th>value</th><th>required</th><th>result</th></tr>"
    body = "".join(f"<tr><td>{esc(a)}</td><td>{b}</td><td>{esc(c)}</td><td>{d}</td></tr>" for a, b, c, d in rows)
    return (f"<p class='meta'>{n_chains} chain(s) x {n_draws} draw(s)</p>"
            f"<table class='checks'><thead>{head}</thead><tbody>{body}</tbody></table>")


def render_idata(idata) -> str:
    """ArviZ summary table of the posterior (the checks are in the diagnostics section)."""
    from odeinfer.bayes import _idata

    post = _idata.posterior(idata)
    if post is None:
        return unavailable("posterior summary", "the InferenceData has no posterior group")
    summary = _idata.summary(idata, var_names=_parameter_vars(idata) or None)
    n_chains = int(post.sizes.get("chain", 1))
    n_draws = int(post.sizes.get("draw", 0))
    return (f"<div class='idata'><p class='meta'>{n_chains} chain(s) x {n_draws} draw(s)</p>"
            f"{table_html(summary, '{:.4g}')}</div>")


def _parameter_vars(idata):
    """Posterior variables that are parameters (see ``odeinfer.diagnostics._names``); None (every
    variable) when the diagnostics module cannot be imported."""
    try:
        from odeinfer.diagnostics._names import parameter_vars
    except ImportError:
        return None
    from odeinfer.bayes._idata import posterior

    return parameter_vars(posterior(idata))


# figures and text ------------------------------------------------------------------------------
def figure_png_base64(fig, dpi=100) -> str:
    """The figure as base64 PNG text."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def render_figure(fig, caption=None, dpi=100) -> str:
    """An inline PNG (data URI) with an escaped caption (``caption`` or the figure's label)."""
    label = caption if caption is not None else fig.get_label()
    alt = esc(label or "figure")
    cap = f"<figcaption>{esc(label)}</figcaption>" if label else ""
    return (f"<figure><img alt='{alt}' src='data:image/png;base64,{figure_png_base64(fig, dpi)}'>"
            f"{cap}</figure>")


def render_text(text) -> str:
    paragraphs = [p for p in str(text).split("\n\n") if p.strip()]
    return "".join(f"<p>{esc(p)}</p>" for p in paragraphs)
