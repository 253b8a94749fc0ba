"""Traced values: sympy expressions in a wrapper that refuses untraceable use.

While a model's right-hand side is traced, ``y.prey``, ``p.alpha`` and ``t`` are
:class:`Traced` values. Arithmetic builds sympy expressions. Anything that would
silently turn a symbol into a number -- ``np.exp(x)``, ``math.exp(x)``,
``float(x)``, ``if x > 0:`` -- raises :class:`~odeinfer.errors.TracingError`
that names the fix (``odeinfer.math.exp``, ``odeinfer.math.where``).
"""

from __future__ import annotations

import numbers
import operator

import sympy as sp

from odeinfer.errors import TracingError

__all__ = ["Traced", "to_expr", "is_traced"]


def to_expr(x):
    """A sympy expression for a Traced value or a real number."""
    if isinstance(x, Traced):
        return x.expr
    if isinstance(x, bool):
        raise TracingError(f"a boolean ({x!r}) was used as a number in a traced expression; use 1.0 or 0.0")
    if isinstance(x, numbers.Integral):
        return sp.Integer(int(x))
    if isinstance(x, numbers.Rational):  # e.g. fractions.Fraction: kept exact
        return sp.Rational(int(x.numerator), int(x.denominator))
    if isinstance(x, numbers.Real):
        return sp.Float(float(x), 17)
    if isinstance(x, sp.Basic):
        return x
    raise TracingError(
        f"a value of type {type(x).__name__} ({x!r:.60}) was used in a traced expression; "
        "only numbers, states (y.name), parameters (p.name), t and odeinfer.math functions are allowed"
    )


def is_traced(x) -> bool:
    return isinstance(x, Traced)


def _wrap(expr):
    return Traced(expr)


class Traced:
    """A symbolic value seen by the user's right-hand side during tracing."""

    __slots__ = ("expr",)
    __array_priority__ = 1000

    def __init__(self, expr):
        self.expr = expr

    # arithmetic -----------------------------------------------------------
    def __add__(self, o):
        return _wrap(self.expr + to_expr(o))

    def __radd__(self, o):
        return _wrap(to_expr(o) + self.expr)

    def __sub__(self, o):
        return _wrap(self.expr - to_expr(o))

    def __rsub__(self, o):
        return _wrap(to_expr(o) - self.expr)

    def __mul__(self, o):
        return _wrap(self.expr * to_expr(o))

    def __rmul__(self, o):
        return _wrap(to_expr(o) * self.expr)

    def __truediv__(self, o):
        return _wrap(self.expr / to_expr(o))

    def __rtruediv__(self, o):
        return _wrap(to_expr(o) / self.expr)

    def __pow__(self, o):
        return _wrap(self.expr ** to_expr(o))

    def __rpow__(self, o):
        return _wrap(to_expr(o) ** self.expr)

    def __neg__(self):
        return _wrap(-self.expr)

    def __pos__(self):
        return self

    def __abs__(self):
        return _wrap(sp.Abs(self.expr))

    # comparisons build relations, usable only inside odeinfer.math.where / heaviside
    def __lt__(self, o):
        return _wrap(sp.StrictLessThan(self.expr, to_expr(o)))

    def __le__(self, o):
        return _wrap(sp.LessThan(self.expr, to_expr(o)))

    def __gt__(self, o):
        return _wrap(sp.StrictGreaterThan(self.expr, to_expr(o)))

    def __ge__(self, o):
        return _wrap(sp.GreaterThan(self.expr, to_expr(o)))

    __hash__ = None  # comparisons are symbolic, so Traced values are unhashable

    # what tracing cannot follow ------------------------------------------
    def __bool__(self):
        raise TracingError(
            "a traced value was used as a truth value (`if`, `while`, `and`/`or`, or a chained comparison); "
            "the branch would be decided once at tracing time. Use odeinfer.math.where(cond, a, b) "
            "or odeinfer.math.heaviside(x) instead"
        )

    def __float__(self):
        raise TracingError(
            "a traced value was converted to a number (math.exp, math.log, float(), ...); "
            "use the functions of odeinfer.math (e.g. odeinfer.math.exp) instead"
        )

    __int__ = __float__
    __index__ = __float__
    __complex__ = __float__

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = getattr(ufunc, "__name__", str(ufunc))
        arithmetic = _ARITHMETIC.get(name)
        if (arithmetic is not None and method == "__call__" and not kwargs
                and all(isinstance(x, (Traced, numbers.Real)) for x in inputs)):
            # a numpy number (np.float64(2.0) * y.x) is a number like any other
            return arithmetic(*(Traced(to_expr(x)) for x in inputs))
        if arithmetic is not None:
            hint = ("convert numpy arrays to numbers first (e.g. float(c[0]) * y.x); a model's right-hand side "
                    "works on one number per state")
            raise TracingError(f"numpy.{name} was applied to a traced value and a numpy array; {hint}")
        if name in _OM_NAMES:
            om_name = _OM_NAMES[name]
            fix = f"Use odeinfer.math.{om_name} instead (from odeinfer import math as om; om.{om_name}(...))"
        else:
            from odeinfer import math as om

            fix = f"odeinfer.math has no such function; it offers {[n for n in om.__all__ if n not in ('pi', 'e')]}"
        raise TracingError(
            f"numpy.{name} was applied to a traced value; numpy functions cannot be traced. {fix}"
        )

    def __array_function__(self, func, types, args, kwargs):
        raise TracingError(
            f"numpy.{func.__name__} was applied to a traced value; numpy functions cannot be traced. "
            "Use the functions of odeinfer.math instead"
        )

    def __array__(self, *args, **kwargs):
        raise TracingError(
            "a traced value was converted to a numpy array; numpy functions cannot be traced. "
            "Use the functions of odeinfer.math instead"
        )

    def __repr__(self):
        return f"Traced({self.expr})"


# numpy ufuncs and the odeinfer.math function that replaces them
_OM_NAMES = {"exp": "exp", "log": "log", "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tan": "tan", "tanh": "tanh",
             "absolute": "abs", "fabs": "abs", "minimum": "min", "fmin": "min", "maximum": "max", "fmax": "max",
             "heaviside": "heaviside"}
# numpy ufuncs that are plain arithmetic: on numpy numbers (not arrays) they act as the operators
_ARITHMETIC = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
               "true_divide": operator.truediv, "divide": operator.truediv, "power": operator.pow,
               "float_power": operator.pow, "negative": operator.neg, "positive": operator.pos}
