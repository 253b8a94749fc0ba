"""Plots (matplotlib) of data, fits, residuals, confidence and credible regions, intervals and studies.

Every function returns a :class:`matplotlib.figure.Figure` (created without pyplot, so no
global state; Jupyter displays it) and takes ``ax=`` where one axes makes sense.
Matplotlib is imported on first use.

- :func:`trajectories`: data with each estimate's trajectory, its delta-method band and the
  posterior predictive band;
- :func:`observables`: a likelihood fit's observables per experiment, with data and bands;
- :func:`residuals`: residuals of one estimate per observed state (:func:`residual_lines`: the numbers);
- :func:`regions`: Wald confidence ellipses against the posterior's highest-density region;
- :func:`forest`: every estimator's interval next to the posterior's (from
  :func:`odeinfer.compare_intervals`);
- :func:`study`: Monte Carlo study plots (estimates vs truth, coverage);
- :func:`waterfall`: every start's final objective of a multistart fit, best first;
- :func:`to_png_base64`: a figure as base64 PNG text for HTML reports.
"""

from odeinfer.plots.export import to_png_base64
from odeinfer.plots.forest import forest
from odeinfer.plots.observables import observables
from odeinfer.plots.regions import ellipse, regions
from odeinfer.plots.study import study
from odeinfer.plots.trajectories import residual_lines, residuals, trajectories
from odeinfer.plots.waterfall import waterfall

__all__ = ["trajectories", "observables", "residuals", "residual_lines", "regions", "forest", "study", "waterfall",
           "to_png_base64", "ellipse"]
