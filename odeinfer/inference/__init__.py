"""Inference helpers shared by estimators: profile likelihood, multi-start optimisation."""

from odeinfer.inference.multistart import run_starts, sample_starts
from odeinfer.inference.profile import ProfileLikelihood, ProfileWarning

__all__ = ["ProfileLikelihood", "ProfileWarning", "sample_starts", "run_starts"]
