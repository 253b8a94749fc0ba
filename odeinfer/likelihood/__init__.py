"""Likelihood-based fitting of real problems: parameters with scales and bounds
(:class:`Param`), the fit problem (:class:`FitProblem`: a model with observables, experiments and
their conditions, events with state triggers (:class:`Event`)) and its objective (:class:`Objective`: the
negative log-likelihood with all constants, as PEtab defines it, its exact gradient and Fisher information)."""

from odeinfer.likelihood.events import Event
from odeinfer.likelihood.objective import Evaluation, Objective
from odeinfer.likelihood.parameters import Param
from odeinfer.likelihood.problem import FitProblem

__all__ = ["Param", "FitProblem", "Event", "Objective", "Evaluation"]
