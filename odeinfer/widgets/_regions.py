"""``RegionPanel``: confidence regions of estimates against posterior credible regions."""

from __future__ import annotations

import importlib

from odeinfer.bayes._idata import posterior
from odeinfer.diagnostics.intervals import as_estimates, source_labels
from odeinfer.errors import InputError
from odeinfer.widgets._common import close_figure, message_html, observables_png, png_bytes

__all__ = ["RegionPanel"]


def _posterior_names(idata):
    if idata is None:
        return []
    try:
        from odeinfer.diagnostics import parameter_names
    except Exception:  # without the diagnostics module, take the posterior's scalar variables
        post = posterior(idata)
        return [v for v in post.data_vars if post[v].ndim == 2]
    return parameter_names(idata)


class RegionPanel:
    """Pick a parameter pair, a level and the estimators; see their confidence regions against
    the posterior's credible regions, and the interval comparison table.

    Parameters
    ----------
    estimates : Estimate or list of Estimate
        Estimates of one model (different models raise InputError).
    idata : arviz.InferenceData, optional
        Posterior draws named as in :mod:`odeinfer.bayes` (``alpha``, ``x0`` with dim ``state``).
    pair : tuple of two str, optional
        Initial pair (default the first two names).
    level : float, default 0.95
        Initial level, in [0.5, 0.99].
    profile : bool, default False
        Initial state of the "profile regions" checkbox: also draw the joint profile-likelihood
        regions of estimates that provide profiles (``oi.Embedding``, ``oi.AdjointDDE``); each
        pair costs a grid of re-optimisations the first time (then cached).
    dpi : int, default 80

    Attributes
    ----------
    names : list of str
        Quantities offered in the dropdowns (estimate names, then posterior-only ones).
    x, y : ipywidgets.Dropdown
    level : ipywidgets.FloatSlider
    checkboxes : dict of str to ipywidgets.Checkbox
        One per estimate, keyed by label (estimator name, numbered when repeated).
    profile : ipywidgets.Checkbox
    image : ipywidgets.Image
    observables : ipywidgets.Image
        The data and fitted observables (with bands, per experiment) of the first ticked likelihood
        fit (a model with observables fitted by ``oi.Embedding``), :func:`odeinfer.plots.observables`;
        empty when none is ticked.
    message, table : ipywidgets.HTML
    widget : ipywidgets.VBox

    Notes
    -----
    The drawing is :func:`odeinfer.plots.regions`, the table
    :func:`odeinfer.diagnostics.compare_intervals` restricted to the pair; if either is
    unavailable the panel says why instead of failing.
    """

    def __init__(self, estimates, idata=None, *, pair=None, level=0.95, profile=False, dpi=80):
        import ipywidgets as w

        self.estimates = as_estimates(estimates)
        if idata is not None and posterior(idata) is None:
            raise InputError(f"idata: expected an arviz.InferenceData with a posterior group, got {type(idata).__name__}")
        if not self.estimates and idata is None:
            raise InputError("estimates: got no estimates and no idata; pass at least one of them")
        self.idata, self.dpi = idata, dpi
        names = []
        for e in self.estimates:
            names += [n for n in e.names if n not in names]
        names += [n for n in _posterior_names(idata) if n not in names]
        if len(names) < 2:
            raise InputError(f"estimates: a region needs two quantities, only {names} are available")
        self.names = names
        pair = tuple(pair) if pair is not None else (names[0], names[1])
        if len(pair) != 2 or any(p not in names for p in pair) or pair[0] == pair[1]:
            raise InputError(f"pair: expected two different names from {names}, got {pair!r}")
        if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.5 <= level <= 0.99:
            raise InputError(f"level: expected a number in [0.5, 0.99], got {level!r}")
        self.labels = source_labels(self.estimates)
        self.x = w.Dropdown(options=names, value=pair[0], description="x")
        self.y = w.Dropdown(options=names, value=pair[1], description="y")
        self.level = w.FloatSlider(value=float(level), min=0.5, max=0.99, step=0.01, description="level",
                                   readout_format=".2f", continuous_update=False)
        self.checkboxes = {lab: w.Checkbox(value=True, description=lab, indent=False) for lab in self.labels}
        self.profile = w.Checkbox(value=bool(profile), description="profile regions", indent=False)
        self.image = w.Image(format="png")
        self.observables = w.Image(format="png")
        self._observables_of = None
        self.message = w.HTML()
        self.table = w.HTML()
        for ctl in (self.x, self.y, self.level, self.profile, *self.checkboxes.values()):
            ctl.observe(lambda _change: self.refresh(), names="value")
        self.widget = w.VBox([w.HBox([self.x, self.y, self.level, self.profile]),
                              w.HBox(list(self.checkboxes.values())),
                              self.message, self.image, self.table, self.observables])
        self.refresh()

    def selected(self):
        """The estimates whose checkbox is ticked."""
        return [e for e, lab in zip(self.estimates, self.labels) if self.checkboxes[lab].value]

    def refresh(self):
        """Redraw the regions and the table for the current choices. Returns the message shown
        ("" when everything was drawn)."""
        pair, level, chosen = (self.x.value, self.y.value), float(self.level.value), self.selected()
        problems = []
        if pair[0] == pair[1]:
            problems.append("choose two different quantities for x and y")
        elif not chosen and self.idata is None:
            problems.append("tick at least one estimator")
        else:
            problems += self._draw(chosen, pair, level)
        self.table.value, note = self._table(chosen, pair, level)
        problems += [note] if note else []
        problems += self._draw_observables(chosen)
        text = "; ".join(problems)
        self.message.value = message_html(text, "error") if text else ""
        return text

    def _draw(self, chosen, pair, level):
        try:
            plots = importlib.import_module("odeinfer.plots")

            fig = plots.regions(chosen, idata=self.idata, pair=pair, level=level, profile=self.profile.value)
        except Exception as err:
            self.image.value = b""
            return [f"plot unavailable: {type(err).__name__}: {err}"]
        try:
            self.image.value = png_bytes(fig, self.dpi)
        finally:
            close_figure(fig)
        return []

    def _draw_observables(self, chosen):
        """Draw the first ticked likelihood fit's observables (redrawn only when that fit changes)."""
        fit = next((e for e in chosen if e._objective is not None), None)
        if fit is self._observables_of:
            return []
        self._observables_of = fit
        self.observables.value = b""
        if fit is None:
            return []
        try:
            self.observables.value = observables_png(fit, self.dpi)
        except Exception as err:
            self._observables_of = None
            return [f"observables plot unavailable: {type(err).__name__}: {err}"]
        return []

    def _table(self, chosen, pair, level):
        if not chosen:
            return "", ""
        try:
            from odeinfer.diagnostics import compare_intervals

            frame = compare_intervals(chosen, idata=self.idata, alpha=round(1.0 - level, 10))
        except Exception as err:
            return "", f"interval table unavailable: {type(err).__name__}: {err}"
        frame = frame[frame["param"].isin(pair)]
        html = frame.to_html(index=False, escape=True, na_rep="", float_format=lambda v: f"{v:.4g}")
        return html, ""

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self):
        return f"<RegionPanel {self.labels} pair=({self.x.value}, {self.y.value}) level={self.level.value:.2f}>"
