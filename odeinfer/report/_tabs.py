"""The Jupyter view of an analysis (:func:`odeinfer.analyze`): a summary with tabs.

Plain HTML and CSS (radio buttons and labels switch the panels): no script, nothing fetched, so
it renders the same offline, in a trusted notebook and in an exported one. Every piece of user
text is escaped. A pure view: it formats stored results and computes nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from odeinfer.report._html import badge, esc, table_html, unavailable

__all__ = ["tabs_html", "analysis_html"]

_IDS = itertools.count()

_CSS = """
#{u}{{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:.5em 0}}
#{u}>input{{position:absolute;opacity:0;pointer-events:none}}
#{u}>label{{display:inline-block;padding:.3em .9em;margin-right:2px;border:1px solid #bbb;border-bottom:none;
 border-radius:4px 4px 0 0;background:#eef2f6;cursor:pointer}}
#{u}>input:checked+label{{background:#fff;font-weight:bold;position:relative;top:1px}}
#{u}>.oi-panel{{display:none;border:1px solid #bbb;padding:.6em;overflow-x:auto}}
#{u} table{{border-collapse:collapse;font-size:.9em}}
#{u} th,#{u} td{{border:1px solid #ddd;padding:.2em .5em;text-align:right}}
#{u} .badge{{padding:.05em .5em;border-radius:3px;font-weight:bold}}
#{u} .pass{{background:#d8f0d8;color:#185a18}}#{u} .fail{{background:#f7d6d6;color:#8a1b1b}}
#{u} .warn{{background:#fbecc6;color:#6b4b00}}#{u} .na{{background:#e6e6e6;color:#444}}
#{u} .unavailable{{border:1px dashed #b88;padding:.4em;color:#833}}
"""


def tabs_html(tabs, *, prefix="oi-tabs") -> str:
    """``[(label, html), ...]`` as CSS-only tabs (the first one open); ids are unique per call."""
    u = f"{prefix}-{next(_IDS)}"
    css = _CSS.format(u=u) + "".join(f"#{u}-{i}:checked~#{u}-p{i}{{display:block}}" for i in range(len(tabs)))
    heads = "".join(f"<input type='radio' id='{u}-{i}' name='{u}'{' checked' if i == 0 else ''}>"
                    f"<label for='{u}-{i}'>{esc(label)}</label>" for i, (label, _) in enumerate(tabs))
    panels = "".join(f"<div class='oi-panel' id='{u}-p{i}'>{body}</div>" for i, (_, body) in enumerate(tabs))
    return f"<div class='oi-tabs' id='{u}'><style>{css}</style>{heads}{panels}</div>"


def _summary(res) -> str:
    rows = []
    for e in res.estimates:
        ok = "pass" if e.status == "converged" else "fail"
        info = e.provenance.get("start")
        start = None
        if isinstance(info, Mapping):
            start = info.get("source") + (f" ({info['estimate']})" if info.get("estimate") else "")
        vals = ", ".join(f"{esc(n)} = {v:.4g}" for n, v in zip(e.names, e.values))
        rows.append(f"<tr><td>{esc(e.estimator)}</td><td>{badge(e.status, ok)}</td><td>{esc(start or '')}</td>"
                    f"<td style='text-align:left'>{vals}</td></tr>")
    table = ("<table><thead><tr><th>estimator</th><th>status</th><th>start</th><th>estimate</th></tr></thead>"
             f"<tbody>{''.join(rows)}</tbody></table>") if rows else unavailable("estimates", "no estimator succeeded")
    if res.diagnostics is not None:
        diag = badge("sampler diagnostics pass" if res.diagnostics.passed else "sampler diagnostics FAIL",
                     "pass" if res.diagnostics.passed else "fail")
    else:
        diag = badge("no posterior", "na")
    notes = "".join(f"<li>{esc(n)}</li>" for n in res.notes)
    times = ", ".join(f"{esc(k)} {v:.1f} s" for k, v in res.timings.items())
    return (f"<h3>{esc(res.title)}</h3><p>{diag}</p>{table}<ul>{notes}</ul>"
            f"<p style='color:#555;font-size:.9em'>wall time (with compilation): {times}</p>")


def analysis_html(res) -> str:
    """The tabs of a :class:`~odeinfer.pipeline.PipelineResult`: Summary, Estimates, Intervals,
    Posterior, Diagnostics."""
    from odeinfer.report._items import render_diagnostics, render_idata

    estimates = "".join(e._repr_html_() for e in res.estimates) or unavailable("estimates", "no estimator succeeded")
    if res.intervals is not None:
        intervals = f"<h4>{esc(res.intervals.attrs.get('title', 'intervals'))}</h4>{table_html(res.intervals)}"
    else:
        intervals = unavailable("interval table", "no trajectory fit (run oi.analyze with a trajectory estimator)")
    posterior = render_idata(res.idata) if res.idata is not None else unavailable("posterior", "sampling skipped")
    diagnostics = (render_diagnostics(res.diagnostics) if res.diagnostics is not None
                   else unavailable("diagnostics", "no posterior"))
    return tabs_html([("Summary", _summary(res)), ("Estimates", estimates), ("Intervals", intervals),
                      ("Posterior", posterior), ("Diagnostics", diagnostics)], prefix="oi-analysis")
