"""What is measured: observables ``h(t, x, theta)`` and their noise models.

A model's states are often not what the instrument reads: data are ratios, scaled and offset
signals, sums of species. :meth:`odeinfer.Model.observe` attaches named observables to a model,
each with a noise model (:class:`Normal` or :class:`Laplace`, on the ``"lin"``, ``"log"`` or
``"log10"`` scale) whose standard deviation is a number, a parameter or an expression of
parameters, states, ``t`` and the observable's own value (as PEtab's ``noiseFormula`` allows).
Observables and noise expressions are sympy expressions (traced from a Python function or parsed
from text without ``eval``), so their derivatives are exact.

Observable-only parameters (scales, offsets, noise sds) are declared with ``params=`` and are
kept apart from the right-hand side's parameters: the ODE kernels do not change.

The negative log-likelihood of one measurement ``y`` with prediction ``h`` and sd ``sigma``
follows PEtab's definition (all constants kept), with ``z = y, h`` on the linear scale,
``log y, log h`` on the log scale and ``log10 y, log10 h`` on the log10 scale:

* normal: ``0.5 log(2 pi sigma^2) + 0.5 ((z_y - z_h) / sigma)^2 + J``
* Laplace: ``log(2 sigma) + |z_y - z_h| / sigma + J``

with the change-of-variables term ``J = 0`` (lin), ``log y`` (log), ``log(y log 10)`` (log10).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import sympy as sp

from odeinfer.errors import ModelDefinitionError

__all__ = ["Noise", "Normal", "Laplace", "Observable", "build_observables", "SCALES"]

SCALES = ("lin", "log", "log10")


@dataclass(frozen=True)
class Noise:
    """A measurement noise model (abstract: use :class:`Normal` or :class:`Laplace`).

    Parameters
    ----------
    sigma : float or str
        The standard deviation (Normal) or scale (Laplace) on the noise scale: a positive
        number, a parameter name, or an expression of parameters, states, ``t`` and the
        observable's own name (its predicted value), e.g. ``"sd_abs + sd_rel * pSTAT5A_rel"``.
    scale : {"lin", "log", "log10"}, default "lin"
        The scale on which the noise is additive: ``"log"`` means ``log y = log h + e``
        (multiplicative noise, positive data and predictions).
    """

    sigma: float | str = 1.0
    scale: str = "lin"

    distribution = "abstract"

    def __post_init__(self):
        if type(self) is Noise:
            raise ModelDefinitionError("noise: Noise is abstract; use oi.Normal(sigma=...) or oi.Laplace(sigma=...)")
        if self.scale not in SCALES:
            raise ModelDefinitionError(
                f"noise scale: expected one of {list(SCALES)}, got {self.scale!r}; e.g. oi.Normal(sigma=0.1, "
                "scale='log10')")
        s = self.sigma
        if isinstance(s, bool) or not isinstance(s, (int, float, str)):
            raise ModelDefinitionError(
                f"noise sigma: expected a positive number, a parameter name or an expression string, got "
                f"{type(s).__name__}; e.g. oi.Normal(sigma=0.1) or oi.Normal(sigma='sd_x')")
        if not isinstance(s, str):
            if not (math.isfinite(float(s)) and float(s) > 0):
                raise ModelDefinitionError(f"noise sigma: expected a positive finite number, got {s!r}")
            object.__setattr__(self, "sigma", float(s))
        elif not s.strip():
            raise ModelDefinitionError("noise sigma: got an empty string; give a number, a parameter name or "
                                       "an expression")

    def as_dict(self) -> dict:
        return {"distribution": self.distribution, "sigma": self.sigma, "scale": self.scale}


@dataclass(frozen=True)
class Normal(Noise):
    """Gaussian noise on the ``scale`` given (see :class:`Noise`)."""

    distribution = "normal"


@dataclass(frozen=True)
class Laplace(Noise):
    """Laplace (double-exponential) noise on the ``scale`` given; ``sigma`` is its scale ``b``
    (variance ``2 b^2``), as in PEtab."""

    distribution = "laplace"


@dataclass(frozen=True, eq=False)
class Observable:
    """One named observable: ``expr`` (sympy, in the model's state, parameter and observable
    parameter symbols and ``t``), its noise model and the sympy expression of its sigma (in the
    same symbols and :attr:`symbol`, the observable's own value)."""

    name: str
    expr: sp.Expr
    noise: Noise
    sigma_expr: sp.Expr

    @property
    def symbol(self):
        return sp.Symbol(self.name, real=True)

    @property
    def text(self) -> str:
        from odeinfer.model.equations import format_expr

        return format_expr(self.expr)


def _check_names(arg, names):
    from odeinfer.model.trace import validate_names

    return validate_names(arg, names)


def _expression(value, where, names, model, obs_params):
    """sympy expression of an observable given as text, a number or a function ``h(t, y, p)``."""
    from odeinfer.model.equations import parse_expression
    from odeinfer.model.trace import trace_function

    if isinstance(value, str):
        return parse_expression(value, names, where)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return sp.Float(float(value))
    if isinstance(value, Callable):
        n = model.n_states
        expr = trace_function(lambda t, y, p: [value(t, y, p)] + [0] * (n - 1), model.states,
                              model.params + obs_params)[0]
        unknown = expr.free_symbols - set(names.values()) - {sp.Symbol("t", real=True)}
        if unknown:
            raise ModelDefinitionError(f"{where}: uses {sorted(map(str, unknown))}, which are not names of the model")
        return expr
    raise ModelDefinitionError(
        f"{where}: expected an expression string such as '100*pApB/(pApB + pApA)' or a function "
        f"h(t, y, p), got {type(value).__name__}")


def build_observables(model, observables, noise, params):
    """``(observables, obs_params)`` of :meth:`Model.observe` (validated; see there)."""
    from odeinfer.model.core import not_finite
    from odeinfer.model.trace import symbols_for

    if not isinstance(observables, Mapping) or not observables:
        raise ModelDefinitionError(
            f"observables: expected a non-empty dict {{name: expression}}, got {type(observables).__name__}; e.g. "
            "{'ratio': '100*pApB/(pApB + pApA)'}")
    obs_names = _check_names("observables", list(observables))
    obs_params = _check_names("params", params or ())
    taken = {**{s: "a state" for s in model.states}, **{p: "a parameter" for p in model.params}}
    for n in obs_params:
        if n in taken:
            raise ModelDefinitionError(
                f"params: {n!r} is already {taken[n]} of model {model.name!r}; observable parameters need new "
                "names (the model's parameters can be used in observables without declaring them)")
    for n in obs_names:
        if n in taken or n in obs_params:
            raise ModelDefinitionError(
                f"observables: the name {n!r} is already {taken.get(n, 'an observable parameter')}; give the "
                "observable another name")
    noise = {} if noise is None else noise
    if not isinstance(noise, (Mapping, Noise)):
        raise ModelDefinitionError(
            f"noise: expected an oi.Normal/oi.Laplace for every observable or a dict {{observable: noise}}, got "
            f"{type(noise).__name__}")
    if isinstance(noise, Mapping):
        unknown = [k for k in noise if k not in obs_names]
        if unknown:
            raise ModelDefinitionError(f"noise: {unknown} are not observables {list(obs_names)}")
        missing = [k for k in obs_names if k not in noise]
        if missing:
            raise ModelDefinitionError(
                f"noise: no noise model for the observables {missing}; give one per observable, e.g. "
                f"noise={{{missing[0]!r}: oi.Normal(sigma='sd_{missing[0]}')}} (and params=['sd_{missing[0]}'])")
        for k, v in noise.items():
            if not isinstance(v, Noise):
                raise ModelDefinitionError(
                    f"noise[{k!r}]: expected oi.Normal(...) or oi.Laplace(...), got {type(v).__name__}")
    names = dict(zip(model.states, symbols_for(model.states)))
    names.update(zip(model.params + obs_params, symbols_for(model.params + obs_params)))
    out = []
    for n in obs_names:
        where = f"observables[{n!r}]"
        expr = _expression(observables[n], where, names, model, obs_params)
        nz = noise if isinstance(noise, Noise) else noise[n]
        own = sp.Symbol(n, real=True)
        sigma = (sp.Float(nz.sigma) if not isinstance(nz.sigma, str)
                 else _expression(nz.sigma, f"noise[{n!r}].sigma", {**names, n: own}, model, obs_params))
        if sigma.is_number and not float(sigma) > 0:
            raise ModelDefinitionError(f"noise[{n!r}].sigma: {nz.sigma!r} is not positive; the sd must be > 0")
        if not_finite(sigma) or not_finite(expr):
            raise ModelDefinitionError(f"{where}: the expression is not finite; remove the division by zero")
        out.append(Observable(n, expr, nz, sigma))
    used = set().union(*(o.expr.free_symbols | o.sigma_expr.free_symbols for o in out))
    unused = [p for p, s in zip(obs_params, symbols_for(obs_params)) if s not in used]
    if unused:
        raise ModelDefinitionError(
            f"params: {unused} are declared as observable parameters but no observable or noise sd uses them; "
            "remove them from params=[...]")
    return tuple(out), obs_params
