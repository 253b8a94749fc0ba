"""Helpers shared by the widget panels: PNG rendering, messages, argument checks."""

from __future__ import annotations

import html
import io
import sys

from odeinfer.errors import InputError

__all__ = ["png_bytes", "message_html", "check_model", "check_data", "close_figure", "observables_png"]


def png_bytes(fig, dpi=80) -> bytes:
    """The figure as PNG bytes (for ``ipywidgets.Image``; embeds in saved widget state)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def close_figure(fig):
    """Release a figure made through pyplot (figures made with ``Figure()`` need nothing)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close(fig)


def message_html(text: str, kind: str = "info") -> str:
    """An escaped one-line message; ``kind`` in {"info", "error"}."""
    colour = "#8a1b1b" if kind == "error" else "#444"
    return f"<div style='color:{colour}'>{html.escape(str(text))}</div>"


def check_model(model, argument="model"):
    from odeinfer.model import Model

    if not isinstance(model, Model):
        raise InputError(f"{argument}: expected an odeinfer Model (made with @oi.model or Model.from_equations), "
                         f"got {type(model).__name__}")
    return model


def check_data(data, model, argument="data"):
    """One Data set whose columns are states of ``model`` (observables, for a model with observables)."""
    from odeinfer.data import Data, Experiments

    if isinstance(data, Experiments):
        raise InputError(f"{argument}: got Experiments with {len(data)} experiments; this panel shows one data "
                         f"set at a time: pass one of them, e.g. {argument}=experiments[0]")
    if not isinstance(data, Data):
        raise InputError(f"{argument}: expected an odeinfer Data (e.g. Data.from_frame(...)), got {type(data).__name__}")
    if model.observables:
        unknown = [s for s in data.states if s not in model.observable_names]
        if unknown:
            raise InputError(f"{argument}: columns {unknown} are not observables of model {model.name!r} "
                             f"(observables: {list(model.observable_names)}); rename them with data.rename({{...}})")
        return data
    unknown = [s for s in data.states if s not in model.states]
    if unknown:
        raise InputError(f"{argument}: states {unknown} are not states of model {model.name!r} "
                         f"(states: {list(model.states)}); rename them with data.rename({{...}})")
    return data


def observables_png(fit, dpi=80, **kwargs) -> bytes:
    """PNG of :func:`odeinfer.plots.observables` for a likelihood fit (data, fitted observables, bands)."""
    from odeinfer.plots import observables

    fig = observables(fit, **kwargs)
    try:
        return png_bytes(fig, dpi)
    finally:
        close_figure(fig)
