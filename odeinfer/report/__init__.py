"""Standalone HTML reports: :func:`export_html` (estimates, data, posterior, plots in one file)
and :func:`export_notebook_html` (a notebook through nbconvert, with its widget state).

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

import os
from pathlib import Path

from odeinfer._io import check_target, write_atomic
from odeinfer.errors import InputError
from odeinfer.report._build import build_html, check_interactive
from odeinfer.report._items import SUPPORTED

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
        400 posterior draws and the data with the fitted trajectories, embedded as JSON with
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


def export_notebook_html(nb_path, out, *, execute=False, timeout=600, kernel_name=None, overwrite=True):
    """Convert a notebook to HTML with nbconvert, keeping its ipywidgets state.

    Parameters
    ----------
    nb_path : str or os.PathLike
        The ``.ipynb`` file.
    out : str or os.PathLike
        Output HTML file (written atomically, as in :func:`export_html`).
    execute : bool, default False
        Run the notebook first (nbclient, in the notebook's directory) and store the
        widget state, so widgets render in the HTML. Otherwise the state saved in the
        notebook (Jupyter: "Save Widget State Automatically") is used.
    timeout : int, default 600
        Seconds allowed per cell when executing.
    kernel_name : str, optional
        Kernel to execute with; default the notebook's.
    overwrite : bool, default True

    Returns
    -------
    pathlib.Path

    Notes
    -----
    Needs ``nbconvert`` and ``nbformat`` (and ``nbclient`` + ``ipykernel`` to
    execute). Unlike :func:`export_html`, nbconvert's page loads the Jupyter widget
    manager (and MathJax) from a CDN to draw the embedded widget state, so viewing
    the widgets needs network access; images and outputs are embedded.
    """
    try:
        import nbconvert
        import nbformat
    except ImportError as err:
        raise ImportError(f"export_notebook_html needs nbconvert and nbformat ({err}); "
                          "install them with `pip install nbconvert nbclient ipykernel`") from err
    src = Path(os.fspath(nb_path))
    if not src.is_file():
        raise InputError(f"nb_path: the notebook {str(src)!r} does not exist")
    check_target(out, overwrite=overwrite, argument="out")  # before running the notebook
    try:
        nb = nbformat.read(src, as_version=4)
    except Exception as err:
        raise InputError(f"nb_path: {str(src)!r} is not a readable notebook ({type(err).__name__}: {err})") from err
    if execute:
        try:
            from nbclient import NotebookClient
        except ImportError as err:
            raise ImportError("export_notebook_html(execute=True) needs nbclient and ipykernel; "
                              "install them with `pip install nbclient ipykernel`") from err
        kwargs = {"timeout": timeout, "store_widget_state": True,
                  "resources": {"metadata": {"path": str(src.parent.resolve())}}}
        if kernel_name is not None:
            kwargs["kernel_name"] = kernel_name
        NotebookClient(nb, **kwargs).execute()
    body, _ = nbconvert.HTMLExporter(template_name="lab").from_notebook_node(nb)
    return write_atomic(body, out, overwrite=overwrite, argument="out")
