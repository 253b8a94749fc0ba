"""ArviZ-based checks of posterior samples and the comparison of confidence and credible intervals.

- :func:`check`: R-hat, bulk/tail ESS, divergences, E-BFMI, tree-depth saturation, each with
  pass/fail and plain-language advice (a :class:`DiagnosticsReport`).
- :func:`ppc`: posterior predictive check of observed trajectories (coverage, p-value).
- :func:`compare_intervals`: every estimator's Wald/profile interval next to the posterior's
  equal-tailed and HDI intervals, with overlaps and Mahalanobis distances.

Posterior variables follow the naming of :mod:`odeinfer.bayes`: scalar parameters named as in
``model.params``, ``x0`` with dim ``state`` (and ``experiment``), ``sigma`` with dim ``state``;
they are addressed with :class:`~odeinfer.Estimate` names (``"alpha"``, ``"x0[prey]"``,
``"x0[prey]@exp1"``, ``"sigma[prey]"``).
"""

from odeinfer.diagnostics._names import draws, parameter_names
from odeinfer.diagnostics.checks import Check, DiagnosticsReport, check
from odeinfer.diagnostics.intervals import compare_intervals
from odeinfer.diagnostics.ppc import PPCResult, ppc

__all__ = ["check", "Check", "DiagnosticsReport", "compare_intervals", "ppc", "PPCResult", "draws",
           "parameter_names"]
