"""Observed time series: :class:`Data` (one experiment) and :class:`Experiments`.

>>> from odeinfer.data import Data
>>> d = Data([0.0, 1.0, 2.0], [1.0, float("nan"), 3.0], "x")
>>> d.nobs
2
"""

from .conditions import Condition, Dose, Input
from .core import Data
from .experiments import Experiments, as_experiments

__all__ = ["Data", "Experiments", "as_experiments", "Condition", "Dose", "Input"]
