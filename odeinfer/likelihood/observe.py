"""Numeric observables: ``h``, ``sigma`` and their exact partial derivatives, vectorised over
measurements (sympy expressions lambdified to numpy once per model)."""

from __future__ import annotations

import numpy as np
import sympy as sp

from odeinfer.model.codegen import safe_symbols
from odeinfer.model.derivatives import differentiate
from odeinfer.model.trace import T_SYMBOL, symbols_for

__all__ = ["ObservableFunctions"]


class _Vector:
    """Values and the non-zero partial derivatives of one expression, lambdified together."""

    def __init__(self, expr, groups, args, rename):
        self.parts = []  # (group, column) of each derivative evaluated
        exprs = [expr]
        for g, syms in enumerate(groups):
            for c, s in enumerate(syms):
                d = differentiate(expr, s)
                if d != 0:
                    self.parts.append((g, c))
                    exprs.append(d)
        self.sizes = [len(s) for s in groups]
        self.fn = sp.lambdify(args, [e.xreplace(rename) for e in exprs], modules="numpy", cse=True)

    def __call__(self, n, *args):
        value = np.empty(n)
        mats = [np.zeros((n, k)) for k in self.sizes]
        self.into(slice(None), value, mats, *args)
        return value, mats

    def into(self, sl, value, mats, *args):
        """Write the values into ``value[sl]`` and the non-zero partial derivatives into their columns
        of ``mats[g][sl]`` (the other columns are left as they are: zero in a fresh buffer);
        returns ``value[sl]``."""
        vals = self.fn(*args)
        value[sl] = vals[0]
        for (g, c), v in zip(self.parts, vals[1:]):
            mats[g][sl, c] = v
        return value[sl]


class ObservableFunctions:
    """For each observable of ``model``: ``h(t, X, p, q)`` with ``dh/dx``, ``dh/dp``, ``dh/dq``,
    and ``sigma(t, X, p, q, h)`` with ``dsigma/dx``, ``dsigma/dp``, ``dsigma/dq``, ``dsigma/dh``
    (partial derivatives: ``h`` held fixed in ``dsigma/dx``, the caller chains ``dsigma/dh dh/dx``).

    ``X`` is (n, n_states) (states at the measurement times), ``p`` the right-hand side's
    parameters, ``q`` the observable parameters.
    """

    def __init__(self, model):
        xs = symbols_for(model.states)
        ps = symbols_for(model.params)
        qs = symbols_for(model.obs_params)
        self.n_states, self.n_p, self.n_q = len(xs), len(ps), len(qs)
        self._h, self._s = [], []
        for o in model.observables:
            own = o.symbol
            rename = safe_symbols(xs, tuple(ps) + tuple(qs))
            safe_own = sp.Dummy("own", real=True)
            rename = {**rename, own: safe_own}
            targs = [T_SYMBOL] + [rename[s] for s in xs] + [rename[s] for s in ps] + [rename[s] for s in qs]
            self._h.append(_Vector(o.expr, [xs, ps, qs], targs, rename))
            self._s.append(_Vector(o.sigma_expr, [xs, ps, qs, [own]], targs + [safe_own], rename))

    def h(self, k, t, X, p, q):
        """``h, dh/dx (n, n_states), dh/dp (n, n_p), dh/dq (n, n_q)`` of observable ``k``."""
        n = t.size
        h, (dx, dp, dq) = self._h[k](n, t, *X.T, *p, *q)
        return h, dx, dp, dq

    def sigma(self, k, t, X, p, q, h):
        """``sigma, dsigma/dx (n, n_states), dsigma/dp, dsigma/dq, dsigma/dh`` of observable ``k`` at
        times ``t``, states ``X`` and predictions ``h``."""
        n = h.size
        s, (dx, dp, dq, dh) = self._s[k](n, t, *X.T, *p, *q, h)
        return s, dx, dp, dq, dh[:, 0]

    def h_into(self, k, sl, t, X, p, q, H, HX, HP, HQ):
        """:meth:`h` written into rows ``sl`` of ``H``, ``HX``, ``HP``, ``HQ`` (zero buffers);
        returns ``H[sl]``."""
        return self._h[k].into(sl, H, (HX, HP, HQ), t, *X.T, *p, *q)

    def sigma_into(self, k, sl, t, X, p, q, h, S, SX, SP, SQ, SH):
        """:meth:`sigma` written into rows ``sl`` of ``S``, ``SX``, ``SP``, ``SQ``, ``SH`` (n, 1)
        (zero buffers); returns ``S[sl]``."""
        return self._s[k].into(sl, S, (SX, SP, SQ, SH), t, *X.T, *p, *q, h)
