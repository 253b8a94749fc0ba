"""The prebuilt ODE solvers :class:`Solver` and :class:`AutoSolver` (what :func:`odeinfer.bind`
returns for a model without delays) and the failure messages of ODE solves.

The numerical work happens in the numba kernels of :mod:`odeinfer.solve.kernels`
(compiled into each model's generated module); this module allocates buffers and calls them
through the adapters of :mod:`odeinfer.solve.abi`.
Options are validated by the solver and gradient values (:mod:`odeinfer.solve.config`) and by
:func:`odeinfer.bind`.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from odeinfer.errors import SolverError, StiffnessError
from odeinfer.solve import abi
from odeinfer.solve import shared as _shared
from odeinfer.solve.abi import INFO_SIZE, Info, Status, status_message
from odeinfer.solve.config import Dopri5

__all__ = ["Solver", "AutoSolver", "auto_scope"]


class _Scope(threading.local):
    token = None  # the innermost auto_scope() of this thread (None: none)


_SCOPE = _Scope()


@contextlib.contextmanager
def auto_scope():
    """A scope of :class:`AutoSolver`'s switch: inside it, every AutoSolver starts on Dormand-Prince
    (at its first call in the scope) and, once a solve finds the problem stiff, stays on Rodas until
    the scope ends.

    Each local fit runs in its own scope (a start of a multistart, a profile re-optimisation, the
    final phase of a fit; see :mod:`odeinfer.estimators._likelihood_fit`,
    :mod:`odeinfer.estimators._phases` and :class:`~odeinfer.inference.profile.ProfileLikelihood`), so
    a fit's path depends on its start only, not on which fits ran before it with the same bound
    solvers, nor on how the starts were spread over processes. Scopes nest (the outer one is restored
    on exit) and are per thread. Outside any scope a switch lasts for good, except that a switch made
    inside a scope ends with it.
    """
    outer = _SCOPE.token
    _SCOPE.token = object()
    try:
        yield
    finally:
        _SCOPE.token = outer


def _finite_time_derivative(cm, t_reached, y, y0, p):
    """Whether df/dt is finite at ``t_reached``, at the last finite output state (or ``y0``)."""
    rows = np.flatnonzero(np.all(np.isfinite(y), axis=1))
    state = y0 if rows.size == 0 else np.ascontiguousarray(y[rows[-1]])
    ft = np.empty(cm.n_states)
    cm.module.model_f_t(float(t_reached), state, p, ft)
    return bool(np.all(np.isfinite(ft)))


def _raise(status, message, t_reached, method):
    name = Status(status).name
    text = f"solve (method {method!r}) failed with status {name} at t_reached={t_reached!r}: {message}"
    if method == "dopri5" and status in (Status.STIFF, Status.MAX_STEPS):
        raise StiffnessError(text, status=int(status), t_reached=t_reached)
    raise SolverError(text, status=int(status), t_reached=t_reached)


class Solver:
    """A solver bound to a model, output times and options, with preallocated buffers.

    Made by :func:`odeinfer.bind`. Calling it runs a numba kernel (see :attr:`tier`):
    ``y, sens, status = solver(params, x0)``, or with ``gradient=oi.Forward(directions=k)``
    ``y, sens, status = solver(params, x0, pdir, s0)``.

    ``params`` and ``x0`` must be float64 1-D C-contiguous arrays of length
    ``n_params`` and ``n_states`` (this fast path does not convert or validate
    them; wrong sizes give ``status == Status.BAD_INPUT``). ``y`` (n_times,
    n_states) and ``sens`` (n_times, n_states, n_params + n_states; None without
    sensitivities) are views of one buffer that the **next call overwrites**:
    copy them to keep them. ``status`` is an int (0 = success; after a failure
    the rows past ``info[0]`` = t_reached are NaN). With directions, ``pdir``
    (n_params, k) and ``s0`` (n_states, k) are float64 C-contiguous arrays (the
    same fast path: wrong shapes give ``Status.BAD_INPUT``) and ``sens`` (n_times,
    n_states, k) is ``d y / d(params, x0) @ [pdir; s0]``.

    Attributes
    ----------
    compiled : CompiledModel
    solver : Dopri5 or Rodas
    gradient : Forward or None
    t : ndarray (n_times,), read-only
    t0, rtol, atol, first_step, fixed_step : float
        ``first_step`` 0.0 means Hairer's heuristic; ``fixed_step`` 0.0 means adaptive.
    max_steps : int
    method : str
    sensitivities, sens_error_control : bool
    directions : int or None
        The number ``k`` of directional sensitivities (``Forward(directions=k)``), else None.
    sens_exclude : tuple of str
        Parameters whose ``sens`` columns are set to NaN after each call (see
        :class:`~odeinfer.Forward`; none with directions); calling ``kernel`` directly leaves
        them as integrated.
    kernel : numba dispatcher
        The kernel this solver calls, for use from numba code:
        ``module.dopri5_solve``, ``dopri5_solve_sens``, ``dopri5_solve_dir``, ``rodas_solve``,
        ``rodas_solve_sens`` or ``rodas_solve_dir`` (signatures in
        :data:`odeinfer.solve.abi.SIGNATURES`, called through the adapters of :mod:`odeinfer.solve.abi`).
    z : ndarray (n_times, n_states * (1 + k)) or (n_times, n_states)
        The output buffer (``y`` and ``sens`` are views of it).
    work : ndarray
        The kernel's scratch buffer.
    info : ndarray (6,)
        Filled by each call: t_reached, n_steps, n_rejected, n_rhs, h_next, n_lu.
    steps : ndarray (1,) int64
        The step limit of the next call: ``max_steps`` unless :meth:`limit_steps` lowered it.
    tier : str
        Which kernel answers (see the property).
    """

    __slots__ = ("compiled", "solver", "gradient", "t", "t0", "rtol", "atol", "max_steps", "first_step", "method",
                 "sensitivities", "sens_error_control", "directions", "sens_exclude", "fixed_step", "kernel", "z",
                 "work", "info", "steps", "_y", "_sens", "_run", "_nan_cols", "_tiers")

    def __init__(self, compiled, t, t0, solver, gradient=None, sens_exclude=(), *, tiers=None):
        module = compiled.module
        n, m = compiled.n_states, compiled.n_params
        sensitivities = gradient is not None
        directions = gradient.directions if sensitivities else None
        k = (directions or n + m) if sensitivities else 0
        method = solver.method
        self.compiled, self.solver, self.gradient = compiled, solver, gradient
        self.t, self.t0 = t, t0
        self.rtol, self.atol = solver.rtol, solver.atol
        self.max_steps, self.first_step = solver.max_steps, solver.first_step or 0.0
        self.steps = np.array([self.max_steps], dtype=np.int64)
        self.method = method
        self.fixed_step = (solver.fixed_step or 0.0) if isinstance(solver, Dopri5) else 0.0
        self.sensitivities = sensitivities
        self.sens_error_control = gradient.error_control if sensitivities else True
        self.directions = directions
        self._nan_cols = np.array(sens_exclude if sensitivities and not directions else (), dtype=np.int64)
        self.sens_exclude = tuple(compiled.params[i] for i in self._nan_cols)
        self.kernel = getattr(module, "dopri5_fixed" if self.fixed_step else
                              abi.solve_kernel_name(method, sensitivities, bool(directions)))
        self.work = np.empty(abi.ode_work_size(method, n, m, k))
        self.info = np.zeros(INFO_SIZE)
        self.z = np.empty((t.size, n * (1 + k)))
        self._y = self.z[:, :n]
        self._sens = self.z[:, n:].reshape(t.size, n, k) if sensitivities else None
        # the model kernel or, while it compiles, the shared one
        self._tiers = _shared.TieredKernel(compiled, self.kernel) if tiers is None else tiers
        self._run = self._bind()

    def retimed(self, t, t0):
        """A solver like this one (same model, options, gradient and kernel tier) for the output times ``t``
        (float64, increasing, read-only like a :class:`~odeinfer.Problem`'s) from ``t0``, with its own buffers;
        nothing is validated again."""
        new = Solver(self.compiled, t, t0, self.solver, self.gradient, tuple(self._nan_cols), tiers=self._tiers)
        new.steps[0] = self.steps[0]
        return new

    def limit_steps(self, n=None):
        """Stop each later solve after ``min(n, max_steps)`` steps (status ``MAX_STEPS``); ``None``: after
        ``max_steps`` again. Copies made by :meth:`retimed` start with the limit in force."""
        self.steps[0] = self.max_steps if n is None else min(int(n), self.max_steps)

    def states_alone(self):
        """A solver like this one (same model, times, method and options) without sensitivities."""
        return Solver(self.compiled, self.t, self.t0, self.solver)

    @property
    def tier(self):
        """Which kernel answers: ``"model"`` (:attr:`kernel`), ``"shared"`` (the model-independent
        ``ptr_dopri5_*`` / ``ptr_rodas_*`` kernel while :attr:`kernel` compiles in a background
        process; same results, see :mod:`odeinfer.solve.shared`) or ``"pending"`` (before the first
        call, which decides)."""
        return self._tiers.tier

    def _bind(self):
        # a closure over the bound values: the cheapest call path from Python to the kernel
        if self.fixed_step:
            run = abi.fixed_step_call(self._tiers, self.t0, self.t, self.sensitivities,
                                      self.fixed_step, self.z, self.work, self.info)
        else:
            run = abi.ode_solve_call(self._tiers, self.sensitivities, bool(self.directions), self.t0, self.t,
                                     self.rtol, self.atol, self.first_step, self.steps, self.sens_error_control,
                                     self.z, self.work, self.info)
        if self._nan_cols.size:
            sens, cols, nan = self._sens, self._nan_cols, np.nan

            def run(params, x0, _run=run):  # noqa: F811
                status = _run(params, x0)
                sens[:, :, cols] = nan
                return status
        return run

    def __call__(self, params, x0, *directions):
        """Solve for ``params`` (n_params,) and ``x0`` (n_states,) (and, with directions, ``pdir``
        (n_params, k) and ``s0`` (n_states, k)); returns ``(y, sens, status)``."""
        return self._y, self._sens, self._run(abi.kernel_array(params), abi.kernel_array(x0),
                                                *map(abi.kernel_array, directions))

    def __reduce__(self):
        # rebuilt from its values in the receiving process (fresh buffers, the cached kernels);
        # pickling the buffers would detach the y/sens views from z and return stale values
        return (rebuild, (Solver, self.compiled.model, np.array(self.t), self.t0, self.solver, self.gradient,
                          tuple(int(i) for i in self._nan_cols)))

    def __repr__(self):
        return (f"Solver(model={self.compiled.model.name!r}, solver={self.solver!r}, gradient={self.gradient!r}, "
                f"n_times={self.t.size})")


class AutoSolver:
    """A :class:`Solver` for :class:`~odeinfer.Auto`: Dormand-Prince until a solve finds the
    problem stiff, then Rosenbrock (Rodas) for good, or until the :func:`auto_scope` of the switch
    ends.

    Made by :func:`odeinfer.bind`; called like :class:`Solver`: ``y, sens, status =
    solver(params, x0)`` or, with ``Forward(directions=k)``, ``solver(params, x0, pdir, s0)``
    (views of the active solver's buffers, overwritten by the next call).
    When the Dopri5 solve ends with ``Status.STIFF``, or with ``Status.MAX_STEPS`` (at ``max_steps``, not at a
    limit lowered by :meth:`limit_steps`) while its last step was stability-limited (:meth:`stability_limited`),
    the same call is redone with Rodas
    and :attr:`stiff` becomes True: every later call goes straight to Rodas (the flag survives
    pickling). Until then the results are Dopri5's, bit for bit, and the call costs two attribute
    tests more than :class:`Solver`'s.

    A switch made inside an :func:`auto_scope` lasts until that scope ends: the first call outside
    it (or in another scope) goes back to Dopri5 first (:meth:`reset`). Each local fit of the
    estimators runs in its own scope, so a fit's path does not depend on the fits run before it
    with the same bound solver.

    Attributes
    ----------
    solver : Auto
    explicit : Solver
        The Dopri5 solver.
    implicit : Solver or None
        The Rodas solver, built at the switch.
    stiff : bool
        Whether this bound solver has switched to Rodas (in the current :func:`auto_scope`, or
        outside any, once it is called).
    switch_reason : str or None
        The Dopri5 failure that caused the switch, e.g. ``"dopri5: the problem became stiff at
        t=20.55 (Hairer's test in dopri5 fired 15 times)"``.
    method_used, method : str
        ``"dopri5"`` or ``"rodas"``: the method of the last (and the next) call.
    info, steps, kernel, tier, z, work
        The active solver's (see :class:`Solver`).
    compiled, gradient, t, t0, rtol, atol, max_steps, first_step, fixed_step, sensitivities,
    sens_error_control, directions, sens_exclude
        As :class:`Solver` (the same for both methods).
    """

    __slots__ = ("compiled", "solver", "gradient", "t", "t0", "rtol", "atol", "max_steps", "first_step", "fixed_step",
                 "sensitivities", "sens_error_control", "directions", "sens_exclude", "explicit", "implicit", "stiff",
                 "switch_reason", "_exclude", "_active", "_run", "_y", "_sens", "_scope")

    def __init__(self, compiled, t, t0, solver, gradient=None, sens_exclude=()):
        ex = Solver(compiled, t, t0, solver.explicit(), gradient, sens_exclude)
        self.compiled, self.solver, self.gradient, self.t, self.t0 = compiled, solver, gradient, t, t0
        self.rtol, self.atol, self.max_steps, self.first_step, self.fixed_step = (
            ex.rtol, ex.atol, ex.max_steps, ex.first_step, 0.0)
        self.sensitivities, self.sens_error_control, self.directions, self.sens_exclude = (
            ex.sensitivities, ex.sens_error_control, ex.directions, ex.sens_exclude)
        self.explicit, self.implicit, self.stiff, self.switch_reason = ex, None, False, None
        self._scope = None  # the auto_scope() token of the switch
        self._exclude = tuple(int(i) for i in sens_exclude)
        self._use(ex)

    def _use(self, solver):
        self._active, self._run, self._y, self._sens = solver, solver._run, solver._y, solver._sens

    def retimed(self, t, t0):
        """As :meth:`Solver.retimed`; the new solver is on the method this one uses now (in its scope)."""
        new = object.__new__(AutoSolver)
        for name in AutoSolver.__slots__:
            setattr(new, name, getattr(self, name))
        new.t, new.t0 = t, t0
        new.explicit = self.explicit.retimed(t, t0)
        new.implicit = None if self.implicit is None else self.implicit.retimed(t, t0)
        new._use(new.implicit if self.stiff else new.explicit)
        return new

    def states_alone(self):
        """An :class:`AutoSolver` like this one without sensitivities, on Rodas from its first call if this one has
        switched (in the current scope)."""
        twin = AutoSolver(self.compiled, self.t, self.t0, self.solver)
        self.share_stiffness(twin)
        return twin

    def share_stiffness(self, other):
        """Switch ``other`` (an :class:`AutoSolver` of the same model) to Rodas if this one has switched in the
        current scope and ``other`` has not."""
        if self.stiff_in_scope and not other.stiff_in_scope:
            other.go_stiff(self.switch_reason)

    def __call__(self, params, x0, *directions):
        """Solve for ``params`` (n_params,) and ``x0`` (n_states,) (and, with directions, ``pdir``
        and ``s0``, as :class:`Solver`); returns ``(y, sens, status)``."""
        if self.stiff and self._scope is not _SCOPE.token:  # switched in another scope: start again
            self.reset()
        status = self._run(params, x0, *directions)
        if status and not self.stiff and self._switches(status, params, x0):
            status = self._run(params, x0, *directions)
        return self._y, self._sens, status

    def _switches(self, status, params, x0):
        """After a failed Dopri5 solve: whether it was stiffness; if so, switch to Rodas."""
        info = self.explicit.info
        at_max = status == Status.MAX_STEPS and self.explicit.steps[0] == self.max_steps  # not a lowered limit
        if not (status == Status.STIFF or at_max and self.stability_limited(params, x0)):
            return False
        what = status_message(status, t_reached=float(info[Info.T_REACHED]), max_steps=self.max_steps).split(";")[0]
        self.go_stiff(f"dopri5: {what}" + (", the step limited by stability" if status == Status.MAX_STEPS else ""))
        return True

    def stability_limited(self, params, x0) -> bool:
        """Whether the last Dopri5 step was limited by stability, not accuracy: ``h * rho(J) >= 2``
        with ``h`` its last step size and ``rho(J)`` the spectral radius of df/dy at the last
        finite output state (``x0`` if none; Dormand-Prince is stable up to ``h * rho ~ 3.3``)."""
        ex = self.explicit
        h = float(ex.info[Info.H_NEXT])
        rows = np.flatnonzero(np.all(np.isfinite(ex._y), axis=1))
        t, y = (self.t0, np.asarray(x0, float)) if rows.size == 0 else (float(self.t[rows[-1]]), ex._y[rows[-1]])
        J = self.compiled.jac_y(t, np.ascontiguousarray(y), np.asarray(params, float))
        if not np.all(np.isfinite(J)):
            return False
        return bool(h * float(np.max(np.abs(np.linalg.eigvals(J)))) >= 2.0)

    def go_stiff(self, reason="requested"):
        """Switch to Rodas for this and every later call in the current :func:`auto_scope` (outside
        any: for good) (``reason``: kept in :attr:`switch_reason`)."""
        if self.implicit is None:
            self.implicit = Solver(self.compiled, self.t, self.t0, self.solver.stiff(), self.gradient, self._exclude)
            self.implicit.steps[0] = self.explicit.steps[0]
        self.stiff, self.switch_reason, self._scope = True, reason, _SCOPE.token
        self._use(self.implicit)

    @property
    def stiff_in_scope(self) -> bool:
        """Whether the next call goes to Rodas: switched in the current :func:`auto_scope` (or, outside
        any, switched outside any)."""
        return self.stiff and self._scope is _SCOPE.token

    def reset(self):
        """Back to Dormand-Prince, as bound: the next call starts with Dopri5 (the Rodas solver, if
        built, is kept for a later switch)."""
        self.stiff, self.switch_reason, self._scope = False, None, None
        self._use(self.explicit)

    @property
    def method_used(self) -> str:
        return self._active.method

    method = method_used

    @property
    def info(self):
        return self._active.info

    @property
    def steps(self):
        return self._active.steps

    def limit_steps(self, n=None):
        """As :meth:`Solver.limit_steps`, for both methods."""
        self.explicit.limit_steps(n)
        if self.implicit is not None:
            self.implicit.limit_steps(n)

    @property
    def kernel(self):
        return self._active.kernel

    @property
    def tier(self):
        return self._active.tier

    @property
    def z(self):
        return self._active.z

    @property
    def work(self):
        return self._active.work

    def __reduce__(self):
        return (rebuild, (AutoSolver, self.compiled.model, np.array(self.t), self.t0, self.solver, self.gradient,
                          self._exclude), (self.stiff and self._scope is _SCOPE.token, self.switch_reason))

    def __setstate__(self, state):
        stiff, reason = state
        if stiff:
            self.go_stiff(reason)

    def __repr__(self):
        return (f"AutoSolver(model={self.compiled.model.name!r}, solver={self.solver!r}, gradient={self.gradient!r}, "
                f"n_times={self.t.size}, method_used={self.method_used!r})")


def rebuild(cls, model, t, t0, *options):
    """A prebuilt solver ``cls(compiled, t, t0, *options)`` in a new process (unpickling): the
    model's kernels come from the disk cache, the buffers are new."""
    t = np.array(t, dtype=np.float64)
    t.flags.writeable = False  # as Problem leaves it: the same kernel signature, cached machine code
    return cls(model.compile(), t, t0, *options)
