"""Notebooks to HTML (:func:`export_notebook_html`), optionally offline: the page then carries
the vendored Jupyter widget manager (``@jupyter-widgets/html-manager``'s ``embed.js``, see
``tools/vendor_widget_manager.py``) inline instead of loading it, RequireJS and MathJax from
CDNs (template ``nbtemplates/odeinfer_offline``)."""

from __future__ import annotations

import os
import re
import warnings
from importlib import resources
from pathlib import Path

from odeinfer._io import check_target, write_atomic
from odeinfer.errors import InputError, OdeinferWarning

__all__ = ["export_notebook_html", "widget_manager_source", "WIDGET_MANAGER"]

#: The vendored bundle, relative to the odeinfer.report package.
WIDGET_MANAGER = "vendor/html-manager-embed.js"
_VENDOR_HINT = ("it is shipped in odeinfer's wheel; in a source checkout run `python tools/vendor_widget_manager.py` "
                "(needs npm), or pass offline=False for nbconvert's page that loads it from a CDN")


def widget_manager_source() -> str | None:
    """The vendored widget manager script, made safe to inline (``</script`` and ``<!--``
    escaped), or None when it is not vendored."""
    f = resources.files("odeinfer.report").joinpath(WIDGET_MANAGER)
    if not f.is_file():
        return None
    text = f.read_text(encoding="utf-8")
    return re.sub(r"(?i)</(script)", r"<\\/\1", text).replace("<!--", "<\\!--")


def _templates() -> str:
    return str(resources.files("odeinfer.report").joinpath("nbtemplates"))


def export_notebook_html(nb_path, out, *, execute=False, timeout=600, kernel_name=None, overwrite=True,
                         offline=None):
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
    offline : bool or None, default None
        True: a page that needs no network: the Jupyter widget manager
        (``@jupyter-widgets/html-manager``, vendored in the package) is inlined, and
        nothing is loaded from a CDN (so no MathJax: LaTeX in Markdown shows as its source;
        widgets of third-party packages other than ipywidgets' own controls, outputs and
        images cannot be drawn). False: nbconvert's own page, which loads RequireJS, MathJax
        and the widget manager from CDNs. None: offline when the widget manager is
        vendored, else nbconvert's page with an :class:`~odeinfer.errors.OdeinferWarning`.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    InputError
        Missing or unreadable notebook, unusable ``out`` (checked before the notebook
        runs), ``offline`` not a bool or None, ``offline=True`` without the vendored
        widget manager.

    Notes
    -----
    Needs ``nbconvert`` and ``nbformat`` (and ``nbclient`` + ``ipykernel`` to execute).
    """
    try:
        import nbconvert
        import nbformat
    except ImportError as err:
        raise ImportError(f"export_notebook_html needs nbconvert and nbformat ({err}); "
                          "install them with `pip install nbconvert nbclient ipykernel`") from err
    if offline is not None and not isinstance(offline, bool):
        raise InputError(f"offline: expected True (no network needed), False (nbconvert's page, widgets from a CDN) "
                         f"or None (offline when possible), got {offline!r}")
    manager = widget_manager_source() if offline is not False else None
    if offline is True and manager is None:
        raise InputError(f"offline: True needs the vendored Jupyter widget manager ({WIDGET_MANAGER} in "
                         f"odeinfer.report), which is missing; {_VENDOR_HINT}")
    src = Path(os.fspath(nb_path))
    if not src.is_file():
        raise InputError(f"nb_path: the notebook {str(src)!r} does not exist")
    check_target(out, overwrite=overwrite, argument="out")  # before running the notebook
    try:
        nb = nbformat.read(src, as_version=4)
    except Exception as err:
        raise InputError(f"nb_path: {str(src)!r} is not a readable notebook ({type(err).__name__}: {err})") from err
    if offline is None and manager is None:
        warnings.warn(f"export_notebook_html: the Jupyter widget manager is not vendored, so the page loads it "
                      f"from a CDN (widgets need network); {_VENDOR_HINT}", OdeinferWarning, stacklevel=2)
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
    if manager is None:
        body, _ = nbconvert.HTMLExporter(template_name="lab").from_notebook_node(nb)
    else:
        exporter = nbconvert.HTMLExporter(template_name="odeinfer_offline", extra_template_basedirs=[_templates()])
        body, _ = exporter.from_notebook_node(nb, resources={"odeinfer_widget_manager": manager})
    return write_atomic(body, out, overwrite=overwrite, argument="out")
