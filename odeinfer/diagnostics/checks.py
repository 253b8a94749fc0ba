"""Sampler diagnostics with pass/fail and plain-language advice: :func:`check`.

Thresholds follow Vehtari, Gelman, Simpson, Carpenter & Bürkner (2021), "Rank-normalization,
folding, and localization: an improved R-hat", Bayesian Analysis 16(2) (R-hat < 1.01, bulk
and tail ESS > 400 for 4 chains), and Betancourt (2016), "Diagnosing suboptimal cotangent
disintegrations in Hamiltonian Monte Carlo", arXiv:1604.00695 (E-BFMI > 0.3).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from odeinfer._lazy import pandas as pd
from odeinfer.diagnostics._names import flat_labels, parameter_vars, posterior_of
from odeinfer.errors import InputError

__all__ = ["Check", "DiagnosticsReport", "check"]

#: sample_stats names of "this draw hit the maximum tree depth" (PyMC, nutpie, others).
_REACHED_KEYS = ("reached_max_treedepth", "maxdepth_reached", "max_treedepth_reached", "reached_maxdepth")
#: sample_stats names of the tree depth of each draw (PyMC, nutpie, Stan).
_DEPTH_KEYS = ("tree_depth", "depth", "treedepth", "treedepth__")
_DIVERGING_KEYS = ("diverging", "divergences", "divergent__")


class Check(NamedTuple):
    """One diagnostic: ``passed`` is True/False, or None when it was skipped (see ``advice``)."""

    name: str
    passed: bool | None
    value: float
    threshold: float
    advice: str


@dataclass(frozen=True, eq=False)
class DiagnosticsReport:
    """Outcome of :func:`check` (immutable).

    Attributes
    ----------
    checks : list of Check
        ``(name, passed, value, threshold, advice)`` per check, in the order r_hat,
        ess_bulk, ess_tail, divergences, bfmi, tree_depth, and identifiability for the
        posterior of a FitProblem sampled from a fit (``oi.bayes.sample(problem, init=fit)``);
        ``passed`` is None for a skipped check.
    table : pandas.DataFrame
        Per parameter (Estimate-style names as index): ``mean``, ``sd``, ``r_hat``,
        ``ess_bulk``, ``ess_tail``, ``ok`` (a new copy on each access).
    passed : bool
        True when no check failed (skipped checks do not fail).
    n_chains, n_draws : int
    """

    _checks: tuple
    _table: object = field(repr=False)
    n_chains: int = 0
    n_draws: int = 0

    @property
    def checks(self):
        return list(self._checks)

    @property
    def table(self):
        return self._table.copy(deep=True)

    @property
    def passed(self) -> bool:
        return all(c.passed is not False for c in self._checks)

    @property
    def failed(self):
        """Names of the failed checks."""
        return [c.name for c in self._checks if c.passed is False]

    def __getitem__(self, name):
        for c in self._checks:
            if c.name == name:
                return c
        raise KeyError(f"no check named {name!r}; checks: {[c.name for c in self._checks]}")

    def __repr__(self):
        head = (f"DiagnosticsReport: {'PASSED' if self.passed else 'FAILED'} "
                f"({self.n_chains} chains x {self.n_draws} draws)")
        lines = [head]
        for c in self._checks:
            mark = "skip" if c.passed is None else ("ok" if c.passed else "FAIL")
            lines.append(f"  [{mark:>4}] {c.name}: {_fmt(c.value)} (threshold {_fmt(c.threshold)}) - {c.advice}")
        return "\n".join(lines)

    def _repr_html_(self):
        e = html.escape
        rows = []
        for c in self._checks:
            mark, colour = (("skipped", "#777") if c.passed is None else
                            (("pass", "#1a7f37") if c.passed else ("FAIL", "#cf222e")))
            rows.append(f"<tr><td>{e(c.name)}</td><td style='color:{colour};font-weight:bold'>{mark}</td>"
                        f"<td>{e(_fmt(c.value))}</td><td>{e(_fmt(c.threshold))}</td><td>{e(c.advice)}</td></tr>")
        status = "passed" if self.passed else "FAILED"
        table = self._table.to_html(float_format=lambda v: f"{v:.4g}", escape=True)
        return (f"<div class='odeinfer-diagnostics'><p><b>Sampler diagnostics: {status}</b> "
                f"({self.n_chains} chains &times; {self.n_draws} draws)</p>"
                "<table><thead><tr><th>check</th><th>result</th><th>value</th><th>threshold</th><th>advice</th>"
                f"</tr></thead><tbody>{''.join(rows)}</tbody></table>{table}</div>")


def _fmt(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return f"{float(v):.4g}"


def _positive(name, v, *, integer=False, allow_zero=False):
    bad = isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v)
    if not bad:
        bad = v < 0 if allow_zero else v <= 0
    if not bad and integer:
        bad = int(v) != v
    if bad:
        kind = "non-negative" if allow_zero else "positive"
        raise InputError(f"{name}: expected a {kind} {'integer' if integer else 'number'}, got {v!r}")
    return int(v) if integer else float(v)


def _stat(ss, keys):
    if ss is None:
        return None, None
    for k in keys:
        if k in ss.data_vars:
            return k, np.asarray(ss[k].values)
    return None, None


def check(idata, *, rhat_max=1.01, ess_min=400, bfmi_min=0.3, max_divergences=0, var_names=None,
          max_treedepth_fraction=0.0) -> DiagnosticsReport:
    """Run the standard MCMC diagnostics on ``idata`` with pass/fail and advice.

    Parameters
    ----------
    idata : arviz.InferenceData
        Needs a ``posterior`` group with dims ``(chain, draw, ...)``; ``sample_stats``
        (``diverging``, ``energy``, tree depth) is used when present.
    rhat_max : float, default 1.01
        Largest acceptable rank-normalised split R-hat.
    ess_min : float, default 400
        Smallest acceptable bulk and tail effective sample size (all chains together).
    bfmi_min : float, default 0.3
        Smallest acceptable energy Bayesian fraction of missing information per chain.
    max_divergences : int, default 0
        Largest acceptable number of divergent transitions.
    var_names : sequence of str, optional
        Posterior variables to check (default: every parameter-like variable, i.e.
        without a ``time`` dim).
    max_treedepth_fraction : float, default 0.0
        Largest acceptable fraction of draws that hit the maximum tree depth (read from
        ``reached_max_treedepth`` (PyMC) or ``maxdepth_reached`` (nutpie)).

    Notes
    -----
    *identifiability* (only where the posterior records it: ``oi.bayes.sample(problem,
    init=fit)``): the rank of the Fisher information at the fit the chains started from. It fails
    when the data leave parameters undetermined that have no prior of their own (uniform in their
    bounds): along that direction the posterior is the prior's up to the bounds, so the ends of
    their intervals at the bounds report the bounds rather than the data, even when the chains mix
    well. It is also the usual cause of poor mixing (NUTS has to cross that flat range): the advice
    of failed R-hat, ESS and tree-depth checks then names these parameters. Unidentified parameters
    with a prior of their own pass (the posterior along them is that prior's).

    Returns
    -------
    DiagnosticsReport
    """
    from odeinfer.bayes import _idata

    post = posterior_of(idata)
    rhat_max = _positive("rhat_max", rhat_max)
    if rhat_max < 1:
        raise InputError(f"rhat_max: R-hat is >= 1 by construction; expected a threshold >= 1, got {rhat_max!r}")
    ess_min = _positive("ess_min", ess_min)
    bfmi_min = _positive("bfmi_min", bfmi_min)
    max_divergences = _positive("max_divergences", max_divergences, integer=True, allow_zero=True)
    max_treedepth_fraction = _positive("max_treedepth_fraction", max_treedepth_fraction, allow_zero=True)
    if var_names is None:
        var_names = parameter_vars(post)
    else:
        if isinstance(var_names, str):
            var_names = [var_names]
        unknown = [v for v in var_names if v not in post.data_vars]
        if unknown:
            raise InputError(f"var_names: {unknown} are not posterior variables; available: {sorted(post.data_vars)}")
        var_names = list(var_names)
    if not var_names:
        raise InputError("idata: the posterior has no parameter variables to check "
                         f"(variables: {list(post.data_vars)}); pass var_names=[...]")
    n_chains, n_draws = int(post.sizes["chain"]), int(post.sizes["draw"])
    if n_draws < 4:
        raise InputError(f"idata: the posterior has {n_draws} draws per chain; diagnostics need at least 4")

    ds = post[var_names]
    rhat, bulk, tail = _idata.rhat(ds), _idata.ess(ds, "bulk"), _idata.ess(ds, "tail")
    mean, sd = ds.mean(("chain", "draw")), ds.std(("chain", "draw"), ddof=1)
    rows, index = [], []
    for var in var_names:
        for label, pos in flat_labels(var, post[var]):
            def get(d):
                return float(d[var].isel(pos).values)
            rows.append({"mean": get(mean), "sd": get(sd), "r_hat": get(rhat),
                         "ess_bulk": get(bulk), "ess_tail": get(tail)})
            index.append(label)
    table = pd.DataFrame(rows, index=pd.Index(index, name="param"))
    # known values kept in the posterior (e.g. a given initial state) never vary: nothing to diagnose
    table = table[~(table["sd"] == 0)]
    if table.empty:
        raise InputError(f"idata: every checked variable is constant ({index}); pass var_names= of sampled ones")
    table["ok"] = ((table["r_hat"] <= rhat_max) & (table["ess_bulk"] >= ess_min)
                   & (table["ess_tail"] >= ess_min))

    bare, identified = _identifiability(_idata.attrs(idata))
    cause = _likely_cause(bare)
    checks = []
    worst_rhat = float(np.nanmax(table["r_hat"])) if np.isfinite(table["r_hat"]).any() else math.nan
    bad = list(table.index[~(table["r_hat"] <= rhat_max)])
    if math.isnan(worst_rhat):
        checks.append(Check("r_hat", False, worst_rhat, rhat_max, "R-hat could not be computed (constant or "
                            "non-finite draws); check the model for fixed or degenerate parameters."))
    elif bad:
        checks.append(Check("r_hat", False, worst_rhat, rhat_max,
                            f"Chains disagree for {_list(bad)}: they have not mixed. " + (
                                _then(cause, "run longer chains or more tuning, or reparameterise.") if cause else
                                "Run longer chains or more tuning, start chains from the frequentist estimate, "
                                "reparameterise (e.g. log scale) or look for multiple modes.")))
    else:
        checks.append(Check("r_hat", True, worst_rhat, rhat_max, "All chains agree."))
    for kind in ("bulk", "tail"):
        col = table[f"ess_{kind}"]
        low = list(table.index[~(col >= ess_min)])
        value = float(np.nanmin(col)) if np.isfinite(col).any() else math.nan
        what = "means and medians" if kind == "bulk" else "interval ends (5% and 95% quantiles)"
        if low:
            checks.append(Check(f"ess_{kind}", False, value, ess_min,
                                f"Too few effective draws for {_list(low)} to estimate {what} reliably. "
                                + (_then(cause, "draw more samples or reparameterise.") if cause else
                                   "Draw more samples, or improve mixing (seed the mass matrix from the estimate, "
                                   "reparameterise).")))
        else:
            checks.append(Check(f"ess_{kind}", True, value, ess_min, f"Enough effective draws for {what}."))

    ss = _idata.sample_stats(idata)
    _, div = _stat(ss, _DIVERGING_KEYS)
    if div is None:
        checks.append(Check("divergences", None, math.nan, max_divergences,
                            "Skipped: sample_stats has no 'diverging' variable."))
    else:
        n_div = int(np.sum(div.astype(bool)))
        if n_div > max_divergences:
            checks.append(Check("divergences", False, n_div, max_divergences,
                                f"{n_div} divergent transitions: the sampler met regions of high curvature and "
                                "the posterior may be biased. Raise target_accept (e.g. 0.95), reparameterise, "
                                "tighten priors, or check that the ODE solver tolerances are small enough."))
        else:
            checks.append(Check("divergences", True, n_div, max_divergences, "No problematic divergences."))

    if ss is not None and "energy" in ss.data_vars:
        bfmi = _idata.bfmi(idata)
        value = float(np.min(bfmi))
        if value < bfmi_min:
            checks.append(Check("bfmi", False, value, bfmi_min,
                                "Low energy BFMI: the momentum resampling explores the energy distribution "
                                "poorly (often heavy tails or a badly scaled mass matrix). Reparameterise or "
                                "use a dense mass matrix seeded from the estimate's covariance."))
        else:
            checks.append(Check("bfmi", True, value, bfmi_min, "Energy transitions explore well."))
    else:
        checks.append(Check("bfmi", None, math.nan, bfmi_min, "Skipped: sample_stats has no 'energy' variable."))

    _, reached = _stat(ss, _REACHED_KEYS)
    _, depth = _stat(ss, _DEPTH_KEYS)
    if reached is None and depth is not None:
        max_depth = None
        for attrs in (getattr(idata, "attrs", None) or {}, _idata.attrs(idata),
                      getattr(ss, "attrs", {})):
            for k in ("max_treedepth", "maxdepth", "max_depth"):
                if k in attrs:
                    max_depth = float(attrs[k])
        if max_depth is not None:
            reached = depth >= max_depth
    if reached is None:
        checks.append(Check("tree_depth", None, math.nan, max_treedepth_fraction,
                            "Skipped: sample_stats has no tree-depth saturation flag "
                            f"(looked for {list(_REACHED_KEYS)}; or a tree depth with a max_treedepth attribute)."))
    else:
        frac = float(np.mean(reached.astype(bool)))
        if frac > max_treedepth_fraction:
            checks.append(Check("tree_depth", False, frac, max_treedepth_fraction,
                                f"{100 * frac:.1f}% of draws hit the maximum tree depth: sampling is inefficient "
                                "(not biased). " + _then(cause, "seed the mass matrix from the estimate's "
                                                          "covariance, reparameterise strongly correlated "
                                                          "parameters, or raise max_treedepth.")))
        else:
            checks.append(Check("tree_depth", True, frac, max_treedepth_fraction,
                                "Trajectories end before the maximum tree depth."))
    if identified is not None:
        checks.append(identified)
    return DiagnosticsReport(tuple(checks), table, n_chains, n_draws)


def _then(cause, advice):
    """``advice`` (lower-case start) after ``cause``, or on its own as a sentence."""
    return cause + advice if cause else advice[0].upper() + advice[1:]


def _likely_cause(bare):
    """The start of the mixing checks' advice when parameters without a prior of their own are
    unidentified (their flat direction, not multiple modes, is then the likely cause), else ""."""
    if not bare:
        return ""
    return (f"Likely cause: the data do not determine {_list(bare)} (see identifiability); fix them or give them "
            "priors. Otherwise: ")


def _identifiability(attrs):
    """``(names, check)``: the unidentified parameters without a prior of their own and the
    identifiability check, from the posterior's ``odeinfer_fisher_rank`` attributes
    (:func:`odeinfer.bayes.sample_problem` with ``init``); ``([], None)`` where they are absent."""
    if "odeinfer_fisher_rank" not in attrs:
        return [], None
    rank, n = int(attrs["odeinfer_fisher_rank"]), int(attrs.get("odeinfer_n_estimated", 0))
    bare = [x for x in str(attrs.get("odeinfer_unidentified", "")).split(",") if x]
    held = [x for x in str(attrs.get("odeinfer_unidentified_with_prior", "")).split(",") if x]
    if bare:
        return bare, Check(
            "identifiability", False, rank, n,
            f"The Fisher information at the fit has rank {rank} < {n}: the data do not determine {_list(bare)}, "
            "which have no prior of their own. Along that direction the likelihood is flat at the fit, so the "
            "posterior there is the uniform prior's up to the bounds: their interval ends at the bounds report the "
            "bounds, not the data, even when the chains mix well. Where they do not (R-hat, ESS, draws at the "
            "maximum tree depth), this is the likely cause: NUTS has to cross that flat range. Fix some of them, give "
            "them informative priors (priors=, or the PEtab table's objectivePriorType) or add data that inform them.")
    if rank < n:
        return [], Check("identifiability", True, rank, n,
                         f"The Fisher information at the fit has rank {rank} < {n}, but {_list(held)} have priors of "
                         "their own: the posterior along the unidentified direction is those priors'.")
    return [], Check("identifiability", True, rank, n, "The Fisher information at the fit has full rank: the "
                     "data inform every parameter.")


def _list(names, k=6):
    names = [str(n) for n in names]
    return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")
