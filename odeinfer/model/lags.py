"""Delayed states in a traced right-hand side: ``om.lag(y.x, "tau")``.

While a model with ``delays=[...]`` is traced, :func:`lag` returns a symbol that
stands for ``x(t - tau)``. Each delay is a declared parameter (estimated or
fixed like any other) and must be constant: lags of expressions, lags with a
time- or state-dependent delay and numeric delays are refused with a message
that says why and what to write instead.

The tracing context (which names are states, parameters and delays) is set by
:func:`tracing_context` around the call of the user's function; the lags that
were used are collected there.
"""

from __future__ import annotations

import contextlib
import contextvars

import sympy as sp

from odeinfer.errors import ModelDefinitionError
from odeinfer.model.traced import Traced

__all__ = ["lag", "lag_symbol", "tracing_context"]

_CONTEXT: contextvars.ContextVar = contextvars.ContextVar("odeinfer_lag_context", default=None)


def lag_symbol(state: str, delay: str) -> sp.Symbol:
    """The real sympy symbol that stands for ``state(t - delay)``.

    Its name, ``"x(t - tau)"``, cannot clash with a state or parameter name
    (those are identifiers) and reads naturally in printed equations.
    """
    return sp.Symbol(f"{state}(t - {delay})", real=True)


class _Context:
    __slots__ = ("states", "params", "delays", "used")

    def __init__(self, states, params, delays):
        self.states, self.params, self.delays = tuple(states), tuple(params), tuple(delays)
        self.used: set[tuple[str, str]] = set()


@contextlib.contextmanager
def tracing_context(states, params, delays):
    """Context in which :func:`lag` may be called; yields the set of used ``(state, delay)`` pairs."""
    ctx = _Context(states, params, delays)
    token = _CONTEXT.set(ctx)
    try:
        yield ctx.used
    finally:
        _CONTEXT.reset(token)


def _delay_name(delay, ctx) -> str:
    if isinstance(delay, str):
        name = delay
    elif isinstance(delay, Traced) and isinstance(delay.expr, sp.Symbol) and delay.expr.name in ctx.params:
        name = delay.expr.name
    elif isinstance(delay, Traced):
        raise ModelDefinitionError(
            f"lag: the delay must be a constant delay parameter (a name listed in delays=[...], e.g. "
            f"lag(y.x, \"tau\")), got the expression {delay.expr}; time-varying or state-dependent delays "
            "are not supported yet"
        )
    else:
        raise ModelDefinitionError(
            f"lag: the delay must name a delay parameter (e.g. lag(y.x, \"tau\")), got {delay!r}; "
            "to use a known numeric delay, declare it as a parameter in params=[...] and delays=[...] "
            "and keep its value fixed"
        )
    if name not in ctx.params:
        raise ModelDefinitionError(
            f"lag: the delay {name!r} is not a declared parameter (params: {list(ctx.params)}); "
            f"add it to params=[...] and delays=[...]"
        )
    if name not in ctx.delays:
        raise ModelDefinitionError(
            f"lag: the parameter {name!r} is used as a delay but is not listed in delays={list(ctx.delays)}; "
            f"declare it with delays=[{name!r}, ...]"
        )
    return name


def lag(x, delay):
    """The delayed state ``x(t - delay)`` inside a model's right-hand side.

    Parameters
    ----------
    x : traced state
        A state of the model, ``y.<name>`` (not an expression: write
        ``lag(y.a, "tau") * lag(y.b, "tau")`` rather than ``lag(y.a * y.b, "tau")``).
    delay : str or traced parameter
        Name of a delay parameter declared in ``delays=[...]`` (or ``p.<name>``).

    Returns
    -------
    traced value
        The symbol ``x(t - delay)``.

    Raises
    ------
    ModelDefinitionError
        Outside the tracing of a model with delays; when ``x`` is not a state;
        when ``delay`` is not a declared delay parameter or is an expression.

    Examples
    --------
    >>> import odeinfer as oi
    >>> from odeinfer import math as om
    >>> @oi.model(states=["x"], params=["r", "K", "tau"], delays=["tau"])
    ... def hutchinson(t, y, p):
    ...     return {"x": p.r * y.x * (1 - om.lag(y.x, "tau") / p.K)}
    >>> hutchinson.delays, hutchinson.lags
    (('tau',), (('x', 'tau'),))
    """
    ctx = _CONTEXT.get()
    if ctx is None:
        raise ModelDefinitionError(
            "lag(...) can only be used inside the right-hand side of a model declared with delays=[...] "
            "(e.g. @oi.model(states=['x'], params=['r', 'tau'], delays=['tau']))"
        )
    if not ctx.delays:
        raise ModelDefinitionError(
            "lag(...) was used, but the model declares no delays; declare the delay parameter with "
            "@oi.model(..., delays=['tau'])"
        )
    if not (isinstance(x, Traced) and isinstance(x.expr, sp.Symbol) and x.expr.name in ctx.states):
        got = x.expr if isinstance(x, Traced) else repr(x)
        raise ModelDefinitionError(
            f"lag: the first argument must be a state y.<name> (states: {list(ctx.states)}), got {got}; "
            "apply lag to each state separately, e.g. lag(y.a, 'tau') * lag(y.b, 'tau')"
        )
    name = _delay_name(delay, ctx)
    ctx.used.add((x.expr.name, name))
    return Traced(lag_symbol(x.expr.name, name))
