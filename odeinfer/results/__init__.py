"""Results of estimators: :class:`Estimate`, :class:`Prediction`."""

from odeinfer.results.estimate import STATUSES, Estimate
from odeinfer.results.prediction import Prediction

__all__ = ["Estimate", "Prediction", "STATUSES"]
