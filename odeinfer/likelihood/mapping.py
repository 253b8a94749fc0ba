"""The condition mappings of a :class:`~odeinfer.likelihood.FitProblem`: per experiment, the vector
``v(theta) = p | q | x0 | doses | p_pre | x0_pre`` of the model's inputs as expressions of the problem's
parameters (``Plan.exprs``), its values and its exact Jacobian in the estimated parameters.

Experiments share most of their expressions (the same initial-state formulas, the same parameters;
a condition changes a few entries), so the problem's distinct expressions are differentiated and
lambdified once, together (common subexpressions shared), and evaluated once per ``theta`` for all
experiments; each experiment takes its rows. Done per experiment, this cost up to 2 s of sympy work
for each (Fiedler_BMCSystBiol2016: initial states given by a closed-form steady state, 6 experiments).
"""

from __future__ import annotations

import numpy as np
import sympy as sp

__all__ = ["ConditionMapping"]


class ConditionMapping:
    """``v(theta)`` and ``dv/dtheta_est`` of every experiment of ``problem`` (natural values)."""

    def __init__(self, problem):
        distinct = {}
        for plan in problem.plans:
            for e in plan.exprs:
                distinct.setdefault(e, len(distinct))
        self._index = distinct
        syms = [problem.symbols[n] for n in problem.names]
        est = [problem.symbols[n] for n in problem.estimated]
        v = sp.Matrix(len(distinct), 1, list(distinct))
        rename = {s: sp.Symbol(f"_a{k}", real=True) for k, s in enumerate(syms)}
        args = [rename[s] for s in syms]
        self._v = sp.lambdify([args], list(v.xreplace(rename)), modules="numpy", cse=True)
        self._jac_sym = v.jacobian(est) if est and v.rows else sp.zeros(v.rows, len(est))
        self._jac_const = np.array(self._jac_sym.tolist(), dtype=float).reshape(v.rows, len(est)) if all(
            e.is_number for e in self._jac_sym) else None
        self._jac = None if self._jac_const is not None else sp.lambdify(
            [args], self._jac_sym.xreplace(rename), modules="numpy", cse=True)
        self._key, self._last = None, None

    def rows(self, plan):
        """The rows of ``plan``'s expressions, in the order of ``plan.exprs``."""
        return np.array([self._index[e] for e in plan.exprs], np.int64)

    def jacobian(self, rows):
        """The symbolic Jacobian of those rows (a sympy Matrix, rows x estimated parameters)."""
        return self._jac_sym.extract(list(map(int, rows)), list(range(self._jac_sym.cols)))

    def at(self, theta, rows):
        """``(v, J)`` of those rows at ``theta`` (all parameters, natural values): new arrays. The values of
        every distinct expression at the last ``theta`` are kept, as every experiment asks for the same one."""
        theta = np.asarray(theta, float)
        key = theta.tobytes()
        if key != self._key:
            v = np.asarray(self._v(theta), float).ravel()
            J = self._jac_const if self._jac_const is not None else np.asarray(self._jac(theta), float)
            self._key, self._last = key, (v, J.reshape(v.size, -1))
        v, J = self._last
        return v[rows], J[rows]
