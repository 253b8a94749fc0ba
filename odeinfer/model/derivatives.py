"""Exact symbolic derivatives of a model's right-hand side."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import sympy as sp

__all__ = ["Derivatives", "DelayDerivatives", "differentiate"]


def differentiate(expr, sym, free=None):
    """d expr / d sym, with the derivative of a sharp step taken as 0 (almost everywhere).

    ``free``: ``expr.free_symbols`` when the caller has it (differentiating one expression in
    many symbols): a symbol outside it gives 0 at once, as ``sp.diff`` would after walking the
    whole expression to find its free symbols.
    """
    if free is not None and sym not in free:
        return sp.Integer(0)
    d = sp.diff(expr, sym)
    if d.has(sp.DiracDelta):
        d = d.replace(sp.DiracDelta, lambda *args: sp.Integer(0))
    return d


@dataclass(frozen=True, eq=False)
class Derivatives:
    """First and second derivatives of ``f(t, y, p)`` (sympy), computed on demand.

    ``jac_y[i, k] = df_i/dy_k``; ``jac_p[i, j] = df_i/dp_j``; ``f_t[i] = df_i/dt``;
    ``d2_yy[i][k][l] = d2 f_i / dy_k dy_l``; ``d2_py[i][j][l] = d2 f_i / dp_j dy_l``.
    """

    t_symbol: sp.Symbol
    state_symbols: tuple
    param_symbols: tuple
    exprs: tuple

    @property
    def n_states(self):
        return len(self.state_symbols)

    @property
    def n_params(self):
        return len(self.param_symbols)

    @cached_property
    def f(self):
        return sp.Matrix(self.exprs)

    @cached_property
    def _free_f(self):
        return [e.free_symbols for e in self.exprs]

    @cached_property
    def jac_y(self):
        n, free = self.n_states, self._free_f
        return sp.Matrix(n, n, lambda i, k: differentiate(self.exprs[i], self.state_symbols[k], free[i]))

    @cached_property
    def jac_p(self):
        free = self._free_f
        return sp.Matrix(self.n_states, self.n_params,
                         lambda i, j: differentiate(self.exprs[i], self.param_symbols[j], free[i]))

    @cached_property
    def f_t(self):
        return sp.Matrix([differentiate(e, self.t_symbol, free) for e, free in zip(self.exprs, self._free_f)])

    @cached_property
    def jac_y_t(self):
        return _applyfunc(self.jac_y, lambda e, free: differentiate(e, self.t_symbol, free))

    @cached_property
    def jac_p_t(self):
        return _applyfunc(self.jac_p, lambda e, free: differentiate(e, self.t_symbol, free))

    @cached_property
    def d2_yy(self):
        return _second(self.jac_y, self.state_symbols)

    @cached_property
    def d2_py(self):
        return _second(self.jac_p, self.state_symbols)


def _applyfunc(M, fn):
    """``M.applyfunc``, with ``fn(entry, entry.free_symbols)`` called on the non-zero entries only."""
    return M.applyfunc(lambda e: fn(e, e.free_symbols) if e != 0 else e)


def _second(J, ys):
    """``[[[d J[i, j] / d ys[l] for l] for j] for i]``: each entry's free symbols found once, not per ``l``."""
    out = []
    for i in range(J.rows):
        row = []
        for j in range(J.cols):
            e = J[i, j]
            free = e.free_symbols if e != 0 else ()
            row.append([differentiate(e, y, free) for y in ys])
        out.append(row)
    return out


@dataclass(frozen=True, eq=False)
class DelayDerivatives:
    """First derivatives of a DDE right-hand side ``f(t, y, Y, p)`` (sympy), computed on demand.

    ``Y[i, k]`` stands for ``y_i(t - tau_k)`` (the symbols ``lag_symbols``).
    ``jac_y[i, l] = df_i/dy_l`` (lags held fixed); ``jac_ylag[k][i, l] = df_i/dY[l, k]``;
    ``jac_p[i, j] = df_i/dp_j`` (the explicit dependence only, e.g. on a delay
    that also appears outside a lag, as in ``exp(-m tau)``).
    """

    t_symbol: sp.Symbol
    state_symbols: tuple
    lag_symbols: sp.Matrix
    param_symbols: tuple
    exprs: tuple

    @property
    def n_states(self):
        return len(self.state_symbols)

    @property
    def n_params(self):
        return len(self.param_symbols)

    @property
    def n_delays(self):
        return self.lag_symbols.shape[1]

    @cached_property
    def f(self):
        return sp.Matrix(self.exprs)

    @cached_property
    def jac_y(self):
        n = self.n_states
        return sp.Matrix(n, n, lambda i, k: differentiate(self.exprs[i], self.state_symbols[k]))

    @cached_property
    def jac_ylag(self):
        n = self.n_states
        return tuple(sp.Matrix(n, n, lambda i, l: differentiate(self.exprs[i], self.lag_symbols[l, k]))
                     for k in range(self.n_delays))

    @cached_property
    def jac_p(self):
        return sp.Matrix(self.n_states, self.n_params,
                         lambda i, j: differentiate(self.exprs[i], self.param_symbols[j]))
