"""Vector-Jacobian products of ODE solutions by the continuous adjoint: :func:`solve_vjp`
and the fast repeated-call path :func:`make_vjp`.

``sum_i g_i . x(t_i)`` differentiated with respect to the parameters and the initial
state costs one forward solve of the states and one backward solve of ``n + m``
adjoint components (kernel ``dopri5_adjoint_vjp``, ``odeinfer/solve/kernels/adjoint.py``),
whatever the number of parameters; forward sensitivities integrate ``n (1 + m + n)``
components. For models with many parameters, and for the gradient of a log
density (one ``g`` per evaluation), this is the cheaper path.
"""

from __future__ import annotations

import numpy as np

from odeinfer.errors import InputError
from odeinfer.solve import _inputs
from odeinfer.solve.api import _raise
from odeinfer.solve.status import status_message

__all__ = ["VJP", "make_vjp", "solve_vjp"]


class VJP:
    """The adjoint vector-Jacobian product bound to a model, output times and options.

    Made by :func:`make_vjp`. ``grad, status = vjp(params, x0, g)`` with float64
    C-contiguous ``params`` (n_params,), ``x0`` (n_states,) and ``g`` (n_times,
    n_states) (not converted or validated on this fast path; wrong sizes give
    ``status == Status.BAD_INPUT``). ``grad`` (n_params + n_states,) =
    ``[sum_i g_i^T dx(t_i)/dp, sum_i g_i^T dx(t_i)/dx0]`` and ``y`` (the states at
    ``t``, attribute) are buffers that the **next call overwrites**.

    Attributes
    ----------
    compiled : CompiledModel
    t : ndarray (n_times,), read-only
    t0, rtol, atol : float
    max_steps, nsub : int
    y : ndarray (n_times, n_states)
        States at ``t`` from the last call's forward solve.
    info : ndarray (6,)
        The forward solve's t_reached, n_steps, n_rejected, n_rhs, h_next.
    kernel : numba dispatcher
        ``module.dopri5_adjoint_vjp``, for use from numba code.
    """

    __slots__ = ("compiled", "t", "t0", "rtol", "atol", "max_steps", "nsub", "kernel", "y", "grad", "rec",
                 "work", "info")

    def __init__(self, compiled, t, t0, rtol, atol, max_steps, nsub):
        module = compiled.module
        n, m = compiled.n_states, compiled.n_params
        self.compiled, self.t, self.t0 = compiled, t, t0
        self.rtol, self.atol, self.max_steps, self.nsub = rtol, atol, max_steps, nsub
        self.kernel = module.dopri5_adjoint_vjp
        self.y = np.empty((t.size, n))
        self.grad = np.empty(n + m)
        self.rec = np.empty((max_steps, 3 + 5 * n))
        self.work = np.empty(module.dopri5_adjoint_work_size())
        self.info = np.zeros(module.INFO_SIZE)

    def __call__(self, params, x0, g):
        """Gradient of ``sum_i g[i] . x(t_i)``: returns ``(grad, status)``."""
        status = self.kernel(self.t0, self.t, x0, params, g, self.rtol, self.atol, self.max_steps, self.nsub,
                             self.y, self.rec, self.grad, self.work, self.info)
        return self.grad, status

    def __reduce__(self):
        return (make_vjp, (self.compiled.model, np.array(self.t)),
                {"t0": self.t0, "rtol": self.rtol, "atol": self.atol, "max_steps": self.max_steps,
                 "nsub": self.nsub})

    def __setstate__(self, state):  # pickling: the options went to make_vjp already
        pass

    def __repr__(self):
        return (f"VJP(model={self.compiled.model.name!r}, n_times={self.t.size}, rtol={self.rtol:g}, "
                f"atol={self.atol:g}, nsub={self.nsub})")


