"""Solving ODE and delay models: :class:`Problem`, :func:`solve`, :func:`bind`, solver and
gradient values (:class:`Dopri5`, :class:`Rodas`, :class:`Auto`, :class:`MethodOfSteps`, :class:`Forward`,
:class:`Adjoint`) and the one :class:`Solution`.

``odeinfer.solve`` is this package and, called, the function :func:`solve`:
``oi.solve(problem, params)`` is ``oi.solve.solve(problem, params)``.

:func:`solve` is the validated, user-facing call; :func:`bind` returns the prebuilt solver
(:class:`Solver`, :class:`AutoSolver`, :class:`DDESolver` or :class:`VJP`) that estimators, the PyMC Op and the
widgets call in their loops. The numba kernels live in :mod:`odeinfer.solve.kernels`; their
calling convention (signatures, info layout, status codes) in :mod:`odeinfer.solve.abi`.
"""

import inspect as _inspect
import sys as _sys
import types as _types

from odeinfer.solve.abi import Status, status_message
from odeinfer.solve.adjoint import VJP
from odeinfer.solve.api import AutoSolver, Solver, auto_scope
from odeinfer.solve.config import DEFAULT_SOLVERS, Adjoint, Auto, Dopri5, Forward, MethodOfSteps, Rodas
from odeinfer.solve.dde import DDESolver
from odeinfer.solve.problem import Problem, bind, solve
from odeinfer.solve.solution import Solution

__all__ = ["Problem", "solve", "bind", "Solution", "Dopri5", "Rodas", "Auto", "MethodOfSteps", "Forward", "Adjoint",
           "DEFAULT_SOLVERS", "Solver", "AutoSolver", "auto_scope", "DDESolver", "VJP", "Status", "status_message"]


class _CallableModule(_types.ModuleType):
    """This package, callable as :func:`solve`."""

    __call__ = staticmethod(solve)  # the function itself: no wrapper call on the one-shot path


_sys.modules[__name__].__class__ = _CallableModule
__signature__ = _inspect.signature(solve)  # what inspect.signature(oi.solve) reports: solve's own
