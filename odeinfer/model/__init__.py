"""Models from plain Python functions or equation strings, with exact derivatives and numba kernels."""

from odeinfer.model.core import CompiledModel, Model, Observation, model
from odeinfer.model.history import History

__all__ = ["Model", "Observation", "CompiledModel", "model", "History"]
