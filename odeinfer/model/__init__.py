"""Models from plain Python functions or equation strings, with exact derivatives and numba kernels."""

from odeinfer.model.core import CompiledModel, Model, Observation, model

__all__ = ["Model", "Observation", "CompiledModel", "model"]
