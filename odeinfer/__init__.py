"""odeinfer: parameter estimation for ordinary and delay differential equations.

>>> import odeinfer as oi
>>> from odeinfer import math as om
"""

__version__ = "0.1.0"

from odeinfer import datasets, errors, math, smooth, solve, studies, zoo  # noqa: E402
from odeinfer.data import Data, Experiments  # noqa: E402
from odeinfer.estimators import (  # noqa: E402
    GradientDescent,
    GradientMatching,
    IdentifiabilityWarning,
    NewtonRaphson,
    OrthogonalConditions,
    StochasticGradient,
    StochasticNewton,
    confidence_ellipsoid,
)
from odeinfer.model import CompiledModel, Model, Observation, model  # noqa: E402
from odeinfer.results import Estimate  # noqa: E402
from odeinfer.simulate import Simulation, simulate  # noqa: E402
from odeinfer.solve import Solution, make_solver, solve_ode  # noqa: E402

__all__ = [
    "__version__",
    # modules
    "datasets", "errors", "math", "smooth", "solve", "studies", "zoo",
    # models and data
    "model", "Model", "Observation", "CompiledModel", "Data", "Experiments",
    # solving and simulating
    "solve_ode", "make_solver", "Solution", "simulate", "Simulation",
    # estimators and results
    "OrthogonalConditions", "GradientMatching", "confidence_ellipsoid",
    "NewtonRaphson", "GradientDescent", "StochasticNewton", "StochasticGradient",
    "IdentifiabilityWarning", "Estimate",
]
