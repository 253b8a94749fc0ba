"""Python boundary of the ODE solvers: :func:`solve_ode`, :class:`Solution` and
the fast repeated-call path :func:`make_solver`.

The numerical work happens in the numba kernels of :mod:`odeinfer.solve.kernels`
(compiled into each model's generated module); this module validates inputs,
allocates buffers and turns status codes into exceptions or statuses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from odeinfer.errors import InputError, SolverError, StiffnessError
from odeinfer.solve import _inputs
from odeinfer.solve import shared as _shared
from odeinfer.solve.status import Status, status_message

__all__ = ["Solution", "solve_ode", "make_solver", "Solver"]

_INFO_T_REACHED, _INFO_N_STEPS, _INFO_N_REJECTED, _INFO_N_RHS = 0, 1, 2, 3


@dataclass(frozen=True, eq=False)
class Solution:
    """The result of :func:`solve_ode`. Immutable; its arrays are read-only.

    Attributes
    ----------
    t : ndarray, shape (n_times,)
        Output times.
    y : ndarray, shape (n_times, n_states)
        States at ``t`` (NaN after a failure).
    sens : ndarray, shape (n_times, n_states, n_params + n_states), or None
        ``sens[i, :, j] = d y(t_i) / d theta_j``; columns are the parameters (in
        ``params`` order), then the initial states (``states`` order). None
        unless ``sensitivities=True``.
    status : int
        A :class:`~odeinfer.solve.Status` code; 0 is success.
    message : str
        What happened, and how to fix a failure.
    t_reached : float
        Time of the last accepted step (the last output time on success).
    n_steps, n_rejected, n_rhs : int
        Attempted steps, rejected steps, right-hand side evaluations.
    method : str
        ``"dopri5"`` or ``"rodas"``.
    states, params : tuple of str
        Names of the model's states and parameters.
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
    method: str
    states: tuple[str, ...]
    params: tuple[str, ...]

    def __post_init__(self):
        for arr in (self.t, self.y, self.sens):
            if arr is not None:
                arr.flags.writeable = False

    @property
    def success(self) -> bool:
        """True when the solver reached the last output time."""
        return self.status == Status.SUCCESS

    @property
    def sens_names(self) -> tuple[str, ...]:
        """Names of the sensitivity columns: the parameters, then ``"<state>(t0)"``."""
        return self.params + tuple(f"{s}(t0)" for s in self.states)

    def to_frame(self, sens: bool = False):
        """The solution as a pandas DataFrame indexed by ``t``.

        Parameters
        ----------
        sens : bool, default False
            Also add one column ``"d<state>/d<name>"`` per sensitivity (requires
            a solution computed with ``sensitivities=True``).
        """
        return solution_frame(self, sens)

    def __repr__(self):
        sens = "None" if self.sens is None else f"shape {self.sens.shape}"
        return (f"Solution(method={self.method!r}, status={Status(self.status).name}, "
                f"t=[{self.t[0]:g} .. {self.t[-1]:g}] ({self.t.size} times), states={list(self.states)}, "
                f"sens={sens}, n_steps={self.n_steps}, n_rejected={self.n_rejected}, t_reached={self.t_reached:g})")


def solution_frame(sol, sens=False):
    """``sol`` (a :class:`Solution` or DDE solution) as a DataFrame indexed by ``t``; ``sens=True``
    adds one column ``"d<state>/d<name>"`` per sensitivity."""
    import pandas as pd

    df = pd.DataFrame(np.array(sol.y), index=pd.Index(np.array(sol.t), name="t"), columns=list(sol.states))
    if sens:
        if sol.sens is None:
            raise InputError("to_frame(sens=True): this solution has no sensitivities; solve with sensitivities=True")
        for i, s in enumerate(sol.states):
            for j, name in enumerate(sol.sens_names):
                df[f"d{s}/d{name}"] = sol.sens[:, i, j]
    return df


