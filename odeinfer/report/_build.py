"""Sorting report items into sections and adding the automatic ones (comparison, checks, plots)."""

from __future__ import annotations

import importlib

import sys
import warnings

from odeinfer.errors import InputError
from odeinfer.report import _items as it
from odeinfer.report._html import esc, page, section, unavailable

__all__ = ["normalize_items", "build_html"]


def normalize_items(items) -> list:
    """A list of items from one item or a list/tuple of them (types checked)."""
    seq = list(items) if isinstance(items, (list, tuple)) else [items]
    if not seq:
        raise InputError("items: the report is empty; pass estimates, data, models, figures, ... "
                         "e.g. export_html([est, data], 'report.html')")
    for i, x in enumerate(seq):
        try:
            it.classify(x)
        except TypeError as err:
            raise TypeError(f"items[{i}]: {err}") from None
    return seq


def _close(fig):
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close(fig)


def _grouped(items):
    groups = {k: [] for k in ("text", "model", "data", "experiments", "estimate", "diagnostics",
                               "frame", "idata", "figure")}
    for x in items:
        groups[it.classify(x)].append(x)
    return groups


def _models(groups):
    seen, out = set(), []
    for m in groups["model"] + [e.model for e in groups["estimate"]]:
        if m.fingerprint + m.name not in seen:
            seen.add(m.fingerprint + m.name)
            out.append(m)
    return out


def _comparison(estimates, idata, alpha):
    try:
        from odeinfer.diagnostics import compare_intervals
    except Exception as err:
        return unavailable("interval comparison", f"odeinfer.diagnostics.compare_intervals cannot be imported "
                                                  f"({type(err).__name__}: {err})")
    try:
        frame = compare_intervals(estimates, idata=idata, alpha=alpha)
    except Exception as err:
        return unavailable("interval comparison", f"{type(err).__name__}: {err}")
    return it.render_frame(frame)


def _auto_diagnostics(idata):
    try:
        from odeinfer.diagnostics import check
    except Exception as err:
        note = esc(f"odeinfer.diagnostics.check cannot be imported ({type(err).__name__}: {err}); basic checks:")
        return f"<div class='diagnostics'><p class='meta'>{note}</p>{it.idata_checks(idata)}</div>"
    try:
        return it.render_diagnostics(check(idata))
    except Exception as err:
        return unavailable("diagnostics", f"{type(err).__name__}: {err}")


def _plot_block(what, make, dpi):
    try:
        fig = make()
    except Exception as err:
        return unavailable(f"plot '{what}'", f"{type(err).__name__}: {err}")
    try:
        return it.render_figure(fig, caption=what, dpi=dpi)
    finally:
        _close(fig)


def _auto_plots(groups, idata, alpha, dpi):
    estimates, datas = groups["estimate"], groups["data"]
    if not estimates and idata is None:
        return []
    try:
        plots = importlib.import_module("odeinfer.plots")
    except Exception as err:
        return [unavailable("plots", f"odeinfer.plots cannot be imported ({type(err).__name__}: {err})")]
    out = []
    by_model = {}
    for e in estimates:
        if e._objective is not None:  # a likelihood fit: its observables with its own data
            out.append(_plot_block(f"data and fitted observables of {e.estimator} ({e.model.name})",
                                   lambda e=e: plots.observables(e, alpha=alpha), dpi))
        by_model.setdefault(e.model.fingerprint, []).append(e)
    for ests in by_model.values() or [[]]:
        model = ests[0].model if ests else None
        data = next((d for d in datas if model is None or set(d.states) <= set(model.states)), None)
        name = f" ({model.name})" if model is not None and len(by_model) > 1 else ""
        if data is not None and all(e._objective is None for e in ests):
            out.append(_plot_block(f"data and fitted trajectories{name}",
                                   lambda: plots.trajectories(data, *ests, idata=idata, alpha=alpha), dpi))
            for e in ests:
                out.append(_plot_block(f"residuals of {e.estimator}{name}", lambda e=e: plots.residuals(e, data), dpi))
        out.append(_plot_block(f"intervals{name}", lambda: plots.forest(ests, idata=idata, alpha=alpha), dpi))
        params = list(model.params) if model is not None else []
        if ests and any(e._objective is not None for e in ests):  # the problem's parameters, not the model's
            params = [n for n in ests[0].names if all(n in e.names for e in ests)]
        if len(params) >= 2:
            pair = (params[0], params[1])
            out.append(_plot_block(f"{int(round((1 - alpha) * 100))}% regions of {pair[0]}, {pair[1]}{name}",
                                   lambda: plots.regions(ests, idata=idata, pair=pair, level=1 - alpha), dpi))
    return out


