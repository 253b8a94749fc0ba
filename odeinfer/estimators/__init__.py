"""Estimators. Each one is ``Estimator(config).fit(model, data, ...) -> Estimate``."""

from odeinfer.estimators.base import EstimationError, Estimator, IdentifiabilityWarning

__all__ = ["Estimator", "EstimationError", "IdentifiabilityWarning"]