def solve_ode(model, params, x0, t, *, t0=None, sensitivities=False, method="dopri5", rtol=1e-6,
              atol=1e-8, max_steps=100_000, first_step=None, sens_error_control=True,
              fixed_step=None, raise_on_failure=True, sens_exclude=()) -> Solution:
    """Solve ``y' = f(t, y, params)``, ``y(t0) = x0`` and return the states at ``t``.

    Parameters
    ----------
    model : Model or CompiledModel
        From ``@oi.model`` (compiled on first use, then cached on disk).
    params : array-like, shape (n_params,), or mapping name -> value
    x0 : array-like, shape (n_states,), or mapping name -> value
        Initial state at ``t0``.
    t : array-like, shape (n_times,)
        Output times, sorted (non-decreasing), all ``>= t0``.
    t0 : float, optional
        Initial time; default ``t[0]``.
    sensitivities : bool, default False
        Also return ``d y / d (params, x0)`` by forward sensitivity equations.
    method : {"dopri5", "rodas"}, default "dopri5"
        Explicit Dormand-Prince 5(4), or the stiff Rosenbrock solver Rodas4.
    rtol, atol : float, default 1e-6, 1e-8
        Local error tolerances: ``|err_i| <= atol + rtol * |y_i|`` in the RMS norm.
    max_steps : int, default 100000
        Steps (accepted or rejected) before the solver gives up.
    first_step : float, optional
        Initial step size; default: Hairer's heuristic.
    sens_error_control : bool, default True
        Control the error of the sensitivities as well as of the states.
    fixed_step : float, optional
        Integrate with this constant step (``method="dopri5"`` only; the last
        step is shortened to end at ``t[-1]``): no error control, no stiffness
        test, ``rtol``, ``atol``, ``max_steps`` and ``first_step`` are unused.
        For convergence studies; leave None for real work.
    raise_on_failure : bool, default True
        If False, a failed solve returns a :class:`Solution` with ``status`` set
        and NaN after the failure instead of raising.
    sens_exclude : sequence of str, default ()
        Parameters whose sensitivity columns are not needed (e.g. held fixed by an
        estimator): those columns of ``sens`` are NaN (the layout is unchanged).
        This is what allows sensitivities for a model with switching parameters
        (``model.switching_params``, e.g. a change time ``T_r`` in
        ``heaviside(t - T_r)``): their columns would miss the jump term, but the
        other columns are exact when the jump happens at a time that does not
        depend on the states. Sensitivities are still refused while a switching
        parameter is not excluded, or when a jump depends on the states.

    Returns
    -------
    Solution

    Raises
    ------
    InputError, DataError
        Invalid arguments (checked before any integration).
    StiffnessError
        ``method="dopri5"`` detected stiffness or used up ``max_steps``.
    SolverError
        Any other failure (finite-time blow-up, non-finite values, singular matrix).

    Examples
    --------
    >>> import odeinfer as oi
    >>> @oi.model(states=["x"], params=["k"])
    ... def decay(t, y, p):
    ...     return {"x": -p.k * y.x}
    >>> sol = oi.solve.solve_ode(decay, {"k": 0.5}, [2.0], [0.0, 1.0, 2.0])
    >>> sol.y[:, 0].round(6)
    array([2.      , 1.213061, 0.735759])
    """
    solver = make_solver(model, t, t0=t0, sensitivities=sensitivities, method=method, rtol=rtol,
                         atol=atol, max_steps=max_steps, first_step=first_step,
                         sens_error_control=sens_error_control, sens_exclude=sens_exclude)
    cm = solver.compiled
    p = _inputs.named_values("params", params, cm.params, "parameter")
    y0 = _inputs.named_values("x0", x0, cm.states, "state")
    if fixed_step is None:
        y, sens, status = solver(p, y0)
    else:
        h = _inputs.first_step_value(fixed_step, "fixed_step")
        if method != "dopri5":
            raise InputError(f"fixed_step: only method='dopri5' has a fixed-step mode, got method={method!r}")
        y, sens, status = solver._fixed_step(p, y0, h)
    info = solver.info
    t_reached = float(info[_INFO_T_REACHED])
    message = status_message(status, t_reached=t_reached, max_steps=solver.max_steps)
    if status != Status.SUCCESS and method == "rodas" and not _finite_time_derivative(cm, t_reached, y, y0, p):
        message += (" The right-hand side's time derivative df/dt, which the Rosenbrock method uses, is not "
                    f"finite at t={t_reached!r} (e.g. sqrt(t) at t = 0); use method='dopri5', or start after "
                    "that point")
    if status != Status.SUCCESS and raise_on_failure:
        _raise(status, message, t_reached, method)
    return Solution(
        t=solver.t.copy(), y=y.copy(), sens=None if sens is None else sens.copy(), status=int(status),
        message=message, t_reached=t_reached, n_steps=int(info[_INFO_N_STEPS]),
        n_rejected=int(info[_INFO_N_REJECTED]), n_rhs=int(info[_INFO_N_RHS]), method=method,
        states=tuple(cm.states), params=tuple(cm.params),
    )


def _finite_time_derivative(cm, t_reached, y, y0, p):
    """Whether df/dt is finite at ``t_reached``, at the last finite output state (or ``y0``)."""
    rows = np.flatnonzero(np.all(np.isfinite(y), axis=1))
    state = y0 if rows.size == 0 else np.ascontiguousarray(y[rows[-1]])
    ft = np.empty(cm.n_states)
    cm.module.model_f_t(float(t_reached), state, p, ft)
    return bool(np.all(np.isfinite(ft)))


