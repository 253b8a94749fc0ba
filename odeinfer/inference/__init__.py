"""Inference helpers shared by estimators: profile likelihood, parametric bootstrap, multi-start
optimisation, and running their tasks on any ``concurrent.futures`` executor."""

from odeinfer.inference.bootstrap import BootstrapWarning, ParametricBootstrap
from odeinfer.inference.executor import iter_chunks, map_chunks
from odeinfer.inference.multistart import MultistartWarning, run_starts, sample_starts
from odeinfer.inference.profile import ProfileLikelihood, ProfileWarning

__all__ = ["ProfileLikelihood", "ProfileWarning", "ParametricBootstrap", "BootstrapWarning", "sample_starts",
           "run_starts", "MultistartWarning", "map_chunks", "iter_chunks"]
