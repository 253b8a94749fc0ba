"""Gradients of DDE functionals by the continuous adjoint (DDE-Find, corrected).

:func:`dde_loss_gradient` returns ``L = int_{t0}^{T} sum_i w_i (x_i - target_i)^2 dt``
and ``dL/d(params, history params)`` from one forward solve (dense output) and one
backward adjoint solve (numba kernel ``dde_adjoint_gradient`` in
``odeinfer/solve/kernels/dde_adjoint.py``). The delay gradient includes the history
term that R. Stephany's DDE-Find paper (Theorem 1, eq. 5) drops (spec seed-002,
section 1.4); ``paper=True`` reproduces the paper's formula for comparison.

:func:`dde_vjp` is the vector-Jacobian product of the solution at output times,
``sum_r g_r^T d x(t_r) / d(params, history params)``: the same adjoint with point
sources (kernel ``dde_adjoint_vjp``), one backward solve whatever the number of
parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from odeinfer.errors import InputError, SolverError
from odeinfer.model.history import History
from odeinfer.solve import _inputs, abi
from odeinfer.solve.abi import Info, Status, status_message
from odeinfer.solve.config import Adjoint, as_gradient
from odeinfer.solve.dde import _check_delays, _check_window, _with_history_params
from odeinfer.solve.shared import TieredKernel

__all__ = ["AdjointGradient", "DDEVJP", "dde_loss_gradient", "dde_vjp"]

#: nsub of the backward RK4 sweep when ``Adjoint(nsub=None)``: steps per forward step (dde_vjp)
#: and per smallest delay (dde_loss_gradient).
VJP_NSUB, LOSS_NSUB = 2, 64


def _forward(problem, solver):
    """The states-only prebuilt delay solver of ``problem`` (default: the ``dde_adjoint`` role's)."""
    from odeinfer.solve.problem import bind

    return bind(problem, solver=solver, role="dde_adjoint")


class DDEVJP:
    """The adjoint vector-Jacobian product of a delay problem, prebuilt (what
    ``oi.bind(problem, gradient=oi.Adjoint())`` returns for a model with delays).

    ``grad, status = vjp(params, history_params, g)`` with float64 C-contiguous ``params``
    (n_params,), ``history_params`` (n_history_params,) and ``g`` (n_times, n_states); ``grad``
    (n_params + n_history_params,) and ``y`` (attribute: the states at ``t``) are buffers that
    the next call overwrites. Not validated on this path.

    The backward sweep runs the model's ``dde_adjoint_vjp`` kernel or, while it compiles, the
    shared ``ptr_dde_adjoint_vjp`` (same bits; :attr:`tier`, see :mod:`odeinfer.solve.shared`).
    """

    __slots__ = ("forward", "compiled", "t", "t0", "history", "solver", "gradient", "nsub", "grad", "y", "_tiers",
                 "_run")

    def __init__(self, forward, gradient):
        self.forward, self.compiled, self.t, self.t0 = forward, forward.compiled, forward.t, forward.t0
        self.history, self.solver, self.gradient = forward.history, forward.solver, gradient
        self.nsub = VJP_NSUB if gradient.nsub is None else gradient.nsub
        self.grad = np.empty(self.compiled.n_params + self.history.n_params)
        self.y = forward._y
        self._tiers = TieredKernel(self.compiled, self.compiled.module.dde_adjoint_vjp)
        # the history's kernel arrays as the forward solver prepared them once
        self._run = abi.dde_adjoint_vjp_call(self._tiers, self.t0, self.t, forward._hkind, forward._hb, forward._hc,
                                             self.nsub)

    def __call__(self, params, history_params, g):
        f = self.forward
        params = abi.kernel_array(params)
        phi = f._phi if history_params is None else abi.kernel_array(history_params)  # as DDESolver passes it
        _, _, status = f(params, phi)
        if status != Status.SUCCESS:
            return self.grad, status
        return self.grad, self._run(params, phi, abi.kernel_array(g), f.buf, int(f.info[Info.N_STORED]), self.grad)

    @property
    def tier(self):
        """Which kernel runs the backward sweep: ``"model"``, ``"shared"`` or ``"pending"`` (before the
        first call); the forward solver has its own (``forward.tier``)."""
        return self._tiers.tier


@dataclass(frozen=True, eq=False)
class AdjointGradient:
    """Loss and gradient from :func:`dde_loss_gradient` or :func:`dde_vjp`.

    Attributes
    ----------
    loss : float
        The functional: the integral loss, or ``sum_r g_r . x(t_r)`` for :func:`dde_vjp`.
    grad : ndarray, shape (n_params + n_history_params,)
        ``dL/dtheta``: model parameters (delays included), then history parameters.
    names : tuple of str
    """

    loss: float
    grad: np.ndarray
    names: tuple[str, ...]


def _target(target, model, t0, t_end):
    if isinstance(target, History):
        h = target
    elif callable(target):
        h = History.from_function(target, t0, t_end, n_points=2001)
    else:
        try:
            t, y = target
        except (TypeError, ValueError):
            raise InputError("target: expected a function fn(t) -> (n_states,), a pair (t, y) of samples "
                             "(an interpolating cubic spline is used, as in DDE-Find) or a History") from None
        h = History.from_data(t, y)
    if h.kind != "piecewise" or h.n_states != model.n_states:
        raise InputError(f"target: expected one target value per state ({model.n_states})")
    start, end = h.window()
    if start > t0 + 1e-12 * max(1.0, abs(t0)) or end < t_end - 1e-12 * max(1.0, abs(t_end)):
        raise InputError(f"target: covers [{start:g}, {end:g}] but the loss integrates over [{t0:g}, {t_end:g}]")
    return h


def dde_loss_gradient(model, params, history, target, t_end, *, t0=0.0, history_params=None, weights=None,
                      paper=False, solver=None, gradient=None) -> AdjointGradient:
    """Integral loss against a target trajectory and its adjoint gradient.

    Parameters
    ----------
    model : Model or CompiledModel
        A model with delays.
    params : array-like (n_params,) or mapping
    history : History or number(s)
        As in :class:`odeinfer.Problem`.
    target : callable, (t, y) pair or History
        ``target(s) -> (n_states,)`` of absolute time (sampled at 2001 points and
        splined), or samples ``(t (n,), y (n, n_states))`` interpolated by a cubic
        spline (DDE-Find's target), covering ``[t0, t_end]``.
    t_end : float
        Upper limit ``T`` of the loss integral.
    t0 : float, default 0.0
    history_params : array-like, optional
    weights : array-like (n_states,), optional
        ``w_i`` (default 1).
    paper : bool, default False
        Use the paper's delay gradient (eq. 5, without the history-derivative
        term): wrong for a time-varying history; for comparison only.
    solver : MethodOfSteps, optional
        The forward solve; default ``MethodOfSteps(Dopri5(rtol=1e-10, atol=1e-12))``
        (``DEFAULT_SOLVERS["dde_adjoint"]``).
    gradient : Adjoint, optional
        ``Adjoint(nsub=...)``: backward RK4 steps per smallest delay (error O(nsub**-4));
        default 64.

    Returns
    -------
    AdjointGradient
    """
    from odeinfer.solve.problem import Problem

    t0, t_end = float(t0), float(t_end)
    if not (t_end > t0):
        raise InputError(f"t_end: must be > t0 = {t0!r}, got {t_end!r}")
    problem = Problem(model, [t_end], history=history, t0=t0)
    gradient = as_gradient(gradient) or Adjoint()
    if not isinstance(gradient, Adjoint):
        raise InputError(f"gradient: expected oi.Adjoint(nsub=...), got {gradient!r}")
    nsub = LOSS_NSUB if gradient.nsub is None else gradient.nsub
    solver = _forward(problem, solver)
    cm = solver.compiled
    m = cm.model
    p = _inputs.named_values("params", params, cm.params, "parameter")
    _check_delays(cm, p)
    hist = _with_history_params(problem.history, history_params, isinstance(history, History))
    tgt = _target(target, m, t0, t_end)
    w = np.ones(m.n_states) if weights is None else np.array(weights, dtype=float).reshape(-1)
    if w.shape != (m.n_states,) or not np.all(np.isfinite(w)):
        raise InputError(f"weights: expected {m.n_states} finite numbers, got {weights!r}")
    _, _, status = solver(p, np.array(hist.values))
    if status != Status.SUCCESS:
        raise SolverError(f"dde_loss_gradient: the forward solve failed: {status_message(status)}", status=status)
    nbuf = int(solver.info[Info.N_STORED])
    hkind, phi, hb, hc = hist.kernel_arrays(t0)
    tau_min = min(p[j] for j in m.delay_indices)
    nnode = int(np.ceil((t_end - t0) / (tau_min / nsub) - 1e-9)) + 1
    q = hist.n_params
    grad = np.empty(m.n_params + q + 1)
    anodes, adnodes = np.zeros((nnode, m.n_states)), np.zeros((nnode, m.n_states))
    work = np.empty(abi.dde_adjoint_work_size(m, q))
    # the target's breaks and coefficients as writable copies (abi: one kernel signature)
    run = abi.dde_adjoint_gradient_call(TieredKernel(cm, cm.module.dde_adjoint_gradient), t0, t_end, hkind, hb, hc,
                                        np.array(tgt.breaks), np.array(tgt.coef), w, bool(paper))
    status = run(p, phi, solver.buf, nbuf, nsub, grad, anodes, adnodes, work)
    if status != Status.SUCCESS:
        raise SolverError(f"dde_loss_gradient: the adjoint solve failed: {status_message(status)}", status=status)
    return AdjointGradient(float(grad[-1]), grad[:-1].copy(), tuple(m.params) + hist.param_names(m.states))


def _weights_g(g, n_times, states):
    """``g`` as a finite float64 array (n_times, n_states), or InputError."""
    n = len(states)
    try:
        arr = np.array(g, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"g: expected a float array of shape ({n_times}, {n}) (one row per output time, one "
                         f"column per state {list(states)}), got {type(g).__name__}") from None
    if arr.shape != (n_times, n):
        raise InputError(f"g: expected shape ({n_times}, {n}) (one row per output time, one column per state "
                         f"{list(states)}), got shape {arr.shape}; reshape it, e.g. g.reshape({n_times}, {n})")
    bad = ~np.isfinite(arr)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise InputError(f"g: must be finite, got {float(arr[r, c])!r} at g[{r}, {c}]; replace NaN/inf (e.g. by 0.0 "
                         "for times or states that do not enter the functional)")
    return np.ascontiguousarray(arr)


def dde_vjp(model, params, history, t, g, t0=None, *, history_params=None, solver=None,
            gradient=None) -> AdjointGradient:
    """Vector-Jacobian product ``sum_r g_r^T d x(t_r) / d theta`` of a DDE solution, by the adjoint.

    ``theta`` = the model parameters (delays included, ``params`` order), then the
    history parameters. This is the gradient of ``L = sum_r g_r . x(t_r)``: the adjoint
    ``a`` starts at 0 after the last output time with a nonzero ``g_r``, jumps by ``g_r`` at
    each ``t_r`` going backward, and the gradient integrals are those of
    :func:`dde_loss_gradient` (delay gradient with the history term; spec seed-002,
    section 1.4). Cost: one states-only forward solve and one backward RK4 sweep,
    whatever the number of parameters.

    Parameters
    ----------
    model : Model or CompiledModel
        A model with delays.
    params : array-like (n_params,) or mapping
        Model parameters; delays must be > 0.
    history : History or number(s)
        As in :class:`odeinfer.Problem`.
    t : array-like (n_times,)
        Output times, sorted, ``>= t0`` (repeats allowed).
    g : array-like (n_times, n_states)
        Finite weights ``g_r`` (e.g. the upstream gradient w.r.t. the states at ``t``).
    t0 : float, optional
        Start of the integration; default ``t[0]``.
    history_params : array-like, optional
        Values of the history family's parameters (default: those in ``history``).
    solver : MethodOfSteps, optional
        The forward solve; default ``MethodOfSteps(Dopri5(rtol=1e-10, atol=1e-12))``
        (``DEFAULT_SOLVERS["dde_adjoint"]``).
    gradient : Adjoint, optional
        ``Adjoint(nsub=...)``: backward RK4 steps per step of the forward solver (the adjoint
        grid is the forward solver's adaptive mesh refined ``nsub`` times, plus the output
        times, the breakpoints and their delay images); default 2. With the default
        tolerances the VJP matches the forward-sensitivity VJP to ~1e-7 relative on the DDE
        zoo; its error is O(nsub**-4) and follows ``rtol``.

    Returns
    -------
    AdjointGradient
        ``grad`` (n_params + n_history_params,), ``names`` (parameters, then history
        parameters such as ``"A[x]"``), ``loss`` = ``sum_r g_r . x(t_r)``.

    Raises
    ------
    InputError, DataError
        Bad arguments: ``g`` of the wrong shape or not finite, a delay <= 0, times
        before ``t0``, ...
    SolverError
        The forward or the adjoint solve failed.

    Examples
    --------
    >>> import numpy as np, odeinfer as oi
    >>> from odeinfer.solve.dde_adjoint import dde_vjp
    >>> e = oi.zoo.get("delay_exponential_decay")
    >>> g = np.zeros((e.t.size, 1)); g[-1] = 1.0       # d x(T) / d theta
    >>> v = dde_vjp(e.model, e.params_array(), e.history, e.t, g)
    >>> v.names
    ('theta0', 'theta1', 'tau', 'a[x]', 'b[x]')
    """
    from odeinfer.solve.problem import Problem

    problem = Problem(model, t, history=history, t0=t0)
    gradient = as_gradient(gradient) or Adjoint()
    if not isinstance(gradient, Adjoint):
        raise InputError(f"gradient: expected oi.Adjoint(nsub=...), got {gradient!r}")
    vjp = DDEVJP(_forward(problem, solver), gradient)
    cm = vjp.compiled
    m = cm.model
    p = _inputs.named_values("params", params, cm.params, "parameter")
    _check_delays(cm, p)
    tau_max = max(p[j] for j in m.delay_indices)
    hist = _with_history_params(problem.history, history_params, isinstance(history, History))
    _check_window(hist, problem.t0, tau_max)
    garr = _weights_g(g, problem.t.size, m.states)
    grad, status = vjp(p, np.array(hist.values), garr)
    if status != Status.SUCCESS:
        raise SolverError(f"dde_vjp: the forward or the adjoint solve failed: {status_message(status)}",
                          status=status)
    return AdjointGradient(float(np.sum(garr * vjp.y)), grad.copy(), tuple(m.params) + hist.param_names(m.states))
