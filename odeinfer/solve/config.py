"""Solvers and gradients as values: what to integrate with, and which derivatives to return.

A solver is a small frozen value that names the method and carries its options; a gradient is
a value that says how derivatives are computed. Both validate at construction, so a bad
tolerance or an impossible combination is refused before any work starts.

>>> import odeinfer as oi
>>> oi.Dopri5(rtol=1e-8)                       # explicit Dormand-Prince 5(4)
Dopri5(rtol=1e-08, atol=1e-08, max_steps=100000, first_step=None, fixed_step=None)
>>> oi.Auto(rtol=1e-8)                         # Dopri5, switching to Rodas when stiff
Auto(rtol=1e-08, atol=1e-08, max_steps=100000, first_step=None)
>>> oi.MethodOfSteps(oi.Dopri5(rtol=1e-8))     # delay models
MethodOfSteps(inner=Dopri5(rtol=1e-08, atol=1e-08, max_steps=100000, first_step=None, fixed_step=None))

The defaults of every role (a one-off solve, a fit, the Bayesian likelihood, a view) are
:data:`DEFAULT_SOLVERS`, in this one place; :func:`default_solver` looks them up.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from odeinfer.errors import InputError

__all__ = ["Dopri5", "Rodas", "Auto", "MethodOfSteps", "Forward", "Adjoint", "DEFAULT_SOLVERS", "default_solver",
           "as_solver", "as_gradient"]

_EPS100 = 100 * 2.220446049250313e-16


def _tolerance(owner, name, value, upper):
    if isinstance(value, bool):
        raise InputError(f"{owner}({name}=...): expected a positive number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{owner}({name}=...): expected a positive number, got {type(value).__name__}") from None
    if not (v > 0.0 and v < upper):
        raise InputError(f"{owner}({name}=...): expected a number in (0, {upper:g}), got {value!r}; "
                         f"typical values are rtol=1e-6 .. 1e-10, atol=1e-8 .. 1e-12")
    if name == "rtol" and v < _EPS100:
        raise InputError(f"{owner}(rtol=...): {value!r} is below 100 * machine epsilon (2.2e-14): the solver "
                         "cannot reach it; use rtol >= 1e-13")
    return v


def _check_steps(owner, max_steps, first_step):
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) and not _is_np_int(max_steps) or max_steps < 1:
        raise InputError(f"{owner}(max_steps=...): expected a positive integer, got {max_steps!r}; "
                         "the default is 100000")
    if first_step is not None:
        try:
            h = float(first_step)
        except (TypeError, ValueError):
            raise InputError(f"{owner}(first_step=...): expected a positive number or None, "
                             f"got {type(first_step).__name__}") from None
        if isinstance(first_step, bool) or not (h > 0.0 and math.isfinite(h)):
            raise InputError(f"{owner}(first_step=...): expected a positive finite number or None "
                             f"(None: chosen automatically), got {first_step!r}")
        return int(max_steps), h
    return int(max_steps), None


def _is_np_int(x):
    import numpy as np

    return isinstance(x, np.integer)


def _is_np_float(x):
    import numpy as np

    return isinstance(x, np.floating)


@dataclass(frozen=True)
class _Adaptive:
    """Options shared by the adaptive one-step methods."""

    rtol: float = 1e-6
    atol: float = 1e-8
    max_steps: int = 100_000
    first_step: float | None = None

    def __post_init__(self):
        owner = type(self).__name__
        object.__setattr__(self, "rtol", _tolerance(owner, "rtol", self.rtol, 1.0))
        object.__setattr__(self, "atol", _tolerance(owner, "atol", self.atol, math.inf))
        steps, h = _check_steps(owner, self.max_steps, self.first_step)
        object.__setattr__(self, "max_steps", steps)
        object.__setattr__(self, "first_step", h)

    def replace(self, **changes):
        """A copy with some options changed (validated again)."""
        return replace(self, **changes)

    def as_dict(self) -> dict:
        """``{"method": ..., <options>}``: for provenance and JSON."""
        return {"method": self.method, **asdict(self)}

    @property
    def delays(self) -> bool:
        """Whether this solver integrates delay models (only :class:`MethodOfSteps` does)."""
        return False


@dataclass(frozen=True)
class Dopri5(_Adaptive):
    """Explicit Dormand-Prince 5(4) with error control on the states (and sensitivities),
    stiffness detection and a 4th-order dense output; the default for non-stiff models.

    Parameters
    ----------
    rtol, atol : float, default 1e-6, 1e-8
        Local error tolerances: ``|err_i| <= atol + rtol * |y_i|`` in the RMS norm.
    max_steps : int, default 100000
        Steps (accepted or rejected) before the solver gives up.
    first_step : float, optional
        Initial step size; default: Hairer's heuristic.
    fixed_step : float, optional
        Integrate with this constant step instead (the last step is shortened to end at
        ``t[-1]``): no error control and no stiffness test; ``rtol``, ``atol``, ``max_steps`` and
        ``first_step`` are unused. For convergence studies; leave None for real work.
    """

    fixed_step: float | None = None
    method = "dopri5"

    def __post_init__(self):
        super().__post_init__()
        if self.fixed_step is not None:
            h = self.fixed_step
            ok = not isinstance(h, bool) and isinstance(h, (int, float)) and math.isfinite(h) and h > 0
            if not ok and _is_np_float(h):
                ok = math.isfinite(float(h)) and float(h) > 0
            if not ok:
                raise InputError(f"Dopri5(fixed_step=...): expected a positive finite number or None, got {h!r}")
            object.__setattr__(self, "fixed_step", float(h))


@dataclass(frozen=True)
class Rodas(_Adaptive):
    """Stiff Rosenbrock solver Rodas4 (exact Jacobian from the model); for stiff models
    (chemical kinetics, signalling networks). Options as :class:`Dopri5`. Models of 24 states or more
    factor the step's matrix by a sparse LU planned from the Jacobian's pattern (a minimum-degree
    order; see ``odeinfer/solve/kernels/linalg.py``), so large reaction networks cost what their
    nonzeros cost, not n^3."""

    method = "rodas"


@dataclass(frozen=True)
class Auto(_Adaptive):
    """Stiffness switching for ODE models: :class:`Dopri5` until a solve finds the problem stiff,
    then :class:`Rodas` (same options) for good (in an estimator: for the rest of the local fit).

    The solver that :func:`odeinfer.bind` returns for it (an
    :class:`~odeinfer.solve.api.AutoSolver`) starts with Dormand-Prince. When a solve ends with
    ``Status.STIFF`` (Hairer's stiffness test fired), or with ``Status.MAX_STEPS`` while the last
    step was limited by stability rather than accuracy (``h * rho(df/dy) >= 2`` at the last output
    state; Dormand-Prince is stable up to about 3.3), that solve is redone with Rodas and that bound
    solver stays on Rodas from then on (its ``stiff`` flag; ``method_used`` says which method
    answered the last call). Non-stiff problems never leave Dormand-Prince: the results are
    Dopri5's, bit for bit. Options as :class:`Dopri5` (no ``fixed_step``); ODE models only.

    In the estimators "from then on" means within one local fit: each start of a multistart, each
    profile re-optimisation and the final phase of a fit begins on Dormand-Prince again (an
    :func:`~odeinfer.solve.api.auto_scope` each), so a start's result does not depend on the starts
    run before it in the same process, nor on the number of processes.
    """

    method = "auto"

    def explicit(self) -> Dopri5:
        """The non-stiff method with these options."""
        return Dopri5(rtol=self.rtol, atol=self.atol, max_steps=self.max_steps, first_step=self.first_step)

    def stiff(self) -> Rodas:
        """The stiff method with these options."""
        return Rodas(rtol=self.rtol, atol=self.atol, max_steps=self.max_steps, first_step=self.first_step)


@dataclass(frozen=True)
class MethodOfSteps:
    """Delay models: the method of steps around an explicit Runge-Kutta solver, with
    breakpoint tracking and dense-output interpolation of the lagged states.

    Parameters
    ----------
    inner : Dopri5, default Dopri5()
        The stepper and its options (only Dormand-Prince has a delay kernel).
    """

    inner: Dopri5 = field(default_factory=Dopri5)
    method = "dde-dopri5"

    def __post_init__(self):
        if not isinstance(self.inner, Dopri5):
            got = type(self.inner).__name__
            hint = (" (a stiff delay solver is not available; shorten the step with Dopri5(max_steps=...) "
                    "or reformulate)" if isinstance(self.inner, (Rodas, Auto)) else "")
            raise InputError(f"MethodOfSteps(inner=...): expected a Dopri5(...) value, got {got}{hint}")
        if self.inner.fixed_step is not None:
            raise InputError(f"MethodOfSteps(inner=...): the delay solver has no fixed-step mode, got {self.inner!r}; "
                             "leave fixed_step=None")

    @property
    def rtol(self):
        return self.inner.rtol

    @property
    def atol(self):
        return self.inner.atol

    @property
    def max_steps(self):
        return self.inner.max_steps

    @property
    def first_step(self):
        return self.inner.first_step

    @property
    def delays(self) -> bool:
        return True

    def replace(self, **changes):
        """A copy with options of the inner solver changed."""
        return MethodOfSteps(self.inner.replace(**changes))

    def as_dict(self) -> dict:
        """``{"method": "dde-dopri5", <the inner solver's options>}``: for provenance and JSON."""
        return {**self.inner.as_dict(), "method": self.method}


@dataclass(frozen=True)
class Forward:
    """Derivatives by forward sensitivity equations, integrated with the states.

    Parameters
    ----------
    error_control : bool, default True
        Control the local error of the sensitivities as well as of the states.
    exclude : tuple of str, default ()
        Parameters whose sensitivity columns are not needed (held fixed): their columns are NaN.
        This allows sensitivities for a model whose switching parameters are held fixed. With
        ``directions``, it only lifts that check: those parameters' rows of ``pdir`` must be zero.
    directions : int, optional
        Integrate ``k = directions`` directional sensitivities instead of the ``n_params +
        n_states`` columns of ``d y / d(params, x0)``: the solver that :func:`odeinfer.bind`
        returns is called as ``y, S, status = bound(params, x0, pdir, s0)`` with ``pdir``
        (n_params, k) and ``s0`` (n_states, k) float64 C-contiguous arrays, and ``S`` (n_times,
        n_states, k) is ``d y / d(params, x0) @ [pdir; s0]``, integrated directly as
        ``S' = J_y S + J_p pdir``, ``S(t0) = s0``. For a fit of ``theta``: ``pdir = dp/dtheta``,
        ``s0 = dx0/dtheta``, and ``S = d y / d theta`` at the cost of ``k`` columns. ODE models
        with an adaptive solver (``Dopri5``, ``Rodas``, ``Auto``) only. Default None: all
        columns, ``bound(params, x0)``.
    """

    error_control: bool = True
    exclude: tuple = ()
    directions: int | None = None

    def __post_init__(self):
        import numpy as np

        if not isinstance(self.error_control, (bool, np.bool_)):
            raise InputError(f"Forward(error_control=...): expected True or False, got {self.error_control!r}")
        object.__setattr__(self, "error_control", bool(self.error_control))
        k = self.directions
        if k is not None:
            if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
                raise InputError(f"Forward(directions=...): expected a positive integer (the number k of "
                                 f"directions, the columns of pdir), got {k!r}; pass directions=pdir.shape[1], or "
                                 "leave it None for all n_params + n_states columns")
            object.__setattr__(self, "directions", int(k))
        ex = self.exclude
        if ex is None:
            ex = ()
        if isinstance(ex, str):
            ex = (ex,)
        try:
            ex = tuple(ex)
        except TypeError:
            raise InputError(f"Forward(exclude=...): expected a list of parameter names, got {ex!r}") from None
        bad = [x for x in ex if not isinstance(x, str)]
        if bad:
            raise InputError(f"Forward(exclude=...): expected parameter names (str), got {bad[0]!r}")
        object.__setattr__(self, "exclude", ex)


@dataclass(frozen=True)
class Adjoint:
    """Vector-Jacobian products ``sum_i g_i^T dy(t_i)/d(params, x0)`` by the continuous adjoint
    (one backward solve whatever the number of parameters; for many parameters).

    Parameters
    ----------
    nsub : int, optional
        Backward sub-steps per forward step (more for accuracy on coarse forward meshes); default
        1 for ODE models, 2 for delay models (64 per smallest delay for the DDE integral loss).
    """

    nsub: int | None = None

    def __post_init__(self):
        if self.nsub is None:
            return
        if isinstance(self.nsub, bool) or not (isinstance(self.nsub, int) or _is_np_int(self.nsub)) or self.nsub < 1:
            raise InputError(f"Adjoint(nsub=...): expected a positive integer, got {self.nsub!r}")
        object.__setattr__(self, "nsub", int(self.nsub))


#: The default solver of each role. ``solve``: a one-off :func:`odeinfer.solve`;
#: ``fit``: trajectory estimators, predictions and simulated data (tight tolerances, so the
#: integration error stays far below the data's noise; :class:`Auto`, so a stiff model or a stiff
#: region of parameter space switches to Rodas instead of failing); ``sample``: the likelihood inside the
#: Bayesian sampler (a bounded step count: a divergent proposal fails fast instead of hanging);
#: ``view``: interactive widgets; ``dde_adjoint``: the forward solve under a delay model's adjoint
#: (:func:`odeinfer.solve.dde_adjoint.dde_vjp`; the adjoint's error follows it); ``likelihood``: the
#: negative log-likelihood of a problem with observables (:class:`odeinfer.likelihood.Objective`, the
#: trust-region fits of Embedding, PEtab problems). Its tolerances were chosen from the error they leave in
#: the objective, measured against rtol 1e-11 on the Boehm, Crauste, Elowitz and Fujita PEtab problems
#: at their published optima: |NLL error| <= 7e-5 (the published references have 1e-3 precision) and an
#: NLL excess ``g_err^T F^+ g_err / 2`` <= 6e-6 at the point where the computed gradient vanishes, at a
#: third of rtol 1e-8's steps (benchmarks/RESULTS.md, session "PEtab likelihood").
DEFAULT_SOLVERS = {
    "solve": Dopri5(),
    "fit": Auto(rtol=1e-8, atol=1e-10),
    "sample": Dopri5(max_steps=20_000),
    "view": Dopri5(),
    "dde_adjoint": Dopri5(rtol=1e-10, atol=1e-12),
    "likelihood": Auto(rtol=1e-6, atol=1e-8),
}

_SOLVER_TYPES = (Dopri5, Rodas, Auto, MethodOfSteps)


def default_solver(role: str, delays: bool = False):
    """The default solver of ``role`` (see :data:`DEFAULT_SOLVERS`), wrapped in
    :class:`MethodOfSteps` for a model with delays."""
    if role not in DEFAULT_SOLVERS:
        raise InputError(f"role: expected one of {list(DEFAULT_SOLVERS)}, got {role!r}; or pass solver=... explicitly")
    s = DEFAULT_SOLVERS[role]
    if delays:
        return MethodOfSteps(s.explicit() if isinstance(s, Auto) else s)  # no stiff delay solver
    return s


def as_solver(solver, *, delays: bool, role: str = "solve", arg: str = "solver"):
    """``solver`` validated for a model with (``delays=True``) or without delays; None gives the
    role's default. A plain ``Dopri5`` for a delay model is wrapped in :class:`MethodOfSteps`
    only when it is the default; otherwise the caller must say so."""
    if solver is None:
        return default_solver(role, delays)
    if isinstance(solver, str):
        hint = {"dopri5": "oi.Dopri5()", "rodas": "oi.Rodas()", "auto": "oi.Auto()"}.get(
            solver.lower(), "oi.Dopri5() or oi.Rodas()")
        raise InputError(f"{arg}: expected a solver value such as {hint}, got the string {solver!r}; "
                         f"pass {arg}={hint}")
    if not isinstance(solver, _SOLVER_TYPES):
        raise InputError(f"{arg}: expected oi.Dopri5(...), oi.Rodas(...), oi.Auto(...) or oi.MethodOfSteps(...), "
                         f"got {type(solver).__name__}")
    if delays and not solver.delays:
        inner, note = solver, ""
        if isinstance(solver, (Rodas, Auto)):  # no stiff delay solver: suggest Dormand-Prince with the same options
            inner = Dopri5(rtol=solver.rtol, atol=solver.atol, max_steps=solver.max_steps, first_step=solver.first_step)
            note = " (no stiff delay solver is available)"
        raise InputError(f"{arg}: the model has delays, so it needs a method of steps, got {solver!r}; "
                         f"pass {arg}=oi.MethodOfSteps({inner!r}){note}")
    if not delays and solver.delays:
        raise InputError(f"{arg}: the model has no delays, got {solver!r}; pass {arg}={solver.inner!r}")
    if role == "sample" and isinstance(solver, Auto):
        raise InputError(f"{arg}: the Bayesian likelihood runs one compiled solver kernel, so it cannot switch methods "
                         f"as {solver!r} does; pass {arg}=oi.{solver.explicit()!r} or, for a stiff model, "
                         f"{arg}=oi.{solver.stiff()!r}")
    return solver


def as_gradient(gradient, *, arg: str = "gradient", directions: bool = False):
    """``gradient`` validated: None (states only), :class:`Forward` or :class:`Adjoint`;
    ``Forward(directions=k)`` only where ``directions`` is True (the callers that take
    ``pdir`` and ``s0``: :func:`odeinfer.bind`)."""
    if isinstance(gradient, Forward) and gradient.directions is not None and not directions:
        raise InputError(f"{arg}: {gradient!r} asks for directional sensitivities, which only the solver of "
                         "oi.bind(problem, gradient=oi.Forward(directions=k)) computes (called as bound(params, x0, "
                         f"pdir, s0)); pass {arg}=oi.Forward() here")
    if gradient is None or isinstance(gradient, (Forward, Adjoint)):
        return gradient
    if gradient is True:
        raise InputError(f"{arg}: expected oi.Forward() or oi.Adjoint(), got True; pass {arg}=oi.Forward()")
    raise InputError(f"{arg}: expected None, oi.Forward(...) or oi.Adjoint(...), got {gradient!r}")
