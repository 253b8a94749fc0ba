"""Exact symbolic derivatives of a model's right-hand side."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import sympy as sp

__all__ = ["Derivatives", "DelayDerivatives", "differentiate"]


def differentiate(expr, sym):
    """d expr / d sym, with the derivative of a sharp step taken as 0 (almost everywhere)."""
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
    def jac_y(self):
        n = self.n_states
        return sp.Matrix(n, n, lambda i, k: differentiate(self.exprs[i], self.state_symbols[k]))

    @cached_property
    def jac_p(self):
        return sp.Matrix(self.n_states, self.n_params,
                         lambda i, j: differentiate(self.exprs[i], self.param_symbols[j]))

    @cached_property
    def f_t(self):
        return sp.Matrix([differentiate(e, self.t_symbol) for e in self.exprs])

    @cached_property
    def jac_y_t(self):
        return self.jac_y.applyfunc(lambda e: differentiate(e, self.t_symbol))

    @cached_property
    def jac_p_t(self):
        return self.jac_p.applyfunc(lambda e: differentiate(e, self.t_symbol))

    @cached_property
    def d2_yy(self):
        ys = self.state_symbols
        return [[[differentiate(self.jac_y[i, k], ys[l]) for l in range(len(ys))]
                 for k in range(len(ys))] for i in range(len(ys))]

    @cached_property
    def d2_py(self):
        ys = self.state_symbols
        return [[[differentiate(self.jac_p[i, j], ys[l]) for l in range(len(ys))]
                 for j in range(self.n_params)] for i in range(len(ys))]


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
