"""Equation strings: safe parsing (no ``eval``: a whitelist over Python's AST) and printing.

:func:`parse_equations` turns ``{state: "text"}`` into sympy expressions;
:func:`format_expr` prints an expression back in the same language, so that
``Model.from_equations(model.equations(), ...)`` rebuilds the model.

Hostile text is refused with an :class:`~odeinfer.errors.EquationParseError`
before any large work: the text is limited in length and in tokens (which bound
the number of syntax nodes) before Python parses it, in nesting depth before it
is evaluated, and every number in it (literals, numeric results, exponents,
coefficients that sympy computes) in size, as is the number of values under one
``min`` or ``max``. Divisions of integers stay exact (``1/3`` is the rational 1/3);
floats print as the shortest text that reads back as the same number. The constants are ``pi``,
``e`` and ``nan``; ``nan`` may only be the last value of a ``where`` (``where(c, a, nan)``: undefined
where ``c`` fails, as an SBML piecewise without otherwise), anywhere else a model refuses it as not
finite.
"""

from __future__ import annotations

import ast
import difflib
import math
import operator
import re
from fractions import Fraction

import sympy as sp
from mpmath import libmp
from sympy.printing.str import StrPrinter

from odeinfer import math as om
from odeinfer.errors import EquationParseError, ModelDefinitionError
from odeinfer.model.trace import T_SYMBOL, symbols_for
from odeinfer.model.traced import Traced, to_expr

__all__ = ["parse_equations", "parse_expression", "format_expr", "FUNCTIONS", "CONSTANTS"]

FUNCTIONS = {
    "exp": om.exp, "log": om.log, "sqrt": om.sqrt, "sin": om.sin, "cos": om.cos, "tan": om.tan,
    "tanh": om.tanh, "abs": om.abs, "pow": om.pow, "min": om.min, "max": om.max,
    "where": om.where, "heaviside": om.heaviside, "lag": om.lag,
}
CONSTANTS = {"pi": om.pi, "e": om.e, "nan": math.nan}  # nan: where(c, a, nan) is undefined where c fails
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow}
_OP_WORDS = {ast.Add: "sum", ast.Sub: "difference", ast.Mult: "product", ast.Div: "quotient", ast.Pow: "power"}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
_MAX_LEN = 10_000
_MAX_TOKENS = 2_000  # before Python's parser sees the text (it fails near 3000 levels); bounds the node count
_MAX_DEPTH = 200  # the evaluator recurses once per level
_MAX_INT_DIGITS = 18  # integers written or computed from numbers alone (beyond: write a float)
_MAX_EXPONENT = 1_000  # integer exponents of expressions in the states and parameters
_MAX_MINMAX = 6  # values under one min or max: sympy compares them pairwise, slowly
_MAX_COEFF_DIGITS = 300  # exact coefficients sympy computes, e.g. 10**999 in (10*x)**999
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\d_]*\.?[\d_]*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\*\*|[<>=!]=|\S")


def parse_equations(equations, states, params, delays=()):
    """One sympy expression per state, from ``{state: "text"}`` (``lag(x, tau)`` needs ``tau`` in ``delays``)."""
    from odeinfer.model.lags import tracing_context

    with tracing_context(states, params, delays):
        return _parse(equations, states, params)


def _parse(equations, states, params):
    names = {s: sym for s, sym in zip(states, symbols_for(states))}
    names.update({s: sym for s, sym in zip(params, symbols_for(params))})
    return tuple(parse_expression(equations[state], names, f"equations[{state!r}]") for state in states)


def parse_expression(text, names, where):
    """One sympy expression from ``text`` (no ``eval``: the whitelist of this module).

    ``names`` maps every name the text may use to its sympy symbol (``t`` is always time);
    ``where`` names the argument in error messages (e.g. ``"observables['ratio']"``).
    """
    scope = {k: Traced(v) for k, v in names.items()}
    scope.setdefault("t", Traced(T_SYMBOL))
    for c, v in CONSTANTS.items():
        scope.setdefault(c, v)
    if not isinstance(text, str):
        raise EquationParseError(f"{where}: expected a string such as 'alpha*prey', got {type(text).__name__}")
    if len(text) > _MAX_LEN:
        raise EquationParseError(f"{where}: the expression has {len(text)} characters; at most {_MAX_LEN} "
                                 "are allowed. Shorten it, or define the model in Python with @oi.model")
    text = text.strip()
    tree = _syntax_tree(where, text)
    try:
        value = _Evaluator(where, text, scope).visit(tree.body)
    except EquationParseError:
        raise
    except ModelDefinitionError as exc:
        raise EquationParseError(f"{where}: {exc}") from None
    return to_expr(value)


