"""The prebuilt delay solver :class:`DDESolver` (what :func:`odeinfer.bind` returns for a model
with delays) and the validation of histories and delays.

The work happens in the numba kernel ``dde_solve`` (``odeinfer/solve/kernels/dde.py``,
compiled into the generated module of each model with delays): method of steps
with Dormand-Prince 5(4), dense-output interpolation of the lagged states,
breakpoints at ``t0 + sum_k n_k tau_k`` and forward sensitivities w.r.t. the
model parameters (delays included) and the history parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
import numpy as np

from odeinfer.errors import DataError, InputError
from odeinfer.model.history import History
from odeinfer.solve import _inputs, abi
from odeinfer.solve.abi import DDE_INFO_SIZE, Info
from odeinfer.solve.shared import TieredKernel

__all__ = ["DDESolver", "as_history", "history_for"]



# validation ------------------------------------------------------------------------

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


def history_for(history, model, params, t, t0=None) -> History:
    """``history`` as a :class:`History`; a function of time is sampled over the window that the
    delays in ``params`` (array in the model's order) need before ``t0`` (default ``t[0]``)."""
    if isinstance(history, History) or not callable(history):
        return as_history(history, model)
    p = _inputs.named_values("params", params, model.params, "parameter")
    tau_max = max(p[j] for j in model.delay_indices)
    start = float(np.asarray(t, dtype=float).reshape(-1)[0]) if t0 is None else float(t0)
    return as_history(history, model, t0=start, tau_max=tau_max)


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

    Made by :func:`odeinfer.bind` for a delay model. ``y, sens, status = solver(params, history_params)``
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
        ``module.dde_solve`` (signature in :data:`odeinfer.solve.abi.SIGNATURES`).
    tier : str
        Which kernel answers (see the property).
    z, work, buf, info : ndarray
        Output buffer, scratch, dense-output store of the last solve (``buf``
        rows ``[:info[6]]``: step start, step size, 5 coefficient vectors), info.
    """

    __slots__ = ("compiled", "solver", "gradient", "t", "t0", "history", "history_params", "rtol", "atol", "max_steps", "first_step",
                 "sensitivities", "sens_error_control", "kernel", "z", "work", "buf", "info", "_hkind", "_phi", "_hb",
                 "_hc", "_k", "_y", "_sens", "_tiers", "_run")

    def __init__(self, compiled, t, t0, history, solver, gradient=None, buffer_steps=512):
        module = compiled.module
        n, m = compiled.n_states, compiled.n_params
        sensitivities = gradient is not None
        self.compiled, self.t, self.t0 = compiled, t, t0
        self.solver, self.gradient = solver, gradient
        self.history = history
        self.history_params = history.param_names(compiled.states)
        self.rtol, self.atol, self.max_steps = solver.rtol, solver.atol, solver.max_steps
        self.first_step = solver.first_step or 0.0
        self.sensitivities = sensitivities
        self.sens_error_control = gradient.error_control if sensitivities else True
        buffer_steps = min(buffer_steps, self.max_steps)
        # the history's values as a writable array, as estimators and the PyTensor Ops pass theirs: one
        # kernel signature (a read-only array is another type to numba: a second compilation)
        self._hkind, self._phi, self._hb, self._hc = history.kernel_arrays(t0)
        q = history.n_params
        self._k = k = m + q if sensitivities else 0
        self.kernel = module.dde_solve
        self._tiers = TieredKernel(compiled, self.kernel)  # the shared kernel while dde_solve compiles
        self.work = np.empty(abi.dde_work_size(compiled.model, k, q))
        self.info = np.zeros(DDE_INFO_SIZE)
        self.z = np.empty((t.size, n * (1 + k)))
        self.buf = np.empty((buffer_steps, abi.dde_buffer_cols(n, k)))
        self._y = self.z[:, :n]
        self._sens = self.z[:, n:].reshape(t.size, n, k) if sensitivities else None
        self._run = abi.dde_solve_call(self._tiers, t0, t, self._hkind, self._hb, self._hc, k, self.sens_error_control,
                                       self.rtol, self.atol, self.first_step, self.max_steps, self.z, self.work,
                                       self.info)

    def __call__(self, params, history_params=None):
        """Solve; returns ``(y, sens, status)``."""
        params = abi.kernel_array(params)
        phi = self._phi if history_params is None else abi.kernel_array(history_params)
        while True:
            status = self._run(params, phi, self.buf)
            if status == 0 or self.info[Info.BUF_FULL] == 0.0 or self.buf.shape[0] >= self.max_steps:
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
        nst = int(self.info[Info.N_STORED])
        size = (self.buf.shape[1] - 2) // 5
        rows = self.buf[:nst]
        return rows[:, 0].copy(), rows[:, 1].copy(), rows[:, 2:].reshape(nst, 5, size).copy()

    def __repr__(self):
        return (f"DDESolver(model={self.compiled.model.name!r}, history={self.history.kind!r}, "
                f"solver={self.solver!r}, gradient={self.gradient!r}, n_times={self.t.size})")
