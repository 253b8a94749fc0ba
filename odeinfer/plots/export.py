"""Figures as inline images for HTML reports."""

from __future__ import annotations

import base64
import io

from odeinfer.errors import InputError

__all__ = ["to_png_base64"]


def to_png_base64(fig, dpi=100):
    """PNG of ``fig`` encoded as base64 text (for ``<img src="data:image/png;base64,...">``).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    dpi : int, default 100

    Returns
    -------
    str
    """
    from matplotlib.figure import Figure

    if not isinstance(fig, Figure):
        raise InputError(f"fig: expected a matplotlib Figure (what odeinfer.plots functions return), "
                         f"got {type(fig).__name__}")
    if isinstance(dpi, bool) or not isinstance(dpi, (int, float)) or not 10 <= dpi <= 1200:
        raise InputError(f"dpi: expected a number between 10 and 1200, got {dpi!r}")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return base64.b64encode(buf.getvalue()).decode("ascii")
