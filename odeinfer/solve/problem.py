"""One problem type for ODE and delay models, one verb to solve it, one prebuilt fast path.

>>> import numpy as np, odeinfer as oi
>>> @oi.model(states=["x"], params=["k"])
... def decay(t, y, p):
...     return {"x": -p.k * y.x}
>>> prob = oi.Problem(decay, [0.0, 1.0, 2.0], x0=[2.0])
>>> oi.solve(prob, {"k": 0.5}).y[:, 0].round(6)
array([2.      , 1.213061, 0.735759])
>>> sol = oi.solve(prob, {"k": 0.5}, solver=oi.Rodas(rtol=1e-8), gradient=oi.Forward())
>>> sol.sens_names
('k', 'x(t0)')

:func:`solve` validates everything and returns an immutable :class:`~odeinfer.Solution`;
:func:`bind` returns the prebuilt callable that estimators, the PyMC Op and the widgets call in
their loops (no validation, reused buffers). Repeated :func:`solve` calls on one problem reuse
the bound solver, so the convenience costs little.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from odeinfer.errors import InputError, SolverError
from odeinfer.solve import _inputs
from odeinfer.solve.config import Adjoint, Auto, Dopri5, Rodas, as_gradient, as_solver
from odeinfer.solve.solution import Solution
from odeinfer.solve.abi import Info, Status, status_message

__all__ = ["Problem", "solve", "bind"]

_SUCCESS = status_message(Status.SUCCESS)
# plain ints: faster to use than the IntEnum members (whose attribute look-up alone takes ~0.15 us)
_SUCCESS_CODE = int(Status.SUCCESS)
_T_REACHED, _N_STEPS, _N_REJECTED, _N_RHS = (int(i) for i in (Info.T_REACHED, Info.N_STEPS, Info.N_REJECTED,
                                                             Info.N_RHS))


def model_of(model):
    from odeinfer.model import CompiledModel, Model

    if isinstance(model, CompiledModel):
        return model.model
    if isinstance(model, Model):
        return model
    raise InputError(f"model: expected an odeinfer Model (from @oi.model or Model.from_equations) or its "
                     f"CompiledModel, got {type(model).__name__}")


@dataclass(frozen=True, eq=False)
class Problem:
    """A model, its output times and its initial condition: an ODE (``x0``) or a delay model
    (``history``) alike.

    Parameters
    ----------
    model : Model or CompiledModel
    t : array-like, shape (n_times,)
        Output times, sorted (non-decreasing), all ``>= t0``.
    x0 : array-like (n_states,) or mapping name -> value, optional
        Initial state at ``t0`` (ODE models); may instead be given to each :func:`solve` call.
    history : History, number(s) or mapping, optional
        The states before ``t0`` (delay models only; required for them): a History, or constant
        values (see :func:`odeinfer.solve.dde.as_history`). For a function of time, pass
        ``History.from_function(fn, t0 - max_tau, t0)``.
    t0 : float, optional
        Initial time (for a delay model, the end of the history window); default ``t[0]``.

    Raises
    ------
    InputError, DataError
        Bad times, an ``x0`` of the wrong size, a history for a model without delays, a delay
        model without a history or with an ``x0``.
    """

    model: object
    t: np.ndarray
    x0: np.ndarray | None = None
    history: object = None
    t0: float | None = None
    _delays: bool = field(default=False, init=False, repr=False, compare=False)
    _bound: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _lock: object = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    # (solver, gradient, role, bound solver) of the last bind: the same objects again skip hashing them
    _last: list = field(default_factory=lambda: [None], init=False, repr=False, compare=False)

    def __post_init__(self):
        m = model_of(self.model)
        object.__setattr__(self, "_delays", bool(m.delays))
        if m.delays:
            from odeinfer.solve.dde import _times  # says that times before t0 belong to the history

            t_arr, t0 = _times(self.t, self.t0)
        else:
            t_arr, t0 = _inputs.output_times(self.t, self.t0)
        object.__setattr__(self, "t", t_arr)
        object.__setattr__(self, "t0", t0)
        if m.delays:
            if self.x0 is not None:
                raise InputError(f"x0: {m.name!r} has delays {list(m.delays)}, so its initial condition is a "
                                 "history, not x0; pass history=... (y(t0) is the history's value at t0)")
            if self.history is None:
                raise InputError(f"history: {m.name!r} has delays {list(m.delays)}; pass history=... (a History, "
                                 "constant numbers, a mapping state -> value or a function of time)")
            from odeinfer.solve.dde import as_history

            object.__setattr__(self, "history", as_history(self.history, m))
        else:
            if self.history is not None:
                raise InputError(f"history: {m.name!r} has no delays; pass x0=... for its initial state instead")
            if self.x0 is not None:
                object.__setattr__(self, "x0", _inputs.named_values("x0", self.x0, m.states, "state"))
                self.x0.flags.writeable = False

    def __reduce__(self):
        # rebuilt from its values: the cache of bound solvers and its lock stay in this process
        return (Problem, (model_of(self.model), np.array(self.t), self.x0, self.history, self.t0))

    @property
    def delays(self) -> bool:
        """Whether the model has delays (then the problem is a delay problem)."""
        return self._delays

    @property
    def states(self) -> tuple[str, ...]:
        return tuple(model_of(self.model).states)

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(model_of(self.model).params)

    def __repr__(self):
        m = model_of(self.model)
        init = f"history={self.history!r}" if m.delays else f"x0={None if self.x0 is None else self.x0.tolist()}"
        return (f"Problem(model={m.name!r}, t=[{self.t[0]:g} .. {self.t[-1]:g}] ({self.t.size} times), "
                f"t0={self.t0:g}, {init})")


def _check_problem(problem):
    if not isinstance(problem, Problem):
        raise InputError(f"problem: expected an oi.Problem(model, t, x0=... or history=...), "
                         f"got {type(problem).__name__}")


def bind(problem: Problem, *, solver=None, gradient=None, role: str = "solve"):
    """The prebuilt solver of ``problem``: buffers allocated, options validated, the kernel chosen.

    Parameters
    ----------
    problem : Problem
    solver : Dopri5, Rodas, Auto or MethodOfSteps, optional
        Default: the ``role``'s (see :data:`odeinfer.solve.config.DEFAULT_SOLVERS`);
        :class:`~odeinfer.MethodOfSteps` for a delay model.
    gradient : None, Forward or Adjoint
        None: states only; :class:`~odeinfer.Forward`: forward sensitivities
        (``Forward(directions=k)``: ``k`` directional sensitivities, ODE models with an adaptive
        solver); :class:`~odeinfer.Adjoint`: vector-Jacobian products (``Dopri5`` or ``MethodOfSteps``).
    role : str, default "solve"
        Which default solver to use when ``solver`` is None.

    Returns
    -------
    Solver, AutoSolver, DDESolver, VJP or DDEVJP
        ``y, sens, status = bound(params, x0)`` (ODE), ``bound(params, x0, pdir, s0)`` (ODE with
        ``Forward(directions=k)``: ``pdir`` (n_params, k), ``s0`` (n_states, k), ``sens``
        (n_times, n_states, k)), ``bound(params, history_params)`` (delay model), or
        ``grad, status = bound(params, x0 or history_params, g)`` (adjoint,
        ``g`` (n_times, n_states) the weights of the states at ``t``): float64 C-contiguous
        arrays in, views of buffers that the **next call overwrites** out; nothing is validated
        on this path.
    """
    _check_problem(problem)
    return _bind(problem, solver, gradient, role)


def _bind(problem, solver, gradient, role):
    """:func:`bind` of a checked ``problem``."""
    last = problem._last[0]
    if last is not None and last[0] is solver and last[1] is gradient and last[2] is role:
        return last[3]  # the values are frozen: the same objects, the same bound solver
    given = (solver, gradient, role)
    try:
        bound = problem._bound.get(given)  # the arguments as given: the one-shot solve's fast path
    except TypeError:  # unhashable: refused below
        bound, given = None, None
    if bound is None:
        solver = as_solver(solver, delays=problem.delays, role=role)
        gradient = as_gradient(gradient, directions=True)
        key = (solver, gradient)
        bound = problem._bound.get(key)
        if bound is None:
            bound = problem._bound[key] = _build(problem, solver, gradient)
        if given is not None:
            problem._bound[given] = bound
    if given is not None:
        problem._last[0] = (*given, bound)
    return bound


def _build(problem, solver, gradient):
    cm = _inputs.compiled_model(problem.model)
    if isinstance(gradient, Adjoint):
        if problem.delays:
            from odeinfer.solve.dde_adjoint import DDEVJP

            return DDEVJP(bind(problem, solver=solver), gradient)
        if not isinstance(solver, (Dopri5, Rodas)) or getattr(solver, "fixed_step", None):
            raise InputError(f"gradient: oi.Adjoint() needs an adaptive solver of one method, oi.Dopri5(...) or "
                             f"(stiff models) oi.Rodas(...): the adjoint runs backward on that method's steps; got "
                             f"{solver!r}; pass solver=oi.Dopri5(...) or solver=oi.Rodas(...), or "
                             "gradient=oi.Forward()")
        _inputs.check_sensitivities(cm, True)
        from odeinfer.solve.adjoint import VJP

        return VJP(cm, problem.t, problem.t0, solver, gradient)
    exclude = gradient.exclude if gradient is not None else ()
    _inputs.check_sensitivities(cm, gradient is not None, exclude)
    if gradient is not None and gradient.directions is not None:
        _check_directions(problem, solver, gradient)
    if problem.delays:
        if exclude:
            raise InputError("gradient: Forward(exclude=...) is not available for delay models; pass "
                             "gradient=oi.Forward()")
        from odeinfer.solve.dde import DDESolver

        return DDESolver(cm, problem.t, problem.t0, problem.history, solver, gradient)
    from odeinfer.solve.api import AutoSolver, Solver

    cls = AutoSolver if isinstance(solver, Auto) else Solver
    return cls(cm, problem.t, problem.t0, solver, gradient, _inputs.sens_exclude_indices(cm, exclude))


def _check_directions(problem, solver, gradient):
    """Refuse ``Forward(directions=k)`` where no kernel integrates directions."""
    k = gradient.directions
    if problem.delays:
        raise InputError(f"gradient: Forward(directions={k}) is available for ODE models, but "
                         f"{model_of(problem.model).name!r} has delays; pass gradient=oi.Forward() and "
                         "multiply its sens by [pdir; dhistory/dtheta]")
    if isinstance(solver, Dopri5) and solver.fixed_step:
        raise InputError(f"gradient: Forward(directions={k}) needs an adaptive solver, got {solver!r}; "
                         f"pass solver={solver.replace(fixed_step=None)!r}, or gradient=oi.Forward() with the "
                         "fixed step")


def solve(problem: Problem, params, *, x0=None, history_params=None, solver=None, gradient=None,
          raise_on_failure: bool = True) -> Solution:
    """Solve ``problem`` at ``params``: the states at ``problem.t`` (and their derivatives).

    Parameters
    ----------
    problem : Problem
    params : array-like (n_params,) or mapping name -> value
    x0 : array-like (n_states,) or mapping, optional
        Initial state (ODE); default ``problem.x0``.
    history_params : array-like, optional
        Values of a parametric history's parameters (delay model); default the history's own.
    solver : Dopri5, Rodas, Auto or MethodOfSteps, optional
        Default ``oi.Dopri5()`` (``oi.MethodOfSteps(oi.Dopri5())`` for a delay model).
    gradient : None or Forward
        ``oi.Forward()`` adds ``sens`` = d y / d(params, x0) (ODE) or d y / d(params,
        history_params) (delay model). For adjoint products use :func:`bind` with
        ``gradient=oi.Adjoint()``.
    raise_on_failure : bool, default True
        If False, a failed solve returns a :class:`Solution` with ``status`` set and NaN after
        the failure instead of raising.

    Returns
    -------
    Solution

    Raises
    ------
    InputError, DataError
        Invalid arguments (checked before any integration).
    StiffnessError
        ``Dopri5`` detected stiffness or used up ``max_steps``: use ``oi.Rodas()``.
    SolverError
        Any other failure (finite-time blow-up, non-finite values, singular matrix).
    """
    _check_problem(problem)
    if gradient is not None:
        if isinstance(gradient, Adjoint):
            raise InputError("gradient: solve() returns states and forward sensitivities; for adjoint "
                             "vector-Jacobian products use oi.bind(problem, gradient=oi.Adjoint())(params, x0, g)")
        if getattr(gradient, "directions", None) is not None:
            raise InputError(f"gradient: solve() returns all sensitivity columns, got {gradient!r}; pass "
                             "gradient=oi.Forward(), or call oi.bind(problem, gradient=oi.Forward(directions=k))"
                             "(params, x0, pdir, s0) for directional sensitivities")
    if raise_on_failure is not True and raise_on_failure is not False and not isinstance(raise_on_failure, np.bool_):
        raise InputError(f"raise_on_failure: expected True or False, got {raise_on_failure!r}")
    bound = _bind(problem, solver, gradient, "solve")
    cm = bound.compiled
    p = _inputs.named_values("params", params, cm.params, "parameter")
    if problem.delays:
        return _solve_delay(problem, bound, cm, p, x0, history_params, raise_on_failure)
    if history_params is not None:
        raise InputError(f"history_params: {cm.model.name!r} has no delays; pass x0=... instead")
    if x0 is None:
        if problem.x0 is None:
            raise InputError("x0: the problem has no initial state; pass x0=... here or to oi.Problem(...)")
        y0 = problem.x0.copy()  # writable: the kernels' compiled signature
    else:
        y0 = _inputs.named_values("x0", x0, cm.states, "state")
    with problem._lock:
        y, sens, status = bound(p, y0)
        y = y.copy()
        if sens is not None:
            sens = sens.copy()
        info = bound.info.tolist()  # Python floats: cheaper to read than the array's entries
    t_reached = info[_T_REACHED]
    if status == _SUCCESS_CODE:
        message = _SUCCESS
    else:
        from odeinfer.solve.api import _finite_time_derivative, _raise

        message = status_message(status, t_reached=t_reached, max_steps=bound.max_steps)

        if bound.method == "rodas" and not _finite_time_derivative(cm, t_reached, y, y0, p):
            message += (" The right-hand side's time derivative df/dt, which the Rosenbrock method uses, is not "
                        f"finite at t={t_reached!r} (e.g. sqrt(t) at t = 0); use solver=oi.Dopri5(), or start "
                        "after that point")
        if raise_on_failure:
            _raise(status, message, t_reached, bound.method)
    # Solution's fields in order: t, y, sens, status, message, t_reached, n_steps, n_rejected, n_rhs, method,
    # states, params, t0
    return Solution._of(problem.t, y, sens, int(status), message, t_reached, int(info[_N_STEPS]),
                        int(info[_N_REJECTED]), int(info[_N_RHS]), bound.method, tuple(cm.states), tuple(cm.params),
                        problem.t0)


def _solve_delay(problem, bound, cm, p, x0, history_params, raise_on_failure):
    from odeinfer.model.history import History
    from odeinfer.solve.dde import _check_delays, _check_window, _with_history_params

    if x0 is not None:
        raise InputError(f"x0: {cm.model.name!r} has delays; its initial condition is the problem's history "
                         "(pass history_params=... to change a parametric history's values)")
    _check_delays(cm, p)
    tau_max = max(p[j] for j in cm.model.delay_indices)
    hist = _with_history_params(problem.history, history_params, isinstance(problem.history, History))
    _check_window(hist, problem.t0, tau_max)
    with problem._lock:
        y, sens, status = bound(p, np.array(hist.values))
        y, sens = y.copy(), None if sens is None else sens.copy()
        info = bound.info.copy()
    t_reached = float(info[Info.T_REACHED])
    message = status_message(status, t_reached=t_reached, max_steps=bound.max_steps)
    if status != Status.SUCCESS and raise_on_failure:
        raise SolverError(f"solve (MethodOfSteps) failed with status {Status(status).name} at "
                          f"t_reached={t_reached!r}: {message}", status=int(status), t_reached=t_reached)
    return Solution(t=problem.t, y=y, sens=sens, status=int(status), message=message, t_reached=t_reached,
                    n_steps=int(info[Info.N_STEPS]), n_rejected=int(info[Info.N_REJECTED]),
                    n_rhs=int(info[Info.N_RHS]), method="dde-dopri5",
                    states=tuple(cm.states), params=tuple(cm.params), t0=problem.t0, history=hist,
                    history_params=bound.history_params)
