"""Bayesian stage: PyMC posteriors over ODE models through a numba-backed PyTensor Op.

* :func:`build_model` -- a ``pm.Model`` (priors, unknown initial states, noise,
  likelihood) the user can extend; expresses e.g. Stan's lynx-hare case study.
* :func:`sample` -- NUTS (PyMC or nutpie) started at an estimate, with a dense
  mass matrix seeded from its covariance; returns ``arviz.InferenceData``.
* :func:`priors_from_estimate` -- priors centred on a frequentist estimate.
* :func:`build_problem_model`, :func:`sample_problem` -- the same for an :class:`~odeinfer.FitProblem`
  (observables, noise models, conditions); ``sample(problem, init=fit)`` dispatches there.
* :func:`sample_many` -- one posterior per dataset, on any executor (seeded per dataset).
* :func:`ode_op`, :class:`ODEProblem`, ``ODEOp`` -- the Op itself; :func:`dde_op`,
  :class:`DDEProblem` -- the same Op over a delay differential equation.

PyMC and PyTensor are imported on first use of these functions.
"""

# first: silences ArviZ's import banner before anything (PyMC included) imports ArviZ
from odeinfer.bayes import _idata  # noqa: E402, F401

# the function shadows its module's name (odeinfer.bayes.sample); bind it eagerly so that the
# package attribute stays the function (sample.py imports PyMC lazily, so this is cheap)
from odeinfer.bayes.sample import SamplingInterruptedWarning, sample  # noqa: E402

__all__ = ["build_model", "sample", "priors_from_estimate", "ode_op", "ODEProblem", "ODEOp",
           "dde_op", "DDEProblem", "SeedingWarning", "SamplingInterruptedWarning", "build_problem_model",
           "sample_problem", "sample_many"]

_LAZY = {
    "ode_op": ("odeinfer.bayes.op", "ode_op"),
    "ODEProblem": ("odeinfer.bayes.op", "ODEProblem"),
    "ODEOp": ("odeinfer.bayes.op", "ODEOp"),
    "dde_op": ("odeinfer.bayes.dde_problem", "dde_op"),
    "DDEProblem": ("odeinfer.bayes.dde_problem", "DDEProblem"),
    "build_model": ("odeinfer.bayes.build", "build_model"),
    "priors_from_estimate": ("odeinfer.bayes.priors", "priors_from_estimate"),
    "SeedingWarning": ("odeinfer.bayes.seed", "SeedingWarning"),
    "build_problem_model": ("odeinfer.bayes.problem", "build_problem_model"),
    "sample_problem": ("odeinfer.bayes.problem", "sample_problem"),
    "sample_many": ("odeinfer.bayes.many", "sample_many"),
}


def __getattr__(name):
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'odeinfer.bayes' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
