"""Models from plain Python functions or equation strings, with exact derivatives and numba kernels."""

from odeinfer.model.core import CompiledModel, Model, Observation, model
from odeinfer.model.history import History
from odeinfer.model.observables import Laplace, Noise, Normal, Observable

__all__ = ["Model", "Observation", "CompiledModel", "model", "History", "Noise", "Normal", "Laplace", "Observable"]
