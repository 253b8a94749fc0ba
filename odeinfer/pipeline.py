"""The standard analysis: matching estimators -> trajectory fit -> seeded NUTS -> diagnostics -> report.

:func:`analyze` (``oi.analyze``) is the one-call form for a notebook: it adds profile intervals
and the Wald vs profile vs posterior-credible table to :func:`run`, and its result shows as a
summary with tabs in Jupyter::

    result = oi.analyze(model, data, fast=True)     # fast: 100 draws, for a preview
    result                                          # tabs: summary, estimates, intervals, posterior, diagnostics
    result.export_html("analysis.html")

:func:`run` (used by ``odeinfer report spec.toml``) runs the estimators and the sampler only.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from odeinfer.errors import InputError, OdeinferError
from odeinfer.spec import ESTIMATORS, BayesSpec

__all__ = ["analyze", "run", "run_spec", "sampling_settings", "PipelineResult"]

_MATCHING = ("OrthogonalConditions", "GradientMatching", "NewtonRaphson")
#: NUTS settings of :func:`analyze`: the default, and the ``fast=True`` preset (tests, previews).
_SAMPLING = {"draws": 1000, "tune": 500, "chains": 2}
_FAST_SAMPLING = {"draws": 100, "tune": 100, "chains": 2}


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
    intervals : pandas.DataFrame or None
        :func:`analyze` only: per quantity of the trajectory fit, ``estimate, se, wald_lower,
        wald_upper, profile_lower, profile_upper, posterior_mean, credible_lower, credible_upper``
        (equal-tailed credible intervals; NaN where not available).
    settings : dict
        :func:`analyze` only: ``draws, tune, chains, alpha, profile, fast``.
    """

    title: str
    model: object
    data: object
    estimates: list = field(default_factory=list)
    idata: object = None
    diagnostics: object = None
    notes: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    intervals: object = None
    settings: dict = field(default_factory=dict)

    @property
    def matching(self):
        """The first matching estimate (OrthogonalConditions, GradientMatching, NewtonRaphson), or None."""
        return next((e for e in self.estimates if e.estimator in _MATCHING), None)

    @property
    def fit(self):
        """The last trajectory estimate (Embedding, Simultaneous), or None."""
        return next((e for e in reversed(self.estimates) if e.estimator not in _MATCHING), None)

    def items(self) -> list:
        """The report items, in order."""
        out = ["\n\n".join(self.notes), self.model, self.data, *self.estimates]
        if self.intervals is not None:
            out.append(self.intervals)
        if self.idata is not None:
            out.append(self.idata)
        if self.diagnostics is not None:
            out.append(self.diagnostics)
        return out

    def _repr_html_(self) -> str:
        from odeinfer.report._tabs import analysis_html

        return analysis_html(self)

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
        from the last converged, usable estimate (or ``start``); without either it finds its own
        start (matching estimators, else a multistart in ``bounds``; see ``oi.Embedding.fit``).
        An estimate whose values are not finite or whose parameter ran away (its own checks, see
        :func:`odeinfer.estimators._trajectory_check.unusable_reason`), or a matching estimate whose
        trajectory misses the data, is not used, with a note: neither as a start nor to seed the
        sampler (which then needs ``priors`` for every parameter).
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

    from odeinfer.estimators._trajectory_check import unusable_reason

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
        why = unusable_reason(est, covariance=False, trajectory=name in _MATCHING) if est.status == "converged" \
            else None
        if why is not None:
            say(f"{name}: not used to start what follows: {why} (see its warnings)")
        elif est.status == "converged":
            best = est
    if bayes is not None and bayes.enabled:
        _bayes(res, model, data, best, bayes, priors, x0, fixed, rng, say)
    return res


def sampling_settings(*, fast=False, draws=None, tune=None, chains=None) -> dict:
    """NUTS settings ``{"draws", "tune", "chains"}``: the default (1000, 500, 2) or, with ``fast``,
    the preview preset (100, 100, 2); given values win.

    Raises
    ------
    InputError
        ``fast`` not a bool; ``draws``, ``tune`` or ``chains`` not a positive integer.
    """
    if not isinstance(fast, bool):
        raise InputError(f"fast: expected True or False, got {fast!r}; fast=True samples "
                         f"{_FAST_SAMPLING['draws']} draws for a preview")
    out = dict(_FAST_SAMPLING if fast else _SAMPLING)
    for name, v in (("draws", draws), ("tune", tune), ("chains", chains)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name}: expected a positive integer, got {v!r}; pass e.g. {name}={out[name]} "
                             "or leave it out for the default")
        out[name] = int(v)
    return out


