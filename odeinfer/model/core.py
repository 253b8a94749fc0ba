"""The model specification (:class:`Model`) and its compiled kernels (:class:`CompiledModel`)."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import sympy as sp

from odeinfer.errors import ModelDefinitionError
from odeinfer.model.codegen import safe_symbols
from odeinfer.model.derivatives import Derivatives
from odeinfer.model.trace import T_SYMBOL, symbols_for, trace_function, validate_names

__all__ = ["Model", "Observation", "CompiledModel", "model", "not_finite"]

_NOISE = ("additive", "log")


def not_finite(expr) -> bool:
    """Whether ``expr`` holds a number that is not finite (``zoo``, ``oo``, ``nan``, a float inf or nan).

    One ``nan`` is allowed: the value of the last piece ``(nan, True)`` of a ``Piecewise``, i.e. a
    piecewise that is undefined where none of its conditions holds (``where(c, a, nan)``; SBML's
    piecewise without otherwise). Evaluated there, the expression is NaN, and a solve that reaches
    such a point fails with its non-finite status rather than returning a made-up number.
    """
    stack, seen = [expr], set()
    while stack:
        node = stack.pop()
        if node in seen:  # shared subexpressions are walked once
            continue
        seen.add(node)
        if isinstance(node, sp.Piecewise) and node.args[-1].cond == sp.true and node.args[-1].expr is sp.nan:
            stack.extend(a for piece in node.args[:-1] for a in piece.args)
            continue
        if node in (sp.zoo, sp.nan, sp.oo, -sp.oo) or (isinstance(node, sp.Float) and not np.isfinite(float(node))):
            return True
        stack.extend(node.args)
    return False


@dataclass(frozen=True)
class Observation:
    """Which states are observed and how the noise enters.

    Parameters
    ----------
    observed : tuple of str or None
        Names of the observed states; None (default) means all states.
    noise : {"additive", "log"}
        ``"additive"``: y = x + e on the natural scale; ``"log"``: log y = log x + e
        (multiplicative noise, positive data). Default ``"additive"``.
    """

    observed: tuple[str, ...] | None = None
    noise: str = "additive"


@dataclass(frozen=True, eq=False)
class Model:
    """An ODE model ``dy/dt = f(t, y, p)``, or a DDE model ``dy/dt = f(t, y(t), y(t - tau_k), p)``:
    names, symbolic right-hand side, observation model.

    Build it with :func:`odeinfer.model` on a plain Python function or with
    :meth:`Model.from_equations`. It is immutable; :meth:`compile` returns the
    numba kernels (cached on disk). A model with ``delays`` is solved with
    ``oi.solve(oi.Problem(model, t, history=...), params)`` (a method of steps), not as an ODE.

    Attributes
    ----------
    name : str
    states : tuple of str, length ``n_states``
    params : tuple of str, length ``n_params``
    exprs : tuple of sympy expressions, length ``n_states``
        The derivatives in terms of real symbols named after the states, the
        parameters and ``t``.
    observation : Observation
    delays : tuple of str
        The parameters that are constant delays (empty for an ODE). The
        expressions hold the lagged states as the symbols of
        :func:`odeinfer.model.lags.lag_symbol` (printed ``x(t - tau)``).
    observables : tuple of Observable
        What is measured (see :meth:`observe`); empty: the states in ``observation`` are
        observed directly.
    obs_params : tuple of str
        Parameters used only by the observables and noise models (scales, offsets, sds).
    """

    name: str
    states: tuple[str, ...]
    params: tuple[str, ...]
    exprs: tuple
    observation: Observation = field(default_factory=Observation)
    doc: str = ""
    delays: tuple[str, ...] = ()
    observables: tuple = ()
    obs_params: tuple[str, ...] = ()

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise ModelDefinitionError(
                f"name: expected a string (the model's title), got {type(self.name).__name__}; e.g. name='decay'")
        if self.delays:
            _check_delays(self.delays, self.params)
        if self.observation.noise not in _NOISE:
            raise ModelDefinitionError(
                f"noise: expected one of {list(_NOISE)}, got {self.observation.noise!r}"
            )
        if self.observation.observed is not None:
            unknown = [s for s in self.observation.observed if s not in self.states]
            if unknown:
                raise ModelDefinitionError(
                    f"observed: {unknown} are not states of model {self.name!r} (states: {list(self.states)})"
                )
            if not self.observation.observed:
                raise ModelDefinitionError("observed: at least one state must be observed")
        self._check_exprs()

    def _check_exprs(self):
        """One finite sympy expression per state (names are checked by oi.model and from_equations)."""
        if len(self.exprs) != self.n_states:
            raise ModelDefinitionError(
                f"exprs: model {self.name!r} has {self.n_states} states {list(self.states)} but "
                f"{len(self.exprs)} derivatives; give one per state")
        for s, e in zip(self.states, self.exprs):
            if not isinstance(e, sp.Expr):
                raise ModelDefinitionError(
                    f"the derivative of state {s!r} is a {type(e).__name__}, not a sympy expression; build models "
                    "with oi.model or Model.from_equations")
            if not_finite(e):
                raise ModelDefinitionError(
                    f"the derivative of state {s!r} is not finite ({e}): it divides by zero or a number overflows; "
                    "remove the division by zero (e.g. x/0) or use smaller numbers")

    # sizes and symbols ----------------------------------------------------
    @property
    def n_states(self) -> int:
        return len(self.states)

    @property
    def n_params(self) -> int:
        return len(self.params)

    @property
    def observed(self) -> tuple[str, ...]:
        """Observed state names (all states unless the observation model says otherwise)."""
        return self.observation.observed if self.observation.observed is not None else self.states

    @property
    def t_symbol(self):
        return T_SYMBOL

    @cached_property
    def state_symbols(self):
        return symbols_for(self.states)

    @cached_property
    def param_symbols(self):
        return symbols_for(self.params)

    @cached_property
    def derivatives(self) -> Derivatives:
        """Exact symbolic first and second derivatives (computed on first use).

        For a model with delays the lagged states are held constant (partial
        derivatives in the current states and parameters); see
        :attr:`delay_derivatives` for the derivatives in the lagged states.
        """
        return Derivatives(T_SYMBOL, self.state_symbols, self.param_symbols, self.exprs)

    # delays -------------------------------------------------------------------
    @property
    def n_delays(self) -> int:
        return len(self.delays)

    @property
    def is_dde(self) -> bool:
        """True when the model has delays (solve it with ``oi.Problem(model, t, history=...)``)."""
        return bool(self.delays)

    @property
    def delay_indices(self) -> tuple[int, ...]:
        """Positions of the delays in ``params``."""
        return tuple(self.params.index(d) for d in self.delays)

    @cached_property
    def lag_symbols(self):
        """Matrix (n_states, n_delays) of the symbols ``state(t - delay)``."""
        from odeinfer.model.lags import lag_symbol

        return sp.Matrix(self.n_states, self.n_delays, lambda i, k: lag_symbol(self.states[i], self.delays[k]))

    @cached_property
    def lags(self) -> tuple[tuple[str, str], ...]:
        """The ``(state, delay)`` pairs that occur in the right-hand side, in declaration order."""
        free = set().union(*(e.free_symbols for e in self.exprs)) if self.exprs else set()
        return tuple((s, d) for d in self.delays for i, s in enumerate(self.states)
                     if self.lag_symbols[i, self.delays.index(d)] in free)

    @cached_property
    def delay_derivatives(self):
        """Exact derivatives of a DDE's right-hand side (:class:`~odeinfer.model.derivatives.DelayDerivatives`)."""
        from odeinfer.model.derivatives import DelayDerivatives

        if not self.delays:
            raise ModelDefinitionError(f"model {self.name!r} has no delays; use Model.derivatives")
        return DelayDerivatives(T_SYMBOL, self.state_symbols, self.lag_symbols, self.param_symbols, self.exprs)

    @cached_property
    def switching_params(self) -> tuple[str, ...]:
        """Parameters that move a jump of the right-hand side (a sharp step or ``where``).

        The forward sensitivity equations miss the jump term of such a
        parameter, so solvers refuse sensitivities with respect to it; use a
        smooth step (``om.heaviside(x, width=...)``) to fit it by trajectory matching.
        The likelihood :class:`~odeinfer.Objective` adds the jump term itself where the jump's
        time is a function of the parameters alone (``where(t >= p.tau, ...)``; see
        :mod:`odeinfer.likelihood.switches`).
        """
        found = set()
        for e in self.exprs:
            for node in sp.preorder_traversal(e):
                if isinstance(node, (sp.Heaviside, sp.sign)):
                    found |= node.args[0].free_symbols
                elif isinstance(node, sp.Piecewise):
                    for _, cond in node.args:
                        found |= cond.free_symbols
        return tuple(p for p, s in zip(self.params, self.param_symbols) if s in found)

    @cached_property
    def fingerprint(self) -> str:
        """Hash of the names and expressions: equal for models with the same equations."""
        text = repr((self.states, self.params, tuple(sp.srepr(e) for e in self.exprs)))
        if self.delays:  # ODE fingerprints stay as they were
            text += repr(("delays", self.delays))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def full_params(self) -> tuple[str, ...]:
        """``params`` then ``obs_params``: every parameter of the model and its observables."""
        return self.params + self.obs_params

    @property
    def observable_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.observables)

    # variants ---------------------------------------------------------------
    def observe(self, observables, noise=None, *, params=()) -> "Model":
        """A copy that measures ``observables`` with the given noise models.

        Parameters
        ----------
        observables : dict of str to (str or callable)
            ``{name: h}``: an expression string in the states, parameters, observable
            parameters and ``t`` (parsed without ``eval``), or a function ``h(t, y, p)`` traced
            like the right-hand side (``y.<state>``, ``p.<param>``).
        noise : Normal or Laplace, or dict of str to those
            One noise model for all observables, or one per observable. Its ``sigma`` may name
            parameters, states, ``t`` and the observable itself.
        params : list of str
            Observable-only parameters (scales, offsets, noise sds), new names.

        Notes
        -----
        A delay model's observables are functions of the current states (not of lagged ones);
        ``oi.AdjointDDE`` fits them (``FitProblem`` and the other estimators take ODE models).

        Examples
        --------
        >>> import odeinfer as oi
        >>> @oi.model(states=["a", "b"], params=["k"])
        ... def conv(t, y, p):
        ...     return {"a": -p.k * y.a, "b": p.k * y.a}
        >>> m = conv.observe({"frac": "100*b/(a + b)"}, noise=oi.Normal(sigma="sd"), params=["sd"])
        >>> m.observable_names, m.full_params
        (('frac',), ('k', 'sd'))
        """
        from odeinfer.model.observables import build_observables

        obs, obs_params = build_observables(self, observables, noise, params)
        return replace(self, observables=obs, obs_params=obs_params)

    def with_observation(self, observed=None, noise="additive") -> "Model":
        """A copy with another observation model (which states are observed, noise scale)."""
        obs = None if observed is None else validate_names("observed", observed)
        return replace(self, observation=Observation(obs, noise))

    # numbers ----------------------------------------------------------------
    def compile(self) -> "CompiledModel":
        """Numba kernels for this model (generated and compiled once, cached on disk)."""
        return _compile(self)

    def lambdify(self, what="f", modules="numpy"):
        """A plain numpy function ``g(t, y, p)`` of ``what`` in {"f", "jac_y", "jac_p"}.

        It accepts complex inputs (for complex-step checks) and is slow: it is
        meant for tests and plotting, not for fitting. For a model with delays
        the function is ``g(t, y, ylag, p)`` with ``ylag`` of shape
        (n_states, n_delays), ``ylag[i, k] = y_i(t - tau_k)``, and ``what`` may
        also be ``"jac_ylag"`` (shape (n_delays, n_states, n_states)).
        """
        if self.delays:
            return self._lambdify_dde(what, modules)
        d = self.derivatives
        target = {"f": d.f, "jac_y": d.jac_y, "jac_p": d.jac_p}[what]
        rename = safe_symbols(self.state_symbols, self.param_symbols)
        g = sp.lambdify((T_SYMBOL, [rename[s] for s in self.state_symbols], [rename[s] for s in self.param_symbols]),
                        target.xreplace(rename), modules=modules)
        if what == "f":
            return lambda t, y, p: np.asarray(g(t, y, p)).reshape(self.n_states)
        return lambda t, y, p: np.asarray(g(t, y, p))

    def _lambdify_dde(self, what, modules):
        d = self.delay_derivatives
        targets = {"f": d.f, "jac_y": d.jac_y, "jac_p": d.jac_p, "jac_ylag": list(d.jac_ylag)}
        if what not in targets:
            raise ModelDefinitionError(f"lambdify: what must be one of {list(targets)}, got {what!r}")
        n, nd = self.n_states, self.n_delays
        rename = safe_symbols(self.state_symbols, self.param_symbols, self.lag_symbols)
        flat_lag = [rename[self.lag_symbols[i, k]] for i in range(n) for k in range(nd)]
        target = targets[what]
        target = [m.xreplace(rename) for m in target] if isinstance(target, list) else target.xreplace(rename)
        g = sp.lambdify((T_SYMBOL, [rename[s] for s in self.state_symbols], flat_lag,
                         [rename[s] for s in self.param_symbols]), target, modules=modules)

        def call(t, y, ylag, p):
            out = np.asarray(g(t, y, np.asarray(ylag).reshape(-1), p))
            return out.reshape(n) if what == "f" else out

        return call

    # display ------------------------------------------------------------------
    def equations(self) -> dict[str, str]:
        """The right-hand sides as text, ``{state: "expression"}``, in the language of
        :meth:`from_equations` (which rebuilds the same model from them)."""
        from odeinfer.model.equations import format_expr

        lags = {self.lag_symbols[i, k]: f"lag({s}, {d})"
                for i, s in enumerate(self.states) for k, d in enumerate(self.delays)}
        return {s: format_expr(e, lags) for s, e in zip(self.states, self.exprs)}

    def equations_latex(self) -> list[str]:
        """One LaTeX line per state, ``\\frac{d x}{dt} = ...``."""
        return [
            rf"\frac{{d {sp.latex(sym)}}}{{dt}} = {sp.latex(e)}"
            for sym, e in zip(self.state_symbols, self.exprs)
        ]

    def __repr__(self):
        eqs = "; ".join(f"d{s}/dt = {e}" for s, e in zip(self.states, self.exprs))
        delays = f", delays={list(self.delays)}" if self.delays else ""
        if self.observables:
            seen = ", ".join(f"{o.name} = {o.text} ~ {o.noise.distribution}({o.noise.scale})" for o in self.observables)
            extra = f", obs_params={list(self.obs_params)}" if self.obs_params else ""
            return (f"Model({self.name!r}, states={list(self.states)}, params={list(self.params)}{extra}: {eqs}; "
                    f"observables: {seen})")
        return (f"Model({self.name!r}, states={list(self.states)}, params={list(self.params)}{delays}, "
                f"observed={list(self.observed)}, noise={self.observation.noise!r}: {eqs})")

    def _repr_latex_(self):
        body = r" \\ ".join(line.replace(" = ", " &= ", 1) for line in self.equations_latex())
        return rf"$\begin{{aligned}}{body}\end{{aligned}}$"

    # construction ----------------------------------------------------------------
    @classmethod
    def from_equations(cls, equations, params, *, name="model", observed=None, noise="additive", delays=None):
        """A model from equation strings, parsed safely (no ``eval``).

        Parameters
        ----------
        equations : dict of str to str
            ``{state: "right-hand side"}``; the keys, in order, are the states.
        params : list of str
            Parameter names.
        name : str, default "model"
        observed : list of str, optional
            Observed states (default all).
        noise : {"additive", "log"}, default "additive"
        delays : list of str, optional
            Parameters that are constant delays, used as ``lag(x, tau)`` in the
            equations.

        Examples
        --------
        >>> m = Model.from_equations({"x": "-k*x"}, params=["k"])
        >>> m.states, m.params
        (('x',), ('k',))
        """
        from odeinfer.model.equations import parse_equations

        if not isinstance(equations, dict) or not equations:
            raise ModelDefinitionError(
                f"equations: expected a non-empty dict {{state: 'expression'}}, got {type(equations).__name__}"
            )
        states = validate_names("states", list(equations))
        params = validate_names("params", params)
        _check_overlap(states, params)
        delays_t = _delays_arg(delays, params)
        exprs = parse_equations(dict(zip(states, equations.values())), states, params, delays_t)
        obs = Observation(None if observed is None else validate_names("observed", observed), noise)
        return _finish(cls(name, states, params, exprs, obs, delays=delays_t))


