"""Numba source code for a model's kernels, from its sympy expressions.

The generated functions follow the contract of :mod:`odeinfer.solve.kernels`:
``model_f``, ``model_jac_y``, ``model_jac_p``, ``model_f_t``, the directional
second derivatives ``model_jac_y_dir`` / ``model_jac_p_dir`` and the time
derivatives ``model_jac_y_t`` / ``model_jac_p_t``. Common subexpressions are
shared within each kernel (``sympy.cse``).
"""

from __future__ import annotations

import threading
import weakref

import sympy as sp
from sympy.printing.pycode import PythonCodePrinter

from odeinfer.errors import ModelDefinitionError
from odeinfer.model.derivatives import Derivatives

__all__ = ["model_source", "safe_symbols"]

# fastmath set (to False), not left to be inherited from a fast-math caller: see the kernel
# rules in odeinfer.solve.kernels
_DECOR = '@njit(cache=True, error_model="numpy", fastmath=False)'


class _Printer(PythonCodePrinter):
    def __init__(self):
        super().__init__({"fully_qualified_modules": True, "standard": "python3"})

    def _print_Integer(self, expr):  # keep every literal a float: numba types stay uniform
        return f"{float(expr.p)!r}"

    def _print_Rational(self, expr):
        return f"({float(expr.p)!r}/{float(expr.q)!r})"

    def _print_Half(self, expr):
        return "0.5"


def safe_symbols(state_symbols, param_symbols, lag_symbols=None) -> dict:
    """Plain symbols ``_y<k>``, ``_p<j>`` (and ``_l<i>_<k>`` for the lagged states) for a model's symbols.

    Generated code and :meth:`~odeinfer.model.Model.lambdify` use these, so that a
    user's name never reaches generated source nor shadows a function (a state ``exp``).
    """
    rename = {s: sp.Symbol(f"_y{k}", real=True) for k, s in enumerate(state_symbols)}
    rename.update({s: sp.Symbol(f"_p{k}", real=True) for k, s in enumerate(param_symbols)})
    if lag_symbols is not None:
        for i in range(lag_symbols.rows):
            for k in range(lag_symbols.cols):
                rename[lag_symbols[i, k]] = sp.Symbol(f"_l{i}_{k}", real=True)
    return rename


def _check_symbols(kernel, exprs, known):
    """Only the plain kernel names (and ``t``) may reach generated source, never a user's symbol name."""
    unknown = sorted({s.name for e in exprs for s in e.free_symbols} - known - {"t"})
    if unknown:
        raise ModelDefinitionError(
            f"{kernel}: the model's expressions use the symbols {unknown}, which are not its states, parameters "
            "or t; declare them in states=[...] or params=[...] (oi.model and Model.from_equations do this)")


def _kernel(name, args, outputs, rename, n_in, loads=()):
    """Source of one kernel writing ``outputs`` (list of (index_str, expr)).

    ``n_in``: (array, count) pairs read as ``_<array><k> = <array>[k]``;
    ``loads``: extra (local name, access text) pairs, e.g. ``("_l0_1", "ylag[0, 1]")``.
    """
    printer = _Printer()
    exprs = [e.xreplace(rename) for _, e in outputs]
    _check_symbols(name, exprs, {s.name for s in rename.values()})
    nonzero = [(i, e) for i, e in enumerate(exprs) if e != 0]
    subs, reduced = sp.cse([e for _, e in nonzero], symbols=sp.numbered_symbols("_c"), optimizations="basic")
    lines = [_DECOR, f"def {name}({', '.join(args)}):"]
    used = set()
    for e in [*(s for _, s in subs), *reduced]:
        used |= {s.name for s in e.free_symbols}
    for arr, count in n_in:
        for k in range(count):
            if f"_{arr}{k}" in used:
                lines.append(f"    _{arr}{k} = {arr}[{k}]")
    for local, access in loads:
        if local in used:
            lines.append(f"    {local} = {access}")
    for sym, e in subs:
        lines.append(f"    {sym} = {printer.doprint(e)}")
    ndim = 1 + outputs[0][0].count(",") if outputs else 1
    lines.append(f"    out[{', '.join([':'] * ndim)}] = 0.0")
    for (i, _), e in zip(nonzero, reduced):
        lines.append(f"    out[{outputs[i][0]}] = {printer.doprint(e)}")
    return "\n".join(lines) + "\n"


_SOURCES = weakref.WeakKeyDictionary()  # Derivatives -> its source (generated once: sympy's cse is slow)
_SOURCES_LOCK = threading.Lock()


def model_source(deriv: Derivatives) -> str:
    """Python source of all kernels of a model (without the module header).

    Generated once per :class:`Derivatives` object (a model's kernels and its C callbacks use
    the same text).
    """
    with _SOURCES_LOCK:
        text = _SOURCES.get(deriv)
        if text is None:
            text = _SOURCES[deriv] = _model_source(deriv)
        return text


def _model_source(deriv: Derivatives) -> str:
    n, m = deriv.n_states, deriv.n_params
    ys, ps, vs = deriv.state_symbols, deriv.param_symbols, sp.symbols(f"_v0:{max(n, 1)}", real=True)[:n]
    rename = safe_symbols(ys, ps)
    rename.update({v: sp.Symbol(f"_v{k}", real=True) for k, v in enumerate(vs)})
    f, jy, jp, ft = deriv.f, deriv.jac_y, deriv.jac_p, deriv.f_t
    jyt, jpt = deriv.jac_y_t, deriv.jac_p_t
    jy_dir = sp.Matrix(n, n, lambda i, k: sum((deriv.d2_yy[i][k][l] * vs[l] for l in range(n)), sp.Integer(0)))
    jp_dir = sp.Matrix(n, m, lambda i, j: sum((deriv.d2_py[i][j][l] * vs[l] for l in range(n)), sp.Integer(0)))

    def vec(v):
        return [(f"{i}", v[i]) for i in range(len(v))]

    def mat(M, rows, cols):
        return [(f"{i}, {j}", M[i, j]) for i in range(rows) for j in range(cols)]

    ins = [("y", n), ("p", m)]
    ins_v = ins + [("v", n)]
    base = ["t", "y", "p", "out"]
    parts = [
        f"N_STATES = {n}\nN_PARAMS = {m}\n",
        _kernel("model_f", base, vec(f), rename, ins),
        _kernel("model_jac_y", base, mat(jy, n, n), rename, ins),
        _kernel("model_jac_p", base, mat(jp, n, m), rename, ins),
        _kernel("model_f_t", base, vec(ft), rename, ins),
        _kernel("model_jac_y_dir", ["t", "y", "p", "v", "out"], mat(jy_dir, n, n), rename, ins_v),
        _kernel("model_jac_p_dir", ["t", "y", "p", "v", "out"], mat(jp_dir, n, m), rename, ins_v),
        _kernel("model_jac_y_t", base, mat(jyt, n, n), rename, ins),
        _kernel("model_jac_p_t", base, mat(jpt, n, m), rename, ins),
    ]
    return "\n\n".join(parts)
