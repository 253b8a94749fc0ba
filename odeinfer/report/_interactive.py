"""The interactive part of a report (``export_html(..., interactive=True)``).

:func:`payload` gathers the numbers the static plots draw (estimates, Wald/profile and
posterior intervals, Wald ellipses and posterior highest-density contours of every
parameter pair, posterior draws, data and fitted trajectories) as plain JSON-ready data;
:func:`explorer_section` embeds them with the viewer ``viewer.js`` (plain JavaScript and
inline SVG, shipped with the package) so that a reader can switch pairs and estimators
in the browser without a kernel or network. Every part that cannot be computed becomes a
note in ``payload["notes"]`` instead of failing the report.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
from importlib import resources

import numpy as np

__all__ = ["payload", "explorer_section", "json_for_script", "viewer_source", "MAX_PAIR_PARAMS", "MAX_DRAWS"]

#: Parameters (in order) whose pairs get regions: 8 names give 28 pairs.
MAX_PAIR_PARAMS = 8
#: Posterior draws kept per parameter for the scatter (the KDE uses all of them).
MAX_DRAWS = 400
_SIG = 6  # significant digits kept in the embedded numbers


def _r(x):
    """A float rounded to ``_SIG`` significant digits, None for NaN/inf (JSON has neither)."""
    x = float(x)
    if not math.isfinite(x):
        return None
    return float(f"{x:.{_SIG}g}")


def _arr(a):
    return [_r(v) for v in np.asarray(a, dtype=float).ravel()]


def json_for_script(obj) -> str:
    """``obj`` as JSON text that is safe inside ``<script type="application/json">``: ``<``, ``>``
    and ``&`` are written as ``\\u003c``, ``\\u003e``, ``\\u0026`` (so no ``</script>`` or
    ``<!--`` can appear), and U+2028/U+2029 as escapes."""
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for ch, rep in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, rep)
    return text


def viewer_source() -> str:
    """The viewer script shipped with the package (``odeinfer/report/viewer.js``)."""
    return resources.files("odeinfer.report").joinpath("viewer.js").read_text(encoding="utf-8")


def script_hash(source: str) -> str:
    """The Content-Security-Policy source expression that allows exactly this inline script."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii") + "'"


# payload -------------------------------------------------------------------------------------
def _intervals(estimates, labels, idata, alpha, notes):
    from odeinfer.diagnostics import compare_intervals

    methods = ("wald", "profile") if any(e._profiler is not None for e in estimates) else ("wald",)
    try:
        frame = compare_intervals(estimates, idata=idata, alpha=alpha, methods=methods)
    except Exception as err:
        notes.append(f"intervals unavailable: {type(err).__name__}: {err}")
        return {}
    out = {}
    for row in frame.itertuples(index=False):
        lo, hi = _r(row.lower), _r(row.upper)
        if lo is None or hi is None:
            continue
        out.setdefault(str(row.source), {}).setdefault(str(row.param), {})[str(row.method)] = [lo, hi]
    return out


def _posterior(idata, names, alpha, notes):
    from odeinfer.diagnostics._names import draws_matrix, has_name
    from odeinfer.diagnostics.intervals import posterior_summary

    names = [n for n in names if has_name(idata, n)]
    if not names:
        notes.append("posterior draws unavailable: the InferenceData names none of the estimated quantities")
        return None, None
    X = draws_matrix(idata, names)
    X = X[np.all(np.isfinite(X), axis=1)]
    summary = posterior_summary(idata, names, alpha)
    gen = np.random.default_rng(0)
    show = X if len(X) <= MAX_DRAWS else X[gen.choice(len(X), MAX_DRAWS, replace=False)]
    post = {"names": names, "n_draws": int(len(X)),
            "draws": {n: _arr(show[:, j]) for j, n in enumerate(names)},
            "summary": {n: {"mean": _r(s["mean"]), "sd": _r(np.std(X[:, j], ddof=1)) if len(X) > 1 else None,
                            "et": [_r(v) for v in s["et"]], "hdi": [_r(v) for v in s["hdi"]]}
                        for j, (n, s) in enumerate(summary.items())}}
    return post, X


def _contours(X, level):
    """Polylines of the posterior HDR (KDE) as the static plot draws it: list of [xs, ys]."""
    import contourpy

    from odeinfer.plots.regions import hdr_grid

    grid = hdr_grid(X, level, np.random.default_rng(0))
    if grid is None:
        return []
    GX, GY, dens, thr = grid
    lines = contourpy.contour_generator(GX, GY, dens).lines(thr)
    return [[_arr(line[:, 0]), _arr(line[:, 1])] for line in lines if len(line) > 1]


def _regions(estimates, labels, names, post_names, X, level, notes):
    from odeinfer.errors import InputError
    from odeinfer.plots.regions import ellipse

    pairs = list(itertools.combinations(names[:MAX_PAIR_PARAMS], 2))
    if len(names) > MAX_PAIR_PARAMS:
        notes.append(f"regions are shown for the pairs of the first {MAX_PAIR_PARAMS} of {len(names)} quantities")
    out = []
    for p, q in pairs:
        region = {"x": p, "y": q, "ellipses": {}, "hdr": []}
        for e, lab in zip(estimates, labels):
            if p not in e.names or q not in e.names or e.cov is None:
                continue
            i = [e.names.index(p), e.names.index(q)]
            try:
                xy = ellipse(np.asarray(e.values)[i], np.asarray(e.cov)[np.ix_(i, i)], level, n=90)
            except InputError:
                continue  # no positive definite covariance: the point alone is shown
            region["ellipses"][lab] = [_arr(xy[:, 0]), _arr(xy[:, 1])]
        if X is not None and p in post_names and q in post_names:
            try:
                region["hdr"] = _contours(X[:, [post_names.index(p), post_names.index(q)]], level)
            except Exception as err:  # a failing KDE must not sink the report
                notes.append(f"posterior region of ({p}, {q}) unavailable: {type(err).__name__}: {err}")
        out.append(region)
    return out