def _raise(status, message, t_reached, method):
    name = Status(status).name
    text = f"solve_ode(method={method!r}) failed with status {name} at t_reached={t_reached!r}: {message}"
    if method == "dopri5" and status in (Status.STIFF, Status.MAX_STEPS):
        raise StiffnessError(text, status=int(status), t_reached=t_reached)
    raise SolverError(text, status=int(status), t_reached=t_reached)


class Solver:
    """A solver bound to a model, output times and options, with preallocated buffers.

    Made by :func:`make_solver`. Calling it runs a numba kernel (see :attr:`tier`):
    ``y, sens, status = solver(params, x0)``.

    ``params`` and ``x0`` must be float64 1-D C-contiguous arrays of length
    ``n_params`` and ``n_states`` (this fast path does not convert or validate
    them; wrong sizes give ``status == Status.BAD_INPUT``). ``y`` (n_times,
    n_states) and ``sens`` (n_times, n_states, n_params + n_states; None without
    sensitivities) are views of one buffer that the **next call overwrites**:
    copy them to keep them. ``status`` is an int (0 = success; after a failure
    the rows past ``info[0]`` = t_reached are NaN).

    Attributes
    ----------
    compiled : CompiledModel
    t : ndarray (n_times,), read-only
    t0, rtol, atol, first_step : float
        ``first_step`` 0.0 means Hairer's heuristic.
    max_steps : int
    method : str
    sensitivities, sens_error_control : bool
    sens_exclude : tuple of str
        Parameters whose ``sens`` columns are set to NaN after each call (see
        :func:`solve_ode`); calling ``kernel`` directly leaves them as integrated.
    kernel : numba dispatcher
        The kernel this solver calls, for use from numba code:
        ``module.dopri5_solve``, ``dopri5_solve_sens``, ``rodas_solve`` or
        ``rodas_solve_sens`` (signatures in ``odeinfer/solve/kernels/dopri.py``
        and ``rodas.py``; the ``_sens`` kernels take ``sens_error_control``
        after ``params``).
    z : ndarray (n_times, n_states * (1 + n_params + n_states)) or (n_times, n_states)
        The output buffer (``y`` and ``sens`` are views of it).
    work : ndarray
        The kernel's scratch buffer.
    info : ndarray (6,)
        Filled by each call: t_reached, n_steps, n_rejected, n_rhs, h_next, n_lu.
    tier : str
        Which kernel answers (see the property).
    """

    __slots__ = ("compiled", "t", "t0", "rtol", "atol", "max_steps", "first_step", "method",
                 "sensitivities", "sens_error_control", "sens_exclude", "kernel", "z", "work", "info", "_y",
                 "_sens", "_run", "_nan_cols", "_tiers")

    def __init__(self, compiled, t, t0, sensitivities, method, rtol, atol, max_steps, first_step,
                 sens_error_control, sens_exclude=()):
        module = compiled.module
        n, m = compiled.n_states, compiled.n_params
        k = n + m if sensitivities else 0
        self.compiled = compiled
        self.t, self.t0 = t, t0
        self.rtol, self.atol = rtol, atol
        self.max_steps, self.first_step = max_steps, first_step
        self.method = method
        self.sensitivities, self.sens_error_control = sensitivities, sens_error_control
        self._nan_cols = np.array(sens_exclude if sensitivities else (), dtype=np.int64)
        self.sens_exclude = tuple(compiled.params[i] for i in self._nan_cols)
        prefix = "dopri5" if method == "dopri5" else "rodas"
        self.kernel = getattr(module, f"{prefix}_solve_sens" if sensitivities else f"{prefix}_solve")
        self.work = np.empty(getattr(module, f"{prefix}_work_size")(sensitivities))
        self.info = np.zeros(module.INFO_SIZE)
        self.z = np.empty((t.size, n * (1 + k)))
        self._y = self.z[:, :n]
        self._sens = self.z[:, n:].reshape(t.size, n, k) if sensitivities else None
        # adaptive Dormand-Prince: the model kernel or, while it compiles, the shared one
        self._tiers = _shared.TieredKernel(compiled, self.kernel) if method == "dopri5" else None
        self._run = self._bind()

    @property
    def tier(self):
        """Which kernel answers: ``"model"`` (:attr:`kernel`), ``"shared"`` (the model-independent
        ``ptr_dopri5_*`` kernel while :attr:`kernel` compiles in a background process; same
        results, see :mod:`odeinfer.solve.shared`) or ``"pending"`` (an adaptive ``dopri5``
        solver before its first call, which decides)."""
        return "model" if self._tiers is None else self._tiers.tier

    def _bind(self):
        # a closure over locals: the cheapest call path from Python to the kernel
        kernel = self.kernel if self._tiers is None else self._tiers
        t0, t, rtol, atol = self.t0, self.t, self.rtol, self.atol
        h0, max_steps, z, work, info = self.first_step, self.max_steps, self.z, self.work, self.info
        if self.sensitivities:
            sens_err = self.sens_error_control

            def run(params, x0):
                return kernel(t0, t, x0, params, sens_err, rtol, atol, h0, max_steps, z, work, info)

            if self._nan_cols.size:
                sens, cols, nan = self._sens, self._nan_cols, np.nan

                def run(params, x0, _run=run):  # noqa: F811
                    status = _run(params, x0)
                    sens[:, :, cols] = nan
                    return status
        else:
            def run(params, x0):
                return kernel(t0, t, x0, params, rtol, atol, h0, max_steps, z, work, info)
        return run

    def __call__(self, params, x0):
        """Solve for ``params`` (n_params,) and ``x0`` (n_states,); returns ``(y, sens, status)``."""
        return self._y, self._sens, self._run(params, x0)

    def __reduce__(self):
        # rebuilt from its options in the receiving process (fresh buffers, the cached kernels);
        # pickling the buffers would detach the y/sens views from z and return stale values
        return (_rebuild_solver, (self.compiled.model, np.array(self.t), self.t0, self.sensitivities, self.method,
                                  self.rtol, self.atol, self.max_steps, self.first_step or None,
                                  self.sens_error_control, self.sens_exclude))

    def _fixed_step(self, params, x0, h):
        """Like ``__call__`` with the constant step ``h`` (dopri5 tableau, no error control)."""
        status = self.compiled.module.dopri5_fixed(self.t0, self.t, x0, params, self.sensitivities, h,
                                                   self.z, self.work, self.info)
        if self._nan_cols.size:
            self._sens[:, :, self._nan_cols] = np.nan
        return self._y, self._sens, status

    def __repr__(self):
        return (f"Solver(model={self.compiled.model.name!r}, method={self.method!r}, "
                f"sensitivities={self.sensitivities}, n_times={self.t.size}, rtol={self.rtol:g}, "
                f"atol={self.atol:g})")


