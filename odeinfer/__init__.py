"""odeinfer: parameter estimation for ordinary and delay differential equations."""

__version__ = "0.1.0"

from odeinfer import errors, math  # noqa: E402
from odeinfer.model import CompiledModel, Model, Observation, model  # noqa: E402

__all__ = ["__version__", "errors", "math", "model", "Model", "Observation", "CompiledModel"]