def _check_overlap(states, params):
    both = sorted(set(states) & set(params))
    if both:
        raise ModelDefinitionError(
            f"names {both} are used both as states and as params; each name must be unique"
        )


def _check_delays(delays, params):
    missing = [d for d in delays if d not in params]
    if missing:
        raise ModelDefinitionError(
            f"delays: {missing} {'is not a declared parameter' if len(missing) == 1 else 'are not declared parameters'} "
            f"(params: {list(params)}); every delay must also be listed in params=[...]"
        )


def _delays_arg(delays, params):
    if delays is None:
        return ()
    out = validate_names("delays", delays)
    _check_delays(out, params)
    return out


def _finish(m: Model) -> Model:
    """Check that every declared delay occurs in a lag."""
    if m.delays:
        used = {d for _, d in m.lags}
        unused = [d for d in m.delays if d not in used]
        if unused:
            raise ModelDefinitionError(
                f"delays: {unused} declared in model {m.name!r} but never used as lag(y.<state>, {unused[0]!r}); "
                "use it in the right-hand side or remove it from delays=[...]"
            )
    return m


def model(states, params, *, name=None, observed=None, noise="additive", delays=None):
    """Decorator: turn ``def rhs(t, y, p)`` into a :class:`Model`.

    The function is called once with symbols (``y.<state>``, ``p.<param>``,
    ``t``) and must return a dict ``{state: derivative}`` or a list in the order
    of ``states``. Use :mod:`odeinfer.math` for functions (``om.exp``,
    ``om.where``); ``np.exp``, ``math.exp`` and ``if`` on symbols raise a
    :class:`~odeinfer.errors.TracingError` naming the line.

    Parameters
    ----------
    states, params : list of str
        Names of the states and parameters (identifiers, unique, not ``t``).
    name : str, optional
        Default: the function's name.
    observed : list of str, optional
        Observed states (default all).
    noise : {"additive", "log"}, default "additive"
    delays : list of str, optional
        Parameters that are constant delays ``tau``; the right-hand side reads
        delayed states as ``odeinfer.math.lag(y.x, "tau")``. Each delay must be
        in ``params`` (estimated or fixed like any parameter). Default: none (an ODE).

    Examples
    --------
    >>> import odeinfer as oi
    >>> @oi.model(states=["x"], params=["k"])
    ... def decay(t, y, p):
    ...     return {"x": -p.k * y.x}
    >>> decay.n_states, decay.n_params
    (1, 1)
    """
    states_t = validate_names("states", states)
    params_t = validate_names("params", params)
    _check_overlap(states_t, params_t)
    if not states_t:
        raise ModelDefinitionError("states: a model needs at least one state")
    obs = Observation(None if observed is None else validate_names("observed", observed), noise)
    delays_t = _delays_arg(delays, params_t)

    def decorate(fn):
        if not callable(fn):
            raise ModelDefinitionError(f"@model must decorate a function rhs(t, y, p), got {type(fn).__name__}")
        exprs = trace_function(fn, states_t, params_t, delays_t)
        return _finish(Model(name or fn.__name__, states_t, params_t, exprs, obs, doc=fn.__doc__ or "",
                             delays=delays_t))

    return decorate