def _trajectories(estimates, labels, datas, alpha, notes):
    from odeinfer.plots._common import data_t0
    from odeinfer.plots.trajectories import _check_states, _predict, _time_grid

    ests = [(e, lab) for e, lab in zip(estimates, labels) if e._objective is None]
    data = next((d for d in datas if ests and set(d.states) <= set(ests[0][0].model.states)), None)
    if data is None:
        if ests:
            notes.append("trajectories unavailable: no Data item observes states of the model")
        return []
    try:
        _check_states([e for e, _ in ests], data)
    except Exception as err:
        notes.append(f"trajectories unavailable: {err}")
        return []
    tt, t0 = _time_grid(data, None), data_t0(data)
    panels = [{"state": s, "t": _arr(data.t), "y": _arr(np.where(data.mask[:, k], data.y[:, k], np.nan)),
               "fits": {}} for k, s in enumerate(data.states)]
    for e, lab in ests:
        try:
            pred = _predict(e, tt, data, None, None, t0, alpha)
        except Exception as err:
            notes.append(f"trajectory of {lab} unavailable: {type(err).__name__}: {err}")
            continue
        for panel in panels:
            i = pred.states.index(panel["state"])
            fit = {"t": _arr(pred.t), "y": _arr(pred.y[:, i])}
            if np.isfinite(pred.se[:, i]).any():
                fit["lo"], fit["hi"] = _arr(pred.lower[:, i]), _arr(pred.upper[:, i])
            panel["fits"][lab] = fit
    return panels


def _observables(estimates, labels, alpha, notes):
    """Likelihood fits: one panel per (observable, experiment), the data of the experiment and
    each fit's observable with its band (as :func:`odeinfer.plots.observables` draws them)."""
    panels = {}
    for e, lab in zip(estimates, labels):
        obj = e._objective
        if obj is None:
            continue
        model = obj.problem.model
        for plan in obj.problem.plans:
            t_end = plan.t_last
            try:
                pred = e.predict(np.linspace(plan.t0, t_end, 200), experiment=plan.name, alpha=alpha)
            except Exception as err:
                notes.append(f"observables of {lab} in {plan.name} unavailable: {type(err).__name__}: {err}")
                continue
            for k, o in enumerate(model.observables):
                key = f"{o.name} ({plan.name})"
                rows = plan.obs_rows == k
                panel = panels.setdefault(key, {"state": key, "t": _arr(plan.t_rows[rows]),
                                                "y": _arr(plan.y_rows[rows]), "fits": {}})
                fit = {"t": _arr(pred.t), "y": _arr(pred.y[:, k])}
                if np.isfinite(pred.se[:, k]).any():
                    fit["lo"], fit["hi"] = _arr(pred.lower[:, k]), _arr(pred.upper[:, k])
                panel["fits"][lab] = fit
    return list(panels.values())


def payload(estimates, datas, idata, *, title, alpha) -> dict:
    """Everything the viewer draws, as JSON-ready data (floats rounded, NaN as None)."""
    from odeinfer.diagnostics.intervals import source_labels

    notes = []
    labels = source_labels(estimates) if estimates else []
    names = []
    for e in estimates:
        names += [n for n in e.names if n not in names]
    post, X = (None, None)
    if idata is not None:
        if not names:
            from odeinfer.diagnostics._names import parameter_names

            names = list(parameter_names(idata))
        try:
            post, X = _posterior(idata, names, alpha, notes)
        except Exception as err:
            notes.append(f"posterior unavailable: {type(err).__name__}: {err}")
    level = 1.0 - alpha
    sources = [{"label": lab, "estimator": e.estimator, "model": e.model.name, "status": e.status,
                "values": {n: _r(v) for n, v in zip(e.names, e.values)}}
               for e, lab in zip(estimates, labels)]
    return {
        "version": 1, "title": title, "level": level, "names": names, "sources": sources,
        "intervals": _intervals(estimates, labels, idata, alpha, notes) if estimates else {},
        "posterior": post,
        "regions": _regions(estimates, labels, names, post["names"] if post else [], X, level, notes),
        "trajectories": (_trajectories(estimates, labels, datas, alpha, notes)
                         + _observables(estimates, labels, alpha, notes)),
        "notes": notes,
    }


def explorer_section(data: dict) -> tuple[str, str]:
    """The HTML of the explorer (data block, mount point, viewer) and the CSP source
    expression that allows its script."""
    source = viewer_source()
    html = ("<div id='oi-explorer' class='explorer'><p class='meta'>Interactive view: needs JavaScript "
            "(no network).</p></div>\n"
            f"<script type='application/json' id='oi-data'>{json_for_script(data)}</script>\n"
            f"<script>{source}</script>")
    return html, script_hash(source)
