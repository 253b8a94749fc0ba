"""The standard analysis: matching estimators -> trajectory fit -> seeded NUTS -> diagnostics -> report.

Used by ``odeinfer demo`` and ``odeinfer report spec.toml``; also callable from a notebook::

    result = oi.pipeline.run(model, data, estimators=("OrthogonalConditions", "Embedding"))
    result.export_html("analysis.html")
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

from odeinfer.errors import InputError, OdeinferError
from odeinfer.spec import ESTIMATORS, BayesSpec

__all__ = ["run", "run_spec", "PipelineResult"]

_MATCHING = ("OrthogonalConditions", "GradientMatching", "NewtonRaphson")


@dataclass
class PipelineResult:
    """What :func:`run` produced.

    Attributes
    ----------
    title : str
    model : Model
    data : Data or Experiments
    estimates : list of Estimate
        In the order they ran; failed estimators are left out and listed in ``notes``.
    idata : arviz.InferenceData or None
    diagnostics : DiagnosticsReport or None
    notes : list of str
        What happened, step by step (also printed through ``progress``).
    timings : dict of str to float
        Wall seconds per step, including any compilation (the notes give no estimator times
        and the sampler's time without compilation).
    """

    title: str
    model: object
    data: object
    estimates: list = field(default_factory=list)
    idata: object = None
    diagnostics: object = None
    notes: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)

    def items(self) -> list:
        """The report items, in order."""
        out = ["\n\n".join(self.notes), self.model, self.data, *self.estimates]
        if self.idata is not None:
            out.append(self.idata)
        if self.diagnostics is not None:
            out.append(self.diagnostics)
        return out

    def export_html(self, path, **kwargs) -> str:
        """Write the standalone HTML report (see :func:`odeinfer.report.export_html`)."""
        from odeinfer.report import export_html

        return export_html(self.items(), path, title=self.title, **kwargs)


def run(model, data, *, estimators=("OrthogonalConditions", "Embedding"), start=None, fixed=None, x0=None,
        bounds=None, bayes: BayesSpec | None = BayesSpec(), priors=None, title="odeinfer analysis",
        progress=print, rng=0) -> PipelineResult:
    """Run the standard analysis of ``model`` on ``data``.

    Parameters
    ----------
    model : Model
    data : Data or Experiments
    estimators : sequence of str, default ("OrthogonalConditions", "Embedding")
        Names from :data:`odeinfer.spec.ESTIMATORS`. Matching estimators run first (they need every
        state observed and are skipped with a note otherwise); each trajectory estimator starts
        from the last successful estimate (or ``start``).
    start, fixed : dict, optional
        Starting values / fixed values of parameters, ``{name: value}``.
    x0 : dict, optional
        Known initial states; default: estimated by the trajectory estimators and the sampler.
    bounds : dict, optional
        ``{param: (lower, upper)}`` for :class:`odeinfer.Embedding`.
    bayes : BayesSpec or None
        Sampler settings; None or ``enabled=False`` skips the Bayesian stage.
    priors : dict, optional
        For :func:`odeinfer.bayes.build_model` (PyMC distributions); overrides ``bayes.priors``.
    title : str
    progress : callable, default print
        Receives one line of text per step.
    rng : int, default 0
        Seed of the sampler.
    """
    unknown = [e for e in estimators if e not in ESTIMATORS]
    if unknown or not estimators:
        raise InputError(f"estimators: {unknown or 'empty'} not available; choose from {list(ESTIMATORS)}")
    res = PipelineResult(title, model, data)

    def say(msg):
        res.notes.append(msg)
        progress(msg)

    order = [e for e in estimators if e in _MATCHING] + [e for e in estimators if e not in _MATCHING]
    best = start
    for name in order:
        t0 = time.perf_counter()
        try:
            est = _fit_one(name, model, data, start=best, fixed=fixed, x0=x0, bounds=bounds)
        except OdeinferError as exc:
            say(f"{name}: skipped ({exc})")
            continue
        res.timings[name] = time.perf_counter() - t0
        res.estimates.append(est)
        # no time in the note: the wall time includes the one-off compilation of the model's kernels
        say(f"{name}: {est.status}; "
            + ", ".join(f"{n} = {v:.4g}" for n, v in zip(est.names, est.values)))
        if est.status == "converged":
            best = est
    if bayes is not None and bayes.enabled:
        _bayes(res, model, data, best, bayes, priors, x0, fixed, rng, say)
    return res


def _fit_one(name, model, data, *, start, fixed, x0, bounds):
    import odeinfer as oi

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", oi.IdentifiabilityWarning)  # recorded in est.warnings
        if name == "Embedding":
            return oi.Embedding(bounds=bounds, estimate_x0=x0 is None).fit(model, data, start=start, fixed=fixed, x0=x0)
        if name == "Simultaneous":
            return oi.Simultaneous().fit(model, data, start=start, fixed=fixed, x0=x0)
        est = getattr(oi, name)()
        if name == "NewtonRaphson":
            return est.fit(model, data, start=start, fixed=fixed)
        return est.fit(model, data, fixed=fixed, x0=x0)


def _bayes(res, model, data, init, spec, priors, x0, fixed, rng, say):
    from odeinfer import bayes, diagnostics
    from odeinfer.bayes import _idata
    from odeinfer.results import Estimate

    if priors is None and spec.priors:
        priors = _prior_dists(spec.priors)
    init = init if isinstance(init, Estimate) else None
    say(f"NUTS: {spec.chains} chains x {spec.draws} draws, {spec.tune} tuning steps"
        + (f", seeded by {init.estimator}" if init is not None else ", PyMC's default start"))
    t0 = time.perf_counter()
    kw = {"likelihood": spec.likelihood} if spec.likelihood else {}
    try:
        res.idata = bayes.sample(model, data, init=init, draws=spec.draws, tune=spec.tune, chains=spec.chains,
                                 rng=rng, priors=priors, x0=x0, fixed=fixed, **kw)
    except OdeinferError as exc:
        say(f"NUTS: skipped ({exc})")
        return
    res.timings["NUTS"] = time.perf_counter() - t0
    res.diagnostics = diagnostics.check(res.idata)
    sampling = _idata.attrs(res.idata).get("sampling_time")  # recorded by bayes.sample, without compilation
    done = f"sampled in {sampling:.1f} s (without compilation)" if isinstance(sampling, (int, float)) else "done"
    say(f"NUTS: {done}; diagnostics "
        + ("pass" if res.diagnostics.passed else "FAIL: " + ", ".join(res.diagnostics.failed)))


def _prior_dists(parsed):
    """``{name: (dist, args, kwargs)}`` (from a spec) -> unnamed PyMC distributions."""
    from odeinfer.bayes import _idata  # noqa: F401  (silences ArviZ's banner before PyMC imports it)
    import pymc as pm

    return {name: getattr(pm, dist).dist(*args, **kwargs) for name, (dist, args, kwargs) in parsed.items()}


def run_spec(spec, *, progress=print) -> PipelineResult:
    """:func:`run` with the settings of a parsed :class:`odeinfer.spec.Spec`."""
    return run(spec.model, spec.data, estimators=spec.estimators, start=spec.start or None,
               fixed=spec.fixed or None, x0=spec.x0 or None, bounds=spec.bounds or None, bayes=spec.bayes,
               title=spec.title, progress=progress)
