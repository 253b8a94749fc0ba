"""Interactive notebook panels (ipywidgets; views only: they read results and may re-simulate,
they never change them).

- :class:`Explorer`: sliders for parameters and initial states re-simulate with the numba
  solver and redraw the trajectory against the data.
- :class:`RegionPanel`: confidence regions of several estimates against the posterior's
  credible regions for a chosen parameter pair and level, with the interval comparison table.
- :class:`FitPanel`: choose estimators and their options, run them with a progress bar and
  compare the results in a table.

Each panel's ``widget`` attribute is an ``ipywidgets`` box (the panel displays as it), and its
logic (``update``, ``refresh``, ``run``) can be called without a browser.
"""

from odeinfer.widgets._explorer import Explorer, TrajectorySimulator
from odeinfer.widgets._fitpanel import FitPanel, parse_options
from odeinfer.widgets._regions import RegionPanel

__all__ = ["Explorer", "RegionPanel", "FitPanel", "TrajectorySimulator", "parse_options"]
