"""Estimators. Each one is ``Estimator(config).fit(model, data, ...) -> Estimate``."""

from odeinfer.estimators.adjoint_dde import AdjointDDE
from odeinfer.estimators.base import EstimationError, Estimator, IdentifiabilityWarning
from odeinfer.estimators.embedding import Embedding
from odeinfer.estimators.gradient_matching import GradientMatching
from odeinfer.estimators.newton import GradientDescent, NewtonRaphson, StochasticGradient, StochasticNewton
from odeinfer.estimators.orthogonal import (
    ConfidenceEllipsoid,
    OrthogonalConditions,
    confidence_ellipsoid,
    default_L_range,
)
from odeinfer.estimators.simultaneous import Simultaneous

__all__ = [
    "Estimator", "EstimationError", "IdentifiabilityWarning",
    "GradientMatching", "OrthogonalConditions", "ConfidenceEllipsoid", "confidence_ellipsoid", "default_L_range",
    "NewtonRaphson", "GradientDescent", "StochasticNewton", "StochasticGradient",
    "Embedding", "Simultaneous", "AdjointDDE",
]
