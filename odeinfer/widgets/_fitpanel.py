"""``FitPanel``: choose estimators and options, run them with a progress bar, compare results."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import time
import warnings

import numpy as np

from odeinfer.errors import InputError
from odeinfer.widgets._common import check_data, check_model, message_html, observables_png

__all__ = ["FitPanel", "parse_options", "DEFAULT_ESTIMATORS"]

#: Estimators offered by default (those that cannot be imported are left out).
DEFAULT_ESTIMATORS = {
    "OrthogonalConditions": ("odeinfer.estimators", "OrthogonalConditions"),
    "GradientMatching": ("odeinfer.estimators", "GradientMatching"),
    "NewtonRaphson": ("odeinfer.estimators", "NewtonRaphson"),
    "GradientDescent": ("odeinfer.estimators", "GradientDescent"),
    "Embedding": ("odeinfer.estimators.embedding", "Embedding"),
    "Simultaneous": ("odeinfer.estimators.simultaneous", "Simultaneous"),
}


def parse_options(text: str) -> dict:
    """Keyword options from text such as ``"max_iter=50, damping='none'"`` (literals only; nothing is run).

    Raises
    ------
    InputError
        Not ``name=literal`` pairs separated by commas.
    """
    if not isinstance(text, str):
        raise InputError(f"options: expected text such as \"max_iter=50, damping='none'\", got {type(text).__name__}")
    if not text.strip():
        return {}
    hint = "write options as name=value pairs separated by commas, e.g. max_iter=50, damping='none'"
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except SyntaxError:
        raise InputError(f"options: cannot parse {text!r}; {hint}") from None
    if not isinstance(call, ast.Call) or call.args or any(k.arg is None for k in call.keywords):
        raise InputError(f"options: {text!r} has values without a name; {hint}")
    out = {}
    for k in call.keywords:
        try:
            out[k.arg] = ast.literal_eval(k.value)
        except ValueError:
            raise InputError(f"options: the value of {k.arg!r} in {text!r} is not a literal (number, string, "
                             f"True/False/None, list, tuple or dict); {hint}") from None
    return out


def _resolve(estimators):
    from odeinfer.estimators import Estimator

    if estimators is None:
        out = {}
        for name, (mod, attr) in DEFAULT_ESTIMATORS.items():
            try:
                out[name] = getattr(importlib.import_module(mod), attr)()
            except Exception:  # an estimator module that is not there yet is simply not offered
                continue
        return out
    if isinstance(estimators, (str, Estimator)):
        estimators = [estimators]
    out = {}
    for i, e in enumerate(estimators):
        if isinstance(e, str):
            if e not in DEFAULT_ESTIMATORS:
                raise InputError(f"estimators[{i}]: unknown estimator {e!r}; known: {list(DEFAULT_ESTIMATORS)} "
                                 "(or pass a configured estimator instance)")
            mod, attr = DEFAULT_ESTIMATORS[e]
            e = getattr(importlib.import_module(mod), attr)()
        elif not isinstance(e, Estimator):
            raise InputError(f"estimators[{i}]: expected an estimator name or instance, got {type(e).__name__}")
        label = type(e).__name__
        k = 2
        while label in out:
            label, k = f"{type(e).__name__}#{k}", k + 1
        out[label] = e
    if not out:
        raise InputError("estimators: the list is empty; pass estimator names such as ['OrthogonalConditions']")
    return out


class FitPanel:
    """Choose estimators and their options, run them with a progress bar, compare the results.

    Parameters
    ----------
    model : Model
    data : Data or Experiments
    estimators : list of str or Estimator, optional
        What to offer (names from :data:`DEFAULT_ESTIMATORS` or configured instances);
        default every importable one of :data:`DEFAULT_ESTIMATORS`.
    start : Estimate, dict or array-like, optional
        Start values passed to every fit. Without it, each estimator after the first
        starts from the first converged estimate of this run.
    selected : list of str, optional
        Labels ticked initially (default the first estimator).
    x0 : dict, optional
        Initial states passed to the estimators whose ``fit`` takes ``x0`` (a likelihood fit of a
        model with observables needs them: numbers or expressions of parameters).
    dpi : int, default 72
        Resolution of the observables plot.

    Attributes
    ----------
    checkboxes, options : dict of label -> ipywidgets.Checkbox / ipywidgets.Text
        ``options`` take ``name=value`` pairs (see :func:`parse_options`) that replace
        fields of the estimator's configuration.
    progress : ipywidgets.IntProgress
    status, results : ipywidgets.HTML
    estimates : dict of label -> Estimate
        Results of the last run (failed runs are absent; see :meth:`table`).
    shown : ipywidgets.Dropdown
        The likelihood fits of the last run (models with observables, fitted by ``oi.Embedding``);
        the one chosen is drawn in ``observables``.
    observables : ipywidgets.Image
        Its data and fitted observables with their bands, per experiment (condition):
        :func:`odeinfer.plots.observables`; empty when the run has no likelihood fit.
    widget : ipywidgets.VBox
    """

    def __init__(self, model, data, *, estimators=None, start=None, selected=None, x0=None, dpi=72):
        import ipywidgets as w

        from odeinfer.data import Experiments

        check_model(model)
        if not isinstance(data, Experiments):
            check_data(data, model)
        self.model, self.data, self.start, self.x0 = model, data, start, x0
        self.available = _resolve(estimators)
        selected = [next(iter(self.available))] if selected is None else list(selected)
        unknown = [s for s in selected if s not in self.available]
        if unknown:
            raise InputError(f"selected: {unknown} are not offered; choose from {list(self.available)}")
        self.checkboxes = {k: w.Checkbox(value=k in selected, description=k, indent=False) for k in self.available}
        self.options = {k: w.Text(placeholder="options, e.g. max_iter=50", layout=w.Layout(width="60%"))
                        for k in self.available}
        self.run_button = w.Button(description="run", button_style="primary")
        self.run_button.on_click(lambda _: self.run())
        self.progress = w.IntProgress(value=0, min=0, max=1, description="progress")
        self.status = w.HTML()
        self.results = w.HTML()
        self.estimates, self._rows = {}, []
        self.dpi = dpi
        self.shown = w.Dropdown(options=[], description="observables")
        self._refilling = False
        self.shown.observe(lambda change: None if self._refilling else self.show_observables(change["new"]),
                           names="value")
        self.observables = w.Image(format="png")
        self.observables_message = w.HTML()
        rows = [w.HBox([self.checkboxes[k], self.options[k]]) for k in self.available]
        self.widget = w.VBox(rows + [w.HBox([self.run_button, self.progress]), self.status, self.results,
                                     self.shown, self.observables_message, self.observables])

    def chosen(self):
        """Labels of the ticked estimators, in order."""
        return [k for k, c in self.checkboxes.items() if c.value]

    def run(self):
        """Fit every ticked estimator in turn, updating the progress bar; returns :meth:`table`.

        An estimator that fails (bad options, an error in the fit) gets a row with status
        ``"error"`` and its message; the others still run.
        """
        chosen = self.chosen()
        self.estimates, self._rows = {}, []
        self.progress.max, self.progress.value = max(len(chosen), 1), 0
        if not chosen:
            self.status.value = message_html("tick at least one estimator", "error")
            self.results.value = ""
            return self.table()
        self.run_button.disabled = True
        try:
            for i, label in enumerate(chosen):
                self.status.value = message_html(f"running {label} ({i + 1}/{len(chosen)}) ...")
                self._rows.append(self._fit_one(label))
                self.progress.value = i + 1
                self.results.value = self._table_html()
        finally:
            self.run_button.disabled = False
        n_ok = sum(r["status"] == "converged" for r in self._rows)
        self.status.value = message_html(f"done: {n_ok} of {len(chosen)} converged")
        opts = [k for k, e in self.estimates.items() if e._objective is not None]
        keep = self.shown.value if self.shown.value in opts else (opts[0] if opts else None)
        self._refilling = True
        try:
            self.shown.options = opts
            self.shown.value = keep
        finally:
            self._refilling = False
        self.show_observables()
        return self.table()

    def show_observables(self, label=None):
        """Draw the data and fitted observables (with bands, per experiment) of the likelihood fit
        ``label`` (default: the one chosen in :attr:`shown`) in :attr:`observables`; returns the
        message shown ("" when drawn)."""
        label = self.shown.value if label is None else label
        fit = self.estimates.get(label) if label is not None else None
        text = ""
        if fit is None or fit._objective is None:
            self.observables.value = b""
            if self.model.observables:
                text = "no likelihood fit to draw: run oi.Embedding to see the fitted observables"
        else:
            try:
                self.observables.value = observables_png(fit, self.dpi)
            except Exception as err:  # the panel must not die on one plot
                self.observables.value = b""
                text = f"observables plot unavailable: {type(err).__name__}: {err}"
        self.observables_message.value = message_html(text, "error") if text else ""
        return text

    def _fit_one(self, label):
        row = {"estimator": label, "status": "error", "seconds": np.nan, "n_iter": np.nan, "cost": np.nan,
               "message": ""}
        try:
            est = dataclasses.replace(self.available[label], **parse_options(self.options[label].value))
        except (InputError, TypeError, ValueError) as err:
            row["message"] = f"options: {err}"
            return row
        start = self.start
        if start is None:
            start = next((e for e in self.estimates.values() if e.converged), None)
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                kw = {"x0": self.x0} if self.x0 is not None and "x0" in inspect.signature(est.fit).parameters else {}
                fit = est.fit(self.model, self.data, start=start, **kw)
            except Exception as err:  # shown in the table; the panel must not die on one estimator
                row.update(seconds=time.perf_counter() - t0, message=f"{type(err).__name__}: {err}")
                return row
        self.estimates[label] = fit
        notes = [fit.message] + list(fit.warnings) + [str(c.message) for c in caught]
        row.update(status=fit.status, seconds=time.perf_counter() - t0, n_iter=fit.n_iter, cost=fit.cost,
                   message="; ".join(n for n in dict.fromkeys(notes) if n))
        for n, v, s in zip(fit.names, fit.values, fit.bse.to_numpy()):
            row[n], row[f"se({n})"] = v, s
        return row

    def table(self):
        """The results of the last run: one row per estimator (status, seconds, n_iter, cost,
        message, then each estimated value and its standard error ``se(name)``)."""
        import pandas as pd

        head = ["status", "seconds", "n_iter", "cost", "message"]
        if not self._rows:
            return pd.DataFrame(columns=head)
        frame = pd.DataFrame(self._rows).set_index("estimator")
        rest = [c for c in frame.columns if c not in head]
        values = [c for c in rest if not c.startswith("se(")]
        ordered = [c for v in values for c in (v, f"se({v})") if c in frame.columns]
        return frame[head[:-1] + ordered + ["message"]]

    def _table_html(self):
        return self.table().to_html(escape=True, na_rep="", float_format=lambda v: f"{v:.5g}")

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self):
        return f"<FitPanel of {self.model.name!r}: {list(self.available)}>"
