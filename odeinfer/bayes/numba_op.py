"""Numba implementation of :class:`~odeinfer.bayes.op.ODEOp` for PyTensor's NUMBA mode.

Registered with ``pytensor.link.numba.dispatch.numba_funcify``, so a graph that
contains the Op compiles to one numba function (``pytensor.function(...,
mode="NUMBA")``, ``nutpie.compile_pymc_model(model, backend="numba")``) and the
sampler's inner loop never enters Python: the generated function calls the
model's dopri5/rodas kernel, or the DDE kernel ``dde_solve`` (a global of the model's generated module, see
:mod:`odeinfer.model.cache`) directly, or, while the model's kernel is not compiled, the shared one
(:func:`odeinfer.solve.shared.jit_kernel`); :class:`~odeinfer.bayes.op.VJPOp` calls the adjoint kernel the
same way. Imported at the end of :mod:`odeinfer.bayes.op`.
"""

from __future__ import annotations

import hashlib

from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key

from odeinfer.bayes.op import ODEOp, VJPOp
from odeinfer.model.cache import source_digest
from odeinfer.solve.shared import recorded_tiers

__all__ = []


@register_funcify_and_cache_key(ODEOp)
def _numba_funcify_ode_op(op, node=None, **kwargs):
    """``(theta, x0) -> (y, sens)`` as an njit function; NaN outputs on a failed solve.

    The cache key covers everything the function closes over: the code that builds it (a hash of
    odeinfer's source, :func:`odeinfer.model.cache.source_digest`), the forward
    problem's class and key (equations, times, history, solver options), the generated module's
    name (a hash of the model and solver kernel sources and library versions),
    whether sensitivities are computed and which kernel it calls, the model's or the shared
    module's (:func:`odeinfer.solve.shared.jit_kernel`, :func:`~odeinfer.solve.shared.recorded_tiers`).
    So PyTensor can cache the compiled graph on disk, and a second process does not recompile it:
    the shared kernel's model handle is read through symbols each process links to its own
    callbacks (:func:`odeinfer.solve.shared.linked_handle`), never held as a constant.
    """
    problem = op.problem
    with recorded_tiers() as tiers:
        fn = problem.numba_solve(op.sensitivities)
    return fn, _cache_key("odeinfer-ode-op/5", problem, op.sensitivities, tiers)


@register_funcify_and_cache_key(VJPOp)
def _numba_funcify_vjp_op(op, node=None, **kwargs):
    """``(theta, x0, g) -> (g_theta, g_x0)``: the adjoint kernel as an njit function; NaN on failure.
    Cache key as for :class:`ODEOp`."""
    problem = op.problem
    with recorded_tiers() as tiers:
        fn = problem.numba_vjp()
    return fn, _cache_key("odeinfer-vjp-op/3", problem, None, tiers)


def _cache_key(version, problem, sensitivities, tiers):
    return hashlib.sha256(_key_text(version, problem, sensitivities, tiers).encode()).hexdigest()


def _key_text(version, problem, sensitivities, tiers) -> str:
    """What the cache key hashes. With the odeinfer source digest: the function is built by
    odeinfer code (the problem's wrappers, the kernels' calling convention), so a graph cached by
    another version of it is never loaded (it could call kernels with another layout, or linker
    symbols this process never registers: a crash, not an error)."""
    module = problem.model.compile().module
    kind = f"{type(problem).__module__}.{type(problem).__qualname__}"
    return (f"{version}|{source_digest()}|{kind}|{problem.key}|{module.__name__}|{sensitivities}|"
            f"{','.join(tiers)}")
