"""Numba implementation of :class:`~odeinfer.bayes.op.ODEOp` for PyTensor's NUMBA mode.

Registered with ``pytensor.link.numba.dispatch.numba_funcify``, so a graph that
contains the Op compiles to one numba function (``pytensor.function(...,
mode="NUMBA")``, ``nutpie.compile_pymc_model(model, backend="numba")``) and the
sampler's inner loop never enters Python: the generated function calls the
model's dopri5/rodas kernel, or the DDE kernel ``dde_solve`` (a global of the model's generated module, see
:mod:`odeinfer.model.cache`) directly; :class:`~odeinfer.bayes.op.VJPOp` calls the adjoint kernel the same way. Imported at the end of :mod:`odeinfer.bayes.op`.
"""

from __future__ import annotations

import hashlib

from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key

from odeinfer.bayes.op import ODEOp, VJPOp

__all__ = []


@register_funcify_and_cache_key(ODEOp)
def _numba_funcify_ode_op(op, node=None, **kwargs):
    """``(theta, x0) -> (y, sens)`` as an njit function; NaN outputs on a failed solve.

    The cache key covers everything the function closes over: the forward
    problem's class and key (equations, times, history, solver options), the generated module's
    name (a hash of the model and solver kernel sources and library versions)
    and whether sensitivities are computed. So PyTensor can cache the compiled
    graph on disk, and a second process does not recompile it.
    """
    problem = op.problem
    module = problem.model.compile().module
    kind = f"{type(problem).__module__}.{type(problem).__qualname__}"
    text = f"odeinfer-ode-op/3|{kind}|{problem.key}|{module.__name__}|{op.sensitivities}"
    return problem.numba_solve(op.sensitivities), hashlib.sha256(text.encode()).hexdigest()


@register_funcify_and_cache_key(VJPOp)
def _numba_funcify_vjp_op(op, node=None, **kwargs):
    """``(theta, x0, g) -> (g_theta, g_x0)``: the adjoint kernel as an njit function; NaN on failure.
    Cache key as for :class:`ODEOp`."""
    problem = op.problem
    module = problem.model.compile().module
    kind = f"{type(problem).__module__}.{type(problem).__qualname__}"
    text = f"odeinfer-vjp-op/1|{kind}|{problem.key}|{module.__name__}"
    return problem.numba_vjp(), hashlib.sha256(text.encode()).hexdigest()