def _short(text, n=60):
    return text if len(text) <= n else text[:n] + "..."


def _syntax_tree(where, text):
    """Python's syntax tree of ``text``, refused when too long, too deep or holding too large literals."""
    tokens = _TOKEN.findall(text)
    if len(tokens) > _MAX_TOKENS:
        raise EquationParseError(
            f"{where}: the expression has {len(tokens)} tokens (names, numbers, operators); at most {_MAX_TOKENS} "
            "are allowed. Shorten it, or define the model in Python with @oi.model")
    for tok in tokens:  # decimal integers, before Python converts them
        digits = tok.replace("_", "")
        if digits.isdigit() and len(digits) > _MAX_INT_DIGITS:
            _refuse_literal(where, digits, len(digits))
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise EquationParseError(f"{where}: {_short(text)!r} is not a valid expression ({exc.msg})") from None
    except (MemoryError, RecursionError):  # Python's parser gives up on deep nesting
        raise EquationParseError(
            f"{where}: the expression is nested too deeply for Python's parser; at most {_MAX_DEPTH} levels are "
            "allowed. Shorten it, or define the model in Python with @oi.model") from None
    _check_shape(where, text, tree.body)
    return tree


def _check_shape(where, text, root):
    """Nesting depth and literals of the tree, walked without recursion (the token limit bounds its size:
    every node of an expression has at least one token)."""
    stack, deepest = [(root, 0)], 0
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, ast.Constant):
            _check_literal(where, text, node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.keyword):
                child = child.value
            if isinstance(child, ast.expr):
                stack.append((child, depth + 1))
    if deepest > _MAX_DEPTH:
        raise EquationParseError(
            f"{where}: the expression nests {deepest} levels deep (a sum of n terms nests n - 1 levels); at most "
            f"{_MAX_DEPTH} are allowed. Shorten it (e.g. factor common terms), or define the model in Python "
            "with @oi.model")


def _check_literal(where, text, node):
    v = node.value
    seg = ast.get_source_segment(text, node) or ""
    if isinstance(v, int) and not isinstance(v, bool) and _digits(v) > _MAX_INT_DIGITS:  # e.g. 0xFFFF...
        _refuse_literal(where, seg, _digits(v))
    elif isinstance(v, float) and not math.isfinite(v):
        raise EquationParseError(
            f"{where}: the number {_short(seg)} is not finite (floats reach about 1.8e308); use a smaller number "
            "or rescale the model")


def _refuse_literal(where, seg, digits):
    raise EquationParseError(
        f"{where}: the integer literal {seg[:20]}... ({digits} digits) is longer than the limit of "
        f"{_MAX_INT_DIGITS} digits; write it as a float, e.g. 1e{digits - 1} for a 1 followed by "
        f"{digits - 1} zeros")


def _digits(n: int) -> int:
    """Decimal digits of ``|n|``, without converting it to text (Python refuses above 4300 digits)."""
    n = abs(n)
    d = max(1, int(n.bit_length() * 0.30102999566398120))
    return d + 1 if n >= 10 ** d else d


def _exact(x):
    return isinstance(x, (int, Fraction)) and not isinstance(x, bool)


def _exact_digits(x) -> int:
    if isinstance(x, Fraction):
        return max(_digits(x.numerator), _digits(x.denominator))
    return _digits(x)