def check_interactive(interactive):
    """``interactive`` must be a bool (checked before any work)."""
    if not isinstance(interactive, bool):
        raise InputError(f"interactive: expected True (embed the data and a viewer) or False (a static report), "
                         f"got {interactive!r}")
    return interactive


def _explorer(g, idata, title, alpha):
    from odeinfer.report._interactive import explorer_section, payload

    data = payload(g["estimate"], g["data"], idata, title=title, alpha=alpha)
    return explorer_section(data)


def build_html(items, *, title="odeinfer report", plots=True, alpha=0.05, dpi=100, subtitle="",
               interactive=False) -> str:
    """The report as one HTML string (see :func:`odeinfer.report.export_html`)."""
    if not isinstance(title, str):
        raise InputError(f"title: expected a str, got {type(title).__name__}")
    if not (isinstance(alpha, float) and 0 < alpha < 1):
        raise InputError(f"alpha: expected a float in (0, 1) (1 - confidence level), got {alpha!r}")
    if not isinstance(plots, bool):
        raise InputError(f"plots: expected True (add the automatic plots) or False, got {plots!r}")
    check_interactive(interactive)
    g = _grouped(normalize_items(items))
    idata = g["idata"][0] if g["idata"] else None
    sections, script_src = [], ""
    if interactive:
        body, script_src = _explorer(g, idata, title, alpha)
        sections.append(section("Explorer", body, "explorer"))
    if g["text"]:
        sections.append(section("Notes", "".join(it.render_text(x) for x in g["text"]), "notes"))
    models = _models(g)
    if models:
        sections.append(section("Model" if len(models) == 1 else "Models",
                                "".join(it.render_model(m) for m in models), "model"))
    if g["data"] or g["experiments"]:
        body = "".join(it.render_data(d) for d in g["data"]) + "".join(it.render_experiments(x) for x in g["experiments"])
        sections.append(section("Data", body, "data"))
    if g["estimate"]:
        sections.append(section("Estimates", "".join(it.render_estimate(e, alpha) for e in g["estimate"]), "estimates"))
    if g["estimate"]:
        sections.append(section("Interval comparison", _comparison(g["estimate"], idata, alpha), "comparison"))
    if g["idata"]:
        body = "".join(it.render_idata(x) for x in g["idata"])
        sections.append(section("Posterior", body, "posterior"))
    if g["diagnostics"] or idata is not None:
        body = "".join(it.render_diagnostics(x) for x in g["diagnostics"])
        if not g["diagnostics"]:
            body = "".join(_auto_diagnostics(x) for x in g["idata"])
        sections.append(section("Diagnostics", body, "diagnostics"))
    if g["frame"]:
        sections.append(section("Tables", "".join(it.render_frame(f) for f in g["frame"]), "tables"))
    figs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # matplotlib layout chatter must not reach the user
        figs += [it.render_figure(f, dpi=dpi) for f in g["figure"]]
        if plots:
            figs += _auto_plots(g, idata, alpha, dpi)
    if figs:
        sections.append(section("Plots", "".join(figs), "plots"))
    return page(title, sections, subtitle=subtitle, script_src=script_src)

