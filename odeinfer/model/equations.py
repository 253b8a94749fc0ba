"""Safe parsing of equation strings (no ``eval``): a whitelist over Python's AST."""

from __future__ import annotations

import ast
import difflib
import operator

from odeinfer import math as om
from odeinfer.errors import EquationParseError, ModelDefinitionError
from odeinfer.model.trace import T_SYMBOL, symbols_for
from odeinfer.model.traced import Traced, to_expr

__all__ = ["parse_equations", "FUNCTIONS", "CONSTANTS"]

FUNCTIONS = {
    "exp": om.exp, "log": om.log, "sqrt": om.sqrt, "sin": om.sin, "cos": om.cos, "tan": om.tan,
    "tanh": om.tanh, "abs": om.abs, "pow": om.pow, "min": om.min, "max": om.max,
    "where": om.where, "heaviside": om.heaviside, "lag": om.lag,
}
CONSTANTS = {"pi": om.pi, "e": om.e}
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
_MAX_LEN = 10_000


def parse_equations(equations, states, params, delays=()):
    """One sympy expression per state, from ``{state: "text"}`` (``lag(x, tau)`` needs ``tau`` in ``delays``)."""
    from odeinfer.model.lags import tracing_context

    with tracing_context(states, params, delays):
        return _parse(equations, states, params)


def _parse(equations, states, params):
    names = {s: Traced(sym) for s, sym in zip(states, symbols_for(states))}
    names.update({s: Traced(sym) for s, sym in zip(params, symbols_for(params))})
    names["t"] = Traced(T_SYMBOL)
    for c, v in CONSTANTS.items():
        names.setdefault(c, v)
    exprs = []
    for state in states:
        text = equations[state]
        if not isinstance(text, str):
            raise EquationParseError(
                f"equations[{state!r}]: expected a string such as 'alpha*prey', got {type(text).__name__}"
            )
        if len(text) > _MAX_LEN:
            raise EquationParseError(f"equations[{state!r}]: the expression is longer than {_MAX_LEN} characters")
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise EquationParseError(f"equations[{state!r}]: {text!r} is not a valid expression ({exc.msg})") from None
        try:
            value = _Evaluator(state, text, names).visit(tree.body)
        except EquationParseError:
            raise
        except ModelDefinitionError as exc:
            raise EquationParseError(f"equations[{state!r}]: {exc}") from None
        exprs.append(to_expr(value))
    return tuple(exprs)


class _Evaluator(ast.NodeVisitor):
    def __init__(self, state, text, names):
        self.state, self.text, self.names = state, text, names

    def fail(self, node, what):
        seg = ast.get_source_segment(self.text, node) or self.text
        raise EquationParseError(
            f"equations[{self.state!r}]: {what} in {seg!r} is not allowed. Allowed: numbers, the names "
            f"{sorted(k for k in self.names if k not in CONSTANTS)}, constants {sorted(CONSTANTS)}, "
            f"+ - * / ** and comparisons, and the functions {sorted(FUNCTIONS)}"
        )

    def generic_visit(self, node):
        self.fail(node, f"the syntax {type(node).__name__}")

    def visit_Constant(self, node):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            self.fail(node, f"the literal {node.value!r}")
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
        return op(self.visit(node.left), self.visit(node.right))

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
        try:
            return FUNCTIONS[node.func.id](*args, **kwargs)
        except TypeError as exc:
            self.fail(node, f"the call ({exc})")