class _Evaluator(ast.NodeVisitor):
    def __init__(self, where, text, names):
        self.where, self.text, self.names = where, text, names

    def seg(self, node):
        return _short(ast.get_source_segment(self.text, node) or self.text)

    def fail(self, node, what):
        raise EquationParseError(
            f"{self.where}: {what} in {self.seg(node)!r} is not allowed. Allowed: numbers, the names "
            f"{sorted(k for k in self.names if k not in CONSTANTS)}, constants {sorted(CONSTANTS)}, "
            f"+ - * / ** and comparisons, and the functions {sorted(FUNCTIONS)}"
        )

    def refuse(self, node, what, fix):
        raise EquationParseError(f"{self.where}: {what.replace('{seg}', self.seg(node))}; {fix}")

    def generic_visit(self, node):
        self.fail(node, f"the syntax {type(node).__name__}")

    def visit_Constant(self, node):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            self.fail(node, f"the literal {node.value!r}")
        if isinstance(node.value, float):
            text = (ast.get_source_segment(self.text, node) or "").replace("_", "")
            if len(text.lower().split("e")[0].replace(".", "").lstrip("0")) > 17:  # beyond a double: keep all
                return Traced(sp.Float(text, 17))  # as to_expr's floats, 17 digits (60 bits)
        return node.value

    def visit_Name(self, node):
        if node.id.startswith("__"):
            self.fail(node, f"the name {node.id!r}")
        if node.id in self.names:
            return self.names[node.id]
        close = difflib.get_close_matches(node.id, list(self.names) + list(FUNCTIONS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        self.fail(node, f"the unknown name {node.id!r}{hint}")

    def visit_BinOp(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            self.fail(node, f"the operator {type(node.op).__name__}")
        left, right = self.visit(node.left), self.visit(node.right)
        if not (isinstance(left, Traced) or isinstance(right, Traced)):
            return self.numbers(node, op, left, right)
        if isinstance(node.op, ast.Pow):
            self.check_exponent(node, right)
        value = op(left, right)
        if isinstance(node.op, (ast.Pow, ast.Mult, ast.Div)):
            self.check_coefficients(node, value)
        return value

    def numbers(self, node, op, left, right):
        """``left op right`` on numbers alone: exact for integers and their quotients, bounded in size."""
        word = _OP_WORDS[type(node.op)]
        fix = "write the numbers as floats (e.g. 1e20 or 10.0**20) if that is meant, or simplify the expression"
        if (isinstance(node.op, ast.Pow) and _exact(left) and _exact(right) and right.denominator == 1
                and (right > 0 or isinstance(left, Fraction))):  # int ** negative int is a float
            base = abs(left)
            size = abs(int(right)) * math.log10(max(base.numerator, base.denominator)) if base else 0.0
            if size > _MAX_INT_DIGITS:
                kind = "an integer" if isinstance(left, int) else "a fraction"
                self.refuse(node, f"the power {{seg}} would give {kind} of about {int(size) + 1} digits; "
                                  f"exact numbers are limited to {_MAX_INT_DIGITS} digits", fix)
        try:
            if isinstance(node.op, ast.Div) and _exact(left) and _exact(right):
                value = Fraction(left) / Fraction(right)
            else:
                value = op(left, right)
        except ZeroDivisionError:
            self.refuse(node, "{seg} divides by zero", "remove the division or divide by a nonzero number")
        except OverflowError:
            self.refuse(node, f"the {word} {{seg}} overflows (floats reach about 1.8e308)",
                        "use smaller numbers or rescale the model")
        if isinstance(value, complex):
            self.refuse(node, f"the {word} {{seg}} gives a complex number",
                        "odeinfer models are real: change the numbers")
        if isinstance(value, float) and not math.isfinite(value):
            self.refuse(node, f"the {word} {{seg}} is not finite (floats reach about 1.8e308)",
                        "use smaller numbers or rescale the model")
        if _exact(value) and _exact_digits(value) > _MAX_INT_DIGITS:
            kind = "an integer" if isinstance(value, int) else "a fraction"
            self.refuse(node, f"the {word} {{seg}} would give {kind} of {_exact_digits(value)} digits; "
                              f"exact numbers are limited to {_MAX_INT_DIGITS} digits", fix)
        return value

    def check_exponent(self, node, exponent):
        if _exact(exponent) and abs(exponent) > _MAX_EXPONENT:
            self.refuse(node, f"the power {{seg}} has the exponent {exponent}; integer exponents are limited "
                              f"to {_MAX_EXPONENT} in absolute value",
                        "write the exponent as a float (e.g. 2000.0) if that is meant, or simplify the expression")

    def check_coefficients(self, node, value):
        """Refuse exact numbers that sympy made too large, e.g. 10**999 from (10*x)**999."""
        expr = to_expr(value)
        for term in expr.args if isinstance(expr, sp.Add) else (expr,):
            c = term.as_coeff_Mul()[0]
            if isinstance(c, sp.Rational):
                digits = max(_digits(int(c.p)), _digits(int(c.q)))
                if digits > _MAX_COEFF_DIGITS:
                    self.refuse(node, f"the {_OP_WORDS[type(node.op)]} {{seg}} gives a number of {digits} "
                                      f"digits; exact numbers in an expression are limited to {_MAX_COEFF_DIGITS} "
                                      "digits", "write the numbers as floats (e.g. 10.0 instead of 10) or "
                                                "simplify the expression")

    def check_minmax(self, node, args):
        func = sp.Min if node.func.id == "min" else sp.Max
        n = sum(len(a.expr.args) if isinstance(a, Traced) and a.expr.func is func else 1 for a in args)
        if n > _MAX_MINMAX:
            self.refuse(node, f"{{seg}} takes the {node.func.id} of {n} values (nested {node.func.id} calls "
                              f"combine); at most {_MAX_MINMAX} are allowed",
                        "simplify the expression, or define the model in Python with @oi.model")

    def visit_UnaryOp(self, node):
        op = _UNARY.get(type(node.op))
        if op is None:
            self.fail(node, f"the operator {type(node.op).__name__}")
        return op(self.visit(node.operand))

    def visit_Compare(self, node):
        if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARE:
            self.fail(node, "a chained or equality comparison")
        left, right = self.visit(node.left), self.visit(node.comparators[0])
        return Traced(_COMPARE[type(node.ops[0])](to_expr(left), to_expr(right)))

    def visit_Call(self, node):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            if isinstance(node.func, ast.Name):
                self.fail(node, f"the call of {node.func.id!r}")
            if isinstance(node.func, ast.Attribute):
                self.fail(node, f"the attribute access .{node.func.attr}")
            self.fail(node, "the call of a computed function")
        if node.keywords and not (node.func.id == "heaviside" and [k.arg for k in node.keywords] == ["width"]):
            self.fail(node, "keyword arguments")
        args = [self.visit(a) for a in node.args]
        kwargs = {k.arg: float(self.visit(k.value)) for k in node.keywords}
        if node.func.id == "pow" and len(args) == 2 and isinstance(args[0], Traced):
            self.check_exponent(node, args[1])
        if node.func.id in ("min", "max"):
            self.check_minmax(node, args)
        try:
            value = FUNCTIONS[node.func.id](*args, **kwargs)
        except TypeError as exc:
            self.fail(node, f"the call ({exc})")
        except (ValueError, ArithmeticError) as exc:
            self.refuse(node, f"the call {{seg}} fails on numbers ({exc})", "change its arguments")
        if isinstance(value, Traced) and node.func.id == "pow":
            self.check_coefficients(node, value)
        return value


# -- printing -------------------------------------------------------------------------------------
def format_expr(expr, names=None) -> str:
    """``expr`` as text in the language of :func:`parse_equations` (``abs``, ``min``, ``where``, ...).

    Parameters
    ----------
    expr : sympy expression
    names : dict, optional
        Text for some symbols, e.g. ``{lag_symbol("x", "tau"): "lag(x, tau)"}``.
    """
    return _EquationPrinter(names or {}).doprint(expr)


class _EquationPrinter(StrPrinter):
    def __init__(self, names):
        super().__init__()
        self._names = names

    def _print_Symbol(self, expr):
        return self._names.get(expr) or super()._print_Symbol(expr)

    def _print_Float(self, expr):
        """The shortest text that reads back as the same number: a double's repr, else enough digits."""
        value = float(expr)
        if sp.Float(value, 17) == expr:
            return repr(value)
        return libmp.to_str(expr._mpf_, libmp.prec_to_dps(expr._prec) + 3)

    def _print_Abs(self, expr):
        return f"abs({self._print(expr.args[0])})"

    def _nested(self, name, args):
        out = self._print(args[-1])
        for a in reversed(args[:-1]):
            out = f"{name}({self._print(a)}, {out})"
        return out

    def _print_Min(self, expr):
        return self._nested("min", expr.args)

    def _print_Max(self, expr):
        return self._nested("max", expr.args)

    def _print_Exp1(self, expr):
        return "exp(1)"

    def _print_Heaviside(self, expr):
        x = self._print(expr.args[0])
        if len(expr.args) == 1 or expr.args[1] == sp.S.Half:
            return f"heaviside({x})"
        return self._where(expr.args[0] > 0, "1", self._where(expr.args[0] < 0, "0", self._print(expr.args[1])))

    def _print_Piecewise(self, expr):
        if expr.args[-1].cond != sp.true:
            return super()._print_Piecewise(expr)  # undefined where no condition holds: no equation text
        out = self._print(expr.args[-1].expr)
        for piece in reversed(expr.args[:-1]):
            out = self._where(piece.cond, self._print(piece.expr), out)
        return out

    def _where(self, cond, a, b):
        """``where(cond, a, b)`` with ``cond`` reduced to the comparisons the parser reads."""
        if cond == sp.true:
            return a
        if cond == sp.false:
            return b
        if isinstance(cond, sp.And):
            return self._where(cond.args[0], self._where(sp.And(*cond.args[1:]), a, b), b)
        if isinstance(cond, sp.Or):
            return self._where(cond.args[0], a, self._where(sp.Or(*cond.args[1:]), a, b))
        if isinstance(cond, sp.Not):
            return self._where(cond.args[0], b, a)
        if isinstance(cond, (sp.Eq, sp.Ne)):
            lhs, rhs = cond.args
            a, b = (a, b) if isinstance(cond, sp.Eq) else (b, a)
            return self._where(sp.Ge(lhs, rhs, evaluate=False), self._where(sp.Le(lhs, rhs, evaluate=False), a, b), b)
        return f"where({self._print(cond)}, {a}, {b})"