def make_vjp(model, t, *, t0=None, rtol=1e-6, atol=1e-8, max_steps=100_000, nsub=1) -> VJP:
    """A :class:`VJP` for repeated adjoint gradients (the Bayesian Op, estimators).

    Parameters
    ----------
    model : Model or CompiledModel
    t : array-like (n_times,)
        Output times, sorted, ``>= t0``.
    t0 : float, optional
        Time of the initial state; default ``t[0]``.
    rtol, atol : float, default 1e-6, 1e-8
        Tolerances of the forward Dormand-Prince solve; the backward adjoint
        runs on its steps, so its error is of the same order.
    max_steps : int, default 100000
    nsub : int, default 1
        Backward substeps per forward step (more: a more accurate adjoint).

    Raises
    ------
    InputError
        Bad options, or a model whose right-hand side jumps at a time that depends on
        a parameter or a state (the adjoint, like forward sensitivities, would miss
        the jump term).
    """
    cm = _inputs.compiled_model(model)
    t_arr, t0 = _inputs.output_times(t, t0)
    _inputs.check_sensitivities(cm, True)
    rtol, atol = _inputs.tolerances(rtol, atol)
    max_steps = _inputs.positive_int("max_steps", max_steps)
    nsub = _inputs.positive_int("nsub", nsub)
    return VJP(cm, t_arr, t0, rtol, atol, max_steps, nsub)


def solve_vjp(model, params, x0, t, g, *, t0=None, rtol=1e-6, atol=1e-8, max_steps=100_000, nsub=1):
    """``sum_i g[i]^T d x(t_i) / d(params, x0)`` by the continuous adjoint.

    Parameters
    ----------
    model : Model or CompiledModel
    params : dict or array-like (n_params,)
    x0 : dict or array-like (n_states,)
    t : array-like (n_times,)
        Output times, sorted, ``>= t0``.
    g : array-like (n_times, n_states)
        Weights of the states at the output times (e.g. the derivative of a
        log density with respect to them).
    t0, rtol, atol, max_steps, nsub
        As for :func:`make_vjp`.

    Returns
    -------
    pandas.Series
        The gradient, indexed by the parameter names then ``"<state>(t0)"``.

    Raises
    ------
    InputError
        Bad arguments (named in the message). SolverError when the forward solve fails.

    Examples
    --------
    >>> import numpy as np, odeinfer as oi
    >>> @oi.model(states=["x"], params=["k"])
    ... def decay(t, y, p):
    ...     return {"x": -p.k * y.x}
    >>> g = oi.solve.adjoint.solve_vjp(decay, [0.5], [2.0], [0.0, 1.0], [[0.0], [1.0]])
    >>> g.round(6).to_dict()  # d x(1) / d k = -t x0 e^{-k t}, d x(1) / d x0 = e^{-k t}
    {'k': -1.213061, 'x(t0)': 0.606531}
    """
    import pandas as pd

    vjp = make_vjp(model, t, t0=t0, rtol=rtol, atol=atol, max_steps=max_steps, nsub=nsub)
    cm = vjp.compiled
    p = _inputs.named_values("params", params, cm.params, "parameter")
    y0 = _inputs.named_values("x0", x0, cm.states, "state")
    try:
        g_arr = np.array(g, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"g: expected numbers of shape ({vjp.t.size}, {cm.n_states}), got {type(g).__name__}") from None
    if g_arr.shape != (vjp.t.size, cm.n_states):
        raise InputError(f"g: expected shape (n_times, n_states) = ({vjp.t.size}, {cm.n_states}), got {g_arr.shape}")
    if not np.all(np.isfinite(g_arr)):
        rows = np.unique(np.nonzero(~np.isfinite(g_arr))[0]).tolist()
        raise InputError(f"g: rows {rows[:10]} hold NaN or inf; pass finite weights (0 for unobserved values)")
    grad, status = vjp(p, y0, np.ascontiguousarray(g_arr))
    if status != 0:
        t_reached = float(vjp.info[0])
        _raise(status, status_message(status, t_reached=t_reached, max_steps=vjp.max_steps), t_reached, "dopri5")
    names = list(cm.params) + [f"{s}(t0)" for s in cm.states]
    return pd.Series(np.array(grad), index=names, name="vjp")
