"""Estimators. Each one is ``Estimator(config).fit(model, data, ...) -> Estimate``."""

from odeinfer.estimators.base import EstimationError, Estimator, IdentifiabilityWarning
from odeinfer.estimators.newton import GradientDescent, NewtonRaphson, StochasticGradient, StochasticNewton

__all__ = [
    "Estimator", "EstimationError", "IdentifiabilityWarning",
    "NewtonRaphson", "GradientDescent", "StochasticNewton", "StochasticGradient",
]