def _rebuild_solver(model, t, t0, sensitivities, method, rtol, atol, max_steps, first_step, sens_error_control,
                    sens_exclude):
    return make_solver(model, t, t0=t0, sensitivities=sensitivities, method=method, rtol=rtol, atol=atol,
                       max_steps=max_steps, first_step=first_step, sens_error_control=sens_error_control,
                       sens_exclude=sens_exclude)


def make_solver(model, t, *, t0=None, sensitivities=False, method="dopri5", rtol=1e-6, atol=1e-8,
                max_steps=100_000, first_step=None, sens_error_control=True, sens_exclude=()) -> Solver:
    """A :class:`Solver` for repeated solves with new ``params`` / ``x0`` (estimators, benchmarks).

    All arguments are validated here, once; they mean the same as in
    :func:`solve_ode` (``sens_exclude``: parameters whose sensitivity columns
    are not needed, set to NaN; it allows sensitivities for a model whose
    switching parameters are held fixed). The returned callable reuses its
    output buffers: see :class:`Solver`.

    Examples
    --------
    >>> import numpy as np, odeinfer as oi
    >>> @oi.model(states=["x"], params=["k"])
    ... def decay(t, y, p):
    ...     return {"x": -p.k * y.x}
    >>> solver = oi.solve.make_solver(decay, np.linspace(0, 1, 3), sensitivities=True)
    >>> y, sens, status = solver(np.array([0.5]), np.array([2.0]))
    >>> status, y[-1, 0].round(6), sens[-1, 0].round(6)  # d x / d k, d x / d x0
    (0, 1.213061, array([-1.213061,  0.606531]))
    """
    cm = _inputs.compiled_model(model)
    t_arr, t0 = _inputs.output_times(t, t0)
    method = _inputs.method_name(method)
    sensitivities = _inputs.check_sensitivities(cm, sensitivities, sens_exclude)
    excluded = _inputs.sens_exclude_indices(cm, sens_exclude)
    rtol, atol = _inputs.tolerances(rtol, atol)
    max_steps = _inputs.positive_int("max_steps", max_steps)
    first_step = _inputs.first_step_value(first_step)
    if not isinstance(sens_error_control, (bool, np.bool_)):
        raise InputError(f"sens_error_control: expected True or False, got {sens_error_control!r}")
    return Solver(cm, t_arr, t0, sensitivities, method, rtol, atol, max_steps, first_step,
                  bool(sens_error_control), excluded)
