"""Math functions that work on numbers and on traced model symbols.

Use these inside a model's right-hand side instead of ``numpy`` or ``math``:

>>> from odeinfer import math as om
>>> om.exp(0.0)
1.0

On floats they return floats; on traced values they build the symbolic
expression from which exact derivatives and numba kernels are generated.
"""

from __future__ import annotations

import math as _m

import sympy as _sp

from odeinfer.model.lags import lag
from odeinfer.model.traced import Traced, to_expr

__all__ = [
    "exp", "log", "sqrt", "pow", "sin", "cos", "tan", "tanh", "abs",
    "min", "max", "where", "heaviside", "lag", "pi", "e",
]

pi = _m.pi
e = _m.e


def _unary(name, fnum, fsym):
    def f(x):
        if isinstance(x, Traced):
            return Traced(fsym(x.expr))
        return fnum(float(x))

    f.__name__ = name
    f.__doc__ = f"{name}(x): works on numbers and on traced model symbols."
    return f


exp = _unary("exp", _m.exp, _sp.exp)
log = _unary("log", _m.log, _sp.log)
sqrt = _unary("sqrt", _m.sqrt, _sp.sqrt)
sin = _unary("sin", _m.sin, _sp.sin)
cos = _unary("cos", _m.cos, _sp.cos)
tan = _unary("tan", _m.tan, _sp.tan)
tanh = _unary("tanh", _m.tanh, _sp.tanh)
abs = _unary("abs", _m.fabs, _sp.Abs)  # noqa: A001 - deliberate: om.abs


def _any_traced(*xs):
    return any(isinstance(x, Traced) for x in xs)


def pow(x, a):  # noqa: A001 - deliberate: om.pow
    """``x ** a`` on numbers and traced values."""
    if _any_traced(x, a):
        return Traced(to_expr(x) ** to_expr(a))
    return float(x) ** float(a)


def min(a, b):  # noqa: A001
    """Smaller of two values (derivative: that of the smaller one)."""
    if _any_traced(a, b):
        return Traced(_sp.Min(to_expr(a), to_expr(b)))
    return float(a) if a <= b else float(b)


def max(a, b):  # noqa: A001
    """Larger of two values (derivative: that of the larger one)."""
    if _any_traced(a, b):
        return Traced(_sp.Max(to_expr(a), to_expr(b)))
    return float(a) if a >= b else float(b)


def where(cond, a, b):
    """``a`` where ``cond`` holds, else ``b``; ``cond`` is a comparison such as ``t > p.T_r``.

    The derivative is taken branch-wise (the switching point itself is not
    differentiated: use a smooth ``heaviside(x, width=...)`` when an estimator
    must differentiate with respect to the switching point).
    """
    if _any_traced(cond, a, b):
        c = to_expr(cond) if isinstance(cond, Traced) else _sp.sympify(bool(cond))
        if not isinstance(c, (_sp.core.relational.Relational, _sp.logic.boolalg.BooleanAtom)):
            raise TypeError(f"where(cond, a, b): cond must be a comparison such as `t > p.T`, got {c}")
        return Traced(_sp.Piecewise((to_expr(a), c), (to_expr(b), True)))
    return float(a) if cond else float(b)


def heaviside(x, width=None):
    """Unit step of ``x``: 1 for x > 0, 0 for x < 0 (0.5 at 0).

    Parameters
    ----------
    x : float or traced value
    width : float, optional
        If given, the smooth step ``0.5 * (1 + tanh(x / width))``, whose derivative
        in ``x`` is exact and nonzero near 0 (use it for change points that are
        estimated). Default None: the sharp step, with derivative 0.
    """
    if width is not None:
        if not (float(width) > 0):
            raise ValueError(f"heaviside: width must be > 0, got {width!r}; pass None for the sharp step")
        if isinstance(x, Traced):  # x * (1/width) with a double, so that printed equations read back exactly
            return 0.5 * (1.0 + tanh(x * (1.0 / float(width))))
        return 0.5 * (1.0 + _m.tanh(float(x) / width))
    if isinstance(x, Traced):
        return Traced(_sp.Heaviside(x.expr, _sp.Rational(1, 2)))
    x = float(x)
    return 1.0 if x > 0 else (0.0 if x < 0 else 0.5)
