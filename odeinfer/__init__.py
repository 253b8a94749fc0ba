"""odeinfer: parameter estimation for ordinary and delay differential equations.

>>> import odeinfer as oi
>>> from odeinfer import math as om
"""

__version__ = "0.1.0"

from odeinfer import datasets, errors, math, solve, studies, zoo  # noqa: E402
from odeinfer.data import Condition, Data, Dose, Experiments, Input  # noqa: E402
from odeinfer.model import CompiledModel, History, Laplace, Model, Normal, Observation, model  # noqa: E402
from odeinfer.results import Estimate  # noqa: E402
from odeinfer.simulate import Simulation, simulate  # noqa: E402
from odeinfer.solve import Adjoint, Auto, Dopri5, Forward, MethodOfSteps, Problem, Rodas, Solution, bind  # noqa: E402

__all__ = [
    "__version__",
    # modules
    "datasets", "errors", "estimators", "math", "petab", "smooth", "solve", "studies", "zoo",
    # models and data
    "model", "Model", "Observation", "CompiledModel", "History", "Data", "Experiments",
    "Normal", "Laplace", "Condition", "Dose", "Event", "Input", "Param", "FitProblem", "Objective",
    # solving and simulating
    "Problem", "solve", "bind", "Solution", "Dopri5", "Rodas", "Auto", "MethodOfSteps", "Forward", "Adjoint",
    "simulate", "Simulation", "warmup",
    # estimators and results
    "OrthogonalConditions", "GradientMatching", "confidence_ellipsoid",
    "NewtonRaphson", "GradientDescent", "StochasticNewton", "StochasticGradient",
    "Embedding", "Simultaneous", "AdjointDDE",
    "IdentifiabilityWarning", "CoverageWarning", "MultistartWarning", "ProfileWarning", "Estimate",
    # Bayesian stage and views
    "bayes", "diagnostics", "compare_intervals", "plots", "widgets", "report",
    # the standard analysis in one call
    "analyze",
]

# Estimators pull in scipy.interpolate and numba at import; load them on first use so that
# ``import odeinfer`` stays fast (a notebook's first solve then starts sooner).
_LAZY = {
    "smooth": ("odeinfer.smooth", None),
    "estimators": ("odeinfer.estimators", None),
    "OrthogonalConditions": ("odeinfer.estimators", "OrthogonalConditions"),
    "GradientMatching": ("odeinfer.estimators", "GradientMatching"),
    "confidence_ellipsoid": ("odeinfer.estimators", "confidence_ellipsoid"),
    "NewtonRaphson": ("odeinfer.estimators", "NewtonRaphson"),
    "GradientDescent": ("odeinfer.estimators", "GradientDescent"),
    "StochasticNewton": ("odeinfer.estimators", "StochasticNewton"),
    "StochasticGradient": ("odeinfer.estimators", "StochasticGradient"),
    "IdentifiabilityWarning": ("odeinfer.estimators", "IdentifiabilityWarning"),
    "CoverageWarning": ("odeinfer.estimators._coverage", "CoverageWarning"),
    "MultistartWarning": ("odeinfer.inference.multistart", "MultistartWarning"),
    "ProfileWarning": ("odeinfer.inference.profile", "ProfileWarning"),
    "Embedding": ("odeinfer.estimators.embedding", "Embedding"),
    "Simultaneous": ("odeinfer.estimators.simultaneous", "Simultaneous"),
    "AdjointDDE": ("odeinfer.estimators.adjoint_dde", "AdjointDDE"),
    "Param": ("odeinfer.likelihood", "Param"),
    "FitProblem": ("odeinfer.likelihood", "FitProblem"),
    "Event": ("odeinfer.likelihood", "Event"),
    "Objective": ("odeinfer.likelihood", "Objective"),
    "bayes": ("odeinfer.bayes", None),
    "diagnostics": ("odeinfer.diagnostics", None),
    "compare_intervals": ("odeinfer.diagnostics", "compare_intervals"),
    "plots": ("odeinfer.plots", None),
    "widgets": ("odeinfer.widgets", None),
    "report": ("odeinfer.report", None),
    "petab": ("odeinfer.petab", None),
    "analyze": ("odeinfer.pipeline", "analyze"),
    "warmup": ("odeinfer.solve.warmup", "warmup"),
}


def __getattr__(name):
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'odeinfer' has no attribute {name!r}") from None
    import importlib

    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
