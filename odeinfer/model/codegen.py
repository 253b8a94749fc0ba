"""Numba source code for a model's kernels, from its sympy expressions.

The generated functions follow the contract of :mod:`odeinfer.solve.kernels`:
``model_f``, ``model_jac_y``, ``model_jac_p``, ``model_f_t``, the directional
second derivatives ``model_jac_y_dir`` / ``model_jac_p_dir`` and the time
derivatives ``model_jac_y_t`` / ``model_jac_p_t``. Common subexpressions are
shared within each kernel (``sympy.cse``); the directional kernels are the forward-mode
derivatives of the two Jacobian kernels' programs along ``v`` (:func:`_tangent`), not
``sympy.cse`` of the n^3 symbolic second derivatives (minutes for a model of 30 states).
"""

from __future__ import annotations

import threading
import weakref

import sympy as sp
from sympy.printing.pycode import PythonCodePrinter

from odeinfer.errors import ModelDefinitionError
from odeinfer.model.derivatives import Derivatives, differentiate

__all__ = ["model_source", "safe_symbols"]

# fastmath set (to False), not left to be inherited from a fast-math caller, and numba's reference
# counting off (the kernels neither allocate nor return arrays): see the kernel rules in odeinfer.solve.kernels
_DECOR = '@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)'


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


def _reduce(name, outputs, rename):
    """``outputs`` (list of (index_str, expr)) in the plain names, with common subexpressions shared:
    ``(subs, [(index_str, reduced expr)])``, the zero outputs left out (``sympy.cse``)."""
    exprs = [e.xreplace(rename) for _, e in outputs]
    _check_symbols(name, exprs, {s.name for s in rename.values()})
    nonzero = [(outputs[i][0], e) for i, e in enumerate(exprs) if e != 0]
    subs, reduced = sp.cse([e for _, e in nonzero], symbols=sp.numbered_symbols("_c"), optimizations="basic")
    return subs, [(index, e) for (index, _), e in zip(nonzero, reduced)]


def _kernel(name, args, outputs, rename, n_in, loads=()):
    """Source of one kernel writing ``outputs`` (list of (index_str, expr)).

    ``n_in``: (array, count) pairs read as ``_<array><k> = <array>[k]``;
    ``loads``: extra (local name, access text) pairs, e.g. ``("_l0_1", "ylag[0, 1]")``.
    """
    return _emit(name, args, _ndim(outputs), *_reduce(name, outputs, rename), n_in, loads)


def _ndim(outputs):
    """The output array's dimensions, read from the first index (1 when there is none)."""
    return 1 + outputs[0][0].count(",") if outputs else 1


def _emit(name, args, ndim, subs, outs, n_in, loads=()):
    """Source of one kernel from its straight-line program: the assignments ``subs`` (those the
    outputs do not need are left out), then ``out[index] = expr`` for ``outs``; see :func:`_kernel`."""
    printer = _Printer()
    used = {s.name for _, e in outs for s in e.free_symbols}  # by name: _tangent's symbols are real ones
    kept = []
    for sym, e in reversed(subs):
        if sym.name in used:
            kept.append((sym, e))
            used |= {s.name for s in e.free_symbols}
    kept.reverse()
    lines = [_DECOR, f"def {name}({', '.join(args)}):"]
    for arr, count in n_in:
        for k in range(count):
            if f"_{arr}{k}" in used:
                lines.append(f"    _{arr}{k} = {arr}[{k}]")
    for local, access in loads:
        if local in used:
            lines.append(f"    {local} = {access}")
    for sym, e in kept:
        lines.append(f"    {sym} = {printer.doprint(e)}")
    lines.append(f"    out[{', '.join([':'] * ndim)}] = 0.0")
    for index, e in outs:
        lines.append(f"    out[{index}] = {printer.doprint(e)}")
    return "\n".join(lines) + "\n"


def _tangent(subs, outs, seeds):
    """Forward-mode derivative of a straight-line program ``(subs, outs)`` (as :func:`_reduce` gives):
    ``(subs', outs')`` whose outputs are ``sum_s d out / d s * seeds[s]``, the derivative of each
    output along the direction ``seeds`` (symbol -> its tangent), by the chain rule through the
    shared subexpressions: exact, and as cheap to generate as the program is long (the directional
    second derivatives of a large model without its n^3 symbolic second derivatives).

    Each assignment ``c = e`` is followed by ``_dc = de`` when its tangent is not zero; outputs
    whose tangent is zero are left out.
    """
    dot = dict(seeds)
    real = {}  # the shared subexpressions' symbols as real ones (as the states are): no re/im in derivatives

    def d(e):
        e = e.xreplace(real)
        terms = [differentiate(e, s) * dot[s] for s in sorted(e.free_symbols & dot.keys(), key=sp.default_sort_key)]
        return sp.Add(*terms)

    program = []
    for sym, e in subs:
        program.append((sym, e))
        de = d(e)
        real[sym] = sp.Symbol(sym.name, real=True)
        if de != 0:
            dot[real[sym]] = sp.Symbol(f"_d{sym.name}", real=True)
            program.append((dot[real[sym]], de))
    outs = [(index, d(e)) for index, e in outs]
    return program, [(index, e) for index, e in outs if e != 0]


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
    rename = safe_symbols(deriv.state_symbols, deriv.param_symbols)
    f, jy, jp, ft = deriv.f, deriv.jac_y, deriv.jac_p, deriv.f_t
    jyt, jpt = deriv.jac_y_t, deriv.jac_p_t

    def vec(v):
        return [(f"{i}", v[i]) for i in range(len(v))]

    def mat(M, rows, cols):
        return [(f"{i}, {j}", M[i, j]) for i in range(rows) for j in range(cols)]

    ins = [("y", n), ("p", m)]
    ins_v = ins + [("v", n)]
    base, args_v = ["t", "y", "p", "out"], ["t", "y", "p", "v", "out"]
    # the directional second derivatives d/de J(t, y + e v, p) of both Jacobians, from their programs
    along_v = {rename[y]: sp.Symbol(f"_v{k}", real=True) for k, y in enumerate(deriv.state_symbols)}
    jy_out, jp_out = mat(jy, n, n), mat(jp, n, m)
    reduced_jy, reduced_jp = _reduce("model_jac_y", jy_out, rename), _reduce("model_jac_p", jp_out, rename)
    parts = [
        f"N_STATES = {n}\nN_PARAMS = {m}\n",
        _kernel("model_f", base, vec(f), rename, ins),
        _emit("model_jac_y", base, _ndim(jy_out), *reduced_jy, ins),
        _emit("model_jac_p", base, _ndim(jp_out), *reduced_jp, ins),
        _kernel("model_f_t", base, vec(ft), rename, ins),
        _emit("model_jac_y_dir", args_v, _ndim(jy_out), *_tangent(*reduced_jy, along_v), ins_v),
        _emit("model_jac_p_dir", args_v, _ndim(jp_out), *_tangent(*reduced_jp, along_v), ins_v),
        _kernel("model_jac_y_t", base, mat(jyt, n, n), rename, ins),
        _kernel("model_jac_p_t", base, mat(jpt, n, m), rename, ins),
    ]
    return "\n\n".join(parts)