def analyze(model, data, *, estimators=("OrthogonalConditions", "Embedding"), start=None, fixed=None, x0=None,
            bounds=None, priors=None, likelihood=None, sample=True, fast=False, draws=None, tune=None, chains=None,
            profile=True, alpha=0.05, out=None, title="odeinfer analysis", progress=print,
            rng=0) -> PipelineResult:
    """The standard analysis of ``model`` on ``data`` in one call.

    Runs :func:`run` (matching estimators, the trajectory fit started from them, NUTS seeded by
    the fit, diagnostics), then the profile-likelihood intervals of the trajectory fit and the
    table of Wald vs profile vs posterior-credible intervals (``result.intervals``).

    Parameters
    ----------
    model : Model
    data : Data or Experiments
    estimators : sequence of str, default ("OrthogonalConditions", "Embedding")
        As :func:`run`; matching estimators first. A trajectory estimator without a start
        takes it from the matching estimate (or finds it itself, see ``oi.Embedding.fit``).
    start, fixed, x0, bounds, priors
        As :func:`run`.
    likelihood : str, optional
        For :func:`odeinfer.bayes.build_model` (e.g. ``"lognormal"``); default: from the model's noise.
    sample : bool, default True
        False: no posterior (no credible intervals, no diagnostics).
    fast : bool, default False
        The preview preset: 100 draws and 100 tuning steps per chain, 2 chains (default 1000,
        500, 2); for tests and a first look, not for conclusions.
    draws, tune, chains : int, optional
        NUTS settings per chain (override the preset).
    profile : bool, default True
        Compute the profile-likelihood intervals (NaN columns when False).
    alpha : float, default 0.05
        1 - level of every interval.
    out : str or os.PathLike, optional
        Also write the HTML report there; the path is checked before any work.
    title : str
    progress : callable or None, default print
        Receives one line of text per step; None: silent.
    rng : int, default 0
        Seed of the sampler.

    Returns
    -------
    PipelineResult
        With ``intervals`` and ``settings``; displays in Jupyter as a summary with tabs;
        ``export_html(path)`` writes the standalone report.

    Raises
    ------
    InputError
        Bad settings or an unusable ``out`` path (before any work); see also :func:`run`.
    """
    from odeinfer._io import check_target
    from odeinfer.diagnostics.intervals import _check_alpha

    if out is not None:
        check_target(out, argument="out")
    settings = sampling_settings(fast=fast, draws=draws, tune=tune, chains=chains)
    alpha = _check_alpha(alpha)
    for name, v in (("sample", sample), ("profile", profile)):
        if not isinstance(v, bool):
            raise InputError(f"{name}: expected True or False, got {v!r}")
    bayes = BayesSpec(likelihood=likelihood, **settings) if sample else None
    res = run(model, data, estimators=estimators, start=start, fixed=fixed, x0=x0, bounds=bounds, bayes=bayes,
              priors=priors, title=title, progress=progress or (lambda msg: None), rng=rng)
    res.settings.update(settings, alpha=alpha, profile=profile, fast=fast)
    if res.fit is not None:
        t0 = time.perf_counter()
        res.intervals = _interval_table(res.fit, res.idata, alpha, profile)
        res.timings["intervals"] = time.perf_counter() - t0
        level = f"{100 * (1 - alpha):g}%"
        failed = res.intervals.attrs.get("notes", [])
        msg = f"intervals: {level} Wald" + (", profile" if profile else "") + (
            ", posterior credible" if res.idata is not None else "") + f" for {res.fit.estimator}"
        res.notes.append(msg + ("; " + "; ".join(failed) if failed else ""))
        if progress is not None:
            progress(res.notes[-1])
    if out is not None:
        res.export_html(out)
    return res


def _interval_table(fit, idata, alpha, profile):
    """The wide Wald / profile / credible table of ``fit`` from :func:`odeinfer.compare_intervals`."""
    import pandas as pd

    from odeinfer.diagnostics import compare_intervals

    methods = ("wald", "profile") if profile else ("wald",)
    long = compare_intervals([fit], idata=idata, alpha=alpha, methods=methods)
    cols = ["estimate", "se", "wald_lower", "wald_upper", "profile_lower", "profile_upper", "posterior_mean",
            "credible_lower", "credible_upper"]
    tab = pd.DataFrame(float("nan"), index=list(fit.names), columns=cols)
    tab["estimate"] = fit.values
    tab["se"] = fit.bse.to_numpy()
    notes = {}  # (method, note) -> params: one line per distinct reason
    for r in long.itertuples(index=False):
        if r.source == "posterior":
            if r.method == "equal-tailed":
                tab.loc[r.param, ["posterior_mean", "credible_lower", "credible_upper"]] = [r.estimate, r.lower,
                                                                                             r.upper]
        else:
            tab.loc[r.param, [f"{r.method}_lower", f"{r.method}_upper"]] = [r.lower, r.upper]
            if r.note:
                notes.setdefault((r.method, r.note), []).append(r.param)
    tab.index.name = "param"
    tab.attrs["title"] = f"{fit.estimator}: Wald vs profile vs posterior {100 * (1 - alpha):g}% intervals"
    tab.attrs["notes"] = [f"{method} interval of {params}: {note}" for (method, note), params in notes.items()]
    return tab


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
    from odeinfer.bayes._idata import quiet_arviz

    quiet_arviz()  # before PyMC imports ArviZ
    import pymc as pm

    return {name: getattr(pm, dist).dist(*args, **kwargs) for name, (dist, args, kwargs) in parsed.items()}


def run_spec(spec, *, progress=print) -> PipelineResult:
    """:func:`run` with the settings of a parsed :class:`odeinfer.spec.Spec`."""
    return run(spec.model, spec.data, estimators=spec.estimators, start=spec.start or None,
               fixed=spec.fixed or None, x0=spec.x0 or None, bounds=spec.bounds or None, bayes=spec.bayes,
               title=spec.title, progress=progress)