@dataclass(frozen=True, eq=False)
class CompiledModel:
    """A model's numba kernels: the generated module (model + solver kernels).

    Attributes
    ----------
    model : Model
    module : module
        Holds ``model_f``, ``model_jac_y``, ``model_jac_p``, ... and the solver
        kernels of :mod:`odeinfer.solve.kernels`.
    """

    model: Model
    module: object

    @property
    def n_states(self):
        return self.model.n_states

    @property
    def n_params(self):
        return self.model.n_params

    @property
    def states(self):
        return self.model.states

    @property
    def params(self):
        return self.model.params

    def _call(self, kernel, shape, t, y, params, ylag):
        out = np.empty(shape)
        y = np.ascontiguousarray(y, float)
        params = np.ascontiguousarray(params, float)
        if self.model.delays:
            if ylag is None:
                raise ModelDefinitionError(
                    f"model {self.model.name!r} has delays: pass ylag, shape (n_states, n_delays) = "
                    f"({self.n_states}, {self.model.n_delays}), ylag[i, k] = y_i(t - tau_k)")
            ylag = np.ascontiguousarray(np.asarray(ylag, float).reshape(self.n_states, self.model.n_delays))
            getattr(self.module, kernel)(float(t), y, ylag, params, out)
        else:
            getattr(self.module, kernel)(float(t), y, params, out)
        return out

    def f(self, t, y, params, ylag=None):
        """f(t, y, p) as a new float64 array (convenience; kernels use out-buffers).

        For a model with delays pass ``ylag`` (n_states, n_delays), ``ylag[i, k] = y_i(t - tau_k)``.
        """
        return self._call("model_f", (self.n_states,), t, y, params, ylag)

    def jac_y(self, t, y, params, ylag=None):
        return self._call("model_jac_y", (self.n_states, self.n_states), t, y, params, ylag)

    def jac_p(self, t, y, params, ylag=None):
        return self._call("model_jac_p", (self.n_states, self.n_params), t, y, params, ylag)

    def jac_ylag(self, t, y, params, ylag):
        """df/d y(t - tau_k): shape (n_delays, n_states, n_states) (models with delays only)."""
        if not self.model.delays:
            raise ModelDefinitionError(f"model {self.model.name!r} has no delays")
        n = self.n_states
        return self._call("model_jac_ylag", (self.model.n_delays, n, n), t, y, params, ylag)


_COMPILED: dict[str, CompiledModel] = {}
_COMPILE_LOCK = threading.Lock()


def _compile(m: Model) -> CompiledModel:
    from odeinfer.model.cache import build_module
    from odeinfer.model.codegen import model_source

    with _COMPILE_LOCK:
        hit = _COMPILED.get(m.fingerprint)
        if hit is None and m.delays:
            from odeinfer.model.codegen_dde import dde_model_source
            from odeinfer.solve.kernels import DDE_KERNEL_FILES

            module = build_module(dde_model_source(m), title=f"delay model {m.name}",
                                  kernel_files=DDE_KERNEL_FILES)
            hit = _COMPILED[m.fingerprint] = CompiledModel(m, module)
        elif hit is None:
            module = build_module(model_source(m.derivatives), title=f"model {m.name}")
            hit = _COMPILED[m.fingerprint] = CompiledModel(m, module)
        elif hit.model is not m:
            hit = CompiledModel(m, hit.module)
        return hit
