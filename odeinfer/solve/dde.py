"""Python boundary of the DDE solver: :func:`solve_dde`, :class:`DDESolution` and
the fast repeated-call path :func:`make_dde_solver`.

The work happens in the numba kernel ``dde_solve`` (``odeinfer/solve/kernels/dde.py``,
compiled into the generated module of each model with delays): method of steps
with Dormand-Prince 5(4), dense-output interpolation of the lagged states,
breakpoints at ``t0 + sum_k n_k tau_k`` and forward sensitivities w.r.t. the
model parameters (delays included) and the history parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from odeinfer.errors import DataError, InputError, SolverError
from odeinfer.model.history import History
from odeinfer.solve import _inputs
from odeinfer.solve.shared import TieredKernel
from odeinfer.solve.status import Status, status_message

__all__ = ["DDESolution", "DDESolver", "solve_dde", "make_dde_solver", "as_history"]

_INFO_T_REACHED, _INFO_N_STEPS, _INFO_N_REJECTED, _INFO_N_RHS = 0, 1, 2, 3
_INFO_N_STORED, _INFO_BUF_FULL, _INFO_SIZE = 6, 7, 8


@dataclass(frozen=True, eq=False)
class DDESolution:
    """The result of :func:`solve_dde`. Immutable; its arrays are read-only.

    Attributes
    ----------
    t : ndarray, shape (n_times,)
    y : ndarray, shape (n_times, n_states)
        States at ``t`` (NaN after a failure).
    sens : ndarray, shape (n_times, n_states, n_params + n_history_params), or None
        ``sens[i, :, j] = d y(t_i) / d theta_j`` with ``theta`` = the model
        parameters (delays included, ``params`` order), then the history
        parameters (``history_params`` order). None unless ``sensitivities=True``.
    status : int
        A :class:`~odeinfer.solve.Status` code; 0 is success.
    message : str
    t_reached : float
    n_steps, n_rejected, n_rhs : int
    t0 : float
        End of the history window; the history covers ``[t0 - max(tau), t0]``.
    history : History
        The history used (with the parameter values used).
    states, params, history_params : tuple of str
        Names; ``history_params`` are ``"<group>[<state>]"`` (e.g. ``"A[x]"``).
    method : str
        ``"dde-dopri5"``.
    """

    t: np.ndarray
    y: np.ndarray
    sens: np.ndarray | None
    status: int
    message: str
    t_reached: float
    n_steps: int
    n_rejected: int
    n_rhs: int
    t0: float
    history: History
    states: tuple[str, ...]
    params: tuple[str, ...]
    history_params: tuple[str, ...]
    method: str = "dde-dopri5"

    def __post_init__(self):
        for arr in (self.t, self.y, self.sens):
            if arr is not None:
                arr.flags.writeable = False

    @property
    def success(self) -> bool:
        return self.status == Status.SUCCESS

    @property
    def sens_names(self) -> tuple[str, ...]:
        """Names of the sensitivity columns: the parameters, then the history parameters."""
        return self.params + self.history_params

    def to_frame(self, sens: bool = False):
        """The solution as a pandas DataFrame indexed by ``t`` (``sens=True`` adds ``d<state>/d<name>``)."""
        from odeinfer.solve.api import solution_frame

        return solution_frame(self, sens)

    def __repr__(self):
        sens = "None" if self.sens is None else f"shape {self.sens.shape}"
        return (f"DDESolution(status={Status(self.status).name}, t=[{self.t[0]:g} .. {self.t[-1]:g}] "
                f"({self.t.size} times), states={list(self.states)}, history={self.history!r}, sens={sens}, "
                f"n_steps={self.n_steps}, t_reached={self.t_reached:g})")


# validation ------------------------------------------------------------------------

def _compiled_dde(model):
    from odeinfer.model import CompiledModel, Model

    m = model.model if isinstance(model, CompiledModel) else model
    if not isinstance(m, Model):
        raise InputError(f"model: expected an odeinfer Model with delays (from @oi.model(..., delays=[...])), "
                         f"got {type(model).__name__}")
    if not m.delays:
        raise InputError(f"model: {m.name!r} has no delays; solve it with odeinfer.solve.solve_ode, or declare "
                         "its delays with @oi.model(..., delays=['tau']) and use lag(y.x, 'tau')")
    return model if isinstance(model, CompiledModel) else m.compile()


def as_history(history, model, *, t0=None, tau_max=None) -> History:
    """A :class:`History` from what users pass as ``history``.

    Accepts a :class:`History`; a number, a sequence (one value per state) or a
    mapping ``{state: value}`` (a constant history); or a callable ``fn(s)`` of
    absolute time (sampled over ``[t0 - tau_max, t0]``; needs both).
    """
    n = model.n_states
    if isinstance(history, History):
        h = history
    elif callable(history):
        if t0 is None or tau_max is None:
            raise InputError("history: a function needs the delays to know its window; pass "
                             "History.from_function(fn, start, end) instead")
        h = History.from_function(history, t0 - tau_max, t0)
    elif isinstance(history, Mapping):
        h = History.constant(_inputs.named_values("history", history, model.states, "state"))
    else:
        try:
            values = np.atleast_1d(np.array(history, dtype=np.float64))
        except (TypeError, ValueError):
            raise InputError(
                f"history: expected a History (History.constant/affine/periodic/from_data), numbers (one per "
                f"state), a mapping state -> number or a function of time, got {type(history).__name__}") from None
        h = History.constant(values)
    if h.n_states != n:
        raise InputError(f"history: has {h.n_states} state(s) but model {model.name!r} has {n} "
                         f"{list(model.states)}; give one value per state, in this order")
    return h


def _with_history_params(history, history_params, given_as_history):
    if history_params is None:
        return history
    if not given_as_history or history.kind == "piecewise":
        what = ("a data-driven history (no parameters)" if history.kind == "piecewise"
                else "plain values, not a parametric family")
        raise InputError(
            f"history_params: given, but the history is {what}; history parameters need a history family: "
            "pass history=History.constant(...), History.affine(...) or History.periodic(...)")
    try:
        values = np.array(history_params, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise InputError(f"history_params: expected {history.n_params} numbers, got {history_params!r}") from None
    if not np.all(np.isfinite(values)):
        raise InputError("history_params: values must be finite")
    return history.with_values(values)


def _check_delays(cm, p):
    for name, j in zip(cm.model.delays, cm.model.delay_indices):
        if not (p[j] > 0.0):
            raise InputError(f"params: the delay {name!r} must be > 0, got {p[j]!r}; delays are positive "
                             "(fit them with a positive lower bound or on the log scale)")


def _check_window(history, t0, tau_max):
    window = history.window()
    if window is None:
        return
    start, end = window
    tol = 1e-9 * max(1.0, abs(t0), tau_max)
    if start > t0 - tau_max + tol or end < t0 - tol:
        raise DataError(
            f"history: the data-driven history covers [{start:g}, {end:g}], but with max(tau) = {tau_max:g} the "
            f"solve needs [{t0 - tau_max:g}, {t0:g}]; start the solve later (t0 >= {start + tau_max:g}) or give "
            "history data over the whole window")


def _times(t, t0):
    if t0 is not None:
        arr = np.asarray(t, dtype=np.float64) if np.ndim(t) == 1 else None
        if arr is not None and arr.size and np.all(np.isfinite(arr)) and float(np.min(arr)) < float(t0):
            raise DataError(
                f"t: the output time {float(np.min(arr))!r} is before t0={float(t0)!r}; times before t0 lie in the "
                "history window [t0 - max(tau), t0], which the history describes, not the solver. "
                "Give output times >= t0, or choose t0 <= the first time")
    return _inputs.output_times(t, t0)


# solver ----------------------------------------------------------------------------------

class DDESolver:
    """A DDE solver bound to a model, output times, a history family and options.

    Made by :func:`make_dde_solver`. ``y, sens, status = solver(params, history_params)``
    runs the numba kernel with preallocated buffers. ``params`` (n_params,)
    and ``history_params`` (n_history_params,) must be float64 1-D
    C-contiguous arrays (not converted or validated here: wrong sizes or a
    delay <= 0 give ``status == Status.BAD_INPUT``). ``y`` (n_times, n_states)
    and ``sens`` (n_times, n_states, n_params + n_history_params) are views that
    the next call overwrites.

    Attributes
    ----------
    compiled : CompiledModel
    t : ndarray (n_times,), read-only
    t0 : float
    history : History
        The family (its values are the defaults of ``history_params``).
    history_params : tuple of str
    kernel : numba dispatcher
        ``module.dde_solve`` (signature in ``odeinfer/solve/kernels/dde.py``).
    tier : str
        Which kernel answers (see the property).
    z, work, buf, info : ndarray
        Output buffer, scratch, dense-output store of the last solve (``buf``
        rows ``[:info[6]]``: step start, step size, 5 coefficient vectors), info.
    """

    __slots__ = ("compiled", "t", "t0", "history", "history_params", "rtol", "atol", "max_steps", "first_step",
                 "sensitivities", "sens_error_control", "kernel", "z", "work", "buf", "info", "_hkind", "_hb",
                 "_hc", "_k", "_y", "_sens", "_tiers")

    def __init__(self, compiled, t, t0, history, sensitivities, rtol, atol, max_steps, first_step,
                 sens_error_control, buffer_steps):
        module = compiled.module
        n, m = compiled.n_states, compiled.n_params
        self.compiled, self.t, self.t0 = compiled, t, t0
        self.history = history
        self.history_params = history.param_names(compiled.states)
        self.rtol, self.atol, self.max_steps, self.first_step = rtol, atol, max_steps, first_step
        self.sensitivities, self.sens_error_control = sensitivities, sens_error_control
        self._hkind, _, self._hb, self._hc = history.kernel_arrays(t0)
        q = history.n_params
        self._k = k = m + q if sensitivities else 0
        self.kernel = module.dde_solve
        self._tiers = TieredKernel(compiled, self.kernel)  # the shared kernel while dde_solve compiles
        self.work = np.empty(module.dde_work_size(k, q))
        self.info = np.zeros(_INFO_SIZE)
        self.z = np.empty((t.size, n * (1 + k)))
        self.buf = np.empty((buffer_steps, 2 + 5 * n * (1 + k)))
        self._y = self.z[:, :n]
        self._sens = self.z[:, n:].reshape(t.size, n, k) if sensitivities else None

    def __call__(self, params, history_params=None):
        """Solve; returns ``(y, sens, status)``."""
        phi = self.history.values if history_params is None else history_params
        while True:
            status = self._tiers(self.t0, self.t, params, self._hkind, phi, self._hb, self._hc, self._k,
                                 self.sens_error_control, self.rtol, self.atol, self.first_step,
                                 self.max_steps, self.z, self.work, self.buf, self.info)
            if status == 0 or self.info[_INFO_BUF_FULL] == 0.0 or self.buf.shape[0] >= self.max_steps:
                return self._y, self._sens, status
            self.buf = np.empty((min(4 * self.buf.shape[0], self.max_steps), self.buf.shape[1]))

    @property
    def tier(self):
        """Which kernel answers: ``"model"`` (:attr:`kernel`), ``"shared"`` (the shared
        ``ptr_dde_solve`` while :attr:`kernel` compiles in a background process; same results,
        see :mod:`odeinfer.solve.shared`) or ``"pending"`` (before the first call)."""
        return self._tiers.tier

    def dense_steps(self):
        """The accepted steps of the last solve: ``(t_start (n_steps,), h (n_steps,), coef (n_steps, 5, size))``."""
        nst = int(self.info[_INFO_N_STORED])
        size = (self.buf.shape[1] - 2) // 5
        rows = self.buf[:nst]
        return rows[:, 0].copy(), rows[:, 1].copy(), rows[:, 2:].reshape(nst, 5, size).copy()

    def __repr__(self):
        return (f"DDESolver(model={self.compiled.model.name!r}, history={self.history.kind!r}, "
                f"sensitivities={self.sensitivities}, n_times={self.t.size}, rtol={self.rtol:g}, atol={self.atol:g})")


def make_dde_solver(model, t, history, *, t0=None, sensitivities=False, rtol=1e-6, atol=1e-8,
                    max_steps=100_000, first_step=None, sens_error_control=True, buffer_steps=512) -> DDESolver:
    """A :class:`DDESolver` for repeated solves with new parameters and history parameters.

    Parameters
    ----------
    model : Model or CompiledModel
        A model with delays.
    t : array-like, shape (n_times,)
        Output times, sorted, ``>= t0``.
    history : History or number(s)
        The history family (its values are the default ``history_params``); a
        number or sequence means ``History.constant``.
    t0, sensitivities, rtol, atol, max_steps, first_step, sens_error_control
        As in :func:`solve_dde`.
    buffer_steps : int, default 512
        Initial capacity of the dense-output store (grown automatically).

    Examples
    --------
    >>> import numpy as np, odeinfer as oi
    >>> from odeinfer import math as om
    >>> @oi.model(states=["x"], params=["a", "tau"], delays=["tau"])
    ... def decay(t, y, p):
    ...     return {"x": -p.a * om.lag(y.x, "tau")}
    >>> solver = oi.solve.make_dde_solver(decay, np.linspace(0, 2, 5), 1.0, sensitivities=True)
    >>> y, sens, status = solver(np.array([1.0, 1.0]), np.array([1.0]))
    >>> status, round(float(y[2, 0]), 6)   # x(1) = 1 - t on [0, 1]
    (0, 0.0)
    """
    cm = _compiled_dde(model)
    t_arr, t0 = _times(t, t0)
    hist = as_history(history, cm.model)
    sensitivities = _inputs.check_sensitivities(cm, sensitivities)
    rtol, atol = _inputs.tolerances(rtol, atol)
    max_steps = _inputs.positive_int("max_steps", max_steps)
    buffer_steps = _inputs.positive_int("buffer_steps", buffer_steps)
    first_step = _inputs.first_step_value(first_step)
    if not isinstance(sens_error_control, (bool, np.bool_)):
        raise InputError(f"sens_error_control: expected True or False, got {sens_error_control!r}")
    return DDESolver(cm, t_arr, t0, hist, sensitivities, rtol, atol, max_steps, first_step,
                     bool(sens_error_control), min(buffer_steps, max_steps))


def solve_dde(model, params, history, t, *, t0=None, history_params=None, sensitivities=False, rtol=1e-6,
              atol=1e-8, max_steps=100_000, first_step=None, sens_error_control=True,
              raise_on_failure=True) -> DDESolution:
    """Solve ``y'(t) = f(t, y(t), y(t - tau_1), ..., params)`` for ``t >= t0`` with ``y = history`` before.

    Parameters
    ----------
    model : Model or CompiledModel
        A model with delays (``@oi.model(..., delays=["tau"])``).
    params : array-like (n_params,) or mapping name -> value
        Model parameters; the delays among them must be > 0.
    history : History, number(s), mapping or callable
        The states on ``[t0 - max(tau), t0]``: a :class:`~odeinfer.model.History`
        (constant, affine, periodic with estimable parameters, or data-driven),
        plain numbers / ``{state: value}`` (a constant history), or a function
        ``fn(s)`` of absolute time (sampled and splined). ``y(t0)`` is the
        history's value at ``t0``.
    t : array-like, shape (n_times,)
        Output times, sorted, all ``>= t0``.
    t0 : float, optional
        Start of the integration = end of the history window; default ``t[0]``.
    history_params : array-like, optional
        Values of the history family's parameters (default: those stored in
        ``history``); only with a parametric :class:`History`.
    sensitivities : bool, default False
        Also return ``d y / d (params, history_params)`` (forward sensitivities,
        including the history-derivative term of the delay sensitivity).
    rtol, atol : float, default 1e-6, 1e-8
    max_steps : int, default 100000
    first_step : float, optional
    sens_error_control : bool, default True
    raise_on_failure : bool, default True

    Returns
    -------
    DDESolution

    Raises
    ------
    InputError, DataError
        Invalid arguments: model without delays, delay <= 0, history of the
        wrong size, ``history_params`` without a history family, output times
        before ``t0``, a data-driven history that does not cover the window.
    SolverError
        The integration failed (and ``raise_on_failure``).

    Examples
    --------
    >>> import odeinfer as oi
    >>> from odeinfer import math as om
    >>> @oi.model(states=["x"], params=["a", "tau"], delays=["tau"])
    ... def decay(t, y, p):
    ...     return {"x": -p.a * om.lag(y.x, "tau")}
    >>> sol = oi.solve.solve_dde(decay, {"a": 1.0, "tau": 1.0}, 1.0, [0.0, 1.0, 2.0])
    >>> sol.y[:, 0].round(6)     # 1 - t, then 1 - t + (t - 1)**2 / 2
    array([ 1. ,  0. , -0.5])
    """
    cm = _compiled_dde(model)
    p = _inputs.named_values("params", params, cm.params, "parameter")
    _check_delays(cm, p)
    tau_max = max(p[j] for j in cm.model.delay_indices)
    t_arr, t0_f = _times(t, t0)
    hist = as_history(history, cm.model, t0=t0_f, tau_max=tau_max)
    hist = _with_history_params(hist, history_params, isinstance(history, History))
    _check_window(hist, t0_f, tau_max)
    solver = make_dde_solver(cm, t_arr, hist, t0=t0_f, sensitivities=sensitivities, rtol=rtol, atol=atol,
                             max_steps=max_steps, first_step=first_step, sens_error_control=sens_error_control)
    y, sens, status = solver(p, np.array(hist.values))
    info = solver.info
    t_reached = float(info[_INFO_T_REACHED])
    message = status_message(status, t_reached=t_reached, max_steps=solver.max_steps)
    if status != Status.SUCCESS and raise_on_failure:
        raise SolverError(f"solve_dde failed with status {Status(status).name} at t_reached={t_reached!r}: "
                          f"{message}", status=int(status), t_reached=t_reached)
    return DDESolution(
        t=np.array(t_arr), y=y.copy(), sens=None if sens is None else sens.copy(), status=int(status),
        message=message, t_reached=t_reached, n_steps=int(info[_INFO_N_STEPS]),
        n_rejected=int(info[_INFO_N_REJECTED]), n_rhs=int(info[_INFO_N_RHS]), t0=t0_f, history=hist,
        states=tuple(cm.states), params=tuple(cm.params), history_params=solver.history_params,
    )
