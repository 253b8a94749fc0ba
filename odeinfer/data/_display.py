"""Text and HTML views of Data and Experiments (pure formatting, names escaped)."""

from __future__ import annotations

import html

import numpy as np

__all__ = ["data_text", "data_html", "experiments_text", "experiments_html"]

_EDGE = 5  # rows shown at each end of a long table


def _num(x):
    return "NaN" if np.isnan(x) else f"{x:.6g}"


def _row_indices(n):
    if n <= 2 * _EDGE:
        return list(range(n)), None
    return list(range(_EDGE)) + list(range(n - _EDGE, n)), _EDGE


def _header(data):
    label = "Data" if data.name is None else f"Data {data.name!r}"
    t = data.t
    return (
        f"{label}: {data.n_times} times in [{_num(t[0])}, {_num(t[-1])}], t0 = {_num(data.t0)}, "
        f"{data.n_observed} observed state(s), nobs = {data.nobs}"
    )


def data_text(data):
    """Plain-text summary with the first and last rows."""
    rows, gap = _row_indices(data.n_times)
    head = ["t", *data.states]
    cells = [[_num(data.t[i]), *(_num(v) for v in data.y[i])] for i in rows]
    if gap is not None:
        cells.insert(gap, ["..."] * len(head))
    widths = [max(len(head[j]), *(len(r[j]) for r in cells)) for j in range(len(head))]
    lines = [_header(data), "  ".join(h.rjust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def data_html(data):
    """HTML summary with the first and last rows; names are escaped."""
    esc = html.escape
    rows, gap = _row_indices(data.n_times)
    head = "".join(f"<th>{esc(h)}</th>" for h in ["t", *data.states])
    body = []
    for k, i in enumerate(rows):
        if gap is not None and k == gap:
            body.append("<tr>" + "<td>&hellip;</td>" * (1 + data.n_observed) + "</tr>")
        cells = [_num(data.t[i]), *(_num(v) for v in data.y[i])]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (
        f"<div class='odeinfer-data'><p>{esc(_header(data))}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def _experiment_rows(experiments):
    for name, d in zip(experiments.names, experiments):
        yield [
            name,
            str(d.n_times),
            f"[{_num(d.t[0])}, {_num(d.t[-1])}]",
            _num(d.t0),
            ", ".join(d.states),
            str(d.nobs),
        ]


_EXP_HEAD = ["experiment", "n_times", "t range", "t0", "observed", "nobs"]


def _experiments_header(experiments):
    return (
        f"Experiments: {experiments.n_experiments} experiment(s), states "
        f"({', '.join(experiments.states)}), nobs = {experiments.nobs}"
    )


def experiments_text(experiments):
    """Plain-text table, one line per experiment."""
    cells = list(_experiment_rows(experiments))
    widths = [max(len(_EXP_HEAD[j]), *(len(r[j]) for r in cells)) for j in range(len(_EXP_HEAD))]
    lines = [_experiments_header(experiments), "  ".join(h.ljust(w) for h, w in zip(_EXP_HEAD, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def experiments_html(experiments):
    """HTML table, one row per experiment; names are escaped."""
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in _EXP_HEAD)
    body = "".join(
        "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in _experiment_rows(experiments)
    )
    return (
        f"<div class='odeinfer-experiments'><p>{esc(_experiments_header(experiments))}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )
