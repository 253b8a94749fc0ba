"""Standalone HTML reports: :func:`export_html` (estimates, data, posterior, plots in one file)
and :func:`export_notebook_html` (a notebook through nbconvert, with its widget state and,
offline, the widget manager inlined).

A report made by :func:`export_html` needs no network to be viewed: images are inline
(base64 PNG), styles are inline, there are no scripts or web fonts, and a
Content-Security-Policy forbids loading or running anything. Every piece of user
text (names, titles, labels, messages) is HTML-escaped.

With ``interactive=True`` the report also embeds its numbers as JSON with a small viewer
(plain JavaScript and inline SVG, shipped in the package as ``odeinfer/report/viewer.js``)
so that the reader can switch parameter pairs and estimators in the browser; the
Content-Security-Policy then allows that one script (by its hash) and still nothing else.

Examples
--------
>>> import odeinfer as oi, tempfile, os
>>> m = oi.Model.from_equations({"x": "-k*x"}, params=["k"], name="decay")
>>> path = os.path.join(tempfile.mkdtemp(), "decay.html")
>>> oi.report.export_html([m, "A model with one parameter."], path, title="Decay")  # doctest: +ELLIPSIS
PosixPath('...decay.html')
"""

from __future__ import annotations


from odeinfer._io import check_target, write_atomic
from odeinfer.errors import InputError
from odeinfer.report._build import build_html, check_interactive
from odeinfer.report._items import SUPPORTED
from odeinfer.report._notebook import export_notebook_html

__all__ = ["export_html", "render_html", "export_notebook_html", "SUPPORTED"]


def render_html(items, *, title="odeinfer report", plots=True, alpha=0.05, dpi=100, subtitle="",
                interactive=False) -> str:
    """The report of :func:`export_html` as a string (nothing is written).

    Parameters are those of :func:`export_html` without ``path`` and ``overwrite``.
    """
    return build_html(items, title=title, plots=plots, alpha=alpha, dpi=dpi, subtitle=subtitle,
                      interactive=interactive)


def export_html(items, path, *, title="odeinfer report", overwrite=True, plots=True, alpha=0.05, dpi=100,
                subtitle="", interactive=False):
    """Write one standalone HTML report.

    Sections, in this order, each present when it has content: notes (str items),
    model equations (given models and the models of the estimates), data summary,
    every estimate's summary table (status, warnings), the interval comparison of
    the estimates and the posterior (:func:`odeinfer.diagnostics.compare_intervals`),
    the posterior summary with convergence checks (pass/fail), diagnostics reports,
    tables, and plots (given figures, then, with ``plots=True``, trajectories,
    residuals, a forest plot and the regions of the first parameter pair made by
    :mod:`odeinfer.plots`). A part that cannot be made shows a clear
    "... unavailable: reason" block instead of failing the report.

    Parameters
    ----------
    items : item or list of items
        Any of: :class:`~odeinfer.Model`, :class:`~odeinfer.Data`,
        :class:`~odeinfer.Experiments`, :class:`~odeinfer.Estimate`,
        ``odeinfer.diagnostics.DiagnosticsReport``, ``pandas.DataFrame`` (a str in
        ``frame.attrs["title"]`` becomes its heading), ``arviz.InferenceData`` (the
        first one is compared with the estimates), ``matplotlib.figure.Figure`` (its
        label is the caption) and ``str`` (paragraphs of notes).
    path : str or os.PathLike
        Output file. Its directory must exist. The file is written to a temporary
        file in that directory and renamed, so a failed export leaves nothing behind
        (an existing file keeps its content and its permission bits).
    title : str, default "odeinfer report"
    overwrite : bool, default True
        If False, an existing ``path`` is an error.
    plots : bool, default True
        Add the automatic plots.
    alpha : float, default 0.05
        1 - level of the intervals, bands and regions.
    dpi : int, default 100
        Resolution of the inline PNG images.
    subtitle : str, default ""
        A line under the title.
    interactive : bool, default False
        Add an "Explorer" section first: the estimates, intervals (Wald, profile where the
        estimator provides profiles, posterior equal-tailed and HDI), the Wald ellipses and
        posterior highest-density contours of every pair of the first 8 quantities, up to
        400 posterior draws and the data with the fitted trajectories (likelihood fits: the
        fitted observables per experiment), embedded as JSON with
        a viewer (plain JavaScript, inline SVG; no library, no network). The reader picks the
        pair with two drop-down lists and the estimators with check boxes. The static
        sections follow unchanged.

    Returns
    -------
    pathlib.Path
        The written file.

    Raises
    ------
    TypeError
        An item of an unsupported type (the message lists the supported types).
    InputError
        An empty item list; the directory of ``path`` is missing or not writable;
        ``path`` exists and ``overwrite`` is False; bad ``title``/``alpha``/``plots``/``interactive``.
    """
    if not isinstance(overwrite, bool):
        raise InputError(f"overwrite: expected True or False, got {overwrite!r}")
    check_interactive(interactive)
    check_target(path, overwrite=overwrite)  # before the work of building the report
    text = build_html(items, title=title, plots=plots, alpha=alpha, dpi=dpi, subtitle=subtitle,
                      interactive=interactive)
    return write_atomic(text, path, overwrite=overwrite)
